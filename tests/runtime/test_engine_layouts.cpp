// The engine spread over MPI ranks (mpirun, started by --ranks) in every layout it runs, against
// one process with the same seed and global batch: the documented fp32 tolerance is 1e-5
// relative per step's loss over 20 steps. Each rank's measured memory stands beside the
// planner's prediction for its own stage, and its telemetry carries what the issue asks for.
#include "engine_run_support.h"
#include "engine_test_support.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sys/wait.h>
#include <tuple>

namespace shardscope {
namespace {

using nlohmann::json;
using testing::TempDir;
using namespace testing::engine_runs;

// Every layout the engine runs with a tied head: the pipeline schedules, data parallelism with
// ZeRO 0-3, tensor and sequence parallelism, and their combinations.
const std::vector<Layout> kTiedLayouts = {
    {"--pp 2 --schedule naive", 2},
    {"--pp 2 --schedule gpipe", 2},
    {"--pp 2 --schedule 1f1b", 2},
    {"--pp 2 --schedule interleaved --vpp 2", 2},
    {"--pp 2 --schedule zero-bubble", 2},
    {"--pp 4 --schedule naive", 4},
    {"--pp 4 --schedule gpipe", 4},
    {"--pp 4 --schedule 1f1b", 4},
    {"--pp 4 --schedule interleaved --vpp 2", 4},
    {"--pp 4 --schedule zero-bubble", 4},
    {"--pp 2 --schedule zb-1p", 2},
    {"--pp 4 --schedule zb-2p", 4},
    {"--pp 4 --schedule 1f1b --embedding-in-pipeline-split --loss-in-pipeline-split", 4},
    {"--pp 2 --dp 2 --schedule 1f1b --bucket-mb 0.05", 4},
    {"--pp 4 --dp 2 --schedule zero-bubble", 8},
    {"--dp 2 --zero 1", 2},
    {"--dp 4 --zero 1 --bucket-mb 0.05", 4},
    {"--pp 2 --dp 2 --zero 1 --schedule interleaved --vpp 2", 4},
    {"--tp 2", 2},
    {"--tp 4", 4},
    {"--tp 2 --dp 2 --zero 1", 4},
    {"--tp 2 --pp 2 --schedule zero-bubble", 4},
    {"--dp 2 --tp 2 --pp 2 --schedule 1f1b", 8},
    {"--tp 2 --sp", 2},
    {"--tp 4 --sp --schedule zero-bubble", 4},
    {"--dp 2 --tp 2 --sp --pp 2 --zero 1 --schedule interleaved --vpp 2", 8},
    {"--dp 2 --zero 2", 2},
    {"--dp 4 --zero 2 --schedule zero-bubble", 4},
    {"--dp 2 --zero 3", 2},
    {"--dp 4 --zero 3 --schedule zero-bubble --recompute full", 4},
    {"--dp 2 --tp 2 --sp --zero 3", 4},
};

TEST(EngineLayouts, EveryLayoutGivesTheSingleRankLosses) {
    TempDir dir;
    expectLayoutsGiveTheSingleRankLosses(dir, "tied", layoutConfig(true), kTiedLayouts, 1e-5);
    // The untied head on a few layouts.
    expectLayoutsGiveTheSingleRankLosses(dir, "untied", layoutConfig(false),
                                         {
                                             {"--pp 2 --schedule 1f1b", 2},
                                             {"--pp 2 --dp 2 --schedule interleaved --vpp 2", 4},
                                             {"--tp 2 --pp 2", 4},
                                             {"--tp 2 --sp --pp 2 --schedule zero-bubble", 4},
                                             {"--dp 2 --pp 2 --zero 3 --schedule 1f1b", 4},
                                         },
                                         1e-5);
}

// The Llama family's blocks in the same layouts: grouped-query heads split whole over tp, the
// RMSNorm weights' gradients summed over sp, the SwiGLU gate and up halves cut per rank.
TEST(EngineLayouts, EveryLayoutOfALlamaFamilyModelGivesTheSingleRankLosses) {
    TempDir dir;
    expectLayoutsGiveTheSingleRankLosses(
        dir, "llama", llamaLayoutConfig(),
        {
            {"--pp 2 --schedule naive", 2},
            {"--pp 2 --schedule gpipe", 2},
            {"--pp 2 --schedule 1f1b", 2},
            {"--pp 2 --schedule interleaved --vpp 2", 2},
            {"--pp 2 --schedule zb-1p", 2},
            {"--pp 4 --schedule zb-2p", 4},
            {"--tp 2", 2},
            {"--tp 4 --sp --schedule zero-bubble", 4},
            {"--dp 2 --zero 1", 2},
            {"--dp 2 --zero 2 --schedule zero-bubble", 2},
            {"--dp 2 --zero 3 --recompute full", 2},
            {"--dp 2 --tp 2 --sp --zero 3", 4},
            {"--dp 2 --tp 2 --sp --pp 2 --zero 1 --schedule interleaved --vpp 2", 8},
        },
        1e-5);
}

// Context parallelism (ring attention, load-balanced slices) alone and with every other axis, for
// both block families: each rank's slice of every sequence, the loss summed over the cp ranks,
// the gradients over dp x cp, and ZeRO sharding over dp x cp as the planner assumes.
TEST(EngineLayouts, EveryContextParallelLayoutGivesTheSingleRankLosses) {
    TempDir dir;
    const std::vector<Layout> layouts = {
        {"--cp 2", 2},
        {"--cp 4", 4},
        {"--cp 2 --tp 2", 4},
        {"--cp 2 --tp 2 --sp", 4},
        {"--cp 2 --pp 2 --schedule 1f1b", 4},
        {"--cp 2 --pp 2 --schedule zero-bubble", 4},
        {"--cp 2 --dp 2 --zero 1", 4},
        {"--cp 2 --dp 2 --zero 3 --recompute full", 4},
        {"--cp 2 --tp 2 --sp --pp 2 --schedule interleaved --vpp 2", 8},
    };
    expectLayoutsGiveTheSingleRankLosses(dir, "cp-gpt", layoutConfig(false), layouts, 1e-5);
    expectLayoutsGiveTheSingleRankLosses(dir, "cp-llama", llamaLayoutConfig(), layouts, 1e-5);
}

// Three replicas: no unit of this model (token table 2,048, positions 512, a layer 12,704, the
// final norm 64) divides by 3, so ZeRO pads every unit and each replica's last shard is short;
// the collectives still move equal parts, and the losses are one process's. A replica stores
// at most one element per unit (11 units) more than P / 3, at 16 bytes for the optimizer's m, v
// and master weights.
TEST(EngineLayouts, ZeroOverThreeReplicasPadsEveryUnitAndGivesTheSingleRankLosses) {
    TempDir dir;
    json config = layoutConfig(true);
    config["parallel"]["global_batch"] = 6;
    const std::vector<Layout> layouts = {
        {"--dp 3 --zero 1", 3},
        {"--dp 3 --zero 2", 3},
        {"--dp 3 --zero 3 --schedule zero-bubble", 3},
    };
    expectLayoutsGiveTheSingleRankLosses(dir, "padded", config, layouts, 1e-5, 11 * 16);
    json bf16 = config;
    bf16["parallel"]["precision"] = "bf16-bf16grads";
    expectLayoutsGiveTheSingleRankLosses(dir, "padded-bf16", bf16, layouts, 1e-3, 11 * 16);
}

// The same matrix in bf16 against one bf16 process. Layouts change where bf16 rounds: a
// tensor-parallel block's partial outputs are each rounded before the group sums them, and
// sums over ranks round each partial sum, where one process rounds the whole product once. A
// loss is a mean over many tokens, so these differences average out: the tolerance is 1e-3 of
// the loss per step over 20 steps, 100 times the fp32 one (measured on the reference machine:
// at most 7e-5, with tp 2 and sequence parallelism; pipeline-only layouts match exactly).
TEST(EngineLayouts, EveryLayoutInBf16GivesTheSingleBf16RankLosses) {
    TempDir dir;
    json bf16 = layoutConfig(true);
    bf16["parallel"]["precision"] = "bf16";
    expectLayoutsGiveTheSingleRankLosses(dir, "bf16", bf16, kTiedLayouts, 1e-3);
    // bf16 gradients: buckets, ZeRO's reduce-scatters and the tied embedding's sum in bf16.
    json grads = bf16;
    grads["parallel"]["precision"] = "bf16-bf16grads";
    expectLayoutsGiveTheSingleRankLosses(dir, "bf16grads", grads,
                                         {
                                             {"--dp 2", 2},
                                             {"--dp 2 --zero 2", 2},
                                             {"--dp 2 --zero 3", 2},
                                             {"--pp 2 --dp 2 --zero 1 --schedule 1f1b", 4},
                                         },
                                         1e-3);
    // The Llama family's blocks and context parallelism (bf16 keys and values around the ring,
    // their gradients in fp32) in bf16.
    json llama = llamaLayoutConfig();
    llama["parallel"]["precision"] = "bf16";
    expectLayoutsGiveTheSingleRankLosses(dir, "bf16llama", llama,
                                         {
                                             {"--tp 2 --sp", 2},
                                             {"--pp 2 --schedule zero-bubble", 2},
                                             {"--dp 2 --zero 3", 2},
                                             {"--cp 2", 2},
                                             {"--cp 2 --tp 2 --dp 2 --zero 1", 8},
                                         },
                                         1e-3);
}

// Sends and receives between stages are spans with peer, tensor and bytes; the time a rank
// blocks on a receive is a wait span; every event carries the rank's mesh coordinate; and
// clocks are aligned, so no receive completes before its send was posted.
TEST(EngineLayouts, PipelineTelemetryMeasuresTransfersOnRankZerosClock) {
    TempDir dir;
    json c = layoutConfig();
    c["train"]["steps"] = 3;
    const auto out = dir / "run";
    // Each rank's own clock runs 7 s behind the previous rank's: only the alignment puts
    // receives after their sends.
    ASSERT_EQ(runEngine("--config " + writeConfig(dir, "c", c) + " --out " + out.string() +
                            " --pp 4 --schedule 1f1b --ranks 4 --debug-clock-skew -7",
                        dir / "log"),
              0)
        << readText(dir / "log");
    const std::size_t activationBytes = 1 * 16 * 32 * sizeof(float);
    // (step, microbatch, tensor, sender, receiver) -> start of the send
    std::map<std::tuple<int, int, std::string, int, int>, double> sendStart;
    std::vector<std::tuple<int, int, std::string, int, int, double>> receives; // ..., end
    int waits = 0;
    std::vector<double> roundTrip(4);
    for (int r = 0; r < 4; ++r) {
        const std::vector<json> events = eventsOf(out, r);
        const json& start = eventNamed(events, "start");
        roundTrip[std::size_t(r)] = start["clock"]["round_trip"].get<double>();
        // The offset undoes the 7 s per rank skew. What is left is when each rank opened its
        // telemetry, milliseconds apart on an idle machine and more on a loaded one, so the
        // bound is half the skew: an offset not undone would be 7 s per rank. (The round trip
        // is whatever the machine's load makes it; it bounds the receives below.)
        EXPECT_LT(std::fabs(start["clock"]["offset"].get<double>()), 3.5);
        EXPECT_GE(start["clock"]["round_trip"].get<double>(), 0.0);
        EXPECT_EQ(start["chunks"].size(), 1u);
        EXPECT_EQ(start["chunks"][0]["first_layer"], 2 * r);
        for (const json& e : events) {
            ASSERT_EQ(e["coord"]["pp"], r) << e.dump();
            ASSERT_EQ(e["coord"]["dp"], 0);
            if (e["type"] != "span" || !e.contains("axis") || e["axis"] != "pp")
                continue;
            EXPECT_EQ(e["bytes"], activationBytes);
            const int peer = e["peer"];
            EXPECT_EQ(std::abs(peer - r), 1) << e.dump();
            const auto key = [&](int from, int to) {
                return std::tuple<int, int, std::string, int, int>{
                    e["step"].get<int>(), e["mb"].get<int>(), e["tensor"].get<std::string>(), from,
                    to};
            };
            if (e["kind"] == "wait") {
                ++waits;
                EXPECT_LE(e["start"].get<double>(), e["end"].get<double>());
            } else if (e["collective"] == "send") {
                sendStart[key(r, peer)] = e["start"].get<double>();
            } else if (e["collective"] == "recv") {
                const auto [step, mb, tensor, from, to] = key(peer, r);
                receives.emplace_back(step, mb, tensor, from, to, e["end"].get<double>());
            }
        }
    }
    // Each step: 8 microbatches cross 3 links forwards and 3 back.
    EXPECT_EQ(receives.size(), 3u * 8u * 6u);
    EXPECT_EQ(sendStart.size(), receives.size());
    EXPECT_GE(waits, int(receives.size()));
    for (const auto& [step, mb, tensor, from, to, end] : receives) {
        const auto it = sendStart.find({step, mb, tensor, from, to});
        ASSERT_NE(it, sendStart.end());
        // Each rank's offset is known to within half its round trip to rank 0 (Cristian), so
        // the bound is what this run measured, not a constant: on a loaded machine a round trip
        // takes milliseconds.
        const double slack = (roundTrip[std::size_t(from)] + roundTrip[std::size_t(to)]) / 2 + 1e-3;
        EXPECT_GE(end, it->second - slack) << tensor << " mb " << mb << " " << from << "->" << to;
    }
}

// Stops after 3 of 8 steps, resumes, and returns the manifest's file names of step 3.
std::vector<std::string> stopAndResume(const TempDir& dir, const std::string& config,
                                       const std::string& layout, const std::string& name) {
    const auto whole = dir / (name + "-whole"), part = dir / (name + "-part");
    EXPECT_EQ(runEngine("--config " + config + " --out " + whole.string() + layout, dir / "log"), 0)
        << readText(dir / "log");
    EXPECT_EQ(
        runEngine("--config " + config + " --out " + part.string() + layout + " --stop-after 3",
                  dir / "log"),
        0)
        << readText(dir / "log");
    EXPECT_EQ(runEngine("--resume --out " + part.string() + " --ranks 4", dir / "log"), 0)
        << readText(dir / "log");
    EXPECT_EQ(lossesOf(part), lossesOf(whole)) << layout;
    EXPECT_EQ(lossesOf(part).size(), 8u);
    const json manifest =
        json::parse(readText(part / "checkpoints" / "step-00000003" / "manifest.json"));
    std::vector<std::string> files;
    for (const json& f : manifest["files"])
        files.push_back(f["name"]);
    return files;
}

TEST(EngineLayouts, AStoppedRunResumesBitIdenticallyFromItsShards) {
    TempDir dir;
    json c = layoutConfig();
    c["train"]["steps"] = 8;
    const std::string config = writeConfig(dir, "c", c);
    // One manifest lists every shard: each stage's parameters once (from replica 0) and each
    // replica's own slice of the optimizer state (ZeRO-1).
    EXPECT_EQ(stopAndResume(dir, config, " --pp 2 --dp 2 --zero 1 --schedule zero-bubble --ranks 4",
                            "zero1"),
              (std::vector<std::string>{"pp0-tp0-dp0.params.f32", "pp0-tp0-dp0.adam_m.f32",
                                        "pp0-tp0-dp0.adam_v.f32", "pp0-tp0-dp1.adam_m.f32",
                                        "pp0-tp0-dp1.adam_v.f32", "pp1-tp0-dp0.params.f32",
                                        "pp1-tp0-dp0.adam_m.f32", "pp1-tp0-dp0.adam_v.f32",
                                        "pp1-tp0-dp1.adam_m.f32", "pp1-tp0-dp1.adam_v.f32"}));
    // ZeRO-3: every replica of every tensor-parallel rank holds its slice of the parameters.
    EXPECT_EQ(stopAndResume(dir, config, " --dp 2 --tp 2 --zero 3 --ranks 4", "zero3"),
              (std::vector<std::string>{
                  "pp0-tp0-dp0.params.f32", "pp0-tp0-dp0.adam_m.f32", "pp0-tp0-dp0.adam_v.f32",
                  "pp0-tp0-dp1.params.f32", "pp0-tp0-dp1.adam_m.f32", "pp0-tp0-dp1.adam_v.f32",
                  "pp0-tp1-dp0.params.f32", "pp0-tp1-dp0.adam_m.f32", "pp0-tp1-dp0.adam_v.f32",
                  "pp0-tp1-dp1.params.f32", "pp0-tp1-dp1.adam_m.f32", "pp0-tp1-dp1.adam_v.f32"}));

    // Context parallelism: ZeRO-1 shards over the dp x cp = 4 ranks holding the same weights,
    // numbered cp fastest in the shard names' dp place.
    EXPECT_EQ(stopAndResume(dir,
                            writeConfig(dir, "llama",
                                        [&] {
                                            json l = llamaLayoutConfig();
                                            l["train"]["steps"] = 8;
                                            return l;
                                        }()),
                            " --cp 2 --dp 2 --zero 1 --ranks 4", "cp"),
              (std::vector<std::string>{
                  "pp0-tp0-dp0.params.f32", "pp0-tp0-dp0.adam_m.f32", "pp0-tp0-dp0.adam_v.f32",
                  "pp0-tp0-dp1.adam_m.f32", "pp0-tp0-dp1.adam_v.f32", "pp0-tp0-dp2.adam_m.f32",
                  "pp0-tp0-dp2.adam_v.f32", "pp0-tp0-dp3.adam_m.f32", "pp0-tp0-dp3.adam_v.f32"}));

    // Mixed precision under ZeRO-1: each replica checkpoints the fp32 master weights of its own
    // slice (no rank holds them all), and the bf16 weights are rebuilt from them on resume.
    json bf16 = c;
    bf16["parallel"]["precision"] = "bf16";
    EXPECT_EQ(stopAndResume(dir, writeConfig(dir, "bf16", bf16),
                            " --pp 2 --dp 2 --zero 1 --schedule 1f1b --ranks 4", "bf16-zero1"),
              (std::vector<std::string>{
                  "pp0-tp0-dp0.params.f32", "pp0-tp0-dp0.adam_m.f32", "pp0-tp0-dp0.adam_v.f32",
                  "pp0-tp0-dp1.params.f32", "pp0-tp0-dp1.adam_m.f32", "pp0-tp0-dp1.adam_v.f32",
                  "pp1-tp0-dp0.params.f32", "pp1-tp0-dp0.adam_m.f32", "pp1-tp0-dp0.adam_v.f32",
                  "pp1-tp0-dp1.params.f32", "pp1-tp0-dp1.adam_m.f32", "pp1-tp0-dp1.adam_v.f32"}));

    // The attention kernel and fused elementwise kernels are the planner's alone: a run stopped
    // under one resumes under another.
    {
        const auto part = dir / "kernel-part";
        ASSERT_EQ(
            runEngine("--config " + config + " --out " + part.string() +
                          " --pp 2 --dp 2 --zero 1 --schedule zero-bubble --ranks 4 --stop-after 3",
                      dir / "log"),
            0)
            << readText(dir / "log");
        json flash3 = c;
        flash3["parallel"]["attention_kernel"] = "flash3";
        flash3["parallel"]["fused_elementwise"] = false;
        EXPECT_EQ(runEngine("--resume --out " + part.string() + " --config " +
                                writeConfig(dir, "flash3", flash3) +
                                " --pp 2 --dp 2 --zero 1 --schedule zero-bubble --ranks 4",
                            dir / "log"),
                  0)
            << readText(dir / "log");
        EXPECT_EQ(lossesOf(part), lossesOf(dir / "zero1-whole"));
    }

    // Another layout (here: without ZeRO) cannot read these shards, and says so before touching
    // anything.
    const int code = runEngine("--resume --out " + (dir / "zero1-part").string() + " --config " +
                                   config + " --pp 2 --dp 2 --zero 0 --ranks 4",
                               dir / "log");
    EXPECT_EQ(WEXITSTATUS(code), 2);
    const std::string log = readText(dir / "log");
    EXPECT_NE(log.find("sharded by the layout"), std::string::npos) << log;
}

} // namespace
} // namespace shardscope
