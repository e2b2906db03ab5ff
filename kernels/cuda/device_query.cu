#include "device_query.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

namespace shardscope::cuda {

DeviceQuery queryDevices() {
    DeviceQuery q;
    cudaRuntimeGetVersion(&q.runtimeVersion);
    cudaDriverGetVersion(&q.driverVersion);
    q.cublasLtVersion = cublasLtGetVersion();
    ncclGetVersion(&q.ncclVersion);

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
    // cuBLAS needs a context: only ask when a device exists.
    if (!q.devices.empty()) {
        cublasHandle_t handle = nullptr;
        if (cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS) {
            cublasGetVersion(handle, &q.cublasVersion);
            cublasDestroy(handle);
        }
    }
    return q;
}

} // namespace shardscope::cuda
