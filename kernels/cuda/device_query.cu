#include "device_query.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

namespace shardscope::cuda {

namespace {

// cuBLAS, cuBLASLt and NCCL are asked for their versions through dlopen, so binaries that can
// list devices still start on hosts without NVIDIA's libraries (the CPU engine's hosts, a
// laptop); the CUDA runtime is linked statically and finds the driver the same way.
template <typename Function> Function find(const char* library, const char* symbol) {
    void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    return handle ? reinterpret_cast<Function>(dlsym(handle, symbol)) : nullptr;
}

} // namespace

DeviceQuery queryDevices() {
    DeviceQuery q;
    cudaRuntimeGetVersion(&q.runtimeVersion);
    cudaDriverGetVersion(&q.driverVersion);
    if (auto lt = find<std::size_t (*)()>("libcublasLt.so.13", "cublasLtGetVersion"))
        q.cublasLtVersion = lt();
    if (auto nccl = find<int (*)(int*)>("libnccl.so.2", "ncclGetVersion"))
        nccl(&q.ncclVersion);
    // libraryPropertyType: MAJOR_VERSION 0, MINOR_VERSION 1, PATCH_LEVEL 2.
    if (auto property = find<int (*)(int, int*)>("libcublas.so.13", "cublasGetProperty")) {
        int major = 0, minor = 0, patch = 0;
        if (property(0, &major) == 0 && property(1, &minor) == 0 && property(2, &patch) == 0)
            q.cublasVersion = major * 10000 + minor * 100 + patch;
    }

    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        q.error = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
        return q;
    }
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, i) != cudaSuccess)
            continue;
        q.devices.push_back({i, prop.name, double(prop.totalGlobalMem), prop.multiProcessorCount,
                             prop.major, prop.minor});
    }
    return q;
}

} // namespace shardscope::cuda
