// The CUDA backend's elementwise operators, one small kernel each (llm.c's shape): the same
// contracts as kernels::Ops (ops.h) on device pointers of either storage type, arithmetic in fp32
// and one rounding to nearest even on a bf16 store. Each call enqueues its kernel on `stream` (a
// cudaStream_t; null: the default stream) and returns; a launch error throws std::runtime_error.
#pragma once

#include "ops.h"

#include <cstddef>

namespace shardscope::cuda {

// dst[i] = src[i], converting between fp32 and bf16 where the types differ.
void convertCopy(kernels::Ptr dst, kernels::ConstPtr src, std::size_t n, void* stream);
void zeroFill(kernels::Ptr x, std::size_t n, void* stream);
// out = a + b; x += y.
void add(kernels::Ptr out, kernels::ConstPtr a, kernels::ConstPtr b, std::size_t n, void* stream);
void addInPlace(kernels::Ptr x, kernels::ConstPtr y, std::size_t n, void* stream);
// GPT-2's GELU (tanh approximation) and its gradient, dinp = gelu'(inp) * dout (dinp may be
// dout).
void geluForward(kernels::Ptr out, kernels::ConstPtr inp, std::size_t n, void* stream);
void geluBackward(kernels::Ptr dinp, kernels::ConstPtr inp, kernels::ConstPtr dout, std::size_t n,
                  void* stream);
// sum[0] (a device double) += the sum of x[i]^2, in a fixed order: the same inputs give the
// same bits on every run, so a resumed run's clipping matches.
void sumOfSquaresAccumulate(kernels::ConstPtr x, std::size_t n, double* sum, void* stream);

struct AdamStep {
    float lr, beta1, beta2, eps, weightDecay, gradScale;
    int t; // 1-based, for the bias correction
};
// AdamW on fp32 master weights `param` with moments m and v; the gradient in either type;
// `working` (may be null) receives the updated weights in its own type (mixed precision).
void adamwUpdate(float* param, kernels::ConstPtr grad, float* m, float* v, std::size_t n,
                 const AdamStep& step, kernels::Ptr working, void* stream);

} // namespace shardscope::cuda
