#include "core/error.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "core_test_support.h"
#include "json_mutation.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <limits>
#include <nlohmann/json.hpp>

namespace shardscope {
namespace {

using nlohmann::json;
using test::expectSame;

// The InputError message of f(), or a failure when f() does not throw one.
template <typename F> std::string inputErrorOf(F&& f) {
    try {
        f();
    } catch (const InputError& e) {
        return e.what();
    }
    ADD_FAILURE() << "expected an InputError";
    return {};
}

template <typename T> T roundTrip(const T& value) {
    return json(value).get<T>();
}

json llamaJson() {
    return json::parse(R"({
        "id": "test-llama", "name": "Test Llama", "family": "llama",
        "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
        "vocab": 128256, "seq_len": 8192, "max_positions": 8192,
        "activation": "swiglu", "norm": "rmsnorm", "positions": "rope"
    })");
}

// ---- untrusted documents: nesting and excerpts ----

std::string nested(std::size_t levels, const std::string& inner = "") {
    return std::string(levels, '[') + inner + std::string(levels, ']');
}

TEST(JsonDepth, CountsNestingOutsideStrings) {
    EXPECT_EQ(jsonNestingDepth(""), 0u);
    EXPECT_EQ(jsonNestingDepth("42"), 0u);
    EXPECT_EQ(jsonNestingDepth(R"({"a": [1, {"b": []}]})"), 4u);
    // Brackets and escaped quotes inside strings are text.
    EXPECT_EQ(jsonNestingDepth(R"(["[[[", "\"[[{", {}])"), 2u);
    EXPECT_EQ(jsonNestingDepth("]]]]"), 0u); // more closed than opened never counts below 0
    EXPECT_EQ(jsonNestingDepth(nested(80000)), 80000u);
}

// A document too deep to walk (an 80,000-level one crashed the CLI, the app and the engine when
// a message described it) is refused before it is parsed; the limit leaves every real one in.
TEST(JsonDepth, ADocumentDeeperThanTheLimitIsRefusedUnread) {
    const std::string e = inputErrorOf([] { parseJson(nested(80000), "deep.json"); });
    EXPECT_NE(e.find("deep.json"), std::string::npos) << e;
    EXPECT_NE(e.find("80000 levels"), std::string::npos) << e;
    EXPECT_NE(inputErrorOf([] { parseJson(nested(kMaxJsonDepth + 1), "x"); }).find("65 levels"),
              std::string::npos);
    EXPECT_EQ(parseJson(nested(kMaxJsonDepth), "x").size(), 1u);
}

TEST(JsonExcerpt, QuotesAValueWithoutWalkingIntoIt) {
    EXPECT_EQ(jsonExcerpt(json::parse(nested(kMaxJsonDepth, "1"))), "an array of 1");
    EXPECT_EQ(jsonExcerpt(json::parse(R"({"a": 1, "b": [2]})")), "an object of 2 fields");
    EXPECT_EQ(jsonExcerpt(json::parse(R"({"a": 1})")), "an object of 1 field");
    EXPECT_EQ(jsonExcerpt(json(12.5)), "12.5");
    EXPECT_EQ(jsonExcerpt(json(true)), "true");
    EXPECT_EQ(jsonExcerpt(json("short")), "\"short\"");
    const std::string quoted = jsonExcerpt(json(std::string(100000, 'x')));
    EXPECT_EQ(quoted, "\"" + std::string(40, 'x') + "...\"");
}

// A wrong value deep inside a field is named by its field, quoted by its size.
TEST(JsonExcerpt, AWrongDeepFieldIsNamedWithoutDumpingIt) {
    json m = llamaJson();
    m["hidden"] = json::parse(nested(60, "1"));
    const std::string e = inputErrorOf([&] { m.get<ModelSpec>(); });
    EXPECT_NE(e.find("hidden"), std::string::npos) << e;
    EXPECT_NE(e.find("an array of 1"), std::string::npos) << e;
    EXPECT_LT(e.size(), 400u) << e;
}

// ---- model ----

TEST(ModelJson, ReadsSnakeCaseFields) {
    const ModelSpec m = llamaJson().get<ModelSpec>();
    EXPECT_EQ(m.id, "test-llama");
    EXPECT_EQ(m.layers, 32);
    EXPECT_EQ(m.kvHeads, 8);
    EXPECT_EQ(m.ffnHidden, 14336);
    EXPECT_EQ(m.vocab, 128256);
    EXPECT_EQ(m.activation, Activation::SwiGlu);
    EXPECT_FALSE(m.isBare());
}

TEST(ModelJson, MissingOptionalFieldsKeepDefaults) {
    const ModelSpec m =
        json::parse(R"({"layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 256, "vocab": 100})")
            .get<ModelSpec>();
    const ModelSpec defaults;
    EXPECT_EQ(m.kvHeads, 4); // multi-head attention unless told otherwise
    EXPECT_EQ(m.activation, defaults.activation);
    EXPECT_EQ(m.norm, defaults.norm);
    EXPECT_EQ(m.positions, defaults.positions);
    EXPECT_EQ(m.tiedEmbeddings, defaults.tiedEmbeddings);
    EXPECT_EQ(m.headDim, 0);
    EXPECT_FALSE(m.moe.enabled());
    EXPECT_EQ(m.seqLen, 0);
}

TEST(ModelJson, OneLengthStandsInForTheOther) {
    json j = llamaJson();
    j.erase("seq_len");
    j["max_positions"] = 131072;
    EXPECT_EQ(j.get<ModelSpec>().seqLen, 8192); // capped, as for Hugging Face imports
    j = llamaJson();
    j.erase("max_positions");
    EXPECT_EQ(j.get<ModelSpec>().maxPositions, 8192);
}

TEST(ModelJson, RoundTripsEveryField) {
    ModelSpec m = llamaJson().get<ModelSpec>();
    m.headDim = 256;
    m.tiedEmbeddings = true;
    m.activation = Activation::GeGlu;
    m.norm = Norm::LayerNorm;
    m.positions = PositionEmbedding::Learned;
    m.attentionBias = m.outputBias = m.mlpBias = m.dropout = true;
    m.moe = {16, 2, 1, 2048, 3};
    m.mtpModules = 2;
    m.ropeTheta = 500000;
    m.ropeScaling = {"llama3", 8, 1, 4, 8192};
    m.normEps = 1e-6;
    m.publishedParams = 1.25e10;
    m.source = "a test";
    expectSame(roundTrip(m), m);
}

// Multi-head latent attention's fields travel with the model, and what it cannot be is said.
TEST(ModelJson, LatentAttentionRoundTripsAndIsChecked) {
    json j = llamaJson();
    j["kv_heads"] = j["heads"];
    j["mla"] = {{"q_lora_rank", 1536},
                {"kv_lora_rank", 512},
                {"qk_nope_head_dim", 128},
                {"qk_rope_head_dim", 64},
                {"v_head_dim", 128}};
    const ModelSpec m = j.get<ModelSpec>();
    EXPECT_EQ(m.mla.qLoraRank, 1536);
    EXPECT_EQ(m.mla.qkHeadDim(), 192);
    expectSame(roundTrip(m), m);
    json gqa = j;
    gqa["kv_heads"] = 8;
    EXPECT_NE(inputErrorOf([&] { gqa.get<ModelSpec>(); }).find("every head"), std::string::npos);
    json noValues = j;
    noValues["mla"]["v_head_dim"] = 0;
    EXPECT_NE(inputErrorOf([&] { noValues.get<ModelSpec>(); }).find("v_head_dim"),
              std::string::npos);
    json noLatent = j;
    noLatent["mla"]["kv_lora_rank"] = 0;
    EXPECT_NE(inputErrorOf([&] { noLatent.get<ModelSpec>(); }).find("mla.kv_lora_rank"),
              std::string::npos);
    json bias = j;
    bias["attention_bias"] = true;
    EXPECT_NE(inputErrorOf([&] { bias.get<ModelSpec>(); }).find("attention_bias"),
              std::string::npos);
}

TEST(ModelJson, RoundTripsEveryPreset) {
    for (const ModelSpec& m : modelPresets()) {
        SCOPED_TRACE(m.id);
        expectSame(roundTrip(m), m);
    }
}

TEST(ModelJson, BareForm) {
    const ModelSpec m = json::parse(R"({"name": "a 7B model", "params": 7e9})").get<ModelSpec>();
    ASSERT_TRUE(m.isBare());
    EXPECT_EQ(*m.bareParams, 7e9);
    EXPECT_EQ(m.name, "a 7B model");
    expectSame(roundTrip(m), m);
    EXPECT_FALSE(json(m).contains("layers"));
}

TEST(ModelJson, BareFormRejectsArchitectureAndBadCounts) {
    EXPECT_NE(inputErrorOf([] {
                  json::parse(R"({"params": 7e9, "layers": 32})").get<ModelSpec>();
              }).find("params"),
              std::string::npos);
    for (const char* bad : {"0", "-7e9", "2e15", "\"7B\"", "[7e9]"}) {
        SCOPED_TRACE(bad);
        const std::string message = inputErrorOf(
            [&] { json::parse(std::string(R"({"params": )") + bad + "}").get<ModelSpec>(); });
        EXPECT_NE(message.find("params"), std::string::npos) << message;
    }
}

TEST(ModelJson, ListsEveryMissingRequiredField) {
    const std::string message =
        inputErrorOf([] { json::parse(R"({"name": "x", "heads": 8})").get<ModelSpec>(); });
    EXPECT_NE(message.find("model 'x'"), std::string::npos) << message;
    for (const char* field : {"layers", "hidden", "ffn_hidden", "vocab"})
        EXPECT_NE(message.find(field), std::string::npos) << field << " in: " << message;
}

TEST(ModelJson, WrongTypeNamesFieldValueAndExpectation) {
    json j = llamaJson();
    j["layers"] = "32";
    const std::string message = inputErrorOf([&] { j.get<ModelSpec>(); });
    EXPECT_NE(message.find("layers"), std::string::npos) << message;
    EXPECT_NE(message.find("\"32\""), std::string::npos) << message;
    EXPECT_NE(message.find("whole number"), std::string::npos) << message;
}

TEST(ModelJson, RejectsNegativeZeroAndAbsurdSizes) {
    const std::pair<const char*, json> cases[] = {
        {"hidden", -4096}, {"hidden", 0},          {"layers", 100001},       {"hidden", 2e6},
        {"vocab", 2e8},    {"heads", 32.5},        {"kv_heads", 0},          {"ffn_hidden", -1},
        {"seq_len", 0},    {"tied_embeddings", 1}, {"activation", "relu"},   {"norm", 3},
        {"moe", "dense"},  {"head_dim", -128},     {"published_params", -1},
    };
    for (const auto& [field, value] : cases) {
        SCOPED_TRACE(std::string(field) + " = " + value.dump());
        json j = llamaJson();
        j[field] = value;
        const std::string message = inputErrorOf([&] { j.get<ModelSpec>(); });
        EXPECT_NE(message.find(field), std::string::npos) << message;
        if (value.is_number()) {
            EXPECT_NE(message.find(value.dump()), std::string::npos) << message;
        }
    }
}

TEST(ModelJson, RejectsNanAndInfinity) {
    for (double bad :
         {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
        json j = llamaJson();
        j["hidden"] = bad;
        EXPECT_NE(inputErrorOf([&] { j.get<ModelSpec>(); }).find("hidden"), std::string::npos);
        j = json{{"params", bad}};
        EXPECT_NE(inputErrorOf([&] { j.get<ModelSpec>(); }).find("params"), std::string::npos);
    }
    // Text cannot hold NaN; an overflowing literal must still end as an InputError.
    EXPECT_THROW(parseJson(R"({"params": 1e400})", "test").get<ModelSpec>(), InputError);
}

TEST(ModelJson, RejectsMoreThanAQuadrillionParameters) {
    json j = llamaJson();
    j["layers"] = 100000;
    j["hidden"] = 1000000;
    j["heads"] = 1000;
    j["kv_heads"] = 1000;
    const std::string message = inputErrorOf([&] { j.get<ModelSpec>(); });
    EXPECT_NE(message.find("parameters"), std::string::npos) << message;
}

TEST(ModelJson, ChecksFieldsAgainstEachOther) {
    json j = llamaJson();
    j["kv_heads"] = 5;
    EXPECT_NE(inputErrorOf([&] { j.get<ModelSpec>(); }).find("kv_heads"), std::string::npos);
    j = llamaJson();
    j["heads"] = 30;
    j["kv_heads"] = 30;
    EXPECT_NE(inputErrorOf([&] { j.get<ModelSpec>(); }).find("head_dim"), std::string::npos);
    j["head_dim"] = 128; // an explicit head size makes any head count fine
    EXPECT_NO_THROW(j.get<ModelSpec>());
    j = llamaJson();
    j["moe"] = {{"experts", 8}, {"top_k", 9}};
    EXPECT_NE(inputErrorOf([&] { j.get<ModelSpec>(); }).find("top_k"), std::string::npos);
    // Dense first layers need experts after them.
    j["moe"] = {{"experts", 8}, {"top_k", 2}, {"first_dense_layers", j["layers"]}};
    EXPECT_NE(inputErrorOf([&] { j.get<ModelSpec>(); }).find("first_dense_layers: expected fewer"),
              std::string::npos);
    j["moe"] = {{"experts", 0}, {"first_dense_layers", 1}};
    EXPECT_NE(inputErrorOf([&] { j.get<ModelSpec>(); }).find("moe.experts"), std::string::npos);
    j["moe"] = {{"experts", 8}, {"top_k", 2}, {"first_dense_layers", -1}};
    EXPECT_NE(inputErrorOf([&] { j.get<ModelSpec>(); }).find("first_dense_layers"),
              std::string::npos);
}

// The rotary base, its scaling and the norms' epsilon are read with their bounds.
TEST(ModelJson, RotaryAndNormSettingsAreChecked) {
    const ModelSpec defaults = llamaJson().get<ModelSpec>();
    EXPECT_EQ(defaults.ropeTheta, 10000);
    EXPECT_FALSE(defaults.ropeScaling.enabled());
    EXPECT_EQ(defaults.normEps, 1e-5);
    json j = llamaJson();
    j["rope_theta"] = 1;
    EXPECT_NE(inputErrorOf([&] { j.get<ModelSpec>(); }).find("rope_theta"), std::string::npos);
    j = llamaJson();
    j["norm_eps"] = 0;
    EXPECT_NE(inputErrorOf([&] { j.get<ModelSpec>(); }).find("norm_eps"), std::string::npos);
    j = llamaJson();
    j["rope_scaling"] = {
        {"type", "llama3"}, {"factor", 8}, {"low_freq_factor", 4}, {"high_freq_factor", 4}};
    EXPECT_NE(inputErrorOf([&] { j.get<ModelSpec>(); }).find("high_freq_factor above"),
              std::string::npos);
    j["rope_scaling"] = "llama3";
    EXPECT_NE(inputErrorOf([&] { j.get<ModelSpec>(); }).find("rope_scaling"), std::string::npos);
    j["rope_scaling"] = {{"factor", 8}}; // factors without a type would be ignored
    EXPECT_NE(inputErrorOf([&] { j.get<ModelSpec>(); }).find("rope_scaling.type"),
              std::string::npos);
}

TEST(ModelJson, NotAnObject) {
    EXPECT_NE(inputErrorOf([] { json::array().get<ModelSpec>(); }).find("object"),
              std::string::npos);
}

// ---- GPU ----

TEST(GpuJson, ConvertsUnits) {
    const GpuSpec g = json::parse(R"({
        "id": "x", "name": "X", "memory_gb": 80, "hbm_bandwidth_gbps": 3350,
        "nvlink_bandwidth_gbps": 450, "compute_capability": 9.0,
        "peak_tflops": {"bf16": 989.4, "fp32": 66.9}, "match": ["X 80GB"]})")
                          .get<GpuSpec>();
    EXPECT_EQ(g.memoryBytes, 80e9);
    EXPECT_EQ(g.hbmBandwidth, 3350e9);
    EXPECT_EQ(g.nvlinkBandwidth, 450e9);
    EXPECT_DOUBLE_EQ(g.peakFlops.at(Precision::Bf16), 989.4e12);
    EXPECT_EQ(g.peakFlops.count(Precision::Fp8), 0u);
    EXPECT_EQ(g.computeCapability, "9.0");
    EXPECT_EQ(g.matchNames, std::vector<std::string>{"X 80GB"});
}

TEST(GpuJson, RoundTripsEveryPreset) {
    ASSERT_FALSE(gpuPresets().empty());
    for (const GpuSpec& g : gpuPresets()) {
        SCOPED_TRACE(g.id);
        expectSame(roundTrip(g), g);
    }
}

TEST(GpuJson, RequiresMemoryBandwidthAndAPeak) {
    const std::string message = inputErrorOf([] { json{{"name", "bare"}}.get<GpuSpec>(); });
    for (const char* field : {"memory_gb", "hbm_bandwidth_gbps", "peak_tflops"})
        EXPECT_NE(message.find(field), std::string::npos) << field << " in: " << message;
    EXPECT_THROW(json::parse(R"({"memory_gb": 80, "hbm_bandwidth_gbps": 1000,
                                 "peak_tflops": {}})")
                     .get<GpuSpec>(),
                 InputError);
    EXPECT_THROW(json::parse(R"({"memory_gb": 80, "hbm_bandwidth_gbps": 1000,
                                 "peak_tflops": {"bf16": -1}})")
                     .get<GpuSpec>(),
                 InputError);
}

// A measured matmul ceiling is a fraction of the peak: above 1 would claim more than the
// datasheet, 0 or less nothing; either is refused with the field named.
TEST(GpuJson, MatmulCeilingIsAFractionOfThePeak) {
    const std::string base = R"({"memory_gb": 80, "hbm_bandwidth_gbps": 1000,
                                 "peak_tflops": {"bf16": 100, "fp8": 200}, "matmul_ceiling": )";
    const GpuSpec g = json::parse(base + R"({"bf16": 0.8, "fp8": 0.7}})").get<GpuSpec>();
    EXPECT_DOUBLE_EQ(g.ceiling(Precision::Bf16), 0.8);
    EXPECT_DOUBLE_EQ(g.ceiling(Precision::Fp16), 0.8); // the same tensor cores
    EXPECT_DOUBLE_EQ(g.ceiling(Precision::Fp8), 0.7);
    EXPECT_EQ(g.ceiling(Precision::Tf32), 0.0); // not measured
    for (const char* bad : {R"({"bf16": 1.2}})", R"({"bf16": 0}})", R"({"fp8": -0.5}})",
                            R"({"bf16": "high"}})", R"([0.8]})"}) {
        SCOPED_TRACE(bad);
        const std::string message = inputErrorOf([&] { json::parse(base + bad).get<GpuSpec>(); });
        EXPECT_NE(message.find("matmul_ceiling"), std::string::npos) << message;
    }
    // Absent: no ceiling, which the planner reads as "not measured".
    EXPECT_TRUE(json::parse(R"({"memory_gb": 80, "hbm_bandwidth_gbps": 1000,
                                "peak_tflops": {"bf16": 100}})")
                    .get<GpuSpec>()
                    .matmulCeiling.empty());
}

