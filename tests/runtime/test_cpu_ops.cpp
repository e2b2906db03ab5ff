#include "kernels/cpu/cpu_ops.h"

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

TEST(CpuOps, CrossEntropyReturnsTheLossAndLeavesItsGradient) {
    auto ops = makeCpuOps(1);
    std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.5f, 0.5f, 0.5f};
    const std::int32_t targets[2] = {2, 0};
    const double loss = ops->crossEntropyForwardBackward(logits.data(), targets, 2, 3, 0.5f);
    const double l0 = -std::log(std::exp(3.0) / (std::exp(1.0) + std::exp(2.0) + std::exp(3.0)));
    EXPECT_NEAR(loss, l0 + std::log(3.0), 1e-6);
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
