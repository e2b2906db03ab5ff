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

// Updates the parameters this rank owns by the model's shard layout and keeps moments for those
// only: the whole model, or under ZeRO the shards of it a replica owns, stored one after another
// as the layout stores them (padding included).
class AdamW {
public:
    AdamW(GptModel& model, kernels::Ops& ops, DeviceAllocator& memory, const TrainConfig& train);

    double gradientNorm() const; // L2 norm of all gradients
    // Sum of squares of the owned gradients of the tensors `counted` says yes to (all when it is
    // empty), for a global norm summed over ranks that counts each shared tensor once. Summed on
    // the device and read once (the host waits for the step's work here).
    double gradientSquares(const std::function<bool(const ParameterTensor&)>& counted) const;
    std::size_t size() const { return layout_.stored(); } // floats of each moment
    // The scale clipping applies to a gradient of this norm (1 when within gradClip).
    double clipScale(double norm) const;
    // One update at learning rate lr, gradients multiplied by gradScale first.
    void step(double lr, double gradScale);

    std::int64_t steps() const { return t_; }
    void setSteps(std::int64_t t) { t_ = t; }
    float* firstMoment() const { return m_.f(); }
    float* secondMoment() const { return v_.f(); }
    // The fp32 master weights of what this rank owns, in the moments' order; null when the
    // model's weights are fp32.
    float* masterWeights() const { return master_ ? master_.f() : nullptr; }
    // Sets them from host values in that order (a checkpoint's), or from the whole flat buffer's
    // (the initialisation).
    void setMasterWeights(const float* stored);
    void setMasterWeightsFromWhole(const float* whole);
    // From the model's initial values for a seed, computed for this rank's shards only.
    void initializeMasterWeights(std::uint64_t seed);
    // Rewrites the model's working weights this rank owns from the master weights (mixed
    // precision's resume; a ZeRO replica gathers the rest after).
    void writeWorkingWeights() const;

private:
    GptModel& model_;
    kernels::Ops& ops_;
    DeviceAllocator& memory_;
    TrainConfig train_;
    const ShardLayout& layout_;
    Buffer m_, v_, master_;
    std::int64_t t_ = 0;
};

} // namespace shardscope
