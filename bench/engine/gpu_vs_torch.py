#!/usr/bin/env python3
"""GPT-2 124M training on one GPU: shardscope-engine against PyTorch, side by side in one run.

Usage: bench/engine/gpu_vs_torch.py ENGINE [--config bench/engine/gpt2_124m.json] [--steps N]
                                           [--peak-tflops 989]

The engine trains the config on the GPU (--device cuda: bf16 weights and activations, fp32
gradients and master weights, AdamW, T = 1024, synthetic tokens). PyTorch trains the same GPT-2
(fp32 weights under torch.autocast bf16, the fused AdamW, the same batch) three ways: eager with
attention written out (nanoGPT's slow path), eager with scaled_dot_product_attention (its
flash path), and torch.compile of the latter. Each prints the median tokens/s of the steps after
the first three, its MFU against the GPU's dense bf16 peak (--peak-tflops: the H100 SXM's 989 by
default) and against the measured ceiling of a large bf16 GEMM, and its peak GPU memory. MFU
counts the same model FLOPs per token for every row: the engine's own (6N plus causal attention,
read from its step events). Run on the GPU machine, with the engine built there; the published
anchor is llm.c at about 38% MFU on H100s for this model.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine_vs_torch  # noqa: E402  (the same GPT-2 the CPU benchmark trains)

WARMUP = 3


def engine_run(engine, config, steps, peak_tflops):
    with tempfile.TemporaryDirectory() as run:
        cmd = [engine, "train", "--config", config, "--out", os.path.join(run, "r"), "--steps",
               str(steps), "--warmup-steps", "2", "--peak-tflops", str(peak_tflops), "--quiet"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        steps_seen = []
        with open(os.path.join(run, "r", "telemetry", "rank-0.jsonl")) as f:
            for line in f:
                e = json.loads(line)
                if e["type"] == "step":
                    steps_seen.append(e)
    kept = steps_seen[WARMUP:]
    return {
        "tokens_per_s": statistics.median(e["tokens_per_s"] for e in kept),
        "flops_per_token": statistics.median(e["flops_per_s"] / e["tokens_per_s"] for e in kept),
        "peak_bytes": max(e["memory_peak"]["total"] for e in steps_seen),
        "loss": [e["loss"] for e in steps_seen],
    }


def torch_run(cfg, steps, attention, compiled):
    import torch

    torch.manual_seed(0)
    model = engine_vs_torch.gpt_model(cfg, attention, "cuda")
    step_model = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True)
    B, T, V = cfg["parallel"]["micro_batch"], cfg["model"]["seq_len"], cfg["model"]["vocab"]
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        idx = torch.randint(0, V, (B, T), device="cuda")
        tgt = torch.randint(0, V, (B, T), device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()  # the engine reads its loss every step too
        times.append(time.perf_counter() - t0)
    return {"tokens_per_s": statistics.median(B * T / t for t in times[WARMUP:]),
            "peak_bytes": torch.cuda.max_memory_allocated()}


def gemm_ceiling_tflops():
    import torch

    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start, reps = time.perf_counter(), 20
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n ** 3 * reps / (time.perf_counter() - start) / 1e12


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("engine")
    ap.add_argument("--config", default=os.path.join(here, "gpt2_124m.json"))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--torch", choices=("all", "compile", "none"), default="all",
                    help="which PyTorch runs beside the engine (compile: torch.compile only)")
    a = ap.parse_args()
    if a.steps <= WARMUP:
        sys.exit(f"--steps must be more than the {WARMUP} warm-up steps")
    import torch

    if not torch.cuda.is_available():
        sys.exit("PyTorch sees no GPU: run this on the GPU machine")
    cfg = json.load(open(a.config))
    ceiling = gemm_ceiling_tflops()
    rows = [("shardscope-engine", engine_run(a.engine, a.config, a.steps, a.peak_tflops))]
    flops_per_token = rows[0][1]["flops_per_token"]
    print(f"shardscope-engine: {rows[0][1]['tokens_per_s']:,.0f} tokens/s", flush=True)
    for name, attention, compiled in (("PyTorch eager, attention written out", "math", False),
                                      ("PyTorch eager, SDPA", "sdpa", False),
                                      ("PyTorch torch.compile, SDPA", "sdpa", True)):
        if a.torch == "all" or (a.torch == "compile" and compiled):
            rows.append((name, torch_run(cfg, a.steps, attention, compiled)))
    print(f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__}, "
          f"{cfg['model']['name']}, B {cfg['parallel']['micro_batch']}, "
          f"T {cfg['model']['seq_len']}, {a.steps} steps (median after {WARMUP})")
    print(f"dense bf16 peak {a.peak_tflops:.0f} TFLOP/s; measured 8192^3 bf16 GEMM "
          f"{ceiling:.0f} TFLOP/s; model FLOPs per token {flops_per_token / 1e6:.1f} M")
    print("| run | tokens/s | MFU (peak) | MFU (GEMM ceiling) | peak memory |")
    print("|---|---|---|---|---|")
    for name, r in rows:
        flops = r["tokens_per_s"] * flops_per_token / 1e12
        print(f"| {name} | {r['tokens_per_s']:,.0f} | {100 * flops / a.peak_tflops:.1f}% | "
              f"{100 * flops / ceiling:.1f}% | {r['peak_bytes'] / 2**30:.2f} GiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
