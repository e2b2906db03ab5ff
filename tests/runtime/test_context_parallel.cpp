// Context parallelism on 2 and 4 threads as ranks, against causal attention of whole sequences in
// one process: the load-balanced slices, ring attention forward and backward, and the cp spans.
#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "parallel_test_support.h"
#include "runtime/parallel/context_parallel.h"
#include "thread_group.h"

#include <cmath>
#include <gtest/gtest.h>
#include <string>
#include <vector>

namespace shardscope {
namespace {

using testing::randomFloats;
using testing::RecordingSink;
using testing::ThreadGroup;

TEST(ContextParallel, EachRankHoldsChunkIAndChunkTwoCpMinusOneMinusI) {
    // Megatron-LM's and Llama 3's split: 2 cp chunks, rank i takes i and 2 cp - 1 - i.
    EXPECT_EQ(contextPositions(8, 2, 0), (std::vector<int>{0, 1, 6, 7}));
    EXPECT_EQ(contextPositions(8, 2, 1), (std::vector<int>{2, 3, 4, 5}));
    EXPECT_EQ(contextPositions(8, 4, 3), (std::vector<int>{3, 4}));
    EXPECT_EQ(contextPositions(8, 1, 0), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
    // Every rank has as many query-key pairs under the causal mask: sum of (position + 1).
    for (const int cp : {2, 4}) {
        int first = -1;
        for (int r = 0; r < cp; ++r) {
            int pairs = 0;
            for (const int t : contextPositions(16, cp, r))
                pairs += t + 1;
            if (first < 0)
                first = pairs;
            EXPECT_EQ(pairs, first) << "cp " << cp << " rank " << r;
        }
    }
    try {
        contextPositions(12, 4, 0);
        FAIL() << "8 chunks of a 12-token sequence were accepted";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("2 x cp must divide seq_len 12"), std::string::npos)
            << e.what();
    }
}

// The whole sequences' attention output and qkv gradient, grouped heads expanded (the path
// test_cpu_ops checks against attention written out).
struct Reference {
    std::vector<float> out, dqkv;
};
Reference wholeAttention(const std::vector<float>& qkv, const std::vector<float>& dout, int B,
                         int T, int H, int KV, int d) {
    auto ops = kernels::makeCpuOps(1);
    const int C = H * d;
    std::vector<float> expanded(std::size_t(B * T * 3 * C)), dexpanded(expanded.size());
    Reference r{std::vector<float>(std::size_t(B * T * C)), std::vector<float>(qkv.size())};
    ops->expandKvHeads(expanded.data(), qkv.data(), B * T, H, KV, d);
    ops->attentionForward(r.out.data(), nullptr, expanded.data(), B, T, C, H);
    ops->attentionBackward(dexpanded.data(), dout.data(), expanded.data(), nullptr, B, T, C, H);
    ops->sumKvHeadGradients(r.dqkv.data(), dexpanded.data(), B * T, H, KV, d);
    return r;
}

// Rows of a [B, T, width] array at a rank's positions.
std::vector<float> rowsAt(const std::vector<float>& whole, int B, int T, int width,
                          const std::vector<int>& positions) {
    std::vector<float> mine;
    for (int b = 0; b < B; ++b)
        for (const int t : positions)
            mine.insert(mine.end(), whole.begin() + (b * T + t) * width,
                        whole.begin() + (b * T + t + 1) * width);
    return mine;
}

TEST(ContextParallel, RingAttentionGivesEachRankItsRowsOfWholeSequenceAttention) {
    constexpr int B = 2, T = 16, H = 4, KV = 2, d = 4, C = H * d, S = (H + 2 * KV) * d;
    const std::vector<float> qkv = randomFloats(std::size_t(B * T * S), 41),
                             dout = randomFloats(std::size_t(B * T * C), 42);
    const Reference want = wholeAttention(qkv, dout, B, T, H, KV, d);
    for (const int cp : {2, 4}) {
        SCOPED_TRACE("cp " + std::to_string(cp));
        std::vector<std::vector<float>> out(static_cast<std::size_t>(cp)),
            dqkv(static_cast<std::size_t>(cp));
        std::vector<RecordingSink> sinks(static_cast<std::size_t>(cp));
        ThreadGroup threads(cp);
        threads.run([&](int r, Communicator& c) {
            auto ops = kernels::makeCpuOps(1);
            DeviceAllocator memory(*ops);
            ContextParallelGroup group({cp, r, &c}, T, *ops, memory);
            group.setCommunicationSink(&sinks[std::size_t(r)]);
            const int Tl = group.localSeqLen();
            std::vector<float> mine = rowsAt(qkv, B, T, S, group.positions()),
                               g = rowsAt(dout, B, T, C, group.positions());
            std::vector<float> o(std::size_t(B * Tl * C)), lse(std::size_t(B * H * Tl)),
                dq(mine.size());
            group.attentionForward(o.data(), lse.data(), mine.data(), S, B, H, KV, d);
            group.attentionBackward(dq.data(), g.data(), o.data(), lse.data(), mine.data(), S, B, H,
                                    KV, d);
            out[std::size_t(r)] = o;
            dqkv[std::size_t(r)] = dq;
        });
        for (int r = 0; r < cp; ++r) {
            const std::vector<int> p = contextPositions(T, cp, r);
            const std::vector<float> o = rowsAt(want.out, B, T, C, p),
                                     g = rowsAt(want.dqkv, B, T, S, p);
            for (std::size_t i = 0; i < o.size(); ++i)
                ASSERT_NEAR(out[std::size_t(r)][i], o[i], 1e-5f) << "rank " << r << " out " << i;
            for (std::size_t i = 0; i < g.size(); ++i)
                ASSERT_NEAR(dqkv[std::size_t(r)][i], g[i], 1e-5f) << "rank " << r << " dqkv " << i;
            // Forward: cp - 1 key and value hops; backward: as many, and cp for the gradients.
            const std::vector<CommunicationSpan>& spans = sinks[std::size_t(r)].spans;
            ASSERT_EQ(int(spans.size()), 3 * cp - 2);
            for (const CommunicationSpan& s : spans) {
                EXPECT_STREQ(s.axis, "cp");
                EXPECT_STREQ(s.collective, "send_recv");
                EXPECT_EQ(s.peer, (r + 1) % cp);
            }
            // Keys and values: 2 KV d values per row, fp32 here.
            EXPECT_EQ(spans.front().bytes, std::size_t(B * (T / cp) * 2 * KV * d) * 4);
        }
    }
}

TEST(ContextParallel, SlicesOfRowsGoOutAndComeBackInPlace) {
    constexpr int B = 2, T = 8, C = 3, cp = 2;
    const std::vector<float> whole = randomFloats(std::size_t(B * T * C), 43);
    for (int r = 0; r < cp; ++r) {
        auto ops = kernels::makeCpuOps(1);
        DeviceAllocator memory(*ops);
        testing::FakeCommunicator group(r, cp);
        const ContextParallelGroup g({cp, r, &group}, T, *ops, memory);
        std::vector<float> mine(std::size_t(B * (T / cp) * C)), back(whole.size(), 7.0f);
        g.gatherRows(mine.data(), whole.data(), B, C);
        EXPECT_EQ(mine, rowsAt(whole, B, T, C, g.positions()));
        g.scatterRows(back.data(), mine.data(), B, C);
        for (int b = 0; b < B; ++b)
            for (int t = 0; t < T; ++t) {
                const bool held = (t / 2 == r) || (t / 2 == 2 * cp - 1 - r);
                for (int c = 0; c < C; ++c) {
                    const std::size_t i = std::size_t((b * T + t) * C + c);
                    EXPECT_EQ(back[i], held ? whole[i] : 0.0f) << b << " " << t << " " << c;
                }
            }
        std::vector<std::int32_t> tokens(std::size_t(B * T)), sliced(std::size_t(B * T / cp));
        for (std::size_t i = 0; i < tokens.size(); ++i)
            tokens[i] = std::int32_t(i);
        g.selectTokens(tokens.data(), B, sliced.data());
        EXPECT_EQ(sliced[0], r == 0 ? 0 : 2);
        EXPECT_EQ(sliced.back(), r == 0 ? T + 7 : T + 5);
        // A per-position table of one sequence (the rotary angles): its rows at the positions.
        std::vector<float> table(std::size_t(T * 2));
        for (std::size_t i = 0; i < table.size(); ++i)
            table[i] = float(i);
        EXPECT_EQ(g.selectRows(table, 2), rowsAt(table, 1, T, 2, g.positions()));
    }
}

} // namespace
} // namespace shardscope
