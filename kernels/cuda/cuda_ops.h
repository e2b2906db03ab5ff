// The CUDA backend: kernels::Ops on one GPU. Every operator is enqueued on the compute stream (a
// stream of its own, not the legacy default one) and returns at once; events are CUDA events,
// timed on the GPU and mapped onto the host's steady clock; memory comes from cudaMalloc (the
// runtime's DeviceAllocator caches and counts it). Operator temporaries (rounded GEMM operands,
// attention and loss row statistics) come from the stream-ordered pool and live exactly as long
// as the work that reads them.
#pragma once

#include "ops.h"

#include <memory>

namespace shardscope::cuda {

// Makes `device` current for the calling thread and builds the backend on it. Throws
// std::runtime_error where there is no such GPU or it cannot be used.
std::unique_ptr<kernels::Ops> makeCudaOps(int device);

} // namespace shardscope::cuda
