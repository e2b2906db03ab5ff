#include "schedule_executor.h"

#include "core/error.h"

#include <utility>

namespace shardscope {

ScheduleExecutor::ScheduleExecutor(GptModel& model, PipelineProgram program, int rank,
                                   int dataParallel, Communicator* pipeline)
    : model_(model), program_(std::move(program)), rank_(rank), dataParallel_(dataParallel),
      pipeline_(pipeline) {
    const int chunks = program_.spec.virtualStages;
    if (rank < 0 || rank >= program_.spec.stages)
        throw InputError("pipeline rank " + std::to_string(rank) + " is not in a " +
                         std::to_string(program_.spec.stages) + "-stage program");
    if (int(model.chunks().size()) != chunks)
        throw InputError("the model holds " + std::to_string(model.chunks().size()) +
                         " chunks and the program runs " + std::to_string(chunks) + " per rank");
    if (program_.spec.stages > 1 && (!pipeline || pipeline->size() != program_.spec.stages))
        throw InputError("a " + std::to_string(program_.spec.stages) +
                         "-stage schedule needs a pipeline group of as many ranks; launch the "
                         "engine with --ranks covering pp");
    states_.resize(std::size_t(chunks) * std::size_t(program_.spec.microbatches));
    lastBackward_.assign(std::size_t(chunks), -1);
    lastWeight_.assign(std::size_t(chunks), -1);
    for (const PipelineOp& op : program_.ranks[std::size_t(rank)]) {
        if (op.kind == OpKind::BackwardWeight)
            lastWeight_[std::size_t(op.chunk)] = op.microbatch;
        else if (op.kind != OpKind::Forward)
            lastBackward_[std::size_t(op.chunk)] = op.microbatch;
    }
    const std::size_t n = std::size_t(model.microBatch()) * std::size_t(model.shape().seqLen);
    inputs_.resize(n);
    targets_.resize(n);
}

MicrobatchState& ScheduleExecutor::stateOf(const PipelineOp& op) {
    return states_[std::size_t(op.chunk) * std::size_t(program_.spec.microbatches) +
                   std::size_t(op.microbatch)];
}

// One tag per (receiving virtual stage, microbatch, tensor), so transfers of one step never
// match the wrong receive; MPI keeps the order of equal tags, so wrapping below the bound every
// MPI library allows (32767) is safe across steps.
Buffer ScheduleExecutor::receive(const PipelineOp& op, MemoryCategory category,
                                 CommunicationSink* comms) {
    Buffer buffer = model_.activationBuffer(category);
    CommunicationSpan span;
    span.collective = "recv";
    span.axis = "pp";
    span.bytes = buffer.bytes();
    span.peer = op.recv->peer;
    span.tensor = op.recv->tensor == TensorKind::Activation ? "activation" : "gradient";
    span.microbatch = op.microbatch;
    span.chunk = op.chunk;
    span.start = span.waitStart = comms ? comms->now() : 0.0;
    span.waited = true;
    Request r = pipeline_->receive(buffer.ptr(), buffer.bytes() / kernels::sizeOf(buffer.type()),
                                   op.recv->peer);
    r.wait();
    if (comms) {
        span.end = comms->now();
        comms->communication(span);
    }
    return buffer;
}

void ScheduleExecutor::send(const PipelineOp& op, Buffer buffer, CommunicationSink* comms) {
    InFlightSend s;
    s.span.collective = "send";
    s.span.axis = "pp";
    s.span.bytes = buffer.bytes();
    s.span.peer = op.send->peer;
    s.span.tensor = op.send->tensor == TensorKind::Activation ? "activation" : "gradient";
    s.span.microbatch = op.microbatch;
    s.span.chunk = op.chunk;
    s.span.start = comms ? comms->now() : 0.0;
    s.request = pipeline_->send(buffer.ptr(), buffer.bytes() / kernels::sizeOf(buffer.type()),
                                op.send->peer);
    s.buffer = std::move(buffer);
    sends_.push_back(std::move(s));
}

// Lets go of the buffers of sends that have completed; with wait, of all of them.
void ScheduleExecutor::reapSends(bool wait, CommunicationSink* comms) {
    for (auto it = sends_.begin(); it != sends_.end();) {
        if (wait) {
            it->span.waitStart = comms ? comms->now() : 0.0;
            it->span.waited = true;
            it->request.wait();
        } else if (!it->request.done()) {
            ++it;
            continue;
        }
        if (comms) {
            it->span.end = comms->now();
            comms->communication(it->span);
        }
        it = sends_.erase(it);
    }
}

double ScheduleExecutor::runStep(const Feed& feed, SpanSink* sink, CommunicationSink* comms) {
    const int m = program_.spec.microbatches;
    const double tokens = double(inputs_.size()) * m * dataParallel_;
    const float lossGradScale = static_cast<float>(1.0 / tokens);
    model_.zeroGradients();
    const Buffer lossSum = model_.lossAccumulator();
    for (const PipelineOp& op : program_.ranks[std::size_t(rank_)]) {
        MicrobatchState& state = stateOf(op);
        const ModelChunk& chunk = model_.chunks()[std::size_t(op.chunk)];
        if (sink)
            sink->setMicrobatch(op.microbatch, op.chunk, spanKindName(op.kind));
        const std::size_t c = std::size_t(op.chunk);
        const bool completes = op.kind == OpKind::BackwardWeight
                                   ? op.microbatch == lastWeight_[c]
                                   : op.microbatch == lastBackward_[c];
        model_.setGradientListener(op.kind != OpKind::Forward && completes ? listener_ : nullptr);
        switch (op.kind) {
        case OpKind::Forward: {
            Buffer input;
            if (op.recv)
                input = receive(op, MemoryCategory::Activations, comms);
            if (chunk.embedding || chunk.head)
                feed(op.microbatch, inputs_.data(), targets_.data());
            model_.forwardChunk(state, op.chunk, inputs_.data(), targets_.data(), std::move(input),
                                lossGradScale, lossSum.as<double>(), sink);
            if (op.send)
                send(op, std::move(state.output), comms);
            break;
        }
        case OpKind::Backward:
        case OpKind::BackwardInput: {
            Buffer grad;
            if (op.recv)
                grad = receive(op, MemoryCategory::Workspace, comms);
            const bool split = op.kind == OpKind::BackwardInput;
            model_.backwardChunk(state, op.chunk, std::move(grad), split, sink);
            if (op.send)
                send(op, std::move(state.inputGrad), comms);
            if (!split)
                state.reset();
            break;
        }
        case OpKind::BackwardWeight:
            model_.backwardWeights(state, sink);
            state.reset();
            break;
        }
        reapSends(false, comms);
    }
    reapSends(true, comms);
    model_.setGradientListener(nullptr);
    if (sink)
        sink->setMicrobatch(-1);
    // The one read of the step: every op is enqueued by now.
    return model_.readScalar(lossSum) / tokens;
}

double ScheduleExecutor::evaluate(int batches, const Feed& feed) {
    const int p = program_.spec.stages, stages = program_.virtualStageCount();
    const Buffer loss = model_.lossAccumulator();
    for (int b = 0; b < batches; ++b)
        for (int stage = rank_; stage < stages; stage += p) {
            PipelineOp op; // the transfers of a forward at this virtual stage
            op.stage = stage;
            op.microbatch = b;
            op.chunk = stage / p;
            Buffer input;
            if (stage > 0) {
                op.recv = Transfer{(stage - 1) % p, TensorKind::Activation};
                input = receive(op, MemoryCategory::Workspace, nullptr);
            }
            const ModelChunk& chunk = model_.chunks()[std::size_t(op.chunk)];
            if (chunk.embedding || chunk.head)
                feed(b, inputs_.data(), targets_.data());
            Buffer output = model_.evaluateChunk(op.chunk, inputs_.data(), targets_.data(),
                                                 std::move(input), loss.as<double>());
            if (stage + 1 < stages) {
                op.send = Transfer{(stage + 1) % p, TensorKind::Activation};
                send(op, std::move(output), nullptr);
                reapSends(true, nullptr);
            }
        }
    return model_.readScalar(loss);
}

} // namespace shardscope
