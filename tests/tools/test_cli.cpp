// shardscope-cli, run in-process through runCli with string streams: every command, its JSON
// output, and every kind of bad input, which must end with exit code 2 and a message that names
// the problem (never a crash, never output on stdout).

#include "cli_test_support.h"
#include "core/presets.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using shardscope::testing::CliResult;

CliResult run(std::initializer_list<std::string> args) {
    return shardscope::testing::runCliWith(args);
}

std::string dataPath(const std::string& relative) {
    return std::string(SHARDSCOPE_TEST_DATA) + "/" + relative;
}

// A file under the test's temporary directory, removed when the object goes away.
class TempFile {
public:
    TempFile(const std::string& name, const std::string& content)
        : path_(fs::path(::testing::TempDir()) / ("shardscope_test_cli_" + name)) {
        std::ofstream f(path_, std::ios::binary);
        f << content;
    }
    ~TempFile() {
        std::error_code ec;
        fs::remove(path_, ec);
    }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    std::string path() const { return path_.string(); }

private:
    fs::path path_;
};

std::string readFile(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

json parseOrFail(const std::string& text) {
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON:\n" << text.substr(0, 2000);
    return j;
}

#define EXPECT_CONTAINS(haystack, needle)                                                          \
    EXPECT_NE(std::string(haystack).find(needle), std::string::npos)                               \
        << "expected to find \"" << (needle) << "\" in:\n"                                         \
        << (haystack)

// ---- help ---------------------------------------------------------------------------------

TEST(CliHelp, TopLevelHelpListsEveryCommand) {
    const CliResult r = run({"--help"});
    EXPECT_EQ(r.code, 0) << r.err;
    for (const char* cmd : {"plan", "search", "explain", "schedule", "collective", "models", "gpus",
                            "devices", "validate"})
        EXPECT_CONTAINS(r.out, cmd);
}

TEST(CliHelp, EveryCommandsHelpExitsZeroAndNamesItsFlags) {
    const std::vector<std::string> model = {"--model", "--params", "--hf-config", "--seq"};
    const std::vector<std::string> cluster = {"--gpu",      "--gpus-per-node", "--nodes",
                                              "--inter-bw", "--mtbf-hours",    "--ckpt-bw",
                                              "--price"};
    const std::vector<std::string> layout = {"--dp",          "--tp",       "--pp", "--vpp",
                                             "--cp",          "--zero",     "--sp", "--schedule",
                                             "--micro-batch", "--recompute"};
    const std::vector<std::string> run = {"--global-batch", "--precision",       "--optimizer",
                                          "--offload",      "--flash-attention", "--tokens"};
    auto concat = [](std::initializer_list<std::vector<std::string>> parts) {
        std::vector<std::string> all;
        for (const auto& p : parts)
            all.insert(all.end(), p.begin(), p.end());
        return all;
    };
    struct Case {
        std::string command;
        std::vector<std::string> flags;
    };
    const std::vector<Case> cases = {
        {"plan", concat({model,
                         cluster,
                         layout,
                         run,
                         {"--json", "--explain", "--memory-headroom", "--moe-host-ms"}})},
        {"search",
         concat({model,
                 cluster,
                 run,
                 {"--top", "--tp-within-node", "--json", "--memory-headroom", "--moe-host-ms"}})},
        {"explain", concat({model,
                            cluster,
                            layout,
                            run,
                            {"--json", "figure", "--memory-headroom", "--moe-host-ms"}})},
        {"models", {"--json"}},
        {"gpus", {"--json"}},
        {"devices", {"--json"}},
        {"validate", {"--markdown", "--json", "--run", "--explain", "--moe-host-ms", "runs"}},
        {"schedule",
         {"--schedule", "--pp", "--microbatches", "--vpp", "--forward", "--backward-input",
          "--backward-weight", "--p2p", "--ops", "--json"}},
        {"collective",
         {"--algorithm", "--ranks", "--gpus-per-node", "--size", "--intra-bw", "--inter-bw",
          "--intra-latency", "--inter-latency", "--steps", "--json"}},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.command);
        const CliResult r = ::run({c.command, "--help"});
        EXPECT_EQ(r.code, 0) << r.err;
        EXPECT_TRUE(r.err.empty()) << r.err;
        for (const std::string& flag : c.flags)
            EXPECT_CONTAINS(r.out, flag);
    }
    // search fixes none of the layout degrees itself: they are what it searches.
    const CliResult search = ::run({"search", "--help"});
    EXPECT_EQ(search.out.find("--tp "), std::string::npos);
    EXPECT_EQ(search.out.find("--zero"), std::string::npos);
}

TEST(CliHelp, HelpShowsTheDefaults) {
    const CliResult r = run({"plan", "--help"});
    ASSERT_EQ(r.code, 0);
    for (const char* d : {"llama3-70b", "h100-sxm", "--tp INT=8", "--pp INT=4", "--nodes INT=8",
                          "--global-batch INT=512", "--zero INT=1", "=selective", "=1f1b", "=bf16"})
        EXPECT_CONTAINS(r.out, d);
}

// ---- plan ---------------------------------------------------------------------------------

