// Chrome trace export: one process per rank, complete events that never overlap on a track.
#include "sched/chrome_trace.h"

#include <algorithm>
#include <gtest/gtest.h>
#include <map>

namespace shardscope {
namespace {

TEST(ChromeTrace, OneProcessPerRankAndNoOverlaps) {
    PipelineCosts costs;
    costs.perRank = {{0.5, 0.7, 0.4}};
    costs.p2p = 0.05;
    const PipelineTimeline t =
        simulate(buildPipelineProgram({PipelineSchedule::Interleaved, 4, 8, 2}), costs);
    const nlohmann::json trace = chromeTrace(t, "interleaved p4 m8 v2");
    std::map<int, std::vector<std::pair<double, double>>> tracks;
    std::map<int, std::string> names;
    std::size_t ops = 0;
    for (const auto& e : trace["traceEvents"]) {
        if (e["ph"] == "M" && e["name"] == "process_name")
            names[e["pid"].get<int>()] = e["args"]["name"];
        if (e["ph"] != "X")
            continue;
        ++ops;
        EXPECT_EQ(e["tid"], 0);
        tracks[e["pid"].get<int>()].push_back(
            {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
    }
    EXPECT_EQ(ops, buildPipelineProgram({PipelineSchedule::Interleaved, 4, 8, 2}).opCount());
    ASSERT_EQ(tracks.size(), 4u);
    EXPECT_EQ(names[2], "rank 2");
    for (auto& [pid, spans] : tracks) {
        std::sort(spans.begin(), spans.end());
        for (std::size_t i = 1; i < spans.size(); ++i)
            EXPECT_LE(spans[i - 1].second, spans[i].first + 1e-6) << "rank " << pid;
    }
    EXPECT_DOUBLE_EQ(trace["otherData"]["makespan_s"].get<double>(), t.makespan);
    // Microseconds: the last op ends at the makespan.
    double last = 0;
    for (const auto& [pid, spans] : tracks)
        last = std::max(last, spans.back().second);
    EXPECT_NEAR(last, t.makespan * 1e6, 1e-3);
}

} // namespace
} // namespace shardscope
