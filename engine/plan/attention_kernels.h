// How fast fused attention runs: each kernel's published forward and backward throughput, by
// sequence length and head dimension, on the GPU architecture it was measured on.
#pragma once

#include "core/cluster_spec.h"
#include "core/parallel_config.h"

#include <string>

namespace shardscope {

struct AttentionSpeed {
    AttentionKernel kernel = AttentionKernel::Auto; // the kernel that runs (Auto resolved)
    bool measured = false;                          // false: no measurement on this architecture
    // Where nothing was measured, the share of the GEMM efficiency the core runs at: 1 for a
    // kernel as fast as FlashAttention-2, whose best reaches about the GEMMs' share of the peak
    // (73 % of an A100's, Dao 2023); 1/2 for FlashAttention-1, which FA2 runs 2x as fast.
    double gemmShare = 1.0;
    // Fractions of the GPU's dense bf16 peak, counted as the kernels' papers count: forward
    // 4 s^2 d h FLOPs (halved when causal), backward 2.5 x the forward (its five matmuls).
    double forward = 0;
    double backward = 0;
    bool flash3Unavailable = false; // FlashAttention-3 was asked for off Hopper: FA2 runs
    double seqLen = 0;              // the length the speed was read at
};

// The speed of `kernel` on `gpu` for one call over `seqLen` tokens (a CP rank's slice under
// context parallelism) with heads of `headDim`, causal or not. Hopper (compute capability 9.0)
// has FlashAttention-2, FlashAttention-3 and cuDNN measured on H100 SXM5 (Shah et al. 2024,
// Figures 5 and 6); Auto is cuDNN there, as Transformer Engine prefers on Hopper. Elsewhere no
// per-length measurement is held: `measured` is false and the caller keeps its GEMM efficiency
// (times gemmShare). FlashAttention-1 runs at half FlashAttention-2's speed everywhere: Dao 2023
// (FlashAttention-2, arXiv 2307.08691, Sec. 4.1) measured FA2 "around 2x faster than
// FlashAttention" over lengths 512-16k and head dimensions 64 and 128 on A100; the ratio is
// carried to Hopper, where no measurement of the first generation is held.
AttentionSpeed attentionSpeed(AttentionKernel kernel, const GpuSpec& gpu, double seqLen,
                              int headDim, bool causal);
// In words, with its source: which kernel runs, at what rate, or why no rate is held. Apart from
// the speed itself because the planner's search reads speeds millions of times and words never.
std::string describeAttentionSpeed(const AttentionSpeed& s, const GpuSpec& gpu);

} // namespace shardscope
