#!/usr/bin/env bash
# Long fuzzing runs (docs/fuzzing.md). Builds the fuzz preset (clang, libFuzzer, ASan, UBSan) and
# runs each fuzz target, or those named, for --runs executions in all (default 1,000,000) split
# over --jobs processes (default: one per core) that share the corpus the target found before.
# Prints executions, corpus and crashes per target; exits 1 when any target crashed (the input
# is kept as build/fuzz/tests/fuzz/<target>-crash-*), 2 on bad arguments.
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: scripts/fuzz.sh [--runs N] [--jobs J] [TARGET...]  (targets: hf_import session run_config event_line data_file checkpoint_manifest)"
all=(hf_import session run_config event_line data_file checkpoint_manifest)
runs=1000000
jobs=$(nproc)
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=${2:-}; shift 2 || true ;;
    --jobs) jobs=${2:-}; shift 2 || true ;;
    -h|--help) echo "$usage"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1; $usage" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if ! [[ "$runs" =~ ^[1-9][0-9]{0,9}$ ]] || ! [[ "$jobs" =~ ^[1-9][0-9]{0,2}$ ]]; then
  echo "fuzz.sh: --runs and --jobs take positive whole numbers (--runs up to 10 digits); $usage" >&2
  exit 2
fi
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
for t in "${targets[@]}"; do
  if [[ ! " ${all[*]} " == *" $t "* ]]; then
    echo "fuzz.sh: no fuzz target '$t'; $usage" >&2
    exit 2
  fi
done

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz
dir=$PWD/build/fuzz/tests/fuzz
failed=0
printf '%-22s %12s %8s %9s %8s\n' target executions seconds corpus crashes
for t in "${targets[@]}"; do
  read -r -a options < <(tr ";" " " < "$dir/$t.options") || true # no newline at its end
  logs=$dir/logs/$t
  rm -rf "$logs" && mkdir -p "$logs" "$dir/found/$t"
  seeds=$PWD/tests/fuzz/corpus/$t
  per_job=$(( (runs + jobs - 1) / jobs ))
  start=$(date +%s)
  (
    cd "$logs"
    if [ "$jobs" -eq 1 ]; then
      "$dir/fuzz_$t" -runs="$per_job" "${options[@]}" -print_final_stats=1 \
        -artifact_prefix="$dir/$t-" "$dir/found/$t" "$seeds" \
        > fuzz-0.log 2>&1 || true
    else
      "$dir/fuzz_$t" -runs="$per_job" "${options[@]}" -print_final_stats=1 -jobs="$jobs" \
        -workers="$jobs" -artifact_prefix="$dir/$t-" "$dir/found/$t" \
        "$seeds" > jobs.log 2>&1 || true
    fi
  )
  seconds=$(( $(date +%s) - start ))
  executed=$(cat "$logs"/fuzz-*.log | awk '/stat::number_of_executed_units/ {n += $2} END {print n + 0}')
  crashes=$(cat "$logs"/fuzz-*.log | grep -c -E '^==[0-9]+==ERROR|^SUMMARY: |deadly signal|fuzz: property broken' || true)
  corpus=$(find "$dir/found/$t" -type f | wc -l)
  printf '%-22s %12s %8s %9s %8s\n' "$t" "$executed" "$seconds" "$corpus" "$crashes"
  [ "$crashes" -eq 0 ] || failed=1
done
[ "$failed" -eq 0 ] || echo "fuzz.sh: a target crashed: see build/fuzz/tests/fuzz/logs and the *-crash-* inputs" >&2
exit "$failed"
