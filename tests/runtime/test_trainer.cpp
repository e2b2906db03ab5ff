#include "core/error.h"
#include "deferred_device.h"
#include "engine_test_support.h"
#include "runtime/checkpoint.h"
#include "runtime/stop_signal.h"
#include "runtime/telemetry.h"
#include "runtime/trainer.h"

#include <csignal>
#include <fstream>
#include <functional>
#include <gtest/gtest.h>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <streambuf>
#include <utility>

namespace shardscope {
namespace {

// A single process writes one shard: pipeline stage 0, tensor rank 0, replica 0.
constexpr const char* kShard = "pp0-tp0-dp0.";

using nlohmann::json;
using testing::TempDir;
using testing::tinyRun;

std::vector<json> events(const std::filesystem::path& run) {
    std::ifstream in(run / "telemetry" / "rank-0.jsonl");
    std::vector<json> out;
    std::string line;
    while (std::getline(in, line))
        out.push_back(json::parse(line));
    return out;
}

json readJson(const std::filesystem::path& p) {
    std::ifstream in(p);
    return json::parse(in);
}

TEST(Trainer, LearnsTheSyntheticSourceTowardsItsFloor) {
    TempDir dir;
    RunConfig c = tinyRun(dir / "run", 60);
    c.train.learningRate = 1e-2;
    c.train.minLearningRate = 1e-3;
    c.train.warmupSteps = 5;
    std::ostringstream log;
    const TrainResult r = train(c, log);
    ASSERT_EQ(r.status, RunStatus::Completed) << r.message;
    ASSERT_EQ(r.steps.size(), 60u);
    const json summary = readJson(dir / "run" / "summary.json");
    const double floor = summary["loss_floor"].get<double>();
    const double first = r.steps.front().loss, last = r.steps.back().loss;
    EXPECT_NEAR(first, std::log(32.0), 0.3); // an untrained model is close to uniform
    EXPECT_LT(last, first - 0.5 * (first - floor)) << "first " << first << " floor " << floor;
    EXPECT_GT(last, floor - 0.05); // nothing beats the entropy rate
    EXPECT_TRUE(summary["final_val_loss"].is_number());
}

TEST(Trainer, WritesTelemetryForEveryOperatorGroup) {
    TempDir dir;
    RunConfig c = tinyRun(dir / "run", 3);
    c.train.evalEvery = 2;
    std::ostringstream log;
    ASSERT_EQ(train(c, log).status, RunStatus::Completed);
    const std::vector<json> ev = events(dir / "run");
    ASSERT_FALSE(ev.empty());
    EXPECT_EQ(ev.front()["event"], "start");
    EXPECT_EQ(ev.back()["event"], "end");
    int forwardLayer = 0, backwardLayer = 0, optimizer = 0, data = 0, steps = 0, evals = 0;
    double lastT = -1;
    for (const json& e : ev) {
        EXPECT_EQ(e["v"], kTelemetrySchemaVersion);
        EXPECT_EQ(e["rank"], 0);
        EXPECT_GE(e["t"].get<double>(), lastT);
        lastT = e["t"].get<double>();
        if (e["type"] == "span") {
            EXPECT_LE(e["start"].get<double>(), e["end"].get<double>());
            forwardLayer += e["kind"] == "forward" && e["block"] == "layer";
            backwardLayer += e["kind"] == "backward" && e["block"] == "layer";
            optimizer += e["kind"] == "optimizer";
            data += e["kind"] == "data";
        } else if (e["type"] == "step") {
            ++steps;
            for (const char* k : {"loss", "grad_norm", "lr", "tokens", "step_time", "tokens_per_s",
                                  "flops_per_s", "mfu"})
                EXPECT_TRUE(e[k].is_number()) << k;
            EXPECT_GT(e["memory"]["parameters"].get<double>(), 0);
            EXPECT_GE(e["memory_peak"]["activations"].get<double>(),
                      e["memory"]["activations"].get<double>());
        } else if (e["type"] == "event" && e["event"] == "eval") {
            ++evals;
        }
    }
    const int m = c.parallel.microbatches();
    EXPECT_EQ(forwardLayer, 3 * m * c.model.layers);
    EXPECT_EQ(backwardLayer, 3 * m * c.model.layers);
    EXPECT_EQ(data, 3 * m);
    EXPECT_EQ(optimizer, 3);
    EXPECT_EQ(steps, 3);
    EXPECT_EQ(evals, 2); // at step 2 and at the end
}

// A device whose work runs late (events complete only when polled often enough or waited for)
// trains exactly as the CPU backend does: every loss, gradient norm and final weight is the same
// bit for bit, so the runtime reads nothing before the work that writes it has run. Spans are
// timed by the device's events: each starts no later than it ends, in enqueue order.
TEST(Trainer, ADeviceThatRunsWorkLateTrainsBitIdentically) {
    TempDir dir;
    RunConfig c = tinyRun(dir / "cpu", 4);
    c.train.evalEvery = 2;
    c.train.checkpointEvery = 4;
    std::ostringstream log;
    const TrainResult cpu = train(c, log);
    ASSERT_EQ(cpu.status, RunStatus::Completed) << log.str();
    for (int patience : {1, 3, 1000000}) {
        SCOPED_TRACE("an event completes on one poll in " + std::to_string(patience));
        RunConfig d = c;
        d.engine.runDir = (dir / ("late-" + std::to_string(patience))).string();
        testing::DeferredOps late(2, patience);
        const TrainResult r = train(d, log, nullptr, &late);
        ASSERT_EQ(r.status, RunStatus::Completed) << log.str();
        ASSERT_EQ(r.steps.size(), cpu.steps.size());
        for (std::size_t i = 0; i < r.steps.size(); ++i) {
            EXPECT_EQ(r.steps[i].loss, cpu.steps[i].loss) << "step " << i;
            EXPECT_EQ(r.steps[i].gradNorm, cpu.steps[i].gradNorm) << "step " << i;
        }
        EXPECT_EQ(r.finalValLoss, cpu.finalValLoss);
        const LoadedCheckpoint want =
            CheckpointStore::load(dir / "cpu" / "checkpoints" / "step-00000004");
        const LoadedCheckpoint got = CheckpointStore::load(std::filesystem::path(d.engine.runDir) /
                                                           "checkpoints" / "step-00000004");
        for (const char* blob : {"params.f32", "adam_m.f32", "adam_v.f32"}) {
            const std::string name = std::string(kShard) + blob;
            EXPECT_TRUE(want.blobs.at(name) == got.blobs.at(name)) << name;
        }
        EXPECT_EQ(late.compute().pending(), 0u);
        int layerSpans = 0;
        for (const json& e : events(d.engine.runDir)) {
            if (e["type"] != "span")
                continue;
            EXPECT_LE(e["start"].get<double>(), e["end"].get<double>()) << e.dump();
            layerSpans += e["block"] == "layer";
        }
        EXPECT_EQ(layerSpans, 2 * 4 * c.parallel.microbatches() * c.model.layers);
    }
}

TEST(Trainer, OptimizerAndModelMemoryEqualThePlanExactly) {
    TempDir dir;
    RunConfig c = tinyRun(dir / "run", 1);
    std::ostringstream log;
    ASSERT_EQ(train(c, log).status, RunStatus::Completed);
    const json s = readJson(dir / "run" / "summary.json");
    for (const char* k : {"parameters", "gradients", "optimizer"})
        EXPECT_EQ(s["memory_peak"][k].get<double>(), s["memory_predicted"][k].get<double>()) << k;
    EXPECT_NEAR(s["memory_peak"]["activations"].get<double>() /
                    s["memory_predicted"]["activations"].get<double>(),
                1.0, 0.1);
}

// Mixed precision as the planner counts it: bf16 weights (2 bytes a parameter), fp32 or bf16
// gradients (4 or 2), fp32 master weights and AdamW moments (12), bf16 activations.
TEST(Trainer, Bf16MemoryEqualsThePlanExactly) {
    for (const bool fp32Grads : {true, false}) {
        SCOPED_TRACE(fp32Grads ? "bf16" : "bf16-bf16grads");
        TempDir dir;
        RunConfig c = tinyRun(dir / "run", 1);
        c.parallel.precision = PrecisionPolicy::bf16Mixed(fp32Grads);
        std::ostringstream log;
        const TrainResult r = train(c, log);
        ASSERT_EQ(r.status, RunStatus::Completed) << r.message;
        const json s = readJson(dir / "run" / "summary.json");
        const double P = s["parameters"].get<double>();
        EXPECT_EQ(s["memory_peak"]["parameters"].get<double>(), 2 * P);
        EXPECT_EQ(s["memory_peak"]["gradients"].get<double>(), (fp32Grads ? 4 : 2) * P);
        EXPECT_EQ(s["memory_peak"]["optimizer"].get<double>(), 12 * P);
        for (const char* k : {"parameters", "gradients", "optimizer"})
            EXPECT_EQ(s["memory_peak"][k].get<double>(), s["memory_predicted"][k].get<double>())
                << k;
        EXPECT_NEAR(s["memory_peak"]["activations"].get<double>() /
                        s["memory_predicted"]["activations"].get<double>(),
                    1.0, 0.1);
    }
}

// bf16 keeps about 3 significant digits (8-bit mantissa: relative rounding up to 2^-9 = 0.2%)
// in every weight, activation and GEMM operand, and the differences compound over steps; the
// fp32 master weights keep small updates from vanishing. So the bf16 run follows the fp32 run's
// loss curve within 2% at every step (measured here: under 0.5%), and both learn.
TEST(Trainer, Bf16FollowsTheFp32LossCurve) {
    TempDir dir;
    std::ostringstream log;
    RunConfig c = tinyRun(dir / "fp32", 40);
    c.train.learningRate = 1e-2;
    c.train.minLearningRate = 1e-3;
    c.train.warmupSteps = 5;
    const TrainResult fp32 = train(c, log);
    c.engine.runDir = (dir / "bf16").string();
    c.parallel.precision = PrecisionPolicy::bf16Mixed();
    const TrainResult bf16 = train(c, log);
    ASSERT_EQ(bf16.status, RunStatus::Completed) << bf16.message;
    ASSERT_EQ(bf16.steps.size(), fp32.steps.size());
    bool anyDifference = false;
    for (std::size_t i = 0; i < fp32.steps.size(); ++i) {
        const double a = fp32.steps[i].loss, b = bf16.steps[i].loss;
        EXPECT_NEAR(b / a, 1.0, 0.02) << "step " << i + 1;
        anyDifference = anyDifference || a != b;
    }
    EXPECT_TRUE(anyDifference) << "the bf16 run computed in fp32";
    EXPECT_LT(bf16.steps.back().loss, bf16.steps.front().loss - 0.3);
}

// The checkpoint keeps the fp32 master weights, so a resumed bf16 run continues bit for bit.
TEST(Trainer, Bf16ResumesBitIdentically) {
    TempDir dir;
    std::ostringstream log;
    RunConfig whole = tinyRun(dir / "whole", 6);
    whole.parallel.precision = PrecisionPolicy::bf16Mixed();
    const TrainResult a = train(whole, log);
    ASSERT_EQ(a.steps.size(), 6u) << a.message;
    RunConfig part = whole;
    part.engine.runDir = (dir / "part").string();
    part.engine.stopAfter = 3;
    ASSERT_EQ(train(part, log).status, RunStatus::Interrupted);
    part.engine.stopAfter = 0;
    part.engine.resume = true;
    const TrainResult rest = train(part, log);
    ASSERT_EQ(rest.steps.size(), 3u) << rest.message;
    for (std::size_t i = 0; i < 3; ++i)
        EXPECT_EQ(rest.steps[i].loss, a.steps[i + 3].loss) << "step " << i + 4;
}

TEST(Trainer, ResumingContinuesBitIdentically) {
    TempDir dir;
    std::ostringstream log;
    RunConfig whole = tinyRun(dir / "whole", 8);
    whole.parallel.schedule = PipelineSchedule::ZeroBubble;
    whole.engine.threads = 3; // an odd thread count: reductions must not depend on timing
    const TrainResult a = train(whole, log);
    ASSERT_EQ(a.steps.size(), 8u);

    RunConfig part = whole;
    part.engine.runDir = (dir / "part").string();
    part.engine.stopAfter = 3;
    part.train.checkpointEvery = 2;
    const TrainResult b = train(part, log);
    EXPECT_EQ(b.status, RunStatus::Interrupted);
    EXPECT_EQ(b.stepsCompleted, 3);

    part.engine.stopAfter = 0;
    part.engine.resume = true;
    const TrainResult rest = train(part, log);
    ASSERT_EQ(rest.status, RunStatus::Completed) << rest.message;
    EXPECT_EQ(rest.firstStep, 3);
    ASSERT_EQ(rest.steps.size(), 5u);
    for (std::size_t i = 0; i < 5; ++i)
        EXPECT_EQ(rest.steps[i].loss, a.steps[i + 3].loss) << "step " << i + 4;
    for (std::size_t i = 0; i < 3; ++i)
        EXPECT_EQ(b.steps[i].loss, a.steps[i].loss);
    // The same weights and optimizer state at the end, byte for byte.
    const LoadedCheckpoint endWhole =
        CheckpointStore::load(dir / "whole" / "checkpoints" / "step-00000008");
    const LoadedCheckpoint endPart =
        CheckpointStore::load(dir / "part" / "checkpoints" / "step-00000008");
    for (const char* blob : {"params.f32", "adam_m.f32", "adam_v.f32"}) {
        const std::string name = std::string(kShard) + blob;
        EXPECT_TRUE(endWhole.blobs.at(name) == endPart.blobs.at(name)) << name;
    }
    // One telemetry file holds both invocations.
    int starts = 0;
    for (const json& e : events(dir / "part"))
        starts += e["type"] == "event" && e["event"] == "start";
    EXPECT_EQ(starts, 2);
}

TEST(Trainer, RefusesToResumeWithADifferentTrajectory) {
    TempDir dir;
    std::ostringstream log;
    RunConfig c = tinyRun(dir / "run", 6);
    c.engine.stopAfter = 2;
    train(c, log);
    auto configText = [&] {
        std::ifstream in(dir / "run" / "config.json");
        std::ostringstream text;
        text << in.rdbuf();
        return text.str();
    };
    const std::string before = configText();
    c.engine.stopAfter = 0;
    c.engine.resume = true;
    c.train.learningRate *= 2;
    try {
        train(c, log);
        FAIL() << "expected InputError";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("learning_rate"), std::string::npos) << e.what();
    }
    EXPECT_EQ(configText(), before); // the run's own config is untouched
    c.train.learningRate /= 2;
    c.model.name = "renamed"; // a label is not the model
    EXPECT_EQ(train(c, log).status, RunStatus::Completed);
    EXPECT_THROW(train(c, log), InputError); // nothing left to resume
}

TEST(Trainer, ACorruptCheckpointIsReportedAndLeftAlone) {
    TempDir dir;
    std::ostringstream log;
    RunConfig c = tinyRun(dir / "run", 4);
    c.engine.stopAfter = 2;
    train(c, log);
    const auto ck = CheckpointStore(dir / "run" / "checkpoints", 3).latest();
    ASSERT_TRUE(ck);
    const auto file = ck->dir / (std::string(kShard) + "params.f32");
    {
        std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(100);
        f.put('\x7f');
    }
    const auto before = std::filesystem::file_size(file);
    c.engine.stopAfter = 0;
    c.engine.resume = true;
    try {
        train(c, log);
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("params.f32"), std::string::npos) << e.what();
    }
    EXPECT_EQ(std::filesystem::file_size(file), before);
    EXPECT_TRUE(std::filesystem::exists(ck->dir / "manifest.json"));
}

