#include "chrome_trace.h"

namespace shardscope {

nlohmann::json chromeTrace(const PipelineTimeline& timeline, const std::string& title) {
    nlohmann::json events = nlohmann::json::array();
    for (std::size_t r = 0; r < timeline.ranks.size(); ++r) {
        const int pid = int(r);
        events.push_back({{"name", "process_name"},
                          {"ph", "M"},
                          {"pid", pid},
                          {"args", {{"name", "rank " + std::to_string(r)}}}});
        events.push_back({{"name", "process_sort_index"},
                          {"ph", "M"},
                          {"pid", pid},
                          {"args", {{"sort_index", pid}}}});
        for (const TimedOp& op : timeline.ranks[r]) {
            const std::string name = toString(op.op.kind) + std::to_string(op.op.microbatch);
            events.push_back({{"name", name},
                              {"cat", toString(op.op.kind)},
                              {"ph", "X"},
                              {"pid", pid},
                              {"tid", 0},
                              {"ts", op.start * 1e6},
                              {"dur", (op.end - op.start) * 1e6},
                              {"args",
                               {{"microbatch", op.op.microbatch},
                                {"chunk", op.op.chunk},
                                {"stage", op.op.stage}}}});
        }
    }
    return {{"traceEvents", events},
            {"displayTimeUnit", "ms"},
            {"otherData",
             {{"title", title},
              {"makespan_s", timeline.makespan},
              {"bubble_fraction", timeline.bubbleFraction}}}};
}

} // namespace shardscope
