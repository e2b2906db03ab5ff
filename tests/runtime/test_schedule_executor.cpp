#include "core/error.h"
#include "engine_test_support.h"
#include "kernels/cpu/cpu_ops.h"
#include "plan/estimate.h"
#include "runtime/data.h"
#include "runtime/schedule_executor.h"

#include <cmath>
#include <gtest/gtest.h>

namespace shardscope {
namespace {

using testing::tinyGpt;

struct Measured {
    double loss = 0;
    MemoryUsage peak;
    std::vector<float> grads;
    std::int64_t backendAllocationsAfterFirst = 0, backendAllocationsAfterLast = 0;
};

Measured runSteps(const ModelSpec& m, const ParallelConfig& p, int steps = 1) {
    auto ops = kernels::makeCpuOps(2);
    DeviceAllocator memory(*ops);
    GptModel model(m, p.microBatch, *ops, memory, {p.recompute, p.recomputeLayers},
                   !p.flashAttention);
    model.initialize(17);
    DataSpec spec;
    spec.format = DataFormat::Synthetic;
    spec.vocab = m.vocab;
    spec.seqLen = m.seqLen;
    const auto data = Dataset::open(spec);
    ScheduleExecutor executor(model, buildPipelineProgram({p.schedule, 1, p.microbatches(), 1}));
    Measured out;
    for (int s = 0; s < steps; ++s) {
        out.loss = executor.runStep(
            [&](int mb, std::int32_t* in, std::int32_t* tg) {
                data->batch(Split::Train, s, mb, p.microBatch, in, tg);
            },
            nullptr);
        if (s == 0)
            out.backendAllocationsAfterFirst = memory.backendAllocations();
    }
    out.backendAllocationsAfterLast = memory.backendAllocations();
    out.peak = memory.peak();
    out.grads.assign(kernels::asFloats(model.gradients()),
                     kernels::asFloats(model.gradients()) + model.parameterCount());
    return out;
}

ParallelConfig layout(int micro, int global, Recompute r, bool flash,
                      PipelineSchedule s = PipelineSchedule::OneFOneB, int recomputeLayers = 0) {
    ParallelConfig p;
    p.recomputeLayers = recomputeLayers;
    p.precision = PrecisionPolicy::fp32();
    p.microBatch = micro;
    p.globalBatch = global;
    p.recompute = r;
    p.flashAttention = flash;
    p.schedule = s;
    return p;
}

// The planner's prediction for the same model and layout, category by category.
TEST(ScheduleExecutor, MeasuredMemoryEqualsThePlannersPrediction) {
    const ModelSpec m = tinyGpt(3, 64, 4, 96, 32);
    const std::vector<ParallelConfig> layouts = {
        layout(2, 4, Recompute::None, false),
        layout(2, 4, Recompute::None, true),
        layout(4, 4, Recompute::Selective, false),
        layout(2, 4, Recompute::Full, true),
        layout(1, 4, Recompute::None, true, PipelineSchedule::GPipe),
        // Full recompute of the first layer, or the first two, of the three.
        layout(2, 4, Recompute::Full, false, PipelineSchedule::OneFOneB, 1),
        layout(2, 4, Recompute::Full, true, PipelineSchedule::GPipe, 2),
    };
    for (const ParallelConfig& p : layouts) {
        SCOPED_TRACE(layoutSummary(p) + (p.flashAttention ? " flash" : " probs stored"));
        const Measured got = runSteps(m, p);
        const MemoryBreakdown want =
            memoryForStage({m, ClusterSpec{}, p, TrainConfig{}, Assumptions{}}, 0);
        EXPECT_EQ(double(got.peak[MemoryCategory::Parameters]), want.parameters);
        EXPECT_EQ(double(got.peak[MemoryCategory::Gradients]), want.gradients);
        EXPECT_EQ(double(got.peak[MemoryCategory::Optimizer]), 0.0); // no optimizer here
        const double activations = double(got.peak[MemoryCategory::Activations]);
        EXPECT_NEAR(activations / want.activations, 1.0, 0.10)
            << "measured " << activations << " B, planned " << want.activations << " B";
    }
}

TEST(ScheduleExecutor, AllocatesNothingAfterTheFirstStep) {
    const ModelSpec m = tinyGpt();
    for (PipelineSchedule s : {PipelineSchedule::OneFOneB, PipelineSchedule::ZeroBubble}) {
        const Measured got = runSteps(m, layout(2, 6, Recompute::Full, true, s), 3);
        EXPECT_EQ(got.backendAllocationsAfterLast, got.backendAllocationsAfterFirst) << toString(s);
    }
}

TEST(ScheduleExecutor, EverySingleStageScheduleGivesTheSameStep) {
    const ModelSpec m = tinyGpt(2, 16, 2, 29, 8);
    const Measured base = runSteps(m, layout(2, 8, Recompute::None, true));
    for (PipelineSchedule s :
         {PipelineSchedule::Naive, PipelineSchedule::GPipe, PipelineSchedule::ZeroBubble}) {
        const Measured other = runSteps(m, layout(2, 8, Recompute::None, true, s));
        EXPECT_NEAR(other.loss, base.loss, 1e-6 * std::fabs(base.loss)) << toString(s);
        double worst = 0, scale = 0;
        for (std::size_t i = 0; i < base.grads.size(); ++i) {
            worst = std::max(worst, double(std::fabs(other.grads[i] - base.grads[i])));
            scale = std::max(scale, double(std::fabs(base.grads[i])));
        }
        EXPECT_LE(worst, 1e-5 * scale) << toString(s);
    }
}

TEST(ScheduleExecutor, RefusesProgramsWithTransfers) {
    const ModelSpec m = tinyGpt();
    auto ops = kernels::makeCpuOps(1);
    DeviceAllocator memory(*ops);
    GptModel model(m, 1, *ops, memory, Recompute::None, false);
    EXPECT_THROW(
        ScheduleExecutor(model, buildPipelineProgram({PipelineSchedule::OneFOneB, 2, 4, 1})),
        InputError);
}

} // namespace
} // namespace shardscope
