// What a training run is doing, rank by rank, built from its telemetry events (docs/telemetry.md)
// as they arrive from the stream or are read from the run directory. Memory is bounded whatever
// the run's length: step series are thinned beyond a window, spans are kept for the last few
// steps only, and per-step activity for a window of steps. The analyses (pipeline.h,
// diagnosis.h, comparison.h) read a RunState; the app's monitor and `shardscope-cli report`
// both build one.
#pragma once

#include "bounded_series.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/train_config.h"
#include "launcher_notice.h"

#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace shardscope::watch {

// Bytes by category, as step events and the planner's memory_predicted write them.
struct MemoryBytes {
    double parameters = 0, gradients = 0, optimizer = 0, activations = 0, workspace = 0;
    double total() const { return parameters + gradients + optimizer + activations + workspace; }
};

enum class SpanKind {
    Data,
    Forward,
    Backward,       // fused B+W
    BackwardInput,  // B
    BackwardWeight, // W
    Optimizer,
    GradNorm,
    Eval,
    Checkpoint,
    Communication,
    Wait,
    Other,
};
SpanKind spanKindFromString(const std::string& s); // Other when unknown
const char* toString(SpanKind k);
// Work the rank's own cores do (everything but communication, waits, evaluation, checkpoints).
bool isCompute(SpanKind k);
// Forward and the three backward kinds: the ops of a pipeline schedule.
bool isPipelineOp(SpanKind k);

struct Span {
    SpanKind kind = SpanKind::Other;
    std::int64_t step = 0;
    int microbatch = -1;
    int chunk = 0;
    double start = 0, end = 0; // seconds on rank 0's clock (this segment)
    // communication and wait spans:
    std::string axis;       // dp, tp, pp, cp, embedding
    std::string collective; // all_reduce, send, recv, ...
    int peer = -1;
    double bytes = 0;
    double seconds() const { return end - start; }
};

struct StepSample {
    std::int64_t step = 0;
    double t = 0;
    double loss = 0, gradNorm = 0, learningRate = 0;
    double tokens = 0, stepTime = 0, tokensPerSecond = 0, flopsPerSecond = 0, mfu = 0;
    std::optional<double> valLoss;
    MemoryBytes memory, memoryPeak;
    double dpCommunication = 0, dpExposed = 0, dpHidden = 0;
};

// One step of one rank, summed from its spans when its step event arrives.
struct StepActivity {
    std::int64_t step = 0;
    double stepTime = 0;
    double compute = 0;                        // seconds of compute spans
    std::map<std::string, double> busy;        // axis -> seconds with a transfer in flight
    std::map<std::string, double> exposed;     // axis -> seconds blocked (union of waits)
    double pipelineStart = 0, pipelineEnd = 0; // first and last pipeline op of the step
};

// Where a rank is blocked: from its stall and hang events (the watchdog's reports).
struct BlockedIn {
    std::int64_t step = 0;
    int microbatch = -1;
    std::string op, collective, axis;
    std::uint64_t sequence = 0;
    double waited = 0; // seconds, when reported
    double at = 0;     // the event's t
    bool hang = false; // the watchdog gave up on it (a hang event), not only a stall
};

struct Coordinate {
    int dp = 0, tp = 0, pp = 0, cp = 0;
};

struct RankState {
    int rank = 0;
    Coordinate coord;
    std::string host;
    long pid = 0;
    bool started = false;
    int segments = 0; // start events seen: 1 + resumes
    MemoryBytes predictedMemory;
    int stage = 0; // pipeline stage of predictedMemory
    BoundedSeries<StepSample> steps;
    std::deque<StepActivity> activity;    // the newest steps, at most RunState::kActivitySteps
    std::deque<Span> spans;               // the newest steps' spans, at most kSpanSteps steps
    std::optional<BlockedIn> blocked;     // cleared by any later progress
    std::optional<std::string> endStatus; // completed, interrupted, failed
    std::vector<std::string> errors;
    // The ranks this rank's watchdog found gone, each with its report's t (also in `errors`).
    std::vector<std::pair<int, double>> lossesFound;
    double lastT = 0;           // t of the newest event
    double lastReceived = -1;   // receiver's clock at the newest event, -1 for files
    bool disconnected = false;  // the stream closed without an end event
    std::int64_t lastSeq = 0;   // in the current segment
    std::int64_t missedSeq = 0; // events the seq numbers say never arrived
    double droppedEvents = 0;   // as the end event counts them (stream drops)

