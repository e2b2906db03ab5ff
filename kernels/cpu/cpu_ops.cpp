#include "cpu_ops.h"

#include "bf16.h"

#include <algorithm>
#include <bit>
#include <cblas.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <numbers>
#include <numeric>
#include <omp.h>
#include <thread>
#include <vector>

namespace shardscope::kernels {

namespace {

using std::size_t;

constexpr float kLayerNormEps = 1e-5f;
constexpr std::size_t kAlignment = 64;

std::ptrdiff_t sz(size_t n) {
    return static_cast<std::ptrdiff_t>(n);
}

// exp(x) with about 1 ulp of error, written so that loops calling it vectorise (libm's expf
// is a scalar call): x = n ln2 + r with |r| <= ln2/2, exp(r) by its degree-6 Taylor polynomial
// (error r^7/7! < 1.3e-7), scaled by 2^n built in the exponent bits.
inline float expApprox(float x) {
    x = std::min(std::max(x, -87.0f), 88.0f);
    constexpr float kRound = 12582912.0f; // 1.5 * 2^23: adding it rounds to an integer
    const float n = (x * 1.44269504088896341f + kRound) - kRound;
    const float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    return p * std::bit_cast<float>((static_cast<std::int32_t>(n) + 127) << 23);
}

// Elementwise kernels are compiled for AVX-512, AVX2 + FMA and baseline x86-64, and the loader
// picks the widest the CPU has (GCC function multiversioning); the build itself targets only
// baseline x86-64 so it runs everywhere. A given machine always runs the same variant, so
// results stay deterministic there.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SHARDSCOPE_SIMD_CLONES                                                                     \
    __attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))
#else
#define SHARDSCOPE_SIMD_CLONES
#endif

constexpr float kGeluScale = 0.7978845608028654f; // sqrt(2 / pi)

// GELU's tanh gate as a sigmoid: 0.5 (1 + tanh u) = s = sigmoid(2u), and its slope
// 0.5 sech^2 u = 2 s (1 - s). With e = exp(-2|u|) <= 1, never overflowing, s(1 - s) = e / (1 + e)^2
// exactly: no difference of nearly equal numbers, where the tanh form cancels for x far from 0
// and the CPU and the GPU then disagreed by 10% on the slope (kernels/cuda/elementwise.cu has the
// same expressions).
struct GeluGate {
    float s, sOneMinusS;
};
inline GeluGate geluGate(float x) {
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float e = expApprox(-2.0f * std::fabs(u));
    const float a = 1.0f / (1.0f + e);
    return {u >= 0.0f ? a : e * a, e * a * a};
}

// sigmoid(a) without overflow on either side.
inline float sigmoid(float a) {
    const float e = std::exp(-std::fabs(a));
    return a >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

SHARDSCOPE_SIMD_CLONES
void geluForwardRange(float* out, const float* inp, size_t n) {
    for (size_t i = 0; i < n; ++i)
        out[i] = inp[i] * geluGate(inp[i]).s;
}

SHARDSCOPE_SIMD_CLONES
void geluBackwardRange(float* dinp, const float* inp, const float* dout, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const float x = inp[i];
        const GeluGate g = geluGate(x);
        const float slope = 2.0f * g.sOneMinusS * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = (g.s + x * slope) * dout[i];
    }
}

struct AdamStep {
    float lr, beta1, beta2, eps, weightDecay, gradScale, c1, c2;
};

inline float load(const float* p, size_t i) {
    return p[i];
}
inline float load(const std::uint16_t* p, size_t i) {
    return bf16ToFloat(p[i]);
}

inline void store(float* p, size_t i, float v) {
    p[i] = v;
}
inline void store(std::uint16_t* p, size_t i, float v) {
    p[i] = floatToBf16(v);
}

// Calls f with the elements of p as what they are: float* or std::uint16_t* (bf16).
template <typename F> void withElements(ConstPtr p, F f) {
    if (p.type == DType::F32)
        f(static_cast<const float*>(p.data));
    else
        f(static_cast<const std::uint16_t*>(p.data));
}
template <typename F> void withElements(Ptr p, F f) {
    if (p.type == DType::F32)
        f(static_cast<float*>(p.data));
    else
        f(static_cast<std::uint16_t*>(p.data));
}

template <typename Grad>
inline void adamwBody(float* param, const Grad* grad, float* m, float* v, size_t n, AdamStep a) {
    for (size_t i = 0; i < n; ++i) {
        const float g = load(grad, i) * a.gradScale;
        m[i] = a.beta1 * m[i] + (1.0f - a.beta1) * g;
        v[i] = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
        const float mhat = m[i] / a.c1, vhat = v[i] / a.c2;
        param[i] -= a.lr * (mhat / (std::sqrt(vhat) + a.eps) + a.weightDecay * param[i]);
    }
}

SHARDSCOPE_SIMD_CLONES
void adamwRange(float* param, const float* grad, float* m, float* v, size_t n, AdamStep a) {
    adamwBody(param, grad, m, v, n, a);
}

SHARDSCOPE_SIMD_CLONES
void adamwRange(float* param, const std::uint16_t* grad, float* m, float* v, size_t n, AdamStep a) {
    adamwBody(param, grad, m, v, n, a);
}

SHARDSCOPE_SIMD_CLONES
void widenRange(float* out, const std::uint16_t* in, size_t n) {
    for (size_t i = 0; i < n; ++i)
        out[i] = bf16ToFloat(in[i]);
}

SHARDSCOPE_SIMD_CLONES
void narrowRange(std::uint16_t* out, const float* in, size_t n) {
    for (size_t i = 0; i < n; ++i)
        out[i] = floatToBf16(in[i]);
}

// Runs work(lo, hi) over [0, n) in chunks spread across the OpenMP threads.
template <typename Work> void parallelChunks(size_t n, Work work) {
    constexpr size_t kChunk = 16384;
    const auto chunks = static_cast<std::ptrdiff_t>((n + kChunk - 1) / kChunk);
#pragma omp parallel for
    for (std::ptrdiff_t c = 0; c < chunks; ++c) {
        const size_t lo = size_t(c) * kChunk;
        work(lo, std::min(n, lo + kChunk));
    }
}

SHARDSCOPE_SIMD_CLONES
void roundToBf16Range(float* out, const float* in, size_t n) {
    for (size_t i = 0; i < n; ++i)
        out[i] = bf16ToFloat(floatToBf16(in[i]));
}

void roundToBf16(float* out, const float* in, size_t n) {
    parallelChunks(n, [&](size_t lo, size_t hi) { roundToBf16Range(out + lo, in + lo, hi - lo); });
}

void widen(float* out, const std::uint16_t* in, size_t n) {
    parallelChunks(n, [&](size_t lo, size_t hi) { widenRange(out + lo, in + lo, hi - lo); });
}

void narrow(std::uint16_t* out, const float* in, size_t n) {
    parallelChunks(n, [&](size_t lo, size_t hi) { narrowRange(out + lo, in + lo, hi - lo); });
}

const std::uint16_t* bf16(ConstPtr p) {
    return static_cast<const std::uint16_t*>(p.data);
}

// Host scratch the backend owns (its workspace, as cuBLAS has one), reused from call to call.
template <typename T> class ScratchPool {
public:
    T* take(size_t n) {
        if (used_ == buffers_.size())
            buffers_.emplace_back();
        std::vector<T>& b = buffers_[used_++];
        if (b.size() < n)
            b.resize(n);
        return b.data();
    }
    size_t used() const { return used_; }
    void giveBackTo(size_t used) { used_ = used; }

private:
    std::vector<std::vector<T>> buffers_;
    size_t used_ = 0;
};

