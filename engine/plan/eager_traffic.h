// What a layer's memory-bound kernels move when PyTorch runs them eagerly, one kernel an op:
// every op reads its inputs from HBM and writes its output back, norms and rotary embeddings
// go through fp32 copies, and autograd sums the input gradients of projections that share an
// input. Fused kernels (torch.compile, Megatron-LM's and Transformer Engine's) move a fraction
// of it: compute.cpp's fused count.
#pragma once

#include "core/model_spec.h"
#include "core/parallel_config.h"

#include <algorithm>

namespace shardscope {

// One group of ops of a layer, in bytes a token moves on one rank (TP splits the head and FFN
// widths, SP the hidden one), forward and backward. Counted op by op as PyTorch's eager
// autograd runs them for the layers as torchtitan and Hugging Face write them (Llama: RMSNorm
// in fp32, complex rotary in fp32, separate Q, K, V and gate/up projections, GQA's keys and
// values repeated to every head) and as GPT-2, nanoGPT and MPT write theirs (native LayerNorm,
// one QKV projection); tests/plan/oracle/eager_traffic_oracle.py counts the same layers
// through PyTorch's dispatcher.
struct EagerTerm {
    const char* name;
    double forward = 0;
    double backward = 0;
};

// Calls visit(const EagerTerm&) for each group of a layer of this kind; MoE layers run the
// activation once for each expert slot a token takes (their permutation is counted with the
// fused kernels', which it equals).
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
    // Below fp32, a norm or rotary op computed in fp32 first copies its input up (read ab, write
    // 4 bytes) and its result back down; the backward does the same for the gradients.
    const double casts = ab < 4.0 ? 2.0 * (ab + 4.0) : 0.0;

    if (m.norm == Norm::RmsNorm) // x.float(), pow, mean, x * rsqrt, type_as, * weight
        visit(EagerTerm{"RMSNorm in fp32 (2 a layer)", 2.0 * h * (20.0 + 2.0 * ab + casts),
                        2.0 * h * (68.0 + 6.0 * ab + casts)});
    else // native_layer_norm reads x and writes y; its backward reads dy and x, writes dx
        visit(EagerTerm{"LayerNorm (2 a layer)", 2.0 * h * 2.0 * ab, 2.0 * h * 3.0 * ab});
    visit(EagerTerm{"Residual adds (2 a layer)", 2.0 * h * 3.0 * ab, 2.0 * h * 3.0 * ab});
    if (m.dropout) // native_dropout writes its output and a one-byte mask; the backward reads both
        visit(EagerTerm{"Residual dropout (2 a layer)", 2.0 * h * (2.0 * ab + 1.0),
                        2.0 * h * (2.0 * ab + 1.0)});

    // Llama-family layers project the normed input separately into Q, K and V (MLA: its query
    // and key-value paths) and into gate and up; autograd sums their input gradients, one add
    // (read two, write one) for each extra consumer. GPT-style layers have one QKV projection.
    const int attentionInputs = m.mla.enabled() ? 2 : (m.gated() ? 3 : 1);
    const int mlpInputs = m.gated() ? 2 : 1;
    const int gradientSums = attentionInputs - 1 + mlpInputs - 1;
    if (gradientSums > 0)
        visit(EagerTerm{"Input-gradient sums of separate projections", 0.0,
                        gradientSums * h * 3.0 * ab});
    else if (!m.mla.enabled()) // the QKV output is split into views; split's backward is a cat
        visit(EagerTerm{"QKV gradients concatenated", 0.0,
                        2.0 * ab * double(m.qDim() + 2 * m.kvDim()) / t});

    if (m.positions == PositionEmbedding::Rope) {
        // The rotated width a token: every query and key head, or MLA's rotary parts (a query's
        // in every head, a key's once). Cast up, a complex multiply in fp32, cast down.
        const double rotated =
            m.mla.enabled()
                ? (double(m.heads) * m.mla.qkRopeHeadDim / t + double(m.mla.qkRopeHeadDim))
                : double(m.qDim() + m.kvDim()) / t;
        visit(EagerTerm{"Rotary embedding in fp32 (queries and keys)", rotated * (8.0 + casts),
                        rotated * (8.0 + casts)});
    }
    if (m.mla.enabled()) {
        // Each head's query and key are concatenated from their positional and rotary parts
        // (read and write both); the backward copies the gradients apart again.
        const double assembled = 2.0 * double(m.scoreDim()) / t;
        visit(EagerTerm{"MLA query and key concatenation", 2.0 * ab * assembled,
                        2.0 * ab * assembled});
    } else if (m.kvHeads < m.heads) {
        // expand + reshape copies the keys and values out to every query head; the backward
        // sums each group back.
        const double widths = double(m.kvDim() + m.qDim()) / t;
        visit(EagerTerm{"GQA keys and values repeated to every head", 2.0 * ab * widths,
                        2.0 * ab * widths});
    }

    // The activation on each MLP the token runs through: SwiGLU and GeGLU apply the function
    // (read, write) and multiply by the up projection (read two, write one); the backward runs
    // two multiplies and the function's backward. GELU alone: read, write; backward read two,
    // write one.
    const bool routes = m.routes(kind);
    const double mlps = routes ? m.moe.topK * p.expertLoad() + m.moe.sharedExperts : 1.0;
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
        biasWidth += double(m.qDim() + 2 * m.kvDim()) / t;
    if (m.outputBias)
        biasWidth += h;
    if (m.mlpBias)
        biasWidth += ffn * (m.gated() ? 2.0 : 1.0) + h * mlps;
    if (biasWidth > 0)
        visit(EagerTerm{"Bias gradients", 0.0, ab * biasWidth});
}

} // namespace shardscope
