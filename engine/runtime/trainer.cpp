#include "trainer.h"

#include "checkpoint.h"
#include "clock_sync.h"
#include "core/error.h"
#include "core/json_io.h"
#include "data.h"
#include "device_memory.h"
#include "event_pool.h"
#include "gpt.h"
#include "kernels/cpu/cpu_ops.h"
#include "optimizer.h"
#include "plan/compute.h"
#include "plan/estimate.h"
#include "prediction.h"
#include "process_mesh.h"
#include "sched/pipeline_program.h"
#include "schedule_executor.h"
#include "stop_signal.h"
#include "tcp_event_stream.h"
#include "telemetry.h"
#include "watchdog.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <unistd.h>

namespace shardscope {

using nlohmann::json;
namespace fs = std::filesystem;

std::string toString(RunStatus s) {
    switch (s) {
    case RunStatus::Completed:
        return "completed";
    case RunStatus::Interrupted:
        return "interrupted";
    case RunStatus::Failed:
        return "failed";
    }
    return "?";
}

namespace {

// Spans of the model's operator groups and of communication, stamped with the step,
// microbatch and chunk running now.
class TelemetrySpans final : public SpanSink, public CommunicationSink {
public:
    TelemetrySpans(TelemetryWriter& writer, Watchdog* watchdog, kernels::Ops& ops)
        : writer_(writer), watchdog_(watchdog), ops_(ops), events_(ops) {}
    std::int64_t step = 0;
    int microbatch = -1, chunk = 0;
    double now() const override { return writer_.now(); }
    void setMicrobatch(int mb, int ch, const char* op) override {
        microbatch = mb;
        chunk = ch;
        at(op);
    }
    // Tells the watchdog where the rank is, so a hang report names it.
    void at(const char* op) const {
        if (watchdog_)
            watchdog_->setPosition(step, microbatch, op);
    }
    // A transfer or collective from posting to completion, and the time blocked on it as a
    // wait span: bubbles and exposed communication are measured, not inferred.
    void communication(const CommunicationSpan& c) override {
        json e = spanEvent("communication", c.start, c.end);
        e["collective"] = c.collective;
        e["axis"] = c.axis;
        e["bytes"] = c.bytes;
        if (c.peer >= 0)
            e["peer"] = c.peer;
        if (*c.tensor)
            e["tensor"] = c.tensor;
        if (c.microbatch >= 0) { // a send seen complete later still belongs to its own op
            e["mb"] = c.microbatch;
            e["chunk"] = c.chunk;
        }
        write(e);
        if (c.waited) {
            e["kind"] = "wait";
            e["start"] = c.waitStart;
            write(std::move(e));
        }
    }
    std::unique_ptr<kernels::Event> mark() override { return events_.record(ops_.computeStream()); }
    // Written once the device has run the span's work; times are the events', on the
    // telemetry clock.
    void span(const char* kind, const char* block, int layer,
              std::unique_ptr<kernels::Event> start) override {
        json e = spanEvent(kind, 0, 0);
        if (*block)
            e["block"] = block;
        if (layer >= 0)
            e["layer"] = layer;
        pending_.push_back({std::move(e), std::move(start), mark()});
        writeFinished(false);
    }
    // Writes the spans whose events completed, in the order they were enqueued; with `wait`,
    // every one (the step's end: no span of a step is written after its step event).
    void writeFinished(bool wait) noexcept {
        while (!pending_.empty()) {
            DeviceSpan& s = pending_.front();
            if (wait)
                s.end->wait();
            else if (!s.end->done())
                return;
            s.event["start"] = writer_.timeOfSteadyClock(s.start->seconds());
            s.event["end"] = writer_.timeOfSteadyClock(s.end->seconds());
            write(std::move(s.event));
            events_.giveBack(std::move(s.start));
            events_.giveBack(std::move(s.end));
            pending_.pop_front();
        }
    }
    // A span of the step and microbatch running now; callers add what is particular to it.
    json spanEvent(const char* kind, double start, double end) const {
        return {{"type", "span"}, {"kind", kind},   {"step", step}, {"mb", microbatch},
                {"chunk", chunk}, {"start", start}, {"end", end}};
    }
    // Spans are written from destructors, so a failed write (a full disk) is kept here and
    // raised by the training loop after the step instead of terminating the process.
    void write(json e) noexcept {
        try {
            writer_.write(std::move(e));
        } catch (const std::exception& ex) {
            if (error.empty())
                error = ex.what();
        }
    }
    std::string error;
    // A span around host work that is not a model block (data, eval, checkpoint).
    template <typename Work> auto timed(const char* kind, Work&& work) {
        const double start = now();
        struct Emit {
            TelemetrySpans* self;
            const char* kind;
            double start;
            ~Emit() { self->write(self->spanEvent(kind, start, self->now())); }
        } emit{this, kind, start};
        return work();
    }
    // The same around work enqueued on the device (gradient norm, optimizer): timed by events.
    template <typename Work> auto timedOnDevice(const char* kind, Work&& work) {
        struct Emit {
            TelemetrySpans* self;
            const char* kind;
            std::unique_ptr<kernels::Event> start;
            ~Emit() { self->span(kind, "", -1, std::move(start)); }
        } emit{this, kind, mark()};
        return work();
    }

private:
    struct DeviceSpan {
        json event;
        std::unique_ptr<kernels::Event> start, end;
    };
    TelemetryWriter& writer_;
    Watchdog* watchdog_;
    kernels::Ops& ops_;
    std::deque<DeviceSpan> pending_;
    EventPool events_;
};

// The settings the engine's executable gives OpenMP and OpenBLAS before they load (main.cpp),
// recorded because they move a step's time by 30-50% on few cores.
json threadPoolSettings() {
    json j = json::object();
    for (const char* name : {"OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT"}) {
        const char* v = std::getenv(name);
        j[name] = v ? json(v) : json();
    }
    return j;
}

json memoryJson(const MemoryUsage& u) {
    json j;
    for (MemoryCategory c : kMemoryCategories)
        j[toString(c)] = u[c];
    j["total"] = u.total();
    return j;
}

CommunicationSpan collectiveSpan(const char* axis, std::size_t floats, double start, double end) {
    CommunicationSpan s;
    s.collective = "all_reduce";
    s.axis = axis;
    s.bytes = floats * sizeof(float);
    s.start = start;
    s.end = end;
    return s;
}

std::string hostName() {
    char name[256] = {};
    return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string();
}

json predictedJson(const MemoryBreakdown& m, int stage) {
    return {{"parameters", m.parameters},
            {"gradients", m.gradients},
            {"optimizer", m.optimizer},
            {"activations", m.activations},
            {"stage", stage},
            {"source", "shardscope planner, memoryForStage for the same model, layout and stage"}};
}

json chunksJson(const std::vector<ModelChunk>& chunks) {
    json j = json::array();
    for (const ModelChunk& c : chunks)
        j.push_back({{"first_layer", c.firstLayer},
                     {"layers", c.layers},
                     {"embedding", c.embedding},
                     {"head", c.head}});
    return j;
}

std::string mebibytes(double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024.0));
    return buf;
}

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

