// Ring attention's block operators. Every kernel but two gives one row of its result to one warp
// (a grid-stride loop over warps): the lanes split the head's channels (lane l takes channels
// l + 32t), a score or a dot product is summed across the warp by a butterfly of shuffles (the
// same bits in every lane, so every branch on it is uniform), and the warp alone writes its row:
//   forward   warp per (batch, query head, query row): the block's maximum score, then the
//             merge into the running acc, max and sum (the scores computed again, not stored);
//   delta     warp per (batch, query head, query row);
//   dq        warp per (batch, query head, query row), over the block's keys;
//   dk, dv    warp per (batch, key row, key and value head), over every query head of the group
//             and every query row: the sum over the group needs no atomics, and runs in the
//             CPU's order (heads, then rows).
// finish and copyRows take one thread per element. A lane holds up to 8 channels in registers at
// a time; wider heads (more than 256 channels) take several passes over the keys.
#include "device_elements.cuh"
#include "ring_attention.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace shardscope::cuda {

namespace {

using namespace detail;

constexpr int kWarp = 32;
constexpr unsigned kAllLanes = 0xffffffffu;
constexpr int kPerLane = 8;              // channels a lane holds in registers in one pass
constexpr int kChunk = kWarp * kPerLane; // channels one pass covers
static_assert(kThreads % kWarp == 0, "a block is whole warps");

__device__ inline int laneId() {
    return int(threadIdx.x % kWarp);
}
__device__ inline std::size_t firstWarp() {
    return (blockIdx.x * std::size_t(blockDim.x) + threadIdx.x) / kWarp;
}
__device__ inline std::size_t warpStride() {
    return std::size_t(gridDim.x) * blockDim.x / kWarp;
}
// Blocks for one warp per row.
unsigned blocksForWarps(std::size_t rows) {
    return blocksFor(rows * kWarp);
}

// The sum of every lane's value, in every lane (xor butterfly: each step adds two values in either
// order, which is the same bits, so every lane ends with the same sum).
__device__ inline float warpSum(float x) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
        x += __shfl_xor_sync(kAllLanes, x, offset);
    return x;
}

// a . b over hd channels, in every lane of the warp.
template <typename A, typename B> __device__ float rowDot(const A* a, const B* b, int hd) {
    float partial = 0.0f;
    for (int d = laneId(); d < hd; d += kWarp)
        partial = fmaf(load(a, d), load(b, d), partial);
    return warpSum(partial);
}

// Where the rows of one block live.
struct Shape {
    int Tq, Tk, NH, KV, hd, qStride, kvStride;
    float scale; // 1 / sqrt(hd)
    __device__ int group() const { return NH / KV; }
    // Query head h of row i of batch b in q.
    __device__ std::size_t queryAt(int b, int i, int h) const {
        return (std::size_t(b) * std::size_t(Tq) + std::size_t(i)) * std::size_t(qStride) +
               std::size_t(h) * std::size_t(hd);
    }
    // Key and value head g of row j of batch b, rows `stride` apart.
    __device__ std::size_t keyAt(int b, int j, int g, int stride) const {
        return (std::size_t(b) * std::size_t(Tk) + std::size_t(j)) * std::size_t(stride) +
               std::size_t(g) * std::size_t(hd);
    }
    // Head h of row i of batch b in a contiguous [B, Tq, NH hd] tensor (acc, out, dout, dq).
    __device__ std::size_t outputAt(int b, int i, int h) const {
        return (std::size_t(b) * std::size_t(Tq) + std::size_t(i)) * std::size_t(NH) *
                   std::size_t(hd) +
               std::size_t(h) * std::size_t(hd);
    }
    // Row r = (b NH + h) Tq + i of the [B, NH, Tq] statistics, taken apart.
    __device__ void statistic(std::size_t r, int& b, int& h, int& i) const {
        i = int(r % std::size_t(Tq));
        h = int(r / std::size_t(Tq) % std::size_t(NH));
        b = int(r / (std::size_t(Tq) * std::size_t(NH)));
    }
};

