// The CPU backend: GEMMs through OpenBLAS, everything else as loops OpenMP spreads over threads.
#pragma once

#include "ops.h"

#include <memory>
#include <string>

namespace shardscope::kernels {

// threads: OpenBLAS and OpenMP threads, set once for the process (<= 0: one per core).
std::unique_ptr<Ops> makeCpuOps(int threads);
int cpuCores();

// The peak fp32 FLOP/s of `threads` cores, from their vector units and clock, with the formula
// ("2 cores x 2.10 GHz x 64 FLOP/cycle (AVX-512: 2 FMA units x 16 lanes x 2)").
struct PeakFlops {
    double flops = 0;
    std::string formula;
};
PeakFlops estimateCpuPeakFlops(int threads);

} // namespace shardscope::kernels
