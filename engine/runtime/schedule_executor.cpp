#include "schedule_executor.h"

#include "core/error.h"

#include <utility>

namespace shardscope {

ScheduleExecutor::ScheduleExecutor(GptModel& model, PipelineProgram program, int rank,
                                   int dataParallel)
    : model_(model), program_(std::move(program)), rank_(rank), dataParallel_(dataParallel) {
    for (const PipelineOp& op : program_.ranks.at(std::size_t(rank)))
        if (op.send || op.recv)
            throw InputError("this engine runs one pipeline stage; a " +
                             std::to_string(program_.spec.stages) +
                             "-stage schedule needs the multi-rank engine");
    states_.resize(std::size_t(program_.spec.microbatches));
    for (const PipelineOp& op : program_.ranks[std::size_t(rank)]) {
        if (op.kind == OpKind::BackwardWeight)
            lastWeight_ = op.microbatch;
        else if (op.kind != OpKind::Forward)
            lastBackward_ = op.microbatch;
    }
    const std::size_t n = std::size_t(model.microBatch()) * std::size_t(model.shape().seqLen);
    inputs_.resize(n);
    targets_.resize(n);
}

double ScheduleExecutor::runStep(const Feed& feed, SpanSink* sink) {
    const int m = program_.spec.microbatches;
    const double tokens = double(inputs_.size()) * m * dataParallel_;
    const float lossGradScale = static_cast<float>(1.0 / tokens);
    model_.zeroGradients();
    double lossSum = 0;
    for (const PipelineOp& op : program_.ranks[std::size_t(rank_)]) {
        MicrobatchState& state = states_[std::size_t(op.microbatch)];
        if (sink)
            sink->setMicrobatch(op.microbatch);
        const bool completes = op.kind == OpKind::BackwardWeight ? op.microbatch == lastWeight_
                                                                 : op.microbatch == lastBackward_;
        model_.setGradientListener(op.kind != OpKind::Forward && completes ? listener_ : nullptr);
        switch (op.kind) {
        case OpKind::Forward:
            feed(op.microbatch, inputs_.data(), targets_.data());
            lossSum += model_.forward(state, inputs_.data(), targets_.data(), lossGradScale, sink);
            break;
        case OpKind::Backward:
            model_.backward(state, false, sink);
            state.reset();
            break;
        case OpKind::BackwardInput:
            model_.backward(state, true, sink);
            break;
        case OpKind::BackwardWeight:
            model_.backwardWeights(state, sink);
            state.reset();
            break;
        }
    }
    model_.setGradientListener(nullptr);
    if (sink)
        sink->setMicrobatch(-1);
    return lossSum / tokens;
}

} // namespace shardscope
