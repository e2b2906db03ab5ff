#include "monitor_data.h"

#include "watch/statistics.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace shardscope {

namespace {

using Field = double (*)(const watch::StepSample&);

MetricSeries seriesOf(const watch::RunState& run, Field field) {
    MetricSeries out;
    const bool perRank = run.ranks().size() <= std::size_t(kLinePerRankUpTo);
    if (perRank) {
        for (const auto& [id, r] : run.ranks()) {
            PlotLine line{QString("rank %1").arg(id), {}, {}};
            line.x.reserve(int(r.steps.size()));
            line.y.reserve(int(r.steps.size()));
            for (const watch::StepSample& s : r.steps) {
                line.x.push_back(double(s.step));
                line.y.push_back(field(s));
            }
            out.lines.push_back(std::move(line));
        }
        return out;
    }
    // Many ranks: the median across ranks at each step, and the range they span.
    std::map<std::int64_t, std::vector<double>> byStep;
    for (const auto& [id, r] : run.ranks())
        for (const watch::StepSample& s : r.steps)
            if (const double v = field(s); std::isfinite(v))
                byStep[s.step].push_back(v);
    PlotLine middle{QString("median of %1 ranks").arg(run.ranks().size()), {}, {}};
    PlotBand band;
    for (auto& [step, values] : byStep) {
        const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
        band.x.push_back(double(step));
        band.lo.push_back(*lo);
        band.hi.push_back(*hi);
        middle.x.push_back(double(step));
        middle.y.push_back(watch::median(std::move(values)));
    }
    out.lines.push_back(std::move(middle));
    out.band = std::move(band);
    return out;
}

} // namespace

MonitorData monitorData(const watch::RunState& run, const watch::HealthOptions& health) {
    MonitorData d;
    d.info = run.info();
    d.analysis = watch::analyse(run, health);
    d.latestStep = run.latestStep();
    d.throughput = seriesOf(run, [](const watch::StepSample& s) { return s.tokensPerSecond; });
    d.stepTime = seriesOf(run, [](const watch::StepSample& s) { return s.stepTime; });
    d.mfu = seriesOf(run, [](const watch::StepSample& s) { return s.mfu * 100; });
    d.gradNorm = seriesOf(run, [](const watch::StepSample& s) { return s.gradNorm; });
    // Every rank reports the job's loss: one line says it.
    const watch::RankState* lead = run.rank(0);
    if (!lead && !run.ranks().empty())
        lead = &run.ranks().begin()->second;
    if (lead) {
        PlotLine train{"training loss", {}, {}};
        d.validation.name = "validation loss";
        for (const watch::StepSample& s : lead->steps) {
            train.x.push_back(double(s.step));
            train.y.push_back(s.loss);
            if (s.valLoss) {
                d.validation.x.push_back(double(s.step));
                d.validation.y.push_back(*s.valLoss);
            }
        }
        d.loss.lines.push_back(std::move(train));
    }
    for (const auto& [id, r] : run.ranks()) {
        d.ranksStarted += r.started;
        std::vector<double> tps;
        for (const watch::StepSample& s : r.steps)
            if (s.step > 1)
                tps.push_back(s.tokensPerSecond);
        d.ranks.push_back({id, r.coord, QString::fromStdString(r.host), r.lastStep(),
                           watch::median(std::move(tps)), r.missedSeq});
    }
    return d;
}

} // namespace shardscope
