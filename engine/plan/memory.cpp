// Memory per GPU by category. Activations follow Korthikanti et al. 2022, "Reducing Activation
// Recomputation in Large Transformer Models" (Table 2), generalised to GQA, gated MLPs, MoE and
// models without dropout; model state follows Rajbhandari et al. 2020 (ZeRO).
#include "compute.h"
#include "estimate.h"
#include "formulas.h"
#include "layout.h"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace shardscope {

double activationBytesPerLayer(const ModelSpec& m, const ParallelConfig& p, LayerKind kind,
                               bool fp8Inputs) {
    if (m.isBare())
        return 0.0;
    const double ab = p.precision.activationBytes();
    const double t = std::max(1, p.tp);
    const double sp = p.sequenceParallel ? t : 1.0; // SP shards what TP leaves replicated
    const double T = localTokens(m, p);
    const double h = m.hidden;
    const double kv = kvDimOverTpGroup(m, p.tp);

    if (p.recompute == Recompute::Full)
        return ab * T * h / sp; // only the layer input is kept

    // Op-level recompute (torchtitan's policy) keeps the layer input, every other projection's
    // output and the fused attention kernel's; the rest reruns from them in the backward.
    if (p.recompute == Recompute::SelectiveOp) {
        double kept = ab * T * (h / sp + opLevelRecompute(m, p).keptOutputs);
        if (p.flashAttention)
            kept += ab * T * double(m.valueDim()) / t;
        // Under SP the row-parallel projections' reduce-scatters are in the save list too.
        if (p.sequenceParallel && p.tp > 1)
            for (const Projection& x : denseLayerProjections(m, p.tp))
                if (x.rowParallel)
                    kept += ab * T * h / t;
        return kept;
    }

    // Bytes of a kept projection input: Transformer Engine's FP8 layers keep the FP8 cast they
    // computed with (_LayerNormLinear's ln_out, _LayerNormMLP's ln_out and activation output,
    // _Linear's input), not the bf16 tensor; the norms' inputs and fc1's output stay bf16.
    const double inputBytes = fp8Inputs ? 1.0 : ab;
    // Inputs of the two norms, of the QKV projection and of the first MLP projection.
    double replicated = 2.0 * ab * T * h + 2.0 * inputBytes * T * h;
    if (m.dropout)
        replicated += 2.0 * T * h; // one-byte masks after attention and after the MLP

    // Q, K, V kept for the attention backward, and the input of the output projection; MLA keeps
    // its latents too (the inputs of its norms and up projections, which tp does not split).
    const double keys = m.mla.enabled() ? double(m.keyDim()) : kv;
    const double values = m.mla.enabled() ? double(m.storedValueDim()) : kv;
    double split = ab * T * (double(m.scoreDim()) + keys + values) + ab * T * double(m.valueDim());
    // Under FP8 the attention kernel keeps its bf16 output and the output projection its FP8 cast.
    if (fp8Inputs)
        split += T * double(m.valueDim());
    if (m.mla.enabled())
        replicated +=
            ab * T * (2.0 * m.mla.qLoraRank + 2.0 * m.mla.kvLoraRank + m.mla.qkRopeHeadDim);

    const bool routes = m.routes(kind);
    const double f = double(m.layerFfn(kind)) * mlpsPerToken(m, kind, p);
    // Gate/up outputs (or the GELU input), then the down projection's input.
    split += (m.gated() ? 2.0 : 1.0) * ab * T * f + inputBytes * T * f;

    if (p.recompute == Recompute::None && !p.flashAttention) {
        // Materialised attention scores: softmax output, and with dropout its mask and output.
        const double scores = double(m.heads) * T * m.seqLen; // local queries x all keys
        split += m.dropout ? (2.0 * ab + 1.0) * scores : ab * scores;
    }
    // An MoE layer's experts also keep their copies of each token (k of them, at the capacity
    // factor), whole on every rank of the experts' etp group: the tokens its etp ranks hold
    // between them (each rank's own under SP or tp 1; without SP all tp ranks hold the same).
    const double expertTokens = p.tp > 1 && !p.sequenceParallel ? T : T / sp * p.expertTp();
    const double expertInputs =
        routes ? inputBytes * expertTokens * h * m.moe.topK * p.expertLoad() : 0.0;
    return replicated / sp + split / t + expertInputs;
}