TEST(CliPlan, DefaultsPrintMemoryFitStepTimeAndMfu) {
    const CliResult r = run({"plan"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(r.err.empty()) << r.err;
    EXPECT_CONTAINS(r.out, "Llama 3 70B on 8 x 8 NVIDIA H100");
    EXPECT_CONTAINS(r.out, "Memory per GPU");
    for (const char* row : {"Weights", "Gradients", "Optimizer state", "Activations",
                            "Temporary buffers", "Runtime overhead", "total"})
        EXPECT_CONTAINS(r.out, row);
    EXPECT_TRUE(r.out.find("Fits") != std::string::npos ||
                r.out.find("Does NOT fit") != std::string::npos)
        << r.out;
    EXPECT_CONTAINS(r.out, "Communication per step");
    EXPECT_CONTAINS(r.out, "step time");
    EXPECT_CONTAINS(r.out, "MFU");
    EXPECT_CONTAINS(r.out, "tokens/s");
    EXPECT_CONTAINS(r.out, "--explain");
}

TEST(CliPlan, JsonFollowsThePlanSchema) {
    const CliResult r = run({"plan", "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const json j = parseOrFail(r.out);
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j.at("schema"), "shardscope.plan/1");
    for (const char* key : {"model", "cluster", "parallel", "train", "valid", "violations",
                            "params", "memory", "comm", "summary", "figures"})
        EXPECT_TRUE(j.contains(key)) << key;
    EXPECT_EQ(j.at("valid"), true);
    EXPECT_TRUE(j.at("violations").empty());
    EXPECT_EQ(j.at("model").at("id"), "llama3-70b");
    EXPECT_EQ(j.at("cluster").at("gpu").at("id"), "h100-sxm");
    EXPECT_EQ(j.at("parallel").at("tp").get<int>() * j.at("parallel").at("pp").get<int>() *
                  j.at("parallel").at("dp").get<int>() * j.at("parallel").at("cp").get<int>(),
              64);

    const json& m = j.at("memory");
    double sum = 0;
    for (const char* key :
         {"parameters", "gradients", "optimizer", "activations", "temporary", "overhead"}) {
        ASSERT_TRUE(m.contains(key)) << key;
        EXPECT_GE(m.at(key).get<double>(), 0) << key;
        sum += m.at(key).get<double>();
    }
    for (const char* key : {"total", "capacity", "fits"})
        ASSERT_TRUE(m.contains(key)) << key;
    EXPECT_NEAR(m.at("total").get<double>(), sum, 1e-6 * sum);
    EXPECT_DOUBLE_EQ(m.at("capacity").get<double>(), 80e9); // bytes, decimal
    EXPECT_EQ(m.at("fits").get<bool>(),
              m.at("total").get<double>() <= m.at("capacity").get<double>());

    for (const char* axis : {"dp", "tp", "pp", "cp"}) {
        ASSERT_TRUE(j.at("comm").contains(axis)) << axis;
        for (const char* key :
             {"group_size", "crosses_nodes", "bytes", "seconds", "exposed_seconds"})
            EXPECT_TRUE(j.at("comm").at(axis).contains(key)) << axis << "." << key;
    }
    EXPECT_EQ(j.at("comm").at("tp").at("group_size"), 8);

    const json& s = j.at("summary");
    for (const char* key : {"step_time_s", "compute_time_s", "bubble_fraction", "tokens_per_second",
                            "tflops_per_gpu", "mfu", "time_to_train_s", "wall_time_to_train_s",
                            "gpu_hours", "cost", "training_fraction"})
        EXPECT_TRUE(s.contains(key)) << key;
    EXPECT_GT(s.at("step_time_s").get<double>(), 0);
    EXPECT_GT(s.at("mfu").get<double>(), 0);
    EXPECT_LT(s.at("mfu").get<double>(), 1);                // a fraction, not a percentage
    EXPECT_LT(s.at("tflops_per_gpu").get<double>(), 989.5); // TFLOP/s, below the bf16 peak

    const json& figures = j.at("figures");
    ASSERT_TRUE(figures.is_array());
    EXPECT_GE(figures.size(), 20u);
    std::vector<std::string> keys;
    for (const json& f : figures) {
        for (const char* key :
             {"key", "formula", "substituted", "source", "label", "unit", "display"}) {
            ASSERT_TRUE(f.contains(key)) << key;
            EXPECT_TRUE(f.at(key).is_string()) << key;
        }
        for (const char* key : {"key", "formula", "substituted", "source"})
            EXPECT_FALSE(f.at(key).get<std::string>().empty()) << f.at("key") << " has no " << key;
        EXPECT_TRUE(f.at("value").is_number()) << f.at("key");
        keys.push_back(f.at("key"));
    }
    for (const char* key : {"memory.activations", "memory.total", "time.step", "throughput.mfu"})
        EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end()) << key;
    std::sort(keys.begin(), keys.end());
    EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end()) << "duplicate figure key";
}

TEST(CliPlan, ExplainPrintsEveryFiguresFormula) {
    const CliResult js = run({"plan", "--json"});
    ASSERT_EQ(js.code, 0) << js.err;
    const json figures = parseOrFail(js.out).at("figures");
    const CliResult r = run({"plan", "--explain"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_CONTAINS(r.out, "How each figure is computed");
    for (const json& f : figures) {
        EXPECT_CONTAINS(r.out, "(" + f.at("key").get<std::string>() + ")");
        EXPECT_CONTAINS(r.out, "formula:     " + f.at("formula").get<std::string>());
        EXPECT_CONTAINS(r.out, "substituted: " + f.at("substituted").get<std::string>());
    }
}

TEST(CliPlan, AssumedMfuSetsTheTimeAndSaysSo) {
    // 6 N D / (GPUs x peak x MFU): 6 x 7e9 x 1e12 / (64 x 989.4e12 x 0.5) = 1.33e6 s (H100 SXM:
    // the whitepaper's dense bf16 peak).
    const CliResult r = run({"plan", "--params", "7e9", "--tp", "1", "--pp", "1", "--tokens",
                             "1e12", "--mfu", "0.5", "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const json s = parseOrFail(r.out).at("summary");
    EXPECT_NEAR(s.at("time_to_train_s").get<double>(), 6 * 7e9 * 1e12 / (64 * 989.4e12 * 0.5), 1);
    EXPECT_EQ(s.at("mfu_assumed"), true);
    EXPECT_DOUBLE_EQ(s.at("mfu").get<double>(), 0.5);
    for (const char* key : {"modelled_mfu", "modelled_step_time_s", "hfu",
                            "hardware_tflops_per_gpu", "model_flops_per_token"})
        EXPECT_GT(s.at(key).get<double>(), 0) << key;

    const CliResult text = run({"plan", "--mfu", "0.4"});
    ASSERT_EQ(text.code, 0) << text.err;
    EXPECT_CONTAINS(text.out, "at the assumed MFU (modelled:");
    EXPECT_CONTAINS(text.out, "40.0 % (assumed, --mfu)");
    const CliResult why = run({"explain", "time.step", "--mfu", "0.4"});
    ASSERT_EQ(why.code, 0) << why.err;
    EXPECT_CONTAINS(why.out, "assumed_MFU");

    for (const char* bad : {"0", "1.5", "-0.2", "nan"}) {
        const CliResult refused = run({"plan", "--mfu", bad});
        EXPECT_EQ(refused.code, 2) << bad;
        EXPECT_CONTAINS(refused.err, "--mfu must be a fraction");
    }
}

// --memory-headroom keeps part of each GPU free: the plan needs the same memory and fits only
// within the rest, the text and JSON say so, and the search ranks only what leaves it free.
TEST(CliPlan, MemoryHeadroomKeepsPartOfEachGpuFree) {
    const json whole = parseOrFail(run({"plan", "--json"}).out).at("memory");
    const double total = whole.at("total").get<double>(), gpu = whole.at("gpu_memory");
    ASSERT_TRUE(whole.at("fits").get<bool>());
    ASSERT_LT(total / gpu, 0.85);
    const double over = 1 - total / gpu + 0.05; // keeps more free than the layout leaves
    const CliResult r = run({"plan", "--memory-headroom", std::to_string(over), "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const json tight = parseOrFail(r.out).at("memory");
    EXPECT_DOUBLE_EQ(tight.at("total").get<double>(), total);
    EXPECT_FALSE(tight.at("fits").get<bool>());
    EXPECT_NEAR(tight.at("memory_headroom").get<double>(), over, 1e-6);
    EXPECT_NEAR(tight.at("capacity").get<double>(), gpu * (1 - over), 1e-3 * gpu);

    const CliResult text = run({"plan", "--memory-headroom", "0.1"});
    ASSERT_EQ(text.code, 0) << text.err;
    EXPECT_CONTAINS(text.out, "less a 10.0 % headroom");

    const std::vector<std::string> search = {"search", "--model",        "llama3-8b", "--nodes",
                                             "2",      "--global-batch", "256",       "--json"};
    std::vector<std::string> kept = search;
    kept.insert(kept.end(), {"--memory-headroom", "0.3"});
    const json roomy = parseOrFail(shardscope::testing::runCliWith(kept).out),
               plain = parseOrFail(shardscope::testing::runCliWith(search).out);
    EXPECT_LT(roomy.at("fitting").get<long long>(), plain.at("fitting").get<long long>());
    for (const json& c : roomy.at("top"))
        EXPECT_LE(c.at("memory_bytes").get<double>(), 0.7 * 80e9);

    for (const char* bad : {"-0.1", "0.95", "nan"}) {
        const CliResult refused = run({"plan", "--memory-headroom", bad});
        EXPECT_EQ(refused.code, 2) << bad;
        EXPECT_CONTAINS(refused.err, "--memory-headroom must be a fraction");
    }
}

// --moe-host-ms sets the host time of a dropless MoE layer: Mixtral 8x7B at tp 8 on 8 B200s
// waits for its host at the default, a longer host time waits longer (and the step time with it),
// 0 takes the roof away, and a token-dropping layout has none whatever it is set to.
TEST(CliPlan, MoeHostTimeSetsTheHostRoof) {
    const std::vector<std::string> mixtral = {"plan",  "--model", "mixtral-8x7b",
                                              "--gpu", "b200",    "--gpus-per-node",
                                              "8",     "--nodes", "1",
                                              "--tp",  "8",       "--pp",
                                              "1",     "--dp",    "1",
                                              "--seq", "4096",    "--global-batch",
                                              "64",    "--json"};
    const auto plan = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = mixtral;
        args.insert(args.end(), extra.begin(), extra.end());
        const CliResult r = shardscope::testing::runCliWith(args);
        EXPECT_EQ(r.code, 0) << r.err;
        return parseOrFail(r.out).at("summary");
    };
    const json byDefault = plan({}), longer = plan({"--moe-host-ms", "30"}),
               none = plan({"--moe-host-ms", "0"});
    EXPECT_GT(byDefault.at("host_wait_s").get<double>(), 0);
    EXPECT_GT(longer.at("host_wait_s").get<double>(), byDefault.at("host_wait_s").get<double>());
    EXPECT_GT(longer.at("step_time_s").get<double>(), byDefault.at("step_time_s").get<double>());
    EXPECT_EQ(none.at("host_wait_s").get<double>(), 0);
    EXPECT_LT(none.at("step_time_s").get<double>(), byDefault.at("step_time_s").get<double>());
    // 64 microbatches of 32 MoE layers at 30 ms each: the step is at least that.
    EXPECT_GE(longer.at("step_time_s").get<double>(), 64 * 32 * 0.030);
    // No roof for token dropping.
    std::vector<std::string> dropping = mixtral;
    dropping.insert(dropping.end(), {"--capacity-factor", "1.25", "--moe-host-ms", "30"});
    const CliResult d = shardscope::testing::runCliWith(dropping);
    ASSERT_EQ(d.code, 0) << d.err;
    EXPECT_EQ(parseOrFail(d.out).at("summary").at("host_wait_s").get<double>(), 0);

    std::vector<std::string> text(mixtral.begin(), mixtral.end() - 1);
    const CliResult t = shardscope::testing::runCliWith(text);
    ASSERT_EQ(t.code, 0) << t.err;
    EXPECT_CONTAINS(t.out, "host-bound wait");
    for (const char* bad : {"-1", "1001", "nan"}) {
        const CliResult refused = run({"plan", "--moe-host-ms", bad});
        EXPECT_EQ(refused.code, 2) << bad;
        EXPECT_CONTAINS(refused.err, "--moe-host-ms must be from 0 to 1000 ms");
    }
}

// The FLOP count MFU uses, by convention: PaLM's counts the whole attention square, so for
// Llama 3 70B at 8K tokens its MFU is the planner's times (6N + 12 L q s) / (6N + 6 L q s); the
// step is the same; the JSON says which convention; a wrong name lists the right ones.
TEST(CliPlan, FlopsConventionMovesMfuOnly) {
    const CliResult causal = run({"plan", "--json"});
    const CliResult palm = run({"plan", "--flops-convention", "palm", "--json"});
    ASSERT_EQ(palm.code, 0) << palm.err;
    const json a = parseOrFail(causal.out).at("summary"), b = parseOrFail(palm.out).at("summary");
    EXPECT_EQ(a.at("flops_convention"), "causal");
    EXPECT_EQ(b.at("flops_convention"), "palm");
    EXPECT_EQ(a.at("step_time_s"), b.at("step_time_s"));
    const shardscope::ModelSpec m = shardscope::findModelPreset("llama3-70b");
    const double attention = 6.0 * m.layers * double(m.qDim()) * m.seqLen;
    const double ratio = (6 * shardscope::matmulParamsPerToken(m) + 2 * attention) /
                         (6 * shardscope::matmulParamsPerToken(m) + attention);
    EXPECT_NEAR(b.at("mfu").get<double>(), a.at("mfu").get<double>() * ratio,
                1e-9 * b.at("mfu").get<double>());
    // An assumed MFU is read in the chosen count: the same 40% of PaLM's FLOPs takes longer.
    const json assumed = parseOrFail(run({"plan", "--mfu", "0.4", "--json"}).out).at("summary");
    const json assumedPalm =
        parseOrFail(run({"plan", "--mfu", "0.4", "--flops-convention", "palm", "--json"}).out)
            .at("summary");
    EXPECT_NEAR(assumedPalm.at("step_time_s").get<double>(),
                assumed.at("step_time_s").get<double>() * ratio,
                1e-9 * assumedPalm.at("step_time_s").get<double>());
    const CliResult why = run({"explain", "flops.per_token", "--flops-convention", "megatron"});
    ASSERT_EQ(why.code, 0) << why.err;
    EXPECT_CONTAINS(why.out, "96 x l x h^2");
    EXPECT_CONTAINS(why.out, "Narayanan et al. 2021");
    const CliResult refused = run({"plan", "--flops-convention", "kaplan"});
    EXPECT_EQ(refused.code, 2);
    EXPECT_CONTAINS(refused.err, "causal, palm, megatron, 6n");
}

// The Ultra-Scale Playbook's 12 bytes a parameter (bf16 weights 2 + bf16 gradients 2 + fp32 Adam
// moments 8, no master copy) and mixed precision's 16 (+ 4 for the fp32 master), unsharded.
TEST(CliPlan, EveryPrecisionPolicyByName) {
    for (const auto& [policy, bytes] : std::vector<std::pair<std::string, double>>{
             {"bf16-nomaster", 12}, {"bf16", 18}, {"bf16-bf16grads", 16}, {"fp32", 16}}) {
        const CliResult r = run({"plan", "--params", "7e9", "--tp", "1", "--pp", "1", "--zero", "0",
                                 "--precision", policy, "--json"});
        ASSERT_EQ(r.code, 0) << policy << ": " << r.err;
        const json m = parseOrFail(r.out).at("memory");
        const double state = m.at("parameters").get<double>() + m.at("gradients").get<double>() +
                             m.at("optimizer").get<double>();
        EXPECT_NEAR(state, bytes * 7e9, 1) << policy;
    }
    const CliResult bad = run({"plan", "--precision", "int4"});
    EXPECT_EQ(bad.code, 2);
    EXPECT_CONTAINS(bad.err, "bf16-nomaster");
}

TEST(CliPlan, QuickFormWithABareParameterCount) {
    const CliResult r = run({"plan", "--params", "7e9", "--tp", "1", "--pp", "1"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_CONTAINS(r.out, "7.00 B parameters");
    EXPECT_CONTAINS(r.out, "dp64 tp1 pp1");
    EXPECT_CONTAINS(r.out, "Weights");

    const CliResult j = run({"plan", "--params", "7e9", "--tp", "1", "--pp", "1", "--json"});
    ASSERT_EQ(j.code, 0) << j.err;
    const json plan = parseOrFail(j.out);
    EXPECT_DOUBLE_EQ(plan.at("model").at("params").get<double>(), 7e9);
    // bf16 weights: 2 bytes per parameter.
    EXPECT_DOUBLE_EQ(plan.at("memory").at("parameters").get<double>(), 14e9);
}

TEST(CliPlan, HuggingFaceConfigFixture) {
    const std::string path = dataPath("hf/llama-3-8b.json");
    const CliResult r =
        run({"plan", "--hf-config", path, "--nodes", "1", "--tp", "1", "--pp", "1"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("llama-3-8b on 1 x 8", 0), 0u) << r.out; // the file, no _name_or_path
    EXPECT_CONTAINS(r.out, "Memory per GPU");

    const CliResult j = run({"plan", "--hf-config", path, "--tp", "1", "--pp", "1", "--json"});
    ASSERT_EQ(j.code, 0) << j.err;
    const json plan = parseOrFail(j.out);
    EXPECT_EQ(plan.at("model").at("layers"), 32);
    EXPECT_EQ(plan.at("model").at("kv_heads"), 8);
    EXPECT_NEAR(plan.at("params").at("total").get<double>(), 8.03e9, 0.01e9);
}

TEST(CliPlan, EveryHuggingFaceFixturePlans) {
    for (const auto& entry : fs::directory_iterator(dataPath("hf"))) {
        if (entry.path().extension() != ".json" || entry.path().filename() == "expected.json")
            continue;
        SCOPED_TRACE(entry.path().string());
        const CliResult r =
            run({"plan", "--hf-config", entry.path().string(), "--tp", "1", "--pp", "1"});
        EXPECT_EQ(r.code, 0) << r.err;
        EXPECT_CONTAINS(r.out, "Memory per GPU");
    }
}

TEST(CliPlan, SeqOverridesTheModelsSequenceLength) {
    const CliResult r = run({"plan", "--seq", "4096", "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(parseOrFail(r.out).at("model").at("seq_len"), 4096);
}

TEST(CliPlan, LayoutFlagsReachTheLayout) {
    const CliResult r =
        run({"plan",  "--tp",           "4",   "--pp",        "2",    "--vpp",
             "2",     "--cp",           "2",   "--zero",      "3",    "--sp",
             "false", "--micro-batch",  "2",   "--recompute", "full", "--precision",
             "fp8",   "--optimizer",    "sgd", "--offload",   "true", "--flash-attention",
             "false", "--global-batch", "256", "--tokens",    "0",    "--fused-elementwise",
             "false", "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const json j = parseOrFail(r.out);
    const json& p = j.at("parallel");
    EXPECT_EQ(p.at("tp"), 4);
    EXPECT_EQ(p.at("pp"), 2);
    EXPECT_EQ(p.at("vpp"), 2);
    EXPECT_EQ(p.at("schedule"), "interleaved"); // --vpp > 1 implies it
    EXPECT_EQ(p.at("cp"), 2);
    EXPECT_EQ(p.at("dp"), 4); // 64 / (4 x 2 x 2)
    EXPECT_EQ(p.at("zero"), 3);
    EXPECT_EQ(p.at("sequence_parallel"), false);
    EXPECT_EQ(p.at("micro_batch"), 2);
    EXPECT_EQ(p.at("global_batch"), 256);
    EXPECT_EQ(p.at("recompute"), "full");
    EXPECT_EQ(p.at("precision"), "fp8");
    EXPECT_EQ(p.at("optimizer"), "sgd");
    EXPECT_EQ(p.at("offload_optimizer"), true);
    EXPECT_EQ(p.at("flash_attention"), false);
    EXPECT_EQ(p.at("fused_elementwise"), false);
    EXPECT_DOUBLE_EQ(j.at("train").at("train_tokens").get<double>(), 0);
    EXPECT_DOUBLE_EQ(j.at("summary").at("time_to_train_s").get<double>(), 0);
    EXPECT_GT(j.at("memory").at("cpu_offloaded").get<double>(), 0);
}

// `plan --json` with these flags, which must succeed.
json planJsonWith(const std::vector<std::string>& flags) {
    std::vector<std::string> args = {"plan", "--json"};
    args.insert(args.end(), flags.begin(), flags.end());
    const CliResult r = shardscope::testing::runCliWith(args);
    EXPECT_EQ(r.code, 0) << r.err;
    return parseOrFail(r.out);
}

// Megatron's account-for-embedding/loss flags from the command line: into the JSON layout and
// the layout line. Llama 3 8B on pp 4 deals 8 layers a stage, so the last also computes the
// 128K-vocabulary head (about two layers' FLOPs); counting the embedding and loss as layers
// gives it 7 and the slowest stage 9 plain layers: a shorter step.
TEST(CliPlan, TheEmbeddingAndLossCanTakeALayersPlace) {
    const std::vector<std::string> layout = {"--model", "llama3-8b", "--tp",    "1",
                                             "--pp",    "4",         "--nodes", "2"};
    std::vector<std::string> flags = layout;
    for (const char* f :
         {"--embedding-in-pipeline-split", "true", "--loss-in-pipeline-split", "true"})
        flags.push_back(f);
    const json base = planJsonWith(layout), split = planJsonWith(flags);
    EXPECT_EQ(base.at("parallel").at("embedding_in_pipeline_split"), false);
    EXPECT_EQ(split.at("parallel").at("embedding_in_pipeline_split"), true);
    EXPECT_EQ(split.at("parallel").at("loss_in_pipeline_split"), true);
    EXPECT_LT(split.at("summary").at("step_time_s").get<double>(),
              base.at("summary").at("step_time_s").get<double>());
    std::vector<std::string> text = {"plan"};
    text.insert(text.end(), flags.begin(), flags.end());
    EXPECT_CONTAINS(shardscope::testing::runCliWith(text).out, "pp-embedding pp-loss");
}

// FSDP's backward prefetch and PyTorch autocast over fp32 weights from the command line: into
// the JSON layout, the step time and the explanation; a prefetch that is not one of FSDP's is
// refused (exit 2) with the spellings.
TEST(CliPlan, BackwardPrefetchAndAutocastWeightsAreFlagsThatMoveTheStep) {
    const json pre = planJsonWith({"--zero", "3"}),
               post = planJsonWith({"--zero", "3", "--backward-prefetch", "post"}),
               amp = planJsonWith({"--zero", "3", "--precision", "amp"});
    EXPECT_EQ(pre.at("parallel").at("backward_prefetch"), "pre");
    EXPECT_EQ(post.at("parallel").at("backward_prefetch"), "post");
    EXPECT_EQ(amp.at("parallel").at("precision"), "amp");
    const double step = pre.at("summary").at("step_time_s").get<double>();
    EXPECT_GT(post.at("summary").at("step_time_s").get<double>(), step);
    EXPECT_GT(amp.at("summary").at("step_time_s").get<double>(), step);

    const CliResult explained =
        run({"explain", "comm.dp", "--zero", "3", "--backward-prefetch", "post"});
    ASSERT_EQ(explained.code, 0) << explained.err;
    EXPECT_CONTAINS(explained.out, "BACKWARD_POST");
    const CliResult casts = run({"explain", "time.compute", "--precision", "amp"});
    ASSERT_EQ(casts.code, 0) << casts.err;
    EXPECT_CONTAINS(casts.out, "weight_cast_bytes");
    const CliResult refused = run({"plan", "--zero", "3", "--backward-prefetch", "later"});
    EXPECT_EQ(refused.code, 2);
    EXPECT_CONTAINS(refused.err, "backward prefetch");
    EXPECT_CONTAINS(refused.err, "post");
}

// The framework's overlap settings from the command line: into the JSON layout, the step time
// and the explanation; TP overlap without sequence parallelism is refused (exit 2) with its rule.
TEST(CliPlan, OverlapFlagsMoveTheStepAndAreExplained) {
    const json base = planJsonWith({}), hidden = planJsonWith({"--tp-comm-overlap", "true"}),
               waits = planJsonWith(
                   {"--overlap-grad-reduce", "false", "--overlap-param-gather", "false"});
    EXPECT_EQ(base.at("parallel").at("tp_comm_overlap"), false);
    EXPECT_EQ(hidden.at("parallel").at("tp_comm_overlap"), true);
    EXPECT_EQ(waits.at("parallel").at("overlap_grad_reduce"), false);
    const double step = base.at("summary").at("step_time_s").get<double>();
    EXPECT_LT(hidden.at("summary").at("step_time_s").get<double>(), step);
    EXPECT_GT(waits.at("summary").at("step_time_s").get<double>(), step);

    const CliResult explained = run({"explain", "comm.tp", "--tp-comm-overlap", "true"});
    ASSERT_EQ(explained.code, 0) << explained.err;
    EXPECT_NE(explained.out.find("behind the GEMMs"), std::string::npos) << explained.out;
    EXPECT_NE(explained.out.find("Lee et al. 2025"), std::string::npos) << explained.out;
    const CliResult refused = run({"plan", "--tp-comm-overlap", "true", "--sp", "false"});
    EXPECT_EQ(refused.code, 2);
    EXPECT_NE(refused.err.find("[tp-comm-overlap]"), std::string::npos) << refused.err;
}

// The attention kernel (--attention-kernel): on H100 at 8K tokens FlashAttention-3 runs the
// attention core faster than FlashAttention-2 (Shah et al. 2024, Figs. 5-6), so the step is
// shorter, and FlashAttention-1 (half FA2's speed, Dao 2023) longer; the explanation names the
// kernel; on an A100, which has no measured rates, FA3 falls back to FA2 and leaves the step
// alone, while FA1 still runs at half the rate; an unknown kernel is refused with exit 2.
TEST(CliPlan, TheAttentionKernelSetsTheAttentionCoresSpeed) {
    const std::vector<std::string> layout = {"--model", "llama3-8b", "--seq", "8192"};
    auto step = [&](const std::vector<std::string>& extra) {
        std::vector<std::string> flags = layout;
        flags.insert(flags.end(), extra.begin(), extra.end());
        const json j = planJsonWith(flags);
        return std::make_pair(j.at("summary").at("step_time_s").get<double>(),
                              j.at("parallel").at("attention_kernel").get<std::string>());
    };
    const auto fa2 = step({"--attention-kernel", "flash2"});
    const auto fa3 = step({"--attention-kernel", "flash3"});
    EXPECT_EQ(fa2.second, "flash2");
    EXPECT_EQ(fa3.second, "flash3");
    EXPECT_LT(fa3.first, fa2.first);
    EXPECT_EQ(step({}).second, "auto");
    EXPECT_DOUBLE_EQ(step({"--gpu", "a100-80gb", "--attention-kernel", "flash2"}).first,
                     step({"--gpu", "a100-80gb", "--attention-kernel", "flash3"}).first);
    const auto fa1 = step({"--attention-kernel", "flash1"});
    EXPECT_EQ(fa1.second, "flash1");
    EXPECT_GT(fa1.first, fa2.first);
    EXPECT_GT(step({"--gpu", "a100-80gb", "--attention-kernel", "flash1"}).first,
              step({"--gpu", "a100-80gb", "--attention-kernel", "flash2"}).first);

    std::vector<std::string> explainArgs = {"explain", "time.compute", "--attention-kernel",
                                            "flash3"};
    explainArgs.insert(explainArgs.end(), layout.begin(), layout.end());
    const CliResult explained = shardscope::testing::runCliWith(explainArgs);
    ASSERT_EQ(explained.code, 0) << explained.err;
    EXPECT_NE(explained.out.find("FlashAttention-3"), std::string::npos) << explained.out;
    EXPECT_EQ(run({"plan", "--attention-kernel", "flash4"}).code, 2);
}

// ZB-2p from the command line: by the makespan its bubble is ZB-H1's (Qi et al.: (p-1)/3 of a
// microbatch against 1F1B's p-1); with --post-validation, m >= 2p, it has none, and JSON and the
// explanation say what was assumed.
TEST(CliPlan, ZeroBubble2pLosesItsBubbleUnderPostValidation) {
    const std::vector<std::string> layout = {"--pp", "4", "--schedule", "zb-2p"};
    std::vector<std::string> validated = layout;
    validated.push_back("--post-validation");
    const json plain = planJsonWith(layout), post = planJsonWith(validated);
    EXPECT_EQ(plain.at("parallel").at("schedule"), "zb-2p");
    EXPECT_EQ(plain.at("summary").at("optimizer_post_validation"), false);
    EXPECT_EQ(post.at("summary").at("optimizer_post_validation"), true);
    EXPECT_GT(plain.at("summary").at("bubble_fraction").get<double>(), 0);
    EXPECT_DOUBLE_EQ(post.at("summary").at("bubble_fraction").get<double>(), 0);
    EXPECT_LT(post.at("summary").at("step_time_s").get<double>(),
              plain.at("summary").at("step_time_s").get<double>());
    std::vector<std::string> explainArgs = {"explain", "pipeline.bubble"};
    explainArgs.insert(explainArgs.end(), validated.begin(), validated.end());
    const CliResult explained = shardscope::testing::runCliWith(explainArgs);
    ASSERT_EQ(explained.code, 0) << explained.err;
    EXPECT_NE(explained.out.find("post-validation assumed"), std::string::npos) << explained.out;
}

// The network across nodes comes with the GPU (one 200 Gb/s HDR NIC per A100, 400 Gb/s NDR
// per H100) unless --inter-bw sets it.
TEST(CliPlan, TheNetworkFollowsTheGpuUnlessGiven) {
    auto network = [](const std::vector<std::string>& flags) {
        return planJsonWith(flags).at("cluster").at("inter_bandwidth_gbps").get<double>();
    };
    EXPECT_DOUBLE_EQ(network({}), 50);
    EXPECT_DOUBLE_EQ(network({"--gpu", "a100-80gb"}), 25);
    EXPECT_DOUBLE_EQ(network({"--gpu", "a100-80gb", "--inter-bw", "40"}), 40);
    EXPECT_EQ(run({"plan", "--inter-bw", "0"}).code, 2);
}

// Hybrid sharding: ZeRO-3 over groups of 8 of the 16 data-parallel ranks holds twice the
// weights of full sharding, and says so in the layout and the explanation.
TEST(CliPlan, ShardGroupShardsOverGroupsOfTheDataParallelRanks) {
    const std::vector<std::string> common = {"plan", "--tp",   "1", "--pp",
                                             "4",    "--zero", "3", "--json"};
    auto with = [&](const std::string& group) {
        std::vector<std::string> args = common;
        args.insert(args.end(), {"--shard-group", group});
        const CliResult r = shardscope::testing::runCliWith(args);
        EXPECT_EQ(r.code, 0) << r.err;
        return parseOrFail(r.out);
    };
    const json hybrid = with("8"), full = with("0");
    EXPECT_EQ(hybrid.at("parallel").at("shard_group"), 8);
    EXPECT_EQ(hybrid.at("parallel").at("dp"), 16);
    EXPECT_NEAR(hybrid.at("memory").at("parameters").get<double>(),
                2 * full.at("memory").at("parameters").get<double>(),
                1e-9 * full.at("memory").at("parameters").get<double>());
    const CliResult explained =
        run({"explain", "comm.dp", "--tp", "1", "--pp", "4", "--zero", "3", "--shard-group", "8"});
    ASSERT_EQ(explained.code, 0) << explained.err;
    EXPECT_NE(explained.out.find("2 groups of 8 ranks"), std::string::npos) << explained.out;
    EXPECT_NE(explained.out.find("HYBRID_SHARD"), std::string::npos) << explained.out;
}

// Mixtral 8x7B from its config.json on 2 nodes: --ep splits its 8 experts, the plan's JSON has
// the EP all-to-alls, and explain gives their formula and source.
TEST(CliPlan, ExpertParallelismSplitsTheExpertsAndAddsItsAllToAlls) {
    const std::string path = dataPath("hf/mixtral-8x7b-v0.1.json");
    const std::vector<std::string> common = {"plan", "--hf-config", path,   "--nodes", "2",
                                             "--tp", "2",           "--pp", "1",       "--seq",
                                             "4096", "--zero",      "0",    "--json"};
    auto with = [&](const std::string& ep) {
        std::vector<std::string> args = common;
        args.insert(args.end(), {"--ep", ep});
        const CliResult r = shardscope::testing::runCliWith(args);
        EXPECT_EQ(r.code, 0) << r.err;
        return parseOrFail(r.out);
    };
    const json split = with("8"), whole = with("1");
    EXPECT_EQ(split.at("parallel").at("ep"), 8);
    EXPECT_EQ(split.at("comm").at("ep").at("group_size"), 8);
    EXPECT_GT(split.at("comm").at("ep").at("bytes").get<double>(), 0);
    EXPECT_EQ(whole.at("comm").at("ep").at("bytes").get<double>(), 0);
    // bf16 weights of 7/8 of the routed experts (32 x 8 x 3 x 4096 x 14336) over tp 2 are gone.
    EXPECT_NEAR(whole.at("memory").at("parameters").get<double>() -
                    split.at("memory").at("parameters").get<double>(),
                32.0 * 8 * 3 * 4096 * 14336 * 7 / 8 / 2 * 2, 1e3);
    std::vector<std::string> padded = common;
    padded.insert(padded.end(), {"--ep", "8", "--capacity-factor", "1.5"});
    const CliResult capacity = shardscope::testing::runCliWith(padded);
    ASSERT_EQ(capacity.code, 0) << capacity.err;
    const json withCapacity = parseOrFail(capacity.out);
    EXPECT_DOUBLE_EQ(withCapacity.at("parallel").at("expert_capacity_factor").get<double>(), 1.5);
    EXPECT_NEAR(withCapacity.at("comm").at("ep").at("bytes").get<double>(),
                1.5 * split.at("comm").at("ep").at("bytes").get<double>(),
                1e-6 * split.at("comm").at("ep").at("bytes").get<double>());
    // --etp 1 folds the experts onto the tp ranks: ep 8 on one node instead of across both, and
    // each tp rank keeps its experts whole (bf16, 1/8 of the routed experts, the half tp took).
    std::vector<std::string> foldedArgs = common;
    foldedArgs.insert(foldedArgs.end(), {"--ep", "8", "--etp", "1"});
    const CliResult foldedRun = shardscope::testing::runCliWith(foldedArgs);
    ASSERT_EQ(foldedRun.code, 0) << foldedRun.err;
    const json folded = parseOrFail(foldedRun.out);
    EXPECT_EQ(folded.at("parallel").at("etp"), 1);
    EXPECT_FALSE(folded.at("comm").at("ep").at("crosses_nodes").get<bool>());
    EXPECT_TRUE(split.at("comm").at("ep").at("crosses_nodes").get<bool>());
    EXPECT_NEAR(folded.at("memory").at("parameters").get<double>() -
                    split.at("memory").at("parameters").get<double>(),
                32.0 * 8 * 3 * 4096 * 14336 / 8 / 2 * 2, 1e3);
    std::vector<std::string> badArgs = common;
    badArgs.insert(badArgs.end(), {"--ep", "8", "--etp", "3"});
    const CliResult bad = shardscope::testing::runCliWith(badArgs);
    EXPECT_EQ(bad.code, 2);
    EXPECT_CONTAINS(bad.err, "etp-ffn");
    EXPECT_CONTAINS(bad.err, "use etp = 1");
    const CliResult explained = run({"explain", "comm.ep", "--hf-config", path, "--nodes", "2",
                                     "--tp", "2", "--pp", "1", "--ep", "8"});
    ASSERT_EQ(explained.code, 0) << explained.err;
    EXPECT_CONTAINS(explained.out, "all-to-alls");
    EXPECT_CONTAINS(explained.out, "GShard");
}

TEST(CliPlan, ClusterFlagsReachTheCluster) {
    const CliResult r = run({"plan", "--gpu", "nvidia h200 sxm 141 GB", "--gpus-per-node", "4",
                             "--nodes", "16", "--inter-bw", "25", "--mtbf-hours", "1000",
                             "--ckpt-bw", "10", "--price", "3.5", "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const json c = parseOrFail(r.out).at("cluster");
    EXPECT_EQ(c.at("gpu").at("id"), "h200");
    EXPECT_EQ(c.at("gpus_per_node"), 4);
    EXPECT_EQ(c.at("nodes"), 16);
    EXPECT_DOUBLE_EQ(c.at("inter_bandwidth_gbps").get<double>(), 25);
    EXPECT_DOUBLE_EQ(c.at("gpu_mtbf_hours").get<double>(), 1000);
    EXPECT_DOUBLE_EQ(c.at("checkpoint_bandwidth_gbps").get<double>(), 10);
    EXPECT_DOUBLE_EQ(c.at("gpu_hour_cost").get<double>(), 3.5);
}

// ---- explain ------------------------------------------------------------------------------

TEST(CliExplain, OneFigureAsText) {
    const CliResult r = run({"explain", "memory.activations"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_CONTAINS(r.out, "Activations (memory.activations)");
    EXPECT_CONTAINS(r.out, "formula:");
    EXPECT_CONTAINS(r.out, "substituted:");
    EXPECT_CONTAINS(r.out, "source:");
    EXPECT_CONTAINS(r.out, "Korthikanti");
}

TEST(CliExplain, OneFigureAsJson) {
    const CliResult r = run({"explain", "throughput.mfu", "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const json j = parseOrFail(r.out);
    EXPECT_EQ(j.at("key"), "throughput.mfu");
    EXPECT_EQ(j.at("unit"), "fraction");
    EXPECT_GT(j.at("value").get<double>(), 0);
    EXPECT_LT(j.at("value").get<double>(), 1);
    for (const char* key : {"label", "display", "formula", "substituted", "source"})
        EXPECT_FALSE(j.at(key).get<std::string>().empty()) << key;

    // The same number as plan --json reports.
    const CliResult plan = run({"plan", "--json"});
    ASSERT_EQ(plan.code, 0);
    EXPECT_DOUBLE_EQ(j.at("value").get<double>(),
                     parseOrFail(plan.out).at("summary").at("mfu").get<double>());
}

TEST(CliExplain, UnknownFigureListsTheKnownKeys) {
    const CliResult r = run({"explain", "no.such"});
    EXPECT_EQ(r.code, 2);
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_CONTAINS(r.err, "unknown figure 'no.such'");
    EXPECT_CONTAINS(r.err, "memory.activations");
    EXPECT_CONTAINS(r.err, "throughput.mfu");
}

// ---- search -------------------------------------------------------------------------------

TEST(CliSearch, JsonRanksTheTopLayouts) {
    const CliResult r = run({"search", "--model", "llama3-8b", "--gpu", "h100-sxm", "--nodes", "2",
                             "--global-batch", "256", "--top", "5", "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const json j = parseOrFail(r.out);
    EXPECT_EQ(j.at("schema"), "shardscope.search/1");
    EXPECT_EQ(j.at("model").at("id"), "llama3-8b");
    const json& top = j.at("top");
    ASSERT_TRUE(top.is_array());
    ASSERT_FALSE(top.empty());
    EXPECT_LE(top.size(), 5u);
    double previous = 1e300;
    for (const json& c : top) {
        const double tps = c.at("tokens_per_second").get<double>();
        EXPECT_GT(tps, 0);
        EXPECT_LE(tps, previous) << "not ranked best first";
        previous = tps;
        EXPECT_LE(c.at("memory_bytes").get<double>(), 80e9) << "only layouts that fit";
        EXPECT_GT(c.at("step_time_s").get<double>(), 0);
        EXPECT_GT(c.at("mfu").get<double>(), 0);
        EXPECT_LT(c.at("mfu").get<double>(), 1);
        const json& p = c.at("parallel");
        EXPECT_EQ(p.at("dp").get<int>() * p.at("tp").get<int>() * p.at("pp").get<int>() *
                      p.at("cp").get<int>(),
                  16);
        EXPECT_EQ(p.at("global_batch"), 256);
    }
    const long long considered = j.at("considered"), evaluated = j.at("evaluated"),
                    fitting = j.at("fitting");
    EXPECT_GT(considered, 0);
    EXPECT_LE(evaluated, considered);
    EXPECT_LE(fitting, evaluated);
    EXPECT_GE(fitting, static_cast<long long>(top.size()));
    EXPECT_EQ(j.at("cancelled"), false);
    ASSERT_TRUE(j.at("rejected").is_object());
    long long rejected = 0;
    for (const auto& [rule, count] : j.at("rejected").items())
        rejected += count.get<long long>();
    // Every enumerated layout was either broken by a rule, too big, or fits.
    EXPECT_EQ(rejected + fitting, considered);
}

TEST(CliSearch, TextTable) {
    const CliResult r = run(
        {"search", "--model", "llama3-8b", "--nodes", "2", "--global-batch", "256", "--top", "3"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_CONTAINS(r.out, "Search: Llama 3 8B on 16 x");
    EXPECT_CONTAINS(r.out, "layouts considered");
    EXPECT_CONTAINS(r.out, "tokens/s");
    EXPECT_CONTAINS(r.out, "\n1 ");
    EXPECT_CONTAINS(r.out, "\n3 ");
    EXPECT_EQ(r.out.find("\n4 "), std::string::npos);
}

// ---- presets, devices, validation ----------------------------------------------------------

TEST(CliPresets, ModelsListsEveryPreset) {
    const CliResult r = run({"models"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(shardscope::modelPresets().size(), 13u);
    for (const auto& m : shardscope::modelPresets()) {
        EXPECT_CONTAINS(r.out, m.id);
        EXPECT_CONTAINS(r.out, m.name);
    }
    const CliResult j = run({"models", "--json"});
    ASSERT_EQ(j.code, 0) << j.err;
    const json list = parseOrFail(j.out);
    ASSERT_TRUE(list.is_array());
    EXPECT_EQ(list.size(), 13u);
    for (const json& m : list)
        EXPECT_FALSE(m.at("id").get<std::string>().empty());
}

TEST(CliPresets, GpusListsEveryPreset) {
    const CliResult r = run({"gpus"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(shardscope::gpuPresets().size(), 9u);
    for (const auto& g : shardscope::gpuPresets()) {
        EXPECT_CONTAINS(r.out, g.id);
        EXPECT_CONTAINS(r.out, g.name);
    }
    const CliResult j = run({"gpus", "--json"});
    ASSERT_EQ(j.code, 0) << j.err;
    const json list = parseOrFail(j.out);
    ASSERT_TRUE(list.is_array());
    EXPECT_EQ(list.size(), 9u);
    for (const json& g : list) {
        EXPECT_GT(g.at("memory_gb").get<double>(), 1);
        EXPECT_GT(g.at("peak_tflops").at("bf16").get<double>(), 1);
    }
}

TEST(CliDevices, ListsDevicesOrSaysWhyNot) {
    const CliResult r = run({"devices"});
    ASSERT_EQ(r.code, 0) << r.err;
    const CliResult j = run({"devices", "--json"});
    ASSERT_EQ(j.code, 0) << j.err;
    const json report = parseOrFail(j.out);
    for (const char* key : {"built_with_cuda", "versions", "reason", "devices"})
        EXPECT_TRUE(report.contains(key)) << key;
    if (report.at("devices").empty()) {
        EXPECT_CONTAINS(r.out, "No CUDA GPU");
        EXPECT_FALSE(report.at("reason").get<std::string>().empty());
    } else {
        EXPECT_CONTAINS(r.out, "compute capability");
        for (const json& d : report.at("devices")) {
            EXPECT_CONTAINS(r.out, d.at("name").get<std::string>());
            EXPECT_GT(d.at("memory_bytes").get<double>(), 1e9);
        }
    }
}

TEST(CliValidate, MarkdownTableWithMedianError) {
    const CliResult r = run({"validate", dataPath("published_runs.csv"), "--markdown"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_CONTAINS(r.out, "| run | source | split | GPU | GPUs | layout | metric | reported | "
                           "predicted | error | memory (planned / GPU) |");
    EXPECT_CONTAINS(r.out, " planned over their GPU's, the largest at ");
    EXPECT_CONTAINS(r.out, "- calibration: ");
    EXPECT_CONTAINS(r.out, "median signed error per source: narayanan2021 ");
    EXPECT_CONTAINS(r.out, "|---|");
    EXPECT_CONTAINS(r.out, "Median absolute error");
}

// One run's whole plan, for a user asking why a row is off: what was reported (the CSV's own
// figure), the planner's throughput, and the same prediction as the table's.
TEST(CliValidate, OneRunsWholePlan) {
    const std::string name = "llmfoundry-mpt-7b-h100-sxm-8gpu-seq2048-bf16";
    const CliResult table = run({"validate", dataPath("published_runs.csv"), "--json"});
    ASSERT_EQ(table.code, 0) << table.err;
    const json all = parseOrFail(table.out);
    json row;
    for (const json& r : all.at("runs"))
        if (r.at("name") == name)
            row = r;
    ASSERT_FALSE(row.is_null());

    const CliResult one =
        run({"validate", dataPath("published_runs.csv"), "--run", name, "--json"});
    ASSERT_EQ(one.code, 0) << one.err;
    const json j = parseOrFail(one.out);
    EXPECT_EQ(j.at("name"), name);
    EXPECT_EQ(j.at("gpu"), "h100-sxm");
    EXPECT_DOUBLE_EQ(j.at("reported").get<double>(), 10643); // the CSV's Throughput column
    EXPECT_DOUBLE_EQ(j.at("predicted").get<double>(), row.at("predicted").get<double>());
    // The plan is the one compared: its tokens/s over the run's 8 GPUs is the prediction.
    EXPECT_NEAR(j.at("plan").at("summary").at("tokens_per_second").get<double>() / 8,
                j.at("predicted").get<double>(), 1e-9 * j.at("predicted").get<double>());
    EXPECT_EQ(j.at("plan").at("parallel").at("zero"), 3);
    // The table's memory is the plan's: its most loaded stage.
    EXPECT_DOUBLE_EQ(row.at("planned_memory").get<double>(),
                     j.at("plan").at("memory").at("total").get<double>());

    const CliResult text =
        run({"validate", dataPath("published_runs.csv"), "--run", name, "--explain"});
    ASSERT_EQ(text.code, 0) << text.err;
    EXPECT_CONTAINS(text.out, "reported 10600 tokens/s");
    EXPECT_CONTAINS(text.out, "Source: mosaicml/llm-foundry");
    EXPECT_CONTAINS(text.out, "How each figure is computed");

    const CliResult unknown = run({"validate", dataPath("published_runs.csv"), "--run", "nope"});
    EXPECT_EQ(unknown.code, 2);
    EXPECT_CONTAINS(unknown.err, "no run named 'nope'");
    // --explain needs a run; a run's plan is not a Markdown table.
    EXPECT_EQ(run({"validate", dataPath("published_runs.csv"), "--explain"}).code, 2);
    EXPECT_EQ(run({"validate", dataPath("published_runs.csv"), "--run", name, "--markdown"}).code,
              2);

    // An MFU row's plan counts FLOPs in the run's convention (palm), as its header does.
    const CliResult mfu = run({"validate", dataPath("published_runs.csv"), "--run",
                               "megatron-sp-selective-175b", "--json"});
    ASSERT_EQ(mfu.code, 0) << mfu.err;
    EXPECT_EQ(parseOrFail(mfu.out).at("plan").at("summary").at("flops_convention"), "palm");
}

TEST(CliValidate, TextAndJson) {
    const CliResult text = run({"validate", dataPath("published_runs.csv")});
    ASSERT_EQ(text.code, 0) << text.err;
    EXPECT_CONTAINS(text.out, "Median absolute error");

    const CliResult r = run({"validate", dataPath("published_runs.csv"), "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const json j = parseOrFail(r.out);
    const double median = j.at("median_absolute_error");
    EXPECT_GE(median, 0);
    EXPECT_LT(median, 1);
    ASSERT_FALSE(j.at("runs").empty());
    for (const json& run : j.at("runs")) {
        for (const char* key : {"name", "metric", "convention", "source"})
            EXPECT_FALSE(run.at(key).get<std::string>().empty()) << key;
        EXPECT_GT(run.at("reported").get<double>(), 0);
        EXPECT_GT(run.at("predicted").get<double>(), 0);
        EXPECT_NEAR(run.at("error").get<double>(),
                    run.at("predicted").get<double>() / run.at("reported").get<double>() - 1, 1e-9);
    }
    // Each split's summary, recomputed here from the per-run errors: the count, the median and
    // nearest-rank p90 of the absolute errors, and each source's median signed error.
    const auto medianOf = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
    };
    std::size_t counted = 0;
    for (const char* split : {"calibration", "validation"}) {
        std::vector<double> absolute;
        std::map<std::string, std::vector<double>> bySource;
        int over = 0;
        double worst = 0;
        for (const json& run : j.at("runs"))
            if (run.at("split") == split) {
                absolute.push_back(std::abs(run.at("error").get<double>()));
                bySource[run.at("source_id")].push_back(run.at("error").get<double>());
                // Each run's most loaded stage against its GPU: over it exactly when it does not
                // fit.
                const double planned = run.at("planned_memory"), gpu = run.at("gpu_memory");
                EXPECT_GT(planned, 0);
                EXPECT_GE(gpu, 40e9) << run.at("name"); // the CSV's smallest GPU: an A100 40 GB
                EXPECT_EQ(run.at("fits").get<bool>(), planned <= gpu) << run.at("name");
                over += planned > gpu ? 1 : 0;
                worst = std::max(worst, planned / gpu);
            }
        const json& summary = j.at(split);
        ASSERT_EQ(summary.at("runs").get<std::size_t>(), absolute.size()) << split;
        EXPECT_EQ(summary.at("over_memory").get<int>(), over) << split;
        EXPECT_NEAR(summary.at("worst_memory_ratio").get<double>(), worst, 1e-12) << split;
        counted += absolute.size();
        if (absolute.empty())
            continue;
        EXPECT_NEAR(summary.at("median_absolute_error").get<double>(), medianOf(absolute), 1e-12);
        std::sort(absolute.begin(), absolute.end());
        const std::size_t rank = (9 * absolute.size() + 9) / 10; // ceil(0.9 n)
        EXPECT_NEAR(summary.at("p90_absolute_error").get<double>(), absolute[rank - 1], 1e-12);
        ASSERT_EQ(summary.at("sources").size(), bySource.size()) << split;
        for (const json& source : summary.at("sources"))
            EXPECT_NEAR(source.at("median_signed_error").get<double>(),
                        medianOf(bySource.at(source.at("id"))), 1e-12)
                << source.at("id");
    }
    EXPECT_EQ(counted, j.at("runs").size());
}

// ---- bad input: exit 2, a message on err that names the problem, nothing on out ------------

struct BadInput {
    std::vector<std::string> args;
    std::vector<std::string> expected; // substrings of the message
};

void expectRejected(const BadInput& c) {
    std::string joined;
    for (const std::string& a : c.args)
        joined += a + " ";
    SCOPED_TRACE(joined);
    std::vector<const char*> argv{"shardscope-cli"};
    for (const std::string& a : c.args)
        argv.push_back(a.c_str());
    std::ostringstream out, err;
    const int code = shardscope::cli::runCli(int(argv.size()), argv.data(), out, err);
    EXPECT_EQ(code, 2);
    EXPECT_TRUE(out.str().empty()) << out.str();
    EXPECT_CONTAINS(err.str(), "error: ");
    for (const std::string& s : c.expected)
        EXPECT_CONTAINS(err.str(), s);
}

TEST(CliBadInput, UnknownPresetsListTheKnownOnes) {
    expectRejected({{"plan", "--model", "gpt5"},
                    {"unknown model preset 'gpt5'", "known:", "llama3-70b", "mixtral-8x7b"}});
    expectRejected({{"plan", "--gpu", "tpu-v5"},
                    {"unknown GPU preset 'tpu-v5'", "known:", "h100-sxm", "a100-80gb"}});
    expectRejected({{"search", "--model", "gpt5"}, {"unknown model preset 'gpt5'"}});
}

TEST(CliBadInput, LayoutViolationsNameTheRuleAndTheFix) {
    // Llama 3 70B has 64 heads.
    expectRejected(
        {{"plan", "--tp", "3"},
         {"not valid", "[tp-heads]", "does not divide 64 attention heads", "fix: use tp = 2"}});
    expectRejected({{"plan", "--dp", "3"}, {"[world-size]", "64 GPUs", "fix: set dp = 2"}});
    expectRejected({{"plan", "--zero", "7"}, {"[zero-stage]", "ZeRO stage is 7"}});
    expectRejected({{"plan", "--shard-group", "3"},
                    {"[shard-group]", "does not divide dp*cp = 2", "fix: use shard_group = 2"}});
    expectRejected({{"plan", "--global-batch", "0"}, {"[batch-size]", "global batch 0"}});
    expectRejected({{"explain", "time.step", "--tp", "3"}, {"[tp-heads]"}});
    expectRejected({{"plan", "--ep", "2"}, {"[ep-moe]", "the model has none"}});
    expectRejected({{"plan", "--capacity-factor", "1.25"}, {"[capacity-moe]", "no experts"}});
    expectRejected({{"plan", "--capacity-factor", "-1"}, {"--capacity-factor must be 0"}});
    expectRejected({{"plan", "--hf-config", dataPath("hf/mixtral-8x7b-v0.1.json"), "--nodes", "2",
                     "--tp", "2", "--pp", "1", "--ep", "3"},
                    {"[ep-experts]", "does not divide 8 routed experts", "fix: use ep = "}});
}

TEST(CliBadInput, OutOfRangeNumbers) {
    expectRejected({{"plan", "--nodes", "0"}, {"--nodes must be a positive number (got 0)"}});
    expectRejected({{"plan", "--nodes", "-1"}, {"--nodes must be a positive number (got -1)"}});
    expectRejected({{"plan", "--gpus-per-node", "0"}, {"--gpus-per-node must be a positive"}});
    expectRejected({{"plan", "--params", "-5"}, {"--params must be a positive number (got -5)"}});
    expectRejected({{"plan", "--params", "0"}, {"--params must be a positive number (got 0)"}});
    expectRejected(
        {{"plan", "--params", "1e30"}, {"--params 1e+30 is beyond any trainable model"}});
    expectRejected({{"plan", "--params", "nan"}, {"--params must be a positive number"}});
    expectRejected({{"plan", "--seq", "0"}, {"--seq must be a positive number (got 0)"}});
    expectRejected({{"plan", "--seq", "-4096"}, {"--seq must be a positive number"}});
    expectRejected({{"plan", "--inter-bw", "0"}, {"--inter-bw must be a positive number"}});
    expectRejected({{"plan", "--tokens", "-1"}, {"--tokens must be zero or positive"}});
    expectRejected(
        {{"plan", "--nodes", "100000", "--gpus-per-node", "1000"}, {"ten million GPUs"}});
    // Once accepted with exit 0, printing null, nan or inf, or silently replaced.
    expectRejected({{"plan", "--ckpt-bw", "1e308", "--json"}, {"--ckpt-bw", "(got 1e+308)"}});
    expectRejected({{"plan", "--inter-bw", "1e309"}, {"--inter-bw", "(got inf)"}});
    expectRejected({{"plan", "--price", "1e300"}, {"--price must be no larger than"}});
    expectRejected({{"plan", "--dp", "-5"}, {"--dp must be at least 1 (got -5)"}});
    expectRejected({{"collective", "--intra-latency", "nan"}, {"--intra-latency", "(got nan)"}});
    expectRejected({{"collective", "--inter-latency", "-1"}, {"--inter-latency", "from 0"}});
    expectRejected({{"collective", "--size", "inf"}, {"--size", "(got inf)"}});
    expectRejected({{"collective", "--size", "1e300"}, {"--size", "up to"}});
    expectRejected({{"collective", "--intra-bw", "0"}, {"--intra-bw", "above 0"}});
}

TEST(CliBadInput, UnknownNames) {
    expectRejected({{"plan", "--schedule", "bogus"},
                    {"unknown pipeline schedule 'bogus'", "1f1b", "zero-bubble"}});
    expectRejected({{"plan", "--precision", "fp4"}, {"unknown precision 'fp4'", "bf16", "fp8"}});
    expectRejected({{"plan", "--recompute", "sometimes"},
                    {"unknown recompute policy 'sometimes'", "selective"}});
    expectRejected({{"plan", "--optimizer", "lion"}, {"unknown optimizer 'lion'", "adamw"}});
}

TEST(CliBadInput, UnparsableFlags) {
    expectRejected({{"plan", "--tp", "abc"}, {"--tp", "abc", "--help"}});
    expectRejected({{"plan", "--sp", "maybe"}, {"--sp", "maybe"}});
    expectRejected({{"plan", "--no-such-flag"}, {"--no-such-flag"}});
    expectRejected({{"plan", "stray"}, {"stray"}});
}

TEST(CliBadInput, Commands) {
    expectRejected({{"bogus"}, {"unknown command 'bogus'", "plan", "search", "validate"}});
    expectRejected({{}, {"no command given", "plan"}});
    expectRejected({{"explain"}, {"figure is required"}});
    expectRejected({{"validate"}, {"runs is required"}});
}

TEST(CliBadInput, SearchArguments) {
    expectRejected({{"search", "--model", "llama3-8b", "--global-batch", "0"},
                    {"--global-batch must be positive"}});
    expectRejected({{"search", "--model", "llama3-8b", "--top", "0"}, {"--top must be positive"}});
    expectRejected({{"search", "--model", "llama3-8b", "--top", "-3"}, {"--top must be positive"}});
    expectRejected({{"search", "--params", "7e9"}, {"search needs the model's architecture"}});
}

TEST(CliBadInput, HuggingFaceConfigFiles) {
    const std::string missing = (fs::path(::testing::TempDir()) / "no_such_config.json").string();
    expectRejected({{"plan", "--hf-config", missing}, {"cannot open", "no_such_config.json"}});
    expectRejected({{"plan", "--hf-config", ::testing::TempDir()}, {"is a directory"}});

    const TempFile malformed("malformed.json", "{\"hidden_size\": 4096, \"num_hidden_layers\": }");
    expectRejected(
        {{"plan", "--hf-config", malformed.path()}, {"malformed.json", "not valid JSON"}});

    const std::string full = readFile(dataPath("hf/llama-3-8b.json"));
    ASSERT_GT(full.size(), 40u);
    const TempFile truncated("truncated.json", full.substr(0, full.size() / 2));
    expectRejected(
        {{"plan", "--hf-config", truncated.path()}, {"truncated.json", "not valid JSON"}});

    const TempFile empty("empty.json", "");
    expectRejected({{"plan", "--hf-config", empty.path()}, {"not valid JSON"}});

    const TempFile array("array.json", "[{\"hidden_size\": 4096}]");
    expectRejected({{"plan", "--hf-config", array.path()}, {"expected a JSON object", "array"}});

    const TempFile incomplete("incomplete.json",
                              "{\"model_type\": \"llama\", \"hidden_size\": 4096}");
    expectRejected({{"plan", "--hf-config", incomplete.path()}, {"missing", "num_hidden_layers"}});

    // 80,000 levels overflowed the stack when the message described the value.
    const std::string deep = std::string(80000, '[') + std::string(80000, ']');
    const TempFile deepFile("deep.json", "{\"hidden_size\": " + deep + "}");
    expectRejected({{"plan", "--hf-config", deepFile.path()}, {"deep.json", "80001 levels deep"}});
    const TempFile deepField("deep_field.json", "{\"hidden_size\": " + std::string(60, '[') +
                                                    std::string(60, ']') +
                                                    ", \"num_hidden_layers\": 2}");
    expectRejected({{"plan", "--hf-config", deepField.path()}, {"hidden_size", "an array of 1"}});
}

// --json of a schedule or collective that lists millions of items took minutes and 18 GB: refused
// with the count, the limit and what to do instead; the summary of the same still runs.
// A 100,000-character argument was quoted back whole.
TEST(CliBadInput, HugeArgumentsAreQuotedAsExcerpts) {
    const std::string huge(100000, 'x');
    for (const CliResult& r :
         {run({"plan", "--model", huge}), run({huge}), run({"plan", "--gpu", huge})}) {
        EXPECT_EQ(r.code, 2);
        EXPECT_LT(r.err.size(), 2000u);
        EXPECT_NE(r.err.find("characters)"), std::string::npos) << r.err.substr(0, 300);
    }
}

TEST(CliBadInput, JsonListingsHaveALimit) {
    expectRejected({{"schedule", "--pp", "1024", "-m", "2604", "--json"},
                    {"5,332,992", "1,048,576", "drop --json"}});
    expectRejected(
        {{"collective", "-n", "1024", "--json"}, {"2,095,104", "1,048,576", "fewer ranks"}});
    EXPECT_EQ(run({"collective", "-n", "1024"}).code, 0);
    EXPECT_EQ(run({"schedule", "--pp", "64", "-m", "256", "--json"}).code, 0);
}

TEST(CliBadInput, ValidateFiles) {
    const std::string missing = (fs::path(::testing::TempDir()) / "no_such_runs.csv").string();
    expectRejected({{"validate", missing}, {"no_such_runs.csv"}});

    // A header and no runs: a median over nothing must not read as a 0 % error.
    const std::string runs = readFile(dataPath("published_runs.csv"));
    const std::string header = runs.substr(0, runs.find('\n') + 1);
    ASSERT_GT(header.size(), 10u);
    const TempFile headerOnly("header_only.csv", header);
    expectRejected({{"validate", headerOnly.path()}, {"holds no runs"}});
    const TempFile empty("empty.csv", "");
    expectRejected({{"validate", empty.path()}, {"empty"}});
}

TEST(CliSchedule, OneFOneBListsOpsAndTheBubble) {
    const CliResult r = run({"schedule", "--schedule", "1f1b", "--pp", "4", "-m", "8"});
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_CONTAINS(r.out, "rank   0: F0 F1 F2 F3 B+W0 F4");
    // (p-1)/(m+p-1) = 3/11, simulated and closed form.
    EXPECT_CONTAINS(r.out, "bubble 27.3 % simulated; closed form 27.3 %");
    EXPECT_CONTAINS(r.out, "makespan 33");
}

TEST(CliSchedule, JsonCarriesTheTimeline) {
    const CliResult r = run({"schedule", "--schedule", "zero-bubble", "--pp", "2", "-m", "2",
                             "--p2p", "0.5", "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["schedule"], "zero-bubble");
    EXPECT_DOUBLE_EQ(j["costs"]["p2p"].get<double>(), 0.5);
    ASSERT_EQ(j["ranks"].size(), 2u);
    const json& first = j["ranks"][0]["ops"][0];
    EXPECT_EQ(first["op"], "F");
    EXPECT_EQ(first["send"]["peer"], 1);
    EXPECT_EQ(first["send"]["tensor"], "activation");
    EXPECT_TRUE(first["recv"].is_null());
    EXPECT_GT(j["makespan"].get<double>(), 6.0);
    // Each rank from its first op to its last: never longer than the makespan.
    EXPECT_GT(j["longest_rank_span"].get<double>(), 0.0);
    EXPECT_LE(j["longest_rank_span"].get<double>(), j["makespan"].get<double>());
    EXPECT_GE(j["span_bubble_fraction"].get<double>(), 0.0);
}

// ZB-2p from the command line (p 4, m 8): the last rank starts three forwards late, so the
// makespan is ZB-H1's 27 while no rank idles inside its own span of 24 (Qi et al. 2024).
TEST(CliSchedule, ZeroBubble2pSpansThreeMicrobatchesOfWorkWithoutIdling) {
    const CliResult r = run({"schedule", "--schedule", "zb-2p", "--pp", "4", "-m", "8", "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["schedule"], "zb-2p");
    EXPECT_DOUBLE_EQ(j["makespan"].get<double>(), 27.0);
    EXPECT_DOUBLE_EQ(j["longest_rank_span"].get<double>(), 24.0);
    EXPECT_DOUBLE_EQ(j["span_bubble_fraction"].get<double>(), 0.0);
    EXPECT_EQ(j["ranks"][0]["peak_awaiting_backward"], 7); // ZB-H2's warm-up: 2p - 1 forwards
}

TEST(CliSchedule, InterleavingTheSameModelIsShorterThan1F1BByTheBubbleItSaves) {
    // F 1 and B+W 2 per stage, p 4, m 8: 1F1B takes (m + p - 1) x 3 = 33; with v = 2 chunks of
    // half the layers each, (m + (p - 1) / v) x 3 = 28.5 (Narayanan et al. 2021, section 2.2.2).
    const std::vector<std::string> common = {
        "--pp", "4",     "-m", "8", "--forward", "1", "--backward-input", "1", "--backward-weight",
        "1",    "--json"};
    auto makespan = [&](std::vector<std::string> args) {
        args.insert(args.end(), common.begin(), common.end());
        const CliResult r = shardscope::testing::runCliWith(args);
        EXPECT_EQ(r.code, 0) << r.err;
        return json::parse(r.out);
    };
    const json plain = makespan({"schedule", "--schedule", "1f1b"});
    const json interleaved = makespan({"schedule", "--schedule", "interleaved", "--vpp", "2"});
    EXPECT_DOUBLE_EQ(plain["makespan"].get<double>(), 33.0);
    EXPECT_DOUBLE_EQ(interleaved["makespan"].get<double>(), 28.5);
    EXPECT_DOUBLE_EQ(interleaved["costs"]["forward"].get<double>(), 1.0); // as given, per stage
    EXPECT_DOUBLE_EQ(interleaved["chunk_costs"]["forward"].get<double>(), 0.5);
    EXPECT_LT(interleaved["bubble_fraction"].get<double>(), plain["bubble_fraction"].get<double>());
}

TEST(CliSchedule, UnsupportedShapesExitTwoWithTheReason) {
    expectRejected({{"schedule", "--schedule", "interleaved", "--pp", "4", "-m", "6", "--vpp", "2"},
                    {"divisible by p", "m = 8"}});
    expectRejected({{"schedule", "--schedule", "1f1b", "--vpp", "2"}, {"set v = 1"}});
    expectRejected({{"schedule", "--forward", "-1"}, {"not negative"}});
    expectRejected({{"schedule", "--schedule", "sideways"}, {"sideways"}});
}

TEST(CliCollective, RingAllReduceStepsTimeAndBusBandwidth) {
    const CliResult r = run({"collective", "-n", "4", "--gpus-per-node", "4", "--size", "1",
                             "--intra-bw", "100", "--intra-latency", "0"});
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_CONTAINS(r.out, "step   1 reduce-scatter");
    EXPECT_CONTAINS(r.out, "0->1 c3+");
    EXPECT_CONTAINS(r.out, "all-gather");
    // 2(n-1) S/(n B) = 6 x 0.25 GB / 100 GB/s = 15 ms; busbw equals the link without latency.
    EXPECT_CONTAINS(r.out, "time   15.0 ms");
    EXPECT_CONTAINS(r.out, "busbw  100 GB/s");
}

TEST(CliCollective, JsonAndErrors) {
    const CliResult r = run({"collective", "--algorithm", "two-level-allreduce", "-n", "16",
                             "--gpus-per-node", "8", "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["algorithm"], "two-level-allreduce");
    EXPECT_EQ(j["steps"].size(), 2u * 7 + 2u * 1);
    EXPECT_DOUBLE_EQ(j["bus_factor"].get<double>(), 2.0 * 15 / 16);
    expectRejected({{"collective", "--algorithm", "sideways"}, {"sideways", "ring-allreduce"}});
    expectRejected({{"collective", "-n", "1"}, {"2 to 1024"}});
    expectRejected(
        {{"collective", "--algorithm", "two-level-allreduce", "-n", "12"}, {"whole nodes"}});
    expectRejected({{"collective", "--size", "0"}, {"--size must be above 0"}});
}

} // namespace
