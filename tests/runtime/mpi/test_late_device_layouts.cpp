// Run under mpirun with 4 ranks (CTest does). Each layout trains twice, on the CPU backend and on a
// device whose work runs late (tests/runtime/deferred_device.h): the losses and gradient norms are
// equal bit for bit. Every collective and transfer the layouts use (bucketed all-reduce, ZeRO's
// reduce-scatter and gathers, tensor-parallel sums, sequence-parallel gathers, pipeline sends and
// receives, the vocabulary-parallel loss) reads device buffers from the host, so one that started
// before the compute stream had run the work it depends on would read NaN or stale values.
#include "../deferred_device.h"
#include "../engine_test_support.h"
#include "mpi_test_main.h"
#include "runtime/mpi_communicator.h"
#include "runtime/trainer.h"

#include <gtest/gtest.h>
#include <random>
#include <sstream>

namespace shardscope {
namespace {

struct Layout {
    const char* name;
    int dp, tp, pp, zero;
    bool sequenceParallel = false;
    PipelineSchedule schedule = PipelineSchedule::OneFOneB;
    int vpp = 1;
};

// A directory every rank names the same: rank 0 draws it, the others receive it.
std::filesystem::path sharedDirectory(Communicator& world) {
    float id = world.rank() == 0 ? float(std::random_device{}() % (1u << 22)) : 0.0f;
    world.allReduceSum(&id, 1).wait();
    return std::filesystem::temp_directory_path() /
           ("shardscope-late-device-" + std::to_string(long(id)));
}

TEST(LateDevice, EveryLayoutTrainsAsOnTheCpu) {
    auto world = testing::mpiSession()->world();
    ASSERT_EQ(world->size(), 4) << "run with mpirun -n 4";
    const std::filesystem::path root = sharedDirectory(*world);
    const Layout layouts[] = {
        {"dp4, buckets all-reduced", 4, 1, 1, 0},
        {"dp4 ZeRO-3", 4, 1, 1, 3},
        {"dp2 ZeRO-1 x tp2 with sequence parallelism", 2, 2, 1, 1, true},
        {"dp2 ZeRO-1 x pp2 1F1B, the tied embedding summed across stages", 2, 1, 2, 1},
        {"tp2 x pp2 zero bubble", 1, 2, 2, 0, false, PipelineSchedule::ZeroBubble},
        {"dp2 x pp2 interleaved", 2, 1, 2, 0, false, PipelineSchedule::Interleaved, 2},
    };
    for (const Layout& l : layouts) {
        SCOPED_TRACE(l.name);
        RunConfig c = testing::tinyRun(root / "cpu", 3);
        c.model.layers = 4;
        c.parallel.dp = l.dp;
        c.parallel.tp = l.tp;
        c.parallel.pp = l.pp;
        c.parallel.vpp = l.vpp;
        c.parallel.zero = l.zero;
        c.parallel.sequenceParallel = l.sequenceParallel;
        c.parallel.schedule = l.schedule;
        c.parallel.microBatch = 2;
        c.parallel.globalBatch = 8;
        c.engine.threads = 1;
        const std::string tag = std::to_string(&l - layouts);
        c.engine.runDir = (root / ("cpu-" + tag)).string();
        std::ostringstream log;
        const TrainResult cpu = train(c, log, world.get());
        ASSERT_EQ(cpu.status, RunStatus::Completed) << log.str();

        // Work runs on one poll of an event in 3, or only when the host waits.
        for (int patience : {3, 1000000}) {
            SCOPED_TRACE("patience " + std::to_string(patience));
            c.engine.runDir = (root / ("late-" + tag + "-" + std::to_string(patience))).string();
            testing::DeferredOps late(1, patience);
            const TrainResult r = train(c, log, world.get(), &late);
            ASSERT_EQ(r.status, RunStatus::Completed) << log.str();
            ASSERT_EQ(r.steps.size(), cpu.steps.size());
            for (std::size_t i = 0; i < r.steps.size(); ++i) {
                EXPECT_EQ(r.steps[i].loss, cpu.steps[i].loss) << "step " << i + 1;
                EXPECT_EQ(r.steps[i].gradNorm, cpu.steps[i].gradNorm) << "step " << i + 1;
            }
        }
    }
    world->barrier();
    if (world->rank() == 0)
        std::filesystem::remove_all(root);
}

} // namespace
} // namespace shardscope

int main(int argc, char** argv) {
    return shardscope::testing::runMpiTests(argc, argv);
}
