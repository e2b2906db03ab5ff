// A run's measured spans as Chrome trace JSON (Perfetto, chrome://tracing): one process per rank
// named by its mesh coordinate, compute and waits on the rank's thread, transfers and collectives
// as async slices per axis, every time on rank 0's clock. Streamed from the files, so a long run
// costs no memory beyond one line.
#pragma once

#include "run_files.h"

#include <cstdint>
#include <ostream>

namespace shardscope::watch {

struct TraceCounts {
    std::int64_t spans = 0;
    std::int64_t badLines = 0;
};

TraceCounts writeRunTrace(const RunFiles& files, std::ostream& out);

} // namespace shardscope::watch
