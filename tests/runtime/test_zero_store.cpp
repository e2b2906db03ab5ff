#include "fake_communicator.h"
#include "kernels/cpu/cpu_ops.h"
#include "runtime/parallel/zero_store.h"

#include <gtest/gtest.h>

namespace shardscope {
namespace {

// Replica 1 of 2. A gather fills the other replica's part with 100 + its flat offset; a
// reduce-scatter returns this replica's part doubled (as if the other held the same values).
class SecondOfTwo final : public testing::FakeCommunicator {
public:
    SecondOfTwo() : FakeCommunicator(1, 2) {}
    std::size_t gatherOffset = 0; // the flat offset of the range being gathered
    Request reduceScatterSumV(kernels::ConstPtr typedIn, kernels::Ptr typedOut,
                              const std::vector<std::size_t>& counts) override {
        const float* in = kernels::asFloats(typedIn);
        float* out = kernels::asFloats(typedOut);
        for (std::size_t i = 0; i < counts[1]; ++i)
            out[i] = 2 * in[counts[0] + i];
        return {};
    }
    Request allGatherVInPlace(kernels::Ptr typed, const std::vector<std::size_t>& counts) override {
        float* data = kernels::asFloats(typed);
        for (std::size_t i = 0; i < counts[0]; ++i)
            data[i] = 100.0f + float(gatherOffset + i);
        return {};
    }
};

std::vector<float> iota(std::size_t n) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = float(i);
    return v;
}

TEST(ZeroStore, WithoutShardingEverythingIsStoredWhole) {
    auto ops = kernels::makeCpuOps(1);
    DeviceAllocator memory(*ops);
    SecondOfTwo group;
    ZeroStore store(10, ZeroSharding{1, &group}, *ops, memory); // ZeRO-1: not the store's job
    EXPECT_FALSE(store.shardsGradients());
    EXPECT_EQ(store.ownedBegin(), 0u);
    EXPECT_EQ(store.ownedEnd(), 10u);
    const std::vector<float> whole = iota(10);
    store.setParameters(whole.data());
    Buffer held;
    EXPECT_EQ(kernels::asFloats(store.parametersOf(4, 3, held)),
              kernels::asFloats(store.parameters()) + 4);
    EXPECT_FALSE(held);
    EXPECT_EQ(kernels::asFloats(store.gradientsFor(4, 3, held)),
              kernels::asFloats(store.gradients()) + 4);
    EXPECT_EQ(memory.live()[MemoryCategory::Parameters], 40);
    EXPECT_EQ(memory.live()[MemoryCategory::Gradients], 40);
}

TEST(ZeroStore, ZeroThreeKeepsTheSliceAndGathersRangesAroundIt) {
    auto ops = kernels::makeCpuOps(1);
    DeviceAllocator memory(*ops);
    SecondOfTwo group;
    ZeroStore store(10, ZeroSharding{3, &group}, *ops, memory);
    EXPECT_EQ(store.ownedBegin(), 5u); // replica 1 of 2 owns [5, 10)
    EXPECT_EQ(memory.live()[MemoryCategory::Parameters], 20);
    EXPECT_EQ(memory.live()[MemoryCategory::Gradients], 20);
    const std::vector<float> whole = iota(10);
    store.setParameters(whole.data());
    EXPECT_EQ(*kernels::asFloats(store.parameterAt(7)), 7.0f);

    // [3, 8): flat 3 and 4 from replica 0, then this replica's 5, 6 and 7 in place.
    group.gatherOffset = 3;
    Buffer held;
    const float* range = kernels::asFloats(store.parametersOf(3, 5, held));
    EXPECT_EQ(std::vector<float>(range, range + 5), (std::vector<float>{103, 104, 5, 6, 7}));
    held.reset();
    // A prefetch of the same range is what the next use gets.
    store.prefetch(3, 5);
    const float* prefetched = kernels::asFloats(store.parametersOf(3, 5, held));
    EXPECT_EQ(prefetched[2], 5.0f);
    held.reset();

    // A microbatch's gradient of [2, 9) lands, reduced, in the owned [5, 9) part of the slice.
    float* g = kernels::asFloats(store.gradientsFor(2, 7, held));
    for (int i = 0; i < 7; ++i)
        g[i] = float(2 + i);
    store.gradientsDone(2, 7, held);
    EXPECT_FALSE(held);
    EXPECT_EQ(std::vector<float>(kernels::asFloats(store.gradients()),
                                 kernels::asFloats(store.gradients()) + 5),
              (std::vector<float>{10, 12, 14, 16, 0}));
    store.zeroGradients();
    EXPECT_EQ(*kernels::asFloats(store.gradientAt(6)), 0.0f);
    EXPECT_EQ(memory.live()[MemoryCategory::Workspace], 0); // every temporary let go
}

} // namespace
} // namespace shardscope
