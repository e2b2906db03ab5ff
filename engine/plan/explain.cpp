#include "explain.h"

#include "compute.h"
#include "core/error.h"
#include "core/units.h"
#include "eager_traffic.h"
#include "formulas.h"
#include "layout.h"
#include "sched/zero_bubble_auto.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace shardscope {

namespace {

struct FigureInfo {
    FigureId id;
    const char* key;
    const char* label;
};

constexpr std::array kFigures = {
    FigureInfo{FigureId::ParamsTotal, "params.total", "Parameters (total)"},
    FigureInfo{FigureId::ParamsPerGpu, "params.per_gpu", "Parameters per GPU"},
    FigureInfo{FigureId::MemParameters, "memory.parameters", "Weights"},
    FigureInfo{FigureId::MemGradients, "memory.gradients", "Gradients"},
    FigureInfo{FigureId::MemOptimizer, "memory.optimizer", "Optimizer state"},
    FigureInfo{FigureId::MemActivations, "memory.activations", "Activations"},
    FigureInfo{FigureId::MemTemporary, "memory.temporary", "Temporary buffers"},
    FigureInfo{FigureId::MemOverhead, "memory.overhead", "Runtime overhead"},
    FigureInfo{FigureId::MemTotal, "memory.total", "Memory per GPU"},
    FigureInfo{FigureId::FlopsPerToken, "flops.per_token", "Training FLOPs per token"},
    FigureInfo{FigureId::FlopsPerStep, "flops.per_step", "Training FLOPs per step"},
    FigureInfo{FigureId::ComputeTime, "time.compute", "Compute time per step"},
    FigureInfo{FigureId::ElementwiseTraffic, "compute.elementwise_bytes", "Elementwise traffic"},
    FigureInfo{FigureId::LossTraffic, "compute.loss_bytes", "Loss traffic"},
    FigureInfo{FigureId::CommDP, "comm.dp", "Data-parallel communication"},
    FigureInfo{FigureId::CommTP, "comm.tp", "Tensor-parallel communication"},
    FigureInfo{FigureId::CommPP, "comm.pp", "Pipeline communication"},
    FigureInfo{FigureId::CommCP, "comm.cp", "Context-parallel communication"},
    FigureInfo{FigureId::CommEP, "comm.ep", "Expert-parallel communication"},
    FigureInfo{FigureId::Bubble, "pipeline.bubble", "Pipeline bubble"},
    FigureInfo{FigureId::HostBound, "time.host_bound", "Host-bound wait"},
    FigureInfo{FigureId::StepTime, "time.step", "Step time"},
    FigureInfo{FigureId::TokensPerSecond, "throughput.tokens_per_s", "Throughput"},
    FigureInfo{FigureId::TflopsPerGpu, "throughput.tflops_per_gpu", "Model FLOP/s per GPU"},
    FigureInfo{FigureId::Mfu, "throughput.mfu", "MFU"},
    FigureInfo{FigureId::HardwareFlopsPerGpu, "throughput.hardware_flops_per_gpu",
               "Hardware FLOP/s per GPU"},
    FigureInfo{FigureId::Hfu, "throughput.hfu", "HFU"},
    FigureInfo{FigureId::TimeToTrain, "train.time", "Time to train"},
    FigureInfo{FigureId::GpuHours, "train.gpu_hours", "GPU-hours"},
    FigureInfo{FigureId::Cost, "train.cost", "Cost to train"},
    FigureInfo{FigureId::JobMtbf, "reliability.mtbf", "Job mean time between failures"},
    FigureInfo{FigureId::CheckpointWrite, "reliability.checkpoint_write", "Checkpoint write time"},
    FigureInfo{FigureId::CheckpointInterval, "reliability.checkpoint_interval",
               "Optimal checkpoint interval"},
    FigureInfo{FigureId::TrainingFraction, "reliability.training_fraction",
               "Expected training-time fraction"},
};

const FigureInfo& info(FigureId id) {
    return *std::find_if(kFigures.begin(), kFigures.end(),
                         [id](const FigureInfo& f) { return f.id == id; });
}

// Three significant digits, except a whole number from 1000 to a million (a count of norm
// weights, a hidden size), which rounding would misstate: 8192, not 8190.
std::string n(double v) {
    if (v == std::floor(v) && std::fabs(v) >= 1000 && std::fabs(v) < 1e6)
        return std::to_string(static_cast<long long>(v));
    return formatNumber(v);
}
std::string b(double v) {
    return formatBytes(v);
}
// Whole counts print as themselves ("3", not "3.00"); fractions keep three significant digits.
std::string count(double v) {
    return v == std::floor(v) && std::fabs(v) < 1e15 ? std::to_string(static_cast<long long>(v))
                                                     : formatNumber(v);
}
constexpr const char* kBubbleFormula =
    "bubble / (m x t_mb + bubble); bubble = (p-1) t_mb (GPipe, 1F1B), (p-1) t_mb / v "
    "(interleaved), (p-1) t_mb / 3 (zero bubble ZB-H1), (p-1) m t_mb (naive); ZB-1p and ZB-2p: "
    "(makespan - 3m) t_mb / 3 of their programs with F = B = W, or under optimizer "
    "post-validation (span - 3m) t_mb / 3, span the longest rank's time from its first pass to its "
    "last";
constexpr const char* kBubbleSource =
    "Huang et al. 2019 (GPipe); Narayanan et al. 2021 (interleaved); Qi et al. 2023, 2024 (zero "
    "bubble)";

std::string s(double v) {
    return formatSeconds(v);
}

constexpr const char* kKorthikanti =
    "Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models, "
    "Table 2 (generalised to GQA, gated MLPs and no-dropout models)";
constexpr const char* kZero = "Rajbhandari et al. 2020, ZeRO: Memory Optimizations Toward Training "
                              "Trillion Parameter Models, Section 5";
constexpr const char* kHybrid =
    "PyTorch FSDP ShardingStrategy.HYBRID_SHARD (Zhao et al. 2023, PyTorch FSDP, Section 3.2.1); "
    "Zhang et al. 2022, MiCS";
constexpr const char* kAlphaBeta =
    "Ring collectives, alpha-beta model (Thakur et al. 2005; NCCL bus bandwidth, a ring per NIC "
    "across nodes), link figures from the GPU and cluster presets";

constexpr const char* kOverlapSlowdown =
    "Lee et al. 2025, compute-communication overlap on A100/H100: compute slows 18.9 %";

// What overlaps on this axis, as the layout's framework flags set it, in few words.
std::string overlapAssumed(const ParallelConfig& p, Axis axis) {
    switch (axis) {
    case Axis::TP:
        return p.tpCommOverlap && p.sequenceParallel ? "behind the GEMMs" : "not overlapped";
    case Axis::CP:
        return "behind attention";
    case Axis::PP:
        return "2(p-1) hops wait";
    case Axis::EP:
        return p.epCommOverlap ? "beside another microbatch" : "not overlapped";
    case Axis::DP:
        break;
    }
    // FSDP without backward prefetch: each reduce-scatter queues before the next gather.
    if (p.backwardGathersWait() && p.backwardPrefetch == BackwardPrefetch::None)
        return "forward prefetch; backward gathers and reduce-scatters exposed (no backward "
               "prefetch)";
    std::string text = !p.overlapGradReduce ? "reduce after backward"
                       : p.zero >= 3        ? "reduce in each backward"
                                            : "reduce in last backward";
    if (p.zero >= 1)
        text += !p.overlapParamGather ? ", gather exposed"
                : p.zero <= 2         ? ", gather in next forward"
                : p.backwardPrefetch == BackwardPrefetch::Pre
                    ? ", prefetch"
                    : ", forward prefetch, backward gathers exposed (FSDP BACKWARD_POST)";
    return text;
}

std::string zeroDivisor(int stage, int needed, int shards) {
    return stage >= needed
               ? " / " + std::to_string(shards) + " (ZeRO-" + std::to_string(stage) + ")"
               : "";
}

// Model FLOPs per token in a paper's convention (--flops-convention), beside the planner's own.
void explainConvention(Explanation& x, const PlanInputs& in, const TokenFlops& f) {
    const ModelSpec& m = in.model;
    const std::string L = std::to_string(m.layers), s = std::to_string(m.seqLen);
    const std::string tail =
        " (convention " + toString(in.assume.flopsConvention) +
        "; the planner's own count, 6 x matmul params + causal attention: " + n(f.model) +
        "; what runs, with recompute: " + n(f.hardware) + ")";
    switch (in.assume.flopsConvention) {
    case FlopsConvention::Palm:
        x.formula = "6 x matmul_params + 12 x L x q x s (the whole attention square; q the mean "
                    "of the query-key and value widths where MLA's differ)";
        x.substituted = "6 x " + n(matmulParamsPerToken(m)) + " + 12 x " + L + " x " +
                        n(m.attentionWidth()) + " x " + s + " = " + n(x.value) + tail;
        x.source = "Chowdhery et al. 2022 (PaLM), Appendix B";
        break;
    case FlopsConvention::Megatron:
        x.formula = "96 x l x h^2 x (1 + s/6h + V/16lh) (full recompute included)";
        x.substituted = "96 x " + L + " x " + std::to_string(m.hidden) + "^2 x (1 + " + s +
                        "/(6 x " + std::to_string(m.hidden) + ") + " + std::to_string(m.vocab) +
                        "/(16 x " + L + " x " + std::to_string(m.hidden) + ")) = " + n(x.value) +
                        tail;
        x.source = "Narayanan et al. 2021 (Megatron-LM at scale), Appendix: FLOP calculation";
        break;
    case FlopsConvention::SixN:
        x.formula = "6 x N (every parameter; no attention term)";
        x.substituted = "6 x " + n(countParameters(m).total) + " = " + n(x.value) + tail;
        x.source = "Kaplan et al. 2020, Section 2.1";
        break;
    case FlopsConvention::Causal:
        break;
    }
}

// The parameters a rank keeps a category's state for, times its bytes a parameter: whole, over
// ZeRO's shards from stage `needed` on, and where the experts have a mesh of their own (ep, or
// an etp apart from tp) the experts' part over the ranks holding the same experts.
std::string stateTerm(const ParallelConfig& p, const MemoryBreakdown& m, int needed,
                      const std::string& perParam) {
    if (p.zero < needed || !p.expertsApart() || m.expertParamsOnRank <= 0)
        return n(m.paramsOnRank) + " x " + perParam + zeroDivisor(p.zero, needed, p.zeroShards());
    return "(" + n(m.paramsOnRank - m.expertParamsOnRank) + " / " + std::to_string(p.zeroShards()) +
           " + " + n(m.expertParamsOnRank) + " experts' / " +
           std::to_string(p.expertDataParallel()) + ") x " + perParam + " (ZeRO-" +
           std::to_string(p.zero) + "; the experts' over the tp*dp*cp/(etp*ep) ranks holding them)";
}

void explainMemory(Explanation& x, const PlanInputs& in, const Estimate& e) {
    const ParallelConfig& p = in.parallel;
    const MemoryBreakdown& m = e.memory;
    const PrecisionPolicy& prec = p.precision;
    const std::string stage = "pipeline stage " + std::to_string(e.worstStage) + ", " +
                              n(m.paramsOnRank) + " parameters on this rank";
    x.unit = "B";
    switch (x.id) {
    case FigureId::MemParameters:
        x.value = m.parameters;
        x.formula =
            "params_on_rank x weight_bytes [/ shard group (dp*cp unless hybrid) under ZeRO-3]";
        x.substituted = stateTerm(p, m, 3, n(prec.weightBytesOn(in.cluster.gpu)) + " B");
        if (prec.fp8WeightsOn(in.cluster.gpu)) {
            const double nonLayer = nonLayerParamsOnStage(in.model, e.params, p, e.worstStage);
            x.formula += "; FP8 weights: 1 B in the layers, + 1 B for each embedding, head and "
                         "final-norm parameter, which stay bf16";
            x.substituted += " + " + n(nonLayer) + " x 1 B" +
                             zeroDivisor(p.zero, 3, p.zeroShards()) +
                             " (the layers' weights in FP8; the embeddings, head and final norm "
                             "bf16)";
        }
        x.substituted += " = " + b(m.parameters) + " (" + stage + ")";
        x.source = kZero;
        if (prec.fp8WeightsOn(in.cluster.gpu))
            x.source += "; FP8 weights: Megatron-Core --fp8-param-gather (Megatron-Bridge "
                        "fp8_param_gather), 1 B a parameter with no bf16 copy";
        break;
    case FigureId::MemGradients:
        x.value = m.gradients;
        x.formula =
            "params_on_rank x grad_bytes [/ shard group (dp*cp unless hybrid) under ZeRO-2/3]";
        x.substituted = stateTerm(p, m, 2, n(prec.gradBytes()) + " B") + " = " + b(m.gradients) +
                        (p.offloadOptimizer && p.zero >= 2 ? " (offloaded to the host)" : "");
        x.source = kZero;
        break;
    case FigureId::MemOptimizer:
        x.value = m.optimizer;
        x.formula = "params_on_rank x (master_bytes + optimizer_state_bytes) [/ shard group (dp*cp "
                    "unless hybrid) under "
                    "ZeRO>=1]";
        x.substituted =
            stateTerm(p, m, 1,
                      "(" + n(prec.masterBytes()) + " + " + n(optimizerStateBytes(p.optimizer)) +
                          ") B") +
            " = " + b(m.optimizer + m.cpuOffloaded) +
            (p.offloadOptimizer ? " (offloaded: " + b(m.cpuOffloaded) + " in host memory)" : "");
        x.source = std::string(kZero) + "; AdamW keeps m and v in fp32 (8 B), SGD momentum 4 B";
        break;
    case FigureId::MemActivations: {
        // Full recompute keeps only each layer's bf16 input, FP8 or not.
        const bool fp8Inputs = keepsFp8ProjectionInputs(in) && p.recompute != Recompute::Full;
        x.value = m.activations;
        x.formula =
            "layers_on_rank x act_per_layer x in_flight_microbatches + stage_extras; "
            "act_per_layer = s*b/cp x [(4h x a_bytes + 2h dropout) / sp + "
            "(a_bytes (2q + 2kv) + ffn terms + attention scores) / tp]" +
            std::string(in.model.mla.enabled()
                            ? "; with MLA q, k and v a head's query-key and value widths "
                              "and the latents (2 r_q + 2 r_kv + d_r) a_bytes / sp"
                            : "") +
            std::string(fp8Inputs
                            ? "; under FP8 the QKV and first MLP inputs are kept as their 1-byte "
                              "FP8 casts (2h x 1 B of the 4h), the down projection's input too "
                              "(f x 1 B of the ffn terms), and the output projection's cast "
                              "(q x 1 B / tp) beside attention's a_bytes output"
                            : "") +
            std::string(p.recompute == Recompute::SelectiveOp
                            ? "; under op-level recompute act_per_layer = s*b/cp x a_bytes x "
                              "(h / sp + the outputs of projections 1, 3, 5, 7 in forward order "
                              "(column-parallel / tp, row-parallel h) + the fused attention "
                              "kernel's output v / tp)"
                            : "") +
            std::string(recomputesSomeLayers(in.model, p)
                            ? "; full recompute of the first " + std::to_string(p.recomputeLayers) +
                                  " layers of each virtual stage: act_per_layer = r x (s*b/cp x "
                                  "h x a_bytes / sp) + (1 - r) x act_per_layer without "
                                  "recompute, r = " +
                                  n(fullRecomputeShare(in.model, p, e.worstStage)) +
                                  " of this stage's layers"
                            : "");
        x.substituted =
            (m.firstDenseLayersOnRank > 0
                 ? "(" + std::to_string(m.layersOnRank - m.firstDenseLayersOnRank) + " x " +
                       b(m.activationsPerLayer) + " + " + std::to_string(m.firstDenseLayersOnRank) +
                       " dense x " + b(m.firstDenseActivationsPerLayer) + ")"
                 : std::to_string(m.layersOnRank) + " x " + b(m.activationsPerLayer)) +
            " x " + n(m.inflightMicrobatches) + " + " + b(m.stageExtraActivations) + " = " +
            b(m.activations) + " (recompute " + toString(p.recompute) +
            (recomputesSomeLayers(in.model, p)
                 ? " of " + std::to_string(p.recomputeLayers) + " layers a virtual stage"
                 : "") +
            ", schedule " + toString(p.schedule) + ")";
        x.source =
            std::string(kKorthikanti) +
            (p.recompute == Recompute::SelectiveOp
                 ? "; op-level recompute: torchtitan parallelize_llama.py, _custom_policy "
                   "(keeps mm outputs but every second, and SDPA's)"
                 : "") +
            (fp8Inputs ? "; FP8 inputs: Transformer Engine 1.x _LayerNormLinear, _LayerNormMLP "
                         "and _Linear save ln_out, the activation's output and the input as "
                         "FP8"
                       : "") +
            "; in-flight microbatches: GPipe m, 1F1B p, interleaved p(1 + (p-1)/(p v)), "
            "ZB-H1 p, ZB-1p and ZB-2p their programs' peak (Qi et al.)";
        if (in.model.isBare())
            x.substituted = "not computed: a bare parameter count has no architecture (give a "
                            "preset or a config.json)";
        break;
    }
    case FigureId::MemTemporary:
        x.value = m.temporary;
        x.formula = "ZeRO-3 gathered largest module (weights + grads) + gradient buckets + fp32 "
                    "logits (last stage) + fp8 weight copies + autocast's bf16 weight copies + one "
                    "recomputed layer";
        x.substituted = b(m.zero3Gather) + " + " + b(m.gradBuckets) + " + " + b(m.logits) + " + " +
                        b(m.fp8WeightCache) + " + " + b(m.autocastWeightCopies) + " + " +
                        b(m.recomputeLayer) + " = " + b(m.temporary) +
                        (prec.fp8WeightsOn(in.cluster.gpu)
                             ? " (no FP8 weight copies: the weights are FP8 themselves)"
                             : "");
        x.source =
            "DeepSpeed estimate_zero3_model_states_mem_needs (4 x largest layer); PyTorch DDP "
            "bucket_cap_mb = 25; Megatron-LM theoretical_memory_usage (logits)";
        if (prec.autocastsWeights())
            x.source += "; autocast over fp32 weights: each GEMM keeps its bf16 weight copy for "
                        "the backward (2 B a weight of every layer not recomputed, per microbatch "
                        "in flight, and of the head)";
        break;
    case FigureId::MemOverhead:
        x.value = m.overhead;
        x.formula = "runtime_overhead + fragmentation x (everything else)";
        x.substituted = b(in.assume.runtimeOverheadBytes) + " + " + n(in.assume.fragmentation) +
                        " x " + b(m.total() - m.overhead) + " = " + b(m.overhead);
        x.source = "Assumption: CUDA context, cuBLAS workspace and NCCL buffers (~1 GB) and "
                   "caching-allocator fragmentation (~5 %); see docs/formulas.md";
        break;
    default: {
        x.value = m.total();
        x.formula = "weights + gradients + optimizer + activations + temporary + overhead";
        x.substituted = b(m.parameters) + " + " + b(m.gradients) + " + " + b(m.optimizer) + " + " +
                        b(m.activations) + " + " + b(m.temporary) + " + " + b(m.overhead) + " = " +
                        b(m.total()) + " of " + describeCapacity(in, e) + " on each " +
                        in.cluster.gpu.name + ": " +
                        (e.fits ? "fits, " + b(e.capacity - m.total()) + " free"
                                : "does not fit, " + b(m.total() - e.capacity) + " over");
        x.source = "Sum of the categories above";
    }
    }
}

void explainComm(Explanation& x, const PlanInputs& in, const Estimate& e, Axis axis) {
    const AxisComm& c = e.axis(axis);
    const ParallelConfig& p = in.parallel;
    x.value = c.seconds;
    x.unit = "s";
    const std::string where = std::string(c.crossesNodes ? "across nodes" : "inside a node") +
                              " at " + n(c.bandwidth / 1e9) + " GB/s effective, " + s(c.latency) +
                              " latency";
    // PP's transfers wait only at the pipeline's fill and drain; the others may overlap.
    const bool overlaps = axis != Axis::PP && c.window > 0;
    const std::string tail = "; " + overlapAssumed(p, axis) +
                             (overlaps ? ", window " + s(c.window) : "") + " -> exposed " +
                             s(c.exposed);
    x.source = kAlphaBeta;
    if (overlaps)
        x.source += std::string("; ") + kOverlapSlowdown;
    // What overlaps adds its time beyond its window, and at least k/(1+k) of it: compute beside
    // it runs 1 + k times slower (estimate.cpp, exposedBeside).
    const std::string overlapRule =
        "; traffic t that overlaps a compute window w adds max(t - w, t k/(1+k)) (k = " +
        n(in.assume.overlapSlowdown * 100) +
        " %; traffic sharing a window is summed, ZeRO-3's backward holds its gathers and "
        "scatters, only its scatters under backward prefetch post and neither under none), "
        "traffic that does not overlap all of t";
    if (c.groupSize <= 1) {
        x.formula = "no " + toString(axis) + " group";
        x.substituted = toString(axis) + " degree is 1: no communication";
        return;
    }
    switch (axis) {
    case Axis::DP:
        if (p.backwardGathersWait())
            x.source += "; PyTorch FSDP docs, BackwardPrefetch: BACKWARD_POST gathers the next "
                        "layer after the current gradients, NONE overlaps neither";
        if (p.hybridShard()) {
            const std::string groups = std::to_string(p.zeroReplicas()) + " groups of " +
                                       std::to_string(p.zeroShards()) + " ranks";
            x.formula =
                "hybrid sharding, " + groups + ": " +
                (p.zero <= 2 ? std::string("in the group, reduce-scatter(grads) + "
                                           "all-gather(weights), once per step")
                             : std::string("in the group, per microbatch 2 "
                                           "all-gathers(weights) + reduce-scatter(grads)")) +
                "; across the groups, all-reduce(grads / group) once per step";
            x.source += "; " + std::string(kZero) + "; " + kHybrid;
            break;
        }
        x.formula = p.zero == 0 ? "all-reduce(grads): 2(n-1)/n x params x grad_bytes, once per step"
                    : p.zero <= 2
                        ? "reduce-scatter(grads) + all-gather(weights): (n-1)/n x params x "
                          "(grad_bytes + weight_bytes), once per step"
                        : "per microbatch: 2 all-gathers(weights) + reduce-scatter(grads)";
        x.source += "; " + std::string(kZero);
        break;
    case Axis::TP:
        x.formula =
            "per layer and microbatch: 4 all-reduces (6 with full recompute) of s*b/cp x h "
            "x a_bytes" +
            std::string(p.sequenceParallel ? ", as all-gather + reduce-scatter under SP" : "") +
            (in.model.moe.enabled()
                 ? "; an MoE layer's MLP pair runs in the experts' etp group instead (none at etp "
                   "1), of the tokens its ranks received: etp x s*b/cp/tp x top_k x h x a_bytes "
                   "with EP, etp x s*b/cp/tp x h x a_bytes without; shared experts keep a tp pair"
                 : "");
        x.source += "; Shoeybi et al. 2019 (Megatron-LM), Section 3";
        if (in.model.moe.enabled())
            x.source += "; Liu et al. 2025 (MoE Parallel Folding), Megatron-Core token dispatchers";
        break;
    case Axis::PP:
        x.formula = "per microbatch and chunk: send activations forward and gradients backward, "
                    "s*b/cp x h x a_bytes [/ tp under SP]";
        x.source += "; Narayanan et al. 2021, Section 2.2";
        break;
    case Axis::CP:
        x.formula =
            "per layer and microbatch: 3 (cp-1) ring hops of K and V (2 x s*b/cp x kv_dim/tp "
            "x a_bytes)";
        x.source += "; Liu et al. 2023 (Ring Attention)";
        break;
    case Axis::EP:
        x.formula =
            "per MoE layer and microbatch: 4 all-to-alls (6 with full recompute: dispatch and "
            "combine, forward and backward) of s*b/cp [/ tp under SP] x top_k x h x a_bytes, "
            "(ep-1)/ep of it sent; each takes latency + max(part to the node's other members / "
            "NVLink, part to other nodes / the rank's NIC)" +
            std::string(p.epCommOverlap
                            ? "; overlapped (--overlap-moe-expert-parallel-comm, the combined 1F1B "
                              "schedule) with another microbatch's compute, compute x (m-1)/m: "
                              "exposed = max(t - window, t k/(1+k))"
                            : "; not overlapped (Megatron-Core's default), so all of it is "
                              "exposed");
        x.source = "Lepikhin et al. 2020 (GShard), Section 3; Megatron-Core MoE (alltoall token "
                   "dispatcher; the experts on tp*dp*cp ranks as etp x ep x copies, MoE parallel "
                   "folding, Liu et al. 2025); link figures from the GPU and cluster presets";
        break;
    }
    if (axis != Axis::PP && axis != Axis::EP)
        x.formula += overlapRule;
    x.substituted = std::to_string(c.collectives) + " transfers, " + b(c.bytes) +
                    " sent per rank per step, group of " + std::to_string(c.groupSize) + " " +
                    where + " -> " + s(c.seconds) + tail;
    if (axis == Axis::DP) {
        const PrecisionPolicy& prec = p.precision;
        const GpuSpec& gpu = in.cluster.gpu;
        x.substituted += "; gradients at " + n(prec.gradReduceBytes()) +
                         " B a parameter, weights at " +
                         (prec.fp8WeightsOn(gpu)
                              ? std::string("1 B in the layers (FP8, --fp8-param-gather) and 2 B "
                                            "in the embeddings, head and final norm")
                              : n(prec.weightBytesOn(gpu)) + " B");
    }
}

// One layer of the model's main kind (an MoE model's MoE layer), on one rank: each term with its
// bytes, so that they add up to the total.
void explainElementwiseTraffic(Explanation& x, const PlanInputs& in) {
    const ModelSpec& m = in.model;
    const ParallelConfig& p = in.parallel;
    x.unit = "B";
    if (m.isBare()) {
        x.formula = "a bare parameter count has no layers";
        return;
    }
    const LayerKind kind = m.moe.enabled() ? LayerKind::Moe : LayerKind::Dense;
    x.value = layerElementwiseBytes(in, kind);
    const double runs = forwardRuns(p);
    std::vector<std::string> terms;
    if (p.fusedElementwise) {
        x.formula = "3 x activation_bytes x (" + n(in.assume.elementwiseHiddenTerms) +
                    " h / sp + " + n(in.assume.elementwiseFfnTerms) +
                    " ffn / tp): fused kernels read and write each norm's, add's and the "
                    "activation's tensors once forward, twice backward";
        terms.push_back("fused kernels " + b(elementwiseOpBytes(in, kind)));
        x.source = "Counted from a Llama-style layer (Assumptions::elementwiseHiddenTerms)";
    } else {
        x.formula = "forward_runs x forward + backward, op by op as PyTorch eager runs them";
        terms.push_back("forward_runs " + count(runs));
        forEachEagerTerm(m, kind, p, [&](const EagerTerm& term) {
            terms.push_back(std::string(term.name) + " " + b(term.forward) + " + " +
                            b(term.backward));
        });
        x.source = "PyTorch eager autograd, op by op, for torchtitan's Llama layer and nanoGPT's "
                   "GPT layer; checked against PyTorch's dispatcher (tests/plan/oracle/"
                   "eager_traffic_oracle.py)";
    }
    if (m.routes(kind)) {
        x.formula += " + MoE permute and unpermute, 3 x activation_bytes x 2 (1 + top_k x "
                     "capacity) h / sp";
        terms.push_back("MoE permutation " + b(moePermuteBytes(m, kind, p)));
    }
    if (!p.flashAttention)
        x.formula += " + unfused attention's score passes, 18 x activation_bytes x heads x s / tp";
    if (p.precision.fp8On(in.cluster.gpu))
        x.formula += " + FP8 casts of each projection's input and output gradient";
    const double rest = x.value - elementwiseOpBytes(in, kind) - moePermuteBytes(m, kind, p);
    if (rest > 0)
        terms.push_back("score passes and FP8 casts " + b(rest));
    std::string list;
    for (const std::string& term : terms)
        list += term + "; ";
    x.substituted = list + "total " + b(x.value) + " a token a layer";
    if (recomputesSomeLayers(m, p)) { // the layer above is one full recompute reruns
        PlanInputs kept = in;
        kept.parallel = recomputeMixOf(p).none;
        x.substituted += " that full recompute reruns; a layer that keeps its activations " +
                         b(layerElementwiseBytes(kept, kind));
    }
}

} // namespace