Shape shapeOf(int Tq, int Tk, int NH, int KV, int hd, int qStride, int kvStride) {
    if (KV <= 0 || NH % KV != 0)
        throw std::logic_error("ring attention: " + std::to_string(NH) +
                               " query heads do not group over " + std::to_string(KV) +
                               " key and value heads");
    return {Tq, Tk, NH, KV, hd, qStride, kvStride, 1.0f / std::sqrt(float(hd))};
}

// The merge of one block into a query row's running softmax: the block's maximum score first,
// then acc and sum scaled to the new maximum and the block's terms added.
template <typename Q, typename K, typename V>
__global__ void blockForwardKernel(float* acc, float* rowMax, float* rowSum, const Q* q, const K* k,
                                   const V* v, const std::int32_t* qPos, const std::int32_t* kPos,
                                   Shape s, std::size_t rows) {
    for (std::size_t r = firstWarp(); r < rows; r += warpStride()) {
        int b, h, i;
        s.statistic(r, b, h, i);
        const int g = h / s.group(), position = qPos[i];
        const Q* qi = q + s.queryAt(b, i, h);
        float blockMax = -INFINITY;
        for (int j = 0; j < s.Tk; ++j)
            if (kPos[j] <= position)
                blockMax =
                    fmaxf(blockMax, rowDot(qi, k + s.keyAt(b, j, g, s.kvStride), s.hd) * s.scale);
        if (blockMax == -INFINITY)
            continue; // no key of this block is visible to this query
        const float newMax = fmaxf(rowMax[r], blockMax);
        const float keep = expf(rowMax[r] - newMax); // 0 when the old maximum is -infinity
        float* out = acc + s.outputAt(b, i, h);
        float sum = rowSum[r] * keep;
        for (int c0 = 0; c0 < s.hd; c0 += kChunk) {
            float a[kPerLane];
#pragma unroll
            for (int t = 0; t < kPerLane; ++t) {
                const int d = c0 + laneId() + kWarp * t;
                a[t] = d < s.hd ? out[d] * keep : 0.0f;
            }
            for (int j = 0; j < s.Tk; ++j) {
                if (kPos[j] > position)
                    continue;
                const std::size_t at = s.keyAt(b, j, g, s.kvStride);
                const float p = expf(rowDot(qi, k + at, s.hd) * s.scale - newMax);
                if (c0 == 0)
                    sum += p;
#pragma unroll
                for (int t = 0; t < kPerLane; ++t) {
                    const int d = c0 + laneId() + kWarp * t;
                    if (d < s.hd)
                        a[t] = fmaf(p, load(v, at + std::size_t(d)), a[t]);
                }
            }
#pragma unroll
            for (int t = 0; t < kPerLane; ++t) {
                const int d = c0 + laneId() + kWarp * t;
                if (d < s.hd)
                    out[d] = a[t];
            }
        }
        __syncwarp(); // every lane has read rowMax[r] and rowSum[r] before lane 0 writes them
        if (laneId() == 0) {
            rowMax[r] = newMax;
            rowSum[r] = sum;
        }
    }
}

// One thread per output element; the thread of channel 0 writes the row's lse (the only thread
// that reads rowMax[r], so lse may alias it).
template <typename Out>
__global__ void blockFinishKernel(Out* out, float* lse, const float* acc, const float* rowMax,
                                  const float* rowSum, int Tq, int NH, int hd, std::size_t n) {
    SHARDSCOPE_GRID_STRIDE(e, n) {
        const std::size_t d = e % std::size_t(hd), h = e / std::size_t(hd) % std::size_t(NH),
                          row = e / (std::size_t(hd) * std::size_t(NH));
        const std::size_t b = row / std::size_t(Tq), i = row % std::size_t(Tq);
        const std::size_t r = (b * std::size_t(NH) + h) * std::size_t(Tq) + i;
        const float sum = rowSum[r], inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        store(out, e, acc[e] * inv);
        if (d == 0)
            lse[r] = sum > 0.0f ? rowMax[r] + logf(sum) : -INFINITY;
    }
}

