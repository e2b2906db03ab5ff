// One layer's ops and collectives: the counts Megatron-LM's tensor and sequence parallelism and
// ring attention make (Korthikanti et al. 2022, Section 4.2.2; Liu et al. 2023), sizes from
// the model's shapes, and the planner's per-axis traffic as their sum over microbatches and
// layers.
#include "plan/estimate.h"
#include "plan/layer_comm.h"
#include "plan_test_support.h"

#include <gtest/gtest.h>

namespace shardscope {
namespace {

int countOf(const std::vector<LayerOp>& ops, const std::string& kind, bool backward) {
    return int(std::count_if(ops.begin(), ops.end(), [&](const LayerOp& op) {
        return op.collective && op.collectiveKind == kind && op.backward == backward;
    }));
}

double sentOn(const std::vector<LayerOp>& ops, Axis axis) {
    double sum = 0;
    for (const LayerOp& op : ops)
        sum += op.collective && op.axis == axis ? op.sentPerRank : 0.0;
    return sum;
}

TEST(LayerComm, TensorParallelismAllReducesTwiceEachWay) {
    ParallelConfig p = test::layout(1, 8, 1, 8, 1);
    p.sequenceParallel = false;
    const PlanInputs in = test::inputs("llama3-70b", "h100-sxm", 8, 1, p);
    const auto ops = layerOps(in);
    EXPECT_EQ(countOf(ops, "all-reduce", false), 2);
    EXPECT_EQ(countOf(ops, "all-reduce", true), 2);
    EXPECT_EQ(countOf(ops, "all-gather", false), 0);
    // The layer's output for one microbatch: 8192 tokens x 8192 hidden x 2 bytes (bf16).
    for (const LayerOp& op : ops) {
        if (op.collective) {
            EXPECT_DOUBLE_EQ(op.bytes, 8192.0 * 8192 * 2);
            EXPECT_DOUBLE_EQ(op.sentPerRank, 2.0 * 7 / 8 * op.bytes); // ring all-reduce
        }
    }
}

TEST(LayerComm, SequenceParallelismTradesEachAllReduceForAGatherAndAScatter) {
    ParallelConfig p = test::layout(1, 8, 1, 8, 1);
    p.sequenceParallel = true;
    const PlanInputs in = test::inputs("llama3-70b", "h100-sxm", 8, 1, p);
    const auto ops = layerOps(in);
    EXPECT_EQ(countOf(ops, "all-reduce", false) + countOf(ops, "all-reduce", true), 0);
    EXPECT_EQ(countOf(ops, "all-gather", false), 2);
    EXPECT_EQ(countOf(ops, "reduce-scatter", false), 2);
    EXPECT_EQ(countOf(ops, "all-gather", true), 2);
    EXPECT_EQ(countOf(ops, "reduce-scatter", true), 2);
    // The same bytes as without SP: an all-reduce is a reduce-scatter then an all-gather.
    ParallelConfig plain = p;
    plain.sequenceParallel = false;
    EXPECT_DOUBLE_EQ(
        sentOn(ops, Axis::TP),
        sentOn(layerOps(test::inputs("llama3-70b", "h100-sxm", 8, 1, plain)), Axis::TP));
    // The forward starts with the all-gather the column-parallel QKV needs.
    EXPECT_EQ(ops[1].collectiveKind, "all-gather");
    EXPECT_NE(ops[2].name.find("QKV"), std::string::npos);
}

TEST(LayerComm, RingAttentionPassesKeysAndValuesAroundTheContextRanks) {
    ParallelConfig p = test::layout(1, 2, 1, 8, 1);
    p.cp = 4;
    const PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 1, p);
    const auto ops = layerOps(in);
    EXPECT_EQ(countOf(ops, "ring pass", false), 1);
    EXPECT_EQ(countOf(ops, "ring pass", true), 2); // K, V again and their gradients
    // Llama 3 8B: 8 KV heads of 128 over tp 2 -> 512 per rank; 8192 / 4 tokens; K and V; bf16.
    for (const LayerOp& op : ops) {
        if (op.collectiveKind == "ring pass") {
            EXPECT_EQ(op.hops, 3);
            EXPECT_DOUBLE_EQ(op.bytes, 2.0 * (8192 / 4) * 512 * 2);
        }
    }
}

// An MoE layer under expert parallelism: the router, then each token dispatched to its experts'
// ranks and combined back (GShard), forward and backward, with top-k copies of each token.
// MLA's keys and values are up-projected for every head before attention: a ring hop carries
// each head's key (128 + 64 wide) and value (128), split over tp, never a shared latent.
TEST(LayerComm, RingAttentionPassesMlasPerHeadKeysAndValues) {
    PlanInputs in;
    in.model = test::deepSeekV2Lite();
    in.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 1);
    in.parallel = test::layout(1, 2, 1, 1);
    in.parallel.cp = 4;
    in.parallel.sequenceParallel = true;
    EXPECT_DOUBLE_EQ(cpHopBytes(in), 4096.0 / 4 * 16 * (192 + 128) / 2 * 2);
}