// The newest checkpoint damaged (a shard failing its CRC, or its manifest gone): the resume says
// which it skipped and why, continues from the newest one that verifies, and steps the same as a
// run never interrupted; the damaged one is kept, renamed, so its step can be saved again.
TEST(Trainer, ResumeFallsBackPastDamagedCheckpointsAndSaysWhy) {
    for (const bool manifestGone : {false, true}) {
        SCOPED_TRACE(manifestGone ? "manifest removed" : "a byte flipped");
        TempDir dir;
        std::ostringstream log;
        RunConfig whole = tinyRun(dir / "whole", 6);
        const TrainResult a = train(whole, log);
        ASSERT_EQ(a.steps.size(), 6u);

        RunConfig c = tinyRun(dir / "run", 6);
        c.train.checkpointEvery = 2;
        c.engine.stopAfter = 4;
        ASSERT_EQ(train(c, log).status, RunStatus::Interrupted);
        const auto damaged = dir / "run" / "checkpoints" / "step-00000004";
        ASSERT_TRUE(std::filesystem::exists(damaged / "manifest.json"));
        if (manifestGone) {
            std::filesystem::remove(damaged / "manifest.json");
        } else {
            std::fstream f(damaged / (std::string(kShard) + "params.f32"),
                           std::ios::in | std::ios::out | std::ios::binary);
            f.seekp(100);
            f.put('\x7f');
        }
        c.engine.stopAfter = 0;
        c.engine.resume = true;
        std::ostringstream said;
        const TrainResult rest = train(c, said);
        ASSERT_EQ(rest.status, RunStatus::Completed) << rest.message << said.str();
        EXPECT_EQ(rest.firstStep, 2);
        EXPECT_NE(said.str().find("skipped checkpoint step-00000004"), std::string::npos)
            << said.str();
        EXPECT_NE(said.str().find(manifestGone ? "manifest.json" : "params.f32"), std::string::npos)
            << said.str();
        for (std::size_t i = 0; i < rest.steps.size(); ++i)
            EXPECT_EQ(rest.steps[i].loss, a.steps[i + 2].loss) << "step " << i + 3;
        EXPECT_TRUE(std::filesystem::exists(damaged.string() + ".skipped"));
        EXPECT_TRUE(std::filesystem::exists(damaged / "manifest.json")) << "step 4 saved again";
        bool reported = false;
        for (const json& e : events(dir / "run"))
            reported = reported || (e["type"] == "event" && e["event"] == "checkpoint_skipped");
        EXPECT_TRUE(reported);
    }
}