// What must match for a resumed run to read the same data and continue the same trajectory.
void checkResumable(const RunConfig& c, const std::string& data, const json& meta,
                    const fs::path& dir) {
    std::vector<std::string> diffs;
    auto compare = [&](const char* key, const json& now) {
        if (!meta.contains(key) || meta[key] != now)
            diffs.push_back(std::string(key) + " was " +
                            (meta.contains(key) ? meta[key].dump() : "absent") + ", now " +
                            now.dump());
    };
    compare("model", modelForResume(c.model));
    compare("parallel", json(c.parallel));
    compare("train", trajectoryOf(c.train));
    compare("total_steps", c.totalSteps());
    compare("data", data);
    if (!diffs.empty()) {
        std::string text =
            "cannot resume from " + dir.string() + ": it was written for another run (";
        for (std::size_t i = 0; i < diffs.size(); ++i)
            text += (i ? "; " : "") + diffs[i];
        if (meta.contains("parallel") && meta["parallel"] != json(c.parallel))
            text += "; checkpoints are sharded by the layout that wrote them, so a run resumes "
                    "only with that layout (" +
                    layoutSummary(c.parallel) + " now)";
        throw InputError(text + "). Resume with the run's own config.json (the default when "
                                "--config is not given), or start a new run directory.");
    }
}

class Run {
public:
    Run(const RunConfig& config, std::ostream& progress, Communicator* world, kernels::Ops* device)
        : c_(config), progress_(progress), world_(world),
          ownedOps_(device ? nullptr : kernels::makeCpuOps(config.engine.threads)),
          ops_(device ? device : ownedOps_.get()), memory_(*ops_) {}

    ~Run() {
        // The watchdog's thread writes stall and hang events into telemetry_, which goes first.
        if (watchdog_)
            watchdog_->setEvents({}, 0);
    }
    Run(const Run&) = delete;
    Run& operator=(const Run&) = delete;

    TrainResult execute();

private:
    void prepareRunDirectory();
    void writeConfig();
    std::optional<LoadedCheckpoint> checkpointToResume();
    void restoreOrInitialize(const std::optional<LoadedCheckpoint>& ck);
    StepRecord trainStep(std::int64_t step);
    double validationLoss(std::int64_t step);
    void saveCheckpoint(std::int64_t stepsDone);
    void writeSummary(const TrainResult& r);
    void reportStep(const StepRecord& s, double tokensPerSecond, double mfu);

    void barrier() const {
        if (world_)
            world_->barrier();
    }
    int worldSize() const { return world_ ? world_->size() : 1; }
    // The sum of every rank's value, on the control channel.
    double totalOverRanks(double local) const;
    // Whether this rank holds the one copy of a value its tensor-parallel peers and data-parallel
    // replicas also hold.
    bool countsReplicatedValues() const { return tpRank_ == 0 && dpRank() == 0; }
    bool agreeOnStop(bool mine) const;
    bool everyoneSucceeded(bool mine) const;
    void synchronizeSharedEmbedding();
    std::string shardName(int pp, int tp, int dp) const;
    std::vector<std::string> shardNames() const;
    int dpRank() const { return mesh_ ? mesh_->coordinate().dp : 0; }
    // Replica 0 of each stage writes the parameters; under ZeRO every replica writes the
    // optimizer slice it owns.
    bool writesShard() const { return dpRank() == 0 || zero_; }
    std::string ownShard() const { return shardName(ppRank_, tpRank_, zero_ ? dpRank() : 0); }
    // The parameters this rank restores: its ZeRO-3 slice, or its stage's whole copy.
    std::string parameterFile() const {
        return (model_->shardsParameters() ? ownShard() : shardName(ppRank_, tpRank_, 0)) +
               ".params.f32";
    }
    void gatherParameters();
    double measureStandaloneReduction();