bool figureApplies(const Estimate& e, FigureId id) {
    return id != FigureId::HostBound || e.hostMicrobatch > 0;
}

const std::vector<FigureId>& allFigures() {
    static const std::vector<FigureId> ids = [] {
        std::vector<FigureId> v;
        for (const FigureInfo& f : kFigures)
            v.push_back(f.id);
        return v;
    }();
    return ids;
}

std::string describeCapacity(const PlanInputs& in, const Estimate& e) {
    if (in.assume.memoryHeadroom <= 0)
        return formatBytes(e.capacity);
    return formatBytes(e.capacity) + " (" + formatBytes(e.gpuMemory) + " less a " +
           formatPercent(in.assume.memoryHeadroom) + " headroom)";
}

std::string figureKey(FigureId id) {
    return info(id).key;
}

FigureId figureFromKey(const std::string& key) {
    for (const FigureInfo& f : kFigures)
        if (key == f.key)
            return f.id;
    std::string known;
    for (const FigureInfo& f : kFigures)
        known += std::string(known.empty() ? "" : ", ") + f.key;
    throw InputError("unknown figure '" + key + "'; known figures: " + known);
}

Explanation explain(const PlanInputs& in, const Estimate& e, FigureId id) {
    Explanation x;
    x.id = id;
    x.key = info(id).key;
    x.label = info(id).label;
    const ModelSpec& m = in.model;
    const ParallelConfig& p = in.parallel;
    const ClusterSpec& cl = in.cluster;
    const int world = p.worldSize();
    const double peak = cl.gpu.peak(p.precision.compute);
    // FLOP/s per GPU and the utilization of the peak, for model or hardware FLOPs.
    auto perGpuRate = [&](Explanation& out, const std::string& kind, double flopsPerStep,
                          double rate, const char* source) {
        out.value = rate;
        out.unit = "FLOP/s";
        out.formula = kind + "_flops_per_step / step_time / gpus";
        out.substituted = n(flopsPerStep) + " / " + s(e.stepTime) + " / " + std::to_string(world) +
                          " = " + formatRate(rate);
        out.source = source;
    };
    auto utilization = [&](Explanation& out, const std::string& kind, double flopsPerStep,
                           double fraction) {
        out.value = fraction;
        out.unit = "fraction";
        out.formula = kind + "_flops_per_step / (gpus x dense_peak x step_time)";
        out.substituted = n(flopsPerStep) + " / (" + std::to_string(world) + " x " +
                          formatRate(peak) + " x " + s(e.stepTime) +
                          ") = " + formatPercent(fraction);
        out.source = "Chowdhery et al. 2022 (PaLM), Appendix B";
    };

    switch (id) {
    case FigureId::ParamsTotal:
        x.value = e.params.total;
        x.unit = "params";
        if (m.isBare()) {
            x.formula = "given as a bare count";
            x.substituted = n(e.params.total) + " (the quick form omits the architecture: no "
                                                "activations, TP/PP/CP rules or per-layer FLOPs)";
        } else {
            const int dense = m.moe.enabled() ? m.denseLayerCount() : 0;
            x.formula = dense > 0 ? "embeddings + L x (attention + norms) + L_moe x mlp + "
                                    "L_dense x dense_mlp + final norm + lm_head"
                                  : "embeddings + L x (attention + mlp + norms) + final norm + "
                                    "lm_head";
            x.substituted =
                dense > 0 ? n(e.params.embeddings) + " + " + std::to_string(m.layers) + " x (" +
                                n(e.params.attentionPerLayer) + " + " + n(e.params.normsPerLayer) +
                                ") + " + std::to_string(m.moeLayerCount()) + " x " +
                                n(e.params.mlpPerLayer) + " + " + std::to_string(dense) + " x " +
                                n(e.params.denseMlpPerLayer) + " (the first dense layers)"
                          : n(e.params.embeddings) + " + " + std::to_string(m.layers) + " x (" +
                                n(e.params.attentionPerLayer) + " + " + n(e.params.mlpPerLayer) +
                                " + " + n(e.params.normsPerLayer) + ")";
            x.substituted += " + " + n(e.params.finalNorm) + " + " + n(e.params.lmHead);
            if (m.mtpModules > 0) {
                x.formula += " + MTP modules x (layer + 2 h^2 + 3 norms)";
                x.substituted += " + " + std::to_string(m.mtpModules) + " x " +
                                 n(e.params.mtpPerModule) + " (MTP)";
            }
            x.substituted += " = " + n(e.params.total) +
                             (m.moe.enabled() ? "; active per token " + n(e.params.active) : "");
        }
        x.source = m.source.empty() ? "Counted from the model's shapes" : m.source;
        break;
    case FigureId::ParamsPerGpu:
        x.value = p.zero >= 3
                      ? shardedParamsOnRank(p, e.memory.paramsOnRank, e.memory.expertParamsOnRank)
                      : e.memory.paramsOnRank;
        x.unit = "params";
        x.formula =
            "(layers_on_stage x layer/tp + embeddings/tp on the first stage + lm_head/tp on "
            "the last) [/ shard group (dp*cp unless hybrid) under ZeRO-3]";
        if (m.isBare()) {
            x.substituted = n(e.params.total) + " / (" + std::to_string(p.tp) + " x " +
                            std::to_string(p.pp) + ")";
        } else {
            // The terms paramsOnStage adds for the most loaded stage, each with its divisor.
            const std::string tp = std::to_string(std::max(1, p.tp));
            const int dense = e.memory.firstDenseLayersOnRank;
            x.substituted = std::to_string(e.memory.layersOnRank - dense) + " layers x " +
                            n(layerParamsPerTpRank(m, e.params, p.tp, p.ep, p.etp)) +
                            (p.expertsApart() ? " (a layer on a tp rank, its experts over ep " +
                                                    std::to_string(p.ep) + " x etp " +
                                                    std::to_string(p.expertTp()) + ")"
                                              : " (a layer on a tp rank)");
            if (dense > 0)
                x.substituted +=
                    " + " + std::to_string(dense) + " dense layers x " +
                    n(layerParamsPerTpRank(m, e.params, p.tp, p.ep, p.etp, LayerKind::Dense));
            if (e.worstStage == 0) {
                const double positions = e.params.embeddings - double(m.vocab) * m.hidden;
                x.substituted += " + " + n(e.params.embeddings - positions) + " / " + tp +
                                 (positions > 0 ? " + " + n(positions) + " positions" : "") +
                                 " (embeddings, stage 0)";
            }
            if (e.worstStage == p.pp - 1) {
                const double head = e.params.lmHead > 0
                                        ? e.params.lmHead
                                        : (p.pp > 1 ? double(m.vocab) * m.hidden : 0.0);
                if (head > 0)
                    x.substituted += " + " + n(head) + " / " + tp;
                x.substituted += " + " + n(e.params.finalNorm) + " (LM head, final norm, stage " +
                                 std::to_string(e.worstStage) + ")";
                if (m.mtpModules > 0) {
                    x.substituted += " + " + n(mtpParamsBesideLayers(m, e.params, p)) +
                                     " (MTP projections and norms" +
                                     (p.pp > 1 && e.params.lmHead > 0 ? ", embedding copy" : "") +
                                     "; their layers among the stage's)";
                }
            }
        }
        if (p.zero >= 3 && p.expertsApart())
            x.substituted = "(" + x.substituted + "), " + n(e.memory.expertParamsOnRank) +
                            " of them experts' over " + std::to_string(p.expertDataParallel()) +
                            " ranks and the rest over " + std::to_string(p.zeroShards()) +
                            " (ZeRO-3)";
        else if (p.zero >= 3 && p.zeroShards() > 1)
            x.substituted = "(" + x.substituted + ")" + zeroDivisor(p.zero, 3, p.zeroShards());
        x.substituted += " = " + n(x.value);
        x.source = "Megatron-LM theoretical_memory_usage.py (most loaded shard)";
        break;
    case FigureId::MemParameters:
    case FigureId::MemGradients:
    case FigureId::MemOptimizer:
    case FigureId::MemActivations:
    case FigureId::MemTemporary:
    case FigureId::MemOverhead:
    case FigureId::MemTotal:
        explainMemory(x, in, e);
        break;
    case FigureId::FlopsPerToken: {
        const TokenFlops f = tokenFlops(m, p, in.assume);
        x.value = e.modelFlopsPerToken;
        x.unit = "FLOP";
        if (in.assume.flopsConvention != FlopsConvention::Causal && !m.isBare()) {
            explainConvention(x, in, f);
            break;
        }
        const int dense = m.moe.enabled() ? m.denseLayerCount() : 0;
        const int mtp = m.mtpModules;
        x.formula =
            std::string(dense > 0
                            ? "3 x [L_moe x (2 x matmul_params_per_layer + attention) + L_dense x "
                              "(2 x dense_matmul_params_per_layer + attention) + 2 V h"
                            : "3 x [L x (2 x matmul_params_per_layer + attention) + 2 V h") +
            (mtp > 0 ? " + MTP modules x (4 h^2 + 2 V h)], the modules' layers among L" : "]") +
            (m.mla.enabled() ? "; attention = 2 s a (d_qk + d_v)" : "; attention = 4 s q") +
            std::string(in.assume.causalAttention ? " / 2 (causal half counted)"
                                                  : " (full square counted)");
        if (m.isBare()) {
            x.substituted = "6 x " + n(*m.bareParams) + " = " + n(f.model);
        } else {
            const int moeLayers = m.trainedLayers(LayerKind::Moe);
            const int denseLayers = m.trainedLayers(LayerKind::Dense);
            std::string terms;
            if (moeLayers > 0)
                terms += std::to_string(moeLayers) + " x (" + n(f.layerMatmul) + " + " +
                         n(f.attentionCore) + ")";
            if (denseLayers > 0)
                terms += std::string(terms.empty() ? "" : " + ") + std::to_string(denseLayers) +
                         (m.moe.enabled() ? " dense" : "") + " x (" + n(f.denseLayerMatmul) +
                         " + " + n(f.attentionCore) + ")";
            terms += " + " + n(f.lmHead);
            if (mtp > 0)
                terms += " + " + n(f.mtpExtra) + " (MTP projections and heads)";
            x.substituted =
                "3 x [" + terms + "] = " + n(f.model) + "; with recompute " + n(f.hardware) +
                (f.layerRecomputed > 0 ? " (op-level recompute reruns every second projection, " +
                                             n(f.layerRecomputed) + " a token a layer)"
                                       : "") +
                (recomputesSomeLayers(m, p) ? " (full recompute reruns the forward of " +
                                                  n(fullRecomputeShare(m, p)) + " of the layers)"
                                            : "");
        }
        x.source =
            "Kaplan et al. 2020 (6N); Narayanan et al. 2021 Appendix (attention and LM head)";
        break;
    }
    case FigureId::FlopsPerStep:
        x.value = e.modelFlopsPerStep;
        x.unit = "FLOP";
        x.formula = "flops_per_token x global_batch x seq_len";
        x.substituted = n(e.modelFlopsPerToken) + " x " + std::to_string(p.globalBatch) + " x " +
                        std::to_string(m.seqLen) + " = " + n(e.modelFlopsPerStep) +
                        " (hardware, with recompute: " + n(e.hardwareFlopsPerStep) + ")";
        x.source = "Kaplan et al. 2020";
        break;
    case FigureId::ComputeTime: {
        x.value = e.computeTime;
        x.unit = "s";
        const bool fp8 = p.precision.fp8On(cl.gpu);
        const Precision gemmPrecision = fp8 ? Precision::Bf16 : p.precision.compute;
        // The efficiency a GPU reaches, written out as gemmEfficiencyOf computed it.
        const auto efficiencyText = [&](Precision precision) {
            const GemmEfficiency g = gemmEfficiencyOf(cl.gpu, precision, in.assume);
            if (g.ceiling <= 0)
                return n(g.value) + " (no measured matmul ceiling: the calibrated efficiency)";
            return n(g.calibrated) + " x ceiling " + (g.bf16Stands ? "bf16 " : "") + n(g.ceiling) +
                   " / " + n(g.reference) + (g.fp8 ? " (H100's" : " (A100's") +
                   (g.bf16Stands ? (g.fp8 ? " bf16; its " : "; its ") + toString(precision) +
                                       " ceiling not measured)"
                                 : std::string(")")) +
                   " = " + n(g.value);
        };
        // Autocast's weight casts are memory-bound work of each microbatch, beside the rest.
        const std::string casts = p.precision.autocastsWeights() ? " + weight_cast_bytes" : "";
        x.formula = "microbatches x (stage_flops / (peak x gemm_efficiency) + (elementwise_bytes "
                    "+ loss_bytes" +
                    casts + ") / (HBM x memory_efficiency))";
        x.substituted = std::to_string(p.microbatches()) + " x " + s(e.microbatchCompute) +
                        " (peak " + formatRate(cl.gpu.peak(gemmPrecision)) + " x " +
                        efficiencyText(gemmPrecision) + ", HBM " + n(cl.gpu.hbmBandwidth / 1e9) +
                        " GB/s x " + n(in.assume.memoryEfficiency) + ") = " + s(e.computeTime);
        if (fp8) {
            // Only the projections run in FP8; attention's core and the head stay bf16.
            x.formula = "microbatches x (projection_flops / (fp8_peak x fp8_gemm_efficiency) + "
                        "attention_and_head_flops / (bf16_peak x gemm_efficiency) + (elementwise "
                        "+ fp8 cast bytes + loss bytes) / (HBM x memory_efficiency))";
            x.substituted =
                std::to_string(p.microbatches()) + " x " + s(e.microbatchCompute) + " (fp8 " +
                formatRate(cl.gpu.peak(Precision::Fp8)) + " x " + efficiencyText(Precision::Fp8) +
                ", bf16 " + formatRate(cl.gpu.peak(Precision::Bf16)) + " x " +
                efficiencyText(Precision::Bf16) + ", HBM " + n(cl.gpu.hbmBandwidth / 1e9) +
                " GB/s x " + n(in.assume.memoryEfficiency) + ") = " + s(e.computeTime);
        }
        x.source = "Roofline model (Williams et al. 2009); peak from " +
                   (cl.gpu.sources.count("peak_tflops") ? cl.gpu.sources.at("peak_tflops")
                                                        : std::string("the GPU preset"));
        // The GPU's own source names who measured it; `gpus --json` prints it whole.
        if (cl.gpu.sources.count("matmul_ceiling"))
            x.source += "; matmul ceiling as the GPU's sources say (the presets': Bekman's "
                        "Maximum Achievable Matmul FLOPS table)";
        if (m.moe.enabled()) {
            x.substituted += "; MoE: the routed experts' GEMMs on top-" +
                             std::to_string(m.moe.topK) + " copies of each token" +
                             (p.expertCapacityFactor > 0
                                  ? " padded to capacity factor " + n(p.expertCapacityFactor)
                                  : std::string(" (dropless, balanced)")) +
                             ", and the permutation into and out of the expert slots, 2 (1 + "
                             "top_k) x h elements a token, in the elementwise bytes";
            x.source += "; Megatron-Core MoE (token permute and unpermute, "
                        "--moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity)";
        }
        if (p.precision.autocastsWeights()) {
            x.substituted += "; autocast over fp32 weights: each GEMM's fp32 weight read and "
                             "written as bf16 per forward run, its gradient back to fp32 in the "
                             "backward, 6 B a parameter each: " +
                             b(weightCastBytes(in, e.slowStage)) + " a microbatch on stage " +
                             std::to_string(e.slowStage) + ", the slowest";
            x.source += "; PyTorch autocast casts fp32 weights on every use (torch.amp docs, "
                        "CUDA ops that can autocast to lower precision)";
        }
        {
            // Attention's core runs at its kernel's measured speed where one is held.
            const AttentionSpeed kernel = attentionSpeedFor(in);
            if (kernel.measured)
                x.formula += " + attention_core_flops x (forward_runs / fused_forward_rate + "
                             "2.5 / fused_backward_rate), the core taken out of the GEMM term";
            else if (kernel.gemmShare < 1.0)
                x.formula += ", attention's core at gemm_share x its GEMM rate";
            x.substituted += "; attention: " + describeAttentionSpeedFor(in);
            if (kernel.kernel == AttentionKernel::Flash1)
                x.source += "; Dao 2023, FlashAttention-2 (arXiv 2307.08691), Sec. 4.1: FA2 is "
                            "around 2x faster than FlashAttention";
        }
        x.formula += "; each GEMM efficiency = calibrated_efficiency x matmul_ceiling / "
                     "calibration_gpu_ceiling";
        break;
    }
    case FigureId::ElementwiseTraffic:
        explainElementwiseTraffic(x, in);
        break;
    case FigureId::LossTraffic: {
        x.value = lossBytesPerToken(in);
        x.unit = "B";
        if (m.isBare()) {
            x.formula = "vocab / tp x bytes an entry";
            x.substituted = "not computed: a bare parameter count has no output head";
            break;
        }
        const double perLogit =
            p.fusedElementwise
                ? 3.0 * p.precision.activationBytes()
                : x.value / (double(m.vocab) / std::max(1, p.tp)) / (1.0 + m.mtpModules);
        x.formula = p.fusedElementwise ? "vocab / tp x 3 x act_bytes (fused loss kernel)"
                                       : "vocab / tp x (casts + 24) B (eager fp32 loss)";
        x.substituted = std::to_string(m.vocab) + " / " + std::to_string(p.tp) + " x " +
                        n(perLogit) + " B" +
                        (m.mtpModules > 0 ? " x " + std::to_string(1 + m.mtpModules) + " losses"
                                          : std::string()) +
                        " = " + b(x.value);
        x.source = p.fusedElementwise ? "Assumed: one read forward, a read and a write backward"
                                      : "PyTorch's F.cross_entropy, op by op "
                                        "(loss_traffic_oracle.py)";
        break;
    }
    case FigureId::CommDP:
        explainComm(x, in, e, Axis::DP);
        break;
    case FigureId::CommTP:
        explainComm(x, in, e, Axis::TP);
        break;
    case FigureId::CommPP:
        explainComm(x, in, e, Axis::PP);
        break;
    case FigureId::CommCP:
        explainComm(x, in, e, Axis::CP);
        break;
    case FigureId::CommEP:
        explainComm(x, in, e, Axis::EP);
        break;
    case FigureId::Bubble:
        x.value = e.bubbleFraction;
        x.unit = "fraction";
        x.formula = kBubbleFormula;
        x.substituted = "p=" + std::to_string(p.pp) + ", m=" + std::to_string(p.microbatches()) +
                        ", v=" + std::to_string(p.vpp) + ", " + toString(p.schedule) + ": " +
                        s(e.bubbleTime) + " idle per step = " + formatPercent(e.bubbleFraction);
        if (isAutomaticZeroBubble(p.schedule))
            x.substituted += in.assume.optimizerPostValidation
                                 ? " (each rank from its first pass to its last: optimizer "
                                   "post-validation assumed)"
                                 : " (the makespan: the optimizer step waits for every rank; "
                                   "--post-validation assumes it does not)";
        x.source = kBubbleSource;
        break;
    case FigureId::HostBound:
        x.value = e.hostWait;
        x.unit = "s";
        x.formula = "microbatches x max(0, host_per_microbatch - (microbatch_compute + TP/CP/EP "
                    "waits per microbatch)); host_per_microbatch = MoE layers on the stage x "
                    "host time of one (dropless routing only)";
        if (!m.moe.enabled())
            x.substituted = "no MoE layers: no host roof";
        else if (p.expertCapacityFactor > 0)
            x.substituted = "token dropping (capacity factor " + n(p.expertCapacityFactor) +
                            "): no host sync, no host roof";
        else if (e.hostMicrobatch <= 0)
            x.substituted = "host time of an MoE layer set to 0 (--moe-host-ms): no host roof";
        else
            x.substituted = std::to_string(e.hostMoeLayers) + " MoE layers x " +
                            s(in.assume.moeLayerHostSeconds) + " = " + s(e.hostMicrobatch) +
                            " a microbatch on the host, against " + s(e.gpuMicrobatch) +
                            " on the GPU -> " + s(e.hostWait) + " waited per step" +
                            (e.hostWait > 0 ? " (host-bound)" : " (the GPU is the slower)");
        x.source = "Dropless routing syncs the host once per MoE layer (Megatron-Core "
                   "token_dispatcher.py); host time calibrated on Megatron-MoE-ModelZoo's "
                   "Qwen3-235B on 256 H100s (docs/validation.md)";
        break;
    case FigureId::StepTime:
        x.value = e.stepTime;
        x.unit = "s";
        if (e.mfuAssumed) {
            x.formula = "model_flops_per_step / (gpus x dense_peak x assumed_MFU)";
            x.substituted = n(e.modelFlopsPerStep) + " / (" + std::to_string(world) + " x " +
                            formatRate(peak) + " x " + formatPercent(in.assume.assumedMfu) +
                            ") = " + s(e.stepTime) + " (the step model gives " +
                            s(e.modelledStepTime) + ", MFU " + formatPercent(e.modelledMfu) + ")";
            x.source = "Assumed MFU (--mfu); the definition of MFU, Chowdhery et al. 2022 (PaLM), "
                       "Appendix B";
            break;
        }
        x.formula = "compute + exposed TP/CP/EP + host-bound wait + bubble + exposed PP + "
                    "exposed DP + optimizer";
        x.substituted = s(e.computeTime) + " + " + s(e.axis(Axis::TP).exposed) + " + " +
                        s(e.axis(Axis::CP).exposed) + " + " + s(e.axis(Axis::EP).exposed) + " + " +
                        s(e.hostWait) + " + " + s(e.bubbleTime) + " + " +
                        s(e.axis(Axis::PP).exposed) + " + " + s(e.axis(Axis::DP).exposed) + " + " +
                        s(e.optimizerTime) + " = " + s(e.stepTime);
        x.source = "Shardscope step model, docs/formulas.md";
        break;
    case FigureId::TokensPerSecond:
        x.value = e.tokensPerSecond;
        x.unit = "tokens/s";
        x.formula = "global_batch x seq_len / step_time";
        x.substituted = std::to_string(p.globalBatch) + " x " + std::to_string(m.seqLen) + " / " +
                        s(e.stepTime) + " = " + n(e.tokensPerSecond) + " tokens/s";
        x.source = "Definition";
        break;
    case FigureId::TflopsPerGpu:
        perGpuRate(x, "model", e.modelFlopsPerStep, e.tflopsPerGpu, "Definition");
        break;
    case FigureId::Mfu:
        utilization(x, "model", e.modelFlopsPerStep, e.mfu);
        x.substituted += "; model FLOPs counted in the " + toString(in.assume.flopsConvention) +
                         " convention (--flops-convention)";
        x.substituted += e.mfuAssumed ? " (assumed with --mfu; the step model gives " +
                                            formatPercent(e.modelledMfu) + ")"
                                      : " (HFU with recompute " + formatPercent(e.hfu) + ")";
        break;
    case FigureId::HardwareFlopsPerGpu:
        perGpuRate(x, "hardware", e.hardwareFlopsPerStep, e.hardwareFlopsPerGpu,
                   "Chowdhery et al. 2022 (PaLM), Appendix B: hardware FLOPs count recomputation");
        x.formula += " (recomputed forwards counted)";
        break;
    case FigureId::Hfu:
        utilization(x, "hardware", e.hardwareFlopsPerStep, e.hfu);
        break;
    case FigureId::TimeToTrain:
        x.value = e.timeToTrain;
        x.unit = "s";
        x.formula = "train_tokens / tokens_per_second";
        x.substituted = n(in.train.trainTokens) + " / " + n(e.tokensPerSecond) + " = " +
                        s(e.timeToTrain) + " (" + s(e.wallTimeToTrain) +
                        " of wall time with failures and checkpoints)";
        x.source = "Definition";
        break;
    case FigureId::GpuHours:
        x.value = e.gpuHours;
        x.unit = "GPU-h";
        x.formula = "time_to_train x gpus / 3600";
        x.substituted =
            s(e.timeToTrain) + " x " + std::to_string(world) + " = " + n(e.gpuHours) + " GPU-hours";
        x.source = "Definition";
        break;
    case FigureId::Cost:
        x.value = e.cost;
        x.unit = "$";
        x.formula = "gpu_hours x price_per_gpu_hour";
        x.substituted = n(e.gpuHours) + " x " + n(cl.gpuHourCost) + " = " + n(e.cost);
        x.source = "Price from the cluster settings";
        break;
    case FigureId::JobMtbf:
        x.value = e.jobMtbf;
        x.unit = "s";
        x.formula = "gpu_mtbf / gpus";
        x.substituted = n(cl.gpuMtbfHours) + " h / " + std::to_string(world) + " = " + s(e.jobMtbf);
        x.source = "Independent failures; default per-GPU MTBF from Llama 3's 466 interruptions in "
                   "54 days on 16,384 GPUs (Dubey et al. 2024, Section 3.3.4)";
        break;
    case FigureId::CheckpointWrite:
        x.value = e.checkpointWrite;
        x.unit = "s";
        x.formula = "params x (weight + master + optimizer bytes) / storage_bandwidth";
        x.substituted = b(e.checkpointBytes) + " / " + n(cl.checkpointBandwidth / 1e9) +
                        " GB/s = " + s(e.checkpointWrite);
        x.source = "Checkpoint holds weights and optimizer state, not gradients";
        break;
    case FigureId::CheckpointInterval:
        x.value = e.checkpointInterval;
        x.unit = "s";
        x.formula = "sqrt(2 x write x mtbf) - write";
        x.substituted = "sqrt(2 x " + s(e.checkpointWrite) + " x " + s(e.jobMtbf) + ") - " +
                        s(e.checkpointWrite) + " = " + s(e.checkpointInterval);
        x.source =
            "Young 1974; Daly 2006, A higher order estimate of the optimum checkpoint interval";
        break;
    case FigureId::TrainingFraction:
        x.value = e.trainingFraction;
        x.unit = "fraction";
        x.formula = "tau / (tau + write) x (1 - (restart + (tau + write)/2) / mtbf)";
        x.substituted = "tau " + s(e.checkpointInterval) + ", write " + s(e.checkpointWrite) +
                        ", restart " + s(cl.restartSeconds) + ", mtbf " + s(e.jobMtbf) + " -> " +
                        formatPercent(e.trainingFraction);
        x.source = "First-order checkpoint/restart model (Young 1974, Daly 2006)";
        break;
    }

    if (x.unit == "B")
        x.display = formatBytes(x.value);
    else if (x.unit == "s")
        x.display = formatSeconds(x.value);
    else if (x.unit == "fraction")
        x.display = formatPercent(x.value);
    else if (x.unit == "FLOP/s")
        x.display = formatRate(x.value);
    else if (x.unit == "params")
        x.display = formatCount(x.value);
    else
        x.display = formatNumber(x.value) + " " + x.unit;
    return x;
}

Explanation explainPipelineBubble(PipelineSchedule schedule, int p, int m, int v) {
    Explanation x;
    x.id = FigureId::Bubble;
    x.key = figureKey(FigureId::Bubble);
    x.label = "Pipeline bubble, " + toString(schedule) + " (closed form)";
    x.value = pipelineBubbleFraction(schedule, p, m, v);
    x.unit = "fraction";
    x.display = formatPercent(x.value);
    x.formula = kBubbleFormula;
    const double bubble = pipelineBubbleMicrobatches(schedule, p, m, v);
    x.substituted = "p = " + std::to_string(p) + ", m = " + std::to_string(m) +
                    ", v = " + std::to_string(v) + ": bubble = " + count(bubble) + " t_mb; " +
                    count(bubble) + " / (" + std::to_string(m) + " + " + count(bubble) +
                    ") = " + x.display;
    x.source = kBubbleSource;
    return x;
}

} // namespace shardscope
