#!/usr/bin/env bash
# Every page's screenshot at 1280 x 720 and 1920 x 1080, drawn by the app's own headless render
# (--render), into docs/screenshots/WxH/. The Monitor's come from a real 4-rank CPU run of
# docs/sessions/cpu-gpt-dp2-pp2.shardscope, trained here first (a minute or two).
# Usage: scripts/screenshots.sh [BUILD_DIR]   (default build/release; build/dev works too)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
app=$build/app/shardscope
engine=$build/engine/tools/shardscope-engine
for exe in "$app" "$engine"; do
  [[ -x $exe ]] || { echo "screenshots: no $exe: build first (cmake --build --preset release)" >&2; exit 2; }
done

s70=docs/sessions/llama3-70b-64xh100.shardscope
s405=docs/sessions/llama3-405b.shardscope
s8=docs/sessions/llama3-8b-fsdp-8xh100.shardscope
cpu=docs/sessions/cpu-gpt-dp2-pp2.shardscope

run=$(mktemp -d /tmp/shardscope-shots.XXXXXX)
trap 'rm -rf "$run"' EXIT
"$engine" train --dp 2 --pp 2 --micro-batch 2 --global-batch 16 --zero 1 --steps 300 \
  --eval-every 50 --checkpoint-every 100 --ranks 4 --out "$run/run" >/dev/null

# name | page/view | session ("" for the built-in default) | extra flags
shots=(
  "memory|memory/holdings|$s70|"
  "memory-share|memory/share|$s70|"
  "memory-dark|memory|$s8|--theme dark"
  "explorer|explorer|$s405|"
  "explorer-cluster|explorer/cluster|$s405|"
  "explorer-layer|explorer/layer|$s70|"
  "explorer-search|explorer/search|$s70|"
  "pipeline|pipeline/at-45|$s70|"
  "collectives|collectives/step-2||"
  "monitor|monitor/training-at-60|$cpu|--run $run/run"
  "monitor-memory|monitor/memory|$cpu|--run $run/run"
  "monitor-pipeline|monitor/pipeline|$cpu|--run $run/run"
  "monitor-comparison|monitor/comparison|$cpu|--run $run/run"
)
for size in 1280x720 1920x1080; do
  mkdir -p "docs/screenshots/$size"
  for shot in "${shots[@]}"; do
    IFS='|' read -r name page session extra <<<"$shot"
    args=(--render "$page" --size "$size" -o "docs/screenshots/$size/$name.png")
    [[ -n $session ]] && args+=(--session "$session")
    # shellcheck disable=SC2206 # the extra flags are words by design
    [[ -n $extra ]] && args+=($extra)
    "$app" "${args[@]}" 2>/dev/null
    echo "docs/screenshots/$size/$name.png"
  done
done
