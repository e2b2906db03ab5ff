// The accelerators this machine has, matched to GPU presets. Works in every build: without CUDA
// it says so instead of listing devices.
#pragma once

#include "core/cluster_spec.h"

#include <string>
#include <vector>

namespace shardscope {

struct DeviceInfo {
    int index = 0;
    std::string name;
    double memoryBytes = 0;
    int sms = 0;
    std::string computeCapability;
    const GpuSpec* preset = nullptr; // the matching preset, or nullptr
};

struct DeviceReport {
    bool builtWithCuda = false;
    std::vector<DeviceInfo> devices;
    std::string reason;   // why the list is empty
    std::string versions; // "CUDA runtime 13.0, driver ..., cuBLASLt ..., NCCL 2.x"
};

DeviceReport queryDevices();

} // namespace shardscope
