// Layer norm over C channels (eps 1e-5) on the GPU, with the contracts of kernels::Ops: one
// block per row for the forward and the input gradient, one thread per channel for the weight
// and bias gradients (rows summed in order, so the same inputs give the same bits). The input
// and its gradient share one type, the weight and bias another, and so do their gradients.
#pragma once

#include "ops.h"

namespace shardscope::cuda {

// out[N,C] = (inp - mean) * rstd * weight + bias; mean and rstd [N] (fp32) kept for the backward.
void layerNormForward(kernels::Ptr out, float* mean, float* rstd, kernels::ConstPtr inp,
                      kernels::ConstPtr weight, kernels::ConstPtr bias, int N, int C, void* stream);
// dinp += ..., dweight += ..., dbias += ...
void layerNormBackwardAccumulate(kernels::Ptr dinp, kernels::Ptr dweight, kernels::Ptr dbias,
                                 kernels::ConstPtr dout, kernels::ConstPtr inp,
                                 kernels::ConstPtr weight, const float* mean, const float* rstd,
                                 int N, int C, void* stream);

} // namespace shardscope::cuda
