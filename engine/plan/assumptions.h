// The efficiency assumptions behind every time estimate, in one place, each with its reason.
// docs/validation.md shows how these defaults compare with published training runs.
#pragma once

#include "flops_convention.h"

namespace shardscope {

struct Assumptions {
    // Achieved fraction of the dense tensor-core peak on the large GEMMs of a transformer layer,
    // on the GPU it was calibrated on (A100 SXM: the Megatron-LM runs of the calibration part).
    // Another GPU reaches the same share of its own measured matmul ceiling
    // (GpuSpec::matmulCeiling): 0.75 x 0.803 / 0.869 = 0.69 of an H100's peak. A GPU nobody
    // measured keeps 0.75 of its peak.
    double gemmEfficiency = 0.75;
    double gemmReferenceCeiling = 0.869; // A100 SXM's bf16 matmul ceiling (gpus/a100-80gb.json)
    // FP8 training (Transformer Engine, torchao float8) runs only the layers' linear projections
    // in FP8; attention's core, the output head and the rest stay bf16, and every FP8 GEMM's
    // inputs are cast first. Achieved fraction of the dense FP8 peak on those GEMMs, calibrated
    // on the calibration part of tests/data/published_runs.csv: NeMo 24.07's FP8 table, whose
    // median signed error is nearest zero here (-0.03 %), with each row's TP communication
    // overlapped or not, its gradients in bf16 or fp32 and its weights in FP8 or bf16 as its
    // launcher config set them. 0.468 of H100's 1979 TFLOP/s, 1.35 x the H100's bf16 GEMMs (0.69
    // of 989). Published FP8 runs gain far less than the 2 x of the peaks (docs/validation.md).
    // Other GPUs scale it by their FP8 matmul ceiling against the H100's, as the bf16 one does.
    double fp8GemmEfficiency = 0.468;
    double fp8ReferenceCeiling = 0.709; // H100 SXM's FP8 matmul ceiling (gpus/h100-sxm.json)
    // A GPU whose FP8 (or TF32) ceiling nobody measured but whose bf16 one is known scales by
    // that instead, against the calibration GPU's bf16 ceiling, so it keeps the calibration
    // GPU's ratio of FP8 to bf16 GEMM rates.
    double fp8ReferenceBf16Ceiling = 0.803; // H100 SXM's bf16 matmul ceiling
    // Achieved fraction of HBM bandwidth by memory-bound kernels (norms, activations, adds).
    double memoryEfficiency = 0.7;
    // Achieved fraction of link bandwidth by NCCL ring collectives (bus bandwidth / link rate).
    double commEfficiency = 0.8;
    // Attention score FLOPs: count only the causal half (what FlashAttention computes) or all.
    bool causalAttention = true;
    // Elements read + written by non-matmul kernels per token per layer, forward, as multiples
    // of the hidden size (norms, residual adds, rotary) and of the FFN width (activation).
    // Backward moves about twice as much. Counted from a Llama-style layer.
    double elementwiseHiddenTerms = 12.0;
    double elementwiseFfnTerms = 3.0;
    // Hidden communication is not free: compute kernels that share the GPU with a collective
    // (its SMs, HBM and power) run this much slower. Lee et al. 2025, "Characterizing
    // Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning", measured an
    // 18.9 % average slowdown over GPT and Llama layers on A100, H100, MI250 and MI210.
    // Which communication overlaps at all is the layout's (ParallelConfig's overlap flags).
    double overlapSlowdown = 0.189;
    // Host time of one token-dropless MoE layer for one microbatch, forward and backward: the
    // Python, PyTorch and launch work of its many small kernels (router, permutation, the
    // grouped GEMMs of each local expert, their casts), which the GPU cannot run ahead of
    // because dropless routing copies the token counts to the host and synchronises once per
    // layer (Megatron-Core's alltoall and DeepEP dispatchers). A microbatch on a pipeline stage
    // takes at least its MoE layers times this, however fast its GPU work: the host roof.
    // Calibrated on the calibration part of tests/data/published_runs.csv: Megatron-MoE-
    // ModelZoo's Qwen3-235B-A22B on 256 H100s with EP 8 inside a node (TP 4, PP 8, VPP 4, micro
    // batch 1, 16 experts a rank), whose 29.0 s step is host-bound on the planner's own GPU
    // time (docs/validation.md).
    double moeLayerHostSeconds = 9.4e-3;
    // Memory the planner cannot attribute to a tensor: CUDA context, cuBLAS workspaces, NCCL
    // buffers (fixed), and caching-allocator fragmentation (fraction of everything else).
    double runtimeOverheadBytes = 1.0e9;
    double fragmentation = 0.05;
    // Gradient communication buckets (PyTorch DDP bucket_cap_mb = 25), double-buffered.
    double gradBucketBytes = 25.0 * 1024 * 1024;
    // Optimizer offload: gradients go down and weights come back over PCIe (Gen4 x16 per
    // direction, ~25 GB/s achieved) while the host runs Adam.
    double hostLinkBandwidth = 25e9;
    // The what-if every back-of-the-envelope estimate makes (--mfu, the Explorer's "Assume MFU"):
    // when above 0, the step time is the model FLOPs at this fraction of the dense peak,
    // step = model_flops_per_step / (gpus x peak x MFU), and throughput, time, GPU-hours and
    // cost follow from it; the modelled step and MFU are kept beside it. 0: the model's own.
    double assumedMfu = 0;
    // What the user keeps free on each GPU (--memory-headroom, the Explorer's "Memory
    // headroom"): a fraction of its memory no layout may use, for what the planner does not
    // count (a framework's own buffers, allocator spikes, a longer sequence later). A layout
    // fits when its most loaded stage needs at most (1 - headroom) x the GPU's memory, and the
    // search ranks only those. 0: the whole memory (the runtime overhead is counted anyway).
    double memoryHeadroom = 0;
    // The framework validates the optimizer step after taking it instead of synchronising every
    // pipeline rank before it (Qi et al. 2024, section 4: zbpp's --enable-optimizer-post-
    // validation), so each rank's staggered start overlaps its previous step and a step lasts
    // the longest rank's span, not the makespan. Only the automatic zero-bubble schedules gain:
    // ZB-2p's bubble goes from ZB-H1's to none once m >= 2p. Megatron-LM and this engine
    // synchronise (the default); --post-validation assumes otherwise.
    bool optimizerPostValidation = false;
    // How MFU and model FLOP/s count a token's FLOPs (--flops-convention); the compute time
    // counts what runs whatever the convention.
    FlopsConvention flopsConvention = FlopsConvention::Causal;
};

// The most host time a dropless MoE layer may be given, in ms (--moe-host-ms, sessions): a
// second a layer is past any framework and keeps step times finite.
inline constexpr double kMaxMoeLayerHostMs = 1000;

} // namespace shardscope
