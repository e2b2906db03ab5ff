// Ranks that die or hang: the job ends with a message that names them, never waits forever, and
// a resume from the sharded checkpoints continues bit-identically. Real faults, from outside:
// the test sends SIGKILL or SIGSTOP to one rank's process (its pid is in its start event).
#include "engine_test_support.h"
#include "watch/diagnosis.h"
#include "watch/run_files.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace shardscope {
namespace {

using nlohmann::json;
using testing::TempDir;
namespace fs = std::filesystem;

json faultConfig(int steps) {
    json c = json::parse(R"({
      "model": {"name": "fault GPT", "family": "gpt2", "layers": 4, "hidden": 32, "heads": 2,
                "kv_heads": 2, "ffn_hidden": 128, "vocab": 64, "seq_len": 16,
                "max_positions": 16, "tied_embeddings": true, "activation": "gelu",
                "norm": "layernorm", "positions": "learned", "attention_bias": true,
                "output_bias": true, "mlp_bias": true, "dropout": false},
      "parallel": {"micro_batch": 1, "global_batch": 4, "pp": 2, "dp": 2, "zero": 1,
                   "schedule": "1f1b"},
      "train": {"warmup_steps": 2, "checkpoint_every": 25, "keep_checkpoints": 2},
      "engine": {"threads": 1}})");
    c["train"]["steps"] = steps;
    return c;
}

