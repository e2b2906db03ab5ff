// Step time, communication and throughput: the relations a user relies on.
#include "core/error.h"
#include "plan/compute.h"
#include "plan/explain.h"
#include "plan/formulas.h"
#include "plan/layout.h"
#include "plan_test_support.h"

#include <algorithm>
#include <cmath>
#include <gtest/gtest.h>

namespace shardscope {
namespace {

PlanInputs llama70b() {
    ParallelConfig p = test::layout(2, 8, 4, 512, 1);
    p.sequenceParallel = true;
    p.recompute = Recompute::Selective;
    PlanInputs in = test::inputs("llama3-70b", "h100-sxm", 8, 8, p);
    in.train.trainTokens = 15e12;
    return in;
}

TEST(Estimate, StepTimeIsTheSumOfItsParts) {
    const PlanInputs in = llama70b();
    const Estimate e = estimate(in);
    ASSERT_TRUE(e.valid());
    EXPECT_NEAR(e.stepTime,
                e.computeTime + e.axis(Axis::TP).exposed + e.axis(Axis::CP).exposed + e.bubbleTime +
                    e.axis(Axis::PP).exposed + e.axis(Axis::DP).exposed + e.optimizerTime,
                1e-9 * e.stepTime);
    EXPECT_GT(e.mfu, 0.2);
    EXPECT_LT(e.mfu, 0.75);
    EXPECT_NEAR(e.tokensPerSecond, 512.0 * 8192 / e.stepTime, 1e-6 * e.tokensPerSecond);
    EXPECT_NEAR(e.timeToTrain, 15e12 / e.tokensPerSecond, 1e-6 * e.timeToTrain);
    EXPECT_NEAR(e.gpuHours, e.timeToTrain * 64 / 3600, 1e-6 * e.gpuHours);
}

TEST(Estimate, TensorParallelStaysInNodeAndPipelineCrossesNodes) {
    const Estimate e = estimate(llama70b());
    EXPECT_FALSE(e.axis(Axis::TP).crossesNodes);
    EXPECT_TRUE(e.axis(Axis::PP).crossesNodes);
    EXPECT_EQ(e.axis(Axis::TP).groupSize, 8);
    EXPECT_EQ(e.axis(Axis::CP).bytes, 0);
}

TEST(Estimate, TensorParallelAcrossNodesIsSlower) {
    PlanInputs in = llama70b();
    const double inNode = estimate(in).axis(Axis::TP).seconds;
    in.cluster.gpusPerNode = 4;
    in.cluster.nodes = 16;
    const Estimate e = estimate(in);
    EXPECT_TRUE(e.axis(Axis::TP).crossesNodes);
    // Four members a node cross over four NICs: 4 x 50 GB/s against NVLink's 450 GB/s.
    EXPECT_GT(e.axis(Axis::TP).seconds, 2 * inNode);
}

TEST(Estimate, MoreMicrobatchesShrinkTheBubble) {
    PlanInputs in = llama70b();
    in.parallel.globalBatch = 16;
    const double few = estimate(in).bubbleFraction;
    in.parallel.globalBatch = 256;
    const double many = estimate(in).bubbleFraction;
    EXPECT_GT(few, many);
    EXPECT_NEAR(few, pipelineBubbleFraction(PipelineSchedule::OneFOneB, 4, 8), 1e-9);
}

TEST(Estimate, InterleavingAndZeroBubbleBeat1F1B) {
    PlanInputs in = llama70b();
    in.parallel.globalBatch = 32;
    const double oneF = estimate(in).bubbleTime;
    in.parallel.schedule = PipelineSchedule::Interleaved;
    in.parallel.vpp = 2;
    const double interleaved = estimate(in).bubbleTime;
    in.parallel.schedule = PipelineSchedule::ZeroBubble;
    in.parallel.vpp = 1;
    const double zb = estimate(in).bubbleTime;
    EXPECT_LT(interleaved, oneF);
    EXPECT_LT(zb, interleaved);
}

// Qi et al. 2024: ZB-1p keeps 1F1B's memory (p microbatches on the first stage) with ZB-H1's
// bubble, (p-1)/3 of a microbatch; ZB-2p holds 2p, and with m >= 2p has no bubble when the
// optimizer is post-validated (the ranks' staggered starts overlap); when every rank waits for
// the optimizer step, its bubble is ZB-H1's too.
TEST(Estimate, ZeroBubbleTwoPTradesMemoryForTheBubbleUnderPostValidation) {
    PlanInputs in = llama70b(); // pp 4
    in.parallel.globalBatch = 32;
    const Estimate oneF = estimate(in);
    in.parallel.schedule = PipelineSchedule::ZeroBubble1p;
    const Estimate one = estimate(in);
    in.parallel.schedule = PipelineSchedule::ZeroBubble2p;
    const Estimate two = estimate(in);
    in.assume.optimizerPostValidation = true;
    const Estimate twoValidated = estimate(in);
    in.parallel.schedule = PipelineSchedule::ZeroBubble1p;
    const Estimate oneValidated = estimate(in);
    ASSERT_GE(in.parallel.microbatches(), 8);
    EXPECT_NEAR(one.bubbleTime, oneF.bubbleTime / 3, 1e-9 * oneF.bubbleTime);
    EXPECT_NEAR(two.bubbleTime, one.bubbleTime, 1e-9 * one.bubbleTime);
    EXPECT_NEAR(oneValidated.bubbleTime, one.bubbleTime, 1e-9 * one.bubbleTime);
    EXPECT_DOUBLE_EQ(twoValidated.bubbleTime, 0);
    EXPECT_DOUBLE_EQ(one.memory.inflightMicrobatches, 4);
    EXPECT_DOUBLE_EQ(two.memory.inflightMicrobatches, 8);
    EXPECT_GT(two.memory.activations, 1.9 * one.memory.activations);
    EXPECT_LT(twoValidated.stepTime, one.stepTime);
}

TEST(Estimate, RecomputeCostsComputeAndSavesMemory) {
    PlanInputs in = llama70b();
    in.parallel.recompute = Recompute::None;
    const Estimate none = estimate(in);
    in.parallel.recompute = Recompute::Full;
    const Estimate full = estimate(in);
    EXPECT_LT(full.memory.activations, none.memory.activations / 4);
    EXPECT_GT(full.computeTime, none.computeTime * 1.2);
    EXPECT_NEAR(full.hardwareFlopsPerToken / full.modelFlopsPerToken, 4.0 / 3, 0.02);
    EXPECT_DOUBLE_EQ(full.modelFlopsPerStep, none.modelFlopsPerStep);
}

// torchtitan's op-level selective checkpointing on Llama 3 8B (h 4096, 8 KV heads of 128, FFN
// 14336): of Q, K, V, O, gate, up and down it reruns K (4096 x 1024), O (4096 x 4096) and up
// (4096 x 14336), and keeps Q, V, gate and down's outputs, the FlashAttention output and the
// layer input: 2 bytes x (4096 + 4096 + 1024 + 14336 + 4096 + 4096) a token a layer.
TEST(Estimate, OpLevelRecomputeRerunsEverySecondProjectionOfALlamaLayer) {
    ParallelConfig p = test::layout(8, 1, 1, 8, 3);
    p.microBatch = 1;
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 1, p);
    const double layers = 32, tokens = 8192;
    in.parallel.recompute = Recompute::None;
    const Estimate none = estimate(in);
    in.parallel.recompute = Recompute::SelectiveOp;
    const Estimate op = estimate(in);
    ASSERT_TRUE(op.valid());
    const double rerun = 2.0 * 4096 * (1024 + 4096 + 14336);
    EXPECT_NEAR(op.hardwareFlopsPerToken - none.hardwareFlopsPerToken, layers * rerun, 1.0);
    EXPECT_DOUBLE_EQ(op.modelFlopsPerToken, none.modelFlopsPerToken);
    EXPECT_DOUBLE_EQ(op.memory.activationsPerLayer,
                     2.0 * tokens * (4096 + 4096 + 1024 + 14336 + 4096 + 4096));
    // Between Megatron's selective and full recompute in memory; it costs time as it reruns.
    in.parallel.recompute = Recompute::Full;
    const Estimate full = estimate(in);
    EXPECT_GT(op.memory.activations, full.memory.activations);
    EXPECT_LT(op.memory.activations, none.memory.activations / 2);
    EXPECT_GT(op.computeTime, none.computeTime);
    EXPECT_LT(op.computeTime, full.computeTime);
    // What is not kept is held again for one layer's backward.
    EXPECT_DOUBLE_EQ(op.memory.recomputeLayer,
                     none.memory.activationsPerLayer - op.memory.activationsPerLayer);
    // tp 2 with SP: the input splits over the TP group, the column-parallel outputs (Q, V, gate)
    // and the kernel's split by heads, down's output stays whole before its reduce-scatter, and
    // the two reduce-scatters' outputs (h / 2 each) are kept as well.
    in.parallel = test::layout(4, 2, 1, 8, 3);
    in.parallel.microBatch = 1;
    in.parallel.sequenceParallel = true;
    in.parallel.recompute = Recompute::SelectiveOp;
    EXPECT_DOUBLE_EQ(estimate(in).memory.activationsPerLayer,
                     2.0 * tokens * (2048 + 2048 + 512 + 7168 + 4096 + 2048 + 2 * 2048));
}

// Megatron-LM's --recompute-method block: the first n layers of each virtual stage keep only
// their input, the others everything. Llama 3 8B on tp 2 x pp 2 x vpp 4: 8 chunks of 4 layers,
// one of each recomputed, so a quarter of every stage's 16 layers.
TEST(Estimate, RecomputingSomeLayersOfEachStageMixesFullAndNoRecompute) {
    ParallelConfig p = test::layout(2, 2, 2, 16, 1);
    p.vpp = 4;
    p.schedule = PipelineSchedule::Interleaved;
    p.sequenceParallel = true;
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 1, p);
    in.parallel.recompute = Recompute::None;
    const Estimate none = estimate(in);
    in.parallel.recompute = Recompute::Full;
    const Estimate full = estimate(in);
    in.parallel.recomputeLayers = 1;
    const Estimate some = estimate(in);
    ASSERT_TRUE(some.valid()) << some.violations.front().message;
    const double share = 0.25, tokens = 8192;
    // A recomputed layer keeps its bf16 input, split over the TP group by SP.
    EXPECT_DOUBLE_EQ(full.memory.activationsPerLayer, 2.0 * tokens * 4096 / 2);
    EXPECT_DOUBLE_EQ(some.memory.activationsPerLayer,
                     share * full.memory.activationsPerLayer +
                         (1 - share) * none.memory.activationsPerLayer);
    EXPECT_DOUBLE_EQ(some.memory.recomputeLayer, none.memory.activationsPerLayer);
    // The rerun forward: a quarter of full recompute's extra FLOPs, TP collectives and time.
    EXPECT_NEAR(some.hardwareFlopsPerToken,
                none.hardwareFlopsPerToken +
                    share * (full.hardwareFlopsPerToken - none.hardwareFlopsPerToken),
                1e-9 * some.hardwareFlopsPerToken);
    EXPECT_DOUBLE_EQ(some.axis(Axis::TP).bytes, none.axis(Axis::TP).bytes * (2 + share) / 2);
    EXPECT_NEAR(some.computeTime, none.computeTime + share * (full.computeTime - none.computeTime),
                1e-9 * some.computeTime);
    // Four layers a chunk: recomputing all four of them is full recompute.
    in.parallel.recomputeLayers = 4;
    EXPECT_DOUBLE_EQ(estimate(in).stepTime, full.stepTime);
    in.parallel.recomputeLayers = 5;
    EXPECT_FALSE(estimate(in).valid());
}

