// What the Monitor page draws, taken from a run's state in one go (under the LiveRun's lock, or
// from a replay): engine/watch's analysis, and the per-step series the live plots show, one line
// per rank for small jobs or the median with the min-max band across ranks for large ones.
#pragma once

#include "watch/analysis.h"

#include <QString>
#include <QVector>
#include <optional>
#include <vector>

namespace shardscope {

struct PlotLine {
    QString name;
    QVector<double> x, y; // step, value
};

struct PlotBand {
    QVector<double> x, lo, hi;
};

// One metric against step: the lines, and the band when the ranks are summarised.
struct MetricSeries {
    std::vector<PlotLine> lines;
    std::optional<PlotBand> band;
};

struct MonitorData {
    watch::RunInfo info;
    watch::RunAnalysis analysis;
    int ranksStarted = 0;
    std::int64_t latestStep = 0;
    MetricSeries throughput, stepTime, gradNorm;
    MetricSeries mfu;    // in percent
    MetricSeries loss;   // training loss; validation as its own lines
    PlotLine validation; // rank 0's validation losses
    struct RankRow {
        int rank = 0;
        watch::Coordinate coord;
        QString host;
        std::int64_t step = 0;
        double tokensPerSecond = 0;
        std::int64_t missedEvents = 0;
    };
    std::vector<RankRow> ranks;
};

// Ranks up to this many get a line each; more are drawn as median and band.
inline constexpr int kLinePerRankUpTo = 8;

MonitorData monitorData(const watch::RunState& run, const watch::HealthOptions& health = {});

} // namespace shardscope
