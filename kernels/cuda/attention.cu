// Causal attention in tiles, FlashAttention's way: a block takes a tile of queries (or keys) of
// one (batch, head) and walks the tiles of keys (or queries) it meets, holding each in shared
// memory; the T x T scores exist only a tile at a time. Three kernels:
//   forward    per query tile: the rows' softmax statistics (running maximum and sum over the key
//              tiles), then P = exp(s - max) / sum tile by tile, out = P V (and P stored if asked);
//   query pass per query tile: the statistics again (or P read back), D = rowsum(P dP) with
//              dP = dO V^T, then dS = P (dP - D) / sqrt(hs) and dq = dS K;
//   key pass   per key tile: P and dS of every later query tile again, dk = dS^T Q, dv = P^T dO.
// Every product of bf16 activations runs on the tensor cores (wmma, bf16 operands, fp32 sums):
// the score products (Q K^T, dO V^T) directly, those with P or dS (P V, dS K, dS^T Q, P^T dO) with
// each weight as two bf16 halves, hi + lo, so P and dS keep 16 bits of their significand where
// FlashAttention-2 rounds them to bf16's 8. fp32 activations run every product as one thread's
// fmaf chain. Every score and probability is the same code
// on the same tiles in all three kernels: the backward that recomputes P gets the bits of the one
// that reads fp32 P back, and every sum runs in a fixed order (no atomics), so a run repeats its
// bits. __fmul_rn keeps the compiler from fusing a scale into a neighbouring add, which would
// change the bits between kernels.
//
// Threads: 256 as 16 x 16; thread (ty, tx) owns rows ty + 16a and columns tx + 16b of a score tile
// (and, for fp32 activations, rows ty + 16a, channels tx + 16c of an output tile; for bf16 each
// warp owns 16 x 16 blocks of it on the tensor cores). Tiles of 64 for heads of up to 128 channels,
// of 32 up to 256.
#include "attention.h"
#include "device_elements.cuh"

#include <cmath>
#include <cstdint>
#include <mma.h>
#include <string>
#include <type_traits>