// ---- cluster ----

TEST(ClusterJson, NamesAGpuPresetAndDefaultsItsLinks) {
    const ClusterSpec c =
        json::parse(R"({"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": 4, "inter_latency_us": 5})")
            .get<ClusterSpec>();
    EXPECT_EQ(c.gpu.id, "h100-sxm");
    EXPECT_EQ(c.worldSize(), 32);
    EXPECT_EQ(c.intraBandwidth, c.gpu.nvlinkBandwidth);
    EXPECT_EQ(c.interBandwidth, 50e9); // DGX H100: one 400 Gb/s NIC a GPU
    EXPECT_DOUBLE_EQ(c.interLatency, 5e-6);
    EXPECT_EQ(c.gpuMtbfHours, ClusterSpec{}.gpuMtbfHours);
    // DGX A100: one 200 Gb/s NIC a GPU; a GPU object of its own says its network, or gets 50.
    EXPECT_EQ(json::parse(R"({"gpu": "a100-80gb", "nodes": 2})").get<ClusterSpec>().interBandwidth,
              25e9);
    const std::string own = R"({"nodes": 2, "gpu": {"memory_gb": 80, "hbm_bandwidth_gbps": 1000,
                                "peak_tflops": {"bf16": 100})";
    EXPECT_EQ(json::parse(own + R"(, "network_gbps": 12.5}})").get<ClusterSpec>().interBandwidth,
              12.5e9);
    EXPECT_EQ(json::parse(own + "}}").get<ClusterSpec>().interBandwidth, 50e9);
    EXPECT_THROW(
        json::parse(R"({"gpu": "a100-80gb", "inter_bandwidth_gbps": 0})").get<ClusterSpec>(),
        InputError); // no network at all would never finish a collective
}

