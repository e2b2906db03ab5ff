// Stragglers and the health of every rank, from events whose timing the test chooses.
#include "telemetry_fixtures.h"
#include "watch/diagnosis.h"

#include <gtest/gtest.h>
#include <random>

namespace shardscope::watch {
namespace {

using namespace shardscope::testing;

// dp replicas of one stage, each step: compute for `compute(rank, step)` seconds, then a wait on
// the gradient all-reduce until the slowest replica is done; every rank's step takes as long.
RunState dataParallelRun(int dp, int steps, const std::function<double(int, int)>& compute) {
    RunState run;
    const ParallelConfig layout = pipelineLayout(PipelineSchedule::OneFOneB, 1, 1, dp);
    for (int r = 0; r < dp; ++r)
        run.add(startEvent(r, {r, 0, 0, 0}, layout));
    double t = 0;
    for (int step = 1; step <= steps; ++step) {
        double slowest = 0;
        for (int r = 0; r < dp; ++r)
            slowest = std::max(slowest, compute(r, step));
        for (int r = 0; r < dp; ++r) {
            const double c = compute(r, step);
            run.add(span(r, "forward", step, 0, 0, t, t + c / 3));
            run.add(span(r, "backward", step, 0, 0, t + c / 3, t + c));
            json wait = span(r, "wait", step, -1, 0, t + c, t + slowest + 0.01);
            wait["axis"] = "dp";
            run.add(wait);
            run.add(
                stepEvent(r, step, t + slowest + 0.01, slowest + 0.01, 8192 / (slowest + 0.01)));
        }
        t += slowest + 0.01;
    }
    return run;
}

TEST(Stragglers, ARankSlowerThanItsPeersInEveryRecentStepIsFlaggedWithItsCost) {
    const RunState run =
        dataParallelRun(4, 12, [](int rank, int) { return rank == 2 ? 1.5 : 1.0; });
    const std::vector<Straggler> found = findStragglers(run);
    ASSERT_EQ(found.size(), 1u);
    const Straggler& s = found.front();
    EXPECT_EQ(s.rank, 2);
    EXPECT_EQ(s.host, "host0");
    EXPECT_EQ(s.peers, 4);
    EXPECT_NEAR(s.slowdown, 0.5, 1e-9);
    EXPECT_NEAR(s.excess, 0.5, 1e-9);
    EXPECT_NEAR(s.stepTime, 1.51, 1e-9);
    // At the peers' pace the step would take 1.01 s instead of 1.51 s.
    EXPECT_NEAR(s.throughputCost, 8192 / 1.01 - 8192 / 1.51, 1e-6);
    EXPECT_EQ(s.steps.size(), 5u);
    EXPECT_EQ(s.steps.back(), 12);
}

TEST(Stragglers, JitterAndASingleSlowStepFlagNobody) {
    std::mt19937 random(7);
    std::uniform_real_distribution<double> jitter(0.95, 1.05);
    std::map<std::pair<int, int>, double> times;
    for (int r = 0; r < 8; ++r)
        for (int step = 1; step <= 30; ++step)
            times[{r, step}] = jitter(random) * (r == 5 && step == 28 ? 2.0 : 1.0);
    const RunState run = dataParallelRun(8, 30, [&](int rank, int step) {
        return times.at({rank, step});
    });
    EXPECT_TRUE(findStragglers(run).empty());
}

TEST(Stragglers, RanksOfDifferentStagesAreNotComparedWithEachOther) {
    // pp 2, dp 1: the last stage (with the head) is legitimately slower and has no peer.
    RunState run;
    const ParallelConfig layout = pipelineLayout(PipelineSchedule::OneFOneB, 2, 4);
    for (int pp = 0; pp < 2; ++pp)
        run.add(startEvent(pp, {0, 0, pp, 0}, layout));
    for (int step = 1; step <= 10; ++step)
        for (int pp = 0; pp < 2; ++pp) {
            run.add(span(pp, "forward", step, 0, 0, step * 10.0, step * 10.0 + 1 + pp * 2));
            run.add(stepEvent(pp, step, step * 10.0 + 4, 4));
        }
    EXPECT_TRUE(findStragglers(run).empty());
}

TEST(Stragglers, InLayerWaitsOnTensorParallelPeersAreNotCountedAsCompute) {
    // tp 2 in each of 2 replicas; rank 1 is slow, so rank 0 (its tp peer) waits inside the
    // layers for it: only rank 1 is the straggler.
    RunState run;
    ParallelConfig layout = pipelineLayout(PipelineSchedule::OneFOneB, 1, 1, 2);
    layout.tp = 2;
    for (int r = 0; r < 4; ++r)
        run.add(startEvent(r, {r / 2, r % 2, 0, 0}, layout));
    for (int step = 1; step <= 8; ++step)
        for (int r = 0; r < 4; ++r) {
            const double t = step * 10.0;
            const bool slowGroup = r < 2;
            const double length = slowGroup ? 3.0 : 2.0; // the layer span, waits included
            run.add(span(r, "forward", step, 0, 0, t, t + length));
            if (slowGroup && r == 0) {
                json w = span(r, "wait", step, 0, 0, t + 1.0, t + 2.0);
                w["axis"] = "tp";
                run.add(w);
            }
            run.add(stepEvent(r, step, t + 3.1, 3.1));
        }
    const std::vector<Straggler> found = findStragglers(run);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found.front().rank, 1);
}

TEST(RankHealth, SaysWhoIsBlockedWhereWhoIsSilentAndWhoDied) {
    RunState run;
    const ParallelConfig layout = pipelineLayout(PipelineSchedule::OneFOneB, 2, 4, 2);
    for (int r = 0; r < 4; ++r) {
        run.add(startEvent(r, {r % 2, 0, r / 2, 0}, layout), 0.0);
        run.add(stepEvent(r, 1, 1.0, 1.0), 1.0);
    }
    // Rank 1 stops; ranks 0 and 2 report stalls in their waits for it; rank 3 is killed.
    run.add(span(1, "forward", 2, 0, 0, 1.0, 1.2), 1.2);
    run.add(json{{"type", "event"},
                 {"event", "stall"},
                 {"rank", 0},
                 {"t", 4.0},
                 {"step", 2},
                 {"microbatch", 1},
                 {"op", "F"},
                 {"collective", "recv"},
                 {"axis", "pp"},
                 {"sequence", 41},
                 {"waited_s", 2.0}},
            4.0);
    run.add(json{{"type", "event"},
                 {"event", "stall"},
                 {"rank", 2},
                 {"t", 4.1},
                 {"step", 2},
                 {"microbatch", -1},
                 {"op", "optimizer"},
                 {"collective", "all_reduce"},
                 {"axis", "dp"},
                 {"sequence", 7},
                 {"waited_s", 2.0}},
            4.1);
    run.connectionClosed(3, 4.5);
    const std::vector<RankHealth> health = rankHealth(run, {.silenceSeconds = 5, .now = 9.0});
    ASSERT_EQ(health.size(), 4u);
    EXPECT_EQ(health[0].status, RankStatus::Stalled);
    EXPECT_NE(health[0].detail.find("recv #41 on pp at step 2, microbatch 1 (F)"),
              std::string::npos)
        << health[0].detail;
    EXPECT_EQ(health[1].status, RankStatus::Silent);
    EXPECT_NEAR(health[1].silentFor, 9.0 - 1.2, 1e-9);
    EXPECT_EQ(health[2].status, RankStatus::Stalled);
    EXPECT_NE(health[2].detail.find("all_reduce #7 on dp"), std::string::npos);
    EXPECT_EQ(health[3].status, RankStatus::Dead);
    const std::string why = hangDiagnosis(run, health);
    EXPECT_NE(why.find("Rank 3 ended without an end event"), std::string::npos) << why;
    EXPECT_NE(why.find("Rank 1 is silent"), std::string::npos) << why;
    EXPECT_NE(why.find("Ranks 0, 2 are blocked waiting for the silent ranks"), std::string::npos)
        << why;
    // Progress after a stall clears it.
    run.add(span(0, "forward", 2, 1, 0, 4.0, 9.5), 9.5);
    EXPECT_EQ(rankHealth(run, {.silenceSeconds = 5, .now = 9.6})[0].status, RankStatus::Running);
}

// A rank_lost event from a waiting rank's watchdog: the lost rank is dead (named by who found it),
// the reporter failed with the sentence, and the diagnosis repeats it, read from files (no
// closed streams to go by).
TEST(RankHealth, ARankAnotherRanksWatchdogFoundGoneIsDeadAndTheDiagnosisSaysWhere) {
    RunState run;
    const ParallelConfig layout = pipelineLayout(PipelineSchedule::OneFOneB, 1, 4, 2);
    for (int r = 0; r < 2; ++r) {
        run.add(startEvent(r, {0, 0, r, 0}, layout));
        run.add(stepEvent(r, 1, 1.0, 1.0));
    }
    const std::string sentence = "rank 0: rank 1 (pid 4242 on this host) is gone: it ended "
                                 "without an end, error or hang event (killed, or crashed) while "
                                 "this rank waited 0.2 s in recv #9 on pp, at step 2";
    run.add(json{{"type", "event"},
                 {"event", "rank_lost"},
                 {"rank", 0},
                 {"t", 2.0},
                 {"lost_rank", 1},
                 {"lost_pid", 4242},
                 {"step", 2},
                 {"microbatch", 1},
                 {"op", "F"},
                 {"collective", "recv"},
                 {"axis", "pp"},
                 {"sequence", 9},
                 {"waited_s", 0.2},
                 {"message", sentence}});
    ASSERT_EQ(run.lostRanks().size(), 1u);
    EXPECT_EQ(run.lostRanks().at(1).reporter, 0);
    const std::vector<RankHealth> health = rankHealth(run);
    ASSERT_EQ(health.size(), 2u);
    EXPECT_EQ(health[0].status, RankStatus::Failed);
    EXPECT_EQ(health[0].detail, sentence);
    EXPECT_EQ(health[1].status, RankStatus::Dead);
    EXPECT_NE(health[1].detail.find("found by rank 0's watchdog"), std::string::npos)
        << health[1].detail;
    EXPECT_NE(hangDiagnosis(run, health).find(sentence), std::string::npos);
    // A report naming the reporter itself, or a rank out of range, names nobody.
    RunState odd;
    odd.add(startEvent(0, {0, 0, 0, 0}, layout));
    odd.add(json{{"type", "event"}, {"event", "rank_lost"}, {"rank", 0}, {"lost_rank", 0}});
    odd.add(json{{"type", "event"}, {"event", "rank_lost"}, {"rank", 0}, {"lost_rank", -3}});
    EXPECT_TRUE(odd.lostRanks().empty());
}

// The watchdog's summary names a stopped rank; the launcher then kills it, and a rank still
// waiting finds it gone. That late loss is the job being ended: the stopped rank stays silent and
// the rank that found it did not fail. The same loss found before the summary is the cause.
TEST(RankHealth, ARankFoundGoneOnlyAfterTheHangSummaryStaysSilent) {
    const auto runWithLossAt = [](double lostAt) {
        RunState run;
        const ParallelConfig layout = pipelineLayout(PipelineSchedule::OneFOneB, 1, 1, 4);
        for (int r = 0; r < 4; ++r) {
            run.add(startEvent(r, {r, 0, 0, 0}, layout));
            run.add(stepEvent(r, 1, 1.0, 1.0));
        }
        for (int r : {0, 2})
            run.add(json{{"type", "event"},
                         {"event", "hang"},
                         {"rank", r},
                         {"t", 9.0},
                         {"step", 2},
                         {"collective", "control_sum"},
                         {"axis", "control"},
                         {"sequence", 7},
                         {"op", "checkpoint"},
                         {"waited_s", 2.0}});
        run.add(json{{"type", "event"},
                     {"event", "hang_summary"},
                     {"rank", 0},
                     {"t", 10.0},
                     {"message", "ranks that never reported: 1, 3"},
                     {"missing", {1, 3}}});
        run.add(json{{"type", "event"},
                     {"event", "rank_lost"},
                     {"rank", 3},
                     {"t", lostAt},
                     {"lost_rank", 1},
                     {"message", "rank 3: rank 1 (pid 7) is gone"}});
        return run;
    };
    RunState ending = runWithLossAt(12.0);
    // Rank 2, waiting too, finds rank 1 gone as well: neither finder failed.
    ending.add(json{{"type", "event"},
                    {"event", "rank_lost"},
                    {"rank", 2},
                    {"t", 12.5},
                    {"lost_rank", 1},
                    {"message", "rank 2: rank 1 (pid 7) is gone"}});
    std::vector<RankHealth> health = rankHealth(ending);
    ASSERT_EQ(health.size(), 4u);
    EXPECT_EQ(health[1].status, RankStatus::Silent) << health[1].detail;
    EXPECT_NE(health[1].detail.find("rank 3's watchdog found its process gone"), std::string::npos)
        << health[1].detail;
    EXPECT_NE(health[2].status, RankStatus::Failed) << health[2].detail;
    EXPECT_NE(health[3].status, RankStatus::Failed) << health[3].detail;
    std::string why = hangDiagnosis(ending, health);
    EXPECT_NE(why.find("Ranks 1, 3 are silent"), std::string::npos) << why;
    EXPECT_EQ(why.find("is gone"), std::string::npos) << why;

    // A loss found after the summary of a rank the summary did not name is not the ending's.
    RunState other = runWithLossAt(12.0);
    other.add(json{{"type", "event"},
                   {"event", "rank_lost"},
                   {"rank", 3},
                   {"t", 12.6},
                   {"lost_rank", 0},
                   {"message", "rank 3: rank 0 (pid 5) is gone"}});
    health = rankHealth(other);
    EXPECT_EQ(health[3].status, RankStatus::Failed) << health[3].detail;

    const RunState cause = runWithLossAt(8.0);
    health = rankHealth(cause);
    EXPECT_EQ(health[1].status, RankStatus::Dead) << health[1].detail;
    EXPECT_EQ(health[3].status, RankStatus::Failed) << health[3].detail;
    why = hangDiagnosis(cause, health);
    EXPECT_NE(why.find("Watchdog of rank 3: rank 1 (pid 7) is gone"), std::string::npos) << why;
}

TEST(RankHealth, FinishedFailedHungAndNotYetStarted) {
    RunState run;
    ParallelConfig layout = pipelineLayout(PipelineSchedule::OneFOneB, 1, 1, 4);
    for (int r = 0; r < 3; ++r)
        run.add(startEvent(r, {r, 0, 0, 0}, layout));
    run.add(json{{"type", "event"}, {"event", "end"}, {"rank", 0}, {"status", "completed"}});
    run.add(json{{"type", "event"}, {"event", "error"}, {"rank", 1}, {"message", "disk full"}});
    run.add(json{{"type", "event"},
                 {"event", "hang"},
                 {"rank", 2},
                 {"step", 3},
                 {"collective", "all_reduce"},
                 {"axis", "dp"},
                 {"sequence", 9},
                 {"op", "W"}});
    run.add(json{{"type", "event"},
                 {"event", "hang_summary"},
                 {"rank", 2},
                 {"message", "ranks that never reported: 3"},
                 {"missing", {3}}});
    const std::vector<RankHealth> health = rankHealth(run);
    ASSERT_EQ(health.size(), 4u);
    EXPECT_EQ(health[0].status, RankStatus::Finished);
    EXPECT_EQ(health[1].status, RankStatus::Failed);
    EXPECT_EQ(health[1].detail, "disk full");
    EXPECT_EQ(health[2].status, RankStatus::Hung);
    EXPECT_NE(health[2].detail.find("the watchdog ended the job"), std::string::npos);
    EXPECT_EQ(health[3].status, RankStatus::Waiting);
    EXPECT_NE(hangDiagnosis(run, health).find("ranks that never reported: 3"), std::string::npos);
}

TEST(RankHealth, ARankOnAnotherHostThatOnlyTheLauncherSawDieIsDeadAndNamedFirst) {
    RunState run;
    const ParallelConfig layout = pipelineLayout(PipelineSchedule::OneFOneB, 1, 1, 4);
    for (int r = 0; r < 4; ++r)
        run.add(startEvent(r, {r, 0, 0, 0}, layout));
    run.add(stepEvent(3, 1, 1.0, 1.0));
    const std::optional<LauncherNotice> notice =
        parseLauncherNotice("mpirun noticed that process rank 3 with PID 0 on node host0 exited "
                            "on signal 9 (Killed).");
    ASSERT_TRUE(notice);
    run.launcherNotice(*notice);
    const std::vector<RankHealth> health = rankHealth(run);
    ASSERT_EQ(health.size(), 4u);
    EXPECT_EQ(health[3].status, RankStatus::Dead);
    EXPECT_NE(health[3].detail.find("signal 9 (Killed) on host0, mpirun reports"),
              std::string::npos)
        << health[3].detail;
    EXPECT_NE(health[0].status, RankStatus::Dead);
    const std::string why = hangDiagnosis(run, health);
    EXPECT_NE(why.find("Rank 3 on node host0 ended on signal 9 (Killed)"), std::string::npos)
        << why;
}

TEST(RankHealth, RanksThatNeverSpokeAreOneRowPerRunSoAHugeWorldCostsAFewRows) {
    // One start event declaring a million ranks and one line from rank 999,999 (a corrupt or
    // hostile stream) must not make the monitor build a million rows on every redraw.
    RunState run;
    const ParallelConfig layout = pipelineLayout(PipelineSchedule::OneFOneB, 1, 1, 4);
    json start = startEvent(0, {0, 0, 0, 0}, layout);
    start["world_size"] = 1'000'000;
    run.add(start);
    run.add(startEvent(5, {1, 0, 0, 0}, layout));
    run.add(startEvent(999'999, {2, 0, 0, 0}, layout));
    run.add(stepEvent(700, 1, 0.5, 0.5, 100)); // spoke, but never started

    const std::vector<RankHealth> health = rankHealth(run);
    // 0 | 1-4 | 5 | 6-999,998 | 999,999
    ASSERT_EQ(health.size(), 5u);
    int next = 0;
    for (const RankHealth& h : health) { // every rank exactly once, in order
        EXPECT_EQ(h.rank, next);
        EXPECT_GE(h.lastRank, h.rank);
        next = h.lastRank + 1;
    }
    EXPECT_EQ(next, 1'000'000);
    EXPECT_EQ(health[1].status, RankStatus::Waiting);
    EXPECT_EQ(rankLabel(health[1]), "1-4");
    EXPECT_EQ(rankLabel(health[2]), "5");
    EXPECT_NE(health[2].status, RankStatus::Waiting);
    EXPECT_EQ(health[3].rank, 6);
    EXPECT_EQ(health[3].lastRank, 999'998);
    EXPECT_EQ(health[3].status, RankStatus::Waiting);
    EXPECT_NE(health[4].status, RankStatus::Waiting);
}

} // namespace
} // namespace shardscope::watch
