#!/usr/bin/env bash
# Install what is missing, build (release preset), and run the main job. Extra arguments go to
# shardscope-cli; without any it prints the default plan (Llama 3 70B on 8 nodes x 8 H100).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release
if [ $# -eq 0 ]; then
  set -- plan
fi
exec build/release/engine/tools/shardscope-cli "$@"
