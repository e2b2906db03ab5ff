// ZB-1p and ZB-2p (Qi et al. 2024): the automatic schedules reach the paper's bubbles with F, B
// and W of equal time (ZB-1p: ZB-H1's (p-1)/3 microbatch within 1F1B's memory; ZB-2p: none once
// m >= 2p, within twice it, counting each rank from its first pass; by the makespan both take
// ZB-H1's time), their programs are sound and timed the same by the simulator, and with unequal
// times ZB-1p does no worse than the handcrafted ZB-H1.
#include "core/error.h"
#include "sched/pipeline_program.h"
#include "sched/pipeline_simulator.h"
#include "sched/zero_bubble_auto.h"

#include <algorithm>
#include <gtest/gtest.h>

namespace shardscope {
namespace {

// Each rank's time from the start of its first op to the end of its last, the longest of them.
double longestRankSpan(const PipelineTimeline& t) {
    double span = 0;
    for (const auto& ops : t.ranks)
        if (!ops.empty())
            span = std::max(span, ops.back().end - ops.front().start);
    return span;
}

TEST(ZeroBubbleAuto, EqualTimesGiveThePapersBubbles) {
    for (int p : {2, 3, 4, 8, 16}) {
        for (int m : {p, 2 * p, 3 * p, 8 * p}) {
            const ZeroBubbleOrder one = zeroBubbleOrder(p, m, p);
            const ZeroBubbleOrder two = zeroBubbleOrder(p, m, 2 * p);
            // Qi et al. 2024, Table 2 and the authors' README: ZB-1p's bubble (p-1)(F+B-W) at
            // 1F1B's memory, ZB-2p's none at twice it (F = B = W = 1, one microbatch 3).
            EXPECT_DOUBLE_EQ(one.span, 3.0 * m + (p - 1)) << "p " << p << " m " << m;
            if (m >= 2 * p) {
                EXPECT_DOUBLE_EQ(two.span, 3.0 * m) << "p " << p << " m " << m;
            }
            // From the first rank's start to the last rank's end both take ZB-H1's time: ZB-2p's
            // parallelogram is its span plus the last rank's late start, (p-1) forwards.
            EXPECT_DOUBLE_EQ(one.makespan, 3.0 * m + (p - 1)) << "p " << p << " m " << m;
            EXPECT_DOUBLE_EQ(two.makespan, 3.0 * m + (p - 1)) << "p " << p << " m " << m;
            for (int r = 0; r < p; ++r) {
                EXPECT_LE(one.peakHeld[std::size_t(r)], p);
                EXPECT_LE(two.peakHeld[std::size_t(r)], 2 * p);
            }
            // The first rank holds what its warm-up needs: p, or 2p when there are that many.
            EXPECT_EQ(one.peakHeld[0], p);
            EXPECT_EQ(two.peakHeld[0], std::min(m, 2 * p)) << "p " << p << " m " << m;
        }
    }
}

TEST(ZeroBubbleAuto, ProgramsAreSoundAndTheSimulatorAgrees) {
    for (PipelineSchedule kind : {PipelineSchedule::ZeroBubble1p, PipelineSchedule::ZeroBubble2p}) {
        for (int p : {1, 2, 3, 4, 8}) {
            for (int m : {1, 2, 3, 5, 8, 16, 24}) {
                const PipelineProgram prog = buildPipelineProgram({kind, p, m, 1});
                const std::vector<std::string> problems = verifyProgram(prog);
                EXPECT_TRUE(problems.empty()) << toString(kind) << " p " << p << " m " << m << ": "
                                              << (problems.empty() ? "" : problems[0]);
                EXPECT_EQ(prog.opCount(), std::size_t(3 * p * m));
                PipelineCosts costs;
                costs.perRank = {OpCosts{}};
                const PipelineTimeline t = simulate(prog, costs);
                const int limit = kind == PipelineSchedule::ZeroBubble2p ? 2 * p : p;
                const ZeroBubbleOrder order = zeroBubbleOrder(p, m, limit);
                EXPECT_DOUBLE_EQ(longestRankSpan(t), order.span);
                EXPECT_DOUBLE_EQ(t.makespan, order.makespan);
                EXPECT_GE(t.makespan, longestRankSpan(t));
                EXPECT_DOUBLE_EQ(t.longestRankSpan, longestRankSpan(t));
            }
        }
    }
}

TEST(ZeroBubbleAuto, UnequalTimesDoNoWorseThanZbH1) {
    for (const OpCosts& c : {OpCosts{1, 1.3, 0.7}, OpCosts{1, 1.5, 1.2}, OpCosts{1, 0.8, 1.4}}) {
        for (double p2p : {0.0, 0.2}) {
            for (int p : {4, 8}) {
                for (int m : {2 * p, 4 * p}) {
                    PipelineCosts costs;
                    costs.perRank = {c};
                    costs.p2p = p2p;
                    const PipelineTimeline h1 = simulate(
                        buildPipelineProgram({PipelineSchedule::ZeroBubble, p, m, 1}), costs);
                    const double one = zeroBubbleOrder(p, m, p, c, p2p).span;
                    EXPECT_LE(one, longestRankSpan(h1) + 1e-9)
                        << "F " << c.forward << " B " << c.backwardInput << " W "
                        << c.backwardWeight << " p2p " << p2p << " p " << p << " m " << m;
                }
            }
        }
    }
}

TEST(ZeroBubbleAuto, OutOfRangeInputIsRefused) {
    EXPECT_THROW(zeroBubbleOrder(0, 4, 4), InputError);
    EXPECT_THROW(zeroBubbleOrder(4, 0, 4), InputError);
    EXPECT_THROW(zeroBubbleOrder(4, 4, 0), InputError);
    EXPECT_THROW(zeroBubbleOrder(1025, 4, 1025), InputError);
    EXPECT_THROW(zeroBubbleOrder(1024, 512, 1024), InputError); // too many passes
    EXPECT_NO_THROW(zeroBubbleOrder(128, 512, 256));            // the most the planner asks for
    EXPECT_THROW(zeroBubbleOrder(4, 4, 4, OpCosts{-1, 1, 1}), InputError);
    EXPECT_THROW(zeroBubbleOrder(4, 4, 4, OpCosts{}, -0.5), InputError);
}

} // namespace
} // namespace shardscope
