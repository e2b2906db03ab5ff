#include "core/error.h"
#include "runtime/tcp_event_stream.h"
#include "runtime/telemetry.h"
#include "support/temp_dir.h"

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <gtest/gtest.h>
#include <mutex>
#include <netinet/in.h>
#include <poll.h>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace shardscope {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double secondsSince(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<std::string> readLines(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);)
        lines.push_back(line);
    return lines;
}

// Polls `done` until it holds or `timeout` passes; true when it held.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout = 5000ms) {
    const Clock::time_point deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
        if (done())
            return true;
        std::this_thread::sleep_for(5ms);
    }
    return done();
}

sockaddr_in loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

// A port on 127.0.0.1 that was free a moment ago and that nothing listens on.
int unusedPort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(0);
    socklen_t length = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length) != 0)
        throw std::runtime_error("cannot bind a test socket");
    ::close(fd);
    return ntohs(a.sin_port);
}

// The app's side of the stream, on 127.0.0.1, accepting in its own thread.
//   ReadAll:   reads every connection to its end, keeping each complete line.
//   CloseAfter: reads until it has `closeAfter` lines, then closes the connection and stops
//              listening, so the writer finds nobody when it reconnects.
//   NeverRead: accepts and holds the connection without reading, with a tiny receive buffer.
class Collector {
public:
    enum class Mode { ReadAll, CloseAfter, NeverRead };

    explicit Collector(Mode mode, std::size_t closeAfter = 0, int port = 0)
        : mode_(mode), closeAfter_(closeAfter) {
        listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
        const int one = 1;
        ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (mode == Mode::NeverRead) {
            const int small = 4096; // inherited by the accepted socket
            ::setsockopt(listener_, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
        }
        sockaddr_in a = loopback(port);
        socklen_t length = sizeof a;
        if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
            ::listen(listener_, 4) != 0 ||
            ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &length) != 0)
            throw std::runtime_error("cannot listen on a test socket");
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { run(); });
    }
    // Listening on a Unix socket at `path` instead.
    Collector(Mode mode, const fs::path& path) : mode_(mode), closeAfter_(0), path_(path) {
        listener_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        const std::string name = path.string();
        if (name.size() >= sizeof a.sun_path)
            throw std::runtime_error("test socket path too long");
        name.copy(a.sun_path, name.size());
        if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
            ::listen(listener_, 4) != 0)
            throw std::runtime_error("cannot listen on a test Unix socket");
        thread_ = std::thread([this] { run(); });
    }
    ~Collector() { stop(); }

    int port() const { return port_; }
    std::string address() const {
        return path_.empty() ? "tcp://127.0.0.1:" + std::to_string(port_)
                             : "unix:" + path_.string();
    }

    void stop() {
        stop_ = true;
        if (thread_.joinable())
            thread_.join();
        closeListener();
    }
    std::vector<std::string> lines() const {
        std::lock_guard lock(mutex_);
        return lines_;
    }
    std::size_t lineCount() const {
        std::lock_guard lock(mutex_);
        return lines_.size();
    }
    int connections() const { return connections_; }
    bool closed() const { return closed_; }
    // True once a connection ended and everything it carried has been read.
    bool connectionEnded() const { return ended_; }

private:
    void run() {
        while (!stop_ && listener_ >= 0) {
            pollfd p{listener_, POLLIN, 0};
            if (::poll(&p, 1, 20) <= 0)
                continue;
            const int fd = ::accept(listener_, nullptr, nullptr);
            if (fd < 0)
                continue;
            ++connections_;
            serve(fd);
        }
    }

    void serve(int fd) {
        std::string pending;
        char buffer[4096];
        while (!stop_) {
            if (mode_ == Mode::NeverRead) {
                std::this_thread::sleep_for(10ms);
                continue;
            }
            pollfd p{fd, POLLIN, 0};
            if (::poll(&p, 1, 20) <= 0)
                continue;
            const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
            if (n <= 0) {
                ended_ = true;
                break;
            }
            pending.append(buffer, static_cast<std::size_t>(n));
            std::size_t begin = 0;
            for (std::size_t nl; (nl = pending.find('\n', begin)) != std::string::npos;
                 begin = nl + 1) {
                std::lock_guard lock(mutex_);
                lines_.push_back(pending.substr(begin, nl - begin));
            }
            pending.erase(0, begin);
            if (mode_ == Mode::CloseAfter && lineCount() >= closeAfter_) {
                closeListener();
                ::close(fd);
                closed_ = true;
                return;
            }
        }
        ::close(fd);
    }

    void closeListener() {
        std::lock_guard lock(listenerMutex_);
        if (listener_ >= 0)
            ::close(listener_);
        listener_ = -1;
    }

    Mode mode_;
    std::size_t closeAfter_;
    fs::path path_; // a Unix socket's, or empty for TCP
    int listener_ = -1;
    int port_ = 0;
    std::mutex listenerMutex_;
    mutable std::mutex mutex_;
    std::vector<std::string> lines_;
    std::atomic<bool> stop_{false};
    std::atomic<bool> closed_{false};
    std::atomic<bool> ended_{false};
    std::atomic<int> connections_{0};
    std::thread thread_;
};

