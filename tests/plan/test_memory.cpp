// Memory per GPU: activations against Korthikanti et al. 2022 Table 2, ZeRO stages, offload,
// pipeline in-flight microbatches and the most loaded stage.
#include "plan/formulas.h"
#include "plan/layout.h"
#include "plan_test_support.h"

#include <gtest/gtest.h>

namespace shardscope {
namespace {

using test::gptStyle;

ParallelConfig korthikanti(int tp, bool sp, Recompute rc) {
    ParallelConfig p;
    p.tp = tp;
    p.sequenceParallel = sp;
    p.recompute = rc;
    p.microBatch = 1;
    p.globalBatch = 1;
    p.flashAttention = false; // the paper materialises attention scores
    return p;
}

// Table 2 of Korthikanti et al., per layer, 16-bit activations (s, b, h, a, t):
//   no parallelism:          sbh (34 + 5as/h)
//   TP:                      sbh (10 + 24/t + 5as/(ht))
//   TP + SP:                 sbh/t (34 + 5as/h)
//   TP + selective:          sbh (10 + 24/t)
//   TP + SP + selective:     sbh 34/t
//   full recompute:          2 sbh (no SP)
TEST(ActivationMemory, MatchesKorthikantiTable2) {
    const ModelSpec m = gptStyle(96, 12288, 96, 2048); // GPT-3 175B shapes
    const double s = 2048, b = 1, h = 12288, a = 96, t = 8;
    const double sbh = s * b * h;
    EXPECT_DOUBLE_EQ(activationBytesPerLayer(m, korthikanti(1, false, Recompute::None)),
                     sbh * (34 + 5 * a * s / h));
    EXPECT_DOUBLE_EQ(activationBytesPerLayer(m, korthikanti(8, false, Recompute::None)),
                     sbh * (10 + 24 / t + 5 * a * s / (h * t)));
    EXPECT_DOUBLE_EQ(activationBytesPerLayer(m, korthikanti(8, true, Recompute::None)),
                     sbh / t * (34 + 5 * a * s / h));
    EXPECT_DOUBLE_EQ(activationBytesPerLayer(m, korthikanti(8, false, Recompute::Selective)),
                     sbh * (10 + 24 / t));
    EXPECT_DOUBLE_EQ(activationBytesPerLayer(m, korthikanti(8, true, Recompute::Selective)),
                     sbh * 34 / t);
    EXPECT_DOUBLE_EQ(activationBytesPerLayer(m, korthikanti(8, false, Recompute::Full)), 2 * sbh);
}

TEST(ActivationMemory, FlashAttentionStoresNoScores) {
    const ModelSpec m = gptStyle(96, 12288, 96, 2048);
    ParallelConfig flash = korthikanti(8, true, Recompute::None);
    flash.flashAttention = true;
    EXPECT_DOUBLE_EQ(activationBytesPerLayer(m, flash),
                     activationBytesPerLayer(m, korthikanti(8, true, Recompute::Selective)));
}

TEST(ActivationMemory, GqaAndSwiGluTerms) {
    // Llama 3 8B, one sequence of 8192, no TP, no dropout: 4h inputs + Q,K,V + O input + 3 f.
    const ModelSpec m = findModelPreset("llama3-8b");
    ParallelConfig p = korthikanti(1, false, Recompute::Selective);
    const double T = 8192, h = 4096, kv = 1024, f = 14336;
    EXPECT_DOUBLE_EQ(activationBytesPerLayer(m, p), 2 * T * (4 * h + (h + 2 * kv) + h + 3 * f));
}

// Transformer Engine's FP8 layers keep for the backward (TE 1.x _LayerNormLinear, _LayerNormMLP
// and _Linear): the norms' inputs, Q, K, V, attention's output and fc1's output in bf16, and the
// FP8 casts the projections computed with, one byte an element: both norms' outputs (the QKV and
// fc1 inputs), the output projection's input beside attention's own bf16 output, and the down
// projection's input (the activation's output).
TEST(ActivationMemory, Fp8LayersKeepTheirProjectionInputsInOneByte) {
    const ModelSpec m = findModelPreset("llama3-8b");
    ParallelConfig p = korthikanti(1, false, Recompute::Selective);
    p.precision = PrecisionPolicy::fp8Mixed();
    const double T = 8192, h = 4096, kv = 1024, f = 14336;
    const double bf16 = 2 * T * (2 * h + (h + 2 * kv) + h + 2 * f);
    const double fp8 = 1 * T * (2 * h + h + f);
    EXPECT_DOUBLE_EQ(activationBytesPerLayer(m, p, LayerKind::Moe, true), bf16 + fp8);
    // Off FP8 (an A100 runs the policy's GEMMs in bf16) the inputs are the bf16 ones.
    EXPECT_DOUBLE_EQ(activationBytesPerLayer(m, p, LayerKind::Moe, false),
                     2 * T * (4 * h + (h + 2 * kv) + h + 3 * f));
    // Full recompute keeps the layer's bf16 input either way.
    p.recompute = Recompute::Full;
    EXPECT_DOUBLE_EQ(activationBytesPerLayer(m, p, LayerKind::Moe, true), 2 * T * h);
}

TEST(ActivationMemory, ContextParallelDividesTokens) {
    const ModelSpec m = findModelPreset("llama3-8b");
    ParallelConfig p = korthikanti(1, false, Recompute::Selective);
    const double whole = activationBytesPerLayer(m, p);
    p.cp = 4;
    EXPECT_DOUBLE_EQ(activationBytesPerLayer(m, p), whole / 4);
}

TEST(PipelineMemory, InflightMicrobatchesPerSchedule) {
    EXPECT_EQ(pipelineInflightMicrobatches(PipelineSchedule::GPipe, 4, 16), 16);
    EXPECT_EQ(pipelineInflightMicrobatches(PipelineSchedule::OneFOneB, 4, 16), 4);
    EXPECT_EQ(pipelineInflightMicrobatches(PipelineSchedule::OneFOneB, 8, 2), 2);
    // Korthikanti et al. Section 4.2.3: interleaving multiplies by 1 + (p-1)/(p v).
    EXPECT_DOUBLE_EQ(pipelineInflightMicrobatches(PipelineSchedule::Interleaved, 4, 16, 2),
                     4 * (1 + 3.0 / 8));
}

TEST(PipelineMemory, FirstStageHoldsPMicrobatchesUnder1F1B) {
    ParallelConfig p = test::layout(1, 1, 4, 16);
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 4, 1, p);
    const MemoryBreakdown first = memoryForStage(in, 0);
    const MemoryBreakdown last = memoryForStage(in, 3);
    EXPECT_EQ(first.inflightMicrobatches, 4);
    EXPECT_EQ(last.inflightMicrobatches, 1);
    EXPECT_EQ(first.layersOnRank, 8);
    EXPECT_NEAR(first.activations, 8 * 4 * first.activationsPerLayer, first.activations * 0.01);
    in.parallel.schedule = PipelineSchedule::GPipe;
    EXPECT_EQ(memoryForStage(in, 0).inflightMicrobatches, 16);
}

TEST(ModelStateMemory, ZeroStagesShardWhatTheyShould) {
    // bf16 weights, fp32 grads, fp32 master + Adam: 2 + 4 + 12 bytes before sharding.
    const PrecisionPolicy mixed = PrecisionPolicy::bf16Mixed();
    EXPECT_DOUBLE_EQ(modelStateBytesPerParam(mixed, Optimizer::AdamW, 0, 8), 18);
    EXPECT_DOUBLE_EQ(modelStateBytesPerParam(mixed, Optimizer::AdamW, 1, 8), 2 + 4 + 12.0 / 8);
    EXPECT_DOUBLE_EQ(modelStateBytesPerParam(mixed, Optimizer::AdamW, 2, 8), 2 + 16.0 / 8);
    EXPECT_DOUBLE_EQ(modelStateBytesPerParam(mixed, Optimizer::AdamW, 3, 8), 18.0 / 8);
    EXPECT_DOUBLE_EQ(modelStateBytesPerParam(PrecisionPolicy::fp32(), Optimizer::AdamW, 0, 1), 16);
    EXPECT_DOUBLE_EQ(modelStateBytesPerParam(mixed, Optimizer::SgdMomentum, 0, 1), 2 + 4 + 8);
}

// PyTorch autocast over fp32 weights: 4 + 4 + 8 bytes a parameter of model state with Adam (the
// fp32 weights are the master), and each GEMM's bf16 copy of its weight, which autograd keeps
// for the backward: every layer's and the head's without recompute, one layer's and the head's
// while a fully recomputed layer reruns. Counted from the model's shapes, whole under ZeRO-3.
TEST(ModelStateMemory, AutocastKeepsBf16CopiesOfTheWeightsForTheBackward) {
    ParallelConfig p = test::layout(8, 1, 1, 64, 3);
    p.recompute = Recompute::None;
    p.precision = precisionPolicyFromString("amp");
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 1, p);
    const ParamCount c = countParameters(in.model);
    const double gemm = c.attention + c.mlp, head = double(in.model.vocab) * in.model.hidden;
    const MemoryBreakdown kept = memoryForStage(in, 0);
    EXPECT_NEAR(kept.parameters + kept.gradients + kept.optimizer, 16 * c.total / 8,
                1e-9 * c.total);
    EXPECT_NEAR(kept.autocastWeightCopies, 2 * (gemm + head), 1e-9 * gemm);