TEST(ClusterJson, RoundTrips) {
    ClusterSpec c = makeCluster(findGpuPreset("a100-80gb"), 4, 16, 30e9); // not the A100's own
    c.intraLatency = 2.5e-6;
    c.interLatency = 12e-6;
    c.gpuMtbfHours = 50000;
    c.checkpointBandwidth = 40e9;
    c.restartSeconds = 300;
    c.gpuHourCost = 1.75;
    expectSame(roundTrip(c), c);
}

TEST(ClusterJson, Errors) {
    EXPECT_NE(inputErrorOf([] {
                  json{{"gpu", "no-such-gpu"}}.get<ClusterSpec>();
              }).find("h100-sxm"), // the message lists the known presets
              std::string::npos);
    EXPECT_NE(inputErrorOf([] {
                  json{{"nodes", 2}}.get<ClusterSpec>();
              }).find("gpu"),
              std::string::npos);
    EXPECT_NE(inputErrorOf([] {
                  json{{"gpu", "h100-sxm"}, {"nodes", 0}}.get<ClusterSpec>();
              }).find("nodes"),
              std::string::npos);
    EXPECT_NE(inputErrorOf([] {
                  json{{"gpu", 3}}.get<ClusterSpec>();
              }).find("gpu"),
              std::string::npos);
}

