// A parallelism layout, and the rules that make one valid for a model and a cluster.
#pragma once

#include "cluster_spec.h"
#include "model_spec.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace shardscope {

// ZeroBubble is the handcrafted ZB-H1 (Qi et al. 2024, Figure 3 top); ZeroBubble1p and
// ZeroBubble2p are the paper's automatic schedules, holding at most p and 2p microbatches a rank.
enum class PipelineSchedule {
    Naive,
    GPipe,
    OneFOneB,
    Interleaved,
    ZeroBubble,
    ZeroBubble1p,
    ZeroBubble2p
};
// Activation recompute. Selective is Megatron-LM's (Korthikanti et al. 2022): attention's core
// reruns in the backward instead of keeping its scores. SelectiveOp is torchtitan's op-level
// selective checkpointing: a dense layer keeps the output of every other projection (in forward
// order) and of attention's fused kernel, and reruns the rest of its forward in the backward.
// Full keeps only each layer's input and reruns its whole forward.
enum class Recompute { None, Selective, Full, SelectiveOp };
enum class Optimizer { AdamW, SgdMomentum };
// Which fused attention kernel runs attention's core (when flashAttention is on): its speed is
// its own, measured per GPU architecture (engine/plan/attention_kernels.h). Auto is what current
// frameworks pick: cuDNN's fused attention on Hopper (Transformer Engine's first choice),
// FlashAttention-2 on earlier GPUs. Flash1 is the first generation (flash-attn 1.x, and the
// Triton kernels written to its algorithm, as MPT's of 2023), which 2023's stacks still ran.
enum class AttentionKernel { Auto, Flash1, Flash2, Flash3, Cudnn };
// When ZeRO-3 (FSDP) gathers the next layer's weights in the backward, as PyTorch FSDP's
// BackwardPrefetch names it. Pre: before the current layer's gradients are computed, so the
// gather hides behind them (FSDP's BACKWARD_PRE, FSDP2, DeepSpeed ZeRO-3's prefetch). Post:
// after them; the gather cannot start until the current layer's unsharded weights are freed, so
// it waits in the open, while each reduce-scatter still hides behind the next layer's gradients
// (BACKWARD_POST, Composer's default). None: no prefetch; each gather also queues behind the
// previous reduce-scatter on NCCL's one stream, and neither overlaps (PyTorch's FSDP docs).
// The forward's gathers are prefetched in all three (FSDP's implicit forward prefetch).
enum class BackwardPrefetch { Pre, Post, None };

// Which dtypes hold weights, gradients and optimizer state. Compute precision selects the peak
// FLOP/s the planner uses; fp32Master keeps an fp32 copy of weights beside low-precision ones.
struct PrecisionPolicy {
    Precision compute = Precision::Bf16;
    Precision grads = Precision::Fp32;
    bool fp32Master = true;
    // FP8 training that keeps the working weights themselves in FP8 (Megatron-Core's
    // --fp8-param-gather, Megatron-Bridge's fp8_param_gather, NeMo's fp8_params): no bf16 copy
    // beside the FP8 one, the data-parallel weight gather moves 1 byte a parameter, and the
    // fp32 master copy in the optimizer is what the step updates. Only with compute FP8, and only
    // on a GPU that runs FP8; elsewhere the weights stay bf16.
    bool fp8Params = false;
    // PyTorch automatic mixed precision over fp32 weights (torch.autocast with fp32 parameters,
    // as DDP, and as FSDP with param_dtype fp32, e.g. Composer's "DEFAULT" in 2023): the working
    // weights are fp32 and are the optimizer's own (no separate master), data parallelism gathers
    // them at 4 bytes, and every GEMM casts its weight to bf16 again each time it runs, and its
    // weight gradient back to fp32. The gradients are held in fp32 too; `grads` is the dtype
    // they are reduced in. Only with compute bf16.
    bool fp32Weights = false;

    static PrecisionPolicy fp32() { return {Precision::Fp32, Precision::Fp32, false}; }
    static PrecisionPolicy bf16Mixed(bool fp32Grads = true) {
        return {Precision::Bf16, fp32Grads ? Precision::Fp32 : Precision::Bf16, true};
    }
    // PyTorch autocast over fp32 weights, gradients reduced in fp32 or bf16.
    static PrecisionPolicy autocast(bool fp32Grads = true) {
        return {Precision::Bf16, fp32Grads ? Precision::Fp32 : Precision::Bf16, false, false, true};
    }
    static PrecisionPolicy fp8Mixed() { return {Precision::Fp8, Precision::Fp32, true}; }
    static PrecisionPolicy fp8Weights() { return {Precision::Fp8, Precision::Fp32, true, true}; }

