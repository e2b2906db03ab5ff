// `shardscope-cli collective`: a collective algorithm's steps, its time, algbw and busbw.
#pragma once

#include "sched/collective_plan.h"

#include <nlohmann/json.hpp>
#include <ostream>

namespace shardscope::cli {

// Steps are printed when `steps` is set, or when there are at most 64 transfers in all.
void printCollective(std::ostream& out, const CollectivePlan& plan, const LinkModel& links,
                     const CollectiveTiming& t, bool steps);
nlohmann::json collectiveJson(const CollectivePlan& plan, const LinkModel& links,
                              const CollectiveTiming& t);

} // namespace shardscope::cli
