// `shardscope-cli schedule`: a pipeline schedule's op lists and its simulated timeline.
#pragma once

#include "sched/pipeline_simulator.h"

#include <nlohmann/json.hpp>
#include <ostream>

namespace shardscope::cli {

// `costs` per chunk, as stageCosts gives them (the stage's are shown as well). Op lists are
// printed when `ops` is set, or when there are at most 400 of them.
void printSchedule(std::ostream& out, const PipelineProgram& program, const PipelineCosts& costs,
                   const PipelineTimeline& t, bool ops);
nlohmann::json scheduleJson(const PipelineProgram& program, const PipelineCosts& costs,
                            const PipelineTimeline& t);

} // namespace shardscope::cli