template <typename D, typename O>
__global__ void blockDeltaKernel(float* delta, const D* dout, const O* out, Shape s,
                                 std::size_t rows) {
    for (std::size_t r = firstWarp(); r < rows; r += warpStride()) {
        int b, h, i;
        s.statistic(r, b, h, i);
        const std::size_t at = s.outputAt(b, i, h);
        const float sum = rowDot(dout + at, out + at, s.hd);
        if (laneId() == 0)
            delta[r] = sum;
    }
}

// p = exp(q . k scale - lse) and dS = p (dout . v - delta) scale of one (query, key) pair, the
// same code (and bits) in the dq and the dk, dv kernels.
struct Pair {
    float p, ds;
};
template <typename Q, typename K, typename V, typename D>
__device__ Pair pairGradient(const Q* qi, const K* kj, const V* vj, const D* doi, float lse,
                             float delta, const Shape& s) {
    float score = 0.0f, dp = 0.0f;
    for (int d = laneId(); d < s.hd; d += kWarp) {
        score = fmaf(load(qi, d), load(kj, d), score);
        dp = fmaf(load(doi, d), load(vj, d), dp);
    }
    score = warpSum(score);
    dp = warpSum(dp);
    const float p = expf(score * s.scale - lse);
    return {p, p * (dp - delta) * s.scale};
}

// dq of one query row of one head: its own warp's registers, over the block's keys in order.
template <typename D, typename Q, typename K, typename V>
__global__ void blockQueryGradientKernel(float* dq, const D* dout, const float* lse,
                                         const float* delta, const Q* q, const K* k, const V* v,
                                         const std::int32_t* qPos, const std::int32_t* kPos,
                                         Shape s, std::size_t rows) {
    for (std::size_t r = firstWarp(); r < rows; r += warpStride()) {
        int b, h, i;
        s.statistic(r, b, h, i);
        const int g = h / s.group(), position = qPos[i];
        const Q* qi = q + s.queryAt(b, i, h);
        const D* doi = dout + s.outputAt(b, i, h);
        float* dqi = dq + s.outputAt(b, i, h);
        const float rowLse = lse[r], rowDelta = delta[r];
        for (int c0 = 0; c0 < s.hd; c0 += kChunk) {
            float a[kPerLane];
#pragma unroll
            for (int t = 0; t < kPerLane; ++t) {
                const int d = c0 + laneId() + kWarp * t;
                a[t] = d < s.hd ? dqi[d] : 0.0f;
            }
            for (int j = 0; j < s.Tk; ++j) {
                if (kPos[j] > position)
                    continue;
                const std::size_t at = s.keyAt(b, j, g, s.kvStride);
                const Pair pg = pairGradient(qi, k + at, v + at, doi, rowLse, rowDelta, s);
#pragma unroll
                for (int t = 0; t < kPerLane; ++t) {
                    const int d = c0 + laneId() + kWarp * t;
                    if (d < s.hd)
                        a[t] = fmaf(pg.ds, load(k, at + std::size_t(d)), a[t]);
                }
            }
#pragma unroll
            for (int t = 0; t < kPerLane; ++t) {
                const int d = c0 + laneId() + kWarp * t;
                if (d < s.hd)
                    dqi[d] = a[t];
            }
        }
    }
}

