// Inside one transformer layer: its ops in the order they run for one microbatch, forward then
// backward, with the collectives tensor, sequence and context parallelism put between them and
// the bytes each moves. The planner's per-axis traffic uses the same message sizes
// (tpMessageBytes, cpHopBytes), and a test checks that these collectives, summed over
// microbatches and layers, are its TP and CP bytes: a student sees where the Explorer's numbers
// come from.
#pragma once

#include "estimate.h"

#include <string>
#include <vector>

namespace shardscope {

// The tensor one tensor-parallel collective moves for one microbatch: the layer's output,
// local tokens x hidden x activation bytes (S as nccl-tests counts an all-reduce's buffer or an
// all-gather's output).
double tpMessageBytes(const PlanInputs& in);
// One ring-attention hop: this rank's K and V for its share of the sequence (per tp rank).
double cpHopBytes(const PlanInputs& in);
// What one rank holds for one expert-parallel all-to-all (dispatch or combine): its tokens
// (over tp: EP with tp runs under SP) x top-k [x the capacity factor, padded] x hidden x
// activation bytes.
double epMessageBytes(const PlanInputs& in);

struct LayerOp {
    std::string name;       // "QKV projection", "all-gather", "ring pass of K and V"
    bool backward = false;  // in the backward pass (or a full recompute's repeated forward)
    bool recompute = false; // the forward again, under full recompute
    bool collective = false;
    Axis axis = Axis::TP;       // TP (with or without SP) or CP, for collectives
    std::string collectiveKind; // "all-reduce", "all-gather", "reduce-scatter", "ring pass"
    int hops = 1;               // ring passes: cp - 1 sends in a row
    double bytes = 0;           // S of one call (a ring pass: one hop's message)
    double sentPerRank = 0;     // what each rank sends for this op, all hops together
    std::string why;            // what it is for, in a line
};

// Empty for a bare parameter count (no architecture). Without tp > 1 or cp > 1 the list holds
// only the layer's compute ops.
std::vector<LayerOp> layerOps(const PlanInputs& in);

} // namespace shardscope
