#!/usr/bin/env python3
"""Training throughput of two shardscope-engine builds, side by side in one run.

Usage: bench/engine/engine_a_b.py BEFORE AFTER [--config bench/engine/reference.json]
                                               [--threads N] [--steps N] [--rounds N]
                                               [--engine-args "--dp 2 --zero 1 --ranks 2"]

Runs the two engines in turns (BEFORE, AFTER, BEFORE, ...) so that the machine's load falls on
both alike, each on the same config, and prints the median tokens/s of each run (steps after the
first two) and the median over the rounds. To measure a change: build the commit before it in a
git worktree (`git worktree add /tmp/before COMMIT`, then its `cmake --preset dev` and
`cmake --build --preset dev --target shardscope-engine`).
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine_vs_torch  # noqa: E402


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--config", default=os.path.join(here, "reference.json"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--engine-args", default="",
                   help="more flags for both engines, a layout for example (--threads is per rank)")
    a = p.parse_args()
    if a.steps < 3 or a.rounds < 1 or a.threads < 1:
        sys.exit("--steps must be at least 3, --rounds and --threads at least 1")
    runs = {"before": [], "after": []}
    for r in range(a.rounds):
        for name, engine in (("before", a.before), ("after", a.after)):
            times = engine_vs_torch.engine_run(engine, a.config, a.threads, a.steps,
                                               extra=a.engine_args.split())
            tps = statistics.median(tokens / t for (t, tokens, _) in times[2:])
            runs[name].append(tps)
            print(f"round {r + 1} {name:6} {tps:8.0f} tokens/s", flush=True)
    for name, v in runs.items():
        print(f"{name:6} median {statistics.median(v):8.0f} tokens/s "
              f"(runs: {', '.join(f'{x:.0f}' for x in v)})")


if __name__ == "__main__":
    main()