// What a collector received, less the greeting each connection opens with (the hello line and
// the re-sent start event): the events as the file has them.
std::vector<std::string> payload(const std::vector<std::string>& lines) {
    std::vector<std::string> out;
    for (const std::string& line : lines) {
        const json e = json::parse(line);
        if (e.value("type", "") != "hello" && !e.value("resent", false))
            out.push_back(line);
    }
    return out;
}

// Calls `produce` in bursts until `sent` has not moved for 300 ms: the collector's socket is full
// and the stream thread waits in send. False if that takes over 10 s.
bool untilStalled(const std::function<void()>& produce, const std::function<std::int64_t()>& sent) {
    std::int64_t last = -1;
    Clock::time_point lastProgress = Clock::now();
    const Clock::time_point start = Clock::now();
    while (secondsSince(lastProgress) < 0.3) {
        if (secondsSince(start) > 10.0)
            return false;
        for (int i = 0; i < 100; ++i)
            produce();
        std::this_thread::sleep_for(1ms);
        if (const std::int64_t now = sent(); now != last) {
            last = now;
            lastProgress = Clock::now();
        }
    }
    return true;
}

json span(int step) {
    return {{"type", "span"}, {"kind", "forward"}, {"step", step}, {"mb", 0},
            {"chunk", 0},     {"block", "layer"},  {"layer", 3}};
}

// An event large enough that a few thousand of them overflow any socket buffer.
json bulky(int i) {
    return {{"type", "event"}, {"i", i}, {"pad", std::string(1000, 'x')}};
}

// ---------------------------------------------------------------- the file

TEST(TelemetryFile, EveryEventIsOneParseableLineWithVersionRankAndTime) {
    TempDir dir;
    const fs::path path = dir.path() / "run" / "telemetry" / "rank-3.jsonl";
    TelemetryWriter writer({path.string(), "", 3});
    for (int i = 0; i < 100; ++i)
        writer.write(span(i));
    writer.write({{"type", "event"}, {"event", "end"}, {"v", 99}}); // v is the writer's to set
    writer.flush();

    const std::vector<std::string> lines = readLines(path);
    ASSERT_EQ(lines.size(), 101u);
    double previous = -1;
    for (std::size_t i = 0; i < lines.size(); ++i) {
        const json e = json::parse(lines[i]);
        EXPECT_EQ(e.at("v"), kTelemetrySchemaVersion);
        EXPECT_EQ(e.at("rank"), 3);
        ASSERT_TRUE(e.at("t").is_number_float());
        const double t = e.at("t");
        EXPECT_GE(t, previous) << "line " << i;
        previous = t;
        if (i < 100) {
            EXPECT_EQ(e.at("step"), i);
        }
    }
    EXPECT_GE(previous, 0.0);
    EXPECT_LE(previous, writer.now());
    EXPECT_EQ(writer.stats().written, 101);
    EXPECT_EQ(writer.stats().sent, 0);
    EXPECT_EQ(writer.stats().dropped, 0);
}

TEST(TelemetryFile, AGivenTimeIsKept) {
    TempDir dir;
    const fs::path path = dir.path() / "t.jsonl";
    TelemetryWriter writer({path.string(), "", 0});
    writer.write({{"type", "span"}, {"t", 12.5}, {"start", 12.0}, {"end", 12.5}});
    writer.flush();
    const std::vector<std::string> lines = readLines(path);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(json::parse(lines[0]).at("t"), 12.5);
}

TEST(TelemetryFile, FlushMakesEventsVisibleWhileTheWriterLives) {
    TempDir dir;
    const fs::path path = dir.path() / "rank-0.jsonl";
    TelemetryWriter writer({path.string(), "", 0});
    writer.write(span(1));
    writer.write(span(2));
    writer.flush();
    EXPECT_EQ(readLines(path).size(), 2u);
    writer.write(span(3));
    writer.flush();
    EXPECT_EQ(readLines(path).size(), 3u);
}