// fp32 views of one operator call's typed operands, so each operator has one fp32 kernel: an
// fp32 operand is used in place; a bf16 one is widened into scratch, and an output narrowed back
// (rounded to nearest even) when the views go.
class Fp32Views {
public:
    explicit Fp32Views(ScratchPool<float>& pool) : pool_(pool), mark_(pool.used()) {}
    ~Fp32Views() {
        for (const Output& o : outputs_)
            narrow(o.to, o.from, o.n);
        pool_.giveBackTo(mark_);
    }
    Fp32Views(const Fp32Views&) = delete;
    Fp32Views& operator=(const Fp32Views&) = delete;

    const float* in(ConstPtr p, size_t n) {
        if (!p || p.type == DType::F32)
            return static_cast<const float*>(p.data);
        float* wide = pool_.take(n);
        widen(wide, bf16(p), n);
        return wide;
    }
    // Written by the kernel.
    float* out(Ptr p, size_t n) {
        if (!p || p.type == DType::F32)
            return static_cast<float*>(p.data);
        float* wide = pool_.take(n);
        outputs_.push_back({static_cast<std::uint16_t*>(p.data), wide, n});
        return wide;
    }
    // Read and written (accumulated into).
    float* inout(Ptr p, size_t n) {
        float* wide = out(p, n);
        if (p && p.type != DType::F32)
            widen(wide, bf16(p), n);
        return wide;
    }

private:
    struct Output {
        std::uint16_t* to;
        const float* from;
        size_t n;
    };
    ScratchPool<float>& pool_;
    size_t mark_;
    std::vector<Output> outputs_;
};

// Row t of a causal softmax over scores s[0..T): entries j <= t normalised, the rest zero. The
// forward and the recomputing backward both call this on the same scores, so a recomputed row
// is bit-identical to a stored one.
SHARDSCOPE_SIMD_CLONES
void causalSoftmaxRow(float* row, int t, int T) {
    float maxval = row[0];
    for (int j = 1; j <= t; ++j)
        maxval = std::max(maxval, row[j]);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j <= t; ++j) {
        row[j] = expApprox(row[j] - maxval);
        sum += row[j];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j <= t; ++j)
        row[j] *= inv;
    std::fill(row + t + 1, row + T, 0.0f);
}

// dS = P (dP - sum_j P_j dP_j) * scale, in place over dP, for row t (zero beyond the diagonal).
SHARDSCOPE_SIMD_CLONES
void softmaxBackwardRow(float* d, const float* p, int t, int T, float scale) {
    float dot = 0.0f;
    for (int j = 0; j <= t; ++j)
        dot += p[j] * d[j];
    for (int j = 0; j < T; ++j)
        d[j] = p[j] * (d[j] - dot) * scale;
}

// P = causal softmax(scale Q K^T) for one (batch, head): GEMM, then the rows in parallel.
void attentionProbabilities(float* P, const float* q, const float* k, int T, int hs, int ld) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, ld, k, ld, 0.0f, P, T);
    for (int t = 0; t < T; ++t)
        causalSoftmaxRow(P + size_t(t) * size_t(T), t, T);
}

// Attention's GEMMs are small (T x T x head size); one (batch, head) per thread with
// single-threaded BLAS keeps every core busy without OpenBLAS's per-call thread handoff.
class SerialBlas {
public:
    SerialBlas() : threads_(openblas_get_num_threads()) { openblas_set_num_threads(1); }
    ~SerialBlas() { openblas_set_num_threads(threads_); }
    SerialBlas(const SerialBlas&) = delete;
    SerialBlas& operator=(const SerialBlas&) = delete;

private:
    int threads_;
};

// Work runs when it is called, so an event is complete when recorded: it keeps the time.
class CpuEvent final : public Event {
public:
    bool done() override { return true; }
    void wait() override {}
    double seconds() override { return seconds_; }
    void stamp() {
        seconds_ =
            std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                .count();
    }

private:
    double seconds_ = 0;
};

class CpuStream final : public Stream {
public:
    void record(Event& event) override { static_cast<CpuEvent&>(event).stamp(); }
    void waitFor(Event&) override {}
    void synchronize() override {}
};

class CpuOps final : public Ops {
public:
    explicit CpuOps(int threads) : threads_(threads) {}

    Stream& computeStream() override { return compute_; }
    std::unique_ptr<Stream> createStream() override { return std::make_unique<CpuStream>(); }
    std::unique_ptr<Event> createEvent() override { return std::make_unique<CpuEvent>(); }

    std::string name() const override {
        return std::string("cpu (") + openblas_get_config() + ", " + std::to_string(threads_) +
               " threads)";
    }

