#include "pipeline.h"

#include "sched/pipeline_program.h"
#include "statistics.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

namespace shardscope::watch {

namespace {

OpKind opKindOf(SpanKind k) {
    switch (k) {
    case SpanKind::Backward:
        return OpKind::Backward;
    case SpanKind::BackwardInput:
        return OpKind::BackwardInput;
    case SpanKind::BackwardWeight:
        return OpKind::BackwardWeight;
    default:
        return OpKind::Forward;
    }
}

// The ranks holding each pipeline stage of one replica's tp = cp = 0 slice, by pp coordinate.
std::vector<const RankState*> pipelineRanks(const RunState& run, int replica) {
    const int p = std::max(1, run.info().parallel.pp);
    std::vector<const RankState*> out(std::size_t(p), nullptr);
    for (const auto& [id, r] : run.ranks())
        if (r.coord.dp == replica && r.coord.tp == 0 && r.coord.cp == 0 && r.coord.pp >= 0 &&
            r.coord.pp < p)
            out[std::size_t(r.coord.pp)] = &r;
    return out;
}

// Busy time, idle fraction per rank and over all ranks, as the simulator defines them.
void fillIdle(PipelineTimeline& t) {
    t.makespan = 0;
    for (const auto& ops : t.ranks)
        for (const TimedOp& op : ops)
            t.makespan = std::max(t.makespan, op.end);
    t.busy.clear();
    t.bubble.clear();
    double idle = 0;
    for (const auto& ops : t.ranks) {
        double busy = 0;
        for (const TimedOp& op : ops)
            busy += op.end - op.start;
        t.busy.push_back(busy);
        t.bubble.push_back(t.makespan > 0 ? 1.0 - busy / t.makespan : 0.0);
        idle += t.makespan - busy;
    }
    t.bubbleFraction =
        t.makespan > 0 && !t.ranks.empty() ? idle / (double(t.ranks.size()) * t.makespan) : 0.0;
    t.peakActivations.assign(t.ranks.size(), 0.0);
    t.peakAwaitingBackward.assign(t.ranks.size(), 0);
}

} // namespace

std::int64_t latestCompleteStep(const RunState& run, int replica) {
    if (!run.info().known)
        return 0;
    std::int64_t step = std::numeric_limits<std::int64_t>::max();
    for (const RankState* r : pipelineRanks(run, replica)) {
        if (!r || r->activity.empty() || r->spans.empty())
            return 0;
        step = std::min(step, r->activity.back().step);
    }
    for (const RankState* r : pipelineRanks(run, replica))
        if (r->spans.front().step > step)
            return 0; // that step's spans are gone on this rank
    return step == std::numeric_limits<std::int64_t>::max() ? 0 : step;
}

MeasuredPipeline measurePipeline(const RunState& run, std::int64_t step, int replica) {
    MeasuredPipeline m;
    m.step = step;
    m.replica = replica;
    if (!run.info().known || !run.info().configProblem.empty()) {
        m.problem = "the run's start event (its layout) has not arrived";
        return m;
    }
    const ParallelConfig& layout = run.info().parallel;
    const int p = std::max(1, layout.pp);
    const std::vector<const RankState*> ranks = pipelineRanks(run, replica);

    // Ops of the step, each from the first to the last of its block spans.
    using Key = std::tuple<int, int, int>; // kind, microbatch, chunk
    std::vector<std::map<Key, TimedOp>> ops(static_cast<std::size_t>(p));
    double origin = std::numeric_limits<double>::infinity();
    m.waits.resize(std::size_t(p));
    m.transfers.resize(std::size_t(p));
    for (int pp = 0; pp < p; ++pp) {
        const RankState* r = ranks[std::size_t(pp)];
        if (!r) {
            m.problem = "no telemetry yet from pipeline rank " + std::to_string(pp) +
                        " of replica " + std::to_string(replica);
            return m;
        }
        m.rank.push_back(r->rank);
        for (const Span& s : r->spans) {
            if (s.step != step)
                continue;
            if (s.kind == SpanKind::Communication && s.axis == "pp") {
                m.transfers[std::size_t(pp)].push_back({s.start, s.end});
                continue;
            }
            if (s.kind == SpanKind::Wait) {
                m.waits[std::size_t(pp)].push_back({s.start, s.end});
                continue;
            }
            if (!isPipelineOp(s.kind))
                continue;
            origin = std::min(origin, s.start);
            const Key key{int(s.kind), s.microbatch, s.chunk};
            auto [it, fresh] = ops[std::size_t(pp)].try_emplace(key);
            TimedOp& op = it->second;
            if (fresh) {
                op.op.kind = opKindOf(s.kind);
                op.op.microbatch = s.microbatch;
                op.op.chunk = s.chunk;
                op.op.stage = s.chunk * p + pp;
                op.start = s.start;
                op.end = s.end;
            } else {
                op.start = std::min(op.start, s.start);
                op.end = std::max(op.end, s.end);
            }
        }
    }
    if (!std::isfinite(origin)) {
        m.problem = "no spans of step " + std::to_string(step) + " are held";
        return m;
    }

    // The engine executes the schedule's program: every op it lists must have been measured.
    PipelineProgram program;
    try {
        program = buildPipelineProgram(
            {layout.schedule, p, layout.microbatches(),
             layout.schedule == PipelineSchedule::Interleaved ? layout.vpp : 1});
    } catch (const std::exception& e) {
        m.problem = std::string("the run's schedule cannot be built: ") + e.what();
        return m;
    }
    m.measured.ranks.resize(std::size_t(p));
    PipelineCosts costs;
    for (int pp = 0; pp < p; ++pp) {
        auto& mine = m.measured.ranks[std::size_t(pp)];
        const std::size_t expected = program.ranks[std::size_t(pp)].size();
        if (ops[std::size_t(pp)].size() != expected) {
            m.problem = "step " + std::to_string(step) + ": pipeline rank " + std::to_string(pp) +
                        " has " + std::to_string(ops[std::size_t(pp)].size()) + " of its " +
                        std::to_string(expected) +
                        " ops in the telemetry held (events dropped, or the step is not over)";
            return m;
        }
        std::vector<double> f, b, w;
        for (auto& [key, op] : ops[std::size_t(pp)]) {
            const double d = op.end - op.start;
            (op.op.kind == OpKind::Forward                                           ? f
             : op.op.kind == OpKind::Backward || op.op.kind == OpKind::BackwardInput ? b
                                                                                     : w)
                .push_back(d);
            op.start -= origin;
            op.end -= origin;
            mine.push_back(op);
        }
        std::sort(mine.begin(), mine.end(),
                  [](const TimedOp& x, const TimedOp& y) { return x.start < y.start; });
        for (auto* intervals : {&m.waits[std::size_t(pp)], &m.transfers[std::size_t(pp)]})
            for (Interval& i : *intervals) {
                i.start -= origin;
                i.end -= origin;
            }
        costs.perRank.push_back({median(f), median(b), median(w)});
    }
    fillIdle(m.measured);
    m.costs = costs.perRank;
    try {
        m.simulated = simulate(program, costs);
    } catch (const std::exception& e) {
        m.problem = std::string("the schedule cannot be simulated: ") + e.what();
    }
    return m;
}

} // namespace shardscope::watch
