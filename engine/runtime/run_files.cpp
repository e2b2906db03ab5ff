// What a run keeps on disk: its directory and config, checkpoints (each stage's shards and the
// leader's manifest, written so that a failure anywhere loses nothing already saved) and the
// resume that reads them back, and the summary.
#include "core/error.h"
#include "core/json_io.h"
#include "training_run.h"
#include "watchdog.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

namespace shardscope {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The model as far as training is concerned: names and sources are labels, not weights.
json modelForResume(const ModelSpec& m) {
    json j = m;
    for (const char* label : {"id", "name", "source", "published_params", "family"})
        j.erase(label);
    return j;
}

// The training settings that shape the trajectory; cadence of evals and checkpoints does not.
json trajectoryOf(const TrainConfig& t) {
    json j = t;
    for (const char* cadence : {"eval_every", "eval_batches", "checkpoint_every",
                                "keep_checkpoints", "steps", "train_tokens"})
        j.erase(cadence);
    return j;
}

// A count the checkpoint's meta holds, `absent` when it holds none. The manifest is a file anyone
// can edit: anything but a whole number in [least, most] is refused, naming the field.
std::int64_t metaCount(const CheckpointInfo& ck, const char* key, std::int64_t absent,
                       std::int64_t least, std::int64_t most) {
    const auto it = ck.meta.find(key);
    if (it == ck.meta.end())
        return absent;
    if (!it->is_number_integer() ||
        (it->is_number_unsigned() && it->get<std::uint64_t>() > std::uint64_t(most)) ||
        it->get<std::int64_t>() < least || it->get<std::int64_t>() > most)
        throw CheckpointError("checkpoint " + ck.dir.string() + ": its manifest's meta." + key +
                              " is " + jsonExcerpt(*it) + ", not a whole number from " +
                              std::to_string(least) + " to " + std::to_string(most) +
                              ": the manifest was edited or damaged; resume from another "
                              "checkpoint with --resume PATH");
    return it->get<std::int64_t>();
}

// What must match for a resumed run to read the same data and continue the same trajectory.
void checkResumable(const RunConfig& c, const std::string& data, const json& meta,
                    const fs::path& dir) {
    std::vector<std::string> diffs;
    auto compare = [&](const char* key, const json& now, const json& was) {
        if (!meta.contains(key) || was != now)
            diffs.push_back(std::string(key) + " was " +
                            (meta.contains(key) ? meta[key].dump() : "absent") + ", now " +
                            now.dump());
    };
    const auto stored = [&](const char* key) { return meta.contains(key) ? meta[key] : json(); };
    // A layout written before a setting existed reads with that setting's default, as a config
    // file would: read it back before comparing.
    // The attention kernel and fused elementwise kernels are the planner's: the engine runs its
    // own kernels whatever they say.
    const auto engineRuns = [](ParallelConfig p) {
        p.attentionKernel = AttentionKernel::Auto;
        p.fusedElementwise = true;
        return p;
    };
    json parallelWas = stored("parallel");
    try {
        parallelWas = json(engineRuns(parallelWas.get<ParallelConfig>()));
    } catch (const std::exception&) { // not a layout at all: compared raw, and differs
    }
    const json parallelNow = json(engineRuns(c.parallel));
    compare("model", modelForResume(c.model), stored("model"));
    compare("parallel", parallelNow, parallelWas);
    compare("train", trajectoryOf(c.train), stored("train"));
    compare("total_steps", c.totalSteps(), stored("total_steps"));
    compare("data", data, stored("data"));
    if (!diffs.empty()) {
        std::string text =
            "cannot resume from " + dir.string() + ": it was written for another run (";
        for (std::size_t i = 0; i < diffs.size(); ++i)
            text += (i ? "; " : "") + diffs[i];
        if (meta.contains("parallel") && parallelWas != parallelNow)
            text += "; checkpoints are sharded by the layout that wrote them, so a run resumes "
                    "only with that layout (" +
                    layoutSummary(c.parallel) + " now)";
        throw InputError(text + "). Resume with the run's own config.json (the default when "
                                "--config is not given), or start a new run directory.");
    }
}

} // namespace

void TrainingRun::writeConfig() {
    if (!leader_)
        return;
    const std::string text = toJson(c_).dump(2) + "\n";
    std::ofstream out(runDir_ / "config.json", std::ios::trunc);
    if (!(out << text))
        throw InputError("cannot write " + (runDir_ / "config.json").string());
}