// FP8 weights (Megatron-Core's --fp8-param-gather) are gathered in FP8: under the distributed
// optimizer a rank reduce-scatters fp32 gradients (4 B a parameter) and gathers its weights, 2 B
// in bf16; with FP8 weights 1 B for the layers' and still 2 B for the embedding, head and final
// norm. An A100 runs the same policy in bf16 and gathers bf16.
TEST(Estimate, Fp8WeightsAreGatheredInOneByte) {
    ParallelConfig p = test::layout(8, 8, 1, 512, 1); // one stage: it holds the embedding and head
    p.sequenceParallel = true;
    p.recompute = Recompute::Selective;
    p.precision = PrecisionPolicy::fp8Mixed();
    PlanInputs in = test::inputs("llama3-70b", "h100-sxm", 8, 8, p);
    const double bf16Weights = estimate(in).axis(Axis::DP).bytes;
    in.parallel.precision = precisionPolicyFromString("fp8-params");
    const Estimate fp8Weights = estimate(in);
    ASSERT_TRUE(fp8Weights.valid());
    const ParamCount c = countParameters(in.model);
    const double params = fp8Weights.memory.paramsOnRank;
    const double bf16Part = (c.embeddings + c.lmHead) / 8 + c.finalNorm;
    const double meanWeight = (params - bf16Part + 2 * bf16Part) / params;
    EXPECT_NEAR(fp8Weights.axis(Axis::DP).bytes, bf16Weights * (4 + meanWeight) / (4 + 2),
                1e-9 * bf16Weights);
    EXPECT_LT(meanWeight, 1.1); // the layers are most of the weights

    in.cluster = makeCluster(findGpuPreset("a100-80gb"), 8, 8);
    const double onA100 = estimate(in).axis(Axis::DP).bytes;
    in.parallel.precision = PrecisionPolicy::fp8Mixed();
    EXPECT_DOUBLE_EQ(onA100, estimate(in).axis(Axis::DP).bytes);
}

// A checkpoint holds the weights as they are kept: FP8 weights save a byte on each layer
// parameter, not on the embedding, head and final norm; the optimizer step, which reads and
// writes the weights it updates, gets faster with them.
TEST(Estimate, Fp8WeightsShrinkTheCheckpointByTheLayersParameters) {
    PlanInputs in = llama70b();
    in.parallel.precision = PrecisionPolicy::fp8Mixed();
    const Estimate bf16Weights = estimate(in);
    in.parallel.precision = precisionPolicyFromString("fp8-params");
    const Estimate fp8Weights = estimate(in);
    const ParamCount c = countParameters(in.model);
    const double layers = c.total - (c.embeddings + c.lmHead + c.finalNorm);
    EXPECT_NEAR(bf16Weights.checkpointBytes - fp8Weights.checkpointBytes, layers,
                1e-9 * bf16Weights.checkpointBytes);
    EXPECT_LT(fp8Weights.optimizerTime, bf16Weights.optimizerTime);
}

TEST(Estimate, Zero3CommunicatesMoreThanZero1) {
    PlanInputs in = llama70b();
    const double z1 = estimate(in).axis(Axis::DP).bytes;
    in.parallel.zero = 3;
    const Estimate z3 = estimate(in);
    EXPECT_GT(z3.axis(Axis::DP).bytes, z1);
    EXPECT_LT(z3.memory.parameters, estimate(llama70b()).memory.parameters);
}

// Hybrid sharding on a cluster whose links are round numbers: the data-parallel traffic is
// full sharding's inside each group of s ranks (a node here), plus an all-reduce of a 1/s shard of
// the gradients across the r = dp/s groups (Zhao et al. 2023, PyTorch FSDP, Section 3.2.1),
// written out here with the ring's alpha-beta times.
TEST(Estimate, HybridShardingGathersInTheGroupAndAllReducesAcrossGroups) {
    ParallelConfig p = test::layout(32, 1, 1, 64, 3);
    p.shardGroup = 8;
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 4, p);
    in.cluster.intraBandwidth = 400e9;
    in.cluster.interBandwidth = 10e9;
    in.cluster.intraLatency = in.cluster.interLatency = 0;
    in.assume.commEfficiency = 1.0;
    const Estimate e = estimate(in);
    ASSERT_TRUE(e.valid());
    const AxisComm& dp = e.axis(Axis::DP);
    const double params = e.memory.paramsOnRank, m = p.microbatches();
    const double weights = 2 * params, grads = 4 * params; // bf16 weights, fp32 gradients
    const double inGroup = m * (2 * weights + grads) * 7.0 / 8 / 400e9;
    // One member of each group of copies per node: its own NIC.
    const double acrossGroups = 2.0 * 3 / 4 * (grads / 8) / 10e9;
    EXPECT_NEAR(dp.seconds, inGroup + acrossGroups, 1e-9 * dp.seconds);
    EXPECT_EQ(dp.collectives, 3 * m + 1);
    EXPECT_TRUE(dp.crossesNodes);

    // Sharded over 8, the states take what full sharding over 8 GPUs takes.
    PlanInputs eight = in;
    eight.parallel.dp = 8;
    eight.parallel.shardGroup = 0;
    eight.parallel.globalBatch = 16;
    eight.cluster.nodes = 1;
    const MemoryBreakdown full8 = estimate(eight).memory;
    EXPECT_DOUBLE_EQ(e.memory.parameters, full8.parameters);
    EXPECT_DOUBLE_EQ(e.memory.gradients, full8.gradients);
    EXPECT_DOUBLE_EQ(e.memory.optimizer, full8.optimizer);

    // Against full sharding over all 32 (every gather crossing nodes): less traffic on the slow
    // links, four times the state memory.
    in.parallel.shardGroup = 0;
    const Estimate fsdp = estimate(in);
    EXPECT_LT(dp.seconds, fsdp.axis(Axis::DP).seconds);
    EXPECT_DOUBLE_EQ(e.memory.parameters, 4 * fsdp.memory.parameters);
    // A group of all the ranks is full sharding, to the bit.
    in.parallel.shardGroup = 32;
    EXPECT_EQ(estimate(in).stepTime, fsdp.stepTime);
}

// Groups of one rank shard nothing: every rank holds whole states and all-reduces its gradients
// once per step, which is ZeRO-0 (DDP), the exposed time included (that all-reduce hides only
// behind the last backward, not behind the whole step as ZeRO-3's gathers do).
TEST(Estimate, HybridShardingOverGroupsOfOneIsDdp) {
    ParallelConfig p = test::layout(32, 1, 1, 256, 3);
    p.shardGroup = 1;
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 4, p);
    in.cluster.interBandwidth = 2e9; // slow enough that the all-reduce shows
    const Estimate groupsOfOne = estimate(in);
    in.parallel.zero = 0;
    in.parallel.shardGroup = 0;
    const Estimate ddp = estimate(in);
    const AxisComm &a = groupsOfOne.axis(Axis::DP), &b = ddp.axis(Axis::DP);
    EXPECT_NEAR(a.seconds, b.seconds, 1e-12 * b.seconds);
    EXPECT_NEAR(a.bytes, b.bytes, 1e-9 * b.bytes);
    EXPECT_GT(b.exposed, 0);
    EXPECT_NEAR(a.exposed, b.exposed, 1e-12 * b.seconds);
    EXPECT_EQ(a.collectives, 1);
    EXPECT_DOUBLE_EQ(groupsOfOne.memory.parameters, ddp.memory.parameters);
    EXPECT_DOUBLE_EQ(groupsOfOne.memory.optimizer, ddp.memory.optimizer);
}

