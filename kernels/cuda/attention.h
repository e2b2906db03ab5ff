// The CUDA backend's causal multi-head attention: the contracts of kernels::Ops (ops.h) on
// qkv[B,T,3C] (q, k, v each [B,T,NH,C/NH]), out[B,T,C], probs[B,NH,T,T]. qkv, out and their
// gradients share one storage type; probs has its own, or is null: then it is never stored and
// the backward recomputes every probability with the forward's own code, so the gradients are
// the same bits whichever path ran (with fp32 probs). Every sum runs in a fixed order. Scores
// live in shared memory a tile of 64 x 64 at a time (FlashAttention's tiling), so any sequence
// length fits; heads of more than 256 channels throw std::runtime_error with the limit. Each call
// enqueues its kernels on `stream` (a cudaStream_t) and returns.
#pragma once

#include "ops.h"

#include <cstddef>

namespace shardscope::cuda {

void attentionForward(kernels::Ptr out, kernels::Ptr probs, kernels::ConstPtr qkv, int B, int T,
                      int C, int NH, void* stream);

// Device floats the backward keeps between its kernels: three per query row (the softmax's
// maximum and reciprocal sum, and rowsum(P dP)).
inline std::size_t attentionBackwardWorkspaceFloats(int B, int T, int NH) {
    return B > 0 && T > 0 && NH > 0 ? 3 * std::size_t(B) * std::size_t(NH) * std::size_t(T) : 0;
}
// dqkv = the gradient (overwrites); workspace: attentionBackwardWorkspaceFloats device floats.
void attentionBackward(kernels::Ptr dqkv, kernels::ConstPtr dout, kernels::ConstPtr qkv,
                       kernels::ConstPtr probs, int B, int T, int C, int NH, float* workspace,
                       void* stream);

} // namespace shardscope::cuda