    void* allocate(size_t bytes) override {
        const size_t rounded =
            (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
        void* p = std::aligned_alloc(kAlignment, rounded);
        if (!p)
            throw std::bad_alloc();
        return p;
    }
    void release(void* p, size_t) override { std::free(p); }
    bool memoryIsHostMemory() const override { return true; }
    void copyToDevice(void* dst, const void* src, size_t bytes) override {
        std::memcpy(dst, src, bytes);
    }
    void copyToHost(void* dst, const void* src, size_t bytes) override {
        std::memcpy(dst, src, bytes);
    }

    // ---- the typed operators: fp32 views of the operands around one fp32 kernel each (below)
    void copy(Ptr dst, ConstPtr src, size_t n) override {
        if (dst.type == src.type)
            std::memcpy(dst.data, src.data, n * sizeOf(dst.type));
        else if (dst.type == DType::BF16)
            narrow(static_cast<std::uint16_t*>(dst.data), static_cast<const float*>(src.data), n);
        else
            widen(static_cast<float*>(dst.data), bf16(src), n);
    }
    void zero(Ptr x, size_t n) override { std::memset(x.data, 0, n * sizeOf(x.type)); }

    void embeddingForward(Ptr out, const std::int32_t* tokens, ConstPtr wte, ConstPtr wpe, int B,
                          int T, int C) override {
        Fp32Views v(wide_);
        float* o = v.out(out, rows(B, T, C));
        const float* p = v.in(wpe, rows(1, T, C));
        withElements(wte,
                     [&](const auto* table) { embeddingForward32(o, tokens, table, p, B, T, C); });
    }
    void embeddingBackwardAccumulate(Ptr dwte, Ptr dwpe, ConstPtr dout, const std::int32_t* tokens,
                                     int B, int T, int C) override {
        Fp32Views v(wide_);
        float* p = v.inout(dwpe, rows(1, T, C));
        const float* d = v.in(dout, rows(B, T, C));
        withElements(dwte, [&](auto* table) {
            embeddingBackwardAccumulate32(table, p, d, tokens, B, T, C);
        });
    }
    void embeddingShardForward(Ptr out, const std::int32_t* tokens, ConstPtr wte, int vocabStart,
                               int vocabCount, ConstPtr wpe, int B, int T, int C) override {
        Fp32Views v(wide_);
        float* o = v.out(out, rows(B, T, C));
        const float* p = v.in(wpe, rows(1, T, C));
        withElements(wte, [&](const auto* table) {
            embeddingShardForward32(o, tokens, table, vocabStart, vocabCount, p, B, T, C);
        });
    }
    void embeddingShardBackwardAccumulate(Ptr dwte, int vocabStart, int vocabCount, Ptr dwpe,
                                          ConstPtr dout, const std::int32_t* tokens, int B, int T,
                                          int C) override {
        Fp32Views v(wide_);
        float* p = v.inout(dwpe, rows(1, T, C));
        const float* d = v.in(dout, rows(B, T, C));
        withElements(dwte, [&](auto* table) {
            embeddingShardBackwardAccumulate32(table, vocabStart, vocabCount, p, d, tokens, B, T,
                                               C);
        });
    }

    void layerNormForward(Ptr out, float* mean, float* rstd, ConstPtr inp, ConstPtr weight,
                          ConstPtr bias, int N, int C) override {
        Fp32Views v(wide_);
        layerNormForward32(v.out(out, rows(1, N, C)), mean, rstd, v.in(inp, rows(1, N, C)),
                           v.in(weight, size_t(C)), v.in(bias, size_t(C)), N, C);
    }
    void layerNormBackwardAccumulate(Ptr dinp, Ptr dweight, Ptr dbias, ConstPtr dout, ConstPtr inp,
                                     ConstPtr weight, const float* mean, const float* rstd, int N,
                                     int C) override {
        Fp32Views v(wide_);
        layerNormBackwardAccumulate32(v.inout(dinp, rows(1, N, C)), v.inout(dweight, size_t(C)),
                                      v.inout(dbias, size_t(C)), v.in(dout, rows(1, N, C)),
                                      v.in(inp, rows(1, N, C)), v.in(weight, size_t(C)), mean, rstd,
                                      N, C);
    }

    void matmulForward(Ptr out, ConstPtr inp, ConstPtr weight, ConstPtr bias, int N, int C,
                       int OC) override {
        Fp32Views v(wide_);
        float* o = v.out(out, rows(1, N, OC));
        if (const float* b = v.in(bias, size_t(OC))) {
#pragma omp parallel for
            for (int n = 0; n < N; ++n)
                std::memcpy(o + size_t(n) * size_t(OC), b, size_t(OC) * sizeof(float));
        }
        gemm(false, true, N, OC, C, inp, C, weight, C, bias ? 1.0f : 0.0f, o, OC);
    }
    void matmulBackwardInput(Ptr dinp, ConstPtr dout, ConstPtr weight, int N, int C, int OC,
                             bool accumulate) override {
        Fp32Views v(wide_);
        float* d = accumulate ? v.inout(dinp, rows(1, N, C)) : v.out(dinp, rows(1, N, C));
        gemm(false, false, N, C, OC, dout, OC, weight, C, accumulate ? 1.0f : 0.0f, d, C);
    }
    void matmulBackwardWeightAccumulate(Ptr dweight, Ptr dbias, ConstPtr dout, ConstPtr inp, int N,
                                        int C, int OC) override {
        Fp32Views v(wide_);
        gemm(true, false, OC, C, N, dout, OC, inp, C, 1.0f, v.inout(dweight, rows(1, OC, C)), C);
        if (dbias)
            biasGradientAccumulate(v.inout(dbias, size_t(OC)), v.in(dout, rows(1, N, OC)), N, OC);
    }

    void attentionForward(Ptr out, Ptr probs, ConstPtr qkv, int B, int T, int C, int NH) override {
        Fp32Views v(wide_);
        attentionForward32(v.out(out, rows(B, T, C)),
                           v.out(probs, size_t(B) * size_t(NH) * rows(1, T, T)),
                           v.in(qkv, rows(B, T, 3 * C)), B, T, C, NH);
    }
    void attentionBackward(Ptr dqkv, ConstPtr dout, ConstPtr qkv, ConstPtr probs, int B, int T,
                           int C, int NH) override {
        Fp32Views v(wide_);
        attentionBackward32(v.out(dqkv, rows(B, T, 3 * C)), v.in(dout, rows(B, T, C)),
                            v.in(qkv, rows(B, T, 3 * C)),
                            v.in(probs, size_t(B) * size_t(NH) * rows(1, T, T)), B, T, C, NH);
    }

    void geluForward(Ptr out, ConstPtr inp, size_t n) override {
        Fp32Views v(wide_);
        geluForward32(v.out(out, n), v.in(inp, n), n);
    }
    void geluBackward(Ptr dinp, ConstPtr inp, ConstPtr dout, size_t n) override {
        Fp32Views v(wide_);
        // dinp may be dout itself: the view of dout is read before the output is narrowed.
        const float* d = v.in(dout, n);
        geluBackward32(v.out(dinp, n), v.in(inp, n), d, n);
    }
    void rmsNormForward(Ptr out, float* rstd, ConstPtr inp, ConstPtr weight, int N, int C,
                        float eps) override {
        Fp32Views v(wide_);
        rmsNormForward32(v.out(out, rows(1, N, C)), rstd, v.in(inp, rows(1, N, C)),
                         v.in(weight, size_t(C)), N, C, eps);
    }
    void rmsNormBackwardAccumulate(Ptr dinp, Ptr dweight, ConstPtr dout, ConstPtr inp,
                                   ConstPtr weight, const float* rstd, int N, int C) override {
        Fp32Views v(wide_);
        rmsNormBackwardAccumulate32(v.inout(dinp, rows(1, N, C)), v.inout(dweight, size_t(C)),
                                    v.in(dout, rows(1, N, C)), v.in(inp, rows(1, N, C)),
                                    v.in(weight, size_t(C)), rstd, N, C);
    }
    void rotaryEmbedding(Ptr x, const float* cos, const float* sin, int B, int T, int heads,
                         int headDim, int rowStride, bool inverse) override {
        Fp32Views v(wide_);
        rotaryEmbedding32(v.inout(x, extent(B * T, rowStride, heads * headDim)), cos, sin, B, T,
                          heads, headDim, rowStride, inverse);
    }
    void swigluForward(Ptr out, ConstPtr gateUp, int N, int F) override {
        Fp32Views v(wide_);
        swigluForward32(v.out(out, rows(1, N, F)), v.in(gateUp, rows(1, N, 2 * F)), N, F);
    }
    void swigluBackward(Ptr dgateUp, ConstPtr gateUp, ConstPtr dout, int N, int F) override {
        Fp32Views v(wide_);
        const float* d = v.in(dout, rows(1, N, F));
        swigluBackward32(v.out(dgateUp, rows(1, N, 2 * F)), v.in(gateUp, rows(1, N, 2 * F)), d, N,
                         F);
    }

    void expandKvHeads(Ptr expanded, ConstPtr qkv, int N, int heads, int kvHeads,
                       int headDim) override {
        Fp32Views v(wide_);
        expandKvHeads32(v.out(expanded, rows(1, N, 3 * heads * headDim)),
                        v.in(qkv, rows(1, N, (heads + 2 * kvHeads) * headDim)), N, heads, kvHeads,
                        headDim);
    }
    void sumKvHeadGradients(Ptr dqkv, ConstPtr dexpanded, int N, int heads, int kvHeads,
                            int headDim) override {
        Fp32Views v(wide_);
        sumKvHeadGradients32(v.out(dqkv, rows(1, N, (heads + 2 * kvHeads) * headDim)),
                             v.in(dexpanded, rows(1, N, 3 * heads * headDim)), N, heads, kvHeads,
                             headDim);
    }

    void attentionBlockForward(float* acc, float* rowMax, float* rowSum, ConstPtr q, int qStride,
                               ConstPtr k, ConstPtr v, int kvStride, const std::int32_t* qPos,
                               const std::int32_t* kPos, int B, int Tq, int Tk, int NH, int KV,
                               int hd) override {
        Fp32Views w(wide_);
        const size_t qn = extent(B * Tq, qStride, NH * hd), kn = extent(B * Tk, kvStride, KV * hd);
        attentionBlockForward32(acc, rowMax, rowSum, w.in(q, qn), qStride, w.in(k, kn), w.in(v, kn),
                                kvStride, qPos, kPos, B, Tq, Tk, NH, KV, hd);
    }
    void attentionBlockFinish(Ptr out, float* lse, const float* acc, const float* rowMax,
                              const float* rowSum, int B, int Tq, int NH, int hd) override {
        Fp32Views w(wide_);
        float* o = w.out(out, rows(B, Tq, NH * hd));
#pragma omp parallel for
        for (int r = 0; r < B * NH * Tq; ++r) { // r = (b NH + h) Tq + i
            const int b = r / (NH * Tq), h = r / Tq % NH, i = r % Tq;
            const size_t at =
                (size_t(b) * size_t(Tq) + size_t(i)) * size_t(NH * hd) + size_t(h) * size_t(hd);
            const float sum = rowSum[r], inv = sum > 0.0f ? 1.0f / sum : 0.0f;
            for (int d = 0; d < hd; ++d)
                o[at + size_t(d)] = acc[at + size_t(d)] * inv;
            lse[r] =
                sum > 0.0f ? rowMax[r] + std::log(sum) : -std::numeric_limits<float>::infinity();
        }
    }
    void attentionBlockDelta(float* delta, ConstPtr dout, ConstPtr out, int B, int Tq, int NH,
                             int hd) override {
        Fp32Views w(wide_);
        const size_t n = rows(B, Tq, NH * hd);
        const float* d = w.in(dout, n);
        const float* o = w.in(out, n);
#pragma omp parallel for
        for (int r = 0; r < B * NH * Tq; ++r) {
            const int b = r / (NH * Tq), h = r / Tq % NH, i = r % Tq;
            const size_t at =
                (size_t(b) * size_t(Tq) + size_t(i)) * size_t(NH * hd) + size_t(h) * size_t(hd);
            float sum = 0.0f;
            for (int c = 0; c < hd; ++c)
                sum += d[at + size_t(c)] * o[at + size_t(c)];
            delta[r] = sum;
        }
    }
    void attentionBlockBackward(float* dq, float* dk, float* dv, int dkvStride, ConstPtr dout,
                                const float* lse, const float* delta, ConstPtr q, int qStride,
                                ConstPtr k, ConstPtr v, int kvStride, const std::int32_t* qPos,
                                const std::int32_t* kPos, int B, int Tq, int Tk, int NH, int KV,
                                int hd) override {
        Fp32Views w(wide_);
        const size_t qn = extent(B * Tq, qStride, NH * hd), kn = extent(B * Tk, kvStride, KV * hd);
        attentionBlockBackward32(dq, dk, dv, dkvStride, w.in(dout, rows(B, Tq, NH * hd)), lse,
                                 delta, w.in(q, qn), qStride, w.in(k, kn), w.in(v, kn), kvStride,
                                 qPos, kPos, B, Tq, Tk, NH, KV, hd);
    }
    void copyRows(Ptr dst, int dstStride, ConstPtr src, int srcStride, int rowCount,
                  int cols) override {
        for (int r = 0; r < rowCount; ++r)
            copy(dst + size_t(r) * size_t(dstStride), src + size_t(r) * size_t(srcStride),
                 size_t(cols));
    }

    void add(Ptr out, ConstPtr a, ConstPtr b, size_t n) override {
        Fp32Views v(wide_);
        add32(v.out(out, n), v.in(a, n), v.in(b, n), n);
    }
    void addInPlace(Ptr x, ConstPtr y, size_t n) override {
        Fp32Views v(wide_);
        addInPlace32(v.inout(x, n), v.in(y, n), n);
    }

    void sumOfSquaresAccumulate(ConstPtr x, size_t n, double* sum) override {
        withElements(x, [&](const auto* values) { sumOfSquaresAccumulate32(values, n, sum); });
    }
    void adamwUpdate(float* param, ConstPtr grad, float* m, float* v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weightDecay, float gradScale, int t,
                     Ptr working) override {
        if (grad.type == DType::F32)
            adamwUpdate32(param, static_cast<const float*>(grad.data), m, v, n, lr, beta1, beta2,
                          eps, weightDecay, gradScale, t);
        else
            adamwUpdate32(param, bf16(grad), m, v, n, lr, beta1, beta2, eps, weightDecay, gradScale,
                          t);
        if (working)
            copy(working, param, n);
    }

    // ---- fp32 kernels
    // The token tables (wte and its gradient) are read and written in their own type: they are
    // the size of the vocabulary, too large to widen for every microbatch.
    template <typename Table>
    void embeddingForward32(float* out, const std::int32_t* tokens, const Table* wte,
                            const float* wpe, int B, int T, int C) {
#pragma omp parallel for
        for (int bt = 0; bt < B * T; ++bt) {
            const Table* e = wte + size_t(tokens[bt]) * size_t(C);
            const float* p = wpe ? wpe + size_t(bt % T) * size_t(C) : nullptr;
            float* o = out + size_t(bt) * size_t(C);
            for (int i = 0; i < C; ++i)
                o[i] = load(e, size_t(i)) + (p ? p[i] : 0.0f);
        }
    }

    template <typename Table>
    void embeddingBackwardAccumulate32(Table* dwte, float* dwpe, const float* dout,
                                       const std::int32_t* tokens, int B, int T, int C) {
        // Channels are split across threads, so rows sharing a token never race.
#pragma omp parallel
        {
            const int nt = omp_get_num_threads(), id = omp_get_thread_num();
            const int lo = C * id / nt, hi = C * (id + 1) / nt;
            for (int bt = 0; bt < B * T; ++bt) {
                const float* d = dout + size_t(bt) * size_t(C);
                Table* e = dwte + size_t(tokens[bt]) * size_t(C);
                for (int i = lo; i < hi; ++i)
                    store(e, size_t(i), load(e, size_t(i)) + d[i]);
                if (!dwpe)
                    continue;
                float* p = dwpe + size_t(bt % T) * size_t(C);
                for (int i = lo; i < hi; ++i)
                    p[i] += d[i];
            }
        }
    }

    template <typename Table>
    void embeddingShardForward32(float* out, const std::int32_t* tokens, const Table* wte,
                                 int vocabStart, int vocabCount, const float* wpe, int B, int T,
                                 int C) {
#pragma omp parallel for
        for (int bt = 0; bt < B * T; ++bt) {
            const int row = tokens[bt] - vocabStart;
            const bool held = row >= 0 && row < vocabCount;
            const Table* e = held ? wte + size_t(row) * size_t(C) : nullptr;
            const float* p = wpe ? wpe + size_t(bt % T) * size_t(C) : nullptr;
            float* o = out + size_t(bt) * size_t(C);
            for (int i = 0; i < C; ++i)
                o[i] = (e ? load(e, size_t(i)) : 0.0f) + (p ? p[i] : 0.0f);
        }
    }

    template <typename Table>
    void embeddingShardBackwardAccumulate32(Table* dwte, int vocabStart, int vocabCount,
                                            float* dwpe, const float* dout,
                                            const std::int32_t* tokens, int B, int T, int C) {
#pragma omp parallel
        {
            const int nt = omp_get_num_threads(), id = omp_get_thread_num();
            const int lo = C * id / nt, hi = C * (id + 1) / nt;
            for (int bt = 0; bt < B * T; ++bt) {
                const float* d = dout + size_t(bt) * size_t(C);
                const int row = tokens[bt] - vocabStart;
                if (dwpe) {
                    float* p = dwpe + size_t(bt % T) * size_t(C);
                    for (int i = lo; i < hi; ++i)
                        p[i] += d[i];
                }
                if (row < 0 || row >= vocabCount)
                    continue;
                Table* e = dwte + size_t(row) * size_t(C);
                for (int i = lo; i < hi; ++i)
                    store(e, size_t(i), load(e, size_t(i)) + d[i]);
            }
        }
    }

    void layerNormForward32(float* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int N, int C) {
#pragma omp parallel for
        for (int n = 0; n < N; ++n) {
            const float* x = inp + size_t(n) * size_t(C);
            float m = 0.0f;
#pragma omp simd reduction(+ : m)
            for (int i = 0; i < C; ++i)
                m += x[i];
            m /= static_cast<float>(C);
            float var = 0.0f;
#pragma omp simd reduction(+ : var)
            for (int i = 0; i < C; ++i)
                var += (x[i] - m) * (x[i] - m);
            var /= static_cast<float>(C);
            const float s = 1.0f / std::sqrt(var + kLayerNormEps);
            float* o = out + size_t(n) * size_t(C);
            for (int i = 0; i < C; ++i)
                o[i] = (x[i] - m) * s * weight[i] + bias[i];
            mean[n] = m;
            rstd[n] = s;
        }
    }

    void layerNormBackwardAccumulate32(float* dinp, float* dweight, float* dbias, const float* dout,
                                       const float* inp, const float* weight, const float* mean,
                                       const float* rstd, int N, int C) {
        // Rows in parallel for dinp; the weight gradients reduce per thread, then sum in order
        // of thread id so the result does not depend on scheduling.
        const int nt = threads_;
        std::vector<float>& partial = scratch(size_t(nt) * 2 * size_t(C));
        std::fill(partial.begin(), partial.end(), 0.0f);
#pragma omp parallel num_threads(nt)
        {
            const int id = omp_get_thread_num(), team = omp_get_num_threads();
            float* dw = partial.data() + size_t(id) * 2 * size_t(C);
            float* db = dw + C;
            const int lo = int(std::int64_t(N) * id / team),
                      hi = int(std::int64_t(N) * (id + 1) / team);
            for (int n = lo; n < hi; ++n) {
                const float* x = inp + size_t(n) * size_t(C);
                const float* d = dout + size_t(n) * size_t(C);
                const float m = mean[n], s = rstd[n];
                float dnormMean = 0.0f, dnormNormMean = 0.0f;
                for (int i = 0; i < C; ++i) {
                    const float xhat = (x[i] - m) * s;
                    const float dnorm = weight[i] * d[i];
                    dnormMean += dnorm;
                    dnormNormMean += dnorm * xhat;
                    db[i] += d[i];
                    dw[i] += xhat * d[i];
                }
                dnormMean /= static_cast<float>(C);
                dnormNormMean /= static_cast<float>(C);
                float* dx = dinp + size_t(n) * size_t(C);
                for (int i = 0; i < C; ++i) {
                    const float xhat = (x[i] - m) * s;
                    dx[i] += (weight[i] * d[i] - dnormMean - xhat * dnormNormMean) * s;
                }
            }
        }
        for (int id = 0; id < nt; ++id) {
            const float* dw = partial.data() + size_t(id) * 2 * size_t(C);
            for (int i = 0; i < C; ++i) {
                dweight[i] += dw[i];
                dbias[i] += dw[C + i];
            }
        }
    }

    void rmsNormForward32(float* out, float* rstd, const float* inp, const float* weight, int N,
                          int C, float eps) {
#pragma omp parallel for
        for (int n = 0; n < N; ++n) {
            const float* x = inp + size_t(n) * size_t(C);
            float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
            for (int i = 0; i < C; ++i)
                squares += x[i] * x[i];
            const float s = 1.0f / std::sqrt(squares / static_cast<float>(C) + eps);
            float* o = out + size_t(n) * size_t(C);
            for (int i = 0; i < C; ++i)
                o[i] = x[i] * s * weight[i];
            rstd[n] = s;
        }
    }

    // dx = (w dy - xhat mean(w dy xhat)) rstd, xhat = x rstd; dw = sum over rows of dy xhat.
    // As the layer norm's: rows in parallel, the weight gradient summed per thread, then in
    // order of thread id.
    void rmsNormBackwardAccumulate32(float* dinp, float* dweight, const float* dout,
                                     const float* inp, const float* weight, const float* rstd,
                                     int N, int C) {
        const int nt = threads_;
        std::vector<float>& partial = scratch(size_t(nt) * size_t(C));
        std::fill(partial.begin(), partial.end(), 0.0f);
#pragma omp parallel num_threads(nt)
        {
            const int id = omp_get_thread_num(), team = omp_get_num_threads();
            float* dw = partial.data() + size_t(id) * size_t(C);
            const int lo = int(std::int64_t(N) * id / team),
                      hi = int(std::int64_t(N) * (id + 1) / team);
            for (int n = lo; n < hi; ++n) {
                const float* x = inp + size_t(n) * size_t(C);
                const float* d = dout + size_t(n) * size_t(C);
                const float s = rstd[n];
                float dot = 0.0f;
                for (int i = 0; i < C; ++i) {
                    const float xhat = x[i] * s;
                    dot += weight[i] * d[i] * xhat;
                    dw[i] += xhat * d[i];
                }
                dot /= static_cast<float>(C);
                float* dx = dinp + size_t(n) * size_t(C);
                for (int i = 0; i < C; ++i)
                    dx[i] += (weight[i] * d[i] - x[i] * s * dot) * s;
            }
        }
        for (int id = 0; id < nt; ++id) {
            const float* dw = partial.data() + size_t(id) * size_t(C);
            for (int i = 0; i < C; ++i)
                dweight[i] += dw[i];
        }
    }

    void rotaryEmbedding32(float* x, const float* cos, const float* sin, int B, int T, int heads,
                           int headDim, int rowStride, bool inverse) {
        const int half = headDim / 2;
        const float direction = inverse ? -1.0f : 1.0f;
#pragma omp parallel for
        for (int bt = 0; bt < B * T; ++bt) {
            const float* c = cos + size_t(bt % T) * size_t(half);
            const float* s = sin + size_t(bt % T) * size_t(half);
            float* row = x + size_t(bt) * size_t(rowStride);
            for (int h = 0; h < heads; ++h) {
                float* head = row + size_t(h) * size_t(headDim);
                for (int i = 0; i < half; ++i) {
                    const float a = head[i], b = head[i + half], sn = direction * s[i];
                    head[i] = a * c[i] - b * sn;
                    head[i + half] = b * c[i] + a * sn;
                }
            }
        }
    }

    void swigluForward32(float* out, const float* gateUp, int N, int F) {
#pragma omp parallel for
        for (int n = 0; n < N; ++n) {
            const float* gate = gateUp + size_t(n) * 2 * size_t(F);
            const float* up = gate + F;
            float* o = out + size_t(n) * size_t(F);
            for (int i = 0; i < F; ++i)
                o[i] = gate[i] * sigmoid(gate[i]) * up[i];
        }
    }

    // d gate = d up s (1 + a (1 - s)), d up = d silu(a), s = sigmoid(a), a the gate.
    void swigluBackward32(float* dgateUp, const float* gateUp, const float* dout, int N, int F) {
#pragma omp parallel for
        for (int n = 0; n < N; ++n) {
            const float* gate = gateUp + size_t(n) * 2 * size_t(F);
            const float* up = gate + F;
            const float* d = dout + size_t(n) * size_t(F);
            float* dgate = dgateUp + size_t(n) * 2 * size_t(F);
            float* dup = dgate + F;
            for (int i = 0; i < F; ++i) {
                const float a = gate[i], s = sigmoid(a);
                dgate[i] = d[i] * up[i] * s * (1.0f + a * (1.0f - s));
                dup[i] = d[i] * a * s;
            }
        }
    }

    void expandKvHeads32(float* out, const float* qkv, int N, int H, int KV, int d) {
        const int group = H / KV;
        const size_t q = size_t(H) * size_t(d), kv = size_t(KV) * size_t(d),
                     bytes = size_t(d) * sizeof(float);
#pragma omp parallel for
        for (int n = 0; n < N; ++n) {
            const float* in = qkv + size_t(n) * (q + 2 * kv);
            float* o = out + size_t(n) * 3 * q;
            std::memcpy(o, in, q * sizeof(float));
            for (int h = 0; h < H; ++h) {
                const size_t from = size_t(h / group) * size_t(d), to = size_t(h) * size_t(d);
                std::memcpy(o + q + to, in + q + from, bytes);
                std::memcpy(o + 2 * q + to, in + q + kv + from, bytes);
            }
        }
    }

    void sumKvHeadGradients32(float* dqkv, const float* dexpanded, int N, int H, int KV, int d) {
        const int group = H / KV;
        const size_t q = size_t(H) * size_t(d), kv = size_t(KV) * size_t(d);
#pragma omp parallel for
        for (int n = 0; n < N; ++n) {
            const float* in = dexpanded + size_t(n) * 3 * q;
            float* o = dqkv + size_t(n) * (q + 2 * kv);
            std::memcpy(o, in, q * sizeof(float));
            for (int part = 0; part < 2; ++part) // keys, then values
                for (int k = 0; k < KV; ++k)
                    for (int i = 0; i < d; ++i) {
                        float sum = 0.0f;
                        for (int g = 0; g < group; ++g)
                            sum += in[size_t(1 + part) * q + size_t(k * group + g) * size_t(d) +
                                      size_t(i)];
                        o[q + size_t(part) * kv + size_t(k) * size_t(d) + size_t(i)] = sum;
                    }
        }
    }

    // Per (batch, query head), as GEMMs: S = Q K^T / sqrt(hd) over the block, masked by
    // position; each row's merge into the running softmax (a row the block cannot see keeps its
    // state); then acc += exp(S - max) V.
    void attentionBlockForward32(float* acc, float* rowMax, float* rowSum, const float* q,
                                 int qStride, const float* k, const float* v, int kvStride,
                                 const std::int32_t* qPos, const std::int32_t* kPos, int B, int Tq,
                                 int Tk, int NH, int KV, int hd) {
        const int group = NH / KV, C = NH * hd;
        const float scale = 1.0f / std::sqrt(float(hd));
        const size_t TT = size_t(Tq) * size_t(Tk);
        float* scratchBase = scratch(size_t(threads_) * TT).data();
        const SerialBlas serial;
#pragma omp parallel for num_threads(threads_) collapse(2)
        for (int b = 0; b < B; ++b)
            for (int h = 0; h < NH; ++h) {
                float* S = scratchBase + size_t(omp_get_thread_num()) * TT;
                const size_t kv =
                    size_t(b) * size_t(Tk) * size_t(kvStride) + size_t(h / group) * size_t(hd);
                const float* qbh =
                    q + size_t(b) * size_t(Tq) * size_t(qStride) + size_t(h) * size_t(hd);
                float* accBh = acc + size_t(b) * size_t(Tq) * size_t(C) + size_t(h) * size_t(hd);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, hd, scale, qbh,
                            qStride, k + kv, kvStride, 0.0f, S, Tk);
                for (int i = 0; i < Tq; ++i) {
                    float* row = S + size_t(i) * size_t(Tk);
                    const size_t stat =
                        (size_t(b) * size_t(NH) + size_t(h)) * size_t(Tq) + size_t(i);
                    float blockMax = -std::numeric_limits<float>::infinity();
                    for (int j = 0; j < Tk; ++j)
                        if (kPos[j] <= qPos[i])
                            blockMax = std::max(blockMax, row[j]);
                    if (blockMax == -std::numeric_limits<float>::infinity()) {
                        std::fill(row, row + Tk, 0.0f); // adds nothing below
                        continue;
                    }
                    const float newMax = std::max(rowMax[stat], blockMax);
                    const float keep = std::exp(rowMax[stat] - newMax); // 0 from -infinity
                    float sum = rowSum[stat] * keep;
                    for (int j = 0; j < Tk; ++j) {
                        row[j] = kPos[j] <= qPos[i] ? std::exp(row[j] - newMax) : 0.0f;
                        sum += row[j];
                    }
                    float* out = accBh + size_t(i) * size_t(C);
                    for (int c = 0; c < hd; ++c)
                        out[c] *= keep;
                    rowMax[stat] = newMax;
                    rowSum[stat] = sum;
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, hd, Tk, 1.0f, S, Tk,
                            v + kv, kvStride, 1.0f, accBh, C);
            }
    }