// A second method for what overlapped communication costs: step through time while the
// collective runs beside compute that advances 1 + k times slower, then let whichever is left
// finish alone. Returns the time added to the compute alone.
double simulatedExposure(double comm, double compute, double k) {
    const double dt = std::max(comm, compute) * 1e-5;
    double t = 0, commLeft = comm, computeLeft = compute;
    while (commLeft > 0 && computeLeft > 0) {
        commLeft -= dt;
        computeLeft -= dt / (1 + k);
        t += dt;
    }
    return t + std::max(0.0, commLeft) + std::max(0.0, computeLeft) - compute;
}

// Data parallelism's all-reduce runs bucket by bucket during the last backward (2/3 of a
// microbatch): it hides when it fits (at the compute slowdown Lee et al. 2025 measured), and
// past that its own time is the critical path.
TEST(Estimate, OverlappedCommunicationCostsWhatSlowerComputeLoses) {
    ParallelConfig p = test::layout(32, 1, 1, 256, 0);
    for (double network : {25e9, 0.5e9}) { // hides, then does not
        PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 4, p);
        in.cluster.interBandwidth = network;
        const Estimate e = estimate(in);
        const AxisComm& dp = e.axis(Axis::DP);
        EXPECT_NEAR(dp.window, e.microbatchCompute * 2 / 3, 1e-12 * dp.window);
        const double expected = simulatedExposure(dp.seconds, dp.window, in.assume.overlapSlowdown);
        EXPECT_NEAR(dp.exposed, expected, 1e-3 * dp.seconds) << network;
        EXPECT_GT(dp.exposed, 0);
        EXPECT_LT(dp.exposed, dp.seconds);
    }
}

// Without overlap (Megatron-LM before 2023, DeepSpeed's pipeline engine) every collective waits:
// exposed is all of it, for every ZeRO stage; memory does not change.
TEST(Estimate, CommunicationNotOverlappedIsAllExposed) {
    for (int zero : {0, 1, 2, 3}) {
        PlanInputs in =
            test::inputs("llama3-8b", "h100-sxm", 8, 4, test::layout(32, 1, 1, 256, zero));
        const Estimate overlapped = estimate(in);
        in.parallel.overlapGradReduce = in.parallel.overlapParamGather = false;
        const Estimate waits = estimate(in);
        const AxisComm& dp = waits.axis(Axis::DP);
        EXPECT_GT(dp.seconds, 0) << zero;
        EXPECT_DOUBLE_EQ(dp.exposed, dp.seconds) << zero;
        EXPECT_DOUBLE_EQ(dp.seconds, overlapped.axis(Axis::DP).seconds) << zero;
        EXPECT_LT(overlapped.axis(Axis::DP).exposed, dp.exposed) << zero;
        EXPECT_NEAR(waits.stepTime - overlapped.stepTime,
                    dp.exposed - overlapped.axis(Axis::DP).exposed, 1e-9 * waits.stepTime)
            << zero;
        EXPECT_DOUBLE_EQ(waits.memory.total(), overlapped.memory.total()) << zero;
    }
}

// Each flag hides only its own collectives: the gradient reduce-scatter or the parameter
// all-gather of ZeRO-1 and ZeRO-3, each exposed alone when its flag is off.
TEST(Estimate, EachOverlapFlagHidesItsOwnCollectives) {
    for (int zero : {1, 3}) {
        PlanInputs in =
            test::inputs("llama3-8b", "h100-sxm", 8, 4, test::layout(32, 1, 1, 256, zero));
        // Slow enough that what is not hidden shows, fast enough that ZeRO-3's traffic can
        // hide behind the compute.
        in.cluster.interBandwidth = zero == 1 ? 2e9 : 200e9;
        auto exposedWith = [&](bool grads, bool params) {
            in.parallel.overlapGradReduce = grads;
            in.parallel.overlapParamGather = params;
            return estimate(in).axis(Axis::DP).exposed;
        };
        const double both = exposedWith(true, true), gradsOnly = exposedWith(true, false),
                     paramsOnly = exposedWith(false, true), neither = exposedWith(false, false);
        EXPECT_LT(both, gradsOnly) << zero;
        EXPECT_LT(both, paramsOnly) << zero;
        EXPECT_LT(gradsOnly, neither) << zero;
        EXPECT_LT(paramsOnly, neither) << zero;
    }
}

// ZeRO-3's backward holds its own re-gathers (half the gathers) and every reduce-scatter: however
// the traffic compares with the compute, the step cannot hide more of it than the backward lasts.
// bf16 weights and fp32 gradients: the two gathers of a microbatch move as many bytes as its
// reduce-scatter, so each is half of the traffic.
TEST(Estimate, Zero3BackwardHoldsItsGathersAndScatters) {
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 4, test::layout(32, 1, 1, 256, 3));
    in.cluster.intraLatency = in.cluster.interLatency = 0;
    bool bound = false; // the backward's window, not the whole compute's, sets the exposure
    for (double gbps = 2.5; gbps <= 50; gbps *= 1.05) { // 8 NICs a node carry the group
        in.cluster.interBandwidth = gbps * 1e9;
        const Estimate e = estimate(in);
        const AxisComm& dp = e.axis(Axis::DP);
        const double gathers = dp.seconds / 2, scatters = dp.seconds / 2;
        const double backward = dp.window * 2 / 3, k = in.assume.overlapSlowdown;
        EXPECT_GE(dp.exposed, gathers / 2 + scatters - backward - 1e-12 * dp.seconds) << gbps;
        EXPECT_GE(dp.exposed, dp.seconds - dp.window - 1e-12 * dp.seconds) << gbps;
        EXPECT_GE(dp.exposed, dp.seconds * k / (1 + k) * (1 - 1e-12)) << gbps;
        bound |= gathers / 2 + scatters - backward >
                 std::max(dp.seconds - dp.window, dp.seconds * k / (1 + k));
    }
    EXPECT_TRUE(bound);
}

// FSDP's BackwardPrefetch, as PyTorch's FSDP docs describe it. With every window wide enough to
// hide what overlaps, prefetching before each layer's gradients exposes only what the compute
// beside the traffic loses, t k/(1+k). Gathering after them leaves the backward's gathers in the
// open: bf16 weights gathered twice a microbatch against one reduce-scatter of fp32 gradients
// make the backward's gathers a quarter of the traffic. Without prefetch the reduce-scatters
// (half of it) wait too.
TEST(Estimate, BackwardPrefetchDecidesWhichZero3TrafficWaits) {
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 4, test::layout(32, 1, 1, 256, 3));
    in.cluster.intraLatency = in.cluster.interLatency = 0;
    in.cluster.interBandwidth = 400e9; // small beside the compute: everything overlapped hides
    const double k = in.assume.overlapSlowdown, lost = k / (1 + k);
    auto with = [&](BackwardPrefetch b) {
        in.parallel.backwardPrefetch = b;
        return estimate(in);
    };
    const Estimate pre = with(BackwardPrefetch::Pre), post = with(BackwardPrefetch::Post),
                   none = with(BackwardPrefetch::None);
    const double t = pre.axis(Axis::DP).seconds;
    ASSERT_GT(t, 0);
    ASSERT_LT(t, pre.computeTime / 4); // inside the forward (a third) and backward windows
    EXPECT_NEAR(pre.axis(Axis::DP).exposed, t * lost, 1e-9 * t);
    EXPECT_NEAR(post.axis(Axis::DP).exposed, t / 4 + 3 * t / 4 * lost, 1e-9 * t);
    EXPECT_NEAR(none.axis(Axis::DP).exposed, 3 * t / 4 + t / 4 * lost, 1e-9 * t);
    for (const Estimate* e : {&post, &none}) {
        EXPECT_DOUBLE_EQ(e->axis(Axis::DP).seconds, t);
        EXPECT_DOUBLE_EQ(e->memory.total(), pre.memory.total());
        EXPECT_NEAR(e->stepTime - pre.stepTime,
                    e->axis(Axis::DP).exposed - pre.axis(Axis::DP).exposed, 1e-9 * pre.stepTime);
    }
    // ZeRO-1 gathers nothing in the backward: the setting changes nothing there.
    in.parallel.zero = 1;
    const double zero1 = with(BackwardPrefetch::Pre).stepTime;
    EXPECT_DOUBLE_EQ(with(BackwardPrefetch::None).stepTime, zero1);
}

