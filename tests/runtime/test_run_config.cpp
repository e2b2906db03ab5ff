#include "core/error.h"
#include "runtime/run_config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace shardscope {
namespace {

using nlohmann::json;

TEST(RunConfig, TheDefaultIsTrainable) {
    const RunConfig c = defaultRunConfig();
    EXPECT_TRUE(engineProblems(c).empty());
    EXPECT_GT(c.totalSteps(), 0);
}

TEST(RunConfig, RoundTripsThroughJson) {
    RunConfig c = defaultRunConfig();
    c.train.steps = 77;
    c.engine.threads = 3;
    c.engine.peakFlops = 2.5e12;
    const RunConfig back = runConfigFromJson(toJson(c));
    EXPECT_EQ(toJson(back), toJson(c));
}

TEST(RunConfig, PartialSectionsKeepTheEngineDefaults) {
    const RunConfig c = runConfigFromJson(json::parse(R"({"train": {"steps": 5}})"));
    EXPECT_EQ(c.train.steps, 5);
    EXPECT_EQ(c.parallel.precision.compute, Precision::Fp32);
    EXPECT_EQ(c.model.layers, defaultRunConfig().model.layers);
}

TEST(RunConfig, AModelPresetCanBeOverridden) {
    const RunConfig c = runConfigFromJson(json::parse(
        R"({"model": {"preset": "gpt2-124m", "layers": 2, "dropout": false, "seq_len": 64}})"));
    EXPECT_EQ(c.model.layers, 2);
    EXPECT_EQ(c.model.hidden, 768);
    EXPECT_EQ(c.model.seqLen, 64);
}

TEST(RunConfig, UnknownFieldsAreNamed) {
    for (const char* text : {R"({"trian": {}})", R"({"train": {"learning_rat": 1}})",
                             R"({"engine": {"thread": 2}})", R"({"model": {"layer": 2}})"}) {
        try {
            runConfigFromJson(json::parse(text));
            FAIL() << text;
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find("unknown field"), std::string::npos) << e.what();
        }
    }
}

TEST(RunConfig, EngineProblemsSayWhatToChange) {
    RunConfig c = defaultRunConfig();
    c.model.seqLen = 30; // 2 x cp = 4 chunks do not cut it
    c.parallel.cp = 2;
    c.parallel.flashAttention = false;
    c.parallel.zero = 1;
    c.parallel.shardGroup = 1; // two copies of ZeRO's states over the dp x cp = 2 ranks
    c.parallel.optimizer = Optimizer::SgdMomentum;
    c.train.minLearningRate = 1.0;
    const auto problems = engineProblems(c);
    std::string all;
    for (const auto& p : problems)
        all += p + "\n";
    EXPECT_NE(all.find("context parallelism splits the sequence into 2*cp = 4 chunks"),
              std::string::npos)
        << all;
    EXPECT_NE(all.find("\"flash_attention\": true"), std::string::npos) << all;
    EXPECT_NE(all.find("hybrid sharding is modelled by the planner only"), std::string::npos)
        << all;
    EXPECT_NE(all.find("AdamW"), std::string::npos) << all;
    EXPECT_NE(all.find("min_learning_rate"), std::string::npos) << all;
}

TEST(RunConfig, OpLevelRecomputeIsThePlannersOnly) {
    RunConfig c = defaultRunConfig();
    c.parallel.recompute = Recompute::SelectiveOp;
    std::string all;
    for (const auto& p : engineProblems(c))
        all += p + "\n";
    EXPECT_NE(all.find("selective-op"), std::string::npos) << all;
    EXPECT_NE(all.find("planner only"), std::string::npos) << all;
    c.parallel.recompute = Recompute::Selective;
    EXPECT_TRUE(engineProblems(c).empty());
}

// Autocast over fp32 weights is a policy the planner models; the engine keeps bf16 weights
// beside its fp32 master, and says which policies it trains in.
TEST(RunConfig, AutocastOverFp32WeightsIsThePlannersOnly) {
    RunConfig c = defaultRunConfig();
    c.parallel.precision = precisionPolicyFromString("amp");
    std::string all;
    for (const auto& p : engineProblems(c))
        all += p + "\n";
    EXPECT_NE(all.find("bf16 autocast (fp32 weights and grads) is not in it"), std::string::npos)
        << all;
    c.parallel.precision = precisionPolicyFromString("bf16");
    EXPECT_TRUE(engineProblems(c).empty());
}

