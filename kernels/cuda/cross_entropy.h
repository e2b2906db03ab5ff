// The CUDA backend's loss: softmax cross-entropy fused with its gradient, whole or over a
// vocabulary shard (Megatron-LM's vocabulary-parallel loss, whose group sums travel between the
// calls). The contracts of kernels::Ops (ops.h); logits and row statistics are fp32. Sums run in a
// fixed order, so the same logits give the same loss bits on every run. Each call enqueues its
// kernels on `stream` (a cudaStream_t) and returns; a launch error throws std::runtime_error.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardscope::cuda {

// Device doubles the whole-vocabulary loss needs between its two kernels: one per row.
inline std::size_t crossEntropyWorkspaceDoubles(int N) {
    return N > 0 ? std::size_t(N) : 0;
}
// logits[N,V] become (softmax - onehot) * gradScale in place, and lossSum[0] (a device double)
// gains the sum over rows of -log softmax[target]. A target outside [0, V) gives a NaN loss (the
// engine checks tokens on load; this keeps a bad one visible instead of reading out of bounds).
// rowLoss: crossEntropyWorkspaceDoubles(N) device doubles.
void crossEntropyForwardBackward(float* logits, const std::int32_t* targets, int N, int V,
                                 float gradScale, double* lossSum, double* rowLoss, void* stream);

// out[n] = the largest of row n of x[N,V].
void rowMax(const float* x, int N, int V, float* out, void* stream);
// sumExp[n] = sum_i exp(logits[n,i] - max[n]); targetLogit[n] = the target's logit where this
// shard holds it (rows [vocabStart, vocabStart + V)), else 0.
void softmaxShardSums(const float* logits, const float* max, const std::int32_t* targets, int N,
                      int V, int vocabStart, float* sumExp, float* targetLogit, void* stream);
// lossSum[0] += sum over rows of log(sumExp) + max - targetLogit, from the group's sums.
void crossEntropyShardLoss(const float* max, const float* sumExp, const float* targetLogit, int N,
                           double* lossSum, void* stream);
// logits become (softmax - onehot) * gradScale in place, from the group's max and sumExp.
void crossEntropyShardBackward(float* logits, const float* max, const float* sumExp,
                               const std::int32_t* targets, int N, int V, int vocabStart,
                               float gradScale, void* stream);

} // namespace shardscope::cuda
