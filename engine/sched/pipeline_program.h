// Pipeline schedules as programs: for each pipeline rank, the ordered operations it runs (forward,
// backward, or backward split into input and weight gradients, of one microbatch on one model
// chunk) and the point-to-point transfers each implies. The simulator times these programs, the
// Pipeline page animates them, and the engine executes exactly them.
#pragma once

#include "core/parallel_config.h"

#include <optional>
#include <string>
#include <vector>

namespace shardscope {

enum class OpKind {
    Forward,        // F
    Backward,       // B and W fused: the usual backward pass
    BackwardInput,  // B: gradient of the input, what the previous stage waits for
    BackwardWeight, // W: gradient of the weights, which nothing downstream waits for
};
std::string toString(OpKind k); // "F", "B+W", "B", "W"
char letterOf(OpKind k);        // 'F', 'B', 'B', 'W'
// The span kind telemetry writes for the op (docs/telemetry.md): "forward", "backward",
// "backward_input", "backward_weight".
const char* spanKindName(OpKind k);

enum class TensorKind { Activation, Gradient };
std::string toString(TensorKind t);

// One point-to-point transfer of an op: to or from `peer`, for this op's microbatch.
struct Transfer {
    int peer = -1;
    TensorKind tensor = TensorKind::Activation;
};

struct PipelineOp {
    OpKind kind = OpKind::Forward;
    int microbatch = 0;
    int chunk = 0;                // model chunk on this rank, 0..v-1
    int stage = 0;                // virtual stage chunk * p + rank: the model's layers in order
    std::optional<Transfer> recv; // what must arrive before this op runs
    std::optional<Transfer> send; // what this op sends when it is done
};

struct ScheduleSpec {
    PipelineSchedule kind = PipelineSchedule::OneFOneB;
    int stages = 4;        // p: pipeline ranks
    int microbatches = 8;  // m per step
    int virtualStages = 1; // v: model chunks per rank (interleaved only)
};

struct PipelineProgram {
    ScheduleSpec spec;
    std::vector<std::vector<PipelineOp>> ranks; // ranks[r]: rank r's ops in execution order

    int virtualStageCount() const { return spec.stages * spec.virtualStages; }
    std::size_t opCount() const;
};

// The program of a schedule. Throws InputError for combinations the schedule does not support,
// saying which and how to fix it (interleaving needs v >= 2, p >= 2 and m divisible by p; only
// interleaving uses v > 1).
PipelineProgram buildPipelineProgram(const ScheduleSpec& spec);

// Everything wrong with a program, empty when it is sound: each (microbatch, stage) has its
// forward and its backward (fused, or B and W) exactly once on the right rank; every op comes
// after what it needs on its own rank; every receive has its send; between any two ranks the
// receives come in the order of the sends (so transfers can be matched by posting order, with no
// tags); and the ranks, each running its list in order with sends that do not block, finish
// without deadlock.
std::vector<std::string> verifyProgram(const PipelineProgram& program);

} // namespace shardscope
