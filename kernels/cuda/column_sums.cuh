// Sums down the columns of an N x C matrix (a weight or bias gradient summed over the tokens) in
// two kernels, with the whole GPU busy and a fixed order: blocks of 32 columns x 512 rows each
// sum their rows (8 lanes per column, then a fixed tree) into partials, and one thread per column
// adds its partials in row order. A thread per column alone left most of an H100 idle: 3.4 ms for
// a layer norm's weight gradient over 16K tokens, where memory allows about 10 us.
#pragma once

#include "device_elements.cuh"

namespace shardscope::cuda::detail {

constexpr int kSumColumns = 32, kSumLanes = kThreads / kSumColumns, kSumRows = 512;

inline int rowChunksOf(int N) {
    return (N + kSumRows - 1) / kSumRows;
}

// partials[(chunk * kOutputs + k) * C + c] = sum over the chunk's rows n of values(n, c)[k].
// Values: a functor with `static constexpr int kOutputs` and
// `__device__ void operator()(int n, int c, float (&out)[kOutputs]) const`.
template <typename Values>
__global__ void columnPartialsKernel(float* partials, Values values, int N, int C) {
    constexpr int kOutputs = Values::kOutputs;
    __shared__ float lanes[kOutputs][kSumLanes][kSumColumns];
    const int col = threadIdx.x % kSumColumns, lane = threadIdx.x / kSumColumns;
    const int c = blockIdx.x * kSumColumns + col, chunk = blockIdx.y;
    float sum[kOutputs] = {};
    if (c < C) {
        const int end = min(N, (chunk + 1) * kSumRows);
        for (int n = chunk * kSumRows + lane; n < end; n += kSumLanes) {
            float v[kOutputs];
            values(n, c, v);
#pragma unroll
            for (int k = 0; k < kOutputs; ++k)
                sum[k] += v[k];
        }
    }
#pragma unroll
    for (int k = 0; k < kOutputs; ++k)
        lanes[k][lane][col] = sum[k];
    __syncthreads();
    for (int stride = kSumLanes / 2; stride > 0; stride /= 2) {
        if (lane < stride)
#pragma unroll
            for (int k = 0; k < kOutputs; ++k)
                lanes[k][lane][col] += lanes[k][lane + stride][col];
        __syncthreads();
    }
    if (lane == 0 && c < C)
#pragma unroll
        for (int k = 0; k < kOutputs; ++k)
            partials[(std::size_t(chunk) * kOutputs + k) * std::size_t(C) + std::size_t(c)] =
                lanes[k][0][col];
}

// finish(c, sums) with sums[k] = the column's total of output k, partials added in row order.
// Finish: `static constexpr int kOutputs` and `__device__ void operator()(int c, const float*)`.
template <typename Finish>
__global__ void columnTotalsKernel(Finish finish, const float* partials, int chunks, int C) {
    constexpr int kOutputs = Finish::kOutputs;
    const int c = blockIdx.x * kThreads + threadIdx.x;
    if (c >= C)
        return;
    float sums[kOutputs] = {};
    for (int chunk = 0; chunk < chunks; ++chunk)
#pragma unroll
        for (int k = 0; k < kOutputs; ++k)
            sums[k] +=
                partials[(std::size_t(chunk) * kOutputs + k) * std::size_t(C) + std::size_t(c)];
    finish(c, sums);
}

// Both kernels on `stream`, their partials in a stream-ordered temporary.
template <typename Values, typename Finish>
void sumColumns(Values values, Finish finish, int N, int C, cudaStream_t stream) {
    static_assert(Values::kOutputs == Finish::kOutputs, "one sum per value");
    const int chunks = rowChunksOf(N);
    StreamBuffer partials(std::size_t(chunks) * Values::kOutputs * std::size_t(C) * sizeof(float),
                          stream);
    const dim3 grid(unsigned((C + kSumColumns - 1) / kSumColumns), unsigned(chunks));
    columnPartialsKernel<<<grid, kThreads, 0, stream>>>(partials.as<float>(), values, N, C);
    columnTotalsKernel<<<unsigned((C + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        finish, partials.as<float>(), chunks, C);
}

} // namespace shardscope::cuda::detail
