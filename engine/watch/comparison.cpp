#include "comparison.h"

#include "core/units.h"
#include "pipeline.h"
#include "statistics.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace shardscope::watch {

using nlohmann::json;

namespace {

// The steps whose figures are representative: every one after the first of the run.
std::vector<const StepSample*> steadySteps(const RankState& r) {
    std::vector<const StepSample*> out;
    for (const StepSample& s : r.steps)
        if (s.step > 1)
            out.push_back(&s);
    if (out.empty() && !r.steps.empty())
        out.push_back(&r.steps.back());
    return out;
}

bool predicted(const json& prediction, const char* key, double* value) {
    if (!prediction.is_object())
        return false;
    const auto it = prediction.find(key);
    if (it == prediction.end() || !it->is_number())
        return false;
    *value = it->get<double>();
    return true;
}

std::string stepRange(const std::vector<const StepSample*>& steps) {
    if (steps.empty())
        return "no steps";
    return steps.size() == 1 ? "step " + std::to_string(steps.front()->step)
                             : "steps " + std::to_string(steps.front()->step) + "-" +
                                   std::to_string(steps.back()->step);
}

const char* const kPlannerSource = "predicted: the planner's estimate in the start event";

} // namespace

double ComparisonRow::errorPercent() const {
    if (!hasPredicted || !hasMeasured || predicted == 0)
        return NAN;
    return (measured - predicted) / predicted * 100;
}

std::string formatValue(double value, Unit unit) {
    if (!std::isfinite(value))
        return "-";
    switch (unit) {
    case Unit::Bytes:
        return formatBytes(value);
    case Unit::Seconds:
        return formatSeconds(value);
    case Unit::TokensPerSecond:
        return formatNumber(value, 4) + " tokens/s";
    case Unit::Fraction:
        return formatPercent(value);
    }
    return formatNumber(value);
}

std::vector<RankMemory> memoryByRank(const RunState& run) {
    std::vector<RankMemory> out;
    for (const auto& [id, r] : run.ranks()) {
        if (!r.started)
            continue;
        RankMemory m;
        m.rank = id;
        m.stage = r.stage;
        m.predicted = r.predictedMemory;
        if (!r.steps.empty())
            m.measured = r.steps.back().memoryPeak;
        out.push_back(m);
    }
    return out;
}

std::vector<AxisExposure> exposureByRank(const RunState& run) {
    std::vector<AxisExposure> out;
    for (const auto& [id, r] : run.ranks()) {
        // Per axis, a value for every step held (0 in steps where the axis did not appear).
        std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> byAxis;
        std::size_t steps = 0;
        const std::size_t from =
            r.activity.size() > kExposureSteps ? r.activity.size() - kExposureSteps : 0;
        for (std::size_t k = from; k < r.activity.size(); ++k) {
            const StepActivity& a = r.activity[k];
            if (a.step <= 1 && r.activity.size() > 1)
                continue;
            for (const auto& [axis, seconds] : a.busy) {
                auto& [busy, exposed] = byAxis[axis];
                busy.resize(steps, 0.0);
                exposed.resize(steps, 0.0);
                busy.push_back(seconds);
                const auto e = a.exposed.find(axis);
                exposed.push_back(e == a.exposed.end() ? 0.0 : e->second);
            }
            for (const auto& [axis, seconds] : a.exposed)
                if (!a.busy.count(axis)) {
                    auto& [busy, exposed] = byAxis[axis];
                    busy.resize(steps, 0.0);
                    exposed.resize(steps, 0.0);
                    busy.push_back(0.0);
                    exposed.push_back(seconds);
                }
            ++steps;
        }
        for (auto& [axis, values] : byAxis) {
            values.first.resize(steps, 0.0);
            values.second.resize(steps, 0.0);
            out.push_back(
                {id, axis, median(std::move(values.first)), median(std::move(values.second))});
        }
    }
    return out;
}

std::vector<ComparisonRow> predictedVsMeasured(const RunState& run) {
    MeasuredPipeline pipeline;
    if (const std::int64_t step = latestCompleteStep(run); step > 0)
        pipeline = measurePipeline(run, step);
    else
        pipeline.problem = "no complete step";
    return predictedVsMeasured(run, memoryByRank(run), pipeline, exposureByRank(run));
}