namespace shardscope::cuda {

namespace {

using namespace detail;

constexpr int kSide = 16; // threads per side of the 16 x 16 block
static_assert(kSide * kSide == kThreads, "the tiles assume a block of 256 threads");
constexpr int kWarps = kThreads / 32;
// Registers capped for two blocks per multiprocessor: at one (the query pass took 138 registers a
// thread for GPT-2's heads) a block's barriers leave the multiprocessor idle.
constexpr int kBlocksPerSm = 2;

// A score tile's row stride in floats: a multiple of 4, as the tensor cores' stores want.
template <int kTile> __host__ __device__ constexpr int scoreLd() {
    return kTile + 4;
}

// A kernel's dynamic shared memory, carved into pieces that each start on 128 bytes (the tensor
// cores' loads and stores want 32); the host sizes it with the same sums.
__host__ __device__ constexpr std::size_t carved(std::size_t bytes) {
    return (bytes + 127) / 128 * 128;
}
struct Carver {
    unsigned char* next;
    template <typename T> __device__ T* take(std::size_t count) {
        T* piece = reinterpret_cast<T*>(next);
        next += carved(count * sizeof(T));
        return piece;
    }
};

// Where one (batch, head, position) row lives.
struct Rows {
    int T, C, NH, hs;
    int hsPad;   // channels a tile row holds: hs, rounded up to 16 for the tensor cores (zeros)
    int ld;      // a tile row's stride in shared memory (elements)
    float scale; // 1 / sqrt(hs)
    bool wide;   // bf16 rows read 16 bytes at a time (every row's channels start on 16 bytes)
    // Element offset of head h of position t of batch b in a [B,T,width] tensor.
    __device__ std::size_t at(std::size_t bh, int t, int width) const {
        const std::size_t b = bh / std::size_t(NH), h = bh % std::size_t(NH);
        return (b * std::size_t(T) + std::size_t(t)) * std::size_t(width) + h * std::size_t(hs);
    }
    __device__ std::size_t prob(std::size_t bh, int t, int j) const {
        return (bh * std::size_t(T) + std::size_t(t)) * std::size_t(T) + std::size_t(j);
    }
};

// Which rows of which tensor a tile holds: q, k, v of qkv[B,T,3C]; out or dout of [B,T,C].
struct Part {
    int width, offset; // the tensor's row width, and the part's first channel in it
};
__device__ Part queries(const Rows& r) {
    return {3 * r.C, 0};
}
__device__ Part keys(const Rows& r) {
    return {3 * r.C, r.C};
}
__device__ Part values(const Rows& r) {
    return {3 * r.C, 2 * r.C};
}
__device__ Part outputs(const Rows& r) {
    return {r.C, 0};
}

// dst[i][d] = rows t0 + i of `part`; rows past the sequence and channels past hs read as zeros.
template <int kTile, typename In>
__device__ void loadTile(In* dst, const In* src, Part part, const Rows& r, std::size_t bh, int t0) {
    if constexpr (std::is_same_v<In, bf16>)
        if (r.wide) { // 8 channels a load: a tile row's stride and padding are multiples of 8
            const int pieces = r.hsPad / 8;
            for (int e = threadIdx.x; e < kTile * pieces; e += kThreads) {
                const int i = e / pieces, d = e % pieces * 8, t = t0 + i;
                uint4 v = make_uint4(0, 0, 0, 0);
                if (t < r.T && d < r.hs)
                    v = *reinterpret_cast<const uint4*>(src + r.at(bh, t, part.width) +
                                                        std::size_t(part.offset + d));
                *reinterpret_cast<uint4*>(dst + i * r.ld + d) = v;
            }
            return;
        }
    for (int e = threadIdx.x; e < kTile * r.hsPad; e += kThreads) {
        const int i = e / r.hsPad, d = e % r.hsPad, t = t0 + i;
        dst[i * r.ld + d] = t < r.T && d < r.hs
                                ? src[r.at(bh, t, part.width) + std::size_t(part.offset + d)]
                                : In(0.0f);
    }
}

// Channels tx + 16c of the rows t0 + ty + 16x of `part`, from acc, for the rows in the sequence.
template <int kR, int kCols, typename Out>
__device__ void storeTile(Out* dst, const float (&acc)[kR][kCols], Part part, const Rows& r,
                          std::size_t bh, int t0) {
    const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
#pragma unroll
    for (int x = 0; x < kR; ++x)
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
            const int t = t0 + ty + kSide * x, d = tx + kSide * c;
            if (t < r.T && d < r.hs)
                store(dst, r.at(bh, t, part.width) + std::size_t(part.offset + d), acc[x][c]);
        }
}

// acc[x][y] = a's row ty + 16x . b's row tx + 16y over the channels. Every thread of the block
// calls it. bf16 tiles: on the tensor cores, each warp two of the 16 x 16 blocks of the product,
// through `scratch` (a score tile); fp32 tiles: one fmaf chain per score, channels ascending.
template <int kR, int kTile, typename Tile>
__device__ void rowProducts(float (&acc)[kR][kR], const Tile* a, const Tile* b, float* scratch,
                            const Rows& r) {
    const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
    if constexpr (std::is_same_v<Tile, bf16>) {
        namespace wmma = nvcuda::wmma;
        constexpr int kBlocks = kTile / 16;
        for (int f = int(threadIdx.x) / 32; f < kBlocks * kBlocks; f += kWarps) {
            const int fi = f / kBlocks, fj = f % kBlocks;
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> sum;
            wmma::fill_fragment(sum, 0.0f);
            for (int k = 0; k < r.hsPad; k += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb;
                wmma::load_matrix_sync(fa, a + fi * 16 * r.ld + k, unsigned(r.ld));
                wmma::load_matrix_sync(fb, b + fj * 16 * r.ld + k, unsigned(r.ld));
                wmma::mma_sync(sum, fa, fb, sum);
            }
            wmma::store_matrix_sync(scratch + fi * 16 * scoreLd<kTile>() + fj * 16, sum,
                                    unsigned(scoreLd<kTile>()), wmma::mem_row_major);
        }
        __syncthreads();
#pragma unroll
        for (int x = 0; x < kR; ++x)
#pragma unroll
            for (int y = 0; y < kR; ++y)
                acc[x][y] = scratch[(ty + kSide * x) * scoreLd<kTile>() + tx + kSide * y];
        __syncthreads(); // before the caller writes over scratch
    } else {
#pragma unroll
        for (int x = 0; x < kR; ++x)
#pragma unroll
            for (int y = 0; y < kR; ++y)
                acc[x][y] = 0.0f;
        for (int d = 0; d < r.hs; ++d) {
            float av[kR], bv[kR];
#pragma unroll
            for (int x = 0; x < kR; ++x) {
                av[x] = a[(ty + kSide * x) * r.ld + d];
                bv[x] = b[(tx + kSide * x) * r.ld + d];
            }
#pragma unroll
            for (int x = 0; x < kR; ++x)
#pragma unroll
                for (int y = 0; y < kR; ++y)
                    acc[x][y] = fmaf(av[x], bv[y], acc[x][y]);
        }
    }
}

// acc[x][c] += sum over the tile's rows j, ascending, of w[row ty + 16x][j] * tile[j][tx + 16c]
// (w[j][row ty + 16x] when transposed), w a score tile.
template <int kR, int kCols, int kTile, bool kTransposed, typename Tile>
__device__ void accumulateProducts(float (&acc)[kR][kCols], const float* w, const Tile* tile,
                                   const Rows& r) {
    const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
    for (int j = 0; j < kTile; ++j)
#pragma unroll
        for (int x = 0; x < kR; ++x) {
            const int row = ty + kSide * x;
            const float weight =
                kTransposed ? w[j * scoreLd<kTile>() + row] : w[row * scoreLd<kTile>() + j];
#pragma unroll
            for (int c = 0; c < kCols; ++c) {
                const int d = tx + kSide * c;
                if (d < r.hs)
                    acc[x][c] = fmaf(weight, load(tile, std::size_t(j * r.ld + d)), acc[x][c]);
            }
        }
}

// The weights of a product with P or dS, a kTile x kTile tile in shared memory (row i, column j).
// fp32 activations: the fp32 values. bf16: two bf16 tiles, hi = bf16(w) and lo = bf16(w - hi)
// (w - hi is exact in fp32), which the tensor cores take as two products summed in fp32: w to a
// relative 2^-17 instead of bf16's 2^-9, so the results stay within the tests' fp32 tolerance of
// the CPU's.
template <int kTile, typename In> struct Weights;
template <int kTile> struct Weights<kTile, float> {
    static constexpr int kLd = scoreLd<kTile>();
    float* w;
    __host__ __device__ static constexpr std::size_t bytes() {
        return carved(std::size_t(kTile) * kLd * sizeof(float));
    }
    __device__ static Weights take(Carver& c) { return {c.take<float>(std::size_t(kTile) * kLd)}; }
    __device__ static Weights at(unsigned char* p) { return {reinterpret_cast<float*>(p)}; }
    __device__ void put(int i, int j, float v) const { w[i * kLd + j] = v; }
};
template <int kTile> struct Weights<kTile, bf16> {
    static constexpr int kLd = kTile + 8; // 16 bytes more a row: off the banks' period
    bf16 *hi, *lo;
    __host__ __device__ static constexpr std::size_t bytes() {
        return 2 * carved(std::size_t(kTile) * kLd * sizeof(bf16));
    }
    __device__ static Weights take(Carver& c) {
        bf16* h = c.take<bf16>(std::size_t(kTile) * kLd);
        return {h, c.take<bf16>(std::size_t(kTile) * kLd)};
    }
    __device__ static Weights at(unsigned char* p) {
        return {reinterpret_cast<bf16*>(p),
                reinterpret_cast<bf16*>(p + carved(std::size_t(kTile) * kLd * sizeof(bf16)))};
    }
    __device__ void put(int i, int j, float v) const {
        const bf16 h = __float2bfloat16_rn(v);
        hi[i * kLd + j] = h;
        lo[i * kLd + j] = __float2bfloat16_rn(v - __bfloat162float(h));
    }
};

// An output tile (kTile rows of up to kCols x 16 channels) summed over products of weights (or
// their transpose) with tiles of rows: out += W tile, or W^T tile. Every thread calls add and
// store; the weights and the tile are in shared memory, written before a barrier.
template <int kTile, int kCols, typename In> struct OutputTile;

// fp32: thread (ty, tx) holds rows ty + 16x, channels tx + 16c in registers; fmaf chains.
template <int kTile, int kCols> struct OutputTile<kTile, kCols, float> {
    static constexpr int kR = kTile / kSide;
    float acc[kR][kCols] = {};
    template <bool kTransposed>
    __device__ void add(const Weights<kTile, float>& w, const float* tile, const Rows& r) {
        accumulateProducts<kR, kCols, kTile, kTransposed>(acc, w.w, tile, r);
    }
    __device__ void store(float* dst, Part part, const Rows& r, std::size_t bh, int t0, float*) {
        storeTile(dst, acc, part, r, bh, t0);
    }
};

// bf16: 16 x 16 blocks of fp32 sums on the tensor cores. Warp w holds the blocks f = w + 8m
// (m < kFragments): row block f % kBlocks, the same for all of a warp's blocks, so one weight
// fragment serves them all; column block f / kBlocks.
template <int kTile, int kCols> struct OutputTile<kTile, kCols, bf16> {
    static constexpr int kBlocks = kTile / 16, kFragments = kBlocks * kCols / kWarps;
    static_assert(kWarps % kBlocks == 0 && kFragments * kWarps == kBlocks * kCols,
                  "every warp holds whole blocks of one row block");
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc[kFragments];

    __device__ OutputTile() {
#pragma unroll
        for (int m = 0; m < kFragments; ++m)
            nvcuda::wmma::fill_fragment(acc[m], 0.0f);
    }
    __device__ static int rowBlock() {
        return int(threadIdx.x / 32) % kBlocks;
    }
    __device__ static int columnBlock(int m) {
        return (int(threadIdx.x / 32) + kWarps * m) / kBlocks;
    }

    template <bool kTransposed>
    __device__ void add(const Weights<kTile, bf16>& w, const bf16* tile, const Rows& r) {
        namespace wmma = nvcuda::wmma;
        using Layout = std::conditional_t<kTransposed, wmma::col_major, wmma::row_major>;
        constexpr int ld = Weights<kTile, bf16>::kLd;
        const int fi = rowBlock();
        for (int k = 0; k < kTile; k += 16) {
            // W's rows fi..fi+15, columns k..k+15; W^T's: column-major from W's rows k.., columns
            // fi..
            const int at = kTransposed ? k * ld + fi * 16 : fi * 16 * ld + k;
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, Layout> hi, lo;
            wmma::load_matrix_sync(hi, w.hi + at, unsigned(ld));
            wmma::load_matrix_sync(lo, w.lo + at, unsigned(ld));
#pragma unroll
            for (int m = 0; m < kFragments; ++m) {
                const int fj = columnBlock(m);
                if (fj * 16 >= r.hsPad) // past the head's channels: the same for the whole warp
                    continue;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
                wmma::load_matrix_sync(b, tile + k * r.ld + fj * 16, unsigned(r.ld));
                wmma::mma_sync(acc[m], hi, b, acc[m]);
                wmma::mma_sync(acc[m], lo, b, acc[m]);
            }
        }
    }

    // Rows t0.. of `part`, through `staging`: kTile x (hsPad + 4) floats of shared memory that
    // nobody reads any more (the kernel's first tiles of rows).
    __device__ void store(bf16* dst, Part part, const Rows& r, std::size_t bh, int t0,
                          float* staging) {
        const int ld = r.hsPad + 4, fi = rowBlock();
        __syncthreads(); // every warp is done with what staging held
#pragma unroll
        for (int m = 0; m < kFragments; ++m)
            if (columnBlock(m) * 16 < r.hsPad)
                nvcuda::wmma::store_matrix_sync(staging + fi * 16 * ld + columnBlock(m) * 16,
                                                acc[m], unsigned(ld), nvcuda::wmma::mem_row_major);
        __syncthreads();
        for (int e = threadIdx.x; e < kTile * r.hs; e += kThreads) {
            const int i = e / r.hs, d = e % r.hs;
            if (t0 + i < r.T)
                detail::store(dst, r.at(bh, t0 + i, part.width) + std::size_t(part.offset + d),
                              staging[i * ld + d]);
        }
    }
};

// Whether query q0 + i may look at key k0 + j: causal, and the query inside the sequence.
__device__ bool visible(int q0, int i, int k0, int j, int T) {
    return q0 + i < T && k0 + j <= q0 + i;
}

// The softmax statistics of query rows q0.. (their tile in Qs) over key tiles 0..qt: the maximum
// score and the reciprocal of the sum of exp(score - maximum), into rowMax and rowInv. Ks and S
// are scratch tiles. Every caller runs this same code, so the statistics are the same bits.
template <int kTile, typename In>
__device__ void softmaxStatistics(float* rowMax, float* rowInv, const In* Qs, In* Ks, float* S,
                                  const In* qkv, const Rows& r, std::size_t bh, int qt) {
    constexpr int kR = kTile / kSide, kLanes = kThreads / kTile, kEach = kTile / kLanes;
    constexpr int ld = scoreLd<kTile>();
    const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
    const int row = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
    const int q0 = qt * kTile;
    float runMax = -INFINITY, runSum = 0.0f;
    for (int kt = 0; kt <= qt; ++kt) {
        __syncthreads(); // the last tile's readers are done with Ks and S
        loadTile<kTile>(Ks, qkv, keys(r), r, bh, kt * kTile);
        __syncthreads();
        float acc[kR][kR];
        rowProducts<kR, kTile>(acc, Qs, Ks, S, r);
#pragma unroll
        for (int x = 0; x < kR; ++x)
#pragma unroll
            for (int y = 0; y < kR; ++y) {
                const int i = ty + kSide * x, j = tx + kSide * y;
                S[i * ld + j] =
                    visible(q0, i, kt * kTile, j, r.T) ? __fmul_rn(acc[x][y], r.scale) : -INFINITY;
            }
        __syncthreads();
        // Each row by kLanes neighbouring lanes, combined by xor shuffles: every lane gets the
        // same bits (float addition and fmaxf commute).
        float tileMax = -INFINITY;
        for (int e = 0; e < kEach; ++e)
            tileMax = fmaxf(tileMax, S[row * ld + lane * kEach + e]);
        for (int m = 1; m < kLanes; m *= 2)
            tileMax = fmaxf(tileMax, __shfl_xor_sync(0xffffffffu, tileMax, m));
        const float newMax = fmaxf(runMax, tileMax);
        float tileSum = 0.0f;
        if (newMax > -INFINITY)
            for (int e = 0; e < kEach; ++e)
                tileSum += expf(S[row * ld + lane * kEach + e] - newMax);
        for (int m = 1; m < kLanes; m *= 2)
            tileSum += __shfl_xor_sync(0xffffffffu, tileSum, m);
        runSum = (runMax > -INFINITY ? runSum * expf(runMax - newMax) : 0.0f) + tileSum;
        runMax = newMax;
    }
    if (lane == 0) {
        rowMax[row] = runMax;
        rowInv[row] = runSum > 0.0f ? 1.0f / runSum : 0.0f;
    }
    __syncthreads();
}

// One probability from its score and its row's statistics: the same expression everywhere.
__device__ float probability(float score, float rowMax, float rowInv) {
    return __fmul_rn(expf(score - rowMax), rowInv);
}

// p[a][b] for query tile qt and key tile kt: read back from probs, or from the scores of Qs and
// Ks with the rows' statistics; zero where the query may not look. Every thread calls it.
template <int kR, int kTile, typename P, typename In>
__device__ void probabilityTile(float (&p)[kR][kR], const P* probs, const In* Qs, const In* Ks,
                                float* scratch, const float* rowMax, const float* rowInv,
                                const Rows& r, std::size_t bh, int qt, int kt) {
    const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
    const int q0 = qt * kTile, k0 = kt * kTile;
    if (!probs)
        rowProducts<kR, kTile>(p, Qs, Ks, scratch, r);
#pragma unroll
    for (int x = 0; x < kR; ++x)
#pragma unroll
        for (int y = 0; y < kR; ++y) {
            const int i = ty + kSide * x, j = tx + kSide * y;
            if (!visible(q0, i, k0, j, r.T))
                p[x][y] = 0.0f;
            else if (probs)
                p[x][y] = load(probs, r.prob(bh, q0 + i, k0 + j));
            else
                p[x][y] = probability(__fmul_rn(p[x][y], r.scale), rowMax[i], rowInv[i]);
        }
}

// P and dS = P (dP - D) / sqrt(hs), dP = dO V^T, for query tile qt and key tile kt: one code
// for both backward kernels, so their dS agree to the bit. Every thread calls it.
template <int kR, int kTile, typename P, typename In>
__device__ void gradientTile(float (&p)[kR][kR], float (&dS)[kR][kR], const P* probs, const In* Qs,
                             const In* Ks, const In* dOs, const In* Vs, float* scratch,
                             const float* rowMax, const float* rowInv, const float* rowDot,
                             const Rows& r, std::size_t bh, int qt, int kt) {
    const int ty = threadIdx.x / kSide;
    probabilityTile<kR, kTile>(p, probs, Qs, Ks, scratch, rowMax, rowInv, r, bh, qt, kt);
    rowProducts<kR, kTile>(dS, dOs, Vs, scratch, r); // dP, turned into dS in place
#pragma unroll
    for (int x = 0; x < kR; ++x)
#pragma unroll
        for (int y = 0; y < kR; ++y)
            dS[x][y] = __fmul_rn(p[x][y] * (dS[x][y] - rowDot[ty + kSide * x]), r.scale);
}

// A score tile and a weight tile in one piece of shared memory (shared by the host's sums): the
// scores are rowProducts' scratch, read out before its last barrier and so before any weight is
// put, and the weights are read before the next tile's first barrier. (Apart, the key pass for
// heads of 128 channels took 124 KiB and one block a multiprocessor.)
template <int kTile, typename In> __host__ __device__ constexpr std::size_t scratchBytes() {
    const std::size_t scores = carved(std::size_t(kTile) * scoreLd<kTile>() * sizeof(float));
    return scores > Weights<kTile, In>::bytes() ? scores : Weights<kTile, In>::bytes();
}
struct Scratch {
    float* scores;
    unsigned char* weights;
};
template <int kTile, typename In> __device__ Scratch takeScratch(Carver& c) {
    unsigned char* piece = c.take<unsigned char>(scratchBytes<kTile, In>());
    return {reinterpret_cast<float*>(piece), piece};
}

// Tiles of rows, scratch pieces (a score tile with a weight tile), further weight tiles and
// per-row arrays of one kernel, in bytes. The tiles of rows come first in every kernel: at least
// three of them also stage an output tile at the end (kTile x (hsPad + 4) floats, no more than
// 3 x kTile x (hsPad + 8) bf16).
template <int kTile, typename In>
std::size_t sharedBytes(const Rows& r, int tiles, int scratches, int weightTiles, int rowArrays) {
    return std::size_t(tiles) * carved(std::size_t(kTile) * std::size_t(r.ld) * sizeof(In)) +
           std::size_t(scratches) * scratchBytes<kTile, In>() +
           std::size_t(weightTiles) * Weights<kTile, In>::bytes() +
           std::size_t(rowArrays) * carved(std::size_t(kTile) * sizeof(float));
}

// Blocks take the heaviest query tiles (the last, which meet every key) first.
__device__ int heavyFirst(int blockTile, int tiles) {
    return tiles - 1 - blockTile;
}

// Shared: Q, K, V tiles, a score tile with P's weights, two row arrays.
template <int kTile, int kCols, typename In, typename P>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    attentionForwardKernel(In* out, P* probs, const In* qkv, Rows r) {
    constexpr int kR = kTile / kSide;
    extern __shared__ __align__(128) unsigned char shared[];
    Carver carve{shared};
    const std::size_t tile = std::size_t(kTile) * std::size_t(r.ld);
    In *Qs = carve.take<In>(tile), *Ks = carve.take<In>(tile), *Vs = carve.take<In>(tile);
    const Scratch scratch = takeScratch<kTile, In>(carve);
    float* S = scratch.scores;
    const auto Pw = Weights<kTile, In>::at(scratch.weights);
    float *rowMax = carve.take<float>(kTile), *rowInv = carve.take<float>(kTile);
    const int tiles = (r.T + kTile - 1) / kTile;
    const std::size_t bh = blockIdx.x / unsigned(tiles);
    const int qt = heavyFirst(int(blockIdx.x % unsigned(tiles)), tiles), q0 = qt * kTile;
    const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;

    loadTile<kTile>(Qs, qkv, queries(r), r, bh, q0);
    softmaxStatistics<kTile>(rowMax, rowInv, Qs, Ks, S, qkv, r, bh, qt);

    OutputTile<kTile, kCols, In> o;
    for (int kt = 0; kt <= qt; ++kt) {
        __syncthreads();
        loadTile<kTile>(Ks, qkv, keys(r), r, bh, kt * kTile);
        loadTile<kTile>(Vs, qkv, values(r), r, bh, kt * kTile);
        __syncthreads();
        float p[kR][kR];
        probabilityTile<kR, kTile>(p, static_cast<const P*>(nullptr), Qs, Ks, S, rowMax, rowInv, r,
                                   bh, qt, kt);
#pragma unroll
        for (int x = 0; x < kR; ++x)
#pragma unroll
            for (int y = 0; y < kR; ++y) {
                const int i = ty + kSide * x, j = tx + kSide * y;
                Pw.put(i, j, p[x][y]);
                if (probs && q0 + i < r.T && kt * kTile + j < r.T)
                    store(probs, r.prob(bh, q0 + i, kt * kTile + j), p[x][y]);
            }
        __syncthreads();
        o.template add<false>(Pw, Vs, r);
    }
    if (probs) // the keys after the diagonal tile: never looked at
        for (int e = threadIdx.x, rest = kTile * (tiles - 1 - qt); e < kTile * rest;
             e += kThreads) {
            const int i = e / rest, j = (qt + 1) * kTile + e % rest;
            if (q0 + i < r.T && j < r.T)
                store(probs, r.prob(bh, q0 + i, j), 0.0f);
        }
    o.store(out, outputs(r), r, bh, q0, reinterpret_cast<float*>(shared));
}

struct RowStats {
    float *max, *inv, *dot; // per query row: softmax maximum, reciprocal sum, rowsum(P dP)
};

// Shared: Q, dO, K, V tiles, a score tile with dS's weights, three row arrays.
template <int kTile, int kCols, typename In, typename P>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    attentionQueryPassKernel(In* dqkv, const In* dout, const In* qkv, const P* probs,
                             RowStats stats, Rows r) {
    constexpr int kR = kTile / kSide;
    extern __shared__ __align__(128) unsigned char shared[];
    Carver carve{shared};
    const std::size_t tile = std::size_t(kTile) * std::size_t(r.ld);
    In *Qs = carve.take<In>(tile), *dOs = carve.take<In>(tile);
    In *Ks = carve.take<In>(tile), *Vs = carve.take<In>(tile);
    const Scratch scratch = takeScratch<kTile, In>(carve);
    float* S = scratch.scores;
    const auto dSw = Weights<kTile, In>::at(scratch.weights);
    float *rowMax = carve.take<float>(kTile), *rowInv = carve.take<float>(kTile),
          *rowDot = carve.take<float>(kTile);
    const int tiles = (r.T + kTile - 1) / kTile;
    const std::size_t bh = blockIdx.x / unsigned(tiles);
    const int qt = heavyFirst(int(blockIdx.x % unsigned(tiles)), tiles), q0 = qt * kTile;
    const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
    const std::size_t firstRow = bh * std::size_t(r.T) + std::size_t(q0);

    loadTile<kTile>(Qs, qkv, queries(r), r, bh, q0);
    loadTile<kTile>(dOs, dout, outputs(r), r, bh, q0);
    if (!probs) {
        softmaxStatistics<kTile>(rowMax, rowInv, Qs, Ks, S, qkv, r, bh, qt);
        for (int i = threadIdx.x; i < kTile && q0 + i < r.T; i += kThreads) {
            stats.max[firstRow + std::size_t(i)] = rowMax[i];
            stats.inv[firstRow + std::size_t(i)] = rowInv[i];
        }
    }

    // D = rowsum(P dP): each thread's part of its rows, then the 16 lanes of a row by shuffles.
    float dot[kR] = {};
    for (int kt = 0; kt <= qt; ++kt) {
        __syncthreads();
        if (!probs)
            loadTile<kTile>(Ks, qkv, keys(r), r, bh, kt * kTile);
        loadTile<kTile>(Vs, qkv, values(r), r, bh, kt * kTile);
        __syncthreads();
        float p[kR][kR], dP[kR][kR];
        probabilityTile<kR, kTile>(p, probs, Qs, Ks, S, rowMax, rowInv, r, bh, qt, kt);
        rowProducts<kR, kTile>(dP, dOs, Vs, S, r);
#pragma unroll
        for (int x = 0; x < kR; ++x) {
            float part = 0.0f;
#pragma unroll
            for (int y = 0; y < kR; ++y)
                part = fmaf(p[x][y], dP[x][y], part);
            for (int m = 1; m < kSide; m *= 2)
                part += __shfl_xor_sync(0xffffffffu, part, m);
            dot[x] += part;
        }
    }
    if (tx == 0)
#pragma unroll
        for (int x = 0; x < kR; ++x) {
            const int i = ty + kSide * x;
            rowDot[i] = dot[x];
            if (q0 + i < r.T)
                stats.dot[firstRow + std::size_t(i)] = dot[x];
        }

    OutputTile<kTile, kCols, In> dq;
    for (int kt = 0; kt <= qt; ++kt) {
        __syncthreads(); // rowDot written; the last tile's readers are done
        loadTile<kTile>(Ks, qkv, keys(r), r, bh, kt * kTile);
        loadTile<kTile>(Vs, qkv, values(r), r, bh, kt * kTile);
        __syncthreads();
        float p[kR][kR], dS[kR][kR];
        gradientTile<kR, kTile>(p, dS, probs, Qs, Ks, dOs, Vs, S, rowMax, rowInv, rowDot, r, bh, qt,
                                kt);
#pragma unroll
        for (int x = 0; x < kR; ++x)
#pragma unroll
            for (int y = 0; y < kR; ++y)
                dSw.put(ty + kSide * x, tx + kSide * y, dS[x][y]);
        __syncthreads();
        dq.template add<false>(dSw, Ks, r);
    }
    dq.store(dqkv, queries(r), r, bh, q0, reinterpret_cast<float*>(shared));
}

// Shared: K, V, Q, dO tiles, a score tile with P's weights, dS's weights, three row arrays.
template <int kTile, int kCols, typename In, typename P>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    attentionKeyPassKernel(In* dqkv, const In* dout, const In* qkv, const P* probs, RowStats stats,
                           Rows r) {
    constexpr int kR = kTile / kSide;
    extern __shared__ __align__(128) unsigned char shared[];
    Carver carve{shared};
    const std::size_t tile = std::size_t(kTile) * std::size_t(r.ld);
    In *Ks = carve.take<In>(tile), *Vs = carve.take<In>(tile);
    In *Qs = carve.take<In>(tile), *dOs = carve.take<In>(tile);
    const Scratch scratch = takeScratch<kTile, In>(carve);
    float* S = scratch.scores;
    const auto Pw = Weights<kTile, In>::at(scratch.weights);
    const auto dSw = Weights<kTile, In>::take(carve);
    float *rowMax = carve.take<float>(kTile), *rowInv = carve.take<float>(kTile),
          *rowDot = carve.take<float>(kTile);
    const int tiles = (r.T + kTile - 1) / kTile;
    const std::size_t bh = blockIdx.x / unsigned(tiles);
    // The first key tiles meet every query tile: they go first.
    const int kt = int(blockIdx.x % unsigned(tiles)), k0 = kt * kTile;
    const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;

    loadTile<kTile>(Ks, qkv, keys(r), r, bh, k0);
    loadTile<kTile>(Vs, qkv, values(r), r, bh, k0);
    OutputTile<kTile, kCols, In> dk, dv;
    for (int qt = kt; qt < tiles; ++qt) {
        const int q0 = qt * kTile;
        __syncthreads();
        loadTile<kTile>(Qs, qkv, queries(r), r, bh, q0);
        loadTile<kTile>(dOs, dout, outputs(r), r, bh, q0);
        for (int i = threadIdx.x; i < kTile; i += kThreads) {
            const std::size_t row = bh * std::size_t(r.T) + std::size_t(q0 + i);
            const bool inside = q0 + i < r.T;
            rowMax[i] = inside && !probs ? stats.max[row] : 0.0f;
            rowInv[i] = inside && !probs ? stats.inv[row] : 0.0f;
            rowDot[i] = inside ? stats.dot[row] : 0.0f;
        }
        __syncthreads();
        float p[kR][kR], dS[kR][kR];
        gradientTile<kR, kTile>(p, dS, probs, Qs, Ks, dOs, Vs, S, rowMax, rowInv, rowDot, r, bh, qt,
                                kt);
#pragma unroll
        for (int x = 0; x < kR; ++x)
#pragma unroll
            for (int y = 0; y < kR; ++y) {
                const int i = ty + kSide * x, j = tx + kSide * y;
                Pw.put(i, j, p[x][y]);
                dSw.put(i, j, dS[x][y]);
            }
        __syncthreads();
        // dk and dv have a row per key: the transposed weights, summed over the queries.
        dk.template add<true>(dSw, Qs, r);
        dv.template add<true>(Pw, dOs, r);
    }
    float* staging = reinterpret_cast<float*>(shared);
    dk.store(dqkv, keys(r), r, bh, k0, staging);
    dv.store(dqkv, values(r), r, bh, k0, staging);
}

constexpr int kMostChannels = 256;

Rows rowsOf(int T, int C, int NH, bool tensorCores) {
    if (NH <= 0 || C % NH != 0)
        throw std::logic_error("attention: " + std::to_string(C) + " channels do not split into " +
                               std::to_string(NH) + " heads");
    const int hs = C / NH;
    if (hs > kMostChannels)
        throw std::runtime_error("attention: heads of " + std::to_string(hs) +
                                 " channels; the CUDA kernels take at most " +
                                 std::to_string(kMostChannels) + " per head");
    // bf16 tiles: channels padded to the tensor cores' 16, rows 8 more (16 bytes, as their
    // loads want, and off the banks' period); fp32 tiles: rows of an odd stride.
    const int hsPad = tensorCores ? (hs + 15) / 16 * 16 : hs;
    const int ld = tensorCores ? hsPad + 8 : (hs % 2 == 0 ? hs + 1 : hs);
    return {T, C, NH, hs, hsPad, ld, 1.0f / std::sqrt(float(hs)), false};
}

bool startsOn16(const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}
// Whether every row of qkv and of the [B,T,C] tensors starts its heads' channels on 16 bytes.
bool wideRows(const Rows& r, kernels::ConstPtr qkv, kernels::ConstPtr rows) {
    return qkv.type == kernels::DType::BF16 && r.hs % 8 == 0 && r.C % 8 == 0 &&
           startsOn16(qkv.data) && startsOn16(rows.data);
}

// Lets `kernel` use `bytes` of dynamic shared memory, or says why it cannot.
template <typename Kernel> void allowSharedMemory(Kernel kernel, std::size_t bytes, int hs) {
    int device = 0, most = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
          "cudaDeviceGetAttribute");
    if (bytes > std::size_t(most))
        throw std::runtime_error("attention: heads of " + std::to_string(hs) + " channels need " +
                                 std::to_string(bytes / 1024) +
                                 " KiB of shared memory per block and this GPU offers " +
                                 std::to_string(most / 1024) + " KiB");
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

// Calls f(tile, channels) with the tiling for the head size, as integral constants: tiles of 64
// queries and keys with 4 or 8 channels per thread (heads up to 64 or 128), of 32 with 16 (up to
// 256).
template <typename F> void withTiles(int hs, F f) {
    using std::integral_constant;
    if (hs <= 64)
        f(integral_constant<int, 64>{}, integral_constant<int, 4>{});
    else if (hs <= 128)
        f(integral_constant<int, 64>{}, integral_constant<int, 8>{});
    else
        f(integral_constant<int, 32>{}, integral_constant<int, 16>{});
}

unsigned blocksOf(int B, int NH, int T, int tile) {
    return unsigned(std::size_t(B) * std::size_t(NH) * std::size_t((T + tile - 1) / tile));
}

} // namespace

