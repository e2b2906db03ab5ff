// The operators Llama-family layers add to GPT-2's, on the GPU, with the contracts of
// kernels::Ops: RMSNorm (one block per row; the weight gradient summed down the columns in a
// fixed order, as the layer norm's), rotary position embedding in place, and SwiGLU (one
// thread per element).
#pragma once

#include "ops.h"

namespace shardscope::cuda {

// out[N,C] = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps) [N] (fp32) kept.
void rmsNormForward(kernels::Ptr out, float* rstd, kernels::ConstPtr inp, kernels::ConstPtr weight,
                    int N, int C, float eps, void* stream);
// dinp += ..., dweight += ...
void rmsNormBackwardAccumulate(kernels::Ptr dinp, kernels::Ptr dweight, kernels::ConstPtr dout,
                               kernels::ConstPtr inp, kernels::ConstPtr weight, const float* rstd,
                               int N, int C, void* stream);

// In place, rotate-half layout; cos and sin [T, headDim/2] fp32 (see kernels::Ops).
void rotaryEmbedding(kernels::Ptr x, const float* cos, const float* sin, int B, int T, int heads,
                     int headDim, int rowStride, bool inverse, void* stream);

// out[N,F] = silu(gateUp[:, :F]) * gateUp[:, F:]
void swigluForward(kernels::Ptr out, kernels::ConstPtr gateUp, int N, int F, void* stream);
// dgateUp[N,2F] = gradient (overwrites)
void swigluBackward(kernels::Ptr dgateUp, kernels::ConstPtr gateUp, kernels::ConstPtr dout, int N,
                    int F, void* stream);

// Grouped-query attention's key and value heads repeated to every query head, and the
// gradients summed back (see kernels::Ops).
void expandKvHeads(kernels::Ptr expanded, kernels::ConstPtr qkv, int N, int heads, int kvHeads,
                   int headDim, void* stream);
void sumKvHeadGradients(kernels::Ptr dqkv, kernels::ConstPtr dexpanded, int N, int heads,
                        int kvHeads, int headDim, void* stream);

} // namespace shardscope::cuda