// PyTorch autocast over fp32 weights (DDP with torch.autocast; FSDP with param_dtype fp32): the
// weights take 4 bytes and are the optimizer's master themselves, ZeRO-3 gathers them at 4
// bytes, and every microbatch casts each GEMM's weight to bf16 per forward run (4 B read, 2 B
// written) and its gradient back once (2 + 4 B), at the memory-bound rate. Against bf16 weights
// with the same fp32 gradients and no master copy, only those differ. Under amp-bf16grads the
// same fp32 gradients are reduced in bf16 (Composer's FSDP "DEFAULT" of 2023).
TEST(Estimate, AutocastOverFp32WeightsGathersFourBytesAndCastsEveryRun) {
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 1, test::layout(8, 1, 1, 64, 3));
    const ParamCount c = countParameters(in.model);
    // The GEMMs' weights: every layer's projections, cast per forward run, and the output
    // head's, which no recompute reruns (norms and the embedding lookup cast nothing).
    const double layers = c.attention + c.mlp, head = double(in.model.vocab) * in.model.hidden;
    const double rate = in.cluster.gpu.hbmBandwidth * in.assume.memoryEfficiency;
    for (const auto& [recompute, forwardRuns] :
         {std::pair{Recompute::Selective, 1.0}, std::pair{Recompute::Full, 2.0}}) {
        in.parallel.recompute = recompute;
        in.parallel.precision = precisionPolicyFromString("bf16-fp32grads-nomaster");
        const Estimate bf16 = estimate(in);
        in.parallel.precision = precisionPolicyFromString("amp");
        const Estimate amp = estimate(in);
        EXPECT_NEAR(amp.memory.parameters, 2 * bf16.memory.parameters,
                    1e-9 * amp.memory.parameters);
        EXPECT_DOUBLE_EQ(amp.memory.gradients, bf16.memory.gradients);
        EXPECT_DOUBLE_EQ(amp.memory.optimizer, bf16.memory.optimizer);
        EXPECT_NEAR(amp.axis(Axis::DP).bytes / bf16.axis(Axis::DP).bytes, (2 * 4 + 4) / 8.0, 1e-12);
        const double casts = 6.0 * ((forwardRuns + 1.0) * layers + 2.0 * head);
        EXPECT_NEAR(amp.microbatchCompute - bf16.microbatchCompute, casts / rate,
                    1e-9 * amp.microbatchCompute);
        EXPECT_NEAR(weightCastBytes(in, 0), casts, 1e-9 * casts);
        in.parallel.precision = precisionPolicyFromString("amp-bf16grads");
        const Estimate reducedInBf16 = estimate(in);
        EXPECT_NEAR(reducedInBf16.axis(Axis::DP).bytes / bf16.axis(Axis::DP).bytes,
                    (2 * 4 + 2) / 8.0, 1e-12);
        EXPECT_DOUBLE_EQ(reducedInBf16.memory.gradients, amp.memory.gradients);
        EXPECT_DOUBLE_EQ(reducedInBf16.microbatchCompute, amp.microbatchCompute);
    }
}

// Megatron's tp-comm-overlap (Transformer Engine userbuffers) hides TP's sequence-parallel
// collectives behind the layer's GEMMs; without it they all wait between dependent GEMMs.
TEST(Estimate, TpCommOverlapHidesTensorParallelTrafficBehindTheGemms) {
    PlanInputs in = llama70b();
    const Estimate waits = estimate(in);
    const AxisComm& tp = waits.axis(Axis::TP);
    EXPECT_GT(tp.seconds, 0);
    EXPECT_DOUBLE_EQ(tp.exposed, tp.seconds);
    in.parallel.tpCommOverlap = true;
    const Estimate hidden = estimate(in);
    const AxisComm& tpHidden = hidden.axis(Axis::TP);
    EXPECT_DOUBLE_EQ(tpHidden.seconds, tp.seconds);
    EXPECT_GT(tpHidden.window, tp.seconds); // NVLink traffic fits behind the GEMMs
    EXPECT_LT(tpHidden.window, hidden.computeTime);
    EXPECT_NEAR(tpHidden.exposed,
                simulatedExposure(tp.seconds, tpHidden.window, in.assume.overlapSlowdown),
                1e-3 * tp.seconds);
    EXPECT_LT(hidden.stepTime, waits.stepTime);
    EXPECT_DOUBLE_EQ(hidden.memory.total(), waits.memory.total());
}

// The conventions papers count MFU in, against each other for a GPT-3-style layer (ffn = 4h, as
// many KV heads as heads): PaLM's 6N + 12 L h s counts the whole attention square, the planner's
// half of it; Megatron's 96 B s l h^2 (1 + s/6h + V/16lh) is PaLM's with every layer's forward
// run again (full recompute: 24 l h^2 + 4 l h s more), and the head's not.
TEST(Estimate, FlopConventionsRelateAsThePapersCountThem) {
    const ModelSpec m = test::gptStyle(96, 12288, 96, 2048, 51200);
    const double l = 96, h = 12288, s = 2048, V = 51200;
    const double palm = conventionFlopsPerToken(m, FlopsConvention::Palm);
    const double causal = conventionFlopsPerToken(m, FlopsConvention::Causal);
    const double megatron = conventionFlopsPerToken(m, FlopsConvention::Megatron);
    // Biases and norms are the only parameters outside 12 l h^2 + V h.
    EXPECT_NEAR(palm, 72 * l * h * h + 6 * V * h + 12 * l * h * s, 1e-4 * palm);
    EXPECT_NEAR(palm - causal, 6 * l * h * s, 1e-9 * palm);
    EXPECT_NEAR(megatron, palm + 24 * l * h * h + 4 * l * h * s, 1e-4 * megatron);
    EXPECT_DOUBLE_EQ(conventionFlopsPerToken(m, FlopsConvention::SixN),
                     6 * countParameters(m).total);

    // The convention moves MFU and model FLOP/s, never the step time or HFU.
    PlanInputs in = llama70b();
    const Estimate planner = estimate(in);
    EXPECT_NEAR(planner.modelFlopsPerToken,
                conventionFlopsPerToken(in.model, FlopsConvention::Causal),
                1e-9 * planner.modelFlopsPerToken);
    in.assume.flopsConvention = FlopsConvention::Palm;
    const Estimate withPalm = estimate(in);
    EXPECT_EQ(withPalm.stepTime, planner.stepTime);
    EXPECT_EQ(withPalm.hfu, planner.hfu);
    const double ratio = conventionFlopsPerToken(in.model, FlopsConvention::Palm) /
                         conventionFlopsPerToken(in.model, FlopsConvention::Causal);
    EXPECT_GT(ratio, 1.0);
    EXPECT_NEAR(withPalm.mfu, planner.mfu * ratio, 1e-9 * withPalm.mfu);
    EXPECT_EQ(flopsConventionFromString("PaLM"), FlopsConvention::Palm);
    EXPECT_THROW(flopsConventionFromString("kaplan"), InputError);
}

// MLA's scores multiply 192-wide queries and keys a head, its weights 128-wide values: the core
// costs 2 s (16 x 192 + 16 x 128) FLOPs a token forward, half under the causal mask, and the
// papers' 12 l q s term takes q as the mean of the two widths.
TEST(Estimate, LatentAttentionsScoresAreWiderThanItsValues) {
    ModelSpec m = test::deepSeekV2Lite(4096);
    const TokenFlops f = tokenFlops(m, ParallelConfig{}, Assumptions{});
    EXPECT_DOUBLE_EQ(f.attentionCore, 2.0 * 4096 * (16 * 192 + 16 * 128) / 2);
    EXPECT_DOUBLE_EQ(conventionFlopsPerToken(m, FlopsConvention::Palm) -
                         conventionFlopsPerToken(m, FlopsConvention::Causal),
                     6.0 * 27 * (16 * 192 + 16 * 128) / 2 * 4096);
    m.mtpModules = 1;
    EXPECT_NEAR(conventionFlopsPerToken(m, FlopsConvention::Causal),
                tokenFlops(m, ParallelConfig{}, Assumptions{}).model, 1e-9 * 1e10);

    // head_dim means nothing to MLA (its widths are its own): a model file with another one
    // plans the same as the import, which sets it to v_head_dim.
    PlanInputs in;
    in.model = test::deepSeekV2Lite(4096);
    in.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 1);
    in.parallel = test::layout(2, 2, 2, 64, 1);
    in.parallel.sequenceParallel = true;
    in.parallel.cp = 2;
    in.parallel.ep = 2;
    const Estimate imported = evaluate(in);
    in.model.headDim = 64;
    const Estimate written = evaluate(in);
    EXPECT_DOUBLE_EQ(written.stepTime, imported.stepTime);
    EXPECT_DOUBLE_EQ(written.memory.total(), imported.memory.total());
}

TEST(Estimate, ModelFlopsFollowSixNForLargeModels) {
    // Without the attention and LM-head terms the count is exactly 6N on the matmul parameters.
    const ModelSpec m = findModelPreset("llama3-70b");
    ParallelConfig p;
    Assumptions a;
    const TokenFlops f = tokenFlops(m, p, a);
    EXPECT_NEAR(m.layers * 3 * f.layerMatmul + 3 * f.lmHead, 6 * matmulParamsPerToken(m), 1e3);
    EXPECT_GT(f.model, 6 * countParameters(m).total * 0.99);
}

TEST(Estimate, FasterNetworkNeverSlowsTheStep) {
    PlanInputs in = llama70b();
    in.parallel.zero = 3;
    const double slow = estimate(in).stepTime;
    in.cluster.interBandwidth *= 4;
    EXPECT_LE(estimate(in).stepTime, slow);
}

TEST(Estimate, ReliabilityFollowsYoungDaly) {
    PlanInputs in = llama70b();
    const Estimate e = estimate(in);
    EXPECT_NEAR(e.jobMtbf, in.cluster.gpuMtbfHours * 3600 / 64, 1e-6 * e.jobMtbf);
    EXPECT_NEAR(e.checkpointInterval,
                std::sqrt(2 * e.checkpointWrite * e.jobMtbf) - e.checkpointWrite, 1e-6);
    EXPECT_GT(e.trainingFraction, 0.9);
    EXPECT_LE(e.trainingFraction, 1.0);
    EXPECT_GT(e.wallTimeToTrain, e.timeToTrain);
    // More GPUs fail more often and lose a larger share of time.
    in.cluster.nodes = 2048;
    in.parallel.dp = 512;
    EXPECT_LT(estimate(in).trainingFraction, e.trainingFraction);
}

// A model given only as a parameter count, on nodes of 8 H100, every GPU a data-parallel rank.
PlanInputs bareModel(double params, int nodes, int zero) {
    PlanInputs in;
    in.model.name = "bare";
    in.model.bareParams = params;
    in.model.seqLen = 4096;
    in.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, nodes);
    in.parallel = test::layout(8 * nodes, 1, 1, 8 * nodes, zero);
    return in;
}

