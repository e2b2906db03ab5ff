#!/usr/bin/env python3
"""Checks the planner's loss traffic (`compute.loss_bytes`) against PyTorch's own dispatcher.

Runs the loss as torchtitan (and Megatron-LM's unfused vocabulary-parallel loss) runs it, in
eager PyTorch: F.cross_entropy on the logits cast to fp32, forward and backward, under a
TorchDispatchMode, and adds up the bytes every op reads and writes (eager_traffic_oracle.py's
count). Two ops touch only some of a tensor they are given: nll_loss_forward reads the one
logit of each token's target, and nll_loss_backward is handed the log-probabilities only for
their shape and writes the zeroed gradient with one entry a token; both are counted for what
they touch. The bytes a token are the difference between two token counts, so the scalar loss
drops out.

Then asks `shardscope-cli explain compute.loss_bytes --fused-elementwise false` for a model with
the same vocabulary (a tensor-parallel rank's share of it for tp 2: the same passes over half the
logits) and compares. Exits 0 when every case is within TOLERANCE, 1 otherwise, 77 (CTest's skip
code) without torch.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    import torch.nn.functional as F
    from torch.utils._pytree import tree_flatten
    import eager_traffic_oracle as eager
except ImportError as e:  # pragma: no cover
    print(f"SKIP: PyTorch is not installed ({e}); install python3-torch to run this check")
    sys.exit(77)

# The planner leaves out what a token moves beside its logits (its target, its loss and
# logsumexp, the gathered logit): tens of bytes against tens of kilobytes.
TOLERANCE = 0.01
VOCAB = 1000


class CountLossTraffic(eager.CountTraffic):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket).split(".")[-1]
        if name not in ("nll_loss_forward", "nll_loss_backward"):
            return super().__torch_dispatch__(func, types, args, kwargs)
        out = func(*args, **(kwargs or {}))
        if name == "nll_loss_forward":  # (self, target, ...): one logit a token, and the target
            logits, target = args[0], args[1]
            touched = [target] + [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
            self.bytes += target.numel() * logits.element_size()
        else:  # (grad_output, self, target, ...): the zeroed gradient written, the target read
            touched = [args[2], out]
        self.bytes += sum(eager.stored_bytes(t) for t in touched)
        return out


def traffic(tokens, vocab, dtype):
    torch.manual_seed(0)
    logits = torch.randn(tokens, vocab, dtype=dtype, requires_grad=True)
    target = torch.randint(0, vocab, (tokens,))
    mode = CountLossTraffic()
    with mode:
        F.cross_entropy(logits.float(), target).backward()
    return mode.bytes


def torch_bytes_per_token(c):
    vocab = VOCAB // c["tp"]
    dtype = torch.float32 if c["precision"] == "fp32" else torch.bfloat16
    return (traffic(512, vocab, dtype) - traffic(256, vocab, dtype)) / 256.0


def planner_bytes_per_token(cli, c, workdir):
    config = os.path.join(workdir, c["name"] + ".json")
    with open(config, "w") as f:
        json.dump(eager.llama_config(256, 8, 2, 704), f)  # vocab_size VOCAB
    tp = str(c["tp"])
    cmd = [cli, "explain", "compute.loss_bytes", "--hf-config", config, "--gpu", "h100-sxm",
           "--nodes", "1", "--gpus-per-node", tp, "--tp", tp, "--pp", "1", "--sp", "false",
           "--seq", "64", "--micro-batch", "1", "--global-batch", "1", "--recompute", "none",
           "--precision", c["precision"], "--fused-elementwise", "false", "--json"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {run.returncode}: {run.stderr}")
    return json.loads(run.stdout)["value"]


CASES = [
    {"name": "bf16", "precision": "bf16", "tp": 1},  # cast up and down around fp32 passes
    {"name": "fp32", "precision": "fp32", "tp": 1},  # no casts
    {"name": "bf16-tp2", "precision": "bf16", "tp": 2},  # a TP rank's half of the vocabulary
]


def main():
    if len(sys.argv) != 2:
        print("usage: loss_traffic_oracle.py SHARDSCOPE_CLI")
        return 2
    failed = 0
    with tempfile.TemporaryDirectory() as workdir:
        for c in CASES:
            expected = torch_bytes_per_token(c)
            got = planner_bytes_per_token(sys.argv[1], c, workdir)
            error = got / expected - 1.0
            ok = abs(error) <= TOLERANCE
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {c['name']:9s} PyTorch {expected:9.0f} B a token, "
                  f"planner {got:9.0f} B ({error:+.2%})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