// ---- parallel layout and training run ----

TEST(ParallelConfigJson, RoundTripsEveryEnumValue) {
    ParallelConfig p;
    p.dp = 16;
    p.tp = 8;
    p.pp = 4;
    p.vpp = 2;
    p.cp = 2;
    p.zero = 1;
    p.shardGroup = 8;
    p.sequenceParallel = true;
    p.microBatch = 2;
    p.globalBatch = 1024;
    p.offloadOptimizer = true;
    p.overlapGradReduce = false; // every overlap flag away from its default
    p.overlapParamGather = false;
    p.tpCommOverlap = true;
    p.epCommOverlap = true;
    p.fusedElementwise = false;
    p.ep = 4;
    p.etp = 1;
    p.expertCapacityFactor = 1.25;
    p.embeddingInPipelineSplit = true;
    p.lossInPipelineSplit = true;
    for (auto s : {PipelineSchedule::Naive, PipelineSchedule::GPipe, PipelineSchedule::OneFOneB,
                   PipelineSchedule::Interleaved, PipelineSchedule::ZeroBubble}) {
        p.schedule = s;
        expectSame(roundTrip(p), p);
    }
    for (auto r :
         {Recompute::None, Recompute::Selective, Recompute::SelectiveOp, Recompute::Full}) {
        p.recompute = r;
        expectSame(roundTrip(p), p);
    }
    p.recomputeLayers = 3; // full recompute of the first 3 layers of each virtual stage
    expectSame(roundTrip(p), p);
    for (const NamedPrecisionPolicy& named : namedPrecisionPolicies()) {
        p.precision = named.policy;
        expectSame(roundTrip(p), p);
        EXPECT_EQ(json(p)["precision"], named.key);
    }
    EXPECT_GE(namedPrecisionPolicies().size(), 11u); // fp32, four bf16, two autocast, four fp8
    p.precision = {Precision::Fp16, Precision::Fp32, true}; // no short name: written as an object
    expectSame(roundTrip(p), p);
    p.precision = {Precision::Fp8, Precision::Bf16, false, true}; // FP8 weights, no master copy
    EXPECT_EQ(json(p)["precision"]["fp8_params"], true);
    EXPECT_TRUE(roundTrip(p).precision == p.precision);
    // FP8 weights without FP8 compute mean nothing: written without them, read back as the plain
    // policy.
    p.precision = {Precision::Bf16, Precision::Bf16, true, true};
    EXPECT_EQ(json(p)["precision"], "bf16-bf16grads");
    EXPECT_TRUE(roundTrip(p).precision == PrecisionPolicy::bf16Mixed(false));
    // Autocast over fp32 weights spelled out field by field is the named policy, and is written
    // back by its name.
    const ParallelConfig amp =
        json::parse(R"({"precision": {"compute": "bf16", "grads": "bf16", "fp32_master": false,
                                      "fp32_weights": true}})")
            .get<ParallelConfig>();
    EXPECT_TRUE(amp.precision == precisionPolicyFromString("amp-bf16grads"));
    EXPECT_EQ(json(amp)["precision"], "amp-bf16grads");
    for (auto b : {BackwardPrefetch::Post, BackwardPrefetch::None}) {
        p.backwardPrefetch = b;
        expectSame(roundTrip(p), p);
    }
    EXPECT_EQ(json(p)["backward_prefetch"], "none");
    EXPECT_EQ(json::object().get<ParallelConfig>().backwardPrefetch, BackwardPrefetch::Pre);
    p.precision = PrecisionPolicy::fp8Weights();
    p.optimizer = Optimizer::SgdMomentum;
    expectSame(roundTrip(p), p);
    for (auto k : {AttentionKernel::Flash1, AttentionKernel::Flash2, AttentionKernel::Flash3,
                   AttentionKernel::Cudnn}) {
        p.attentionKernel = k;
        expectSame(roundTrip(p), p);
    }
    EXPECT_EQ(json(p)["attention_kernel"], "cudnn");
}