TEST(TelemetryFile, ATruncatedFileStartsEmpty) {
    TempDir dir;
    const fs::path path = dir.path() / "rank-0.jsonl";
    std::ofstream(path) << "old run\nold run\n";
    {
        TelemetryWriter writer({path.string(), "", 0});
        writer.write(span(0));
    }
    EXPECT_EQ(readLines(path).size(), 1u);
}

TEST(TelemetryFile, AppendKeepsTheEventsOfAnEarlierWriter) {
    TempDir dir;
    const fs::path path = dir.path() / "rank-0.jsonl";
    {
        TelemetryWriter writer({path.string(), "", 0});
        writer.write(span(0));
        writer.write(span(1));
    }
    {
        TelemetryWriter writer({.path = path.string(), .collector = "", .rank = 0, .append = true});
        writer.write(span(2));
        EXPECT_EQ(writer.stats().written, 1); // this writer's events only
    }
    const std::vector<std::string> lines = readLines(path);
    ASSERT_EQ(lines.size(), 3u);
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(json::parse(lines[static_cast<std::size_t>(i)]).at("step"), i);
}

// kill -9 in the middle of a line: the resumed run's first event (its start) was glued to the
// torn line and lost with it. It starts on a line of its own; readers count the torn one.
TEST(TelemetryFile, AppendAfterATornLineStartsOnAFreshLine) {
    TempDir dir;
    const fs::path path = dir.path() / "rank-0.jsonl";
    {
        TelemetryWriter writer({path.string(), "", 0});
        writer.write(span(0));
    }
    std::ofstream(path, std::ios::app) << R"({"type": "span", "na)"; // torn
    {
        TelemetryWriter writer({.path = path.string(), .collector = "", .rank = 0, .append = true});
        writer.write(span(2));
    }
    const std::vector<std::string> lines = readLines(path);
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(json::parse(lines[0]).at("step"), 0);
    EXPECT_TRUE(json::parse(lines[1], nullptr, false).is_discarded()) << lines[1];
    EXPECT_EQ(json::parse(lines[2]).at("step"), 2);
}

TEST(TelemetryFile, BadUtf8IsReplacedNotThrown) {
    TempDir dir;
    const fs::path path = dir.path() / "rank-0.jsonl";
    {
        TelemetryWriter writer({path.string(), "", 0});
        EXPECT_NO_THROW(writer.write({{"type", "event"},
                                      {"event", "error"},
                                      {"message", std::string("bad \xff\xfe byte")}}));
    }
    const std::vector<std::string> lines = readLines(path);
    ASSERT_EQ(lines.size(), 1u);
    const std::string message = json::parse(lines[0]).at("message");
    EXPECT_EQ(message, "bad \xEF\xBF\xBD\xEF\xBF\xBD byte"); // two U+FFFD
}

TEST(TelemetryFile, NonObjectEventIsRejected) {
    TempDir dir;
    TelemetryWriter writer({(dir.path() / "r.jsonl").string(), "", 0});
    EXPECT_THROW(writer.write(json::array({1, 2})), std::invalid_argument);
    EXPECT_EQ(writer.stats().written, 0);
}

TEST(TelemetryFile, UnwritablePathIsAnInputErrorSayingWhichAndWhy) {
    TempDir dir;
    const fs::path blocker = dir.path() / "not-a-dir";
    std::ofstream(blocker) << "x";
    const fs::path underFile = blocker / "telemetry" / "rank-0.jsonl";
    try {
        TelemetryWriter writer({underFile.string(), "", 0});
        FAIL() << "no exception";
    } catch (const InputError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(blocker.string()), std::string::npos) << what;
        EXPECT_NE(what.find("Not a directory"), std::string::npos) << what;
    }
    try {
        TelemetryWriter writer({dir.path().string(), "", 0}); // a directory, not a file
        FAIL() << "no exception";
    } catch (const InputError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(dir.path().string()), std::string::npos) << what;
        EXPECT_NE(what.find("Is a directory"), std::string::npos) << what;
    }
    EXPECT_THROW(TelemetryWriter({"", "", 0}), InputError);
}

// ---------------------------------------------------------------- the address

