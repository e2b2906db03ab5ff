#include "column_sums.cuh"
#include "device_elements.cuh"
#include "layernorm.h"

namespace shardscope::cuda {

namespace {

using namespace detail;

constexpr float kEps = 1e-5f;

template <typename Out, typename In, typename W>
__global__ void layerNormForwardKernel(Out* out, float* mean, float* rstd, const In* inp,
                                       const W* weight, const W* bias, int C) {
    const std::size_t row = blockIdx.x, base = row * std::size_t(C);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < C; i += kThreads)
        sum += load(inp, base + i);
    const float m = blockSum<kThreads>(sum) / float(C);
    float squares = 0.0f;
    for (int i = threadIdx.x; i < C; i += kThreads) {
        const float d = load(inp, base + i) - m;
        squares += d * d;
    }
    const float s = 1.0f / sqrtf(blockSum<kThreads>(squares) / float(C) + kEps);
    for (int i = threadIdx.x; i < C; i += kThreads)
        store(out, base + i, (load(inp, base + i) - m) * s * load(weight, i) + load(bias, i));
    if (threadIdx.x == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// dinp += (weight * dout - mean(weight * dout) - xhat * mean(weight * dout * xhat)) * rstd.
template <typename G, typename In, typename W>
__global__ void layerNormInputGradientKernel(G* dinp, const In* dout, const In* inp,
                                             const W* weight, const float* mean, const float* rstd,
                                             int C) {
    const std::size_t row = blockIdx.x, base = row * std::size_t(C);
    const float m = mean[row], s = rstd[row];
    float dnorm = 0.0f, dnormXhat = 0.0f;
    for (int i = threadIdx.x; i < C; i += kThreads) {
        const float xhat = (load(inp, base + i) - m) * s;
        const float d = load(weight, i) * load(dout, base + i);
        dnorm += d;
        dnormXhat += d * xhat;
    }
    const float dnormMean = blockSum<kThreads>(dnorm) / float(C);
    const float dnormXhatMean = blockSum<kThreads>(dnormXhat) / float(C);
    for (int i = threadIdx.x; i < C; i += kThreads) {
        const float xhat = (load(inp, base + i) - m) * s;
        const float d = load(weight, i) * load(dout, base + i);
        store(dinp, base + i, load(dinp, base + i) + (d - dnormMean - xhat * dnormXhatMean) * s);
    }
}

// dweight += sum over rows of xhat * dout, dbias += sum of dout, summed down the columns
// (column_sums.cuh).
template <typename In> struct LayerNormWeightGradientValues {
    static constexpr int kOutputs = 2;
    const In *dout, *inp;
    const float *mean, *rstd;
    int C;
    __device__ void operator()(int n, int c, float (&out)[2]) const {
        const std::size_t at = std::size_t(n) * std::size_t(C) + std::size_t(c);
        const float d = load(dout, at);
        out[0] = (load(inp, at) - mean[n]) * rstd[n] * d;
        out[1] = d;
    }
};
template <typename WG> struct AddToLayerNormGradients {
    static constexpr int kOutputs = 2;
    WG *dweight, *dbias;
    __device__ void operator()(int c, const float* sums) const {
        store(dweight, c, load(dweight, c) + sums[0]);
        store(dbias, c, load(dbias, c) + sums[1]);
    }
};

void sameType(kernels::DType a, kernels::DType b, const char* what) {
    if (a != b)
        throw std::logic_error(std::string("layer norm: ") + what + " must share one type");
}

} // namespace

void layerNormForward(kernels::Ptr out, float* mean, float* rstd, kernels::ConstPtr inp,
                      kernels::ConstPtr weight, kernels::ConstPtr bias, int N, int C,
                      void* stream) {
    if (N <= 0 || C <= 0)
        return;
    sameType(weight.type, bias.type, "weight and bias");
    withElements(out, [&](auto* o) {
        withElements(inp, [&](const auto* x) {
            withElements(weight, [&](const auto* w) {
                using Weight = std::remove_cv_t<std::remove_pointer_t<decltype(w)>>;
                layerNormForwardKernel<<<unsigned(N), kThreads, 0, streamOf(stream)>>>(
                    o, mean, rstd, x, w, static_cast<const Weight*>(bias.data), C);
            });
        });
    });
    checkLaunch("layerNormForward");
}

void layerNormBackwardAccumulate(kernels::Ptr dinp, kernels::Ptr dweight, kernels::Ptr dbias,
                                 kernels::ConstPtr dout, kernels::ConstPtr inp,
                                 kernels::ConstPtr weight, const float* mean, const float* rstd,
                                 int N, int C, void* stream) {
    if (N <= 0 || C <= 0)
        return;
    sameType(dout.type, inp.type, "the input and its gradient");
    sameType(dweight.type, dbias.type, "the weight and bias gradients");
    withElements(inp, [&](const auto* x) {
        using In = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
        const In* d = static_cast<const In*>(dout.data);
        withElements(dinp, [&](auto* g) {
            withElements(weight, [&](const auto* w) {
                layerNormInputGradientKernel<<<unsigned(N), kThreads, 0, streamOf(stream)>>>(
                    g, d, x, w, mean, rstd, C);
            });
        });
        withElements(dweight, [&](auto* dw) {
            using WG = std::remove_pointer_t<decltype(dw)>;
            sumColumns(LayerNormWeightGradientValues<In>{d, x, mean, rstd, C},
                       AddToLayerNormGradients<WG>{dw, static_cast<WG*>(dbias.data)}, N, C,
                       streamOf(stream));
        });
    });
    checkLaunch("layerNormBackward");
}

} // namespace shardscope::cuda
