// A simulated (or, later, measured) pipeline timeline as Chrome trace JSON, which Perfetto and
// chrome://tracing open: one process per rank, one track per rank, no overlapping events.
#pragma once

#include "pipeline_simulator.h"

#include <nlohmann/json.hpp>
#include <string>

namespace shardscope {

// Op times are taken as seconds and written in microseconds.
nlohmann::json chromeTrace(const PipelineTimeline& timeline, const std::string& title);

} // namespace shardscope
