// The pipeline measured from spans: for runs whose op times are known, the measured bubble must be
// the closed form of the schedule, and the schedule re-simulated with the measured costs must give
// the same timeline back.
#include "sched/pipeline_program.h"
#include "telemetry_fixtures.h"
#include "watch/pipeline.h"

#include <gtest/gtest.h>

namespace shardscope::watch {
namespace {

using namespace shardscope::testing;

// A run of one replica whose pipeline ranks executed `timeline` at step `step`.
RunState runOf(const ParallelConfig& layout, const PipelineTimeline& timeline, int steps = 1) {
    RunState run;
    for (int pp = 0; pp < layout.pp; ++pp)
        run.add(startEvent(pp, {0, 0, pp, 0}, layout));
    for (int step = 1; step <= steps; ++step) {
        const double offset = 100.0 * step;
        for (int pp = 0; pp < layout.pp; ++pp) {
            addOpSpans(run, timeline, pp, pp, step, offset);
            run.add(stepEvent(pp, step, offset + timeline.makespan + 1, timeline.makespan + 1));
        }
    }
    return run;
}

TEST(MeasuredPipeline, OneFOneBWithEqualCostsHasTheClosedFormBubble) {
    // Narayanan et al. 2021: with p stages and m microbatches the bubble is (p-1)/(m+p-1) of the
    // pipeline's time, whatever F and B cost.
    const int p = 4, m = 8;
    const ParallelConfig layout = pipelineLayout(PipelineSchedule::OneFOneB, p, m);
    PipelineCosts costs;
    costs.perRank = {{1.0, 1.5, 0.5}};
    const PipelineTimeline truth =
        simulate(buildPipelineProgram({layout.schedule, p, m, 1}), costs);
    const RunState run = runOf(layout, truth);
    ASSERT_EQ(latestCompleteStep(run), 1);
    const MeasuredPipeline measured = measurePipeline(run, 1);
    ASSERT_TRUE(measured.ok()) << measured.problem;
    EXPECT_NEAR(measured.measured.bubbleFraction, double(p - 1) / (m + p - 1), 1e-9);
    EXPECT_NEAR(measured.measured.makespan, (m + p - 1) * 3.0, 1e-9);
    for (int r = 0; r < p; ++r) {
        EXPECT_NEAR(measured.measured.bubble[std::size_t(r)], double(p - 1) / (m + p - 1), 1e-9);
        // The costs recovered from the spans are the ones the run had: B+W fused.
        EXPECT_NEAR(measured.costs[std::size_t(r)].forward, 1.0, 1e-9);
        EXPECT_NEAR(measured.costs[std::size_t(r)].backwardInput, 2.0, 1e-9);
    }
    EXPECT_NEAR(measured.simulated.bubbleFraction, measured.measured.bubbleFraction, 1e-9);
    EXPECT_EQ(measured.rank, (std::vector<int>{0, 1, 2, 3}));
}

TEST(MeasuredPipeline, EverySchedulesTimelineComesBackFromItsSpans) {
    struct Case {
        PipelineSchedule schedule;
        int p, m, v;
    };
    for (const Case& c :
         {Case{PipelineSchedule::GPipe, 2, 4, 1}, Case{PipelineSchedule::Interleaved, 2, 4, 2},
          Case{PipelineSchedule::ZeroBubble, 4, 8, 1}, Case{PipelineSchedule::Naive, 3, 3, 1}}) {
        SCOPED_TRACE(toString(c.schedule));
        const ParallelConfig layout = pipelineLayout(c.schedule, c.p, c.m, 1, c.v);
        PipelineCosts costs;
        costs.perRank = {{0.7, 0.9, 0.4}};
        const PipelineTimeline truth =
            simulate(buildPipelineProgram({c.schedule, c.p, c.m, c.v}), costs);
        const MeasuredPipeline measured = measurePipeline(runOf(layout, truth), 1);
        ASSERT_TRUE(measured.ok()) << measured.problem;
        EXPECT_NEAR(measured.measured.makespan, truth.makespan, 1e-9);
        EXPECT_NEAR(measured.measured.bubbleFraction, truth.bubbleFraction, 1e-9);
        for (int r = 0; r < c.p; ++r) {
            const auto& ops = measured.measured.ranks[std::size_t(r)];
            const auto& want = truth.ranks[std::size_t(r)];
            ASSERT_EQ(ops.size(), want.size());
            for (std::size_t i = 0; i < ops.size(); ++i) {
                EXPECT_EQ(ops[i].op.kind, want[i].op.kind);
                EXPECT_EQ(ops[i].op.microbatch, want[i].op.microbatch);
                EXPECT_EQ(ops[i].op.chunk, want[i].op.chunk);
                EXPECT_EQ(ops[i].op.stage, want[i].op.stage);
                EXPECT_NEAR(ops[i].start, want[i].start, 1e-9);
            }
        }
        // Re-simulating with the costs recovered from the spans gives the same bubble.
        EXPECT_NEAR(measured.simulated.bubbleFraction, truth.bubbleFraction, 1e-9);
    }
}

TEST(MeasuredPipeline, ASlowerStageShowsInTheMeasuredAndSimulatedBubble) {
    const int p = 2, m = 4;
    const ParallelConfig layout = pipelineLayout(PipelineSchedule::OneFOneB, p, m);
    PipelineCosts costs;
    costs.perRank = {{1.0, 1.0, 1.0}, {2.0, 2.0, 2.0}}; // stage 1 twice as slow
    const PipelineTimeline truth =
        simulate(buildPipelineProgram({layout.schedule, p, m, 1}), costs);
    const MeasuredPipeline measured = measurePipeline(runOf(layout, truth), 1);
    ASSERT_TRUE(measured.ok()) << measured.problem;
    // The fast stage waits on the slow one: it idles more than the closed form's 1/5.
    EXPECT_GT(measured.measured.bubble[0], measured.measured.bubble[1]);
    EXPECT_GT(measured.measured.bubble[0], 1.0 / 5 + 0.1);
    EXPECT_NEAR(measured.simulated.bubble[0], measured.measured.bubble[0], 1e-9);
}

TEST(MeasuredPipeline, TransfersAndWaitsAreOnTheTimelinesClock) {
    const ParallelConfig layout = pipelineLayout(PipelineSchedule::GPipe, 2, 2);
    PipelineCosts costs;
    costs.perRank = {{1.0, 1.0, 1.0}};
    const PipelineTimeline truth =
        simulate(buildPipelineProgram({layout.schedule, 2, 2, 1}), costs);
    RunState run = runOf(layout, truth);
    // A second step whose first op starts at 200: rank 0 sends activation 0 as F0 ends.
    for (int pp = 0; pp < 2; ++pp)
        addOpSpans(run, truth, pp, pp, 2, 200.0);
    json send = span(0, "communication", 2, 0, 0, 201.0, 201.25);
    send["axis"] = "pp";
    send["collective"] = "send";
    run.add(send);
    json wait = span(1, "wait", 2, 0, 0, 200.0, 201.25);
    wait["axis"] = "pp";
    run.add(wait);
    json dp = span(0, "communication", 2, -1, 0, 205.0, 206.0); // not a pipeline transfer
    dp["axis"] = "dp";
    run.add(dp);
    for (int pp = 0; pp < 2; ++pp)
        run.add(stepEvent(pp, 2, 210.0, 10.0));
    const MeasuredPipeline m = measurePipeline(run, 2);
    ASSERT_TRUE(m.ok()) << m.problem;
    ASSERT_EQ(m.transfers[0].size(), 1u);
    EXPECT_DOUBLE_EQ(m.transfers[0][0].start, 1.0);
    EXPECT_DOUBLE_EQ(m.transfers[0][0].end, 1.25);
    EXPECT_TRUE(m.transfers[1].empty());
    ASSERT_EQ(m.waits[1].size(), 1u);
    EXPECT_DOUBLE_EQ(m.waits[1][0].end, 1.25);
}

TEST(MeasuredPipeline, AStepWithMissingSpansSaysSoInsteadOfDrawingHalfATimeline) {
    const ParallelConfig layout = pipelineLayout(PipelineSchedule::OneFOneB, 2, 4);
    PipelineCosts costs;
    costs.perRank = {{1.0, 1.0, 1.0}};
    PipelineTimeline partial = simulate(buildPipelineProgram({layout.schedule, 2, 4, 1}), costs);
    partial.ranks[1].pop_back(); // a span the stream dropped
    const MeasuredPipeline measured = measurePipeline(runOf(layout, partial), 1);
    EXPECT_FALSE(measured.ok());
    EXPECT_NE(measured.problem.find("7 of its 8 ops"), std::string::npos) << measured.problem;
    RunState empty;
    EXPECT_FALSE(measurePipeline(empty, 1).ok());
    EXPECT_EQ(latestCompleteStep(empty), 0);
}

TEST(MeasuredPipeline, OnlyTheNewestStepsSpansAreHeld) {
    const ParallelConfig layout = pipelineLayout(PipelineSchedule::GPipe, 2, 2);
    PipelineCosts costs;
    costs.perRank = {{1.0, 1.0, 1.0}};
    const PipelineTimeline truth =
        simulate(buildPipelineProgram({layout.schedule, 2, 2, 1}), costs);
    const RunState run = runOf(layout, truth, 10);
    EXPECT_EQ(latestCompleteStep(run), 10);
    EXPECT_TRUE(measurePipeline(run, 10).ok());
    EXPECT_TRUE(measurePipeline(run, 10 - int(RunState::kSpanSteps) + 1).ok());
    EXPECT_FALSE(measurePipeline(run, 1).ok()); // long gone
    for (const auto& [rank, state] : run.ranks())
        EXPECT_LE(state.spans.size(), RunState::kSpanSteps * truth.ranks[0].size() * 3);
}

} // namespace
} // namespace shardscope::watch