TEST(TelemetryCollector, MalformedAddressesAreInputErrorsQuotingTheAddress) {
    TempDir dir;
    const fs::path path = dir.path() / "rank-0.jsonl";
    for (const std::string& bad : std::initializer_list<std::string>{
             "tcp://", "http://x:1", "unix:", "unix:relative.sock",
             "unix:/" + std::string(200, 'd'), "tcp://host:0", "tcp://host:99999",
             "tcp://nosuchhost.invalid:5", "tcp://:80", "tcp://host",
             "tcp://host:", "tcp://host:8o", "tcp://::1:80", "localhost:80", "tcp://[::1]80"}) {
        try {
            TelemetryWriter writer({path.string(), bad, 0});
            ADD_FAILURE() << bad << ": no exception";
        } catch (const InputError& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find("'" + bad + "'"), std::string::npos) << what;
            EXPECT_NE(what.find("collector"), std::string::npos) << what;
        }
    }
    try {
        TelemetryWriter writer({path.string(), "tcp://nosuchhost.invalid:5", 0});
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("cannot resolve host 'nosuchhost.invalid'"),
                  std::string::npos)
            << e.what();
    }
    try {
        TelemetryWriter writer({path.string(), "tcp://host:99999", 0});
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("1 to 65535"), std::string::npos) << e.what();
    }
}

TEST(TelemetryCollector, ABadAddressLeavesAnExistingFileAlone) {
    TempDir dir;
    const fs::path path = dir.path() / "rank-0.jsonl";
    std::ofstream(path) << "previous run\n";
    EXPECT_THROW(TelemetryWriter({path.string(), "tcp://host:0", 0}), InputError);
    EXPECT_EQ(readLines(path), std::vector<std::string>{"previous run"});
}

TEST(TelemetryCollector, WellFormedAddressesParse) {
    CollectorAddress a = parseCollectorAddress("tcp://127.0.0.1:9400");
    EXPECT_EQ(a.host, "127.0.0.1");
    EXPECT_EQ(a.port, 9400);
    a = parseCollectorAddress("tcp://[::1]:1");
    EXPECT_EQ(a.host, "::1");
    EXPECT_EQ(a.port, 1);
    a = parseCollectorAddress("tcp://node-07.cluster:65535");
    EXPECT_EQ(a.host, "node-07.cluster");
    EXPECT_EQ(a.port, 65535);
    a = parseCollectorAddress("unix:/run/user/1000/shardscope/telemetry.sock");
    EXPECT_EQ(a.path, "/run/user/1000/shardscope/telemetry.sock");
    EXPECT_TRUE(a.host.empty());
}

// ---------------------------------------------------------------- the stream

TEST(TelemetryStream, TheCollectorReceivesExactlyTheFileInOrder) {
    TempDir dir;
    const fs::path path = dir.path() / "rank-1.jsonl";
    Collector collector(Collector::Mode::ReadAll);
    constexpr int kEvents = 2000;
    {
        TelemetryWriter writer({path.string(), collector.address(), 1});
        for (int i = 0; i < kEvents; ++i) {
            json e = span(i);
            e["note"] = "ünïcode \xff"; // replaced identically in file and stream
            writer.write(e);
        }
        ASSERT_TRUE(eventually([&] { return writer.stats().sent == kEvents; }))
            << "sent " << writer.stats().sent << " dropped " << writer.stats().dropped;
        EXPECT_EQ(writer.stats().dropped, 0);
        EXPECT_TRUE(writer.stats().connected);
    }
    ASSERT_TRUE(eventually([&] { return collector.connectionEnded(); }));
    const std::vector<std::string> file = readLines(path);
    ASSERT_EQ(file.size(), static_cast<std::size_t>(kEvents));
    EXPECT_EQ(payload(collector.lines()), file);
    EXPECT_EQ(collector.connections(), 1);
}

TEST(TelemetryStream, AUnixSocketCollectorReceivesTheGreetingThenTheFileInOrder) {
    TempDir dir;
    const fs::path path = dir.path() / "rank-0.jsonl";
    Collector collector(Collector::Mode::ReadAll, dir.path() / "collector.sock");
    constexpr int kEvents = 500;
    {
        TelemetryWriter writer({path.string(), collector.address(), 0});
        for (int i = 0; i < kEvents; ++i)
            writer.write(span(i));
        ASSERT_TRUE(eventually([&] { return writer.stats().sent == kEvents; }))
            << "sent " << writer.stats().sent << " dropped " << writer.stats().dropped;
    }
    ASSERT_TRUE(eventually([&] { return collector.connectionEnded(); }));
    const std::vector<std::string> file = readLines(path);
    ASSERT_EQ(file.size(), std::size_t(kEvents));
    EXPECT_EQ(payload(collector.lines()), file);
    EXPECT_EQ(json::parse(collector.lines().front())["type"], "hello");
}

