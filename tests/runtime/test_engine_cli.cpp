#include "engine/engine_commands.h"
#include "engine_test_support.h"
#include "runtime/devices.h"
#include "runtime/telemetry.h"

#include <arpa/inet.h>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace shardscope {
namespace {

using nlohmann::json;
using testing::TempDir;

struct Outcome {
    int code;
    std::string out, err;
};

Outcome run(std::vector<std::string> args) {
    args.insert(args.begin(), "shardscope-engine");
    std::vector<char*> argv;
    for (std::string& a : args)
        argv.push_back(a.data());
    std::ostringstream out, err;
    const int code = engine_cli::runEngine(int(argv.size()), argv.data(), out, err);
    return {code, out.str(), err.str()};
}

std::string writeConfig(const TempDir& dir, const json& j) {
    static int count = 0;
    const auto path = dir / ("run-" + std::to_string(count++) + ".json");
    std::ofstream(path) << j.dump();
    return path.string();
}

json smallConfig() {
    return json::parse(R"({
      "model": {"name": "cli GPT", "family": "gpt2", "layers": 1, "hidden": 16, "heads": 2,
                "kv_heads": 2, "ffn_hidden": 64, "vocab": 40, "seq_len": 8, "max_positions": 8,
                "tied_embeddings": true, "activation": "gelu", "norm": "layernorm",
                "positions": "learned", "attention_bias": true, "output_bias": true,
                "mlp_bias": true, "dropout": false},
      "parallel": {"micro_batch": 2, "global_batch": 4},
      "train": {"steps": 4, "warmup_steps": 1},
      "engine": {"threads": 1}})");
}

TEST(EngineCli, TrainsFromAConfigAndWritesTheRunDirectory) {
    TempDir dir;
    const Outcome o = run(
        {"train", "--config", writeConfig(dir, smallConfig()), "--out", (dir / "run").string()});
    ASSERT_EQ(o.code, 0) << o.err;
    EXPECT_NE(o.out.find("step      4/4 | loss"), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("tok/s"), std::string::npos);
    EXPECT_NE(o.out.find("MFU"), std::string::npos);
    for (const char* f : {"config.json", "summary.json", "telemetry/rank-0.jsonl",
                          "checkpoints/step-00000004/manifest.json"})
        EXPECT_TRUE(std::filesystem::exists(dir / "run" / f)) << f;
}

std::vector<double> lossesOf(const std::filesystem::path& run) {
    std::ifstream in(run / "telemetry" / "rank-0.jsonl");
    std::vector<double> out;
    std::string line;
    while (std::getline(in, line)) {
        const json e = json::parse(line);
        if (e["type"] == "step")
            out.push_back(e["loss"].get<double>());
    }
    return out;
}

TEST(EngineCli, ResumeContinuesTheRunsOwnConfig) {
    TempDir dir;
    json c = smallConfig();
    c["train"]["steps"] = 6;
    c["train"]["learning_rate"] = 0.002; // differs from the engine default
    const std::string config = writeConfig(dir, c);
    ASSERT_EQ(run({"train", "--config", config, "--out", (dir / "whole").string(), "-q"}).code, 0);
    const std::string part = (dir / "part").string();
    ASSERT_EQ(run({"train", "--config", config, "--out", part, "--stop-after", "2", "-q"}).code, 0);
    Outcome o = run({"train", "--resume", "--out", part, "--stop-after", "2", "-q"});
    ASSERT_EQ(o.code, 0) << o.err;
    // A checkpoint path, with the '/' tab completion adds, names its run.
    o = run({"train", "--resume", part + "/checkpoints/step-00000004/", "-q"});
    ASSERT_EQ(o.code, 0) << o.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "part" / "checkpoints" / "telemetry"));
    EXPECT_EQ(lossesOf(dir / "part"), lossesOf(dir / "whole"));
}

