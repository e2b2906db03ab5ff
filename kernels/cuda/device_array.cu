#include "device_array.h"

#include <cuda_runtime.h>
#include <stdexcept>
#include <string>

namespace shardscope::cuda {

namespace {

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
        throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

} // namespace

DeviceArray::DeviceArray(std::size_t bytes) : bytes_(bytes) {
    check(cudaMalloc(&data_, bytes ? bytes : 1), "cudaMalloc");
}

DeviceArray::~DeviceArray() {
    cudaFree(data_);
}

void DeviceArray::upload(const void* host, std::size_t bytes) {
    if (bytes > bytes_)
        throw std::logic_error("DeviceArray::upload past the end");
    check(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
}

void DeviceArray::download(void* host, std::size_t bytes) const {
    if (bytes > bytes_)
        throw std::logic_error("DeviceArray::download past the end");
    check(cudaDeviceSynchronize(), "the device's work");
    check(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
}

} // namespace shardscope::cuda