// Full recompute runs each op's forward again in the backward; recomputing only the first
// layers of each virtual stage (Megatron's block method) runs the same ops, and says where.
TEST(LayerComm, RecomputedForwardSaysWhichLayersRunIt) {
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 1, test::layout(2, 4, 1, 16, 1));
    in.parallel.sequenceParallel = true;
    in.parallel.recompute = Recompute::Full;
    const auto every = layerOps(in);
    in.parallel.recomputeLayers = 4;
    const auto some = layerOps(in);
    ASSERT_EQ(some.size(), every.size());
    int recomputed = 0;
    for (std::size_t i = 0; i < some.size(); ++i) {
        EXPECT_EQ(some[i].name, every[i].name);
        EXPECT_EQ(every[i].why.find("first 4 layers"), std::string::npos);
        if (!some[i].recompute)
            continue;
        ++recomputed;
        EXPECT_NE(some[i].why.find("only in the first 4 layers of each virtual stage"),
                  std::string::npos)
            << some[i].why;
    }
    EXPECT_GT(recomputed, 0);
}

TEST(LayerComm, ExpertParallelismDispatchesAndCombinesEachWay) {
    PlanInputs in;
    in.model = test::mixtral8x7b();
    in.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 2);
    for (const Recompute r : {Recompute::Selective, Recompute::Full}) {
        in.parallel = test::layout(8, 2, 1, 16, 1);
        in.parallel.sequenceParallel = true;
        in.parallel.ep = 4;
        in.parallel.recompute = r;
        const Estimate e = estimate(in);
        ASSERT_TRUE(e.valid());
        const auto ops = layerOps(in);
        const bool full = r == Recompute::Full;
        EXPECT_EQ(countOf(ops, "all-to-all", false), 2);
        EXPECT_EQ(countOf(ops, "all-to-all", true), full ? 4 : 2);
        const auto router = std::find_if(ops.begin(), ops.end(), [](const LayerOp& op) {
            return op.name.find("router") != std::string::npos;
        });
        ASSERT_NE(router, ops.end());
        EXPECT_EQ(std::next(router)->name, "all-to-all dispatch (EP)");
        for (const LayerOp& op : ops)
            if (op.collectiveKind == "all-to-all") { // s/tp tokens (SP) x top-2 x h x bf16
                EXPECT_DOUBLE_EQ(op.sentPerRank, 4096.0 / 2 * 2 * 4096 * 2 * 3 / 4);
            }
        const double perLayer = double(in.parallel.microbatches()) * e.memory.layersOnRank;
        EXPECT_NEAR(sentOn(ops, Axis::EP) * perLayer, e.axis(Axis::EP).bytes,
                    1e-9 * e.axis(Axis::EP).bytes);
    }
    // The router runs without EP too, with no all-to-all.
    in.parallel.ep = 1;
    const auto ops = layerOps(in);
    EXPECT_EQ(countOf(ops, "all-to-all", false) + countOf(ops, "all-to-all", true), 0);
    EXPECT_TRUE(std::any_of(ops.begin(), ops.end(), [](const LayerOp& op) {
        return op.name.find("router") != std::string::npos;
    }));
}