// A manifest is a file anyone can edit: the counts a resume reads from its meta beside the
// checked config (threads, optimizer steps) are refused by name when they are not whole numbers
// in range; they reached the user as nlohmann's type_error with exit code 1.
TEST(EngineCli, AnEditedCheckpointMetaIsRefusedNamingTheField) {
    TempDir dir;
    json c = smallConfig();
    c["train"]["steps"] = 4;
    const std::string config = writeConfig(dir, c);
    const std::string runDir = (dir / "run").string();
    ASSERT_EQ(run({"train", "--config", config, "--out", runDir, "--stop-after", "2", "-q"}).code,
              0);
    const std::filesystem::path manifest =
        dir / "run" / "checkpoints" / "step-00000002" / "manifest.json";
    const json original = json::parse(std::ifstream(manifest));
    ASSERT_TRUE(original["meta"].contains("threads"));
    ASSERT_TRUE(original["meta"].contains("optimizer_steps"));
    for (const auto& [field, value] : {std::pair<std::string, json>{"threads", "four"},
                                       {"optimizer_steps", -3},
                                       {"optimizer_steps", 1e300}}) {
        json edited = original;
        edited["meta"][field] = value;
        std::ofstream(manifest, std::ios::trunc) << edited.dump(2);
        const Outcome o = run({"train", "--resume", "--out", runDir, "-q"});
        EXPECT_EQ(o.code, 4) << field << " = " << value.dump() << ": " << o.err;
        EXPECT_NE(o.err.find("meta." + field), std::string::npos) << o.err;
        EXPECT_NE(o.err.find("--resume"), std::string::npos) << o.err;
        EXPECT_EQ(o.err.find("json.exception"), std::string::npos) << o.err;
    }
    // A checkpoint written before a layout setting existed has no key for it: it reads as the
    // default, and the run resumes.
    json older = original;
    ASSERT_TRUE(older["meta"]["parallel"].contains("embedding_in_pipeline_split"));
    for (const char* key : {"embedding_in_pipeline_split", "loss_in_pipeline_split",
                            "overlap_grad_reduce", "tp_comm_overlap"})
        older["meta"]["parallel"].erase(key);
    std::ofstream(manifest, std::ios::trunc) << older.dump(2);
    const Outcome resumed = run({"train", "--resume", "--out", runDir, "-q"});
    EXPECT_EQ(resumed.code, 0) << resumed.err;
}

