#include "inputs.h"

#include "core/error.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "core/units.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace shardscope::cli {

void addModelFlags(CLI::App& app, ModelFlags& f) {
    app.add_option("-m,--model", f.preset, "Model preset id or name (see `models`)")
        ->capture_default_str();
    app.add_option("--params", f.params,
                   "Bare parameter count, e.g. 7e9 (model-state memory only; no architecture)");
    app.add_option("--hf-config", f.hfConfig, "Hugging Face config.json to import");
    app.add_option("--seq", f.seqLen, "Training sequence length (default: the model's)");
}

void addClusterFlags(CLI::App& app, ClusterFlags& f) {
    app.add_option("-g,--gpu", f.gpu, "GPU preset id or name (see `gpus`)")->capture_default_str();
    app.add_option("--gpus-per-node", f.gpusPerNode, "GPUs per node")->capture_default_str();
    app.add_option("--nodes", f.nodes, "Number of nodes")->capture_default_str();
    app.add_option("--inter-bw", f.interGBps,
                   "Network bandwidth per GPU across nodes, GB/s (default: the GPU's generation, "
                   "25 for A100 with 200 Gb/s HDR, 50 for H100 with 400 Gb/s NDR; see `gpus`)");
    app.add_option("--mtbf-hours", f.mtbfHours, "Mean time between failures of one GPU, hours");
    app.add_option("--ckpt-bw", f.checkpointGBps, "Checkpoint storage write bandwidth, GB/s");
    app.add_option("--price", f.price, "Price per GPU-hour");
}

