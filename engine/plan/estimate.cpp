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
// layer's output (Megatron-LM); with SP each becomes an all-gather plus a reduce-scatter of the
// same total size. Full recompute repeats the forward pair.
AxisComm tpComm(const PlanInputs& in, int layers, double gemmTime) {
    const ParallelConfig& p = in.parallel;
    AxisComm c;
    const GroupPlacement g = placeAxis(in.cluster, p, in.assume, Axis::TP);
    setPlacement(c, g);
    if (p.tp <= 1 || in.model.isBare())
        return c;
    const double size = tpMessageBytes(in);
    const int perLayer = 4 + (p.recompute == Recompute::Full ? 2 : 0);
    const double calls = double(p.microbatches()) * layers * perLayer;
    c.collectives = int(calls * (p.sequenceParallel ? 2 : 1));
    c.bytes = calls * ringAllReduceBytesPerRank(size, p.tp);
    const double each = p.sequenceParallel
                            ? 2.0 * ringAllGatherSeconds(size, p.tp, g.bandwidth, g.latency)
                            : ringAllReduceSeconds(size, p.tp, g.bandwidth, g.latency);
    c.seconds = calls * each;
    // The collectives sit between dependent GEMMs; only Transformer Engine's userbuffers
    // (tp-comm-overlap, which needs SP) split each GEMM against chunks of its all-gather or
    // reduce-scatter and so hide them behind the layer's GEMMs.
    if (p.tpCommOverlap && p.sequenceParallel) {
        c.window = gemmTime;
        c.exposed = exposedBeside(c.seconds, c.window, in.assume.overlapSlowdown);
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

// Data parallelism over dp x cp ranks. ZeRO-0: all-reduce gradients once per step. ZeRO-1/2
// (shardedComm): reduce-scatter gradients, all-gather updated parameters. ZeRO-3: every
// microbatch gathers parameters for forward and again for backward, and reduce-scatters its
// gradients.
//
// ZeRO shards over groups of s consecutive dp x cp ranks (inside a node when tp x s fits one),
// r = dp x cp / s copies of them at stride tp x s: s = dp x cp (r = 1) unless hybrid. In each group
// as above; across the copies (hybrid sharding: PyTorch's HYBRID_SHARD, DeepSpeed's MiCS), each
// rank all-reduces its 1/s of the gradients once per step with the ranks holding the same shard.
AxisComm shardedComm(const PlanInputs& in, double grads, double weights, double m,
                     double microbatchTime, double computeTime) {
    const ParallelConfig& p = in.parallel;
    const int s = p.zeroShards(), r = p.zeroReplicas();
    const GroupPlacement group = placeGroup(in.cluster, in.assume, s, p.tp);
    const GroupPlacement copies = placeGroup(in.cluster, in.assume, r, p.tp * s);
    AxisComm c;
    setPlacement(c, group);
    if (r > 1) { // the slower of the two groups
        c.groupSize = s * r;
        c.crossesNodes = group.crossesNodes || copies.crossesNodes;
        c.bandwidth = std::min(group.bandwidth, copies.bandwidth);
        c.latency = std::max(group.latency, copies.latency);
    }
    const double gather = ringAllGatherSeconds(weights, s, group.bandwidth, group.latency);
    const double scatter = ringAllGatherSeconds(grads, s, group.bandwidth, group.latency);
    const double across = ringAllReduceSeconds(grads / s, r, copies.bandwidth, copies.latency);
    const double gatherBytes = ringAllGatherBytesPerRank(weights, s);
    const double scatterBytes = ringAllGatherBytesPerRank(grads, s);
    const double acrossBytes = ringAllReduceBytesPerRank(grads / s, r);
    const int inGroup = s > 1 ? 1 : 0, acrossGroups = r > 1 ? 1 : 0; // collectives that move data
    const double k = in.assume.overlapSlowdown;
    const double lastBackward = microbatchTime * 2.0 / 3.0;
    const bool overlapGrads = p.overlapGradReduce, overlapParams = p.overlapParamGather;
    if (p.zero <= 2) {
        c.collectives = 2 * inGroup + acrossGroups;
        c.bytes = scatterBytes + acrossBytes + gatherBytes;
        c.seconds = scatter + across + gather;
        // Gradients reduce bucket by bucket during the last backward; the updated parameters
        // are gathered bucket by bucket as the next step's first forward reaches them.
        c.window =
            (overlapGrads ? lastBackward : 0.0) + (overlapParams ? microbatchTime / 3.0 : 0.0);
        c.exposed =
            (overlapGrads ? exposedBeside(scatter + across, lastBackward, k) : scatter + across) +
            (overlapParams ? exposedBeside(gather, microbatchTime / 3.0, k) : gather);
    } else {
        c.collectives = int(3 * m) * inGroup + acrossGroups;
        c.bytes = m * (2.0 * gatherBytes + scatterBytes) + acrossBytes;
        c.seconds = m * (2.0 * gather + scatter) + across;
        // Prefetching hides each gather behind the previous layer, over all the compute; each
        // reduce-scatter can hide only behind the backward (2/3 of it), which also holds the
        // backward's own gathers (half of them): with both, the step is the longer of the two
        // shared windows. The all-reduce across groups waits for the last backward, and only
        // that can hide it (as ZeRO-0's all-reduce: with a group of one rank this is ZeRO-0).
        const double gathers = m * 2.0 * gather, scatters = m * scatter;
        const double backward = computeTime * 2.0 / 3.0;
        c.window = overlapParams ? computeTime : overlapGrads ? backward : 0.0;
        if (overlapParams && overlapGrads)
            c.exposed = std::max(exposedBeside(gathers + scatters, computeTime, k),
                                 exposedBeside(gathers / 2 + scatters, backward, k));
        else if (overlapParams) // the scatters wait; the gathers hide in the compute around them
            c.exposed = exposedBeside(gathers, computeTime, k) + scatters;
        else if (overlapGrads)
            c.exposed = gathers + exposedBeside(scatters, backward, k);
        else
            c.exposed = gathers + scatters;
        c.exposed += overlapGrads ? exposedBeside(across, lastBackward, k) : across;
    }
    return c;
}

AxisComm dpComm(const PlanInputs& in, double params, double microbatchTime, double computeTime) {
    const ParallelConfig& p = in.parallel;
    AxisComm c;
    const GroupPlacement g = placeAxis(in.cluster, p, in.assume, Axis::DP);
    setPlacement(c, g);
    const int n = g.size;
    if (n <= 1)
        return c;
    const double grads = params * p.precision.gradBytes();
    const double weights = params * p.precision.weightBytes();
    if (p.zero >= 1)
        return shardedComm(in, grads, weights, std::max(1, p.microbatches()), microbatchTime,
                           computeTime);
    c.collectives = 1;
    c.bytes = ringAllReduceBytesPerRank(grads, n);
    c.seconds = ringAllReduceSeconds(grads, n, g.bandwidth, g.latency);
    if (p.overlapGradReduce) {
        c.window = microbatchTime * 2.0 / 3.0; // the last backward, bucket by bucket
        c.exposed = exposedBeside(c.seconds, c.window, in.assume.overlapSlowdown);
    } else {
        c.exposed = c.seconds; // after the last backward (Megatron-LM before 2023, DeepSpeed PP)
    }
    return c;
}

// The optimizer step is memory bound: it reads and writes every state byte it owns once. With
// offload the GPU's part is moving gradients to the host and weights back.
double optimizerSeconds(const PlanInputs& in, double params) {
    const ParallelConfig& p = in.parallel;
    const PrecisionPolicy& prec = p.precision;
    if (p.offloadOptimizer)
        return params / std::max(1, p.zeroShards()) * (prec.gradBytes() + prec.weightBytes()) /
               in.assume.hostLinkBandwidth;
    const double shard = params / (p.zero >= 1 ? std::max(1, p.zeroShards()) : 1);
    const double bytes = 2.0 * shard *
                         (prec.weightBytes() + prec.gradBytes() + prec.masterBytes() +
                          optimizerStateBytes(p.optimizer));
    const double bw = in.cluster.gpu.hbmBandwidth * in.assume.memoryEfficiency;
    return bw > 0 ? bytes / bw : 0.0;
}

// The stages that can be the most loaded or the slowest (no allocation: the search calls this for
// every layout). The first stage holds the embedding and the most in-flight microbatches, the last
// the LM head and the logits; the second holds the most layers when the embedding takes one of
// the first stage's places (layers go to the first chunks first).
struct CandidateStages {
    std::array<int, 3> stage{};
    int count = 0;
    const int* begin() const { return stage.data(); }
    const int* end() const { return stage.data() + count; }
};

CandidateStages candidateStages(const ParallelConfig& p) {
    const int last = std::max(0, p.pp - 1);
    CandidateStages c;
    c.stage[std::size_t(c.count++)] = 0;
    if (p.embeddingInPipelineSplit && last > 1)
        c.stage[std::size_t(c.count++)] = 1;
    if (last > 0)
        c.stage[std::size_t(c.count++)] = last;
    return c;
}

} // namespace

MemoryBreakdown mostLoadedStageMemory(const PlanInputs& in, int* stage) {
    MemoryBreakdown worst;
    int worstStage = -1;
    for (const int s : candidateStages(in.parallel)) {
        MemoryBreakdown m = memoryForStage(in, s);
        if (worstStage < 0 || m.total() > worst.total()) {
            worst = m;
            worstStage = s;
        }
    }
    if (stage)
        *stage = worstStage;
    return worst;
}

Estimate evaluate(const PlanInputs& in) {
    const ModelSpec& m = in.model;
    const ParallelConfig& p = in.parallel;
    const ClusterSpec& cl = in.cluster;
    Estimate e;
    e.params = countParameters(m);
    const int world = std::max(1, p.worldSize());

    e.memory = mostLoadedStageMemory(in, &e.worstStage);
    e.capacity = cl.gpu.memoryBytes;
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
    for (const int s : candidateStages(p)) {
        const StageCompute c = stageCompute(in, s);
        if (slowStage < 0 || c.seconds() > slow.seconds()) {
            slow = c;
            slowStage = s;
        }
    }
    const double mbs = std::max(1, p.microbatches());
    e.microbatchCompute = slow.seconds();
    e.computeTime = mbs * e.microbatchCompute;

    // Communication per axis.
    const int layers = layersOnStage(m, p, slowStage);
    const double params = paramsOnStage(m, e.params, p, slowStage);
    e.comm[int(Axis::TP)] = tpComm(in, layers, mbs * (slow.gemmSeconds - slow.attentionSeconds));
    e.comm[int(Axis::CP)] = cpComm(in, layers, mbs * slow.attentionSeconds);
    e.comm[int(Axis::PP)] = ppComm(in, e.computeTime);
    e.comm[int(Axis::DP)] = dpComm(in, params, e.microbatchCompute, e.computeTime);
    e.optimizerTime = optimizerSeconds(in, params);

    // Step time: microbatches paced by compute plus the per-microbatch TP/CP waits, the
    // pipeline bubble at that pace, then the exposed PP and DP transfers and the optimizer.
    const double perMicrobatchWait = (e.axis(Axis::TP).exposed + e.axis(Axis::CP).exposed) / mbs;
    const double paced = e.microbatchCompute + perMicrobatchWait;
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
    e.checkpointBytes = e.params.total * (prec.weightBytes() + prec.masterBytes() +
                                          optimizerStateBytes(p.optimizer));
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
    for (Axis a : {Axis::TP, Axis::CP, Axis::PP, Axis::DP})
        parts.push_back({"Exposed " + toString(a), e.axis(a).exposed});
    parts.push_back({"Bubble", e.bubbleTime});
    parts.push_back({"Optimizer", e.optimizerTime});
    return parts;
}

} // namespace shardscope