TEST(Estimate, BareModelGivesModelStateOnly) {
    PlanInputs in = bareModel(7e9, 1, 3);
    const Estimate e = estimate(in);
    EXPECT_TRUE(e.valid());
    EXPECT_NEAR(e.memory.parameters + e.memory.gradients + e.memory.optimizer, 7e9 * 18 / 8, 1);
    EXPECT_EQ(e.memory.activations, 0);
    EXPECT_DOUBLE_EQ(e.modelFlopsPerToken, 6 * 7e9);
}

// A memory headroom keeps a share of each GPU free: the layout needs as much as before, and fits
// only where that is within the rest of the GPU's memory.
TEST(Estimate, AMemoryHeadroomKeepsPartOfEachGpuFree) {
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 1, test::layout(8, 1, 1, 64, 3));
    in.parallel.recompute = Recompute::Full;
    const Estimate whole = estimate(in);
    ASSERT_TRUE(whole.valid());
    ASSERT_TRUE(whole.fits);
    const double used = whole.memory.total() / 80e9; // the H100 SXM's 80 GB
    ASSERT_LT(used, 0.85);
    const auto withHeadroom = [&](double headroom) {
        in.assume.memoryHeadroom = headroom;
        return estimate(in);
    };
    const Estimate roomy = withHeadroom((1 - used) / 2); // half of what is free kept free
    EXPECT_DOUBLE_EQ(roomy.memory.total(), whole.memory.total());
    EXPECT_TRUE(roomy.fits);
    EXPECT_NEAR(roomy.capacity - roomy.memory.total(), (80e9 - whole.memory.total()) / 2, 1e3);
    const Estimate tight = withHeadroom(1 - used + 0.05); // more than is free
    EXPECT_DOUBLE_EQ(tight.memory.total(), whole.memory.total());
    EXPECT_FALSE(tight.fits);
    EXPECT_DOUBLE_EQ(tight.gpuMemory, 80e9);
    const std::string text = explain(in, tight, FigureId::MemTotal).substituted;
    EXPECT_NE(text.find("80.0 GB less a"), std::string::npos) << text;
    EXPECT_NE(text.find("does not fit"), std::string::npos) << text;
}

// The lessons' back-of-the-envelope estimate: time = 6 N D / (GPUs x peak x MFU) (Kaplan et al.
// 2020's 6N FLOPs per token, which is all a bare parameter count allows).
TEST(Estimate, AnAssumedMfuGivesTheSixNdTime) {
    PlanInputs in = bareModel(70e9, 8, 3);
    in.cluster.gpuHourCost = 2.5;
    in.train.trainTokens = 1e12;
    const Estimate modelled = estimate(in);
    in.assume.assumedMfu = 0.4;
    const Estimate e = estimate(in);
    ASSERT_TRUE(e.valid());
    const double peak = in.cluster.gpu.peak(in.parallel.precision.compute);
    const double seconds = 6 * 70e9 * 1e12 / (64 * peak * 0.4);
    EXPECT_TRUE(e.mfuAssumed);
    EXPECT_NEAR(e.timeToTrain, seconds, 1e-9 * seconds);
    EXPECT_NEAR(e.gpuHours, seconds * 64 / 3600, 1e-9 * e.gpuHours);
    EXPECT_NEAR(e.cost, 2.5 * seconds * 64 / 3600, 1e-9 * e.cost);
    EXPECT_NEAR(e.mfu, 0.4, 1e-12);
    EXPECT_NEAR(e.tflopsPerGpu, 0.4 * peak, 1e-9 * peak);
    // The step model's own figures stay beside the assumed ones, and are the plain estimate's.
    EXPECT_FALSE(modelled.mfuAssumed);
    EXPECT_DOUBLE_EQ(e.modelledStepTime, modelled.stepTime);
    EXPECT_DOUBLE_EQ(e.modelledMfu, modelled.mfu);
    EXPECT_DOUBLE_EQ(e.memory.total(), modelled.memory.total());
    // The step's parts still add up to the step.
    double sum = 0;
    for (const StepPart& part : stepTimeParts(e))
        sum += part.seconds;
    EXPECT_NEAR(sum, e.stepTime, 1e-9 * e.stepTime);
}

// Full recomputation runs the forward twice: 8N hardware FLOPs for 6N model FLOPs per token, so
// HFU = 4/3 MFU (PaLM, Appendix B), whatever the step time.
TEST(Estimate, FullRecomputeCountsInHardwareFlopsAndHfu) {
    PlanInputs in = bareModel(7e9, 1, 1);
    in.parallel.recompute = Recompute::Full;
    for (double mfu : {0.0, 0.35}) {
        in.assume.assumedMfu = mfu;
        const Estimate e = estimate(in);
        EXPECT_NEAR(e.hfu, e.mfu * 8 / 6, 1e-12) << mfu;
        EXPECT_NEAR(e.hardwareFlopsPerGpu, e.tflopsPerGpu * 8 / 6, 1e-6 * e.tflopsPerGpu) << mfu;
    }
}

// FP8 runs only the layers' projections in FP8: the step gains less than the 2x of the peaks,
// and less again where attention's core (bf16) is a larger share, at long sequences.
TEST(Estimate, Fp8SpeedsUpOnlyTheProjections) {
    const auto speedup = [](int seq) {
        PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 1, test::layout(8, 1, 1, 64));
        in.model.seqLen = seq;
        const double bf16 = estimate(in).computeTime;
        in.parallel.precision = PrecisionPolicy::fp8Mixed();
        return bf16 / estimate(in).computeTime;
    };
    const double short_ = speedup(2048), long_ = speedup(32768);
    // The projections alone would gain the ratio of the FP8 and bf16 GEMM rates.
    const Assumptions a;
    const GpuSpec& h100 = findGpuPreset("h100-sxm");
    const double projections =
        h100.peak(Precision::Fp8) * gemmEfficiency(h100, Precision::Fp8, a) /
        (h100.peak(Precision::Bf16) * gemmEfficiency(h100, Precision::Bf16, a));
    EXPECT_GT(short_, 1.0);
    EXPECT_LT(short_, projections);
    EXPECT_GT(long_, 1.0);
    EXPECT_LT(long_, short_);
}

// The GEMM efficiency was calibrated on A100s; another GPU reaches the same share of its own
// measured matmul ceiling. So the GEMM rates of two GPUs stand in the ratio of the matmuls they
// were measured at (Bekman, ml-engineering, "Maximum Achievable Matmul FLOPS comparison table":
// 794.5 TFLOP/s bf16 on an H100 SXM, 271.2 on an A100 SXM; FP8 1453.4 on an H200, 1402.6 on an
// H100 SXM), whatever their datasheet peaks say.
TEST(Estimate, GemmRatesFollowTheGpusMeasuredMatmulCeilings) {
    const auto gemmSeconds = [](const std::string& gpu, bool fp8) {
        PlanInputs in = bareModel(7e9, 1, 1); // every FLOP at the GEMM rate, nothing else
        in.cluster = makeCluster(findGpuPreset(gpu), 8, 1);
        if (fp8)
            in.parallel.precision = PrecisionPolicy::fp8Mixed();
        return stageCompute(in, 0).gemmSeconds;
    };
    EXPECT_NEAR(gemmSeconds("a100-80gb", false) / gemmSeconds("h100-sxm", false), 794.5 / 271.2,
                0.005 * 794.5 / 271.2);
    EXPECT_NEAR(gemmSeconds("h100-sxm", true) / gemmSeconds("h200", true), 1453.4 / 1402.6,
                0.005 * 1453.4 / 1402.6);
    // The calibration GPUs keep the calibrated efficiencies: 0.75 of an A100's bf16 peak, 0.468 of
    // an H100's FP8 peak.
    const Assumptions a;
    EXPECT_NEAR(gemmEfficiency(findGpuPreset("a100-80gb"), Precision::Bf16, a), a.gemmEfficiency,
                1e-12);
    EXPECT_NEAR(gemmEfficiency(findGpuPreset("h100-sxm"), Precision::Fp8, a), a.fp8GemmEfficiency,
                1e-12);
    // A GPU nobody measured keeps the calibrated efficiency of its peak.
    GpuSpec unmeasured = findGpuPreset("h100-sxm");
    unmeasured.matmulCeiling.clear();
    EXPECT_EQ(gemmEfficiency(unmeasured, Precision::Bf16, a), a.gemmEfficiency);
    EXPECT_LT(gemmEfficiency(findGpuPreset("h100-sxm"), Precision::Bf16, a), a.gemmEfficiency);
    // A GPU whose FP8 ceiling nobody measured (MI300X) scales FP8 by its bf16 ceiling, keeping
    // the FP8 calibration GPU's ratio of FP8 to bf16 efficiency; FP8 on an A100 runs as bf16.
    const auto fp8OverBf16 = [&](const std::string& gpu) {
        const GpuSpec& g = findGpuPreset(gpu);
        return gemmEfficiency(g, Precision::Fp8, a) / gemmEfficiency(g, Precision::Bf16, a);
    };
    EXPECT_NEAR(fp8OverBf16("mi300x"), fp8OverBf16("h100-sxm"), 1e-12);
    EXPECT_EQ(fp8OverBf16("a100-80gb"), 1.0);
}

