// FLOPs per token and compute time per microbatch.
#pragma once

#include "attention_kernels.h"
#include "estimate.h"

#include <cstddef>
#include <vector>

namespace shardscope {

struct TokenFlops {
    double layerMatmul = 0;      // forward FLOPs of one layer's projections, per token (an MoE
                                 // model's: an MoE layer's)
    double layerMatmulRun = 0;   // the same as run: routed experts at their capacity factor
    double denseLayerMatmul = 0; // the same for a dense layer (an MoE model's first layers)
    double matmul(LayerKind kind) const {
        return kind == LayerKind::Moe ? layerMatmul : denseLayerMatmul;
    }
    double matmulRun(LayerKind kind) const {
        return kind == LayerKind::Moe ? layerMatmulRun : denseLayerMatmul;
    }
    double layerRecomputed = 0; // forward FLOPs of the projections op-level recompute reruns
                                // in one layer, per token (Recompute::SelectiveOp; else 0)
    double attentionCore = 0;   // forward FLOPs of QK^T and AV of one layer, per token
    double lmHead = 0;          // forward FLOPs of the output projection, per token
    double mtpExtra = 0;        // the MTP modules' projections and output heads, per token, forward
    double model = 0;           // forward + backward of the whole model, per token
    double hardware = 0;        // model + recomputed forward work, per token
};

// Forward is 2 FLOPs per multiply-add; backward is twice the forward (Kaplan et al. 2020).
// Attention scores cost 4 s q FLOPs per token per layer in full (2 s (q_scores + v) where MLA's
// queries and keys are wider than its values), half of that when only the causal triangle is
// computed (Assumptions::causalAttention).
TokenFlops tokenFlops(const ModelSpec& m, const ParallelConfig& p, const Assumptions& a);

// Model FLOPs per token in a paper's convention (flops_convention.h); a bare parameter count
// has only 6N.
double conventionFlopsPerToken(const ModelSpec& m, FlopsConvention c);

struct StageCompute {
    double flops = 0; // one microbatch forward + backward (+ recompute) on one rank
    double gemmSeconds = 0;
    double elementwiseSeconds = 0;
    double attentionSeconds = 0; // the attention-core share, which CP communication hides behind
    double seconds() const { return gemmSeconds + elementwiseSeconds; }
};

// The fraction of a GPU's dense peak a layer's GEMMs reach at a precision: the calibrated
// efficiency scaled by the GPU's measured matmul ceiling against the calibration GPU's
// (Assumptions::gemmEfficiency and fp8GemmEfficiency); by its bf16 ceiling against the
// calibration GPU's bf16 one where that precision was not measured; the efficiency itself where
// nothing was.
struct GemmEfficiency {
    double value = 0;        // the fraction of the peak the GEMMs reach
    double calibrated = 0;   // the efficiency on the calibration GPU (Assumptions)
    double ceiling = 0;      // the GPU's measured ceiling it was scaled by; 0: none
    double reference = 0;    // the calibration GPU's ceiling it was divided by
    bool fp8 = false;        // FP8 tensor cores run it (the H100 is the calibration GPU)
    bool bf16Stands = false; // the precision's own ceiling was not measured: bf16's stands in
};
GemmEfficiency gemmEfficiencyOf(const GpuSpec& gpu, Precision precision, const Assumptions& a);
inline double gemmEfficiency(const GpuSpec& gpu, Precision precision, const Assumptions& a) {
    return gemmEfficiencyOf(gpu, precision, a).value;
}

StageCompute stageCompute(const PlanInputs& in, int stage);
// How many times a step runs each layer's projections forward: once, twice where full recompute
// repeats them.
inline double forwardRuns(const ParallelConfig& p) {
    return p.recompute == Recompute::Full ? 2.0 : 1.0;
}
// How many times a step runs each layer's memory-bound forward ops: twice under full and
// op-level recompute, which both rerun the layer's forward (op-level keeps only GEMM outputs).
inline double elementwiseForwardRuns(const ParallelConfig& p) {
    return p.recompute == Recompute::Full || p.recompute == Recompute::SelectiveOp ? 2.0 : 1.0;
}
// Whether attention's core runs again in the backward: under selective and full recompute, and
// under op-level recompute where no fused kernel's output is kept (unfused attention).
inline bool recomputesAttentionCore(const ParallelConfig& p) {
    return p.recompute == Recompute::Selective || p.recompute == Recompute::Full ||
           (p.recompute == Recompute::SelectiveOp && !p.flashAttention);
}

// A dense layer's projections in forward order, as torchtitan writes a Llama layer (Q, K, V,
// output, gate, up, down) and nanoGPT a GPT-style one (QKV, output, up, down): a token's input
// and output widths, with K and V as wide as a TP group holds them. A row-parallel projection's
// output is the hidden state, whole on every TP rank before its reduction.
struct Projection {
    double in = 0;
    double out = 0;
    bool rowParallel = false;
};
std::vector<Projection> denseLayerProjections(const ModelSpec& m, int tp = 1);
// torchtitan's op-level selective checkpointing keeps the output of every matmul but every
// second one (parallelize_llama.py's _custom_policy): projections 1, 3, 5, ... rerun.
inline bool opRecomputesProjection(std::size_t index) {
    return index % 2 == 1;
}
// What that rule does to a dense layer, a token's worth: the forward FLOPs of the projections it
// reruns (the whole layer's), the elements of their inputs on one TP rank (cast again under FP8)
// and the elements of the other projections' outputs one rank keeps (a row-parallel output is
// the hidden state, whole before its reduction).
struct OpLevelRecompute {
    double rerunFlops = 0;
    double rerunInputs = 0;
    double keptOutputs = 0;
};
OpLevelRecompute opLevelRecompute(const ModelSpec& m, const ParallelConfig& p);
// Bytes a token moves through one layer's norms, adds, rotary and activation on one rank, fused
// or eager (ParallelConfig::fusedElementwise), forward, backward and recomputed forward.
double elementwiseOpBytes(const PlanInputs& in, LayerKind kind);
// Bytes a token moves through an MoE layer's permutation into its expert slots and back, on one
// rank; 0 for a layer that routes nothing.
double moePermuteBytes(const ModelSpec& m, LayerKind kind, const ParallelConfig& p);
// Bytes a token moves through one layer's memory-bound kernels on one rank in a step's forward,
// backward and recomputed forward: fused or eager elementwise ops, MoE permutation, unfused
// attention's score passes and FP8 casts. Zero for a bare model.
double layerElementwiseBytes(const PlanInputs& in, LayerKind kind);
// Bytes a token moves through the cross-entropy over its logits on the last stage's rank (each
// of the vocab / tp logits a TP rank holds, Megatron's vocabulary-parallel loss), forward and
// backward, the MTP modules' losses included. Eager PyTorch (F.cross_entropy on logits cast to
// fp32, as torchtitan and Megatron-LM's unfused loss run it): the cast up, log-softmax, the
// gradient written zeroed, log-softmax's backward and the cast down, 36 B an entry from bf16
// (24 B from fp32: no casts). A fused loss kernel (torch.compile, Transformer Engine's,
// flash-attn's that MPT uses) reads the logits forward, reads them again and writes their gradient
// backward: 3 x activation bytes. Zero for a bare model.
double lossBytesPerToken(const PlanInputs& in);
// Bytes one microbatch moves on a stage's rank casting its fp32 weights under autocast
// (PrecisionPolicy::fp32Weights): each forward run of a GEMM reads its fp32 weight and writes a
// bf16 copy, and the backward reads the bf16 weight gradient and writes it in fp32, 6 B a
// parameter each. The layers' weights and the output head's; the embedding lookup casts nothing.
// Zero for other policies and for a bare model.
double weightCastBytes(const PlanInputs& in, int stage);
// The same with the model's FLOPs a token already counted (the search plans several stages).
StageCompute stageCompute(const PlanInputs& in, int stage, const TokenFlops& f);
// The fused attention kernel a plan runs and its speed; `measured` false where attention's core
// runs as GEMMs (unfused, fp32, or a GPU with no measurement).
AttentionSpeed attentionSpeedFor(const PlanInputs& in);
std::string describeAttentionSpeedFor(const PlanInputs& in); // for explanations

} // namespace shardscope