void TrainingRun::prepareRunDirectory() {
    if (mesh_ && c_.engine.runDir.empty())
        throw InputError("a job of several ranks needs its run directory named: add --out DIR");
    runDir_ = c_.engine.runDir.empty() ? defaultRunDirectory() : fs::path(c_.engine.runDir);
    std::error_code ec;
    const bool hasRun = fs::exists(runDir_ / "config.json", ec);
    if (hasRun && !c_.engine.resume)
        throw InputError("run directory " + runDir_.string() +
                         " already holds a run; continue it with --resume, or choose another "
                         "directory with --out");
    if (c_.engine.resume && !hasRun && c_.engine.resumeFrom.empty())
        throw InputError("--resume: " + runDir_.string() +
                         " holds no run (no config.json); give the run directory with --out");
    barrier(); // every rank has looked before the leader creates anything
    if (!leader_)
        return;
    fs::create_directories(runDir_ / "telemetry", ec);
    fs::create_directories(runDir_ / "checkpoints", ec);
    if (ec)
        throw InputError("cannot create run directory " + runDir_.string() + ": " + ec.message());
}

// The checkpoint a resume continues from, verified and checked against this config before
// anything in the run directory changes.
std::optional<LoadedCheckpoint> TrainingRun::checkpointToResume() {
    if (!c_.engine.resume)
        return std::nullopt;
    // Each rank reads and verifies only the files it restores from.
    const std::set<std::string> mine = {parameterFile(), ownShard() + ".adam_m.f32",
                                        ownShard() + ".adam_v.f32"};
    const auto load = [&](const fs::path& from) {
        return CheckpointStore::load(from,
                                     [&](const std::string& name) { return mine.contains(name); });
    };
    fs::path dir = c_.engine.resumeFrom;
    std::optional<LoadedCheckpoint> found;
    if (!dir.empty()) {
        found = load(dir); // the one asked for, or its error
    } else {
        found = newestCheckpointThatVerifies(load);
        dir = found->info.dir;
    }
    LoadedCheckpoint ck = std::move(*found);
    checkResumable(c_, data_->describe(), ck.info.meta, dir);
    if (ck.info.step >= totalSteps_)
        throw InputError("the run in " + runDir_.string() + " already completed its " +
                         std::to_string(totalSteps_) + " steps (checkpoint " + dir.string() +
                         "); there is nothing to resume");
    const std::int64_t wroteWithThreads =
        metaCount(ck.info, "threads", threads_, 1, std::numeric_limits<int>::max());
    if (wroteWithThreads != threads_)
        progress_ << "warning: the checkpoint was written with " << wroteWithThreads
                  << " threads and this run uses " << threads_
                  << "; reductions split by thread make the losses differ in the last bits from "
                     "an uninterrupted run\n";
    return ck;
}

// The newest checkpoint whose files verify on every rank, newer ones that do not skipped with the
// reason (a missing or torn manifest, a file that fails its CRC): said on the console and, once
// telemetry is open, as checkpoint_skipped events. The skipped directories newer than the one
// resumed from are renamed <name>.skipped, their files untouched, so the steps they held can be
// checkpointed again.
template <typename Load>
std::optional<LoadedCheckpoint> TrainingRun::newestCheckpointThatVerifies(Load load) {
    std::vector<std::pair<fs::path, std::string>> skipped;
    const std::vector<CheckpointInfo> all = checkpoints_->list(&skipped);
    std::optional<LoadedCheckpoint> chosen;
    for (auto it = all.rbegin(); it != all.rend() && !chosen; ++it) {
        std::string problem;
        try {
            chosen = load(it->dir);
        } catch (const CheckpointError& e) {
            problem = e.what();
        }
        // Every rank verified its own files: all resume from the same step or none does.
        if (control_ ? control_->any(!problem.empty()) : !problem.empty()) {
            chosen.reset();
            skipped.emplace_back(it->dir, problem.empty()
                                              ? "another rank's files in it fail verification"
                                              : problem);
        }
    }
    std::string reasons;
    for (const auto& [path, why] : skipped)
        reasons += "\n  " + path.filename().string() + ": " + why;
    if (!chosen)
        throw CheckpointError("--resume: no checkpoint in " + checkpoints_->root().string() +
                              " verifies" + (reasons.empty() ? " (there is none)" : ":" + reasons));
    for (const auto& [path, why] : skipped) {
        const std::string name = path.filename().string();
        progress_ << "warning: skipped checkpoint " << name << ": " << why << "\n";
        skippedCheckpoints_.push_back({{"dir", path.string()}, {"reason", why}});
        if (leader_ && name > chosen->info.dir.filename().string()) {
            std::error_code ec;
            fs::rename(path, path.string() + ".skipped", ec);
        }
    }
    if (!skipped.empty())
        progress_ << "resuming from " << chosen->info.dir.string() << "\n";
    return chosen;
}