TEST(Trainer, NonFiniteLossStopsAndKeepsTheLastGoodCheckpoint) {
    TempDir dir;
    std::ostringstream log;
    RunConfig c = tinyRun(dir / "run", 6);
    c.engine.stopAfter = 2;
    train(c, log);
    // Poison the weights through a checkpoint that verifies, as a diverged run would.
    CheckpointStore store(dir / "run" / "checkpoints", 3);
    LoadedCheckpoint good = CheckpointStore::load(store.latest()->dir);
    std::vector<std::byte> params = good.blobs.at(std::string(kShard) + "params.f32");
    const float nan = std::nanf("");
    std::memcpy(params.data(), &nan, sizeof nan);
    const auto& m1 = good.blobs.at(std::string(kShard) + "adam_m.f32");
    const auto& m2 = good.blobs.at(std::string(kShard) + "adam_v.f32");
    const std::filesystem::path poisoned = dir / "poisoned";
    CheckpointStore(poisoned, 1)
        .save(2, good.info.meta,
              {{std::string(kShard) + "params.f32", params.data(), params.size()},
               {std::string(kShard) + "adam_m.f32", m1.data(), m1.size()},
               {std::string(kShard) + "adam_v.f32", m2.data(), m2.size()}});
    c.engine.stopAfter = 0;
    c.engine.resume = true;
    c.engine.resumeFrom = (poisoned / "step-00000002").string();
    const TrainResult r = train(c, log);
    EXPECT_EQ(r.status, RunStatus::Failed);
    EXPECT_EQ(r.exitCode(), 3);
    EXPECT_NE(r.message.find("NaN"), std::string::npos) << r.message;
    EXPECT_EQ(store.list().size(), 1u); // nothing new was written from the bad state
    const json s = readJson(dir / "run" / "summary.json");
    EXPECT_EQ(s["status"], "failed");
}