TEST(TelemetryStream, TheDestructorDrainsQueuedEventsToAConnectedCollector) {
    TempDir dir;
    const fs::path path = dir.path() / "rank-0.jsonl";
    Collector collector(Collector::Mode::ReadAll);
    {
        TelemetryWriter writer({path.string(), collector.address(), 0});
        for (int i = 0; i < 500; ++i)
            writer.write(bulky(i));
    } // no waiting: whatever is still queued goes out during destruction
    ASSERT_TRUE(eventually([&] { return collector.connectionEnded(); }));
    EXPECT_EQ(payload(collector.lines()), readLines(path));
}

TEST(TelemetryStream, AnAbsentCollectorNeverSlowsWritesAndCountsDrops) {
    TempDir dir;
    const fs::path path = dir.path() / "rank-0.jsonl";
    const Clock::time_point created = Clock::now();
    auto writer = std::make_unique<TelemetryWriter>(
        TelemetryOptions{path.string(), "tcp://127.0.0.1:" + std::to_string(unusedPort()), 0});
    constexpr int kEvents = 10000;
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < kEvents; ++i)
        writer->write(span(i));
    const double writeSeconds = secondsSince(start);
    EXPECT_LT(writeSeconds, 2.0);
    writer->flush();
    EXPECT_EQ(readLines(path).size(), static_cast<std::size_t>(kEvents));

    // Every event leaves the queue as dropped, none as sent.
    ASSERT_TRUE(eventually([&] {
        const TelemetryStats s = writer->stats();
        return s.sent + s.dropped == s.written;
    })) << "sent "
        << writer->stats().sent << " dropped " << writer->stats().dropped;
    const TelemetryStats s = writer->stats();
    EXPECT_EQ(s.written, kEvents);
    EXPECT_EQ(s.sent, 0);
    EXPECT_EQ(s.dropped, kEvents);
    EXPECT_FALSE(s.connected);

    const Clock::time_point destroying = Clock::now();
    writer.reset();
    EXPECT_LT(secondsSince(destroying), 2.0);
    EXPECT_LT(secondsSince(created), 8.0);
}

TEST(TelemetryStream, ACollectorStartedLateGetsTheLaterEvents) {
    TempDir dir;
    const fs::path path = dir.path() / "rank-0.jsonl";
    const int port = unusedPort();
    std::unique_ptr<Collector> collector;
    {
        TelemetryWriter writer({path.string(), "tcp://127.0.0.1:" + std::to_string(port), 0});
        const Clock::time_point start = Clock::now();
        for (int i = 0; secondsSince(start) < 6.0; ++i) {
            writer.write(span(i));
            if (i == 20)
                collector = std::make_unique<Collector>(Collector::Mode::ReadAll, 0, port);
            if (collector && collector->lineCount() >= 20)
                break;
            std::this_thread::sleep_for(5ms);
        }
        ASSERT_TRUE(collector);
        ASSERT_GE(collector->lineCount(), 20u) << "the stream never reconnected";
        EXPECT_GT(writer.stats().dropped, 0); // the events before the collector existed
    }
    ASSERT_TRUE(eventually([&] { return collector->connectionEnded(); }));
    // Once connected nothing is lost: what arrived is exactly the tail of the file.
    const std::vector<std::string> file = readLines(path);
    const std::vector<std::string> received = payload(collector->lines());
    ASSERT_LE(received.size(), file.size());
    EXPECT_EQ(received, std::vector<std::string>(
                            file.end() - static_cast<std::ptrdiff_t>(received.size()), file.end()));
}

