#include "kernels/cpu/cpu_ops.h"

#include <chrono>
#include <cmath>
#include <gtest/gtest.h>
#include <random>
#include <vector>

namespace shardscope::kernels {
namespace {

std::vector<float> randomVector(std::size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v)
        x = d(rng);
    return v;
}

TEST(CpuOps, MatmulForwardAndBackwardMatchNaiveLoops) {
    auto ops = makeCpuOps(2);
    const int N = 7, C = 5, OC = 3;
    const auto inp = randomVector(N * C, 1), w = randomVector(OC * C, 2), b = randomVector(OC, 3),
               dout = randomVector(N * OC, 4);
    std::vector<float> out(N * OC), dinp(N * C), dw(OC * C, 0.0f), db(OC, 0.0f);
    ops->matmulForward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    ops->matmulBackwardInput(dinp.data(), dout.data(), w.data(), N, C, OC, false);
    ops->matmulBackwardWeightAccumulate(dw.data(), db.data(), dout.data(), inp.data(), N, C, OC);
    for (int n = 0; n < N; ++n)
        for (int o = 0; o < OC; ++o) {
            double s = b[o];
            for (int c = 0; c < C; ++c)
                s += double(inp[n * C + c]) * w[o * C + c];
            EXPECT_NEAR(out[n * OC + o], s, 1e-5);
        }
    for (int n = 0; n < N; ++n)
        for (int c = 0; c < C; ++c) {
            double s = 0;
            for (int o = 0; o < OC; ++o)
                s += double(dout[n * OC + o]) * w[o * C + c];
            EXPECT_NEAR(dinp[n * C + c], s, 1e-5);
        }
    for (int o = 0; o < OC; ++o) {
        double sb = 0;
        for (int n = 0; n < N; ++n)
            sb += dout[n * OC + o];
        EXPECT_NEAR(db[o], sb, 1e-5);
        for (int c = 0; c < C; ++c) {
            double s = 0;
            for (int n = 0; n < N; ++n)
                s += double(dout[n * OC + o]) * inp[n * C + c];
            EXPECT_NEAR(dw[o * C + c], s, 1e-5);
        }
    }
}

TEST(CpuOps, AttentionIsCausalSoftmaxAttention) {
    auto ops = makeCpuOps(2);
    const int B = 2, T = 5, C = 8, NH = 2, hs = C / NH;
    const auto qkv = randomVector(B * T * 3 * C, 5);
    std::vector<float> out(B * T * C), probs(B * NH * T * T, -1.0f), out2(B * T * C);
    ops->attentionForward(out.data(), probs.data(), qkv.data(), B, T, C, NH);
    ops->attentionForward(out2.data(), nullptr, qkv.data(), B, T, C, NH);
    EXPECT_EQ(out, out2); // storing the probabilities changes nothing
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
            for (int t = 0; t < T; ++t) {
                std::vector<double> p(t + 1);
                double mx = -1e30, sum = 0;
                for (int j = 0; j <= t; ++j) {
                    double d = 0;
                    for (int i = 0; i < hs; ++i)
                        d += double(qkv[(b * T + t) * 3 * C + h * hs + i]) *
                             qkv[(b * T + j) * 3 * C + C + h * hs + i];
                    p[j] = d / std::sqrt(double(hs));
                    mx = std::max(mx, p[j]);
                }
                for (double& x : p)
                    sum += (x = std::exp(x - mx));
                for (int i = 0; i < hs; ++i) {
                    double o = 0;
                    for (int j = 0; j <= t; ++j)
                        o += p[j] / sum * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + i];
                    EXPECT_NEAR(out[(b * T + t) * C + h * hs + i], o, 1e-5);
                }
            }
}

