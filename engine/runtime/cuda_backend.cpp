#include "cuda_backend.h"

#include "core/error.h"
#include "kernels/cuda_backend_abi.h"

#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <system_error>

namespace shardscope {

namespace {

constexpr const char* kPluginFile = "libshardscope-cuda.so";

std::filesystem::path executableDirectory() {
    std::error_code e;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", e);
    return e ? std::filesystem::path() : exe.parent_path();
}

} // namespace

std::vector<std::string> cudaBackendCandidates() {
    std::vector<std::string> out;
    if (const char* path = std::getenv("SHARDSCOPE_CUDA_BACKEND"); path && *path)
        return {path}; // the user's choice, and only it
    if (const std::filesystem::path dir = executableDirectory(); !dir.empty()) {
        out.push_back((dir.parent_path() / "lib" / "shardscope" / kPluginFile).string());
        out.push_back((dir / kPluginFile).string());
    }
#ifdef SHARDSCOPE_CUDA_BACKEND_BUILT
    out.emplace_back(SHARDSCOPE_CUDA_BACKEND_BUILT);
#endif
    return out;
}

std::unique_ptr<kernels::Ops> loadCudaBackend(int device) {
#ifndef SHARDSCOPE_HAVE_CUDA
    (void)device;
    throw InputError("engine.device cuda: this engine was built without CUDA (no nvcc or NCCL "
                     "when it was configured); rebuild it where the CUDA toolkit is installed, "
                     "or run with --device cpu");
#else
    std::string tried;
    for (const std::string& path : cudaBackendCandidates()) {
        std::error_code e;
        if (!std::filesystem::exists(path, e)) {
            tried += "\n  " + path + ": not there";
            continue;
        }
        // The handle stays open for the life of the process: the backend's code must outlive
        // every object it made.
        void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!library) {
            const char* why = dlerror();
            tried += "\n  " + path + ": " + (why ? why : "does not load");
            continue;
        }
        void* entry = dlsym(library, SHARDSCOPE_CUDA_BACKEND_ENTRY);
        if (!entry) {
            tried += "\n  " + path + ": not a Shardscope CUDA backend (no " +
                     SHARDSCOPE_CUDA_BACKEND_ENTRY + ")";
            continue;
        }
        char error[1024] = "";
        auto make = reinterpret_cast<ShardscopeMakeCudaOps>(entry);
        if (kernels::Ops* ops = make(SHARDSCOPE_CUDA_BACKEND_ABI, device, error, sizeof error))
            return std::unique_ptr<kernels::Ops>(ops);
        throw InputError(std::string("engine.device cuda: ") + error + "; run with --device cpu");
    }
    throw InputError("engine.device cuda: the CUDA backend (" + std::string(kPluginFile) +
                     ") could not be loaded; set SHARDSCOPE_CUDA_BACKEND to its path, or run "
                     "with --device cpu. Looked in:" +
                     tried);
#endif
}

} // namespace shardscope
