// The CUDA backend as a plugin: the engine opens libshardscope-cuda.so at run time when a run asks
// for device cuda, so the engine itself needs no NVIDIA library to start (a CPU host's engine).
// One C entry point; errors cross as text.
#include "cuda_backend_abi.h"
#include "cuda_ops.h"

#include <cstdio>
#include <exception>

extern "C" shardscope::kernels::Ops* shardscope_make_cuda_ops(int abi, int device, char* error,
                                                              std::size_t errorBytes) {
    try {
        if (abi != SHARDSCOPE_CUDA_BACKEND_ABI) {
            std::snprintf(error, errorBytes,
                          "libshardscope-cuda.so speaks interface %d and this engine %d: install "
                          "the two from the same build",
                          SHARDSCOPE_CUDA_BACKEND_ABI, abi);
            return nullptr;
        }
        return shardscope::cuda::makeCudaOps(device).release();
    } catch (const std::exception& e) {
        std::snprintf(error, errorBytes, "%s", e.what());
    } catch (...) {
        std::snprintf(error, errorBytes, "an unknown error building the CUDA backend");
    }
    return nullptr;
}
