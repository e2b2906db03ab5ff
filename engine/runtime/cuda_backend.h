// The CUDA backend, opened at run time (libshardscope-cuda.so, kernels/cuda/plugin.cpp) so the
// engine starts on hosts without NVIDIA's libraries and needs them only for device cuda.
#pragma once

#include "kernels/ops.h"

#include <memory>
#include <string>
#include <vector>

namespace shardscope {

// Where the plugin is looked for: $SHARDSCOPE_CUDA_BACKEND alone where it is set; otherwise next
// to the engine (../lib/shardscope/ from its bin/ when installed, then its own directory), then
// the build tree it was built in.
std::vector<std::string> cudaBackendCandidates();

// The backend on GPU `device` of this host. Throws InputError with what to do when this engine
// was built without CUDA, the plugin is missing or does not load, or the GPU cannot be used.
std::unique_ptr<kernels::Ops> loadCudaBackend(int device);

} // namespace shardscope
