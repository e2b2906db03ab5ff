#include "devices.h"

#include "core/presets.h"

#ifdef SHARDSCOPE_HAVE_CUDA
#include "cuda/device_query.h"
#endif

namespace shardscope {

namespace {

[[maybe_unused]] std::string version(int v, int majorDiv, int minorDiv) {
    return std::to_string(v / majorDiv) + "." + std::to_string((v % majorDiv) / minorDiv);
}

} // namespace

DeviceReport queryDevices() {
    DeviceReport r;
#ifdef SHARDSCOPE_HAVE_CUDA
    r.builtWithCuda = true;
    const cuda::DeviceQuery q = cuda::queryDevices();
    r.versions = "CUDA runtime " + version(q.runtimeVersion, 1000, 10) +
                 (q.driverVersion ? ", driver API " + version(q.driverVersion, 1000, 10)
                                  : std::string(", no driver")) +
                 ", cuBLASLt " + std::to_string(q.cublasLtVersion) + ", NCCL " +
                 std::to_string(q.ncclVersion / 10000) + "." +
                 std::to_string((q.ncclVersion % 10000) / 100) + "." +
                 std::to_string(q.ncclVersion % 100);
    for (const cuda::Device& d : q.devices)
        r.devices.push_back({d.index, d.name, d.memoryBytes, d.sms,
                             std::to_string(d.ccMajor) + "." + std::to_string(d.ccMinor),
                             matchGpuPreset(d.name)});
    if (r.devices.empty())
        r.reason = q.error.empty() ? "the CUDA runtime reports no GPU" : q.error;
#else
    r.reason = "this build of Shardscope has no CUDA support (nvcc or NCCL was not found when it "
               "was configured)";
#endif
    return r;
}

} // namespace shardscope
