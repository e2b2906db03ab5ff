#include "prediction.h"

#include "core/json_io.h"
#include "plan/estimate.h"
#include "process_mesh.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>
#include <vector>

namespace shardscope {

using nlohmann::json;

namespace {

// Shared-memory transport of MPI inside a host copies each message in and out of a buffer.
constexpr double kSharedMemoryCopies = 2.0;
constexpr double kSharedMemoryLatency = 1e-6;
constexpr double kEthernetBandwidth = 10e9 / 8; // 10 Gb/s, the common server NIC
constexpr double kEthernetLatency = 50e-6;

json memoryJson(const MemoryBreakdown& m) {
    return {{"parameters", m.parameters},   {"gradients", m.gradients}, {"optimizer", m.optimizer},
            {"activations", m.activations}, {"temporary", m.temporary}, {"overhead", m.overhead}};
}

} // namespace

ClusterSpec clusterOfCpuHosts(double peakFlopsPerRank, int ranksPerHost, int worldSize,
                              double hostMemoryBytes, double copyBandwidthPerRank) {
    ranksPerHost = std::clamp(ranksPerHost, 1, std::max(1, worldSize));
    ClusterSpec c;
    c.gpu.id = "cpu";
    c.gpu.name = "CPU rank";
    c.gpu.vendor = "host";
    c.gpu.memoryBytes = hostMemoryBytes / ranksPerHost;
    c.gpu.hbmBandwidth = copyBandwidthPerRank;
    c.gpu.peakFlops = {{Precision::Fp32, peakFlopsPerRank}};
    c.gpu.sources = {{"peak", "the engine's peak_flops per rank (cores x clock x FLOP/cycle, or "
                              "--peak-tflops)"},
                     {"memory", "the host's physical memory / ranks on the host"},
                     {"hbm_bandwidth", "measured at start: one thread copying 64 MiB, best of 3"},
                     {"intra_bandwidth",
                      "assumed: MPI shared memory copies each byte twice, so half the "
                      "measured copy bandwidth"},
                     {"inter_bandwidth", "assumed: 10 Gb/s Ethernet between hosts"}};
    c.gpusPerNode = ranksPerHost;
    c.nodes = std::max(1, (worldSize + ranksPerHost - 1) / ranksPerHost);
    c.intraBandwidth = copyBandwidthPerRank / kSharedMemoryCopies;
    c.intraLatency = kSharedMemoryLatency;
    c.interBandwidth = kEthernetBandwidth;
    c.interLatency = kEthernetLatency;
    return c;
}

int ranksOnThisHost() {
    for (const char* name :
         {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
        if (const char* v = std::getenv(name); v && std::atoi(v) > 0)
            return std::atoi(v);
    return 1;
}

double hostMemoryBytes() {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long size = ::sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? double(pages) * double(size) : 0.0;
}

double hostAvailableBytes() {
    std::ifstream info("/proc/meminfo");
    std::string key;
    double kib = 0;
    std::string unit;
    while (info >> key >> kib >> unit)
        if (key == "MemAvailable:")
            return kib * 1024;
    return hostMemoryBytes();
}

double measureCopyBandwidth() {
    constexpr std::size_t kBytes = 64u << 20;
    std::vector<char> from(kBytes, 1), to(kBytes, 0);
    double best = 0;
    for (int i = 0; i < 3; ++i) {
        const auto start = std::chrono::steady_clock::now();
        std::memcpy(to.data(), from.data(), kBytes);
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (s > 0)
            best = std::max(best, double(kBytes) / s);
        from[std::size_t(i)] = to[kBytes - 1 - std::size_t(i)]; // keep the copies observable
    }
    return best;
}

json predictionJson(const RunConfig& config, const ClusterSpec& cluster, int stage) {
    const PlanInputs in{config.model, cluster, config.parallel, config.train, Assumptions{}};
    const Estimate e = evaluate(in);
    json comm = json::object(), exposed = json::object();
    for (Axis a : kMeshAxes) {          // the axes the engine has
        std::string axis = toString(a); // "DP": telemetry spells axes "dp"
        for (char& ch : axis)
            ch = char(std::tolower(static_cast<unsigned char>(ch)));
        comm[axis] = e.axis(a).seconds;
        exposed[axis] = e.axis(a).exposed;
    }
    return {{"cluster", cluster},
            {"step_time", e.stepTime},
            {"tokens_per_s", e.tokensPerSecond},
            {"mfu", e.mfu},
            {"hfu", e.hfu},
            {"bubble_fraction", e.bubbleFraction},
            {"compute_time", e.computeTime},
            {"optimizer_time", e.optimizerTime},
            {"communication", comm},
            {"exposed_communication", exposed},
            {"memory", memoryJson(memoryForStage(in, stage))},
            {"stage", stage},
            {"source", "shardscope planner (engine/plan estimate) for the run's model, layout and "
                       "training settings on the cluster given here"}};
}

} // namespace shardscope
