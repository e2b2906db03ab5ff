#include "schedule_report.h"

#include "core/units.h"
#include "plan/formulas.h"

#include <iomanip>
#include <sstream>

namespace shardscope::cli {

namespace {

std::string opText(const PipelineOp& op, int v) {
    std::string s = toString(op.kind) + std::to_string(op.microbatch);
    if (v > 1)
        s += "." + std::to_string(op.chunk);
    return s;
}

std::string number(double x) {
    std::ostringstream s;
    s << std::setprecision(6) << x;
    return s.str();
}

nlohmann::json transferJson(const std::optional<Transfer>& t) {
    if (!t)
        return nullptr;
    return {{"peer", t->peer}, {"tensor", toString(t->tensor)}};
}

} // namespace

void printSchedule(std::ostream& out, const PipelineProgram& program, const PipelineCosts& costs,
                   const PipelineTimeline& t, bool ops) {
    const ScheduleSpec& s = program.spec;
    const OpCosts& c = costs.perRank.front();
    out << toString(s.kind) << ": p = " << s.stages << " ranks, m = " << s.microbatches
        << " microbatches";
    if (s.virtualStages > 1)
        out << ", v = " << s.virtualStages << " chunks per rank";
    const double v = s.virtualStages;
    out << "\nop costs per stage (one microbatch through a rank's layers): F "
        << number(c.forward * v) << ", B " << number(c.backwardInput * v) << ", W "
        << number(c.backwardWeight * v) << " (fused backward B+W), point-to-point "
        << number(costs.p2p) << "\n";
    if (s.virtualStages > 1)
        out << "per chunk (1/" << s.virtualStages << " of a rank's layers): F " << number(c.forward)
            << ", B " << number(c.backwardInput) << ", W " << number(c.backwardWeight) << "\n";
    out << "\n";

    if (ops || program.opCount() <= 400) {
        out << "Op lists (F forward, B input gradient, W weight gradient, B+W fused; "
            << "microbatch" << (s.virtualStages > 1 ? ".chunk" : "") << "):\n";
        for (std::size_t r = 0; r < program.ranks.size(); ++r) {
            out << "rank " << std::setw(3) << r << ":";
            for (const PipelineOp& op : program.ranks[r])
                out << ' ' << opText(op, s.virtualStages);
            out << '\n';
        }
        out << '\n';
    } else {
        out << program.opCount() << " ops (use --ops to list them)\n\n";
    }

    const double closed = pipelineBubbleFraction(s.kind, s.stages, s.microbatches, s.virtualStages);
    out << "makespan " << number(t.makespan) << ", bubble " << formatPercent(t.bubbleFraction)
        << " simulated; closed form " << formatPercent(closed)
        << " (equal op costs, no point-to-point time)\n";
    out << "longest rank from its first op to its last " << number(t.longestRankSpan) << ", bubble "
        << formatPercent(t.spanBubbleFraction)
        << " (the step's under optimizer post-validation, plan --post-validation)\n\n";
    out << "rank   busy        bubble   peak activations (microbatches)   awaiting backward\n";
    for (std::size_t r = 0; r < t.ranks.size(); ++r)
        out << std::setw(4) << r << "   " << std::left << std::setw(10) << number(t.busy[r]) << "  "
            << std::setw(7) << formatPercent(t.bubble[r]) << "  " << std::setw(32)
            << number(t.peakActivations[r]) << "  " << t.peakAwaitingBackward[r] << std::right
            << '\n';
}

nlohmann::json scheduleJson(const PipelineProgram& program, const PipelineCosts& costs,
                            const PipelineTimeline& t) {
    const ScheduleSpec& s = program.spec;
    const OpCosts& c = costs.perRank.front();
    nlohmann::json ranks = nlohmann::json::array();
    for (std::size_t r = 0; r < t.ranks.size(); ++r) {
        nlohmann::json ops = nlohmann::json::array();
        for (const TimedOp& op : t.ranks[r])
            ops.push_back({{"op", toString(op.op.kind)},
                           {"microbatch", op.op.microbatch},
                           {"chunk", op.op.chunk},
                           {"stage", op.op.stage},
                           {"start", op.start},
                           {"end", op.end},
                           {"recv", transferJson(op.op.recv)},
                           {"send", transferJson(op.op.send)}});
        ranks.push_back({{"rank", r},
                         {"busy", t.busy[r]},
                         {"bubble", t.bubble[r]},
                         {"peak_activations", t.peakActivations[r]},
                         {"peak_awaiting_backward", t.peakAwaitingBackward[r]},
                         {"ops", ops}});
    }
    return {{"schedule", toString(s.kind)},
            {"pp", s.stages},
            {"microbatches", s.microbatches},
            {"vpp", s.virtualStages},
            {"costs", // per stage, as given
             {{"forward", c.forward * s.virtualStages},
              {"backward_input", c.backwardInput * s.virtualStages},
              {"backward_weight", c.backwardWeight * s.virtualStages},
              {"p2p", costs.p2p}}},
            {"chunk_costs",
             {{"forward", c.forward},
              {"backward_input", c.backwardInput},
              {"backward_weight", c.backwardWeight}}},
            {"makespan", t.makespan},
            {"bubble_fraction", t.bubbleFraction},
            {"longest_rank_span", t.longestRankSpan},
            {"span_bubble_fraction", t.spanBubbleFraction},
            {"closed_form_bubble_fraction",
             pipelineBubbleFraction(s.kind, s.stages, s.microbatches, s.virtualStages)},
            {"ranks", ranks}};
}

} // namespace shardscope::cli