void attentionForward(kernels::Ptr out, kernels::Ptr probs, kernels::ConstPtr qkv, int B, int T,
                      int C, int NH, void* stream) {
    if (B <= 0 || T <= 0 || C <= 0)
        return;
    sameType(out.type, qkv.type, "out and qkv");
    Rows r = rowsOf(T, C, NH, qkv.type == kernels::DType::BF16);
    r.wide = wideRows(r, qkv, kernels::ConstPtr(out));
    withElements(qkv, [&](const auto* x) {
        using In = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
        withProbs<In>(kernels::ConstPtr(probs), [&](const auto* typedProbs) {
            using P = std::remove_cv_t<std::remove_pointer_t<decltype(typedProbs)>>;
            withTiles(r.hs, [&](auto tile, auto cols) {
                constexpr int kTile = decltype(tile)::value, kCols = decltype(cols)::value;
                const auto kernel = attentionForwardKernel<kTile, kCols, In, P>;
                const std::size_t bytes = sharedBytes<kTile, In>(r, 3, 1, 0, 2);
                allowSharedMemory(kernel, bytes, r.hs);
                kernel<<<blocksOf(B, NH, T, kTile), kThreads, bytes, streamOf(stream)>>>(
                    static_cast<In*>(out.data), const_cast<P*>(typedProbs), x, r);
            });
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
    Rows r = rowsOf(T, C, NH, qkv.type == kernels::DType::BF16);
    r.wide = wideRows(r, qkv, dout) && startsOn16(dqkv.data);
    const std::size_t rowCount = std::size_t(B) * std::size_t(NH) * std::size_t(T);
    const RowStats stats{workspace, workspace + rowCount, workspace + 2 * rowCount};
    withElements(qkv, [&](const auto* x) {
        using In = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
        In* g = static_cast<In*>(dqkv.data);
        const In* d = static_cast<const In*>(dout.data);
        withProbs<In>(probs, [&](const auto* typedProbs) {
            using P = std::remove_cv_t<std::remove_pointer_t<decltype(typedProbs)>>;
            withTiles(r.hs, [&](auto tile, auto cols) {
                constexpr int kTile = decltype(tile)::value, kCols = decltype(cols)::value;
                const auto queryPass = attentionQueryPassKernel<kTile, kCols, In, P>;
                const auto keyPass = attentionKeyPassKernel<kTile, kCols, In, P>;
                const std::size_t queryBytes = sharedBytes<kTile, In>(r, 4, 1, 0, 3);
                const std::size_t keyBytes = sharedBytes<kTile, In>(r, 4, 1, 2, 3);
                allowSharedMemory(queryPass, queryBytes, r.hs);
                allowSharedMemory(keyPass, keyBytes, r.hs);
                const unsigned blocks = blocksOf(B, NH, T, kTile);
                queryPass<<<blocks, kThreads, queryBytes, streamOf(stream)>>>(g, d, x, typedProbs,
                                                                              stats, r);
                keyPass<<<blocks, kThreads, keyBytes, streamOf(stream)>>>(g, d, x, typedProbs,
                                                                          stats, r);
            });
        });
    });
    checkLaunch("attentionBackward");
}

} // namespace shardscope::cuda
