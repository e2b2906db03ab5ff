// Ring attention's operators on the GPU (context parallelism), with the contracts of
// kernels::Ops (ops.h): causal attention of a rank's queries against one block of keys and
// values, merged into a running softmax, its finish, and the block's gradients. One warp per row
// of the result (a query row of one head, or a key row of one key and value head), channels
// spread over the lanes, fp32 sums: every output row is written by one warp alone, so no atomics
// and a fixed order. Each call enqueues its kernels on `stream` (a cudaStream_t) and returns.
#pragma once

#include "ops.h"

#include <cstdint>

namespace shardscope::cuda {

// acc [B, Tq, NH hd], rowMax and rowSum [B, NH, Tq] (fp32) merged with the block's keys.
void attentionBlockForward(float* acc, float* rowMax, float* rowSum, kernels::ConstPtr q,
                           int qStride, kernels::ConstPtr k, kernels::ConstPtr v, int kvStride,
                           const std::int32_t* qPos, const std::int32_t* kPos, int B, int Tq,
                           int Tk, int NH, int KV, int hd, void* stream);
// out = acc / rowSum, lse = rowMax + log(rowSum) (lse may alias rowMax).
void attentionBlockFinish(kernels::Ptr out, float* lse, const float* acc, const float* rowMax,
                          const float* rowSum, int B, int Tq, int NH, int hd, void* stream);
// delta [B, NH, Tq] = the sum over each head's channels of dout * out (overwrites).
void attentionBlockDelta(float* delta, kernels::ConstPtr dout, kernels::ConstPtr out, int B, int Tq,
                         int NH, int hd, void* stream);
// dq += ..., dk += ..., dv += ... (fp32) for one block.
void attentionBlockBackward(float* dq, float* dk, float* dv, int dkvStride, kernels::ConstPtr dout,
                            const float* lse, const float* delta, kernels::ConstPtr q, int qStride,
                            kernels::ConstPtr k, kernels::ConstPtr v, int kvStride,
                            const std::int32_t* qPos, const std::int32_t* kPos, int B, int Tq,
                            int Tk, int NH, int KV, int hd, void* stream);
// dst rows `dstStride` apart = src rows `srcStride` apart, cols elements each, converting types.
void copyRows(kernels::Ptr dst, int dstStride, kernels::ConstPtr src, int srcStride, int rows,
              int cols, void* stream);

} // namespace shardscope::cuda
