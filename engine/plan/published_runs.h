// Published large training runs (tests/data/published_runs.csv) and the planner's prediction of
// each, in the FLOP-counting convention its authors used. docs/validation.md is made from this.
#pragma once

#include "estimate.h"
#include "flops_convention.h"

#include <string>
#include <vector>

namespace shardscope {

struct PublishedRun {
    std::string name;
    std::string source;
    std::string gpuId;
    double interBandwidth = 0; // bytes/s per GPU across nodes; 0: the GPU's network preset
    ModelSpec model;
    ParallelConfig parallel;
    double reportedTflops = 0; // per GPU; 0 when not reported
    double reportedMfu = 0;    // 0..1; 0 when not reported
    FlopsConvention convention = FlopsConvention::Palm;
};

// Parse the CSV. Throws InputError naming the line and column of anything malformed.
std::vector<PublishedRun> loadPublishedRuns(const std::string& path);
std::vector<PublishedRun> parsePublishedRuns(const std::string& csvText);

struct RunComparison {
    std::string metric; // "TFLOP/s per GPU" or "MFU"
    double reported = 0;
    double predicted = 0;
    double error = 0; // (predicted - reported) / reported
    Estimate estimate;
};

RunComparison compareRun(const PublishedRun& run, const Assumptions& assume = {});
double medianAbsoluteError(const std::vector<RunComparison>& comparisons);

} // namespace shardscope
