// What the planner predicts for one model, cluster and layout. Plain numbers only: explanations
// are built on demand by explain.h, so the search can evaluate many layouts cheaply.
#pragma once

#include "assumptions.h"
#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/train_config.h"

#include <array>
#include <string>
#include <vector>

namespace shardscope {

struct PlanInputs {
    ModelSpec model;
    ClusterSpec cluster;
    ParallelConfig parallel;
    TrainConfig train;
    Assumptions assume;
};

// Bytes on one GPU by category. Optimizer state includes the fp32 master copy.
struct MemoryBreakdown {
    double parameters = 0;
    double gradients = 0;
    double optimizer = 0;
    double activations = 0;
    double temporary = 0;
    double overhead = 0;
    double total() const {
        return parameters + gradients + optimizer + activations + temporary + overhead;
    }

    // What the categories are made of, for explanations and charts.
    double paramsOnRank = 0;       // parameters this rank holds before ZeRO-3 sharding
    double expertParamsOnRank = 0; // of which routed experts' (split over ep as well as tp)
    int layersOnRank = 0;
    double activationsPerLayer = 0; // one microbatch, one layer (an MoE model's: an MoE layer)
    int firstDenseLayersOnRank = 0; // of layersOnRank, an MoE model's dense first layers
    double firstDenseActivationsPerLayer = 0; // one microbatch, one of those
    double inflightMicrobatches = 0;
    double stageExtraActivations = 0; // embedding / LM-head inputs on first or last stage
    double zero3Gather = 0;           // gathered parameters + unsharded grads of the largest layer
    double gradBuckets = 0;
    double logits = 0;
    double fp8WeightCache = 0;
    double autocastWeightCopies = 0; // bf16 copies of fp32 weights autocast keeps for backward
    double recomputeLayer = 0;       // one layer's full activations while it is recomputed
    double cpuOffloaded = 0;         // optimizer state moved to host memory
};

// EP: expert parallelism's token all-to-alls (its gradient reductions are part of DP's).
enum class Axis { DP, TP, PP, CP, EP };
inline constexpr std::array<Axis, 5> kAxes = {Axis::DP, Axis::TP, Axis::PP, Axis::CP, Axis::EP};
std::string toString(Axis a);

struct AxisComm {
    int groupSize = 1;
    bool crossesNodes = false;
    double bandwidth = 0; // bytes/s per GPU used for this group
    double latency = 0;
    double bytes = 0;    // bytes each rank sends per step
    double seconds = 0;  // time on the wire per step
    double window = 0;   // compute time it may hide behind
    double exposed = 0;  // what is left on the critical path
    int collectives = 0; // calls per step
};

struct Estimate {
    ParamCount params;
    std::vector<Violation> violations; // empty when the layout is valid

    MemoryBreakdown memory; // the most loaded pipeline stage
    int worstStage = 0;
    int slowStage = 0;    // the pipeline stage whose compute paces the step
    double gpuMemory = 0; // the GPU's memory
    double capacity = 0;  // what a layout may use of it: gpuMemory less the memory headroom
    bool fits = false;

    double modelFlopsPerToken = 0;    // forward + backward, no recompute
    double hardwareFlopsPerToken = 0; // including recompute
    double modelFlopsPerStep = 0;     // whole job
    double hardwareFlopsPerStep = 0;
    double tokensPerStep = 0;

    double microbatchCompute = 0; // one microbatch forward + backward on the slowest stage
    double computeTime = 0;       // all microbatches of a step on one rank, no waiting
    double optimizerTime = 0;
    std::array<AxisComm, kAxes.size()> comm; // indexed by Axis
    double bubbleFraction = 0;
    double bubbleTime = 0;
    // Dropless MoE: the least a microbatch takes on a stage, its MoE layers x the host time of
    // one (Assumptions::moeLayerHostSeconds), and what the step waits beyond the GPU's own work
    // for it, over every microbatch (0 where the GPU is the slower).
    // The GPU's own pace beside it: the microbatch's compute and its TP/CP/EP waits.
    int hostMoeLayers = 0; // the MoE layers the roof counts (0: no roof)
    double hostMicrobatch = 0;
    double gpuMicrobatch = 0;
    double hostWait = 0;
    double exposedComm = 0;
    double stepTime = 0;

    double tokensPerSecond = 0;
    double tflopsPerGpu = 0;        // model FLOP/s per GPU
    double hardwareFlopsPerGpu = 0; // FLOP/s per GPU including recompute
    double mfu = 0;
    double hfu = 0;              // hardware FLOPs utilization: recompute counted
    bool mfuAssumed = false;     // Assumptions::assumedMfu set the step time
    double modelledStepTime = 0; // the step model's own figures, kept when MFU is assumed
    double modelledMfu = 0;

    double timeToTrain = 0; // seconds of training for TrainConfig::trainTokens, no failures
    double gpuHours = 0;
    double cost = 0;

    double jobMtbf = 0;
    double checkpointBytes = 0;
    double checkpointWrite = 0;
    double checkpointInterval = 0;
    double trainingFraction = 0;
    double wallTimeToTrain = 0; // timeToTrain / trainingFraction

    const AxisComm& axis(Axis a) const { return comm[static_cast<int>(a)]; }
    bool valid() const { return violations.empty(); }
};

// Validate and evaluate. An invalid layout still gets every figure that can be computed.
Estimate estimate(const PlanInputs& in);
// Evaluate without validation, for callers that already know the layout is valid (search).
Estimate evaluate(const PlanInputs& in);

// The step time split into parts that add up to Estimate::stepTime: compute, the exposed
// communication of each axis, the pipeline bubble and the optimizer step.
struct StepPart {
    std::string label; // "Compute", "Exposed TP", ..., "Bubble", "Optimizer"
    double seconds = 0;
};
std::vector<StepPart> stepTimeParts(const Estimate& e);

// Pieces, exposed for tests and for the explanation of single figures.
// The host roof of a dropless MoE layout: the MoE layers one microbatch runs on the stage that
// holds the most of them, and their host time (both 0 for dense models and token dropping).
int hostBoundMoeLayers(const PlanInputs& in);
double hostMicrobatchSeconds(const PlanInputs& in);
MemoryBreakdown memoryForStage(const PlanInputs& in, int stage);
// The same with the model's parameters already counted (the search plans several stages).
MemoryBreakdown memoryForStage(const PlanInputs& in, int stage, const ParamCount& c);
// Memory of the most loaded pipeline stage (its index in *stage when given).
MemoryBreakdown mostLoadedStageMemory(const PlanInputs& in, int* stage = nullptr);
MemoryBreakdown mostLoadedStageMemory(const PlanInputs& in, const ParamCount& c, int* stage);
// What one layer keeps for its backward, one microbatch. `fp8Inputs`: the layer's projections run
// in FP8 through Transformer Engine, which keeps each projection's input as its FP8 cast, not the
// bf16 original (ParallelConfig::precision.fp8On(gpu)).
double activationBytesPerLayer(const ModelSpec& m, const ParallelConfig& p,
                               LayerKind kind = LayerKind::Moe, bool fp8Inputs = false);
// Whether the layers keep FP8 projection inputs: FP8 on a GPU with FP8, through Transformer
// Engine; op-level recompute is torchtitan's policy, whose torchao float8 keeps the bf16 inputs
// (matmul_with_hp_or_float8_args saves input_hp).
bool keepsFp8ProjectionInputs(const PlanInputs& in);

} // namespace shardscope