    // Per (batch, key and value head), its query heads in turn, as GEMMs: P = exp(S - lse)
    // masked, dS = P (dO V^T - delta) / sqrt(hd); dQ += dS K, dK += dS^T Q, dV += P^T dO. One
    // iteration alone writes its group's dk and dv rows and its heads' dq rows.
    void attentionBlockBackward32(float* dq, float* dk, float* dv, int dkvStride, const float* dout,
                                  const float* lse, const float* delta, const float* q, int qStride,
                                  const float* k, const float* v, int kvStride,
                                  const std::int32_t* qPos, const std::int32_t* kPos, int B, int Tq,
                                  int Tk, int NH, int KV, int hd) {
        const int group = NH / KV, C = NH * hd;
        const float scale = 1.0f / std::sqrt(float(hd));
        const size_t TT = size_t(Tq) * size_t(Tk);
        float* scratchBase = scratch(size_t(threads_) * 2 * TT).data();
        const SerialBlas serial;
#pragma omp parallel for num_threads(threads_) collapse(2)
        for (int b = 0; b < B; ++b)
            for (int g = 0; g < KV; ++g) {
                float* P = scratchBase + size_t(omp_get_thread_num()) * 2 * TT;
                float* dS = P + TT;
                const size_t kv =
                                 size_t(b) * size_t(Tk) * size_t(kvStride) + size_t(g) * size_t(hd),
                             dkv = size_t(b) * size_t(Tk) * size_t(dkvStride) +
                                   size_t(g) * size_t(hd);
                for (int h = g * group; h < (g + 1) * group; ++h) {
                    const float* qbh =
                        q + size_t(b) * size_t(Tq) * size_t(qStride) + size_t(h) * size_t(hd);
                    const size_t o = size_t(b) * size_t(Tq) * size_t(C) + size_t(h) * size_t(hd);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, hd, scale, qbh,
                                qStride, k + kv, kvStride, 0.0f, P, Tk);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, hd, 1.0f, dout + o,
                                C, v + kv, kvStride, 0.0f, dS, Tk);
                    for (int i = 0; i < Tq; ++i) {
                        const size_t stat =
                            (size_t(b) * size_t(NH) + size_t(h)) * size_t(Tq) + size_t(i);
                        float* p = P + size_t(i) * size_t(Tk);
                        float* ds = dS + size_t(i) * size_t(Tk);
                        for (int j = 0; j < Tk; ++j) {
                            p[j] = kPos[j] <= qPos[i] ? std::exp(p[j] - lse[stat]) : 0.0f;
                            ds[j] = p[j] * (ds[j] - delta[stat]) * scale;
                        }
                    }
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, hd, Tk, 1.0f, dS, Tk,
                                k + kv, kvStride, 1.0f, dq + o, C);
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, hd, Tq, 1.0f, dS, Tk,
                                qbh, qStride, 1.0f, dk + dkv, dkvStride);
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, hd, Tq, 1.0f, P, Tk,
                                dout + o, C, 1.0f, dv + dkv, dkvStride);
                }
            }
    }

    // Per (batch, head): P = softmax(Q K^T / sqrt(hs)) masked causally, O = P V, as GEMMs.
    void attentionForward32(float* out, float* probs, const float* qkv, int B, int T, int C,
                            int NH) {
        const int hs = C / NH, ld = 3 * C;
        const size_t TT = size_t(T) * size_t(T);
        float* scratchBase = probs ? nullptr : scratch(size_t(threads_) * TT).data();
        const SerialBlas serial;
#pragma omp parallel for num_threads(threads_) collapse(2)
        for (int b = 0; b < B; ++b)
            for (int h = 0; h < NH; ++h) {
                const float* q = qkv + size_t(b) * size_t(T) * size_t(ld) + size_t(h) * size_t(hs);
                float* P = probs ? probs + (size_t(b) * size_t(NH) + size_t(h)) * TT
                                 : scratchBase + size_t(omp_get_thread_num()) * TT;
                attentionProbabilities(P, q, q + C, T, hs, ld);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, P, T,
                            q + 2 * C, ld, 0.0f,
                            out + size_t(b) * size_t(T) * size_t(C) + size_t(h) * size_t(hs), C);
            }
    }

    // dP = dO V^T, dS = P (dP - rowsum(P dP)) / sqrt(hs), dQ = dS K, dK = dS^T Q, dV = P^T dO.
    void attentionBackward32(float* dqkv, const float* dout, const float* qkv, const float* probs,
                             int B, int T, int C, int NH) {
        const int hs = C / NH, ld = 3 * C;
        const size_t TT = size_t(T) * size_t(T);
        const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
        float* scratchBase = scratch(size_t(threads_) * 2 * TT).data();
        const SerialBlas serial;
#pragma omp parallel for num_threads(threads_) collapse(2)
        for (int b = 0; b < B; ++b)
            for (int h = 0; h < NH; ++h) {
                float* dP = scratchBase + size_t(omp_get_thread_num()) * 2 * TT;
                float* recomputed = dP + TT;
                const size_t off = size_t(b) * size_t(T) * size_t(ld) + size_t(h) * size_t(hs);
                const float* q = qkv + off;
                const float* P =
                    probs ? probs + (size_t(b) * size_t(NH) + size_t(h)) * TT : recomputed;
                if (!probs)
                    attentionProbabilities(recomputed, q, q + C, T, hs, ld);
                const float* dO = dout + size_t(b) * size_t(T) * size_t(C) + size_t(h) * size_t(hs);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dO, C,
                            q + 2 * C, ld, 0.0f, dP, T);
                for (int t = 0; t < T; ++t)
                    softmaxBackwardRow(dP + size_t(t) * size_t(T), P + size_t(t) * size_t(T), t, T,
                                       scale);
                float* dq = dqkv + off;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, dP, T, q + C,
                            ld, 0.0f, dq, ld);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, dP, T, q, ld,
                            0.0f, dq + C, ld);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, P, T, dO, C,
                            0.0f, dq + 2 * C, ld);
            }
    }

    void geluForward32(float* out, const float* inp, size_t n) {
        parallelChunks(
            n, [&](size_t lo, size_t hi) { geluForwardRange(out + lo, inp + lo, hi - lo); });
    }

    void geluBackward32(float* dinp, const float* inp, const float* dout, size_t n) {
        parallelChunks(n, [&](size_t lo, size_t hi) {
            geluBackwardRange(dinp + lo, inp + lo, dout + lo, hi - lo);
        });
    }

    void add32(float* out, const float* a, const float* b, size_t n) {
#pragma omp parallel for simd
        for (std::ptrdiff_t i = 0; i < sz(n); ++i)
            out[i] = a[i] + b[i];
    }

    void addInPlace32(float* x, const float* y, size_t n) {
#pragma omp parallel for simd
        for (std::ptrdiff_t i = 0; i < sz(n); ++i)
            x[i] += y[i];
    }

    // Sums are taken over fixed chunks and then added in chunk order, so a loss or a norm does
    // not depend on how many threads computed it or which finished first.
    void crossEntropyForwardBackward(float* logits, const std::int32_t* targets, int N, int V,
                                     float gradScale, double* lossSum) override {
        std::vector<double>& rowLoss = partials(size_t(N));
#pragma omp parallel for
        for (int n = 0; n < N; ++n) {
            float* row = logits + size_t(n) * size_t(V);
            float maxval = row[0];
            for (int i = 1; i < V; ++i)
                maxval = std::max(maxval, row[i]);
            const int target = targets[n];
            const float targetLogit = row[target];
            double sum = 0.0;
            for (int i = 0; i < V; ++i) {
                row[i] = expApprox(row[i] - maxval);
                sum += double(row[i]);
            }
            // log-sum-exp from the logits themselves: no cap on a very wrong prediction's loss
            rowLoss[size_t(n)] = std::log(sum) + double(maxval) - double(targetLogit);
            const float inv = static_cast<float>(1.0 / sum);
            for (int i = 0; i < V; ++i)
                row[i] = row[i] * inv * gradScale;
            row[target] -= gradScale;
        }
        lossSum[0] += std::accumulate(rowLoss.begin(), rowLoss.begin() + N, 0.0);
    }

    void crossEntropyShardLoss(const float* max, const float* sumExp, const float* targetLogit,
                               int N, double* lossSum) override {
        double loss = 0;
        for (int n = 0; n < N; ++n)
            loss += std::log(double(sumExp[n])) + double(max[n]) - double(targetLogit[n]);
        lossSum[0] += loss;
    }

    void rowMax(const float* x, int N, int V, float* out) override {
#pragma omp parallel for
        for (int n = 0; n < N; ++n) {
            const float* row = x + size_t(n) * size_t(V);
            float m = row[0];
            for (int i = 1; i < V; ++i)
                m = std::max(m, row[i]);
            out[n] = m;
        }
    }

    void softmaxShardSums(const float* logits, const float* max, const std::int32_t* targets, int N,
                          int V, int vocabStart, float* sumExp, float* targetLogit) override {
#pragma omp parallel for
        for (int n = 0; n < N; ++n) {
            const float* row = logits + size_t(n) * size_t(V);
            double sum = 0.0;
            for (int i = 0; i < V; ++i)
                sum += double(expApprox(row[i] - max[n]));
            sumExp[n] = static_cast<float>(sum);
            const int t = targets[n] - vocabStart;
            targetLogit[n] = t >= 0 && t < V ? row[t] : 0.0f;
        }
    }

    void crossEntropyShardBackward(float* logits, const float* max, const float* sumExp,
                                   const std::int32_t* targets, int N, int V, int vocabStart,
                                   float gradScale) override {
#pragma omp parallel for
        for (int n = 0; n < N; ++n) {
            float* row = logits + size_t(n) * size_t(V);
            const float scale = gradScale / sumExp[n];
            for (int i = 0; i < V; ++i)
                row[i] = expApprox(row[i] - max[n]) * scale;
            const int t = targets[n] - vocabStart;
            if (t >= 0 && t < V)
                row[t] -= gradScale;
        }
    }

    template <typename X> void sumOfSquaresAccumulate32(const X* x, size_t n, double* sum) {
        constexpr size_t kChunk = 65536;
        const size_t chunks = (n + kChunk - 1) / kChunk;
        std::vector<double>& chunkSum = partials(chunks);
#pragma omp parallel for
        for (std::ptrdiff_t c = 0; c < static_cast<std::ptrdiff_t>(chunks); ++c) {
            double s = 0.0;
            const size_t lo = size_t(c) * kChunk, hi = std::min(n, lo + kChunk);
            for (size_t i = lo; i < hi; ++i)
                s += double(load(x, i)) * double(load(x, i));
            chunkSum[size_t(c)] = s;
        }
        sum[0] += std::accumulate(chunkSum.begin(), chunkSum.begin() + std::ptrdiff_t(chunks), 0.0);
    }
    void zeroDoubles(double* x, size_t n) override {
        std::fill(x, x + n, 0.0);
    }

    template <typename Grad>
    void adamwUpdate32(float* param, const Grad* grad, float* m, float* v, size_t n, float lr,
                       float beta1, float beta2, float eps, float weightDecay, float gradScale,
                       int t) {
        const AdamStep step{lr,
                            beta1,
                            beta2,
                            eps,
                            weightDecay,
                            gradScale,
                            1.0f - std::pow(beta1, static_cast<float>(t)),
                            1.0f - std::pow(beta2, static_cast<float>(t))};
        parallelChunks(n, [&](size_t lo, size_t hi) {
            adamwRange(param + lo, grad + lo, m + lo, v + lo, hi - lo, step);
        });
    }

