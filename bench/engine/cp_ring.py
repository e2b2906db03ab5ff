#!/usr/bin/env python3
"""Ring attention's exposed communication against the planner's cp estimate, on this machine.

Usage: bench/engine/cp_ring.py ENGINE CLI [--steps 8]

Trains a Llama-family model (Llama 3.1 8B's architecture from tests/data/hf, resized: 4 layers of
width 256, 8 query heads over 2 key and value heads) with context parallelism cp 2 and cp 4 at
sequence lengths 1,024 and 4,096 (one sequence a microbatch, four a step, the cores shared out
between the ranks), then reads `shardscope-cli report --json` of each run: the measured exposed
cp communication per step (the union of the ranks' waits on the ring, median over steps 2.. and
then over ranks), the time the ring's transfers were in flight, and the planner's prediction of
both from the run's own start event (its cluster is this machine: MPI shared memory at half the
measured copy bandwidth). Prints one row per run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HF = os.path.join(ROOT, "tests", "data", "hf", "llama-3.1-8b.json")


def run(engine, cli, cp, seq, steps):
    threads = max(1, (os.cpu_count() or 2) // cp)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r")
        subprocess.run([engine, "train", "--hf-config", HF, "--layers", "4", "--hidden", "256",
                        "--heads", "8", "--kv-heads", "2", "--ffn-hidden", "768", "--vocab",
                        "4096", "--seq-len", str(seq), "--micro-batch", "1", "--global-batch",
                        "4", "--steps", str(steps), "--warmup-steps", "1", "--cp", str(cp),
                        "--ranks", str(cp), "--threads", str(threads), "--out", out, "--quiet",
                        "--checkpoint-every", "0"], check=True, stdout=subprocess.DEVNULL)
        report = json.loads(subprocess.run([cli, "report", out, "--json"], check=True,
                                           capture_output=True, text=True).stdout)
        start = None
        with open(os.path.join(out, "telemetry", "rank-0.jsonl")) as f:
            for line in f:
                e = json.loads(line)
                if e.get("event") == "start":
                    start = e
                    break
    rows = {r["key"]: r for r in report["comparison"]}
    exposed = rows["exposed.cp"]
    flight = [c["busy"] for c in report["communication"] if c["axis"] == "cp"]
    step = rows["step_time"]["measured"]
    return {
        "cp": cp, "seq": seq, "step": step,
        "measured_exposed": exposed["measured"], "predicted_exposed": exposed["predicted"],
        "measured_flight": statistics.median(flight) if flight else float("nan"),
        "predicted_flight": start["prediction"]["communication"]["cp"],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("engine")
    ap.add_argument("cli")
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    print("| cp | seq | step | cp in flight: measured / planner | cp exposed: measured / planner "
          "| exposed error |")
    print("|---|---|---|---|---|---|")
    for seq in (1024, 4096):
        for cp in (2, 4):
            r = run(a.engine, a.cli, cp, seq, a.steps)
            ms = lambda s: f"{s * 1e3:.2f} ms"
            err = (r["measured_exposed"] / r["predicted_exposed"] - 1) * 100
            print(f"| {cp} | {seq} | {ms(r['step'])} | {ms(r['measured_flight'])} / "
                  f"{ms(r['predicted_flight'])} | {ms(r['measured_exposed'])} / "
                  f"{ms(r['predicted_exposed'])} | {err:+.0f} % |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
