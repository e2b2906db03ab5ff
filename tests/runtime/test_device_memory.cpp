#include "kernels/cpu/cpu_ops.h"
#include "runtime/device_memory.h"

#include <gtest/gtest.h>

namespace shardscope {
namespace {

TEST(DeviceAllocator, CountsLiveAndPeakBytesByCategory) {
    auto ops = kernels::makeCpuOps(1);
    DeviceAllocator memory(*ops);
    {
        Buffer p = memory.floats(MemoryCategory::Parameters, 100);
        Buffer a = memory.floats(MemoryCategory::Activations, 50);
        EXPECT_EQ(memory.live()[MemoryCategory::Parameters], 400);
        EXPECT_EQ(memory.live()[MemoryCategory::Activations], 200);
        EXPECT_EQ(memory.live().total(), 600);
        a.reset();
        EXPECT_EQ(memory.live()[MemoryCategory::Activations], 0);
        EXPECT_EQ(memory.peak()[MemoryCategory::Activations], 200);
        Buffer w = memory.floats(MemoryCategory::Workspace, 10);
        EXPECT_EQ(memory.peakTotal(), 600); // 400 + 40 now, 600 before
    }
    EXPECT_EQ(memory.live().total(), 0);
}

TEST(DeviceAllocator, ReusesFreedBlocksOfTheSameSize) {
    auto ops = kernels::makeCpuOps(1);
    DeviceAllocator memory(*ops);
    void* first = nullptr;
    {
        Buffer a = memory.floats(MemoryCategory::Activations, 256);
        first = a.f();
    }
    Buffer b = memory.floats(MemoryCategory::Workspace, 256);
    EXPECT_EQ(b.f(), first);
    EXPECT_EQ(memory.backendAllocations(), 1);
    Buffer c = memory.floats(MemoryCategory::Workspace, 128);
    EXPECT_EQ(memory.backendAllocations(), 2);
}

TEST(DeviceAllocator, MovedBuffersAreCountedOnce) {
    auto ops = kernels::makeCpuOps(1);
    DeviceAllocator memory(*ops);
    Buffer a = memory.floats(MemoryCategory::Gradients, 8);
    Buffer b = std::move(a);
    EXPECT_FALSE(a);
    EXPECT_EQ(memory.live()[MemoryCategory::Gradients], 32);
    b = Buffer{};
    EXPECT_EQ(memory.live()[MemoryCategory::Gradients], 0);
}

} // namespace
} // namespace shardscope