TEST(TelemetryStream, AVanishingCollectorCostsDropsNotTheProcess) {
    TempDir dir;
    const fs::path path = dir.path() / "rank-0.jsonl";
    Collector collector(Collector::Mode::CloseAfter, 6); // the hello and five events
    TelemetryWriter writer({path.string(), collector.address(), 0});
    for (int i = 0; i < 5; ++i)
        writer.write(span(i));
    // The collector reads all five and closes cleanly. The next send still succeeds (the peer
    // answers it with a reset) and the one after fails with EPIPE: the send that raises SIGPIPE
    // unless the stream suppresses it.
    ASSERT_TRUE(eventually([&] { return collector.closed(); }));
    int written = 5;
    for (int i = 0; i < 3000; ++i)
        writer.write(bulky(written++));
    writer.flush();

    const std::vector<std::string> file = readLines(path);
    ASSERT_EQ(file.size(), static_cast<std::size_t>(written));
    EXPECT_EQ(payload(collector.lines()), std::vector<std::string>(file.begin(), file.begin() + 5));

    ASSERT_TRUE(eventually([&] {
        const TelemetryStats s = writer.stats();
        return s.sent + s.dropped == s.written;
    })) << "sent "
        << writer.stats().sent << " dropped " << writer.stats().dropped;
    const TelemetryStats s = writer.stats();
    EXPECT_EQ(s.written, written);
    EXPECT_GE(s.sent, 5);
    EXPECT_GT(s.dropped, 0);
    EXPECT_FALSE(s.connected);
}

TEST(TelemetryStream, ACollectorThatNeverReadsFillsTheQueueNotTheTrainingLoop) {
    TempDir dir;
    const fs::path path = dir.path() / "rank-0.jsonl";
    Collector collector(Collector::Mode::NeverRead);
    auto writer = std::make_unique<TelemetryWriter>(TelemetryOptions{
        .path = path.string(), .collector = collector.address(), .queueCapacity = 16});
    ASSERT_TRUE(eventually([&] { return writer->stats().connected; }));
    constexpr int kEvents = 20000; // ~20 MB, far beyond the socket buffers
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < kEvents; ++i)
        writer->write(bulky(i));
    // ~0.2 s in a release build. A producer that waited for the stream would sit out the 10 s
    // stall timeout; the margin leaves room for sanitizer and debug builds.
    EXPECT_LT(secondsSince(start), 5.0);
    const TelemetryStats s = writer->stats();
    EXPECT_GT(s.dropped, 0);
    EXPECT_LT(s.sent, kEvents);
    EXPECT_LE(s.sent + s.dropped, s.written);

    // Keep writing until the stream thread is stuck in its send wait, then destroy.
    int written = kEvents;
    ASSERT_TRUE(untilStalled([&] { writer->write(bulky(written++)); },
                             [&] { return writer->stats().sent; }))
        << "the collector's socket never filled";
    const Clock::time_point destroying = Clock::now();
    writer.reset();
    EXPECT_LT(secondsSince(destroying), 2.0);
    EXPECT_EQ(readLines(path).size(), static_cast<std::size_t>(written));
}

TEST(TelemetryStream, ClosingAStalledStreamIsPromptAndAccountsForEveryLine) {
    Collector collector(Collector::Mode::NeverRead);
    TcpEventStream stream(collector.address(), 16);
    ASSERT_TRUE(eventually([&] { return stream.stats().connected; }));
    const std::string line(1000, 'y');
    std::int64_t pushed = 0;
    ASSERT_TRUE(untilStalled(
        [&] {
            stream.push(line);
            ++pushed;
        },
        [&] { return stream.stats().sent; }))
        << "the collector's socket never filled";
    const std::int64_t sentBeforeClose = stream.stats().sent;

    const Clock::time_point closing = Clock::now();
    stream.close();
    EXPECT_LT(secondsSince(closing), 2.0);
    const EventStreamStats s = stream.stats();
    EXPECT_EQ(s.pushed, pushed);
    EXPECT_GE(s.sent, sentBeforeClose);
    EXPECT_EQ(s.sent + s.dropped, s.pushed);
    EXPECT_GT(s.dropped, 0);
    EXPECT_FALSE(s.connected);
    stream.push(line); // after close: counted, not queued
    EXPECT_EQ(stream.stats().dropped, s.dropped + 1);
}

// settle() is what the end event's counts rely on: with the stream stuck in a send to a collector
// that stopped reading, everything pushed so far ends up sent or dropped, and the stream goes on.
TEST(TelemetryStream, SettlingAStalledStreamAccountsForEveryLineAndKeepsItOpen) {
    Collector collector(Collector::Mode::NeverRead);
    TcpEventStream stream(collector.address(), 16);
    ASSERT_TRUE(eventually([&] { return stream.stats().connected; }));
    const std::string line(1000, 'y');
    ASSERT_TRUE(untilStalled([&] { stream.push(line); }, [&] { return stream.stats().sent; }))
        << "the collector's socket never filled";
    const EventStreamStats before = stream.stats();
    ASSERT_LT(before.sent + before.dropped, before.pushed) << "nothing was left in flight";

    stream.settle(200ms);
    const EventStreamStats settled = stream.stats();
    EXPECT_EQ(settled.pushed, before.pushed);
    EXPECT_EQ(settled.sent + settled.dropped, settled.pushed);
    EXPECT_GE(settled.sent, before.sent);

    // The cut connection is replaced (the listener's backlog takes it), and lines flow again.
    EXPECT_TRUE(eventually([&] { return stream.stats().connected; }));
    stream.push(line);
    stream.close();
    const EventStreamStats closed = stream.stats();
    EXPECT_EQ(closed.pushed, settled.pushed + 1);
    EXPECT_EQ(closed.sent + closed.dropped, closed.pushed);
}