void TrainingRun::restoreOrInitialize(const std::optional<LoadedCheckpoint>& ck) {
    for (json skip : skippedCheckpoints_) {
        skip["type"] = "event";
        skip["event"] = "checkpoint_skipped";
        telemetry_->write(std::move(skip));
    }
    if (!ck) {
        // Each rank computes only what it stores: its shards, or its stage's share.
        model_->initialize(c_.train.seed);
        optimizer_->initializeMasterWeights(c_.train.seed);
        return;
    }
    const fs::path& dir = ck->info.dir;
    // Replicas without a shard of their own read their stage's replica 0.
    auto blob = [&](const std::string& name, std::size_t floats) {
        const auto it = ck->blobs.find(name);
        if (it == ck->blobs.end() || it->second.size() != floats * sizeof(float))
            throw CheckpointError("checkpoint " + dir.string() + ": " + name +
                                  " is missing or has the wrong size for this model and layout");
        return reinterpret_cast<const float*>(it->second.data());
    };
    auto restore = [&](const std::string& name, float* dst, std::size_t floats) {
        ops_->copyToDevice(dst, blob(name, floats), floats * sizeof(float));
    };
    // Parameters are fp32 in a checkpoint (the master weights under mixed precision).
    const bool slices = checkpointsParameterSlices();
    const float* params =
        blob(parameterFile(), slices ? optimizer_->size() : model_->parameterCount());
    if (slices)
        optimizer_->setMasterWeights(params);
    else
        optimizer_->setMasterWeightsFromWhole(params);
    if (slices && !model_->shardsParameters()) {
        // ZeRO-1/2 in mixed precision: this replica's shards, rounded from its master weights,
        // then every replica's, as after a step.
        optimizer_->writeWorkingWeights();
        gatherParameters();
    } else {
        model_->setStoredParameters(params);
    }
    restore(ownShard() + ".adam_m.f32", optimizer_->firstMoment(), optimizer_->size());
    restore(ownShard() + ".adam_v.f32", optimizer_->secondMoment(), optimizer_->size());
    startStep_ = ck->info.step;
    optimizer_->setSteps(metaCount(ck->info, "optimizer_steps", 0, 0, ck->info.step));
    lastCheckpoint_ = dir.string();
    lastCheckpointStep_ = startStep_;
    resumedFrom_ = dir.string();
    telemetry_->write(
        {{"type", "event"}, {"event", "resume"}, {"step", startStep_}, {"dir", dir.string()}});
    progress_ << "resumed from " << dir.string() << " at step " << startStep_ << "\n";
}

std::string TrainingRun::shardName(int pp, int tp, int dp) const {
    return "pp" + std::to_string(pp) + "-tp" + std::to_string(tp) + "-dp" + std::to_string(dp);
}

// The shards a checkpoint of this layout has: one per pipeline stage (replicas hold copies),
// and under ZeRO one per replica of each stage.
std::vector<std::string> TrainingRun::shardNames() const {
    std::vector<std::string> names;
    for (int pp = 0; pp < c_.parallel.pp; ++pp)
        for (int tp = 0; tp < c_.parallel.tp; ++tp)
            for (int dp = 0; dp < (zero_ ? c_.parallel.dp * c_.parallel.cp : 1); ++dp)
                names.push_back(shardName(pp, tp, dp));
    return names;
}