// dk and dv of one key row of one key and value head: its own warp, over the group's query heads
// and the query rows that see the key.
template <typename D, typename Q, typename K, typename V>
__global__ void blockKeyGradientKernel(float* dk, float* dv, int dkvStride, const D* dout,
                                       const float* lse, const float* delta, const Q* q, const K* k,
                                       const V* v, const std::int32_t* qPos,
                                       const std::int32_t* kPos, Shape s, std::size_t rows) {
    for (std::size_t w = firstWarp(); w < rows; w += warpStride()) { // w = (b Tk + j) KV + g
        const int g = int(w % std::size_t(s.KV)),
                  j = int(w / std::size_t(s.KV) % std::size_t(s.Tk)),
                  b = int(w / (std::size_t(s.KV) * std::size_t(s.Tk)));
        const int position = kPos[j], group = s.group();
        const std::size_t at = s.keyAt(b, j, g, s.kvStride),
                          gradientAt = s.keyAt(b, j, g, dkvStride);
        float* dkj = dk + gradientAt;
        float* dvj = dv + gradientAt;
        for (int c0 = 0; c0 < s.hd; c0 += kChunk) {
            float ak[kPerLane], av[kPerLane];
#pragma unroll
            for (int t = 0; t < kPerLane; ++t) {
                const int d = c0 + laneId() + kWarp * t;
                ak[t] = d < s.hd ? dkj[d] : 0.0f;
                av[t] = d < s.hd ? dvj[d] : 0.0f;
            }
            for (int h = g * group; h < (g + 1) * group; ++h)
                for (int i = 0; i < s.Tq; ++i) {
                    if (position > qPos[i])
                        continue;
                    const std::size_t r =
                        (std::size_t(b) * std::size_t(s.NH) + std::size_t(h)) * std::size_t(s.Tq) +
                        std::size_t(i);
                    const Q* qi = q + s.queryAt(b, i, h);
                    const D* doi = dout + s.outputAt(b, i, h);
                    const Pair pg = pairGradient(qi, k + at, v + at, doi, lse[r], delta[r], s);
#pragma unroll
                    for (int t = 0; t < kPerLane; ++t) {
                        const int d = c0 + laneId() + kWarp * t;
                        if (d < s.hd) {
                            ak[t] = fmaf(pg.ds, load(qi, d), ak[t]);
                            av[t] = fmaf(pg.p, load(doi, d), av[t]);
                        }
                    }
                }
#pragma unroll
            for (int t = 0; t < kPerLane; ++t) {
                const int d = c0 + laneId() + kWarp * t;
                if (d < s.hd) {
                    dkj[d] = ak[t];
                    dvj[d] = av[t];
                }
            }
        }
    }
}

// One thread per element; the same type copies the bits.
template <typename Out, typename In>
__global__ void copyRowsKernel(Out* dst, int dstStride, const In* src, int srcStride, int cols,
                               std::size_t n) {
    SHARDSCOPE_GRID_STRIDE(e, n) {
        const std::size_t r = e / std::size_t(cols), c = e % std::size_t(cols);
        const std::size_t to = r * std::size_t(dstStride) + c,
                          from = r * std::size_t(srcStride) + c;
        if constexpr (std::is_same_v<Out, In>)
            dst[to] = src[from];
        else
            store(dst, to, load(src, from));
    }
}

} // namespace

void attentionBlockForward(float* acc, float* rowMax, float* rowSum, kernels::ConstPtr q,
                           int qStride, kernels::ConstPtr k, kernels::ConstPtr v, int kvStride,
                           const std::int32_t* qPos, const std::int32_t* kPos, int B, int Tq,
                           int Tk, int NH, int KV, int hd, void* stream) {
    const std::size_t rows = std::size_t(B) * std::size_t(NH) * std::size_t(Tq);
    if (rows == 0 || Tk <= 0 || hd <= 0)
        return;
    const Shape s = shapeOf(Tq, Tk, NH, KV, hd, qStride, kvStride);
    withElements(q, [&](const auto* qe) {
        withElements(k, [&](const auto* ke) {
            withElements(v, [&](const auto* ve) {
                blockForwardKernel<<<blocksForWarps(rows), kThreads, 0, streamOf(stream)>>>(
                    acc, rowMax, rowSum, qe, ke, ve, qPos, kPos, s, rows);
            });
        });
    });
    checkLaunch("attentionBlockForward");
}

