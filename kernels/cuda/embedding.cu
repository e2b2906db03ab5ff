#include "device_elements.cuh"
#include "embedding.h"

#include <algorithm>

namespace shardscope::cuda {

namespace {

using namespace detail;

template <typename Out, typename Table, typename Pos>
__global__ void embeddingForwardKernel(Out* out, const std::int32_t* tokens, const Table* wte,
                                       int vocabStart, int vocabCount, const Pos* wpe, int T, int C,
                                       std::size_t n) {
    SHARDSCOPE_GRID_STRIDE(i, n) {
        const std::size_t bt = i / std::size_t(C), c = i % std::size_t(C);
        const int row = tokens[bt] - vocabStart;
        float v = row >= 0 && row < vocabCount ? load(wte, std::size_t(row) * C + c) : 0.0f;
        if (wpe)
            v += load(wpe, (bt % std::size_t(T)) * C + c);
        store(out, i, v);
    }
}

// One thread per (position, channel): the batch's rows added in order, one rounding.
template <typename Pos, typename G>
__global__ void positionGradientKernel(Pos* dwpe, const G* dout, int B, int T, int C) {
    SHARDSCOPE_GRID_STRIDE(i, std::size_t(T) * std::size_t(C)) {
        float sum = load(dwpe, i);
        for (int b = 0; b < B; ++b)
            sum += load(dout, std::size_t(b) * std::size_t(T) * std::size_t(C) + i);
        store(dwpe, i, sum);
    }
}

// Groups of 64 rows of the table spread over the blocks (group g to block g mod gridDim.x), a
// thread per channel: every block reads all the tokens in order and adds the rows of its groups,
// so rows sharing a token never race and each sum runs in token order. The tokens go by in rounds
// of one a thread: each thread tests its token, and the block lists its own in token order
// (a ballot per warp) before it adds them. (One block of threads per channel took 7 ms for
// GPT-2's 16K tokens on an H200; every warp testing every token, 8.9 ms.) The whole-table call
// does not know the table's size, so the blocks are a fixed number, or one per group of a shard.
constexpr int kTableRowsPerGroup = 64, kMostTableBlocks = 1024, kWarps = kThreads / 32;

template <typename Table, typename G>
__global__ void tokenGradientKernel(Table* dwte, int vocabStart, int vocabCount, const G* dout,
                                    const std::int32_t* tokens, std::size_t rows, int C) {
    __shared__ int listed[kThreads];           // the round's tokens of this block, in order
    __shared__ long long listedRows[kThreads]; // and their rows of the table
    __shared__ int warpCounts[kWarps];
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
    for (std::size_t first = 0; first < rows; first += kThreads) {
        const std::size_t bt = first + threadIdx.x;
        const long long row = bt < rows ? (long long)tokens[bt] - vocabStart : -1;
        const bool ours =
            row >= 0 && row < vocabCount && row / kTableRowsPerGroup % gridDim.x == blockIdx.x;
        const unsigned ballot = __ballot_sync(0xffffffffu, ours);
        __syncthreads(); // the last round's readers of the lists are done
        if (lane == 0)
            warpCounts[warp] = __popc(ballot);
        __syncthreads();
        int before = 0, count = 0;
        for (int w = 0; w < kWarps; ++w) {
            before += w < warp ? warpCounts[w] : 0;
            count += warpCounts[w];
        }
        if (ours) {
            const int at = before + __popc(ballot & ((1u << lane) - 1u));
            listed[at] = int(threadIdx.x);
            listedRows[at] = row;
        }
        __syncthreads();
        for (int k = 0; k < count; ++k) {
            const std::size_t token = first + std::size_t(listed[k]);
            const std::size_t tableRow = std::size_t(listedRows[k]);
            for (int c = threadIdx.x; c < C; c += kThreads) {
                const std::size_t at = tableRow * std::size_t(C) + std::size_t(c);
                store(dwte, at,
                      load(dwte, at) + load(dout, token * std::size_t(C) + std::size_t(c)));
            }
        }
    }
}

} // namespace

void embeddingForward(kernels::Ptr out, const std::int32_t* tokens, kernels::ConstPtr wte,
                      int vocabStart, int vocabCount, kernels::ConstPtr wpe, int B, int T, int C,
                      void* stream) {
    const std::size_t n = std::size_t(B) * std::size_t(T) * std::size_t(C);
    if (n == 0)
        return;
    withElements(out, [&](auto* o) {
        withElements(wte, [&](const auto* table) {
            withElements(wpe, [&](const auto* positions) {
                embeddingForwardKernel<<<blocksFor(n), kThreads, 0, streamOf(stream)>>>(
                    o, tokens, table, vocabStart, vocabCount, positions, T, C, n);
            });
        });
    });
    checkLaunch("embeddingForward");
}

void embeddingBackwardAccumulate(kernels::Ptr dwte, int vocabStart, int vocabCount,
                                 kernels::Ptr dwpe, kernels::ConstPtr dout,
                                 const std::int32_t* tokens, int B, int T, int C, void* stream) {
    if (B <= 0 || T <= 0 || C <= 0)
        return;
    withElements(dout, [&](const auto* d) {
        if (dwpe)
            withElements(dwpe, [&](auto* p) {
                positionGradientKernel<<<blocksFor(std::size_t(T) * std::size_t(C)), kThreads, 0,
                                         streamOf(stream)>>>(p, d, B, T, C);
            });
        withElements(dwte, [&](auto* table) {
            if (vocabCount <= 0)
                return;
            const long long groups =
                ((long long)vocabCount + kTableRowsPerGroup - 1) / kTableRowsPerGroup;
            const unsigned blocks = unsigned(std::min<long long>(groups, kMostTableBlocks));
            tokenGradientKernel<<<blocks, kThreads, 0, streamOf(stream)>>>(
                table, vocabStart, vocabCount, d, tokens, std::size_t(B) * std::size_t(T), C);
        });
    });
    checkLaunch("embeddingBackward");
}

} // namespace shardscope::cuda
