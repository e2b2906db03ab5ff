// The pipeline as it ran: one step's forward, backward (or B and W) ops of every pipeline rank of
// one data-parallel replica, measured from the spans, as the same PipelineTimeline the simulator
// produces, so one renderer draws both; beside it the schedule's own program timed with the
// measured op costs, so the measured bubble can be read against the simulated one.
#pragma once

#include "run_state.h"
#include "sched/pipeline_simulator.h"

#include <string>
#include <vector>

namespace shardscope::watch {

struct Interval {
    double start = 0, end = 0;
};

struct MeasuredPipeline {
    std::int64_t step = 0;
    int replica = 0;       // the data-parallel replica measured (tp = cp = 0 ranks)
    std::vector<int> rank; // rank[pp]: the global rank of each pipeline rank
    // Times relative to the step's first pipeline op on any of these ranks.
    PipelineTimeline measured;
    std::vector<std::vector<Interval>>
        waits; // per pipeline rank: blocked on a receive or collective
    std::vector<std::vector<Interval>>
        transfers; // per pipeline rank: its sends and receives to neighbours, posted to complete
    // The schedule's program (engine/sched) with each rank's median measured F, B and W costs and
    // no transfer time: what the schedule alone would leave idle with these costs.
    PipelineTimeline simulated;
    std::vector<OpCosts> costs;
    std::string problem; // why there is no timeline (empty when there is)
    bool ok() const { return problem.empty(); }
};

// The newest step every pipeline rank of `replica` has finished and whose spans are still held;
// 0 when there is none.
std::int64_t latestCompleteStep(const RunState& run, int replica = 0);

// Throws nothing: a step that cannot be measured says why in `problem`.
MeasuredPipeline measurePipeline(const RunState& run, std::int64_t step, int replica = 0);

} // namespace shardscope::watch