    std::int64_t lastStep() const { return steps.empty() ? 0 : steps.back().step; }
};

// From the first start event: what the run is.
struct RunInfo {
    bool known = false;
    nlohmann::json config;     // the run config as the engine resolved it
    ModelSpec model;           // parsed from config when it parses
    ParallelConfig parallel;   //
    TrainConfig train;         //
    std::string configProblem; // why config did not parse, if it did not
    int worldSize = 1;
    double peakFlops = 0; // the job's, as mfu is relative to
    std::string peakSource;
    std::optional<double> lossFloor;
    std::string data, backend;
    double wallClock = 0;        // Unix seconds at t = 0
    nlohmann::json prediction;   // the start event's prediction (rank 0's), or null
    std::int64_t totalSteps = 0; // from the config, 0 when unknown
};

// The watchdog's verdict on a hung job.
struct HangSummary {
    std::string message;
    std::vector<int> missing; // ranks that never reported
    int reporter = -1;
    double at = 0; // the summary's t
};

// A rank another rank's watchdog found gone (its process ended without a message).
struct LostRank {
    int reporter = -1;   // the rank that noticed
    std::string message; // the reporter's sentence: who, and where it waited
    double at = 0;       // the report's t
};

class RunState {
public:
    static constexpr std::size_t kSeriesCapacity = 2048; // step samples per rank, thinned beyond
    static constexpr std::size_t kActivitySteps = 512;   // StepActivity per rank
    static constexpr std::size_t kSpanSteps = 3;         // steps whose spans are kept per rank
    static constexpr std::size_t kMaxSpans = 65536;      // and at most this many spans of them

    // One telemetry event. receivedAt: the receiver's clock in seconds (the app's), or < 0 when
    // read from a file. Events that are not objects or lack a rank are counted and ignored.
    void add(const nlohmann::json& event, double receivedAt = -1);
    // The stream from `rank` ended; without an end event the rank is presumed dead.
    void connectionClosed(int rank, double receivedAt);
    // The launcher said a rank's process died (read from its output, not from telemetry).
    void launcherNotice(const LauncherNotice& notice);

    const RunInfo& info() const { return info_; }
    const std::map<int, RankState>& ranks() const { return ranks_; }
    const RankState* rank(int r) const;
    const std::optional<HangSummary>& hangSummary() const { return hang_; }
    // Ranks found gone, by rank: the first report of each.
    const std::map<int, LostRank>& lostRanks() const { return lost_; }
    // What the launcher said of ranks that died, by rank: the first notice of each.
    const std::map<int, LauncherNotice>& launcherNotices() const { return notices_; }
    std::int64_t ignoredEvents() const { return ignored_; }
    // The highest step any rank has completed.
    std::int64_t latestStep() const;
    // The highest t seen in the newest segment (a resumed run's clock starts again at 0).
    double latestT() const { return latestT_; }

private:
    void onStart(RankState& r, const nlohmann::json& e);
    void onSpan(RankState& r, const nlohmann::json& e);
    void onStep(RankState& r, const nlohmann::json& e);
    void onEvent(RankState& r, const nlohmann::json& e);

    RunInfo info_;
    std::map<int, RankState> ranks_;
    std::optional<HangSummary> hang_;
    std::map<int, LostRank> lost_;
    std::map<int, LauncherNotice> notices_;
    std::int64_t ignored_ = 0;
    double latestT_ = 0;
    int newestSegment_ = 0;
};

// Seconds covered by the union of [start, end) intervals.
double unionSeconds(std::vector<std::pair<double, double>> intervals);

} // namespace shardscope::watch
