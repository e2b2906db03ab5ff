// Everything the monitor and `shardscope-cli report` show about a run, computed at once from its
// state: health and the hang diagnosis, stragglers, the measured pipeline of the newest complete
// step, exposed communication per rank and axis, memory per rank, and predicted against measured.
#pragma once

#include "comparison.h"
#include "diagnosis.h"
#include "pipeline.h"
#include "run_state.h"

#include <vector>

namespace shardscope::watch {

struct RunAnalysis {
    std::vector<RankHealth> health;
    std::string diagnosis; // empty when every rank is fine
    std::vector<Straggler> stragglers;
    MeasuredPipeline pipeline; // the newest step every pipeline rank of replica 0 finished
    std::vector<AxisExposure> exposure;
    std::vector<RankMemory> memory;
    std::vector<ComparisonRow> comparison;
};

RunAnalysis analyse(const RunState& run, const HealthOptions& health = {},
                    const StragglerOptions& stragglers = {});

} // namespace shardscope::watch
