// Every figure carries its formula, the numbers substituted and a source.
#include "core/error.h"
#include "core/units.h"
#include "plan/compute.h"
#include "plan/explain.h"
#include "plan/formulas.h"
#include "plan_test_support.h"

#include <cstdio>
#include <gtest/gtest.h>

namespace shardscope {
namespace {

TEST(Explain, EveryFigureHasFormulaNumbersAndSource) {
    ParallelConfig p = test::layout(2, 8, 4, 512, 1);
    p.sequenceParallel = true;
    PlanInputs in = test::inputs("llama3-70b", "h100-sxm", 8, 8, p);
    in.train.trainTokens = 1e12;
    const Estimate e = estimate(in);
    for (FigureId id : allFigures()) {
        const Explanation x = explain(in, e, id);
        SCOPED_TRACE(x.key);
        EXPECT_FALSE(x.label.empty());
        EXPECT_FALSE(x.unit.empty());
        EXPECT_FALSE(x.display.empty());
        EXPECT_FALSE(x.formula.empty());
        EXPECT_FALSE(x.substituted.empty());
        EXPECT_FALSE(x.source.empty());
        EXPECT_EQ(figureFromKey(x.key), id);
    }
}

// Under expert parallelism the per-GPU figures divide the experts' part by the ranks that hold
// the same experts: Mixtral 8x7B on dp 8 x ep 8 under ZeRO-3 keeps total / 8 parameters a GPU
// either way (experts / 8 / 1 + dense / 8), and the memory explanations say how.
TEST(Explain, ExpertParallelDividesTheExpertsByTheirOwnRanks) {
    PlanInputs in;
    in.model = test::mixtral8x7b();
    in.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 1);
    in.parallel = test::layout(8, 1, 1, 8, 3);
    in.parallel.ep = 8;
    const Estimate e = estimate(in);
    ASSERT_TRUE(e.valid());
    const double total = countParameters(in.model).total;
    EXPECT_NEAR(explain(in, e, FigureId::ParamsPerGpu).value, total / 8, 1.0);
    for (FigureId id : {FigureId::MemParameters, FigureId::MemGradients, FigureId::MemOptimizer}) {
        const Explanation x = explain(in, e, id);
        SCOPED_TRACE(x.key);
        EXPECT_NE(x.substituted.find("experts' / 1"), std::string::npos) << x.substituted;
    }
    EXPECT_NE(explain(in, e, FigureId::ParamsPerGpu).substituted.find("over ep 8"),
              std::string::npos);
}

// Under FP8 the compute time says which GEMMs ran in FP8, at what efficiency, and that casts
// count; under bf16 it names no FP8 term.
TEST(Explain, Fp8ComputeTimeNamesWhatRunsInFp8) {
    ParallelConfig p = test::layout(2, 8, 4, 512, 1);
    PlanInputs in = test::inputs("llama3-70b", "h100-sxm", 8, 8, p);
    EXPECT_EQ(explain(in, estimate(in), FigureId::ComputeTime).formula.find("fp8"),
              std::string::npos);
    in.parallel.precision = PrecisionPolicy::fp8Mixed();
    in.assume.fp8GemmEfficiency = 0.6;
    const Explanation x = explain(in, estimate(in), FigureId::ComputeTime);
    EXPECT_NE(x.formula.find("projection_flops / (fp8_peak x fp8_gemm_efficiency)"),
              std::string::npos)
        << x.formula;
    EXPECT_NE(x.formula.find("fp8 cast bytes"), std::string::npos) << x.formula;
    EXPECT_NE(x.substituted.find("fp8 1.98 PFLOP/s x 0.600"), std::string::npos) << x.substituted;
}

// Under autocast over fp32 weights the compute time counts each microbatch's weight casts, and
// names the stage they were counted on: the one whose compute paces the step (the last, with
// the output head, here), which need not be the most loaded in memory (the first).
TEST(Explain, ComputeTimeCountsAutocastsWeightCastsOnTheSlowestStage) {
    ParallelConfig p = test::layout(2, 8, 4, 512, 1);
    p.precision = precisionPolicyFromString("amp");
    PlanInputs in = test::inputs("llama3-70b", "h100-sxm", 8, 8, p);
    const Estimate e = estimate(in);
    int slowest = 0;
    for (int s = 1; s < p.pp; ++s)
        if (stageCompute(in, s).seconds() > stageCompute(in, slowest).seconds())
            slowest = s;
    EXPECT_EQ(e.slowStage, slowest);
    EXPECT_NE(e.slowStage, e.worstStage); // so the test tells the two apart
    const Explanation x = explain(in, e, FigureId::ComputeTime);
    EXPECT_NE(x.formula.find("loss_bytes + weight_cast_bytes) / (HBM"), std::string::npos)
        << x.formula;
    EXPECT_NE(x.substituted.find("a microbatch on stage " + std::to_string(slowest)),
              std::string::npos)
        << x.substituted;
    in.parallel.precision = PrecisionPolicy::bf16Mixed();
    EXPECT_EQ(explain(in, estimate(in), FigureId::ComputeTime).formula.find("weight_cast"),
              std::string::npos);
}

// The activation memory's formula says when the projections keep their FP8 casts: FP8 on a GPU
// with FP8 (not on an A100, which runs the policy in bf16), and not under bf16, with its source.
TEST(Explain, ActivationMemorySaysWhenInputsAreKeptInFp8) {
    const auto activations = [](const std::string& gpu, bool fp8) {
        PlanInputs in = test::inputs("llama3-8b", gpu, 8, 1, test::layout(8, 1, 1, 64));
        in.parallel.recompute = Recompute::None;
        if (fp8)
            in.parallel.precision = PrecisionPolicy::fp8Mixed();
        return explain(in, estimate(in), FigureId::MemActivations);
    };
    const Explanation h100 = activations("h100-sxm", true);
    EXPECT_NE(h100.formula.find("1-byte FP8 casts"), std::string::npos) << h100.formula;
    EXPECT_NE(h100.source.find("Transformer Engine"), std::string::npos) << h100.source;
    EXPECT_EQ(activations("a100-80gb", true).formula.find("FP8"), std::string::npos);
    EXPECT_EQ(activations("h100-sxm", false).formula.find("FP8"), std::string::npos);
    // And the FP8 layer keeps less than the bf16 one.
    EXPECT_LT(activations("h100-sxm", true).value, activations("h100-sxm", false).value);
}

// The weights' figure says when they are FP8 and what stays bf16, and its numbers add up to it.
TEST(Explain, WeightMemoryNamesFp8WeightsWhereTheGpuRunsThem) {
    const auto weights = [](const std::string& gpu) {
        PlanInputs in = test::inputs("llama3-8b", gpu, 8, 1, test::layout(8, 1, 1, 64));
        in.parallel.precision = precisionPolicyFromString("fp8-params");
        return explain(in, estimate(in), FigureId::MemParameters);
    };
    const Explanation h100 = weights("h100-sxm");
    EXPECT_NE(h100.substituted.find("x 1.00 B +"), std::string::npos) << h100.substituted;
    EXPECT_NE(h100.substituted.find("embeddings, head and final norm bf16"), std::string::npos)
        << h100.substituted;
    EXPECT_NE(h100.source.find("fp8-param-gather"), std::string::npos) << h100.source;
    const Explanation a100 = weights("a100-80gb");
    EXPECT_NE(a100.substituted.find("x 2.00 B ="), std::string::npos) << a100.substituted;
    EXPECT_EQ(a100.source.find("fp8"), std::string::npos) << a100.source;
}

// The data-parallel figure says how many bytes a parameter its gradients and weights move.
TEST(Explain, DataParallelTrafficStatesItsBytesAParameter) {
    const auto dp = [](const std::string& precision) {
        PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 1, test::layout(8, 1, 1, 64, 1));
        in.parallel.precision = precisionPolicyFromString(precision);
        return explain(in, estimate(in), FigureId::CommDP).substituted;
    };
    EXPECT_NE(dp("bf16").find("gradients at 4.00 B a parameter, weights at 2.00 B"),
              std::string::npos)
        << dp("bf16");
    EXPECT_NE(dp("fp8-params-bf16grads")
                  .find("gradients at 2.00 B a parameter, weights at 1 B in "
                        "the layers"),
              std::string::npos)
        << dp("fp8-params-bf16grads");
}

