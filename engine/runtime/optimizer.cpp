#include "optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace shardscope {

double learningRateAt(const TrainConfig& t, std::int64_t step, std::int64_t totalSteps) {
    if (step < t.warmupSteps)
        return t.learningRate * double(step + 1) / double(t.warmupSteps);
    const std::int64_t decaySteps = totalSteps - t.warmupSteps;
    if (decaySteps <= 1)
        return t.learningRate;
    const double progress =
        std::clamp(double(step - t.warmupSteps) / double(decaySteps - 1), 0.0, 1.0);
    return t.minLearningRate + 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) *
                                   (t.learningRate - t.minLearningRate);
}

AdamW::AdamW(GptModel& model, kernels::Ops& ops, DeviceAllocator& memory, const TrainConfig& train)
    : model_(model), ops_(ops), train_(train),
      m_(memory.floats(MemoryCategory::Optimizer, model.parameterCount())),
      v_(memory.floats(MemoryCategory::Optimizer, model.parameterCount())) {
    ops_.zero(m_.f(), model.parameterCount());
    ops_.zero(v_.f(), model.parameterCount());
}

double AdamW::gradientNorm() const {
    return std::sqrt(ops_.sumOfSquares(model_.gradients(), model_.parameterCount()));
}

double AdamW::gradientSquares(std::size_t skip) const {
    if (skip == GptModel::npos)
        return ops_.sumOfSquares(model_.gradients(), model_.parameterCount());
    const ParameterTensor& t = model_.tensors().at(skip);
    const float* g = model_.gradients();
    return ops_.sumOfSquares(g, t.offset) +
           ops_.sumOfSquares(g + t.offset + t.count, model_.parameterCount() - t.offset - t.count);
}

double AdamW::clipScale(double norm) const {
    if (train_.gradClip <= 0 || norm <= train_.gradClip)
        return 1.0;
    return train_.gradClip / (norm + 1e-6); // PyTorch's clip_grad_norm_
}

void AdamW::step(double lr, double gradScale) {
    ++t_;
    for (const ParameterTensor& p : model_.tensors()) {
        const float decay = p.decay ? static_cast<float>(train_.weightDecay) : 0.0f;
        ops_.adamwUpdate(model_.parameters() + p.offset, model_.gradients() + p.offset,
                         m_.f() + p.offset, v_.f() + p.offset, p.count, static_cast<float>(lr),
                         static_cast<float>(train_.beta1), static_cast<float>(train_.beta2),
                         static_cast<float>(train_.epsilon), decay, static_cast<float>(gradScale),
                         static_cast<int>(t_));
    }
}

} // namespace shardscope