private:
    static size_t rows(int B, int T, int C) {
        return size_t(B) * size_t(T) * size_t(C);
    }
    // Elements from the first of `count` rows `stride` apart to the end of the last one's
    // `width`: what a strided view reads (no further: it may start inside a wider row).
    static size_t extent(int count, int stride, int width) {
        return count > 0 ? size_t(count - 1) * size_t(stride) + size_t(width) : 0;
    }
    // C[M,N] = op(A) op(B) + beta C, C fp32. With a bf16 operand the product is a bf16 GEMM
    // with fp32 accumulation: an fp32 operand is rounded to bf16 first (as autocast casts it),
    // and both are widened to fp32 for sgemm. Widening is exact (every bf16 value is an fp32
    // value) and so is the product of two bf16 values in fp32, so this is a bf16 GEMM's
    // arithmetic; Debian 12's OpenBLAS is built without its own (cblas_sbgemm is declared but
    // not exported), so the speed is fp32's.
    void gemm(bool transA, bool transB, int M, int N, int K, ConstPtr A, int lda, ConstPtr B,
              int ldb, float beta, float* C, int ldc) {
        const auto ta = transA ? CblasTrans : CblasNoTrans, tb = transB ? CblasTrans : CblasNoTrans;
        const bool bf16Product = A.type == DType::BF16 || B.type == DType::BF16;
        const size_t mark = wide_.used();
        const float* a = bf16Product ? bf16Values(A, size_t(transA ? K : M) * size_t(lda))
                                     : static_cast<const float*>(A.data);
        const float* b = bf16Product ? bf16Values(B, size_t(transB ? N : K) * size_t(ldb))
                                     : static_cast<const float*>(B.data);
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a, lda, b, ldb, beta, C, ldc);
        wide_.giveBackTo(mark);
    }
    // The values of p as bf16 holds them, in fp32.
    const float* bf16Values(ConstPtr p, size_t n) {
        float* out = wide_.take(n);
        if (p.type == DType::BF16)
            widen(out, bf16(p), n);
        else
            roundToBf16(out, static_cast<const float*>(p.data), n);
        return out;
    }

    // dbias[OC] += column sums of dout[N, OC].
    void biasGradientAccumulate(float* dbias, const float* dout, int N, int OC) {
        // Each thread owns a slice of columns and walks the rows in order: contiguous reads.
#pragma omp parallel
        {
            const int team = omp_get_num_threads(), id = omp_get_thread_num();
            const int lo = OC * id / team, hi = OC * (id + 1) / team;
            for (int n = 0; n < N; ++n) {
                const float* row = dout + size_t(n) * size_t(OC);
#pragma omp simd
                for (int o = lo; o < hi; ++o)
                    dbias[o] += row[o];
            }
        }
    }

    std::vector<double>& partials(size_t n) {
        if (partials_.size() < n)
            partials_.resize(n);
        return partials_;
    }
    std::vector<float>& scratch(size_t n) {
        if (scratch_.size() < n)
            scratch_.resize(n);
        return scratch_;
    }
    int threads_;
    CpuStream compute_;
    std::vector<float> scratch_;
    std::vector<double> partials_;
    ScratchPool<float> wide_;           // fp32 copies of bf16 operands
    ScratchPool<std::uint16_t> narrow_; // bf16 copies of fp32 GEMM operands
};

} // namespace

