// A session: everything the user set up (model, cluster, layout, training run, which page),
// saved as versioned JSON in a .shardscope file. Plain data: no Qt, so tests and the headless
// renderer can build one directly.
#pragma once

#include "plan/estimate.h"
#include "sched/collective_plan.h"
#include "sched/pipeline_simulator.h"

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

namespace shardscope {

// Where the model came from; the ModelSpec itself is always saved in full, so a session opens
// the same even when the preset list or the imported config.json changes.
enum class ModelSource { Preset, Custom, Bare, HuggingFace };
std::string toString(ModelSource s);
ModelSource modelSourceFromString(const std::string& s); // throws InputError

// The Pipeline page's lesson: a schedule, optionally a second one to compare, on p ranks with m
// microbatches (v chunks per rank for an interleaved schedule), with the costs of one microbatch
// through one rank's layers (a chunk of an interleaved rank costs 1/v of them).
struct PipelineLesson {
    // True: p, m, v and the schedule are the session's layout's (the Explorer's) and follow it;
    // false once the user sets one of them on the page, until they go back to the layout.
    bool followsLayout = true;
    static constexpr int kMaxStages = 64, kMaxMicrobatches = 1024; // what the page draws
    PipelineSchedule schedule = PipelineSchedule::OneFOneB;
    std::optional<PipelineSchedule> compare = PipelineSchedule::ZeroBubble;
    int stages = 4;
    int microbatches = 8;
    int virtualStages = 2; // used by whichever schedule is interleaved
    OpCosts costs;         // per stage: one microbatch through all of one rank's layers
    double p2p = 0;

    ScheduleSpec spec(PipelineSchedule kind) const {
        return {kind, stages, microbatches,
                kind == PipelineSchedule::Interleaved ? virtualStages : 1};
    }
    PipelineCosts pipelineCosts(PipelineSchedule kind) const {
        return stageCosts(spec(kind), costs, p2p);
    }
};

// The lesson as the Pipeline page shows it: while it follows the layout, with the layout's p, m,
// v and schedule (p and m within what the page draws; `clamped` then says what was cut).
PipelineLesson pipelineLessonOf(const ParallelConfig& layout, const PipelineLesson& lesson,
                                std::string* clamped = nullptr);

// The Collectives page's lesson: an algorithm on N GPUs for a buffer of S bytes over links.
struct CollectivesLesson {
    CollectiveKind algorithm = CollectiveKind::RingAllReduce;
    int ranks = 8;
    double sizeGB = 1.0; // S as nccl-tests counts it
    LinkModel links;     // gpusPerNode, bandwidths (bytes/s) and latencies (s)
};

// Where and how the Monitor page launches the engine for this session's model and layout.
enum class LaunchTarget { Local, Ssh, Slurm };
std::string toString(LaunchTarget t);
LaunchTarget launchTargetFromString(const std::string& s); // throws InputError

struct LaunchSettings {
    LaunchTarget target = LaunchTarget::Local;
    std::string runsDirectory = "runs"; // run directories go here (on a filesystem every host sees)
    std::string hostfile;               // ssh: one "HOST slots=N" per line, # starts a comment
    // This machine's settings, not saved in session files (a shared file must not run commands):
    std::string sshOptions;   // ssh: extra ssh arguments, e.g. "-p 2222 -i ~/.ssh/key"
    std::string mpiOptions;   // ssh: extra mpirun arguments (--mca ...)
    std::string remoteEngine; // ssh, Slurm: the engine on the hosts; "": this one's path
    // "" : the app listens on loopback (remote ranks reach it through ssh reverse tunnels);
    // "HOST:PORT": the app listens there and ranks connect to it (Slurm nodes, say).
    std::string telemetryAddress;
    std::string slurmPartition;   // "" : the cluster's default
    std::string slurmTime;        // "" : the partition's default; else sbatch --time
    double stallSeconds = 5;      // engine.stall_report_s
    double watchdogSeconds = 300; // engine.watchdog_timeout_s
};

struct Session {
    // 2: GPUs carry their measured matmul ceilings; a version-1 GPU saved from a preset takes
    // its preset's on load (sessionFromJson).
    static constexpr int kFormatVersion = 2;
    static constexpr const char* kFormatName = "shardscope-session";

    ModelSource modelSource = ModelSource::Preset;
    std::string modelOrigin; // preset id or imported file path; empty for custom and bare
    ModelSpec model;
    ClusterSpec cluster;
    ParallelConfig parallel;
    TrainConfig train;
    PipelineLesson pipeline;
    CollectivesLesson collectives;
    LaunchSettings launch;
    std::string page = "memory"; // the page shown when the session was saved
    // The Explorer's "Assume MFU" what-if (Assumptions::assumedMfu): 0 for the modelled MFU.
    double assumedMfu = 0;
    // How MFU counts model FLOPs (Assumptions::flopsConvention), the Explorer's "FLOP count".
    FlopsConvention flopsConvention = FlopsConvention::Causal;
    // The Explorer's "Optimizer post-validation" (Assumptions::optimizerPostValidation).
    bool optimizerPostValidation = false;
    // Both pages' "Memory headroom" (Assumptions::memoryHeadroom): 0 uses the whole memory.
    double memoryHeadroom = 0;
    // The Explorer's "MoE layer host time" (Assumptions::moeLayerHostSeconds).
    double moeLayerHostSeconds = Assumptions{}.moeLayerHostSeconds;

    PlanInputs planInputs() const {
        Assumptions assume;
        assume.assumedMfu = assumedMfu;
        assume.flopsConvention = flopsConvention;
        assume.optimizerPostValidation = optimizerPostValidation;
        assume.memoryHeadroom = memoryHeadroom;
        assume.moeLayerHostSeconds = moeLayerHostSeconds;
        return {model, cluster, parallel, train, assume};
    }
};

// Keep layout and cluster consistent after an edit. The Explorer treats the cluster as given and
// sets dp = GPUs / (tp pp cp) when that divides; the Memory page treats the layout as given and
// resizes the cluster to its GPU count (clusterForWorld). Either leaves things as they are when no
// exact fit exists, so validation can explain the mismatch.
void fitDataParallelToCluster(Session& s);
void fitClusterToLayout(Session& s);

// Llama 3 70B on 8 nodes x 8 H100 SXM5: dp2 tp8 pp4, ZeRO-1, SP, selective recompute, bf16,
// global batch 512 x 8192 tokens, 15T tokens (the same default as `shardscope-cli plan`).
Session defaultSession();

nlohmann::json sessionToJson(const Session& s);
// Throws InputError naming what is wrong: not a session, a newer format version, a bad field.
Session sessionFromJson(const nlohmann::json& j);

// Read a .shardscope file; InputError names the file and the problem.
Session loadSession(const std::string& path);
// Write atomically (a temporary file renamed over the target), so a failed save never destroys
// the previous file. InputError when the file cannot be written.
void saveSession(const Session& s, const std::string& path);

} // namespace shardscope
