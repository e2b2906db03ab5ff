// What the CUDA runtime, cuBLAS, cuBLASLt and NCCL report about this machine. Plain data, no
// CUDA types, so callers compile without the CUDA headers.
#pragma once

#include <string>
#include <vector>

namespace shardscope::cuda {

struct Device {
    int index = 0;
    std::string name;
    double memoryBytes = 0;
    int sms = 0;
    int ccMajor = 0;
    int ccMinor = 0;
};

struct DeviceQuery {
    std::vector<Device> devices;
    std::string error; // why no device could be listed (no driver, no GPU), empty otherwise
    int runtimeVersion = 0;
    int driverVersion = 0;
    int cublasVersion = 0;
    std::size_t cublasLtVersion = 0;
    int ncclVersion = 0;
};

DeviceQuery queryDevices();

} // namespace shardscope::cuda
