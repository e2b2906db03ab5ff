#include "column_sums.cuh"
#include "device_elements.cuh"
#include "llama_ops.h"

namespace shardscope::cuda {

namespace {

using namespace detail;

template <typename Out, typename In, typename W>
__global__ void rmsNormForwardKernel(Out* out, float* rstd, const In* inp, const W* weight, int C,
                                     float eps) {
    const std::size_t row = blockIdx.x, base = row * std::size_t(C);
    float squares = 0.0f;
    for (int i = threadIdx.x; i < C; i += kThreads) {
        const float x = load(inp, base + i);
        squares += x * x;
    }
    const float s = 1.0f / sqrtf(blockSum<kThreads>(squares) / float(C) + eps);
    for (int i = threadIdx.x; i < C; i += kThreads)
        store(out, base + i, load(inp, base + i) * s * load(weight, i));
    if (threadIdx.x == 0)
        rstd[row] = s;
}

// dinp += (weight * dout - xhat * mean(weight * dout * xhat)) * rstd, xhat = inp * rstd.
template <typename G, typename In, typename W>
__global__ void rmsNormInputGradientKernel(G* dinp, const In* dout, const In* inp, const W* weight,
                                           const float* rstd, int C) {
    const std::size_t row = blockIdx.x, base = row * std::size_t(C);
    const float s = rstd[row];
    float dot = 0.0f;
    for (int i = threadIdx.x; i < C; i += kThreads)
        dot += load(weight, i) * load(dout, base + i) * load(inp, base + i) * s;
    const float mean = blockSum<kThreads>(dot) / float(C);
    for (int i = threadIdx.x; i < C; i += kThreads) {
        const float xhat = load(inp, base + i) * s;
        const float d = load(weight, i) * load(dout, base + i);
        store(dinp, base + i, load(dinp, base + i) + (d - xhat * mean) * s);
    }
}

// dweight += sum over rows of xhat * dout (column_sums.cuh).
template <typename In> struct RmsNormWeightGradientValues {
    static constexpr int kOutputs = 1;
    const In *dout, *inp;
    const float* rstd;
    int C;
    __device__ void operator()(int n, int c, float (&out)[1]) const {
        const std::size_t at = std::size_t(n) * std::size_t(C) + std::size_t(c);
        out[0] = load(inp, at) * rstd[n] * load(dout, at);
    }
};
template <typename WG> struct AddToRmsNormGradient {
    static constexpr int kOutputs = 1;
    WG* dweight;
    __device__ void operator()(int c, const float* sums) const {
        store(dweight, c, load(dweight, c) + sums[0]);
    }
};

// One thread per (row, head, pair): element i of the head's first half and i + headDim/2.
template <typename X>
__global__ void rotaryKernel(X* x, const float* cos, const float* sin, int T, int heads,
                             int headDim, int rowStride, float direction, std::size_t pairs) {
    const int half = headDim / 2;
    SHARDSCOPE_GRID_STRIDE(k, pairs) {
        const std::size_t i = k % std::size_t(half), head = k / std::size_t(half) % heads,
                          row = k / (std::size_t(half) * heads);
        const std::size_t table = (row % std::size_t(T)) * std::size_t(half) + i;
        const std::size_t at = row * std::size_t(rowStride) + head * std::size_t(headDim) + i;
        const float a = load(x, at), b = load(x, at + half);
        const float c = cos[table], s = direction * sin[table];
        store(x, at, a * c - b * s);
        store(x, at + half, b * c + a * s);
    }
}

// sigmoid(a) without overflow on either side.
__device__ inline float sigmoid(float a) {
    const float e = expf(-fabsf(a));
    return a >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

template <typename Out, typename In>
__global__ void swigluForwardKernel(Out* out, const In* gateUp, int F, std::size_t n) {
    SHARDSCOPE_GRID_STRIDE(k, n) {
        const std::size_t row = k / std::size_t(F), at = row * 2 * std::size_t(F) + k % F;
        const float a = load(gateUp, at);
        store(out, k, a * sigmoid(a) * load(gateUp, at + F));
    }
}

template <typename G, typename In, typename D>
__global__ void swigluBackwardKernel(G* dgateUp, const In* gateUp, const D* dout, int F,
                                     std::size_t n) {
    SHARDSCOPE_GRID_STRIDE(k, n) {
        const std::size_t row = k / std::size_t(F), at = row * 2 * std::size_t(F) + k % F;
        const float a = load(gateUp, at), up = load(gateUp, at + F), d = load(dout, k);
        const float s = sigmoid(a);
        store(dgateUp, at, d * up * s * (1.0f + a * (1.0f - s)));
        store(dgateUp, at + F, d * a * s);
    }
}

// One thread per expanded element: query elements keep their place, key and value head h read
// head h / group.
template <typename Out, typename In>
__global__ void expandKvHeadsKernel(Out* out, const In* qkv, int H, int KV, int d, std::size_t n) {
    const std::size_t q = std::size_t(H) * d, kv = std::size_t(KV) * d, group = H / KV;
    SHARDSCOPE_GRID_STRIDE(k, n) {
        const std::size_t row = k / (3 * q), col = k % (3 * q);
        const std::size_t part = col / q, within = col % q;
        const std::size_t head = within / d, i = within % d;
        const std::size_t from = part == 0 ? within : q + (part - 1) * kv + (head / group) * d + i;
        store(out, k, load(qkv, row * (q + 2 * kv) + from));
    }
}

// One thread per compact element: a query's gradient copied, a key's or value's summed over its
// group in order.
template <typename Out, typename In>
__global__ void sumKvHeadGradientsKernel(Out* dqkv, const In* dexpanded, int H, int KV, int d,
                                         std::size_t n) {
    const std::size_t q = std::size_t(H) * d, kv = std::size_t(KV) * d, group = H / KV;
    SHARDSCOPE_GRID_STRIDE(k, n) {
        const std::size_t row = k / (q + 2 * kv), col = k % (q + 2 * kv);
        const In* in = dexpanded + row * 3 * q;
        if (col < q) {
            store(dqkv, k, load(in, col));
            continue;
        }
        const std::size_t part = (col - q) / kv, within = (col - q) % kv;
        const std::size_t head = within / d, i = within % d;
        float sum = 0.0f;
        for (std::size_t g = 0; g < group; ++g)
            sum += load(in, (1 + part) * q + (head * group + g) * d + i);
        store(dqkv, k, sum);
    }
}

void sameType(kernels::DType a, kernels::DType b, const char* what) {
    if (a != b)
        throw std::logic_error(std::string("RMSNorm: ") + what + " must share one type");
}

} // namespace

void rmsNormForward(kernels::Ptr out, float* rstd, kernels::ConstPtr inp, kernels::ConstPtr weight,
                    int N, int C, float eps, void* stream) {
    if (N <= 0 || C <= 0)
        return;
    withElements(out, [&](auto* o) {
        withElements(inp, [&](const auto* x) {
            withElements(weight, [&](const auto* w) {
                rmsNormForwardKernel<<<unsigned(N), kThreads, 0, streamOf(stream)>>>(o, rstd, x, w,
                                                                                     C, eps);
            });
        });
    });
    checkLaunch("rmsNormForward");
}

void rmsNormBackwardAccumulate(kernels::Ptr dinp, kernels::Ptr dweight, kernels::ConstPtr dout,
                               kernels::ConstPtr inp, kernels::ConstPtr weight, const float* rstd,
                               int N, int C, void* stream) {
    if (N <= 0 || C <= 0)
        return;
    sameType(dout.type, inp.type, "the input and its gradient");
    withElements(inp, [&](const auto* x) {
        using In = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
        const In* d = static_cast<const In*>(dout.data);
        withElements(dinp, [&](auto* g) {
            withElements(weight, [&](const auto* w) {
                rmsNormInputGradientKernel<<<unsigned(N), kThreads, 0, streamOf(stream)>>>(
                    g, d, x, w, rstd, C);
            });
        });
        withElements(dweight, [&](auto* dw) {
            using WG = std::remove_pointer_t<decltype(dw)>;
            sumColumns(RmsNormWeightGradientValues<In>{d, x, rstd, C}, AddToRmsNormGradient<WG>{dw},
                       N, C, streamOf(stream));
        });
    });
    checkLaunch("rmsNormBackward");
}

void rotaryEmbedding(kernels::Ptr x, const float* cos, const float* sin, int B, int T, int heads,
                     int headDim, int rowStride, bool inverse, void* stream) {
    const std::size_t pairs =
        std::size_t(B) * std::size_t(T) * std::size_t(heads) * std::size_t(headDim / 2);
    if (pairs == 0)
        return;
    withElements(x, [&](auto* v) {
        rotaryKernel<<<blocksFor(pairs), kThreads, 0, streamOf(stream)>>>(
            v, cos, sin, T, heads, headDim, rowStride, inverse ? -1.0f : 1.0f, pairs);
    });
    checkLaunch("rotaryEmbedding");
}

void swigluForward(kernels::Ptr out, kernels::ConstPtr gateUp, int N, int F, void* stream) {
    const std::size_t n = std::size_t(N) * std::size_t(F);
    if (n == 0)
        return;
    withElements(out, [&](auto* o) {
        withElements(gateUp, [&](const auto* g) {
            swigluForwardKernel<<<blocksFor(n), kThreads, 0, streamOf(stream)>>>(o, g, F, n);
        });
    });
    checkLaunch("swigluForward");
}

void swigluBackward(kernels::Ptr dgateUp, kernels::ConstPtr gateUp, kernels::ConstPtr dout, int N,
                    int F, void* stream) {
    const std::size_t n = std::size_t(N) * std::size_t(F);
    if (n == 0)
        return;
    withElements(dgateUp, [&](auto* dg) {
        withElements(gateUp, [&](const auto* g) {
            withElements(dout, [&](const auto* d) {
                swigluBackwardKernel<<<blocksFor(n), kThreads, 0, streamOf(stream)>>>(dg, g, d, F,
                                                                                      n);
            });
        });
    });
    checkLaunch("swigluBackward");
}

void expandKvHeads(kernels::Ptr expanded, kernels::ConstPtr qkv, int N, int heads, int kvHeads,
                   int headDim, void* stream) {
    const std::size_t n = std::size_t(N) * 3 * std::size_t(heads) * std::size_t(headDim);
    if (n == 0)
        return;
    withElements(expanded, [&](auto* o) {
        withElements(qkv, [&](const auto* x) {
            expandKvHeadsKernel<<<blocksFor(n), kThreads, 0, streamOf(stream)>>>(
                o, x, heads, kvHeads, headDim, n);
        });
    });
    checkLaunch("expandKvHeads");
}

void sumKvHeadGradients(kernels::Ptr dqkv, kernels::ConstPtr dexpanded, int N, int heads,
                        int kvHeads, int headDim, void* stream) {
    const std::size_t n = std::size_t(N) * std::size_t(heads + 2 * kvHeads) * std::size_t(headDim);
    if (n == 0)
        return;
    withElements(dqkv, [&](auto* o) {
        withElements(dexpanded, [&](const auto* d) {
            sumKvHeadGradientsKernel<<<blocksFor(n), kThreads, 0, streamOf(stream)>>>(
                o, d, heads, kvHeads, headDim, n);
        });
    });
    checkLaunch("sumKvHeadGradients");
}

} // namespace shardscope::cuda
