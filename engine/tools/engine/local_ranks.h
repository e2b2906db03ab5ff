// Starting the ranks of a job on this host (`train --ranks N`): mpirun, kept off the network.
//
// mpirun (Open MPI 4.1) binds its control listener to every interface whatever its options say,
// so options alone cannot keep a local run on loopback. A network namespace of its own, holding
// nothing but a loopback interface, can: what mpirun and the ranks listen on there is reachable
// from their own process tree only. A telemetry collector must then be a Unix socket (a file
// reaches into the namespace; the host's loopback does not).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace shardscope::engine_cli {

// Runs `mpirun` with `arguments` (everything after the program name) in a private network
// namespace, and ends this process as mpirun ends (its exit code, or its signal). Signals sent
// to this process (the app's stop and kill) are passed on to mpirun. Where the namespace cannot
// be had (a TCP `collector`; a kernel or container that allows no namespaces) mpirun runs on the
// host's network instead, and a note on `err` says why. Throws InputError when mpirun cannot be
// started.
[[noreturn]] void runLocalRanks(const std::vector<std::string>& arguments,
                                const std::string& collector, std::ostream& err);

} // namespace shardscope::engine_cli
