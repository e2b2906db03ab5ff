// What the planner predicts for a training run on the hardware the engine runs on. The start
// event carries it, so the monitor and `shardscope-cli report` can put every measured figure
// beside its prediction without guessing what the engine was running on.
#pragma once

#include "core/cluster_spec.h"
#include "run_config.h"

#include <nlohmann/json_fwd.hpp>

namespace shardscope {

// The CPU host as the planner's cluster: each rank a "GPU" with its share of the cores' peak
// FLOP/s and of the host's memory and copy bandwidth, ranksPerHost of them per node. Links are
// MPI's shared memory inside a host and an assumed 10 Gb/s Ethernet across hosts; every field
// that is assumed rather than measured says so in the GPU's sources.
ClusterSpec clusterOfCpuHosts(double peakFlopsPerRank, int ranksPerHost, int worldSize,
                              double hostMemoryBytes, double copyBandwidthPerRank);

// Ranks on this host as the launcher reports them (Open MPI, MPICH, Slurm), 1 without one.
int ranksOnThisHost();
// Bytes of physical memory on this host (0 when the system does not say).
double hostMemoryBytes();
// Memory the host can give without swapping now (/proc/meminfo's MemAvailable), in bytes; the
// physical memory where the kernel does not say.
double hostAvailableBytes();
// Bytes/s one thread copies between two 64 MiB buffers, best of 3 (each byte read and written
// counts once, as STREAM's copy does).
double measureCopyBandwidth();

// {cluster, step_time, tokens_per_s, mfu, hfu, bubble_fraction, compute_time, optimizer_time,
//  communication {dp, tp, pp, cp}, exposed_communication {dp, tp, pp, cp}, memory {...}, stage,
//  source}: seconds, bytes and fractions from engine/plan's estimate for the run's model, layout
// and training settings on `cluster`, memory for the pipeline stage `stage`.
nlohmann::json predictionJson(const RunConfig& config, const ClusterSpec& cluster, int stage);

} // namespace shardscope
