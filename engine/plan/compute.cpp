#include "compute.h"

#include "eager_traffic.h"
#include "layout.h"

#include <algorithm>

namespace shardscope {

TokenFlops tokenFlops(const ModelSpec& m, const ParallelConfig& p, const Assumptions& a) {
    TokenFlops f;
    if (m.isBare()) {
        f.model = f.hardware = 6.0 * *m.bareParams; // only the 6N rule is possible
        if (p.recompute == Recompute::Full)
            f.hardware = 8.0 * *m.bareParams;
        return f;
    }
    const ParamCount c = countParameters(m);
    const double causal = a.causalAttention ? 0.5 : 1.0;
    f.layerMatmul = 2.0 * (c.attentionPerLayer + c.mlpActivePerLayer);
    f.denseLayerMatmul = 2.0 * (c.attentionPerLayer + c.denseMlpPerLayer);
    // Padded to capacity, each routed expert multiplies cf times its share of the tokens.
    const double routedActive =
        m.moe.enabled() ? c.routedExpertsPerLayer / m.moe.experts * m.moe.topK : 0.0;
    f.layerMatmulRun = f.layerMatmul + 2.0 * routedActive * (p.expertLoad() - 1.0);
    // Q K^T over the score width and the weights times V over the value width: 4 s q when both
    // are q wide.
    f.attentionCore = 2.0 * m.seqLen * double(m.scoreDim() + m.valueDim()) * causal;
    f.lmHead = 2.0 * double(m.vocab) * m.hidden;
    // Each MTP module runs one more layer of the model's last kind, its 2h -> h projection and
    // the output head again.
    const double moeLayers = m.trainedLayers(LayerKind::Moe);
    const double denseLayers = m.trainedLayers(LayerKind::Dense);
    const double layers = moeLayers + denseLayers;
    f.mtpExtra = m.mtpModules * (2.0 * 2.0 * m.hidden * m.hidden + f.lmHead);
    const double projections = moeLayers * f.layerMatmul + denseLayers * f.denseLayerMatmul;
    const double projectionsRun = moeLayers * f.layerMatmulRun + denseLayers * f.denseLayerMatmul;
    const double forward = projections + layers * f.attentionCore + f.lmHead + f.mtpExtra;
    f.model = 3.0 * forward;
    f.hardware = f.model + 3.0 * (projectionsRun - projections);
    if (p.recompute == Recompute::Full) // every layer, or the share recomputeLayers picks
        f.hardware += fullRecomputeShare(m, p) * (projectionsRun + layers * f.attentionCore);
    else if (recomputesAttentionCore(p))
        f.hardware += layers * f.attentionCore;
    if (p.recompute == Recompute::SelectiveOp) { // dense layers only (validate's recompute-op)
        f.layerRecomputed = opLevelRecompute(m, p).rerunFlops;
        f.hardware += denseLayers * f.layerRecomputed;
    }
    return f;
}

OpLevelRecompute opLevelRecompute(const ModelSpec& m, const ParallelConfig& p) {
    const double t = std::max(1, p.tp);
    const double sp = p.sequenceParallel ? t : 1.0;
    const std::vector<Projection> whole = denseLayerProjections(m);
    const std::vector<Projection> onRank = denseLayerProjections(m, p.tp);
    OpLevelRecompute r;
    for (std::size_t i = 0; i < onRank.size(); ++i) {
        const Projection& x = onRank[i];
        if (opRecomputesProjection(i)) {
            r.rerunFlops += 2.0 * whole[i].in * whole[i].out;
            r.rerunInputs += x.in / (x.rowParallel ? t : sp);
        } else {
            r.keptOutputs += x.rowParallel ? double(m.hidden) : x.out / t;
        }
    }
    return r;
}

std::vector<Projection> denseLayerProjections(const ModelSpec& m, int tp) {
    const double h = m.hidden, q = double(m.qDim()), kv = kvDimOverTpGroup(m, tp);
    const double out = double(m.valueDim()), ffn = double(m.layerFfn(LayerKind::Dense));
    if (m.gated())
        return {{h, q}, {h, kv}, {h, kv}, {out, h, true}, {h, ffn}, {h, ffn}, {ffn, h, true}};
    return {{h, q + 2.0 * kv}, {out, h, true}, {h, ffn}, {ffn, h, true}};
}

double conventionFlopsPerToken(const ModelSpec& m, FlopsConvention c) {
    if (m.isBare())
        return 6.0 * *m.bareParams;
    const double h = m.hidden, l = m.layers, s = m.seqLen, V = double(m.vocab);
    const double attending = l + m.mtpModules; // the MTP modules' layers attend too
    switch (c) {
    case FlopsConvention::Causal:
        return 6.0 * matmulParamsPerToken(m) + 6.0 * attending * m.attentionWidth() * s;
    case FlopsConvention::Palm:
        return 6.0 * matmulParamsPerToken(m) + 12.0 * attending * m.attentionWidth() * s;
    case FlopsConvention::Megatron:
        return 96.0 * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
    case FlopsConvention::SixN:
        return 6.0 * countParameters(m).total;
    }
    return 0.0;
}

namespace {

// Why attention's core runs as batched GEMMs rather than a fused kernel, or nothing when a fused
// kernel runs it: fused kernels run in 16 bits (FP8 policies keep attention in bf16).
const char* whyNoFusedKernel(const PlanInputs& in) {
    const Precision c = in.parallel.precision.compute;
    if (!in.parallel.flashAttention)
        return "unfused attention: the scores are GEMMs and memory passes";
    if (c != Precision::Bf16 && c != Precision::Fp16 && c != Precision::Fp8)
        return "no fused attention kernel outside 16-bit and FP8 training";
    if (in.model.isBare())
        return "a bare model has no attention";
    return nullptr;
}

} // namespace

AttentionSpeed attentionSpeedFor(const PlanInputs& in) {
    if (whyNoFusedKernel(in))
        return {};
    const ModelSpec& m = in.model;
    const ParallelConfig& p = in.parallel;
    // MLA's kernel runs at the query-key width a head (its values are narrower).
    const int headDim = m.mla.enabled() ? m.mla.qkHeadDim() : m.effectiveHeadDim();
    return attentionSpeed(p.attentionKernel, in.cluster.gpu, double(m.seqLen) / std::max(1, p.cp),
                          headDim, in.assume.causalAttention);
}

std::string describeAttentionSpeedFor(const PlanInputs& in) {
    if (const char* why = whyNoFusedKernel(in))
        return why;
    return describeAttentionSpeed(attentionSpeedFor(in), in.cluster.gpu);
}

double moePermuteBytes(const ModelSpec& m, LayerKind kind, const ParallelConfig& p) {
    if (!m.routes(kind))
        return 0.0;
    const double sp = p.sequenceParallel ? std::max(1, p.tp) : 1;
    const double permuteTerms = 2.0 * (1.0 + m.moe.topK * p.expertLoad());
    return 3.0 * p.precision.activationBytes() * permuteTerms * m.hidden / sp;
}

double elementwiseOpBytes(const PlanInputs& in, LayerKind kind) {
    const ModelSpec& m = in.model;
    const ParallelConfig& p = in.parallel;
    if (m.isBare())
        return 0.0;
    // Eager PyTorch: op by op (eager_traffic.h), the forward again where full or op-level
    // recompute reruns it.
    if (!p.fusedElementwise) {
        const EagerTraffic eager = eagerLayerTraffic(m, kind, p);
        return elementwiseForwardRuns(p) * eager.forward + eager.backward;
    }
    // Fused kernels: norms and adds on the hidden state (split by TP only under SP) and the
    // activation function on each MLP's FFN width (split by TP), forward once and backward
    // twice. The count predates recompute and does not repeat the forward.
    const double t = std::max(1, p.tp);
    const double sp = p.sequenceParallel ? t : 1.0;
    const double ffn = double(m.layerFfn(kind)) * mlpsPerToken(m, kind, p);
    return 3.0 * p.precision.activationBytes() *
           (in.assume.elementwiseHiddenTerms * m.hidden / sp +
            in.assume.elementwiseFfnTerms * ffn / t);
}

double layerElementwiseBytes(const PlanInputs& in, LayerKind kind) {
    const ModelSpec& m = in.model;
    const ParallelConfig& p = in.parallel;
    if (m.isBare())
        return 0.0;
    const bool fp8 = p.precision.fp8On(in.cluster.gpu);
    const double t = std::max(1, p.tp);
    const double ab = p.precision.activationBytes();
    const double sp = p.sequenceParallel ? t : 1.0;
    const double experts = mlpsPerToken(m, kind, p);
    const double ffn = double(m.layerFfn(kind)) * experts;
    // An MoE layer also permutes each token into its k expert slots (read h, write k h) and
    // un-permutes the experts' outputs back (read k h, write h): Megatron-Core's permute and
    // unpermute, with the slots padded to the capacity factor.
    const double bytes = elementwiseOpBytes(in, kind) + moePermuteBytes(m, kind, p);
    // Unfused attention writes the scores, then masks, softmaxes and drops them out in separate
    // passes: about six reads or writes of every score, forward once and backward twice.
    const double scoreBytesPerToken =
        p.flashAttention ? 0.0 : 3.0 * 6.0 * ab * m.heads * double(m.seqLen) / t;
    // FP8 casts: each projection's input is cast in the forward (read bf16, write fp8: 3
    // bytes an element) and its output gradient in the backward; a recomputed forward casts
    // again. An MoE layer's up projection takes each token once per expert it goes to, and
    // its down projection's output gradient comes back once per expert.
    double casts = 0;
    if (fp8) {
        const double ffnIn = ffn * (m.activation == Activation::Gelu ? 1.0 : 2.0);
        const double hiddenTerms = 1.0 + experts; // attention's input, the MLP's inputs
        // The attention projections' other inputs (MLA's latents, the output projection's)
        // and their outputs' gradients (Q, K and V, or MLA's up and down projections').
        const MlaSpec& mla = m.mla;
        const double latents = mla.enabled() ? double(mla.qLoraRank + mla.kvLoraRank) / sp : 0.0;
        const double qkvOut = mla.enabled()
                                  ? double(m.scoreDim()) +
                                        double(m.heads) * (mla.qkNopeHeadDim + mla.vHeadDim) +
                                        mla.qLoraRank + mla.kvLoraRank + mla.qkRopeHeadDim
                                  : double(m.qDim()) + 2.0 * double(m.kvDim());
        const double forwardInputs =
            hiddenTerms * m.hidden / sp + latents + (double(m.valueDim()) + ffn) / t;
        const double backwardGrads = hiddenTerms * m.hidden / sp + (qkvOut + ffnIn) / t;
        // Op-level recompute casts the inputs of the projections it reruns again.
        const double rerunInputs =
            p.recompute == Recompute::SelectiveOp ? opLevelRecompute(m, p).rerunInputs : 0.0;
        casts = 3.0 * (forwardRuns(p) * forwardInputs + rerunInputs + backwardGrads);
    }
    return bytes + scoreBytesPerToken + casts;
}

double lossBytesPerToken(const PlanInputs& in) {
    const ModelSpec& m = in.model;
    const ParallelConfig& p = in.parallel;
    if (m.isBare())
        return 0.0;
    const double ab = p.precision.activationBytes();
    // Eager: cast up (ab + 4) unless already fp32, log-softmax (4 + 4), the zeroed gradient (4),
    // log-softmax's backward (4 + 4 + 4), cast down (4 + ab).
    const double casts = ab < 4.0 ? 2.0 * (ab + 4.0) : 0.0;
    const double perLogit = p.fusedElementwise ? 3.0 * ab : casts + 8.0 + 4.0 + 12.0;
    return (1.0 + m.mtpModules) * perLogit * double(m.vocab) / std::max(1, p.tp);
}

GemmEfficiency gemmEfficiencyOf(const GpuSpec& gpu, Precision precision, const Assumptions& a) {
    GemmEfficiency g;
    // The precision whose tensor cores run it: FP8 on a GPU without FP8 runs at the bf16 peak.
    g.fp8 = gpu.peakPrecision(precision) == Precision::Fp8;
    g.calibrated = g.fp8 ? a.fp8GemmEfficiency : a.gemmEfficiency;
    g.ceiling = gpu.ceiling(precision);
    g.reference = g.fp8 ? a.fp8ReferenceCeiling : a.gemmReferenceCeiling;
    if (g.ceiling <= 0) {
        g.ceiling = gpu.ceiling(Precision::Bf16);
        g.bf16Stands = g.ceiling > 0;
        g.reference = g.fp8 ? a.fp8ReferenceBf16Ceiling : a.gemmReferenceCeiling;
    }
    g.value =
        g.ceiling > 0 && g.reference > 0 ? g.calibrated * g.ceiling / g.reference : g.calibrated;
    return g;
}

StageCompute stageCompute(const PlanInputs& in, int stage) {
    return stageCompute(in, stage, tokenFlops(in.model, in.parallel, in.assume));
}

StageCompute stageCompute(const PlanInputs& in, int stage, const TokenFlops& f) {
    const ModelSpec& m = in.model;
    const ParallelConfig& p = in.parallel;
    const Assumptions& a = in.assume;
    // Full recompute of some of the stage's layers: each layer's work is a recomputed layer's or
    // a kept one's, and the head's is the same in both.
    if (recomputesSomeLayers(m, p)) {
        const RecomputeMix mix = recomputeMixOf(p);
        PlanInputs every = in, none = in;
        every.parallel = mix.every;
        none.parallel = mix.none;
        const StageCompute x = stageCompute(every, stage, f), y = stageCompute(none, stage, f);
        const double share = fullRecomputeShare(m, p, stage);
        const auto mixed = [&](double StageCompute::*part) {
            return share * x.*part + (1.0 - share) * y.*part;
        };
        StageCompute s;
        s.flops = mixed(&StageCompute::flops);
        s.gemmSeconds = mixed(&StageCompute::gemmSeconds);
        s.elementwiseSeconds = mixed(&StageCompute::elementwiseSeconds);
        s.attentionSeconds = mixed(&StageCompute::attentionSeconds);
        return s;
    }
    // FP8 runs the layers' projections in FP8 and everything else (attention's core, the head)
    // in bf16; other policies run every GEMM at their compute precision.
    const bool fp8 = p.precision.fp8On(in.cluster.gpu);
    const GpuSpec& gpu = in.cluster.gpu;
    const Precision gemmPrecision = fp8 ? Precision::Bf16 : p.precision.compute;
    const double peak = gpu.peak(gemmPrecision) * gemmEfficiency(gpu, gemmPrecision, a);
    const double projectionPeak =
        fp8 ? gpu.peak(Precision::Fp8) * gemmEfficiency(gpu, Precision::Fp8, a) : peak;
    const double t = std::max(1, p.tp), cp = std::max(1, p.cp);
    const double tokens = double(m.seqLen) * p.microBatch; // one microbatch, before CP splits it

    StageCompute s;
    if (m.isBare()) { // no architecture to split: every FLOP at the policy's GEMM rate
        s.flops = f.hardware * tokens / (t * std::max(1, p.pp) * cp);
        s.gemmSeconds = projectionPeak > 0 ? s.flops / projectionPeak : 0.0;
        return s;
    }
    const StageLayers kinds = stageLayers(m, p, stage);
    const int layers = kinds.total();
    // Forward, backward (twice the forward) and a recomputed forward where the policy runs one:
    // full recompute repeats the projections and the core, selective only the core.
    // Op-level recompute reruns every second projection of each (dense) layer.
    const double projectionRuns = forwardRuns(p) + 2.0;
    const double coreRuns = 3.0 + (recomputesAttentionCore(p) ? 1.0 : 0.0);
    const double share = tokens / (t * cp);
    const double projectionFlops =
        projectionRuns * share * (kinds.moe * f.layerMatmulRun + kinds.dense * f.denseLayerMatmul) +
        share * kinds.dense * f.layerRecomputed;
    const double coreFlops = layers * coreRuns * f.attentionCore * share;
    const double headFlops = stage == p.pp - 1 ? 3.0 * (f.lmHead + f.mtpExtra) * share : 0.0;
    s.flops = projectionFlops + coreFlops + headFlops;
    // A fused kernel runs attention's core at its own measured speed, forward (again where
    // recomputed) and backward, whose 2.5 x the forward FLOPs count the recomputed scores; a CP
    // rank's kernel sees its slice of the sequence. Elsewhere the core runs as GEMMs.
    const AttentionSpeed kernel = attentionSpeedFor(in);
    const double bf16Peak = in.cluster.gpu.peak(Precision::Bf16);
    if (kernel.measured && peak > 0 && projectionPeak > 0 && bf16Peak > 0) {
        const double forwardRuns = coreRuns - 2.0;
        s.attentionSeconds = layers * f.attentionCore * share / bf16Peak *
                             (forwardRuns / kernel.forward + 2.5 / kernel.backward);
    } else if (peak > 0) {
        s.attentionSeconds = coreFlops / (peak * kernel.gemmShare);
    }
    if (peak > 0 && projectionPeak > 0)
        s.gemmSeconds = projectionFlops / projectionPeak + headFlops / peak + s.attentionSeconds;

    double stageBytesPerToken = stage == p.pp - 1 ? lossBytesPerToken(in) : 0.0;
    for (const LayerKind kind : {LayerKind::Dense, LayerKind::Moe})
        if (kinds.of(kind) > 0)
            stageBytesPerToken += kinds.of(kind) * layerElementwiseBytes(in, kind);
    const double bandwidth = in.cluster.gpu.hbmBandwidth * a.memoryEfficiency;
    s.elementwiseSeconds =
        bandwidth > 0 ? (stageBytesPerToken * tokens / cp + weightCastBytes(in, stage)) / bandwidth
                      : 0.0;
    return s;
}

double weightCastBytes(const PlanInputs& in, int stage) {
    const ModelSpec& m = in.model;
    const ParallelConfig& p = in.parallel;
    if (!p.precision.autocastsWeights() || m.isBare())
        return 0.0;
    // The layers' weights cast per forward run, the head's (which no recompute reruns) once.
    const GemmWeights w = gemmWeightsOnStage(m, countParameters(m), p, stage);
    // Full recompute of some of the stage's layers casts theirs twice.
    double runs = p.recompute == Recompute::Full ? 1.0 + fullRecomputeShare(m, p, stage) : 1.0;
    if (p.recompute == Recompute::SelectiveOp) { // the projections it reruns cast again
        const std::vector<Projection> projections = denseLayerProjections(m, p.tp);
        double all = 0, rerun = 0;
        for (std::size_t i = 0; i < projections.size(); ++i) {
            const double weights = projections[i].in * projections[i].out;
            all += weights;
            rerun += opRecomputesProjection(i) ? weights : 0.0;
        }
        runs += all > 0 ? rerun / all : 0.0;
    }
    return 6.0 * ((runs + 1.0) * w.layers + 2.0 * w.head);
}

} // namespace shardscope