// The default model, 200 steps, in fp32 and in bf16 (--precision bf16). bf16 holds about 3
// significant digits (relative rounding up to 2^-9 = 0.2% per value) in every weight, activation
// and GEMM operand; the fp32 master weights keep the small updates, so the two curves stay
// together. Tolerance: 1% of the fp32 loss at every step and on the final validation loss
// (measured on the reference machine: at most 0.13%, 0.03% at the end).
TEST(EngineCli, Bf16TracksFp32Over200StepsOfTheDefaultModel) {
    TempDir dir;
    for (const char* precision : {"fp32", "bf16"}) { // the executable sets up its thread pools
        const std::string cmd = std::string(SHARDSCOPE_ENGINE_EXE) + " train -q --threads 2 " +
                                "--precision " + precision + " --out " + (dir / precision).string();
        ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
    const std::vector<double> fp32 = lossesOf(dir / "fp32"), bf16 = lossesOf(dir / "bf16");
    ASSERT_EQ(fp32.size(), 200u);
    ASSERT_EQ(bf16.size(), 200u);
    for (std::size_t i = 0; i < fp32.size(); ++i)
        EXPECT_NEAR(bf16[i] / fp32[i], 1.0, 0.01) << "step " << i + 1;
    EXPECT_NE(bf16, fp32);
    auto valLoss = [&](const char* precision) {
        std::ifstream in(dir / precision / "summary.json");
        return json::parse(in)["final_val_loss"].get<double>();
    };
    EXPECT_NEAR(valLoss("bf16") / valLoss("fp32"), 1.0, 0.01);
    EXPECT_LT(bf16.back(), bf16.front() - 2.0); // it learned: 5.56 -> 1.71 nats measured
}

// dp replicas over MPI processes (mpirun, started by --ranks) against one process with the same
// global batch: the documented fp32 tolerance is 1e-5 relative per step's loss over 20 steps.
TEST(EngineCli, DataParallelRanksGiveTheSingleRankLosses) {
    TempDir dir;
    json c = smallConfig();
    c["train"]["steps"] = 20;
    c["parallel"]["micro_batch"] = 1;
    c["parallel"]["global_batch"] = 8;
    const std::string config = writeConfig(dir, c);
    ASSERT_EQ(run({"train", "--config", config, "--out", (dir / "one").string(), "-q"}).code, 0);
    const std::vector<double> one = lossesOf(dir / "one");
    ASSERT_EQ(one.size(), 20u);
    // dp 2 and 4 with one bucket; dp 2 with buckets of a few layers, started during a
    // zero-bubble backward (B then W).
    const std::vector<std::pair<int, std::string>> variants = {
        {2, ""}, {4, ""}, {2, " --bucket-mb 0.05 --schedule zero-bubble"}};
    for (const auto& [dp, extra] : variants) {
        const auto out = dir / ("dp" + std::to_string(dp) + (extra.empty() ? "" : "-buckets"));
        const std::string cmd = std::string(SHARDSCOPE_ENGINE_EXE) + " train -q --config " +
                                config + " --out " + out.string() + " --threads 1 --dp " +
                                std::to_string(dp) + " --ranks " + std::to_string(dp) + extra +
                                " > " + (dir / "log").string() + " 2>&1";
        ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
        for (int r = 0; r < dp; ++r) // every replica saw the same global loss
            EXPECT_TRUE(std::filesystem::exists(out / "telemetry" /
                                                ("rank-" + std::to_string(r) + ".jsonl")));
        const std::vector<double> many = lossesOf(out);
        ASSERT_EQ(many.size(), one.size()) << "dp " << dp << extra;
        // The reduction alone was timed once; each step says how much of it the backward hid.
        std::ifstream events(out / "telemetry" / "rank-0.jsonl");
        double standalone = 0;
        int fractions = 0;
        for (std::string line; std::getline(events, line);) {
            const json e = json::parse(line);
            if (e["type"] == "event" && e["event"] == "calibration")
                standalone = e["dp_reduction_standalone"].get<double>();
            if (e["type"] == "step") {
                const double hidden = e["dp_hidden_fraction"].get<double>();
                EXPECT_TRUE(hidden >= 0.0 && hidden <= 1.0) << hidden;
                ++fractions;
            }
        }
        EXPECT_GT(standalone, 0.0);
        EXPECT_EQ(fractions, 20);
        // mpirun starts every rank on this host: each has its own local rank, on the CPU.
        for (int r = 0; r < dp; ++r) {
            std::ifstream rank(out / "telemetry" / ("rank-" + std::to_string(r) + ".jsonl"));
            std::string first;
            std::getline(rank, first);
            const json device = json::parse(first)["device"];
            EXPECT_EQ(device["kind"], "cpu");
            EXPECT_EQ(device["local_rank"], r);
            EXPECT_EQ(device["local_ranks"], dp);
        }
        for (std::size_t i = 0; i < one.size(); ++i)
            EXPECT_NEAR(many[i], one[i], 1e-5 * std::fabs(one[i]))
                << "dp " << dp << " step " << i + 1;
    }
}

TEST(EngineCli, FlagsOverrideTheConfigFile) {
    TempDir dir;
    const Outcome o = run({"train", "--config", writeConfig(dir, smallConfig()), "--steps", "9",
                           "--lr", "0.01", "--recompute", "full", "--print-config"});
    ASSERT_EQ(o.code, 0) << o.err;
    const json c = json::parse(o.out);
    EXPECT_EQ(c["train"]["steps"], 9);
    EXPECT_EQ(c["train"]["learning_rate"], 0.01);
    EXPECT_EQ(c["parallel"]["recompute"], "full");
}

// A Hugging Face config.json trains its architecture, resized for a CPU: Llama 3.1's RMSNorm,
// rotary positions with its llama3 scaling and theta, grouped-query heads (here 4 over 2) and
// SwiGLU. The run config names it too, with fields overriding it.
TEST(EngineCli, AHuggingFaceConfigTrainsItsArchitectureResized) {
    TempDir dir;
    const std::string hf = std::string(SHARDSCOPE_TEST_DATA) + "/hf/llama-3.1-8b.json";
    const std::vector<std::string> resize = {
        "--layers",   "2",  "--hidden",      "32", "--heads",        "4",
        "--kv-heads", "2",  "--vocab",       "64", "--ffn-hidden",   "96",
        "--seq-len",  "16", "--micro-batch", "2",  "--global-batch", "4"};
    std::vector<std::string> args = {"train", "--hf-config", hf, "--print-config"};
    args.insert(args.end(), resize.begin(), resize.end());
    Outcome o = run(args);
    ASSERT_EQ(o.code, 0) << o.err;
    const json m = json::parse(o.out)["model"];
    EXPECT_EQ(m["norm"], "rmsnorm");
    EXPECT_EQ(m["activation"], "swiglu");
    EXPECT_EQ(m["positions"], "rope");
    EXPECT_EQ(m["rope_theta"], 500000.0);
    EXPECT_EQ(m["rope_scaling"]["type"], "llama3");
    EXPECT_EQ(m["kv_heads"], 2);
    EXPECT_EQ(m["layers"], 2);
    EXPECT_NE(m["name"].get<std::string>().find("resized: layers 2, hidden 32"), std::string::npos)
        << m["name"];

    args = {"train",
            "--hf-config",
            hf,
            "--steps",
            "3",
            "--warmup-steps",
            "1",
            "--threads",
            "1",
            "--out",
            (dir / "llama").string()};
    args.insert(args.end(), resize.begin(), resize.end());
    o = run(args);
    ASSERT_EQ(o.code, 0) << o.err;
    EXPECT_NE(o.out.find("step      3/3 | loss"), std::string::npos) << o.out;
    const std::vector<double> losses = lossesOf(dir / "llama");
    ASSERT_EQ(losses.size(), 3u);
    EXPECT_NEAR(losses.front(), std::log(64.0), 0.3); // untrained: close to uniform

    // The same from a run config: model.hf_config, resized by the object's other fields.
    json c = smallConfig();
    c["model"] = {{"hf_config", hf}, {"layers", 2},      {"hidden", 32},
                  {"heads", 4},      {"kv_heads", 2},    {"head_dim", 0},
                  {"vocab", 64},     {"ffn_hidden", 96}, {"seq_len", 16}};
    o = run({"train", "--config", writeConfig(dir, c), "--print-config"});
    ASSERT_EQ(o.code, 0) << o.err;
    EXPECT_EQ(json::parse(o.out)["model"]["rope_scaling"]["type"], "llama3");

    // A path that is no file (a device that never ends, a pipe that blocks) is refused.
    c["model"] = {{"hf_config", "/dev/zero"}};
    o = run({"train", "--config", writeConfig(dir, c), "--print-config"});
    EXPECT_EQ(o.code, 2);
    EXPECT_NE(o.err.find("model.hf_config \"/dev/zero\" is not a file"), std::string::npos)
        << o.err;

    // What the engine cannot build is refused with the reason, exit 2.
    o = run({"train", "--hf-config", std::string(SHARDSCOPE_TEST_DATA) + "/hf/deepseek-v2.5.json",
             "--out", (dir / "never").string()});
    EXPECT_EQ(o.code, 2);
    EXPECT_NE(o.err.find("latent attention"), std::string::npos) << o.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "never" / "config.json"));
}