TEST(ParallelConfigJson, ReadsStringsAndRejectsBadValues) {
    const ParallelConfig p = json::parse(R"({"tp": 8, "schedule": "Zero-Bubble",
        "recompute": "selective", "precision": "fp8", "optimizer": "sgd"})")
                                 .get<ParallelConfig>();
    EXPECT_EQ(p.tp, 8);
    EXPECT_EQ(p.dp, 1);
    EXPECT_EQ(p.schedule, PipelineSchedule::ZeroBubble);
    EXPECT_EQ(p.recompute, Recompute::Selective);
    EXPECT_EQ(p.precision.compute, Precision::Fp8);
    EXPECT_EQ(p.optimizer, Optimizer::SgdMomentum);

    const std::string message =
        inputErrorOf([] { json::parse(R"({"schedule": "pipedream"})").get<ParallelConfig>(); });
    EXPECT_NE(message.find("interleaved"), std::string::npos) << message; // lists spellings
    for (const char* bad :
         {R"({"dp": 0})", R"({"zero": 4})", R"({"tp": "8"})", R"({"precision": "int4"})",
          R"({"micro_batch": -1})", R"({"dp": 1000000, "tp": 1000})",
          R"({"offload_optimizer": "yes"})", R"({"shard_group": -8})", R"({"shard_group": 2.5})",
          R"({"tp_comm_overlap": 1})", R"({"loss_in_pipeline_split": "yes"})",
          R"({"overlap_grad_reduce": "no"})", R"({"recompute_layers": -1})",
          R"({"recompute_layers": 1.5})",
          R"({"precision": {"compute": "bf16", "fp8_params": true}})",
          R"({"backward_prefetch": "later"})", R"({"backward_prefetch": true})"})
        EXPECT_THROW(json::parse(bad).get<ParallelConfig>(), InputError) << bad;
    // fp32 weights under another compute precision, or beside a separate fp32 master copy, are
    // refused with the field and the fix.
    const std::string fp8Weights = inputErrorOf([] {
        json::parse(R"({"precision": {"compute": "fp8", "fp32_master": false,
                                      "fp32_weights": true}})")
            .get<ParallelConfig>();
    });
    EXPECT_NE(fp8Weights.find("fp32_weights"), std::string::npos) << fp8Weights;
    EXPECT_NE(fp8Weights.find("compute to bf16"), std::string::npos) << fp8Weights;
    // fp32 weights are the optimizer's master themselves: a master flag beside them means
    // nothing, and the policy reads as the named one.
    const ParallelConfig ownMaster =
        json::parse(R"({"precision": {"compute": "bf16", "fp32_weights": true}})")
            .get<ParallelConfig>();
    EXPECT_TRUE(ownMaster.precision == precisionPolicyFromString("amp"));
    EXPECT_EQ(ownMaster.precision.masterBytes(), 0);
    EXPECT_EQ(json(ownMaster)["precision"], "amp");
    const std::string prefetch = inputErrorOf(
        [] { json::parse(R"({"backward_prefetch": "later"})").get<ParallelConfig>(); });
    EXPECT_NE(prefetch.find("post"), std::string::npos) << prefetch; // lists the spellings
}

