#include "engine_test_support.h"
#include "kernels/cpu/cpu_ops.h"
#include "runtime/optimizer.h"

#include <cmath>
#include <gtest/gtest.h>

namespace shardscope {
namespace {

TEST(LearningRate, WarmsUpLinearlyThenDecaysByCosineToTheMinimum) {
    TrainConfig t;
    t.learningRate = 1.0;
    t.minLearningRate = 0.1;
    t.warmupSteps = 4;
    EXPECT_DOUBLE_EQ(learningRateAt(t, 0, 14), 0.25);
    EXPECT_DOUBLE_EQ(learningRateAt(t, 3, 14), 1.0);
    EXPECT_DOUBLE_EQ(learningRateAt(t, 4, 14), 1.0);
    EXPECT_NEAR(learningRateAt(t, 13, 14), 0.1, 1e-12);
    EXPECT_NEAR(learningRateAt(t, 8, 14), 0.1 + 0.45 * (1 + std::cos(4 * M_PI / 9)), 1e-12);
    for (int s = 5; s < 14; ++s)
        EXPECT_LT(learningRateAt(t, s, 14), learningRateAt(t, s - 1, 14));
}

class AdamWTest : public ::testing::Test {
protected:
    std::unique_ptr<kernels::Ops> ops = kernels::makeCpuOps(1);
    DeviceAllocator memory{*ops};
    GptModel model{testing::tinyGpt(1, 8, 2, 7, 4), 1, *ops, memory, Recompute::None, false};
};

TEST_F(AdamWTest, StepMatchesTheClosedFormAndSkipsDecayOnNormsAndBiases) {
    TrainConfig t;
    t.weightDecay = 0.5;
    t.beta1 = 0.9;
    t.beta2 = 0.99;
    t.epsilon = 1e-8;
    AdamW adam(model, *ops, memory, t);
    for (std::size_t i = 0; i < model.parameterCount(); ++i) {
        kernels::asFloats(model.parameters())[i] = 1.0f;
        kernels::asFloats(model.gradients())[i] = 0.5f;
    }
    adam.step(0.1, 1.0);
    // Step 1: m-hat = g, v-hat = g^2, so the update is lr (sign(g) + wd w).
    for (const ParameterTensor& p : model.tensors()) {
        const float want = p.decay ? 1.0f - 0.1f * (1.0f + 0.5f) : 1.0f - 0.1f;
        EXPECT_NEAR(kernels::asFloats(model.parameters())[p.offset], want, 1e-6) << p.name;
    }
    EXPECT_EQ(adam.steps(), 1);
}

TEST_F(AdamWTest, ClipsByTheGlobalNorm) {
    TrainConfig t;
    t.gradClip = 1.0;
    AdamW adam(model, *ops, memory, t);
    for (std::size_t i = 0; i < model.parameterCount(); ++i)
        kernels::asFloats(model.gradients())[i] = 1.0f;
    const double norm = adam.gradientNorm();
    EXPECT_NEAR(norm, std::sqrt(double(model.parameterCount())), 1e-3);
    EXPECT_NEAR(adam.clipScale(norm), 1.0 / norm, 1e-6);
    EXPECT_EQ(adam.clipScale(0.5), 1.0);
    t.gradClip = 0;
    EXPECT_EQ(AdamW(model, *ops, memory, t).clipScale(1e9), 1.0);
}

} // namespace
} // namespace shardscope
