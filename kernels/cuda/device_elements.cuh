// What every CUDA kernel file shares: loads and stores of fp32 or bf16 elements (arithmetic in
// fp32, one rounding to nearest even on a bf16 store), grid-stride loops, launch checks and the
// dispatch from a typed pointer to its element type.
#pragma once

#include "ops.h"

#include <algorithm>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace shardscope::cuda::detail {

using bf16 = __nv_bfloat16;

__device__ inline float load(const float* p, std::size_t i) {
    return p[i];
}
__device__ inline float load(const bf16* p, std::size_t i) {
    return __bfloat162float(p[i]);
}
__device__ inline void store(float* p, std::size_t i, float v) {
    p[i] = v;
}
__device__ inline void store(bf16* p, std::size_t i, float v) {
    p[i] = __float2bfloat16_rn(v);
}

constexpr int kThreads = 256;
inline unsigned blocksFor(std::size_t n) {
    return unsigned(std::clamp<std::size_t>((n + kThreads - 1) / kThreads, 1, 65535));
}
inline cudaStream_t streamOf(void* s) {
    return static_cast<cudaStream_t>(s);
}

inline void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
        throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
inline void checkLaunch(const char* kernel) {
    check(cudaGetLastError(), (std::string("CUDA kernel ") + kernel).c_str());
}

// Every thread's value in a block of Threads (a power of two) combined by `op`, by a tree in
// shared memory: a fixed order for a fixed block size, so the same inputs give the same bits.
// Every thread of the block calls it and gets the result.
template <int Threads, typename T, typename Op> __device__ T blockReduce(T value, Op op) {
    __shared__ T partial[Threads];
    partial[threadIdx.x] = value;
    __syncthreads();
    for (int stride = Threads / 2; stride > 0; stride /= 2) {
        if (int(threadIdx.x) < stride)
            partial[threadIdx.x] = op(partial[threadIdx.x], partial[threadIdx.x + stride]);
        __syncthreads();
    }
    const T result = partial[0];
    __syncthreads(); // before a next call writes partial again
    return result;
}
template <int Threads, typename T> __device__ T blockSum(T value) {
    return blockReduce<Threads>(value, [](T a, T b) { return a + b; });
}
template <int Threads> __device__ float blockMax(float value) {
    return blockReduce<Threads>(value, [](float a, float b) { return fmaxf(a, b); });
}

// Device memory from CUDA's stream-ordered pool for one operator's temporaries (rounded GEMM
// operands, row statistics), freed in stream order: it lives exactly as long as the work that
// reads it.
class StreamBuffer {
public:
    StreamBuffer(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
        if (bytes > 0)
            check(cudaMallocAsync(&data_, bytes, stream), "cudaMallocAsync");
    }
    ~StreamBuffer() {
        if (data_)
            cudaFreeAsync(data_, stream_);
    }
    StreamBuffer(const StreamBuffer&) = delete;
    StreamBuffer& operator=(const StreamBuffer&) = delete;
    void* data() const { return data_; }
    template <typename T> T* as() const { return static_cast<T*>(data_); }

private:
    void* data_ = nullptr;
    cudaStream_t stream_;
};

// Calls f with the elements of p as what they are: float* or bf16*.
template <typename F> void withElements(kernels::Ptr p, F f) {
    if (p.type == kernels::DType::F32)
        f(static_cast<float*>(p.data));
    else
        f(static_cast<bf16*>(p.data));
}
template <typename F> void withElements(kernels::ConstPtr p, F f) {
    if (p.type == kernels::DType::F32)
        f(static_cast<const float*>(p.data));
    else
        f(static_cast<const bf16*>(p.data));
}

} // namespace shardscope::cuda::detail

#define SHARDSCOPE_GRID_STRIDE(i, n)                                                               \
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < (n);              \
         i += std::size_t(gridDim.x) * blockDim.x)
