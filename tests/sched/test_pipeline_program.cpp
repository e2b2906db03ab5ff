// Pipeline programs: every schedule's op lists are complete, ordered, paired and deadlock-free;
// unsupported shapes are refused with a reason; broken programs are caught.
#include "core/error.h"
#include "sched/pipeline_program.h"

#include <algorithm>
#include <gtest/gtest.h>

namespace shardscope {
namespace {

ScheduleSpec spec(PipelineSchedule kind, int p, int m, int v = 1) {
    return {kind, p, m, v};
}

std::string joined(const std::vector<std::string>& problems) {
    std::string s;
    for (const auto& x : problems)
        s += x + "\n";
    return s;
}

TEST(PipelineProgram, EveryScheduleIsSoundOverAGrid) {
    for (PipelineSchedule kind : {PipelineSchedule::Naive, PipelineSchedule::GPipe,
                                  PipelineSchedule::OneFOneB, PipelineSchedule::ZeroBubble,
                                  PipelineSchedule::ZeroBubble1p, PipelineSchedule::ZeroBubble2p}) {
        for (int p : {1, 2, 3, 4, 8}) {
            for (int m : {1, 2, 3, 4, 7, 8, 16}) {
                const PipelineProgram prog = buildPipelineProgram(spec(kind, p, m));
                EXPECT_EQ(joined(verifyProgram(prog)), "")
                    << toString(kind) << " p" << p << " m" << m;
                const bool split = kind == PipelineSchedule::ZeroBubble ||
                                   kind == PipelineSchedule::ZeroBubble1p ||
                                   kind == PipelineSchedule::ZeroBubble2p;
                const std::size_t perRank = split ? 3 : 2;
                EXPECT_EQ(prog.opCount(), perRank * std::size_t(p * m));
            }
        }
    }
    for (int p : {2, 3, 4, 8}) {
        for (int v : {2, 3, 4}) {
            for (int groups : {1, 2, 3}) {
                const PipelineProgram prog =
                    buildPipelineProgram(spec(PipelineSchedule::Interleaved, p, p * groups, v));
                EXPECT_EQ(joined(verifyProgram(prog)), "") << "p" << p << " v" << v;
                EXPECT_EQ(prog.opCount(), std::size_t(2 * p * v * p * groups));
            }
        }
    }
}

TEST(PipelineProgram, OneFOneBOrderAndTransfers) {
    const PipelineProgram prog = buildPipelineProgram(spec(PipelineSchedule::OneFOneB, 4, 8));
    // Rank 0: three warm-up forwards, then F3 B0 F4 B1 ...
    const auto& r0 = prog.ranks[0];
    EXPECT_EQ(r0[0].kind, OpKind::Forward);
    EXPECT_EQ(r0[2].microbatch, 2);
    EXPECT_EQ(r0[3].kind, OpKind::Forward);
    EXPECT_EQ(r0[3].microbatch, 3);
    EXPECT_EQ(r0[4].kind, OpKind::Backward);
    EXPECT_EQ(r0[4].microbatch, 0);
    EXPECT_FALSE(r0[0].recv.has_value()); // the first stage reads the data, not a peer
    ASSERT_TRUE(r0[0].send.has_value());
    EXPECT_EQ(r0[0].send->peer, 1);
    EXPECT_EQ(r0[0].send->tensor, TensorKind::Activation);
    ASSERT_TRUE(r0[4].recv.has_value());
    EXPECT_EQ(r0[4].recv->tensor, TensorKind::Gradient);
    EXPECT_FALSE(r0[4].send.has_value());
    // The last rank starts backward right after its first forward and sends nothing forward.
    const auto& r3 = prog.ranks[3];
    EXPECT_EQ(r3[1].kind, OpKind::Backward);
    EXPECT_FALSE(r3[0].send.has_value());
    ASSERT_TRUE(r3[1].send.has_value());
    EXPECT_EQ(r3[1].send->peer, 2);
}

TEST(PipelineProgram, ZeroBubbleH1MatchesThePaperFigure) {
    // Qi et al. 2023, Figure 3 (top), p = 4, m = 8, read off the figure (1-based there).
    const PipelineProgram prog = buildPipelineProgram(spec(PipelineSchedule::ZeroBubble, 4, 8));
    auto text = [&](int rank) {
        std::string s;
        for (const PipelineOp& op : prog.ranks[std::size_t(rank)])
            s += std::string(1, letterOf(op.kind)) + std::to_string(op.microbatch + 1) + " ";
        return s;
    };
    EXPECT_EQ(text(0), "F1 F2 F3 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 F8 B5 W5 B6 W6 B7 W7 B8 W8 ");
    EXPECT_EQ(text(1), "F1 F2 F3 B1 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 F8 B6 W5 B7 W6 B8 W7 W8 ");
    EXPECT_EQ(text(2), "F1 F2 B1 F3 B2 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 F8 B7 W5 B8 W6 W7 W8 ");
    EXPECT_EQ(text(3), "F1 B1 F2 B2 F3 B3 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 F8 B8 W5 W6 W7 W8 ");
}

TEST(PipelineProgram, InterleavedVisitsChunksInMegatronOrder) {
    // p = 2, v = 2, m = 4: rank 0 holds stages 0 and 2, rank 1 stages 1 and 3.
    const PipelineProgram prog = buildPipelineProgram(spec(PipelineSchedule::Interleaved, 2, 4, 2));
    const auto& r0 = prog.ranks[0];
    // Forwards of the first group: microbatches 0, 1 on chunk 0, then 0, 1 on chunk 1.
    EXPECT_EQ(r0[0].chunk, 0);
    EXPECT_EQ(r0[1].microbatch, 1);
    EXPECT_EQ(r0[2].chunk, 1);
    EXPECT_EQ(r0[2].stage, 2);
    EXPECT_EQ(r0[2].microbatch, 0);
    // Stage 2's input comes from stage 1 on rank 1; stage 3 (rank 1, chunk 1) is the last.
    ASSERT_TRUE(r0[2].recv.has_value());
    EXPECT_EQ(r0[2].recv->peer, 1);
    for (const PipelineOp& op : prog.ranks[1]) {
        if (op.stage == 3 && op.kind == OpKind::Forward) {
            EXPECT_FALSE(op.send.has_value());
        }
    }
}

TEST(PipelineProgram, UnsupportedShapesSayWhy) {
    const auto message = [](const ScheduleSpec& s) {
        try {
            buildPipelineProgram(s);
        } catch (const InputError& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_NE(message(spec(PipelineSchedule::Interleaved, 4, 6, 2)).find("divisible by p"),
              std::string::npos);
    EXPECT_NE(message(spec(PipelineSchedule::Interleaved, 4, 6, 2)).find("m = 8"),
              std::string::npos);
    EXPECT_NE(message(spec(PipelineSchedule::Interleaved, 4, 8, 1)).find("v >= 2"),
              std::string::npos);
    EXPECT_NE(message(spec(PipelineSchedule::Interleaved, 1, 8, 2)).find("p >= 2"),
              std::string::npos);
    EXPECT_NE(message(spec(PipelineSchedule::OneFOneB, 4, 8, 2)).find("set v = 1"),
              std::string::npos);
    EXPECT_NE(message(spec(PipelineSchedule::GPipe, 0, 8)).find("p = 0"), std::string::npos);
    EXPECT_NE(message(spec(PipelineSchedule::GPipe, 4, 0)).find("m = 0"), std::string::npos);
    EXPECT_NE(message(spec(PipelineSchedule::GPipe, 1024, 16384)).find("too many"),
              std::string::npos);
}

TEST(PipelineProgram, VerifyCatchesBrokenPrograms) {
    PipelineProgram prog = buildPipelineProgram(spec(PipelineSchedule::OneFOneB, 4, 8));
    // A backward moved before every forward on rank 1 can never run.
    PipelineProgram early = prog;
    auto& r1 = early.ranks[1];
    const auto b = std::find_if(r1.begin(), r1.end(),
                                [](const PipelineOp& op) { return op.kind == OpKind::Backward; });
    std::rotate(r1.begin(), b, b + 1);
    EXPECT_NE(joined(verifyProgram(early)).find("deadlock"), std::string::npos);

    // A missing op.
    PipelineProgram missing = prog;
    missing.ranks[2].pop_back();
    EXPECT_NE(joined(verifyProgram(missing)).find("runs 0 times"), std::string::npos);

    // A send nobody receives.
    PipelineProgram unpaired = prog;
    unpaired.ranks[1][0].recv.reset();
    EXPECT_NE(joined(verifyProgram(unpaired)).find("never received"), std::string::npos);

    // Receives taken out of the order of their sends: the last rank runs F1 before F0, which
    // waits for nothing it lacks but would take microbatch 0's activation as microbatch 1's if
    // transfers were matched by order.
    PipelineProgram reordered = buildPipelineProgram(spec(PipelineSchedule::GPipe, 2, 2));
    std::swap(reordered.ranks[1][0], reordered.ranks[1][1]);
    EXPECT_NE(joined(verifyProgram(reordered)).find("in the order they are sent"),
              std::string::npos)
        << joined(verifyProgram(reordered));

    // Two ranks each waiting for the other: rank 0's and rank 1's first backwards first.
    PipelineProgram crossed = buildPipelineProgram(spec(PipelineSchedule::GPipe, 2, 2));
    std::swap(crossed.ranks[1][0], crossed.ranks[1][2]); // B0 before F0 on the last rank
    EXPECT_NE(joined(verifyProgram(crossed)).find("deadlock"), std::string::npos);
}

} // namespace
} // namespace shardscope
