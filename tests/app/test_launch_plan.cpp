// The commands a launch runs: programs and arguments for QProcess, never a shell line. Host names
// that could inject a command are refused, the remote side of ssh gets every word quoted, the
// token is passed by name only, and the Slurm script holds no token and no unquoted word.
#include "core/error.h"
#include "run/launch_plan.h"

#include <QProcess>
#include <QTemporaryDir>
#include <gtest/gtest.h>

namespace shardscope {
namespace {

LaunchRequest request(LaunchTarget target) {
    LaunchRequest r;
    r.settings.target = target;
    r.engine = "/opt/shardscope/bin/shardscope-engine";
    r.configPath = "/runs/a.launch.json";
    r.runDirectory = "/runs/a";
    r.ranks = 4;
    r.telemetryUrl = "tcp://127.0.0.1:9400";
    return r;
}

TEST(LaunchPlan, AHostfileGivesHostsAndSlots) {
    const auto hosts = parseHostfile("# the cluster\nnode1 slots=2\n\n  root@node-2.lan   slots=8 "
                                     "# big one\nnode_3\n");
    ASSERT_EQ(hosts.size(), 3u);
    EXPECT_EQ(hosts[0].host, "node1");
    EXPECT_EQ(hosts[0].slotCount, 2);
    EXPECT_EQ(hosts[1].host, "root@node-2.lan");
    EXPECT_EQ(hosts[1].slotCount, 8);
    EXPECT_EQ(hosts[2].slotCount, 1);
}

TEST(LaunchPlan, HostNamesThatCouldRunSomethingAreRefusedWithTheLine) {
    for (const char* bad : {"node1;touch /tmp/x", "$(reboot)", "`id`", "node1|cat",
                            "-oProxyCommand=x", "a b@c", "node1&&x", "n'1", "x@-p"}) {
        EXPECT_FALSE(hostNameProblem(bad).isEmpty()) << bad;
    }
    try {
        parseHostfile("node1 slots=2\nnode2;rm -rf / slots=2\n");
        FAIL();
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
    }
    for (const char* bad : {"node1 slots=0", "node1 slots=x", "node1 cores=4", "node1 slots=99999"})
        EXPECT_THROW(parseHostfile(bad), InputError) << bad;
}

TEST(LaunchPlan, AQuotedWordIsOneWordToAShellWhateverItHolds) {
    // The oracle is a real shell: printf prints each argument it gets on its own line.
    for (const QString& word : {QString("plain"), QString("it's"), QString("a b"),
                                QString("$(touch /tmp/shardscope-injected)"), QString("`id`;\n")}) {
        QProcess sh;
        sh.start("/bin/sh", {"-c", "printf '%s|' " + shellQuote(word)});
        ASSERT_TRUE(sh.waitForFinished(5000));
        EXPECT_EQ(QString::fromUtf8(sh.readAllStandardOutput()), word + "|");
    }
    EXPECT_FALSE(QFile::exists("/tmp/shardscope-injected"));
}

TEST(LaunchPlan, UserOptionsSplitLikeAShellWithoutExpanding) {
    EXPECT_EQ(splitOptions("-p 2222  -i \"/my keys/k\" -o 'A=b c' $HOME"),
              (QStringList{"-p", "2222", "-i", "/my keys/k", "-o", "A=b c", "$HOME"}));
    EXPECT_TRUE(splitOptions("   ").isEmpty());
}

TEST(LaunchPlan, ThisMachineRunsTheEngineWhichStartsMpirun) {
    LaunchRequest r = request(LaunchTarget::Local);
    const Command c = localCommand(r);
    EXPECT_EQ(c.program, r.engine);
    EXPECT_EQ(c.arguments,
              (QStringList{"train", "--config", "/runs/a.launch.json", "--out", "/runs/a",
                           "--telemetry", "tcp://127.0.0.1:9400", "--ranks", "4"}));
    r.resume = true;
    EXPECT_TRUE(localCommand(r).arguments.contains("--resume"));
    const Command check = checkCommand(r);
    EXPECT_TRUE(check.arguments.contains("--check"));
    EXPECT_EQ(check.arguments.mid(check.arguments.indexOf("--ranks"), 2),
              (QStringList{"--ranks", "4"}));
}

TEST(LaunchPlan, HostsOverSshGoThroughMpirunWithSshAsItsAgent) {
    LaunchRequest r = request(LaunchTarget::Ssh);
    r.settings.sshOptions = "-p 2222 -i '/keys/my key'";
    r.settings.mpiOptions = "--mca btl_tcp_if_include 10.0.0.0/24";
    r.hosts = parseHostfile("a slots=2\nb slots=2");
    r.runningAsRoot = true;
    const Command c = sshCommand(r);
    EXPECT_EQ(c.program, "mpirun");
    const QStringList& a = c.arguments;
    EXPECT_EQ(a.mid(0, 4), (QStringList{"-n", "4", "--host", "a:2,b:2"}));
    const int agent = int(a.indexOf("plm_rsh_agent"));
    ASSERT_GT(agent, 0);
    EXPECT_EQ(a[agent + 1].toStdString(),
              "ssh -p 2222 -i '/keys/my key' -o BatchMode=yes -o ConnectTimeout=10");
    EXPECT_EQ(a[a.indexOf("-x") + 1], "SHARDSCOPE_TELEMETRY_TOKEN"); // by name, never a value
    EXPECT_TRUE(a.contains("--allow-run-as-root"));
    EXPECT_TRUE(a.contains("btl_tcp_if_include"));
    EXPECT_EQ(a[a.indexOf("train") - 1], r.engine);
    r.ranks = 5;
    EXPECT_THROW(sshCommand(r), InputError); // 4 slots
    r.hosts = {{"bad;host", 8}};
    EXPECT_THROW(sshCommand(r), InputError);
}

TEST(LaunchPlan, TheRemoteCommandOfSshIsQuotedWordByWord) {
    LaunchSettings s;
    s.sshOptions = "-p 2222";
    const Command c = remoteVersionCommand(s, {"node1", 1}, "/opt/my engine/shardscope-engine");
    EXPECT_EQ(c.program, "ssh");
    EXPECT_EQ(
        c.arguments.mid(c.arguments.indexOf("--")),
        (QStringList{"--", "node1", "'/opt/my engine/shardscope-engine' 'version' '--json'"}));
    const Command t = tunnelCommand(s, {"node1", 1}, 9400);
    EXPECT_EQ(t.arguments[t.arguments.indexOf("-R") + 1], "9400:127.0.0.1:9400");
    EXPECT_TRUE(t.arguments.contains("ExitOnForwardFailure=yes"));
    EXPECT_EQ(t.arguments[t.arguments.indexOf("--") + 1], "node1");
    EXPECT_TRUE(t.arguments.back().startsWith("echo shardscope-tunnel-ready"));
}

TEST(LaunchPlan, TheSlurmScriptStartsEveryRankWithSrunAndHoldsNoToken) {
    LaunchRequest r = request(LaunchTarget::Slurm);
    r.settings.slurmPartition = "debug";
    r.settings.slurmTime = "1:00:00";
    const QString script = slurmScript(r);
    EXPECT_TRUE(script.startsWith("#!/bin/bash\n"));
    EXPECT_TRUE(script.contains("#SBATCH --ntasks=4\n"));
    EXPECT_TRUE(script.contains("#SBATCH --partition=debug\n"));
    EXPECT_TRUE(script.contains("#SBATCH --time=1:00:00\n"));
    EXPECT_TRUE(script.contains("#SBATCH --output=/runs/a.slurm-%j.out\n"));
    EXPECT_TRUE(script.contains("exec 'srun' '--mpi=pmix' '--kill-on-bad-exit=1' "
                                "'/opt/shardscope/bin/shardscope-engine' "
                                "'train' '--config' '/runs/a.launch.json'"));
    EXPECT_FALSE(script.contains("TOKEN"));
    r.runDirectory = "/runs/a\n#SBATCH --uid=0";
    EXPECT_THROW(slurmScript(r), InputError);
    r.runDirectory = "/runs/a\n"; // a "$" anchor would let a final line break through
    EXPECT_THROW(slurmScript(r), InputError);
    r = request(LaunchTarget::Slurm);
    r.settings.slurmPartition = "debug --exclusive";
    EXPECT_THROW(slurmScript(r), InputError);
    EXPECT_EQ(sbatchCommand("/runs/a.sbatch").arguments,
              (QStringList{"--parsable", "/runs/a.sbatch"}));
}

} // namespace
} // namespace shardscope
