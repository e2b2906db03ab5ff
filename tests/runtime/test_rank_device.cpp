#include "core/error.h"
#include "core/presets.h"
#include "runtime/rank_device.h"

#include <cstdlib>
#include <gtest/gtest.h>

namespace shardscope {
namespace {

DeviceReport gpusNamed(const std::string& name, int count) {
    DeviceReport r;
    r.builtWithCuda = true;
    for (int i = 0; i < count; ++i)
        r.devices.push_back({i, name, 80e9, 132, "9.0", matchGpuPreset(name)});
    return r;
}

TEST(RankDevice, ACpuRankComputesOnItsThreads) {
    const RankDevice d = chooseDevice("cpu", 1, 2, 3, Precision::Fp32, {});
    EXPECT_EQ(d.kind, "cpu");
    EXPECT_EQ(d.name, "CPU, 3 threads");
    EXPECT_EQ(d.localRank, 1);
    EXPECT_GT(d.peakFlops, 0);
    EXPECT_FALSE(d.peakFormula.empty());
}

// Eight ranks on a host of four GPUs: local rank modulo the GPUs, as torchrun places them.
TEST(RankDevice, GpusAreDealtOutByLocalRank) {
    const DeviceReport h100s = gpusNamed("NVIDIA H100 80GB HBM3", 4);
    for (int local = 0; local < 8; ++local)
        EXPECT_EQ(chooseDevice("cuda", local, 8, 1, Precision::Bf16, h100s).index, local % 4);
    // NVIDIA's H100 SXM5 whitepaper: 989.4 dense BF16 TFLOP/s (1,979 with sparsity).
    const RankDevice d = chooseDevice("cuda", 0, 1, 1, Precision::Bf16, h100s);
    EXPECT_NEAR(d.peakFlops, 989.4e12, 1e12);
    EXPECT_NE(d.peakFormula.find("TFLOP/s"), std::string::npos) << d.peakFormula;
}

TEST(RankDevice, AHostWithoutGpusSaysWhyAndHowToGoOn) {
    DeviceReport none;
    none.reason = "the CUDA runtime reports no GPU";
    try {
        chooseDevice("cuda", 0, 1, 1, Precision::Bf16, none);
        FAIL() << "a GPU rank on a host without GPUs";
    } catch (const InputError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("reports no GPU"), std::string::npos) << m;
        EXPECT_NE(m.find("--device cpu"), std::string::npos) << m;
    }
}

TEST(RankDevice, AGpuWithoutAPresetAsksForItsPeak) {
    const RankDevice d =
        chooseDevice("cuda", 0, 1, 1, Precision::Bf16, gpusNamed("Prototype Accelerator X", 1));
    EXPECT_EQ(d.peakFlops, 0);
    EXPECT_NE(d.peakFormula.find("--peak-tflops"), std::string::npos) << d.peakFormula;
}

TEST(RankDevice, TheLocalRankComesFromTheLauncher) {
    for (const char* v :
         {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
        ::unsetenv(v);
    EXPECT_EQ(localRankOnThisHost(), 0); // no launcher
    ::setenv("LOCAL_RANK", "5", 1);      // torchrun
    EXPECT_EQ(localRankOnThisHost(), 5);
    ::setenv("SLURM_LOCALID", "2", 1); // srun, ahead of a torchrun variable left behind
    EXPECT_EQ(localRankOnThisHost(), 2);
    ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
    EXPECT_EQ(localRankOnThisHost(), 3);
    for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"})
        ::unsetenv(v);
}

} // namespace
} // namespace shardscope
