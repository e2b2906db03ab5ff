#include "estimate.h"

#include "compute.h"
#include "formulas.h"
#include "layer_comm.h"
#include "layout.h"

#include <algorithm>
#include <array>

namespace shardscope {

std::string toString(Axis a) {
    switch (a) {
    case Axis::DP:
        return "DP";
    case Axis::TP:
        return "TP";
    case Axis::PP:
        return "PP";
    case Axis::CP:
        return "CP";
    case Axis::EP:
        return "EP";
    }
    return "?";
}

namespace {

void setPlacement(AxisComm& c, const GroupPlacement& g) {
    c.groupSize = g.size;
    c.crossesNodes = g.crossesNodes;
    c.bandwidth = g.bandwidth;
    c.latency = g.latency;
}

// What `seconds` of communication add to a step when they run beside `window` seconds of
// compute that slows by the factor 1 + k while they share the GPU: compute c under the
// communication takes c (1 + k), so it all hides when seconds <= window (1 + k), at the cost
// seconds k / (1 + k); past that the communication itself is the critical path.
double exposedBeside(double seconds, double window, double k) {
    return std::max(seconds - window, seconds * k / (1.0 + k));
}

// Tensor parallelism: per layer and microbatch, two all-reduces forward and two backward of the
// layer's output (Megatron-LM), one each for attention and the MLP; with SP each becomes an
// all-gather plus a reduce-scatter of the same total size. Full recompute repeats the forward
// pair in the `recomputed` share of the layers. An MoE layer's experts run theirs in their own etp
// group instead (expertTpTraffic).
AxisComm tpComm(const PlanInputs& in, const StageLayers& layers, double recomputed,
                double gemmTime) {
    const ParallelConfig& p = in.parallel;
    AxisComm c;
    const GroupPlacement g = placeAxis(in.cluster, p, in.assume, Axis::TP);
    setPlacement(c, g);
    if (in.model.isBare() || (p.tp <= 1 && p.expertTp() <= 1))
        return c;
    const double passes = double(p.microbatches()) * (2.0 + recomputed);
    const auto add = [&](int blocks, int size, const GroupPlacement& at, double bytes,
                         bool gather) {
        if (blocks <= 0 || size <= 1 || bytes <= 0)
            return;
        const double calls = passes * blocks;
        c.collectives += int(calls * (gather ? 2 : 1));
        c.bytes += calls * ringAllReduceBytesPerRank(bytes, size);
        c.seconds +=
            calls * (gather ? 2.0 * ringAllGatherSeconds(bytes, size, at.bandwidth, at.latency)
                            : ringAllReduceSeconds(bytes, size, at.bandwidth, at.latency));
    };
    const double layerOutput = tpMessageBytes(in);
    add(layers.total(), p.tp, g, layerOutput, p.sequenceParallel); // attention
    // A dense MLP has its own pair; so have shared experts, a dense MLP beside the routed ones.
    const int mlpPairs = layers.dense + (in.model.moe.sharedExperts > 0 ? layers.moe : 0);
    add(mlpPairs, p.tp, g, layerOutput, p.sequenceParallel);
    const double tpSeconds = c.seconds; // what Transformer Engine's userbuffers can overlap
    if (const ExpertTpTraffic x = expertTpTraffic(in); x.group > 1 && layers.moe > 0) {
        const GroupPlacement at =
            x.group == p.tp ? g : placeGroup(in.cluster, in.assume, x.group, 1);
        if (p.tp <= 1) {
            setPlacement(c, at); // the experts' group is the only one with collectives
        } else {                 // the slower of the two groups
            c.groupSize = std::max(c.groupSize, at.size);
            c.crossesNodes = c.crossesNodes || at.crossesNodes;
            c.bandwidth = std::min(c.bandwidth, at.bandwidth);
            c.latency = std::max(c.latency, at.latency);
        }
        add(layers.moe, x.group, at, x.bytes, x.gather);
    }
    // The collectives sit between dependent GEMMs; only Transformer Engine's userbuffers
    // (tp-comm-overlap, which needs SP) split each GEMM against chunks of its all-gather or
    // reduce-scatter and so hide them behind the layer's GEMMs. The experts' etp gathers belong
    // to the token dispatcher, which userbuffers do not cover: they wait.
    if (p.tpCommOverlap && p.sequenceParallel) {
        c.window = gemmTime;
        c.exposed =
            exposedBeside(tpSeconds, c.window, in.assume.overlapSlowdown) + (c.seconds - tpSeconds);
    } else {
        c.exposed = c.seconds;
    }
    return c;
}

// Context parallelism (ring attention): each layer passes K and V around the ring, cp-1 hops
// forward; backward passes K, V and their gradients. It overlaps the attention computation.
AxisComm cpComm(const PlanInputs& in, int layers, double attentionTime) {
    const ParallelConfig& p = in.parallel;
    const ModelSpec& m = in.model;
    AxisComm c;
    const GroupPlacement g = placeAxis(in.cluster, p, in.assume, Axis::CP);
    setPlacement(c, g);
    if (p.cp <= 1 || m.isBare())
        return c;
    const double chunk = cpHopBytes(in);
    const double sends = double(p.microbatches()) * layers * 3.0 * (p.cp - 1);
    c.collectives = int(sends);
    c.bytes = sends * chunk;
    c.seconds = sends * (g.latency + chunk / g.bandwidth);
    c.window = attentionTime;
    c.exposed = exposedBeside(c.seconds, c.window, in.assume.overlapSlowdown);
    return c;
}

// Expert parallelism: per MoE layer (`layers` of them on the stage) and microbatch, the router's
// choices are dispatched to the experts' ranks and their outputs combined back, an all-to-all each,
// forward and backward (six in the `recomputed` share of layers full recompute reruns). Each rank
// sends its tokens (s*b/cp, over tp under the SP that EP with tp needs) x top-k x h x a_bytes,
// (ep-1)/ep of it to other ranks. Megatron-Core runs them between the router and the experts, not
// overlapped by default: all of it is exposed.
AxisComm epComm(const PlanInputs& in, int layers, double recomputed, double computeTime) {
    const ParallelConfig& p = in.parallel;
    const ModelSpec& m = in.model;
    AxisComm c;
    if (p.ep <= 1 || m.isBare() || !m.moe.enabled())
        return c; // no group: the search skips the placement for every dense layout
    const GroupPlacement g = placeAxis(in.cluster, p, in.assume, Axis::EP);
    setPlacement(c, g);
    const double message = epMessageBytes(in);
    const double calls = double(p.microbatches()) * layers * (4.0 + 2.0 * recomputed);
    const double each = allToAllSeconds(in.cluster, in.assume, p.ep, p.expertTp(), message);
    const double sent = message * (p.ep - 1) / p.ep;
    c.collectives = int(calls);
    c.bytes = calls * sent;
    c.seconds = calls * each;
    c.bandwidth = each > g.latency ? sent / (each - g.latency) : g.bandwidth; // as achieved
    c.exposed = c.seconds;
    // The combined 1F1B schedule pairs each microbatch's forward with the previous one's
    // backward and runs either's all-to-alls beside the other's compute: every microbatch but
    // one has a partner.
    if (p.epCommOverlap) {
        const double paired = std::max(1, p.microbatches());
        c.window = computeTime * (paired - 1) / paired;
        c.exposed = exposedBeside(c.seconds, c.window, in.assume.overlapSlowdown);
    }
    return c;
}

// Pipeline parallelism: each microbatch crosses each chunk boundary once forward (activations)
// and once backward (their gradients). Only the fill and drain hops wait on the wire.
AxisComm ppComm(const PlanInputs& in, double computeTime) {
    const ParallelConfig& p = in.parallel;
    AxisComm c;
    const GroupPlacement g = placeAxis(in.cluster, p, in.assume, Axis::PP);
    setPlacement(c, g);
    if (p.pp <= 1 || in.model.isBare())
        return c;
    const double sp = p.sequenceParallel ? p.tp : 1.0;
    const double message =
        localTokens(in.model, p) * in.model.hidden * p.precision.activationBytes() / sp;
    const double hop = g.latency + message / g.bandwidth;
    const double sends = 2.0 * p.microbatches() * std::max(1, p.vpp);
    c.collectives = int(sends);
    c.bytes = sends * message;
    c.seconds = sends * hop;
    c.window = computeTime;
    const double criticalHops = p.schedule == PipelineSchedule::Naive
                                    ? 2.0 * (p.pp - 1) * p.microbatches()
                                    : 2.0 * (p.pp - 1);
    c.exposed = criticalHops * hop;
    return c;
}

// Data parallelism over dp x cp ranks. ZeRO-0: all-reduce gradients once per step. ZeRO-1/2:
// reduce-scatter gradients, all-gather updated parameters. ZeRO-3: every microbatch gathers
// parameters for forward and again for backward, and reduce-scatters its gradients.
//
// ZeRO shards over groups of s consecutive dp x cp ranks (inside a node when tp x s fits one),
// r = dp x cp / s copies of them at stride tp x s: s = dp x cp (r = 1) unless hybrid. In each group
// as above; across the copies (hybrid sharding: PyTorch's HYBRID_SHARD, DeepSpeed's MiCS), each
// rank all-reduces its 1/s of the gradients once per step with the ranks holding the same shard.
// With expert parallelism the routed experts' state takes the same path over the dp x cp / ep
// ranks that hold the same experts (tp x ep ranks apart), beside the dense weights'.
struct DpPart {
    double grads = 0, weights = 0; // bytes of this part on one rank before sharding
    int shards = 1, copies = 1, stride = 1;
};

struct DpTraffic {
    double allReduce = 0, gather = 0, scatter = 0, across = 0; // seconds of one call each
    double allReduceBytes = 0, gatherBytes = 0, scatterBytes = 0, acrossBytes = 0;
    int inGroup = 0, acrossGroups = 0; // collectives that move data, per kind
    void add(const DpTraffic& o) {
        allReduce += o.allReduce;
        gather += o.gather;
        scatter += o.scatter;
        across += o.across;
        allReduceBytes += o.allReduceBytes;
        gatherBytes += o.gatherBytes;
        scatterBytes += o.scatterBytes;
        acrossBytes += o.acrossBytes;
        inGroup += o.inGroup; // the experts' collectives are calls of their own
        acrossGroups += o.acrossGroups;
    }
};

DpTraffic dpTraffic(const PlanInputs& in, const DpPart& part, AxisComm& placement) {
    const int s = part.shards, r = part.copies;
    const GroupPlacement group = placeGroup(in.cluster, in.assume, s, part.stride);
    const GroupPlacement copies =
        r > 1 ? placeGroup(in.cluster, in.assume, r, part.stride * s) : GroupPlacement{};
    setPlacement(placement, group);
    if (r > 1) { // the slower of the two groups
        placement.groupSize = s * r;
        placement.crossesNodes = group.crossesNodes || copies.crossesNodes;
        placement.bandwidth = std::min(group.bandwidth, copies.bandwidth);
        placement.latency = std::max(group.latency, copies.latency);
    }
    DpTraffic t;
    if (in.parallel.zero == 0) {
        t.allReduce = ringAllReduceSeconds(part.grads, s, group.bandwidth, group.latency);
        t.allReduceBytes = ringAllReduceBytesPerRank(part.grads, s);
        t.inGroup = s > 1 ? 1 : 0;
        return t;
    }
    t.gather = ringAllGatherSeconds(part.weights, s, group.bandwidth, group.latency);
    t.scatter = ringAllGatherSeconds(part.grads, s, group.bandwidth, group.latency);
    t.across = ringAllReduceSeconds(part.grads / s, r, copies.bandwidth, copies.latency);
    t.gatherBytes = ringAllGatherBytesPerRank(part.weights, s);
    t.scatterBytes = ringAllGatherBytesPerRank(part.grads, s);
    t.acrossBytes = ringAllReduceBytesPerRank(part.grads / s, r);
    t.inGroup = s > 1 ? 1 : 0;
    t.acrossGroups = r > 1 ? 1 : 0;
    return t;
}

AxisComm dpComm(const PlanInputs& in, double params, double expertParams, double nonLayerParams,
                double microbatchTime, double computeTime) {
    const ParallelConfig& p = in.parallel;
    AxisComm c;
    // Where the experts share the dense weights' mesh they reduce with the rest, in the same
    // buckets; on a mesh of their own, over the ranks holding the same experts, etp x ep apart
    // (with etp below tp, even dp 1 has expert copies to reduce).
    const double apart = p.expertsApart() ? expertParams : 0.0;
    if (p.dp * p.cp <= 1 && (apart <= 0 || p.expertDataParallel() <= 1)) {
        setPlacement(c, placeAxis(in.cluster, p, in.assume, Axis::DP));
        return c;
    }
    // FP8 weights are gathered in FP8 (Megatron-Core's --fp8-param-gather), the embeddings and
    // the head in bf16; the experts are all layer weights.
    const double gb = p.precision.gradReduceBytes(), wb = p.precision.weightBytesOn(in.cluster.gpu);
    const double dense = params - apart;
    const double denseWb = meanWeightBytes(p.precision, in.cluster.gpu, dense, nonLayerParams);
    DpTraffic t =
        dpTraffic(in,
                  {dense * gb, dense * denseWb, p.zero >= 1 ? p.zeroShards() : p.dp * p.cp,
                   p.zero >= 1 ? p.zeroReplicas() : 1, p.tp},
                  c);
    if (apart > 0) {
        AxisComm expertPlacement;
        t.add(dpTraffic(in,
                        {apart * gb, apart * wb, p.expertDataParallel(), 1,
                         int(std::min<std::int64_t>(std::int64_t(p.expertTp()) * std::max(1, p.ep),
                                                    kMaxWorldSize))},
                        expertPlacement));
        // At dp x cp = 1 only the experts' copies (etp below tp) have a group to reduce over.
        if (p.dp * p.cp <= 1)
            c = expertPlacement;
    }
    const double k = in.assume.overlapSlowdown;
    const double lastBackward = microbatchTime * 2.0 / 3.0;
    const bool overlapGrads = p.overlapGradReduce, overlapParams = p.overlapParamGather;
    if (p.zero == 0) {
        c.collectives = t.inGroup;
        c.bytes = t.allReduceBytes;
        c.seconds = t.allReduce;
        // The last backward, bucket by bucket; or after it (Megatron-LM before 2023, DeepSpeed PP).
        c.window = overlapGrads ? lastBackward : 0.0;
        c.exposed = overlapGrads ? exposedBeside(c.seconds, c.window, k) : c.seconds;
    } else if (p.zero <= 2) {
        c.collectives = 2 * t.inGroup + t.acrossGroups;
        c.bytes = t.scatterBytes + t.acrossBytes + t.gatherBytes;
        c.seconds = t.scatter + t.across + t.gather;
        // Gradients reduce bucket by bucket during the last backward; the updated parameters
        // are gathered bucket by bucket as the next step's first forward reaches them.
        c.window =
            (overlapGrads ? lastBackward : 0.0) + (overlapParams ? microbatchTime / 3.0 : 0.0);
        c.exposed = (overlapGrads ? exposedBeside(t.scatter + t.across, lastBackward, k)
                                  : t.scatter + t.across) +
                    (overlapParams ? exposedBeside(t.gather, microbatchTime / 3.0, k) : t.gather);
    } else {
        const double m = std::max(1, p.microbatches());
        c.collectives = int(3 * m) * t.inGroup + t.acrossGroups;
        c.bytes = m * (2.0 * t.gatherBytes + t.scatterBytes) + t.acrossBytes;
        c.seconds = m * (2.0 * t.gather + t.scatter) + t.across;
        // Prefetching hides each gather behind the previous layer, over all the compute; each
        // reduce-scatter can hide only behind the backward (below), which also holds the
        // backward's own gathers (half of them): with both, the step is the longer of the two
        // shared windows. The all-reduce across groups waits for the last backward, and only
        // that can hide it (as ZeRO-0's all-reduce: with a group of one rank this is ZeRO-0).
        const double gathers = m * 2.0 * t.gather, scatters = m * t.scatter;
        // The forward is one of three passes' worth of compute, 1 / (3 + r) where full recompute
        // reruns a share r of the layers inside the backward.
        const double recomputed =
            p.recompute == Recompute::Full ? fullRecomputeShare(in.model, p) : 0.0;
        const double forward = computeTime / (3.0 + recomputed), backward = computeTime - forward;
        // Gathered after each layer's gradients (FSDP's BACKWARD_POST) or not ahead at all, the
        // backward's gathers wait in the open; the forward's are still prefetched. Under
        // BACKWARD_POST each reduce-scatter hides behind the next layer's gradients; with no
        // prefetch it queues before the next gather on NCCL's one stream and waits too.
        const bool late = p.backwardGathersWait();
        const bool scattersHide = overlapGrads && p.backwardPrefetch != BackwardPrefetch::None;
        c.window = late            ? forward + (scattersHide ? backward : 0.0)
                   : overlapParams ? computeTime
                   : overlapGrads  ? backward
                                   : 0.0;
        if (late)
            c.exposed = exposedBeside(gathers / 2, forward, k) + gathers / 2 +
                        (scattersHide ? exposedBeside(scatters, backward, k) : scatters);
        else if (overlapParams && overlapGrads)
            c.exposed = std::max(exposedBeside(gathers + scatters, computeTime, k),
                                 exposedBeside(gathers / 2 + scatters, backward, k));
        else if (overlapParams) // the scatters wait; the gathers hide in the compute around them
            c.exposed = exposedBeside(gathers, computeTime, k) + scatters;
        else if (overlapGrads)
            c.exposed = gathers + exposedBeside(scatters, backward, k);
        else
            c.exposed = gathers + scatters;
        c.exposed += overlapGrads ? exposedBeside(t.across, lastBackward, k) : t.across;
    }
    return c;
}

// The optimizer step is memory bound: it reads and writes every state byte it owns once. With
// offload the GPU's part is moving gradients to the host and weights back.
double optimizerSeconds(const PlanInputs& in, double params, double expertParams,
                        double nonLayerParams) {
    const ParallelConfig& p = in.parallel;
    const PrecisionPolicy& prec = p.precision;
    const double wb = meanWeightBytes(prec, in.cluster.gpu, params, nonLayerParams);
    // Offload needs ZeRO >= 1 (a rule), so it shards too.
    const double shard =
        p.zero >= 1 || p.offloadOptimizer ? shardedParamsOnRank(p, params, expertParams) : params;
    if (p.offloadOptimizer)
        return shard * (prec.gradBytes() + wb) / in.assume.hostLinkBandwidth;
    const double bytes =
        2.0 * shard *
        (wb + prec.gradBytes() + prec.masterBytes() + optimizerStateBytes(p.optimizer));
    const double bw = in.cluster.gpu.hbmBandwidth * in.assume.memoryEfficiency;
    return bw > 0 ? bytes / bw : 0.0;
}

// The stages that can be the most loaded or the slowest (no allocation: the search calls this for
// every layout). The first stage holds the embedding and the most in-flight microbatches, the last
// the LM head and the logits; the second holds the most layers when the embedding takes one of
// the first stage's places (layers go to the first chunks first). An MoE model's dense first
// layers make the early stages lighter or heavier than the rest: the first stage holding none of
// them stands for the rest, and the one before it (both kinds) is planned too.
struct CandidateStages {
    std::array<int, 5> stage{};
    int count = 0;
    const int* begin() const { return stage.data(); }
    const int* end() const { return stage.data() + count; }
};

CandidateStages candidateStages(const ModelSpec& m, const ParallelConfig& p) {
    const int last = std::max(0, p.pp - 1);
    CandidateStages c;
    c.stage[std::size_t(c.count++)] = 0;
    if (p.embeddingInPipelineSplit && last > 1)
        c.stage[std::size_t(c.count++)] = 1;
    if (m.moe.enabled() && m.denseLayerCount() > 0) {
        int allMoe = 1;
        while (allMoe < last && stageLayers(m, p, allMoe).dense > 0)
            ++allMoe;
        // The stage before it mixes the two kinds and may hold one layer more.
        for (const int s : {allMoe - 1, allMoe})
            if (s > 0 && s < last && c.stage[std::size_t(c.count - 1)] < s)
                c.stage[std::size_t(c.count++)] = s;
    }
    if (last > 0)
        c.stage[std::size_t(c.count++)] = last;
    return c;
}

} // namespace

MemoryBreakdown mostLoadedStageMemory(const PlanInputs& in, int* stage) {
    return mostLoadedStageMemory(in, countParameters(in.model), stage);
}

MemoryBreakdown mostLoadedStageMemory(const PlanInputs& in, const ParamCount& c, int* stage) {
    MemoryBreakdown worst;
    int worstStage = -1;
    for (const int s : candidateStages(in.model, in.parallel)) {
        MemoryBreakdown m = memoryForStage(in, s, c);
        if (worstStage < 0 || m.total() > worst.total()) {
            worst = m;
            worstStage = s;
        }
    }
    if (stage)
        *stage = worstStage;
    return worst;
}

// Dropless routing syncs the host once per MoE layer, so the host cannot run ahead of the GPU
// and a microbatch on a stage lasts at least the host time of its MoE layers. Token dropping
// (a capacity factor) sizes every buffer in advance: no sync, no roof.
int hostBoundMoeLayers(const PlanInputs& in) {
    const ModelSpec& m = in.model;
    const ParallelConfig& p = in.parallel;
    if (!m.moe.enabled() || p.expertCapacityFactor > 0 || in.assume.moeLayerHostSeconds <= 0)
        return 0;
    int moeLayers = 0;
    for (const int s : candidateStages(m, p))
        moeLayers = std::max(moeLayers, stageLayers(m, p, s).moe);
    return moeLayers;
}

double hostMicrobatchSeconds(const PlanInputs& in) {
    return hostBoundMoeLayers(in) * in.assume.moeLayerHostSeconds;
}

Estimate evaluate(const PlanInputs& in) {
    const ModelSpec& m = in.model;
    const ParallelConfig& p = in.parallel;
    const ClusterSpec& cl = in.cluster;
    Estimate e;
    e.params = countParameters(m);
    const int world = std::max(1, p.worldSize());

    e.memory = mostLoadedStageMemory(in, e.params, &e.worstStage);
    e.gpuMemory = cl.gpu.memoryBytes;
    e.capacity = cl.gpu.memoryBytes * (1.0 - in.assume.memoryHeadroom);
    e.fits = e.memory.total() <= e.capacity;

    // FLOPs.
    const TokenFlops f = tokenFlops(m, p, in.assume);
    e.tokensPerStep = double(p.globalBatch) * m.seqLen;
    // Model FLOPs in the chosen convention (the planner's own count by default, which is
    // f.model when the causal half is what runs); hardware FLOPs are what runs.
    e.modelFlopsPerToken = in.assume.flopsConvention == FlopsConvention::Causal
                               ? f.model
                               : conventionFlopsPerToken(m, in.assume.flopsConvention);
    e.hardwareFlopsPerToken = f.hardware;
    e.modelFlopsPerStep = e.modelFlopsPerToken * e.tokensPerStep;
    e.hardwareFlopsPerStep = f.hardware * e.tokensPerStep;

    // Compute: the slowest stage sets the pace of the pipeline.
    StageCompute slow;
    int slowStage = -1;
    for (const int s : candidateStages(m, p)) {
        const StageCompute c = stageCompute(in, s, f);
        if (slowStage < 0 || c.seconds() > slow.seconds()) {
            slow = c;
            slowStage = s;
        }
    }
    const double mbs = std::max(1, p.microbatches());
    e.slowStage = std::max(0, slowStage);
    e.microbatchCompute = slow.seconds();
    e.computeTime = mbs * e.microbatchCompute;

    // Communication per axis.
    const StageLayers layers = stageLayers(m, p, slowStage);
    const double params = paramsOnStage(m, e.params, p, slowStage);
    const double expertParams = expertParamsOnStage(m, e.params, p, slowStage);
    const double recomputed = fullRecomputeShare(m, p, slowStage);
    e.comm[int(Axis::TP)] =
        tpComm(in, layers, recomputed, mbs * (slow.gemmSeconds - slow.attentionSeconds));
    e.comm[int(Axis::CP)] = cpComm(in, layers.total(), mbs * slow.attentionSeconds);
    e.comm[int(Axis::EP)] = epComm(in, layers.moe, recomputed, e.computeTime);
    e.comm[int(Axis::PP)] = ppComm(in, e.computeTime);
    const double nonLayer = nonLayerParamsOnStage(m, e.params, p, slowStage);
    e.comm[int(Axis::DP)] =
        dpComm(in, params, expertParams, nonLayer, e.microbatchCompute, e.computeTime);
    e.optimizerTime = optimizerSeconds(in, params, expertParams, nonLayer);

    // Step time: microbatches paced by compute plus the per-microbatch TP/CP/EP waits, the
    // pipeline bubble at that pace, then the exposed PP and DP transfers and the optimizer.
    const double perMicrobatchWait =
        (e.axis(Axis::TP).exposed + e.axis(Axis::CP).exposed + e.axis(Axis::EP).exposed) / mbs;
    e.gpuMicrobatch = e.microbatchCompute + perMicrobatchWait;
    e.hostMoeLayers = hostBoundMoeLayers(in);
    e.hostMicrobatch = e.hostMoeLayers * in.assume.moeLayerHostSeconds;
    const double paced = std::max(e.gpuMicrobatch, e.hostMicrobatch);
    e.hostWait = mbs * (paced - e.gpuMicrobatch);
    e.bubbleTime = pipelineBubbleMicrobatches(p.schedule, p.pp, int(mbs), p.vpp,
                                              in.assume.optimizerPostValidation) *
                   paced;
    e.bubbleFraction = e.bubbleTime / (mbs * paced + e.bubbleTime);
    e.exposedComm = 0;
    for (const AxisComm& c : e.comm)
        e.exposedComm += c.exposed;
    e.stepTime = mbs * paced + e.bubbleTime + e.axis(Axis::PP).exposed + e.axis(Axis::DP).exposed +
                 e.optimizerTime;

    const double peak = cl.gpu.peak(p.precision.compute);
    auto rates = [&] {
        if (e.stepTime <= 0)
            return;
        e.tokensPerSecond = e.tokensPerStep / e.stepTime;
        e.tflopsPerGpu = e.modelFlopsPerStep / e.stepTime / world;
        e.hardwareFlopsPerGpu = e.hardwareFlopsPerStep / e.stepTime / world;
        e.mfu = peak > 0 ? e.tflopsPerGpu / peak : 0.0;
        e.hfu = peak > 0 ? e.hardwareFlopsPerGpu / peak : 0.0;
    };
    rates();
    e.modelledStepTime = e.stepTime;
    e.modelledMfu = e.mfu;
    if (in.assume.assumedMfu > 0 && peak > 0 && e.modelFlopsPerStep > 0) {
        e.mfuAssumed = true;
        e.stepTime = e.modelFlopsPerStep / (world * peak * in.assume.assumedMfu);
        rates();
    }

    // Time and cost to train, then the reliability view of the same run.
    if (in.train.trainTokens > 0 && e.tokensPerSecond > 0) {
        e.timeToTrain = in.train.trainTokens / e.tokensPerSecond;
        e.gpuHours = e.timeToTrain * world / 3600.0;
        e.cost = e.gpuHours * cl.gpuHourCost;
    }
    e.jobMtbf = jobMtbfSeconds(cl.gpuMtbfHours, world);
    const PrecisionPolicy& prec = p.precision;
    const double nonLayerTotal =
        m.isBare() ? 0.0 : e.params.embeddings + e.params.lmHead + e.params.finalNorm;
    e.checkpointBytes =
        e.params.total * (meanWeightBytes(prec, cl.gpu, e.params.total, nonLayerTotal) +
                          prec.masterBytes() + optimizerStateBytes(p.optimizer));
    e.checkpointWrite = cl.checkpointBandwidth > 0 ? e.checkpointBytes / cl.checkpointBandwidth : 0;
    e.checkpointInterval = optimalCheckpointIntervalSeconds(e.checkpointWrite, e.jobMtbf);
    e.trainingFraction =
        trainingTimeFraction(e.checkpointInterval, e.checkpointWrite, e.jobMtbf, cl.restartSeconds);
    if (e.trainingFraction > 0)
        e.wallTimeToTrain = e.timeToTrain / e.trainingFraction;
    return e;
}

Estimate estimate(const PlanInputs& in) {
    Estimate e = evaluate(in);
    e.violations = validate(in.model, in.cluster, in.parallel);
    return e;
}

std::vector<StepPart> stepTimeParts(const Estimate& e) {
    if (e.mfuAssumed) // the modelled parts add up to the modelled step, not to this one
        return {{"At the assumed MFU", e.stepTime}};
    std::vector<StepPart> parts = {{"Compute", e.computeTime}};
    for (Axis a : {Axis::TP, Axis::CP, Axis::EP, Axis::PP, Axis::DP})
        parts.push_back({"Exposed " + toString(a), e.axis(a).exposed});
    parts.push_back({"Host-bound wait", e.hostWait});
    parts.push_back({"Bubble", e.bubbleTime});
    parts.push_back({"Optimizer", e.optimizerTime});
    return parts;
}

} // namespace shardscope
