// The planner against published training runs, split into a calibration and a validation part
// (docs/validation.md shows every row).
#include "core/error.h"
#include "plan/compute.h"
#include "plan/published_runs.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <gtest/gtest.h>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

namespace shardscope {
namespace {

const std::string kRuns = std::string(SHARDSCOPE_TEST_DATA) + "/published_runs.csv";
// The model and layout columns every test row starts with.
const std::string kRunColumns =
    "name,gpu,gpus,layers,hidden,heads,kv_heads,ffn_hidden,vocab,seq_len,activation,tied,tp,pp,vpp,"
    "cp,dp,zero,micro_batch,global_batch,recompute,";

TEST(PublishedRuns, SixtyRunsFromEightSourcesInBothSplits) {
    const std::vector<PublishedRun> runs = loadPublishedRuns(kRuns);
    EXPECT_GE(runs.size(), 60u);
    std::set<std::string> sources;
    std::set<RunSplit> splits;
    for (const PublishedRun& r : runs) {
        EXPECT_GT(r.source.size(), 40u) << r.name; // names the paper or table and the row
        sources.insert(r.sourceId);
        splits.insert(r.split);
    }
    EXPECT_GE(sources.size(), 8u);
    EXPECT_EQ(splits.size(), 2u);
}

// Mixture-of-experts rows carry their experts, head size and expert parallelism: Qwen3-30B-A3B
// comes out at the model card's 30.5 B parameters, 3.3 B of them active.
TEST(PublishedRuns, MixtureOfExpertsRowsCarryTheirExpertsAndEp) {
    int moe = 0;
    for (const PublishedRun& r : loadPublishedRuns(kRuns)) {
        if (!r.model.moe.enabled()) {
            EXPECT_EQ(r.parallel.ep, 1) << r.name;
            continue;
        }
        ++moe;
        EXPECT_GE(r.parallel.ep, 4) << r.name;
        EXPECT_EQ(r.model.qDim(), std::int64_t(r.model.heads) * 128) << r.name;
        if (r.name.find("qwen3-30b-a3b") != std::string::npos) {
            const ParamCount c = countParameters(r.model);
            EXPECT_NEAR(c.total, 30.5e9, 0.01 * 30.5e9) << r.name;
            EXPECT_NEAR(c.active, 3.3e9, 0.03 * 3.3e9) << r.name;
        }
    }
    EXPECT_GE(moe, 5);
}

// MoE parallel folding's paper measured each model faster with the experts folded onto the TP
// ranks (etp 1) than with Megatron-Core's default mapping (etp = tp): the planner orders each pair
// the same way.
TEST(PublishedRuns, FoldingTheExpertsIsPredictedFasterAsMeasured) {
    std::map<std::string, std::pair<const PublishedRun*, const PublishedRun*>> pairs;
    const std::vector<PublishedRun> runs = loadPublishedRuns(kRuns);
    for (const PublishedRun& r : runs) {
        if (r.sourceId != "moe-folding-2025")
            continue;
        EXPECT_DOUBLE_EQ(r.parallel.expertCapacityFactor, 1.0) << r.name;
        const bool folded = r.parallel.etp == 1;
        auto& pair = pairs[r.name.substr(0, r.name.rfind('-'))];
        (folded ? pair.second : pair.first) = &r;
    }
    ASSERT_EQ(pairs.size(), 2u);
    for (const auto& [model, pair] : pairs) {
        ASSERT_TRUE(pair.first && pair.second) << model;
        EXPECT_EQ(pair.first->parallel.expertTp(), pair.first->parallel.tp) << model;
        EXPECT_LT(pair.first->reportedMfu, pair.second->reportedMfu) << model;
        EXPECT_LT(compareRun(*pair.first).predicted, compareRun(*pair.second).predicted) << model;
    }
}

// Every run against the planner at its default assumptions.
std::vector<RunComparison> compareAll(const std::vector<PublishedRun>& runs) {
    std::vector<RunComparison> results;
    for (const PublishedRun& r : runs)
        results.push_back(compareRun(r));
    return results;
}

// The CSV's runs against the planner, and each part's summary of them.
struct ComparedParts {
    std::vector<PublishedRun> runs;
    std::vector<RunComparison> results;
    ErrorSummary calibration, validation;
};

ComparedParts compareParts() {
    ComparedParts parts;
    parts.runs = loadPublishedRuns(kRuns);
    parts.results = compareAll(parts.runs);
    parts.calibration = summarizeErrors(parts.runs, parts.results, RunSplit::Calibration);
    parts.validation = summarizeErrors(parts.runs, parts.results, RunSplit::Validation);
    return parts;
}

// The model may be calibrated on the calibration part; the validation part is never used to
// tune. docs/validation.md reports both. The target for the validation part is a median
// of 8 % (p90 20 %), met since llm-foundry's rows run FlashAttention-1 (5.2 %, p90 19.3 %); it
// asks the test to fail when the median passes 10 %. The bounds hold today's figures with a
// little room: 7 % and 21 %.
TEST(PublishedRuns, MedianErrorsOfTheCalibrationAndValidationParts) {
    const auto [runs, results, calibration, validation] = compareParts();
    EXPECT_LT(calibration.medianAbsolute, 0.10);
    EXPECT_LT(validation.medianAbsolute, 0.07);
    // Megatron-MoE-ModelZoo's Qwen3-235B rows, from -33 % to +64 % (docs/validation.md), took
    // the calibration part's p90 from 19 % to 32 %.
    EXPECT_LT(calibration.p90Absolute, 0.35);
    EXPECT_LT(validation.p90Absolute, 0.18);
    for (const RunComparison& c : results)
        EXPECT_GT(c.predicted, 0);
}

// Every published run ran, so each fits its GPU; the planner's memory model puts 10 of the 100
// over (docs/validation.md, "Memory"). These bounds keep that from growing: the rows a change
// pushes over their GPU, or further over it, fail here.
TEST(PublishedRuns, RunsThatRanArePlannedOverTheirGpusNoMoreThanToday) {
    const auto [runs, results, calibration, validation] = compareParts();
    EXPECT_LE(calibration.overMemory, 4);
    EXPECT_LE(validation.overMemory, 6);
    EXPECT_LT(calibration.worstMemoryRatio, 2.8); // Llama 3 405B's rows, as the paper states them
    EXPECT_LT(validation.worstMemoryRatio, 1.12); // llm-foundry's MPT-7B on 8 GPUs, autocast
    // What the bounds count: a run the planner fits is under its GPU's memory, one it does not
    // is over it.
    for (const RunComparison& c : results)
        EXPECT_EQ(c.estimate.fits, c.estimate.memory.total() <= c.estimate.gpuMemory);
}

// The FP8 GEMM efficiency is calibrated on NeMo 24.07's FP8 table and nowhere else: at the
// default assumptions that source's median signed error is within a point of zero. It fails when
// the constant or the rows' layouts (their TP communication overlap, say) change without
// recalibrating, and it leaves the other sources, the validation part above all, out of it.
TEST(PublishedRuns, TheFp8GemmEfficiencySitsAtItsCalibrationSourcesZero) {
    const ComparedParts parts = compareParts();
    const ErrorSummary& calibration = parts.calibration;
    const auto nemo =
        std::find_if(calibration.sources.begin(), calibration.sources.end(),
                     [](const ErrorSummary::Source& s) { return s.id == "nemo-24.07"; });
    ASSERT_NE(nemo, calibration.sources.end());
    EXPECT_GE(nemo->runs, 10);
    EXPECT_NEAR(nemo->medianSigned, 0.0, 0.01);
    for (const PublishedRun& r : parts.runs) {
        if (r.sourceId == "nemo-24.07") {
            EXPECT_EQ(r.split, RunSplit::Calibration) << r.name;
        }
    }
}

// The rows of one source.
std::vector<PublishedRun> rowsFrom(const std::string& sourceId) {
    std::vector<PublishedRun> rows = loadPublishedRuns(kRuns);
    rows.erase(std::remove_if(rows.begin(), rows.end(),
                              [&](const PublishedRun& r) { return r.sourceId != sourceId; }),
               rows.end());
    return rows;
}

// The median of signed errors: the middle one, or the mean of the middle two.
double medianOf(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t half = v.size() / 2;
    return v.size() % 2 ? v[half] : (v[half - 1] + v[half]) / 2;
}

// The host time of a dropless MoE layer is what Megatron-MoE-ModelZoo's Qwen3-235B run with its
// experts inside a node (TP 4, EP 8, PP 8 x VPP 4) took a layer and microbatch: its published
// step over 256 microbatches of the 12 MoE layers a stage holds, less the interleaved bubble,
// 7 / (4 x 256) of the rest. The planner's GPU work for that row is under half of it, so the row
// is host-bound, and at the default it is predicted within 3 % of what ran.
TEST(PublishedRuns, TheMoeHostTimeIsWhatTheModelZoosHostBoundRowTook) {
    const std::vector<PublishedRun> zoo = rowsFrom("megatron-moe-modelzoo");
    const auto row = std::find_if(zoo.begin(), zoo.end(), [](const PublishedRun& r) {
        return r.name == "modelzoo-qwen3-235b-a22b-h100-256gpu-deepep-ep8-tp4";
    });
    ASSERT_NE(row, zoo.end());
    EXPECT_EQ(row->split, RunSplit::Calibration);
    const double step = 2048.0 * 4096 / (256 * row->reportedTokensPerGpu);
    EXPECT_NEAR(step, 29.0, 0.05); // the readme's step time
    const double perLayer = step / (256 * 12) / (1 + 7.0 / (4 * 256));
    EXPECT_NEAR(Assumptions{}.moeLayerHostSeconds, perLayer, 0.01 * perLayer);

    const RunComparison c = compareRun(*row);
    EXPECT_LT(std::abs(c.error), 0.03);
    EXPECT_GT(c.estimate.hostWait, 0.5 * c.estimate.stepTime);
    EXPECT_NEAR(c.estimate.hostMicrobatch, 12 * perLayer, 0.01 * 12 * perLayer);
}

// Megatron-Bridge's dropless Qwen3 rows on B200 run their microbatches at the host's pace: with
// the host roof the source's median signed error is within the 10 %; without it (a host
// that costs nothing) the planner has them over 50 % too fast. The H100 rows, whose all-to-alls
// cross nodes, are GPU-bound and move by less than a point.
TEST(PublishedRuns, DroplessMoeRowsOnFastGpusRunAtTheHostsPace) {
    const std::vector<PublishedRun> rows = rowsFrom("megatron-bridge-moe");
    ASSERT_EQ(rows.size(), 7u);
    Assumptions noHost;
    noHost.moeLayerHostSeconds = 0;
    std::vector<double> withRoof, without;
    for (const PublishedRun& r : rows) {
        const RunComparison roofed = compareRun(r), unroofed = compareRun(r, noHost);
        withRoof.push_back(roofed.error);
        without.push_back(unroofed.error);
        EXPECT_LE(roofed.predicted, unroofed.predicted * (1 + 1e-12)) << r.name;
        if (r.gpuId == "b200") {
            EXPECT_GT(roofed.estimate.hostWait, 0) << r.name;
            EXPECT_LT(roofed.error, unroofed.error - 0.3) << r.name;
        } else if (r.name.find("235b") != std::string::npos) {
            EXPECT_NEAR(roofed.error, unroofed.error, 0.01) << r.name;
        }
    }
    EXPECT_LT(std::abs(medianOf(withRoof)), 0.10);
    EXPECT_GT(medianOf(without), 0.5);
}

// llm-foundry's tables ran on Composer's FSDP: its mixed-precision mode "DEFAULT" kept fp32
// weights under bf16 autocast and reduced in bf16, "PURE" ran bf16 throughout, and its
// backward_prefetch default was BACKWARD_POST. Each row's settings follow the MP Mode and
// Sharding Strategy columns its source quotes. Planned so, the source's median signed error
// is within the 10 %; planned with FSDP's own defaults (bf16 weights, prefetch before
// the gradients) it is further out.
TEST(PublishedRuns, LlmFoundrysRowsRunAsComposersFsdpRanThem) {
    std::vector<double> asRun, asFsdpDefaults;
    int defaultMode = 0, pureMode = 0;
    for (const PublishedRun& r : rowsFrom("llmfoundry")) {
        const bool fullShard = r.source.find("| FULL_SHARD |") != std::string::npos;
        EXPECT_EQ(fullShard, r.parallel.zero == 3) << r.name;
        EXPECT_EQ(r.parallel.backwardPrefetch,
                  fullShard ? BackwardPrefetch::Post : BackwardPrefetch::Pre)
            << r.name;
        if (r.source.find("| amp_bf16 | DEFAULT |") != std::string::npos) {
            ++defaultMode;
            EXPECT_TRUE(r.parallel.precision == precisionPolicyFromString("amp-bf16grads"))
                << r.name;
        }
        if (r.source.find("| PURE |") != std::string::npos) {
            ++pureMode;
            EXPECT_TRUE(r.parallel.precision == PrecisionPolicy::bf16Mixed(false)) << r.name;
        }
        asRun.push_back(compareRun(r).error);
        PublishedRun fsdp = r;
        fsdp.parallel.backwardPrefetch = BackwardPrefetch::Pre;
        if (fsdp.parallel.precision.autocastsWeights()) // FSDP's bf16 param_dtype instead
            fsdp.parallel.precision = PrecisionPolicy::bf16Mixed();
        asFsdpDefaults.push_back(compareRun(fsdp).error);
    }
    ASSERT_EQ(asRun.size(), 30u);
    EXPECT_EQ(defaultMode, 20); // and 3 in FP8 (amp_fp8), which keep the fp8 policy
    EXPECT_EQ(pureMode, 7);
    EXPECT_LT(std::abs(medianOf(asRun)), 0.10);
    EXPECT_GT(medianOf(asFsdpDefaults), medianOf(asRun) + 0.03);
}

// llm-foundry's 2023 tables ran MPT's attention of the first FlashAttention generation: the
// launchers of the time default attn_impl to triton (MPT's Triton kernel of FlashAttention-1's
// algorithm), the gpu extra pinned flash-attn 1.0.3, and FlashAttention-2 came to llm-foundry
// in October 2023. Each row says so and cites the default. FlashAttention-2 runs about twice
// as fast (Dao 2023, Sec. 4.1), and planned with it the rows come out too fast by what
// attention's share of their FLOPs grows with (the small models, the 8K rows): the source's
// median signed error moves off zero and its worst row past 25 %.
TEST(PublishedRuns, LlmFoundrysRowsRunFlashAttentionsFirstGeneration) {
    std::vector<double> asRun, asFlash2;
    double worst = 0, worstFlash2 = 0;
    for (const PublishedRun& r : rowsFrom("llmfoundry")) {
        EXPECT_EQ(r.parallel.attentionKernel, AttentionKernel::Flash1) << r.name;
        EXPECT_NE(r.source.find("--attn_impl default 'triton'"), std::string::npos) << r.name;
        asRun.push_back(compareRun(r).error);
        PublishedRun flash2 = r;
        flash2.parallel.attentionKernel = AttentionKernel::Flash2;
        asFlash2.push_back(compareRun(flash2).error);
        worst = std::max(worst, std::abs(asRun.back()));
        worstFlash2 = std::max(worstFlash2, std::abs(asFlash2.back()));
    }
    ASSERT_EQ(asRun.size(), 30u);
    EXPECT_LT(std::abs(medianOf(asRun)), 0.03);
    EXPECT_GT(medianOf(asFlash2), medianOf(asRun) + 0.04);
    EXPECT_LT(worst, 0.15);
    EXPECT_GT(worstFlash2, 0.25);
}

// Where a row's source quotes the config that ran it turning Transformer Engine's TP
// communication overlap on (NeMo's launcher YAMLs, `ub_tp_comm_overlap`; Megatron-Bridge's
// recipes, `CommOverlapConfig(tp_comm_overlap=True)`) or off, the row plans it so. The
// calibration part's NeMo rows and the validation part's Megatron-Bridge and Nemotron-4 rows
// rest on the same kind of evidence.
TEST(PublishedRuns, RowsOverlapTpCommunicationAsTheirQuotedConfigsSay) {
    const auto lower = [](std::string s) {
        std::transform(s.begin(), s.end(), s.begin(),
                       [](unsigned char c) { return char(std::tolower(c)); });
        return s;
    };
    int on = 0, off = 0;
    std::set<RunSplit> splitsOn;
    for (const PublishedRun& r : loadPublishedRuns(kRuns)) {
        const std::string source = lower(r.source);
        const bool saysOn = source.find("ub_tp_comm_overlap: true") != std::string::npos ||
                            source.find("tp_comm_overlap=true") != std::string::npos;
        const bool saysOff = source.find("ub_tp_comm_overlap: false") != std::string::npos;
        ASSERT_FALSE(saysOn && saysOff) << r.name;
        if (saysOn) {
            ++on;
            splitsOn.insert(r.split);
            EXPECT_TRUE(r.parallel.tpCommOverlap) << r.name;
        }
        if (saysOff) {
            ++off;
            EXPECT_FALSE(r.parallel.tpCommOverlap) << r.name;
        }
    }
    EXPECT_GE(on, 17);
    EXPECT_GE(off, 1);
    EXPECT_EQ(splitsOn.size(), 2u);
}

const PublishedRun& runNamed(const std::vector<PublishedRun>& runs, const std::string& name) {
    const auto it = std::find_if(runs.begin(), runs.end(),
                                 [&](const PublishedRun& r) { return r.name == name; });
    if (it == runs.end())
        throw std::runtime_error("no run " + name + " in " + kRuns);
    return *it;
}

// Llama 3's paper does not give its virtual stages; the rows take the v (2, 4 or 8: 8 layer
// slots a stage) at which the planner reproduces the ratio Meta measured between its two 8K runs,
// the same layout at 32 and 16 microbatches (400 / 430 TFLOP/s), which no efficiency enters.
TEST(PublishedRuns, Llama3RowsTakeTheVirtualStagesThatReproduceMetasScaling) {
    const std::vector<PublishedRun> runs = loadPublishedRuns(kRuns);
    PublishedRun m32 = runNamed(runs, "llama3-405b-8192gpu-cp1-seq8192");
    PublishedRun m16 = runNamed(runs, "llama3-405b-16384gpu-cp1-seq8192");
    const double measured = m16.reportedTflops / m32.reportedTflops;
    ASSERT_EQ(m32.parallel.vpp, m16.parallel.vpp);
    const int chosen = m32.parallel.vpp;
    int nearest = 0;
    double nearestGap = 1e9;
    for (const int v : {2, 4, 8}) {
        m32.parallel.vpp = m16.parallel.vpp = v;
        const double gap =
            std::abs(compareRun(m16).predicted / compareRun(m32).predicted - measured);
        if (gap < nearestGap) {
            nearestGap = gap;
            nearest = v;
        }
    }
    EXPECT_EQ(chosen, nearest);
}

// Nor does it give its FLOP count. Under the one the rows take (attention's causal half), the
// three runs, one layout at 8K and 128K tokens, agree with each other within 3 points; under the
// full square the 128K run would stand 35 points from the others.
TEST(PublishedRuns, Llama3RowsAgreeWithEachOtherUnderTheirFlopCount) {
    const std::vector<PublishedRun> runs = loadPublishedRuns(kRuns);
    const auto spread = [&](std::optional<FlopsConvention> convention) {
        double lo = 1e9, hi = -1e9;
        for (PublishedRun r : runs) {
            if (r.sourceId != "llama3-2024")
                continue;
            if (convention)
                r.convention = *convention;
            const double e = compareRun(r).error;
            lo = std::min(lo, e);
            hi = std::max(hi, e);
        }
        return hi - lo;
    };
    EXPECT_LT(spread(std::nullopt), 0.03);
    EXPECT_GT(spread(FlopsConvention::Palm), 0.30);
}

// torchtitan measured Llama 2 13B on 64 A100s without checkpointing, with every other layer
// checkpointed whole and with its op-level policy: 2162, 1914 and 1904 tokens/s a GPU, each
// policy 11.5-12 % slower than none and the two within 1 % of each other. The planner's three
// policies (none, full recompute of 20 of the 40 layers, selective-op) cost what they measured
// to within 4 points, and the two policies stay within 3 % of each other.
TEST(PublishedRuns, TorchtitansCheckpointingPoliciesCostWhatTheyMeasured) {
    const std::vector<PublishedRun> runs = loadPublishedRuns(kRuns);
    const std::string prefix = "torchtitan-llama2-13b-a100-64gpu-fsdp-";
    const PublishedRun& none = runNamed(runs, prefix + "noac-bf16");
    const double base = compareRun(none).predicted;
    double predicted[2] = {};
    int i = 0;
    for (const char* policy : {"sac-layer-bf16", "sac-op-bf16"}) {
        const PublishedRun& r = runNamed(runs, prefix + policy);
        ASSERT_NE(r.parallel.recompute, Recompute::None) << r.name;
        const double measured = 1.0 - r.reportedTokensPerGpu / none.reportedTokensPerGpu;
        predicted[i] = compareRun(r).predicted;
        EXPECT_NEAR(1.0 - predicted[i] / base, measured, 0.04) << r.name;
        ++i;
    }
    EXPECT_NEAR(predicted[0] / predicted[1], 1.0, 0.03);
}

// torchtitan's table: Llama 2 70B with op-level checkpointing ran out of memory at a local batch
// of 2 on 80 GB A100s, and ran at 1. The planner says the same of both.
TEST(PublishedRuns, TorchtitansLlama2At70BOutgrowsAnA100AtTwoSequences) {
    const std::vector<PublishedRun> runs = loadPublishedRuns(kRuns);
    PublishedRun r = runNamed(runs, "torchtitan-llama2-70b-a100-64gpu-fsdp-sac-op-bf16");
    ASSERT_EQ(r.parallel.microBatch, 1);
    EXPECT_TRUE(estimate(planInputs(r)).fits);
    r.parallel.microBatch = 2;
    r.parallel.globalBatch = 128;
    EXPECT_FALSE(estimate(planInputs(r)).fits);
}

// HFU counts the recomputed forward on top of the convention's model FLOPs: for the same run
// under full recompute it is the MFU times hardware over model FLOPs. An HFU in the megatron
// convention (which already counts it) and a peak the GPU does not have are refused.
TEST(PublishedRuns, HfuAddsTheRecomputeAndNeedsAPeakTheGpuHas) {
    const std::string header =
        kRunColumns + "reported_mfu,reported_hfu,flops_convention,peak_precision,source\n";
    const std::string row = "x,a100-80gb,8,4,256,4,4,1024,1000,512,gelu,true,1,1,,1,8,0,1,64,full,";
    const RunComparison mfu = compareRun(parsePublishedRuns(header + row + "0.5,,palm,,s\n")[0]);
    const RunComparison hfu = compareRun(parsePublishedRuns(header + row + ",0.5,palm,,s\n")[0]);
    EXPECT_EQ(hfu.metric, "HFU");
    EXPECT_NEAR(hfu.predicted / mfu.predicted,
                mfu.estimate.hardwareFlopsPerToken / mfu.estimate.modelFlopsPerToken, 1e-12);
    EXPECT_GT(hfu.predicted, mfu.predicted);
    EXPECT_THROW(parsePublishedRuns(header + row + ",0.5,megatron,,s\n"), InputError);
    EXPECT_THROW(parsePublishedRuns(header + row + "0.5,,palm,fp8,s\n"), InputError); // A100
}

TEST(PublishedRuns, TokensPerSecondIsComparedFirstAndFractionsAreFractions) {
    const std::string header =
        kRunColumns + "reported_tflops_per_gpu,reported_mfu,"
                      "reported_tokens_per_s_per_gpu,flash_attention,flops_convention,source\n";
    const std::string row = "x-1,a100-80gb,8,2,64,2,2,256,10,8,gelu,true,1,1,,1,8,0,1,8,none,";
    const std::vector<PublishedRun> runs =
        parsePublishedRuns(header + row + "100,0.4,5000,true,palm,src\n");
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(compareRun(runs[0]).metric, "tokens/s per GPU");
    EXPECT_NEAR(compareRun(runs[0]).reported, 5000, 1e-9);
    // A file without the split and source_id columns: a run the model was not tuned on, its
    // source named by the run's name up to the first '-'.
    EXPECT_EQ(runs[0].split, RunSplit::Validation);
    EXPECT_EQ(runs[0].sourceId, "x");
    EXPECT_THROW(parsePublishedRuns(header + row + ",43,,true,palm,src\n"), InputError);
}

TEST(PublishedRuns, AnEagerRunMovesMoreThroughItsElementwiseKernels) {
    const std::string header = kRunColumns + "reported_tokens_per_s_per_gpu,flash_attention,"
                                             "fused_elementwise,flops_convention,source\n";
    const std::string row = "x-1,a100-80gb,8,2,256,4,4,704,1000,512,swiglu,false,1,1,,1,8,0,1,8,"
                            "none,1000,true,";
    const std::vector<PublishedRun> runs = parsePublishedRuns(
        header + row + ",palm,src\n" + row + "false,palm,src\n" + row + "true,palm,src\n");
    ASSERT_EQ(runs.size(), 3u);
    EXPECT_TRUE(runs[0].parallel.fusedElementwise); // empty: fused
    EXPECT_FALSE(runs[1].parallel.fusedElementwise);
    EXPECT_TRUE(runs[2].parallel.fusedElementwise);
    EXPECT_LT(compareRun(runs[1]).predicted, compareRun(runs[0]).predicted);
    EXPECT_THROW(parsePublishedRuns(header + row + "maybe,palm,src\n"), InputError);
}

TEST(PublishedRuns, MegatronConventionMatchesThePaperFormula) {
    // Narayanan et al. 2021, Appendix: 96 B s l h^2 (1 + s/6h + V/16lh) per step (B sequences).
    ModelSpec m;
    m.layers = 96;
    m.hidden = 12288;
    m.seqLen = 2048;
    m.vocab = 51200;
    const double perToken = conventionFlopsPerToken(m, FlopsConvention::Megatron);
    EXPECT_NEAR(perToken * 2048,
                96.0 * 2048 * 96 * 12288.0 * 12288 *
                    (1 + 2048 / (6.0 * 12288) + 51200 / (16.0 * 96 * 12288)),
                1e-6 * perToken * 2048);
}

TEST(PublishedRuns, MalformedCsvIsAnInputError) {
    EXPECT_THROW(parsePublishedRuns(""), InputError);
    EXPECT_THROW(parsePublishedRuns("name,gpu\n\"unclosed,x\n"), InputError);
    const std::string header =
        "name,gpu,gpus,layers,hidden,heads,kv_heads,ffn_hidden,vocab,seq_len,activation,tied,tp,pp,"
        "vpp,cp,dp,zero,micro_batch,global_batch,recompute,reported_tflops_per_gpu,reported_mfu,"
        "flash_attention,overlap_grad_reduce,overlap_param_gather,inter_bw_gbps,flops_convention,"
        "source\n";
    EXPECT_THROW(parsePublishedRuns(header + "x,a100-80gb,8,abc,1,1,1,4,10,8,gelu,true,1,1,1,1,8,0,"
                                             "1,8,none,100,,false,,,,megatron,src\n"),
                 InputError);
    EXPECT_THROW(parsePublishedRuns(header +
                                    "x,a100-80gb,9,2,64,2,2,256,10,8,gelu,true,1,1,1,1,8,0,"
                                    "1,8,none,100,,false,,,,megatron,src\n"),
                 InputError); // tp pp cp dp != gpus
    EXPECT_THROW(parsePublishedRuns(header +
                                    "x,a100-80gb,8,2,64,2,2,256,10,8,gelu,true,1,1,1,1,8,0,"
                                    "1,8,none,100,,false,False,,,megatron,src\n"),
                 InputError); // an overlap flag is true, false or empty
    const std::string more = "name,gpu,gpus,layers,hidden,heads,kv_heads,ffn_hidden,vocab,seq_len,"
                             "activation,tied,tp,pp,vpp,cp,dp,zero,micro_batch,global_batch,"
                             "recompute,reported_tflops_per_gpu,reported_mfu,flash_attention,"
                             "flops_convention,split,precision,source\n";
    const std::string good = "x,a100-80gb,8,2,64,2,2,256,10,8,gelu,true,1,1,,1,8,0,1,8,none,100,,"
                             "false,megatron,";
    EXPECT_NO_THROW(parsePublishedRuns(more + good + "calibration,fp8,src\n"));
    EXPECT_THROW(parsePublishedRuns(more + good + "tuning,bf16,src\n"), InputError);
    // Each bad cell names its column.
    const auto refusal = [](const std::string& csv) {
        try {
            parsePublishedRuns(csv);
        } catch (const InputError& e) {
            return std::string(e.what());
        }
        ADD_FAILURE() << "accepted: " << csv;
        return std::string();
    };
    const std::string cells = "x,a100-80gb,8,2,64,2,2,256,10,8,gelu,";
    EXPECT_NE(refusal(more + cells + "true,1,1,,1,8,0,1,8,most,100,,false,megatron,,bf16,src\n")
                  .find("column 'recompute'"),
              std::string::npos);
    EXPECT_NE(refusal(more + cells + "yes,1,1,,1,8,0,1,8,none,100,,false,megatron,,bf16,src\n")
                  .find("'tied'"),
              std::string::npos);
    EXPECT_NE(refusal(more + cells + "true,1,1,,1,8,2.5,1,8,none,100,,false,megatron,,bf16,src\n")
                  .find("'zero'"),
              std::string::npos);
    EXPECT_NE(refusal(more + cells + "true,1,1,,1,8,0,1,8,none,100,,false,megatron,,fp7,src\n")
                  .find("column 'precision'"),
              std::string::npos);
    EXPECT_THROW(parsePublishedRuns(more + good + "validation,fp7,src\n"), InputError);
    // A mixture of experts needs its top-k; its ep must divide the experts and dp (the planner's
    // rule, named).
    const std::string moe = "name,gpu,gpus,layers,hidden,heads,kv_heads,ffn_hidden,vocab,seq_len,"
                            "activation,tied,experts,top_k,tp,pp,cp,ep,dp,global_batch,"
                            "reported_tflops_per_gpu,flops_convention,source\n";
    const std::string moeCells = "x,h100-sxm,8,2,64,2,2,256,10,8,swiglu,false,";
    EXPECT_NO_THROW(parsePublishedRuns(moe + moeCells + "8,2,1,1,1,4,8,8,100,causal,src\n"));
    EXPECT_NE(refusal(moe + moeCells + "8,,1,1,1,4,8,8,100,causal,src\n").find("'top_k'"),
              std::string::npos);
    EXPECT_NE(refusal(moe + moeCells + "8,2,1,1,1,3,8,8,100,causal,src\n").find("ep-experts"),
              std::string::npos);
    // The attention kernel a run used: empty is the planner's default, a word it does not know
    // is refused with its column.
    const std::string withKernel = "name,gpu,gpus,layers,hidden,heads,kv_heads,ffn_hidden,vocab,"
                                   "seq_len,activation,tied,tp,pp,vpp,cp,dp,zero,micro_batch,"
                                   "global_batch,recompute,reported_mfu,flash_attention,"
                                   "attention_kernel,flops_convention,source\n";
    const std::string kernelRow =
        "x,h100-sxm,8,2,64,2,2,256,10,8,gelu,true,1,1,,1,8,0,1,8,none,0.4,"
        "true,";
    EXPECT_EQ(parsePublishedRuns(withKernel + kernelRow + "flash2,palm,src\n")[0]
                  .parallel.attentionKernel,
              AttentionKernel::Flash2);
    EXPECT_EQ(
        parsePublishedRuns(withKernel + kernelRow + ",palm,src\n")[0].parallel.attentionKernel,
        AttentionKernel::Auto);
    EXPECT_NE(refusal(withKernel + kernelRow + "flash4,palm,src\n").find("'attention_kernel'"),
              std::string::npos);
    // A layout the planner refuses (tp 3 does not divide 2 heads) is refused with its rule.
    try {
        parsePublishedRuns(more +
                           "x,a100-80gb,9,2,64,2,2,256,10,8,gelu,true,3,1,,1,3,0,1,3,none,100,,"
                           "false,megatron,validation,bf16,src\n");
        ADD_FAILURE() << "a layout breaking tp-heads was accepted";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("tp-heads"), std::string::npos) << e.what();
    }
    EXPECT_THROW(loadPublishedRuns("/nonexistent/runs.csv"), InputError);
}

} // namespace
} // namespace shardscope
