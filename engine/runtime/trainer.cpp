#include "trainer.h"

#include "core/error.h"
#include "core/json_io.h"
#include "devices.h"
#include "host_staged_communicator.h"
#include "plan/compute.h"
#include "prediction.h"
#include "rank_device.h"
#include "sched/pipeline_program.h"
#include "stop_signal.h"
#include "tcp_event_stream.h"
#include "training_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <nlohmann/json.hpp>
#include <unistd.h>

namespace shardscope {

using nlohmann::json;

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

} // namespace

json memoryJson(const MemoryUsage& u) {
    json j;
    for (MemoryCategory c : kMemoryCategories)
        j[toString(c)] = u[c];
    j["total"] = u.total();
    return j;
}

namespace {

CommunicationSpan collectiveSpan(const char* axis, std::size_t bytes, double start, double end) {
    CommunicationSpan s;
    s.collective = "all_reduce";
    s.axis = axis;
    s.bytes = bytes;
    s.start = start;
    s.end = end;
    return s;
}

std::string hostName() {
    char name[256] = {};
    return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string();
}

} // namespace

json predictedJson(const MemoryBreakdown& m, int stage) {
    return {{"parameters", m.parameters},
            {"gradients", m.gradients},
            {"optimizer", m.optimizer},
            {"activations", m.activations},
            {"stage", stage},
            {"source", "shardscope planner, memoryForStage for the same model, layout and stage"}};
}

namespace {

json chunksJson(const std::vector<ModelChunk>& chunks) {
    json j = json::array();
    for (const ModelChunk& c : chunks)
        j.push_back({{"first_layer", c.firstLayer},
                     {"layers", c.layers},
                     {"embedding", c.embedding},
                     {"head", c.head}});
    return j;
}

std::string gibibytes(double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
    return buf;
}

std::string mebibytes(double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024.0));
    return buf;
}

} // namespace

// Setting up, step by step, then the loop: train, log, evaluate, checkpoint, until the last step,
// a stop or a loss that is no longer finite.
TrainResult TrainingRun::execute() {
    checkTrainable(c_);
    totalSteps_ = c_.totalSteps();
    joinRanks();
    if (!c_.engine.telemetry.empty()) // a typo must not leave a half-made run directory behind
        parseCollectorAddress(c_.engine.telemetry);
    data_ = Dataset::open(dataSpecOf(c_));
    checkMemoryFits();
    buildModel();
    chooseDevice();
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
    openTelemetry();
    const ClockOffset clock = alignClocks();
    writeStartEvent(hardware, clock);
    restoreOrInitialize(resumeFrom);
    resumeFrom.reset(); // its bytes are on the device now
    calibrateReduction();
    printBanner();

    TrainResult result;
    result.runDir = runDir_;
    result.firstStep = startStep_;
    result.stepsCompleted = startStep_;
    const StopSignalHandlers stopHandlers;
    for (std::int64_t step = startStep_; step < totalSteps_; ++step) {
        // A data file changed in place ends the run at a step boundary, every rank together,
        // with the last whole step checkpointed; one truncated mid-step ends a single process
        // the same way (the step's update has not happened: the weights are the last step's).
        std::optional<std::string> dataChanged = data_->changedSinceOpened();
        const bool anyRankSawIt = agreeOnStop(dataChanged.has_value());
        StepRecord s;
        if (!anyRankSawIt) {
            try {
                s = trainStep(step);
            } catch (const DataChangedError& e) {
                if (worldSize() > 1)
                    throw;
                dataChanged = e.what();
            }
        }
        if (anyRankSawIt || dataChanged) {
            failOnDataChange(result, step, dataChanged);
            break;
        }
        if (!std::isfinite(s.loss) || !std::isfinite(s.gradNorm)) {
            failOnNonFinite(result, s);
            break;
        }
        lastLoss_ = s.loss;
        result.steps.push_back(s);
        result.stepsCompleted = step + 1;
        const Throughput throughput = throughputOf(s);
        json event = stepEvent(s, throughput);
        const bool last = step + 1 == totalSteps_;
        const bool stopping =
            agreeOnStop(stopSignal() != 0) ||
            (c_.engine.stopAfter > 0 && step + 1 - startStep_ >= c_.engine.stopAfter);
        if (evaluationDue(step) || last) {
            try {
                event["val_loss"] = validationLoss(step);
            } catch (const DataChangedError& e) { // after this step's update: keep it
                if (worldSize() > 1)
                    throw;
                telemetry_->write(std::move(event));
                failOnDataChange(result, step + 1, e.what());
                break;
            }
        }
        telemetry_->write(std::move(event));
        telemetry_->flush(); // a killed run keeps every finished step in its file
        if (!spans_->error.empty())
            throw InputError("cannot write telemetry to " + runDir_.string() +
                             "/telemetry: " + spans_->error);
        reportStep(s, throughput);
        if (checkpointDue(step) || last || stopping)
            saveCheckpoint(step + 1);
        if (stopping && !last) {
            interrupt(result);
            break;
        }
    }
    finish(result);
    return result;
}