bool keepsFp8ProjectionInputs(const PlanInputs& in) {
    return in.parallel.precision.fp8On(in.cluster.gpu) &&
           in.parallel.recompute != Recompute::SelectiveOp;
}

MemoryBreakdown memoryForStage(const PlanInputs& in, int stage) {
    return memoryForStage(in, stage, countParameters(in.model));
}

MemoryBreakdown memoryForStage(const PlanInputs& in, int stage, const ParamCount& c) {
    const ModelSpec& m = in.model;
    const ParallelConfig& p = in.parallel;
    const Assumptions& a = in.assume;
    const PrecisionPolicy& prec = p.precision;
    const double shards = std::max(1, p.zeroShards()); // dp*cp, or the hybrid shard group
    const double t = std::max(1, p.tp);
    const bool first = stage == 0, last = stage == p.pp - 1;

    MemoryBreakdown mem;
    const double params = paramsOnStage(m, c, p, stage);
    mem.paramsOnRank = params;
    mem.expertParamsOnRank = expertParamsOnStage(m, c, p, stage);
    const StageLayers layers = stageLayers(m, p, stage);
    mem.layersOnRank = layers.total();
    if (m.moe.enabled())
        mem.firstDenseLayersOnRank = layers.dense;

    // Model state, sharded by ZeRO stage; offload moves the optimizer's share to the host. The
    // routed experts' state shards over the ranks holding the same experts (tp dp cp / etp ep).
    const double sharded = shardedParamsOnRank(p, params, mem.expertParamsOnRank);
    const auto held = [&](double bytesPerParam, bool isSharded) {
        return (isSharded ? sharded : params) * bytesPerParam;
    };
    const GpuSpec& gpu = in.cluster.gpu;
    const double nonLayer = nonLayerParamsOnStage(m, c, p, stage);
    // Outside the layers (embeddings, head) FP8 weights leave bf16: the difference on top.
    mem.parameters = held(prec.weightBytesOn(gpu), p.zero >= 3) +
                     (p.zero >= 3 ? shardedParamsOnRank(p, nonLayer, 0.0) : nonLayer) *
                         (prec.nonLayerWeightBytesOn(gpu) - prec.weightBytesOn(gpu));
    const double grads = held(prec.gradBytes(), p.zero >= 2);
    const double optimizer =
        held(prec.masterBytes() + optimizerStateBytes(p.optimizer), p.zero >= 1);
    if (p.offloadOptimizer) {
        mem.optimizer = 0;
        mem.gradients = p.zero >= 2 ? 0.0 : grads;
        mem.cpuOffloaded = optimizer + (p.zero >= 2 ? grads : 0.0);
    } else {
        mem.optimizer = optimizer;
        mem.gradients = grads;
    }

    // Activations of the microbatches this stage holds at its peak.
    const double ab = prec.activationBytes();
    const double T = localTokens(m, p);
    const double sp = p.sequenceParallel ? t : 1.0;
    const bool fp8 = prec.fp8On(in.cluster.gpu);
    const bool fp8Inputs = keepsFp8ProjectionInputs(in);
    // Where full recompute covers only some of the stage's layers, a layer keeps its input alone
    // or everything: per layer, the two weighed by the share recomputed.
    const auto perLayer = [&](LayerKind kind) {
        if (!recomputesSomeLayers(m, p))
            return activationBytesPerLayer(m, p, kind, fp8Inputs);
        const RecomputeMix mix = recomputeMixOf(p);
        const double share = fullRecomputeShare(m, p, stage);
        return share * activationBytesPerLayer(m, mix.every, kind, fp8Inputs) +
               (1.0 - share) * activationBytesPerLayer(m, mix.none, kind, fp8Inputs);
    };
    mem.activationsPerLayer = perLayer(LayerKind::Moe);
    if (mem.firstDenseLayersOnRank > 0)
        mem.firstDenseActivationsPerLayer = perLayer(LayerKind::Dense);
    mem.inflightMicrobatches =
        pipelineInflightMicrobatches(p.schedule, p.pp, std::max(1, p.microbatches()), p.vpp, stage);
    if (!m.isBare()) {
        if (first) // token ids (int64) and, with dropout, the embedding dropout mask
            mem.stageExtraActivations +=
                mem.inflightMicrobatches * T * (8.0 + (m.dropout ? m.hidden : 0.0)) / sp;
        if (last) // final norm input and LM head input; each MTP module's projection input
                  // (its two normed inputs) and head input
            mem.stageExtraActivations += (2.0 + 3.0 * m.mtpModules) * ab * T * m.hidden / sp;
    }
    mem.activations = ((mem.layersOnRank - mem.firstDenseLayersOnRank) * mem.activationsPerLayer +
                       mem.firstDenseLayersOnRank * mem.firstDenseActivationsPerLayer) *
                          mem.inflightMicrobatches +
                      mem.stageExtraActivations;

    // Temporary buffers.
    if (p.zero >= 3 && shards > 1 && !m.isBare()) {
        // The largest module gathered whole, with its gradient before the reduce-scatter (the
        // 4 x largest-layer term of DeepSpeed's estimate_zero3_model_states_mem_needs).
        // The gradients are 16-bit beside FP8 weights as beside bf16 ones: the bytes of the
        // weights FP8 leaves out, which the embedding keeps.
        double layer = layerParamsPerTpRank(m, c, p.tp, p.ep, p.etp);
        if (m.moe.enabled() && m.denseLayerCount() > 0)
            layer =
                std::max(layer, layerParamsPerTpRank(m, c, p.tp, p.ep, p.etp, LayerKind::Dense));
        const double wide = prec.nonLayerWeightBytesOn(gpu);
        mem.zero3Gather =
            std::max(layer * (prec.weightBytesOn(gpu) + wide), c.embeddings / t * 2.0 * wide);
    }
    // Buckets of gradients in flight to an all-reduce or reduce-scatter (under ZeRO-3 the
    // gathered module's gradient stands for them, unless copies are all-reduced across groups).
    const bool reduces = p.dp * p.cp > 1 || (p.expertsApart() && p.expertDataParallel() > 1);
    if (reduces && (p.zero < 3 || p.zeroReplicas() > 1))
        mem.gradBuckets = 2.0 * a.gradBucketBytes;
    if (last && !m.isBare())
        mem.logits = 4.0 * T * double(m.vocab) / t; // fp32 logits for the cross-entropy
    // Transformer Engine casts bf16 weights to FP8 copies that live across the microbatches;
    // FP8 weights are their own copies.
    if (fp8 && !prec.fp8WeightsOn(gpu))
        mem.fp8WeightCache = held(1.0, p.zero >= 3);
    // Autocast over fp32 weights casts each GEMM's weight to bf16 as it runs, and the GEMM keeps
    // that copy for its backward: every layer not recomputed, for each microbatch in flight, and
    // the head; a recomputed layer's copy lives only while it reruns. Under ZeRO-3 they are
    // copies of the gathered (whole) weights.
    if (prec.autocastsWeights() && !m.isBare()) {
        const GemmWeights w = gemmWeightsOnStage(m, c, p, stage);
        const double recomputed =
            p.recompute == Recompute::Full ? fullRecomputeShare(m, p, stage) : 0.0;
        const double oneLayer = mem.layersOnRank > 0 ? w.layers / mem.layersOnRank : 0.0;
        mem.autocastWeightCopies = 2.0 * ((1.0 - recomputed) * w.layers * mem.inflightMicrobatches +
                                          w.head + (recomputed > 0 ? oneLayer : 0.0));
    }
    // What one layer's recomputed forward holds during its backward: all of a fully
    // recomputed layer's activations, what op-level recompute did not keep.
    if ((p.recompute == Recompute::Full || p.recompute == Recompute::SelectiveOp) && !m.isBare()) {
        ParallelConfig none = p;
        none.recompute = Recompute::None;
        const auto rerun = [&](LayerKind kind) {
            const double kept = p.recompute == Recompute::SelectiveOp
                                    ? activationBytesPerLayer(m, p, kind, fp8Inputs)
                                    : 0.0;
            return std::max(0.0, activationBytesPerLayer(m, none, kind, fp8Inputs) - kept);
        };
        mem.recomputeLayer = rerun(LayerKind::Moe);
        if (mem.firstDenseLayersOnRank > 0)
            mem.recomputeLayer = std::max(mem.recomputeLayer, rerun(LayerKind::Dense));
    }
    mem.temporary = mem.zero3Gather + mem.gradBuckets + mem.logits + mem.fp8WeightCache +
                    mem.autocastWeightCopies + mem.recomputeLayer;

    const double attributed =
        mem.parameters + mem.gradients + mem.optimizer + mem.activations + mem.temporary;
    mem.overhead = a.runtimeOverheadBytes + a.fragmentation * attributed;
    return mem;
}

} // namespace shardscope
