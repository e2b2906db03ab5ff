// One training run in this process, as train() runs it: internal to the runtime, split over
// trainer.cpp (setting up and the training loop) and run_files.cpp (what a run keeps on disk: its
// directory, config, checkpoints and summary).
#pragma once

#include "checkpoint.h"
#include "clock_sync.h"
#include "communicator.h"
#include "control_channel.h"
#include "data.h"
#include "device_memory.h"
#include "gpt.h"
#include "host_staged_communicator.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"
#include "optimizer.h"
#include "parallel/gradient_buckets.h"
#include "plan/estimate.h"
#include "process_mesh.h"
#include "rank_device.h"
#include "schedule_executor.h"
#include "telemetry.h"
#include "telemetry_spans.h"
#include "trainer.h"
#include "watchdog.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace shardscope {

// Memory by category as telemetry and the summary write it, measured and predicted.
nlohmann::json memoryJson(const MemoryUsage& u);
nlohmann::json predictedJson(const MemoryBreakdown& m, int stage);

class TrainingRun {
public:
    TrainingRun(const RunConfig& config, std::ostream& progress, Communicator* world,
                kernels::Ops& device)
        : c_(config), progress_(progress), world_(world), ops_(&device), memory_(*ops_) {}

    ~TrainingRun() {
        // The watchdog's thread writes stall and hang events into telemetry_, which goes first.
        if (watchdog_)
            watchdog_->setEvents({}, 0);
    }
    TrainingRun(const TrainingRun&) = delete;
    TrainingRun& operator=(const TrainingRun&) = delete;

    TrainResult execute();

private:
    // ---- setting up, in execute's order (trainer.cpp)
    void joinRanks();             // the watchdog, the control channel, the mesh and the groups
    void checkMemoryFits() const; // InputError when the predicted memory exceeds what is there
    void buildModel();            // model, optimizer, schedule executor, gradient buckets
    // This rank's device (its local rank's GPU, or the CPU) and the peak MFU is measured
    // against: the device's, or engine.peak_tflops.
    void chooseDevice();
    void openTelemetry();
    ClockOffset alignClocks();
    void writeStartEvent(const ClusterSpec& hardware, const ClockOffset& clock);
    void calibrateReduction();
    void printBanner();

    // ---- the training loop (trainer.cpp)
    StepRecord trainStep(std::int64_t step);
    // Tokens/s, FLOP/s and MFU of a step, as the step event carries them.
    struct Throughput {
        double tokensPerSecond = 0, flopsPerSecond = 0, mfu = 0;
    };
    Throughput throughputOf(const StepRecord& s);
    nlohmann::json stepEvent(const StepRecord& s, const Throughput& t) const;
    bool evaluationDue(std::int64_t step) const;
    bool checkpointDue(std::int64_t step) const;
    double validationLoss(std::int64_t step);
    void reportStep(const StepRecord& s, const Throughput& t);
    void failOnNonFinite(TrainResult& result, const StepRecord& s);
    // The data file changed before `step` (why: this rank's reason, or nothing when another
    // rank saw it): a checkpoint of the steps done, and the run fails with how to go on.
    void failOnDataChange(TrainResult& result, std::int64_t step,
                          const std::optional<std::string>& why);
    void interrupt(TrainResult& result);
    void finish(TrainResult& result);

    // ---- what a run keeps on disk (run_files.cpp)
    void prepareRunDirectory();
    void writeConfig();
    std::optional<LoadedCheckpoint> checkpointToResume();
    template <typename Load>
    std::optional<LoadedCheckpoint> newestCheckpointThatVerifies(Load load);
    void restoreOrInitialize(const std::optional<LoadedCheckpoint>& ck);
    void saveCheckpoint(std::int64_t stepsDone);
    void writeSummary(const TrainResult& r);

