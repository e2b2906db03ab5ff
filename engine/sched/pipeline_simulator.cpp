#include "pipeline_simulator.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace shardscope {

const OpCosts& PipelineCosts::of(int rank) const {
    return perRank.size() == 1 ? perRank.front() : perRank.at(std::size_t(rank));
}

double PipelineCosts::seconds(const PipelineOp& op, int rank) const {
    const OpCosts& c = of(rank);
    switch (op.kind) {
    case OpKind::Forward:
        return c.forward;
    case OpKind::Backward:
        return c.backwardInput + c.backwardWeight;
    case OpKind::BackwardInput:
        return c.backwardInput;
    case OpKind::BackwardWeight:
        return c.backwardWeight;
    }
    return 0;
}

PipelineCosts stageCosts(const ScheduleSpec& spec, const OpCosts& stage, double p2p) {
    const double share = 1.0 / std::max(1, spec.virtualStages);
    PipelineCosts c;
    c.perRank = {
        {stage.forward * share, stage.backwardInput * share, stage.backwardWeight * share}};
    c.p2p = p2p;
    return c;
}

namespace {

void checkCosts(const PipelineProgram& program, const PipelineCosts& costs) {
    const std::size_t p = program.ranks.size();
    if (costs.perRank.size() != 1 && costs.perRank.size() != p)
        throw InputError("pipeline costs: give one set of op costs, or one per rank (" +
                         std::to_string(p) + "), not " + std::to_string(costs.perRank.size()));
    for (const OpCosts& c : costs.perRank) {
        for (double x : {c.forward, c.backwardInput, c.backwardWeight}) {
            if (!(x >= 0) || !std::isfinite(x))
                throw InputError("pipeline costs must be finite and not negative");
        }
    }
    if (!(costs.p2p >= 0) || !std::isfinite(costs.p2p))
        throw InputError("point-to-point time must be finite and not negative");
    if (!(costs.weightGradMemory >= 0 && costs.weightGradMemory <= 1))
        throw InputError("weight-gradient memory is a fraction of a microbatch's: 0 to 1");
}

} // namespace

PipelineTimeline simulate(const PipelineProgram& program, const PipelineCosts& costs) {
    checkCosts(program, costs);
    const int p = int(program.ranks.size());
    const int stages = program.virtualStageCount();
    PipelineTimeline t;
    t.ranks.resize(std::size_t(p));
    for (int r = 0; r < p; ++r)
        t.ranks[std::size_t(r)].reserve(program.ranks[std::size_t(r)].size());

    // End time of each finished forward and backward (B or fused), by (kind, microbatch, stage).
    std::map<std::tuple<bool, int, int>, double> finished; // (isForward, mb, stage) -> end
    std::vector<std::size_t> next(std::size_t(p), 0);
    std::vector<double> free(std::size_t(p), 0.0);
    std::size_t remaining = program.opCount();

    // When the inputs of `op` on `rank` are there, or a negative number if not yet.
    const auto inputsReady = [&](const PipelineOp& op, int rank) -> double {
        double at = 0;
        const auto need = [&](bool forward, int stage) -> bool {
            const auto it = finished.find({forward, op.microbatch, stage});
            if (it == finished.end())
                return false;
            const bool remote = stage % p != rank;
            at = std::max(at, it->second + (remote ? costs.p2p : 0.0));
            return true;
        };
        switch (op.kind) {
        case OpKind::Forward:
            return op.stage == 0 || need(true, op.stage - 1) ? at : -1;
        case OpKind::Backward:
        case OpKind::BackwardInput:
            if (!need(true, op.stage))
                return -1;
            return op.stage == stages - 1 || need(false, op.stage + 1) ? at : -1;
        case OpKind::BackwardWeight:
            return need(false, op.stage) ? at : -1;
        }
        return -1;
    };

    while (remaining > 0) {
        bool progress = false;
        for (int r = 0; r < p; ++r) {
            const auto& ops = program.ranks[std::size_t(r)];
            std::size_t& i = next[std::size_t(r)];
            while (i < ops.size()) {
                const double ready = inputsReady(ops[i], r);
                if (ready < 0)
                    break;
                const double start = std::max(ready, free[std::size_t(r)]);
                const double end = start + costs.seconds(ops[i], r);
                if (ops[i].kind != OpKind::BackwardWeight)
                    finished[{ops[i].kind == OpKind::Forward, ops[i].microbatch, ops[i].stage}] =
                        end;
                t.ranks[std::size_t(r)].push_back({ops[i], start, end});
                free[std::size_t(r)] = end;
                ++i;
                --remaining;
                progress = true;
            }
        }
        if (!progress) {
            const auto problems = verifyProgram(program);
            throw InputError("the pipeline program deadlocks" +
                             (problems.empty() ? std::string() : ": " + problems.front()));
        }
    }

    // Makespan, idle time and peak activations per rank.
    for (const auto& ops : t.ranks) {
        for (const TimedOp& op : ops)
            t.makespan = std::max(t.makespan, op.end);
    }
    const double chunkShare = 1.0 / program.spec.virtualStages;
    double idle = 0;
    for (int r = 0; r < p; ++r) {
        double busy = 0, held = 0, peak = 0;
        int awaiting = 0, peakAwaiting = 0;
        for (const TimedOp& op : t.ranks[std::size_t(r)]) {
            busy += op.end - op.start;
            switch (op.op.kind) {
            case OpKind::Forward:
                held += chunkShare;
                ++awaiting;
                break;
            case OpKind::Backward:
                held -= chunkShare;
                --awaiting;
                break;
            case OpKind::BackwardInput:
                held -= chunkShare * (1.0 - costs.weightGradMemory);
                --awaiting;
                break;
            case OpKind::BackwardWeight:
                held -= chunkShare * costs.weightGradMemory;
                break;
            }
            peak = std::max(peak, held);
            peakAwaiting = std::max(peakAwaiting, awaiting);
        }
        t.busy.push_back(busy);
        t.bubble.push_back(t.makespan > 0 ? 1.0 - busy / t.makespan : 0.0);
        t.peakActivations.push_back(peak);
        t.peakAwaitingBackward.push_back(peakAwaiting);
        idle += t.makespan - busy;
        const auto& ops = t.ranks[std::size_t(r)];
        const double span = ops.empty() ? 0.0 : ops.back().end - ops.front().start;
        if (span > t.longestRankSpan) {
            t.longestRankSpan = span;
            t.spanBubbleFraction = 1.0 - busy / span;
        }
    }
    t.bubbleFraction = t.makespan > 0 ? idle / (p * t.makespan) : 0.0;
    return t;
}

} // namespace shardscope