    const RunConfig& c_;
    std::ostream& progress_;
    Communicator* world_; // null or a world of one: a single process
    // With more than one rank every wait is watched (the watchdog outlives every group).
    std::unique_ptr<Watchdog> watchdog_;
    std::unique_ptr<WatchedCommunicator> watchedWorld_;
    std::unique_ptr<ControlChannel> control_; // votes and sums, with more than one rank
    std::unique_ptr<ProcessMesh> mesh_;       // with more than one rank
    Communicator* dataParallel_ = nullptr;    // the dp group, when dp > 1
    Communicator* pipeline_ = nullptr;        // the pp group, when pp > 1
    Communicator* tensorParallel_ = nullptr;  // the tp group, when tp > 1
    // The first and last pipeline stage, summing the gradient of a tied embedding split between
    // them; a group of one on the other ranks.
    std::unique_ptr<Communicator> embeddingGroup_;
    int rank_ = 0, ppRank_ = 0, tpRank_ = 0;
    // ZeRO-1: each dp rank owns a slice of the flat parameters, updates it with its own slice of
    // the optimizer state, and the slices are all-gathered after the step.
    bool zero_ = false;
    FlatShards zeroShards_;
    double standaloneReduction_ = 0; // seconds the step's gradient reduction takes alone
    bool leader_ = true;             // rank 0 writes the config, checkpoints, summary and progress
    std::unique_ptr<kernels::Ops> ownedOps_; // the backend, unless the caller gave one
    kernels::Ops* ops_;
    DeviceAllocator memory_;
    std::unique_ptr<GptModel> model_;
    std::unique_ptr<AdamW> optimizer_;
    std::unique_ptr<Dataset> data_;
    std::unique_ptr<TelemetryWriter> telemetry_;
    std::unique_ptr<TelemetrySpans> spans_;
    std::unique_ptr<CheckpointStore> checkpoints_;
    std::unique_ptr<ScheduleExecutor> executor_;
    std::unique_ptr<GradientBuckets> buckets_; // data-parallel gradient all-reduce
    std::vector<std::int32_t> inputs_, targets_;
    fs::path runDir_;
    std::int64_t startStep_ = 0, totalSteps_ = 0;
    double flopsPerToken_ = 0;
    int threads_ = 1;
    kernels::PeakFlops peak_;
    double lastLoss_ = NAN, lastValLoss_ = NAN;
    std::string lastCheckpoint_, resumedFrom_;
    double throughputSum_ = 0, mfuSum_ = 0;
    int throughputCount_ = 0;
};

void Run::writeConfig() {
    if (!leader_)
        return;
    const std::string text = toJson(c_).dump(2) + "\n";
    std::ofstream out(runDir_ / "config.json", std::ios::trunc);
    if (!(out << text))
        throw InputError("cannot write " + (runDir_ / "config.json").string());
}

