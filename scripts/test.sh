#!/usr/bin/env bash
# Install what is missing, build with warnings as errors (dev preset), and run the whole suite,
# then the fuzz targets (fuzz preset, label fuzz); with arguments, only `ctest --preset dev ARGS`.
# GPU tests skip with a message where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset dev
cmake --build --preset dev
export QT_QPA_PLATFORM=offscreen
ctest --preset dev --output-on-failure --timeout 600 "$@"
# The whole suite (no arguments) goes on with the fuzz targets under clang, libFuzzer, ASan and
# UBSan, each for a bounded time (SHARDSCOPE_FUZZ_SECONDS, default 20); scripts/fuzz.sh runs
# them longer.
if [ $# -eq 0 ]; then
  cmake --preset fuzz -DSHARDSCOPE_FUZZ_SECONDS="${SHARDSCOPE_FUZZ_SECONDS:-20}"
  cmake --build --preset fuzz
  ctest --preset fuzz -j2
fi
