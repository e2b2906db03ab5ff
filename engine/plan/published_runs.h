// Published large training runs (tests/data/published_runs.csv) and the planner's prediction of
// each, in the FLOP-counting convention its authors used. docs/validation.md is made from this.
#pragma once

#include "estimate.h"
#include "flops_convention.h"

#include <string>
#include <vector>

namespace shardscope {

// Which part of the dataset a run belongs to: the model's assumptions may be calibrated on the
// calibration part; the validation part is never used to tune anything.
enum class RunSplit { Calibration, Validation };
std::string toString(RunSplit s);

struct PublishedRun {
    std::string name;
    std::string source;   // the paper or table, and the row
    std::string sourceId; // one id per independent source ("narayanan2021"), for per-source errors
    RunSplit split = RunSplit::Validation;
    std::string gpuId;
    double interBandwidth = 0; // bytes/s per GPU across nodes; 0: the GPU's network preset
    ModelSpec model;
    ParallelConfig parallel;
    // What the source reported, each 0 when not reported. The comparison uses the first one
    // given of: tokens/s per GPU (no FLOP convention involved), TFLOP/s per GPU, MFU, HFU.
    double reportedTokensPerGpu = 0; // tokens/s per GPU
    double reportedTflops = 0;       // per GPU, in `convention`
    double reportedMfu = 0;          // 0..1, in `convention`, of the `peakPrecision` peak
    double reportedHfu = 0;          // 0..1: model FLOPs plus recomputed forward work
    FlopsConvention convention = FlopsConvention::Palm;
    Precision peakPrecision = Precision::Bf16; // the dense peak MFU and HFU divide by
};

// Parse the CSV. Throws InputError naming the line and column of anything malformed.
std::vector<PublishedRun> loadPublishedRuns(const std::string& path);
std::vector<PublishedRun> parsePublishedRuns(const std::string& csvText);

struct RunComparison {
    std::string metric; // "tokens/s per GPU", "TFLOP/s per GPU", "MFU" or "HFU"
    double reported = 0;
    double predicted = 0;
    double error = 0; // (predicted - reported) / reported
    Estimate estimate;
};

// What the planner is given for a run: its model and layout on its GPU, 8 to a node.
PlanInputs planInputs(const PublishedRun& run, const Assumptions& assume = {});
RunComparison compareRun(const PublishedRun& run, const Assumptions& assume = {});
double medianAbsoluteError(const std::vector<RunComparison>& comparisons);

// The errors of a set of runs: median and 90th percentile of the absolute error, and the median
// signed error of each source (a source the model is biased on shows here, not in the median).
struct ErrorSummary {
    int runs = 0;
    double medianAbsolute = 0;
    double p90Absolute = 0; // nearest-rank 90th percentile
    struct Source {
        std::string id;
        int runs = 0;
        double medianSigned = 0;
    };
    std::vector<Source> sources; // in order of first appearance
    // Every run ran, so each should fit its GPU: the runs whose most loaded stage the planner
    // puts over the GPU's memory, and the largest planned / GPU memory among all the runs.
    int overMemory = 0;
    double worstMemoryRatio = 0;
};
ErrorSummary summarizeErrors(const std::vector<PublishedRun>& runs,
                             const std::vector<RunComparison>& comparisons);
// The same over the runs of one split only.
ErrorSummary summarizeErrors(const std::vector<PublishedRun>& runs,
                             const std::vector<RunComparison>& comparisons, RunSplit split);

} // namespace shardscope
