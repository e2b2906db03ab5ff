// What the CUDA kernel tests share: a GPU or a skip with the runtime's reason, tensors held
// alike on the host (for the CPU operator) and on the GPU, and the comparison of the two.
#pragma once

#include "kernels/bf16.h"
#include "kernels/cuda/device_array.h"
#include "kernels/cuda/device_query.h"
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>

namespace shardscope::testing {

using kernels::DType;

inline const cuda::DeviceQuery& gpus() {
    static const cuda::DeviceQuery q = cuda::queryDevices();
    return q;
}

#define SKIP_WITHOUT_GPU()                                                                         \
    do {                                                                                           \
        if (::shardscope::testing::gpus().devices.empty())                                         \
            GTEST_SKIP() << "no CUDA device: " << ::shardscope::testing::gpus().error;             \
    } while (0)

// Sizes that fill no block or grid evenly: one element, a block and one, a prime past the grid.
inline const std::size_t kSizes[] = {1, 257, 1000003};

// Values in one storage type, on the host and the same on the GPU.
struct Tensor {
    DType type;
    std::vector<unsigned char> host;
    cuda::DeviceArray device;

    Tensor(DType t, const std::vector<float>& values)
        : type(t), host(values.size() * kernels::sizeOf(t)), device(host.size()) {
        for (std::size_t i = 0; i < values.size(); ++i)
            if (t == DType::F32)
                std::memcpy(host.data() + 4 * i, &values[i], 4);
            else {
                const std::uint16_t b = kernels::floatToBf16(values[i]);
                std::memcpy(host.data() + 2 * i, &b, 2);
            }
        device.upload(host.data(), host.size());
    }
    kernels::Ptr cpu() { return {host.data(), type}; }
    kernels::Ptr gpu() { return {device.data(), type}; }
    std::vector<float> valuesOf(const unsigned char* bytes) const {
        std::vector<float> out(host.size() / kernels::sizeOf(type));
        for (std::size_t i = 0; i < out.size(); ++i)
            if (type == DType::F32)
                std::memcpy(&out[i], bytes + 4 * i, 4);
            else {
                std::uint16_t b;
                std::memcpy(&b, bytes + 2 * i, 2);
                out[i] = kernels::bf16ToFloat(b);
            }
        return out;
    }
    std::vector<float> cpuValues() const { return valuesOf(host.data()); }
    std::vector<float> gpuValues() const {
        std::vector<unsigned char> bytes(host.size());
        device.download(bytes.data(), bytes.size());
        return valuesOf(bytes.data());
    }
};

inline std::vector<float> randomValues(std::size_t n, unsigned seed, float scale = 2.0f) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v)
        x = normal(gen);
    return v;
}

// The two backends agree within what the output type can tell apart: fp32 to `relative` (1e-5
// by default: the CPU's tanh and exp are polynomial approximations good to about 1e-7; more where
// the two sum in different orders), bf16 to one unit in the last place (2^-7: a value near a
// rounding boundary may round either way), each plus `absolute` for values near zero.
inline void expectClose(const Tensor& t, const std::string& what, float relative = 1e-5f,
                        float absolute = 1e-6f) {
    const std::vector<float> cpu = t.cpuValues(), gpu = t.gpuValues();
    const float r = t.type == DType::F32 ? relative : std::max(relative, 0x1.0p-7f);
    for (std::size_t i = 0; i < cpu.size(); ++i)
        ASSERT_NEAR(gpu[i], cpu[i], r * std::fabs(cpu[i]) + absolute)
            << what << ", element " << i << " of " << cpu.size();
}

inline const DType kTypes[] = {DType::F32, DType::BF16};

} // namespace shardscope::testing
