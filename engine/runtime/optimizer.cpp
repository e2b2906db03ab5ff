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
    : model_(model), ops_(ops), memory_(memory), train_(train), layout_(model.shardLayout()),
      m_(memory.floats(MemoryCategory::Optimizer, size())),
      v_(memory.floats(MemoryCategory::Optimizer, size())) {
    ops_.zero(m_.f(), size());
    ops_.zero(v_.f(), size());
    if (model.parameters().type != kernels::DType::F32) {
        master_ = memory.floats(MemoryCategory::Optimizer, std::max<std::size_t>(1, size()));
        ops_.zero(master_.f(), size());
    }
}

void AdamW::setMasterWeights(const float* stored) {
    if (master_)
        ops_.copyToDevice(master_.f(), stored, size() * sizeof(float));
}

void AdamW::setMasterWeightsFromWhole(const float* whole) {
    if (!master_)
        return;
    if (!layout_.sharded())
        return setMasterWeights(whole);
    const std::vector<float> stored = layout_.pack(whole);
    setMasterWeights(stored.data());
}

void AdamW::initializeMasterWeights(std::uint64_t seed) {
    if (!master_)
        return;
    forEachChunk(layout_.owned(), [&](std::size_t flat, std::size_t n, float* host) {
        model_.initialValues(seed, flat, n, host);
        ops_.copyToDevice(master_.f() + layout_.storedIndex(flat), host, n * sizeof(float));
    });
}

void AdamW::writeWorkingWeights() const {
    if (!master_)
        return;
    for (const ShardLayout::Piece& p : layout_.owned())
        ops_.copy(model_.parameterAt(p.flat), master_.f() + p.stored, p.count);
}

double AdamW::gradientNorm() const {
    return std::sqrt(gradientSquares({}));
}

double AdamW::gradientSquares(const std::function<bool(const ParameterTensor&)>& counted) const {
    // Summed on the device, run by run, and read once.
    Buffer sum = memory_.allocate(MemoryCategory::Workspace, sizeof(double));
    ops_.zeroDoubles(sum.as<double>(), 1);
    auto add = [&](std::size_t a, std::size_t b) {
        for (const ShardLayout::Piece& p : layout_.owned(a, b))
            ops_.sumOfSquaresAccumulate(model_.gradientAt(p.flat), p.count, sum.as<double>());
    };
    if (!counted) {
        add(0, model_.parameterCount());
    } else { // runs of adjacent counted tensors, each summed in one call
        std::size_t runBegin = 0, runEnd = 0;
        auto flush = [&] {
            add(runBegin, runEnd);
            runBegin = runEnd = 0;
        };
        for (const ParameterTensor& t : model_.tensors()) {
            if (!counted(t)) {
                flush();
                continue;
            }
            if (runEnd != t.offset)
                flush();
            if (runBegin == runEnd)
                runBegin = t.offset;
            runEnd = t.offset + t.count;
        }
        flush();
    }
    double squares = 0;
    ops_.copyToHost(&squares, sum.as<double>(), sizeof(double));
    return squares;
}

double AdamW::clipScale(double norm) const {
    if (train_.gradClip <= 0 || norm <= train_.gradClip)
        return 1.0;
    return train_.gradClip / (norm + 1e-6); // PyTorch's clip_grad_norm_
}

void AdamW::step(double lr, double gradScale) {
    ++t_;
    for (const ParameterTensor& t : model_.tensors()) {
        const float decay = t.decay ? static_cast<float>(train_.weightDecay) : 0.0f;
        for (const ShardLayout::Piece& p : layout_.owned(t.offset, t.offset + t.count)) {
            // Mixed precision: the update goes to the fp32 master, which rewrites the working
            // copy.
            const kernels::Ptr at = model_.parameterAt(p.flat);
            float* weights = master_ ? master_.f() + p.stored : kernels::asFloats(at);
            ops_.adamwUpdate(
                weights, model_.gradientAt(p.flat), m_.f() + p.stored, v_.f() + p.stored, p.count,
                static_cast<float>(lr), static_cast<float>(train_.beta1),
                static_cast<float>(train_.beta2), static_cast<float>(train_.epsilon), decay,
                static_cast<float>(gradScale), static_cast<int>(t_), master_ ? at : kernels::Ptr{});
        }
    }
}

} // namespace shardscope