namespace {

// The job's other ranks on this host and their pids, from one exchange over the control channel
// (a host stands as its name's hash cut to 52 bits, exact in a double).
std::vector<Watchdog::Peer> localPeers(ControlChannel& control) {
    const int size = control.size(), me = control.rank();
    const double host =
        double(std::hash<std::string>{}(hostName()) & ((std::uint64_t(1) << 52) - 1));
    std::vector<double> table(2 * std::size_t(size), 0.0);
    table[2 * std::size_t(me)] = double(::getpid());
    table[2 * std::size_t(me) + 1] = host;
    control.sum(table.data(), table.size());
    std::vector<Watchdog::Peer> peers;
    for (int r = 0; r < size; ++r)
        if (r != me && table[2 * std::size_t(r) + 1] == host)
            peers.push_back({r, long(table[2 * std::size_t(r)])});
    return peers;
}

} // namespace

// With more than one rank: every wait watched, the control channel, the mesh and its groups.
void TrainingRun::joinRanks() {
    if (world_ && world_->size() > 1) {
        // The watchdog's thread is not one MPI (initialised for the main thread) or NCCL may be
        // called from, so it ends only this process; the launcher ends the rest (mpirun on a
        // rank's non-zero exit, srun with --kill-on-bad-exit), and the other waiting ranks'
        // watchdogs would end them soon after anyway.
        watchdog_ = std::make_unique<Watchdog>(c_.engine.watchdogSeconds, world_->rank(),
                                               world_->size(), [](int code) { std::_Exit(code); });
        if (!ops_->memoryIsHostMemory()) { // MPI moves host memory: stage through it
            stagedWorld_ = std::make_unique<HostStagedCommunicator>(*world_, *ops_);
            world_ = stagedWorld_.get();
        }
        watchedWorld_ = std::make_unique<WatchedCommunicator>(*world_, *watchdog_);
        world_ = watchedWorld_.get();
        world_->orderAfter(ops_->computeStream()); // every group made below inherits it
        control_ = world_->controlChannel();
        watchdog_->setLocalPeers(localPeers(*control_));
        mesh_ = std::make_unique<ProcessMesh>(c_.parallel, *world_);
        rank_ = world_->rank();
        leader_ = rank_ == 0;
        if (c_.parallel.dp * c_.parallel.cp > 1)
            dataParallel_ = &mesh_->replicas();
        if (c_.parallel.cp > 1)
            contextParallel_ = &mesh_->group(Axis::CP);
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
}

// The planner predicts what this rank allocates (parameters, gradients and optimizer exactly,
// activations within 10%), so a run that cannot fit is refused before it allocates anything,
// not ended by std::bad_alloc or the OOM killer halfway through its first step.
void TrainingRun::checkMemoryFits() const {
    const MemoryBreakdown m =
        memoryForStage({c_.model, ClusterSpec{}, c_.parallel, c_.train, Assumptions{}}, ppRank_);
    const double needed = m.parameters + m.gradients + m.optimizer + m.activations;
    int sharing = ranksOnThisHost();
    std::string where;
    double available = 0;
    if (ops_->memoryIsHostMemory()) {
        available = hostAvailableBytes() / sharing;
        where = "this host has " + gibibytes(available * sharing) + " available";
    } else { // the GPU of this local rank, shared by the local ranks placed on it
        const DeviceReport gpus = queryDevices();
        if (gpus.devices.empty())
            return;
        const int count = int(gpus.devices.size());
        const DeviceInfo& gpu = gpus.devices[std::size_t(localRankOnThisHost() % count)];
        sharing = (sharing + count - 1) / count;
        available = gpu.memoryBytes / sharing;
        where = "GPU " + std::to_string(gpu.index) + " has " + gibibytes(gpu.memoryBytes);
    }
    std::string problem;
    if (needed > available && available > 0)
        problem =
            ("this rank would need " + gibibytes(needed) + " (parameters " +
             gibibytes(m.parameters) + ", gradients " + gibibytes(m.gradients) + ", optimizer " +
             gibibytes(m.optimizer) + ", activations " + gibibytes(m.activations) +
             ": the planner's prediction for this model, layout and stage) and " + where +
             (sharing > 1 ? " for its " + std::to_string(sharing) + " ranks" : std::string()) +
             ": use a smaller model, sequence or micro batch, recompute, ZeRO, or more tensor or "
             "pipeline parallelism (shardscope-cli plan shows the memory of a layout)");
    // Every rank says so together: one that went on alone would wait for the others forever.
    const bool anyRank = control_ ? control_->any(!problem.empty()) : !problem.empty();
    if (anyRank)
        throw InputError(problem.empty() ? "another rank's predicted memory does not fit: its "
                                           "message names the rank's categories"
                                         : problem);
}

// The model this rank holds, its optimizer, the schedule it runs and its gradient buckets.
void TrainingRun::buildModel() {
    const ParallelConfig& p = c_.parallel;
    model_ = std::make_unique<GptModel>(
        c_.model, p.microBatch, *ops_, memory_, RecomputePolicy{p.recompute, p.recomputeLayers},
        !p.flashAttention, pipelineChunks(GptShape::of(c_.model).layers, p, ppRank_),
        TensorParallel{p.tp, tpRank_, tensorParallel_, p.sequenceParallel},
        ZeroSharding{dataParallel_ ? p.zero : 0, dataParallel_}, TensorTypes::of(p.precision),
        ContextParallel{p.cp, mesh_ ? mesh_->coordinate().cp : 0, contextParallel_});
    if (mesh_) { // every rank joins the call that makes the groups
        std::vector<int> members{rank_};
        if (model_->sharedTensor() != GptModel::npos) {
            const std::vector<int> stages = groupRanks(p, rank_, Axis::PP);
            members = {stages.front(), stages.back()};
        }
        embeddingGroup_ = world_->subgroup(members, "embedding");
    }
    zero_ = p.zero >= 1 && dataParallel_;
    optimizer_ = std::make_unique<AdamW>(*model_, *ops_, memory_, c_.train); // owned shards only
    executor_ = std::make_unique<ScheduleExecutor>(
        *model_, buildPipelineProgram({p.schedule, p.pp, p.microbatches(), p.vpp}), ppRank_, p.dp,
        pipeline_);
    if (dataParallel_ && p.zero < 2) { // ZeRO-2/3 reduce inside the model, per microbatch
        buckets_ = std::make_unique<GradientBuckets>(
            *dataParallel_, model_->gradients(), model_->parameterCount(),
            static_cast<std::size_t>(c_.engine.bucketMiB * 1024 * 1024), this,
            [](const void* self) {
                return static_cast<const TrainingRun*>(self)->telemetry_->now();
            });
        if (zero_)
            buckets_->shardOver(model_->shardLayout(), memory_, *ops_);
        executor_->setGradientListener(buckets_.get());
    }
}

void TrainingRun::chooseDevice() {
    flopsPerToken_ = tokenFlops(c_.model, c_.parallel, Assumptions{}).model;
    threads_ = c_.engine.threads > 0 ? c_.engine.threads : kernels::cpuCores();
    device_ = shardscope::chooseDevice(c_.engine.device, localRankOnThisHost(), ranksOnThisHost(),
                                       threads_, c_.parallel.precision.compute,
                                       c_.engine.device == "cpu" ? DeviceReport{} : queryDevices());
    if (c_.engine.peakFlops > 0)
        peak_ = {c_.engine.peakFlops, "configured (engine.peak_tflops)"};
    else if (device_.peakFlops > 0)
        peak_ = {device_.peakFlops, device_.peakFormula};
    else
        throw InputError(device_.peakFormula);
    if (world_ && world_->size() > 1) { // MFU is the job's tokens against every rank's peak
        peak_.flops *= world_->size();
        peak_.formula = std::to_string(world_->size()) + " ranks x (" + peak_.formula + ")";
    }
}

void TrainingRun::openTelemetry() {
    TelemetryOptions topts;
    topts.path = (runDir_ / "telemetry" / ("rank-" + std::to_string(rank_) + ".jsonl")).string();
    topts.collector = c_.engine.telemetry;
    topts.rank = rank_;
    const RankCoordinate coord = rankCoordinate(c_.parallel, rank_, 1);
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
}

ClockOffset TrainingRun::alignClocks() {
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
    return clock;
}

// What every monitor and report starts from: the config, the hardware, the prediction.
void TrainingRun::writeStartEvent(const ClusterSpec& hardware, const ClockOffset& clock) {
    const ParallelConfig& p = c_.parallel;
    const MemoryBreakdown predicted =
        memoryForStage({c_.model, ClusterSpec{}, p, c_.train, Assumptions{}}, ppRank_);
    const std::time_t wall = std::time(nullptr);
    telemetry_->write({{"type", "event"},
                       {"event", "start"},
                       {"config", toJson(c_)},
                       {"threads", threads_},
                       {"backend", ops_->name()},
                       {"device",
                        {{"kind", device_.kind},
                         {"index", device_.index},
                         {"name", device_.name},
                         {"local_rank", device_.localRank},
                         {"local_ranks", device_.localRanks}}},
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
}

void TrainingRun::calibrateReduction() {
    if (!buckets_)
        return;
    standaloneReduction_ = measureStandaloneReduction();
    telemetry_->write({{"type", "event"},
                       {"event", "calibration"},
                       {"dp_reduction_standalone", standaloneReduction_},
                       {"method", "every bucket of the gradient buffer reduced with no compute to "
                                  "hide behind, best of 3"}});
}

void TrainingRun::printBanner() {
    if (!leader_ || c_.engine.quiet)
        return;
    progress_ << "shardscope-engine: " << c_.model.name << ", " << model_->parameterCount()
              << " parameters, " << layoutSummary(c_.parallel) << ", " << ops_->name() << "\n"
              << "data: " << data_->describe() << "\n"
              << "run directory: " << runDir_.string() << "\n";
    if (data_->lossFloor())
        progress_ << "loss floor (entropy rate of the source): " << *data_->lossFloor()
                  << " nats/token\n";
}

StepRecord TrainingRun::trainStep(std::int64_t step) {
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
            CommunicationSpan span =
                collectiveSpan("dp", b.count * gradientBytes(), b.started, b.completed);
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
        // holds the summed gradients of its own shards only.
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
bool TrainingRun::agreeOnStop(bool mine) const {
    if (!control_)
        return mine;
    spans_->at("agreeing on a stop or a checkpoint");
    return control_->any(mine);
}

bool TrainingRun::everyoneSucceeded(bool mine) const {
    return !agreeOnStop(!mine);
}

double TrainingRun::totalOverRanks(double local) const {
    return control_ ? control_->total(local) : local;
}

// With tied embeddings on different stages, the first stage's wte and the last stage's copy
// each hold part of the gradient; both take the sum, so both copies take the same update. The
// data-parallel buckets get the range afterwards.
void TrainingRun::synchronizeSharedEmbedding() {
    const std::size_t shared = model_->sharedTensor();
    if (shared == GptModel::npos)
        return;
    const ParameterTensor& t = model_->tensors()[shared];
    const double start = spans_->now();
    embeddingGroup_->allReduceSum(model_->gradients() + t.offset, t.count).wait();
    CommunicationSpan span =
        collectiveSpan("embedding", t.count * gradientBytes(), start, spans_->now());
    span.waited = true;
    span.waitStart = start;
    spans_->communication(span);
    if (buckets_)
        buckets_->gradientsReady(t.offset, t.count);
}

// The gradient reduction with nothing to hide it behind: the buffer reported in bucket-sized
// ranges from its end (as a backward finishes it), all waited for; best of three. What a step's
// exposed wait is measured against to say how much of the reduction the backward hid.
double TrainingRun::measureStandaloneReduction() {
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

// ZeRO-1/2: every replica updated only its shards; they go to everyone before the next step,
// unit by unit in equal parts: in place where a unit divides evenly, else through a padded buffer
// (one at a time, so the padding never holds more than one unit).
void TrainingRun::gatherParameters() {
    const double start = spans_->now();
    const ShardLayout& layout = model_->shardLayout();
    const int me = dpRank();
    const kernels::Ptr params = model_->parameters();
    std::size_t moved = 0;
    std::vector<Request> inPlace;
    for (const ShardLayout::Unit& u : layout.units()) {
        const std::size_t padded = u.padded(layout.parts());
        moved += padded;
        if (padded == u.count) {
            inPlace.push_back(dataParallel_->allGather(
                params + (u.offset + u.shard * std::size_t(me)), params + u.offset, u.shard));
            continue;
        }
        const ShardLayout::Piece mine = layout.pieceOf(u, me);
        Buffer staged = memory_.tensor(MemoryCategory::Workspace, padded, params.type);
        ops_->copy(staged.ptr() + u.shard * std::size_t(me), params + mine.flat, mine.count);
        dataParallel_->allGather(staged.ptr() + u.shard * std::size_t(me), staged.ptr(), u.shard)
            .wait();
        ops_->copy(params + u.offset, staged.ptr(), u.count);
    }
    waitAll(inPlace);
    CommunicationSpan span = collectiveSpan(
        "dp", moved * kernels::sizeOf(model_->parameters().type), start, spans_->now());
    span.collective = "all_gather";
    span.waited = true;
    span.waitStart = start;
    spans_->communication(span);
}

// The validation loss, written as an eval event and printed.
double TrainingRun::validationLoss(std::int64_t step) {
    spans_->step = step + 1;
    spans_->at("validation");
    const int B = c_.parallel.microBatch, N = B * c_.model.seqLen;
    lastValLoss_ = spans_->timed("eval", [&] {
        double sum = executor_->evaluate(
            c_.train.evalBatches, [&](int i, std::int32_t* inputs, std::int32_t* targets) {
                data_->batch(Split::Validation, 0, i, B, inputs, targets);
            });
        // The last stage has it; its tensor-parallel peers and replicas have copies.
        sum = totalOverRanks(countsReplicatedValues() ? sum : 0.0);
        return sum / (double(N) * c_.train.evalBatches);
    });
    telemetry_->write(
        {{"type", "event"}, {"event", "eval"}, {"step", step + 1}, {"val_loss", lastValLoss_}});
    if (leader_ && !c_.engine.quiet)
        progress_ << "validation loss " << lastValLoss_ << " at step " << step + 1 << "\n";
    return lastValLoss_;
}

TrainingRun::Throughput TrainingRun::throughputOf(const StepRecord& s) {
    Throughput t;
    t.tokensPerSecond = double(c_.tokensPerStep()) / s.seconds;
    t.flopsPerSecond = flopsPerToken_ * t.tokensPerSecond;
    t.mfu = peak_.flops > 0 ? t.flopsPerSecond / peak_.flops : 0;
    if (s.step > startStep_) { // the first step also pays for every allocation
        throughputSum_ += t.tokensPerSecond;
        mfuSum_ += t.mfu;
        ++throughputCount_;
    }
    return t;
}

json TrainingRun::stepEvent(const StepRecord& s, const Throughput& t) const {
    return {{"type", "step"},
            {"step", s.step + 1},
            {"loss", s.loss},
            {"grad_norm", s.gradNorm},
            {"lr", s.learningRate},
            {"tokens", c_.tokensPerStep()},
            {"step_time", s.seconds},
            {"tokens_per_s", t.tokensPerSecond},
            {"flops_per_s", t.flopsPerSecond},
            {"mfu", t.mfu},
            {"memory", memoryJson(memory_.live())},
            {"dp_communication", s.communication},
            {"dp_exposed_communication", s.exposedCommunication},
            {"dp_hidden_fraction",
             standaloneReduction_ > 0
                 ? std::clamp(1.0 - s.exposedCommunication / standaloneReduction_, 0.0, 1.0)
                 : 0.0},
            {"memory_peak", memoryJson(memory_.peak())}};
}

bool TrainingRun::evaluationDue(std::int64_t step) const {
    return c_.train.evalEvery > 0 && (step + 1) % c_.train.evalEvery == 0;
}

bool TrainingRun::checkpointDue(std::int64_t step) const {
    return c_.train.checkpointEvery > 0 && (step + 1) % c_.train.checkpointEvery == 0;
}

void TrainingRun::failOnNonFinite(TrainResult& result, const StepRecord& s) {
    const std::int64_t step = s.step;
    result.status = RunStatus::Failed;
    const bool lossBad = !std::isfinite(s.loss);
    const double bad = lossBad ? s.loss : s.gradNorm;
    std::string where = lastCheckpoint_.empty() ? std::string(" (there is none yet)")
                                                : " (" + lastCheckpoint_ + ")";
    if (!resumedFrom_.empty() && step == startStep_)
        where = " before " + resumedFrom_ +
                ", which this run resumed from and which already leads to it";
    result.message = std::string("the ") + (lossBad ? "loss" : "gradient norm") + " became " +
                     (std::isnan(bad) ? "NaN" : "infinite") + " at step " +
                     std::to_string(step + 1) + " (learning rate " +
                     std::to_string(s.learningRate) +
                     "); no checkpoint was written from it. Lower train.learning_rate or set "
                     "train.grad_clip, then resume from the last good checkpoint" +
                     where;
    telemetry_->write({{"type", "event"}, {"event", "error"}, {"message", result.message}});
}

void TrainingRun::failOnDataChange(TrainResult& result, std::int64_t step,
                                   const std::optional<std::string>& why) {
    result.status = RunStatus::Failed;
    if (step > 0 && lastCheckpointStep_ != step)
        saveCheckpoint(step);
    result.message =
        why.value_or("another rank's data file changed during the run") +
        ". The run stopped before step " + std::to_string(step + 1) +
        (lastCheckpoint_.empty() ? std::string(" with no checkpoint to resume from")
                                 : ", its last whole step checkpointed in " + lastCheckpoint_) +
        ": restore the data file, then resume with --resume --out " + runDir_.string();
    telemetry_->write({{"type", "event"}, {"event", "error"}, {"message", result.message}});
}

void TrainingRun::interrupt(TrainResult& result) {
    result.status = RunStatus::Interrupted;
    result.message = stopSignal() ? "stopped by signal " + std::to_string(stopSignal())
                                  : "stopped after " + std::to_string(c_.engine.stopAfter) +
                                        " steps (--stop-after)";
    telemetry_->write({{"type", "event"},
                       {"event", "interrupt"},
                       {"signal", stopSignal()},
                       {"reason", stopSignal() ? "signal" : "stop-after"}});
    progress_ << result.message << "; resume with --resume --out " << runDir_.string() << "\n";
}

void TrainingRun::reportStep(const StepRecord& s, const Throughput& t) {
    if (!leader_ || c_.engine.quiet || (s.step + 1) % c_.engine.logEvery != 0)
        return;
    char line[256];
    std::snprintf(line, sizeof line,
                  "step %6lld/%lld | loss %.4f | lr %.2e | norm %.3f | %7.0f tok/s | %7.1f ms | "
                  "MFU %5.1f%% | mem %s (peak %s)",
                  static_cast<long long>(s.step + 1), static_cast<long long>(totalSteps_), s.loss,
                  s.learningRate, s.gradNorm, t.tokensPerSecond, s.seconds * 1e3, t.mfu * 100,
                  mebibytes(double(memory_.live().total())).c_str(),
                  mebibytes(double(memory_.peakTotal())).c_str());
    progress_ << line << "\n" << std::flush;
}

// The summary and the end event, whatever stopped the run.
void TrainingRun::finish(TrainResult& result) {
    result.finalValLoss = lastValLoss_;
    writeSummary(result);
    telemetry_->writeEnd({{"type", "event"},
                          {"event", "end"},
                          {"status", toString(result.status)},
                          {"steps", result.stepsCompleted},
                          {"memory_peak", memoryJson(memory_.peak())},
                          {"final_loss", std::isfinite(lastLoss_) ? json(lastLoss_) : json()}},
                         TcpEventStream::kDrainTime);
    telemetry_->flush();
}

TrainResult train(const RunConfig& config, std::ostream& progress, Communicator* world,
                  kernels::Ops* device) {
    checkTrainable(config); // a config's mistakes are reported before any device is opened
    std::unique_ptr<kernels::Ops> backend;
    if (!device) {
        backend = makeBackend(config.engine.device, config.engine.threads,
                              config.parallel.precision.compute);
        device = backend.get();
    }
    TrainingRun run(config, progress, world, *device);
    return run.execute();
}

} // namespace shardscope