    // fp8Params means nothing without FP8 compute, fp32Weights nothing without bf16 compute, and
    // fp32Master nothing beside fp32 weights (they are the master): policies that differ only
    // there are the same.
    bool operator==(const PrecisionPolicy& o) const {
        return compute == o.compute && grads == o.grads &&
               (autocastsWeights() || fp32Master == o.fp32Master) &&
               (compute != Precision::Fp8 || fp8Params == o.fp8Params) &&
               (compute != Precision::Bf16 || fp32Weights == o.fp32Weights);
    }
    // Whether GEMMs cast fp32 weights to bf16 as they run (fp32Weights under bf16 compute).
    bool autocastsWeights() const { return fp32Weights && compute == Precision::Bf16; }

    double weightBytes() const; // bytes per parameter of the working weights
    // The same on a GPU: FP8 weights only where the GPU runs FP8 (an FP8 policy on an A100
    // trains in bf16).
    double weightBytesOn(const GpuSpec& gpu) const;
    // Bytes a parameter of the weights FP8 weights leave out, outside Transformer Engine's
    // layers (the embeddings, the output head, the final norm): bf16 beside FP8 weights, the
    // policy's own weight bytes otherwise.
    double nonLayerWeightBytesOn(const GpuSpec& gpu) const {
        return fp8WeightsOn(gpu) ? 2.0 : weightBytesOn(gpu);
    }
    double gradBytes() const; // bytes per parameter of the gradient buffer
    // Bytes per parameter a gradient moves in the data-parallel reduction: the gradient buffer's,
    // except under autocast over fp32 weights, whose gradients are fp32 like the weights and are
    // cast to `grads` to be reduced (FSDP's reduce_dtype).
    double gradReduceBytes() const;
    double masterBytes() const;     // 4 when an fp32 master copy is kept, else 0
    double activationBytes() const; // bytes per stored activation element
    std::string name() const;       // "bf16 mixed (fp32 grads)", ...
    // Whether GEMMs run in FP8 on this GPU: an FP8 policy on a GPU without FP8 tensor cores
    // (A100) runs them in bf16 and keeps no FP8 weight copies.
    bool fp8On(const GpuSpec& gpu) const {
        return compute == Precision::Fp8 && gpu.runs(Precision::Fp8);
    }
    // Whether the working weights are FP8 on this GPU (fp8Params where FP8 runs).
    bool fp8WeightsOn(const GpuSpec& gpu) const { return fp8Params && fp8On(gpu); }
};
// Every precision policy by the name the CLI, run configs and sessions give it, with what it
// keeps, including the lessons' conventions: bf16-nomaster is 2 + 2 + 8 = 12 bytes a parameter
// with Adam (bf16 weights and gradients, fp32 moments, no master copy).
struct NamedPrecisionPolicy {
    const char* key;   // "bf16-nomaster"
    const char* label; // "bf16, bf16 grads, no master"
    PrecisionPolicy policy;
};
const std::vector<NamedPrecisionPolicy>& namedPrecisionPolicies();
std::string precisionPolicyNames(); // "fp32, bf16, ..." for help and errors
// A policy by its key (spelled with - or _, any case); InputError lists the keys.
PrecisionPolicy precisionPolicyFromString(const std::string& s);

// The most GPUs a layout or cluster may span: far past any machine, and small enough that
// every product of degrees and counts under it fits an int.
inline constexpr std::int64_t kMaxWorldSize = 100'000'000;

