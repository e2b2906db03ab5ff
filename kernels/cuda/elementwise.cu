#include "elementwise.h"

#include <algorithm>
#include <cmath>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdexcept>
#include <string>

namespace shardscope::cuda {

namespace {

using kernels::DType;
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

// Grid-stride loops: any n with a bounded grid.
constexpr int kThreads = 256;
constexpr std::size_t kMaxBlocks = 65535;
unsigned blocksFor(std::size_t n) {
    return unsigned(std::clamp<std::size_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks));
}
#define SHARDSCOPE_GRID_STRIDE(i, n)                                                               \
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < (n);              \
         i += std::size_t(gridDim.x) * blockDim.x)

cudaStream_t streamOf(void* s) {
    return static_cast<cudaStream_t>(s);
}

void checkLaunch(const char* kernel) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        throw std::runtime_error(std::string("CUDA kernel ") + kernel + ": " +
                                 cudaGetErrorString(e));
}

// Calls f with the elements of p as what they are: float* or bf16*.
template <typename F> void withElements(kernels::Ptr p, F f) {
    if (p.type == DType::F32)
        f(static_cast<float*>(p.data));
    else
        f(static_cast<bf16*>(p.data));
}
template <typename F> void withElements(kernels::ConstPtr p, F f) {
    if (p.type == DType::F32)
        f(static_cast<const float*>(p.data));
    else
        f(static_cast<const bf16*>(p.data));
}

template <typename Out, typename In>
__global__ void convertKernel(Out* dst, const In* src, std::size_t n) {
    SHARDSCOPE_GRID_STRIDE(i, n)
    store(dst, i, load(src, i));
}

template <typename Out, typename A, typename B>
__global__ void addKernel(Out* out, const A* a, const B* b, std::size_t n) {
    SHARDSCOPE_GRID_STRIDE(i, n)
    store(out, i, load(a, i) + load(b, i));
}

template <typename X, typename Y>
__global__ void addInPlaceKernel(X* x, const Y* y, std::size_t n) {
    SHARDSCOPE_GRID_STRIDE(i, n)
    store(x, i, load(x, i) + load(y, i));
}

constexpr float kGeluScale = 0.7978845608028654f; // sqrt(2 / pi)

template <typename Out, typename In>
__global__ void geluForwardKernel(Out* out, const In* inp, std::size_t n) {
    SHARDSCOPE_GRID_STRIDE(i, n) {
        const float x = load(inp, i);
        store(out, i, 0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x))));
    }
}

template <typename Out, typename In, typename D>
__global__ void geluBackwardKernel(Out* dinp, const In* inp, const D* dout, std::size_t n) {
    SHARDSCOPE_GRID_STRIDE(i, n) {
        const float x = load(inp, i);
        const float th = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
        const float sech2 = 1.0f - th * th;
        const float grad =
            0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
        store(dinp, i, grad * load(dout, i));
    }
}

// A block's doubles summed by a tree in shared memory: a fixed order for a fixed block size.
template <int Threads> __device__ double blockSum(double value) {
    __shared__ double partial[Threads];
    partial[threadIdx.x] = value;
    __syncthreads();
    for (int stride = Threads / 2; stride > 0; stride /= 2) {
        if (int(threadIdx.x) < stride)
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    return partial[0];
}

template <typename X>
__global__ void squaresPerBlockKernel(const X* x, std::size_t n, double* blockSums) {
    double s = 0.0;
    SHARDSCOPE_GRID_STRIDE(i, n) {
        const double v = load(x, i);
        s += v * v;
    }
    const double total = blockSum<kThreads>(s);
    if (threadIdx.x == 0)
        blockSums[blockIdx.x] = total;
}

constexpr int kSumThreads = 1024;
__global__ void addBlockSumsKernel(const double* blockSums, unsigned blocks, double* sum) {
    double s = 0.0;
    for (unsigned b = threadIdx.x; b < blocks; b += kSumThreads)
        s += blockSums[b];
    const double total = blockSum<kSumThreads>(s);
    if (threadIdx.x == 0)
        sum[0] += total;
}

template <typename Grad, typename Working>
__global__ void adamwKernel(float* param, const Grad* grad, float* m, float* v, std::size_t n,
                            AdamStep a, float c1, float c2, Working* working) {
    SHARDSCOPE_GRID_STRIDE(i, n) {
        const float g = load(grad, i) * a.gradScale;
        m[i] = a.beta1 * m[i] + (1.0f - a.beta1) * g;
        v[i] = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
        const float mhat = m[i] / c1, vhat = v[i] / c2;
        param[i] -= a.lr * (mhat / (sqrtf(vhat) + a.eps) + a.weightDecay * param[i]);
        if (working)
            store(working, i, param[i]);
    }
}

} // namespace

