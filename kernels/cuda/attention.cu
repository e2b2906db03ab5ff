// Three kernels, each a block per row and every sum in a fixed order:
//   forward    a block per query t: scores, softmax, out = P V;
//   query pass a block per query t: P (stored or recomputed), dP = dO V^T, D = rowsum(P dP),
//              dS = P (dP - D) / sqrt(hs), dq = dS K;
//   key pass   a block per key j: P and dS of every later query again, dk = dS^T Q, dv = P^T dO.
// The recomputed P of the key pass uses the forward's expressions on the query pass's row
// statistics; __fmul_rn keeps the compiler from fusing a scale into a neighbouring add, which
// would change the bits between the passes.
#include "attention.h"
#include "device_elements.cuh"

#include <cmath>
#include <string>

namespace shardscope::cuda {

namespace {

using namespace detail;

// Where one (batch, head, position) row lives.
struct Rows {
    int T, C, NH, hs;
    float scale; // 1 / sqrt(hs)
    __device__ std::size_t bh(std::size_t row) const { return row / std::size_t(T); }
    __device__ int position(std::size_t row) const { return int(row % std::size_t(T)); }
    // Element offset of head h of position t of batch b in a [B,T,width] tensor.
    __device__ std::size_t at(std::size_t bh, int t, int width) const {
        const std::size_t b = bh / std::size_t(NH), h = bh % std::size_t(NH);
        return (b * std::size_t(T) + std::size_t(t)) * std::size_t(width) + h * std::size_t(hs);
    }
    __device__ std::size_t q(std::size_t bh, int t) const { return at(bh, t, 3 * C); }
    __device__ std::size_t k(std::size_t bh, int t) const { return at(bh, t, 3 * C) + C; }
    __device__ std::size_t v(std::size_t bh, int t) const { return at(bh, t, 3 * C) + 2 * C; }
    __device__ std::size_t o(std::size_t bh, int t) const { return at(bh, t, C); }
    __device__ std::size_t prob(std::size_t bh, int t, int j) const {
        return (bh * std::size_t(T) + std::size_t(t)) * std::size_t(T) + std::size_t(j);
    }
};

template <typename A, typename B> __device__ float dot(const A* a, const B* b, int n) {
    float acc = 0.0f;
    for (int d = 0; d < n; ++d)
        acc += load(a, d) * load(b, d);
    return acc;
}

// q from shared memory (fp32) or from qkv: the same products in the same order either way.
template <typename Q, typename K> __device__ float score(const Q* q, const K* k, const Rows& r) {
    return __fmul_rn(dot(q, k, r.hs), r.scale);
}

template <typename In> __device__ void loadToShared(float* dst, const In* src, int n) {
    for (int d = threadIdx.x; d < n; d += kThreads)
        dst[d] = load(src, d);
}

// p[0..t] = causal softmax of query row t's scores (q in shared memory); m and inv are the row's
// maximum and reciprocal sum. Ends with the block synchronised.
template <typename In>
__device__ void causalSoftmaxRow(float* p, const float* q, const In* qkv, std::size_t bh, int t,
                                 const Rows& r, float& m, float& inv) {
    float localMax = -INFINITY;
    for (int j = threadIdx.x; j <= t; j += kThreads) {
        p[j] = score(q, qkv + r.k(bh, j), r);
        localMax = fmaxf(localMax, p[j]);
    }
    m = blockMax<kThreads>(localMax);
    float localSum = 0.0f;
    for (int j = threadIdx.x; j <= t; j += kThreads) {
        p[j] = expf(p[j] - m);
        localSum += p[j];
    }
    inv = 1.0f / blockSum<kThreads>(localSum);
    for (int j = threadIdx.x; j <= t; j += kThreads)
        p[j] = __fmul_rn(p[j], inv);
    __syncthreads();
}

// Shared memory: q[hs], p[T].
template <typename In, typename P>
__global__ void attentionForwardKernel(In* out, P* probs, const In* qkv, Rows r) {
    extern __shared__ float shared[];
    float *q = shared, *p = shared + r.hs;
    const std::size_t bh = r.bh(blockIdx.x);
    const int t = r.position(blockIdx.x);
    loadToShared(q, qkv + r.q(bh, t), r.hs);
    __syncthreads();
    float m, inv;
    causalSoftmaxRow(p, q, qkv, bh, t, r, m, inv);
    if (probs)
        for (int j = threadIdx.x; j < r.T; j += kThreads)
            store(probs, r.prob(bh, t, j), j <= t ? p[j] : 0.0f);
    for (int d = threadIdx.x; d < r.hs; d += kThreads) {
        float o = 0.0f;
        for (int j = 0; j <= t; ++j)
            o += p[j] * load(qkv, r.v(bh, j) + d);
        store(out, r.o(bh, t) + d, o);
    }
}

struct RowStats {
    float *max, *inv, *dot; // per query row: softmax maximum, reciprocal sum, rowsum(P dP)
};

// Shared memory: q[hs], dO[hs], p[T], dS[T].
template <typename In, typename P>
__global__ void attentionQueryPassKernel(In* dqkv, const In* dout, const In* qkv, const P* probs,
                                         RowStats stats, Rows r) {
    extern __shared__ float shared[];
    float *q = shared, *dO = q + r.hs, *p = dO + r.hs, *dS = p + r.T;
    const std::size_t row = blockIdx.x, bh = r.bh(row);
    const int t = r.position(row);
    loadToShared(q, qkv + r.q(bh, t), r.hs);
    loadToShared(dO, dout + r.o(bh, t), r.hs);
    __syncthreads();
    if (probs) {
        for (int j = threadIdx.x; j <= t; j += kThreads)
            p[j] = load(probs, r.prob(bh, t, j));
    } else {
        float m, inv;
        causalSoftmaxRow(p, q, qkv, bh, t, r, m, inv);
        if (threadIdx.x == 0) {
            stats.max[row] = m;
            stats.inv[row] = inv;
        }
    }
    float localDot = 0.0f;
    for (int j = threadIdx.x; j <= t; j += kThreads) {
        dS[j] = dot(dO, qkv + r.v(bh, j), r.hs); // dP
        localDot += p[j] * dS[j];
    }
    const float D = blockSum<kThreads>(localDot);
    for (int j = threadIdx.x; j <= t; j += kThreads)
        dS[j] = __fmul_rn(p[j] * (dS[j] - D), r.scale);
    if (threadIdx.x == 0)
        stats.dot[row] = D;
    __syncthreads();
    for (int d = threadIdx.x; d < r.hs; d += kThreads) {
        float dq = 0.0f;
        for (int j = 0; j <= t; ++j)
            dq += dS[j] * load(qkv, r.k(bh, j) + d);
        store(dqkv, r.q(bh, t) + d, dq);
    }
}

// Shared memory: k[hs], v[hs], p[T], dS[T] (indexed by query).
template <typename In, typename P>
__global__ void attentionKeyPassKernel(In* dqkv, const In* dout, const In* qkv, const P* probs,
                                       RowStats stats, Rows r) {
    extern __shared__ float shared[];
    float *k = shared, *v = k + r.hs, *p = v + r.hs, *dS = p + r.T;
    const std::size_t bh = r.bh(blockIdx.x);
    const int j = r.position(blockIdx.x);
    loadToShared(k, qkv + r.k(bh, j), r.hs);
    loadToShared(v, qkv + r.v(bh, j), r.hs);
    __syncthreads();
    for (int t = j + int(threadIdx.x); t < r.T; t += kThreads) {
        const std::size_t row = bh * std::size_t(r.T) + std::size_t(t);
        const float prob =
            probs ? load(probs, r.prob(bh, t, j))
                  : __fmul_rn(expf(score(qkv + r.q(bh, t), qkv + r.k(bh, j), r) - stats.max[row]),
                              stats.inv[row]);
        const float dP = dot(dout + r.o(bh, t), v, r.hs);
        p[t] = prob;
        dS[t] = __fmul_rn(prob * (dP - stats.dot[row]), r.scale);
    }
    __syncthreads();
    for (int d = threadIdx.x; d < r.hs; d += kThreads) {
        float dk = 0.0f, dv = 0.0f;
        for (int t = j; t < r.T; ++t) {
            dk += dS[t] * load(qkv, r.q(bh, t) + d);
            dv += p[t] * load(dout, r.o(bh, t) + d);
        }
        store(dqkv, r.k(bh, j) + d, dk);
        store(dqkv, r.v(bh, j) + d, dv);
    }
}

Rows rowsOf(int T, int C, int NH) {
    if (NH <= 0 || C % NH != 0)
        throw std::logic_error("attention: " + std::to_string(C) + " channels do not split into " +
                               std::to_string(NH) + " heads");
    const int hs = C / NH;
    return {T, C, NH, hs, 1.0f / std::sqrt(float(hs))};
}

// Lets `kernel` use `bytes` of dynamic shared memory, or says why it cannot.
template <typename Kernel> void allowSharedMemory(Kernel kernel, std::size_t bytes, int T) {
    constexpr std::size_t kDefault = 48 * 1024;
    if (bytes <= kDefault)
        return;
    int device = 0, most = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
          "cudaDeviceGetAttribute");
    if (bytes > std::size_t(most))
        throw std::runtime_error("attention: a sequence of " + std::to_string(T) +
                                 " tokens needs " + std::to_string(bytes / 1024) +
                                 " KiB of shared memory per block and this GPU offers " +
                                 std::to_string(most / 1024) + " KiB; use a shorter sequence");
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
          "cudaFuncSetAttribute");
}