void Run::prepareRunDirectory() {
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
std::optional<LoadedCheckpoint> Run::checkpointToResume() {
    if (!c_.engine.resume)
        return std::nullopt;
    fs::path dir = c_.engine.resumeFrom;
    if (dir.empty()) {
        const auto latest = checkpoints_->latest();
        if (!latest)
            throw InputError("--resume: " + checkpoints_->root().string() +
                             " has no checkpoint to resume from");
        dir = latest->dir;
    }
    // Each rank reads and verifies only the files it restores from.
    const std::set<std::string> mine = {parameterFile(), ownShard() + ".adam_m.f32",
                                        ownShard() + ".adam_v.f32"};
    LoadedCheckpoint ck =
        CheckpointStore::load(dir, [&](const std::string& name) { return mine.contains(name); });
    checkResumable(c_, data_->describe(), ck.info.meta, dir);
    if (ck.info.step >= totalSteps_)
        throw InputError("the run in " + runDir_.string() + " already completed its " +
                         std::to_string(totalSteps_) + " steps (checkpoint " + dir.string() +
                         "); there is nothing to resume");
    if (ck.info.meta.value("threads", threads_) != threads_)
        progress_ << "warning: the checkpoint was written with " << ck.info.meta.value("threads", 0)
                  << " threads and this run uses " << threads_
                  << "; reductions split by thread make the losses differ in the last bits from "
                     "an uninterrupted run\n";
    return ck;
}

void Run::restoreOrInitialize(const std::optional<LoadedCheckpoint>& ck) {
    if (!ck) {
        model_->initialize(c_.train.seed);
        return;
    }
    const fs::path& dir = ck->info.dir;
    // Replicas without a shard of their own read their stage's replica 0.
    auto restore = [&](const std::string& name, float* dst, std::size_t floats) {
        const std::size_t bytes = floats * sizeof(float);
        const auto it = ck->blobs.find(name);
        if (it == ck->blobs.end() || it->second.size() != bytes)
            throw CheckpointError("checkpoint " + dir.string() + ": " + name +
                                  " is missing or has the wrong size for this model");
        ops_->copyToDevice(dst, it->second.data(), bytes);
    };
    restore(parameterFile(), model_->parameters(),
            model_->shardsParameters() ? optimizer_->size() : model_->parameterCount());
    restore(ownShard() + ".adam_m.f32", optimizer_->firstMoment(), optimizer_->size());
    restore(ownShard() + ".adam_v.f32", optimizer_->secondMoment(), optimizer_->size());
    startStep_ = ck->info.step;
    optimizer_->setSteps(ck->info.meta.value("optimizer_steps", std::int64_t(0)));
    lastCheckpoint_ = dir.string();
    resumedFrom_ = dir.string();
    telemetry_->write(
        {{"type", "event"}, {"event", "resume"}, {"step", startStep_}, {"dir", dir.string()}});
    progress_ << "resumed from " << dir.string() << " at step " << startStep_ << "\n";
}

StepRecord Run::trainStep(std::int64_t step) {
    const double start = telemetry_->now();
    spans_->step = step + 1; // spans, like step events, count steps from 1
    const int B = c_.parallel.microBatch;
    StepRecord r;
    r.step = step;
    // Replica d reads microbatches d*m .. d*m+m-1 of the step: together the replicas read what
    // one process would for the whole global batch.
    const int firstMicrobatch = mesh_ ? mesh_->coordinate().dp * c_.parallel.microbatches() : 0;
    if (buckets_)
        buckets_->startStep();
    r.loss = executor_->runStep(
        [&](int mb, std::int32_t* inputs, std::int32_t* targets) {
            spans_->timed("data", [&] {
                data_->batch(Split::Train, step, firstMicrobatch + mb, B, inputs, targets);
            });
        },
        spans_.get(), spans_.get());
    spans_->at("embedding gradient sum");
    synchronizeSharedEmbedding();
    spans_->at("gradient reduction");
    if (buckets_) {
        // Buckets were started during the backward; what remains is waited for here.
        const double waitStart = spans_->now();
        r.exposedCommunication = buckets_->finish();
        for (const BucketTiming& b : buckets_->buckets()) {
            r.communication += b.completed - b.started;
            CommunicationSpan span = collectiveSpan("dp", b.count, b.started, b.completed);
            span.collective = buckets_->collective();
            if (b.completed > waitStart) { // still in flight when the wait began
                span.waited = true;
                span.waitStart = std::max(waitStart, b.started);
            }
            spans_->communication(span);
        }
    }
    // The loss lives on the last stage of each replica (every tensor-parallel rank of it has
    // it; rank 0 counts it); every rank reports the step's.
    r.loss = totalOverRanks(tpRank_ == 0 ? r.loss : 0.0);
    spans_->at("gradient norm");
    r.gradNorm = spans_->timedOnDevice("grad_norm", [&] {
        // Each stage's squares, the copy of a split tied embedding counted once; replicas hold
        // the same gradients after the all-reduce.
        const bool tiedCopy =
            model_->sharedTensor() != GptModel::npos && !model_->chunks().front().embedding;
        const ParameterTensor* copy =
            tiedCopy ? &model_->tensors()[model_->sharedTensor()] : nullptr;
        // Tensor-parallel ranks hold replicated tensors (norms, biases of row-parallel layers,
        // positions) whole: rank 0 counts them.
        const bool countReplicated = tpRank_ == 0;
        double squares =
            copy || !countReplicated ? optimizer_->gradientSquares([&](const ParameterTensor& t) {
                return &t != copy && (countReplicated || t.split != TpSplit::None);
            })
                                     : optimizer_->gradientSquares({});
        // Replicas hold the same gradients after the all-reduce, except under ZeRO, where each
        // holds the summed gradients of its own slice only.
        return std::sqrt(totalOverRanks(zero_ || dpRank() == 0 ? squares : 0.0));
    });
    r.learningRate = learningRateAt(c_.train, step, totalSteps_);
    if (std::isfinite(r.loss) && std::isfinite(r.gradNorm)) {
        const double scale = optimizer_->clipScale(r.gradNorm);
        spans_->timedOnDevice("optimizer", [&] { optimizer_->step(r.learningRate, scale); });
        if (zero_ && !model_->shardsParameters()) { // ZeRO-3 gathers them layer by layer
            spans_->at("parameter all-gather");
            gatherParameters();
        }
    }
    // The step ends when the device has run it; its spans are written before its step event.
    ops_->computeStream().synchronize();
    spans_->writeFinished(true);
    r.seconds = telemetry_->now() - start;
    return r;
}

// Every rank stops after the same step, even when a signal reached only some of them: a rank
// that left the loop alone would leave the others waiting in a collective.
bool Run::agreeOnStop(bool mine) const {
    if (!control_)
        return mine;
    spans_->at("agreeing on a stop or a checkpoint");
    return control_->any(mine);
}

bool Run::everyoneSucceeded(bool mine) const {
    return !agreeOnStop(!mine);
}

double Run::totalOverRanks(double local) const {
    return control_ ? control_->total(local) : local;
}

// With tied embeddings on different stages, the first stage's wte and the last stage's copy
// each hold part of the gradient; both take the sum, so both copies take the same update. The
// data-parallel buckets get the range afterwards.
void Run::synchronizeSharedEmbedding() {
    const std::size_t shared = model_->sharedTensor();
    if (shared == GptModel::npos)
        return;
    const ParameterTensor& t = model_->tensors()[shared];
    const double start = spans_->now();
    embeddingGroup_->allReduceSum(model_->gradients() + t.offset, t.count).wait();
    CommunicationSpan span = collectiveSpan("embedding", t.count, start, spans_->now());
    span.waited = true;
    span.waitStart = start;
    spans_->communication(span);
    if (buckets_)
        buckets_->gradientsReady(t.offset, t.count);
}

std::string Run::shardName(int pp, int tp, int dp) const {
    return "pp" + std::to_string(pp) + "-tp" + std::to_string(tp) + "-dp" + std::to_string(dp);
}

// The shards a checkpoint of this layout has: one per pipeline stage (replicas hold copies),
// and under ZeRO one per replica of each stage.
std::vector<std::string> Run::shardNames() const {
    std::vector<std::string> names;
    for (int pp = 0; pp < c_.parallel.pp; ++pp)
        for (int tp = 0; tp < c_.parallel.tp; ++tp)
            for (int dp = 0; dp < (zero_ ? c_.parallel.dp : 1); ++dp)
                names.push_back(shardName(pp, tp, dp));
    return names;
}

// The gradient reduction with nothing to hide it behind: the buffer reported in bucket-sized
// ranges from its end (as a backward finishes it), all waited for; best of three. What a step's
// exposed wait is measured against to say how much of the reduction the backward hid.
double Run::measureStandaloneReduction() {
    spans_->at("measuring the standalone gradient reduction");
    const std::size_t n = model_->parameterCount();
    const auto bucket = std::max<std::size_t>(
        1, static_cast<std::size_t>(c_.engine.bucketMiB * 1024 * 1024) / sizeof(float));
    double best = std::numeric_limits<double>::infinity();
    for (int trial = 0; trial < 3; ++trial) {
        world_->barrier();
        buckets_->startStep();
        const double start = spans_->now();
        for (std::size_t end = n; end > 0;) {
            const std::size_t begin = end > bucket ? end - bucket : 0;
            buckets_->gradientsReady(begin, end - begin);
            end = begin;
        }
        buckets_->finish();
        best = std::min(best, spans_->now() - start);
    }
    buckets_->startStep();
    return best;
}

// ZeRO: every replica updated only its slice; the slices go to everyone before the next step.
void Run::gatherParameters() {
    const double start = spans_->now();
    std::vector<std::size_t> counts;
    for (int d = 0; d < zeroShards_.parts; ++d)
        counts.push_back(zeroShards_.size(d));
    dataParallel_->allGatherVInPlace(model_->parameters(), counts).wait();
    CommunicationSpan span = collectiveSpan("dp", model_->parameterCount(), start, spans_->now());
    span.collective = "all_gather";
    span.waited = true;
    span.waitStart = start;
    spans_->communication(span);
}

double Run::validationLoss(std::int64_t step) {
    spans_->step = step + 1;
    spans_->at("validation");
    const int B = c_.parallel.microBatch, N = B * c_.model.seqLen;
    return spans_->timed("eval", [&] {
        double sum = executor_->evaluate(
            c_.train.evalBatches, [&](int i, std::int32_t* inputs, std::int32_t* targets) {
                data_->batch(Split::Validation, 0, i, B, inputs, targets);
            });
        // The last stage has it; its tensor-parallel peers and replicas have copies.
        sum = totalOverRanks(countsReplicatedValues() ? sum : 0.0);
        return sum / (double(N) * c_.train.evalBatches);
    });
}

// Every stage writes its own shard (replica 0 of it: the replicas hold copies) and the leader
// writes the one manifest that lists them all. Every rank takes part in every phase, so a
// failure anywhere is known everywhere and no rank is left waiting.
void Run::saveCheckpoint(std::int64_t stepsDone) {
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
            // Parameters: replica 0's whole copy, or under ZeRO-3 every replica's slice.
            const std::size_t k = optimizer_->size();
            const std::size_t p = model_->shardsParameters() ? k : dpRank() == 0 ? n : 0;
            std::vector<float> params(p), m1(k), m2(k);
            ops_->copyToHost(params.data(), model_->parameters(), params.size() * sizeof(float));
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
    telemetry_->write({{"type", "event"},
                       {"event", "checkpoint"},
                       {"step", stepsDone},
                       {"dir", lastCheckpoint_},
                       {"bytes", written},
                       {"seconds", telemetry_->now() - start}});
    if (leader_ && !c_.engine.quiet)
        progress_ << "checkpoint " << lastCheckpoint_ << "\n";
}

void Run::reportStep(const StepRecord& s, double tokensPerSecond, double mfu) {
    if (!leader_ || c_.engine.quiet || (s.step + 1) % c_.engine.logEvery != 0)
        return;
    char line[256];
    std::snprintf(line, sizeof line,
                  "step %6lld/%lld | loss %.4f | lr %.2e | norm %.3f | %7.0f tok/s | %7.1f ms | "
                  "MFU %5.1f%% | mem %s (peak %s)",
                  static_cast<long long>(s.step + 1), static_cast<long long>(totalSteps_), s.loss,
                  s.learningRate, s.gradNorm, tokensPerSecond, s.seconds * 1e3, mfu * 100,
                  mebibytes(double(memory_.live().total())).c_str(),
                  mebibytes(double(memory_.peakTotal())).c_str());
    progress_ << line << "\n" << std::flush;
}

void Run::writeSummary(const TrainResult& r) {
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

TrainResult Run::execute() {
    checkTrainable(c_);
    totalSteps_ = c_.totalSteps();
    if (world_ && world_->size() > 1) {
        Communicator* inner = world_;
        watchdog_ =
            std::make_unique<Watchdog>(c_.engine.watchdogSeconds, world_->rank(), world_->size(),
                                       [inner](int code) { inner->abortJob(code); });
        watchedWorld_ = std::make_unique<WatchedCommunicator>(*world_, *watchdog_);
        world_ = watchedWorld_.get();
        world_->orderAfter(ops_->computeStream()); // every group made below inherits it
        control_ = world_->controlChannel();
        mesh_ = std::make_unique<ProcessMesh>(c_.parallel, *world_);
        rank_ = world_->rank();
        leader_ = rank_ == 0;
        if (c_.parallel.dp > 1)
            dataParallel_ = &mesh_->group(Axis::DP);
        if (c_.parallel.pp > 1)
            pipeline_ = &mesh_->group(Axis::PP);
        if (c_.parallel.tp > 1)
            tensorParallel_ = &mesh_->group(Axis::TP);
        ppRank_ = mesh_->coordinate().pp;
        tpRank_ = mesh_->coordinate().tp;
    } else if (c_.parallel.worldSize() != 1) {
        throw InputError("the layout " + layoutSummary(c_.parallel) + " needs " +
                         std::to_string(c_.parallel.worldSize()) + " ranks: add --ranks " +
                         std::to_string(c_.parallel.worldSize()));
    }
    if (!c_.engine.telemetry.empty()) // a typo must not leave a half-made run directory behind
        parseCollectorAddress(c_.engine.telemetry);
    data_ = Dataset::open(dataSpecOf(c_));
    const ParallelConfig& p = c_.parallel;
    model_ = std::make_unique<GptModel>(
        c_.model, p.microBatch, *ops_, memory_, p.recompute, !p.flashAttention,
        pipelineChunks(GptShape::of(c_.model).layers, p.pp, p.vpp, ppRank_),
        TensorParallel{p.tp, tpRank_, tensorParallel_, p.sequenceParallel},
        ZeroSharding{dataParallel_ ? p.zero : 0, dataParallel_});
    if (mesh_) { // every rank joins the call that makes the groups
        std::vector<int> members{rank_};
        if (model_->sharedTensor() != GptModel::npos) {
            const std::vector<int> stages = groupRanks(p, rank_, Axis::PP);
            members = {stages.front(), stages.back()};
        }
        embeddingGroup_ = world_->subgroup(members, "embedding");
    }
    zero_ = p.zero >= 1 && dataParallel_;
    if (zero_) {
        zeroShards_ = {model_->parameterCount(), p.dp};
        optimizer_ =
            std::make_unique<AdamW>(*model_, *ops_, memory_, c_.train, zeroShards_.begin(dpRank()),
                                    zeroShards_.end(dpRank()));
    } else {
        optimizer_ = std::make_unique<AdamW>(*model_, *ops_, memory_, c_.train);
    }
    executor_ = std::make_unique<ScheduleExecutor>(
        *model_, buildPipelineProgram({p.schedule, p.pp, p.microbatches(), p.vpp}), ppRank_, p.dp,
        pipeline_);
    if (dataParallel_ && p.zero < 2) { // ZeRO-2/3 reduce inside the model, per microbatch
        buckets_ = std::make_unique<GradientBuckets>(
            *dataParallel_, model_->gradients(), model_->parameterCount(),
            static_cast<std::size_t>(c_.engine.bucketMiB * 1024 * 1024), this,
            [](const void* self) { return static_cast<const Run*>(self)->telemetry_->now(); });
        if (zero_)
            buckets_->shardOver(zeroShards_, memory_, *ops_);
        executor_->setGradientListener(buckets_.get());
    }
    inputs_.resize(std::size_t(c_.parallel.microBatch) * std::size_t(c_.model.seqLen));
    targets_.resize(inputs_.size());
    flopsPerToken_ = tokenFlops(c_.model, c_.parallel, Assumptions{}).model;
    const int threads = c_.engine.threads > 0 ? c_.engine.threads : kernels::cpuCores();
    threads_ = threads;
    peak_ = c_.engine.peakFlops > 0
                ? kernels::PeakFlops{c_.engine.peakFlops, "configured (engine.peak_tflops)"}
                : kernels::estimateCpuPeakFlops(threads);
    if (world_ && world_->size() > 1) { // MFU is the job's tokens against every rank's peak
        peak_.flops *= world_->size();
        peak_.formula = std::to_string(world_->size()) + " ranks x (" + peak_.formula + ")";
    }

    // Measured before the barrier, so the ranks leave it together and their clocks are
    // compared without one of them copying memory meanwhile.
    const ClusterSpec hardware =
        clusterOfCpuHosts(peak_.flops / worldSize(), ranksOnThisHost(), worldSize(),
                          hostMemoryBytes(), measureCopyBandwidth());
    prepareRunDirectory();
    barrier(); // the leader has made the directory before anyone opens a file in it
    checkpoints_ =
        std::make_unique<CheckpointStore>(runDir_ / "checkpoints", c_.train.keepCheckpoints);
    std::optional<LoadedCheckpoint> resumeFrom = checkpointToResume();
    writeConfig();
    TelemetryOptions topts;
    topts.path = (runDir_ / "telemetry" / ("rank-" + std::to_string(rank_) + ".jsonl")).string();
    topts.collector = c_.engine.telemetry;
    topts.rank = rank_;
    const RankCoordinate coord = rankCoordinate(p, rank_, 1);
    topts.coordinate = {{"dp", coord.dp}, {"tp", coord.tp}, {"pp", coord.pp}, {"cp", coord.cp}};
    topts.append = c_.engine.resume;
    if (const char* token = std::getenv(kTelemetryTokenVariable))
        topts.token = token;
    topts.hello = {{"pid", ::getpid()}, {"host", hostName()}, {"world_size", worldSize()}};
    telemetry_ = std::make_unique<TelemetryWriter>(topts);
    spans_ = std::make_unique<TelemetrySpans>(*telemetry_, watchdog_.get(), *ops_);
    model_->setCommunicationSink(spans_.get());
    if (watchdog_) {
        watchdog_->setReportDirectory(runDir_ / "telemetry");
        TelemetryWriter* writer = telemetry_.get();
        watchdog_->setEvents({[writer](json e) {
                                  writer->write(std::move(e));
                                  writer->flush();
                              },
                              [writer] { writer->drain(std::chrono::seconds(1)); }},
                             c_.engine.stallSeconds);
    }
    ClockOffset clock;
    if (mesh_) { // before the first event, so every timestamp is on rank 0's clock
        // Ranks on one host share a clock; --debug-clock-skew shifts them apart to show the
        // alignment at work, as it must across hosts.
        const double skewed = c_.engine.debugClockSkew * rank_;
        telemetry_->setClockOffset(skewed);
        clock = measureClockOffset(*control_, [&] { return telemetry_->now(); });
        clock.offset += skewed;
        telemetry_->setClockOffset(clock.offset);
    }
    const MemoryBreakdown predicted =
        memoryForStage({c_.model, ClusterSpec{}, p, c_.train, Assumptions{}}, ppRank_);
    const std::time_t wall = std::time(nullptr);
    telemetry_->write({{"type", "event"},
                       {"event", "start"},
                       {"config", toJson(c_)},
                       {"threads", threads},
                       {"backend", ops_->name()},
                       {"thread_pools", threadPoolSettings()},
                       {"peak_flops", peak_.flops},
                       {"peak_flops_source", peak_.formula},
                       {"loss_floor", data_->lossFloor() ? json(*data_->lossFloor()) : json()},
                       {"data", data_->describe()},
                       {"parameters", model_->parameterCount()},
                       {"chunks", chunksJson(model_->chunks())},
                       {"memory_predicted", predictedJson(predicted, ppRank_)},
                       {"prediction", predictionJson(c_, hardware, ppRank_)},
                       {"world_size", worldSize()},
                       {"clock",
                        {{"offset", clock.offset},
                         {"round_trip", clock.roundTrip},
                         {"reference", "rank 0"},
                         {"method", "least-delay round trip of 8 (Cristian)"}}},
                       {"pid", ::getpid()},
                       {"host", hostName()},
                       {"wall_clock", double(wall)}});
    restoreOrInitialize(resumeFrom);
    resumeFrom.reset(); // its bytes are on the device now
    if (buckets_) {
        standaloneReduction_ = measureStandaloneReduction();
        telemetry_->write({{"type", "event"},
                           {"event", "calibration"},
                           {"dp_reduction_standalone", standaloneReduction_},
                           {"method", "every bucket of the gradient buffer reduced with no compute "
                                      "to hide behind, best of 3"}});
    }

    if (leader_ && !c_.engine.quiet) {
        progress_ << "shardscope-engine: " << c_.model.name << ", " << model_->parameterCount()
                  << " parameters, " << layoutSummary(c_.parallel) << ", " << ops_->name() << "\n"
                  << "data: " << data_->describe() << "\n"
                  << "run directory: " << runDir_.string() << "\n";
        if (data_->lossFloor())
            progress_ << "loss floor (entropy rate of the source): " << *data_->lossFloor()
                      << " nats/token\n";
    }

    TrainResult result;
    result.runDir = runDir_;
    result.firstStep = startStep_;
    result.stepsCompleted = startStep_;
    const StopSignalHandlers stopHandlers;
    const double tokensPerStep = double(c_.tokensPerStep());
    for (std::int64_t step = startStep_; step < totalSteps_; ++step) {
        const StepRecord s = trainStep(step);
        if (!std::isfinite(s.loss) || !std::isfinite(s.gradNorm)) {
            result.status = RunStatus::Failed;
            const bool lossBad = !std::isfinite(s.loss);
            const double bad = lossBad ? s.loss : s.gradNorm;
            std::string where = lastCheckpoint_.empty() ? std::string(" (there is none yet)")
                                                        : " (" + lastCheckpoint_ + ")";
            if (!resumedFrom_.empty() && step == startStep_)
                where = " before " + resumedFrom_ +
                        ", which this run resumed from and which already leads to it";
            result.message = std::string("the ") + (lossBad ? "loss" : "gradient norm") +
                             " became " + (std::isnan(bad) ? "NaN" : "infinite") + " at step " +
                             std::to_string(step + 1) + " (learning rate " +
                             std::to_string(s.learningRate) +
                             "); no checkpoint was written from it. Lower train.learning_rate "
                             "or set train.grad_clip, then resume from the last good checkpoint" +
                             where;
            telemetry_->write({{"type", "event"}, {"event", "error"}, {"message", result.message}});
            break;
        }
        lastLoss_ = s.loss;
        result.steps.push_back(s);
        result.stepsCompleted = step + 1;
        const double tps = tokensPerStep / s.seconds;
        const double flops = flopsPerToken_ * tps;
        const double mfu = peak_.flops > 0 ? flops / peak_.flops : 0;
        if (step > startStep_) { // the first step also pays for every allocation
            throughputSum_ += tps;
            mfuSum_ += mfu;
            ++throughputCount_;
        }
        json event{{"type", "step"},
                   {"step", step + 1},
                   {"loss", s.loss},
                   {"grad_norm", s.gradNorm},
                   {"lr", s.learningRate},
                   {"tokens", c_.tokensPerStep()},
                   {"step_time", s.seconds},
                   {"tokens_per_s", tps},
                   {"flops_per_s", flops},
                   {"mfu", mfu},
                   {"memory", memoryJson(memory_.live())},
                   {"dp_communication", s.communication},
                   {"dp_exposed_communication", s.exposedCommunication},
                   {"dp_hidden_fraction",
                    standaloneReduction_ > 0
                        ? std::clamp(1.0 - s.exposedCommunication / standaloneReduction_, 0.0, 1.0)
                        : 0.0},
                   {"memory_peak", memoryJson(memory_.peak())}};
        const bool last = step + 1 == totalSteps_;
        const bool stopping =
            agreeOnStop(stopSignal() != 0) ||
            (c_.engine.stopAfter > 0 && step + 1 - startStep_ >= c_.engine.stopAfter);
        if ((c_.train.evalEvery > 0 && (step + 1) % c_.train.evalEvery == 0) || last) {
            lastValLoss_ = validationLoss(step);
            event["val_loss"] = lastValLoss_;
            telemetry_->write({{"type", "event"},
                               {"event", "eval"},
                               {"step", step + 1},
                               {"val_loss", lastValLoss_}});
            if (leader_ && !c_.engine.quiet)
                progress_ << "validation loss " << lastValLoss_ << " at step " << step + 1 << "\n";
        }
        telemetry_->write(std::move(event));
        telemetry_->flush(); // a killed run keeps every finished step in its file
        if (!spans_->error.empty())
            throw InputError("cannot write telemetry to " + runDir_.string() +
                             "/telemetry: " + spans_->error);
        reportStep(s, tps, mfu);
        if ((c_.train.checkpointEvery > 0 && (step + 1) % c_.train.checkpointEvery == 0) || last ||
            stopping)
            saveCheckpoint(step + 1);
        if (stopping && !last) {
            result.status = RunStatus::Interrupted;
            result.message = stopSignal() ? "stopped by signal " + std::to_string(stopSignal())
                                          : "stopped after " + std::to_string(c_.engine.stopAfter) +
                                                " steps (--stop-after)";
            telemetry_->write({{"type", "event"},
                               {"event", "interrupt"},
                               {"signal", stopSignal()},
                               {"reason", stopSignal() ? "signal" : "stop-after"}});
            progress_ << result.message << "; resume with --resume --out " << runDir_.string()
                      << "\n";
            break;
        }
    }
    result.finalValLoss = lastValLoss_;
    writeSummary(result);
    const TelemetryStats ts = telemetry_->stats();
    telemetry_->write(
        {{"type", "event"},
         {"event", "end"},
         {"status", toString(result.status)},
         {"steps", result.stepsCompleted},
         {"memory_peak", memoryJson(memory_.peak())},
         {"final_loss", std::isfinite(lastLoss_) ? json(lastLoss_) : json()},
         {"telemetry", {{"written", ts.written + 1}, {"sent", ts.sent}, {"dropped", ts.dropped}}}});
    telemetry_->flush();
    return result;
}

} // namespace

TrainResult train(const RunConfig& config, std::ostream& progress, Communicator* world,
                  kernels::Ops* device) {
    Run run(config, progress, world, device);
    return run.execute();
}

} // namespace shardscope