TEST(TrainConfigJson, RoundTripsAndRejectsBadValues) {
    TrainConfig t;
    t.trainTokens = 15e12;
    t.steps = 1'000'000;
    t.learningRate = 1.5e-4;
    t.weightDecay = 0.05;
    t.seed = std::numeric_limits<std::uint64_t>::max();
    t.dataPath = "/data/tokens.bin";
    expectSame(roundTrip(t), t);
    EXPECT_THROW(json::parse(R"({"seed": -1})").get<TrainConfig>(), InputError);
    EXPECT_THROW(json::parse(R"({"steps": 1.5})").get<TrainConfig>(), InputError);
    EXPECT_THROW(json::parse(R"({"learning_rate": "high"})").get<TrainConfig>(), InputError);
    EXPECT_EQ(json::object().get<TrainConfig>().seed, TrainConfig{}.seed);
}

// ---- text and files ----

TEST(ParseJson, SyntaxErrorNamesTheInputAndByte) {
    const std::string message = inputErrorOf([] { parseJson("{\"a\": x}", "my.json"); });
    EXPECT_EQ(message.rfind("my.json: not valid JSON at byte 7", 0), 0u) << message;
    EXPECT_EQ(message.find("[json.exception"), std::string::npos) << message;
    EXPECT_THROW(parseJson("", "empty"), InputError);
    EXPECT_EQ(parseJson("[1, 2]", "ok").size(), 2u);
}

