#include "device_elements.cuh"
#include "elementwise.h"

#include <cmath>

namespace shardscope::cuda {

namespace {

using namespace detail;
using kernels::DType;

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

// GELU's tanh gate as a sigmoid, written as the CPU writes it (kernels/cpu/cpu_ops.cpp, geluGate):
// s = 0.5 (1 + tanh u) = sigmoid(2u) and s (1 - s) = e / (1 + e)^2 with e = exp(-2|u|), which
// never cancels where the tanh form does (x far from 0).
struct GeluGate {
    float s, sOneMinusS;
};
__device__ GeluGate geluGate(float x) {
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float e = expf(-2.0f * fabsf(u));
    const float a = 1.0f / (1.0f + e);
    return {u >= 0.0f ? a : e * a, e * a * a};
}

template <typename Out, typename In>
__global__ void geluForwardKernel(Out* out, const In* inp, std::size_t n) {
    SHARDSCOPE_GRID_STRIDE(i, n) {
        const float x = load(inp, i);
        store(out, i, x * geluGate(x).s);
    }
}

template <typename Out, typename In, typename D>
__global__ void geluBackwardKernel(Out* dinp, const In* inp, const D* dout, std::size_t n) {
    SHARDSCOPE_GRID_STRIDE(i, n) {
        const float x = load(inp, i);
        const GeluGate g = geluGate(x);
        const float slope = 2.0f * g.sOneMinusS * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
        store(dinp, i, (g.s + x * slope) * load(dout, i));
    }
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
        check(cudaMemcpyAsync(dst.data, src.data, n * kernels::sizeOf(dst.type),
                              cudaMemcpyDeviceToDevice, streamOf(stream)),
              "cudaMemcpyAsync");
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
    check(cudaMemsetAsync(x.data, 0, n * kernels::sizeOf(x.type), streamOf(stream)),
          "cudaMemsetAsync");
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
    check(cudaMallocAsync(&blockSums, blocks * sizeof(double), streamOf(stream)),
          "cudaMallocAsync");
    withElements(x, [&](const auto* values) {
        squaresPerBlockKernel<<<blocks, kThreads, 0, streamOf(stream)>>>(values, n, blockSums);
    });
    checkLaunch("squaresPerBlock");
    addBlockSumsKernel<<<1, kSumThreads, 0, streamOf(stream)>>>(blockSums, blocks, sum);
    checkLaunch("addBlockSums");
    check(cudaFreeAsync(blockSums, streamOf(stream)), "cudaFreeAsync");
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
