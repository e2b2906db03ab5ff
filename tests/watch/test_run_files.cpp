// Reading telemetry from disk: line limits (untrusted input), run directories, and the replay.
#include "support/temp_dir.h"
#include "telemetry_fixtures.h"
#include "watch/run_files.h"
#include "watch/run_trace.h"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <unistd.h>

namespace shardscope::watch {
namespace {

using namespace shardscope::testing;
namespace fs = std::filesystem;

TEST(EventLine, DeepNestingIsRefusedWithoutBeingBuilt) {
    // 80,000 levels crashed readers that recursed (issue 15); here it is counted, not parsed.
    const std::string deep = "{\"a\":" + std::string(80000, '[') + std::string(80000, ']') + "}";
    std::string why;
    EXPECT_FALSE(parseEventLine(deep, &why));
    EXPECT_NE(why.find("deeper than 32"), std::string::npos) << why;
    // Brackets inside strings are text, not nesting.
    const std::string quoted = R"({"message":")" + std::string(100, '[') + R"("})";
    EXPECT_TRUE(parseEventLine(quoted, &why)) << why;
}

TEST(EventLine, NotJsonNotAnObjectAndTooLongAreRefusedWithTheReason) {
    std::string why;
    EXPECT_FALSE(parseEventLine("{\"type\":", &why));
    EXPECT_EQ(why, "not JSON");
    EXPECT_FALSE(parseEventLine("[1,2,3]", &why));
    EXPECT_EQ(why, "a JSON array, not an object");
    EXPECT_FALSE(parseEventLine(std::string(kMaxEventBytes + 1, ' '), &why));
    EXPECT_NE(why.find("the limit is"), std::string::npos);
    EXPECT_TRUE(parseEventLine(R"({"type":"span"})"));
}

TEST(EventLineReader, SkipsOverlongLinesAndLeavesAnUnfinishedLastLine) {
    TempDir dir;
    const fs::path file = dir.path() / "rank-0.jsonl";
    {
        std::ofstream out(file, std::ios::binary);
        out << "{\"a\":1}\n" << std::string(kMaxEventBytes + 100, 'x') << "\n{\"b\":2}\n{\"c\":";
    }
    EventLineReader reader(file);
    std::string line;
    bool tooLong = false;
    ASSERT_TRUE(reader.next(line, &tooLong));
    EXPECT_EQ(line, "{\"a\":1}");
    ASSERT_TRUE(reader.next(line, &tooLong));
    EXPECT_TRUE(tooLong);
    EXPECT_EQ(line.size(), kMaxEventBytes);
    ASSERT_TRUE(reader.next(line, &tooLong));
    EXPECT_FALSE(tooLong);
    EXPECT_EQ(line, "{\"b\":2}");
    EXPECT_FALSE(reader.next(line, &tooLong)); // the line still being written
    EventLineReader missing(dir.path() / "nothing.jsonl");
    EXPECT_FALSE(missing.next(line, &tooLong));
}

// A run directory of `ranks` data-parallel ranks, each with `steps` steps one second apart.
void writeRun(const fs::path& dir, int ranks, int steps) {
    fs::create_directories(dir / "telemetry");
    const ParallelConfig layout = pipelineLayout(PipelineSchedule::OneFOneB, 1, 1, ranks);
    for (int r = 0; r < ranks; ++r) {
        std::ofstream out(dir / "telemetry" / ("rank-" + std::to_string(r) + ".jsonl"));
        json start = startEvent(r, {r, 0, 0, 0}, layout, 0.0);
        start["wall_clock"] = 1.7e9;
        out << start.dump() << "\n";
        for (int s = 1; s <= steps; ++s) {
            out << span(r, "forward", s, 0, 0, s - 0.9, s - 0.5).dump() << "\n";
            out << stepEvent(r, s, double(s), 1.0).dump() << "\n";
        }
        out << "not json at all\n";
        out << json{{"type", "event"},
                    {"event", "end"},
                    {"rank", r},
                    {"t", steps + 0.1},
                    {"status", "completed"}}
                   .dump()
            << "\n";
    }
}

TEST(RunFiles, ARunDirectoryIsReadRankByRank) {
    TempDir dir;
    writeRun(dir.path(), 3, 5);
    const RunFiles files = findRunFiles(dir.path());
    ASSERT_EQ(files.ranks.size(), 3u);
    RunState run;
    const ReadCounts counts = readRun(files, run);
    EXPECT_EQ(counts.badLines, 3);
    EXPECT_EQ(counts.events, 3 * (1 + 5 * 2 + 1));
    EXPECT_EQ(run.ranks().size(), 3u);
    EXPECT_EQ(run.latestStep(), 5);
    EXPECT_EQ(*run.rank(2)->endStatus, "completed");
}

TEST(RunFiles, WhatIsNotARunDirectorySaysWhy) {
    TempDir dir;
    try {
        findRunFiles(dir.path() / "absent");
        FAIL();
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("is not a directory"), std::string::npos);
    }
    try {
        findRunFiles(dir.path());
        FAIL();
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("no telemetry/rank-<r>.jsonl"), std::string::npos);
    }
}

TEST(RunReplay, MovesForwardAndBackThroughTheRun) {
    TempDir dir;
    writeRun(dir.path(), 2, 10);
    RunReplay replay(findRunFiles(dir.path()));
    EXPECT_NEAR(replay.duration(), 10.1, 1e-9); // on the first segment's own clock
    EXPECT_EQ(replay.at(3.5).latestStep(), 3);
    EXPECT_EQ(replay.at(7.0).latestStep(), 7);
    EXPECT_EQ(replay.at(2.0).latestStep(), 2); // back: read again from the start
    EXPECT_FALSE(replay.at(9.0).rank(0)->endStatus);
    const RunState& end = replay.at(replay.duration());
    EXPECT_EQ(end.latestStep(), 10);
    EXPECT_TRUE(end.rank(1)->endStatus);
}

TEST(RunTrace, EverySpanIsATraceEventOnItsRanksProcess) {
    TempDir dir;
    writeRun(dir.path(), 2, 3);
    std::ostringstream out;
    const TraceCounts counts = writeRunTrace(findRunFiles(dir.path()), out);
    EXPECT_EQ(counts.spans, 6);
    EXPECT_EQ(counts.badLines, 2);
    const json trace = json::parse(out.str());
    int spans = 0;
    for (const json& e : trace["traceEvents"])
        if (e["ph"] == "X") {
            ++spans;
            EXPECT_EQ(e["name"], "forward");
            EXPECT_NEAR(e["dur"].get<double>(), 0.4e6, 1e-3);
        }
    EXPECT_EQ(spans, 6);
}

} // namespace
} // namespace shardscope::watch