void addLayoutFlags(CLI::App& app, LayoutFlags& f, bool searchOnly) {
    if (!searchOnly) {
        app.add_option("--dp", f.dp, "Data-parallel degree (default: gpus / (tp pp cp))");
        app.add_option("--tp", f.tp, "Tensor-parallel degree")->capture_default_str();
        app.add_option("--pp", f.pp, "Pipeline-parallel degree")->capture_default_str();
        app.add_option("--vpp", f.vpp, "Virtual stages per pipeline rank (interleaved)")
            ->capture_default_str();
        app.add_option("--cp", f.cp, "Context-parallel degree")->capture_default_str();
        app.add_option("--ep", f.ep,
                       "Expert-parallel degree: each MoE layer's experts split over ep ranks "
                       "(adds no GPUs)")
            ->capture_default_str();
        app.add_option("--etp", f.etp,
                       "Expert tensor-parallel degree: each expert's matrices split over etp "
                       "ranks; etp x ep must divide tp*dp*cp (Megatron's MoE parallel folding). "
                       "0 = follow tp")
            ->capture_default_str();
        app.add_option("--capacity-factor", f.capacityFactor,
                       "MoE expert capacity factor with padding (Megatron's "
                       "--moe-expert-capacity-factor): each expert takes this many times its "
                       "balanced share of tokens; 0 = dropless")
            ->capture_default_str();
        app.add_option("--zero", f.zero, "ZeRO stage 0-3 (3 = FSDP full shard)")
            ->capture_default_str();
        app.add_option("--shard-group", f.shardGroup,
                       "Hybrid sharding (HSDP, FSDP's hybrid_shard; MiCS): ZeRO shards over groups "
                       "of this many dp*cp ranks and all-reduces across them (0 = all dp*cp)")
            ->capture_default_str();
        app.add_option("--sp", f.sp, "Sequence parallelism (true/false)")->capture_default_str();
        app.add_option("--schedule", f.schedule,
                       "naive, gpipe, 1f1b, interleaved, zero-bubble (ZB-H1), zb-1p, zb-2p")
            ->capture_default_str();
        app.add_option("--micro-batch", f.microBatch, "Sequences per microbatch")
            ->capture_default_str();
        app.add_option("--recompute", f.recompute,
                       "none, selective (Megatron's: attention's core), selective-op "
                       "(torchtitan's: every second projection) or full")
            ->capture_default_str();
        app.add_option("--recompute-layers", f.recomputeLayers,
                       "With --recompute full: how many layers of each virtual pipeline stage "
                       "recompute, the first ones (Megatron-LM's --recompute-method block); "
                       "the others keep their activations (0 = every layer)")
            ->capture_default_str();
    }
    app.add_option("--global-batch", f.globalBatch, "Sequences per optimizer step")
        ->capture_default_str();
    static const std::string precisionHelp =
        "Precision policy: " + precisionPolicyNames() + " (see docs/cli.md)";
    app.add_option("--precision", f.precision, precisionHelp)->capture_default_str();
    app.add_option("--optimizer", f.optimizer, "adamw or sgd")->capture_default_str();
    app.add_option("--offload", f.offload, "Offload optimizer state to CPU memory (true/false)")
        ->capture_default_str();
    app.add_option("--flash-attention", f.flashAttention,
                   "Fused attention: no stored or re-read attention scores (true/false)")
        ->capture_default_str();
    app.add_option("--attention-kernel", f.attentionKernel,
                   "Which fused attention kernel runs (with --flash-attention): flash1 "
                   "(FlashAttention-1 or a Triton kernel of its algorithm, at half FA2's speed), "
                   "flash2, flash3 (Hopper only), cudnn, or auto (cuDNN on Hopper, as "
                   "Transformer Engine picks; FlashAttention-2 before it); its speed is the "
                   "kernel's published one (docs/validation.md)")
        ->capture_default_str();
    app.add_option("--fused-elementwise", f.fusedElementwise,
                   "Norms, adds, rotary and the activation run as fused kernels (torch.compile, "
                   "Megatron's and Transformer Engine's fused kernels); false: PyTorch eager, one "
                   "kernel an op, as torchtitan without --training.compile (true/false)")
        ->capture_default_str();
    app.add_option("--overlap-grad-reduce", f.overlapGradReduce,
                   "Reduce gradients during the last backward, bucket by bucket, as PyTorch DDP, "
                   "FSDP and Megatron's --overlap-grad-reduce do; false: after it (true/false)")
        ->capture_default_str();
    app.add_option("--overlap-param-gather", f.overlapParamGather,
                   "Gather ZeRO's parameters ahead of use (FSDP prefetch, Megatron's "
                   "--overlap-param-gather); false: exposed (true/false)")
        ->capture_default_str();
    app.add_option("--backward-prefetch", f.backwardPrefetch,
                   "Under ZeRO-3, when the backward gathers the next layer (FSDP's "
                   "BackwardPrefetch): pre, before the current layer's gradients (hidden; FSDP's "
                   "default, FSDP2, DeepSpeed); post, after them (the backward's gathers exposed; "
                   "Composer's default); none, no prefetch (the backward's gathers and the "
                   "reduce-scatters exposed). The forward's gathers are prefetched in all three")
        ->capture_default_str();
    app.add_option("--tp-comm-overlap", f.tpCommOverlap,
                   "Hide TP's all-gathers and reduce-scatters behind the GEMMs (Megatron's "
                   "--tp-comm-overlap, Transformer Engine userbuffers; needs --sp) (true/false)")
        ->capture_default_str();
    app.add_option("--ep-comm-overlap", f.epCommOverlap,
                   "Hide the MoE all-to-alls behind another microbatch's compute (Megatron-Core's "
                   "--overlap-moe-expert-parallel-comm, the combined 1F1B schedule; needs ep > 1, "
                   "no full recompute, vpp > 1 with pp > 1) (true/false)")
        ->capture_default_str();
    app.add_option("--embedding-in-pipeline-split", f.embeddingInPipelineSplit,
                   "The first pipeline stage holds one layer fewer for the embedding (Megatron's "
                   "--account-for-embedding-in-pipeline-split) (true/false)")
        ->capture_default_str();
    app.add_option("--loss-in-pipeline-split", f.lossInPipelineSplit,
                   "The last pipeline stage holds one layer fewer for the output head and loss "
                   "(Megatron's --account-for-loss-in-pipeline-split) (true/false)")
        ->capture_default_str();
    app.add_option("--tokens", f.trainTokens, "Tokens to train on, for time and cost")
        ->capture_default_str();
}

namespace {

// "0", "-5", "1e+30": the value as given, not std::to_string's "0.000000".
std::string shortNumber(double v) {
    std::ostringstream s;
    s << v;
    return s.str();
}

// A positive number up to `most`: far past any real value, so that what is derived from it
// stays finite (1e308 GB/s made a checkpoint time of 0 and a JSON null).
void requirePositive(double v, const std::string& flag, const std::string& example,
                     double most = std::numeric_limits<double>::max()) {
    if (!std::isfinite(v) || v <= 0)
        throw InputError(flag + " must be a positive number (got " + shortNumber(v) + "), e.g. " +
                         flag + " " + example);
    if (v > most)
        throw InputError(flag + " must be no larger than " + shortNumber(most) + " (got " +
                         shortNumber(v) + "), e.g. " + flag + " " + example);
}

// Bandwidths in GB/s and prices per GPU-hour: a million is past every link and every price.
constexpr double kMostRate = 1e6;

} // namespace