TEST(Trainer, AStopRequestFinishesTheStepAndCheckpoints) {
    TempDir dir;
    std::ostringstream log;
    RunConfig c = tinyRun(dir / "run", 5);
    requestStop(SIGTERM);
    const TrainResult r = train(c, log);
    clearStopRequest();
    EXPECT_EQ(r.status, RunStatus::Interrupted);
    EXPECT_EQ(r.stepsCompleted, 1);
    EXPECT_EQ(r.exitCode(), 0);
    EXPECT_TRUE(std::filesystem::exists(dir / "run" / "checkpoints" / "step-00000001"));
}

TEST(Trainer, RefusesToReuseARunDirectory) {
    TempDir dir;
    std::ostringstream log;
    RunConfig c = tinyRun(dir / "run", 1);
    train(c, log);
    EXPECT_THROW(train(c, log), InputError);
}

TEST(Trainer, ExplainsConfigsItCannotRun) {
    TempDir dir;
    std::ostringstream log;
    RunConfig c = tinyRun(dir / "run", 1);
    c.parallel.cp = 3; // 2 x cp = 6 chunks do not cut seq_len 16
    c.parallel.precision = PrecisionPolicy::fp8Mixed();
    try {
        train(c, log);
        FAIL();
    } catch (const InputError& e) {
        const std::string w = e.what();
        EXPECT_NE(w.find("fp32"), std::string::npos) << w;
        EXPECT_NE(w.find("context parallelism"), std::string::npos) << w;
    }
    RunConfig missing = tinyRun(dir / "other", 1);
    missing.train.dataPath = (dir / "nope.bin").string();
    missing.train.dataFormat = "nanogpt";
    EXPECT_THROW(train(missing, log), InputError);
}

