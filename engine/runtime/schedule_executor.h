// Runs one pipeline rank's op list from engine/sched for one optimizer step: F, B (or B and W)
// of each microbatch on each of its model chunks, in exactly the order the schedule gives, with
// the transfers each op names: the activation an F receives before it runs and sends when done,
// the gradient a B receives and sends. Sends do not block (their buffers are kept until they
// complete); a receive blocks, and the time it waits is reported as a wait.
#pragma once

#include "communicator.h"
#include "gpt.h"
#include "sched/pipeline_program.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

namespace shardscope {

class ScheduleExecutor {
public:
    // Fills inputs and targets (microBatch x seqLen each) for a microbatch of the current step.
    using Feed = std::function<void(int microbatch, std::int32_t* inputs, std::int32_t* targets)>;

    // rank: the pipeline rank whose op list runs, holding model.chunks(). pipeline: the pp
    // group, rank r of it being pipeline rank r; needed when the program has several stages
    // (InputError otherwise). dataParallel: how many replicas share the step, so each scales
    // its loss by the step's whole token count and the replicas' summed gradients are the
    // gradient of the mean.
    ScheduleExecutor(GptModel& model, PipelineProgram program, int rank = 0, int dataParallel = 1,
                     Communicator* pipeline = nullptr);

    // Zeroes the gradients, runs every op, and returns this rank's share of the mean loss over
    // the step's tokens: the mean itself with one replica and one stage, 0 on a rank without the
    // head. The gradients are that share's.
    double runStep(const Feed& feed, SpanSink* sink, CommunicationSink* comms = nullptr);

    // The summed token loss of `batches` validation microbatches through every stage (forward
    // only, nothing kept); the rank with the head returns it, the others 0.
    double evaluate(int batches, const Feed& feed);

    const PipelineProgram& program() const { return program_; }
    // Receives the gradient ranges each step completes, as the backward completes them.
    void setGradientListener(GradientListener* listener) { listener_ = listener; }

private:
    struct InFlightSend {
        Buffer buffer; // declared first: the request (which waits) goes before it
        Request request;
        CommunicationSpan span;
    };
    Buffer receive(const PipelineOp& op, MemoryCategory category, CommunicationSink* comms);
    void send(const PipelineOp& op, Buffer buffer, CommunicationSink* comms);
    void reapSends(bool wait, CommunicationSink* comms);
    MicrobatchState& stateOf(const PipelineOp& op);

    GptModel& model_;
    PipelineProgram program_;
    int rank_;
    int dataParallel_;
    Communicator* pipeline_;
    GradientListener* listener_ = nullptr;
    // Per chunk, the microbatches whose backward (B or B+W) and W ops come last: after them a
    // gradient range receives nothing more this step.
    std::vector<int> lastBackward_, lastWeight_;
    std::vector<MicrobatchState> states_; // [chunk * microbatches + microbatch]
    std::deque<InFlightSend> sends_;
    std::vector<std::int32_t> inputs_, targets_;
};

} // namespace shardscope
