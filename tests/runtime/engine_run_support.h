// Running the engine binary as a user would (train -q, with --ranks for mpirun) and reading what
// its runs leave: config files, logs, telemetry events, losses, memory beside the plan. runEngine
// is there for tests that define SHARDSCOPE_ENGINE_EXE (CMake: the shardscope-engine target's
// file).
#pragma once

#include "support/temp_dir.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardscope::testing::engine_runs {

using nlohmann::json;

// Eight layers, so four pipeline ranks with two chunks each still get a layer per chunk.
inline json layoutConfig(bool tied = true) {
    json c = json::parse(R"({
      "model": {"name": "layout GPT", "family": "gpt2", "layers": 8, "hidden": 32, "heads": 4,
                "kv_heads": 4, "ffn_hidden": 128, "vocab": 64, "seq_len": 16,
                "max_positions": 16, "activation": "gelu", "norm": "layernorm",
                "positions": "learned", "attention_bias": true, "output_bias": true,
                "mlp_bias": true, "dropout": false},
      "parallel": {"micro_batch": 1, "global_batch": 8},
      "train": {"steps": 20, "warmup_steps": 2},
      "engine": {"threads": 1}})");
    c["model"]["tied_embeddings"] = tied;
    return c;
}

// The Llama family's blocks at the same scale: 8 query heads over 4 key and value heads (so tp
// 4 still holds whole groups), SwiGLU, RMSNorm, rotary positions, no biases, untied head.
inline json llamaLayoutConfig() {
    json c = layoutConfig(false);
    c["model"].update(json::parse(R"({
      "name": "layout Llama", "family": "llama", "heads": 8, "kv_heads": 4, "ffn_hidden": 88,
      "activation": "swiglu", "norm": "rmsnorm", "positions": "rope", "attention_bias": false,
      "output_bias": false, "mlp_bias": false, "rope_theta": 10000})"));
    return c;
}

inline std::string writeConfig(const TempDir& dir, const std::string& name, const json& j) {
    const auto path = dir / (name + ".json");
    std::ofstream(path) << j.dump();
    return path.string();
}

#ifdef SHARDSCOPE_ENGINE_EXE
// The engine built beside the test, or SHARDSCOPE_TEST_ENGINE's where the test program was moved
// away from its build (scripts/device-bundle.sh carries both to a GPU machine).
inline std::string engineExecutable() {
    const char* moved = std::getenv("SHARDSCOPE_TEST_ENGINE");
    return moved && *moved ? moved : SHARDSCOPE_ENGINE_EXE;
}

inline int runEngine(const std::string& args, const std::filesystem::path& log) {
    const std::string cmd =
        engineExecutable() + " train -q " + args + " > " + log.string() + " 2>&1";
    return std::system(cmd.c_str());
}
#endif

inline std::string readText(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

inline std::vector<json> eventsOf(const std::filesystem::path& run, int rank) {
    std::ifstream in(run / "telemetry" / ("rank-" + std::to_string(rank) + ".jsonl"));
    std::vector<json> out;
    std::string line;
    while (std::getline(in, line))
        out.push_back(json::parse(line));
    return out;
}

inline std::vector<double> lossesOf(const std::filesystem::path& run) {
    std::vector<double> out;
    for (const json& e : eventsOf(run, 0))
        if (e["type"] == "step")
            out.push_back(e["loss"].get<double>());
    return out;
}

inline const json& eventNamed(const std::vector<json>& events, const char* name) {
    for (const json& e : events)
        if (e["type"] == "event" && e["event"] == name)
            return e;
    throw std::runtime_error(std::string("no ") + name + " event");
}

// Model state bytes by category exactly as the planner predicts for the rank's stage, up to
// `padding` bytes more (ZeRO pads each unit it shards to a multiple of dp: under one element
// per unit, 0 where every unit divides evenly); activations within 10%.
inline void expectMemoryAsPlanned(const std::filesystem::path& run, int ranks, double padding = 0) {
    for (int r = 0; r < ranks; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        const std::vector<json> events = eventsOf(run, r);
        const json& predicted = eventNamed(events, "start")["memory_predicted"];
        const json& peak = eventNamed(events, "end")["memory_peak"];
        for (const char* exact : {"parameters", "gradients", "optimizer"}) {
            EXPECT_GE(peak[exact].get<double>(), predicted[exact].get<double>()) << exact;
            EXPECT_LE(peak[exact].get<double>(), predicted[exact].get<double>() + padding) << exact;
        }
        EXPECT_NEAR(peak["activations"].get<double>(), predicted["activations"].get<double>(),
                    0.10 * predicted["activations"].get<double>());
    }
}

struct Layout {
    std::string flags;
    int ranks;
};

#ifdef SHARDSCOPE_ENGINE_EXE
// Runs one process, then each layout over MPI ranks, from the same config; every step's loss
// within `tolerance` (relative) of the one process's, and memory as the planner predicts.
inline void expectLayoutsGiveTheSingleRankLosses(const TempDir& dir, const std::string& name,
                                                 const json& config,
                                                 const std::vector<Layout>& layouts,
                                                 double tolerance, double padding = 0) {
    const std::string path = writeConfig(dir, name, config);
    const auto one = dir / ("one-" + name);
    ASSERT_EQ(runEngine("--config " + path + " --out " + one.string(), dir / "log"), 0)
        << readText(dir / "log");
    const std::vector<double> reference = lossesOf(one);
    ASSERT_EQ(reference.size(), 20u);
    for (const Layout& l : layouts) {
        SCOPED_TRACE(l.flags + " " + name);
        const auto out = dir / ("run-" + std::to_string(&l - layouts.data()) + "-" + name);
        ASSERT_EQ(runEngine("--config " + path + " --out " + out.string() + " " + l.flags +
                                " --ranks " + std::to_string(l.ranks),
                            dir / "log"),
                  0)
            << readText(dir / "log");
        const std::vector<double> losses = lossesOf(out);
        ASSERT_EQ(losses.size(), reference.size());
        for (std::size_t i = 0; i < losses.size(); ++i)
            EXPECT_NEAR(losses[i], reference[i], tolerance * std::fabs(reference[i]))
                << "step " << i + 1;
        expectMemoryAsPlanned(out, l.ranks, padding);
    }
}
#endif

} // namespace shardscope::testing::engine_runs
