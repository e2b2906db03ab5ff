// Every worked example in the lessons (/work/shared/seeds/000..004), reproduced through the
// planner from the lesson's own inputs. Each test quotes the lesson's claim. Where the lesson's
// arithmetic slips, a "SLIP:" comment says so and the test asserts the right figure. Figures come
// from the planner (formulas.h, estimate.h, layout.h, compute.h, presets); the tests never redo
// the planner's arithmetic by hand. Where formulas.h has no function for a small formula, the
// test says "MISSING FORMULA:" and uses the closest thing that exists.
#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/presets.h"
#include "core/units.h"
#include "plan/compute.h"
#include "plan/estimate.h"
#include "plan/explain.h"
#include "plan/formulas.h"
#include "plan/layout.h"

#include <cmath>
#include <cstddef>
#include <gtest/gtest.h>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace shardscope {
namespace {

// EXPECT_NEAR with a tolerance relative to the expected value.
#define EXPECT_REL(actual, expected, rel)                                                          \
    EXPECT_NEAR((actual), (expected), std::abs(double(expected)) * (rel))

// 12 bytes/param convention of lesson 001 (and the "2 + 2 + 4 + 4" of lesson 000): bf16 weights,
// bf16 gradients, fp32 Adam m and v, no fp32 master copy.
PrecisionPolicy bf16NoMaster() {
    return {Precision::Bf16, Precision::Bf16, false};
}
// Lesson 002's table: bf16 weights, fp32 gradients, fp32 Adam m and v, no master copy (14 B).
PrecisionPolicy bf16Fp32GradsNoMaster() {
    return {Precision::Bf16, Precision::Fp32, false};
}

const GpuSpec& h100() {
    return findGpuPreset("h100-sxm");
}

// "A 7B model": only the parameter count is known.
ModelSpec bareModel(double params) {
    ModelSpec m;
    m.name = "bare";
    m.bareParams = params;
    return m;
}

ParallelConfig layout(int dp, int tp = 1, int pp = 1, int cp = 1) {
    ParallelConfig p;
    p.dp = dp;
    p.tp = tp;
    p.pp = pp;
    p.cp = cp;
    p.microBatch = 1;
    p.globalBatch = dp; // one microbatch per step unless a test says otherwise
    return p;
}

PlanInputs inputs(const ModelSpec& m, const ClusterSpec& cluster, const ParallelConfig& p) {
    PlanInputs in;
    in.model = m;
    in.cluster = cluster;
    in.parallel = p;
    return in;
}

// Memory of pipeline stage 0 for a bare model (the cluster does not enter memoryForStage).
MemoryBreakdown bareMemory(double params, const PrecisionPolicy& prec, ParallelConfig p) {
    p.precision = prec;
    return memoryForStage(inputs(bareModel(params), makeCluster(h100(), 8, 1), p), 0);
}

double modelState(const MemoryBreakdown& m) {
    return m.parameters + m.gradients + m.optimizer;
}

const Violation* findRule(const std::vector<Violation>& v, const std::string& rule) {
    for (const Violation& x : v) {
        if (x.rule == rule)
            return &x;
    }
    return nullptr;
}

// "rule: message; ..." for failure messages.
std::string describe(const std::vector<Violation>& v) {
    std::string s;
    for (const Violation& x : v)
        s += x.rule + ": " + x.message + "; ";
    return s;
}

// The dp the world-size rule suggests ("set dp = 8 (...)"), or -1 when it suggests none.
int suggestedDp(const std::vector<Violation>& v) {
    const Violation* w = findRule(v, "world-size");
    if (!w)
        return -1;
    const std::string key = "set dp = ";
    const std::size_t at = w->hint.find(key);
    if (at == std::string::npos)
        return -1;
    return std::stoi(w->hint.substr(at + key.size()));
}

// ================================================================================================
// Lesson 000: memory budget, DP, ZeRO/FSDP, TP, PP, SP/CP, 4D parallelism, fault tolerance
// ================================================================================================

TEST(Lesson000_MemoryBudget, GPT3_175B_MixedPrecisionAdamW) {
    // Lesson: "350 GB Weights (BF16), 350 GB Gradients, 2100 GB Optim. states (FP32), ~60 GB
    // Activations, ~2860 GB Total, ~36 H100s (80GB) minimum".
    // The 2100 GB is 12 B/param: fp32 master 4 + Adam m 4 + Adam v 4; gradients are bf16.
    ParallelConfig p = layout(1);
    const MemoryBreakdown mem = bareMemory(175e9, PrecisionPolicy::bf16Mixed(false), p);
    EXPECT_REL(mem.parameters, 350 * GB, 1e-9);
    EXPECT_REL(mem.gradients, 350 * GB, 1e-9);
    EXPECT_REL(mem.optimizer, 2100 * GB, 1e-9);
    const double activations = 60 * GB; // given by the lesson
    const double total = modelState(mem) + activations;
    EXPECT_REL(total, 2860 * GB, 1e-9);
    EXPECT_EQ(std::ceil(total / h100().memoryBytes), 36.0); // 35.75 -> 36

    // The same through estimate() and the explanation the planner shows for the figure.
    p.precision = PrecisionPolicy::bf16Mixed(false);
    const PlanInputs in = inputs(bareModel(175e9), makeCluster(h100(), 1, 1), p);
    const Estimate e = estimate(in);
    EXPECT_REL(e.memory.optimizer, 2100 * GB, 1e-9);
    EXPECT_REL(explain(in, e, FigureId::MemOptimizer).value, 2100 * GB, 1e-9);
    EXPECT_FALSE(e.fits);
}

TEST(Lesson000_MemoryBudget, GPT3_175B_Preset) {
    // Lesson: "GPT-3 has 175 billion parameters. In mixed precision, that is 350 GB just for the
    // weights." The preset's exact count gives the same within 1 %.
    const ModelSpec& m = findModelPreset("gpt3-175b");
    EXPECT_REL(countParameters(m).total, 175e9, 0.01);
    const Estimate e = estimate(inputs(m, makeCluster(h100(), 1, 1), layout(1)));
    EXPECT_REL(e.memory.parameters, 350 * GB, 0.01);
}

TEST(Lesson000_MemoryBudget, RuleOfThumb_16BytesPerParam) {
    // Lesson: "mixed precision + AdamW needs ~16 bytes per parameter (2 weights + 2 grads + 4+4
    // optimizer state + activations)".
    // SLIP: 2 + 2 + 4 + 4 = 12, not 16. The 16 needs the fp32 master copy: 2 + 2 + 4 + 4 + 4
    // (which is also what the lesson's own 2100 GB optimizer figure contains).
    EXPECT_DOUBLE_EQ(modelStateBytesPerParam(bf16NoMaster(), Optimizer::AdamW, 0, 1), 12.0);
    EXPECT_DOUBLE_EQ(
        modelStateBytesPerParam(PrecisionPolicy::bf16Mixed(false), Optimizer::AdamW, 0, 1), 16.0);
    EXPECT_DOUBLE_EQ(optimizerStateBytes(Optimizer::AdamW), 8.0); // the "4+4"
}

TEST(Lesson000_MemoryBudget, Flashcard_175B_About2_8TB) {
    // Flashcard: "~16 bytes per parameter: 2 (weights BF16) + 2 (grads) + 8 (optimizer state FP32
    // for momentum and variance) + activations. A 175B model needs ~2.8 TB total".
    // SLIP (same as above): 2 + 2 + 8 = 12 B/param = 2.1 TB; the 2.8 TB is the 16 B/param figure
    // with the fp32 master copy.
    EXPECT_REL(modelState(bareMemory(175e9, bf16NoMaster(), layout(1))), 2.1 * TB, 1e-9);
    EXPECT_REL(modelState(bareMemory(175e9, PrecisionPolicy::bf16Mixed(false), layout(1))),
               2.8 * TB, 1e-9);
}

TEST(Lesson000_MemoryBudget, ParallelismMandatoryAbove5B) {
    // Lesson: "This is the reason parallelism is mandatory for any model above ~5B parameters."
    // At 16 B/param a 5B model's training state alone fills an 80 GB H100.
    const MemoryBreakdown mem = bareMemory(5e9, PrecisionPolicy::bf16Mixed(false), layout(1));
    EXPECT_REL(modelState(mem), h100().memoryBytes, 1e-9);
}

TEST(Lesson000_TensorParallelism, MLP_768To3072_Over4Gpus_768ColumnsEach) {
    // Lesson: "For the MLP (which expands 768 -> 3072 then 3072 -> 768), the intermediate matrix is
    // split column-wise across 4 GPUs; each GPU holds 3072/4 = 768 columns."
    // MISSING FORMULA: no per-rank shard width (ffn / tp) in formulas.h or layout.h. The test reads
    // the MLP weights one TP rank holds from layerParamsPerTpRank (difference between the layer
    // with and without its MLP) and checks they are two [768 x 768] shards (up-projection columns,
    // down-projection rows).
    ModelSpec m = findModelPreset("gpt2-124m"); // hidden 768, FFN 3072
    ASSERT_EQ(m.hidden, 768);
    ASSERT_EQ(m.ffnHidden, 3072);
    m.mlpBias = false;
    ModelSpec noMlp = m;
    noMlp.ffnHidden = 0;
    const double mlpPerRank = layerParamsPerTpRank(m, countParameters(m), 4) -
                              layerParamsPerTpRank(noMlp, countParameters(noMlp), 4);
    const double columnsPerRank = mlpPerRank / (2.0 * m.hidden);
    EXPECT_DOUBLE_EQ(columnsPerRank, 768.0);
    // tp = 4 divides the FFN width, so the layout is valid.
    ParallelConfig p = layout(1, 4);
    EXPECT_EQ(findRule(validate(m, p), "tp-ffn"), nullptr);
}

TEST(Lesson000_TensorParallelism, Attention_96HeadsOver8Gpus_12Each) {
    // Lesson: "if you have 96 heads and 8 GPUs, give each GPU 12 heads."
    // MISSING FORMULA: no heads-per-TP-rank function. The test reads one TP rank's attention
    // weights from layerParamsPerTpRank (on GPT-3 without its MLP and biases) and divides by the
    // weights of one head (Q, K, V and O slices: 4 x hidden x head_dim).
    ModelSpec m = findModelPreset("gpt3-175b");
    ASSERT_EQ(m.heads, 96);
    m.ffnHidden = 0;
    m.mlpBias = m.attentionBias = m.outputBias = false;
    const ParamCount c = countParameters(m);
    const double attentionPerRank = layerParamsPerTpRank(m, c, 8) - c.normsPerLayer;
    const double headsPerRank = attentionPerRank / (4.0 * m.hidden * m.effectiveHeadDim());
    EXPECT_DOUBLE_EQ(headsPerRank, 12.0);
    EXPECT_EQ(findRule(validate(findModelPreset("gpt3-175b"), layout(1, 8)), "tp-heads"), nullptr);
}

TEST(Lesson000_PipelineParallelism, GPT3_12LayersPerGpu) {
    // Lesson: "GPU 0 holds layers 1-12, GPU 1 holds layers 13-24, etc." (12 layers per stage:
    // GPT-3's 96 layers over 8 stages).
    const ModelSpec& m = findModelPreset("gpt3-175b");
    const ParallelConfig p = layout(1, 1, 8);
    for (int s = 0; s < 8; ++s)
        EXPECT_EQ(layersOnStage(m, p, s), 12) << "stage " << s;
}

TEST(Lesson000_PipelineParallelism, FourLayerModelOnFourGpus) {
    // Lesson: "see how a 4-layer model is distributed across 4 GPUs" (one layer each).
    ModelSpec m = findModelPreset("gpt2-124m");
    m.layers = 4;
    const ParallelConfig p = layout(1, 1, 4);
    for (int s = 0; s < 4; ++s)
        EXPECT_EQ(layersOnStage(m, p, s), 1) << "stage " << s;
}

TEST(Lesson000_PipelineParallelism, OneFOneBSameBubbleLessMemory) {
    // Lesson: "GPipe runs forward pass fully before any backward (simple but bubbly). PipeDream
    // interleaves forward/backward 1F1B to shrink the bubble."
    // SLIP: for the same stages and microbatches 1F1B has the same bubble as GPipe,
    // (p-1)/(m+p-1); what it shrinks is the activation memory (p microbatches in flight, not m).
    // Lesson 001 says this correctly.
    for (int m : {4, 8, 32}) {
        EXPECT_DOUBLE_EQ(pipelineBubbleFraction(PipelineSchedule::OneFOneB, 4, m),
                         pipelineBubbleFraction(PipelineSchedule::GPipe, 4, m))
            << m;
        EXPECT_LE(pipelineInflightMicrobatches(PipelineSchedule::OneFOneB, 4, m),
                  pipelineInflightMicrobatches(PipelineSchedule::GPipe, 4, m))
            << m;
    }
    EXPECT_LT(pipelineInflightMicrobatches(PipelineSchedule::OneFOneB, 4, 32),
              pipelineInflightMicrobatches(PipelineSchedule::GPipe, 4, 32));
}

TEST(Lesson000_SequenceParallelism, Seq8192Over8Gpus_1024TokensEach) {
    // Lesson: "With 8 GPUs and an 8192-token sequence, each GPU holds activations for 1024
    // tokens." The planner does this two ways: sequence parallelism across the TP group (the
    // layer input kept under full recompute is split 8 ways) and context parallelism (localTokens).
    ModelSpec m = findModelPreset("llama3-8b");
    m.seqLen = 8192;
    ParallelConfig sp = layout(1, 8);
    sp.sequenceParallel = true;
    sp.recompute = Recompute::Full; // only the layer input [tokens x hidden] is kept
    const double perTokenBytes = sp.precision.activationBytes() * m.hidden;
    EXPECT_DOUBLE_EQ(activationBytesPerLayer(m, sp) / perTokenBytes, 1024.0);

    const ParallelConfig cp = layout(1, 1, 1, 8);
    EXPECT_DOUBLE_EQ(localTokens(m, cp), 1024.0);
}

TEST(Lesson000_4DParallelism, Llama3_405B_TP8_PP16_CP16_FSDPOn16384Gpus) {
    // Lesson: "LLaMA 3 405B used: TP=8 ... PP=16 ... Data Parallelism via FSDP across everything
    // ... CP=16 ... Total: 16,384 H100 GPUs". So dp = 16384 / (8 x 16 x 16) = 8.
    const ModelSpec& m = findModelPreset("llama3-405b");
    const ClusterSpec cluster = makeCluster(h100(), 8, 2048);
    ASSERT_EQ(cluster.worldSize(), 16384);
    ParallelConfig p = layout(1, 8, 16, 16);
    p.zero = 3;
    p.globalBatch = 16;
    EXPECT_EQ(suggestedDp(validate(m, cluster, p)), 8);
    p.dp = 8;
    p.globalBatch = 128;
    EXPECT_EQ(p.worldSize(), 16384);
    const std::vector<Violation> v = validate(m, cluster, p);
    EXPECT_TRUE(v.empty()) << describe(v);
}

TEST(Lesson000_4DParallelism, Llama3_400TflopsIs40PercentOfPeak) {
    // Lesson: "400 TFLOPs/GPU sustained = ~40% of theoretical peak".
    // 400 / 989.4 = 40.4 % of the H100 SXM dense BF16 peak.
    // MISSING FORMULA (minor): mfu(achievedFlopsPerGpu, peak); done by division here.
    EXPECT_REL(400e12 / h100().peak(Precision::Bf16), 0.404, 0.005);
}

TEST(Lesson000_FaultTolerance, Llama3_466InterruptionsIn54Days) {
    // Lesson: "LLaMA 3's 54-day training window saw 466 unexpected interruptions (~8-9 per day)"
    // on 16,384 GPUs. 466 / 54 = 8.6 per day, i.e. a job MTBF of 2.78 h, which on 16,384 GPUs
    // means a per-GPU MTBF of about 45,600 h: the planner's default must reproduce the rate.
    const ClusterSpec defaults;
    const double jobMtbf = jobMtbfSeconds(defaults.gpuMtbfHours, 16384);
    EXPECT_REL(jobMtbf, 54 * kSecondsPerDay / 466, 0.01);
    EXPECT_REL(kSecondsPerDay / jobMtbf, 8.6, 0.01); // interruptions per day
    // Lesson 001 on the same run: "Meta reported interruptions every few hours" (2.8 h).
    EXPECT_REL(jobMtbf / kSecondsPerHour, 2.78, 0.01);
    // The per-GPU MTBF these inputs imply (54 days / 466 x 16,384 GPUs = 45,566 h) is the default.
    EXPECT_REL(defaults.gpuMtbfHours, 54 * 24.0 / 466 * 16384, 0.01);
}

TEST(Lesson000_FaultTolerance, Checkpoint70B_About1_1TB) {
    // Lesson: "A 70B model checkpoint is ~1.1 TB."
    // That is the 16 B/param rule of thumb: 70e9 x 16 = 1.12 TB. What a checkpoint actually holds
    // is bf16 weights + fp32 master + Adam m and v = 14 B/param = 0.98 TB (gradients are not
    // saved); the planner's Estimate reports the latter.
    EXPECT_REL(
        70e9 * modelStateBytesPerParam(PrecisionPolicy::bf16Mixed(false), Optimizer::AdamW, 0, 1),
        1.12 * TB, 1e-9);
    const Estimate e = estimate(inputs(bareModel(70e9), makeCluster(h100(), 1, 1), layout(1)));
    EXPECT_REL(e.checkpointBytes, 0.98 * TB, 1e-9);
}

// ================================================================================================
// Lesson 001: Stanford CS 231n lecture 11, large-scale distributed training
// ================================================================================================

TEST(Lesson001_ScaleProblem, Intro_3_2TBTrainingState) {
    // Lesson: "Llama 3 has 405 billion parameters and needs 3.2 TB of memory just for training
    // state. A single GPU has 80 GB. How do you bridge a 40x gap?"
    // SLIP: 3.24 TB is only Adam's m and v (405e9 x 8 B, the lesson's own memory-breakdown row).
    // The training state by the lesson's own 12 B/param count is 4.86 TB, a 60.75x gap.
    const MemoryBreakdown mem = bareMemory(405e9, bf16NoMaster(), layout(1));
    EXPECT_REL(mem.optimizer, 3.24 * TB, 1e-9);
    EXPECT_REL(mem.optimizer / h100().memoryBytes, 40.5, 1e-9);
    EXPECT_REL(modelState(mem), 4.86 * TB, 1e-9);
    EXPECT_REL(modelState(mem) / h100().memoryBytes, 60.75, 1e-9);
}

TEST(Lesson001_ScaleProblem, MemoryWall_Llama3_405B_12BytesPerParam) {
    // Lesson: "2 + 2 + 4 + 4 = 12 bytes per parameter ... 405 x 10^9 params x (2 + 2 + 4 + 4) bytes
    // ~= 4.86 TB. An H100 GPU has 80 GB. That's over 60 GPUs worth". And "(... totaling about 16
    // bytes when the master FP32 weight copy is included)".
    EXPECT_DOUBLE_EQ(modelStateBytesPerParam(bf16NoMaster(), Optimizer::AdamW, 0, 1), 12.0);
    EXPECT_DOUBLE_EQ(
        modelStateBytesPerParam(PrecisionPolicy::bf16Mixed(false), Optimizer::AdamW, 0, 1), 16.0);
    const MemoryBreakdown mem = bareMemory(405e9, bf16NoMaster(), layout(1));
    EXPECT_REL(modelState(mem), 4.86 * TB, 1e-9);
    EXPECT_GT(modelState(mem) / h100().memoryBytes, 60.0);
    EXPECT_REL(modelState(mem) / h100().memoryBytes, 60.75, 1e-9);
    // The preset's exact count (405.85e9) is the lesson's 405B.
    EXPECT_REL(countParameters(findModelPreset("llama3-405b")).total, 405e9, 0.01);
}

TEST(Lesson001_ScaleProblem, ComputeWall_6ND_Llama3) {
    // Lesson: "FLOPs = 6 x 405 x 10^9 x 15 x 10^12 = 3.645 x 10^25 FLOPs."
    EXPECT_REL(trainingFlops6ND(405e9, 15e12), 3.645e25, 1e-12);
    // The planner's exact count for the preset (6N plus attention scores) is within 5 % of 6ND.
    const ModelSpec& m = findModelPreset("llama3-405b");
    const TokenFlops f = tokenFlops(m, layout(1), Assumptions{});
    EXPECT_REL(f.model * 15e12, 3.645e25, 0.05);
}

TEST(Lesson001_ScaleProblem, ComputeWall_OneH100_1170Years) {
    // Lesson: "On 1 GPU: 3.645 x 10^25 / (989 x 10^12) = 3.69 x 10^10 seconds ~= 1,170 years."
    // MISSING FORMULA: trainingSeconds(totalFlops, gpus, peakFlops, mfu); divided here.
    const double seconds = trainingFlops6ND(405e9, 15e12) / 989e12;
    EXPECT_REL(seconds, 3.69e10, 0.005);
    EXPECT_REL(seconds / kSecondsPerYear, 1170, 0.005);
    // The preset's 989.4 TFLOP/s is the lesson's "989".
    EXPECT_REL(h100().peak(Precision::Bf16), 989e12, 0.001);
}

TEST(Lesson001_ScaleProblem, ComputeWall_24576Gpus_17DaysIsAt100PercentNot40) {
    // Lesson: "On 24,576 GPUs: 1,170 / 24,576 ~= 17 days at ~40% hardware utilization (MFU)."
    // SLIP: 17.4 days is at 100 % utilisation. At 40 % MFU it is 43.4 days (close to the ~54
    // days Meta reports).
    const double flops = trainingFlops6ND(405e9, 15e12);
    const double fullPeakDays = flops / (989e12 * 24576) / kSecondsPerDay;
    EXPECT_REL(fullPeakDays, 17.36, 0.005);
    const double mfu = 0.40;
    EXPECT_REL(flops / (989e12 * 24576 * mfu) / kSecondsPerDay, 43.4, 0.005);
}

TEST(Lesson001_GpuHardware, H100_CudaAndTensorCores) {
    // Lesson: "An NVIDIA H100 contains 132 Streaming Multiprocessors ... 128 CUDA cores per SM x
    // 132 SMs = 16,896 CUDA cores ... 4 tensor cores per SM x 132 SMs = 528 tensor cores."
    EXPECT_EQ(h100().sms, 132);
    EXPECT_EQ(128 * h100().sms, 16896);
    EXPECT_EQ(4 * h100().sms, 528);
}

TEST(Lesson001_GpuHardware, TensorCoreTile_1024Flops) {
    // Lesson: "Each tensor core computes a [16x4] . [4x8] matrix product per cycle - that's 16 x 4
    // x 8 = 1,024 FLOPs".
    // SLIP (in the expression): 16 x 4 x 8 = 512 multiply-adds; 1,024 FLOPs is 2 x 16 x 4 x 8.
    // MISSING FORMULA: matmulFlops(M, N, K); the FLOPs are read back from the intensity here.
    const double M = 16, K = 4, N = 8, bytes = 2;
    const double flops = matmulArithmeticIntensity(M, N, K, bytes) * (M * K + K * N) * bytes;
    EXPECT_DOUBLE_EQ(flops, 1024.0);
}

TEST(Lesson001_GpuHardware, GpuEvolutionTable) {
    // Lesson table: "A100 2020 312 TFLOP/s 80 GB HBM2e 2,039 GB/s; H100 2023 989 80 GB HBM3 3,352;
    // B200 2025 ~5,000 192 GB HBM3e 8,000. From K40 to B200: roughly 1,000x more throughput."
    const GpuSpec& a100 = findGpuPreset("a100-80gb");
    EXPECT_REL(a100.peak(Precision::Bf16), 312e12, 0.005);
    EXPECT_REL(a100.memoryBytes, 80 * GB, 1e-9);
    EXPECT_REL(a100.hbmBandwidth, 2039 * GB, 0.005);
    EXPECT_REL(h100().peak(Precision::Bf16), 989e12, 0.005);
    EXPECT_REL(h100().memoryBytes, 80 * GB, 1e-9);
    EXPECT_REL(h100().hbmBandwidth, 3352 * GB, 0.005);
    // SLIP: B200's dense BF16 peak is 2,250 TFLOP/s; "~5,000" is about the 2:4-sparse BF16
    // (4,500) or dense FP8 figure. Dense BF16 against the K40's ~5 TFLOP/s is ~450x, not ~1,000x.
    const GpuSpec& b200 = findGpuPreset("b200");
    EXPECT_REL(b200.peak(Precision::Bf16), 2250e12, 0.005);
    EXPECT_REL(b200.peak(Precision::Fp8), 4500e12, 0.005);
    EXPECT_REL(b200.peak(Precision::Bf16) / 5e12, 450, 0.005);
    EXPECT_REL(b200.hbmBandwidth, 8000 * GB, 0.05); // 7.7 TB/s (HGX) vs 8 TB/s (DGX)
    // (192 GB is B200's physical HBM; HGX B200 exposes 180 GB per GPU, which the preset uses.)
}

TEST(Lesson001_Roofline, Matmul4096_Intensity2048) {
    // Lesson: "For M=N=K=4096: intensity = 2x4096^3 / (2x4096^2 x 2) ~= 2048 FLOPs/byte."
    EXPECT_DOUBLE_EQ(matmulArithmeticIntensity(4096, 4096, 4096, 2), 2048.0);
    EXPECT_GT(matmulArithmeticIntensity(4096, 4096, 4096, 2),
              ridgePoint(h100().peak(Precision::Bf16), h100().hbmBandwidth));
}

TEST(Lesson001_Roofline, ReluIsMemoryBound) {
    // Lesson: "Element-wise ReLU on 4096x4096: does N operations, loads N x 2 bytes. Intensity =
    // 1/2 = 0.5 FLOPs/byte. Completely memory-bandwidth-bound."
    // MISSING FORMULA: elementwiseArithmeticIntensity(flopsPerElement, bytesPerElement); the
    // lesson's 0.5 is used as given and compared with the planner's ridge point.
    const double reluIntensity = 1.0 / 2.0;
    EXPECT_LT(reluIntensity, ridgePoint(h100().peak(Precision::Bf16), h100().hbmBandwidth));
}

TEST(Lesson001_Roofline, H100RidgePoint295) {
    // Lesson: "989 TFLOP/s compute and 3,352 GB/s bandwidth. The crossover point is 989,000 / 3,352
    // ~= 295 FLOPs/byte."
    EXPECT_REL(ridgePoint(989e12, 3352e9), 295, 0.005);
    EXPECT_REL(ridgePoint(h100().peak(Precision::Bf16), h100().hbmBandwidth), 295, 0.005);
}

TEST(Lesson001_Clusters, BandwidthHierarchyRatios) {
    // Lesson: "HBM 3,352 GB/s; NVLink / NVSwitch 900 GB/s 0.27x; InfiniBand (8x 400G) ~50 GB/s
    // 0.015x ... Going from intra-server NVLink (900 GB/s) to inter-server InfiniBand (~50 GB/s)
    // is an 18x bandwidth drop."
    const ClusterSpec c = makeCluster(h100(), 8, 2);
    const double nvlinkBidirectional = 2 * c.intraBandwidth; // the preset stores one direction
    EXPECT_REL(nvlinkBidirectional, 900 * GB, 1e-9);
    EXPECT_REL(c.interBandwidth, 50 * GB, 1e-9);
    EXPECT_REL(nvlinkBidirectional / h100().hbmBandwidth, 0.27, 0.01);
    EXPECT_REL(c.interBandwidth / h100().hbmBandwidth, 0.015, 0.01);
    EXPECT_REL(nvlinkBidirectional / c.interBandwidth, 18, 1e-9);
    // NOTE: 900 GB/s is NVLink's two directions added; 50 GB/s (400 Gb/s) is one direction of the
    // NIC. Like for like (per direction, what the planner uses) the drop is 450/50 = 9x.
    EXPECT_REL(c.intraBandwidth / c.interBandwidth, 9, 1e-9);
}

TEST(Lesson001_Clusters, GrandTeton_MemoryAndPeak) {
    // Lesson: "1 Server = 8x H100 GPUs ... 640 GB total GPU memory. 1 Rack = 2 servers = 16 GPUs.
    // 1.28 TB memory. 1 Pod = 192 racks = 3,072 GPUs ... 245 TB memory. 1 Cluster = 8 pods =
    // 24,576 GPUs ... Total: 1.97 PB memory, 24.3 EFLOP/s peak."
    // MISSING FORMULA (minor): ClusterSpec total memory / total peak; multiplied here.
    const ClusterSpec server = makeCluster(h100(), 8, 1);
    const ClusterSpec rack = makeCluster(h100(), 8, 2);
    const ClusterSpec pod = makeCluster(h100(), 8, 2 * 192);
    const ClusterSpec cluster = makeCluster(h100(), 8, 2 * 192 * 8);
    EXPECT_REL(server.worldSize() * h100().memoryBytes, 640 * GB, 1e-9);
    EXPECT_EQ(rack.worldSize(), 16);
    EXPECT_REL(rack.worldSize() * h100().memoryBytes, 1.28 * TB, 1e-9);
    EXPECT_EQ(pod.worldSize(), 3072);
    EXPECT_REL(pod.worldSize() * h100().memoryBytes, 245 * TB, 0.005); // 245.76 TB
    EXPECT_EQ(cluster.worldSize(), 24576);
    EXPECT_REL(cluster.worldSize() * h100().memoryBytes, 1.97 * PB, 0.005); // 1.966 PB
    EXPECT_REL(cluster.worldSize() * h100().peak(Precision::Bf16), 24.3e18, 0.005);
}

TEST(Lesson001_RingAllReduce, CommunicationVolume_NaiveVsRing) {
    // Lesson: "Naive: All GPUs send M bytes to GPU 0, then GPU 0 broadcasts M bytes. Total:
    // 2(N-1)M bytes through GPU 0. Ring: ... There are 2(N-1) steps total. Per GPU: 2(N-1) x M/N
    // ~= 2M bytes (for large N)." The interactive uses N = 5.
    const double M = 1 * GB;
    EXPECT_DOUBLE_EQ(naiveAllReduceRootBytes(M, 5), 8 * M);
    EXPECT_DOUBLE_EQ(ringAllReduceBytesPerRank(M, 5), 1.6 * M);
    EXPECT_REL(ringAllReduceBytesPerRank(M, 24576), 2 * M, 1e-4);
    // 2(N-1) steps: the latency term of the ring time counts them.
    const double alpha = 1e-6;
    EXPECT_REL(ringAllReduceSeconds(M, 5, 100e9, alpha) - ringAllReduceSeconds(M, 5, 100e9, 0),
               8 * alpha, 1e-9);
    // "Communication Is Independent of N": 8 GPUs send 1.75 M each, 24,576 GPUs 2 M.
    EXPECT_DOUBLE_EQ(ringAllReduceBytesPerRank(M, 8), 1.75 * M);
}

TEST(Lesson001_RingAllReduce, TimeIsAboutTwoMOverBandwidth) {
    // Lesson: "The total time is 2(N-1)M/(N x bandwidth) ~= 2M/bandwidth."
    const double M = 10 * GB, bw = 50 * GB;
    EXPECT_REL(ringAllReduceSeconds(M, 5, bw, 0), 2.0 * 4 * M / (5 * bw), 1e-12);
    EXPECT_REL(ringAllReduceSeconds(M, 24576, bw, 0), 2 * M / bw, 1e-4);
}

TEST(Lesson001_ZeRO, StageTable_12BytesPerParam) {
    // Lesson table: "Stage 1 ~Nparams x (2+2+8/N) bytes; Stage 2 ~Nparams x (2+10/N) bytes;
    // Stage 3 (FSDP) ~Nparams x 12/N bytes".
    for (int n : {8, 1024}) {
        EXPECT_DOUBLE_EQ(modelStateBytesPerParam(bf16NoMaster(), Optimizer::AdamW, 1, n),
                         2 + 2 + 8.0 / n);
        EXPECT_DOUBLE_EQ(modelStateBytesPerParam(bf16NoMaster(), Optimizer::AdamW, 2, n),
                         2 + 10.0 / n);
        EXPECT_DOUBLE_EQ(modelStateBytesPerParam(bf16NoMaster(), Optimizer::AdamW, 3, n), 12.0 / n);
    }
    // "Memory Scales Perfectly ... Double the GPUs, halve the memory per GPU."
    EXPECT_DOUBLE_EQ(modelStateBytesPerParam(bf16NoMaster(), Optimizer::AdamW, 3, 2048),
                     modelStateBytesPerParam(bf16NoMaster(), Optimizer::AdamW, 3, 1024) / 2);
}

TEST(Lesson001_ZeRO, Llama3_Stage3On1024Gpus_4_75GB) {
    // Lesson: "405B params x 12 bytes = 4.86 TB total training state. Stage 3 on 1,024 GPUs:
    // 4.86 TB / 1,024 = 4.75 GB per GPU. That fits comfortably in 80 GB".
    ParallelConfig p = layout(1024);
    p.zero = 3;
    const MemoryBreakdown mem = bareMemory(405e9, bf16NoMaster(), p);
    EXPECT_REL(modelState(mem), 4.75 * GB, 0.002); // 4.746 GB
    EXPECT_LT(modelState(mem), h100().memoryBytes);
}

TEST(Lesson001_ZeRO, Llama3_Stage1On1024Gpus) {
    // Lesson: "Stage 1 on 1,024 GPUs: Each GPU stores full weights (810 GB in BF16) + full
    // gradients (810 GB) + sharded optimizer (4 bytes x 2 x 405B / 1024 ~= 3.16 GB). Still doesn't
    // fit - 810 GB alone exceeds one GPU."
    ParallelConfig p = layout(1024);
    p.zero = 1;
    const MemoryBreakdown mem = bareMemory(405e9, bf16NoMaster(), p);
    EXPECT_REL(mem.parameters, 810 * GB, 1e-9);
    EXPECT_REL(mem.gradients, 810 * GB, 1e-9);
    EXPECT_REL(mem.optimizer, 3.16 * GB, 0.002); // 3.164 GB
    EXPECT_GT(mem.parameters, h100().memoryBytes);
}

TEST(Lesson001_ZeRO, Stage3CommunicationIs1_5xDP_Not3x) {
    // Lesson table: "Stage 3 (FSDP) ... Comm. Overhead ~3x DP", and "The cost is 3x more
    // communication than vanilla DP (one all-gather in forward, one all-gather + one
    // reduce-scatter in backward)."
    // SLIP: vanilla DP's ring all-reduce already moves 2 (n-1)/n x the gradients (a reduce-scatter
    // plus an all-gather), so ZeRO-3's three (n-1)/n collectives are 1.5x DP (ZeRO paper, sec. 7),
    // not 3x. Through the planner's per-step DP traffic, same-dtype weights and gradients:
    const ModelSpec m = bareModel(7e9);
    const ClusterSpec cluster = makeCluster(h100(), 8, 1);
    ParallelConfig p = layout(8);
    p.precision = bf16NoMaster();
    const Estimate dp = estimate(inputs(m, cluster, p));
    p.zero = 3;
    const Estimate fsdp = estimate(inputs(m, cluster, p));
    ASSERT_GT(dp.axis(Axis::DP).bytes, 0);
    EXPECT_REL(fsdp.axis(Axis::DP).bytes / dp.axis(Axis::DP).bytes, 1.5, 1e-9);
    // Per collective, as formulas: 3 x all-gather-sized vs one all-reduce.
    EXPECT_REL(3 * ringAllGatherBytesPerRank(1.0, 8) / ringAllReduceBytesPerRank(1.0, 8), 1.5,
               1e-12);
}

TEST(Lesson001_ZeRO, Stage1And2CommunicationSameAsDP) {
    // Lesson table: "Stage 1 ... Comm. Overhead Same as DP; Stage 2 ... Same as DP". A
    // reduce-scatter of the gradients plus an all-gather of the updated weights moves what one
    // all-reduce moves (same dtype).
    const ModelSpec m = bareModel(7e9);
    const ClusterSpec cluster = makeCluster(h100(), 8, 1);
    ParallelConfig p = layout(8);
    p.precision = bf16NoMaster();
    const double dp = estimate(inputs(m, cluster, p)).axis(Axis::DP).bytes;
    for (int stage : {1, 2}) {
        p.zero = stage;
        EXPECT_REL(estimate(inputs(m, cluster, p)).axis(Axis::DP).bytes, dp, 1e-9) << stage;
    }
}

TEST(Lesson001_HSDP, Llama3_3072GroupsOf8) {
    // Lesson: "24,576 GPUs. Split into M=3,072 groups of K=8 (one group = one server). Intra-server
    // (FSDP): 3x model communication over NVLink ... Inter-server (DP): 1x gradient all-reduce
    // over InfiniBand ... Slower, but 3x less data."
    const ClusterSpec cluster = makeCluster(h100(), 8, 3072);
    EXPECT_EQ(cluster.worldSize(), 24576);
    const Assumptions a;
    EXPECT_FALSE(placeGroup(cluster, a, 8, 1).crossesNodes);   // a group is one server
    EXPECT_TRUE(placeGroup(cluster, a, 3072, 8).crossesNodes); // same rank across groups
    // Per rank, for a model of Psi bytes (bf16 weights and gradients alike):
    const double psi = 1.0;
    const double intra = 3 * ringAllGatherBytesPerRank(psi, 8); // AG + AG + RS inside the group
    EXPECT_REL(intra, 2.625 * psi, 1e-12);                      // the lesson's "3x", times 7/8
    // SLIP: an all-reduce of the full gradient across groups would be 2x the model per rank
    // (ring), not 1x; and in HSDP each rank all-reduces only its 1/8 shard, about psi/4.
    EXPECT_REL(ringAllReduceBytesPerRank(psi, 3072), 2 * psi, 1e-3);
    const double inter = ringAllReduceBytesPerRank(psi / 8, 3072);
    EXPECT_REL(inter, 0.25 * psi, 1e-3);
    EXPECT_REL(intra / inter, 10.5, 1e-3); // 10.5x less data across servers, not 3x
    // MISSING: the planner has no HSDP layout (a shard group smaller than the DP group); ZeRO
    // always shards over all dp x cp ranks.
}

TEST(Lesson001_Pipeline, NaiveFourStages75Percent) {
    // Lesson (interactive, 4 stages, 8 microbatches, naive schedule): "Bubble: 75.0%". Naive
    // pipelining keeps one stage busy at a time: (p-1)/p idle, whatever the microbatch count.
    for (int m : {1, 8})
        EXPECT_DOUBLE_EQ(pipelineBubbleFraction(PipelineSchedule::Naive, 4, m), 0.75) << m;
    ParallelConfig p = layout(1, 1, 4);
    p.globalBatch = 8;
    p.schedule = PipelineSchedule::Naive;
    const Estimate e = estimate(inputs(findModelPreset("llama2-7b"), makeCluster(h100(), 4, 1), p));
    EXPECT_REL(e.bubbleFraction, 0.75, 1e-9);
}

TEST(Lesson001_Pipeline, BubbleP4M8_27_3Percent) {
    // Lesson: "P=4 stages, M=8 micro-batches: bubble = 3 / (3 + 8) = 27.3%."
    EXPECT_REL(pipelineBubbleFraction(PipelineSchedule::GPipe, 4, 8), 0.273, 0.002);
    EXPECT_REL(pipelineBubbleFraction(PipelineSchedule::OneFOneB, 4, 8), 0.273, 0.002);
    // End to end: a 32-layer model on 4 stages with 8 microbatches per step.
    const ModelSpec& m = findModelPreset("llama2-7b");
    ParallelConfig p = layout(1, 1, 4);
    p.globalBatch = 8;
    const PlanInputs in = inputs(m, makeCluster(h100(), 4, 1), p);
    const Estimate e = estimate(in);
    EXPECT_TRUE(e.valid()) << describe(e.violations);
    EXPECT_REL(e.bubbleFraction, 0.273, 0.002);
    EXPECT_REL(explain(in, e, FigureId::Bubble).value, 0.273, 0.002);
}

TEST(Lesson001_Pipeline, BubbleP4M32_8_6Percent) {
    // Lesson: "P=4 stages, M=32 micro-batches: bubble = 3 / (3 + 32) = 8.6%."
    EXPECT_REL(pipelineBubbleFraction(PipelineSchedule::OneFOneB, 4, 32), 0.086, 0.005);
}

TEST(Lesson001_Pipeline, BubbleP16M8_65_2Percent) {
    // Lesson: "P=16 stages, M=8: bubble = 15 / (15 + 8) = 65.2%. Terrible!"
    EXPECT_REL(pipelineBubbleFraction(PipelineSchedule::OneFOneB, 16, 8), 0.652, 0.002);
}

TEST(Lesson001_Pipeline, BubbleP16M64_19_0Percent) {
    // Lesson: "P=16 stages, M=64: bubble = 15 / (15 + 64) = 19.0%. Manageable."
    EXPECT_REL(pipelineBubbleFraction(PipelineSchedule::OneFOneB, 16, 64), 0.190, 0.002);
}

TEST(Lesson001_Pipeline, OneFOneBReducesPeakMemory) {
    // Lesson: "1F1B ... reduces peak memory because gradients and activations for earlier
    // micro-batches are freed before later ones are computed." (4 stages, 8 microbatches.)
    EXPECT_DOUBLE_EQ(pipelineInflightMicrobatches(PipelineSchedule::GPipe, 4, 8), 8.0);
    EXPECT_DOUBLE_EQ(pipelineInflightMicrobatches(PipelineSchedule::OneFOneB, 4, 8), 4.0);
}

TEST(Lesson001_Pipeline, InterleavedShrinksBubble) {
    // Lesson: "Instead of GPU 1 getting layers 1-20, give it layers 1-5 and 21-25 ... The bubble
    // shrinks because there are more, shorter stages to pipeline." (80 layers over 4 stages: 20
    // layers per GPU, in 4 chunks of 5 when interleaved.)
    const ModelSpec& m = findModelPreset("llama3-70b");
    ASSERT_EQ(m.layers, 80);
    ParallelConfig p = layout(1, 1, 4);
    EXPECT_EQ(layersOnStage(m, p, 0), 20);
    p.schedule = PipelineSchedule::Interleaved;
    p.vpp = 4;
    EXPECT_EQ(layersOnStage(m, p, 0), 20);
    // Bubble time divides by the number of chunks per GPU: v = 2 halves it, v = 4 quarters it.
    EXPECT_DOUBLE_EQ(pipelineBubbleMicrobatches(PipelineSchedule::Interleaved, 4, 8, 2),
                     pipelineBubbleMicrobatches(PipelineSchedule::OneFOneB, 4, 8) / 2);
    EXPECT_DOUBLE_EQ(pipelineBubbleMicrobatches(PipelineSchedule::Interleaved, 4, 8, 4),
                     pipelineBubbleMicrobatches(PipelineSchedule::OneFOneB, 4, 8) / 4);
    EXPECT_LT(pipelineBubbleFraction(PipelineSchedule::Interleaved, 4, 8, 4),
              pipelineBubbleFraction(PipelineSchedule::OneFOneB, 4, 8));
}

TEST(Lesson001_Pipeline, ActivationCheckpointing_33PercentMoreCompute) {
    // Lesson: "Activation checkpointing ... trades compute (~33% more forward passes) for memory".
    // Full recompute repeats the forward (2 of 6 FLOPs per parameter per token): 8/6 = 4/3.
    const ModelSpec& m = findModelPreset("llama3-405b");
    ParallelConfig p = layout(1);
    p.recompute = Recompute::Full;
    const TokenFlops f = tokenFlops(m, p, Assumptions{});
    EXPECT_REL(f.hardware / f.model, 4.0 / 3.0, 0.01);
    const TokenFlops bare = tokenFlops(bareModel(405e9), p, Assumptions{});
    EXPECT_REL(bare.hardware / bare.model, 4.0 / 3.0, 1e-12);
}

TEST(Lesson001_TensorParallelism, Llama3_TPCommunicationPerStep) {
    // Lesson: "hidden dim = 16,384, batch x seq = 4M tokens. TP=8 ... Each all-reduce sends
    // ~16,384 x 4M x 2 bytes = 128 GB per transformer block ... With 126 blocks: 126 x 4 x 128 GB
    // = 64 TB of communication per step. At 900 GB/s NVLink: 64 TB / 900 GB/s ~= 71 seconds".
    // The 126 x 4 = 504 all-reduces (two forward, two backward per block) are right.
    const double tokens = 4.0 * 1024 * 1024;
    const double tensor = 16384 * tokens * 2; // 128 GiB = 137.4 GB
    EXPECT_REL(tensor, 128 * GiB, 1e-12);
    const int allReduces = 126 * 4;
    // SLIP 1: "128 GB" is 128 GiB; 504 x 128 GiB = 63 TiB = 69.3 TB, not 64 TB (GiB and TB mixed).
    // SLIP 2: a ring all-reduce over 8 ranks sends 2 (n-1)/n = 1.75x the tensor from every rank,
    // which the ~71 s ignores.
    EXPECT_DOUBLE_EQ(ringAllReduceBytesPerRank(tensor, 8), 1.75 * tensor);
    EXPECT_REL(allReduces * ringAllReduceBytesPerRank(tensor, 8), 121.2 * TB, 0.001);
    // At the lesson's 900 GB/s: 134.7 s per step, not ~71 s.
    EXPECT_REL(allReduces * ringAllReduceSeconds(tensor, 8, 900 * GB, 0), 134.7, 0.001);
    // At NVLink's 450 GB/s per direction (what a ring uses, and what the preset stores): 269 s.
    const ClusterSpec node = makeCluster(h100(), 8, 1);
    EXPECT_REL(allReduces * ringAllReduceSeconds(tensor, 8, node.intraBandwidth, 0), 269.4, 0.001);
}

TEST(Lesson001_TensorParallelism, Llama3_TPCommunicationThroughEstimate) {
    // The same example end to end: Llama 3 405B, TP=8 on one node, one microbatch of
    // 512 x 8192 = 4M tokens, ideal links (no efficiency loss, no latency).
    const ModelSpec& m = findModelPreset("llama3-405b");
    ClusterSpec cluster = makeCluster(h100(), 8, 1);
    cluster.intraLatency = 0;
    ParallelConfig p = layout(1, 8);
    p.microBatch = 512;
    p.globalBatch = 512;
    PlanInputs in = inputs(m, cluster, p);
    in.assume.commEfficiency = 1.0;
    ASSERT_EQ(localTokens(m, p), 4.0 * 1024 * 1024);
    const Estimate e = estimate(in);
    EXPECT_TRUE(e.valid());
    const AxisComm& tp = e.axis(Axis::TP);
    EXPECT_EQ(tp.collectives, 504);
    EXPECT_REL(tp.bytes, 121.2 * TB, 0.001);
    EXPECT_REL(tp.seconds, 269.4, 0.001);
}

TEST(Lesson001_StrategyExplorer, Small7BOn8Gpus_PureDP84GB) {
    // Lesson: "Small model (7B), 8 GPUs: Pure DP works. Each GPU stores ~84 GB - slightly over
    // 80 GB limit. Turn on FSDP to fix it." (84 GB = 7e9 x 12 B, the lesson's convention.)
    const ModelSpec m = bareModel(7e9);
    const ClusterSpec cluster = makeCluster(h100(), 8, 1);
    ParallelConfig p = layout(8);
    p.precision = bf16NoMaster();
    const Estimate dp = estimate(inputs(m, cluster, p));
    EXPECT_REL(modelState(dp.memory), 84 * GB, 1e-9);
    EXPECT_FALSE(dp.fits);
    p.zero = 3;
    const Estimate fsdp = estimate(inputs(m, cluster, p));
    EXPECT_REL(modelState(fsdp.memory), 10.5 * GB, 1e-9);
    EXPECT_TRUE(fsdp.fits);
}

TEST(Lesson001_StrategyExplorer, Large405BOn128Gpus_TP8_PP4_FSDP) {
    // Lesson: "Large model (405B), 128 GPUs: Need TP=8 + PP=4 + FSDP. Watch how each dimension
    // reduces memory but adds communication." TP=8 x PP=4 on 128 GPUs leaves dp = 4.
    const ModelSpec& m = findModelPreset("llama3-405b");
    const ClusterSpec cluster = makeCluster(h100(), 8, 16);
    ParallelConfig p = layout(1, 8, 4);
    p.globalBatch = 16;
    EXPECT_EQ(suggestedDp(validate(m, cluster, p)), 4);
    p.dp = 4;
    p.zero = 3;
    EXPECT_TRUE(validate(m, cluster, p).empty()) << describe(validate(m, cluster, p));
    // Model state per GPU: fits under 80 GB only with FSDP on top of TP and PP.
    const MemoryBreakdown fsdp = memoryForStage(inputs(m, cluster, p), 0);
    EXPECT_LT(modelState(fsdp), h100().memoryBytes);
    ParallelConfig noFsdp = p;
    noFsdp.zero = 0;
    const MemoryBreakdown tpPp = memoryForStage(inputs(m, cluster, noFsdp), 0);
    EXPECT_GT(modelState(tpPp), h100().memoryBytes);
    // Each dimension reduces the weights a GPU holds.
    const MemoryBreakdown tpOnly = memoryForStage(inputs(m, cluster, layout(16, 8)), 0);
    const MemoryBreakdown none = memoryForStage(inputs(m, cluster, layout(128)), 0);
    EXPECT_LT(fsdp.parameters, tpPp.parameters);
    EXPECT_LT(tpPp.parameters, tpOnly.parameters);
    EXPECT_LT(tpOnly.parameters, none.parameters);
}

TEST(Lesson001_StrategyExplorer, Extreme405BOn8Gpus_DoesNotFit) {
    // Lesson: "Extreme: 405B on 8 GPUs: Even with TP=8 and FSDP, memory is crushing."
    // With TP=8 on 8 GPUs the DP group is 1, so FSDP has nothing to shard over.
    const ModelSpec& m = findModelPreset("llama3-405b");
    ParallelConfig p = layout(1, 8);
    p.zero = 3;
    const Estimate e = estimate(inputs(m, makeCluster(h100(), 8, 1), p));
    EXPECT_TRUE(e.valid());
    EXPECT_FALSE(e.fits);
    EXPECT_GT(modelState(e.memory), 10 * h100().memoryBytes);
}

TEST(Lesson001_Llama3Recipe, DP192On24576Gpus) {
    // Lesson: "TP=8: Within each server ... PP=16: Across 16 servers ... DP=192: 24,576 / (8x16)
    // = 192 data-parallel replicas, with FSDP".
    const ModelSpec& m = findModelPreset("llama3-405b");
    const ClusterSpec cluster = makeCluster(h100(), 8, 3072);
    ParallelConfig p = layout(1, 8, 16);
    p.globalBatch = 16;
    EXPECT_EQ(suggestedDp(validate(m, cluster, p)), 192);
    p.dp = 192;
    p.zero = 3;
    p.globalBatch = 192 * 16;
    EXPECT_TRUE(validate(m, cluster, p).empty()) << describe(validate(m, cluster, p));
    const Assumptions a;
    EXPECT_FALSE(placeAxis(cluster, p, a, Axis::TP).crossesNodes);
    EXPECT_TRUE(placeAxis(cluster, p, a, Axis::PP).crossesNodes);
}

TEST(Lesson001_Llama3Recipe, About8Of126LayersPerStage) {
    // Lesson: "PP=16: Across 16 servers. Each stage handles ~8 of the 126 transformer layers."
    // 126 / 16 = 7.875: fourteen stages hold 8 layers, two hold 7.
    const ModelSpec& m = findModelPreset("llama3-405b");
    ASSERT_EQ(m.layers, 126);
    const ParallelConfig p = layout(1, 8, 16);
    EXPECT_EQ(layersOnStage(m, p, 0), 8);
    int sum = 0, eights = 0;
    for (int s = 0; s < 16; ++s) {
        const int l = layersOnStage(m, p, s);
        EXPECT_TRUE(l == 7 || l == 8) << "stage " << s << ": " << l;
        sum += l;
        eights += l == 8;
    }
    EXPECT_EQ(sum, 126);
    EXPECT_EQ(eights, 14);
}

TEST(Lesson001_Llama3Recipe, MemoryBreakdown405B) {
    // Lesson table: "Weights ~810 GB (BF16); Gradients ~810 GB (BF16); Optimizer (m, v) ~3.24 TB
    // (FP32)".
    const MemoryBreakdown mem = bareMemory(405e9, bf16NoMaster(), layout(1));
    EXPECT_REL(mem.parameters, 810 * GB, 1e-9);
    EXPECT_REL(mem.gradients, 810 * GB, 1e-9);
    EXPECT_REL(mem.optimizer, 3.24 * TB, 1e-9);
}

// ================================================================================================
// Lesson 002: memory table for 7B, DDP, FSDP vs ZeRO, 3D for 70B, checkpointing, stragglers
// ================================================================================================

TEST(Lesson002_MemoryProblem, Table7B_14BytesPerParam_98GB) {
    // Lesson table: "Parameters (BF16) 2 14 GB; Gradients (FP32) 4 28 GB; Adam m 4 28 GB; Adam v 4
    // 28 GB; Total (mixed precision) 14 ~98 GB ... You need at least 2 [H100s] to train a 7B model
    // naively."
    const MemoryBreakdown mem = bareMemory(7e9, bf16Fp32GradsNoMaster(), layout(1));
    EXPECT_REL(mem.parameters, 14 * GB, 1e-9);
    EXPECT_REL(mem.gradients, 28 * GB, 1e-9);
    EXPECT_REL(mem.optimizer, 56 * GB, 1e-9); // m + v
    EXPECT_REL(modelState(mem), 98 * GB, 1e-9);
    EXPECT_DOUBLE_EQ(modelStateBytesPerParam(bf16Fp32GradsNoMaster(), Optimizer::AdamW, 0, 1),
                     14.0);
    EXPECT_EQ(std::ceil(modelState(mem) / h100().memoryBytes), 2.0);
}

TEST(Lesson002_MemoryProblem, TLDR_16BytesPerParam_112GB) {
    // Lesson TL;DR: "Total VRAM = params x 2 (BF16) + params x 12 (Adam states + gradients in
    // FP32) = 16 bytes/param. A 7B model needs ~112 GB before activations."
    // SLIP: 2 + 12 = 14, not 16: bf16 weights (2) + fp32 gradients and Adam m, v (4 + 4 + 4, the
    // lesson's "12"), which is also what the lesson's own table sums to (98 GB). 16 B/param (112
    // GB) is bf16 weights + bf16 grads + fp32 master + Adam m, v; with fp32 grads and a master
    // copy it is 18 B/param (126 GB).
    EXPECT_DOUBLE_EQ(modelStateBytesPerParam(bf16Fp32GradsNoMaster(), Optimizer::AdamW, 0, 1),
                     14.0);
    EXPECT_REL(modelState(bareMemory(7e9, PrecisionPolicy::bf16Mixed(false), layout(1))), 112 * GB,
               1e-9);
    EXPECT_REL(modelState(bareMemory(7e9, PrecisionPolicy::bf16Mixed(true), layout(1))), 126 * GB,
               1e-9);
}

TEST(Lesson002_MemoryProblem, Llama3_70B_BF16Weights140GB) {
    // Lesson: "You want to train Llama-3 70B. A single H100 has 80GB of VRAM. The model alone, in
    // BF16, is 140GB."
    EXPECT_REL(bareMemory(70e9, bf16NoMaster(), layout(1)).parameters, 140 * GB, 1e-9);
    // The preset (70.55e9 parameters) gives 141 GB.
    const Estimate e =
        estimate(inputs(findModelPreset("llama3-70b"), makeCluster(h100(), 1, 1), layout(1)));
    EXPECT_REL(e.memory.parameters, 140 * GB, 0.01);
    EXPECT_GT(e.memory.parameters, h100().memoryBytes);
}

TEST(Lesson002_MemoryProblem, Activations7B_Batch4Seq2048_20To40GB) {
    // Lesson: "A batch of 4 sequences of 2048 tokens through a 7B transformer adds another
    // ~20-40 GB depending on whether you checkpoint activations."
    // Without checkpointing (FlashAttention, no stored scores) the planner gives ~35 GB, within
    // the range (Korthikanti et al.'s 34 s b h L bytes gives 36.5 GB). With full checkpointing it
    // drops to a few GB, far below the range's lower end.
    ModelSpec m = findModelPreset("llama2-7b");
    m.seqLen = 2048;
    ParallelConfig p = layout(1);
    p.microBatch = 4;
    p.globalBatch = 4;
    p.recompute = Recompute::Selective;
    const MemoryBreakdown kept = memoryForStage(inputs(m, makeCluster(h100(), 1, 1), p), 0);
    EXPECT_GE(kept.activations, 20 * GB);
    EXPECT_LE(kept.activations, 40 * GB);
    EXPECT_REL(kept.activations, 34.0 * 2048 * 4 * m.hidden * m.layers, 0.10);
    p.recompute = Recompute::Full;
    const MemoryBreakdown recomputed = memoryForStage(inputs(m, makeCluster(h100(), 1, 1), p), 0);
    EXPECT_LT(recomputed.activations + recomputed.recomputeLayer, 10 * GB);
}

TEST(Lesson002_DDP, AllReduce7BOn8Gpus_0_98sNot9_8s) {
    // Lesson: "For a 7B model (14GB BF16) across 8 GPUs on 200 Gbps InfiniBand: ~= 2 x 7/8 x 14GB /
    // (25 GB/s) ~= 9.8 seconds per step".
    // SLIP: 2 x 7/8 x 14 / 25 = 0.98 s (a factor of 10).
    EXPECT_REL(ringAllReduceSeconds(14 * GB, 8, 25 * GB, 0), 0.98, 1e-9);
    // Through the planner: 8 single-GPU nodes on 25 GB/s links, ideal efficiency, no latency.
    ClusterSpec cluster = makeCluster(h100(), 1, 8, 25 * GB);
    cluster.interLatency = 0;
    ParallelConfig p = layout(8);
    p.precision = bf16NoMaster();
    PlanInputs in = inputs(bareModel(7e9), cluster, p);
    in.assume.commEfficiency = 1.0;
    EXPECT_REL(estimate(in).axis(Axis::DP).seconds, 0.98, 1e-9);
    // NOTE: the lesson's own table keeps FP32 gradients (28 GB); reducing those takes 1.96 s.
    in.parallel.precision = bf16Fp32GradsNoMaster();
    EXPECT_REL(estimate(in).axis(Axis::DP).seconds, 1.96, 1e-9);
}

TEST(Lesson002_Pipeline, BubbleRatio4Stages8Microbatches) {
    // Lesson: "The bubble ratio = (num_stages - 1) / num_microbatches. With 4 stages and 8
    // microbatches, bubble = 3/8 = 37.5% wasted compute." (and "GPU 0 runs layers 1-8, GPU 1 runs
    // layers 9-16": a 32-layer 7B model over 4 stages).
    // 3/8 is bubble time over useful time. As a share of the step (what is actually wasted) it is
    // 3/11 = 27.3 %; "37.5% wasted compute" overstates it.
    EXPECT_DOUBLE_EQ(pipelineBubbleMicrobatches(PipelineSchedule::OneFOneB, 4, 8) / 8, 0.375);
    EXPECT_REL(pipelineBubbleFraction(PipelineSchedule::OneFOneB, 4, 8), 3.0 / 11, 1e-12);
    const ModelSpec& m = findModelPreset("llama2-7b");
    EXPECT_EQ(layersOnStage(m, layout(1, 1, 4), 0), 8);
}

TEST(Lesson002_Pipeline, InterleavedHalvesBubble) {
    // Lesson: "Megatron-LM uses interleaved scheduling that halves the bubble at the cost of 2x
    // more all-reduce operations."
    // (The extra operations are point-to-point activation sends between chunks, not all-reduces.)
    EXPECT_DOUBLE_EQ(pipelineBubbleMicrobatches(PipelineSchedule::Interleaved, 4, 8, 2),
                     pipelineBubbleMicrobatches(PipelineSchedule::OneFOneB, 4, 8) / 2);
    const ModelSpec& m = findModelPreset("llama2-7b");
    const ClusterSpec cluster = makeCluster(h100(), 4, 1);
    ParallelConfig p = layout(1, 1, 4);
    p.globalBatch = 8;
    const Estimate plain = estimate(inputs(m, cluster, p));
    p.schedule = PipelineSchedule::Interleaved;
    p.vpp = 2;
    const Estimate interleaved = estimate(inputs(m, cluster, p));
    EXPECT_TRUE(interleaved.valid());
    EXPECT_REL(interleaved.bubbleTime / plain.bubbleTime, 0.5, 1e-9);
    EXPECT_REL(interleaved.axis(Axis::PP).bytes / plain.axis(Axis::PP).bytes, 2.0, 1e-9);
}

TEST(Lesson002_TensorParallelism, H100NVLinkIs900Not600) {
    // Lesson: "NVLink-speed interconnect (600 GB/s bidirectional on H100 NVLink 4.0)" and
    // "TP (within a node): NVLink, ~600 GB/s".
    // SLIP: H100 SXM's NVLink 4 is 900 GB/s bidirectional (450 each way); 600 GB/s is A100's
    // NVLink 3.
    EXPECT_REL(2 * h100().nvlinkBandwidth, 900 * GB, 1e-9);
    EXPECT_REL(2 * findGpuPreset("a100-80gb").nvlinkBandwidth, 600 * GB, 1e-9);
    // Also "PP ... InfiniBand, ~200 GB/s": 200 Gb/s is 25 GB/s, the figure the lesson itself uses
    // for the DDP and DP-sync examples.
}

TEST(Lesson002_ZeRO, Figure2_StagesBytesPerParam) {
    // Lesson figure: "DDP (Baseline) 16 bytes/param per GPU: Params 2, Gradients 4, Adam m 4,
    // Adam v 4, Activations ~2; ZeRO-1: 2, 4, 8/N; ZeRO-2: 2, 4/N, 8/N; ZeRO-3: 2/N, 4/N, 8/N".
    const PrecisionPolicy prec = bf16Fp32GradsNoMaster();
    const int n = 8;
    EXPECT_DOUBLE_EQ(modelStateBytesPerParam(prec, Optimizer::AdamW, 0, n), 14.0); // + ~2 act.
    EXPECT_DOUBLE_EQ(modelStateBytesPerParam(prec, Optimizer::AdamW, 1, n), 2 + 4 + 8.0 / n);
    EXPECT_DOUBLE_EQ(modelStateBytesPerParam(prec, Optimizer::AdamW, 2, n), 2 + 4.0 / n + 8.0 / n);
    EXPECT_DOUBLE_EQ(modelStateBytesPerParam(prec, Optimizer::AdamW, 3, n),
                     2.0 / n + 4.0 / n + 8.0 / n);
}

TEST(Lesson002_ZeRO, ZeRO3_7BOn8Gpus_16_25GB) {
    // Lesson: "Without sharding (DDP): ~112 GB per GPU -> doesn't fit on H100. With ZeRO-3 (8
    // GPUs): Parameters: 14GB / 8 = 1.75 GB; Gradients: 28GB / 8 = 3.5 GB; Adam states: 56GB / 8 =
    // 7 GB; Activations (batch 4, seq 2048): ~4 GB; Total: ~16.25 GB per GPU - fits comfortably on
    // 40GB A100".
    ParallelConfig p = layout(8);
    p.zero = 3;
    const MemoryBreakdown mem = bareMemory(7e9, bf16Fp32GradsNoMaster(), p);
    EXPECT_REL(mem.parameters, 1.75 * GB, 1e-9);
    EXPECT_REL(mem.gradients, 3.5 * GB, 1e-9);
    EXPECT_REL(mem.optimizer, 7 * GB, 1e-9);
    const double activations = 4 * GB; // given by the lesson
    EXPECT_REL(modelState(mem) + activations, 16.25 * GB, 1e-9);
    EXPECT_LT(modelState(mem) + activations, findGpuPreset("a100-40gb").memoryBytes);
    // NOTE: with the same dtypes, unsharded DDP is 98 GB (14 B/param), not 112 GB (the 16 B rule);
    // either way it does not fit an H100.
    const MemoryBreakdown ddp = bareMemory(7e9, bf16Fp32GradsNoMaster(), layout(8));
    EXPECT_REL(modelState(ddp), 98 * GB, 1e-9);
    EXPECT_GT(modelState(ddp), h100().memoryBytes);
}

TEST(Lesson002_ZeRO, ZeRO3CommunicationIs1_5xDDP) {
    // Lesson: "Communication volume is ~1.5x DDP." (Right, with weights and gradients of the same
    // dtype. The lesson's "3 all-gathers and 1 reduce-scatter per layer during forward, and the
    // same during backward" is not: it is one all-gather forward, one all-gather and one
    // reduce-scatter backward, which is what gives 1.5x.)
    const ModelSpec m = bareModel(7e9);
    const ClusterSpec cluster = makeCluster(h100(), 8, 1);
    ParallelConfig p = layout(8);
    p.precision = bf16NoMaster();
    const double ddp = estimate(inputs(m, cluster, p)).axis(Axis::DP).bytes;
    p.zero = 3;
    const double zero3 = estimate(inputs(m, cluster, p)).axis(Axis::DP).bytes;
    EXPECT_REL(zero3 / ddp, 1.5, 1e-9);
}

TEST(Lesson002_3DParallelism, TP4xPP8xDP8And_PP4xTP8xDP8_256Gpus) {
    // Lesson: "use 4-way TP ... x 8-way PP ... x 8-way DP = 256 GPUs" (Act VI) and "A single
    // data-parallel replica of a 70B model using 32 GPUs with 4-way pipeline parallelism and
    // 8-way tensor parallelism. 8 such replicas = 256 GPUs total" with "Pipeline Stage 0 (Layers
    // 1-20)" (Figure 3). Both layouts are valid for Llama 3 70B on 32 nodes of 8.
    const ModelSpec& m = findModelPreset("llama3-70b");
    const ClusterSpec cluster = makeCluster(h100(), 8, 32);
    ParallelConfig act6 = layout(8, 4, 8);
    act6.globalBatch = 8 * 16; // 16 microbatches
    EXPECT_EQ(act6.worldSize(), 256);
    EXPECT_EQ(act6.microbatches(), 16);
    EXPECT_TRUE(validate(m, cluster, act6).empty()) << describe(validate(m, cluster, act6));
    EXPECT_EQ(layersOnStage(m, act6, 0), 10);
    ParallelConfig fig3 = layout(8, 8, 4);
    fig3.globalBatch = 8 * 16;
    EXPECT_EQ(fig3.worldSize(), 256);
    EXPECT_TRUE(validate(m, cluster, fig3).empty()) << describe(validate(m, cluster, fig3));
    EXPECT_EQ(layersOnStage(m, fig3, 0), 20);
}

TEST(Lesson002_GradientCheckpointing, Activations70B_Batch4Seq2048) {
    // Lesson: "For a 70B model at batch size 4, sequence length 2048, this is ~30-50 GB of
    // activations - often more than the model weights themselves."
    // SLIP: Llama 3 70B stores about 180 GB of activations for that batch even with
    // FlashAttention (no stored scores): Korthikanti et al.'s 34 s b h L bytes gives 182 GB. And
    // 30-50 GB would not be "more than the weights" (140 GB); ~180 GB is.
    ModelSpec m = findModelPreset("llama3-70b");
    m.seqLen = 2048;
    ParallelConfig p = layout(1);
    p.microBatch = 4;
    p.globalBatch = 4;
    p.recompute = Recompute::Selective;
    const MemoryBreakdown mem = memoryForStage(inputs(m, makeCluster(h100(), 1, 1), p), 0);
    EXPECT_REL(mem.activations, 34.0 * 2048 * 4 * m.hidden * m.layers, 0.10);
    EXPECT_GT(mem.activations, 50 * GB);
    EXPECT_GT(mem.activations, mem.parameters);
}

TEST(Lesson002_GradientCheckpointing, ComputeOverhead33Percent) {
    // Lesson: "The cost: one extra forward pass per checkpoint segment (~33% compute overhead)."
    ModelSpec m = findModelPreset("llama3-70b");
    ParallelConfig p = layout(1);
    p.recompute = Recompute::Full;
    const TokenFlops f = tokenFlops(m, p, Assumptions{});
    // 32.9 %: the LM head's forward is not recomputed, so a little under 1/3.
    EXPECT_NEAR(f.hardware / f.model - 1.0, 0.33, 0.005);
    EXPECT_REL(f.hardware / f.model, 4.0 / 3.0, 0.01);
}

TEST(Lesson002_GradientCheckpointing, ActivationReductionAtLeast8x) {
    // Lesson: "The benefit: ~8x reduction in activation memory." With per-layer full recompute
    // only each layer's input is kept: for the 70B, batch 4, seq 2048 example the planner's
    // per-layer reduction is ~17x against FlashAttention storage, so "~8x" is conservative.
    ModelSpec m = findModelPreset("llama3-70b");
    m.seqLen = 2048;
    ParallelConfig p = layout(1);
    p.microBatch = 4;
    p.recompute = Recompute::Selective;
    const double kept = activationBytesPerLayer(m, p);
    p.recompute = Recompute::Full;
    const double checkpointed = activationBytesPerLayer(m, p);
    EXPECT_GE(kept / checkpointed, 8.0);
}

TEST(Lesson002_MixedPrecision, AdamStateIs12BytesPerParam) {
    // Lesson: "This is why Adam optimizer states cost 12 bytes/param, not 4." (fp32 master,
    // momentum and variance.)
    const PrecisionPolicy p = PrecisionPolicy::bf16Mixed();
    EXPECT_DOUBLE_EQ(p.masterBytes() + optimizerStateBytes(Optimizer::AdamW), 12.0);
}

TEST(Lesson002_FaultTolerance, FailureEvery10HoursIsEvery10Days) {
    // Lesson: "A 1,000-GPU run with 0.01% daily failure rate per GPU means you expect a failure
    // every 10 hours."
    // SLIP: 1000 x 0.0001 = 0.1 failures a day: one every 240 hours (10 days).
    const double gpuMtbfHours = 24.0 / 0.0001;
    EXPECT_REL(jobMtbfSeconds(gpuMtbfHours, 1000) / kSecondsPerHour, 240.0, 1e-9);
}

TEST(Lesson002_FaultTolerance, SyncCheckpointEveryHourFor2Weeks) {
    // Lesson: "Saving a 70B model (140GB BF16) to a single file takes 10-20 minutes. The cluster
    // idles. Over a 2-week run with checkpointing every hour, this wastes ~5 GPU-hours per GPU in
    // idle time."
    // SLIP: 336 hourly checkpoints x 10-20 min = 56-112 hours idle per GPU, not ~5. Through
    // trainingTimeFraction with no failures: 2 weeks of training at 1 h / (1 h + write) of wall.
    const double work = 14 * kSecondsPerDay;
    const double never = std::numeric_limits<double>::infinity();
    for (const auto& [writeMinutes, idleHours] : {std::pair{10.0, 56.0}, std::pair{20.0, 112.0}}) {
        const double fraction = trainingTimeFraction(3600, writeMinutes * 60, never, 0);
        const double idle = work / fraction - work;
        EXPECT_REL(idle / kSecondsPerHour, idleHours, 1e-9) << writeMinutes << " min";
    }
}

TEST(Lesson002_FaultTolerance, AsyncCheckpoint140GBOver64Ranks) {
    // Lesson: "A 140GB checkpoint across 64 GPUs becomes 64 concurrent 2.2GB writes."
    // Each rank writes the weight shard it owns: 140 GB / 64 = 2.19 GB (ZeRO-3 over 64).
    ParallelConfig p = layout(64);
    p.zero = 3;
    EXPECT_REL(bareMemory(70e9, bf16NoMaster(), p).parameters, 2.19 * GB, 0.002);
}

TEST(Lesson002_Stragglers, OneSlowGpu_ThroughputLoss28_6Percent) {
    // Lesson: "backward (100ms) ... GPU 2 backward (140ms) ... Every step is 140ms, not 100ms.
    // 40% throughput lost to one slow GPU".
    // SLIP: the step is 40 % longer; throughput falls to 100/140, a loss of 1 - 100/140 = 28.6 %.
    // MISSING FORMULA: a synchronous-step straggler model (step = max over ranks; throughput
    // loss = 1 - fast/slow); nothing in formulas.h or estimate.h covers it, so this is plain
    // arithmetic on the lesson's inputs.
    const double fast = 0.100, slow = 0.140;
    EXPECT_REL(slow / fast - 1, 0.40, 1e-9);
    EXPECT_REL(1 - fast / slow, 0.286, 0.002);
}

TEST(Lesson002_Interview70B, ZeRO3On256Gpus_0_55GB) {
    // Lesson: "With ZeRO-3 across 256 GPUs: 140GB / 256 ~= 0.55 GB parameters per GPU".
    ParallelConfig p = layout(256);
    p.zero = 3;
    EXPECT_REL(bareMemory(70e9, bf16NoMaster(), p).parameters, 0.547 * GB, 0.002);
}

TEST(Lesson002_Interview70B, PP8With16Microbatches_44Percent) {
    // Lesson: "PP=8 keeps pipeline bubble low with 16 microbatches (bubble = 7/16 = 44%,
    // acceptable)."
    // 7/16 = 43.75 % is bubble time over useful time; as a share of the step it is 7/23 = 30.4 %.
    EXPECT_DOUBLE_EQ(pipelineBubbleMicrobatches(PipelineSchedule::OneFOneB, 8, 16) / 16, 0.4375);
    EXPECT_REL(pipelineBubbleFraction(PipelineSchedule::OneFOneB, 8, 16), 0.304, 0.002);
}

TEST(Lesson002_Interview70B, TPAllReduceIsNot200ns) {
    // Lesson: "TP all-reduce: every transformer layer (~200 ns on NVLink vs 100 ms of compute -
    // effectively free)".
    // SLIP: a ring all-reduce over 4 ranks takes 2 (n-1) = 6 link latencies (~3 us each on NVLink)
    // before any data: ~18 us even for an empty message. For the lesson's own "~20 MB per layer
    // activation" it is ~85 us: hundreds of times 200 ns (still small against 100 ms).
    const ClusterSpec node = makeCluster(h100(), 8, 1);
    EXPECT_REL(ringAllReduceSeconds(1, 4, node.intraBandwidth, node.intraLatency), 18e-6, 0.01);
    const double t = ringAllReduceSeconds(20 * MB, 4, node.intraBandwidth, node.intraLatency);
    EXPECT_REL(t, 84.7e-6, 0.01);
    EXPECT_GT(t, 100 * 200e-9);
    EXPECT_LT(t, 0.01 * 100e-3);
}

TEST(Lesson002_Interview70B, DPGradientSync) {
    // Lesson: "DP gradient sync: every step, ~140GB/8 (ZeRO-3) = 17.5GB per replica - 700ms on
    // 200 Gbps IB".
    // The arithmetic holds (a ZeRO-3 shard of 140 GB over 8 ranks is 17.5 GB; 17.5 / 25 = 0.7 s).
    ParallelConfig shard = layout(8);
    shard.zero = 3;
    const double shardBytes = bareMemory(70e9, bf16NoMaster(), shard).parameters;
    EXPECT_REL(shardBytes, 17.5 * GB, 1e-9);
    EXPECT_REL(shardBytes / (25 * GB), 0.7, 1e-9);
    // NOTE: in the lesson's TP4 x PP8 x DP8 layout a DP rank holds 140 GB / 32 = 4.375 GB of
    // gradients and reduce-scatters them over 8 ranks: 7/8 x 4.375 GB at 25 GB/s = 0.153 s.
    const MemoryBreakdown rank = bareMemory(70e9, bf16NoMaster(), layout(8, 4, 8));
    EXPECT_REL(rank.gradients, 4.375 * GB, 1e-9);
    EXPECT_REL(ringAllGatherSeconds(rank.gradients, 8, 25 * GB, 0), 0.153, 0.002);
}

TEST(Lesson002_Interview70B, GradientAccumulation_EffectiveBatch) {
    // Lesson: "Effective batch size = per_gpu_batch x K x world_size ... reduces All-Reduce
    // frequency by Kx". (world_size here means the data-parallel size; with TP or PP they differ.)
    ParallelConfig p = layout(8);
    p.microBatch = 4;
    p.globalBatch = 256;
    EXPECT_EQ(p.microbatches(), 8); // K
    EXPECT_EQ(p.microBatch * p.microbatches() * p.dp, p.globalBatch);
    // One gradient all-reduce per optimizer step, not one per microbatch.
    PlanInputs in = inputs(bareModel(7e9), makeCluster(h100(), 8, 1), p);
    EXPECT_EQ(estimate(in).axis(Axis::DP).collectives, 1);
}

// ================================================================================================
// Lesson 003: one-page summary of DP, TP, PP, FSDP/ZeRO, 3D parallelism
// ================================================================================================

TEST(Lesson003_Summary, SixteenNRule_7BFp32ExceedsOneGpu) {
    // Lesson: "Lesson 2's 16N rule already exceeds a single device for a 7B fp32 model".
    // fp32 weights 4 + fp32 grads 4 + Adam m, v 8 = 16 B/param: 112 GB > 80 GB.
    EXPECT_DOUBLE_EQ(modelStateBytesPerParam(PrecisionPolicy::fp32(), Optimizer::AdamW, 0, 1),
                     16.0);
    const MemoryBreakdown mem = bareMemory(7e9, PrecisionPolicy::fp32(), layout(1));
    EXPECT_REL(modelState(mem), 112 * GB, 1e-9);
    EXPECT_GT(modelState(mem), h100().memoryBytes);
}

TEST(Lesson003_Summary, TP8xPP4xDP2On64Gpus) {
    // Lesson: "64 GPUs across 8 nodes, TP=8, PP=4, DP=2".
    const ModelSpec& m = findModelPreset("llama3-70b");
    const ClusterSpec cluster = makeCluster(h100(), 8, 8);
    ParallelConfig p = layout(1, 8, 4);
    p.globalBatch = 8;
    EXPECT_EQ(suggestedDp(validate(m, cluster, p)), 2);
    p.dp = 2;
    EXPECT_EQ(p.worldSize(), 64);
    EXPECT_TRUE(validate(m, cluster, p).empty()) << describe(validate(m, cluster, p));
}

// ================================================================================================
// Lesson 004: taxonomy, 3D layout across nodes, 175B on 1024 GPUs
// ================================================================================================

TEST(Lesson004_Problem, Model70B_140GBWeights_500GBPlus) {
    // Lesson: "A 70B parameter model in fp16 weights alone is 140 GB. Add gradients, optimizer
    // states, and activations and you need 500 GB+."
    const PrecisionPolicy fp16{Precision::Fp16, Precision::Fp16, false};
    EXPECT_REL(bareMemory(70e9, fp16, layout(1)).parameters, 140 * GB, 1e-9);
    // Model state alone: 840 GB at 12 B/param, 1.12 TB at 16 B/param; both "500 GB+".
    EXPECT_GT(modelState(bareMemory(70e9, bf16NoMaster(), layout(1))), 500 * GB);
    EXPECT_REL(modelState(bareMemory(70e9, PrecisionPolicy::bf16Mixed(false), layout(1))),
               1.12 * TB, 1e-9);
}

TEST(Lesson004_Walkthrough, GPT3_175BOn1024A100_PerGpuBudget) {
    // Lesson: "TP = 8, PP = 16, DP = 1024 / (8 * 16) = 8. Parameter memory: 175e9 * 2 bytes /
    // (TP * PP) = 350 GB / 128 = 2.7 GB; Gradient: 2.7 GB; Optimizer (Adam, fp32): 175e9 * 12 /
    // 128 = 16.4 GB; Activations (per pipeline stage): ~4 GB; All-gather buffers: ~2 GB; TOTAL:
    // ~28 GB. Fits in 80 GB".
    const MemoryBreakdown mem =
        bareMemory(175e9, PrecisionPolicy::bf16Mixed(false), layout(8, 8, 16));
    EXPECT_REL(mem.parameters, 2.73 * GB, 0.002);
    EXPECT_REL(mem.gradients, 2.73 * GB, 0.002);
    EXPECT_REL(mem.optimizer, 16.4 * GB, 0.002);
    const double activations = 4 * GB, buffers = 2 * GB; // given by the lesson
    const double total = modelState(mem) + activations + buffers;
    EXPECT_REL(total, 28 * GB, 0.01); // 27.9 GB
    EXPECT_LT(total, findGpuPreset("a100-80gb").memoryBytes);
    // NOTE: 350 GB / 128 is the average rank. With GPT-3's real layout stage 0 also holds the
    // embedding table (2.88 GB of weights), and "~4 GB" of activations for a per-GPU batch of 4
    // under 1F1B (16 microbatches in flight on stage 0) needs full recompute; both are inputs the
    // lesson gives, not arithmetic it derives.
    // The world-size rule gives the same dp for 128 nodes of 8 GPUs.
    ParallelConfig p = layout(1, 8, 16);
    p.globalBatch = 32;
    EXPECT_EQ(suggestedDp(validate(findModelPreset("gpt3-175b"),
                                   makeCluster(findGpuPreset("a100-80gb"), 8, 128), p)),
              8);
}

TEST(Lesson004_Walkthrough, EffectiveBatch32_With8xAccumulation256) {
    // Lesson: "Effective batch size: per-GPU batch * DP = 4 * 8 = 32 (small). With gradient
    // accumulation 8x: effective 256."
    ParallelConfig p = layout(8, 8, 16);
    p.microBatch = 4;
    p.globalBatch = 32;
    EXPECT_EQ(p.microbatches(), 1);
    p.globalBatch = 256;
    EXPECT_EQ(p.microbatches(), 8);
    EXPECT_TRUE(
        validate(findModelPreset("gpt3-175b"), makeCluster(findGpuPreset("a100-80gb"), 8, 128), p)
            .empty());
}

TEST(Lesson004_Taxonomy, TP8xPP8xDP16Is1024) {
    // Lesson: "For a frontier model on 1024 GPUs, you might have TP=8 (within node), PP=8 (across
    // 8 nodes), DP=16 (across 16 such groups). 8 * 8 * 16 = 1024."
    const ModelSpec& m = findModelPreset("gpt3-175b");
    const ClusterSpec cluster = makeCluster(findGpuPreset("a100-80gb"), 8, 128);
    ParallelConfig p = layout(1, 8, 8);
    p.globalBatch = 16;
    EXPECT_EQ(suggestedDp(validate(m, cluster, p)), 16);
    p.dp = 16;
    EXPECT_EQ(p.worldSize(), 1024);
    EXPECT_TRUE(validate(m, cluster, p).empty()) << describe(validate(m, cluster, p));
}

TEST(Lesson004_Taxonomy, TPWithinNodePPAndDPAcrossNodes) {
    // Lesson: "Tensor parallel uses fast interconnect (NVLink) within a node. Pipeline parallel
    // passes activations across slower interconnect (InfiniBand). Data parallel synchronizes
    // gradients via all-reduce; can be cross-node." (175B, TP8 PP16 DP8 on 128 nodes of 8.)
    const ClusterSpec cluster = makeCluster(findGpuPreset("a100-80gb"), 8, 128);
    const ParallelConfig p = layout(8, 8, 16);
    const Assumptions a;
    EXPECT_FALSE(placeAxis(cluster, p, a, Axis::TP).crossesNodes);
    EXPECT_TRUE(placeAxis(cluster, p, a, Axis::PP).crossesNodes);
    EXPECT_TRUE(placeAxis(cluster, p, a, Axis::DP).crossesNodes);
    EXPECT_GT(placeAxis(cluster, p, a, Axis::TP).bandwidth,
              placeAxis(cluster, p, a, Axis::PP).bandwidth);
    // "TP all-reduce: ... NVLink (~300 GB/s)": A100 NVLink per direction.
    EXPECT_REL(cluster.intraBandwidth, 300 * GB, 1e-9);
}

TEST(Lesson004_Taxonomy, ZeROSavingsUpToNFold) {
    // Lesson: "Sharded data parallel (ZeRO / FSDP) ... Memory savings up to N-fold."
    const PrecisionPolicy prec = PrecisionPolicy::bf16Mixed();
    for (int n : {8, 64, 1024})
        EXPECT_REL(modelStateBytesPerParam(prec, Optimizer::AdamW, 0, n) /
                       modelStateBytesPerParam(prec, Optimizer::AdamW, 3, n),
                   n, 1e-12)
            << n;
}

} // namespace
} // namespace shardscope
