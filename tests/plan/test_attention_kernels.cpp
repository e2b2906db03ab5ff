// The fused attention kernels' speeds against the FlashAttention-3 paper's printed figures
// (Shah et al. 2024, arXiv 2407.08608v2, Figures 5-6, H100 SXM5, bf16), and what they do to a
// plan's compute time.
#include "core/presets.h"
#include "plan/attention_kernels.h"
#include "plan/compute.h"
#include "plan_test_support.h"

#include <cmath>
#include <gtest/gtest.h>

using namespace shardscope;

namespace {

// TFLOP/s on the GPU's own bf16 peak.
double tflops(double fraction, const GpuSpec& gpu) {
    return fraction * gpu.peak(Precision::Bf16) / 1e12;
}

} // namespace

// The bars as printed: head dim 128, 2k tokens. Figure 5(c) forward unmasked, 5(d) causal,
// 6(b) backward unmasked.
TEST(AttentionKernels, ReadsThePapersBarsOnH100) {
    const GpuSpec& h100 = findGpuPreset("h100-sxm");
    const AttentionSpeed fa2 = attentionSpeed(AttentionKernel::Flash2, h100, 2048, 128, false);
    const AttentionSpeed fa3 = attentionSpeed(AttentionKernel::Flash3, h100, 2048, 128, false);
    const AttentionSpeed cudnn = attentionSpeed(AttentionKernel::Cudnn, h100, 2048, 128, false);
    ASSERT_TRUE(fa2.measured && fa3.measured && cudnn.measured);
    EXPECT_NEAR(tflops(fa2.forward, h100), 362, 0.5);
    EXPECT_NEAR(tflops(fa3.forward, h100), 625, 0.5);
    EXPECT_NEAR(tflops(cudnn.forward, h100), 617, 0.5);
    EXPECT_NEAR(tflops(fa2.backward, h100), 291, 0.5);
    EXPECT_NEAR(tflops(fa3.backward, h100), 501, 0.5);
    EXPECT_NEAR(tflops(cudnn.backward, h100), 465, 0.5);
    const AttentionSpeed causal = attentionSpeed(AttentionKernel::Flash3, h100, 2048, 128, true);
    EXPECT_NEAR(tflops(causal.forward, h100), 521, 0.5);
    // The causal backward was not measured: the unmasked one, slowed as the forward is.
    EXPECT_NEAR(tflops(causal.backward, h100), 501.0 * 521 / 625, 0.5);
    // Head dim 64: Figure 5(a), 8k tokens.
    EXPECT_NEAR(
        tflops(attentionSpeed(AttentionKernel::Flash2, h100, 8192, 64, false).forward, h100), 322,
        0.5);
    // The abstract's "FlashAttention-2 achieving only 35% utilization on the H100".
    EXPECT_NEAR(fa2.forward, 0.35, 0.02);
}

TEST(AttentionKernels, InterpolatesInTheLogOfTheLengthAndHoldsTheEnds) {
    const GpuSpec& h100 = findGpuPreset("h100-sxm");
    const auto fwd = [&](double s) {
        return tflops(attentionSpeed(AttentionKernel::Flash2, h100, s, 128, true).forward, h100);
    };
    // Halfway between 1k (260) and 2k (298) in log2: sqrt(2) x 1k.
    EXPECT_NEAR(fwd(1024 * std::sqrt(2.0)), (260.0 + 298.0) / 2, 0.5);
    EXPECT_NEAR(fwd(128), 191, 0.5);    // below 512: the 512 bar
    EXPECT_NEAR(fwd(131072), 335, 0.5); // past 16k: the 16k bar
    EXPECT_LT(fwd(600), fwd(900));      // rising between the bars
    // Head dim 112 (MPT-30B) reads the 128 curves, 80 the 64 ones.
    EXPECT_NEAR(
        tflops(attentionSpeed(AttentionKernel::Flash2, h100, 2048, 112, false).forward, h100), 362,
        0.5);
    EXPECT_NEAR(
        tflops(attentionSpeed(AttentionKernel::Flash2, h100, 2048, 80, false).forward, h100), 318,
        0.5);
}

