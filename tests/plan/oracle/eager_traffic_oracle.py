#!/usr/bin/env python3
"""Checks the planner's eager elementwise traffic against PyTorch's own dispatcher.

Builds a layer in PyTorch as the frameworks write it (a Llama layer as torchtitan does: RMSNorm
in fp32, complex rotary in fp32, separate Q, K, V and gate/up projections, GQA's keys and values
repeated to every head; a GPT-2 layer with native LayerNorm, one QKV projection, biases and
dropout), runs its forward and backward in bf16 (and once fp32) under a TorchDispatchMode, and adds up the bytes
every memory-bound op reads and writes: every op but the matrix multiplies and attention's core
(which the planner times apart), and but views, which move nothing. The bytes a token are the
difference between two token counts, so per-layer terms (the weights' gradients) drop out.

Then asks `shardscope-cli explain compute.elementwise_bytes --fused-elementwise false` for the
same layer, imported from the Hugging Face config.json that describes it, and compares. Exits 0
when every case is within TOLERANCE, 1 otherwise, 77 (CTest's skip code) without torch.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.checkpoint import checkpoint
except ImportError as e:  # pragma: no cover
    print(f"SKIP: PyTorch is not installed ({e}); install python3-torch to run this check")
    sys.exit(77)

# The planner leaves out per-token scalars (a norm's mean and rsqrt) and the rotary table's
# reads, a few hundred bytes a token against tens of kilobytes (measured: at most 0.6 %).
TOLERANCE = 0.01
# A feature's own bytes (the difference between two layers that differ only in it), where the
# omissions above cancel: Qwen2's bias gradients are 0.9 % of its layer, too little for the
# whole layer's tolerance to see, but all of the difference. Measured: within 0.3 %.
FEATURE_TOLERANCE = 0.01

MATMULS = {"mm", "bmm", "addmm", "matmul", "linear"}
MOVE_NOTHING = {"_unsafe_view", "is_same_size"}  # views by another name, and a shape check


def stored_bytes(t):
    """Bytes a tensor occupies: a broadcast (stride 0) dimension is read once."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            n *= size
    return n * t.element_size()


