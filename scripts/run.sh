#!/usr/bin/env bash
# Install what is missing, build (release preset), and start the app on its built-in default
# session (Llama 3 70B on 8 nodes x 8 H100). Arguments go to the app (a .shardscope session or a
# config.json to open, or --render ...); a first argument that is a shardscope-cli command
# (plan, search, explain, schedule, collective, models, gpus, devices, validate, report) runs the
# command-line planner instead, and `train` or `dump` runs the training engine (shardscope-engine;
# `scripts/run.sh train` trains the embedded default GPT on a synthetic corpus).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release

case "${1:-}" in
  plan|search|explain|schedule|collective|models|gpus|devices|validate|report)
    exec build/release/engine/tools/shardscope-cli "$@" ;;
  train|dump)
    exec build/release/engine/tools/shardscope-engine "$@" ;;
esac

if [ -z "${DISPLAY:-}" ] && [ -z "${WAYLAND_DISPLAY:-}" ] && [ -z "${QT_QPA_PLATFORM:-}" ] \
   && [ $# -eq 0 ]; then
  echo "run.sh: no display found; rendering the Memory page to shardscope-memory.png instead"
  echo "run.sh: (on a desktop, scripts/run.sh opens the window)"
  exec build/release/app/shardscope --render memory -o shardscope-memory.png
fi
exec build/release/app/shardscope "$@"