// Runs `action` once, when the progress text first contains `mark` (the line a step prints): a
// deterministic point between two steps of a run in this process.
class ProgressTrigger : public std::streambuf {
public:
    ProgressTrigger(std::string mark, std::function<void()> action)
        : mark_(std::move(mark)), action_(std::move(action)) {}

protected:
    int overflow(int c) override {
        if (c != EOF) {
            text_ += char(c);
            if (action_ && text_.find(mark_) != std::string::npos)
                std::exchange(action_, nullptr)();
        }
        return c;
    }

private:
    std::string mark_, text_;
    std::function<void()> action_;
};

// The data file truncated under a run (it was memory-mapped: SIGBUS, no message, no end, no
// checkpoint): the run ends before its next step with the reason, a checkpoint of the steps done
// and an end event; with the file restored, it resumes from there and finishes.
TEST(Trainer, ADataFileTruncatedMidRunEndsItWithACheckpointAndResumes) {
    TempDir dir;
    const auto data = dir / "tokens.bin";
    std::vector<unsigned char> bytes;
    for (int i = 0; i < 5000; ++i) // uint16 tokens below the test model's vocabulary (32)
        bytes.insert(bytes.end(), {static_cast<unsigned char>(i * 7 % 32), 0});
    std::ofstream(data, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));

    RunConfig c = tinyRun(dir / "run", 6);
    c.train.dataPath = data.string();
    c.train.dataFormat = "nanogpt";
    c.engine.quiet = false;
    ProgressTrigger truncate("step      2/", [&] { std::filesystem::resize_file(data, 64); });
    std::ostream progress(&truncate);
    const TrainResult r = train(c, progress);
    EXPECT_EQ(r.status, RunStatus::Failed);
    EXPECT_EQ(r.exitCode(), 3);
    EXPECT_EQ(r.stepsCompleted, 2);
    EXPECT_NE(r.message.find("changed during the run"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("step-00000002"), std::string::npos) << r.message;
    EXPECT_TRUE(std::filesystem::exists(dir / "run" / "checkpoints" / "step-00000002"));
    bool ended = false;
    for (const json& e : events(dir / "run"))
        ended = ended || (e["type"] == "event" && e["event"] == "end");
    EXPECT_TRUE(ended) << "no end event";

    std::ofstream(data, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    c.engine.resume = true;
    c.engine.quiet = true;
    const TrainResult rest = train(c, progress);
    EXPECT_EQ(rest.status, RunStatus::Completed) << rest.message;
    EXPECT_EQ(rest.firstStep, 2);
    EXPECT_EQ(rest.stepsCompleted, 6);
}

} // namespace
} // namespace shardscope
