// The Memory page's verdict and ZeRO sweep, including the lesson's "at least 2 GPUs for 7B".
#include "core/units.h"
#include "plan/layout.h"
#include "plan/memory_summary.h"
#include "plan_test_support.h"

#include <gtest/gtest.h>

namespace shardscope {
namespace {

PlanInputs bare(double params, int dp, int zero) {
    PlanInputs in;
    in.model.name = "bare";
    in.model.bareParams = params;
    in.parallel.dp = dp;
    in.parallel.zero = zero;
    in.parallel.globalBatch = dp;
    in.parallel.precision = {Precision::Bf16, Precision::Fp32, false}; // the lesson's 14 B/param
    in.cluster = clusterForWorld(makeCluster(findGpuPreset("h100-sxm"), 8, 1), dp);
    return in;
}

TEST(MemoryVerdict, SevenBillionNeedsAtLeastTwoH100) {
    // Lesson 2: "You need at least 2 to train a 7B model naively": 14 B/param x 7e9 = 98 GB.
    const PlanInputs in = bare(7e9, 1, 0);
    const MemoryVerdict v = memoryVerdict(in, estimate(in));
    EXPECT_FALSE(v.fits);
    EXPECT_NEAR(v.modelStateBytes, 98e9, 1e3);
    EXPECT_EQ(v.minimumGpus, 2);
    EXPECT_NE(v.text.find("Needs at least 2 x"), std::string::npos) << v.text;
    EXPECT_NE(v.formula.find("= 2"), std::string::npos) << v.formula;
}

// FP8 weights hold 1 + 4 + 4 + 8 = 17 bytes a parameter of model state on an H100; an A100
// trains the same policy in bf16 and holds 18.
TEST(MemoryVerdict, Fp8WeightsCountOnlyOnAGpuThatRunsFp8) {
    PlanInputs in = bare(7e9, 1, 0);
    in.parallel.precision = precisionPolicyFromString("fp8-params");
    EXPECT_NEAR(memoryVerdict(in, estimate(in)).modelStateBytes, 17 * 7e9, 1e3);
    in.cluster = clusterForWorld(makeCluster(findGpuPreset("a100-80gb"), 8, 1), 1);
    EXPECT_NEAR(memoryVerdict(in, estimate(in)).modelStateBytes, 18 * 7e9, 1e3);
}

TEST(MemoryVerdict, FitsOnOneGpuSaysHowMuchIsFree) {
    const PlanInputs in = bare(1e9, 1, 0); // 14 GB of state
    const Estimate e = estimate(in);
    const MemoryVerdict v = memoryVerdict(in, e);
    EXPECT_TRUE(v.fits);
    EXPECT_DOUBLE_EQ(v.free, e.capacity - e.memory.total());
    EXPECT_EQ(v.text.rfind("Fits on one ", 0), 0u) << v.text;
    EXPECT_NE(v.text.find(formatBytes(v.free) + " free"), std::string::npos) << v.text;
}

TEST(MemoryVerdict, ManyGpusNameTheCountAndTheMostLoadedGpu) {
    const PlanInputs in = bare(7e9, 8, 3); // 98 GB / 8
    const MemoryVerdict v = memoryVerdict(in, estimate(in));
    EXPECT_TRUE(v.fits);
    EXPECT_NE(v.text.find("each of the 8 x"), std::string::npos) << v.text;
}

TEST(MemoryVerdict, ActivationsAloneTooLargeSaySo) {
    PlanInputs in = test::inputs("llama3-70b", "h100-sxm", 8, 1, test::layout(8, 1, 1, 8, 3));
    in.parallel.microBatch = 64;
    in.parallel.globalBatch = 512;
    in.parallel.recompute = Recompute::None;
    const MemoryVerdict v = memoryVerdict(in, estimate(in));
    EXPECT_FALSE(v.fits);
    EXPECT_EQ(v.minimumGpus, 0);
    EXPECT_NE(v.text.find("alone"), std::string::npos) << v.text;
}

TEST(MemoryOverDataParallel, ZeroStagesShardMoreAsGpusGrow) {
    const PlanInputs in = bare(7e9, 1, 0);
    const std::vector<int> dps = {1, 2, 4, 8, 64};
    const auto z0 = memoryOverDataParallel(in, 0, dps);
    const auto z3 = memoryOverDataParallel(in, 3, dps);
    ASSERT_EQ(z0.size(), dps.size());
    EXPECT_EQ(z3.back().gpus, 64);
    EXPECT_NEAR(z0.front().bytes, z3.front().bytes, 1.0); // one GPU: nothing to shard
    // ZeRO-0 replicates the model state; only the gradient buckets of the all-reduce are new.
    EXPECT_NEAR(z0.back().bytes, z0.front().bytes, 1e-3 * z0.front().bytes);
    for (std::size_t i = 1; i < dps.size(); ++i)
        EXPECT_LT(z3[i].bytes, z3[i - 1].bytes);
    // ZeRO-3 on 64 GPUs: 98 GB / 64 of state plus the fixed overhead.
    const double overheadOnly = memoryOverDataParallel(bare(0.0, 1, 3), 3, {1}).front().bytes;
    EXPECT_NEAR(z3.back().bytes, 98e9 / 64 * 1.05 + overheadOnly, 0.2e9);
}

// Mixtral 8x7B with its experts over ep 8 at dp 8: at a smaller dp the sweep splits them over as
// many ranks as it has (ep = dp), so each point is a layout the rules accept and holds the same
// memory as that layout planned on its own.
TEST(MemoryOverDataParallel, ExpertsSplitOverNoMoreRanksThanTheSweepHas) {
    PlanInputs in;
    in.model = test::mixtral8x7b();
    in.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 1);
    in.parallel = test::layout(8, 1, 1, 8, 1);
    in.parallel.ep = 8;
    const std::vector<int> dps = {1, 2, 4, 8, 16};
    const auto sweep = memoryOverDataParallel(in, 1, dps);
    ASSERT_EQ(sweep.size(), dps.size());
    for (std::size_t i = 0; i < dps.size(); ++i) {
        PlanInputs at = in;
        at.parallel.dp = dps[i];
        at.parallel.ep = std::min(dps[i], 8);
        at.parallel.globalBatch = dps[i];
        at.cluster = clusterForWorld(in.cluster, dps[i]);
        SCOPED_TRACE("dp " + std::to_string(dps[i]));
        EXPECT_TRUE(validate(at.model, at.cluster, at.parallel).empty());
        EXPECT_NEAR(sweep[i].bytes, mostLoadedStageMemory(at).total(), 1.0);
    }
}

// ZeRO paper (Rajbhandari et al. 2020), Figure 1: 7.5B parameters, 64 data-parallel GPUs,
// 2 + 2 + 12 bytes per parameter: 120 GB per GPU unsharded, 31.4 GB with the optimizer state
// sharded, 16.6 GB with the gradients too, 1.9 GB with everything.
TEST(ZeroHoldings, TheZeroPapersFigureOne) {
    const double expected[] = {120e9, 31.4e9, 16.6e9, 1.9e9};
    for (int zero = 0; zero <= 3; ++zero) {
        PlanInputs in = bare(7.5e9, 64, 0);
        in.parallel.precision = {Precision::Bf16, Precision::Bf16, true}; // K = 12
        const ZeroHoldings h = zeroHoldings(in, zero);
        SCOPED_TRACE(zero);
        EXPECT_EQ(h.groupSize, 64);
        const double held = h.weights.held + h.gradients.held + h.optimizer.held;
        EXPECT_NEAR(held, expected[zero], 0.05e9);
        // Each GPU's own shard is 1/64 of everything, whatever the stage; the rest are copies.
        EXPECT_NEAR(h.weights.ownShard + h.gradients.ownShard + h.optimizer.ownShard, 120e9 / 64,
                    1e6);
        EXPECT_NEAR(h.optimizer.copy(), zero >= 1 ? 0.0 : 90e9 * 63 / 64, 1e6);
        EXPECT_NEAR(h.gradients.copy(), zero >= 2 ? 0.0 : 15e9 * 63 / 64, 1e6);
        EXPECT_NEAR(h.weights.copy(), zero >= 3 ? 0.0 : 15e9 * 63 / 64, 1e6);
    }
}

// A GPU's own shard never exceeds what it holds (offloaded state is on the host, not the GPU),
// and both figures are of the same pipeline stage, the most loaded one at this ZeRO stage.
TEST(ZeroHoldings, OwnShardsAreOnTheGpuAndOfOneStage) {
    for (const bool offload : {false, true}) {
        for (int zero = 0; zero <= 3; ++zero) {
            ParallelConfig p = test::layout(2, 8, 4, 512, zero);
            p.offloadOptimizer = offload;
            const PlanInputs in = test::inputs("llama3-70b", "h100-sxm", 8, 8, p);
            const ZeroHoldings h = zeroHoldings(in, zero);
            SCOPED_TRACE(std::to_string(zero) + (offload ? " offload" : ""));
            int stage = -1;
            PlanInputs at = in, whole = in;
            whole.parallel.zero = 0;
            const MemoryBreakdown held = mostLoadedStageMemory(at, &stage);
            const MemoryBreakdown unsharded = memoryForStage(whole, stage);
            EXPECT_DOUBLE_EQ(h.weights.held, held.parameters);
            EXPECT_DOUBLE_EQ(h.optimizer.held, held.optimizer);
            for (const ModelStateHolding& m : {h.weights, h.gradients, h.optimizer})
                EXPECT_LE(m.ownShard, m.held);
            EXPECT_DOUBLE_EQ(h.weights.ownShard,
                             std::min(held.parameters, unsharded.parameters / 2));
            if (offload) {
                EXPECT_EQ(h.optimizer.ownShard, h.optimizer.held); // what is left on the GPU
            }
        }
    }
}

TEST(ClusterForWorld, WholeNodesPartialNodeOrGcd) {
    const ClusterSpec c = makeCluster(findGpuPreset("h100-sxm"), 8, 4);
    EXPECT_EQ(clusterForWorld(c, 16).nodes, 2);
    EXPECT_EQ(clusterForWorld(c, 16).gpusPerNode, 8);
    EXPECT_EQ(clusterForWorld(c, 3).gpusPerNode, 3);
    EXPECT_EQ(clusterForWorld(c, 3).nodes, 1);
    EXPECT_EQ(clusterForWorld(c, 12).gpusPerNode, 4);
    EXPECT_EQ(clusterForWorld(c, 12).worldSize(), 12);
}

} // namespace
} // namespace shardscope
