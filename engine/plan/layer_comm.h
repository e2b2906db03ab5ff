// Inside one transformer layer: its ops in the order they run for one microbatch, forward then
// backward, with the collectives tensor, sequence, context and expert parallelism put between
// them and the bytes each moves. The planner's per-axis traffic uses the same message sizes
// (tpMessageBytes, cpHopBytes, epMessageBytes, expertTpTraffic), and tests check that these
// collectives, summed over microbatches and layers, are its TP, CP and EP bytes: a student sees
// where the Explorer's numbers come from.
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

// The collectives an MoE layer's experts need among their etp ranks, one pair per pass of the
// layer (forward, backward, a recomputed forward), as Megatron-Core's token dispatchers run them:
// with EP (the all-to-all dispatcher) an all-gather of the tokens each of the etp ranks received
// before the experts and a reduce-scatter of their outputs after, k copies a token; without EP
// (the all-gather dispatcher) the same of the hidden states themselves. Without sequence
// parallelism one all-reduce of the experts' outputs instead (a layout the ep-sp rule refuses,
// still estimated). None for a dense model or etp 1.
struct ExpertTpTraffic {
    int group = 1;       // etp
    double bytes = 0;    // S of one call: the gathered tensor, or the all-reduced one
    bool gather = false; // all-gather + reduce-scatter rather than an all-reduce
};
ExpertTpTraffic expertTpTraffic(const PlanInputs& in);

struct LayerOp {
    std::string name;       // "QKV projection", "all-gather", "ring pass of K and V"
    bool backward = false;  // in the backward pass (or a full recompute's repeated forward)
    bool recompute = false; // the forward again, under full recompute (with recompute_layers,
                            // in the first layers of each virtual stage only: `why` says so)
    bool collective = false;
    Axis axis = Axis::TP;       // TP (with SP, or ETP), CP or EP, for collectives
    std::string collectiveKind; // "all-reduce", "all-gather", "reduce-scatter", "ring pass"
    int hops = 1;               // ring passes: cp - 1 sends in a row
    double bytes = 0;           // S of one call (a ring pass: one hop's message)
    double sentPerRank = 0;     // what each rank sends for this op, all hops together
    std::string why;            // what it is for, in a line
};

// Empty for a bare parameter count (no architecture). Without tp, cp, ep or etp above 1 the list
// holds only the layer's compute ops.
std::vector<LayerOp> layerOps(const PlanInputs& in);

} // namespace shardscope
