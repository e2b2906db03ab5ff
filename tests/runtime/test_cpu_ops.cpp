#include "kernels/bf16.h"
#include "kernels/cpu/cpu_ops.h"
#include "runtime/rotary.h"

#include <chrono>
#include <cmath>
#include <complex>
#include <cstdint>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <string>
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
    std::vector<float> whole(static_cast<std::size_t>(B * T * C)), a(whole.size()), b(whole.size());
    ops->embeddingForward(whole.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    ops->embeddingShardForward(a.data(), tokens.data(), wte.data(), 0, 3, wpe.data(), B, T, C);
    ops->embeddingShardForward(b.data(), tokens.data(), wte.data() + 3 * C, 3, 3, nullptr, B, T, C);
    for (std::size_t i = 0; i < whole.size(); ++i)
        EXPECT_FLOAT_EQ(a[i] + b[i], whole[i]) << i;
    // Backward: each shard's rows get the gradients of its tokens; positions get all of them.
    const std::vector<float> dout = randomVector(whole.size(), 10);
    std::vector<float> dwte(static_cast<std::size_t>(V * C)), dwpe(static_cast<std::size_t>(T * C)),
        dshard(static_cast<std::size_t>(3 * C)), dpos(static_cast<std::size_t>(T * C));
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

// ---- bf16 operands. Arithmetic is fp32 whatever the storage: a bf16 operand is widened on load
// and a bf16 result rounded once on store. So each operator with bf16 operands must equal, bit for
// bit, the fp32 operator on the widened values with its result rounded.

// n values as bf16 holds them: the bits, and the same values in fp32.
struct Bf16Values {
    std::vector<std::uint16_t> bits;
    std::vector<float> wide;
    Ptr ptr() { return {bits.data(), DType::BF16}; }
};

Bf16Values bf16Of(const std::vector<float>& x) {
    Bf16Values v;
    for (float f : x) {
        v.bits.push_back(floatToBf16(f));
        v.wide.push_back(bf16ToFloat(v.bits.back()));
    }
    return v;
}

std::vector<std::uint16_t> roundedBits(const std::vector<float>& x) {
    std::vector<std::uint16_t> out;
    for (float f : x)
        out.push_back(floatToBf16(f));
    return out;
}

TEST(CpuOpsBf16, CopyConvertsBetweenTypesRoundingToNearestEven) {
    auto ops = makeCpuOps(2);
    const std::vector<float> x = randomVector(100001, 11);
    std::vector<std::uint16_t> narrow(x.size());
    ops->copy({narrow.data(), DType::BF16}, x.data(), x.size());
    EXPECT_EQ(narrow, roundedBits(x));
    std::vector<float> back(x.size());
    ops->copy(back.data(), ConstPtr{narrow.data(), DType::BF16}, x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
        ASSERT_EQ(back[i], bf16ToFloat(narrow[i])) << i;
    ops->zero({narrow.data(), DType::BF16}, 3);
    EXPECT_EQ(narrow[2], 0u);
    EXPECT_NE(narrow[3], 0u);
}

// The product of bf16 values with fp32 accumulation: within fp32 rounding of the exact (double)
// sum of the rounded inputs' products; an fp32 operand is rounded to bf16 first, as autocast does.
TEST(CpuOpsBf16, GemmsMultiplyTheBf16ValuesWithFp32Accumulation) {
    auto ops = makeCpuOps(2);
    const int N = 9, C = 33, OC = 7;
    Bf16Values inp = bf16Of(randomVector(N * C, 1)), w = bf16Of(randomVector(OC * C, 2));
    const std::vector<float> b = randomVector(OC, 3), wFp32 = randomVector(OC * C, 2);
    std::vector<float> out(N * OC), mixed(N * OC);
    ops->matmulForward(out.data(), inp.ptr(), w.ptr(), b.data(), N, C, OC);
    ops->matmulForward(mixed.data(), inp.ptr(), wFp32.data(), b.data(), N, C, OC);
    for (int n = 0; n < N; ++n)
        for (int o = 0; o < OC; ++o) {
            double exact = b[std::size_t(o)];
            for (int c = 0; c < C; ++c)
                exact += double(inp.wide[std::size_t(n * C + c)]) * w.wide[std::size_t(o * C + c)];
            EXPECT_NEAR(out[std::size_t(n * OC + o)], exact, 1e-5 * (1 + std::abs(exact)));
        }
    EXPECT_EQ(mixed, out); // wFp32 rounds to w
    std::vector<std::uint16_t> narrowOut(N * OC);
    ops->matmulForward({narrowOut.data(), DType::BF16}, inp.ptr(), w.ptr(), b.data(), N, C, OC);
    EXPECT_EQ(narrowOut, roundedBits(out));

    // The weight gradient accumulates into fp32 gradients as fp32 GEMMs of the widened values.
    const Bf16Values dout = bf16Of(randomVector(N * OC, 4));
    std::vector<float> dw(OC * C, 0.5f), dwWant(OC * C, 0.5f), db(OC, 0.0f), dbWant(OC, 0.0f);
    ops->matmulBackwardWeightAccumulate(
        dw.data(), db.data(), ConstPtr{dout.bits.data(), DType::BF16}, inp.ptr(), N, C, OC);
    ops->matmulBackwardWeightAccumulate(dwWant.data(), dbWant.data(), dout.wide.data(),
                                        inp.wide.data(), N, C, OC);
    EXPECT_EQ(dw, dwWant);
    EXPECT_EQ(db, dbWant);
}

TEST(CpuOpsBf16, ElementwiseOperatorsComputeInFp32AndRoundOnce) {
    auto ops = makeCpuOps(2);
    const std::size_t n = 70001;
    Bf16Values x = bf16Of(randomVector(n, 5)), y = bf16Of(randomVector(n, 6));
    std::vector<float> want(n), got(n);
    std::vector<std::uint16_t> out(n);

    ops->geluForward({out.data(), DType::BF16}, x.ptr(), n);
    ops->geluForward(want.data(), x.wide.data(), n);
    EXPECT_EQ(out, roundedBits(want));

    ops->add({out.data(), DType::BF16}, x.ptr(), y.ptr(), n);
    ops->add(want.data(), x.wide.data(), y.wide.data(), n);
    EXPECT_EQ(out, roundedBits(want));

    // In place and accumulating: x += y on bf16 storage rounds the fp32 sum once.
    Bf16Values acc = x;
    ops->addInPlace(acc.ptr(), y.ptr(), n);
    EXPECT_EQ(acc.bits, out);

    // The GELU backward in place over its output gradient, as the model calls it.
    Bf16Values d = y;
    ops->geluBackward(d.ptr(), x.ptr(), d.ptr(), n);
    ops->geluBackward(want.data(), x.wide.data(), y.wide.data(), n);
    EXPECT_EQ(d.bits, roundedBits(want));

    double sum = 0, wantSum = 0;
    ops->sumOfSquaresAccumulate(ConstPtr{x.bits.data(), DType::BF16}, n, &sum);
    ops->sumOfSquaresAccumulate(x.wide.data(), n, &wantSum);
    EXPECT_EQ(sum, wantSum);
}

TEST(CpuOpsBf16, LayerNormAndAttentionOnBf16ActivationsRoundTheirOutputs) {
    auto ops = makeCpuOps(2);
    const int B = 2, T = 6, C = 8, NH = 2, N = B * T;
    Bf16Values x = bf16Of(randomVector(std::size_t(N * C), 7)),
               w = bf16Of(randomVector(std::size_t(C), 8)),
               bias = bf16Of(randomVector(std::size_t(C), 9)),
               qkv = bf16Of(randomVector(std::size_t(N * 3 * C), 10));
    std::vector<std::uint16_t> normed(static_cast<std::size_t>(N * C)),
        att(static_cast<std::size_t>(N * C));
    std::vector<float> mean(static_cast<std::size_t>(N)), rstd(static_cast<std::size_t>(N)),
        want(static_cast<std::size_t>(N * C)), wantMean(static_cast<std::size_t>(N)),
        wantRstd(static_cast<std::size_t>(N));
    ops->layerNormForward({normed.data(), DType::BF16}, mean.data(), rstd.data(), x.ptr(), w.ptr(),
                          bias.ptr(), N, C);
    ops->layerNormForward(want.data(), wantMean.data(), wantRstd.data(), x.wide.data(),
                          w.wide.data(), bias.wide.data(), N, C);
    EXPECT_EQ(normed, roundedBits(want));
    EXPECT_EQ(mean, wantMean); // statistics stay fp32
    EXPECT_EQ(rstd, wantRstd);

    ops->attentionForward({att.data(), DType::BF16}, nullptr, qkv.ptr(), B, T, C, NH);
    ops->attentionForward(want.data(), nullptr, qkv.wide.data(), B, T, C, NH);
    EXPECT_EQ(att, roundedBits(want));
}

// The token table is read and its gradient accumulated in bf16 directly (it is the size of the
// vocabulary): each addition rounds.
TEST(CpuOpsBf16, EmbeddingTablesInBf16) {
    auto ops = makeCpuOps(2);
    const int B = 1, T = 4, C = 6, V = 10;
    const std::vector<std::int32_t> tokens{3, 7, 0, 9}; // distinct: one addition per row
    Bf16Values wte = bf16Of(randomVector(std::size_t(V * C), 12)),
               wpe = bf16Of(randomVector(std::size_t(T * C), 13)),
               dout = bf16Of(randomVector(std::size_t(T * C), 14)),
               dwte = bf16Of(randomVector(std::size_t(V * C), 15));
    std::vector<float> out(static_cast<std::size_t>(T * C)), want(static_cast<std::size_t>(T * C)),
        dwpe(std::size_t(T * C), 0.0f);
    ops->embeddingForward(out.data(), tokens.data(), wte.ptr(), wpe.ptr(), B, T, C);
    ops->embeddingForward(want.data(), tokens.data(), wte.wide.data(), wpe.wide.data(), B, T, C);
    EXPECT_EQ(out, want);

    const std::vector<std::uint16_t> before = dwte.bits;
    ops->embeddingBackwardAccumulate(
        dwte.ptr(), dwpe.data(), ConstPtr{dout.bits.data(), DType::BF16}, tokens.data(), B, T, C);
    for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) {
            const std::size_t row = std::size_t(tokens[std::size_t(t)] * C + c);
            const float sum = bf16ToFloat(before[row]) + dout.wide[std::size_t(t * C + c)];
            EXPECT_EQ(dwte.bits[row], floatToBf16(sum));
            EXPECT_EQ(dwpe[std::size_t(t * C + c)], dout.wide[std::size_t(t * C + c)]);
        }
    EXPECT_EQ(dwte.bits[std::size_t(C)], before[std::size_t(C)]); // token 1 is not in the batch
}

// Mixed precision: AdamW updates the fp32 master weights from bf16 gradients and rewrites the
// bf16 working weights from them.
TEST(CpuOpsBf16, AdamWUpdatesTheMasterAndRewritesTheWorkingWeights) {
    auto ops = makeCpuOps(2);
    const std::size_t n = 40000;
    const Bf16Values grad = bf16Of(randomVector(n, 16));
    std::vector<float> master = randomVector(n, 17), m(n, 0.0f), v(n, 0.0f);
    std::vector<float> wantMaster = master, wm(n, 0.0f), wv(n, 0.0f);
    std::vector<std::uint16_t> working(n);
    ops->adamwUpdate(master.data(), ConstPtr{grad.bits.data(), DType::BF16}, m.data(), v.data(), n,
                     1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 1, {working.data(), DType::BF16});
    ops->adamwUpdate(wantMaster.data(), grad.wide.data(), wm.data(), wv.data(), n, 1e-3f, 0.9f,
                     0.95f, 1e-8f, 0.1f, 0.5f, 1, nullptr);
    EXPECT_EQ(master, wantMaster);
    EXPECT_EQ(m, wm);
    EXPECT_EQ(working, roundedBits(master));
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

// ---- Llama-family operators ------------------------------------------------------------------

// RMSNorm in double from its definition (Zhang and Sennrich 2019): x / sqrt(mean(x^2) + eps) w.
std::vector<double> rmsNormReference(const std::vector<double>& x, const std::vector<double>& w,
                                     int N, int C, double eps) {
    std::vector<double> out(x.size());
    for (int n = 0; n < N; ++n) {
        double squares = 0;
        for (int i = 0; i < C; ++i)
            squares += x[n * C + i] * x[n * C + i];
        const double s = 1 / std::sqrt(squares / C + eps);
        for (int i = 0; i < C; ++i)
            out[n * C + i] = x[n * C + i] * s * w[i];
    }
    return out;
}

// SwiGLU in double: silu(gate) * up = gate / (1 + exp(-gate)) * up.
std::vector<double> swigluReference(const std::vector<double>& gateUp, int N, int F) {
    std::vector<double> out(std::size_t(N) * F);
    for (int n = 0; n < N; ++n)
        for (int i = 0; i < F; ++i) {
            const double a = gateUp[n * 2 * F + i], up = gateUp[n * 2 * F + F + i];
            out[n * F + i] = a / (1 + std::exp(-a)) * up;
        }
    return out;
}

std::vector<double> toDouble(const std::vector<float>& v) {
    return {v.begin(), v.end()};
}

// d/dv[j] of sum(g * f(v)) by central differences of f in double: a second method beside the
// operator's closed-form backward.
template <typename F>
std::vector<double> numericGradient(std::vector<double> v, const std::vector<float>& g, F f) {
    std::vector<double> grad(v.size());
    const auto loss = [&] {
        const std::vector<double> out = f(v);
        double sum = 0;
        for (std::size_t i = 0; i < out.size(); ++i)
            sum += g[i] * out[i];
        return sum;
    };
    for (std::size_t j = 0; j < v.size(); ++j) {
        const double keep = v[j], h = 1e-6 * std::max(1.0, std::fabs(keep));
        v[j] = keep + h;
        const double up = loss();
        v[j] = keep - h;
        const double down = loss();
        v[j] = keep;
        grad[j] = (up - down) / (2 * h);
    }
    return grad;
}

TEST(CpuOps, RmsNormIsItsDefinitionAndItsBackwardTheFiniteDifferences) {
    auto ops = makeCpuOps(2);
    const int N = 6, C = 37;
    const float eps = 1e-5f;
    const auto x = randomVector(N * C, 21), g = randomVector(N * C, 22);
    std::vector<float> w = randomVector(C, 23);
    for (float& v : w)
        v = 1 + 0.5f * v;
    std::vector<float> out(N * C), rstd(N);
    ops->rmsNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    const auto want = rmsNormReference(toDouble(x), toDouble(w), N, C, eps);
    for (int i = 0; i < N * C; ++i)
        EXPECT_NEAR(out[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;

    // Accumulates onto what is there.
    const auto dinpBase = randomVector(N * C, 24), dwBase = randomVector(C, 25);
    std::vector<float> dinp = dinpBase, dw = dwBase;
    ops->rmsNormBackwardAccumulate(dinp.data(), dw.data(), g.data(), x.data(), w.data(),
                                   rstd.data(), N, C);
    const auto dx = numericGradient(toDouble(x), g, [&](const std::vector<double>& v) {
        return rmsNormReference(v, toDouble(w), N, C, eps);
    });
    const auto dwWant = numericGradient(toDouble(w), g, [&](const std::vector<double>& v) {
        return rmsNormReference(toDouble(x), v, N, C, eps);
    });
    for (int i = 0; i < N * C; ++i)
        EXPECT_NEAR(dinp[i] - dinpBase[i], dx[i], 1e-4 * (1 + std::fabs(dx[i]))) << i;
    for (int i = 0; i < C; ++i)
        EXPECT_NEAR(dw[i] - dwBase[i], dwWant[i], 1e-4 * (1 + std::fabs(dwWant[i]))) << i;
}

TEST(CpuOps, SwigluIsItsDefinitionAndItsBackwardTheFiniteDifferences) {
    auto ops = makeCpuOps(2);
    const int N = 5, F = 19;
    auto gateUp = randomVector(N * 2 * F, 31);
    gateUp[0] = 60.0f; // far out on both sides: the sigmoid must not overflow
    gateUp[1] = -60.0f;
    const auto g = randomVector(N * F, 32);
    std::vector<float> out(N * F), dgateUp(N * 2 * F, 7.0f); // overwritten, not added to
    ops->swigluForward(out.data(), gateUp.data(), N, F);
    const auto want = swigluReference(toDouble(gateUp), N, F);
    for (int i = 0; i < N * F; ++i)
        EXPECT_NEAR(out[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
    ops->swigluBackward(dgateUp.data(), gateUp.data(), g.data(), N, F);
    const auto d = numericGradient(toDouble(gateUp), g, [&](const std::vector<double>& v) {
        return swigluReference(v, N, F);
    });
    for (int i = 0; i < N * 2 * F; ++i)
        EXPECT_NEAR(dgateUp[i], d[i], 1e-4 * (1 + std::fabs(d[i]))) << i;
}

// Each pair (i, i + d/2) of a head is the complex number a + ib turned by t theta^(-2i/d); the
// rest of the row is left alone, the inverse turns back, and it is the forward's transpose
// (what the backward needs: <R x, y> = <x, R^T y>).
TEST(CpuOps, RotaryEmbeddingTurnsEachPairByItsPositionsAngle) {
    auto ops = makeCpuOps(2);
    const int B = 2, T = 5, heads = 3, d = 8, half = d / 2, stride = heads * d + 6;
    const double theta = 10000;
    const RotaryTables tables = rotaryTables(theta, d, T);
    const auto x = randomVector(B * T * stride, 41), y = randomVector(B * T * stride, 42);
    std::vector<float> turned = x;
    ops->rotaryEmbedding(turned.data(), tables.cos.data(), tables.sin.data(), B, T, heads, d,
                         stride, false);
    for (int bt = 0; bt < B * T; ++bt) {
        const int t = bt % T;
        for (int h = 0; h < heads; ++h)
            for (int i = 0; i < half; ++i) {
                const int at = bt * stride + h * d + i;
                const std::complex<double> z(x[at], x[at + half]);
                const std::complex<double> want =
                    z * std::polar(1.0, t * std::pow(theta, -2.0 * i / d));
                EXPECT_NEAR(turned[at], want.real(), 1e-5) << bt << " " << h << " " << i;
                EXPECT_NEAR(turned[at + half], want.imag(), 1e-5) << bt << " " << h << " " << i;
            }
        for (int k = heads * d; k < stride; ++k)
            EXPECT_EQ(turned[bt * stride + k], x[bt * stride + k]);
    }
    std::vector<float> back = turned, transposed = y;
    ops->rotaryEmbedding(back.data(), tables.cos.data(), tables.sin.data(), B, T, heads, d, stride,
                         true);
    ops->rotaryEmbedding(transposed.data(), tables.cos.data(), tables.sin.data(), B, T, heads, d,
                         stride, true);
    double rxy = 0, xrty = 0;
    for (int i = 0; i < B * T * stride; ++i) {
        EXPECT_NEAR(back[i], x[i], 1e-5) << i;
        rxy += double(turned[i]) * y[i];
        xrty += double(x[i]) * transposed[i];
    }
    EXPECT_NEAR(rxy, xrty, 1e-4 * std::fabs(rxy));
}

// On bf16 storage each operator computes on the widened values in fp32 and rounds once.
TEST(CpuOpsBf16, LlamaOperatorsComputeInFp32AndRoundOnce) {
    auto ops = makeCpuOps(2);
    const int N = 9, C = 40, F = 33;
    Bf16Values x = bf16Of(randomVector(N * C, 51)), w = bf16Of(randomVector(C, 52));
    std::vector<float> want(N * C), rstd(N), rstdWide(N);
    std::vector<std::uint16_t> out(N * C);
    ops->rmsNormForward({out.data(), DType::BF16}, rstd.data(), x.ptr(), w.ptr(), N, C, 1e-5f);
    ops->rmsNormForward(want.data(), rstdWide.data(), x.wide.data(), w.wide.data(), N, C, 1e-5f);
    EXPECT_EQ(out, roundedBits(want));
    EXPECT_EQ(rstd, rstdWide);

    Bf16Values gateUp = bf16Of(randomVector(N * 2 * F, 53));
    std::vector<float> swiglu(N * F);
    std::vector<std::uint16_t> swigluBits(N * F);
    ops->swigluForward({swigluBits.data(), DType::BF16}, gateUp.ptr(), N, F);
    ops->swigluForward(swiglu.data(), gateUp.wide.data(), N, F);
    EXPECT_EQ(swigluBits, roundedBits(swiglu));

    const RotaryTables tables = rotaryTables(500000, 8, 3);
    Bf16Values q = bf16Of(randomVector(3 * 16, 54));
    std::vector<float> turned = q.wide;
    ops->rotaryEmbedding(q.ptr(), tables.cos.data(), tables.sin.data(), 1, 3, 2, 8, 16, false);
    ops->rotaryEmbedding(turned.data(), tables.cos.data(), tables.sin.data(), 1, 3, 2, 8, 16,
                         false);
    EXPECT_EQ(q.bits, roundedBits(turned));

    // The key heads of fused rows (a view that starts inside a row) that end a buffer: nothing
    // past the last row's heads is read or written back. Words there that a widen-and-round trip
    // would change (signalling NaNs become quiet) stand for whatever lies beyond the buffer.
    std::vector<std::uint16_t> fused = bf16Of(randomVector(3 * 16 + 8, 55)).bits;
    const std::uint16_t signalling = 0x7F81; // from word 48, where the third row's heads end
    std::fill(fused.begin() + 2 * 16 + 8 + 8, fused.end(), signalling);
    ops->rotaryEmbedding({fused.data() + 8, DType::BF16}, tables.cos.data(), tables.sin.data(), 1,
                         3, 1, 8, 16, false);
    for (std::size_t i = 2 * 16 + 8 + 8; i < fused.size(); ++i)
        EXPECT_EQ(fused[i], signalling) << "word " << i;
}

// Causal grouped-query attention in double from its definition: query head h of a row attends
// the keys and values of kv head h / (H / KV) at every position up to its own.
std::vector<double> gqaReference(const std::vector<double>& qkv, int B, int T, int H, int KV,
                                 int d) {
    const int row = (H + 2 * KV) * d, group = H / KV;
    std::vector<double> out(std::size_t(B) * T * H * d, 0.0);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < H; ++h)
            for (int t = 0; t < T; ++t) {
                const double* q = &qkv[(b * T + t) * row + h * d];
                std::vector<double> p(t + 1);
                double mx = -1e300, sum = 0;
                for (int j = 0; j <= t; ++j) {
                    const double* k = &qkv[(b * T + j) * row + H * d + (h / group) * d];
                    double s = 0;
                    for (int i = 0; i < d; ++i)
                        s += q[i] * k[i];
                    p[j] = s / std::sqrt(double(d));
                    mx = std::max(mx, p[j]);
                }
                for (double& x : p)
                    sum += (x = std::exp(x - mx));
                for (int j = 0; j <= t; ++j) {
                    const double* v = &qkv[(b * T + j) * row + (H + KV) * d + (h / group) * d];
                    for (int i = 0; i < d; ++i)
                        out[(b * T + t) * H * d + h * d + i] += p[j] / sum * v[i];
                }
            }
    return out;
}

// Expanding the kv heads and running the multi-head attention is grouped-query attention, and
// summing the expanded gradient back is its gradient (against finite differences of the
// reference); with as many kv heads as heads the expansion changes nothing.
TEST(CpuOps, GroupedQueryAttentionThroughExpandedKvHeads) {
    auto ops = makeCpuOps(2);
    const int B = 2, T = 5, H = 4, KV = 2, d = 3, C = H * d, N = B * T, row = (H + 2 * KV) * d;
    const auto qkv = randomVector(N * row, 61), dout = randomVector(N * C, 62);
    std::vector<float> expanded(N * 3 * C), out(N * C), probs(B * H * T * T);
    ops->expandKvHeads(expanded.data(), qkv.data(), N, H, KV, d);
    ops->attentionForward(out.data(), probs.data(), expanded.data(), B, T, C, H);
    const auto want = gqaReference(toDouble(qkv), B, T, H, KV, d);
    for (int i = 0; i < N * C; ++i)
        EXPECT_NEAR(out[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;

    std::vector<float> dexpanded(N * 3 * C), dqkv(N * row, 9.0f); // overwritten
    ops->attentionBackward(dexpanded.data(), dout.data(), expanded.data(), probs.data(), B, T, C,
                           H);
    ops->sumKvHeadGradients(dqkv.data(), dexpanded.data(), N, H, KV, d);
    const auto numeric = numericGradient(toDouble(qkv), dout, [&](const std::vector<double>& v) {
        return gqaReference(v, B, T, H, KV, d);
    });
    for (int i = 0; i < N * row; ++i)
        EXPECT_NEAR(dqkv[i], numeric[i], 1e-4 * (1 + std::fabs(numeric[i]))) << i;

    const auto mha = randomVector(N * 3 * C, 63);
    std::vector<float> same(N * 3 * C), back(N * 3 * C);
    ops->expandKvHeads(same.data(), mha.data(), N, H, H, d);
    EXPECT_EQ(same, mha);
    ops->sumKvHeadGradients(back.data(), mha.data(), N, H, H, d);
    EXPECT_EQ(back, mha);
}

// On bf16 storage the expansion copies bits, and the gradient sums round once.
TEST(CpuOpsBf16, KvHeadExpansionCopiesBitsAndSumsRoundOnce) {
    auto ops = makeCpuOps(2);
    const int N = 6, H = 8, KV = 2, d = 16, row = (H + 2 * KV) * d;
    Bf16Values qkv = bf16Of(randomVector(N * row, 64));
    std::vector<std::uint16_t> expanded(N * 3 * H * d);
    std::vector<float> wide(N * 3 * H * d);
    ops->expandKvHeads({expanded.data(), DType::BF16}, qkv.ptr(), N, H, KV, d);
    ops->expandKvHeads(wide.data(), qkv.wide.data(), N, H, KV, d);
    EXPECT_EQ(expanded, roundedBits(wide)); // exact: every value was already a bf16 value

    Bf16Values dexpanded = bf16Of(randomVector(N * 3 * H * d, 65));
    std::vector<std::uint16_t> dqkv(N * row);
    std::vector<float> dqkvWide(N * row);
    ops->sumKvHeadGradients({dqkv.data(), DType::BF16}, dexpanded.ptr(), N, H, KV, d);
    ops->sumKvHeadGradients(dqkvWide.data(), dexpanded.wide.data(), N, H, KV, d);
    EXPECT_EQ(dqkv, roundedBits(dqkvWide));
}

// Ring attention's blocks against causal attention of the whole sequence (the expanded-heads
// path, checked above): two ranks of cp 2, each holding positions {r, 3 - r} of 4 chunks of 2,
// with grouped-query heads (4 over 2). Rank 0's first queries see none of rank 1's keys, so a
// block that leaves a row alone is in play. Each rank's output is both blocks merged; the key and
// value gradients are each block's summed over both ranks' queries.
TEST(CpuOps, RingAttentionBlocksMergeToCausalAttention) {
    auto ops = makeCpuOps(2);
    constexpr int B = 2, T = 8, H = 4, KV = 2, d = 4, C = H * d, S = (H + 2 * KV) * d, Tl = 4;
    const std::vector<std::int32_t> positions[2] = {{0, 1, 6, 7}, {2, 3, 4, 5}};
    const auto qkv = randomVector(std::size_t(B * T * S), 31);
    const auto dout = randomVector(std::size_t(B * T * C), 32);
    // The reference: the whole sequences, heads expanded.
    std::vector<float> expanded(std::size_t(B * T * 3 * C)), out(std::size_t(B * T * C)),
        dexpanded(expanded.size()), dqkv(qkv.size());
    ops->expandKvHeads(expanded.data(), qkv.data(), B * T, H, KV, d);
    ops->attentionForward(out.data(), nullptr, expanded.data(), B, T, C, H);
    ops->attentionBackward(dexpanded.data(), dout.data(), expanded.data(), nullptr, B, T, C, H);
    ops->sumKvHeadGradients(dqkv.data(), dexpanded.data(), B * T, H, KV, d);

    auto rowsOf = [&](const std::vector<float>& whole, int width, int r) { // rank r's rows
        std::vector<float> mine;
        for (int b = 0; b < B; ++b)
            for (const int t : positions[r])
                mine.insert(mine.end(), whole.begin() + (b * T + t) * width,
                            whole.begin() + (b * T + t + 1) * width);
        return mine;
    };
    const std::vector<float> local[2] = {rowsOf(qkv, S, 0), rowsOf(qkv, S, 1)};
    std::vector<float> dkv[2] = {std::vector<float>(std::size_t(B * Tl * 2 * KV * d), 0.0f),
                                 std::vector<float>(std::size_t(B * Tl * 2 * KV * d), 0.0f)};
    for (int r = 0; r < 2; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        std::vector<float> acc(std::size_t(B * Tl * C), 0.0f), sum(std::size_t(B * H * Tl), 0.0f),
            max(sum.size(), -std::numeric_limits<float>::infinity()), o(acc.size());
        for (const int src : {r, 1 - r})
            ops->attentionBlockForward(acc.data(), max.data(), sum.data(), local[r].data(), S,
                                       local[src].data() + H * d, local[src].data() + (H + KV) * d,
                                       S, positions[r].data(), positions[src].data(), B, Tl, Tl, H,
                                       KV, d);
        ops->attentionBlockFinish(o.data(), max.data(), acc.data(), max.data(), sum.data(), B, Tl,
                                  H, d);
        const std::vector<float> want = rowsOf(out, C, r);
        for (std::size_t i = 0; i < o.size(); ++i)
            ASSERT_NEAR(o[i], want[i], 1e-5f) << "out " << i;

        const std::vector<float> g = rowsOf(dout, C, r);
        std::vector<float> delta(sum.size()), dq(acc.size(), 0.0f);
        ops->attentionBlockDelta(delta.data(), g.data(), o.data(), B, Tl, H, d);
        for (const int src : {r, 1 - r}) {
            std::vector<float>& into = dkv[std::size_t(src)];
            ops->attentionBlockBackward(dq.data(), into.data(), into.data() + KV * d, 2 * KV * d,
                                        g.data(), max.data(), delta.data(), local[r].data(), S,
                                        local[src].data() + H * d, local[src].data() + (H + KV) * d,
                                        S, positions[r].data(), positions[src].data(), B, Tl, Tl, H,
                                        KV, d);
        }
        const std::vector<float> wantGrad = rowsOf(dqkv, S, r);
        for (int row = 0; row < B * Tl; ++row)
            for (int c = 0; c < C; ++c)
                ASSERT_NEAR(dq[std::size_t(row * C + c)], wantGrad[std::size_t(row * S + c)], 1e-5f)
                    << "dq row " << row << " channel " << c;
    }
    for (int r = 0; r < 2; ++r) { // keys and values: every rank's queries summed
        const std::vector<float> wantGrad = rowsOf(dqkv, S, r);
        std::vector<float> packed(dkv[r].size());
        ops->copyRows(packed.data(), 2 * KV * d, wantGrad.data() + C, S, B * Tl, 2 * KV * d);
        for (std::size_t i = 0; i < packed.size(); ++i)
            ASSERT_NEAR(dkv[r][i], packed[i], 1e-5f) << "rank " << r << " dkv " << i;
    }
}

} // namespace
} // namespace shardscope::kernels