int cpuCores() {
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

namespace {

// The highest clock the kernel reports for cpu0, in GHz; /proc/cpuinfo's current clock otherwise.
double cpuGigahertz() {
    if (std::FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "r")) {
        double khz = 0;
        const int n = std::fscanf(f, "%lf", &khz);
        std::fclose(f);
        if (n == 1 && khz > 0)
            return khz / 1e6;
    }
    std::ifstream info("/proc/cpuinfo");
    std::string line;
    while (std::getline(info, line))
        if (line.starts_with("cpu MHz"))
            if (const auto colon = line.find(':'); colon != std::string::npos)
                return std::atof(line.c_str() + colon + 1) / 1e3;
    return 0;
}

} // namespace

PeakFlops estimateCpuPeakFlops(int threads) {
    const int n = threads > 0 ? threads : cpuCores();
    int lanes = 4, fmaUnits = 1;
    std::string isa = "SSE";
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        lanes = 16, fmaUnits = 2, isa = "AVX-512";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        lanes = 8, fmaUnits = 2, isa = "AVX2";
    }
#else
    isa = "128-bit SIMD";
#endif
    const int perCycle = lanes * fmaUnits * 2; // an FMA is two FLOPs
    const double ghz = cpuGigahertz();
    if (ghz <= 0)
        return {0, "unknown: this system does not report its CPU clock; give the peak with "
                   "--peak-tflops to get MFU"};
    char text[200];
    std::snprintf(text, sizeof text,
                  "%d cores x %.2f GHz x %d FLOP/cycle (%s: %d FMA units x %d fp32 lanes x 2)", n,
                  ghz, perCycle, isa.c_str(), fmaUnits, lanes);
    return {double(n) * ghz * 1e9 * perCycle, text};
}

std::unique_ptr<Ops> makeCpuOps(int threads) {
    const int n = threads > 0 ? threads : cpuCores();
    openblas_set_num_threads(n);
    omp_set_num_threads(n);
    return std::make_unique<CpuOps>(n);
}

} // namespace shardscope::kernels