// The experts' own etp group in the layer: an all-gather before the experts and a reduce-scatter
// after, forward and backward, named ETP and counted in TP's traffic; with etp 1 the MoE block
// has no tensor-parallel collective, only attention's.
TEST(LayerComm, TheExpertsTensorParallelGroupHasItsOwnCollectives) {
    PlanInputs in;
    in.model = test::mixtral8x7b();
    in.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 2);
    for (const int etp : {0, 1, 4}) {
        for (const int ep : {1, 4}) {
            SCOPED_TRACE("etp " + std::to_string(etp) + " ep " + std::to_string(ep));
            in.model.moe.sharedExperts = 0;
            in.parallel = test::layout(8, 2, 1, 16, 1);
            in.parallel.sequenceParallel = true;
            in.parallel.etp = etp;
            in.parallel.ep = ep;
            const Estimate e = estimate(in);
            ASSERT_TRUE(e.valid());
            const auto ops = layerOps(in);
            int expertOps = 0;
            for (const LayerOp& op : ops)
                expertOps += op.name.find("(ETP)") != std::string::npos ? 1 : 0;
            EXPECT_EQ(expertOps, etp == 1 ? 0 : 4);
            const double perLayer = double(in.parallel.microbatches()) * e.memory.layersOnRank;
            EXPECT_NEAR(sentOn(ops, Axis::TP) * perLayer, e.axis(Axis::TP).bytes,
                        1e-9 * e.axis(Axis::TP).bytes);
            // A shared expert adds a tp pair each way: 2 x 4096 x 4096 x 2 bytes x (2-1)/2.
            in.model.moe.sharedExperts = 1;
            const auto withShared = layerOps(in);
            const double added = sentOn(withShared, Axis::TP) - sentOn(ops, Axis::TP);
            EXPECT_NEAR(added, 2 * 2 * 4096.0 * 4096 * 2 / 2, 1.0);
            EXPECT_NEAR(sentOn(withShared, Axis::TP) * perLayer, estimate(in).axis(Axis::TP).bytes,
                        1e-9 * estimate(in).axis(Axis::TP).bytes);
        }
    }
}

// The Explorer's TP and CP traffic per step is this list summed over microbatches and layers.
TEST(LayerComm, ThePlannersAxisTrafficIsTheLayersCollectivesSummed) {
    for (const bool sp : {false, true}) {
        for (const Recompute r : {Recompute::Selective, Recompute::Full}) {
            ParallelConfig p = test::layout(2, 4, 2, 64, 1);
            p.cp = 2;
            p.sequenceParallel = sp;
            p.recompute = r;
            const PlanInputs in = test::inputs("llama3-70b", "h100-sxm", 8, 4, p);
            const Estimate e = estimate(in);
            ASSERT_TRUE(e.violations.empty());
            const auto ops = layerOps(in);
            const double perLayer = double(p.microbatches()) * e.memory.layersOnRank;
            SCOPED_TRACE(std::string(sp ? "sp " : "") + (r == Recompute::Full ? "full" : "sel"));
            EXPECT_NEAR(sentOn(ops, Axis::TP) * perLayer, e.axis(Axis::TP).bytes,
                        1e-9 * e.axis(Axis::TP).bytes);
            EXPECT_NEAR(sentOn(ops, Axis::CP) * perLayer, e.axis(Axis::CP).bytes,
                        1e-9 * e.axis(Axis::CP).bytes);
        }
    }
    // Nothing to send without tp or cp, and no architecture, no layer.
    const PlanInputs alone =
        test::inputs("llama3-8b", "h100-sxm", 8, 1, test::layout(8, 1, 1, 64, 1));
    for (const LayerOp& op : layerOps(alone))
        EXPECT_FALSE(op.collective);
    PlanInputs bare = alone;
    bare.model = ModelSpec{};
    bare.model.bareParams = 7e9;
    EXPECT_TRUE(layerOps(bare).empty());
}

} // namespace
} // namespace shardscope