ModelSpec buildModel(const ModelFlags& f) {
    ModelSpec m;
    if (!f.hfConfig.empty()) {
        const nlohmann::json config = readJsonFile(f.hfConfig);
        m = modelFromHuggingFace(config, huggingFaceModelName(config, f.hfConfig));
    } else if (f.params) {
        requirePositive(*f.params, "--params", "7e9");
        if (*f.params > 1e15)
            throw InputError("--params " + shortNumber(*f.params) +
                             " is beyond any trainable model; give a count such as 7e9");
        m.name = formatCount(*f.params) + " parameters";
        m.bareParams = *f.params;
        m.seqLen = 4096;
    } else {
        m = findModelPreset(f.preset);
    }
    if (f.seqLen) {
        requirePositive(*f.seqLen, "--seq", "8192");
        m.seqLen = *f.seqLen;
    }
    return m;
}

ClusterSpec buildCluster(const ClusterFlags& f) {
    requirePositive(f.gpusPerNode, "--gpus-per-node", "8");
    requirePositive(f.nodes, "--nodes", "8");
    if (f.interGBps)
        requirePositive(*f.interGBps, "--inter-bw", "50", kMostRate);
    if (double(f.gpusPerNode) * f.nodes > 1e7)
        throw InputError(
            "--gpus-per-node x --nodes is more than ten million GPUs; check the flags");
    ClusterSpec c =
        makeCluster(findGpuPreset(f.gpu), f.gpusPerNode, f.nodes, f.interGBps.value_or(0) * 1e9);
    if (f.mtbfHours != 0) {
        requirePositive(f.mtbfHours, "--mtbf-hours", "45600", 1e9);
        c.gpuMtbfHours = f.mtbfHours;
    }
    if (f.checkpointGBps != 0) {
        requirePositive(f.checkpointGBps, "--ckpt-bw", "100", kMostRate);
        c.checkpointBandwidth = f.checkpointGBps * 1e9;
    }
    if (f.price != 0) {
        requirePositive(f.price, "--price", "2.5", kMostRate);
        c.gpuHourCost = f.price;
    }
    return c;
}

ParallelConfig buildLayout(const LayoutFlags& f, const ClusterSpec& cluster) {
    ParallelConfig p;
    p.tp = f.tp;
    p.pp = f.pp;
    p.vpp = f.vpp;
    p.cp = f.cp;
    p.ep = f.ep;
    p.etp = f.etp;
    if (!std::isfinite(f.capacityFactor) || f.capacityFactor < 0)
        throw InputError("--capacity-factor must be 0 (dropless) or a positive number, e.g. 1.25");
    p.expertCapacityFactor = f.capacityFactor;
    p.zero = f.zero;
    p.shardGroup = f.shardGroup;
    p.sequenceParallel = f.sp && f.tp > 1;
    p.schedule = scheduleFromString(f.schedule);
    if (f.vpp > 1 && f.schedule == "1f1b")
        p.schedule = PipelineSchedule::Interleaved; // --vpp implies the interleaved schedule
    p.microBatch = f.microBatch;
    p.globalBatch = f.globalBatch;
    p.recompute = recomputeFromString(f.recompute);
    p.recomputeLayers = f.recomputeLayers;
    p.precision = precisionPolicyFromString(f.precision);
    p.optimizer = optimizerFromString(f.optimizer);
    p.offloadOptimizer = f.offload;
    p.flashAttention = f.flashAttention;
    p.attentionKernel = attentionKernelFromString(f.attentionKernel);
    p.fusedElementwise = f.fusedElementwise;
    p.overlapGradReduce = f.overlapGradReduce;
    p.overlapParamGather = f.overlapParamGather;
    p.backwardPrefetch = backwardPrefetchFromString(f.backwardPrefetch);
    p.tpCommOverlap = f.tpCommOverlap;
    p.epCommOverlap = f.epCommOverlap;
    p.embeddingInPipelineSplit = f.embeddingInPipelineSplit;
    p.lossInPipelineSplit = f.lossInPipelineSplit;
    if (f.dp < 0)
        throw InputError("--dp must be at least 1 (got " + std::to_string(f.dp) +
                         "); leave it out to use every GPU: gpus / (tp pp cp)");
    const long long inner = 1LL * std::max(1, f.tp) * std::max(1, f.pp) * std::max(1, f.cp);
    p.dp = f.dp > 0 ? f.dp : int(std::max(1LL, cluster.worldSize() / inner));
    return p;
}

TrainConfig buildTrain(const LayoutFlags& f) {
    if (!std::isfinite(f.trainTokens) || f.trainTokens < 0)
        throw InputError("--tokens must be zero or positive, e.g. --tokens 15e12");
    TrainConfig t;
    t.trainTokens = f.trainTokens;
    return t;
}

} // namespace shardscope::cli