void sameType(kernels::DType a, kernels::DType b, const char* what) {
    if (a != b)
        throw std::logic_error(std::string("attention: ") + what + " must share one type");
}

// Calls f with a typed probs pointer: the tensor's own type, or In's when there is none.
template <typename In, typename F> void withProbs(kernels::ConstPtr probs, F f) {
    if (!probs)
        f(static_cast<const In*>(nullptr));
    else
        withElements(probs, f);
}

} // namespace

void attentionForward(kernels::Ptr out, kernels::Ptr probs, kernels::ConstPtr qkv, int B, int T,
                      int C, int NH, void* stream) {
    if (B <= 0 || T <= 0 || C <= 0)
        return;
    sameType(out.type, qkv.type, "out and qkv");
    const Rows r = rowsOf(T, C, NH);
    const std::size_t bytes = (std::size_t(r.hs) + std::size_t(T)) * sizeof(float);
    const unsigned rows = unsigned(std::size_t(B) * std::size_t(NH) * std::size_t(T));
    withElements(qkv, [&](const auto* x) {
        using In = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
        withProbs<In>(kernels::ConstPtr(probs), [&](const auto* typedProbs) {
            using P = std::remove_cv_t<std::remove_pointer_t<decltype(typedProbs)>>;
            const auto kernel = attentionForwardKernel<In, P>;
            allowSharedMemory(kernel, bytes, T);
            kernel<<<rows, kThreads, bytes, streamOf(stream)>>>(static_cast<In*>(out.data),
                                                                const_cast<P*>(typedProbs), x, r);
        });
    });
    checkLaunch("attentionForward");
}

