// The answers the Memory page gives in words and sweeps: does this layout fit, by how much, how
// many GPUs it would need, and how memory per GPU falls with more GPUs under each ZeRO stage.
#pragma once

#include "estimate.h"

#include <string>
#include <vector>

namespace shardscope {

struct MemoryVerdict {
    bool fits = false;
    double perGpu = 0;   // bytes on the most loaded GPU
    double capacity = 0; // bytes of one GPU
    double free = 0;     // capacity - perGpu (negative when over)
    int gpus = 1;        // GPUs of the layout
    // Fewest GPUs of this type that could hold the whole model state sharded evenly (ZeRO-3)
    // next to this layout's per-GPU activations, buffers and overhead; 0 when those alone
    // exceed one GPU. Only meaningful when the layout does not fit.
    int minimumGpus = 0;
    double modelStateBytes = 0; // whole model, unsharded: parameters x bytes per parameter
    double perGpuFixed = 0;     // activations + temporary + overhead on the most loaded GPU
    std::string text;           // "Fits on one H100 SXM5 80 GB with 11.2 GB free."
    std::string formula;        // how minimumGpus is found, with the numbers substituted
};

MemoryVerdict memoryVerdict(const PlanInputs& in, const Estimate& e);

struct SweepPoint {
    int gpus = 0;
    int dp = 0;
    double bytes = 0; // total on the most loaded GPU
};

// Memory per GPU as dp runs over `dps` with the rest of the layout kept, for one ZeRO stage.
std::vector<SweepPoint> memoryOverDataParallel(const PlanInputs& in, int zeroStage,
                                               const std::vector<int>& dps);

// What one GPU of the most loaded stage holds of the model state under a ZeRO stage: each
// category's bytes, and how much of that is the GPU's own 1/(dp x cp) shard. The rest is a copy
// every other GPU of its data-parallel group holds too: what the next ZeRO stage removes.
struct ModelStateHolding {
    double held = 0;     // bytes on the GPU (the planner's figure for this ZeRO stage)
    double ownShard = 0; // the unsharded figure / (dp x cp)
    double copy() const { return held > ownShard ? held - ownShard : 0.0; }
};
struct ZeroHoldings {
    int zeroStage = 0;
    int groupSize = 1; // the GPUs ZeRO shards over: dp x cp, or the hybrid shard group
    ModelStateHolding weights, gradients, optimizer;
};
ZeroHoldings zeroHoldings(const PlanInputs& in, int zeroStage);

} // namespace shardscope