// A GPU without FP8 tensor cores (A100) runs an FP8 policy's GEMMs as bf16, no slower; a bare
// parameter count, with nothing to split, runs all its FLOPs at the FP8 GEMM rate.
TEST(Estimate, Fp8FallsBackWhereTheGpuHasNoFp8AndCountsWholeForABareModel) {
    PlanInputs in = test::inputs("llama3-8b", "a100-80gb", 8, 1, test::layout(8, 1, 1, 64));
    const double bf16 = estimate(in).computeTime;
    in.parallel.precision = PrecisionPolicy::fp8Mixed();
    EXPECT_DOUBLE_EQ(estimate(in).computeTime, bf16);

    PlanInputs bare = bareModel(7e9, 1, 1);
    const StageCompute bareBf16 = stageCompute(bare, 0);
    bare.parallel.precision = PrecisionPolicy::fp8Mixed();
    const StageCompute bareFp8 = stageCompute(bare, 0);
    const GpuSpec& gpu = bare.cluster.gpu;
    EXPECT_NEAR(bareBf16.gemmSeconds / bareFp8.gemmSeconds,
                gpu.peak(Precision::Fp8) * gemmEfficiency(gpu, Precision::Fp8, bare.assume) /
                    (gpu.peak(Precision::Bf16) * gemmEfficiency(gpu, Precision::Bf16, bare.assume)),
                1e-9);
}

// With the FP8 GEMMs made exactly as fast as bf16 ones, FP8 costs more than bf16 by its casts
// only: the GEMM time is the same, the memory-bound time grows.
TEST(Estimate, Fp8CastsCostMemoryBoundTime) {
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 1, test::layout(8, 1, 1, 64));
    in.cluster.gpu.matmulCeiling.clear(); // the efficiencies as given, not scaled by ceilings
    const GpuSpec& gpu = in.cluster.gpu;
    in.assume.fp8GemmEfficiency =
        in.assume.gemmEfficiency * gpu.peak(Precision::Bf16) / gpu.peak(Precision::Fp8);
    const StageCompute bf16 = stageCompute(in, 0);
    in.parallel.precision = PrecisionPolicy::fp8Mixed();
    const StageCompute fp8 = stageCompute(in, 0);
    EXPECT_NEAR(fp8.gemmSeconds, bf16.gemmSeconds, 1e-9 * bf16.gemmSeconds);
    EXPECT_GT(fp8.elementwiseSeconds, bf16.elementwiseSeconds);
    // Every cast reads 2 bytes and writes 1 per element: at most a few per layer's width.
    EXPECT_LT(fp8.elementwiseSeconds - bf16.elementwiseSeconds, 0.5 * bf16.gemmSeconds);
}

// With the embedding in the pipeline split, the second stage holds the most layers: 10 layers +
// the embedding over pp 4 give 2, 3, 3, 2. It is then the slowest (a cheap head: vocabulary 512)
// and, with 3 layers x 3 microbatches in flight against the first stage's 2 x 4, the most loaded.
TEST(Estimate, TheSecondStageCanBeTheHeaviest) {
    PlanInputs in;
    in.model = test::gptStyle(10, 1024, 16, 1024, 512);
    in.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 1);
    in.parallel = test::layout(2, 1, 4, 64);
    in.parallel.embeddingInPipelineSplit = true;
    const Estimate e = estimate(in);
    ASSERT_TRUE(e.valid());
    EXPECT_EQ(e.worstStage, 1);
    EXPECT_NEAR(e.microbatchCompute, stageCompute(in, 1).seconds(), 1e-15);
    EXPECT_GT(stageCompute(in, 1).seconds(), stageCompute(in, 0).seconds());
    EXPECT_GT(stageCompute(in, 1).seconds(), stageCompute(in, 3).seconds());
}

// Mixtral 8x7B, 4,096 tokens a sequence, dp x tp over `nodes` nodes of 8 H100s with ep of the dp
// ranks, one microbatch a rank (m = 1); SP where tp > 1, as EP with TP needs.
PlanInputs mixtral(int dp, int ep, int nodes, int zero = 1, int tp = 1) {
    PlanInputs in;
    in.model = test::mixtral8x7b();
    in.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, nodes);
    in.parallel = test::layout(dp, tp, 1, dp, zero);
    in.parallel.sequenceParallel = tp > 1;
    in.parallel.ep = ep;
    return in;
}

// GShard's dispatch and combine: 4 all-to-alls per layer and microbatch of tokens x top-k x h,
// each rank keeping 1/ep; inside a node over NVLink, across nodes bound by each rank's NIC.
TEST(Estimate, ExpertParallelAllToAllsMoveTopKCopiesOfEveryToken) {
    for (int tp : {1, 2}) {
        SCOPED_TRACE("tp " + std::to_string(tp));
        // ep 8 at stride tp: one node with tp 1; with tp 2, 4 members on each of 2 nodes.
        const PlanInputs in = mixtral(8, 8, tp, 1, tp);
        const Estimate e = estimate(in);
        ASSERT_TRUE(e.valid());
        const AxisComm& c = e.axis(Axis::EP);
        const double held = 4096.0 / tp * 2 * 4096 * 2; // s/tp (SP) x top-k x h x bf16 bytes
        EXPECT_EQ(c.groupSize, 8);
        EXPECT_EQ(c.crossesNodes, tp == 2);
        EXPECT_EQ(c.collectives, 32 * 4);
        EXPECT_NEAR(c.bytes, 32 * 4 * held * 7 / 8, 1.0);
        const ClusterSpec& cl = in.cluster;
        const double eff = in.assume.commEfficiency;
        const double each = tp == 1 ? cl.intraLatency + held * 7 / 8 / (cl.intraBandwidth * eff)
                                    // 4 of 8 peers on the other node, through the rank's own NIC
                                    // (NVLink's 3/8 to the node's others takes less)
                                    : cl.interLatency + held * 4 / 8 / (cl.interBandwidth * eff);
        EXPECT_NEAR(c.seconds, 32 * 4 * each, 1e-9 * c.seconds);
        EXPECT_DOUBLE_EQ(c.exposed, c.seconds); // not overlapped (Megatron-Core's default)
    }
    // Full recompute repeats the forward's dispatch and combine.
    PlanInputs full = mixtral(8, 8, 1);
    full.parallel.recompute = Recompute::Full;
    EXPECT_EQ(estimate(full).axis(Axis::EP).collectives, 32 * 6);
    // Without EP there is no all-to-all; with it the step is still the sum of its parts.
    EXPECT_EQ(estimate(mixtral(8, 1, 1)).axis(Axis::EP).bytes, 0);
    const Estimate e = estimate(mixtral(8, 8, 1));
    double sum = 0;
    for (const StepPart& part : stepTimeParts(e))
        sum += part.seconds;
    EXPECT_NEAR(sum, e.stepTime, 1e-9 * e.stepTime);
    EXPECT_GT(e.axis(Axis::EP).exposed, 0);
}

// Mixtral with its first `dense` layers made dense (DeepSeek's first_k_dense_replace): those
// layers route nothing, so the all-to-alls and the experts' collectives run in the other layers
// only, and a dense layer's MLP has its tp pair as in a dense model.
TEST(Estimate, DenseFirstLayersSendNoAllToAllsAndKeepTheirTpPair) {
    PlanInputs in = mixtral(8, 8, 2, 1, 2); // tp 2 (SP), ep 8
    in.parallel.etp = 1;                    // experts whole on each tp rank: no ETP collectives
    const Estimate all = estimate(in);
    ASSERT_TRUE(all.valid());
    in.model.moe.firstDenseLayers = 3;
    const Estimate e = estimate(in);
    ASSERT_TRUE(e.valid());
    EXPECT_EQ(all.axis(Axis::EP).collectives, 32 * 4);
    EXPECT_EQ(e.axis(Axis::EP).collectives, 29 * 4);
    EXPECT_NEAR(e.axis(Axis::EP).bytes, all.axis(Axis::EP).bytes * 29 / 32, 1.0);
    // TP: an all-gather and a reduce-scatter for attention in every layer, forward and backward,
    // and for the MLP in the dense layers only.
    EXPECT_EQ(all.axis(Axis::TP).collectives, 32 * 2 * 2);
    EXPECT_EQ(e.axis(Axis::TP).collectives, (32 + 3) * 2 * 2);
    // The FLOPs: each dense layer's MLP is one 14336-wide SwiGLU where an MoE layer has two
    // experts of it and the router.
    const double h = 4096, f = 14336;
    EXPECT_NEAR(all.modelFlopsPerToken - e.modelFlopsPerToken,
                3 * 3 * 2.0 * (2 * 3 * h * f + 8 * h - 3 * h * f), 1.0);
}

// DeepSeek-V3's multi-token prediction: one more MoE layer, a 2h -> h projection and the output
// head once more per module, trained on the last pipeline stage; its all-to-alls are that
// stage's, and the first stage is untouched.
TEST(Estimate, AnMtpModuleRunsOneMoreLayerAndHeadOnTheLastStage) {
    PlanInputs in;
    in.model = test::deepSeekMoe16b();
    in.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 2);
    in.parallel = test::layout(4, 2, 2, 64, 1);
    in.parallel.sequenceParallel = true;
    in.parallel.ep = 4;
    const PlanInputs without = in;
    in.model.mtpModules = 1;
    const ParamCount c = countParameters(in.model);
    const double h = 2048, V = 102400;
    EXPECT_DOUBLE_EQ(c.mtp, c.layer(LayerKind::Moe) + 2 * h * h + 3 * h);
    EXPECT_DOUBLE_EQ(c.total - c.mtp, countParameters(without.model).total);

    const int last = 1;
    EXPECT_EQ(stageLayers(in.model, in.parallel, last).moe, 14 + 1);
    EXPECT_EQ(stageLayers(in.model, in.parallel, 0).total(), 14);
    // The layer, the projection over tp 2, three norms, and (untied head, pp 2) the copy of the
    // embedding the modules look up the next tokens in.
    EXPECT_NEAR(paramsOnStage(in.model, c, in.parallel, last) -
                    paramsOnStage(without.model, c, without.parallel, last),
                layerParamsPerTpRank(in.model, c, 2, 4) + 2 * h * h / 2 + 3 * h + V * h / 2, 1.0);
    // The planner's own FLOP count is the causal convention's, MTP modules included.
    EXPECT_NEAR(conventionFlopsPerToken(in.model, FlopsConvention::Causal),
                tokenFlops(in.model, in.parallel, Assumptions{}).model, 1e-9 * c.total);
    EXPECT_DOUBLE_EQ(memoryForStage(in, 0).total(), memoryForStage(without, 0).total());

    const TokenFlops f = tokenFlops(in.model, in.parallel, in.assume);
    const TokenFlops f0 = tokenFlops(without.model, without.parallel, without.assume);
    EXPECT_NEAR(f.model - f0.model, 3 * (f.layerMatmul + f.attentionCore + 4 * h * h + 2 * V * h),
                1.0);
    const Estimate e = evaluate(in), e0 = evaluate(without);
    EXPECT_GT(stageCompute(in, last).seconds(), stageCompute(without, last).seconds());
    EXPECT_DOUBLE_EQ(stageCompute(in, 0).seconds(), stageCompute(without, 0).seconds());
    EXPECT_EQ(e.axis(Axis::EP).collectives, e0.axis(Axis::EP).collectives / 14 * 15);
    EXPECT_GT(e.microbatchCompute, e0.microbatchCompute);
}

