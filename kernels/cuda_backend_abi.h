// What the engine and the CUDA backend plugin (kernels/cuda/plugin.cpp) agree on. The plugin
// returns a kernels::Ops the engine owns and deletes; the two must come from the same build, which
// the version number checks (raise it whenever kernels::Ops changes).
#pragma once

#include <cstddef>

#define SHARDSCOPE_CUDA_BACKEND_ABI 4
#define SHARDSCOPE_CUDA_BACKEND_ENTRY "shardscope_make_cuda_ops"

namespace shardscope::kernels {
class Ops;
}

// Builds the backend on GPU `device`; null with the reason in `error` when it cannot.
using ShardscopeMakeCudaOps = shardscope::kernels::Ops* (*)(int abi, int device, char* error,
                                                            std::size_t errorBytes);
