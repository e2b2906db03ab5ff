#include "memory_summary.h"

#include "core/units.h"
#include "explain.h"
#include "formulas.h"
#include "layout.h"

#include <cmath>
#include <numeric>

namespace shardscope {

namespace {

std::string gpuCount(int n, const std::string& gpu) {
    return n == 1 ? "one " + gpu : formatCount(double(n)) + " x " + gpu;
}

} // namespace

MemoryVerdict memoryVerdict(const PlanInputs& in, const Estimate& e) {
    MemoryVerdict v;
    const std::string gpu = in.cluster.gpu.name;
    const MemoryBreakdown& m = e.memory;
    v.perGpu = m.total();
    v.capacity = e.capacity;
    v.free = v.capacity - v.perGpu;
    v.fits = v.perGpu <= v.capacity;
    v.gpus = std::max(1, in.parallel.worldSize());
    v.perGpuFixed = m.activations + m.temporary + m.overhead;
    // Unsharded (ZeRO stage 0 over one rank): the whole model's state.
    v.modelStateBytes =
        double(e.params.total) *
        modelStateBytesPerParam(in.parallel.precision, in.parallel.optimizer, 0, 1, in.cluster.gpu);
    const double room = v.capacity - v.perGpuFixed;
    v.minimumGpus = room > 0 ? int(std::ceil(v.modelStateBytes / room)) : 0;
    v.formula = "N = ceil(model state / (capacity - activations - temporary - overhead)) = "
                "ceil(" +
                formatBytes(v.modelStateBytes) + " / (" + formatBytes(v.capacity) + " - " +
                formatBytes(v.perGpuFixed) + ")) = " + std::to_string(v.minimumGpus);

    if (v.fits) {
        const std::string free =
            formatBytes(v.free) + " free" +
            (in.assume.memoryHeadroom > 0
                 ? " beyond the " + formatPercent(in.assume.memoryHeadroom) + " headroom"
                 : "");
        v.text = v.gpus == 1 ? "Fits on one " + gpu + " with " + free + "."
                             : "Fits on each of the " + gpuCount(v.gpus, gpu) + " with " + free +
                                   " on the most loaded GPU.";
        return v;
    }
    v.text = "Does not fit: " + formatBytes(v.perGpu) + " per GPU is " + formatBytes(-v.free) +
             " over the " + describeCapacity(in, e) + " of one " + gpu + ". ";
    if (v.minimumGpus > 0) {
        v.text += "Needs at least " + gpuCount(v.minimumGpus, gpu) +
                  " (model state sharded over all of them, ZeRO-3 / FSDP).";
    } else {
        v.text += "Activations, buffers and overhead alone (" + formatBytes(v.perGpuFixed) +
                  ") exceed one GPU: recompute, a smaller micro batch, or more TP / CP.";
    }
    return v;
}

std::vector<SweepPoint> memoryOverDataParallel(const PlanInputs& in, int zeroStage,
                                               const std::vector<int>& dps) {
    std::vector<SweepPoint> out;
    out.reserve(dps.size());
    for (int dp : dps) {
        PlanInputs at = in;
        at.parallel.dp = std::max(1, dp);
        at.parallel.zero = zeroStage;
        if (at.parallel.shardGroup > 0 && at.parallel.dp * at.parallel.cp % at.parallel.shardGroup)
            at.parallel.shardGroup = 0; // no whole copies at this dp: shard over all of it
        // The experts over no more ranks than this dp lays out: etp x ep must divide tp x dp x cp
        // (an ep that divides the experts keeps dividing them as it shrinks to a common divisor).
        const std::int64_t ranks = std::int64_t(at.parallel.tp) * at.parallel.dp * at.parallel.cp;
        if (ranks % at.parallel.expertTp() != 0)
            at.parallel.etp = 0;
        at.parallel.ep = int(
            std::gcd<std::int64_t>(std::max(1, at.parallel.ep), ranks / at.parallel.expertTp()));
        // Keep the microbatch count: the global batch grows with dp as in weak scaling.
        at.parallel.globalBatch =
            std::max(1, in.parallel.microbatches()) * at.parallel.microBatch * at.parallel.dp;
        at.cluster = clusterForWorld(in.cluster, at.parallel.worldSize());
        out.push_back({at.parallel.worldSize(), at.parallel.dp, mostLoadedStageMemory(at).total()});
    }
    return out;
}

ZeroHoldings zeroHoldings(const PlanInputs& in, int zeroStage) {
    PlanInputs whole = in, at = in;
    whole.parallel.zero = 0;
    at.parallel.zero = zeroStage;
    // Both figures of the same pipeline stage (the most loaded one under this ZeRO stage).
    int stage = 0;
    const MemoryBreakdown held = mostLoadedStageMemory(at, &stage);
    const MemoryBreakdown unsharded = memoryForStage(whole, stage);
    ZeroHoldings h;
    h.zeroStage = zeroStage;
    h.groupSize = std::max(1, in.parallel.zeroShards());
    const double n = h.groupSize;
    // What offload moved to the host is not on the GPU, own shard or not.
    const auto holding = [n](double onGpu, double unshardedBytes) {
        return ModelStateHolding{onGpu, std::min(onGpu, unshardedBytes / n)};
    };
    h.weights = holding(held.parameters, unsharded.parameters);
    h.gradients = holding(held.gradients, unsharded.gradients);
    h.optimizer = holding(held.optimizer, unsharded.optimizer);
    return h;
}

} // namespace shardscope
