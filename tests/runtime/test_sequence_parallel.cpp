// Sequence parallelism on 2 and 3 threads as ranks, against the one-rank operations.
#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "parallel_test_support.h"
#include "runtime/parallel/sequence_parallel.h"
#include "thread_group.h"

#include <gtest/gtest.h>
#include <string>
#include <vector>

namespace shardscope {
namespace {

using testing::randomFloats;
using testing::rowsOf;
using testing::ThreadGroup;

constexpr int kRows = 6, kChannels = 4;
constexpr std::size_t kWhole = std::size_t(kRows) * kChannels;

std::vector<float> sumOfPartials(int t) {
    std::vector<float> sum(kWhole, 0.0f);
    for (int r = 0; r < t; ++r) {
        const std::vector<float> p = randomFloats(kWhole, unsigned(r));
        for (std::size_t i = 0; i < kWhole; ++i)
            sum[i] += p[i];
    }
    return sum;
}

// Rank r's partial sum: the values sumOfPartials adds up.
Buffer partialOf(DeviceAllocator& memory, int r) {
    Buffer partial = memory.floats(MemoryCategory::Workspace, kWhole);
    const std::vector<float> mine = randomFloats(kWhole, unsigned(r));
    std::copy(mine.begin(), mine.end(), partial.f());
    return partial;
}

TEST(SequenceParallel, EachRankKeepsItsTokenRowsOfTheSumAndGathersTheWhole) {
    for (int t : {2, 3}) {
        SCOPED_TRACE("tp " + std::to_string(t));
        const std::vector<float> sum = sumOfPartials(t), stream = randomFloats(kWhole, 99);
        const std::size_t share = kWhole / std::size_t(t);
        std::vector<std::vector<float>> reduced(static_cast<std::size_t>(t)),
            whole(static_cast<std::size_t>(t));
        std::vector<int> tokenRows(static_cast<std::size_t>(t));
        ThreadGroup threads(t);
        threads.run([&](int r, Communicator& c) {
            testing::TensorParallelRank rank(t, r, c, true);
            const SequenceParallel sp(rank.tp, true, kRows, kChannels, *rank.ops, rank.memory);
            Buffer partial = partialOf(rank.memory, r), shard;
            const float* tokens = kernels::asFloats(sp.reduce(partial, shard));
            reduced[std::size_t(r)].assign(tokens, tokens + sp.tokenElements());
            Buffer holder;
            const float* all = kernels::asFloats(
                sp.whole(stream.data() + std::size_t(r) * sp.tokenElements(), holder));
            whole[std::size_t(r)].assign(all, all + kWhole);
            tokenRows[std::size_t(r)] = sp.tokenRows();
        });
        for (int r = 0; r < t; ++r) {
            EXPECT_EQ(tokenRows[std::size_t(r)], kRows / t);
            const std::vector<float> expected = rowsOf(sum, 1, std::size_t(r) * share, share);
            ASSERT_EQ(reduced[std::size_t(r)].size(), expected.size());
            for (std::size_t i = 0; i < expected.size(); ++i)
                EXPECT_NEAR(reduced[std::size_t(r)][i], expected[i], 1e-6);
            EXPECT_EQ(whole[std::size_t(r)], stream);
        }
    }
}

TEST(SequenceParallel, OffTheStreamIsWholeAndPartialsAreAllReduced) {
    constexpr int t = 2;
    const std::vector<float> sum = sumOfPartials(t);
    std::vector<std::vector<float>> reduced(t);
    std::vector<bool> samePointer(t);
    ThreadGroup threads(t);
    threads.run([&](int r, Communicator& c) {
        testing::TensorParallelRank rank(t, r, c, false);
        const SequenceParallel sp(rank.tp, false, kRows, kChannels, *rank.ops, rank.memory);
        Buffer partial = partialOf(rank.memory, r), shard;
        const std::vector<float> mine = randomFloats(kWhole, unsigned(r));
        const float* out = kernels::asFloats(sp.reduce(partial, shard));
        reduced[std::size_t(r)].assign(out, out + kWhole);
        Buffer holder;
        samePointer[std::size_t(r)] = sp.whole(mine.data(), holder).data == mine.data() && !holder;
    });
    for (int r = 0; r < t; ++r) {
        for (std::size_t i = 0; i < kWhole; ++i)
            EXPECT_NEAR(reduced[std::size_t(r)][i], sum[i], 1e-6);
        EXPECT_TRUE(samePointer[std::size_t(r)]);
    }
}

// Each rank normalises its own tokens; the norm's weight and bias gradients are the sums over
// every token, so each rank's partial sums must be added over the group.
TEST(SequenceParallel, LayerNormGradientsEqualOneRanksOverAllTokens) {
    constexpr int t = 2, rows = 8, C = 5;
    const std::size_t n = std::size_t(rows) * C;
    const std::vector<float> x = randomFloats(n, 1), dout = randomFloats(n, 2),
                             weight = randomFloats(C, 3), bias = randomFloats(C, 4);
    auto ops = kernels::makeCpuOps(1);
    std::vector<float> y(n), mean(rows), rstd(rows), dx(n, 0.0f), dw(2 * C, 0.0f);
    ops->layerNormForward(y.data(), mean.data(), rstd.data(), x.data(), weight.data(), bias.data(),
                          rows, C);
    ops->layerNormBackwardAccumulate(dx.data(), dw.data(), dw.data() + C, dout.data(), x.data(),
                                     weight.data(), mean.data(), rstd.data(), rows, C);

    std::vector<std::vector<float>> dxOf(t), dwOf(t);
    ThreadGroup threads(t);
    threads.run([&](int r, Communicator& c) {
        testing::TensorParallelRank rank(t, r, c, true);
        kernels::Ops* mine = rank.ops.get();
        const SequenceParallel sp(rank.tp, true, rows, C, *mine, rank.memory);
        const std::size_t k = sp.tokenElements(), first = std::size_t(r) * k;
        const int Ns = sp.tokenRows();
        std::vector<float> ys(k), ms(static_cast<std::size_t>(Ns)),
            rs(static_cast<std::size_t>(Ns)), dxs(k, 0.0f), dws(2 * C, 0.0f);
        mine->layerNormForward(ys.data(), ms.data(), rs.data(), x.data() + first, weight.data(),
                               bias.data(), Ns, C);
        sp.layerNormBackward(dxs.data(), dws.data(), dout.data() + first, x.data() + first,
                             weight.data(), ms.data(), rs.data());
        dxOf[std::size_t(r)] = dxs;
        dwOf[std::size_t(r)] = dws;
    });
    for (int r = 0; r < t; ++r) {
        const std::vector<float> expected = rowsOf(dx, C, std::size_t(r) * rows / t, rows / t);
        for (std::size_t i = 0; i < expected.size(); ++i)
            EXPECT_NEAR(dxOf[std::size_t(r)][i], expected[i], 1e-5);
        for (std::size_t i = 0; i < dw.size(); ++i)
            EXPECT_NEAR(dwOf[std::size_t(r)][i], dw[i], 1e-5) << "rank " << r << " element " << i;
    }
}

TEST(SequenceParallel, RefusesTokenRowsTheGroupCannotSplitAndIsOffWithOneRank) {
    auto ops = kernels::makeCpuOps(1);
    DeviceAllocator memory(*ops);
    testing::FakeCommunicator group(0, 4);
    const TensorParallelGroup four({4, 0, &group, true});
    try {
        SequenceParallel sp(four, true, 6, kChannels, *ops, memory);
        FAIL() << "6 token rows over 4 ranks were accepted";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("6 token rows"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(SequenceParallel(four, false, 6, kChannels, *ops, memory));
    const TensorParallelGroup one({1, 0, nullptr, true});
    const SequenceParallel alone(one, true, 6, kChannels, *ops, memory);
    EXPECT_FALSE(alone.on());
    EXPECT_EQ(alone.tokenRows(), 6);
}

} // namespace
} // namespace shardscope
