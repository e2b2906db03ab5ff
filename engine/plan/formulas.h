// Small named formulas from the lessons and the papers. The planner is built from these, and the
// lesson tests check them on the lessons' own inputs, so a slip in either shows up in one place.
#pragma once

#include "core/parallel_config.h"

namespace shardscope {

// --- Compute --------------------------------------------------------------------------------
// Training FLOPs by the 6ND rule (2 forward + 4 backward FLOPs per parameter per token).
double trainingFlops6ND(double params, double tokens);
// FLOPs / bytes of an [M x K] x [K x N] matmul reading both inputs once.
double matmulArithmeticIntensity(double M, double N, double K, double bytesPerElement);
// FLOP/byte above which a kernel is compute bound on this GPU (the roofline ridge point).
double ridgePoint(double peakFlops, double memoryBandwidth);

// --- Collectives (per rank, ring algorithms) --------------------------------------------------
// Bytes each rank sends in a ring all-reduce of `bytes` over n ranks: 2 (n-1)/n x bytes.
double ringAllReduceBytesPerRank(double bytes, int n);
// Ring all-gather or reduce-scatter of a `bytes`-sized full tensor: (n-1)/n x bytes.
double ringAllGatherBytesPerRank(double bytes, int n);
// Bytes through the root in the naive reduce-then-broadcast all-reduce: 2 (n-1) x bytes.
double naiveAllReduceRootBytes(double bytes, int n);
// Alpha-beta time of a ring all-reduce: 2 (n-1) alpha + 2 (n-1)/n x bytes / bandwidth.
double ringAllReduceSeconds(double bytes, int n, double bandwidth, double latency);
double ringAllGatherSeconds(double bytes, int n, double bandwidth, double latency);

// --- Pipeline -------------------------------------------------------------------------------
// Idle fraction of a pipeline step: bubble / (useful + bubble).
// naive (p-1)/p; GPipe and 1F1B (p-1)/(m+p-1); interleaved (p-1)/(v m + p-1);
// zero bubble ZB-H1 (p-1)/(3m + p-1) (Qi et al. 2023, with equal F, B and W times); ZB-1p and
// ZB-2p from their programs (engine/sched/zero_bubble_auto.h), equal times again: ZB-H1's for
// both, by the makespan; with `postValidation` (the paper's optimizer post-validation, which lets
// each rank's staggered start overlap its previous step) by the longest rank's span instead,
// where ZB-2p has none once m >= 2p. The other schedules' first rank spans the makespan anyway.
double pipelineBubbleFraction(PipelineSchedule s, int p, int m, int v = 1,
                              bool postValidation = false);
// Bubble time in units of one microbatch's forward+backward on one stage: (p-1)/v, etc.
double pipelineBubbleMicrobatches(PipelineSchedule s, int p, int m, int v = 1,
                                  bool postValidation = false);
// Microbatches whose activations pipeline rank `stage` holds at its peak (Korthikanti et al.
// 2022: GPipe m, 1F1B p - stage, interleaved (p - stage) + (p-1)/v, i.e. p (1 + (p-1)/(p v)) on
// the first stage; ZB-H1 p on every stage, since deferred W passes keep their inputs: Qi et al.
// 2023 keep the peak, stage 0's, equal to 1F1B's; ZB-1p and ZB-2p their programs' peak on that
// rank, at most p and 2p), never more than the m microbatches of the step.
double pipelineInflightMicrobatches(PipelineSchedule s, int p, int m, int v = 1, int stage = 0);

// --- Model state ----------------------------------------------------------------------------
// Optimizer state bytes per parameter, excluding the fp32 master copy (AdamW 8, SGD momentum 4).
double optimizerStateBytes(Optimizer o);
// Bytes per parameter of weights + gradients + master + optimizer state after ZeRO sharding over
// `shards` data-parallel ranks, on a GPU that runs the policy's compute precision.
double modelStateBytesPerParam(const PrecisionPolicy& p, Optimizer o, int zeroStage, int shards);
// The same on a given GPU: an FP8 policy on a GPU without FP8 holds bf16 weights.
double modelStateBytesPerParam(const PrecisionPolicy& p, Optimizer o, int zeroStage, int shards,
                               const GpuSpec& gpu);

// --- Reliability ----------------------------------------------------------------------------
// Mean time between failures of a job on `gpus` GPUs that fail independently.
double jobMtbfSeconds(double gpuMtbfHours, int gpus);
// Checkpoint interval that minimises lost time (Daly 2006, first order: sqrt(2 d M) - d).
double optimalCheckpointIntervalSeconds(double writeSeconds, double mtbfSeconds);
// Expected fraction of wall time spent on useful training with checkpoints every `interval`
// seconds of work, each taking `write` seconds, failures every `mtbf` seconds on average, each
// costing `restart` seconds plus half an interval of lost work.
double trainingTimeFraction(double interval, double write, double mtbf, double restart);

} // namespace shardscope
