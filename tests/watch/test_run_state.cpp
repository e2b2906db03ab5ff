// RunState: events to per-rank state, with bounded memory, resumed segments, repeated start
// events, numbered events and events that are not what they claim.
#include "telemetry_fixtures.h"
#include "watch/bounded_series.h"
#include "watch/run_state.h"

#include <gtest/gtest.h>

namespace shardscope::watch {
namespace {

using namespace shardscope::testing;

TEST(BoundedSeries, KeepsTheNewestHalfWholeAndThinsTheRest) {
    BoundedSeries<int> s(8);
    for (int i = 0; i < 9; ++i)
        s.push_back(i);
    // At 9 > 8 the older half (4 samples) keeps every other one.
    EXPECT_EQ(std::vector<int>(s.begin(), s.end()), (std::vector<int>{0, 2, 4, 5, 6, 7, 8}));
    for (int i = 9; i < 100000; ++i)
        s.push_back(i);
    EXPECT_LE(s.size(), 8u);
    EXPECT_EQ(s.back(), 99999);
    EXPECT_EQ(s[0], 0); // the beginning survives every thinning
    for (std::size_t i = 1; i < s.size(); ++i)
        EXPECT_LT(s[i - 1], s[i]);
    s.dropBackWhile([](int v) { return v > 99990; });
    EXPECT_LE(s.back(), 99990);
}

TEST(RunState, AStartEventDescribesTheRunAndTheRank) {
    RunState run;
    const ParallelConfig layout = pipelineLayout(PipelineSchedule::OneFOneB, 2, 4, 2);
    json start = startEvent(3, {1, 0, 1, 0}, layout);
    start["prediction"] = {{"step_time", 2.5}};
    start["loss_floor"] = 1.25;
    run.add(start);
    ASSERT_TRUE(run.info().known);
    EXPECT_EQ(run.info().parallel.pp, 2);
    EXPECT_EQ(run.info().parallel.dp, 2);
    EXPECT_EQ(run.info().worldSize, 4);
    EXPECT_EQ(run.info().totalSteps, 100);
    EXPECT_EQ(run.info().lossFloor, 1.25);
    EXPECT_EQ(run.info().prediction["step_time"], 2.5);
    const RankState* r = run.rank(3);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->coord.dp, 1);
    EXPECT_EQ(r->coord.pp, 1);
    EXPECT_EQ(r->host, "host0");
    EXPECT_EQ(r->pid, 1003);
    EXPECT_EQ(r->predictedMemory.optimizer, 2000.0);
    EXPECT_EQ(r->stage, 1);
}

TEST(RunState, AResentStartEventDoesNotBeginANewSegment) {
    RunState run;
    const ParallelConfig layout = pipelineLayout(PipelineSchedule::OneFOneB, 1, 1);
    run.add(startEvent(0, {}, layout));
    run.add(stepEvent(0, 1, 1.0, 1.0));
    json again = startEvent(0, {}, layout);
    again["resent"] = true;
    run.add(again);
    EXPECT_EQ(run.rank(0)->segments, 1);
    EXPECT_EQ(run.rank(0)->steps.size(), 1u);
    // A resumed run is a new process: a new segment, whose steps replace the repeated ones.
    json resumed = startEvent(0, {}, layout);
    resumed["pid"] = 2000;
    run.add(stepEvent(0, 2, 2.0, 1.0));
    run.add(stepEvent(0, 3, 3.0, 1.0));
    run.add(resumed);
    EXPECT_EQ(run.rank(0)->segments, 2);
    run.add(stepEvent(0, 3, 0.5, 0.9));
    ASSERT_EQ(run.rank(0)->steps.size(), 3u);
    EXPECT_EQ(run.rank(0)->steps.back().stepTime, 0.9);
    EXPECT_EQ(run.rank(0)->activity.back().step, 3);
    EXPECT_EQ(run.rank(0)->activity.size(), 3u);
}

TEST(RunState, GapsInTheEventNumbersAreCountedAsMissed) {
    RunState run;
    run.add(startEvent(0, {}, pipelineLayout(PipelineSchedule::OneFOneB, 1, 1)));
    for (int seq : {2, 3, 7, 8, 12}) {
        json s = span(0, "forward", 1, 0, 0, 0.1, 0.2);
        s["seq"] = seq;
        run.add(s);
    }
    EXPECT_EQ(run.rank(0)->missedSeq, 3 + 3);
    EXPECT_EQ(run.rank(0)->lastSeq, 12);
}

TEST(RunState, AStepSumsItsSpansIntoComputeBusyAndExposedTime) {
    RunState run;
    run.add(startEvent(0, {}, pipelineLayout(PipelineSchedule::OneFOneB, 1, 1)));
    run.add(span(0, "forward", 1, 0, 0, 0.0, 1.0));
    run.add(span(0, "backward", 1, 0, 0, 1.0, 3.0));
    run.add(span(0, "optimizer", 1, -1, 0, 4.0, 4.5));
    run.add(span(0, "eval", 1, -1, 0, 5.0, 6.0)); // not compute
    // Two buckets in flight at once count once; the wait for them is exposed.
    for (const auto& [start, end] : {std::pair{1.5, 3.2}, std::pair{2.0, 3.6}}) {
        json c = span(0, "communication", 1, -1, 0, start, end);
        c["axis"] = "dp";
        c["collective"] = "all_reduce";
        run.add(c);
    }
    json wait = span(0, "wait", 1, -1, 0, 3.0, 3.6);
    wait["axis"] = "dp";
    run.add(wait);
    run.add(stepEvent(0, 1, 4.6, 4.6));
    const StepActivity& a = run.rank(0)->activity.back();
    EXPECT_DOUBLE_EQ(a.compute, 3.5);
    EXPECT_DOUBLE_EQ(a.busy.at("dp"), 2.1);
    EXPECT_DOUBLE_EQ(a.exposed.at("dp"), 0.6);
    EXPECT_DOUBLE_EQ(a.pipelineStart, 0.0);
    EXPECT_DOUBLE_EQ(a.pipelineEnd, 3.0);
}

TEST(RunState, UnionSecondsMergesOverlapsAndIgnoresEmptyIntervals) {
    EXPECT_DOUBLE_EQ(unionSeconds({{0, 1}, {0.5, 2}, {3, 4}, {5, 5}, {6, 5.5}}), 3.0);
    EXPECT_DOUBLE_EQ(unionSeconds({}), 0.0);
}

TEST(RunState, EventsThatAreNotWhatTheyClaimAreCountedAndIgnored) {
    RunState run;
    for (const char* text :
         {R"([1,2])", R"({"type":"span"})", R"({"rank":-4,"type":"span"})",
          R"({"rank":1e300,"type":"step"})", R"({"rank":99999999,"type":"step"})",
          R"({"rank":0,"type":"span","kind":"forward","start":"soon","end":1})",
          R"({"rank":0,"type":"span","kind":"forward","start":5,"end":1})",
          R"({"rank":0,"type":"event","event":"start","resent":"yes"})",
          R"({"rank":0,"type":"mystery"})"})
        run.add(json::parse(text));
    EXPECT_EQ(run.ignoredEvents(), 9);
    EXPECT_LE(run.ranks().size(), 1u);
    // A step with nonsense values is kept as what it says, never a crash.
    run.add(json::parse(R"({"rank":0,"type":"step","step":"x","loss":null,"memory":7})"));
    EXPECT_EQ(run.rank(0)->steps.size(), 1u);
}

TEST(RunState, AStreamThatNeverEndsItsStepStillHoldsBoundedSpans) {
    RunState run;
    run.add(startEvent(0, {}, pipelineLayout(PipelineSchedule::OneFOneB, 1, 1)));
    for (int i = 0; i < 200000; ++i)
        run.add(span(0, "forward", 7, i, 0, i, i + 0.5));
    EXPECT_EQ(run.rank(0)->spans.size(), RunState::kMaxSpans);
    EXPECT_EQ(run.rank(0)->spans.back().microbatch, 199999); // the newest are kept
}

TEST(RunState, ARankThatReconnectsIsNoLongerDisconnected) {
    RunState run;
    run.add(startEvent(0, {}, pipelineLayout(PipelineSchedule::OneFOneB, 1, 1)), 1.0);
    run.connectionClosed(0, 2.0);
    EXPECT_TRUE(run.rank(0)->disconnected);
    run.add(stepEvent(0, 1, 3.0, 1.0), 3.0); // the stream came back
    EXPECT_FALSE(run.rank(0)->disconnected);
}

TEST(RunState, AResumedSegmentMeasuresTimeOnItsOwnClock) {
    RunState run;
    const ParallelConfig layout = pipelineLayout(PipelineSchedule::OneFOneB, 1, 1);
    run.add(startEvent(0, {}, layout));
    run.add(stepEvent(0, 1, 500.0, 1.0)); // a long first segment
    json resumed = startEvent(0, {}, layout, 0.1);
    resumed["pid"] = 77;
    run.add(resumed);
    run.add(stepEvent(0, 2, 2.0, 1.0));
    EXPECT_DOUBLE_EQ(run.latestT(), 2.0);
}

TEST(RunState, MemoryStaysBoundedOverAVeryLongRun) {
    RunState run;
    run.add(startEvent(0, {}, pipelineLayout(PipelineSchedule::OneFOneB, 1, 1)));
    for (int step = 1; step <= 50000; ++step) {
        for (int i = 0; i < 4; ++i)
            run.add(span(0, "forward", step, i, 0, step + 0.1 * i, step + 0.1 * i + 0.05));
        run.add(stepEvent(0, step, step + 1.0, 1.0));
    }
    const RankState& r = *run.rank(0);
    EXPECT_LE(r.steps.size(), RunState::kSeriesCapacity);
    EXPECT_EQ(r.steps.back().step, 50000);
    EXPECT_EQ(r.activity.size(), RunState::kActivitySteps);
    EXPECT_LE(r.spans.size(), 4 * RunState::kSpanSteps);
}

} // namespace
} // namespace shardscope::watch
