// The simulator against the closed forms: GPipe and 1F1B bubbles, the interleaved overhead,
// ZB-H1's smaller bubble at the same memory, peak activations, per-rank costs and latency.
#include "core/error.h"
#include "plan/formulas.h"
#include "sched/pipeline_simulator.h"

#include <gtest/gtest.h>

namespace shardscope {
namespace {

PipelineTimeline run(PipelineSchedule kind, int p, int m, int v = 1, OpCosts c = {},
                     double p2p = 0) {
    PipelineCosts costs;
    costs.perRank = {c};
    costs.p2p = p2p;
    return simulate(buildPipelineProgram({kind, p, m, v}), costs);
}

TEST(PipelineSimulator, GPipeAndOneFOneBBubbleIsExactlyPMinus1OverMPlusPMinus1) {
    for (PipelineSchedule kind : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB}) {
        for (int p : {2, 4, 8, 16}) {
            for (int m : {1, 4, 8, 32, 64}) {
                const PipelineTimeline t = run(kind, p, m);
                const double expected = double(p - 1) / (m + p - 1);
                EXPECT_NEAR(t.bubbleFraction, expected, 1e-12)
                    << toString(kind) << " p" << p << " m" << m;
                EXPECT_NEAR(t.makespan, 3.0 * (m + p - 1), 1e-9);
                // The planner's closed form agrees.
                EXPECT_NEAR(t.bubbleFraction, pipelineBubbleFraction(kind, p, m), 1e-12);
            }
        }
    }
}

TEST(PipelineSimulator, NaiveIdlesAllButOneStage) {
    const PipelineTimeline t = run(PipelineSchedule::Naive, 4, 8);
    EXPECT_NEAR(t.bubbleFraction, 0.75, 1e-12); // the lesson's 75 % for four stages
    EXPECT_NEAR(t.bubbleFraction, pipelineBubbleFraction(PipelineSchedule::Naive, 4, 8), 1e-12);
}

TEST(PipelineSimulator, InterleavedOverheadIsPMinus1OverVM) {
    for (int p : {2, 4, 8}) {
        for (int v : {2, 4}) {
            for (int m : {p, 2 * p, 4 * p}) {
                // A chunk holds 1/v of the rank's layers, so it costs 1/v of an op.
                const double c = 1.0 / v;
                const PipelineTimeline t = run(PipelineSchedule::Interleaved, p, m, v, {c, c, c});
                const double ideal = 3.0 * m;
                EXPECT_NEAR((t.makespan - ideal) / ideal, double(p - 1) / (v * m), 1e-9)
                    << "p" << p << " v" << v << " m" << m;
                EXPECT_NEAR(t.bubbleFraction,
                            pipelineBubbleFraction(PipelineSchedule::Interleaved, p, m, v), 1e-9);
            }
        }
    }
}

TEST(PipelineSimulator, StageCostsMakeInterleavingShorterThan1F1BByTheBubbleDifference) {
    // The same model and stage costs under both schedules: one microbatch through a rank's
    // layers costs F + B + W = 3. 1F1B takes (m + p - 1) x 3; interleaving with v chunks of 1/v
    // of the layers takes (m + (p - 1) / v) x 3, shorter by (p - 1)(1 - 1/v) x 3.
    const OpCosts stage{1.0, 1.0, 1.0};
    for (int p : {2, 4, 8}) {
        for (int v : {2, 4}) {
            const int m = 2 * p;
            const ScheduleSpec oneF{PipelineSchedule::OneFOneB, p, m, 1};
            const ScheduleSpec inter{PipelineSchedule::Interleaved, p, m, v};
            const double plain =
                simulate(buildPipelineProgram(oneF), stageCosts(oneF, stage, 0)).makespan;
            const double interleaved =
                simulate(buildPipelineProgram(inter), stageCosts(inter, stage, 0)).makespan;
            EXPECT_NEAR(plain, 3.0 * (m + p - 1), 1e-9);
            EXPECT_NEAR(interleaved, 3.0 * (m + double(p - 1) / v), 1e-9) << "p" << p << " v" << v;
            EXPECT_NEAR(plain - interleaved, 3.0 * (p - 1) * (1.0 - 1.0 / v), 1e-9);
        }
    }
    // Every other schedule runs one chunk per rank: its ops cost the stage's.
    const PipelineCosts gpipe = stageCosts({PipelineSchedule::GPipe, 4, 8, 1}, {2, 3, 4}, 0.5);
    EXPECT_EQ(gpipe.perRank.front().backwardWeight, 4.0);
    EXPECT_EQ(gpipe.p2p, 0.5);
}

TEST(PipelineSimulator, PeakActivationsAreMForGPipeAndPMinusRFor1F1B) {
    const int p = 4, m = 8;
    const PipelineTimeline gpipe = run(PipelineSchedule::GPipe, p, m);
    const PipelineTimeline ofob = run(PipelineSchedule::OneFOneB, p, m);
    for (int r = 0; r < p; ++r) {
        EXPECT_EQ(gpipe.peakAwaitingBackward[std::size_t(r)], m);
        EXPECT_DOUBLE_EQ(gpipe.peakActivations[std::size_t(r)], m);
        EXPECT_EQ(ofob.peakAwaitingBackward[std::size_t(r)], p - r);
        EXPECT_DOUBLE_EQ(ofob.peakActivations[std::size_t(r)], p - r);
        EXPECT_DOUBLE_EQ(ofob.peakActivations[std::size_t(r)],
                         pipelineInflightMicrobatches(PipelineSchedule::OneFOneB, p, m, 1, r));
    }
    // Fewer microbatches than stages: nobody holds more than m.
    const PipelineTimeline few = run(PipelineSchedule::OneFOneB, 8, 2);
    EXPECT_EQ(few.peakAwaitingBackward[0], 2);
}

TEST(PipelineSimulator, ZeroBubbleH1ShrinksTheBubbleWithoutMoreMemory) {
    for (int p : {2, 4, 8}) {
        for (int m : {p, 2 * p, 4 * p}) {
            const PipelineTimeline zb = run(PipelineSchedule::ZeroBubble, p, m);
            const PipelineTimeline ofob = run(PipelineSchedule::OneFOneB, p, m);
            // Qi et al. 2023, Table 2: bubble (p-1)(F+B-W) against 1F1B's (p-1)(F+B+W).
            EXPECT_NEAR(zb.makespan, 3.0 * m + (p - 1) * (1.0 + 1.0 - 1.0), 1e-9)
                << "p" << p << " m" << m;
            EXPECT_LT(zb.bubbleFraction, ofob.bubbleFraction);
            EXPECT_NEAR(zb.bubbleFraction,
                        pipelineBubbleFraction(PipelineSchedule::ZeroBubble, p, m), 1e-12);
            double zbPeak = 0, ofobPeak = 0;
            for (int r = 0; r < p; ++r) {
                EXPECT_EQ(zb.peakAwaitingBackward[std::size_t(r)],
                          ofob.peakAwaitingBackward[std::size_t(r)]);
                zbPeak = std::max(zbPeak, zb.peakActivations[std::size_t(r)]);
                ofobPeak = std::max(ofobPeak, ofob.peakActivations[std::size_t(r)]);
            }
            EXPECT_LE(zbPeak, ofobPeak + 1e-12);
        }
    }
}

TEST(PipelineSimulator, TheSlowestRankSetsThePace) {
    PipelineCosts costs;
    costs.perRank = {{1, 1, 1}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}};
    const PipelineTimeline t =
        simulate(buildPipelineProgram({PipelineSchedule::OneFOneB, 4, 32, 1}), costs);
    EXPECT_GE(t.makespan, 32 * 6.0);
    EXPECT_LT(t.bubble[1], t.bubble[0]); // the slow rank idles least
}

