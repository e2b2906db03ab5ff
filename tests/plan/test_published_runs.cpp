// The planner against published training runs: the default assumptions must keep the median
// absolute error under 15 % (docs/validation.md shows every row).
#include "core/error.h"
#include "plan/compute.h"
#include "plan/published_runs.h"

#include <gtest/gtest.h>

namespace shardscope {
namespace {

const std::string kRuns = std::string(SHARDSCOPE_TEST_DATA) + "/published_runs.csv";

TEST(PublishedRuns, AtLeastEightRunsWithSources) {
    const std::vector<PublishedRun> runs = loadPublishedRuns(kRuns);
    EXPECT_GE(runs.size(), 8u);
    for (const PublishedRun& r : runs) {
        EXPECT_FALSE(r.source.empty()) << r.name;
        EXPECT_TRUE(r.reportedTflops > 0 || r.reportedMfu > 0) << r.name;
    }
}

TEST(PublishedRuns, MedianAbsoluteErrorUnder15Percent) {
    std::vector<RunComparison> results;
    for (const PublishedRun& r : loadPublishedRuns(kRuns))
        results.push_back(compareRun(r));
    EXPECT_LT(medianAbsoluteError(results), 0.15);
    for (const RunComparison& c : results) {
        EXPECT_GT(c.predicted, 0);
        EXPECT_LT(std::abs(c.error), 0.6); // no run is wildly off
    }
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
    EXPECT_THROW(loadPublishedRuns("/nonexistent/runs.csv"), InputError);
}

} // namespace
} // namespace shardscope
