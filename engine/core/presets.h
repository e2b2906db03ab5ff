// Built-in presets (compiled in from resources/presets) and lookup by name.
#pragma once

#include "cluster_spec.h"
#include "model_spec.h"

#include <string>
#include <vector>

namespace shardscope {

const std::vector<ModelSpec>& modelPresets();
const std::vector<GpuSpec>& gpuPresets();

// Case-insensitive lookup by name or id ("llama3-70b", "Llama 3 70B", "h100-sxm"); throws
// InputError listing the known names when there is no match.
const ModelSpec& findModelPreset(const std::string& name);
const GpuSpec& findGpuPreset(const std::string& name);

// The GPU preset that matches a device name reported by the driver ("NVIDIA H100 80GB HBM3"),
// or nullptr.
const GpuSpec* matchGpuPreset(const std::string& deviceName);

// A cluster of `nodes` x `gpusPerNode` of this GPU with its NVLink inside a node and the given
// per-GPU network bandwidth across nodes; 0 takes the GPU's (its reference system's NIC share,
// GpuSpec::networkBandwidth), or 50 GB/s (400 Gb/s) for a GPU that gives none.
ClusterSpec makeCluster(const GpuSpec& gpu, int gpusPerNode, int nodes, double interBandwidth = 0);
// The network a GPU brings when the user does not set one.
double defaultNetworkBandwidth(const GpuSpec& gpu);
// The cluster with another GPU: NVLink follows the GPU, and so does the network unless it was set
// to something other than the old GPU's own.
ClusterSpec withGpu(const ClusterSpec& cluster, const GpuSpec& gpu);

} // namespace shardscope
