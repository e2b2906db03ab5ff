// Runs one pipeline rank's op list from engine/sched for one optimizer step: F, B (or B and W)
// of each microbatch in exactly the order the schedule gives. With one stage there is nothing to
// send or receive; the MPI engine adds the transfers each op names.
#pragma once

#include "gpt.h"
#include "sched/pipeline_program.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace shardscope {

class ScheduleExecutor {
public:
    // Fills inputs and targets (microBatch x seqLen each) for a microbatch of the current step.
    using Feed = std::function<void(int microbatch, std::int32_t* inputs, std::int32_t* targets)>;

    // Throws InputError when the program needs point-to-point transfers (more than one stage).
    // dataParallel: how many replicas share the step, so each scales its loss by the step's
    // whole token count and the replicas' summed gradients are the gradient of the mean.
    ScheduleExecutor(GptModel& model, PipelineProgram program, int rank = 0, int dataParallel = 1);

    // Zeroes the gradients, runs every op, and returns this replica's share of the mean loss
    // over the step's tokens (the mean itself with one replica); the gradients are that
    // share's.
    double runStep(const Feed& feed, SpanSink* sink);

    const PipelineProgram& program() const { return program_; }
    // Receives the gradient ranges each step completes, as the backward completes them.
    void setGradientListener(GradientListener* listener) { listener_ = listener; }

private:
    GptModel& model_;
    PipelineProgram program_;
    int rank_;
    int dataParallel_;
    GradientListener* listener_ = nullptr;
    // The microbatches whose backward (B or B+W) and W ops come last: after them a gradient
    // range receives nothing more this step.
    int lastBackward_ = -1, lastWeight_ = -1;
    std::vector<MicrobatchState> states_;
    std::vector<std::int32_t> inputs_, targets_;
};

} // namespace shardscope
