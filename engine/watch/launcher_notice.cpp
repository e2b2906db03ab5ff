#include "launcher_notice.h"

#include <regex>

namespace shardscope::watch {

std::optional<LauncherNotice> parseLauncherNotice(std::string_view line) {
    if (line.size() > 1024)
        return std::nullopt;
    const std::string text(line);
    // Open MPI 4.1, help-errmgr-base.txt: "%s noticed that process rank %s with PID %s on node
    // %s exited on signal %d (%s)." (the signal's name is left out where it has none).
    static const std::regex mpirun(
        R"((\S+) noticed that process rank (\d{1,7}) with PID (\d{1,10}) )"
        R"(on node (\S+) exited on signal (\d{1,3})( \(([^)]*)\))?)");
    // Slurm's srun: "srun: error: NODE: task N: Killed" (or the signal's description).
    static const std::regex srun(R"(srun: error: ([^:\s]+): task (\d{1,7}): (.+))");
    std::smatch m;
    LauncherNotice n;
    if (std::regex_search(text, m, mpirun)) {
        n.rank = std::stoi(m[2]);
        n.pid = std::stol(m[3]);
        n.host = m[4];
        n.how =
            "signal " + std::string(m[5]) + (m[7].matched ? " (" + std::string(m[7]) + ")" : "");
        n.launcher = m[1];
        n.message = "Rank " + std::to_string(n.rank) +
                    (n.pid > 0 ? " (pid " + std::to_string(n.pid) + ")" : "") + " on node " +
                    n.host + " ended on " + n.how + " without a message, " + n.launcher +
                    " reports";
        return n;
    }
    if (std::regex_search(text, m, srun)) {
        n.rank = std::stoi(m[2]);
        n.host = m[1];
        n.how = m[3];
        while (!n.how.empty() && (n.how.back() == '\r' || n.how.back() == ' '))
            n.how.pop_back();
        if (n.how.starts_with("Exited with exit code"))
            return std::nullopt; // a rank that exits on purpose has said why in its telemetry
        n.launcher = "srun";
        n.message = "Rank " + std::to_string(n.rank) + " on node " + n.host +
                    " ended without a message (" + n.how + "), srun reports";
        return n;
    }
    return std::nullopt;
}

} // namespace shardscope::watch
