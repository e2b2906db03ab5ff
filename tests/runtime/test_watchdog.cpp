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

TEST(Watchdog, AWaitPastTheStallThresholdIsReportedOnceWithWhereTheRankWas) {
    Recorder rec;
    Watchdog dog(300, 0, 2, rec.abort());
    dog.setEvents(rec.sink(), 0.2);
    dog.setPosition(7, 1, "F");
    {
        const Watchdog::Wait wait(dog, "recv", "pp", 41);
        ASSERT_TRUE(eventually([&] { return !rec.named("stall").empty(); }));
        std::this_thread::sleep_for(300ms); // long enough for a second report, were there one
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
    EXPECT_EQ(rec.exitCode, -1);
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

// Killed and not yet reaped (a zombie, as under a launcher that has not looked yet) counts as
// gone: the waiting rank names it within a fraction of a second, far inside the timeout.
TEST(Watchdog, ALocalPeerThatVanishesIsNamedAtOnce) {
    TempDir dir;
    Recorder rec;
    Watchdog dog(300, 0, 2, rec.abort());
    dog.setReportDirectory(dir.path());
    dog.setEvents(rec.sink(), 0);
    const pid_t peer = sleeper();
    ASSERT_GT(peer, 0);
    dog.setLocalPeers({{1, long(peer)}});
    dog.setPosition(13, -1, "gradient reduction");
    const Watchdog::Wait wait(dog, "all_reduce", "dp", 16);
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(rec.exitCode, -1) << "a live peer was reported";
    ASSERT_EQ(::kill(peer, SIGKILL), 0);
    ASSERT_TRUE(eventually([&] { return rec.exitCode != -1; }));
    ::waitpid(peer, nullptr, 0);
    EXPECT_EQ(rec.exitCode, 5);
    const std::vector<json> lost = rec.named("rank_lost");
    ASSERT_EQ(lost.size(), 1u);
    EXPECT_EQ(lost[0]["lost_rank"], 1);
    EXPECT_EQ(lost[0]["lost_pid"], long(peer));
    EXPECT_EQ(lost[0]["collective"], "all_reduce");
    EXPECT_EQ(lost[0]["step"], 13);
    EXPECT_NE(lost[0]["message"].get<std::string>().find("rank 1 (pid " + std::to_string(peer)),
              std::string::npos);
}

// A peer whose telemetry ends with an end, error or hang event stopped on purpose: not named.
TEST(Watchdog, APeerThatSaidWhyItEndedIsNotReported) {
    TempDir dir;
    std::ofstream(dir.path() / "rank-1.jsonl")
        << json{{"type", "step"}, {"step", 4}}.dump() << "\n"
        << json{{"type", "event"}, {"event", "hang_summary"}, {"message", "hung"}}.dump() << "\n";
    Recorder rec;
    Watchdog dog(300, 0, 2, rec.abort());
    dog.setReportDirectory(dir.path());
    dog.setEvents(rec.sink(), 0);
    const pid_t peer = sleeper();
    ASSERT_GT(peer, 0);
    dog.setLocalPeers({{1, long(peer)}});
    const Watchdog::Wait wait(dog, "recv", "pp", 2);
    ::kill(peer, SIGKILL);
    ::waitpid(peer, nullptr, 0);
    std::this_thread::sleep_for(1s); // ten checks
    EXPECT_EQ(rec.exitCode, -1);
    EXPECT_TRUE(rec.named("rank_lost").empty());
}

} // namespace
} // namespace shardscope