// The estimate's memory and compute are those of the most loaded and the slowest of all the
// stages, found by planning every stage, for models whose first stages differ from the rest.
TEST(Estimate, TheHeaviestStageIsFoundWhereverTheDenseLayersPutIt) {
    for (const int layers : {28, 30})
        for (const int dense : {0, 1, 3, 10})
            for (const int pp : {2, 4, 7})
                for (const int vpp : {1, 2})
                    for (const bool embedding : {false, true}) {
                        PlanInputs in;
                        in.model = test::deepSeekMoe16b();
                        in.model.layers =
                            layers; // 30 on 4 stages: 8, 8, 7, 7, a mixed stage heavier
                        in.model.moe.firstDenseLayers = dense;
                        in.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 7);
                        in.parallel = test::layout(4, 2, pp, 64, 1);
                        in.parallel.sequenceParallel = true;
                        in.parallel.ep = 4;
                        in.parallel.vpp = vpp;
                        in.parallel.schedule =
                            vpp > 1 ? PipelineSchedule::Interleaved : PipelineSchedule::OneFOneB;
                        in.parallel.embeddingInPipelineSplit = embedding;
                        if (vpp > 1 && in.parallel.microbatches() % pp != 0)
                            continue;
                        SCOPED_TRACE(testing::Message()
                                     << "layers " << layers << " dense " << dense << " pp " << pp
                                     << " vpp " << vpp << " emb " << embedding);
                        const Estimate e = evaluate(in);
                        double slowest = 0, heaviest = 0;
                        for (int stage = 0; stage < pp; ++stage) {
                            slowest = std::max(slowest, stageCompute(in, stage).seconds());
                            heaviest = std::max(heaviest, memoryForStage(in, stage).total());
                        }
                        EXPECT_DOUBLE_EQ(e.microbatchCompute, slowest);
                        EXPECT_DOUBLE_EQ(e.memory.total(), heaviest);
                    }
}

// Megatron-Core's EP overlap (combined 1F1B) runs each microbatch's all-to-alls beside another
// microbatch's compute: of m microbatches, m - 1 have a partner. With the all-to-alls shorter
// than that window, what stays exposed is their cost to the compute beside them,
// t k / (1 + k); the rules are Megatron-Core's.
TEST(Estimate, OverlappedAllToAllsHideBehindAnotherMicrobatch) {
    PlanInputs in = mixtral(8, 8, 1);
    in.parallel.globalBatch = 32; // 4 microbatches
    PlanInputs overlapped = in;
    overlapped.parallel.epCommOverlap = true;
    const Estimate plain = estimate(in), hidden = estimate(overlapped);
    ASSERT_TRUE(hidden.valid());
    const AxisComm& c = hidden.axis(Axis::EP);
    EXPECT_DOUBLE_EQ(c.seconds, plain.axis(Axis::EP).seconds);
    EXPECT_NEAR(c.window, hidden.computeTime * 3 / 4, 1e-12);
    ASSERT_LT(c.seconds, c.window * (1 + in.assume.overlapSlowdown));
    const double k = in.assume.overlapSlowdown;
    EXPECT_NEAR(c.exposed, c.seconds * k / (1 + k), 1e-12);
    EXPECT_LT(hidden.stepTime, plain.stepTime);
    // One microbatch has no partner: nothing hides.
    overlapped.parallel.globalBatch = 8;
    EXPECT_DOUBLE_EQ(estimate(overlapped).axis(Axis::EP).exposed,
                     estimate(overlapped).axis(Axis::EP).seconds);
    // Megatron-Core's checks: ep > 1, no full recompute, virtual stages under pp.
    const auto refused = [](PlanInputs at) {
        at.parallel.epCommOverlap = true;
        const auto v = validate(at.model, at.cluster, at.parallel);
        return std::any_of(v.begin(), v.end(),
                           [](const Violation& x) { return x.rule == "ep-overlap"; });
    };
    EXPECT_FALSE(refused(in));
    EXPECT_TRUE(refused(mixtral(8, 1, 1)));
    PlanInputs full = in;
    full.parallel.recompute = Recompute::Full;
    EXPECT_TRUE(refused(full));
    PlanInputs piped = in;
    piped.parallel.pp = 2;
    piped.parallel.dp = 4;
    piped.parallel.ep = 4;
    EXPECT_TRUE(refused(piped));
    piped.parallel.vpp = 2;
    piped.parallel.schedule = PipelineSchedule::Interleaved;
    EXPECT_FALSE(refused(piped));
    EXPECT_NE(layoutSummary(overlapped.parallel).find("ep-overlap"), std::string::npos);
}

// Padded to a capacity factor, every expert takes cf times its balanced share: the routed
// experts' GEMMs (hardware FLOPs, not model FLOPs), their all-to-alls and their activations
// scale by it; dropless (0) is cf 1 under balanced routing.
TEST(Estimate, ACapacityFactorPadsTheExpertsWork) {
    const PlanInputs dropless = mixtral(8, 8, 1);
    PlanInputs padded = dropless;
    padded.parallel.expertCapacityFactor = 1.25;
    PlanInputs one = dropless;
    one.parallel.expertCapacityFactor = 1.0;
    const Estimate d = estimate(dropless), p = estimate(padded), o = estimate(one);
    ASSERT_TRUE(p.valid());
    EXPECT_DOUBLE_EQ(o.stepTime, d.stepTime);
    EXPECT_NEAR(p.axis(Axis::EP).bytes, 1.25 * d.axis(Axis::EP).bytes,
                1e-6 * d.axis(Axis::EP).bytes);
    EXPECT_DOUBLE_EQ(p.modelFlopsPerToken, d.modelFlopsPerToken);
    // A quarter more of the top-2 experts' forward and backward: 3 x 32 layers x 2 FLOPs x 2
    // experts x 3 x 4096 x 14336 weights x 0.25.
    EXPECT_NEAR(p.hardwareFlopsPerToken - d.hardwareFlopsPerToken,
                3.0 * 32 * 2 * 2 * 3 * 4096 * 14336 * 0.25, 1e3);
    EXPECT_GT(p.memory.activations, d.memory.activations);
    EXPECT_GT(p.stepTime, d.stepTime);
}

// Each token goes to its k expert slots and back (Megatron-Core's permute and unpermute: read h,
// write k h, and the reverse), forward once and backward twice, memory bound: raising the
// capacity factor from 1 to 2 adds k more copies to permute (2 h each) and to activate (the
// SwiGLU terms on the expert width), on the 16,384 tokens of a rank's microbatch.
TEST(Estimate, TheTokenPermutationIsMemoryBoundTraffic) {
    PlanInputs one = mixtral(8, 8, 1);
    one.parallel.expertCapacityFactor = 1;
    PlanInputs two = one;
    two.parallel.expertCapacityFactor = 2;
    const double added =
        stageCompute(two, 0).elementwiseSeconds - stageCompute(one, 0).elementwiseSeconds;
    const Assumptions a;
    const double bytes = 32.0 * 4096 * 3 * 2 * 2 * (2.0 * 4096 + a.elementwiseFfnTerms * 14336);
    EXPECT_NEAR(added, bytes / (one.cluster.gpu.hbmBandwidth * a.memoryEfficiency), 1e-9 * added);
}

// The experts' gradients reduce over the ranks that hold the same experts: with dp = ep every
// rank holds its own, so under ZeRO-0 only the dense weights' gradients are all-reduced.
TEST(Estimate, ExpertGradientsReduceOnlyOverTheRanksHoldingTheSameExperts) {
    const ParamCount c = countParameters(test::mixtral8x7b());
    const double ring = 2.0 * 7 / 8; // a ring all-reduce over 8 ranks sends 2(n-1)/n of it
    const Estimate whole = estimate(mixtral(8, 1, 1, 0));
    const Estimate split = estimate(mixtral(8, 8, 1, 0));
    EXPECT_NEAR(whole.axis(Axis::DP).bytes, ring * c.total * 4, 1e-6 * c.total); // fp32 grads
    EXPECT_NEAR(split.axis(Axis::DP).bytes, ring * (c.total - test::kMixtralRoutedExperts) * 4,
                1e-6 * c.total);
    EXPECT_EQ(whole.axis(Axis::DP).collectives, 1);
    EXPECT_EQ(split.axis(Axis::DP).collectives, 1); // each rank's experts are its own
    // ep 4 of dp 8: the experts' gradients are all-reduced in pairs, 4 x tp ranks apart, in a
    // call of their own.
    const Estimate half = estimate(mixtral(8, 4, 1, 0));
    EXPECT_NEAR(half.axis(Axis::DP).bytes,
                ring * (c.total - test::kMixtralRoutedExperts) * 4 +
                    2.0 * 1 / 2 * test::kMixtralRoutedExperts / 4 * 4,
                1e-6 * c.total);
    EXPECT_EQ(half.axis(Axis::DP).collectives, 2);
}