// A number past a double's range is not a parse error to nlohmann (out_of_range.406): it
// escaped as a raw library exception (found by fuzz_checkpoint_manifest).
TEST(ParseJson, ANumberBeyondADoublesRangeIsAnInputError) {
    const std::string message =
        inputErrorOf([] { parseJson(R"({"step": 1e795621810})", "m.json"); });
    EXPECT_EQ(message.rfind("m.json: not valid JSON", 0), 0u) << message;
    EXPECT_NE(message.find("1e795621810"), std::string::npos) << message;
    EXPECT_EQ(message.find("[json.exception"), std::string::npos) << message;
}

// A path that never ends (a device, a FIFO) or a huge file is refused after kMaxJsonFileBytes.
TEST(ReadJsonFile, StopsReadingPastTheLargestDocument) {
    const std::string message = inputErrorOf([] { readJsonFile("/dev/zero"); });
    EXPECT_NE(message.find("/dev/zero is larger than 64 MiB"), std::string::npos) << message;
}

TEST(ReadJsonFile, ReportsUnreadableFiles) {
    EXPECT_NE(inputErrorOf([] {
                  readJsonFile("/nonexistent/x.json");
              }).find("cannot open /nonexistent/x.json: No such file"),
              std::string::npos);
    EXPECT_NE(inputErrorOf([] { readJsonFile(SHARDSCOPE_TEST_DATA); }).find("directory"),
              std::string::npos);

    const auto path = std::filesystem::temp_directory_path() / "shardscope_test_json_io.json";
    std::ofstream(path) << R"({"layers": 2,)";
    EXPECT_NE(inputErrorOf([&] { readJsonFile(path.string()); }).find(path.string()),
              std::string::npos);
    std::ofstream(path) << R"({"tp": 2})";
    EXPECT_EQ(readJsonFile(path.string()).get<ParallelConfig>().tp, 2);
    std::filesystem::remove(path);
}

