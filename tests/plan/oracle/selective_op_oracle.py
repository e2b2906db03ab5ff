#!/usr/bin/env python3
"""Checks the planner's op-level selective recompute (`--recompute selective-op`) against the
op stream of layers written as torchtitan and nanoGPT write them.

torchtitan's policy (torchtitan/parallelisms/parallelize_llama.py, `_custom_policy`) keeps the
output of every op in its save list (aten.mm, the SDPA kernels) except every second aten.mm of a
layer's forward, and reruns everything else in the backward. This script runs the layers of
eager_traffic_oracle.py forward under a TorchDispatchMode, sees every matrix multiply in the
order PyTorch runs it and the fused attention kernel's output, applies that rule, and adds up:

- the bytes a token a layer keeps: the layer's input (the checkpoint's), the kept matmul
  outputs and the attention kernel's output;
- the FLOPs a token a layer reruns: 2 M N K of each dropped matmul.

Then asks `shardscope-cli plan --json` for the same layer, imported from its config.json: the
activations of 4 layers less those of 2 (per layer, per token), and the hardware FLOPs a token
under selective-op less those under none (per layer). Exits 0 when every case is within
TOLERANCE, 1 otherwise, 77 (CTest's skip code) without torch.

PyTorch 1.13 (Debian 12) has no create_selective_checkpoint_contexts, so the policy is applied
to the observed ops here rather than run; what is checked is which tensors the rule keeps and
which matmuls it reruns, on the ops a real layer issues.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    import eager_traffic_oracle as eager
except ImportError as e:  # pragma: no cover
    print(f"SKIP: PyTorch is not installed ({e}); install python3-torch to run this check")
    sys.exit(77)

# Both sides count the same tensors; the planner leaves out nothing here but the attention
# kernel's per-head logsumexp (4 bytes a head a token against kilobytes).
TOLERANCE = 0.005
BATCH = 2
SEQ = 32
# torchtitan's save list names aten.mm; a layer with biases runs addmm, which the list misses.
# The planner counts every projection alike, so the biased GPT case counts addmm as a matmul.
MATMULS = {"mm", "addmm"}


class RecordMatmuls(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.matmuls = []  # (output bytes, FLOPs) in the order they run
        self.muted = False  # eager.AttentionCore mutes the mode it finds in eager.MODE

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket).split(".")[-1]
        if not self.muted and name in MATMULS:
            a, b = (args[1], args[2]) if name == "addmm" else (args[0], args[1])
            flops = 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
            self.matmuls.append((out.numel() * out.element_size(), flops))
        return out


def observed(c):
    """What torchtitan's rule keeps (bytes) and reruns (FLOPs), a token, for one layer."""
    torch.manual_seed(0)
    layer = eager.Layer(c).to(torch.bfloat16)
    d = c["head_dim"]
    inverse = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    freqs = torch.polar(torch.ones(SEQ, d // 2), torch.outer(torch.arange(SEQ).float(), inverse))
    x = torch.randn(BATCH, SEQ, c["hidden"], dtype=torch.bfloat16)
    attention_outputs = []
    core = eager.AttentionCore.apply

    def recorded_core(q, k, v):
        out = core(q, k, v)
        attention_outputs.append(out.numel() * out.element_size())
        return out

    eager.AttentionCore.apply = recorded_core
    mode = eager.MODE = RecordMatmuls()
    try:
        with torch.no_grad(), mode:
            layer(x, freqs, False)
    finally:
        eager.AttentionCore.apply = core
    tokens = BATCH * SEQ
    kept = x.numel() * x.element_size() + sum(attention_outputs)
    rerun = 0.0
    for count, (size, flops) in enumerate(mode.matmuls, start=1):
        if count % 2 == 0:
            rerun += flops
        else:
            kept += size
    return kept / tokens, rerun / tokens


def plan(cli, workdir, c, layers, recompute):
    path = os.path.join(workdir, f"{c['name']}-{layers}.json")
    with open(path, "w") as f:
        key = "n_layer" if "n_layer" in c["hf_config"] else "num_hidden_layers"
        json.dump(dict(c["hf_config"], **{key: layers}), f)
    tp = str(c.get("tp", 1))
    cmd = [cli, "plan", "--hf-config", path, "--gpu", "h100-sxm", "--nodes", "1",
           "--gpus-per-node", tp, "--tp", tp, "--pp", "1", "--sp", "false", "--seq", str(SEQ),
           "--micro-batch", str(BATCH), "--global-batch", str(BATCH), "--recompute", recompute,
           "--precision", "bf16", "--json"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {run.returncode}: {run.stderr}")
    return json.loads(run.stdout)


def planned(cli, c, workdir):
    four = plan(cli, workdir, c, 4, "selective-op")
    two = plan(cli, workdir, c, 2, "selective-op")
    none = plan(cli, workdir, c, 4, "none")
    kept = (four["memory"]["activations"] - two["memory"]["activations"]) / (2 * BATCH * SEQ)
    # The plan's FLOPs a token are the whole layer's; a tensor-parallel rank runs 1/tp of them.
    rerun = (four["summary"]["hardware_flops_per_token"] -
             none["summary"]["hardware_flops_per_token"]) / 4 / c.get("tp", 1)
    return kept, rerun


CASES = [
    eager.llama("llama-gqa", 8, 2, 704),      # Q K V O gate up down: K, O and up rerun
    eager.llama("llama-mha", 4, 4, 640),
    eager.llama("llama-tp2", 8, 4, 704, tp=2),  # a rank's share; O and down whole
    eager.gpt2("gpt2-no-dropout", 0.0),        # QKV O up down: O and down rerun
]


def main():
    if len(sys.argv) != 2:
        print("usage: selective_op_oracle.py SHARDSCOPE_CLI")
        return 2
    failed = 0
    with tempfile.TemporaryDirectory() as workdir:
        for c in CASES:
            want_kept, want_rerun = observed(c)
            got_kept, got_rerun = planned(sys.argv[1], c, workdir)
            for what, want, got, unit in (("kept", want_kept, got_kept, "B"),
                                          ("rerun", want_rerun, got_rerun, "FLOP")):
                error = got / want - 1.0
                ok = abs(error) <= TOLERANCE
                failed += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {c['name']:16s} {what:5s} PyTorch "
                      f"{want:10.0f} {unit} a token a layer, planner {got:10.0f} ({error:+.2%})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
