#include "fake_communicator.h"
#include "kernels/cpu/cpu_ops.h"
#include "runtime/parallel/gradient_buckets.h"

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
    // As if the other replica held the same values: this rank's part, doubled.
    std::vector<std::vector<std::size_t>> scatterCounts;
    Request reduceScatterSumV(kernels::ConstPtr typedIn, kernels::Ptr typedOut,
                              const std::vector<std::size_t>& counts) override {
        const float* in = kernels::asFloats(typedIn);
        float* out = kernels::asFloats(typedOut);
        scatterCounts.push_back(counts);
        for (std::size_t i = 0; i < counts[1]; ++i)
            out[i] = 2 * in[counts[0] + i];
        return {};
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

TEST(FlatShards, SplitIntoCeilingSlicesTheLastShorter) {
    const FlatShards s{10, 4}; // 3, 3, 3, 1
    EXPECT_EQ(s.begin(0), 0u);
    EXPECT_EQ(s.end(0), 3u);
    EXPECT_EQ(s.begin(3), 9u);
    EXPECT_EQ(s.size(3), 1u);
    EXPECT_EQ(s.countsOf(2, 6), (std::vector<std::size_t>{1, 3, 2, 0}));
    EXPECT_EQ(s.countsOf(0, 10), (std::vector<std::size_t>{3, 3, 3, 1}));
    const FlatShards tiny{2, 4}; // more ranks than floats: the last ones own nothing
    EXPECT_EQ(tiny.countsOf(0, 2), (std::vector<std::size_t>{1, 1, 0, 0}));
}

// ZeRO: each bucket is reduce-scattered; this rank (1 of 2) ends with the sums of its own
// slice, assembled from the parts of every bucket that fall in it.
TEST(GradientBuckets, UnderZeroEachRankReceivesItsOwnSliceOfEveryBucket) {
    TwoReplicas group;
    std::vector<float> grads(100);
    for (std::size_t i = 0; i < grads.size(); ++i)
        grads[i] = float(i);
    auto ops = kernels::makeCpuOps(1);
    DeviceAllocator memory(*ops);
    const FlatShards shards{100, 2};
    GradientBuckets buckets(group, grads.data(), grads.size(), 30 * sizeof(float), nullptr,
                            zeroClock);
    buckets.shardOver(shards, memory, *ops);
    buckets.startStep();
    buckets.gradientsReady(60, 40);
    buckets.gradientsReady(30, 30);
    buckets.gradientsReady(0, 30);
    buckets.finish();
    EXPECT_EQ(group.scatterCounts,
              (std::vector<std::vector<std::size_t>>{{0, 40}, {20, 10}, {30, 0}}));
    for (std::size_t i = 50; i < 100; ++i)
        EXPECT_EQ(grads[i], 2.0f * float(i)) << i;
    EXPECT_STREQ(buckets.collective(), "reduce_scatter");
    EXPECT_EQ(memory.live()[MemoryCategory::Workspace], 0); // the received parts are let go
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
