// AdamW with decoupled weight decay (none on norms and biases), clipping by the global gradient
// norm, and a linear-warmup + cosine learning-rate schedule. When the model's weights are bf16
// (mixed precision), the optimizer keeps fp32 master weights beside its moments (Micikevicius et
// al. 2018), updates them, and rewrites the model's weights from them.
#pragma once

#include "core/train_config.h"
#include "device_memory.h"
#include "gpt.h"

#include <cstdint>
#include <functional>

namespace shardscope {

// The learning rate of 0-based `step` out of `totalSteps`: linear warmup over warmupSteps to
// learningRate, then cosine decay to minLearningRate at the last step.
double learningRateAt(const TrainConfig& train, std::int64_t step, std::int64_t totalSteps);

// Updates the parameters in [begin, end) of the model's flat buffer and keeps moments for those
// only: the whole model, or the slice a ZeRO rank owns.
class AdamW {
public:
    AdamW(GptModel& model, kernels::Ops& ops, DeviceAllocator& memory, const TrainConfig& train,
          std::size_t begin = 0, std::size_t end = GptModel::npos);

    double gradientNorm() const; // L2 norm of all gradients
    // Sum of squares of the owned gradients of the tensors `counted` says yes to (all when it is
    // empty), for a global norm summed over ranks that counts each shared tensor once. Summed on
    // the device and read once (the host waits for the step's work here).
    double gradientSquares(const std::function<bool(const ParameterTensor&)>& counted) const;
    std::size_t begin() const { return begin_; }
    std::size_t size() const { return end_ - begin_; } // floats of each moment
    // The scale clipping applies to a gradient of this norm (1 when within gradClip).
    double clipScale(double norm) const;
    // One update at learning rate lr, gradients multiplied by gradScale first.
    void step(double lr, double gradScale);

    std::int64_t steps() const { return t_; }
    void setSteps(std::int64_t t) { t_ = t; }
    float* firstMoment() const { return m_.f(); }
    float* secondMoment() const { return v_.f(); }
    // The fp32 master weights of [begin, begin + size()), null when the model's are fp32.
    float* masterWeights() const { return master_ ? master_.f() : nullptr; }
    // Sets them from host values (the fp32 initialisation or a checkpoint's parameters).
    void setMasterWeights(const float* values);

private:
    GptModel& model_;
    kernels::Ops& ops_;
    DeviceAllocator& memory_;
    TrainConfig train_;
    std::size_t begin_, end_;
    Buffer m_, v_, master_;
    std::int64_t t_ = 0;
};

} // namespace shardscope
