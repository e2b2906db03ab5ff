// What a layer's memory-bound kernels move when PyTorch runs them eagerly, one kernel an op:
// every op reads its inputs from HBM and writes its output back, norms and rotary embeddings
// go through fp32 copies, and autograd sums the input gradients of projections that share an
// input. Fused kernels (torch.compile, Megatron-LM's and Transformer Engine's) move a fraction
// of it: compute.cpp's fused count.
#pragma once

#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "layout.h"

#include <algorithm>

namespace shardscope {

// One group of ops of a layer, in bytes a token moves on one rank (TP splits the head and FFN
// widths, SP the hidden one), forward and backward. Counted op by op as PyTorch's eager
// autograd runs them for layers written as torchtitan writes Llama (RMSNorm in fp32, complex
// rotary in fp32, separate Q, K, V and gate/up projections, GQA's keys and values repeated to
// every head) and as nanoGPT and MPT write GPT-style layers (native LayerNorm, one QKV
// projection, one-kernel GELU and dropout); tests/plan/oracle/eager_traffic_oracle.py counts the
// same layers through PyTorch's dispatcher. Other writings differ in places: Hugging Face's
// Llama rotates in bf16, Phi-3 fuses QKV and gate/up, Qwen3 and Gemma add norms.
struct EagerTerm {
    const char* name;
    double forward = 0;
    double backward = 0;
};

// Calls visit(const EagerTerm&) for each group of a layer of this kind. An MoE layer runs the
// activation once for each expert slot a token takes; its routing (the router's softmax and
// top-k, the gathers and scatters that permute the tokens, their gradient sums) is not counted
// here: compute.cpp counts the permutation as the fused kernels move it.
template <typename Visit>
void forEachEagerTerm(const ModelSpec& m, LayerKind kind, const ParallelConfig& p, Visit&& visit);

struct EagerTraffic {
    double forward = 0;
    double backward = 0;
};
EagerTraffic eagerLayerTraffic(const ModelSpec& m, LayerKind kind, const ParallelConfig& p);

// ---------------------------------------------------------------------------------------------

template <typename Visit>
void forEachEagerTerm(const ModelSpec& m, LayerKind kind, const ParallelConfig& p, Visit&& visit) {
    const double ab = p.precision.activationBytes();
    const double t = std::max(1, p.tp);
    const double sp = p.sequenceParallel ? t : 1.0;
    const double h = m.hidden / sp;
    // A rank's query and key-value widths; kv heads are replicated where tp outnumbers them.
    const double q = double(m.qDim()) / t;
    const double kv = kvDimOverTpGroup(m, p.tp) / t;
    // Below fp32, an op computed in fp32 first copies its input up (read ab, write 4 bytes an
    // element) and its result back down (read 4, write ab); the backward copies the gradients
    // the same way. In fp32 the copies are no-ops.
    const double fp32Copies = ab < 4.0 ? 2.0 * (ab + 4.0) : 0.0;

    if (m.norm == Norm::RmsNorm) {
        // Bytes an element, in fp32 (y = x.float()): pow(2) reads and writes (8), mean reads
        // (4), y * rsqrt reads and writes (8); then type_as and * weight in ab (read, write:
        // 2 ab). Backward: grad * weight and grad * normed for the weight's gradient and its sum
        // (6 ab); in fp32, grad * y, grad * rsqrt, their sum, mean's expand, pow's backward
        // (y.pow(1), * 2, * grad) and the two paths' add: 12 + 8 + 4 + 4 + 8 + 8 + 12 + 12 = 68.
        // MLA also norms its query and key-value latents, whole on every tp rank.
        const double widths =
            2.0 * h + (m.mla.enabled() ? double(m.mla.qLoraRank + m.mla.kvLoraRank) : 0.0);
        visit(EagerTerm{"RMSNorm in fp32", widths * (20.0 + 2.0 * ab + fp32Copies),
                        widths * (68.0 + 6.0 * ab + fp32Copies)});
    } else { // native_layer_norm reads x and writes y; its backward reads dy and x, writes dx
        visit(EagerTerm{"LayerNorm (2 a layer)", 2.0 * h * 2.0 * ab, 2.0 * h * 3.0 * ab});
    }
    visit(EagerTerm{"Residual adds (2 a layer)", 2.0 * h * 3.0 * ab, 2.0 * h * 3.0 * ab});
    if (m.dropout) // native_dropout writes its output and a one-byte mask; the backward reads both
        visit(EagerTerm{"Residual dropout (2 a layer)", 2.0 * h * (2.0 * ab + 1.0),
                        2.0 * h * (2.0 * ab + 1.0)});

    // Llama-family layers project the normed input separately into Q, K and V (MLA: its query
    // and key-value paths) and into gate and up; autograd sums their input gradients, one add
    // (read two, write one) for each extra consumer, on the whole hidden state even under SP
    // (the projections take the gathered sequence). A GPT-style layer's one QKV projection is
    // split into views instead, and split's backward concatenates the gradients.
    const bool separateProjections = m.gated() || m.mla.enabled();
    if (separateProjections) {
        const int attentionConsumers = m.mla.enabled() ? 2 : 3;
        const int mlpConsumers = m.gated() ? 2 : 1;
        const int sums = attentionConsumers - 1 + mlpConsumers - 1;
        visit(EagerTerm{"Input-gradient sums of separate projections", 0.0,
                        sums * double(m.hidden) * 3.0 * ab});
    } else {
        visit(EagerTerm{"QKV gradients concatenated", 0.0, 2.0 * ab * (q + 2.0 * kv)});
    }

    if (m.positions == PositionEmbedding::Rope) {
        // The rotated width a token: every query and key head, or MLA's rotary parts (a query's
        // in every head, a key's once). Copied up, a complex multiply in fp32 (read 4, write 4
        // bytes an element), copied down; the backward multiplies by the conjugate.
        const double rotated = m.mla.enabled() ? double(m.heads) * m.mla.qkRopeHeadDim / t +
                                                     double(m.mla.qkRopeHeadDim)
                                               : q + kv;
        visit(EagerTerm{"Rotary embedding in fp32 (queries and keys)", rotated * (8.0 + fp32Copies),
                        rotated * (8.0 + fp32Copies)});
    }
    if (m.mla.enabled()) {
        // Each head's query and key are concatenated from their positional and rotary parts
        // (read and write both); the backward copies the gradients apart again.
        const double assembled = 2.0 * double(m.scoreDim()) / t;
        visit(EagerTerm{"MLA query and key concatenation", 2.0 * ab * assembled,
                        2.0 * ab * assembled});
    } else if (kv < q) {
        // expand + reshape copies the keys and values out to every query head (read kv, write
        // q, each); the backward sums each group back.
        visit(EagerTerm{"GQA keys and values repeated to every head", 2.0 * ab * (kv + q),
                        2.0 * ab * (kv + q)});
    }

    // The activation on each MLP the token runs through. Gated: the function (read, write:
    // 2 ab) and the multiply by the up projection (read two, write one: 3 ab); backward, two
    // multiplies (6 ab) and the function's backward (3 ab). GELU alone: 2 ab, and 3 ab back.
    const double mlps = mlpsPerToken(m, kind, p);
    const double ffn = double(m.layerFfn(kind)) / t * mlps;
    if (m.gated())
        visit(
            EagerTerm{"Gated activation (function and multiply)", 5.0 * ab * ffn, 9.0 * ab * ffn});
    else
        visit(EagerTerm{"GELU", 2.0 * ab * ffn, 3.0 * ab * ffn});

    // Biases add inside the GEMM; their gradients are sums over the tokens of the outputs'
    // gradients, one read of each.
    double biasWidth = 0;
    if (m.attentionBias)
        biasWidth += q + 2.0 * kv;
    if (m.outputBias)
        biasWidth += h;
    if (m.mlpBias)
        biasWidth += ffn * (m.gated() ? 2.0 : 1.0) + h * mlps;
    if (biasWidth > 0)
        visit(EagerTerm{"Bias gradients", 0.0, ab * biasWidth});
}

} // namespace shardscope