void attentionBlockFinish(kernels::Ptr out, float* lse, const float* acc, const float* rowMax,
                          const float* rowSum, int B, int Tq, int NH, int hd, void* stream) {
    const std::size_t n =
        std::size_t(B) * std::size_t(Tq) * std::size_t(NH) * std::size_t(hd > 0 ? hd : 0);
    if (n == 0)
        return;
    withElements(out, [&](auto* o) {
        blockFinishKernel<<<blocksFor(n), kThreads, 0, streamOf(stream)>>>(o, lse, acc, rowMax,
                                                                           rowSum, Tq, NH, hd, n);
    });
    checkLaunch("attentionBlockFinish");
}

void attentionBlockDelta(float* delta, kernels::ConstPtr dout, kernels::ConstPtr out, int B, int Tq,
                         int NH, int hd, void* stream) {
    const std::size_t rows = std::size_t(B) * std::size_t(NH) * std::size_t(Tq);
    if (rows == 0)
        return;
    const Shape s{Tq, 0, NH, 1, hd, 0, 0, 0.0f};
    withElements(dout, [&](const auto* d) {
        withElements(out, [&](const auto* o) {
            blockDeltaKernel<<<blocksForWarps(rows), kThreads, 0, streamOf(stream)>>>(delta, d, o,
                                                                                      s, rows);
        });
    });
    checkLaunch("attentionBlockDelta");
}

void attentionBlockBackward(float* dq, float* dk, float* dv, int dkvStride, kernels::ConstPtr dout,
                            const float* lse, const float* delta, kernels::ConstPtr q, int qStride,
                            kernels::ConstPtr k, kernels::ConstPtr v, int kvStride,
                            const std::int32_t* qPos, const std::int32_t* kPos, int B, int Tq,
                            int Tk, int NH, int KV, int hd, void* stream) {
    const std::size_t queryRows = std::size_t(B) * std::size_t(NH) * std::size_t(Tq),
                      keyRows = std::size_t(B) * std::size_t(Tk) * std::size_t(KV > 0 ? KV : 0);
    if (queryRows == 0 || keyRows == 0 || hd <= 0)
        return;
    const Shape s = shapeOf(Tq, Tk, NH, KV, hd, qStride, kvStride);
    withElements(dout, [&](const auto* de) {
        withElements(q, [&](const auto* qe) {
            withElements(k, [&](const auto* ke) {
                withElements(v, [&](const auto* ve) {
                    blockQueryGradientKernel<<<blocksForWarps(queryRows), kThreads, 0,
                                               streamOf(stream)>>>(dq, de, lse, delta, qe, ke, ve,
                                                                   qPos, kPos, s, queryRows);
                    checkLaunch("attentionBlockBackward (queries)");
                    blockKeyGradientKernel<<<blocksForWarps(keyRows), kThreads, 0,
                                             streamOf(stream)>>>(
                        dk, dv, dkvStride, de, lse, delta, qe, ke, ve, qPos, kPos, s, keyRows);
                    checkLaunch("attentionBlockBackward (keys)");
                });
            });
        });
    });
}

void copyRows(kernels::Ptr dst, int dstStride, kernels::ConstPtr src, int srcStride, int rows,
              int cols, void* stream) {
    if (rows <= 0 || cols <= 0)
        return;
    const std::size_t n = std::size_t(rows) * std::size_t(cols);
    withElements(dst, [&](auto* d) {
        withElements(src, [&](const auto* x) {
            copyRowsKernel<<<blocksFor(n), kThreads, 0, streamOf(stream)>>>(d, dstStride, x,
                                                                            srcStride, cols, n);
        });
    });
    checkLaunch("copyRows");
}

} // namespace shardscope::cuda