    in.parallel.recompute = Recompute::Full;
    EXPECT_NEAR(memoryForStage(in, 0).autocastWeightCopies, 2 * (gemm / in.model.layers + head),
                1e-9 * gemm);
    in.parallel.precision = PrecisionPolicy::bf16Mixed();
    EXPECT_EQ(memoryForStage(in, 0).autocastWeightCopies, 0);
}

// FP8 weights replace the bf16 weights and Transformer Engine's FP8 copies of them: a rank holds
// 1 B a parameter of its layers where it held 2 + 1; the embedding (and head) stay bf16. On a GPU
// without FP8 the policy trains in bf16 and holds what the plain FP8 policy does there.
TEST(ModelStateMemory, Fp8WeightsHoldOneByteAParameterAndNoCopies) {
    ParallelConfig p = test::layout(2, 4, 8, 64, 1);
    p.sequenceParallel = true;
    p.precision = PrecisionPolicy::fp8Mixed();
    PlanInputs in = test::inputs("llama3-70b", "h100-sxm", 8, 8, p);
    const MemoryBreakdown copies = memoryForStage(in, 0);
    EXPECT_DOUBLE_EQ(copies.parameters, 2 * copies.paramsOnRank);
    EXPECT_DOUBLE_EQ(copies.fp8WeightCache, copies.paramsOnRank);

    in.parallel.precision = precisionPolicyFromString("fp8-params");
    const MemoryBreakdown fp8 = memoryForStage(in, 0);
    // Stage 0 of 8 holds 10 layers and the embedding's quarter (tp 4), in bf16.
    const double embedding = countParameters(in.model).embeddings / 4;
    EXPECT_DOUBLE_EQ(fp8.parameters, (fp8.paramsOnRank - embedding) * 1 + embedding * 2);
    EXPECT_EQ(fp8.fp8WeightCache, 0);
    EXPECT_DOUBLE_EQ(fp8.gradients, copies.gradients);
    EXPECT_DOUBLE_EQ(fp8.optimizer, copies.optimizer);
    EXPECT_DOUBLE_EQ(fp8.activations, copies.activations);
    EXPECT_LT(fp8.total(), copies.total());

    in.cluster = makeCluster(findGpuPreset("a100-80gb"), 8, 8);
    const MemoryBreakdown onA100 = memoryForStage(in, 0);
    in.parallel.precision = PrecisionPolicy::fp8Mixed();
    EXPECT_DOUBLE_EQ(onA100.total(), memoryForStage(in, 0).total());
    EXPECT_DOUBLE_EQ(onA100.parameters, 2 * onA100.paramsOnRank);
}

