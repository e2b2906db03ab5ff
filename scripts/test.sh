#!/usr/bin/env bash
# Install what is missing, build with warnings as errors (dev preset), and run the whole suite.
# GPU tests skip with a message where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset dev
cmake --build --preset dev
export QT_QPA_PLATFORM=offscreen
ctest --preset dev --output-on-failure --timeout 600 "$@"
