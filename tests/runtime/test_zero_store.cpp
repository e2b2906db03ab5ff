#include "fake_communicator.h"
#include "kernels/cpu/cpu_ops.h"
#include "runtime/parallel/zero_store.h"
#include "thread_group.h"

#include <gtest/gtest.h>

namespace shardscope {
namespace {

// Replica 1 of 2, for what needs no collective.
class SecondOfTwo final : public testing::FakeCommunicator {
public:
    SecondOfTwo() : FakeCommunicator(1, 2) {}
};

std::vector<float> iota(std::size_t n) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = float(i);
    return v;
}

// Units of 7, 8 and 5 elements over 3 replicas: only the second divides evenly.
const std::vector<std::size_t> kUnits = {0, 7, 15};
constexpr std::size_t kTotal = 20;

TEST(ZeroStore, WithoutShardingEverythingIsStoredWhole) {
    auto ops = kernels::makeCpuOps(1);
    DeviceAllocator memory(*ops);
    SecondOfTwo group;
    ZeroStore store(10, {0, 4}, ZeroSharding{1, &group}, *ops, memory); // ZeRO-1: the optimizer's
    EXPECT_FALSE(store.shardsGradients());
    EXPECT_TRUE(store.layout().sharded()); // the optimizer keeps its shards by it
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

// Three replicas as threads, with real collectives: each stores its padded shards, a gathered
// unit is the whole unit on every replica, and a reduced gradient lands summed in its owner's
// shard, whether the unit divides evenly or is padded.
TEST(ZeroStore, ZeroThreeGathersWholeUnitsAndReducesIntoEachOwnersShard) {
    std::vector<float> whole(kTotal);
    for (std::size_t i = 0; i < kTotal; ++i)
        whole[i] = float(i + 1);
    testing::ThreadGroup(3).run([&](int rank, Communicator& group) {
        auto ops = kernels::makeCpuOps(1);
        DeviceAllocator memory(*ops);
        ZeroStore store(kTotal, kUnits, ZeroSharding{3, &group}, *ops, memory);
        EXPECT_TRUE(store.shardsParameters());
        const std::size_t stored = 3 + 3 + 2; // ceil(7/3) + ceil(8/3) + ceil(5/3)
        EXPECT_EQ(memory.live()[MemoryCategory::Parameters], stored * sizeof(float));
        EXPECT_EQ(memory.live()[MemoryCategory::Gradients], stored * sizeof(float));
        store.setParameters(whole.data());

        std::vector<std::vector<float>> gathered;
        for (std::size_t u = 0; u < kUnits.size(); ++u) {
            const std::size_t offset = kUnits[u];
            const std::size_t n = (u + 1 < kUnits.size() ? kUnits[u + 1] : kTotal) - offset;
            if (u == 1)
                store.prefetch(offset, n); // the next use takes the prefetched gather
            Buffer held;
            const float* values = kernels::asFloats(store.parametersOf(offset, n, held));
            gathered.emplace_back(values, values + n);

            // Replica r's gradient of element i is (r + 1) * (i + 1): summed, 6 * (i + 1).
            float* g = kernels::asFloats(store.gradientsFor(offset, n, held));
            for (std::size_t i = 0; i < n; ++i)
                g[i] = float(rank + 1) * float(offset + i + 1);
            store.gradientsDone(offset, n, held);
        }
        for (std::size_t u = 0; u < kUnits.size(); ++u)
            EXPECT_EQ(gathered[u], std::vector<float>(whole.begin() + std::ptrdiff_t(kUnits[u]),
                                                      whole.begin() + std::ptrdiff_t(kUnits[u]) +
                                                          std::ptrdiff_t(gathered[u].size())))
                << "unit " << u;
        for (const ShardLayout::Piece& p : store.layout().owned())
            for (std::size_t i = 0; i < p.count; ++i)
                EXPECT_EQ(*kernels::asFloats(store.gradientAt(p.flat + i)),
                          6.0f * float(p.flat + i + 1))
                    << "element " << p.flat + i;
        EXPECT_EQ(memory.live()[MemoryCategory::Workspace], 0); // every temporary let go
    });
}

} // namespace
} // namespace shardscope