// Under ZeRO-3 a rank gathers its largest module whole with its gradient (DeepSpeed's 4 x
// largest layer in 16-bit): a Llama 3 405B layer's FP8 weights take 1 B a parameter beside a
// 2 B gradient, 3/4 of the bf16 weights' 2 + 2.
TEST(ModelStateMemory, Zero3GathersFp8WeightsBesideBf16Gradients) {
    ParallelConfig p = test::layout(64, 8, 1, 64, 3);
    p.precision = PrecisionPolicy::fp8Mixed();
    PlanInputs in = test::inputs("llama3-405b", "h100-sxm", 8, 64, p);
    const double bf16Weights = memoryForStage(in, 0).zero3Gather;
    in.parallel.precision = precisionPolicyFromString("fp8-params");
    EXPECT_DOUBLE_EQ(memoryForStage(in, 0).zero3Gather, bf16Weights * 3 / 4);
}

TEST(ModelStateMemory, EstimateUsesTheSameRule) {
    ParallelConfig p = test::layout(8, 1, 1, 8, 3);
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 1, p);
    const MemoryBreakdown m = memoryForStage(in, 0);
    const double params = countParameters(in.model).total;
    EXPECT_NEAR(m.parameters + m.gradients + m.optimizer, params * 18 / 8, 1.0);
}

