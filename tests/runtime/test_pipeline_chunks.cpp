#include "core/error.h"
#include "engine_test_support.h"
#include "plan/layout.h"
#include "runtime/parallel/pipeline_chunks.h"

#include <gtest/gtest.h>
#include <string>
#include <tuple>
#include <vector>

namespace shardscope {
namespace {

using testing::tinyGpt;

// The engine deals layers to virtual stages exactly as the planner does (its memory prediction
// counts them), in engine/sched's numbering: virtual stage chunk * pp + rank.
TEST(PipelineChunks, DealLayersAsThePlannerDoes) {
    for (const auto& [layers, pp, vpp] : std::vector<std::tuple<int, int, int>>{
             {8, 2, 1}, {7, 2, 1}, {8, 4, 2}, {9, 4, 2}, {5, 1, 1}, {6, 3, 2}}) {
        SCOPED_TRACE(std::to_string(layers) + " layers, pp " + std::to_string(pp) + " vpp " +
                     std::to_string(vpp));
        const ModelSpec m = tinyGpt(layers, 16, 2, 32, 8);
        ParallelConfig p;
        p.pp = pp;
        p.vpp = vpp;
        std::vector<int> owner(std::size_t(layers), -1);
        for (int rank = 0; rank < pp; ++rank) {
            const std::vector<ModelChunk> chunks = pipelineChunks(m.layers, pp, vpp, rank);
            ASSERT_EQ(int(chunks.size()), vpp);
            int held = 0;
            for (int v = 0; v < vpp; ++v) {
                const ModelChunk& c = chunks[std::size_t(v)];
                EXPECT_EQ(c.embedding, v == 0 && rank == 0);
                EXPECT_EQ(c.head, v == vpp - 1 && rank == pp - 1);
                for (int l = c.firstLayer; l < c.firstLayer + c.layers; ++l) {
                    EXPECT_EQ(owner[std::size_t(l)], -1) << "layer " << l << " dealt twice";
                    owner[std::size_t(l)] = v * pp + rank;
                }
                held += c.layers;
            }
            EXPECT_EQ(held, layersOnStage(m, p, rank));
        }
        for (int l = 1; l < layers; ++l) // virtual stages hold the layers in model order
            EXPECT_LE(owner[std::size_t(l - 1)], owner[std::size_t(l)]);
    }
}

TEST(PipelineChunks, RefuseAVirtualStageWithoutALayer) {
    try {
        pipelineChunks(3, 2, 2, 0);
        FAIL() << "3 layers over 4 virtual stages were accepted";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("lower pp or vpp"), std::string::npos) << e.what();
    }
}

} // namespace
} // namespace shardscope