// The compute time says which matmul ceiling scaled the GEMM efficiency: the GPU's own at the
// precision it runs (an FP8 policy on an A100 runs bf16), its bf16 one where that precision was
// not measured (FP8 on an MI300X), or none.
TEST(Explain, ComputeTimeNamesTheMatmulCeilingItUsed) {
    const auto substituted = [](const std::string& gpu, bool fp8) {
        PlanInputs in = test::inputs("llama3-8b", gpu, 8, 1, test::layout(8, 1, 1, 64));
        if (fp8)
            in.parallel.precision = PrecisionPolicy::fp8Mixed();
        return explain(in, estimate(in), FigureId::ComputeTime).substituted;
    };
    const std::string a100 = substituted("a100-80gb", true);
    EXPECT_NE(a100.find("0.750 x ceiling 0.869 / 0.869 (A100's) = 0.750"), std::string::npos)
        << a100;
    EXPECT_EQ(a100.find("no measured"), std::string::npos) << a100;
    const std::string mi300x = substituted("mi300x", true);
    char fp8Efficiency[16];
    std::snprintf(fp8Efficiency, sizeof fp8Efficiency, "%.3f", Assumptions{}.fp8GemmEfficiency);
    EXPECT_NE(mi300x.find(std::string(fp8Efficiency) +
                          " x ceiling bf16 0.514 / 0.803 (H100's bf16; its fp8 ceiling not "
                          "measured)"),
              std::string::npos)
        << mi300x;
    EXPECT_NE(substituted("l40s", false).find("no measured matmul ceiling"), std::string::npos);
}

