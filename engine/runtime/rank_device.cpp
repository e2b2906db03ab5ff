#include "rank_device.h"

#include "core/error.h"
#include "cuda_backend.h"
#include "kernels/cpu/cpu_ops.h"

#include <cstdlib>
#include <sstream>

namespace shardscope {

bool engineRunsOn(const std::string& kind) {
#ifdef SHARDSCOPE_HAVE_CUDA
    return kind == "cpu" || kind == "cuda";
#else
    return kind == "cpu";
#endif
}

int localRankOnThisHost() {
    for (const char* name :
         {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
        if (const char* v = std::getenv(name); v && std::atoi(v) >= 0 && *v)
            return std::atoi(v);
    return 0;
}

RankDevice chooseDevice(const std::string& kind, int localRank, int localRanks, int threads,
                        Precision compute, const DeviceReport& gpus) {
    RankDevice d;
    d.kind = kind;
    d.localRank = localRank;
    d.localRanks = localRanks;
    if (kind == "cpu") {
        const kernels::PeakFlops peak = kernels::estimateCpuPeakFlops(threads);
        d.name = "CPU, " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
        d.peakFlops = peak.flops;
        d.peakFormula = peak.formula;
        return d;
    }
    if (kind != "cuda")
        throw InputError("engine.device is \"" + kind + "\": use \"cpu\" or \"cuda\"");
    if (gpus.devices.empty())
        throw InputError("engine.device cuda: no GPU on this host (" + gpus.reason +
                         "); run with --device cpu");
    const DeviceInfo& gpu = gpus.devices[std::size_t(localRank) % gpus.devices.size()];
    d.index = gpu.index;
    d.name = gpu.name;
    if (!gpu.preset) {
        d.peakFormula = "engine.device cuda: " + gpu.name +
                        " matches no GPU preset, so its peak FLOP/s is unknown: give "
                        "--peak-tflops (engine.peak_tflops) from its datasheet";
        return d;
    }
    d.peakFlops = gpu.preset->peak(compute);
    std::ostringstream formula;
    formula << gpu.preset->name << " dense " << toString(compute) << " peak, " << d.peakFlops / 1e12
            << " TFLOP/s";
    if (const auto source = gpu.preset->sources.find("peak_tflops");
        source != gpu.preset->sources.end())
        formula << " (" << source->second << ")";
    d.peakFormula = formula.str();
    return d;
}

std::unique_ptr<kernels::Ops> makeBackend(const std::string& kind, int threads, Precision compute) {
    if (kind == "cpu")
        return kernels::makeCpuOps(threads);
    const RankDevice d = chooseDevice(kind, localRankOnThisHost(), 1, 1, compute, queryDevices());
    return loadCudaBackend(d.index);
}

} // namespace shardscope
