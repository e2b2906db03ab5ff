#include "formulas.h"

#include "sched/zero_bubble_auto.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

namespace shardscope {

namespace {

// What the planner needs of an automatic zero-bubble schedule (ZB-1p, ZB-2p): its bubble and each
// rank's peak, from the same program the engine runs and the Pipeline page draws (F, B and W of
// equal time). Beyond m = 4p more microbatches only lengthen the steady state, which has no
// bubble, so (p, min(m, 4p)) stands for (p, m); results are kept, since a search asks for the same
// few pairs many times.
struct AutomaticSchedule {
    // In microbatches (one microbatch's F + B + W is 3): (makespan - 3m) / 3 when the optimizer
    // waits for every rank, (span - 3m) / 3 under post-validation.
    double bubbleMakespan = 0;
    double bubbleSpan = 0;
    std::vector<int> peakHeld;
};

constexpr int kMostSimulatedPasses = 300'000; // zeroBubbleOrder's limit on p x m

std::optional<AutomaticSchedule> automaticSchedule(PipelineSchedule s, int p, int m) {
    const int limit = zeroBubbleHeldLimit(s, p);
    const int simulated = std::min(m, 4 * p);
    if (double(p) * simulated > kMostSimulatedPasses)
        return std::nullopt;
    static std::mutex mutex;
    static std::map<std::pair<int, int>, AutomaticSchedule> kept[2];
    auto& cache = kept[s == PipelineSchedule::ZeroBubble2p ? 1 : 0];
    {
        const std::lock_guard lock(mutex);
        if (const auto it = cache.find({p, simulated}); it != cache.end())
            return it->second;
    }
    // Scheduled outside the lock: other threads' estimates go on meanwhile.
    const ZeroBubbleOrder order = zeroBubbleOrder(p, simulated, limit);
    const AutomaticSchedule a{(order.makespan - 3.0 * simulated) / 3.0,
                              (order.span - 3.0 * simulated) / 3.0, order.peakHeld};
    const std::lock_guard lock(mutex);
    if (cache.size() > 4096)
        cache.clear();
    cache.emplace(std::make_pair(p, simulated), a);
    return a;
}

} // namespace

double trainingFlops6ND(double params, double tokens) {
    return 6.0 * params * tokens;
}

double matmulArithmeticIntensity(double M, double N, double K, double bytesPerElement) {
    return (2.0 * M * N * K) / ((M * K + K * N) * bytesPerElement);
}

double ridgePoint(double peakFlops, double memoryBandwidth) {
    return memoryBandwidth > 0 ? peakFlops / memoryBandwidth : 0.0;
}

double ringAllReduceBytesPerRank(double bytes, int n) {
    return n > 1 ? 2.0 * (n - 1) / n * bytes : 0.0;
}

double ringAllGatherBytesPerRank(double bytes, int n) {
    return n > 1 ? double(n - 1) / n * bytes : 0.0;
}

double naiveAllReduceRootBytes(double bytes, int n) {
    return 2.0 * (n - 1) * bytes;
}

double ringAllReduceSeconds(double bytes, int n, double bandwidth, double latency) {
    if (n <= 1)
        return 0.0;
    return 2.0 * (n - 1) * latency + ringAllReduceBytesPerRank(bytes, n) / bandwidth;
}

double ringAllGatherSeconds(double bytes, int n, double bandwidth, double latency) {
    if (n <= 1)
        return 0.0;
    return (n - 1) * latency + ringAllGatherBytesPerRank(bytes, n) / bandwidth;
}

double pipelineBubbleMicrobatches(PipelineSchedule s, int p, int m, int v, bool postValidation) {
    if (p <= 1)
        return 0.0;
    switch (s) {
    case PipelineSchedule::Naive:
        return double(p - 1) * m;
    case PipelineSchedule::GPipe:
    case PipelineSchedule::OneFOneB:
        return p - 1.0;
    case PipelineSchedule::Interleaved:
        return (p - 1.0) / std::max(1, v);
    case PipelineSchedule::ZeroBubble:
        return (p - 1.0) / 3.0;
    case PipelineSchedule::ZeroBubble1p:
    case PipelineSchedule::ZeroBubble2p:
        if (const auto a = automaticSchedule(s, p, std::max(1, m)))
            return postValidation ? a->bubbleSpan : a->bubbleMakespan;
        // Too many passes to schedule: ZB-H1's (p-1)/3, which both reach by their makespan, and
        // which ZB-2p's span loses entirely once m >= 2p fills its warm-up.
        return postValidation && s == PipelineSchedule::ZeroBubble2p && m >= 2 * p
                   ? 0.0
                   : (p - 1.0) / 3.0;
    }
    return p - 1.0;
}

double pipelineBubbleFraction(PipelineSchedule s, int p, int m, int v, bool postValidation) {
    const double bubble = pipelineBubbleMicrobatches(s, p, m, v, postValidation);
    return bubble / (m + bubble);
}

double pipelineInflightMicrobatches(PipelineSchedule s, int p, int m, int v, int stage) {
    switch (s) {
    case PipelineSchedule::Naive:
        return 1.0;
    case PipelineSchedule::GPipe:
        return m;
    case PipelineSchedule::OneFOneB:
        return std::min(p - stage, m);
    case PipelineSchedule::ZeroBubble: // later stages defer their W passes, holding up to p
        return std::min(p, m);
    case PipelineSchedule::ZeroBubble1p:
    case PipelineSchedule::ZeroBubble2p: {
        const int limit = zeroBubbleHeldLimit(s, p);
        const auto a = p > 1 ? automaticSchedule(s, p, std::max(1, m)) : std::nullopt;
        if (!a)
            return std::min(limit, std::max(1, m));
        return a->peakHeld[std::size_t(std::clamp(stage, 0, p - 1))];
    }
    case PipelineSchedule::Interleaved:
        return std::min<double>(m, (p - stage) + (p - 1.0) / std::max(1, v));
    }
    return std::min(p - stage, m);
}

double optimizerStateBytes(Optimizer o) {
    return o == Optimizer::AdamW ? 8.0 : 4.0;
}

namespace {
double modelStateBytes(const PrecisionPolicy& p, double weightBytes, Optimizer o, int zeroStage,
                       int shards) {
    const double n = std::max(1, shards);
    const double weights = weightBytes / (zeroStage >= 3 ? n : 1.0);
    const double grads = p.gradBytes() / (zeroStage >= 2 ? n : 1.0);
    const double optimizer =
        (p.masterBytes() + optimizerStateBytes(o)) / (zeroStage >= 1 ? n : 1.0);
    return weights + grads + optimizer;
}
} // namespace

double modelStateBytesPerParam(const PrecisionPolicy& p, Optimizer o, int zeroStage, int shards) {
    return modelStateBytes(p, p.weightBytes(), o, zeroStage, shards);
}

double modelStateBytesPerParam(const PrecisionPolicy& p, Optimizer o, int zeroStage, int shards,
                               const GpuSpec& gpu) {
    return modelStateBytes(p, p.weightBytesOn(gpu), o, zeroStage, shards);
}

double jobMtbfSeconds(double gpuMtbfHours, int gpus) {
    return gpuMtbfHours * 3600.0 / std::max(1, gpus);
}

double optimalCheckpointIntervalSeconds(double writeSeconds, double mtbfSeconds) {
    if (writeSeconds >= 2.0 * mtbfSeconds)
        return mtbfSeconds;
    return std::sqrt(2.0 * writeSeconds * mtbfSeconds) - writeSeconds;
}

double trainingTimeFraction(double interval, double write, double mtbf, double restart) {
    if (interval <= 0 || mtbf <= 0)
        return 0.0;
    const double checkpointShare = interval / (interval + write);
    const double lostPerFailure = restart + 0.5 * (interval + write);
    return std::clamp(checkpointShare * (1.0 - lostPerFailure / mtbf), 0.0, 1.0);
}

} // namespace shardscope
