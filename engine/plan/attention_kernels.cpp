#include "attention_kernels.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace shardscope {

namespace {

// TFLOP/s at sequence lengths 512, 1k, 2k, 4k, 8k and 16k, as printed on the bars of
// FlashAttention-3's Figures 5 (forward) and 6 (backward) (Shah et al. 2024, arXiv 2407.08608v2;
// H100 SXM5, bf16, 16k tokens per batch, hidden 2048).
using Curve = std::array<double, 6>;
constexpr double kLengths[6] = {512, 1024, 2048, 4096, 8192, 16384};
constexpr double kH100Bf16Peak = 989.4; // TFLOP/s, the preset's dense bf16 peak

struct HopperCurves {
    Curve forward, forwardCausal, backward; // the paper measured the backward without a mask
};

// Figure 5(a)-(d) and 6(a)-(b): head dimension 64, then 128.
constexpr HopperCurves kFlash2[2] = {{{282, 306, 318, 321, 322, 324},
                                      {180, 229, 262, 284, 295, 299},
                                      {198, 238, 264, 279, 287, 291}},
                                     {{309, 350, 362, 368, 370, 370},
                                      {191, 260, 298, 319, 333, 335},
                                      {214, 260, 291, 310, 318, 322}}};
constexpr HopperCurves kCudnn[2] = {{{335, 373, 395, 408, 412, 413},
                                     {225, 288, 334, 363, 379, 388},
                                     {266, 348, 395, 417, 432, 433}},
                                    {{497, 574, 617, 609, 600, 595},
                                     {315, 410, 484, 518, 529, 539},
                                     {305, 408, 465, 499, 518, 516}}};
constexpr HopperCurves kFlash3[2] = {{{333, 392, 460, 476, 496, 497},
                                      {197, 265, 371, 420, 460, 473},
                                      {272, 363, 422, 453, 472, 474}},
                                     {{467, 565, 625, 638, 646, 648},
                                      {292, 423, 521, 579, 602, 616},
                                      {316, 424, 501, 542, 559, 561}}};

// FlashAttention-2 "is around 2x faster than FlashAttention" (Dao 2023, arXiv 2307.08691, Sec.
// 4.1, forward and backward on A100; 1.7-3.0x in its Sec. 4 summary): the first generation runs
// at FA2's speed over this.
constexpr double kFlash2OverFlash1 = 2.0;

// Linear in log2 of the length between the measured points; the ends held beyond them.
double at(const Curve& c, double seqLen) {
    const double x = std::log2(std::clamp(seqLen, kLengths[0], kLengths[5]) / kLengths[0]);
    const int i = std::min(4, int(x));
    return c[i] + (c[i + 1] - c[i]) * (x - i);
}

std::string kernelName(AttentionKernel k) {
    switch (k) {
    case AttentionKernel::Flash1:
        return "FlashAttention-1";
    case AttentionKernel::Flash2:
        return "FlashAttention-2";
    case AttentionKernel::Flash3:
        return "FlashAttention-3";
    case AttentionKernel::Cudnn:
        return "cuDNN fused attention";
    case AttentionKernel::Auto:
        break;
    }
    return "the default kernel";
}

} // namespace

AttentionSpeed attentionSpeed(AttentionKernel kernel, const GpuSpec& gpu, double seqLen,
                              int headDim, bool causal) {
    AttentionSpeed s;
    s.seqLen = seqLen;
    const bool hopper = gpu.computeCapability == "9.0";
    // Transformer Engine (Megatron-Core, NeMo) prefers cuDNN's attention on Hopper and
    // FlashAttention-2 before it (NeMo's memory-optimizations guide).
    s.kernel = kernel != AttentionKernel::Auto ? kernel
               : hopper                        ? AttentionKernel::Cudnn
                                               : AttentionKernel::Flash2;
    if (s.kernel == AttentionKernel::Flash3 && !hopper) {
        // FlashAttention-3 uses Hopper's TMA and warpgroup instructions: elsewhere it is FA2.
        s.kernel = AttentionKernel::Flash2;
        s.flash3Unavailable = true;
    }
    const double slowdown = s.kernel == AttentionKernel::Flash1 ? kFlash2OverFlash1 : 1.0;
    if (!hopper || gpu.peak(Precision::Bf16) <= 0) {
        s.gemmShare = 1.0 / slowdown;
        return s;
    }
    // The nearer of the measured head dimensions (64, 128); a tie takes the slower 64.
    const int d = std::abs(headDim - 128) < std::abs(headDim - 64) ? 1 : 0;
    // FlashAttention-1 was not measured on Hopper by the FA3 paper: FA2's curves, slowed.
    const bool fa2Curves =
        s.kernel == AttentionKernel::Flash2 || s.kernel == AttentionKernel::Flash1;
    const HopperCurves& c = fa2Curves                             ? kFlash2[d]
                            : s.kernel == AttentionKernel::Flash3 ? kFlash3[d]
                                                                  : kCudnn[d];
    const double forward = at(causal ? c.forwardCausal : c.forward, seqLen);
    // The causal backward was not measured: the unmasked backward slowed as the forward is.
    double backward = at(c.backward, seqLen);
    if (causal)
        backward *= at(c.forwardCausal, seqLen) / at(c.forward, seqLen);
    // As fractions of the H100 SXM5 peak they were measured against, carried to this Hopper
    // part's own peak (H200 and H100 PCIe share the SM; their clocks set their peaks).
    s.forward = forward / kH100Bf16Peak / slowdown;
    s.backward = backward / kH100Bf16Peak / slowdown;
    s.measured = true;
    return s;
}

std::string describeAttentionSpeed(const AttentionSpeed& s, const GpuSpec& gpu) {
    const std::string fallback =
        s.flash3Unavailable ? "FlashAttention-3 runs on Hopper only, so FlashAttention-2 runs; "
                            : "";
    const bool flash1 = s.kernel == AttentionKernel::Flash1;
    if (!s.measured)
        return fallback + kernelName(s.kernel) + "'s speed by sequence length is held for " +
               "Hopper only (FlashAttention-3 paper); on " + gpu.id +
               " attention's core runs at the GEMM efficiency" +
               (flash1 ? " over 2 (FlashAttention-2 is about 2x as fast, Dao 2023)" : "");
    const double peak = gpu.peak(Precision::Bf16) / 1e12;
    return fallback + kernelName(s.kernel) + " at " + std::to_string(int(std::lround(s.seqLen))) +
           " tokens, " + std::to_string(int(std::lround(s.forward * peak))) + "/" +
           std::to_string(int(std::lround(s.backward * peak))) + " TFLOP/s forward/backward" +
           (flash1 ? " (FlashAttention-2's, Shah et al. 2024, over 2: FA2 is about 2x as fast, "
                     "Dao 2023)"
                   : " (Shah et al. 2024)");
}

} // namespace shardscope
