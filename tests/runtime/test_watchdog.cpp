// The watchdog on its own thread: a wait past the stall threshold is reported once with where the
// rank was, one past the timeout ends the job with a report, and a process of the job on this
// host that vanishes is named at once, unless it ended the job on purpose and said why.
#include "runtime/watchdog.h"
#include "support/temp_dir.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <functional>
#include <gtest/gtest.h>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace shardscope {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using testing::TempDir;

// What the watchdog told the outside: its events and the exit code it asked for.
struct Recorder {
    std::mutex mutex;
    std::vector<json> events;
    std::atomic<int> exitCode{-1};

    Watchdog::Events sink() {
        return {[this](json e) {
                    std::lock_guard lock(mutex);
                    events.push_back(std::move(e));
                },
                [] {}};
    }
    std::vector<json> named(const std::string& event) {
        std::lock_guard lock(mutex);
        std::vector<json> out;
        for (const json& e : events)
            if (e.value("event", "") == event)
                out.push_back(e);
        return out;
    }
    std::function<void(int)> abort() {
        return [this](int code) { exitCode = code; };
    }
};

bool eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout = 20000ms) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (done())
            return true;
        std::this_thread::sleep_for(10ms);
    }
    return done();
}

// A child process that sleeps until killed.
pid_t sleeper() {
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::pause();
        ::_exit(0);
    }
    return pid;
}

// Held until the watchdog gives up at its timeout, ten stall thresholds later: by then it has
// looked at the wait many times, and reported the stall only once.
TEST(Watchdog, AWaitPastTheStallThresholdIsReportedOnceWithWhereTheRankWas) {
    Recorder rec;
    Watchdog dog(2.0, 0, 1, rec.abort()); // no report directory: it ends the job at once
    dog.setEvents(rec.sink(), 0.2);
    dog.setPosition(7, 1, "F");
    {
        const Watchdog::Wait wait(dog, "recv", "pp", 41);
        ASSERT_TRUE(eventually([&] { return rec.exitCode != -1; }));
    }
    const std::vector<json> stalls = rec.named("stall");
    ASSERT_EQ(stalls.size(), 1u);
    const json& s = stalls[0];
    EXPECT_EQ(s["step"], 7);
    EXPECT_EQ(s["microbatch"], 1);
    EXPECT_EQ(s["op"], "F");
    EXPECT_EQ(s["collective"], "recv");
    EXPECT_EQ(s["axis"], "pp");
    EXPECT_EQ(s["sequence"], 41);
    EXPECT_GE(s["waited_s"].get<double>(), 0.2);
    EXPECT_EQ(rec.named("hang").size(), 1u);
}

TEST(Watchdog, AWaitPastTheTimeoutEndsTheJobWithAReport) {
    TempDir dir;
    Recorder rec;
    Watchdog dog(0.3, 0, 1, rec.abort());
    dog.setReportDirectory(dir.path());
    dog.setEvents(rec.sink(), 0);
    dog.setPosition(3, -1, "gradient reduction");
    const Watchdog::Wait wait(dog, "all_reduce", "dp", 9);
    ASSERT_TRUE(eventually([&] { return rec.exitCode != -1; }));
    EXPECT_EQ(rec.exitCode, 5);
    const json report = json::parse(std::ifstream(dir.path() / "hang-rank-0.json"));
    EXPECT_EQ(report["collective"], "all_reduce");
    EXPECT_EQ(report["step"], 3);
    EXPECT_GE(report["waited_s"].get<double>(), 0.3);
    EXPECT_EQ(rec.named("hang").size(), 1u);
    ASSERT_EQ(rec.named("hang_summary").size(), 1u);
    EXPECT_TRUE(rec.named("hang_summary")[0]["missing"].empty());
}

// Rank 0 waiting, its watchdog watching one peer on this host: a sleeping child process. A
// stall report (after stallSeconds) shows the watchdog has looked at the peer by then: its peer
// check runs before its stall check, every tenth of a second of a wait.
struct PeerWatch {
    explicit PeerWatch(double stallSeconds) {
        dog.setReportDirectory(dir.path());
        dog.setEvents(rec.sink(), stallSeconds);
        dog.setLocalPeers({{1, long(peer)}});
    }
    ~PeerWatch() {
        kill();
        reap();
    }
    void kill() const { ::kill(peer, SIGKILL); }
    void reap() {
        if (!reaped)
            ::waitpid(peer, nullptr, 0);
        reaped = true;
    }
    bool stalled() { return !rec.named("stall").empty(); }

    TempDir dir;
    Recorder rec;
    Watchdog dog{300, 0, 2, rec.abort()};
    const pid_t peer = sleeper();
    bool reaped = false;
};

// Killed and not yet reaped (a zombie, as under a launcher that has not looked yet) counts as
// gone: the waiting rank names it at its next look, far inside the timeout.
TEST(Watchdog, ALocalPeerThatVanishesIsNamedAtOnce) {
    PeerWatch w(0.3);
    ASSERT_GT(w.peer, 0);
    w.dog.setPosition(13, -1, "gradient reduction");
    const Watchdog::Wait wait(w.dog, "all_reduce", "dp", 16);
    ASSERT_TRUE(eventually([&] { return w.stalled(); }));
    EXPECT_EQ(w.rec.exitCode, -1) << "a live peer was reported";
    w.kill();
    ASSERT_TRUE(eventually([&] { return w.rec.exitCode != -1; }));
    w.reap();
    EXPECT_EQ(w.rec.exitCode, 5);
    const std::vector<json> lost = w.rec.named("rank_lost");
    ASSERT_EQ(lost.size(), 1u);
    EXPECT_EQ(lost[0]["lost_rank"], 1);
    EXPECT_EQ(lost[0]["lost_pid"], long(w.peer));
    EXPECT_EQ(lost[0]["collective"], "all_reduce");
    EXPECT_EQ(lost[0]["step"], 13);
    EXPECT_NE(lost[0]["message"].get<std::string>().find("rank 1 (pid " + std::to_string(w.peer)),
              std::string::npos);
}

// A peer whose telemetry ends with an end, error or hang event stopped on purpose: not named.
TEST(Watchdog, APeerThatSaidWhyItEndedIsNotReported) {
    PeerWatch w(0.3);
    ASSERT_GT(w.peer, 0);
    std::ofstream(w.dir.path() / "rank-1.jsonl")
        << json{{"type", "step"}, {"step", 4}}.dump() << "\n"
        << json{{"type", "event"}, {"event", "hang_summary"}, {"message", "hung"}}.dump() << "\n";
    w.kill(); // gone before the wait begins: every look the watchdog takes finds it gone
    w.reap();
    const Watchdog::Wait wait(w.dog, "recv", "pp", 2);
    ASSERT_TRUE(eventually([&] { return w.stalled(); }));
    EXPECT_EQ(w.rec.exitCode, -1);
    EXPECT_TRUE(w.rec.named("rank_lost").empty());
}

} // namespace
} // namespace shardscope