    void barrier() const {
        if (world_)
            world_->barrier();
    }
    int worldSize() const { return world_ ? world_->size() : 1; }
    std::size_t gradientBytes() const { return kernels::sizeOf(model_->gradients().type); }
    // The sum of every rank's value, on the control channel.
    double totalOverRanks(double local) const;
    // Whether this rank holds the one copy of a value its tensor-parallel peers and data-parallel
    // replicas also hold (context-parallel ranks each hold their slice's part: every one counts).
    bool countsReplicatedValues() const {
        return tpRank_ == 0 && (mesh_ ? mesh_->coordinate().dp : 0) == 0;
    }
    bool agreeOnStop(bool mine) const;
    bool everyoneSucceeded(bool mine) const;
    void synchronizeSharedEmbedding();
    std::string shardName(int pp, int tp, int dp) const;
    std::vector<std::string> shardNames() const;
    // This rank's place among the ranks holding the same weights (dp x cp, cp fastest): what
    // gradients are summed and ZeRO shards over.
    int dpRank() const { return mesh_ ? mesh_->replicaIndex() : 0; }
    // Replica 0 of each stage writes the parameters; under ZeRO every replica writes the
    // optimizer shards it owns.
    bool writesShard() const { return dpRank() == 0 || zero_; }
    std::string ownShard() const { return shardName(ppRank_, tpRank_, zero_ ? dpRank() : 0); }
    // Whether each replica checkpoints its shards of the parameters: under ZeRO-3, and under
    // ZeRO-1/2 with mixed precision, where the fp32 values are the master weights of the
    // optimizer's shards.
    bool checkpointsParameterSlices() const {
        return model_->shardsParameters() || (zero_ && optimizer_->masterWeights());
    }
    // The parameters this rank restores: its shards, or its stage's whole copy.
    std::string parameterFile() const {
        return (checkpointsParameterSlices() ? ownShard() : shardName(ppRank_, tpRank_, 0)) +
               ".params.f32";
    }
    void gatherParameters();
    double measureStandaloneReduction();

    const RunConfig& c_;
    std::ostream& progress_;
    Communicator* world_; // null or a world of one: a single process
    // With more than one rank every wait is watched (the watchdog outlives every group).
    std::unique_ptr<Watchdog> watchdog_;
    // Over the job's communicator where the device's memory is not host memory (a GPU's).
    std::unique_ptr<HostStagedCommunicator> stagedWorld_;
    std::unique_ptr<WatchedCommunicator> watchedWorld_;
    std::unique_ptr<ControlChannel> control_; // votes and sums, with more than one rank
    std::unique_ptr<ProcessMesh> mesh_;       // with more than one rank
    Communicator* dataParallel_ = nullptr;    // the dp x cp group, when dp x cp > 1
    Communicator* contextParallel_ = nullptr; // the cp group, when cp > 1
    Communicator* pipeline_ = nullptr;        // the pp group, when pp > 1
    Communicator* tensorParallel_ = nullptr;  // the tp group, when tp > 1
    // The first and last pipeline stage, summing the gradient of a tied embedding split between
    // them; a group of one on the other ranks.
    std::unique_ptr<Communicator> embeddingGroup_;
    int rank_ = 0, ppRank_ = 0, tpRank_ = 0;
    // ZeRO-1: each dp rank owns shards of the flat parameters (the model's shard layout),
    // updates them with its own share of the optimizer state, and they are all-gathered after
    // the step.
    bool zero_ = false;
    double standaloneReduction_ = 0; // seconds the step's gradient reduction takes alone
    bool leader_ = true;             // rank 0 writes the config, checkpoints, summary and progress
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
    std::filesystem::path runDir_;
    std::int64_t startStep_ = 0, totalSteps_ = 0;
    double flopsPerToken_ = 0;
    int threads_ = 1;
    RankDevice device_;
    kernels::PeakFlops peak_;
    double lastLoss_ = NAN, lastValLoss_ = NAN;
    std::string lastCheckpoint_, resumedFrom_;
    std::int64_t lastCheckpointStep_ = -1;           // steps done at lastCheckpoint_
    std::vector<nlohmann::json> skippedCheckpoints_; // passed over on resume, for telemetry
    double throughputSum_ = 0, mfuSum_ = 0;
    int throughputCount_ = 0;
};

} // namespace shardscope