// Every stage writes its own shard (replica 0 of it: the replicas hold copies) and the leader
// writes the one manifest that lists them all. Every rank takes part in every phase, so a
// failure anywhere is known everywhere and no rank is left waiting.
void TrainingRun::saveCheckpoint(std::int64_t stepsDone) {
    spans_->step = stepsDone;
    spans_->at("checkpoint");
    const double start = telemetry_->now();
    const std::size_t n = model_->parameterCount();
    std::size_t written = 0;
    std::string problem;
    auto attempt = [&](auto&& work) {
        try {
            work();
        } catch (const std::exception& e) { // a full disk, no memory for the host copies, ...
            problem = e.what();
        }
        return everyoneSucceeded(problem.empty());
    };
    // Replicas without a shard wait for the writers; a slow disk is not a hang, a dead rank is.
    const Watchdog::Lenient lenient(watchdog_.get());
    const fs::path dir = checkpoints_->root() / [&] {
        char name[32];
        std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(stepsDone));
        return std::string(name);
    }();
    bool saved = attempt([&] {
        if (leader_)
            checkpoints_->prepareShards(stepsDone);
    });
    if (saved)
        saved = attempt([&] {
            if (!writesShard())
                return;
            // Device buffers are copied to the host first so the file write never reads device
            // memory.
            // Parameters: replica 0's whole copy, or every replica's shards (ZeRO-3, and ZeRO-1/2
            // in mixed precision).
            const std::size_t k = optimizer_->size();
            const std::size_t p = checkpointsParameterSlices() ? k : dpRank() == 0 ? n : 0;
            std::vector<float> params(p), m1(k), m2(k);
            // Mixed precision writes the fp32 master weights, so a resume loses no bits.
            const float* master = optimizer_->masterWeights();
            ops_->copyToHost(params.data(),
                             master ? master : kernels::asFloats(model_->parameters()),
                             params.size() * sizeof(float));
            ops_->copyToHost(m1.data(), optimizer_->firstMoment(), k * sizeof(float));
            ops_->copyToHost(m2.data(), optimizer_->secondMoment(), k * sizeof(float));
            std::vector<CheckpointBlob> blobs;
            if (!params.empty())
                blobs.push_back({"params.f32", params.data(), p * sizeof(float)});
            blobs.push_back({"adam_m.f32", m1.data(), k * sizeof(float)});
            blobs.push_back({"adam_v.f32", m2.data(), k * sizeof(float)});
            written = (params.size() + 2 * k) * sizeof(float);
            spans_->timed("checkpoint",
                          [&] { checkpoints_->writeShard(stepsDone, ownShard(), blobs); });
        });
    if (saved)
        saved = attempt([&] {
            if (!leader_)
                return;
            const json meta{{"model", modelForResume(c_.model)},
                            {"parallel", json(c_.parallel)},
                            {"train", trajectoryOf(c_.train)},
                            {"data", data_->describe()},
                            {"threads", threads_},
                            {"total_steps", totalSteps_},
                            {"optimizer_steps", optimizer_->steps()},
                            {"shards", shardNames()},
                            {"loss", lastLoss_}};
            checkpoints_->commitShards(stepsDone, meta, shardNames());
        });
    else if (leader_)
        checkpoints_->abandonShards(stepsDone);
    if (!saved) {
        // A failed save loses nothing already on disk; training goes on and says so.
        const std::string message =
            problem.empty() ? "checkpoint " + dir.string() + " was not saved: another rank failed"
                            : problem;
        telemetry_->write({{"type", "event"}, {"event", "error"}, {"message", message}});
        if (leader_ || !problem.empty())
            progress_ << "warning: " << message << "\n";
        return;
    }
    lastCheckpoint_ = dir.string();
    lastCheckpointStep_ = stepsDone;
    telemetry_->write({{"type", "event"},
                       {"event", "checkpoint"},
                       {"step", stepsDone},
                       {"dir", lastCheckpoint_},
                       {"bytes", written},
                       {"seconds", telemetry_->now() - start}});
    if (leader_ && !c_.engine.quiet)
        progress_ << "checkpoint " << lastCheckpoint_ << "\n";
}

void TrainingRun::writeSummary(const TrainResult& r) {
    if (!leader_)
        return;
    PlanInputs plan{c_.model, ClusterSpec{}, c_.parallel, c_.train, Assumptions{}};
    const MemoryBreakdown predicted = memoryForStage(plan, ppRank_);
    const MemoryUsage& peak = memory_.peak();
    const TelemetryStats ts = telemetry_->stats();
    json summary{
        {"format", "shardscope-run-summary"},
        {"version", 1},
        {"status", toString(r.status)},
        {"message", r.message},
        {"first_step", r.firstStep},
        {"steps_completed", r.stepsCompleted},
        {"total_steps", totalSteps_},
        {"final_loss", std::isfinite(lastLoss_) ? json(lastLoss_) : json(nullptr)},
        {"final_val_loss", std::isfinite(lastValLoss_) ? json(lastValLoss_) : json(nullptr)},
        {"loss_floor", data_->lossFloor() ? json(*data_->lossFloor()) : json(nullptr)},
        {"data", data_->describe()},
        {"parameters", model_->parameterCount()},
        {"tokens_per_s", throughputCount_ ? throughputSum_ / throughputCount_ : 0.0},
        {"mfu", throughputCount_ ? mfuSum_ / throughputCount_ : 0.0},
        {"peak_flops", peak_.flops},
        {"peak_flops_source", peak_.formula},
        {"memory_peak", memoryJson(peak)},
        {"memory_peak_total", memory_.peakTotal()},
        {"memory_predicted", predictedJson(predicted, ppRank_)},
        {"last_checkpoint", lastCheckpoint_},
        {"losses", json::array()},
        {"telemetry", {{"written", ts.written}, {"sent", ts.sent}, {"dropped", ts.dropped}}}};
    for (const StepRecord& s : r.steps)
        summary["losses"].push_back({s.step + 1, s.loss});
    std::ofstream out(runDir_ / "summary.json", std::ios::trunc);
    out << summary.dump(2) << "\n";
}

} // namespace shardscope
