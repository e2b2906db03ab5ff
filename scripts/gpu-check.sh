#!/usr/bin/env bash
# The GPU checks in one go, for a GPU machine that has CUDA and PyTorch but not Debian's libraries
# (the device tool's H100/H200): the gpu test programs, a short training run of GPT-2 124M, and
# the side-by-side benchmark against PyTorch. Build the bundle first where the engine was built:
#
#   scripts/device-bundle.sh            # here: leaves .device-bundle.tar.xz
#   scripts/gpu-check.sh [LOG_DIR]      # on the GPU machine, from the repository root
#
# Logs go to LOG_DIR (default $OUT, else /tmp/gpu-check): tests.log, train.log, bench.log, and
# sanitizer.log for the first failing test program, run again under compute-sanitizer; with
# PROFILE=1 also profile.csv, every kernel's time (Nsight Compute); BENCH=0 skips the benchmark,
# BENCH_TORCH=compile runs only torch.compile beside the engine (none: the engine alone).
set -u
cd "$(dirname "$0")/.."
log=${1:-${OUT:-/tmp/gpu-check}}
mkdir -p "$log"
[ -d .device-bundle ] || tar -xJf .device-bundle.tar.xz || exit 2
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$log/gpu.txt"

# The bundle's libraries and plugin for everything below (run.sh sets its own).
here=$PWD/.device-bundle
export LD_LIBRARY_PATH="$here/lib:$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null):${LD_LIBRARY_PATH:-}"
export SHARDSCOPE_CUDA_BACKEND="$here/lib/shardscope/libshardscope-cuda.so"

TEST_TIMEOUT=${TEST_TIMEOUT:-120} .device-bundle/run.sh >"$log/tests.log" 2>&1
tests_rc=$?
grep -E "^===|FAILED|PASSED|SKIPPED" "$log/tests.log" | head -60
if [ $tests_rc -ne 0 ] && command -v compute-sanitizer >/dev/null; then
  first=$(grep -m1 -oE "^=== test_cuda_[a-z_]+ failed" "$log/tests.log" | awk '{print $2}')
  if [ -n "$first" ]; then
    timeout 90 compute-sanitizer --tool memcheck --print-limit 20 "$here/tests/$first" --gtest_brief=1 \
      >"$log/sanitizer.log" 2>&1
    tail -40 "$log/sanitizer.log"
  fi
fi

# The engine alone, so its own errors are seen even if the benchmark cannot start.
rm -rf /tmp/gpu-train
timeout "${TRAIN_TIMEOUT:-90}" "$here/bin/shardscope-engine" train --config bench/engine/gpt2_124m.json \
  --out /tmp/gpu-train --steps 8 >"$log/train.log" 2>&1
echo "=== train exit $?"
tail -15 "$log/train.log"

# Where the step's time goes: every kernel of three steps of a two-layer cut of the same model,
# timed one by one by Nsight Compute (kernel names and durations in profile.csv).
if [ -n "${PROFILE:-}" ] && command -v ncu >/dev/null; then
  python3 - <<'PY'
import json
c = json.load(open("bench/engine/gpt2_124m.json"))
c["model"]["layers"] = 2
json.dump(c, open("/tmp/gpu-profile.json", "w"))
PY
  rm -rf /tmp/gpu-profile
  timeout "${PROFILE_TIMEOUT:-120}" ncu --metrics gpu__time_duration.sum --csv --cache-control none \
    --clock-control none --log-file "$log/profile.csv" "$here/bin/shardscope-engine" train \
    --config /tmp/gpu-profile.json --out /tmp/gpu-profile --steps 3 --warmup-steps 1 --quiet >"$log/profile.log" 2>&1
  echo "=== profile exit $?"
  tail -3 "$log/profile.log"
fi

[ "${BENCH:-1}" = 0 ] && exit 0
PYTHONUNBUFFERED=1 timeout "${BENCH_TIMEOUT:-200}" python3 bench/engine/gpu_vs_torch.py \
  "$here/bin/shardscope-engine" --steps "${BENCH_STEPS:-15}" --torch "${BENCH_TORCH:-all}" \
  >"$log/bench.log" 2>&1
echo "=== bench exit $?"
tail -15 "$log/bench.log"
