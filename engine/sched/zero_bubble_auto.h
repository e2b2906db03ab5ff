// ZB-1p and ZB-2p (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 3): the
// backward split into B (input gradient) and W (weight gradient), and each rank's order found by
// the paper's greedy heuristic under a limit on the microbatches a rank holds (forward done, W
// not yet): p for ZB-1p, the memory of 1F1B; 2p for ZB-2p.
#pragma once

#include "pipeline_simulator.h"

#include <vector>

namespace shardscope {

struct ScheduledPass {
    OpKind kind = OpKind::Forward; // Forward, BackwardInput or BackwardWeight
    int microbatch = 0;
};

struct ZeroBubbleOrder {
    std::vector<std::vector<ScheduledPass>> ranks; // ranks[r]: rank r's passes in order
    // The longest rank's time from the start of its first pass to the end of its last: the step,
    // when the optimizer does not wait for every rank at once (the paper's post-validation,
    // section 4), so that each rank's staggered start overlaps its previous step's end.
    double span = 0;
    // From the first rank's first pass to the last pass anywhere: the step when the optimizer
    // waits for every rank, as it does unless the framework validates after stepping.
    double makespan = 0;
    std::vector<int> peakHeld; // per rank: most microbatches between F and W at once
};

// ZB-1p and ZB-2p, the schedules built by this heuristic, and the microbatches each lets a rank
// hold: p (1F1B's memory) and 2p.
bool isAutomaticZeroBubble(PipelineSchedule s);
int zeroBubbleHeldLimit(PipelineSchedule s, int p);

// The greedy schedule of p ranks and m microbatches holding at most `heldLimit` microbatches a
// rank, with these per-pass costs (the same on every rank) and point-to-point time. Throws
// InputError when p, m, the limit or a cost is out of range (p x m at most 300,000).
ZeroBubbleOrder zeroBubbleOrder(int p, int m, int heldLimit, const OpCosts& costs = {},
                                double p2p = 0);

} // namespace shardscope