// MoE parallel folding (Liu et al. 2025): on 16 H100s with tp 2, ep 8 at the experts' own etp 1
// takes 8 neighbouring ranks, one node, where ep 8 at etp = tp takes every other rank over two
// nodes; the experts' etp group gathers the tokens its ranks received (k copies each, Megatron-
// Core's all-to-all dispatcher) where etp 1 needs no collective; and etp below tp leaves expert
// copies on the tp ranks whose gradients reduce even at dp 1.
TEST(Estimate, ExpertTensorParallelismApartFromTpFoldsTheExpertsOntoTheTpRanks) {
    PlanInputs folded = mixtral(8, 8, 2, 1, 2);
    folded.parallel.etp = 1;
    const PlanInputs plain = mixtral(8, 8, 2, 1, 2);
    const Estimate f = estimate(folded), p = estimate(plain);
    ASSERT_TRUE(f.valid());
    ASSERT_TRUE(p.valid());
    EXPECT_FALSE(f.axis(Axis::EP).crossesNodes);
    EXPECT_TRUE(p.axis(Axis::EP).crossesNodes);
    EXPECT_LT(f.axis(Axis::EP).seconds, p.axis(Axis::EP).seconds);
    EXPECT_DOUBLE_EQ(f.axis(Axis::EP).bytes, p.axis(Axis::EP).bytes); // the same tokens move

    // TP per step: attention's pair of S = 4096 x 4096 x 2 bytes for the sequence, plus the
    // experts' pair of top-2 copies of it at etp = tp; none for the experts at etp 1.
    const double ring = 2.0 * 1 / 2; // AG + RS over 2 ranks send (n-1)/n of S each
    const double attention = 32 * 2 * ring * 4096.0 * 4096 * 2;
    EXPECT_NEAR(f.axis(Axis::TP).bytes, attention, 1e-9 * attention);
    EXPECT_NEAR(p.axis(Axis::TP).bytes, attention * (1 + 2), 1e-9 * attention);
    EXPECT_LT(f.axis(Axis::TP).seconds, p.axis(Axis::TP).seconds);

    // Transformer Engine's userbuffers (tp-comm-overlap) hide attention's TP pair behind the
    // GEMMs, not the token dispatcher's etp gathers: those still wait.
    PlanInputs overlapped = plain;
    overlapped.parallel.tpCommOverlap = true;
    const double expertPart = p.axis(Axis::TP).seconds - f.axis(Axis::TP).seconds;
    EXPECT_GE(estimate(overlapped).axis(Axis::TP).exposed, expertPart);
    EXPECT_LT(estimate(overlapped).axis(Axis::TP).exposed, p.axis(Axis::TP).exposed);

    // A shared expert is a dense MLP split by tp: it keeps its own pair of S at etp 1.
    PlanInputs shared = folded;
    shared.model.moe.sharedExperts = 1;
    EXPECT_NEAR(estimate(shared).axis(Axis::TP).bytes, 2 * attention, 1e-9 * attention);

    // Without EP, Megatron-Core's all-gather dispatcher gathers the hidden states themselves.
    PlanInputs gather = mixtral(8, 1, 2, 1, 2);
    EXPECT_NEAR(estimate(gather).axis(Axis::TP).bytes, 2 * attention, 1e-9 * attention);

    // tp 2, dp 1, etp 1: both tp ranks hold every expert, and all-reduce the experts' fp32
    // gradients between them (ZeRO-0), beside a dense part with nobody to reduce with.
    PlanInputs pair = mixtral(1, 1, 1, 0, 2);
    pair.cluster = makeCluster(findGpuPreset("h100-sxm"), 2, 1);
    const PlanInputs unfolded = pair;
    pair.parallel.etp = 1;
    ASSERT_TRUE(estimate(pair).valid());
    EXPECT_NEAR(estimate(pair).axis(Axis::DP).bytes, ring * test::kMixtralRoutedExperts * 4,
                1e-6 * test::kMixtralRoutedExperts);
    EXPECT_EQ(estimate(pair).axis(Axis::DP).groupSize, 2); // the experts' copies are the group
    ASSERT_TRUE(estimate(unfolded).valid());
    EXPECT_EQ(estimate(unfolded).axis(Axis::DP).bytes, 0);
}

TEST(Estimate, InvalidLayoutIsReportedNotCrashing) {
    PlanInputs in = llama70b();
    in.parallel.tp = 3;
    const Estimate e = estimate(in);
    EXPECT_FALSE(e.valid());
    EXPECT_TRUE(std::isfinite(e.memory.total()));
}

// The part of a step with this label.
double stepPart(const Estimate& e, const std::string& label) {
    for (const StepPart& p : stepTimeParts(e))
        if (p.label == label)
            return p.seconds;
    ADD_FAILURE() << "no step part " << label;
    return 0;
}

TEST(StepTimeParts, AddUpToTheStepTime) {
    for (const char* model : {"llama3-8b", "llama3-70b"}) {
        PlanInputs in = test::inputs(model, "h100-sxm", 8, 8, test::layout(4, 4, 4, 256, 1));
        in.parallel.cp = 1;
        const Estimate e = estimate(in);
        double sum = 0;
        for (const StepPart& p : stepTimeParts(e))
            sum += p.seconds;
        EXPECT_NEAR(sum, e.stepTime, 1e-9 * e.stepTime) << model;
        EXPECT_DOUBLE_EQ(stepTimeParts(e).front().seconds, e.computeTime);
        EXPECT_GT(stepPart(e, "Bubble"), 0.0) << "pp 4 has a bubble";
        EXPECT_EQ(stepPart(e, "Host-bound wait"), 0.0) << "a dense model has no host roof";
    }
}

// DeepSeekMoE 16B (a dense first layer, then 27 MoE layers) on 8 B200s, pp 2 x ep 4: stage 0
// holds the dense layer and 13 MoE layers, stage 1 the other 14. Dropless routing syncs the host
// once per MoE layer, so a microbatch takes at least 14 layers' host time; token dropping and a
// dense model have no roof.
PlanInputs deepSeekMoeOnB200(int microBatch) {
    PlanInputs in = test::inputs("llama3-8b", "b200", 8, 1, test::layout(4, 1, 2, 256, 1));
    in.model = test::deepSeekMoe16b();
    in.parallel.ep = 4;
    in.parallel.microBatch = microBatch;
    return in;
}

TEST(HostRoof, ADroplessMicrobatchTakesAtLeastItsMoeLayersHostTime) {
    PlanInputs in = deepSeekMoeOnB200(1);
    const double layer = in.assume.moeLayerHostSeconds;
    ASSERT_GT(layer, 0);
    EXPECT_DOUBLE_EQ(hostMicrobatchSeconds(in), 14 * layer);
    const Estimate e = estimate(in);
    ASSERT_TRUE(e.valid());
    EXPECT_DOUBLE_EQ(e.hostMicrobatch, 14 * layer);
    const int microbatches = in.parallel.microbatches();
    EXPECT_EQ(microbatches, 64);
    EXPECT_GE(e.stepTime, microbatches * e.hostMicrobatch);
    double sum = 0;
    for (const StepPart& p : stepTimeParts(e))
        sum += p.seconds;
    EXPECT_NEAR(sum, e.stepTime, 1e-9 * e.stepTime);
    EXPECT_DOUBLE_EQ(stepPart(e, "Host-bound wait"), e.hostWait);

    PlanInputs dropping = in;
    dropping.parallel.expertCapacityFactor = 1.0;
    EXPECT_EQ(hostMicrobatchSeconds(dropping), 0.0);
    EXPECT_EQ(estimate(dropping).hostWait, 0.0);
    PlanInputs dense = in;
    dense.model = test::withoutExperts(in.model);
    dense.parallel.ep = 1;
    EXPECT_EQ(hostMicrobatchSeconds(dense), 0.0);
}

// Where the host sets the pace, a larger micro batch (fewer microbatches for the same batch)
// pays the host time fewer times: four times the micro batch is well over twice as fast. With a
// host that costs nothing the same change gains little, as the GPU's work is the same.
TEST(HostRoof, AHostBoundLayoutGainsFromLargerMicroBatches) {
    const Estimate one = estimate(deepSeekMoeOnB200(1));
    const Estimate four = estimate(deepSeekMoeOnB200(4));
    ASSERT_TRUE(one.valid() && four.valid());
    EXPECT_GT(one.hostWait, 0.5 * one.stepTime);
    EXPECT_GT(four.tokensPerSecond, 2.0 * one.tokensPerSecond);

    PlanInputs freeOne = deepSeekMoeOnB200(1), freeFour = deepSeekMoeOnB200(4);
    freeOne.assume.moeLayerHostSeconds = freeFour.assume.moeLayerHostSeconds = 0;
    const Estimate a = estimate(freeOne), b = estimate(freeFour);
    EXPECT_EQ(a.hostWait, 0.0);
    EXPECT_LT(b.tokensPerSecond, 1.3 * a.tokensPerSecond);
    EXPECT_GT(a.tokensPerSecond, one.tokensPerSecond);
}

} // namespace
} // namespace shardscope
