// Random data and a span recorder for the tests of the parallel code.
#pragma once

#include "kernels/cpu/cpu_ops.h"
#include "runtime/communicator.h"
#include "runtime/device_memory.h"
#include "runtime/parallel/tensor_parallel.h"

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

namespace shardscope::testing {

inline std::vector<float> randomFloats(std::size_t n, unsigned seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v)
        x = u(rng);
    return v;
}

inline std::vector<std::int32_t> randomTokens(std::size_t n, int vocab, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> u(0, vocab - 1);
    std::vector<std::int32_t> v(n);
    for (std::int32_t& x : v)
        x = u(rng);
    return v;
}

// Rows [begin, begin + count) of a row-major [*, width] matrix.
inline std::vector<float> rowsOf(const std::vector<float>& m, std::size_t width, std::size_t begin,
                                 std::size_t count) {
    return {m.begin() + std::ptrdiff_t(begin * width),
            m.begin() + std::ptrdiff_t((begin + count) * width)};
}

// Columns [begin, begin + count) of every row of a row-major [rows, width] matrix.
inline std::vector<float> columnsOf(const std::vector<float>& m, std::size_t width,
                                    std::size_t begin, std::size_t count) {
    std::vector<float> out;
    for (std::size_t row = 0; row < m.size() / width; ++row)
        out.insert(out.end(), m.begin() + std::ptrdiff_t(row * width + begin),
                   m.begin() + std::ptrdiff_t(row * width + begin + count));
    return out;
}

// What each thread-rank of a test holds: its own backend, allocator and tensor-parallel group.
struct TensorParallelRank {
    TensorParallelRank(int t, int r, Communicator& group, bool sequenceParallel)
        : tp({t, r, &group, sequenceParallel}) {}
    std::unique_ptr<kernels::Ops> ops = kernels::makeCpuOps(1);
    DeviceAllocator memory{*ops};
    TensorParallelGroup tp;
};

class RecordingSink final : public CommunicationSink {
public:
    double now() const override { return double(spans.size()); }
    void communication(const CommunicationSpan& span) override { spans.push_back(span); }
    std::vector<CommunicationSpan> spans;
};

} // namespace shardscope::testing
