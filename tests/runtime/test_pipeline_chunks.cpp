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

// Counting the embedding and the loss as layers (Megatron's account-for flags): Llama 3 405B's
// 126 layers over 16 stages give the first and the last 7 and every other 8, as Meta describes;
// every layer is still dealt once, in order, as the planner deals them.
TEST(PipelineChunks, TheEmbeddingAndTheLossTakeALayersPlace) {
    ParallelConfig p;
    p.pp = 16;
    p.embeddingInPipelineSplit = p.lossInPipelineSplit = true;
    std::vector<int> held;
    for (int rank = 0; rank < 16; ++rank)
        held.push_back(pipelineChunks(126, p, rank).front().layers);
    EXPECT_EQ(held.front(), 7);
    EXPECT_EQ(held.back(), 7);
    for (int rank = 1; rank < 15; ++rank)
        EXPECT_EQ(held[std::size_t(rank)], 8) << rank;

    for (const auto& [layers, pp, vpp, embedding, loss] :
         std::vector<std::tuple<int, int, int, bool, bool>>{{6, 2, 2, true, true},
                                                            {7, 4, 1, true, false},
                                                            {11, 2, 3, false, true},
                                                            {30, 4, 2, true, true}}) {
        const ModelSpec m = tinyGpt(layers, 16, 2, 32, 8);
        p.pp = pp;
        p.vpp = vpp;
        p.embeddingInPipelineSplit = embedding;
        p.lossInPipelineSplit = loss;
        int next = 0;
        for (int v = 0; v < vpp; ++v)
            for (int rank = 0; rank < pp; ++rank) {
                const ModelChunk c = pipelineChunks(layers, p, rank)[std::size_t(v)];
                EXPECT_EQ(c.firstLayer, next);
                next += c.layers;
            }
        EXPECT_EQ(next, layers);
        for (int rank = 0; rank < pp; ++rank) {
            int onRank = 0;
            for (const ModelChunk& c : pipelineChunks(layers, p, rank))
                onRank += c.layers;
            EXPECT_EQ(onRank, layersOnStage(m, p, rank));
        }
    }
    // pp x vpp = layers + 2 is one layer a stage and the embedding and loss alone at the ends:
    // the planner plans it, the engine refuses a stage with no layer and says which flag.
    p.pp = 4;
    p.vpp = 1;
    p.embeddingInPipelineSplit = p.lossInPipelineSplit = true;
    try {
        pipelineChunks(2, p, 0);
        FAIL() << "a stage holding only the embedding was accepted";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("embedding_in_pipeline_split"), std::string::npos)
            << e.what();
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