TEST(ModelStateMemory, OffloadMovesOptimizerToHost) {
    ParallelConfig p = test::layout(8, 1, 1, 8, 2);
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 1, p);
    const MemoryBreakdown onGpu = memoryForStage(in, 0);
    in.parallel.offloadOptimizer = true;
    const MemoryBreakdown off = memoryForStage(in, 0);
    EXPECT_EQ(off.optimizer, 0);
    EXPECT_EQ(off.gradients, 0);
    EXPECT_DOUBLE_EQ(off.cpuOffloaded, onGpu.optimizer + onGpu.gradients);
    EXPECT_LT(off.total(), onGpu.total());
}

TEST(StageMemory, TensorParallelDividesWeightsNotNorms) {
    ParallelConfig p = test::layout(1, 8, 1, 1);
    PlanInputs in = test::inputs("llama3-70b", "h100-sxm", 8, 1, p);
    const ParamCount c = countParameters(in.model);
    const MemoryBreakdown m = memoryForStage(in, 0);
    const double expected = (c.attention + c.mlp + c.embeddings + c.lmHead) / 8 +
                            in.model.layers * c.normsPerLayer + c.finalNorm;
    EXPECT_NEAR(m.paramsOnRank, expected, 1.0);
}

TEST(StageMemory, UnevenPipelineGivesFirstStageTheExtraLayer) {
    ParallelConfig p = test::layout(1, 8, 16, 16);
    PlanInputs in = test::inputs("llama3-405b", "h100-sxm", 8, 16, p);
    int total = 0;
    for (int s = 0; s < 16; ++s)
        total += memoryForStage(in, s).layersOnRank;
    EXPECT_EQ(total, 126);
    EXPECT_EQ(memoryForStage(in, 0).layersOnRank, 8);
    EXPECT_EQ(memoryForStage(in, 15).layersOnRank, 7);
}

TEST(StageMemory, LastStageHoldsLogits) {
    ParallelConfig p = test::layout(1, 1, 2, 2);
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 2, 1, p);
    EXPECT_EQ(memoryForStage(in, 0).logits, 0);
    EXPECT_DOUBLE_EQ(memoryForStage(in, 1).logits, 4.0 * 8192 * 128256);
}

TEST(Estimate, FitVerdictFollowsCapacity) {
    // Llama 3 70B cannot train on one H100; with TP8 PP4 ZeRO-1 on 64 it can.
    PlanInputs one = test::inputs("llama3-70b", "h100-sxm", 1, 1, test::layout(1, 1, 1, 1));
    EXPECT_FALSE(estimate(one).fits);
    ParallelConfig p = test::layout(2, 8, 4, 64, 1);
    p.sequenceParallel = true;
    p.recompute = Recompute::Selective;
    PlanInputs big = test::inputs("llama3-70b", "h100-sxm", 8, 8, p);
    const Estimate e = estimate(big);
    EXPECT_TRUE(e.valid());
    EXPECT_TRUE(e.fits);
    EXPECT_LT(e.memory.total(), e.capacity);
}

