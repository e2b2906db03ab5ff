// The engine's loader of the CUDA backend plugin: it finds the plugin this build made, which loads
// on any host (a GPU or not: without one the backend says why), and a path that is missing, not a
// library, or another library is named in the error with what it is.
#include "core/error.h"
#include "runtime/cuda_backend.h"
#include "runtime/devices.h"

#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <string>

namespace shardscope {
namespace {

// Sets SHARDSCOPE_CUDA_BACKEND for one scope.
class BackendPath {
public:
    explicit BackendPath(const std::string& path) {
        ::setenv("SHARDSCOPE_CUDA_BACKEND", path.c_str(), 1);
    }
    ~BackendPath() { ::unsetenv("SHARDSCOPE_CUDA_BACKEND"); }
};

std::string errorOf(int device) {
    try {
        loadCudaBackend(device);
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

TEST(CudaBackend, LoadsThisBuildsPluginOrSaysWhyNot) {
    const DeviceReport gpus = queryDevices();
    if (!gpus.builtWithCuda) {
        const std::string e = errorOf(0);
        EXPECT_NE(e.find("built without CUDA"), std::string::npos) << e;
        EXPECT_NE(e.find("--device cpu"), std::string::npos) << e;
        return;
    }
    if (!gpus.devices.empty()) {
        const auto ops = loadCudaBackend(0);
        EXPECT_EQ(ops->name().rfind("cuda 0 (" + gpus.devices[0].name, 0), 0u) << ops->name();
        return;
    }
    // No GPU: the plugin loaded (its libraries resolve) and its own check answered.
    const std::string e = errorOf(0);
    EXPECT_NE(e.find("no usable CUDA device"), std::string::npos) << e;
    EXPECT_NE(e.find("--device cpu"), std::string::npos) << e;
}

TEST(CudaBackend, ANonexistentGpuIsNamedWithTheHostsCount) {
    const DeviceReport gpus = queryDevices();
    if (gpus.devices.empty())
        GTEST_SKIP() << "no GPU to count: " << gpus.reason;
    const std::string e = errorOf(int(gpus.devices.size()));
    EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
}

TEST(CudaBackend, AWrongPluginPathSaysWhatIsThere) {
    if (!queryDevices().builtWithCuda)
        GTEST_SKIP() << "built without CUDA: no plugin is looked for";
    {
        const BackendPath missing("/nonexistent/libshardscope-cuda.so");
        const std::string e = errorOf(0);
        EXPECT_NE(e.find("/nonexistent/libshardscope-cuda.so: not there"), std::string::npos) << e;
        EXPECT_NE(e.find("SHARDSCOPE_CUDA_BACKEND"), std::string::npos) << e;
    }
    {
        const std::string text = ::testing::TempDir() + "not-a-library.so";
        std::ofstream(text) << "plain text\n";
        const BackendPath notLibrary(text);
        const std::string e = errorOf(0);
        EXPECT_NE(e.find(text + ":"), std::string::npos) << e;
        EXPECT_EQ(e.find("not there"), std::string::npos) << e;
    }
    for (const char* other :
         {"/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1"})
        if (std::ifstream(other)) {
            const BackendPath anotherLibrary(other);
            const std::string e = errorOf(0);
            EXPECT_NE(e.find("not a Shardscope CUDA backend"), std::string::npos) << e;
            break;
        }
}

} // namespace
} // namespace shardscope
