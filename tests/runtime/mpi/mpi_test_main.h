// The main of a gtest program run under mpirun: MPI is initialised once for every test, and the job
// fails when any rank's tests fail.
#pragma once

#include "runtime/mpi_communicator.h"

#include <gtest/gtest.h>
#include <memory>

namespace shardscope::testing {

inline std::unique_ptr<MpiSession>& mpiSession() {
    static std::unique_ptr<MpiSession> session;
    return session;
}

inline int runMpiTests(int argc, char** argv) {
    mpiSession() = std::make_unique<MpiSession>(&argc, &argv);
    ::testing::InitGoogleTest(&argc, argv);
    const int failed = RUN_ALL_TESTS();
    auto world = mpiSession()->world();
    float flag = float(failed != 0);
    world->allReduceSum(&flag, 1).wait();
    world.reset();
    mpiSession().reset();
    return flag > 0 ? 1 : 0;
}

} // namespace shardscope::testing
