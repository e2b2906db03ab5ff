// What is wrong with a run, rank by rank: which ranks are slow (stragglers), which are blocked
// and where, which went silent or died. Plain functions of a RunState and the receiver's clock.
#pragma once

#include "run_state.h"

#include <string>
#include <vector>

namespace shardscope::watch {

enum class RankStatus {
    Waiting,  // no start event yet
    Running,  // reporting progress
    Stalled,  // blocked in an operation past the stall threshold (a stall event)
    Hung,     // the watchdog gave up on its wait (a hang event)
    Silent,   // no event for longer than the silence threshold, nothing said why
    Dead,     // its stream closed, or its telemetry stopped, without an end event
    Finished, // end event: completed or interrupted
    Failed,   // end event: failed, or an error event
};
const char* toString(RankStatus s);

struct RankHealth {
    int rank = 0;
    // Ranks rank..lastRank share this row: consecutive ranks with no start event yet are one row,
    // so a job of 10^6 ranks (or one corrupt line naming rank 999,999) costs one row, not 10^6.
    int lastRank = 0;
    RankStatus status = RankStatus::Waiting;
    std::string detail; // "blocked in recv #41 on pp at step 3, microbatch 2 (F) for 12.0 s"
    double silentFor = 0;
};

struct HealthOptions {
    // A live rank is silent when it has sent nothing for this long (seconds), or for three of its
    // median step times, whichever is longer.
    double silenceSeconds = 5.0;
    // With a live stream: the receiver's clock now (seconds); < 0 reads files, where silence is
    // judged against the newest event of the run instead.
    double now = -1;
};

// The state of every rank that has sent anything, and of ranks 0..worldSize-1 that have not
// (each run of consecutive silent-from-the-start ranks as one row). Rows are in rank order.
std::vector<RankHealth> rankHealth(const RunState& run, const HealthOptions& options = {});

// "7", or "7-12" for a row standing for several ranks.
std::string rankLabel(const RankHealth& h);

// A sentence for the run as a whole when something is wrong ("rank 1 is silent; ranks 0, 2, 3
// are blocked waiting for it: ..."), empty when every rank is fine.
std::string hangDiagnosis(const RunState& run, const std::vector<RankHealth>& health);

struct StragglerOptions {
    double margin = 0.15; // slower than the peer median by more than this fraction...
    int steps = 5;        // ...in each of this many consecutive newest steps
};

struct Straggler {
    int rank = 0;
    std::string host;
    int stage = 0;
    int peers = 0;       // ranks of the same pipeline stage it was compared with (itself included)
    double slowdown = 0; // median over the steps of compute / peer median - 1
    double excess = 0;   // seconds per step above the peer median (median over the steps)
    double stepTime = 0; // the rank's median step time over those steps
    double tokensPerSecond = 0;      // measured, median over those steps
    double throughputCost = 0;       // tokens/s the job would gain if it ran at the peer median
    std::vector<std::int64_t> steps; // the steps it was slow in
};

// Ranks whose compute time per step (the sum of their compute spans) stays above the median of
// the ranks holding the same pipeline stage by more than the margin, in each of the newest
// `steps` steps every peer reported. Ranks are compared only with peers that do the same work,
// so a run with one rank per stage (dp = tp = cp = 1) has no peers and flags none. Synchronous
// training waits for the slowest rank, so the cost is tokens / (step time - excess) - tokens/s.
std::vector<Straggler> findStragglers(const RunState& run, const StragglerOptions& options = {});

} // namespace shardscope::watch