TEST(CpuOps, CrossEntropyAddsTheLossAndLeavesItsGradient) {
    auto ops = makeCpuOps(1);
    std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.5f, 0.5f, 0.5f};
    const std::int32_t targets[2] = {2, 0};
    double loss = 10.0; // the sum is added to what the accumulator holds
    ops->crossEntropyForwardBackward(logits.data(), targets, 2, 3, 0.5f, &loss);
    const double l0 = -std::log(std::exp(3.0) / (std::exp(1.0) + std::exp(2.0) + std::exp(3.0)));
    EXPECT_NEAR(loss - 10.0, l0 + std::log(3.0), 1e-6);
    EXPECT_NEAR(logits[3], 0.5 * (1.0 / 3 - 1), 1e-6);
    EXPECT_NEAR(logits[4], 0.5 / 3, 1e-6);
    EXPECT_NEAR(logits[0] + logits[1] + logits[2], 0.0, 1e-6);
}

TEST(CpuOps, EmbeddingBackwardSumsRepeatedTokens) {
    auto ops = makeCpuOps(2);
    const int B = 1, T = 3, C = 4;
    const std::int32_t tokens[3] = {1, 1, 0};
    std::vector<float> dwte(2 * C, 0.0f), dwpe(T * C, 0.0f), dout(T * C, 1.0f);
    ops->embeddingBackwardAccumulate(dwte.data(), dwpe.data(), dout.data(), tokens, B, T, C);
    EXPECT_EQ(dwte[C], 2.0f);
    EXPECT_EQ(dwte[0], 1.0f);
    EXPECT_EQ(dwpe[2 * C + 3], 1.0f);
}

// Two vocabulary shards with the group's max and sums combined by hand give the fused
// cross-entropy's loss and gradient.
TEST(CpuOps, VocabularyShardsOfTheCrossEntropyEqualTheWholeOne) {
    auto ops = makeCpuOps(2);
    const int N = 5, V = 12, half = V / 2;
    std::vector<float> whole = randomVector(std::size_t(N * V), 7);
    for (float& x : whole)
        x *= 4.0f;
    const std::vector<std::int32_t> targets = {0, 5, 6, 11, 3};
    std::vector<float> shard[2];
    for (int r = 0; r < 2; ++r)
        for (int n = 0; n < N; ++n)
            shard[r].insert(shard[r].end(), whole.begin() + n * V + r * half,
                            whole.begin() + n * V + (r + 1) * half);
    const float scale = 0.25f;
    std::vector<float> fused = whole;
    double want = 0;
    ops->crossEntropyForwardBackward(fused.data(), targets.data(), N, V, scale, &want);

    std::vector<float> max(N), max1(N),
        sums[2] = {std::vector<float>(2 * N), std::vector<float>(2 * N)};
    ops->rowMax(shard[0].data(), N, half, max.data());
    ops->rowMax(shard[1].data(), N, half, max1.data());
    for (int n = 0; n < N; ++n)
        max[std::size_t(n)] = std::max(max[std::size_t(n)], max1[std::size_t(n)]);
    for (int r = 0; r < 2; ++r)
        ops->softmaxShardSums(shard[r].data(), max.data(), targets.data(), N, half, r * half,
                              sums[r].data(), sums[r].data() + N);
    std::vector<float> total(2 * N);
    for (std::size_t i = 0; i < total.size(); ++i)
        total[i] = sums[0][i] + sums[1][i];
    double loss = 0;
    ops->crossEntropyShardLoss(max.data(), total.data(), total.data() + N, N, &loss);
    EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want));
    for (int r = 0; r < 2; ++r) {
        ops->crossEntropyShardBackward(shard[r].data(), max.data(), total.data(), targets.data(), N,
                                       half, r * half, scale);
        for (int n = 0; n < N; ++n)
            for (int i = 0; i < half; ++i)
                EXPECT_NEAR(shard[r][std::size_t(n * half + i)],
                            fused[std::size_t(n * V + r * half + i)], 1e-6)
                    << "row " << n << " column " << r * half + i;
    }
}

