#!/usr/bin/python3
"""Measured peak memory per rank beside the planner's prediction for that rank's stage.

Usage: bench/engine/rank_memory.py ENGINE [--config bench/engine/layout_model.json] -- FLAGS...

Runs `ENGINE train --config CONFIG --out TMP -q FLAGS` (FLAGS include --ranks for several
ranks), then prints, for every rank, the bytes by category from its telemetry: `memory_peak`
of the end event against `memory_predicted` of the start event (plan/memory.cpp's
memoryForStage). The default config is the 8-layer model of tests/runtime/test_engine_layouts.cpp.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("engine")
    ap.add_argument("--config", default=os.path.join(HERE, "layout_model.json"))
    ap.add_argument("flags", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    flags = [f for f in a.flags if f != "--"]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run")
        subprocess.run([a.engine, "train", "--config", a.config, "--out", out, "-q"] + flags,
                       check=True, stdout=subprocess.DEVNULL)
        print(f"{'rank':>4} {'category':<12} {'measured':>12} {'planned':>12} {'ratio':>7}")
        for path in sorted(glob.glob(os.path.join(out, "telemetry", "rank-*.jsonl")),
                           key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0])):
            events = [json.loads(line) for line in open(path)]
            start = next(e for e in events if e.get("event") == "start")
            end = next(e for e in events if e.get("event") == "end")
            rank = start["rank"]
            for cat in ("parameters", "gradients", "optimizer", "activations"):
                got, want = end["memory_peak"][cat], start["memory_predicted"][cat]
                ratio = got / want if want else float("nan")
                print(f"{rank:>4} {cat:<12} {got:>12,} {want:>12,.0f} {ratio:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