// The run's end event reports counts that add up: every event before it sent or dropped. With a
// stalled collector they left 1,774 events unaccounted for.
TEST(TelemetryStream, TheEndEventsCountsAddUpUnderAStalledCollector) {
    TempDir dir;
    const fs::path path = dir.path() / "rank-0.jsonl";
    Collector collector(Collector::Mode::NeverRead);
    TelemetryWriter writer(
        {.path = path.string(), .collector = collector.address(), .queueCapacity = 64});
    ASSERT_TRUE(eventually([&] { return writer.stats().connected; }));
    int i = 0;
    ASSERT_TRUE(
        untilStalled([&] { writer.write(bulky(i++)); }, [&] { return writer.stats().sent; }))
        << "the collector's socket never filled";
    writer.writeEnd({{"type", "event"}, {"event", "end"}}, 200ms);
    writer.flush();

    const std::vector<std::string> lines = readLines(path);
    ASSERT_EQ(lines.size(), std::size_t(i) + 1);
    const json end = json::parse(lines.back());
    ASSERT_EQ(end["event"], "end");
    const json& counts = end["telemetry"];
    EXPECT_EQ(counts["written"].get<std::int64_t>(), std::int64_t(lines.size()));
    EXPECT_EQ(counts["sent"].get<std::int64_t>() + counts["dropped"].get<std::int64_t>(),
              counts["written"].get<std::int64_t>() - 1)
        << counts.dump();
    EXPECT_GT(counts["dropped"].get<std::int64_t>(), 0);
}

TEST(TelemetryStream, ClosingWhileConnectingIsPrompt) {
    // TEST-NET-1 (RFC 5737): connects there hang or fail, never succeed.
    TcpEventStream stream("tcp://192.0.2.1:9", 64);
    for (int i = 0; i < 100; ++i)
        stream.push("{}");
    std::this_thread::sleep_for(100ms);
    const Clock::time_point closing = Clock::now();
    stream.close();
    EXPECT_LT(secondsSince(closing), 1.5); // the drain window, not the connect timeout
    const EventStreamStats s = stream.stats();
    EXPECT_EQ(s.sent, 0);
    EXPECT_EQ(s.dropped, 100);
}

TEST(TelemetryStream, EveryConnectionOpensWithAHelloThatCarriesTheToken) {
    TempDir dir;
    Collector collector(Collector::Mode::ReadAll);
    {
        TelemetryWriter writer({.path = (dir.path() / "rank-2.jsonl").string(),
                                .collector = collector.address(),
                                .rank = 2,
                                .token = "s3cret",
                                .hello = {{"host", "node7"}, {"pid", 4242}}});
        ASSERT_TRUE(eventually([&] { return writer.stats().connected; }));
        writer.write(span(1));
        ASSERT_TRUE(eventually([&] { return collector.lineCount() >= 2; }));
        const json hello = json::parse(collector.lines().front());
        EXPECT_EQ(hello["type"], "hello");
        EXPECT_EQ(hello["token"], "s3cret");
        EXPECT_EQ(hello["rank"], 2);
        EXPECT_EQ(hello["session"], writer.session());
        EXPECT_EQ(hello["host"], "node7");
        EXPECT_EQ(hello["pid"], 4242);
        EXPECT_EQ(hello["v"], kTelemetrySchemaVersion);
        // The greeting is not an event: one event sent (counted once its send returns).
        EXPECT_TRUE(eventually([&] { return writer.stats().sent == 1; }));
        EXPECT_EQ(writer.stats().sent, 1);
    }
    // The token never reaches the file.
    for (const std::string& line : readLines(dir.path() / "rank-2.jsonl"))
        EXPECT_EQ(line.find("s3cret"), std::string::npos) << line;
}