struct ParallelConfig {
    int dp = 1;
    int tp = 1;
    int pp = 1;
    int vpp = 1; // virtual stages (model chunks) per pipeline rank; > 1 only when interleaved
    int cp = 1;
    // Expert parallelism: each MoE layer's routed experts split over ep ranks (Megatron-Core's
    // EP). Tokens reach their experts by an all-to-all in the EP group; the expert weights'
    // gradients and ZeRO shards span the ranks that hold the same experts (expert data
    // parallelism). It adds no GPUs.
    int ep = 1;
    // Expert tensor parallelism: each routed expert's matrices split over etp ranks; 0 follows
    // tp (Megatron-Core's default). Megatron-Core's MoE parallel folding (Liu et al. 2025) lays
    // the experts out on the tp x cp x dp ranks of a pipeline stage on a mesh of their own,
    // etp fastest, then ep, then the expert data-parallel copies: so etp 1 with tp 2 puts an
    // EP group across the attention's TP group.
    int etp = 0;
    // MoE token dropping with padding (Megatron-LM's --moe-expert-capacity-factor with
    // --moe-pad-expert-input-to-capacity): every expert takes exactly this many times its
    // balanced share of the routed tokens, dropping the rest or padding with zeros, so its
    // GEMMs, activations and all-to-alls scale by it. 0: dropless, each expert takes what is
    // routed to it (balanced, as published benchmarks force it).
    double expertCapacityFactor = 0;
    int zero = 0; // ZeRO stage 0-3 across the data-parallel group (3 == FSDP full shard)
    // ZeRO's states sharded over groups of this many of the dp x cp ranks and replicated across
    // the groups (hybrid sharding: FSDP's HYBRID_SHARD / HSDP, DeepSpeed's MiCS); 0 = one group of
    // all of them. Gradients are reduce-scattered in the group, then all-reduced across groups.
    int shardGroup = 0;
    bool sequenceParallel = false;
    PipelineSchedule schedule = PipelineSchedule::OneFOneB;
    int microBatch = 1;  // sequences per microbatch per data-parallel rank
    int globalBatch = 1; // sequences per optimizer step across the whole job
    Recompute recompute = Recompute::None;
    // Under full recompute, how many layers of each virtual pipeline stage rerun their forward:
    // the first ones, as Megatron-LM's --recompute-method block --recompute-num-layers picks
    // them; the others keep all their activations. torchtitan's layer checkpointing of every
    // k-th block recomputes layers / k of them. 0: every layer.
    int recomputeLayers = 0;
    PrecisionPolicy precision;
    Optimizer optimizer = Optimizer::AdamW;
    bool offloadOptimizer = false; // optimizer state (and fp32 grads/master) live in CPU memory
    // Fused (Flash) attention never materialises the s x s scores: no score activations are
    // stored and no memory-bound softmax/dropout passes run. Runs before 2022 did not have it.
    bool flashAttention = true;
    AttentionKernel attentionKernel = AttentionKernel::Auto;
    // The memory-bound ops (norms, residual adds, rotary embeddings, the activation function)
    // run as fused kernels, as torch.compile and Megatron-LM's and Transformer Engine's fused
    // kernels run them. Off: PyTorch eager, one kernel an op with fp32 copies in the norms and
    // rotary (torchtitan without --training.compile, Hugging Face's Trainer): several times the
    // memory traffic (plan/eager_traffic.h). Only the planner's time depends on it; the engine
    // runs its own kernels.
    bool fusedElementwise = true;
    // Which communication the framework runs beside compute (Megatron-LM's --overlap-grad-reduce,
    // --overlap-param-gather and --tp-comm-overlap). Gradient reduction and parameter gathers
    // overlap by default, as PyTorch DDP and FSDP and Megatron-Core's recipes do; runs before
    // 2023 on Megatron-LM or DeepSpeed's pipeline engine reduced after the last backward. TP's
    // collectives overlap only with Transformer Engine's userbuffers, which need sequence
    // parallelism; off by default, as in Megatron-LM.
    bool overlapGradReduce = true;
    bool overlapParamGather = true;
    bool tpCommOverlap = false;
    // Under ZeRO-3 with overlapParamGather: whether the backward's gathers are prefetched
    // (BackwardPrefetch above). Pre by default, as FSDP and DeepSpeed do.
    BackwardPrefetch backwardPrefetch = BackwardPrefetch::Pre;
    // MoE all-to-alls beside another microbatch's compute (Megatron-Core's
    // --overlap-moe-expert-parallel-comm: the combined 1F1B schedule runs one microbatch's
    // dispatch and combine while the other's attention and experts compute). Off by default, as
    // in Megatron-Core; it needs ep > 1, no full recompute, and virtual stages under pp > 1.
    bool epCommOverlap = false;
    // The embedding and the loss (output head) take a layer's place when layers are dealt to
    // pipeline stages (Megatron-LM's --account-for-embedding-in-pipeline-split and
    // --account-for-loss-in-pipeline-split; Llama 3 405B's first and last stages held one layer
    // fewer): the first virtual stage holds one layer fewer for the embedding, the last one fewer
    // for the loss, so pp x vpp = layers + 2 deals one layer to every stage between.
    bool embeddingInPipelineSplit = false;
    bool lossInPipelineSplit = false;