class CountTraffic(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.bytes = 0
        self.muted = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func.overloadpacket).split(".")[-1]
        returns = func._schema.returns
        view = bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write
        if self.muted or view or name in MATMULS or name in MOVE_NOTHING:
            return out
        tensors = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        tensors += [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        self.bytes += sum(stored_bytes(t) for t in tensors)
        return out


MODE = None
BATCH = 4


class AttentionCore(torch.autograd.Function):
    """Stands for a fused kernel (SDPA's flash backend): it reads the heads strided as they come
    and writes its output and gradients in (batch, seq, heads, dim) memory, so transposing them
    back is free. Its own traffic is the kernel's, timed apart by the planner."""

    @staticmethod
    def forward(ctx, q, k, v):
        MODE.muted = True
        b, h, s, d = q.shape
        out = torch.zeros(b, s, h, d, dtype=q.dtype).transpose(1, 2)
        MODE.muted = False
        return out

    @staticmethod
    def backward(ctx, grad):
        MODE.muted = True
        b, h, s, d = grad.shape
        grads = tuple(torch.zeros(b, s, h, d, dtype=grad.dtype).transpose(1, 2) for _ in range(3))
        MODE.muted = False
        return grads


class TorchtitanRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight


class Layer(nn.Module):
    """One decoder layer of a tensor-parallel rank: `heads`, `kv_heads` and `ffn` are the rank's."""

    def __init__(self, c):
        super().__init__()
        h, self.heads, self.kv, self.d = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"]
        self.llama = c["family"] == "llama"
        self.dropout = c.get("dropout", 0.0)
        norm = (lambda: TorchtitanRMSNorm(h)) if self.llama else (lambda: nn.LayerNorm(h))
        self.attention_norm, self.ffn_norm = norm(), norm()
        q, kv = self.heads * self.d, self.kv * self.d
        if self.llama:  # separate projections, as torchtitan and Hugging Face write them
            self.wq = nn.Linear(h, q, bias=c["qkv_bias"])
            self.wk = nn.Linear(h, kv, bias=c["qkv_bias"])
            self.wv = nn.Linear(h, kv, bias=c["qkv_bias"])
            self.w1 = nn.Linear(h, c["ffn"], bias=False)
            self.w3 = nn.Linear(h, c["ffn"], bias=False)
        else:  # one QKV projection, as GPT-2, nanoGPT and MPT write it
            self.wqkv = nn.Linear(h, q + 2 * kv, bias=c["qkv_bias"])
            self.w1 = nn.Linear(h, c["ffn"], bias=True)
        self.wo = nn.Linear(q, h, bias=not self.llama)
        self.w2 = nn.Linear(c["ffn"], h, bias=not self.llama)

    def attention(self, x, freqs):
        b, t, _ = x.shape
        x2 = x.reshape(b * t, -1)  # so a bias joins its GEMM (addmm), as on CUDA
        if self.llama:
            xq, xk, xv = self.wq(x2), self.wk(x2), self.wv(x2)
        else:
            xq, xk, xv = self.wqkv(x2).split([self.heads * self.d, self.kv * self.d, self.kv * self.d], -1)
        xq, xk, xv = (y.view(b, t, -1, self.d) for y in (xq, xk, xv))
        if self.llama:  # torchtitan's apply_rotary_emb
            xq_ = torch.view_as_complex(xq.float().reshape(b, t, -1, self.d // 2, 2))
            xk_ = torch.view_as_complex(xk.float().reshape(b, t, -1, self.d // 2, 2))
            f = freqs[:t].view(1, t, 1, self.d // 2)
            xq = torch.view_as_real(xq_ * f).flatten(3).type_as(xq)
            xk = torch.view_as_real(xk_ * f).flatten(3).type_as(xk)
        rep = self.heads // self.kv
        if rep > 1:  # torchtitan's repeat_kv
            xk = xk.unsqueeze(3).expand(b, t, self.kv, rep, self.d).reshape(b, t, self.heads, self.d)
            xv = xv.unsqueeze(3).expand(b, t, self.kv, rep, self.d).reshape(b, t, self.heads, self.d)
        out = AttentionCore.apply(xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2))
        out = out.transpose(1, 2).contiguous().view(b * t, -1)
        return self.wo(out).view(b, t, -1)

    def mlp(self, x):
        b, t, _ = x.shape
        x2 = x.reshape(b * t, -1)
        y = F.silu(self.w1(x2)) * self.w3(x2) if self.llama else F.gelu(self.w1(x2), approximate="tanh")
        return self.w2(y).view(b, t, -1)

    def drop(self, x):
        # What F.dropout runs on CUDA (one fused kernel; the CPU falls back to four ops).
        return torch.native_dropout(x, self.dropout, True)[0] if self.dropout else x

    def block(self, x, freqs):
        h = x + self.drop(self.attention(self.attention_norm(x), freqs))
        return h + self.drop(self.mlp(self.ffn_norm(h)))

    def forward(self, x, freqs, recompute):
        if recompute:
            return checkpoint(self.block, x, freqs, use_reentrant=False)
        return self.block(x, freqs)


def traffic(c, seq):
    """Bytes the layer's memory-bound ops move for a microbatch of BATCH sequences, forward and
    backward. The rotary table is read once a position for the whole microbatch."""
    global MODE
    torch.manual_seed(0)
    dtype = torch.float32 if c.get("precision") == "fp32" else torch.bfloat16
    layer = Layer(c).to(dtype)
    d = c["head_dim"]
    inverse = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    freqs = torch.polar(torch.ones(seq, d // 2), torch.outer(torch.arange(seq).float(), inverse))
    x = torch.randn(BATCH, seq, c["hidden"], dtype=dtype, requires_grad=True)
    grad = torch.randn(BATCH, seq, c["hidden"], dtype=dtype)
    MODE = CountTraffic()
    with MODE:
        layer(x, freqs, c.get("recompute", False)).backward(grad)
    return MODE.bytes


def torch_bytes_per_token(c):
    return (traffic(c, 64) - traffic(c, 32)) / (32.0 * BATCH)


def planner_bytes_per_token(cli, c, workdir):
    config = os.path.join(workdir, c["name"] + ".json")
    with open(config, "w") as f:
        json.dump(c["hf_config"], f)
    cmd = [cli, "explain", "compute.elementwise_bytes", "--hf-config", config, "--gpu", "h100-sxm",
           "--nodes", "1", "--gpus-per-node", str(c.get("tp", 1)), "--tp", str(c.get("tp", 1)),
           "--pp", "1", "--sp", "false", "--seq", "64", "--micro-batch", str(BATCH), "--global-batch", str(BATCH),
           "--recompute", c.get("recompute") or "none", "--precision", c.get("precision", "bf16"),
           "--fused-elementwise", "false", "--json"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {run.returncode}: {run.stderr}")
    return json.loads(run.stdout)["value"]


def llama_config(hidden, heads, kv_heads, ffn, **extra):
    return dict({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": hidden,
                 "num_attention_heads": heads, "num_key_value_heads": kv_heads,
                 "intermediate_size": ffn, "num_hidden_layers": 2, "vocab_size": 1000,
                 "max_position_embeddings": 4096, "hidden_act": "silu", "rms_norm_eps": 1e-5,
                 "tie_word_embeddings": False}, **extra)


def gpt2_config(dropout):
    return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 256, "n_head": 4,
            "n_layer": 2, "n_positions": 1024, "vocab_size": 1000, "activation_function": "gelu_new",
            "resid_pdrop": dropout, "embd_pdrop": dropout, "attn_pdrop": dropout}


def llama(name, heads, kv_heads, ffn, tp=1, qkv_bias=False, **extra):
    """A Llama-family layer of hidden 256 as a tensor-parallel rank of `tp` holds it, and the
    config.json of the whole model."""
    config = llama_config(256, heads, kv_heads, ffn)
    if qkv_bias:  # Qwen2: biases on Q, K and V
        config.update(model_type="qwen2", architectures=["Qwen2ForCausalLM"])
    return dict({"name": name, "family": "llama", "hidden": 256, "heads": heads // tp,
                 "kv_heads": kv_heads // tp, "head_dim": 256 // heads, "ffn": ffn // tp,
                 "qkv_bias": qkv_bias, "tp": tp, "hf_config": config}, **extra)


def gpt2(name, dropout):
    return {"name": name, "family": "gpt", "hidden": 256, "heads": 4, "kv_heads": 4, "head_dim": 64,
            "ffn": 1024, "qkv_bias": True, "dropout": dropout, "hf_config": gpt2_config(dropout)}


CASES = [
    # Llama 3's shape at a small width: GQA with 4 query heads a key-value head.
    llama("llama-gqa", 8, 2, 704),
    # Multi-head attention: no repeat.
    llama("llama-mha", 4, 4, 640),
    # Qwen2: biases on Q, K and V, whose gradients are sums over the tokens.
    llama("qwen2", 8, 4, 768, qkv_bias=True),
    # A tensor-parallel rank of 2: half the heads (two of them key-value heads) and the FFN, the
    # whole hidden state (no SP).
    llama("llama-tp2", 8, 4, 704, tp=2),
    # Full recompute: the forward runs again in the backward.
    llama("llama-recompute", 8, 2, 704, recompute="full"),
    # Op-level recompute (torchtitan's) reruns the same memory-bound ops: only matmuls and
    # attention's core, which this count leaves out, come from its saved outputs instead.
    llama("llama-selective-op", 8, 2, 704, recompute="selective-op"),
    # fp32 activations: the norms and rotary need no copies up and down.
    llama("llama-fp32", 8, 2, 704, precision="fp32"),
    # GPT-2: LayerNorm, one QKV projection, biases everywhere, tanh GELU, residual dropout.
    gpt2("gpt2", 0.1),
    # The features one at a time, each beside a layer without it (FEATURES below).
    llama("qwen2-no-bias", 8, 4, 768),
    llama("llama-kv8", 8, 8, 704),
    gpt2("gpt2-no-dropout", 0.0),
]


# (with, without, what the difference is)
FEATURES = [
    ("qwen2", "qwen2-no-bias", "Q, K and V biases' gradients"),
    ("llama-gqa", "llama-kv8", "GQA's repeated keys and values, less K and V's narrower ops"),
    ("gpt2", "gpt2-no-dropout", "residual dropout"),
    ("llama-recompute", "llama-gqa", "the forward recomputed"),
    ("llama-gqa", "llama-fp32", "fp32 copies in bf16, less fp32's wider tensors"),
]


def main():
    if len(sys.argv) != 2:
        print("usage: eager_traffic_oracle.py SHARDSCOPE_CLI")
        return 2
    failed = 0
    torch_bytes, planner_bytes = {}, {}
    with tempfile.TemporaryDirectory() as workdir:
        for c in CASES:
            expected = torch_bytes[c["name"]] = torch_bytes_per_token(c)
            got = planner_bytes[c["name"]] = planner_bytes_per_token(sys.argv[1], c, workdir)
            error = got / expected - 1.0
            ok = abs(error) <= TOLERANCE
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {c['name']:16s} PyTorch {expected:10.0f} B a token, "
                  f"planner {got:10.0f} B ({error:+.2%})")
    for with_, without, what in FEATURES:
        expected = torch_bytes[with_] - torch_bytes[without]
        got = planner_bytes[with_] - planner_bytes[without]
        error = got / expected - 1.0
        ok = abs(error) <= FEATURE_TOLERANCE
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {with_} - {without} ({what}): PyTorch {expected:8.0f} B, "
              f"planner {got:8.0f} B ({error:+.2%})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