std::vector<ComparisonRow> predictedVsMeasured(const RunState& run,
                                               const std::vector<RankMemory>& memory,
                                               const MeasuredPipeline& m,
                                               const std::vector<AxisExposure>& exposure) {
    std::vector<ComparisonRow> rows;
    const json& prediction = run.info().prediction;

    // Memory: the rank with the largest measured peak, against its own stage's prediction.
    if (!memory.empty()) {
        const RankMemory& top =
            *std::max_element(memory.begin(), memory.end(), [](const auto& a, const auto& b) {
                return a.measured.total() < b.measured.total();
            });
        const std::string where =
            " (rank " + std::to_string(top.rank) + ", stage " + std::to_string(top.stage) + ")";
        const struct {
            const char* key;
            const char* label;
            double predicted, measured;
        } categories[] = {
            {"parameters", "Parameters", top.predicted.parameters, top.measured.parameters},
            {"gradients", "Gradients", top.predicted.gradients, top.measured.gradients},
            {"optimizer", "Optimizer state", top.predicted.optimizer, top.measured.optimizer},
            {"activations", "Activations", top.predicted.activations, top.measured.activations},
        };
        for (const auto& c : categories) {
            ComparisonRow row;
            row.key = std::string("memory.") + c.key;
            row.label = c.label + where;
            row.unit = Unit::Bytes;
            row.hasPredicted = run.rank(top.rank)->started;
            row.predicted = c.predicted;
            row.hasMeasured = !run.rank(top.rank)->steps.empty();
            row.measured = c.measured;
            row.how = "measured: the rank's highest bytes in use (memory_peak of its newest step); "
                      "predicted: the planner's memoryForStage for its stage (memory_predicted)";
            rows.push_back(row);
        }
    }

    // Throughput: rank 0's steps (every rank times the same synchronous step).
    const RankState* lead = run.rank(0);
    if (!lead && !run.ranks().empty())
        lead = &run.ranks().begin()->second;
    if (lead && !lead->steps.empty()) {
        const auto steps = steadySteps(*lead);
        std::vector<double> time, tps, mfu;
        for (const StepSample* s : steps) {
            time.push_back(s->stepTime);
            tps.push_back(s->tokensPerSecond);
            mfu.push_back(s->mfu);
        }
        const std::string over = "measured: median over " + stepRange(steps) + " of rank " +
                                 std::to_string(lead->rank) + "; " + kPlannerSource;
        const struct {
            const char* key;
            const char* label;
            Unit unit;
            double measured;
        } figures[] = {
            {"step_time", "Step time", Unit::Seconds, median(time)},
            {"tokens_per_s", "Throughput", Unit::TokensPerSecond, median(tps)},
            {"mfu", "MFU", Unit::Fraction, median(mfu)},
        };
        for (const auto& f : figures) {
            ComparisonRow row;
            row.key = f.key;
            row.label = f.label;
            row.unit = f.unit;
            row.hasMeasured = true;
            row.measured = f.measured;
            row.hasPredicted = predicted(prediction, f.key, &row.predicted);
            row.how = over;
            rows.push_back(row);
        }
    }

    // Bubble: the newest step every pipeline rank of replica 0 finished.
    if (m.ok()) {
        const int p = std::max(1, run.info().parallel.pp);
        ComparisonRow closed;
        closed.key = "bubble";
        closed.label = "Pipeline bubble";
        closed.unit = Unit::Fraction;
        closed.hasMeasured = true;
        closed.measured = m.measured.bubbleFraction;
        closed.hasPredicted = predicted(prediction, "bubble_fraction", &closed.predicted);
        closed.how = "measured: idle share of step " + std::to_string(m.step) +
                     "'s pipeline span on the " + std::to_string(p) +
                     " pipeline ranks of replica 0; predicted: the planner's closed form for the "
                     "schedule";
        rows.push_back(closed);
        ComparisonRow simulated = closed;
        simulated.key = "bubble.simulated";
        simulated.label = "Pipeline bubble, schedule simulated";
        simulated.hasPredicted = true;
        simulated.predicted = m.simulated.bubbleFraction;
        simulated.how = "measured: as above; predicted: the schedule's op lists (engine/sched) "
                        "simulated with each rank's median measured F, B and W times and no "
                        "transfer time";
        rows.push_back(simulated);
    }

    // Exposed communication per axis: the median over ranks of each rank's median per step.
    std::map<std::string, std::vector<double>> exposed;
    for (const AxisExposure& a : exposure)
        exposed[a.axis].push_back(a.exposed);
    const json* axisPrediction = nullptr;
    if (prediction.is_object())
        if (const auto it = prediction.find("exposed_communication");
            it != prediction.end() && it->is_object())
            axisPrediction = &*it;
    std::set<std::string> axes;
    for (const auto& [axis, v] : exposed)
        axes.insert(axis);
    if (axisPrediction)
        for (const auto& [axis, v] : axisPrediction->items())
            if (v.is_number() && v.get<double>() > 0)
                axes.insert(axis);
    for (const std::string& axis : axes) {
        ComparisonRow row;
        row.key = "exposed." + axis;
        row.label = "Exposed " + axis + " communication per step";
        row.unit = Unit::Seconds;
        row.hasPredicted =
            axisPrediction && predicted(*axisPrediction, axis.c_str(), &row.predicted);
        if (axis == "pp") {
            // A pipeline rank waiting for its input is mostly the bubble, which has its own
            // row: the transfers' share is how far they stretch the step beyond the schedule.
            row.hasMeasured = m.ok();
            row.measured = m.ok() ? std::max(0.0, m.measured.makespan - m.simulated.makespan) : 0;
            row.how = "measured: the measured pipeline span less the schedule simulated with the "
                      "measured op costs and no transfer time (step " +
                      std::to_string(m.step) + "); " + kPlannerSource;
        } else {
            row.hasMeasured = exposed.count(axis) > 0;
            row.measured = row.hasMeasured ? median(exposed[axis]) : 0;
            row.how = "measured: seconds blocked on " + axis +
                      " (union of wait spans) per step, median over steps and then over ranks; " +
                      kPlannerSource;
        }
        rows.push_back(row);
    }
    return rows;
}

} // namespace shardscope::watch