PlanInputs mixtralOnOneNode(int ep, int zero) {
    PlanInputs in;
    in.model = test::mixtral8x7b();
    in.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 1);
    in.parallel = test::layout(8, 1, 1, 64, zero);
    in.parallel.ep = ep;
    return in;
}

// Expert parallelism as Megatron-Core lays it out: each rank holds 1/ep of the routed experts,
// and ZeRO shards their state over the dp*cp/ep ranks holding the same experts, so a ZeRO-sharded
// category holds total/dp either way (experts/ep/(dp/ep) = experts/dp).
TEST(ExpertParallelMemory, EpSplitsTheExpertsAndZeroShardsTheirStateOverTheRest) {
    const ParamCount c = countParameters(test::mixtral8x7b());
    EXPECT_NEAR(c.total, 46.7e9, 0.005 * 46.7e9); // the published count, Mixtral's model card
    EXPECT_DOUBLE_EQ(c.routedExpertsPerLayer * 32, test::kMixtralRoutedExperts);

    for (int zero : {0, 1, 3}) {
        SCOPED_TRACE("zero " + std::to_string(zero));
        const MemoryBreakdown whole = memoryForStage(mixtralOnOneNode(1, zero), 0);
        const MemoryBreakdown split = memoryForStage(mixtralOnOneNode(8, zero), 0);
        EXPECT_DOUBLE_EQ(whole.paramsOnRank, c.total);
        EXPECT_NEAR(whole.paramsOnRank - split.paramsOnRank, test::kMixtralRoutedExperts * 7 / 8,
                    1.0);
        EXPECT_NEAR(split.expertParamsOnRank, test::kMixtralRoutedExperts / 8, 1.0);
        // Optimizer state (fp32 master + Adam's two moments, 12 bytes a parameter).
        const double optimizerWhole = zero >= 1 ? c.total * 12 / 8 : c.total * 12;
        EXPECT_NEAR(whole.optimizer, optimizerWhole, 1e-9 * optimizerWhole);
        const double optimizerSplit =
            zero >= 1 ? c.total * 12 / 8 : (c.total - test::kMixtralRoutedExperts * 7 / 8) * 12;
        EXPECT_NEAR(split.optimizer, optimizerSplit, 1e-9 * optimizerSplit);
        // bf16 weights: ZeRO-3 shards them to total/dp either way; otherwise EP saves 7/8 of the
        // experts' copies.
        const double weightsSplit =
            zero >= 3 ? c.total * 2 / 8 : (c.total - test::kMixtralRoutedExperts * 7 / 8) * 2;
        EXPECT_NEAR(split.parameters, weightsSplit, 1e-9 * weightsSplit);
    }
}

// Expert tensor parallelism apart from tp (MoE parallel folding), Mixtral 8x7B on 16 H100s with
// tp 2 and dp 8: each rank holds 1/(etp ep) of the routed experts whatever tp is, and ZeRO shards
// every parameter's state exactly once over the stage's 16 ranks, so the ranks' optimizer states
// add up to the model's 12 bytes a parameter (the tp-replicated norms, 65 K a layer, aside).
TEST(ExpertParallelMemory, ExpertTensorParallelismSplitsTheExpertsApartFromTp) {
    const ParamCount c = countParameters(test::mixtral8x7b());
    const auto memory = [](int etp, int ep) {
        PlanInputs in;
        in.model = test::mixtral8x7b();
        in.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 2);
        in.parallel = test::layout(8, 2, 1, 64, 1);
        in.parallel.sequenceParallel = true;
        in.parallel.etp = etp;
        in.parallel.ep = ep;
        EXPECT_TRUE(validate(in.model, in.cluster, in.parallel).empty());
        return memoryForStage(in, 0);
    };
    for (const auto& [etp, ep] : {std::pair{0, 1}, {1, 1}, {1, 8}, {2, 8}, {1, 2}, {2, 4}}) {
        SCOPED_TRACE("etp " + std::to_string(etp) + " ep " + std::to_string(ep));
        const MemoryBreakdown m = memory(etp, ep);
        const double held = etp == 0 ? 2 : etp;
        EXPECT_NEAR(m.expertParamsOnRank, test::kMixtralRoutedExperts / (held * ep), 1.0);
        EXPECT_NEAR(m.optimizer * 16, c.total * 12, 1e-4 * c.total * 12);
    }
    // etp 1 keeps whole experts on each tp rank: the bf16 weights grow by half the experts.
    EXPECT_NEAR(memory(1, 1).parameters - memory(0, 1).parameters,
                test::kMixtralRoutedExperts / 2 * 2, 1e3);
    // The experts' token copies: each rank gathers what its etp ranks hold (s/tp under SP).
    EXPECT_NEAR(memory(2, 4).activations - memory(1, 8).activations,
                32.0 * 4096 / 2 * 2 * 4096 * 2 * (2 - 1), 1e3);
}

