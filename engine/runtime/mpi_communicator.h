// Communicators between CPU processes over MPI (OpenMPI on Debian). One MpiSession per process
// initialises MPI with thread support and finalises it.
#pragma once

#include "communicator.h"

#include <memory>
#include <string>

namespace shardscope {

class MpiSession {
public:
    MpiSession(int* argc, char*** argv); // MPI_Init_thread(MPI_THREAD_FUNNELED)
    ~MpiSession();                       // MPI_Finalize
    MpiSession(const MpiSession&) = delete;
    MpiSession& operator=(const MpiSession&) = delete;

    std::unique_ptr<Communicator> world() const;
    static bool launchedByMpi(); // the environment of mpirun or srun is present
    // The MPI library's own version line ("Open MPI v4.1.4, ..."); callable before MPI_Init.
    static std::string libraryVersion();
};

} // namespace shardscope
