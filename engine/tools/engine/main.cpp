#include "engine_commands.h"

#include <cstdlib>
#include <iostream>
#include <unistd.h>

// OpenMP (our loops) and OpenBLAS (the GEMMs) each keep a thread pool. Left at their defaults,
// idle threads of one pool spin while the other pool works, and on a machine with few cores
// they take turns instead of working: a training step measured 30-50% slower. Both libraries
// read their settings when they load, before main(), so the engine sets them and starts again.
// A value the user set is kept.
static void settleThreadPools(char** argv) {
    if (std::getenv("SHARDSCOPE_THREAD_POOLS_SET"))
        return;
    ::setenv("SHARDSCOPE_THREAD_POOLS_SET", "1", 1);
    ::setenv("OMP_WAIT_POLICY", "passive", 0);   // sleep between parallel loops
    ::setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0); // spin briefly (2^4 cycles) between GEMMs
    ::execv("/proc/self/exe", argv);             // on failure: run as we are
}

int main(int argc, char** argv) {
    settleThreadPools(argv);
    return shardscope::engine_cli::runEngine(argc, argv, std::cout, std::cerr);
}
