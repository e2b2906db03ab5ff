// The whole engine on the CUDA backend, one process: the small test model trains on the GPU as on
// the CPU (fp32 and bf16 mixed precision, stored and recomputed attention), memory per category
// counted as on the CPU, and a GPU checkpoint resumes bit for bit on the GPU and closely on the
// CPU. Label gpu: skips where there is no GPU.
#include "cuda_test_support.h"
#include "engine_run_support.h"
#include "engine_test_support.h"
#include "kernels/cuda/cuda_ops.h"
#include "runtime/trainer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace shardscope {
namespace {

using nlohmann::json;
using testing::TempDir;
using testing::tinyRun;
using testing::engine_runs::eventNamed;
using testing::engine_runs::eventsOf;

struct Case {
    const char* name;
    PrecisionPolicy precision;
    bool recompute;
    double tolerance; // of the loss, relative, per step
};

// fp32: the backends sum in other orders (GEMM tiles, block reductions), about 1e-6 of a loss a
// step. bf16: a rounding that goes the other way changes a bf16 value by 2^-8, and the
// differences compound over steps; the layouts' bf16 tolerance (1e-3), with room for 20 steps.
const Case kCases[] = {
    {"fp32", PrecisionPolicy::fp32(), false, 1e-4},
    {"bf16 mixed", PrecisionPolicy::bf16Mixed(), false, 5e-3},
    {"bf16 with bf16 gradients, attention recomputed", PrecisionPolicy::bf16Mixed(false), true,
     5e-3},
};

TEST(CudaTraining, TheTestModelTrainsAsOnTheCpuWithTheSameMemory) {
    SKIP_WITHOUT_GPU();
    TempDir dir;
    std::ostringstream log;
    auto gpu = cuda::makeCudaOps(0);
    for (const Case& k : kCases) {
        SCOPED_TRACE(k.name);
        RunConfig c = tinyRun(dir / (std::string(k.name) + "-cpu"), 20);
        c.parallel.precision = k.precision;
        c.parallel.recompute = k.recompute ? Recompute::Selective : Recompute::None;
        const TrainResult cpu = train(c, log);
        ASSERT_EQ(cpu.status, RunStatus::Completed) << cpu.message;
        c.engine.runDir = (dir / (std::string(k.name) + "-gpu")).string();
        const TrainResult onGpu = train(c, log, nullptr, gpu.get());
        ASSERT_EQ(onGpu.status, RunStatus::Completed) << onGpu.message << log.str();
        ASSERT_EQ(onGpu.steps.size(), cpu.steps.size());
        for (std::size_t i = 0; i < cpu.steps.size(); ++i) {
            EXPECT_NEAR(onGpu.steps[i].loss, cpu.steps[i].loss,
                        k.tolerance * std::fabs(cpu.steps[i].loss))
                << "step " << i + 1;
            EXPECT_NEAR(onGpu.steps[i].gradNorm, cpu.steps[i].gradNorm,
                        10 * k.tolerance * cpu.steps[i].gradNorm)
                << "step " << i + 1;
        }
        EXPECT_LT(onGpu.steps.back().loss, onGpu.steps.front().loss - 0.3) << "it did not learn";
        // The same buffers through the same allocator: every category's peak is the CPU's.
        const json cpuPeak = eventNamed(eventsOf(cpu.runDir, 0), "end")["memory_peak"];
        const json gpuPeak = eventNamed(eventsOf(onGpu.runDir, 0), "end")["memory_peak"];
        for (const char* category :
             {"parameters", "gradients", "optimizer", "activations", "workspace"})
            EXPECT_EQ(gpuPeak[category], cpuPeak[category]) << category;
    }
}

// A GPU checkpoint: the GPU resumes it bit for bit, and the CPU resumes it to within the
// backends' difference (the checkpoint holds fp32 master weights and moments, the same bytes).
TEST(CudaTraining, AGpuCheckpointResumesOnTheGpuBitForBitAndOnTheCpu) {
    SKIP_WITHOUT_GPU();
    TempDir dir;
    std::ostringstream log;
    auto gpu = cuda::makeCudaOps(0);
    RunConfig whole = tinyRun(dir / "whole", 6);
    whole.parallel.precision = PrecisionPolicy::bf16Mixed();
    const TrainResult a = train(whole, log, nullptr, gpu.get());
    ASSERT_EQ(a.steps.size(), 6u) << a.message;

    RunConfig part = whole;
    part.engine.runDir = (dir / "part").string();
    part.engine.stopAfter = 3;
    ASSERT_EQ(train(part, log, nullptr, gpu.get()).status, RunStatus::Interrupted);
    part.engine.stopAfter = 0;
    part.engine.resume = true;
    std::filesystem::copy(dir / "part", dir / "on-cpu", std::filesystem::copy_options::recursive);
    const TrainResult rest = train(part, log, nullptr, gpu.get());
    ASSERT_EQ(rest.steps.size(), 3u) << rest.message;
    for (std::size_t i = 0; i < 3; ++i)
        EXPECT_EQ(rest.steps[i].loss, a.steps[i + 3].loss) << "step " << i + 4;

    part.engine.runDir = (dir / "on-cpu").string();
    const TrainResult onCpu = train(part, log);
    ASSERT_EQ(onCpu.steps.size(), 3u) << onCpu.message;
    for (std::size_t i = 0; i < 3; ++i)
        EXPECT_NEAR(onCpu.steps[i].loss, a.steps[i + 3].loss, 5e-3 * a.steps[i + 3].loss)
            << "step " << i + 4;
}

} // namespace
} // namespace shardscope