// A session's overlap flags describe the framework the planner models; the engine runs as it
// is built, so its config (and the prediction beside the run) takes the engine's behaviour and
// says what it changed.
TEST(RunConfig, TheEngineTakesItsOwnOverlapAndSaysWhatChanged) {
    ParallelConfig p; // the frameworks' defaults: gradient reduce and parameter gather overlap
    p.dp = 2;
    p.tp = 2;
    p.zero = 1;
    p.tpCommOverlap = true;
    const std::string note = adoptEngineOverlap(p);
    EXPECT_TRUE(p.overlapGradReduce);
    EXPECT_FALSE(p.overlapParamGather); // ZeRO-1 gathers after the optimizer step
    EXPECT_FALSE(p.tpCommOverlap);
    EXPECT_NE(note.find("overlap_param_gather false"), std::string::npos) << note;
    EXPECT_NE(note.find("tp_comm_overlap false"), std::string::npos) << note;
    EXPECT_EQ(note.find("overlap_grad_reduce"), std::string::npos) << note;
    EXPECT_EQ(adoptEngineOverlap(p), ""); // nothing left to change

    p.zero = 3; // ZeRO-3 gathers the next unit ahead of use; its reduce-scatters block
    const std::string zero3 = adoptEngineOverlap(p);
    EXPECT_TRUE(p.overlapParamGather);
    EXPECT_FALSE(p.overlapGradReduce);
    EXPECT_NE(zero3.find("overlap_grad_reduce false"), std::string::npos) << zero3;
    EXPECT_NE(zero3.find("overlap_param_gather true"), std::string::npos) << zero3;

    // The engine prefetches ZeRO-3's next unit before the current one's backward, whatever the
    // session's FSDP setting.
    p.backwardPrefetch = BackwardPrefetch::Post;
    const std::string prefetch = adoptEngineOverlap(p);
    EXPECT_EQ(p.backwardPrefetch, BackwardPrefetch::Pre);
    EXPECT_NE(prefetch.find("backward_prefetch pre"), std::string::npos) << prefetch;
    EXPECT_EQ(adoptEngineOverlap(p), "");

    // Flags that change nothing stay as written, and nothing is said: no ZeRO (no gathers), one
    // data-parallel rank (nothing to reduce), no TP group.
    ParallelConfig ddp;
    ddp.dp = 2;
    EXPECT_EQ(adoptEngineOverlap(ddp), "");
    EXPECT_TRUE(ddp.overlapParamGather);
    ParallelConfig single;
    single.zero = 2;
    single.tpCommOverlap = true; // tp = 1
    EXPECT_EQ(adoptEngineOverlap(single), "");
    EXPECT_TRUE(single.overlapGradReduce);
    ParallelConfig zero2;
    zero2.dp = 2;
    zero2.zero = 2;
    EXPECT_NE(adoptEngineOverlap(zero2).find("reduce-scatters block"), std::string::npos);
    EXPECT_FALSE(zero2.overlapGradReduce);
    EXPECT_FALSE(zero2.overlapParamGather);
}

TEST(RunConfig, ZeroStagesAboveOneRefuseATiedEmbeddingSplitAcrossStages) {
    RunConfig c = defaultRunConfig();
    c.parallel.dp = 2;
    c.parallel.pp = 2;
    c.parallel.zero = 3;
    c.parallel.globalBatch = 32;
    c.model.tiedEmbeddings = true;
    std::string all;
    for (const auto& p : engineProblems(c))
        all += p + "\n";
    EXPECT_NE(all.find("tied_embeddings"), std::string::npos) << all;
    c.model.tiedEmbeddings = false;
    all.clear();
    for (const auto& p : engineProblems(c))
        all += p + "\n";
    EXPECT_EQ(all.find("ZeRO"), std::string::npos) << all;
}

} // namespace
} // namespace shardscope
