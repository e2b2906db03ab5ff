// Times a pipeline program: every op starts when its rank is free and what it needs has arrived,
// so the timeline shows the bubbles the schedule leaves, the makespan, and how many microbatches'
// activations each rank holds at its peak.
#pragma once

#include "pipeline_program.h"

#include <vector>

namespace shardscope {

// Seconds of one op on one rank (one microbatch through one model chunk).
struct OpCosts {
    double forward = 1.0;
    double backwardInput = 1.0;  // B
    double backwardWeight = 1.0; // W; a fused backward costs B + W
};

struct PipelineCosts {
    std::vector<OpCosts> perRank; // one per rank, or a single entry for every rank
    double p2p = 0.0;             // seconds for an activation or gradient to reach the peer
    // Activation memory a microbatch still holds after B while it awaits W, relative to what it
    // holds between F and B (Qi et al. 2023, Table 1: 32sbh of sb(34h + 5as); 32/34 with
    // FlashAttention).
    double weightGradMemory = 32.0 / 34.0;

    const OpCosts& of(int rank) const;
    double seconds(const PipelineOp& op, int rank) const;
};

// The per-op costs of `spec` when one microbatch through all of a rank's layers (its stage)
// costs `stage`: an interleaved rank holds its layers as v chunks of 1/v of them each, so each
// chunk's F, B and W cost 1/v of the stage's (Narayanan et al. 2021, section 2.2.2: the bubble
// shrinks by v because each op does), and every other schedule runs one chunk, the whole stage.
PipelineCosts stageCosts(const ScheduleSpec& spec, const OpCosts& stage, double p2p);

struct TimedOp {
    PipelineOp op;
    double start = 0;
    double end = 0;
};

struct PipelineTimeline {
    std::vector<std::vector<TimedOp>> ranks; // in each rank's program order
    double makespan = 0;
    std::vector<double> busy;   // seconds of compute per rank
    std::vector<double> bubble; // idle fraction of the makespan per rank
    double bubbleFraction = 0;  // idle fraction over all ranks
    // Each rank counted from its first op to its last instead (the automatic zero-bubble
    // schedules' measure: their staggered starts overlap the previous step): the longest such
    // span, and that rank's idle fraction of it.
    double longestRankSpan = 0;
    double spanBubbleFraction = 0;
    // Peak activations per rank, in microbatches (one chunk of an interleaved rank counts 1/v):
    std::vector<double> peakActivations;   // held between F and B, plus weightGradMemory until W
    std::vector<int> peakAwaitingBackward; // (microbatch, chunk) pairs between F and B, at peak
};

// Throws InputError when costs are negative or do not match the program's ranks, or when the
// program deadlocks (verifyProgram says why).
PipelineTimeline simulate(const PipelineProgram& program, const PipelineCosts& costs);

} // namespace shardscope