// DeepSeekMoE 16B on 4 pipeline stages of 7 layers (16 H100s, tp 2, ep 2): the first stage
// holds the dense first layer, which keeps what a layer of the same model without experts keeps
// (the weights and activations of a dense model's layer, counted a second way) in place of an
// MoE layer's. The model's published 16.4 B parameters come out of the count.
TEST(DenseFirstLayersMemory, TheFirstStageHoldsADenseLayerAsADenseModelDoes) {
    PlanInputs in;
    in.model = test::deepSeekMoe16b();
    in.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 2);
    in.parallel = test::layout(2, 2, 4, 64, 1);
    in.parallel.ep = 2;
    in.parallel.sequenceParallel = true;
    const ParamCount c = countParameters(in.model);
    EXPECT_NEAR(c.total, 16.4e9, 0.005 * 16.4e9);
    const ModelSpec dense = test::withoutExperts(in.model);
    const ParamCount d = countParameters(dense);
    const ParallelConfig& p = in.parallel;

    const MemoryBreakdown first = memoryForStage(in, 0), second = memoryForStage(in, 1);
    EXPECT_EQ(first.layersOnRank, 7);
    EXPECT_EQ(first.firstDenseLayersOnRank, 1);
    EXPECT_EQ(second.firstDenseLayersOnRank, 0);
    EXPECT_DOUBLE_EQ(first.firstDenseActivationsPerLayer, activationBytesPerLayer(dense, p));
    EXPECT_DOUBLE_EQ(first.activationsPerLayer, second.activationsPerLayer);
    EXPECT_NEAR(first.activations - first.stageExtraActivations,
                (6 * first.activationsPerLayer + activationBytesPerLayer(dense, p)) *
                    first.inflightMicrobatches,
                1.0);
    // Weights: the embedding aside, stage 0 has one dense layer where stage 1 has an MoE one.
    const double embedding = c.embeddings / 2;
    EXPECT_NEAR(first.paramsOnRank - embedding - second.paramsOnRank,
                layerParamsPerTpRank(dense, d, 2) - layerParamsPerTpRank(in.model, c, 2, 2), 1.0);
    EXPECT_NEAR(first.expertParamsOnRank, 6 * c.routedExpertsPerLayer / 4, 1.0);
    EXPECT_NEAR(second.expertParamsOnRank, 7 * c.routedExpertsPerLayer / 4, 1.0);
}

// An MLA layer keeps each head's query, key (192 wide) and value (128), the output projection's
// input (128 a head) and its latents (the 512-wide key-value latent and 64 rotary key dimensions
// out of the down projection, the latent again after its norm), which tp does not split; the rest
// as any layer (bf16, no recompute, fused attention).
TEST(ActivationMemory, LatentAttentionKeepsPerHeadKeysAndValuesAndItsLatents) {
    const ModelSpec m = test::withoutExperts(test::deepSeekV2Lite(4096));
    for (const int tp : {1, 4}) {
        ParallelConfig p = korthikanti(tp, true, Recompute::None);
        p.flashAttention = true;
        const double T = 4096, h = 2048, f = 10944, t = tp;
        const double replicated = 2 * T * (4 * h + 2 * 512 + 64);
        const double split = 2 * T * (16 * 192 * 2 + 16 * 128 + 16 * 128) + 2 * T * 3 * f;
        EXPECT_DOUBLE_EQ(activationBytesPerLayer(m, p), replicated / t + split / t) << tp;
    }
}

} // namespace
} // namespace shardscope
