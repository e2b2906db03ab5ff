// The launchers' words for a rank that died, as Open MPI 4.1's mpirun and Slurm's srun print them.
#include "watch/launcher_notice.h"

#include <gtest/gtest.h>

namespace shardscope::watch {
namespace {

TEST(LauncherNotice, MpirunsNoticeOfASignalNamesRankHostAndSignal) {
    // Printed by mpirun 4.1.4 when rank 3 of a local job was killed with -9.
    const auto n =
        parseLauncherNotice("mpirun noticed that process rank 3 with PID 0 on node vm exited on "
                            "signal 9 (Killed).");
    ASSERT_TRUE(n);
    EXPECT_EQ(n->rank, 3);
    EXPECT_EQ(n->pid, 0);
    EXPECT_EQ(n->host, "vm");
    EXPECT_EQ(n->how, "signal 9 (Killed)");
    EXPECT_EQ(n->launcher, "mpirun");
    EXPECT_EQ(n->message,
              "Rank 3 on node vm ended on signal 9 (Killed) without a message, mpirun reports");

    const auto unnamed = parseLauncherNotice("mpiexec noticed that process rank 12 with PID 4711 "
                                             "on node gpu-07 exited on signal 64.");
    ASSERT_TRUE(unnamed);
    EXPECT_EQ(unnamed->rank, 12);
    EXPECT_EQ(unnamed->pid, 4711);
    EXPECT_EQ(unnamed->how, "signal 64");
    EXPECT_NE(unnamed->message.find("(pid 4711)"), std::string::npos) << unnamed->message;
}

TEST(LauncherNotice, SrunsErrorNamesTheTaskUnlessItExitedOnPurpose) {
    const auto n = parseLauncherNotice("srun: error: node-2: task 5: Segmentation fault (core "
                                       "dumped)");
    ASSERT_TRUE(n);
    EXPECT_EQ(n->rank, 5);
    EXPECT_EQ(n->host, "node-2");
    EXPECT_EQ(n->how, "Segmentation fault (core dumped)");
    EXPECT_EQ(n->launcher, "srun");
    // A rank that exits with a code has said why in its own telemetry.
    EXPECT_FALSE(parseLauncherNotice("srun: error: node-2: task 1: Exited with exit code 5"));
}

TEST(LauncherNotice, OtherLinesAndAbsurdOnesAreNotNotices) {
    EXPECT_FALSE(parseLauncherNotice(""));
    EXPECT_FALSE(parseLauncherNotice("Primary job  terminated normally, but 1 process returned"));
    EXPECT_FALSE(parseLauncherNotice("step   1135/20000 | loss 1.3983"));
    EXPECT_FALSE(parseLauncherNotice("mpirun noticed that process rank 99999999999 with PID 0 on "
                                     "node x exited on signal 9 (Killed)."));
    EXPECT_FALSE(parseLauncherNotice("mpirun noticed that process rank 1 with PID 0 on node " +
                                     std::string(2000, 'x') + " exited on signal 9 (Killed)."));
}

} // namespace
} // namespace shardscope::watch
