// Every figure the planner shows, with its formula, the numbers substituted and its source.
#pragma once

#include "estimate.h"

#include <string>
#include <vector>

namespace shardscope {

enum class FigureId {
    ParamsTotal,
    ParamsPerGpu,
    MemParameters,
    MemGradients,
    MemOptimizer,
    MemActivations,
    MemTemporary,
    MemOverhead,
    MemTotal,
    FlopsPerToken,
    FlopsPerStep,
    ComputeTime,
    ElementwiseTraffic,
    LossTraffic,
    CommDP,
    CommTP,
    CommPP,
    CommCP,
    CommEP,
    Bubble,
    HostBound,
    StepTime,
    TokensPerSecond,
    TflopsPerGpu,
    Mfu,
    HardwareFlopsPerGpu,
    Hfu,
    TimeToTrain,
    GpuHours,
    Cost,
    JobMtbf,
    CheckpointWrite,
    CheckpointInterval,
    TrainingFraction,
};

struct Explanation {
    FigureId id{};
    std::string key;         // "memory.activations": stable, used by `explain <figure>` and JSON
    std::string label;       // "Activations"
    double value = 0;        // in `unit`
    std::string unit;        // "B", "s", "FLOP", "tokens/s", "FLOP/s", "fraction", "GPU-h", ...
    std::string display;     // the value formatted for people, with its unit
    std::string formula;     // symbolic
    std::string substituted; // the same with this plan's numbers
    std::string source;      // paper, datasheet or lesson the formula comes from
};

const std::vector<FigureId>& allFigures();
std::string figureKey(FigureId id);
FigureId figureFromKey(const std::string& key); // throws InputError listing the known keys

Explanation explain(const PlanInputs& in, const Estimate& e, FigureId id);
// Whether a figure says something about this plan: every figure does but the host-bound wait,
// which only a dropless MoE layout has. The printed report leaves the others out; lists and
// --explain keep every figure.
bool figureApplies(const Estimate& e, FigureId id);

// What a layout may use of each GPU, for people: "80.0 GB", or with a memory headroom
// "72.0 GB (80.0 GB less a 10.0 % headroom)".
std::string describeCapacity(const PlanInputs& in, const Estimate& e);

// The bubble of a schedule from its shape alone, every op taking the same time: what the
// Pipeline page shows beside its simulation. Same formula and source as the Bubble figure.
Explanation explainPipelineBubble(PipelineSchedule schedule, int p, int m, int v);

} // namespace shardscope
