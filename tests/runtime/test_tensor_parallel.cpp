#include "parallel_test_support.h"
#include "runtime/parallel/tensor_parallel.h"
#include "thread_group.h"

#include <gtest/gtest.h>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardscope {
namespace {

using testing::RecordingSink;
using testing::ThreadGroup;

// A [6, 4] tensor whose value is its flat index, so a share says where each value came from.
const std::vector<int> kDims{6, 4};
std::vector<float> indexTensor() {
    std::vector<float> v(24);
    for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = float(i);
    return v;
}

std::vector<float> share(TpSplit split, int t, int r, const std::vector<int>& blocks = {}) {
    const std::vector<float> whole = indexTensor();
    std::vector<float> out(whole.size() / std::size_t(split == TpSplit::None ? 1 : t));
    copyTensorParallelShare(out.data(), whole.data(), kDims, split, t, r, blocks);
    return out;
}

TEST(TensorParallel, SharesCutEachSplitAsMegatronDoes) {
    EXPECT_EQ(share(TpSplit::None, 2, 1), indexTensor());
    // Column-parallel weights: rank 1 of 2 holds rows 3..5.
    EXPECT_EQ(share(TpSplit::Rows, 2, 1),
              (std::vector<float>{12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}));
    // Row-parallel weights: rank 1 of 2 holds columns 2 and 3 of every row.
    EXPECT_EQ(share(TpSplit::Columns, 2, 1),
              (std::vector<float>{2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23}));
    // Fused QKV: q, k and v are rows 0-1, 2-3 and 4-5; rank 1 holds the second row of each.
    EXPECT_EQ(share(TpSplit::BlockRows, 2, 1, {2, 2, 2}),
              (std::vector<float>{4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23}));
    // Unequal blocks, as grouped-query attention's q, k and v are: rows 0-3 and rows 4-5. Rank 1
    // holds rows 2-3 of the first and row 5 of the second.
    EXPECT_EQ(share(TpSplit::BlockRows, 2, 1, {4, 2}),
              (std::vector<float>{8, 9, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23}));
}

TEST(TensorParallelGroup, CollectivesComputeOverTheGroupAndReportTpSpans) {
    constexpr int t = 3;
    ThreadGroup threads(t);
    std::vector<RecordingSink> sinks(t);
    std::vector<std::vector<float>> sums(t), maxima(t), gathered(t), scattered(t);
    threads.run([&](int r, Communicator& c) {
        TensorParallelGroup tp({t, r, &c, false});
        tp.setCommunicationSink(&sinks[std::size_t(r)]);
        const float v = float(r + 1);
        std::vector<float> sum{v, 10 * v}, max{v, -v}, all(2 * t), mine(2);
        std::vector<float> scatterIn(2 * t, v);
        tp.allReduceSum(sum.data(), 2);
        tp.allReduceMax(max.data(), 2);
        tp.allGather(std::vector<float>{v, v}.data(), all.data(), 2);
        tp.reduceScatterSum(scatterIn.data(), mine.data(), 2);
        sums[std::size_t(r)] = sum;
        maxima[std::size_t(r)] = max;
        gathered[std::size_t(r)] = all;
        scattered[std::size_t(r)] = mine;
    });
    for (int r = 0; r < t; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        EXPECT_EQ(sums[std::size_t(r)], (std::vector<float>{6, 60}));
        EXPECT_EQ(maxima[std::size_t(r)], (std::vector<float>{3, -1}));
        EXPECT_EQ(gathered[std::size_t(r)], (std::vector<float>{1, 1, 2, 2, 3, 3}));
        EXPECT_EQ(scattered[std::size_t(r)], (std::vector<float>{6, 6}));
        const auto& spans = sinks[std::size_t(r)].spans;
        ASSERT_EQ(spans.size(), 4u);
        const char* names[] = {"all_reduce", "all_reduce", "all_gather", "reduce_scatter"};
        // Bytes as the planner counts a collective's message: the reduce-scatter's whole input.
        const std::size_t bytes[] = {8, 8, 8, 24};
        for (std::size_t i = 0; i < spans.size(); ++i) {
            EXPECT_STREQ(spans[i].axis, "tp");
            EXPECT_STREQ(spans[i].collective, names[i]);
            EXPECT_EQ(spans[i].bytes, bytes[i]);
            EXPECT_TRUE(spans[i].waited);
            EXPECT_LE(spans[i].start, spans[i].end);
        }
    }
}

TEST(TensorParallelGroup, OneRankReducesNothingAndHasNothingToGather) {
    TensorParallelGroup tp({1, 0, nullptr, false});
    RecordingSink sink;
    tp.setCommunicationSink(&sink);
    std::vector<float> x{1, 2};
    tp.allReduceSum(x.data(), 2);
    tp.allReduceMax(x.data(), 2);
    EXPECT_EQ(x, (std::vector<float>{1, 2}));
    EXPECT_TRUE(sink.spans.empty());
    std::vector<float> out(2);
    EXPECT_THROW(tp.allGather(x.data(), out.data(), 2), std::logic_error);
    EXPECT_THROW(tp.reduceScatterSum(x.data(), out.data(), 2), std::logic_error);
    EXPECT_EQ(tp.share(12), 12);
    EXPECT_TRUE(tp.addsReplicatedTerms());
}

TEST(TensorParallelGroup, RefusesSeveralRanksWithoutAGroupOrARankOutsideIt) {
    EXPECT_THROW(TensorParallelGroup({2, 0, nullptr, false}), std::logic_error);
    testing::FakeCommunicator group(0, 2);
    EXPECT_THROW(TensorParallelGroup({2, 2, &group, false}), std::logic_error);
    const TensorParallelGroup second({2, 1, &group, false});
    EXPECT_EQ(second.share(12), 6);
    EXPECT_FALSE(second.addsReplicatedTerms());
}

} // namespace
} // namespace shardscope