void attentionBackward(kernels::Ptr dqkv, kernels::ConstPtr dout, kernels::ConstPtr qkv,
                       kernels::ConstPtr probs, int B, int T, int C, int NH, float* workspace,
                       void* stream) {
    if (B <= 0 || T <= 0 || C <= 0)
        return;
    sameType(dqkv.type, qkv.type, "dqkv and qkv");
    sameType(dout.type, qkv.type, "dout and qkv");
    const Rows r = rowsOf(T, C, NH);
    const std::size_t rowCount = std::size_t(B) * std::size_t(NH) * std::size_t(T);
    const RowStats stats{workspace, workspace + rowCount, workspace + 2 * rowCount};
    const std::size_t bytes = 2 * (std::size_t(r.hs) + std::size_t(T)) * sizeof(float);
    withElements(qkv, [&](const auto* x) {
        using In = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
        In* g = static_cast<In*>(dqkv.data);
        const In* d = static_cast<const In*>(dout.data);
        withProbs<In>(probs, [&](const auto* typedProbs) {
            using P = std::remove_cv_t<std::remove_pointer_t<decltype(typedProbs)>>;
            const auto queryPass = attentionQueryPassKernel<In, P>;
            const auto keyPass = attentionKeyPassKernel<In, P>;
            allowSharedMemory(queryPass, bytes, T);
            allowSharedMemory(keyPass, bytes, T);
            queryPass<<<unsigned(rowCount), kThreads, bytes, streamOf(stream)>>>(
                g, d, x, typedProbs, stats, r);
            keyPass<<<unsigned(rowCount), kThreads, bytes, streamOf(stream)>>>(g, d, x, typedProbs,
                                                                               stats, r);
        });
    });
    checkLaunch("attentionBackward");
}

} // namespace shardscope::cuda