TEST(PipelineSimulator, PointToPointLatencyLengthensTheCriticalPath) {
    const double base = run(PipelineSchedule::OneFOneB, 4, 8).makespan;
    const double slow = run(PipelineSchedule::OneFOneB, 4, 8, 1, {}, 0.5).makespan;
    EXPECT_GE(slow, base + 2 * 3 * 0.5 - 1e-9); // (p-1) hops forward and back at least
}

TEST(PipelineSimulator, OpsNeverOverlapOnARankAndFollowTheirInputs) {
    const PipelineTimeline t = run(PipelineSchedule::Interleaved, 4, 8, 2, {0.5, 0.7, 0.3}, 0.1);
    for (const auto& ops : t.ranks) {
        for (std::size_t i = 1; i < ops.size(); ++i)
            EXPECT_GE(ops[i].start, ops[i - 1].end - 1e-12);
    }
}

TEST(PipelineSimulator, BadCostsAndDeadlocksAreErrors) {
    const PipelineProgram prog = buildPipelineProgram({PipelineSchedule::GPipe, 2, 2, 1});
    PipelineCosts costs;
    costs.perRank = {{1, -1, 1}};
    EXPECT_THROW(simulate(prog, costs), InputError);
    costs.perRank = {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}};
    EXPECT_THROW(simulate(prog, costs), InputError);
    costs.perRank = {{1, 1, 1}};
    PipelineProgram crossed = prog;
    std::swap(crossed.ranks[1][0], crossed.ranks[1][2]);
    try {
        simulate(crossed, costs);
        FAIL();
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
    }
}

} // namespace
} // namespace shardscope