// Auto is what Transformer Engine picks: cuDNN on Hopper, FlashAttention-2 before it. Nothing is
// held for other architectures, and FlashAttention-3 does not run on them.
TEST(AttentionKernels, PicksAndFallsBackByArchitecture) {
    const GpuSpec& h100 = findGpuPreset("h100-sxm");
    const GpuSpec& a100 = findGpuPreset("a100-80gb");
    EXPECT_EQ(attentionSpeed(AttentionKernel::Auto, h100, 4096, 128, true).kernel,
              AttentionKernel::Cudnn);
    const AttentionSpeed ampere = attentionSpeed(AttentionKernel::Auto, a100, 4096, 128, true);
    EXPECT_EQ(ampere.kernel, AttentionKernel::Flash2);
    EXPECT_FALSE(ampere.measured);
    EXPECT_NE(describeAttentionSpeed(ampere, a100).find("GEMM efficiency"), std::string::npos);
    const AttentionSpeed fa3 = attentionSpeed(AttentionKernel::Flash3, a100, 4096, 128, true);
    EXPECT_EQ(fa3.kernel, AttentionKernel::Flash2);
    EXPECT_NE(describeAttentionSpeed(fa3, a100).find("Hopper only"), std::string::npos);
    EXPECT_FALSE(
        attentionSpeed(AttentionKernel::Cudnn, findGpuPreset("b200"), 4096, 128, true).measured);
}

// Other Hopper parts run the same fraction of their own peak: H200 (the same peak) the same
// TFLOP/s, H100 PCIe (lower clocks) fewer.
TEST(AttentionKernels, CarriesTheFractionToOtherHopperParts) {
    const GpuSpec& sxm = findGpuPreset("h100-sxm");
    const GpuSpec& pcie = findGpuPreset("h100-pcie");
    const AttentionSpeed a = attentionSpeed(AttentionKernel::Flash3, sxm, 8192, 128, true);
    const AttentionSpeed b = attentionSpeed(AttentionKernel::Flash3, pcie, 8192, 128, true);
    ASSERT_TRUE(b.measured);
    EXPECT_DOUBLE_EQ(a.forward, b.forward);
    EXPECT_LT(tflops(b.forward, pcie), tflops(a.forward, sxm));
    EXPECT_NEAR(
        tflops(
            attentionSpeed(AttentionKernel::Flash3, findGpuPreset("h200"), 8192, 128, true).forward,
            findGpuPreset("h200")),
        602, 1.0);
}

// The compute time of attention's core follows the kernel: by hand from the paper's bars for
// Llama 3 8B (head dim 128) at 8k on one H100, no recompute.
TEST(AttentionKernels, SetsTheCoresComputeTime) {
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 1, test::layout(8, 1, 1, 64));
    in.model.seqLen = 8192;
    in.parallel.attentionKernel = AttentionKernel::Flash2;
    const StageCompute fa2 = stageCompute(in, 0);
    // Forward FLOPs of the core per layer: 4 s q / 2 per token, for s tokens.
    const double s = 8192, q = 4096, layers = 32;
    const double forward = layers * s * 4.0 * s * q / 2;
    const double expected = forward / 333e12 + 2.5 * forward / (318e12 * 333 / 370);
    EXPECT_NEAR(fa2.attentionSeconds, expected, 0.005 * expected);

    in.parallel.attentionKernel = AttentionKernel::Flash3;
    const StageCompute fa3 = stageCompute(in, 0);
    EXPECT_LT(fa3.attentionSeconds, fa2.attentionSeconds);
    EXPECT_NEAR(fa2.seconds() - fa3.seconds(), fa2.attentionSeconds - fa3.attentionSeconds,
                1e-9); // only the core changed

    // Unfused attention runs the core as GEMMs at the GEMM efficiency.
    in.parallel.flashAttention = false;
    const StageCompute unfused = stageCompute(in, 0);
    const double core = 3.0 * forward;
    EXPECT_NEAR(unfused.attentionSeconds,
                core / (in.cluster.gpu.peak(Precision::Bf16) *
                        gemmEfficiency(in.cluster.gpu, Precision::Bf16, in.assume)),
                1e-9 * unfused.attentionSeconds);

    // Under CP 2 each rank's kernel sees 4k tokens and half the work.
    in.parallel.flashAttention = true;
    in.parallel.attentionKernel = AttentionKernel::Flash2;
    in.parallel.cp = 2;
    in.parallel.dp = 4;
    const double perRank = forward / 2;
    const double cp2 = perRank / 319e12 + 2.5 * perRank / (310e12 * 319 / 368);
    EXPECT_NEAR(stageCompute(in, 0).attentionSeconds, cp2, 0.005 * cp2);
}