    // At most kMaxWorldSize once validate() has passed (before, the product may not fit an int).
    int worldSize() const { return dp * tp * pp * cp; }
    // The routed experts' work against dropless balanced routing: the capacity factor, or 1.
    double expertLoad() const { return expertCapacityFactor > 0 ? expertCapacityFactor : 1.0; }
    int expertTp() const { return etp > 0 ? etp : tp; }
    // Whether the routed experts sit on a mesh of their own rather than the dense weights' (their
    // gradients then reduce in collectives of their own, and ZeRO shards them apart).
    bool expertsApart() const { return ep > 1 || expertTp() != tp; }
    // The ranks that hold the same experts and reduce their gradients together: the stage's
    // tp x cp x dp ranks over etp x ep (dp x cp / ep where etp follows tp).
    int expertDataParallel() const {
        const std::int64_t ranks = std::int64_t(tp) * cp * dp;
        const std::int64_t held = std::int64_t(std::max(1, expertTp())) * std::max(1, ep);
        return int(std::max<std::int64_t>(1, ranks / held));
    }
    // The ranks one copy of ZeRO's sharded states spans, and how many copies there are.
    int zeroShards() const { return shardGroup > 0 ? shardGroup : dp * cp; }
    int zeroReplicas() const { return zeroShards() > 0 ? std::max(1, dp * cp / zeroShards()) : 1; }
    bool hybridShard() const { return zero >= 1 && zeroReplicas() > 1; }
    // Where each overlap flag changes anything: a data-parallel group to reduce over, ZeRO's
    // gathers in it, a TP group.
    bool gradReduceMatters() const { return dp * cp > 1; }
    bool paramGatherMatters() const { return dp * cp > 1 && zero >= 1; }
    bool backwardPrefetchMatters() const { return paramGatherMatters() && zero >= 3; }
    // Whether ZeRO-3's backward gathers wait in the open: gathers overlapped, but not prefetched
    // before each layer's gradients (BackwardPrefetch Post or None).
    bool backwardGathersWait() const {
        return zero >= 3 && overlapParamGather && backwardPrefetch != BackwardPrefetch::Pre;
    }
    bool tpOverlapMatters() const { return tp > 1; }
    // Microbatches each pipeline processes per step (gradient accumulation steps).
    int microbatches() const { return (microBatch * dp) > 0 ? globalBatch / (microBatch * dp) : 0; }
    // What the stages share out: the layers, plus the embedding and the loss where they count.
    int pipelineSlots(int layers) const {
        return layers + (embeddingInPipelineSplit ? 1 : 0) + (lossInPipelineSplit ? 1 : 0);
    }
    // The most slots one virtual pipeline stage holds (so the most layers): the even share of
    // the slots over pp x vpp chunks, one more where they do not divide, as layersOnChunk deals
    // them. 0 where there are no chunks or more chunks than slots (the pp-layers rule's case).
    int mostSlotsOnChunk(int layers) const {
        const std::int64_t chunks = std::int64_t(pp) * vpp;
        const int shared = pipelineSlots(layers); // not "slots": Qt defines that word
        if (chunks <= 0 || chunks > shared)
            return 0;
        return int(shared / chunks + (shared % chunks != 0 ? 1 : 0));
    }
};

// Transformer layers on virtual pipeline stage `chunk` (0 .. pp*vpp-1, chunk v*pp + rank as
// engine/sched numbers them): the slots dealt evenly, the remainder one each to the first
// chunks, less the embedding's slot on the first chunk and the loss's on the last. The planner
// and the engine both deal layers with this. May be 0 where a chunk holds only the embedding or
// the loss; negative never (the pp-layers rule keeps pp*vpp within the slots).
int layersOnChunk(int layers, const ParallelConfig& p, int chunk);
// The layers on virtual stage `chunk` that keep only their input and rerun their forward in the
// backward: all of them under full recompute, at most recomputeLayers where that is set, none
// under the other policies.
int recomputedLayersOnChunk(int layers, const ParallelConfig& p, int chunk);

struct Violation {
    std::string rule;    // short id: "world-size", "tp-heads", ...
    std::string message; // what is wrong, with the numbers
    std::string hint;    // how to fix it
};

// Every rule the layout breaks, empty when valid. Never throws.
std::vector<Violation> validate(const ModelSpec& model, const ClusterSpec& cluster,
                                const ParallelConfig& config);
// The same rules without a cluster (world size is then dp*tp*pp*cp by definition).
std::vector<Violation> validate(const ModelSpec& model, const ParallelConfig& config);

// One line: "dp2 tp8 pp4 cp1 zero1 sp mb1 1f1b recompute-selective" ("pp4x2" when interleaved,
// "recompute-full4" when full recompute covers 4 layers of each virtual stage,
// "cp1 ep8" with expert parallelism,
// "zero3 shard8" when ZeRO's states are sharded over groups of 8 of the dp x cp ranks), with
// the overlap settings that differ from the defaults where they matter: "no-grad-overlap",
// "no-gather-overlap", "tp-overlap"; "eager" for eager elementwise ops; and the attention when it
// is not the default fused kernel: "unfused-attention", "attention-flash2".
std::string layoutSummary(const ParallelConfig& p);

std::string toString(PipelineSchedule s);
std::string toString(Recompute r);
std::string toString(Optimizer o);
std::string toString(AttentionKernel k);
PipelineSchedule scheduleFromString(const std::string& s);
Recompute recomputeFromString(const std::string& s);
Optimizer optimizerFromString(const std::string& s);
AttentionKernel attentionKernelFromString(const std::string& s);
std::string toString(BackwardPrefetch b);
BackwardPrefetch backwardPrefetchFromString(const std::string& s);

} // namespace shardscope