// The numbers substituted into formulas carry the digits they have: no rounded value is written
// out with zeros that claim more (2270000000 for 2.27e9), and exact counts stay exact (8192
// final-norm weights, not 8190), under every ZeRO stage and pipeline depth.
TEST(Explain, SubstitutedNumbersCarryTheirRealPrecision) {
    for (const auto& [pp, zero] : {std::pair{4, 1}, {1, 3}, {2, 0}}) {
        ParallelConfig p = test::layout(64 / (8 * pp), 8, pp, 512, 1);
        p.zero = zero;
        const PlanInputs in = test::inputs("llama3-70b", "h100-sxm", 8, 8, p);
        const Estimate e = estimate(in);
        for (FigureId id : allFigures()) {
            const Explanation x = explain(in, e, id);
            SCOPED_TRACE(x.key + ": " + x.substituted);
            EXPECT_EQ(x.substituted.find("000000"), std::string::npos);
            EXPECT_EQ(x.display.find("000000"), std::string::npos);
        }
        const std::string total = explain(in, e, FigureId::ParamsTotal).substituted;
        EXPECT_NE(total.find("+ 8192 +"), std::string::npos) << total; // Llama 3's final norm
        const std::string perGpu = explain(in, e, FigureId::ParamsPerGpu).substituted;
        EXPECT_NE(perGpu.find(std::to_string(e.memory.layersOnRank) + " layers x"),
                  std::string::npos)
            << perGpu;
    }
}

// The figures agree with each other as their formulas say: the total is its categories' sum,
// FLOPs per step are FLOPs per token times the tokens of a step, throughput is tokens over the
// step time, and MFU is the achieved FLOP/s (per GPU, in FLOP/s) over the cluster's peak. Each
// explanation computes its own value, so an explanation that drifted from the estimate breaks one
// of these.
TEST(Explain, FiguresAgreeWithTheirOwnFormulas) {
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 1, test::layout(8, 1, 1, 64, 2));
    const Estimate e = estimate(in);
    const auto v = [&](FigureId id) { return explain(in, e, id).value; };
    const double categories = v(FigureId::MemParameters) + v(FigureId::MemGradients) +
                              v(FigureId::MemOptimizer) + v(FigureId::MemActivations) +
                              v(FigureId::MemTemporary) + v(FigureId::MemOverhead);
    EXPECT_NEAR(v(FigureId::MemTotal), categories, 1e-9 * categories);
    const double tokensPerStep = double(in.parallel.globalBatch) * in.model.seqLen;
    EXPECT_NEAR(v(FigureId::FlopsPerStep), v(FigureId::FlopsPerToken) * tokensPerStep,
                1e-9 * v(FigureId::FlopsPerStep));
    EXPECT_NEAR(v(FigureId::TokensPerSecond), tokensPerStep / v(FigureId::StepTime),
                1e-9 * v(FigureId::TokensPerSecond));
    const double peak = in.cluster.gpu.peak(in.parallel.precision.compute) * in.cluster.worldSize();
    EXPECT_NEAR(v(FigureId::Mfu), v(FigureId::TflopsPerGpu) * in.cluster.worldSize() / peak, 1e-6);
    // The substituted text shows the result it explains.
    const Explanation total = explain(in, e, FigureId::MemTotal);
    EXPECT_NE(total.substituted.find(formatBytes(total.value)), std::string::npos);
    EXPECT_NE(total.substituted.find("fits"), std::string::npos);
}