// FlashAttention-2 "is around 2x faster than FlashAttention" (Dao 2023, arXiv 2307.08691,
// Sec. 4.1): on Hopper the first generation runs FA2's measured curves at half their rate, forward
// and backward, at every length and head dimension; where nothing was measured (A100) the core
// runs at half the GEMM efficiency, so it takes twice FA2's time there too.
TEST(AttentionKernels, FlashAttention1RunsAtHalfFlashAttention2sSpeed) {
    const GpuSpec& h100 = findGpuPreset("h100-sxm");
    for (const double s : {512.0, 2048.0, 3000.0, 8192.0, 65536.0})
        for (const int d : {64, 128})
            for (const bool causal : {false, true}) {
                const AttentionSpeed fa1 =
                    attentionSpeed(AttentionKernel::Flash1, h100, s, d, causal);
                const AttentionSpeed fa2 =
                    attentionSpeed(AttentionKernel::Flash2, h100, s, d, causal);
                ASSERT_TRUE(fa1.measured);
                EXPECT_EQ(fa1.kernel, AttentionKernel::Flash1);
                EXPECT_NEAR(fa1.forward, fa2.forward / 2, 1e-12) << s << " " << d;
                EXPECT_NEAR(fa1.backward, fa2.backward / 2, 1e-12) << s << " " << d;
            }
    // Head dim 128 at 2k, causal: the FA3 paper's FA2 bar (298 TFLOP/s forward), halved.
    EXPECT_NEAR(
        tflops(attentionSpeed(AttentionKernel::Flash1, h100, 2048, 128, true).forward, h100), 149,
        0.5);
    const AttentionSpeed fa1 = attentionSpeed(AttentionKernel::Flash1, h100, 2048, 128, true);
    EXPECT_NE(describeAttentionSpeed(fa1, h100).find("Dao 2023"), std::string::npos);

    const GpuSpec& a100 = findGpuPreset("a100-80gb");
    const AttentionSpeed ampere = attentionSpeed(AttentionKernel::Flash1, a100, 2048, 128, true);
    EXPECT_FALSE(ampere.measured);
    EXPECT_EQ(ampere.kernel, AttentionKernel::Flash1);
    EXPECT_DOUBLE_EQ(ampere.gemmShare, 0.5);
    EXPECT_DOUBLE_EQ(attentionSpeed(AttentionKernel::Flash2, a100, 2048, 128, true).gemmShare, 1.0);
    EXPECT_NE(describeAttentionSpeed(ampere, a100).find("over 2"), std::string::npos);

    PlanInputs in = test::inputs("llama3-8b", "a100-80gb", 8, 1, test::layout(8, 1, 1, 64));
    in.parallel.attentionKernel = AttentionKernel::Flash2;
    const StageCompute second = stageCompute(in, 0);
    in.parallel.attentionKernel = AttentionKernel::Flash1;
    const StageCompute first = stageCompute(in, 0);
    EXPECT_NEAR(first.attentionSeconds, 2.0 * second.attentionSeconds,
                1e-9 * first.attentionSeconds);
    EXPECT_NEAR(first.seconds() - second.seconds(), second.attentionSeconds,
                1e-9 * first.seconds()); // only the core changed
}
