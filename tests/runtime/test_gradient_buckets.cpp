#include "fake_communicator.h"
#include "kernels/cpu/cpu_ops.h"
#include "runtime/parallel/gradient_buckets.h"
#include "thread_group.h"

#include <gtest/gtest.h>
#include <stdexcept>

namespace shardscope {
namespace {

// A group of two identical replicas: an all-reduce doubles the buffer when it completes.
class TwoReplicas final : public testing::FakeCommunicator {
public:
    TwoReplicas() : FakeCommunicator(1, 2) {}
    struct Call {
        float* data;
        std::size_t n;
    };
    std::vector<Call> calls;

    Request allReduceSum(kernels::Ptr typed, std::size_t n) override {
        float* data = kernels::asFloats(typed);
        calls.push_back({data, n});
        struct Doubling final : Request::Pending {
            float* data;
            std::size_t n;
            Doubling(float* d, std::size_t count) : data(d), n(count) {}
            void wait() override {
                for (std::size_t i = 0; i < n; ++i)
                    data[i] *= 2;
                n = 0;
            }
            bool test() override { return false; }
        };
        return Request(std::make_unique<Doubling>(data, n));
    }
};

double zeroClock(const void*) {
    return 0;
}

TEST(GradientBuckets, CoalescesRangesFinishedBackToFrontUpToTheBucketSize) {
    TwoReplicas group;
    std::vector<float> grads(100, 1.0f);
    GradientBuckets buckets(group, grads.data(), grads.size(), 30 * sizeof(float), nullptr,
                            zeroClock);
    buckets.startStep();
    buckets.gradientsReady(80, 20); // the head
    EXPECT_TRUE(group.calls.empty());
    buckets.gradientsReady(60, 20); // a layer: 40 floats pending, over the bucket size
    ASSERT_EQ(group.calls.size(), 1u);
    EXPECT_EQ(group.calls[0].data, grads.data() + 60);
    EXPECT_EQ(group.calls[0].n, 40u);
    buckets.gradientsReady(0, 10); // not adjacent to anything pending: a bucket of its own
    buckets.gradientsReady(40, 20);
    buckets.gradientsReady(10, 30); // ends where the pending range starts? no: 10+30 = 40
    buckets.finish();
    for (float g : grads)
        EXPECT_EQ(g, 2.0f); // every gradient reduced exactly once
    EXPECT_EQ(buckets.buckets().size(), group.calls.size());
}

// ZeRO over three replicas (threads with real collectives): units of 30, 30 and 40 floats,
// the last padded to 42. Each rank ends with the sums of the shards it owns.
TEST(GradientBuckets, UnderZeroEachRankReceivesTheSumOfItsShardOfEveryUnit) {
    const std::vector<std::size_t> units = {0, 30, 60};
    testing::ThreadGroup(3).run([&](int rank, Communicator& group) {
        const ShardLayout layout(100, units, 3, rank);
        std::vector<float> grads(100);
        for (std::size_t i = 0; i < grads.size(); ++i)
            grads[i] = float(rank + 1) * float(i); // summed over ranks: 6 i
        auto ops = kernels::makeCpuOps(1);
        DeviceAllocator memory(*ops);
        GradientBuckets buckets(group, grads.data(), grads.size(), 50 * sizeof(float), nullptr,
                                zeroClock);
        buckets.shardOver(layout, memory, *ops);
        buckets.startStep();
        buckets.gradientsReady(60, 40); // the last unit: a bucket of 40, under the size
        buckets.gradientsReady(45, 15); // half a unit: nothing joins yet
        buckets.gradientsReady(30, 15); // the rest of it: 70 floats, a bucket of two units
        buckets.gradientsReady(0, 30);
        buckets.finish();
        EXPECT_EQ(buckets.buckets().size(), 2u);
        EXPECT_EQ(buckets.buckets()[0].offset, 30u);
        EXPECT_EQ(buckets.buckets()[0].count, 70u);
        for (const ShardLayout::Piece& p : layout.owned())
            for (std::size_t i = p.flat; i < p.flat + p.count; ++i)
                EXPECT_EQ(grads[i], 6.0f * float(i)) << "element " << i;
        EXPECT_STREQ(buckets.collective(), "reduce_scatter");
        EXPECT_EQ(memory.live()[MemoryCategory::Workspace], 0); // the received parts are let go
    });
}

TEST(GradientBuckets, RefusesToFinishWithGradientsLeftOut) {
    TwoReplicas group;
    std::vector<float> grads(10, 1.0f);
    GradientBuckets buckets(group, grads.data(), grads.size(), 1024, nullptr, zeroClock);
    buckets.startStep();
    buckets.gradientsReady(5, 5);
    EXPECT_THROW(buckets.finish(), std::logic_error);
}

} // namespace
} // namespace shardscope
