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

AdamW::AdamW(GptModel& model, kernels::Ops& ops, DeviceAllocator& memory, const TrainConfig& train,
             std::size_t begin, std::size_t end)
    : model_(model), ops_(ops), train_(train), begin_(begin),
      end_(std::min(end, model.parameterCount())),
      m_(memory.floats(MemoryCategory::Optimizer, end_ - begin_)),
      v_(memory.floats(MemoryCategory::Optimizer, end_ - begin_)) {
    ops_.zero(m_.f(), size());
    ops_.zero(v_.f(), size());
}

double AdamW::gradientNorm() const {
    return std::sqrt(gradientSquares(GptModel::npos));
}

double AdamW::gradientSquares(std::size_t skip) const {
    const float* g = model_.gradients();
    if (skip == GptModel::npos)
        return ops_.sumOfSquares(g + begin_, size());
    const ParameterTensor& t = model_.tensors().at(skip);
    const std::size_t gapBegin = std::clamp(t.offset, begin_, end_),
                      gapEnd = std::clamp(t.offset + t.count, begin_, end_);
    return ops_.sumOfSquares(g + begin_, gapBegin - begin_) +
           ops_.sumOfSquares(g + gapEnd, end_ - gapEnd);
}

double AdamW::clipScale(double norm) const {
    if (train_.gradClip <= 0 || norm <= train_.gradClip)
        return 1.0;
    return train_.gradClip / (norm + 1e-6); // PyTorch's clip_grad_norm_
}

void AdamW::step(double lr, double gradScale) {
    ++t_;
    for (const ParameterTensor& p : model_.tensors()) {
        const std::size_t a = std::max(p.offset, begin_), b = std::min(p.offset + p.count, end_);
        if (a >= b)
            continue;
        const float decay = p.decay ? static_cast<float>(train_.weightDecay) : 0.0f;
        ops_.adamwUpdate(model_.parameters() + a, model_.gradients() + a, m_.f() + (a - begin_),
                         v_.f() + (a - begin_), b - a, static_cast<float>(lr),
                         static_cast<float>(train_.beta1), static_cast<float>(train_.beta2),
                         static_cast<float>(train_.epsilon), decay, static_cast<float>(gradScale),
                         static_cast<int>(t_));
    }
}

} // namespace shardscope