TEST(EngineCli, BadInputExitsTwoWithTheReason) {
    TempDir dir;
    json tp = smallConfig();
    tp["parallel"]["cp"] = 3; // 2 x cp = 6 chunks do not cut seq_len 8
    json typo = smallConfig();
    typo["train"]["stpes"] = 3;
    json vocab = smallConfig();
    std::ofstream(dir / "bytes.txt") << std::string(200, 'x');
    json tpu = smallConfig();
    tpu["engine"]["device"] = "tpu";
    struct Case {
        std::vector<std::string> args;
        std::string expect;
    };
    const auto deep = dir / "deep.json"; // 80,000 levels overflowed the stack
    std::ofstream(deep) << "{\"model\": {\"hidden\": " << std::string(80000, '[')
                        << std::string(80000, ']') << "}}";
    const auto typed = dir / "typed.json"; // once reported as [json.exception.type_error.302]
    std::ofstream(typed) << R"({"engine": {"threads": "many"}})";
    std::vector<Case> cases = {
        {{"train", "--config", typed.string(), "--out", (dir / "n").string()},
         "engine: threads: expected a whole number, got \"many\""},
        {{"train", "--config", deep.string(), "--out", (dir / "k").string()}, "levels deep"},
        // 100,000 threads hung the engine once OpenMP ran out of memory making them.
        {{"train", "--threads", "100000", "--out", (dir / "l").string()}, "at most 1024"},
        // About 400 GiB of activations: refused up front with the prediction, not by the OOM
        // killer.
        {{"train", "--micro-batch", "100000", "--global-batch", "100000", "--out",
          (dir / "m").string()},
         "available"},
        {{"train", "--steps", "-3"}, "--steps"},
        {{"train", "--config", (dir / "missing.json").string()}, "missing.json"},
        {{"train", "--config", writeConfig(dir, tp), "--out", (dir / "a").string()},
         "context parallelism"},
        {{"train", "--config", writeConfig(dir, typo)}, "stpes"},
        {{"train", "--config", writeConfig(dir, vocab), "--data", (dir / "bytes.txt").string(),
          "--out", (dir / "b").string()},
         "vocab"},
        {{"train", "--schedule", "2f2b", "--out", (dir / "c").string()}, "2f2b"},
        {{"train", "--telemetry", "udp://x:1", "--out", (dir / "d").string(), "--steps", "1",
          "--warmup-steps", "0"},
         "tcp://"},
        {{"train", "--steps", "5", "--out", (dir / "e").string()}, "warmup_steps (20)"},
        // Said once, before mpirun starts any rank.
        {{"train", "--dp", "2", "--ranks", "4", "--out", (dir / "f").string()},
         "needs 2 ranks, not --ranks 4"},
        {{"train", "--dp", "2", "--ranks", "2", "--steps", "5", "--out", (dir / "g").string()},
         "warmup_steps (20)"},
        {{"train", "--config", writeConfig(dir, tpu), "--out", (dir / "h").string()},
         "device is \"tpu\": use \"cpu\" or \"cuda\""},
        {{"train", "--device", "gpu", "--out", (dir / "i").string()}, "--device"},
    };
    // A raw filesystem error with exit 1, once.
    cases.push_back(
        {{"dump", "--out", "/proc/shardscope-dump"}, "cannot create the dump directory"});
    if (queryDevices().devices.empty()) // said by the launcher, before any rank starts
        cases.push_back({{"train", "--device", "cuda", "--dp", "2", "--ranks", "2", "--out",
                          (dir / "j").string()},
                         "run with --device cpu"});
    for (const Case& c : cases) {
        const Outcome o = run(c.args);
        EXPECT_EQ(o.code, 2) << c.args[1] << ": " << o.out << o.err;
        EXPECT_NE(o.err.find(c.expect), std::string::npos) << o.err;
    }
    // Refused input leaves no run behind, so the corrected command just works.
    for (const char* d : {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n"})
        EXPECT_FALSE(std::filesystem::exists(dir / d / "config.json")) << d;
}

// One rank on the GPU: it trains where the host has one (its start event names the GPU), and
// otherwise is refused with the runtime's reason and the way out, leaving no run behind.
TEST(EngineCli, DeviceCudaTrainsOnTheGpuOrSaysWhyNot) {
    TempDir dir;
    const auto out = dir / "run";
    const Outcome o = run({"train", "--device", "cuda", "--steps", "3", "--warmup-steps", "0",
                           "--out", out.string()});
    const DeviceReport gpus = queryDevices();
    if (gpus.devices.empty()) {
        EXPECT_EQ(o.code, 2) << o.out << o.err;
        EXPECT_NE(o.err.find("--device cpu"), std::string::npos) << o.err;
        EXPECT_NE(o.err.find(gpus.builtWithCuda ? gpus.reason : "built without CUDA"),
                  std::string::npos)
            << o.err;
        EXPECT_FALSE(std::filesystem::exists(out / "config.json"));
        return;
    }
    ASSERT_EQ(o.code, 0) << o.out << o.err;
    std::ifstream in(out / "telemetry" / "rank-0.jsonl");
    std::string line;
    bool named = false;
    while (std::getline(in, line)) {
        const json e = json::parse(line);
        if (e["type"] == "event" && e["event"] == "start") {
            EXPECT_EQ(e["device"]["kind"], "cuda");
            EXPECT_EQ(e["device"]["name"], gpus.devices[0].name);
            named = true;
        }
    }
    EXPECT_TRUE(named) << "no start event";
}

TEST(EngineCli, AVanishingCollectorNeverStopsTraining) {
    TempDir dir;
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    socklen_t len = sizeof addr;
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    ::listen(listener, 1);
    std::string received;
    std::thread collector([&] { // reads a little, then goes away
        const int s = ::accept(listener, nullptr, nullptr);
        char buf[512];
        const ssize_t n = ::recv(s, buf, sizeof buf, 0);
        if (n > 0)
            received.assign(buf, std::size_t(n));
        ::close(s);
        ::close(listener);
    });
    const std::string url = "tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
    json c = smallConfig();
    c["train"]["steps"] = 6;
    ::setenv("SHARDSCOPE_TELEMETRY_TOKEN", "t0ken", 1); // as the app passes it
    const Outcome o = run({"train", "--config", writeConfig(dir, c), "--out",
                           (dir / "run").string(), "--telemetry", url, "--quiet"});
    ::unsetenv("SHARDSCOPE_TELEMETRY_TOKEN");
    collector.join();
    EXPECT_EQ(o.code, 0) << o.err;
    // The connection opens with the hello, which carries the token from the environment.
    const json hello = json::parse(received.substr(0, received.find('\n')));
    EXPECT_EQ(hello["type"], "hello");
    EXPECT_EQ(hello["token"], "t0ken");
    EXPECT_EQ(hello["pid"], ::getpid());
    std::ifstream in(dir / "run" / "telemetry" / "rank-0.jsonl");
    std::string line, last;
    int lines = 0;
    while (std::getline(in, line))
        ++lines, last = line;
    const json end = json::parse(last);
    EXPECT_EQ(end["event"], "end");
    EXPECT_EQ(end["telemetry"]["written"], lines);
}

TEST(EngineCli, VersionNamesTheBackendAndTheTelemetrySchema) {
    const Outcome o = run({"version", "--json"});
    ASSERT_EQ(o.code, 0) << o.err;
    const json v = json::parse(o.out);
    EXPECT_EQ(v["name"], "shardscope-engine");
    EXPECT_TRUE(
        std::regex_match(v["version"].get<std::string>(), std::regex("[0-9]+\\.[0-9]+\\.[0-9]+")))
        << v;
    // cuda where this build has the CUDA backend (its plugin), whether or not a GPU is here.
    EXPECT_EQ(v["backends"],
              queryDevices().builtWithCuda ? json::array({"cpu", "cuda"}) : json::array({"cpu"}));
    EXPECT_EQ(v["telemetry_schema"], kTelemetrySchemaVersion);
    EXPECT_NE(v["mpi"].get<std::string>().find("MPI"), std::string::npos) << v;
    const Outcome text = run({"version"});
    EXPECT_EQ(text.out.rfind("shardscope-engine " + v["version"].get<std::string>(), 0), 0u)
        << text.out;
}

TEST(EngineCli, CheckSaysWhatWouldRunAndCreatesNothing) {
    TempDir dir;
    const std::string config = writeConfig(dir, smallConfig());
    const auto out = dir / "never";
    Outcome o = run({"train", "--config", config, "--out", out.string(), "--dp", "2", "--ranks",
                     "2", "--check"});
    ASSERT_EQ(o.code, 0) << o.err;
    EXPECT_EQ(o.out.rfind("ok: cli GPT, dp2", 0), 0u) << o.out;
    EXPECT_NE(o.out.find("2 ranks, 4 steps"), std::string::npos) << o.out;
    // ZeRO-1 as a planner session writes it (parameter gathers overlapped): the engine says it
    // gathers after the optimizer step, and what it will run.
    o = run({"train", "--config", config, "--out", out.string(), "--dp", "2", "--zero", "1",
             "--check"});
    ASSERT_EQ(o.code, 0) << o.err;
    EXPECT_NE(o.out.find("recompute-none no-gather-overlap, 2 ranks"), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("note: overlap as the engine runs it"), std::string::npos) << o.out;
    o = run({"train", "--config", config, "--out", out.string(), "--dp", "2", "--ranks", "4",
             "--check"});
    EXPECT_EQ(o.code, 2);
    EXPECT_NE(o.err.find("needs 2 ranks, not --ranks 4"), std::string::npos) << o.err;
    o = run({"train", "--config", config, "--out", out.string(), "--tp", "3", "--check"});
    EXPECT_EQ(o.code, 2);
    EXPECT_NE(o.err.find("tp"), std::string::npos) << o.err;
    EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(EngineCli, TheStartEventCarriesThePlannersPredictionForThisMachine) {
    TempDir dir;
    ASSERT_EQ(run({"train", "--config", writeConfig(dir, smallConfig()), "--out",
                   (dir / "run").string(), "-q"})
                  .code,
              0);
    std::ifstream in(dir / "run" / "telemetry" / "rank-0.jsonl");
    std::string line;
    std::getline(in, line);
    const json start = json::parse(line);
    ASSERT_EQ(start["event"], "start");
    const json& p = start["prediction"];
    EXPECT_EQ(p["cluster"]["gpu"]["id"], "cpu");
    // Each rank is a "GPU" with the peak MFU is measured against.
    EXPECT_NEAR(p["cluster"]["gpu"]["peak_tflops"]["fp32"].get<double>() * 1e12,
                start["peak_flops"].get<double>(), 1e3);
    for (const char* key : {"step_time", "tokens_per_s", "mfu"})
        EXPECT_GT(p[key].get<double>(), 0) << key;
    // Tokens per step over the predicted step time is the predicted throughput.
    EXPECT_NEAR(p["tokens_per_s"].get<double>() * p["step_time"].get<double>(), 4 * 8, 1e-6);
    EXPECT_EQ(p["bubble_fraction"], 0.0); // one stage
    EXPECT_EQ(p["memory"]["parameters"], start["memory_predicted"]["parameters"]);
}

TEST(EngineCli, SigintFinishesTheStepCheckpointsAndExitsCleanly) {
    TempDir dir;
    json c = smallConfig();
    c["train"]["steps"] = 100000;
    const std::string config = writeConfig(dir, c), out = (dir / "run").string();
    int pipeFd[2];
    ASSERT_EQ(::pipe(pipeFd), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::dup2(pipeFd[1], 1);
        ::close(pipeFd[0]);
        ::execl(SHARDSCOPE_ENGINE_EXE, SHARDSCOPE_ENGINE_EXE, "train", "--config", config.c_str(),
                "--out", out.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    ::close(pipeFd[1]);
    std::string seen;
    char buf[256];
    while (seen.find("step ") == std::string::npos) { // wait for the first progress line
        const ssize_t n = ::read(pipeFd[0], buf, sizeof buf);
        if (n <= 0)
            break;
        seen.append(buf, std::size_t(n));
    }
    ::kill(pid, SIGINT);
    while (::read(pipeFd[0], buf, sizeof buf) > 0) {
    }
    ::close(pipeFd[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal";
    EXPECT_EQ(WEXITSTATUS(status), 0);
    std::ifstream s(dir / "run" / "summary.json");
    const json summary = json::parse(s);
    EXPECT_EQ(summary["status"], "interrupted");
    EXPECT_FALSE(summary["last_checkpoint"].get<std::string>().empty());
    // The executable settled its thread pools before OpenMP and OpenBLAS loaded.
    std::ifstream events(dir / "run" / "telemetry" / "rank-0.jsonl");
    std::string first;
    std::getline(events, first);
    const json start = json::parse(first);
    EXPECT_EQ(start["thread_pools"]["OMP_WAIT_POLICY"], "passive") << first.substr(0, 200);
}

} // namespace
} // namespace shardscope
