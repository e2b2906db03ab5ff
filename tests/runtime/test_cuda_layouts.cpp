// The engine on GPUs across ranks (mpirun, started by --ranks), every rank on this host's GPU (or
// GPUs, by local rank), collectives staged through host memory: each layout against one GPU rank
// with the same seed and global batch, to the CPU layouts' tolerances (fp32 1e-5, bf16 1e-3 of
// the loss per step, test_engine_layouts.cpp), with memory per rank as the planner predicts.
// Label gpu: skips where there is no GPU.
#include "cuda_test_support.h"
#include "engine_run_support.h"

#include <gtest/gtest.h>
#include <string>
#include <vector>

namespace shardscope {
namespace {

using namespace testing::engine_runs;
using testing::TempDir;

const std::vector<Layout> kLayouts = {
    {"--dp 2", 2},
    {"--dp 2 --zero 3", 2},
    {"--tp 2", 2},
    {"--tp 2 --sp", 2},
    {"--pp 2 --schedule 1f1b", 2},
    {"--pp 2 --schedule zero-bubble", 2},
    {"--pp 2 --schedule zb-2p", 2},
};

json onTheGpu(json config) {
    config["engine"]["device"] = "cuda";
    return config;
}

TEST(CudaLayouts, EveryLayoutOnTheGpuGivesTheSingleGpuRankLosses) {
    SKIP_WITHOUT_GPU();
    TempDir dir;
    expectLayoutsGiveTheSingleRankLosses(dir, "fp32", onTheGpu(layoutConfig(true)), kLayouts, 1e-5);
    json bf16 = onTheGpu(layoutConfig(true));
    bf16["parallel"]["precision"] = "bf16";
    expectLayoutsGiveTheSingleRankLosses(dir, "bf16", bf16, kLayouts, 1e-3);
    // Every rank computed on the GPU (the runs are named run-<layout>-<name>).
    for (std::size_t l = 0; l < kLayouts.size(); ++l)
        for (int rank = 0; rank < kLayouts[l].ranks; ++rank)
            EXPECT_EQ(eventNamed(eventsOf(dir / ("run-" + std::to_string(l) + "-bf16"), rank),
                                 "start")["device"]["kind"],
                      "cuda")
                << kLayouts[l].flags << " rank " << rank;
}

} // namespace
} // namespace shardscope