TEST(Explain, UnknownKeyListsTheKnownOnes) {
    try {
        figureFromKey("memory.everything");
        FAIL();
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("memory.activations"), std::string::npos);
    }
}

TEST(Explain, BareModelSaysWhatItOmits) {
    PlanInputs in;
    in.model.bareParams = 7e9;
    in.model.seqLen = 2048;
    in.cluster = makeCluster(findGpuPreset("a100-80gb"), 8, 1);
    in.parallel = test::layout(8, 1, 1, 8);
    const Estimate e = estimate(in);
    EXPECT_NE(explain(in, e, FigureId::MemActivations).substituted.find("not computed"),
              std::string::npos);
    EXPECT_NE(explain(in, e, FigureId::ParamsTotal).substituted.find("omits"), std::string::npos);
    EXPECT_NE(explain(in, e, FigureId::LossTraffic).substituted.find("not computed"),
              std::string::npos);
    // No figure divides by the architecture it does not have.
    for (const FigureId id : allFigures()) {
        const std::string text = explain(in, e, id).substituted;
        EXPECT_EQ(text.find("nan"), std::string::npos) << text;
        EXPECT_EQ(text.find("inf "), std::string::npos) << text;
    }
}

// The host-bound wait says what a dropless MoE layout waits for its host, and where there is no
// host roof (a dense model, token dropping) says why; reports leave it out there.
TEST(Explain, TheHostBoundWaitSaysWhereTheHostSetsThePace) {
    PlanInputs in = test::inputs("llama3-8b", "b200", 8, 1, test::layout(8, 1, 1, 512, 1));
    in.model = test::deepSeekMoe16b();
    in.parallel.ep = 8;
    const Estimate e = estimate(in);
    ASSERT_TRUE(e.valid());
    const Explanation x = explain(in, e, FigureId::HostBound);
    EXPECT_EQ(x.key, "time.host_bound");
    EXPECT_DOUBLE_EQ(x.value, e.hostWait);
    EXPECT_GT(x.value, 0);
    EXPECT_NE(x.substituted.find("27 MoE layers x"), std::string::npos) << x.substituted;
    EXPECT_NE(x.substituted.find("(host-bound)"), std::string::npos) << x.substituted;
    EXPECT_TRUE(figureApplies(e, FigureId::HostBound));
    EXPECT_NE(explain(in, e, FigureId::StepTime).substituted.find(" + " + x.display + " + "),
              std::string::npos)
        << explain(in, e, FigureId::StepTime).substituted;

    PlanInputs noHost = in;
    noHost.assume.moeLayerHostSeconds = 0;
    const Estimate unroofed = estimate(noHost);
    EXPECT_EQ(unroofed.hostMoeLayers, 0);
    EXPECT_NE(explain(noHost, unroofed, FigureId::HostBound).substituted.find("set to 0"),
              std::string::npos);

    in.parallel.expertCapacityFactor = 1.25;
    const Estimate dropping = estimate(in);
    EXPECT_NE(explain(in, dropping, FigureId::HostBound).substituted.find("token dropping"),
              std::string::npos);
    EXPECT_FALSE(figureApplies(dropping, FigureId::HostBound));
    EXPECT_TRUE(figureApplies(dropping, FigureId::Bubble));
}

TEST(Explain, PipelineBubbleFromTheShapeAlone) {
    const Explanation x = explainPipelineBubble(PipelineSchedule::OneFOneB, 4, 8, 1);
    EXPECT_DOUBLE_EQ(x.value, 3.0 / 11);
    EXPECT_EQ(x.display, "27.3 %");
    EXPECT_NE(x.substituted.find("3 / (8 + 3) = 27.3 %"), std::string::npos) << x.substituted;
    // The same formula and source as the Bubble figure of a full plan.
    PlanInputs in = test::inputs("llama3-8b", "h100-sxm", 8, 1, test::layout(2, 1, 4, 16));
    const Explanation full = explain(in, estimate(in), FigureId::Bubble);
    EXPECT_EQ(x.formula, full.formula);
    EXPECT_EQ(x.source, full.source);
    EXPECT_DOUBLE_EQ(explainPipelineBubble(PipelineSchedule::Interleaved, 4, 8, 2).value,
                     pipelineBubbleFraction(PipelineSchedule::Interleaved, 4, 8, 2));
}

} // namespace
} // namespace shardscope