TEST(TelemetryFile, EventsAreNumberedFromOneInWriteOrder) {
    TempDir dir;
    const fs::path path = dir.path() / "r.jsonl";
    {
        TelemetryWriter writer({path.string(), "", 0});
        for (int i = 0; i < 50; ++i)
            writer.write(span(i));
    }
    std::int64_t expected = 1;
    for (const std::string& line : readLines(path))
        EXPECT_EQ(json::parse(line)["seq"], expected++);
}

TEST(TelemetryFile, EventsFromManyThreadsAreWholeLinesWithDistinctNumbers) {
    TempDir dir;
    const fs::path path = dir.path() / "r.jsonl";
    {
        TelemetryWriter writer({path.string(), "", 0});
        std::vector<std::thread> threads;
        for (int t = 0; t < 4; ++t)
            threads.emplace_back([&] {
                for (int i = 0; i < 500; ++i)
                    writer.write(bulky(i));
            });
        for (std::thread& t : threads)
            t.join();
    }
    std::vector<std::int64_t> seqs;
    for (const std::string& line : readLines(path))
        seqs.push_back(json::parse(line).at("seq").get<std::int64_t>()); // throws if torn
    ASSERT_EQ(seqs.size(), 2000u);
    for (std::size_t i = 0; i < seqs.size(); ++i)
        EXPECT_EQ(seqs[i], std::int64_t(i) + 1); // file order is numbering order
}

TEST(TelemetryStream, AReconnectingCollectorGetsTheStartEventAgainThenWhatFollows) {
    TempDir dir;
    const fs::path path = dir.path() / "rank-0.jsonl";
    auto first = std::make_unique<Collector>(Collector::Mode::ReadAll);
    const int port = first->port();
    TelemetryWriter writer({path.string(), first->address(), 0});
    ASSERT_TRUE(eventually([&] { return writer.stats().connected; }));
    writer.write({{"type", "event"}, {"event", "start"}, {"config", {{"steps", 7}}}});
    writer.write(span(1));
    ASSERT_TRUE(eventually([&] { return first->lineCount() >= 3; }));
    first->stop(); // the app goes away...
    first.reset();
    Collector second(Collector::Mode::ReadAll, 0, port); // ...and comes back
    int i = 2;
    ASSERT_TRUE(eventually(
        [&] {
            writer.write(span(i++));
            return second.lineCount() >= 4;
        },
        10000ms))
        << "the stream never reconnected";
    const std::vector<std::string> lines = second.lines();
    EXPECT_EQ(json::parse(lines[0])["type"], "hello");
    const json start = json::parse(lines[1]);
    EXPECT_EQ(start["event"], "start");
    EXPECT_TRUE(start["resent"].get<bool>());
    EXPECT_EQ(start["seq"], 1); // the original's number: a reader that saw it knows it
    EXPECT_EQ(start["config"]["steps"], 7);
    // Then events written after the reconnection, numbered on: the gap is what was dropped.
    const json next = json::parse(lines[2]);
    EXPECT_EQ(next["type"], "span");
    EXPECT_GT(next["seq"].get<int>(), 2);
    // The file has the start event once, unmarked.
    writer.flush();
    const std::vector<std::string> file = readLines(path);
    ASSERT_FALSE(file.empty());
    EXPECT_FALSE(json::parse(file[0]).contains("resent"));
}

TEST(TelemetryStream, DrainWaitsUntilTheQueueIsSent) {
    TempDir dir;
    Collector collector(Collector::Mode::ReadAll);
    TelemetryWriter writer({(dir.path() / "r.jsonl").string(), collector.address(), 0});
    ASSERT_TRUE(eventually([&] { return writer.stats().connected; }));
    for (int i = 0; i < 300; ++i)
        writer.write(bulky(i));
    EXPECT_TRUE(writer.drain(5000ms));
    const TelemetryStats s = writer.stats();
    EXPECT_EQ(s.sent + s.dropped, 300); // nothing left in the queue

    // With a collector that reads, the end event's counts add up with nothing dropped.
    writer.writeEnd({{"type", "event"}, {"event", "end"}}, 5000ms);
    writer.flush();
    const json end = json::parse(readLines(dir.path() / "r.jsonl").back());
    EXPECT_EQ(end["telemetry"]["written"], 301);
    EXPECT_EQ(end["telemetry"]["sent"], 300);
    EXPECT_EQ(end["telemetry"]["dropped"], 0);
}

TEST(TelemetryStream, QueueCapacityMustBePositive) {
    EXPECT_THROW(TcpEventStream("tcp://127.0.0.1:9", 0), InputError);
}

} // namespace
} // namespace shardscope
