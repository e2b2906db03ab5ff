#!/usr/bin/env python3
"""Data-parallel training throughput: shardscope-engine over MPI against PyTorch DDP (gloo).

Usage: bench/engine/dp_vs_ddp.py ENGINE [--config bench/engine/reference.json]
                                        [--global-batch 16] [--steps 8]

For 1 and 2 ranks on this machine, with the same model, global batch and cores shared out
between the ranks (threads = cores / ranks, each library told explicitly), it trains the
engine (`--dp R --ranks R`) and the same GPT-2 in PyTorch wrapped in DistributedDataParallel
with the gloo backend (what PyTorch offers for CPUs), and prints tokens/s side by side, with the
engine's measured wait for gradient all-reduces after the backward. The first two steps are
warm-up and not counted.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from engine_vs_torch import torch_run  # noqa: E402  (the same PyTorch model)


def engine_run(engine, config, ranks, global_batch, steps):
    threads = max(1, os.cpu_count() // ranks)
    with tempfile.TemporaryDirectory() as run:
        out = os.path.join(run, "r")
        cmd = [engine, "train", "--config", config, "--out", out, "--dp", str(ranks),
               "--global-batch", str(global_batch), "--steps", str(steps), "--threads",
               str(threads), "--quiet"]
        if ranks > 1:
            cmd += ["--ranks", str(ranks)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        steps_seen = []
        with open(os.path.join(out, "telemetry", "rank-0.jsonl")) as f:
            for line in f:
                e = json.loads(line)
                if e["type"] == "step":
                    steps_seen.append(e)
    kept = steps_seen[2:]
    return (statistics.median(e["tokens_per_s"] for e in kept),
            statistics.median(e.get("dp_exposed_communication", 0.0) for e in kept),
            statistics.median(e["step_time"] for e in kept),
            statistics.median(e.get("dp_hidden_fraction", 0.0) for e in kept))


def ddp_worker(rank, world, cfg, global_batch, steps, port, queue):
    import torch
    import torch.distributed as dist
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    cfg = json.loads(json.dumps(cfg))
    cfg["parallel"]["micro_batch"] = global_batch // world
    times, _ = torch_run(cfg, max(1, os.cpu_count() // world), steps, ddp=True)
    if rank == 0:
        queue.put(times)
    dist.destroy_process_group()


def ddp_run(cfg, ranks, global_batch, steps):
    import torch.multiprocessing as mp
    threads = str(max(1, os.cpu_count() // ranks))
    os.environ.update({"OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads})
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    procs = [ctx.Process(target=ddp_worker, args=(r, ranks, cfg, global_batch, steps, port, queue))
             for r in range(ranks)]
    for p in procs:
        p.start()
    times = queue.get()
    for p in procs:
        p.join()
    kept = times[2:]
    # Each rank processes global_batch / ranks sequences; the job processes the global batch.
    return statistics.median(global_batch * cfg["model"]["seq_len"] / s for s, _ in kept)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("engine")
    ap.add_argument("--config", default=os.path.join(HERE, "reference.json"))
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    cfg = json.load(open(a.config))
    m = cfg["model"]
    print(f"model: {m['layers']} layers, {m['hidden']} hidden, seq {m['seq_len']}, global batch "
          f"{a.global_batch}, {os.cpu_count()} cores shared by the ranks, fp32, AdamW")
    print(f"{'ranks':>5} {'engine tok/s':>13} {'exposed all-reduce':>19} {'hidden':>7} "
          f"{'DDP gloo tok/s':>15} {'engine / DDP':>13}")
    for ranks in (1, 2):
        e, exposed, step, hidden = engine_run(a.engine, a.config, ranks, a.global_batch, a.steps)
        d = ddp_run(cfg, ranks, a.global_batch, a.steps)
        shown = f"{hidden * 100:.0f}%" if ranks > 1 else "-"
        print(f"{ranks:>5} {e:>13.0f} {exposed * 1e3:>13.1f} ms of {step * 1e3:.0f} "
              f"{shown:>7} {d:>10.0f} {e / d:>13.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
