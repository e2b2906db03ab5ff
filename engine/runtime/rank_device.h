// The device each rank of a run computes on (engine.device, --device): the backend, and on a
// host with several GPUs the GPU of the rank's local rank (local rank modulo the host's GPUs, as
// torchrun and Megatron-LM place ranks), with the peak FLOP/s its MFU is measured against.
#pragma once

#include "core/parallel_config.h"
#include "devices.h"
#include "kernels/ops.h"

#include <memory>
#include <string>
#include <vector>

namespace shardscope {

// The device kinds engine.device takes.
inline const std::vector<std::string> kDeviceKinds = {"cpu", "cuda"};

// Whether this engine has operators for the kind: cuda only where it was built with CUDA.
bool engineRunsOn(const std::string& kind);

struct RankDevice {
    std::string kind = "cpu"; // "cpu" or "cuda"
    int index = 0;            // the GPU's index on its host (0 on CPUs)
    int localRank = 0, localRanks = 1;
    std::string name;        // "CPU, 2 threads" or the GPU's name
    double peakFlops = 0;    // dense FLOP/s of the run's compute precision
    std::string peakFormula; // how the peak was found, with its source
};

// This process's rank among the ranks of its host, as the launcher reports it (Open MPI,
// MPICH, Slurm, torchrun); 0 without one.
int localRankOnThisHost();

// The device of local rank `localRank` of `localRanks`. On CPUs the rank's `threads` cores and
// their estimated peak; on GPUs the one at localRank modulo the GPUs `gpus` lists, its peak from
// its preset's datasheet for `compute` (0, with the fix in peakFormula, for a GPU no preset
// matches). Throws InputError naming the fix when the host has no GPU.
RankDevice chooseDevice(const std::string& kind, int localRank, int localRanks, int threads,
                        Precision compute, const DeviceReport& gpus);

// The operators this process computes with: the CPU backend on `threads` cores, or the CUDA
// backend (a plugin, cuda_backend.h) on the GPU chooseDevice gives this process's local rank.
// Throws InputError naming the fix when there is no usable GPU or backend.
std::unique_ptr<kernels::Ops> makeBackend(const std::string& kind, int threads, Precision compute);

} // namespace shardscope
