// What a launcher prints when one of a job's processes dies: mpirun's "noticed that process rank
// 3 with PID 0 on node n2 exited on signal 9 (Killed)" and srun's "error: n2: task 3: Killed".
// For a rank on another host this is the only word of its death (the survivors' watchdogs see
// only their own host's processes), so the monitor reads the launcher's output for it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace shardscope::watch {

struct LauncherNotice {
    int rank = 0;
    std::string host;
    long pid = 0;         // 0 when the launcher does not say (mpirun often prints 0)
    std::string how;      // "signal 9 (Killed)", "Killed", "Segmentation fault"
    std::string launcher; // "mpirun", "srun"
    std::string message;  // one sentence: "Rank 3 on node n2 ended on signal 9 (Killed), ..."
};

// The notice in one line of a launcher's output, if it is one. Lines longer than 1 KiB are
// not notices.
std::optional<LauncherNotice> parseLauncherNotice(std::string_view line);

} // namespace shardscope::watch
