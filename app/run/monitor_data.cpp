#include "monitor_data.h"

#include "watch/statistics.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace shardscope {

namespace {

using Field = double (*)(const watch::StepSample&);

MetricSeries perRank(const watch::RunState& run, Field field) {
    MetricSeries out;
    for (const auto& [id, r] : run.ranks()) {
        PlotLine line{QString("rank %1").arg(id), {}, {}};
        line.x.reserve(qsizetype(r.steps.size()));
        line.y.reserve(qsizetype(r.steps.size()));
        for (const watch::StepSample& s : r.steps) {
            line.x.push_back(double(s.step));
            line.y.push_back(field(s));
        }
        out.lines.push_back(std::move(line));
    }
    return out;
}

// Many ranks: at each step of the first rank's series, the median across ranks and the range
// they span. Every rank's series is sorted by step, so one cursor per rank walks it once.
std::vector<MetricSeries> summarised(const watch::RunState& run, const std::vector<Field>& fields) {
    std::vector<MetricSeries> out(fields.size());
    const watch::RankState* grid = &run.ranks().begin()->second;
    std::vector<const watch::RankState*> ranks;
    for (const auto& [id, r] : run.ranks())
        ranks.push_back(&r);
    std::vector<std::size_t> cursor(ranks.size(), 0);
    std::vector<PlotLine> middle(fields.size());
    std::vector<PlotBand> band(fields.size());
    for (std::size_t f = 0; f < fields.size(); ++f)
        middle[f].name = QString("median of %1 ranks").arg(ranks.size());
    std::vector<const watch::StepSample*> at;
    std::vector<double> values;
    for (const watch::StepSample& g : grid->steps) {
        at.clear();
        for (std::size_t i = 0; i < ranks.size(); ++i) {
            const auto& steps = ranks[i]->steps;
            while (cursor[i] < steps.size() && steps[cursor[i]].step < g.step)
                ++cursor[i];
            if (cursor[i] < steps.size() && steps[cursor[i]].step == g.step)
                at.push_back(&steps[cursor[i]]);
        }
        for (std::size_t f = 0; f < fields.size(); ++f) {
            values.clear();
            for (const watch::StepSample* s : at)
                if (const double v = fields[f](*s); std::isfinite(v))
                    values.push_back(v);
            if (values.empty())
                continue;
            const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
            band[f].x.push_back(double(g.step));
            band[f].lo.push_back(*lo);
            band[f].hi.push_back(*hi);
            middle[f].x.push_back(double(g.step));
            std::nth_element(values.begin(), values.begin() + std::ptrdiff_t(values.size() / 2),
                             values.end());
            middle[f].y.push_back(values[values.size() / 2]);
        }
    }
    for (std::size_t f = 0; f < fields.size(); ++f) {
        out[f].lines.push_back(std::move(middle[f]));
        out[f].band = std::move(band[f]);
    }
    return out;
}

} // namespace

MonitorData monitorData(const watch::RunState& run, const watch::HealthOptions& health) {
    MonitorData d;
    d.info = run.info();
    d.analysis = watch::analyse(run, health);
    d.latestStep = run.latestStep();
    const std::vector<Field> fields{[](const watch::StepSample& s) { return s.tokensPerSecond; },
                                    [](const watch::StepSample& s) { return s.stepTime; },
                                    [](const watch::StepSample& s) { return s.mfu * 100; },
                                    [](const watch::StepSample& s) { return s.gradNorm; }};
    std::vector<MetricSeries> series;
    if (run.ranks().size() <= std::size_t(kLinePerRankUpTo)) {
        for (Field f : fields)
            series.push_back(perRank(run, f));
    } else {
        series = summarised(run, fields);
    }
    d.throughput = std::move(series[0]);
    d.stepTime = std::move(series[1]);
    d.mfu = std::move(series[2]);
    d.gradNorm = std::move(series[3]);
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
        // The rank's pace now: its newest 100 steps (after the first, which allocates).
        std::vector<double> tps;
        for (std::size_t i = r.steps.size() > 100 ? r.steps.size() - 100 : 0; i < r.steps.size();
             ++i)
            if (r.steps[i].step > 1)
                tps.push_back(r.steps[i].tokensPerSecond);
        d.ranks.push_back({id, r.coord, QString::fromStdString(r.host), r.lastStep(),
                           watch::median(std::move(tps)), r.missedSeq});
    }
    return d;
}

} // namespace shardscope
