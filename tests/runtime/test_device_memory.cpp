#include "deferred_device.h"
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

// A block a transfer's stream still uses is not handed out again until that stream has run what
// it had enqueued when the block was let go; the compute stream's own blocks are, at once.
TEST(DeviceAllocator, ABlockAnotherStreamUsesWaitsForThatStream) {
    testing::DeferredOps ops(1, /*patience=*/1000000); // polls never let work run
    auto side = ops.createStream();
    auto& transfer = static_cast<testing::DeferredStream&>(*side);
    DeviceAllocator memory(ops);
    float* first = nullptr;
    bool transferRan = false;
    {
        Buffer a = memory.floats(MemoryCategory::Workspace, 256);
        first = a.f();
        transfer.enqueue([&transferRan, p = a.f()] {
            p[0] = 1.0f; // the transfer writes into the buffer, late
            transferRan = true;
        });
        a.recordStream(*side);
    }
    EXPECT_EQ(memory.blocksInUseElsewhere(), 1u);
    {
        Buffer b = memory.floats(MemoryCategory::Workspace, 256);
        EXPECT_NE(b.f(), first) << "handed out while the transfer may still write it";
    }
    side->synchronize();
    EXPECT_TRUE(transferRan);
    Buffer c = memory.floats(MemoryCategory::Workspace, 256);
    Buffer d = memory.floats(MemoryCategory::Workspace, 256);
    EXPECT_TRUE(c.f() == first || d.f() == first) << "reused once the transfer is done";
    EXPECT_EQ(memory.blocksInUseElsewhere(), 0u);
    EXPECT_EQ(memory.backendAllocations(), 2); // the first block, and one while it was held
}

// The compute stream runs in order, so a block it let go serves the next request at once, even
// with its work not yet run.
TEST(DeviceAllocator, ComputeStreamBlocksAreReusedAtOnce) {
    testing::DeferredOps ops(1, 1000000);
    DeviceAllocator memory(ops);
    float* first = nullptr;
    {
        Buffer a = memory.floats(MemoryCategory::Workspace, 64);
        first = a.f();
        ops.zero(a.f(), 64);
    }
    EXPECT_GT(ops.compute().pending(), 0u);
    Buffer b = memory.floats(MemoryCategory::Workspace, 64);
    EXPECT_EQ(b.f(), first);
}

} // namespace
} // namespace shardscope
