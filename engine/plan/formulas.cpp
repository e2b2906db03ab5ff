#include "formulas.h"

#include <algorithm>
#include <cmath>

namespace shardscope {

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

double pipelineBubbleMicrobatches(PipelineSchedule s, int p, int m, int v) {
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
    }
    return p - 1.0;
}

double pipelineBubbleFraction(PipelineSchedule s, int p, int m, int v) {
    const double bubble = pipelineBubbleMicrobatches(s, p, m, v);
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
    case PipelineSchedule::Interleaved:
        return std::min<double>(m, (p - stage) + (p - 1.0) / std::max(1, v));
    }
    return std::min(p - stage, m);
}

double optimizerStateBytes(Optimizer o) {
    return o == Optimizer::AdamW ? 8.0 : 4.0;
}

double modelStateBytesPerParam(const PrecisionPolicy& p, Optimizer o, int zeroStage, int shards) {
    const double n = std::max(1, shards);
    const double weights = p.weightBytes() / (zeroStage >= 3 ? n : 1.0);
    const double grads = p.gradBytes() / (zeroStage >= 2 ? n : 1.0);
    const double optimizer =
        (p.masterBytes() + optimizerStateBytes(o)) / (zeroStage >= 1 ? n : 1.0);
    return weights + grads + optimizer;
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
