#include "cross_entropy.h"
#include "device_elements.cuh"

#include <cmath>

namespace shardscope::cuda {

namespace {

using namespace detail;

// A row of GPT-2's 50,257 logits is about fifty elements a thread at this width.
constexpr int kRowThreads = 1024;

__device__ float rowMaxOf(const float* row, int V) {
    float m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += kRowThreads)
        m = fmaxf(m, row[i]);
    return blockMax<kRowThreads>(m);
}

// Each thread sums its elements in fp32, the block adds the threads' sums as doubles.
__device__ double rowSumExp(const float* row, int V, float max) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += kRowThreads)
        s += expf(row[i] - max);
    return blockSum<kRowThreads>(double(s));
}

__global__ void crossEntropyRowKernel(float* logits, const std::int32_t* targets, int V,
                                      float gradScale, double* rowLoss) {
    float* row = logits + std::size_t(blockIdx.x) * std::size_t(V);
    const int target = targets[blockIdx.x];
    const bool valid = target >= 0 && target < V;
    const float targetLogit = valid ? row[target] : NAN;
    const float max = rowMaxOf(row, V);
    // The block reductions order every thread's reads of the row before the writes below.
    const double sum = rowSumExp(row, V, max);
    if (threadIdx.x == 0)
        rowLoss[blockIdx.x] = log(sum) + double(max) - double(targetLogit);
    const float inv = float(1.0 / sum);
    for (int i = threadIdx.x; i < V; i += kRowThreads)
        row[i] = expf(row[i] - max) * inv * gradScale - (i == target ? gradScale : 0.0f);
}

// One block adds the rows' losses in a fixed order.
__global__ void sumRowLossesKernel(const double* rowLoss, int N, double* sum) {
    double s = 0.0;
    for (int n = threadIdx.x; n < N; n += kThreads)
        s += rowLoss[n];
    s = blockSum<kThreads>(s);
    if (threadIdx.x == 0)
        sum[0] += s;
}

__global__ void rowMaxKernel(const float* x, int V, float* out) {
    const float m = rowMaxOf(x + std::size_t(blockIdx.x) * std::size_t(V), V);
    if (threadIdx.x == 0)
        out[blockIdx.x] = m;
}

__global__ void softmaxShardSumsKernel(const float* logits, const float* max,
                                       const std::int32_t* targets, int V, int vocabStart,
                                       float* sumExp, float* targetLogit) {
    const float* row = logits + std::size_t(blockIdx.x) * std::size_t(V);
    const double sum = rowSumExp(row, V, max[blockIdx.x]);
    if (threadIdx.x == 0) {
        sumExp[blockIdx.x] = float(sum);
        const int t = targets[blockIdx.x] - vocabStart;
        targetLogit[blockIdx.x] = t >= 0 && t < V ? row[t] : 0.0f;
    }
}

__global__ void shardLossKernel(const float* max, const float* sumExp, const float* targetLogit,
                                int N, double* sum) {
    double s = 0.0;
    for (int n = threadIdx.x; n < N; n += kThreads)
        s += log(double(sumExp[n])) + double(max[n]) - double(targetLogit[n]);
    s = blockSum<kThreads>(s);
    if (threadIdx.x == 0)
        sum[0] += s;
}

__global__ void crossEntropyShardBackwardKernel(float* logits, const float* max,
                                                const float* sumExp, const std::int32_t* targets,
                                                int V, int vocabStart, float gradScale) {
    float* row = logits + std::size_t(blockIdx.x) * std::size_t(V);
    const float m = max[blockIdx.x], scale = gradScale / sumExp[blockIdx.x];
    const int target = targets[blockIdx.x] - vocabStart;
    for (int i = threadIdx.x; i < V; i += kRowThreads)
        row[i] = expf(row[i] - m) * scale - (i == target ? gradScale : 0.0f);
}

bool empty(int N, int V) {
    return N <= 0 || V <= 0;
}

} // namespace

void crossEntropyForwardBackward(float* logits, const std::int32_t* targets, int N, int V,
                                 float gradScale, double* lossSum, double* rowLoss, void* stream) {
    if (empty(N, V))
        return;
    crossEntropyRowKernel<<<unsigned(N), kRowThreads, 0, streamOf(stream)>>>(logits, targets, V,
                                                                             gradScale, rowLoss);
    sumRowLossesKernel<<<1, kThreads, 0, streamOf(stream)>>>(rowLoss, N, lossSum);
    checkLaunch("crossEntropyForwardBackward");
}

void rowMax(const float* x, int N, int V, float* out, void* stream) {
    if (empty(N, V))
        return;
    rowMaxKernel<<<unsigned(N), kRowThreads, 0, streamOf(stream)>>>(x, V, out);
    checkLaunch("rowMax");
}

void softmaxShardSums(const float* logits, const float* max, const std::int32_t* targets, int N,
                      int V, int vocabStart, float* sumExp, float* targetLogit, void* stream) {
    if (empty(N, V))
        return;
    softmaxShardSumsKernel<<<unsigned(N), kRowThreads, 0, streamOf(stream)>>>(
        logits, max, targets, V, vocabStart, sumExp, targetLogit);
    checkLaunch("softmaxShardSums");
}

void crossEntropyShardLoss(const float* max, const float* sumExp, const float* targetLogit, int N,
                           double* lossSum, void* stream) {
    if (N <= 0)
        return;
    shardLossKernel<<<1, kThreads, 0, streamOf(stream)>>>(max, sumExp, targetLogit, N, lossSum);
    checkLaunch("crossEntropyShardLoss");
}

void crossEntropyShardBackward(float* logits, const float* max, const float* sumExp,
                               const std::int32_t* targets, int N, int V, int vocabStart,
                               float gradScale, void* stream) {
    if (empty(N, V))
        return;
    crossEntropyShardBackwardKernel<<<unsigned(N), kRowThreads, 0, streamOf(stream)>>>(
        logits, max, sumExp, targets, V, vocabStart, gradScale);
    checkLaunch("crossEntropyShardBackward");
}

} // namespace shardscope::cuda
