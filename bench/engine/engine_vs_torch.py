#!/usr/bin/env python3
"""Training throughput of shardscope-engine against PyTorch, same model, batch and threads.

Usage: bench/engine/engine_vs_torch.py ENGINE [--config bench/engine/reference.json]
                                              [--threads N] [--steps N] [--precision bf16]

Runs the engine on the config (synthetic data, fp32, AdamW), then the same GPT-2 in PyTorch
(Debian's python3-torch on the CPU, fp32, torch.optim.AdamW, the same tanh GELU and causal
attention written out as nanoGPT's fallback path does), and prints tokens/s side by side. The
first two steps of each are warm-up and not counted. With --precision bf16 the engine trains in
its bf16 policy and PyTorch under torch.autocast("cpu", dtype=torch.bfloat16) (fp32 weights,
bf16 GEMMs and activations where autocast casts them: PyTorch's best bf16 path on a CPU).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def engine_run(engine, config, threads, steps, precision="fp32", extra=()):
    with tempfile.TemporaryDirectory() as run:
        cmd = [engine, "train", "--config", config, "--out", os.path.join(run, "r"),
               "--threads", str(threads), "--steps", str(steps), "--precision", precision,
               "--quiet", *extra]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times = []
        with open(os.path.join(run, "r", "telemetry", "rank-0.jsonl")) as f:
            for line in f:
                e = json.loads(line)
                if e["type"] == "step":
                    times.append((e["step_time"], e["tokens"], e["memory_peak"]["total"]))
        return times


def gpt_model(cfg, attention="math", device="cpu"):
    """The engine's GPT-2 in PyTorch: tanh GELU, tied head, causal attention written out as
    nanoGPT's fallback path ("math") or through scaled_dot_product_attention ("sdpa", PyTorch 2).
    Shared by the CPU and GPU benchmarks."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    m = cfg["model"]
    C, NH, T, V, L = m["hidden"], m["heads"], m["seq_len"], m["vocab"], m["layers"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fc_proj = nn.Linear(C, m["ffn_hidden"]), nn.Linear(m["ffn_hidden"], C)
            # not a buffer: gloo cannot broadcast bool
            self.mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=device))

        def forward(self, x):
            B = x.shape[0]
            q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
            h = lambda t: t.view(B, T, NH, C // NH).transpose(1, 2)
            if attention == "sdpa":
                y = F.scaled_dot_product_attention(h(q), h(k), h(v), is_causal=True)
            else:
                att = (h(q) @ h(k).transpose(-2, -1)) * (1.0 / (C // NH) ** 0.5)
                y = att.masked_fill(~self.mask, float("-inf")).softmax(dim=-1) @ h(v)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C)
            self.positions = torch.arange(T, device=device)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(self.positions)
            for b in self.blocks:
                x = b(x)
            logits = self.ln_f(x) @ self.wte.weight.T
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    return GPT().to(device)


def torch_run(cfg, threads, steps, ddp=False, precision="fp32"):
    import torch
    import torch.nn as nn

    torch.set_num_threads(threads)
    p = cfg["parallel"]
    T, V = cfg["model"]["seq_len"], cfg["model"]["vocab"]

    torch.manual_seed(0)
    model = gpt_model(cfg)
    if ddp:  # inside an initialised process group (dp_vs_ddp.py)
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    B = p["micro_batch"]
    times = []
    for _ in range(steps):
        idx = torch.randint(0, V, (B, T))
        tgt = torch.randint(0, V, (B, T))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append((time.perf_counter() - t0, B * T))
    return times, torch.__version__


def torch_in_subprocess(a, env):
    # torch.set_num_threads limits PyTorch's OpenMP pool only; OpenBLAS (its BLAS here) keeps
    # one thread per core unless told, so both pools get the thread count explicitly.
    env = {**env, "OPENBLAS_NUM_THREADS": str(a.threads), "OMP_NUM_THREADS": str(a.threads)}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-only", a.engine,
                          "--config", a.config, "--threads", str(a.threads), "--steps",
                          str(a.steps), "--precision", a.precision], check=True,
                         capture_output=True, text=True,
                         env={**os.environ, **env})
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r["times"], r["version"]


def rate(times):
    kept = times[2:]
    return statistics.median(tok / s for s, tok, *_ in kept)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("engine")
    ap.add_argument("--config", default=os.path.join(here, "reference.json"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    cfg = json.load(open(a.config))
    if a.torch_only:  # the child process of torch_in_subprocess
        times, version = torch_run(cfg, a.threads, a.steps, precision=a.precision)
        print(json.dumps({"times": times, "version": version}))
        return 0
    try:
        import torch  # noqa: F401
    except ImportError:
        print("PyTorch is not installed: install python3-torch to compare")
        return 1
    eng = engine_run(a.engine, a.config, a.threads, a.steps, a.precision)
    # PyTorch as users run it, and with the thread-pool settings the engine gives itself.
    tt, version = torch_in_subprocess(a, {})
    tuned, _ = torch_in_subprocess(a, {"OMP_WAIT_POLICY": "passive",
                                       "OPENBLAS_THREAD_TIMEOUT": "4"})
    m = cfg["model"]
    print(f"model: {m['layers']} layers, {m['hidden']} hidden, {m['heads']} heads, "
          f"seq {m['seq_len']}, vocab {m['vocab']}, batch {cfg['parallel']['micro_batch']}, "
          f"{a.threads} threads, {a.precision}, AdamW; median of steps 3-{a.steps}")
    e, t = rate(eng), rate(tt)
    print(f"{'shardscope-engine':24} {e:10.0f} tokens/s   "
          f"{statistics.median(s for s, *_ in eng[2:]) * 1e3:8.1f} ms/step   "
          f"peak memory {eng[-1][2] / 2**20:.1f} MiB")
    print(f"{'PyTorch ' + version:24} {t:10.0f} tokens/s   "
          f"{statistics.median(s for s, _ in tt[2:]) * 1e3:8.1f} ms/step")
    tu = rate(tuned)
    print(f"{'PyTorch, same env':24} {tu:10.0f} tokens/s   "
          f"{statistics.median(s for s, _ in tuned[2:]) * 1e3:8.1f} ms/step   "
          f"(OMP_WAIT_POLICY=passive OPENBLAS_THREAD_TIMEOUT=4)")
    print(f"engine / best PyTorch: {e / max(t, tu):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
