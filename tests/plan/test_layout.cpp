// Rank placement: coordinates in Megatron's order (tp fastest, then cp, dp, pp) and node spans.
#include "plan/layout.h"
#include "plan_test_support.h"

#include <gtest/gtest.h>
#include <map>
#include <set>

namespace shardscope {
namespace {

ParallelConfig layout(int dp, int tp, int pp, int cp) {
    ParallelConfig p;
    p.dp = dp;
    p.tp = tp;
    p.pp = pp;
    p.cp = cp;
    return p;
}

TEST(RankCoordinate, TensorFastestThenContextDataPipeline) {
    const ParallelConfig p = layout(2, 4, 3, 2); // 48 ranks
    EXPECT_EQ(rankCoordinate(p, 0, 8).tp, 0);
    const RankCoordinate r = rankCoordinate(p, 4 * 2 * 2 + 4 + 3, 8); // pp1 dp0 cp1 tp3
    EXPECT_EQ(r.tp, 3);
    EXPECT_EQ(r.cp, 1);
    EXPECT_EQ(r.dp, 0);
    EXPECT_EQ(r.pp, 1);
    EXPECT_EQ(r.node, 23 / 8);
    EXPECT_EQ(r.tpGroup, 23 / 4);
    const RankCoordinate last = rankCoordinate(p, 47, 8);
    EXPECT_EQ(last.tp, 3);
    EXPECT_EQ(last.cp, 1);
    EXPECT_EQ(last.dp, 1);
    EXPECT_EQ(last.pp, 2);
}

TEST(RankCoordinate, EveryCoordinateOccursExactlyOnce) {
    const ParallelConfig p = layout(3, 2, 4, 2);
    std::set<std::tuple<int, int, int, int>> seen;
    for (int r = 0; r < p.worldSize(); ++r) {
        const RankCoordinate c = rankCoordinate(p, r, 8);
        seen.insert({c.dp, c.tp, c.pp, c.cp});
    }
    EXPECT_EQ(int(seen.size()), p.worldSize());
}

// A collective crossing nodes uses the NICs of all its members on a node at once (a ring per
// NIC), as many as the node holding the fewest of them has, over every group of the axis; a
// pipeline or ring-attention send uses one. Counted here by walking every group's ranks: groups
// side by side (offsets below the stride), then in blocks of size x stride.
TEST(PlaceGroup, ACollectiveCrossesNodesOverItsMembersNics) {
    const ClusterSpec cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 8); // 64 GPUs
    const Assumptions a;
    for (const auto& [size, stride] : {std::pair{64, 1},
                                       {32, 2},
                                       {16, 4},
                                       {8, 8},
                                       {3, 4},
                                       {12, 2},
                                       {5, 3},
                                       {4, 3},
                                       {9, 6},
                                       {2, 16},
                                       {4, 5},
                                       {3, 3},
                                       {2, 5},
                                       {6, 1},
                                       {4, 2},
                                       {3, 1}}) {
        bool crosses = false;
        int fewest = size;
        for (int block = 0; block * size * stride < 64; ++block)
            for (int offset = 0; offset < stride; ++offset) {
                std::map<int, int> perNode;
                for (int i = 0; i < size; ++i)
                    ++perNode[(block * size * stride + offset + i * stride) / 8];
                if (perNode.size() < 2)
                    continue;
                crosses = true;
                for (const auto& [node, members] : perNode)
                    fewest = std::min(fewest, members);
            }
        const GroupPlacement g = placeGroup(cluster, a, size, stride);
        SCOPED_TRACE(std::to_string(size) + " every " + std::to_string(stride));
        ASSERT_EQ(g.crossesNodes, crosses);
        if (crosses) {
            EXPECT_DOUBLE_EQ(g.bandwidth,
                             std::min(cluster.intraBandwidth, fewest * cluster.interBandwidth) *
                                 a.commEfficiency);
        }
    }
    const double oneNic = cluster.interBandwidth * a.commEfficiency;
    const GroupPlacement pp = placeAxis(cluster, layout(1, 2, 32, 1), a, Axis::PP);
    ASSERT_TRUE(pp.crossesNodes);
    EXPECT_DOUBLE_EQ(pp.bandwidth, oneNic);
    const GroupPlacement cp = placeAxis(cluster, layout(1, 1, 1, 16), a, Axis::CP);
    ASSERT_TRUE(cp.crossesNodes);
    EXPECT_DOUBLE_EQ(cp.bandwidth, oneNic);
}

TEST(TpCrossesNodes, OnlyWhenTpDoesNotDivideTheNode) {
    EXPECT_FALSE(tpCrossesNodes(layout(8, 8, 1, 1), 8));
    EXPECT_FALSE(tpCrossesNodes(layout(8, 4, 1, 1), 8));
    EXPECT_TRUE(tpCrossesNodes(layout(4, 16, 1, 1), 8));
    EXPECT_TRUE(tpCrossesNodes(layout(8, 3, 1, 1), 8));
    // The placement the communication model uses agrees.
    const ClusterSpec c = makeCluster(findGpuPreset("h100-sxm"), 8, 8);
    EXPECT_EQ(placeAxis(c, layout(4, 16, 1, 1), Assumptions{}, Axis::TP).crossesNodes, true);
    EXPECT_EQ(placeAxis(c, layout(8, 8, 1, 1), Assumptions{}, Axis::TP).crossesNodes, false);
}

// An MoE model's dense first layers sit where its first layers do: walking the chunks in order
// and dealing layer indices from layersOnChunk (a second count) gives the same kinds per stage,
// for pipelines with and without virtual stages and embedding or loss slots.
TEST(StageLayers, DenseFirstLayersSitWhereTheFirstLayersDo) {
    ModelSpec m = test::deepSeekMoe16b();
    for (const int dense : {1, 3, 9})
        for (const int pp : {1, 2, 4, 7})
            for (const int vpp : {1, 2})
                for (const bool embedding : {false, true})
                    for (const bool loss : {false, true}) {
                        m.moe.firstDenseLayers = dense;
                        ParallelConfig p = layout(1, 1, pp, 1);
                        p.vpp = vpp;
                        p.embeddingInPipelineSplit = embedding;
                        p.lossInPipelineSplit = loss;
                        std::map<int, StageLayers> walked;
                        int next = 0;
                        for (int chunk = 0; chunk < pp * vpp; ++chunk)
                            for (int i = 0; i < layersOnChunk(m.layers, p, chunk); ++i, ++next)
                                ++(next < dense ? walked[chunk % pp].dense
                                                : walked[chunk % pp].moe);
                        ASSERT_EQ(next, m.layers);
                        for (int stage = 0; stage < pp; ++stage) {
                            const StageLayers s = stageLayers(m, p, stage);
                            SCOPED_TRACE(testing::Message()
                                         << "dense " << dense << " pp " << pp << " vpp " << vpp
                                         << " stage " << stage);
                            EXPECT_EQ(s.dense, walked[stage].dense);
                            EXPECT_EQ(s.moe, walked[stage].moe);
                            EXPECT_EQ(s.total(), layersOnStage(m, p, stage));
                        }
                    }
    // Every layer of a dense model is dense.
    const StageLayers dense = stageLayers(test::withoutExperts(m), layout(1, 1, 4, 1), 2);
    EXPECT_EQ(dense.moe, 0);
    EXPECT_EQ(dense.dense, 7);
}

// Megatron-Core keeps MLA's down projections (and their norms) whole on every tensor-parallel
// rank and splits the up and output projections by heads.
TEST(LayerParams, LatentAttentionsDownProjectionsAreOnEveryTpRank) {
    const ModelSpec m = test::withoutExperts(test::deepSeekV2Lite());
    const ParamCount c = countParameters(m);
    const double down = 2048.0 * (512 + 64) + 512;
    ASSERT_DOUBLE_EQ(c.attentionReplicatedPerLayer, down);
    EXPECT_DOUBLE_EQ(layerParamsPerTpRank(m, c, 4),
                     (c.attentionPerLayer - down + c.denseMlpPerLayer) / 4 + down +
                         c.normsPerLayer);
}

} // namespace
} // namespace shardscope
