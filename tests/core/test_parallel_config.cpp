#include "core/error.h"
#include "core/parallel_config.h"
#include "core/presets.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <gtest/gtest.h>
#include <optional>
#include <random>

namespace shardscope {
namespace {

ModelSpec llama3_405b() {
    ModelSpec m;
    m.name = "Llama 3 405B";
    m.layers = 126;
    m.hidden = 16384;
    m.heads = 128;
    m.kvHeads = 8;
    m.ffnHidden = 53248;
    m.vocab = 128256;
    m.seqLen = m.maxPositions = 8192;
    return m;
}

ClusterSpec clusterOf(int gpus) {
    GpuSpec gpu;
    gpu.nvlinkBandwidth = 450e9;
    return makeCluster(gpu, 8, gpus / 8);
}

// Meta's Llama 3 405B pre-training layout: 16K GPUs, tp 8 x pp 16 x dp 128.
ParallelConfig llama405bLayout() {
    ParallelConfig p;
    p.tp = 8;
    p.pp = 16;
    p.dp = 128;
    p.globalBatch = 2048;
    p.microBatch = 1;
    p.schedule = PipelineSchedule::OneFOneB;
    return p;
}

std::vector<std::string> ruleIds(const std::vector<Violation>& violations) {
    std::vector<std::string> ids;
    for (const Violation& v : violations)
        ids.push_back(v.rule);
    return ids;
}

std::string describe(const std::vector<Violation>& violations) {
    std::string out;
    for (const Violation& v : violations)
        out += "\n  [" + v.rule + "] " + v.message + " -- " + v.hint;
    return out.empty() ? " (none)" : out;
}

// A copy of the violation with that rule id (callers pass temporaries), checked for a message
// and a hint.
std::optional<Violation> expectRule(const std::vector<Violation>& violations,
                                    const std::string& rule) {
    const auto it = std::find_if(violations.begin(), violations.end(),
                                 [&](const Violation& v) { return v.rule == rule; });
    if (it == violations.end()) {
        ADD_FAILURE() << "no '" << rule << "' violation among:" << describe(violations);
        return std::nullopt;
    }
    EXPECT_FALSE(it->message.empty()) << rule;
    EXPECT_FALSE(it->hint.empty()) << rule;
    return *it;
}

bool hasRule(const std::vector<Violation>& violations, const std::string& rule) {
    const auto ids = ruleIds(violations);
    return std::find(ids.begin(), ids.end(), rule) != ids.end();
}

// ---- precision policies and names ----

TEST(PrecisionPolicy, BytesPerParameterAndActivation) {
    const PrecisionPolicy fp32 = PrecisionPolicy::fp32();
    EXPECT_EQ(fp32.weightBytes(), 4);
    EXPECT_EQ(fp32.gradBytes(), 4);
    EXPECT_EQ(fp32.masterBytes(), 0);
    EXPECT_EQ(fp32.activationBytes(), 4);

    const PrecisionPolicy bf16 = PrecisionPolicy::bf16Mixed();
    EXPECT_EQ(bf16.weightBytes(), 2);
    EXPECT_EQ(bf16.gradBytes(), 4);
    EXPECT_EQ(bf16.masterBytes(), 4);
    EXPECT_EQ(bf16.activationBytes(), 2);
    EXPECT_EQ(PrecisionPolicy::bf16Mixed(false).gradBytes(), 2);

    // PyTorch autocast over fp32 weights: the weights are fp32 and are the master themselves,
    // 4 + 4 + 8 = 16 bytes a parameter with Adam, as DDP with torch.autocast keeps.
    const PrecisionPolicy amp = precisionPolicyFromString("amp");
    EXPECT_EQ(amp.weightBytes(), 4);
    EXPECT_EQ(amp.gradBytes(), 4);
    EXPECT_EQ(amp.masterBytes(), 0);
    EXPECT_EQ(amp.activationBytes(), 2);
    EXPECT_TRUE(amp.autocastsWeights());
    EXPECT_EQ(amp.gradReduceBytes(), 4);
    // Composer's FSDP "DEFAULT" of 2023: the same fp32 weights and gradients, reduced in bf16.
    const PrecisionPolicy reducedInBf16 = precisionPolicyFromString("amp-bf16grads");
    EXPECT_EQ(reducedInBf16.weightBytes(), 4);
    EXPECT_EQ(reducedInBf16.gradBytes(), 4);
    EXPECT_EQ(reducedInBf16.gradReduceBytes(), 2);
    EXPECT_EQ(PrecisionPolicy::bf16Mixed(false).gradReduceBytes(), 2);
    EXPECT_FALSE(PrecisionPolicy::bf16Mixed().autocastsWeights());

    const PrecisionPolicy fp8 = PrecisionPolicy::fp8Mixed();
    EXPECT_EQ(fp8.weightBytes(), 2); // BF16 weights; the FP8 copies are a transient buffer
    EXPECT_EQ(fp8.gradBytes(), 4);
    EXPECT_EQ(fp8.masterBytes(), 4);
    EXPECT_EQ(fp8.activationBytes(), 2);
}

TEST(PrecisionPolicy, NamesAndSpellings) {
    EXPECT_EQ(PrecisionPolicy::fp32().name(), "fp32");
    EXPECT_EQ(PrecisionPolicy::bf16Mixed().name(), "bf16 mixed (fp32 grads)");
    EXPECT_EQ(PrecisionPolicy::bf16Mixed(false).name(), "bf16 mixed (bf16 grads)");
    EXPECT_EQ(PrecisionPolicy::fp8Mixed().name(), "fp8 mixed (fp32 grads)");

    EXPECT_EQ(precisionPolicyFromString("fp32").compute, Precision::Fp32);
    EXPECT_EQ(precisionPolicyFromString("BF16").grads, Precision::Fp32);
    EXPECT_EQ(precisionPolicyFromString("bf16-bf16grads").grads, Precision::Bf16);
    EXPECT_EQ(precisionPolicyFromString("fp8").compute, Precision::Fp8);
    EXPECT_FALSE(precisionPolicyFromString("fp8").fp8Params);
    EXPECT_TRUE(precisionPolicyFromString("FP8_params").fp8Params);
    EXPECT_EQ(PrecisionPolicy::fp8Weights().name(), "fp8 mixed (fp8 weights, fp32 grads)");
    EXPECT_EQ(precisionPolicyFromString("AMP_bf16grads").name(),
              "bf16 autocast (fp32 weights and grads, bf16 reduce)");
    EXPECT_EQ(precisionPolicyFromString("amp").name(), "bf16 autocast (fp32 weights and grads)");
    // fp32 weights mean nothing to an fp32 or FP8 policy: equal to the plain one.
    PrecisionPolicy fp32Flagged = PrecisionPolicy::fp32();
    fp32Flagged.fp32Weights = true;
    EXPECT_TRUE(fp32Flagged == PrecisionPolicy::fp32());
    EXPECT_FALSE(PrecisionPolicy::autocast(true) ==
                 (PrecisionPolicy{Precision::Bf16, Precision::Fp32, false}));
    // The lessons' 12 bytes a parameter: bf16 weights and gradients, no fp32 master copy.
    const PrecisionPolicy pure = precisionPolicyFromString("bf16_nomaster");
    EXPECT_EQ(pure.grads, Precision::Bf16);
    EXPECT_FALSE(pure.fp32Master);
    EXPECT_EQ(pure.weightBytes() + pure.gradBytes() + pure.masterBytes(), 4);
    EXPECT_FALSE(precisionPolicyFromString("bf16-fp32grads-nomaster").fp32Master);
    try {
        precisionPolicyFromString("int4");
        ADD_FAILURE() << "int4 accepted";
    } catch (const InputError& e) {
        for (const char* name : {"fp32", "bf16-bf16grads", "bf16-nomaster", "amp", "amp-bf16grads",
                                 "fp8", "fp8-params"})
            EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
}

TEST(ParallelEnums, RoundTripThroughStrings) {
    for (auto s : {PipelineSchedule::Naive, PipelineSchedule::GPipe, PipelineSchedule::OneFOneB,
                   PipelineSchedule::Interleaved, PipelineSchedule::ZeroBubble})
        EXPECT_EQ(scheduleFromString(toString(s)), s);
    for (auto r : {Recompute::None, Recompute::Selective, Recompute::SelectiveOp, Recompute::Full})
        EXPECT_EQ(recomputeFromString(toString(r)), r);
    EXPECT_EQ(toString(Recompute::SelectiveOp), "selective-op");
    for (auto o : {Optimizer::AdamW, Optimizer::SgdMomentum})
        EXPECT_EQ(optimizerFromString(toString(o)), o);
    for (auto b : {BackwardPrefetch::Pre, BackwardPrefetch::Post, BackwardPrefetch::None})
        EXPECT_EQ(backwardPrefetchFromString(toString(b)), b);
    EXPECT_EQ(backwardPrefetchFromString("POST"), BackwardPrefetch::Post);
    EXPECT_THROW(backwardPrefetchFromString("later"), InputError);
    EXPECT_EQ(toString(PipelineSchedule::ZeroBubble), "zero-bubble");
    EXPECT_EQ(scheduleFromString("Zero_Bubble"), PipelineSchedule::ZeroBubble);
    EXPECT_EQ(scheduleFromString("1F1B"), PipelineSchedule::OneFOneB);
}

TEST(ParallelEnums, UnknownSpellingsListTheAcceptedOnes) {
    try {
        scheduleFromString("pipedream");
        ADD_FAILURE();
    } catch (const InputError& e) {
        const std::string message = e.what();
        for (const char* name : {"naive", "gpipe", "1f1b", "interleaved", "zero-bubble"})
            EXPECT_NE(message.find(name), std::string::npos) << message;
    }
    EXPECT_THROW(recomputeFromString("partial"), InputError);
    EXPECT_THROW(optimizerFromString("lion"), InputError);
}

TEST(ParallelConfig, DerivedCounts) {
    const ParallelConfig p = llama405bLayout();
    EXPECT_EQ(p.worldSize(), 16384);
    EXPECT_EQ(p.microbatches(), 16);
}

// ---- validation ----

TEST(Validate, Llama3_405bProductionLayoutIsValid) {
    const auto violations = validate(llama3_405b(), clusterOf(16384), llama405bLayout());
    EXPECT_TRUE(violations.empty()) << describe(violations);
}

TEST(Validate, ListsEveryBrokenRuleAtOnce) {
    ParallelConfig p;
    p.dp = 16;
    p.globalBatch = 100;       // global-batch: not a multiple of 16
    p.vpp = 2;                 // vpp-schedule: 1f1b
    p.sequenceParallel = true; // sp-tp: tp is 1
    p.offloadOptimizer = true; // offload-zero: zero is 0
    const auto violations = validate(llama3_405b(), clusterOf(16), p);
    auto ids = ruleIds(violations);
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(ids,
              (std::vector<std::string>{"global-batch", "offload-zero", "sp-tp", "vpp-schedule"}))
        << describe(violations);
    for (const Violation& v : violations)
        EXPECT_FALSE(v.hint.empty()) << v.rule;
}

// Megatron-LM's --recompute-method block: the first n layers of each virtual stage.
TEST(Validate, RecomputeLayersCountFullyRecomputedLayersOfAStage) {
    ParallelConfig p = llama405bLayout(); // 126 layers on 16 stages: 14 of 8, then 2 of 7
    p.recomputeLayers = 4;
    const auto selective = validate(llama3_405b(), p);
    ASSERT_TRUE(hasRule(selective, "recompute-layers")) << describe(selective);
    p.recompute = Recompute::Full;
    EXPECT_FALSE(hasRule(validate(llama3_405b(), p), "recompute-layers"));
    p.recomputeLayers = 8;
    EXPECT_FALSE(hasRule(validate(llama3_405b(), p), "recompute-layers"));
    EXPECT_EQ(recomputedLayersOnChunk(126, p, 0), 8);
    EXPECT_EQ(recomputedLayersOnChunk(126, p, 15), 7); // a stage of 7 recomputes all it has
    p.recomputeLayers = 9;
    const auto tooMany = validate(llama3_405b(), p);
    const auto it = std::find_if(tooMany.begin(), tooMany.end(),
                                 [](const Violation& x) { return x.rule == "recompute-layers"; });
    ASSERT_NE(it, tooMany.end()) << describe(tooMany);
    EXPECT_NE(it->hint.find("<= 8"), std::string::npos) << it->hint;
    p.recomputeLayers = -1;
    EXPECT_TRUE(hasRule(validate(llama3_405b(), p), "recompute-layers"));

    p.recomputeLayers = 3;
    EXPECT_EQ(recomputedLayersOnChunk(126, p, 0), 3);
    EXPECT_NE(layoutSummary(p).find("recompute-full3"), std::string::npos) << layoutSummary(p);
    p.recomputeLayers = 0; // every layer
    EXPECT_EQ(recomputedLayersOnChunk(126, p, 0), 8);
    EXPECT_EQ(layoutSummary(p).find("recompute-full3"), std::string::npos);
    p.recompute = Recompute::Selective;
    EXPECT_EQ(recomputedLayersOnChunk(126, p, 0), 0);
}

TEST(Validate, OpLevelRecomputeIsForDenseLayersOnly) {
    ParallelConfig p = llama405bLayout();
    p.recompute = Recompute::SelectiveOp;
    EXPECT_FALSE(hasRule(validate(llama3_405b(), p), "recompute-op"));
    ModelSpec moe = llama3_405b();
    moe.moe.experts = 8;
    moe.moe.topK = 2;
    moe.moe.expertFfn = 4096;
    ASSERT_TRUE(moe.moe.enabled());
    const auto v = validate(moe, p);
    ASSERT_TRUE(hasRule(v, "recompute-op"));
    const auto it = std::find_if(v.begin(), v.end(),
                                 [](const Violation& x) { return x.rule == "recompute-op"; });
    EXPECT_NE(it->message.find("experts"), std::string::npos) << it->message;
    EXPECT_NE(it->hint.find("selective"), std::string::npos) << it->hint;
}

TEST(Validate, Degrees) {
    ParallelConfig p = llama405bLayout();
    p.tp = 0;
    const auto v = expectRule(validate(llama3_405b(), p), "degree");
    ASSERT_TRUE(v);
    EXPECT_NE(v->message.find("tp"), std::string::npos) << v->message;
    p.tp = 8;
    p.cp = -1;
    expectRule(validate(llama3_405b(), clusterOf(16384), p), "degree");
}

TEST(Validate, ZeroStage) {
    ParallelConfig p = llama405bLayout();
    p.zero = 4;
    expectRule(validate(llama3_405b(), p), "zero-stage");
}

TEST(Validate, BatchSizes) {
    ParallelConfig p = llama405bLayout();
    p.microBatch = 0;
    expectRule(validate(llama3_405b(), p), "batch-size");
}

TEST(Validate, ClusterSize) {
    ClusterSpec c = clusterOf(16384);
    c.nodes = 0;
    expectRule(validate(llama3_405b(), c, llama405bLayout()), "cluster-size");
}

TEST(Validate, WorldSizeSuggestsADataParallelDegree) {
    ParallelConfig p = llama405bLayout();
    p.dp = 64;
    p.globalBatch = 1024;
    const auto v = expectRule(validate(llama3_405b(), clusterOf(16384), p), "world-size");
    ASSERT_TRUE(v);
    EXPECT_NE(v->message.find("8192"), std::string::npos) << v->message;
    EXPECT_NE(v->message.find("16384"), std::string::npos) << v->message;
    EXPECT_NE(v->hint.find("dp = 128"), std::string::npos) << v->hint;
    // Without a cluster the world size is whatever the degrees multiply to.
    EXPECT_FALSE(hasRule(validate(llama3_405b(), p), "world-size"));
}

// Degrees whose product passes an int (the engine's flags take any): refused with the product,
// before a rule multiplies them.
TEST(Validate, DegreesBeyondAnyMachineAreRefusedWithTheirProduct) {
    ParallelConfig p = llama405bLayout();
    p.dp = 100000;
    p.tp = 100000;
    const auto v = expectRule(validate(llama3_405b(), p), "world-size");
    ASSERT_TRUE(v);
    // 100,000 x 100,000 x pp 16: 1.6e11
    EXPECT_NE(v->message.find("160000000000"), std::string::npos) << v->message;
    p.dp = 1;
    p.tp = 1;
    EXPECT_FALSE(hasRule(validate(llama3_405b(), p), "world-size"));
}

TEST(Validate, WorldSizeThatCannotBeFixedWithDp) {
    ParallelConfig p = llama405bLayout();
    p.tp = 3;
    const auto v = expectRule(validate(llama3_405b(), clusterOf(16384), p), "world-size");
    ASSERT_TRUE(v);
    EXPECT_NE(v->hint.find("divide"), std::string::npos) << v->hint;
}

// Megatron-Core's expert-parallel rules: the experts split evenly over ep of the dp*cp ranks, SP
// with tp, no hybrid shard group; a dense model has no experts to split.
TEST(Validate, ExpertParallelism) {
    ModelSpec moe = llama3_405b();
    moe.moe.experts = 16;
    moe.moe.topK = 2;
    ParallelConfig p = llama405bLayout(); // tp 8 pp 16 dp 128, SP on
    p.sequenceParallel = true;
    p.ep = 8;
    EXPECT_TRUE(validate(moe, clusterOf(16384), p).empty());
    EXPECT_TRUE(hasRule(validate(llama3_405b(), p), "ep-moe"));
    p.ep = 32; // 16 experts
    const auto tooMany = validate(moe, clusterOf(16384), p);
    ASSERT_TRUE(hasRule(tooMany, "ep-experts"));
    EXPECT_NE(tooMany[0].hint.find("ep = 16"), std::string::npos) << tooMany[0].hint;
    p.ep = 16;
    p.dp = 8; // 8 ranks cannot hold 16 groups' worth
    p.tp = 8;
    EXPECT_TRUE(hasRule(validate(moe, p), "ep-dp"));
    p.dp = 128;
    p.sequenceParallel = false;
    EXPECT_TRUE(hasRule(validate(moe, p), "ep-sp"));
    p.sequenceParallel = true;
    p.zero = 1;
    p.shardGroup = 8;
    EXPECT_TRUE(hasRule(validate(moe, p), "ep-shard-group"));
    p.shardGroup = 0;
    p.ep = 0;
    EXPECT_TRUE(hasRule(validate(moe, p), "degree"));
    EXPECT_NE(layoutSummary(ParallelConfig{}).find("cp1 zero0"), std::string::npos);
    p.ep = 4;
    EXPECT_NE(layoutSummary(p).find("cp1 ep4 zero1"), std::string::npos) << layoutSummary(p);
    // A capacity factor needs experts, and at most experts / top-k (every token everywhere).
    p.expertCapacityFactor = 1.25;
    EXPECT_TRUE(validate(moe, p).empty());
    EXPECT_NE(layoutSummary(p).find("ep4 capacity1.25 zero1"), std::string::npos);
    EXPECT_TRUE(hasRule(validate(llama3_405b(), p), "capacity-moe"));
    p.expertCapacityFactor = 9; // 16 experts, top-2: 8 at most
    EXPECT_TRUE(hasRule(validate(moe, p), "capacity-factor"));
    p.expertCapacityFactor = std::nan("");
    EXPECT_TRUE(hasRule(validate(moe, p), "capacity-factor"));
}

// Megatron-Core's MoE parallel folding: the experts' etp x ep must divide tp x dp x cp, etp the
// experts' FFN; an etp apart from tp needs SP and a model with experts.
TEST(Validate, ExpertTensorParallelism) {
    ModelSpec moe = llama3_405b();
    moe.moe = {16, 2, 0, 6144};
    ParallelConfig p = llama405bLayout(); // tp 8 pp 16 dp 128
    p.sequenceParallel = true;
    p.etp = 1;
    p.ep = 16; // 16 of tp x dp = 1024, where dp alone would not be asked to hold them
    p.dp = 8;
    EXPECT_TRUE(validate(moe, p).empty());
    EXPECT_NE(layoutSummary(p).find("ep16 etp1 zero"), std::string::npos) << layoutSummary(p);
    p.etp = 0; // follows tp: 8 x 16 = 128 does not divide tp x dp = 64
    EXPECT_TRUE(hasRule(validate(moe, p), "ep-dp"));
    EXPECT_EQ(layoutSummary(p).find("etp"), std::string::npos);
    p.etp = 8; // the same, spelled out
    EXPECT_TRUE(hasRule(validate(moe, p), "ep-dp"));
    p.ep = 1;
    p.etp = 5; // 6144 / 5
    EXPECT_TRUE(hasRule(validate(moe, p), "etp-ffn"));
    p.etp = 1;
    EXPECT_TRUE(hasRule(validate(llama3_405b(), p), "etp-moe"));
    p.sequenceParallel = false;
    EXPECT_TRUE(hasRule(validate(moe, p), "ep-sp"));
    p.etp = 0; // Megatron-Core refuses any MoE under tp without SP, experts laid out as they may
    EXPECT_TRUE(hasRule(validate(moe, p), "ep-sp"));
    EXPECT_FALSE(hasRule(validate(llama3_405b(), p), "ep-sp"));
    p.etp = 1;
    p.sequenceParallel = true;
    p.zero = 1;
    p.shardGroup = 8;
    EXPECT_TRUE(hasRule(validate(moe, p), "ep-shard-group"));
    p.shardGroup = 0;
    p.etp = -1;
    EXPECT_TRUE(hasRule(validate(moe, p), "degree"));
}

TEST(Validate, TensorParallelMustDivideHeads) {
    ParallelConfig p = llama405bLayout();
    p.tp = 6;
    const auto v = expectRule(validate(llama3_405b(), p), "tp-heads");
    ASSERT_TRUE(v);
    EXPECT_NE(v->hint.find("tp = 4"), std::string::npos) << v->hint;
}

TEST(Validate, TensorParallelAndKvHeads) {
    ModelSpec m = llama3_405b();
    m.heads = 48;
    ParallelConfig p = llama405bLayout();
    p.tp = 6; // divides 48 heads, but neither divides nor is a multiple of 8 KV heads
    expectRule(validate(m, p), "tp-kv-heads");
    // tp a multiple of the KV heads replicates them: allowed.
    p.tp = 16;
    EXPECT_FALSE(hasRule(validate(llama3_405b(), p), "tp-kv-heads"));
    m = llama3_405b();
    m.kvHeads = 1; // multi-query attention works at any tp
    p.tp = 8;
    EXPECT_FALSE(hasRule(validate(m, p), "tp-kv-heads"));
}

TEST(Validate, TensorParallelMustDivideTheFfn) {
    ModelSpec m = llama3_405b();
    m.ffnHidden = 53250;
    expectRule(validate(m, llama405bLayout()), "tp-ffn");
}

TEST(Validate, TensorParallelMustDivideTheExpertFfn) {
    ModelSpec m = llama3_405b();
    m.moe = {8, 2, 0, 1000};
    ParallelConfig p = llama405bLayout();
    p.tp = 16;
    expectRule(validate(m, p), "tp-expert-ffn");
    EXPECT_FALSE(hasRule(validate(m, p), "tp-ffn"));
}

TEST(Validate, VocabNeedNotBeDivisible) {
    ModelSpec m = llama3_405b();
    m.vocab = 50257; // Megatron pads the vocabulary to a multiple of tp
    EXPECT_TRUE(validate(m, llama405bLayout()).empty());
}

TEST(Validate, PipelineStagesNeedLayers) {
    ModelSpec m = llama3_405b();
    m.layers = 8;
    const auto v = expectRule(validate(m, llama405bLayout()), "pp-layers");
    ASSERT_TRUE(v);
    EXPECT_NE(v->message.find("16"), std::string::npos) << v->message;
}

// With the embedding and the loss counted as layers (Megatron's account-for flags), pp x vpp
// may reach layers + 2; the layers are still all dealt, the first and last chunk one fewer.
TEST(Validate, TheEmbeddingAndLossCountAsLayersWhereTheLayoutSaysSo) {
    ModelSpec m = llama3_405b();
    m.layers = 30;
    ParallelConfig p = llama405bLayout(); // pp 16
    p.pp = 32;
    p.dp = 4;
    auto v = expectRule(validate(m, p), "pp-layers");
    ASSERT_TRUE(v);
    p.embeddingInPipelineSplit = p.lossInPipelineSplit = true;
    EXPECT_FALSE(hasRule(validate(m, p), "pp-layers")) << "30 + 2 slots fill pp 32";
    p.lossInPipelineSplit = false;
    v = expectRule(validate(m, p), "pp-layers");
    ASSERT_TRUE(v);
    EXPECT_NE(v->message.find("(31 with the embedding)"), std::string::npos) << v->message;

    // Every layer dealt once over the chunks, whatever the flags, none negative.
    for (const bool embedding : {false, true})
        for (const bool loss : {false, true})
            for (const auto& [layers, pp, vpp] :
                 {std::tuple{126, 16, 1}, {80, 8, 4}, {30, 4, 2}, {7, 3, 1}}) {
                ParallelConfig q;
                q.pp = pp;
                q.vpp = vpp;
                q.embeddingInPipelineSplit = embedding;
                q.lossInPipelineSplit = loss;
                int total = 0, mostSlots = 0;
                for (int c = 0; c < pp * vpp; ++c) {
                    EXPECT_GE(layersOnChunk(layers, q, c), 0);
                    total += layersOnChunk(layers, q, c);
                    const int slots = layersOnChunk(layers, q, c) + (c == 0 && embedding) +
                                      (c == pp * vpp - 1 && loss);
                    mostSlots = std::max(mostSlots, slots);
                }
                EXPECT_EQ(total, layers) << layers << " " << pp << "x" << vpp;
                // The fullest chunk, counted chunk by chunk, is the closed form's.
                EXPECT_EQ(q.mostSlotsOnChunk(layers), mostSlots)
                    << layers << " " << pp << "x" << vpp;
            }
    ParallelConfig crowded; // more chunks than slots: nothing to deal, the pp-layers rule's case
    crowded.pp = 8;
    crowded.vpp = 2;
    EXPECT_EQ(crowded.mostSlotsOnChunk(12), 0);
    // By hand: 80 layers + 2 over 8 x 4 chunks is 2 each and 18 left for the first chunks; the
    // embedding comes off chunk 0, the loss off chunk 31.
    ParallelConfig q;
    q.pp = 8;
    q.vpp = 4;
    q.embeddingInPipelineSplit = q.lossInPipelineSplit = true;
    for (const auto& [chunk, expected] :
         {std::pair{0, 2}, {1, 3}, {17, 3}, {18, 2}, {30, 2}, {31, 1}})
        EXPECT_EQ(layersOnChunk(80, q, chunk), expected) << chunk;
    ParallelConfig shown = llama405bLayout();
    shown.embeddingInPipelineSplit = shown.lossInPipelineSplit = true;
    EXPECT_NE(layoutSummary(shown).find(" pp-embedding pp-loss"), std::string::npos)
        << layoutSummary(shown);
}

// A hint that changes one degree keeps the layout on the cluster: tp*pp*cp must still divide
// its GPUs, so that dp = GPUs / (tp pp cp) is whole.
TEST(Validate, HintsKeepTheGpuCountWhole) {
    // 80 layers cannot fill pp 128; pp = 80 (the most the layers allow) leaves 1024 GPUs /
    // (tp 8 x 80) fractional, pp = 64 does not.
    ModelSpec m = llama3_405b();
    m.layers = 80;
    ParallelConfig p = llama405bLayout();
    p.pp = 128;
    p.dp = 1;
    auto v = expectRule(validate(m, clusterOf(1024), p), "pp-layers");
    ASSERT_TRUE(v);
    EXPECT_NE(v->hint.find("pp = 64"), std::string::npos) << v->hint;
    // Without a cluster there is no GPU count to keep: the layers alone bound pp.
    v = expectRule(validate(m, p), "pp-layers");
    ASSERT_TRUE(v);
    EXPECT_NE(v->hint.find("pp = 80"), std::string::npos) << v->hint;

    // 40 heads at tp 16 on 128 GPUs (pp 1): tp 10 divides the heads but not 128; tp 8 does both.
    m = llama3_405b();
    m.heads = 40;
    m.kvHeads = 40;
    m.ffnHidden = 40 * 1024;
    p = llama405bLayout();
    p.tp = 16;
    p.pp = 1;
    p.dp = 8;
    v = expectRule(validate(m, clusterOf(128), p), "tp-heads");
    ASSERT_TRUE(v);
    EXPECT_NE(v->hint.find("use tp = 8 "), std::string::npos) << v->hint;
    v = expectRule(validate(m, p), "tp-heads");
    ASSERT_TRUE(v);
    EXPECT_NE(v->hint.find("use tp = 10 "), std::string::npos) << v->hint;
}

TEST(Validate, VirtualStagesNeedTheInterleavedSchedule) {
    ParallelConfig p = llama405bLayout();
    p.vpp = 2;
    expectRule(validate(llama3_405b(), p), "vpp-schedule");
    p.schedule = PipelineSchedule::Interleaved;
    EXPECT_TRUE(validate(llama3_405b(), p).empty()) << describe(validate(llama3_405b(), p));
}

TEST(Validate, InterleavedNeedsVirtualStages) {
    ParallelConfig p = llama405bLayout();
    p.schedule = PipelineSchedule::Interleaved;
    expectRule(validate(llama3_405b(), p), "interleaved-vpp");
}

TEST(Validate, InterleavedNeedsAPipeline) {
    ParallelConfig p = llama405bLayout();
    p.schedule = PipelineSchedule::Interleaved;
    p.vpp = 2;
    p.pp = 1;
    expectRule(validate(llama3_405b(), p), "interleaved-pp");
}

TEST(Validate, InterleavedNeedsMicrobatchesInMultiplesOfPp) {
    ParallelConfig p = llama405bLayout();
    p.schedule = PipelineSchedule::Interleaved;
    p.vpp = 2;
    p.globalBatch = 3072; // 24 microbatches, pp 16
    const auto v = expectRule(validate(llama3_405b(), p), "interleaved-microbatches");
    ASSERT_TRUE(v);
    EXPECT_NE(v->hint.find("4096"), std::string::npos) << v->hint; // 32 microbatches
}

TEST(Validate, AnyScheduleWithoutAPipelineExceptInterleaved) {
    ParallelConfig p;
    for (auto s : {PipelineSchedule::Naive, PipelineSchedule::GPipe, PipelineSchedule::OneFOneB,
                   PipelineSchedule::ZeroBubble}) {
        p.schedule = s;
        EXPECT_TRUE(validate(llama3_405b(), p).empty()) << toString(s);
    }
}

TEST(Validate, GlobalBatchMustBeAMultipleOfMicroBatchTimesDp) {
    ParallelConfig p = llama405bLayout();
    p.globalBatch = 2000;
    const auto v = expectRule(validate(llama3_405b(), p), "global-batch");
    ASSERT_TRUE(v);
    EXPECT_NE(v->hint.find("1920"), std::string::npos) << v->hint;
    EXPECT_NE(v->hint.find("2048"), std::string::npos) << v->hint;
    p.globalBatch = 64; // smaller than one microbatch per data-parallel rank
    expectRule(validate(llama3_405b(), p), "global-batch");
}

TEST(Validate, ContextParallelSplitsTheSequenceIntoTwoChunksPerRank) {
    ParallelConfig p = llama405bLayout();
    p.cp = 3;
    expectRule(validate(llama3_405b(), p), "cp-seq");
    p.cp = 16; // 8192 / 32 = 256
    EXPECT_FALSE(hasRule(validate(llama3_405b(), p), "cp-seq"));
}

TEST(Validate, SequenceParallelNeedsTensorParallel) {
    ParallelConfig p;
    p.sequenceParallel = true;
    expectRule(validate(llama3_405b(), p), "sp-tp");
    p.tp = 8;
    EXPECT_FALSE(hasRule(validate(llama3_405b(), p), "sp-tp"));
}

TEST(Validate, OptimizerOffloadNeedsZero) {
    ParallelConfig p = llama405bLayout();
    p.offloadOptimizer = true;
    expectRule(validate(llama3_405b(), p), "offload-zero");
    p.zero = 1;
    EXPECT_TRUE(validate(llama3_405b(), p).empty());
}

// Hybrid sharding: whole copies of the states in groups of shard_group of the dp x cp ranks.
TEST(Validate, AShardGroupDividesTheDataParallelRanksAndNeedsZero) {
    ParallelConfig p = llama405bLayout(); // dp 128
    p.zero = 3;
    p.shardGroup = 8;
    EXPECT_TRUE(validate(llama3_405b(), p).empty()) << describe(validate(llama3_405b(), p));
    EXPECT_TRUE(p.hybridShard());
    EXPECT_EQ(p.zeroShards(), 8);
    EXPECT_EQ(p.zeroReplicas(), 16);
    EXPECT_EQ(layoutSummary(p), "dp128 tp8 pp16 cp1 zero3 shard8 mb1 1f1b recompute-none");

    p.shardGroup = 48; // 128 ranks are not whole copies of 48: the hint is the divisor below
    const auto v = expectRule(validate(llama3_405b(), p), "shard-group");
    ASSERT_TRUE(v);
    EXPECT_NE(v->hint.find("shard_group = 32"), std::string::npos) << v->hint;
    p.shardGroup = -1;
    expectRule(validate(llama3_405b(), p), "shard-group");

    p.shardGroup = 8;
    p.zero = 0; // nothing to shard
    expectRule(validate(llama3_405b(), p), "shard-group-zero");

    p.zero = 1;
    p.shardGroup = 128; // one group of all of them: ZeRO as usual
    EXPECT_TRUE(validate(llama3_405b(), p).empty());
    EXPECT_FALSE(p.hybridShard());
    EXPECT_EQ(layoutSummary(p), "dp128 tp8 pp16 cp1 zero1 mb1 1f1b recompute-none");
}

// Transformer Engine overlaps TP's sequence-parallel collectives with the GEMMs; Megatron-LM
// refuses tp-comm-overlap without SP. The layout line names the overlap settings that differ
// from the frameworks' defaults, where they change anything.
TEST(Validate, TpCommOverlapNeedsSequenceParallelism) {
    ParallelConfig p = llama405bLayout(); // dp 128, tp 8
    p.zero = 1;
    p.tpCommOverlap = true;
    const auto v = expectRule(validate(llama3_405b(), p), "tp-comm-overlap");
    ASSERT_TRUE(v);
    EXPECT_NE(v->hint.find("sequence_parallel on"), std::string::npos) << v->hint;
    p.sequenceParallel = true;
    EXPECT_TRUE(validate(llama3_405b(), p).empty()) << describe(validate(llama3_405b(), p));
    EXPECT_EQ(layoutSummary(p), "dp128 tp8 pp16 cp1 zero1 sp mb1 1f1b recompute-none tp-overlap");

    p.overlapGradReduce = p.overlapParamGather = false;
    EXPECT_EQ(layoutSummary(p), "dp128 tp8 pp16 cp1 zero1 sp mb1 1f1b recompute-none "
                                "no-grad-overlap no-gather-overlap tp-overlap");
    p.zero = 0; // no ZeRO: nothing is gathered
    EXPECT_EQ(layoutSummary(p), "dp128 tp8 pp16 cp1 zero0 sp mb1 1f1b recompute-none "
                                "no-grad-overlap tp-overlap");

    p.tp = 1; // no TP group: nothing to overlap, and nothing to refuse
    p.dp = 1024;
    p.sequenceParallel = false;
    EXPECT_TRUE(validate(llama3_405b(), p).empty()) << describe(validate(llama3_405b(), p));
    EXPECT_EQ(layoutSummary(p), "dp1024 tp1 pp16 cp1 zero0 mb1 1f1b recompute-none "
                                "no-grad-overlap");
}

TEST(Validate, ZeroWithPipelineIsAllowed) {
    ParallelConfig p = llama405bLayout();
    p.zero = 3;
    EXPECT_TRUE(validate(llama3_405b(), p).empty());
}

TEST(Validate, BareModelsCannotBeSplitByModelParallelism) {
    ModelSpec bare;
    bare.bareParams = 7e9;
    ParallelConfig p;
    p.dp = 8;
    p.globalBatch = 64;
    p.zero = 3;
    EXPECT_TRUE(validate(bare, clusterOf(8), p).empty());
    p.dp = 4;
    p.tp = 2;
    p.globalBatch = 64;
    const auto violations = validate(bare, clusterOf(8), p);
    const auto v = expectRule(violations, "bare-model");
    ASSERT_TRUE(v);
    EXPECT_NE(v->hint.find("--hf-config"), std::string::npos) << v->hint;
    EXPECT_FALSE(hasRule(violations, "tp-heads")); // no architecture to check
    p.tp = 1;
    p.cp = 2;
    p.dp = 4;
    expectRule(validate(bare, clusterOf(8), p), "bare-model");
}

// validate() must hold its promise on any input, however absurd.
TEST(Validate, NeverThrowsOnExtremeValues) {
    const int values[] = {INT_MIN, -1, 0, 1, 2, 3, 7, 8, 64, 1 << 20, INT_MAX};
    std::mt19937 rng(5);
    auto pick = [&] { return values[rng() % std::size(values)]; };
    for (int i = 0; i < 20000; ++i) {
        ModelSpec m;
        m.layers = pick();
        m.hidden = pick();
        m.heads = pick();
        m.kvHeads = pick();
        m.ffnHidden = pick();
        m.seqLen = pick();
        m.moe.experts = rng() % 2 ? pick() : 0;
        m.moe.expertFfn = pick();
        if (rng() % 5 == 0)
            m.bareParams = 1e9;
        ParallelConfig p;
        p.dp = pick();
        p.tp = pick();
        p.pp = pick();
        p.vpp = pick();
        p.cp = pick();
        p.zero = pick();
        p.microBatch = pick();
        p.globalBatch = pick();
        p.schedule = PipelineSchedule(rng() % 5);
        p.sequenceParallel = rng() % 2;
        p.offloadOptimizer = rng() % 2;
        ClusterSpec c;
        c.gpusPerNode = pick();
        c.nodes = pick();
        std::vector<Violation> violations;
        ASSERT_NO_THROW(violations = validate(m, c, p));
        for (const Violation& v : violations) {
            ASSERT_FALSE(v.rule.empty());
            ASSERT_FALSE(v.message.empty());
            ASSERT_FALSE(v.hint.empty());
        }
    }
}

} // namespace
} // namespace shardscope