std::string readText(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

std::vector<json> eventsOf(const fs::path& run, int rank) {
    std::ifstream in(run / "telemetry" / ("rank-" + std::to_string(rank) + ".jsonl"));
    std::vector<json> out;
    std::string line;
    while (std::getline(in, line)) {
        try {
            out.push_back(json::parse(line));
        } catch (const json::exception&) { // a line being written right now
        }
    }
    return out;
}

// The loss of each step as rank 0 last reported it (a resumed run reports the steps after its
// checkpoint again).
std::map<int, double> lossByStep(const fs::path& run) {
    std::map<int, double> out;
    for (const json& e : eventsOf(run, 0))
        if (e["type"] == "step")
            out[e["step"].get<int>()] = e["loss"].get<double>();
    return out;
}

// A job in the background: the engine through --ranks, its output in a log.
class Job {
public:
    // `as`: a command that runs the engine as another user ("runuser -u nobody --"), or "".
    Job(const std::string& args, const fs::path& log, const std::string& as = "") {
        const std::string cmd = "exec " + as + (as.empty() ? "" : " ") + SHARDSCOPE_ENGINE_EXE +
                                " train -q " + args + " > " + log.string() + " 2>&1";
        pid_ = ::fork();
        if (pid_ == 0) {
            ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
            ::_exit(127);
        }
    }
    ~Job() {
        if (pid_ > 0 && !finished_) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
    }
    Job(const Job&) = delete;
    Job& operator=(const Job&) = delete;

    // The exit status, or nullopt if the job is still running after `seconds`.
    std::optional<int> wait(double seconds) {
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        while (std::chrono::steady_clock::now() < deadline) {
            int status = 0;
            if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                finished_ = true;
                return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return std::nullopt;
    }
    pid_t pid() const { return pid_; }

private:
    pid_t pid_ = -1;
    bool finished_ = false;
};

// Waits until `rank` has reported `step` and returns its process id.
pid_t pidOnceAt(const fs::path& run, int rank, int step) {
    for (int i = 0; i < 3000; ++i) {
        pid_t pid = 0;
        int reached = 0;
        for (const json& e : eventsOf(run, rank)) {
            if (e["type"] == "event" && e["event"] == "start")
                pid = e["pid"].get<pid_t>();
            if (e["type"] == "step")
                reached = e["step"].get<int>();
        }
        if (pid > 0 && reached >= step)
            return pid;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
}

// The inodes of the TCP sockets listening on an address other than loopback, from
// /proc/net/tcp and tcp6 (state 0A is LISTEN).
std::set<std::string> listenersBeyondLoopback() {
    std::set<std::string> inodes;
    for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
        std::ifstream in(table);
        std::string line;
        std::getline(in, line); // the header
        while (std::getline(in, line)) {
            std::istringstream fields(line);
            std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
            fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
                timeout >> inode;
            const std::string address = local.substr(0, local.find(':'));
            const bool loopback = address == "0100007F" || // 127.0.0.1, little-endian hex
                                  address == "00000000000000000000000001000000"; // ::1
            if (state == "0A" && !loopback)
                inodes.insert(inode);
        }
    }
    return inodes;
}

// The socket inodes a process holds open.
std::set<std::string> socketsOf(pid_t pid) {
    std::set<std::string> out;
    std::error_code ec;
    for (const fs::directory_entry& fd :
         fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
        const std::string target = fs::read_symlink(fd.path(), ec).string();
        if (target.starts_with("socket:["))
            out.insert(target.substr(8, target.size() - 9));
    }
    return out;
}

pid_t parentOf(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string text;
    std::getline(in, text);                                     // one line
    std::istringstream after(text.substr(text.rfind(')') + 1)); // the name may hold spaces
    std::string state;
    pid_t parent = 0;
    after >> state >> parent;
    return parent;
}

std::string networkOf(pid_t pid) {
    std::error_code ec;
    return fs::read_symlink("/proc/" + std::to_string(pid) + "/ns/net", ec).string();
}

// Ranks started by --ranks on one host, and their mpirun, listen on no port another host can
// reach: a flood of garbage at the TCP transport's listeners (on every interface) slowed a step
// 15x, and mpirun binds its control port to every interface whatever its options say. So they
// run in a network namespace of their own. `as` runs the engine as another user.
void expectLocalRanksOffTheNetwork(const std::string& as) {
    TempDir dir;
    fs::permissions(dir.path(), fs::perms::all); // for `as`
    const fs::path config = dir / "c.json";
    std::ofstream(config) << faultConfig(100000).dump();
    const fs::path run = dir / "run";
    Job job("--config " + config.string() + " --ranks 4 --out " + run.string(), dir / "log", as);
    std::vector<pid_t> ranks;
    for (int r = 0; r < 4; ++r) {
        ranks.push_back(pidOnceAt(run, r, 2));
        ASSERT_GT(ranks.back(), 0) << readText(dir / "log");
    }
    const pid_t mpirun = parentOf(ranks[0]);
    const std::set<std::string> listening = listenersBeyondLoopback();
    for (int r = 0; r < 4; ++r)
        for (const std::string& socket : socketsOf(ranks[std::size_t(r)]))
            EXPECT_FALSE(listening.contains(socket))
                << "rank " << r << " listens beyond loopback (socket " << socket << ")";
    const std::string log = readText(dir / "log");
    const bool isolated = log.find("share this host's network") == std::string::npos;
    if (isolated) {
        EXPECT_NE(networkOf(mpirun), networkOf(::getpid())) << log;
        for (const pid_t pid : ranks)
            EXPECT_EQ(networkOf(pid), networkOf(mpirun));
        for (const std::string& socket : socketsOf(mpirun))
            EXPECT_FALSE(listening.contains(socket)) << "mpirun listens beyond loopback";
    }
    // The stop the app sends to the process it started reaches every rank through mpirun (with
    // `as`, the engine is a child of runuser, which passes no SIGUSR1 on).
    const pid_t engine = as.empty() ? job.pid() : parentOf(mpirun);
    ASSERT_EQ(::kill(engine, SIGUSR1), 0);
    const std::optional<int> code = job.wait(120);
    ASSERT_TRUE(code) << "still running 2 minutes after the stop";
    EXPECT_EQ(*code, 0) << readText(dir / "log");
    std::ifstream summary(run / "summary.json");
    EXPECT_EQ(json::parse(summary)["status"], "interrupted");
    if (!isolated)
        GTEST_SKIP() << "this kernel or container gives no network namespace, so mpirun's "
                        "control port was not checked: "
                     << log.substr(0, log.find('\n'));
}

TEST(EngineFaults, LocalRanksAndTheirMpirunListenOnNoNetworkPort) {
    expectLocalRanksOffTheNetwork("");
}

// An ordinary user gets the namespace inside a user namespace of its own, which only a
// single-threaded process may create: the launcher forks for it and passes signals on.
TEST(EngineFaults, AnOrdinaryUsersLocalRanksAreKeptOffTheNetworkToo) {
    if (::geteuid() != 0 || !fs::exists("/usr/sbin/runuser"))
        GTEST_SKIP() << "needs root and runuser to run the engine as the user nobody";
    for (fs::path p = SHARDSCOPE_ENGINE_EXE; p.has_relative_path(); p = p.parent_path())
        if ((fs::status(p).permissions() & fs::perms::others_exec) == fs::perms::none)
            GTEST_SKIP() << "nobody cannot reach the engine through " << p;
    expectLocalRanksOffTheNetwork("/usr/sbin/runuser -u nobody --");
}

TEST(EngineFaults, AKilledRankEndsTheJobAndTheRunResumesBitIdentically) {
    TempDir dir;
    const fs::path config = dir / "c.json";
    std::ofstream(config) << faultConfig(400).dump();
    const std::string common = "--config " + config.string() + " --ranks 4 --out ";
    const fs::path whole = dir / "whole", part = dir / "part";
    {
        Job job(common + whole.string(), dir / "whole.log");
        ASSERT_EQ(job.wait(300), 0) << readText(dir / "whole.log");
    }
    {
        Job job(common + part.string(), dir / "part.log");
        const pid_t victim = pidOnceAt(part, 1, 60);
        ASSERT_GT(victim, 0) << readText(dir / "part.log");
        ASSERT_EQ(::kill(victim, SIGKILL), 0);
        const std::optional<int> code = job.wait(60);
        ASSERT_TRUE(code) << "the job still runs a minute after a rank was killed";
        EXPECT_NE(*code, 0);
        const std::string log = readText(dir / "part.log");
        EXPECT_NE(log.find("rank 1"), std::string::npos) << log;
        EXPECT_NE(log.find("signal 9"), std::string::npos) << log;
        // The surviving ranks say which rank vanished and where they were (mpirun alone said
        // "signal 9", with no step or operation).
        const std::string gone = "rank 1 (pid " + std::to_string(victim) + " on this host) is gone";
        EXPECT_NE(log.find(gone), std::string::npos) << log;
        EXPECT_NE(log.find(", at step "), std::string::npos) << log;
        // And the telemetry says it as the monitor and `shardscope-cli report` read it.
        watch::RunState state;
        watch::readRun(watch::findRunFiles(part), state);
        ASSERT_TRUE(state.lostRanks().contains(1)) << log;
        EXPECT_NE(state.lostRanks().at(1).reporter, 1);
        const std::vector<watch::RankHealth> health = watch::rankHealth(state);
        ASSERT_EQ(health.size(), 4u);
        EXPECT_EQ(health[1].status, watch::RankStatus::Dead) << health[1].detail;
        EXPECT_NE(health[1].detail.find("found by rank"), std::string::npos) << health[1].detail;
        const std::string why = watch::hangDiagnosis(state, health);
        EXPECT_NE(why.find(gone), std::string::npos) << why;
    }
    EXPECT_LT(lossByStep(part).size(), 400u) << "the kill came after the run had finished";
    {
        Job job("--resume --ranks 4 --out " + part.string(), dir / "resume.log");
        ASSERT_EQ(job.wait(300), 0) << readText(dir / "resume.log");
    }
    const std::map<int, double> a = lossByStep(whole), b = lossByStep(part);
    ASSERT_EQ(a.size(), 400u);
    EXPECT_EQ(a, b);
}

// checkpointEvery 1: the rank is almost surely stopped inside a checkpoint, where the others
// wait with the longer allowance (10 x the timeout), and the job must still end.
void expectHangNamed(int checkpointEvery) {
    TempDir dir;
    const fs::path config = dir / "c.json";
    json c = faultConfig(100000);
    c["train"]["checkpoint_every"] = checkpointEvery;
    std::ofstream(config) << c.dump();
    const fs::path run = dir / "run";
    Job job("--config " + config.string() +
                " --ranks 4 --watchdog-timeout 2 --stall-report 1 --out " + run.string(),
            dir / "log");
    const pid_t victim = pidOnceAt(run, 1, 20);
    ASSERT_GT(victim, 0) << readText(dir / "log");
    ASSERT_EQ(::kill(victim, SIGSTOP), 0); // alive, holding its sockets, doing nothing
    const std::optional<int> code = job.wait(90);
    ::kill(victim, SIGKILL); // in case the launcher left it stopped
    ASSERT_TRUE(code) << "the job still runs 90 s after a rank stopped";
    EXPECT_EQ(*code, 5);
    const std::string log = readText(dir / "log");
    // Rank 1 is named; ranks waiting on it inside a checkpoint (a longer allowance) may be too.
    const std::size_t at = log.find("ranks that never reported: ");
    ASSERT_NE(at, std::string::npos) << log;
    std::istringstream named(log.substr(at + 27, log.find(" (", at) - at - 27));
    std::vector<int> missing;
    for (std::string r; std::getline(named, r, ',');)
        missing.push_back(std::stoi(r));
    EXPECT_NE(std::find(missing.begin(), missing.end(), 1), missing.end()) << log;
    EXPECT_NE(log.find("no progress for"), std::string::npos) << log;
    // Every rank that waited wrote where it was: step, microbatch, op, collective, sequence.
    fs::path reportFile;
    for (int r = 3; r >= 0; --r)
        if (fs::exists(run / "telemetry" / ("hang-rank-" + std::to_string(r) + ".json")))
            reportFile = run / "telemetry" / ("hang-rank-" + std::to_string(r) + ".json");
    ASSERT_FALSE(reportFile.empty()) << log;
    const json report = json::parse(readText(reportFile));
    for (const char* field : {"step", "microbatch", "op", "collective", "axis", "sequence"})
        EXPECT_TRUE(report.contains(field)) << field;
    EXPECT_GE(report["waited_s"].get<double>(), 2.0);
    EXPECT_GE(report["step"].get<int>(), 20);

    // The same, read from the telemetry as the monitor and `shardscope-cli report` read it: the
    // reports arrive as events, the stopped rank is named silent, the waiting ranks as hung with
    // the operation they are blocked in.
    watch::RunState state;
    watch::readRun(watch::findRunFiles(run), state);
    const std::vector<watch::RankHealth> health = watch::rankHealth(state);
    ASSERT_EQ(health.size(), 4u);
    EXPECT_EQ(health[1].status, watch::RankStatus::Silent) << health[1].detail;
    EXPECT_NE(health[1].detail.find("never reported"), std::string::npos) << health[1].detail;
    int hung = 0;
    for (const watch::RankHealth& h : health)
        if (h.status == watch::RankStatus::Hung) {
            ++hung;
            EXPECT_NE(h.detail.find("blocked in "), std::string::npos) << h.detail;
            const watch::RankState& r = *state.rank(h.rank);
            EXPECT_FALSE(r.blocked->collective.empty());
            EXPECT_FALSE(r.blocked->op.empty());
            EXPECT_GE(r.blocked->step, 20);
        }
    EXPECT_GE(hung, 1) << watch::hangDiagnosis(state, health);
    const std::string why = watch::hangDiagnosis(state, health);
    EXPECT_NE(why.find("silent"), std::string::npos) << why;
    ASSERT_TRUE(state.hangSummary()) << why;
    EXPECT_NE(
        std::find(state.hangSummary()->missing.begin(), state.hangSummary()->missing.end(), 1),
        state.hangSummary()->missing.end());
}

TEST(EngineFaults, AHungRankIsNamedAndTheJobEndsAfterTheWatchdogTimeout) {
    expectHangNamed(25);
}

TEST(EngineFaults, ARankThatHangsDuringACheckpointStillEndsTheJob) {
    expectHangNamed(1);
}

// A failure only one rank sees (here: its own shard fails its checksum on resume) ends the job
// at once with that rank's message and exit code, instead of leaving the others waiting for the
// watchdog.
TEST(EngineFaults, AFailureOnOneRankEndsTheJobWithItsMessage) {
    TempDir dir;
    json c = faultConfig(6);
    c["parallel"]["dp"] = 1;
    c["parallel"]["zero"] = 0;
    const fs::path config = dir / "c.json";
    std::ofstream(config) << c.dump();
    const fs::path run = dir / "run";
    {
        Job job("--config " + config.string() + " --ranks 2 --stop-after 3 --out " + run.string(),
                dir / "log");
        ASSERT_EQ(job.wait(120), 0) << readText(dir / "log");
    }
    const fs::path shard = run / "checkpoints" / "step-00000003" / "pp1-tp0-dp0.params.f32";
    {
        std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(16);
        f.put('\x55');
    }
    const auto start = std::chrono::steady_clock::now();
    Job job("--resume --ranks 2 --watchdog-timeout 120 --out " + run.string(), dir / "log");
    const std::optional<int> code = job.wait(60);
    ASSERT_TRUE(code) << "the job waited on the rank that had failed";
    EXPECT_EQ(*code, 4);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              60.0);
    const std::string log = readText(dir / "log");
    EXPECT_NE(log.find("pp1-tp0-dp0.params.f32: checksum mismatch"), std::string::npos) << log;
}

} // namespace
} // namespace shardscope