TEST(CpuOps, VocabularyShardsOfTheEmbeddingSumToTheWholeOne) {
    auto ops = makeCpuOps(2);
    const int B = 2, T = 3, C = 4, V = 6;
    const std::vector<float> wte = randomVector(std::size_t(V * C), 8),
                             wpe = randomVector(std::size_t(T * C), 9);
    const std::vector<std::int32_t> tokens = {0, 5, 2, 3, 3, 1};
    std::vector<float> whole(std::size_t(B * T * C)), a(whole.size()), b(whole.size());
    ops->embeddingForward(whole.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    ops->embeddingShardForward(a.data(), tokens.data(), wte.data(), 0, 3, wpe.data(), B, T, C);
    ops->embeddingShardForward(b.data(), tokens.data(), wte.data() + 3 * C, 3, 3, nullptr, B, T, C);
    for (std::size_t i = 0; i < whole.size(); ++i)
        EXPECT_FLOAT_EQ(a[i] + b[i], whole[i]) << i;
    // Backward: each shard's rows get the gradients of its tokens; positions get all of them.
    const std::vector<float> dout = randomVector(whole.size(), 10);
    std::vector<float> dwte(std::size_t(V * C)), dwpe(std::size_t(T * C)),
        dshard(std::size_t(3 * C)), dpos(std::size_t(T * C));
    ops->embeddingBackwardAccumulate(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    ops->embeddingShardBackwardAccumulate(dshard.data(), 3, 3, dpos.data(), dout.data(),
                                          tokens.data(), B, T, C);
    for (int i = 0; i < 3 * C; ++i)
        EXPECT_FLOAT_EQ(dshard[std::size_t(i)], dwte[std::size_t(3 * C + i)]) << i;
    EXPECT_EQ(dpos, dwpe);
}

// The global norm's squares accumulate on the device across calls, each call's sum taken in
// double whatever the thread count.
TEST(CpuOps, SumOfSquaresAccumulatesInDouble) {
    auto ops = makeCpuOps(2);
    const std::size_t n = 200003; // several of the chunks the threads share, and a remainder
    std::vector<float> x(n);
    double want = 0;
    for (std::size_t i = 0; i < n; ++i) {
        x[i] = float(i % 7) * 0.25f - 0.5f;
        want += double(x[i]) * double(x[i]);
    }
    double sum = 0;
    ops->zeroDoubles(&sum, 1);
    ops->sumOfSquaresAccumulate(x.data(), n, &sum);
    ops->sumOfSquaresAccumulate(x.data(), 3, &sum);
    // the second call adds the squares of -0.5, -0.25 and 0
    EXPECT_NEAR(sum - want, 0.3125, 1e-6);
}

// On the CPU, work runs when it is called: an event is complete once recorded, and its time lies
// between the host's clock before and after the recording.
TEST(CpuOps, EventsCompleteWhenRecordedAndKeepTheTime) {
    auto ops = makeCpuOps(1);
    auto event = ops->createEvent();
    auto steady = [] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
    };
    const double before = steady();
    ops->computeStream().record(*event);
    const double after = steady();
    EXPECT_TRUE(event->done());
    EXPECT_GE(event->seconds(), before);
    EXPECT_LE(event->seconds(), after);
    auto side = ops->createStream();
    side->waitFor(*event); // never blocks on the CPU
    side->synchronize();
}

TEST(CpuOps, PeakEstimateStatesItsFormula) {
    const PeakFlops p = estimateCpuPeakFlops(2);
    if (p.flops == 0) { // a system that does not report its clock says how to give the peak
        EXPECT_NE(p.formula.find("--peak-tflops"), std::string::npos) << p.formula;
        return;
    }
    EXPECT_NE(p.formula.find("2 cores"), std::string::npos) << p.formula;
    EXPECT_NE(p.formula.find("FLOP/cycle"), std::string::npos) << p.formula;
}

} // namespace
} // namespace shardscope::kernels
