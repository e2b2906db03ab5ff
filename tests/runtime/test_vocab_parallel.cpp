// The vocabulary-parallel embedding and loss on 2, 3 and 4 threads as ranks, against the one-rank
// operators (themselves checked against PyTorch in test_cpu_ops and the torch oracle).
#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "parallel_test_support.h"
#include "runtime/parallel/vocab_parallel.h"
#include "thread_group.h"

#include <cmath>
#include <gtest/gtest.h>
#include <string>
#include <vector>

namespace shardscope {
namespace {

using testing::columnsOf;
using testing::randomFloats;
using testing::randomTokens;
using testing::rowsOf;
using testing::ThreadGroup;

TEST(VocabParallel, LossAndLogitGradientsEqualOneRanks) {
    constexpr int N = 6, V = 12;
    constexpr float scale = 0.25f;
    const std::vector<float> logits = randomFloats(std::size_t(N) * V, 1, 4.0f);
    const std::vector<std::int32_t> targets = randomTokens(N, V, 2);
    auto ops = kernels::makeCpuOps(1);
    std::vector<float> grad = logits;
    double loss = 0;
    ops->crossEntropyForwardBackward(grad.data(), targets.data(), N, V, scale, &loss);

    for (int t : {2, 3, 4}) {
        SCOPED_TRACE("tp " + std::to_string(t));
        std::vector<double> losses(static_cast<std::size_t>(t));
        std::vector<std::vector<float>> grads(static_cast<std::size_t>(t));
        ThreadGroup threads(t);
        threads.run([&](int r, Communicator& c) {
            testing::TensorParallelRank rank(t, r, c, false);
            const VocabParallel vocab(rank.tp, V, *rank.ops, rank.memory);
            std::vector<float> shard =
                columnsOf(logits, V, std::size_t(vocab.start()), std::size_t(vocab.count()));
            double sum = 0;
            vocab.crossEntropy(shard.data(), targets.data(), N, scale, &sum);
            losses[std::size_t(r)] = sum;
            grads[std::size_t(r)] = shard;
        });
        const std::size_t count = std::size_t(V / t);
        for (int r = 0; r < t; ++r) {
            EXPECT_NEAR(losses[std::size_t(r)], loss, 1e-5 * std::abs(loss));
            const std::vector<float> expected = columnsOf(grad, V, std::size_t(r) * count, count);
            for (std::size_t i = 0; i < expected.size(); ++i)
                EXPECT_NEAR(grads[std::size_t(r)][i], expected[i], 1e-7) << "rank " << r;
        }
    }
}

TEST(VocabParallel, EmbeddingSummedOverTheGroupAndItsGradientsEqualOneRanks) {
    constexpr int B = 2, T = 3, C = 4, V = 8;
    constexpr std::size_t N = std::size_t(B) * T;
    const std::vector<float> wte = randomFloats(std::size_t(V) * C, 1),
                             wpe = randomFloats(std::size_t(T) * C, 2),
                             dout = randomFloats(N * C, 3);
    const std::vector<std::int32_t> tokens = randomTokens(N, V, 4);
    auto ops = kernels::makeCpuOps(1);
    std::vector<float> out(N * C), dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
    ops->embeddingForward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    ops->embeddingBackwardAccumulate(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);

    for (int t : {2, 4}) {
        SCOPED_TRACE("tp " + std::to_string(t));
        std::vector<std::vector<float>> outs(static_cast<std::size_t>(t)),
            dwtes(static_cast<std::size_t>(t)), dwpes(static_cast<std::size_t>(t));
        ThreadGroup threads(t);
        threads.run([&](int r, Communicator& c) {
            testing::TensorParallelRank rank(t, r, c, false);
            const VocabParallel vocab(rank.tp, V, *rank.ops, rank.memory);
            const std::size_t first = std::size_t(vocab.start()), rows = std::size_t(vocab.count());
            const std::vector<float> table = rowsOf(wte, C, first, rows);
            std::vector<float> partial(N * C), dtable(rows * C, 0.0f), dpos(wpe.size(), 0.0f);
            vocab.embeddingForward(partial.data(), tokens.data(), table.data(), wpe.data(), B, T,
                                   C);
            rank.tp.allReduceSum(partial.data(), partial.size());
            vocab.embeddingBackward(dtable.data(), dpos.data(), dout.data(), tokens.data(), B, T,
                                    C);
            outs[std::size_t(r)] = partial;
            dwtes[std::size_t(r)] = dtable;
            dwpes[std::size_t(r)] = dpos;
        });
        const std::size_t rows = std::size_t(V / t);
        for (int r = 0; r < t; ++r) {
            for (std::size_t i = 0; i < out.size(); ++i) // one rank adds each value to zeros
                EXPECT_FLOAT_EQ(outs[std::size_t(r)][i], out[i]) << "rank " << r;
            EXPECT_EQ(dwtes[std::size_t(r)], rowsOf(dwte, C, std::size_t(r) * rows, rows));
            EXPECT_EQ(dwpes[std::size_t(r)], dwpe);
        }
    }
}

TEST(VocabParallel, RefusesAVocabularyTheGroupDoesNotDivide) {
    auto ops = kernels::makeCpuOps(1);
    DeviceAllocator memory(*ops);
    testing::FakeCommunicator group(0, 3);
    const TensorParallelGroup tp({3, 0, &group, false});
    try {
        VocabParallel vocab(tp, 8, *ops, memory);
        FAIL() << "a vocabulary of 8 over 3 ranks was accepted";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("pad the vocabulary"), std::string::npos) << e.what();
    }
}

} // namespace
} // namespace shardscope