// ---- robustness ----

// Feeds a document to every reader: each may accept it or throw InputError, nothing else.
void readEverything(const json& j) {
    auto expectOnlyInputError = [&](const char* reader, auto&& read) {
        try {
            read();
        } catch (const InputError&) {
        } catch (const std::exception& e) {
            ADD_FAILURE() << reader << " threw " << e.what() << " for "
                          << j.dump(-1, ' ', false, json::error_handler_t::replace);
        }
    };
    expectOnlyInputError("model", [&] {
        const ModelSpec m = j.get<ModelSpec>();
        (void)validate(m, ParallelConfig{});
    });
    expectOnlyInputError("gpu", [&] { (void)j.get<GpuSpec>(); });
    expectOnlyInputError("cluster", [&] { (void)j.get<ClusterSpec>(); });
    expectOnlyInputError("parallel", [&] { (void)j.get<ParallelConfig>(); });
    expectOnlyInputError("train", [&] { (void)j.get<TrainConfig>(); });
    expectOnlyInputError("hf", [&] { (void)modelFromHuggingFace(j); });
}

void readText(const std::string& text) {
    try {
        readEverything(parseJson(text, "fuzz"));
    } catch (const InputError&) {
    } catch (const std::exception& e) {
        ADD_FAILURE() << "parseJson threw " << e.what();
    }
}

TEST(JsonFuzz, MutatedPresetsOnlyEverThrowInputError) {
    std::vector<json> documents;
    for (const char* kind : {"models", "gpus"})
        for (const auto& file : test::jsonFiles(test::presetDir(kind)))
            documents.push_back(json::parse(test::readText(file)));
    documents.push_back(json(makeCluster(gpuPresets().front(), 8, 2)));
    documents.push_back(json(ParallelConfig{}));
    documents.push_back(json(TrainConfig{}));
    ASSERT_GT(documents.size(), 3u);

    test::JsonMutator mutator(20240601);
    for (const json& original : documents) {
        for (int i = 0; i < 2000; ++i) {
            if (i % 2 == 0)
                readEverything(mutator.edit(original));
            else
                readText(mutator.damage(original));
            if (::testing::Test::HasFailure())
                return; // one report is enough
        }
    }
}

TEST(JsonFuzz, RandomBytesOnlyEverThrowInputError) {
    test::JsonMutator mutator(7);
    for (int i = 0; i < 2000 && !::testing::Test::HasFailure(); ++i) {
        readText(mutator.randomBytes(200));
        readText(mutator.randomTokens(60));
    }
}

} // namespace
} // namespace shardscope