void convertCopy(kernels::Ptr dst, kernels::ConstPtr src, std::size_t n, void* stream) {
    if (n == 0)
        return;
    if (dst.type == src.type) {
        const cudaError_t e = cudaMemcpyAsync(dst.data, src.data, n * kernels::sizeOf(dst.type),
                                              cudaMemcpyDeviceToDevice, streamOf(stream));
        if (e != cudaSuccess)
            throw std::runtime_error(std::string("cudaMemcpyAsync: ") + cudaGetErrorString(e));
        return;
    }
    withElements(dst, [&](auto* d) {
        withElements(src, [&](const auto* s) {
            convertKernel<<<blocksFor(n), kThreads, 0, streamOf(stream)>>>(d, s, n);
        });
    });
    checkLaunch("convert");
}

void zeroFill(kernels::Ptr x, std::size_t n, void* stream) {
    if (n == 0)
        return;
    // All-zero bits are +0.0 in fp32 and in bf16.
    const cudaError_t e = cudaMemsetAsync(x.data, 0, n * kernels::sizeOf(x.type), streamOf(stream));
    if (e != cudaSuccess)
        throw std::runtime_error(std::string("cudaMemsetAsync: ") + cudaGetErrorString(e));
}

void add(kernels::Ptr out, kernels::ConstPtr a, kernels::ConstPtr b, std::size_t n, void* stream) {
    if (n == 0)
        return;
    withElements(out, [&](auto* o) {
        withElements(a, [&](const auto* x) {
            withElements(b, [&](const auto* y) {
                addKernel<<<blocksFor(n), kThreads, 0, streamOf(stream)>>>(o, x, y, n);
            });
        });
    });
    checkLaunch("add");
}

void addInPlace(kernels::Ptr x, kernels::ConstPtr y, std::size_t n, void* stream) {
    if (n == 0)
        return;
    withElements(x, [&](auto* to) {
        withElements(y, [&](const auto* from) {
            addInPlaceKernel<<<blocksFor(n), kThreads, 0, streamOf(stream)>>>(to, from, n);
        });
    });
    checkLaunch("addInPlace");
}

void geluForward(kernels::Ptr out, kernels::ConstPtr inp, std::size_t n, void* stream) {
    if (n == 0)
        return;
    withElements(out, [&](auto* o) {
        withElements(inp, [&](const auto* x) {
            geluForwardKernel<<<blocksFor(n), kThreads, 0, streamOf(stream)>>>(o, x, n);
        });
    });
    checkLaunch("geluForward");
}

void geluBackward(kernels::Ptr dinp, kernels::ConstPtr inp, kernels::ConstPtr dout, std::size_t n,
                  void* stream) {
    if (n == 0)
        return;
    withElements(dinp, [&](auto* d) {
        withElements(inp, [&](const auto* x) {
            withElements(dout, [&](const auto* g) {
                geluBackwardKernel<<<blocksFor(n), kThreads, 0, streamOf(stream)>>>(d, x, g, n);
            });
        });
    });
    checkLaunch("geluBackward");
}

void sumOfSquaresAccumulate(kernels::ConstPtr x, std::size_t n, double* sum, void* stream) {
    if (n == 0)
        return;
    // The grid depends on n only, so the order of the additions does too.
    const unsigned blocks = std::min(blocksFor(n), 1024u);
    double* blockSums = nullptr;
    cudaError_t e = cudaMallocAsync(&blockSums, blocks * sizeof(double), streamOf(stream));
    if (e != cudaSuccess)
        throw std::runtime_error(std::string("cudaMallocAsync: ") + cudaGetErrorString(e));
    withElements(x, [&](const auto* values) {
        squaresPerBlockKernel<<<blocks, kThreads, 0, streamOf(stream)>>>(values, n, blockSums);
    });
    checkLaunch("squaresPerBlock");
    addBlockSumsKernel<<<1, kSumThreads, 0, streamOf(stream)>>>(blockSums, blocks, sum);
    checkLaunch("addBlockSums");
    e = cudaFreeAsync(blockSums, streamOf(stream));
    if (e != cudaSuccess)
        throw std::runtime_error(std::string("cudaFreeAsync: ") + cudaGetErrorString(e));
}

void adamwUpdate(float* param, kernels::ConstPtr grad, float* m, float* v, std::size_t n,
                 const AdamStep& step, kernels::Ptr working, void* stream) {
    if (n == 0)
        return;
    // The bias corrections as the CPU backend computes them, so both round alike.
    const float c1 = 1.0f - std::pow(step.beta1, static_cast<float>(step.t));
    const float c2 = 1.0f - std::pow(step.beta2, static_cast<float>(step.t));
    withElements(grad, [&](const auto* g) {
        if (!working) {
            adamwKernel<<<blocksFor(n), kThreads, 0, streamOf(stream)>>>(
                param, g, m, v, n, step, c1, c2, static_cast<float*>(nullptr));
            return;
        }
        withElements(working, [&](auto* w) {
            adamwKernel<<<blocksFor(n), kThreads, 0, streamOf(stream)>>>(param, g, m, v, n, step,
                                                                         c1, c2, w);
        });
    });
    checkLaunch("adamw");
}

} // namespace shardscope::cuda
