#include "watchdog.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

namespace shardscope {

using nlohmann::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// The process no longer runs: it does not exist, or it is a zombie its parent has not reaped.
bool processGone(long pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    if (!stat)
        return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    std::string text;
    std::getline(stat, text); // one line
    // "pid (comm) S ...": the state follows the last ')', since comm may hold one.
    const std::size_t close = text.rfind(')');
    if (close == std::string::npos || close + 2 >= text.size())
        return false;
    const char state = text[close + 2];
    return state == 'Z' || state == 'X';
}

// Whether rank `rank`'s telemetry in `dir` ends with an event that says why it stopped (end,
// error, hang, hang_summary, rank_lost): a rank that ended the job on purpose, not one that
// vanished. Reads only the file's last 256 KiB.
bool saidWhyItEnded(const fs::path& dir, int rank) {
    std::ifstream in(dir / ("rank-" + std::to_string(rank) + ".jsonl"), std::ios::binary);
    if (!in)
        return false;
    in.seekg(0, std::ios::end);
    const std::streamoff size = in.tellg();
    const std::streamoff from = std::max<std::streamoff>(0, size - (256 << 10));
    in.seekg(from);
    std::string tail(std::size_t(size - from), '\0');
    in.read(tail.data(), std::streamsize(tail.size()));
    const std::size_t end = tail.rfind('\n');
    if (end == std::string::npos || end == 0)
        return false;
    const std::size_t begin = tail.rfind('\n', end - 1);
    const json last =
        json::parse(tail.begin() + std::ptrdiff_t(begin == std::string::npos ? 0 : begin + 1),
                    tail.begin() + std::ptrdiff_t(end), nullptr, false);
    if (!last.is_object())
        return false;
    const std::string event = last.value("event", "");
    return event == "end" || event == "error" || event == "hang" || event == "hang_summary" ||
           event == "rank_lost";
}

} // namespace

Watchdog::Watchdog(double timeoutSeconds, int rank, int worldSize, std::function<void(int)> abort)
    : timeout_(timeoutSeconds), rank_(rank), worldSize_(worldSize), abort_(std::move(abort)),
      thread_([this] { watch(); }) {}

Watchdog::~Watchdog() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

void Watchdog::setReportDirectory(const fs::path& dir) {
    std::lock_guard lock(mutex_);
    reportDir_ = dir;
    std::error_code ignored; // a report from an earlier hang of this run is not this one's
    fs::remove(dir / ("hang-rank-" + std::to_string(rank_) + ".json"), ignored);
}

void Watchdog::setEvents(Events events, double stallSeconds) {
    std::lock_guard lock(mutex_);
    events_ = std::move(events);
    stallSeconds_ = stallSeconds;
}

void Watchdog::emit(json event) {
    Events events;
    {
        std::lock_guard lock(mutex_);
        events = events_;
    }
    if (!events.write)
        return;
    try {
        events.write(std::move(event));
    } catch (const std::exception&) { // a full disk must not stop the watchdog ending the job
    }
}

void Watchdog::drain() {
    Events events;
    {
        std::lock_guard lock(mutex_);
        events = events_;
    }
    if (events.drain)
        events.drain();
}

json Watchdog::position(double waited) const {
    return {{"rank", rank_},
            {"step", step_},
            {"microbatch", microbatch_},
            {"op", op_},
            {"collective", collective_},
            {"axis", axis_},
            {"sequence", sequence_},
            {"waited_s", waited}};
}

Watchdog::Lenient::Lenient(Watchdog* dog) : dog_(dog) {
    if (!dog_)
        return;
    std::lock_guard lock(dog_->mutex_);
    ++dog_->lenient_;
}

Watchdog::Lenient::~Lenient() {
    if (!dog_)
        return;
    std::lock_guard lock(dog_->mutex_);
    --dog_->lenient_;
}

void Watchdog::setLocalPeers(std::vector<Peer> peers) {
    std::lock_guard lock(mutex_);
    localPeers_ = std::move(peers);
}

void Watchdog::setPosition(std::int64_t step, int microbatch, const char* op) {
    std::lock_guard lock(mutex_);
    step_ = step;
    microbatch_ = microbatch;
    op_ = op;
}

Watchdog::Wait::Wait(Watchdog& dog, const char* collective, const std::string& axis,
                     std::uint64_t sequence)
    : dog_(dog) {
    std::lock_guard lock(dog_.mutex_);
    dog_.waiting_ = true;
    dog_.collective_ = collective;
    dog_.axis_ = axis;
    dog_.sequence_ = sequence;
    dog_.since_ = Clock::now();
    dog_.stallReported_ = false;
}

Watchdog::Wait::~Wait() {
    std::lock_guard lock(dog_.mutex_);
    dog_.waiting_ = false;
}

void Watchdog::watch() {
    // Checks ten times per timeout (at most once a second), so a hang is caught within 10%, and
    // twice per stall threshold.
    std::unique_lock lock(mutex_);
    while (!stopping_) {
        double period = std::min(1.0, timeout_ / 10);
        if (stallSeconds_ > 0)
            period = std::min(period, stallSeconds_ / 2);
        if (!localPeers_.empty())
            period = std::min(period, kPeerCheckSeconds);
        wake_.wait_for(lock, std::chrono::duration<double>(period));
        if (stopping_ || !waiting_)
            continue;
        const double waited = std::chrono::duration<double>(Clock::now() - since_).count();
        if (waited >= kPeerCheckSeconds)
            for (auto peer = localPeers_.begin(); peer != localPeers_.end(); ++peer) {
                if (!processGone(peer->pid))
                    continue;
                if (!reportDir_.empty() && saidWhyItEnded(reportDir_, peer->rank)) {
                    localPeers_.erase(peer); // it ended the job on purpose and said why
                    break;
                }
                const Peer lost = *peer;
                lock.unlock();
                peerLost(lost, waited);
                return;
            }
        if (waited >= (lenient_ > 0 ? kLenience : 1.0) * timeout_) {
            lock.unlock();
            fire(waited);
            return;
        }
        if (stallSeconds_ > 0 && waited >= stallSeconds_ && !stallReported_) {
            stallReported_ = true;
            json event = position(waited);
            event.erase("rank");
            event["type"] = "event";
            event["event"] = "stall";
            event["timeout_s"] = timeout_;
            lock.unlock();
            emit(std::move(event));
            lock.lock();
        }
    }
}

namespace {

fs::path reportPath(const fs::path& dir, int rank) {
    return dir / ("hang-rank-" + std::to_string(rank) + ".json");
}

} // namespace

void Watchdog::fire(double waited) {
    json mine;
    fs::path dir;
    {
        std::lock_guard lock(mutex_);
        mine = position(waited);
        dir = reportDir_;
    }
    {
        json event = mine;
        event.erase("rank");
        event["type"] = "event";
        event["event"] = "hang";
        event["timeout_s"] = timeout_;
        emit(std::move(event));
    }
    char line[512];
    std::snprintf(line, sizeof line,
                  "shardscope-engine: rank %d: no progress for %.1f s (timeout %.1f s) in %s #%llu "
                  "on %s, at step %lld, microbatch %d, op %s\n",
                  rank_, waited, timeout_, mine["collective"].get<std::string>().c_str(),
                  static_cast<unsigned long long>(mine["sequence"].get<std::uint64_t>()),
                  mine["axis"].get<std::string>().c_str(),
                  static_cast<long long>(mine["step"].get<std::int64_t>()),
                  mine["microbatch"].get<int>(), mine["op"].get<std::string>().c_str());
    std::fputs(line, stderr);
    std::fflush(stderr);

    // The other ranks blocked in the same collective time out at about the same moment; the
    // ones that never reach it write nothing.
    std::vector<int> reported{rank_}, missing;
    if (!dir.empty()) {
        std::ofstream(reportPath(dir, rank_)) << mine.dump() << "\n";
        std::this_thread::sleep_for(std::chrono::duration<double>(std::min(timeout_, 10.0)));
        reported.clear();
        for (int r = 0; r < worldSize_; ++r) {
            std::error_code ec;
            (r == rank_ || fs::exists(reportPath(dir, r), ec) ? reported : missing).push_back(r);
        }
    }
    if (reported.front() == rank_) { // one rank sums up for the job
        std::ostringstream text;
        text << "The job hung and is being ended (exit 5): ";
        if (dir.empty()) {
            text << "rank " << rank_ << " waited in " << mine["collective"].get<std::string>()
                 << " before the run directory existed";
        } else if (missing.empty()) {
            text << "every rank reported waiting (reports: " << dir.string()
                 << "/hang-rank-*.json); the collectives they wait in do not match";
        } else {
            text << "ranks that never reported: ";
            for (std::size_t i = 0; i < missing.size(); ++i)
                text << (i ? ", " : "") << missing[i];
            text << " (stopped, dead, hung outside a collective, or still within the longer "
                    "allowance of a checkpoint); the waiting ranks' reports are "
                 << dir.string() << "/hang-rank-*.json";
        }
        std::fputs(("shardscope-engine: " + text.str() + "\n").c_str(), stderr);
        std::fflush(stderr);
        emit({{"type", "event"},
              {"event", "hang_summary"},
              {"message", text.str()},
              {"reported", reported},
              {"missing", missing}});
        drain();
        abort_(5);
        return;
    }
    drain();
    // That rank sums up and ends the job; should it never get there, this one does.
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(timeout_, 10.0) + 5.0));
    abort_(5);
}

void Watchdog::peerLost(const Peer& lost, double waited) {
    json mine;
    {
        std::lock_guard lock(mutex_);
        mine = position(waited);
    }
    char line[640];
    std::snprintf(line, sizeof line,
                  "shardscope-engine: rank %d: rank %d (pid %ld on this host) is gone: it ended "
                  "without an end, error or hang event (killed, or crashed) while this rank waited "
                  "%.1f s in %s "
                  "#%llu on %s, at step %lld, microbatch %d, op %s; ending the job (exit 5)",
                  rank_, lost.rank, lost.pid, waited, mine["collective"].get<std::string>().c_str(),
                  static_cast<unsigned long long>(mine["sequence"].get<std::uint64_t>()),
                  mine["axis"].get<std::string>().c_str(),
                  static_cast<long long>(mine["step"].get<std::int64_t>()),
                  mine["microbatch"].get<int>(), mine["op"].get<std::string>().c_str());
    // stderr first: the launcher may kill this process at any moment now.
    std::fputs((std::string(line) + "\n").c_str(), stderr);
    std::fflush(stderr);
    json event = mine;
    event.erase("rank");
    event["type"] = "event";
    event["event"] = "rank_lost";
    event["lost_rank"] = lost.rank;
    event["lost_pid"] = lost.pid;
    event["message"] = std::string(line).substr(std::string("shardscope-engine: ").size());
    emit(std::move(event));
    drain();
    abort_(5);
}

// The group's name as telemetry spells axes ("dp", "pp", "world").
std::string WatchedCommunicator::axis() const {
    std::string a = name();
    for (char& ch : a)
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return a;
}

WatchedCommunicator::WatchedCommunicator(std::unique_ptr<Communicator> owned, Watchdog& dog)
    : owned_(std::move(owned)), inner_(*owned_), dog_(dog) {}

WatchedCommunicator::WatchedCommunicator(Communicator& inner, Watchdog& dog)
    : inner_(inner), dog_(dog) {}

namespace {

class WatchedPending final : public Request::Pending {
public:
    WatchedPending(Request inner, Watchdog& dog, const char* collective, std::string axis,
                   std::uint64_t sequence)
        : inner_(std::move(inner)), dog_(dog), collective_(collective), axis_(std::move(axis)),
          sequence_(sequence) {}
    void wait() override {
        const Watchdog::Wait guard(dog_, collective_, axis_, sequence_);
        inner_.wait();
    }
    bool test() override { return inner_.done(); }

private:
    Request inner_;
    Watchdog& dog_;
    const char* collective_;
    std::string axis_;
    std::uint64_t sequence_;
};

} // namespace

Request WatchedCommunicator::watched(Request inner, const char* collective) {
    return Request(
        std::make_unique<WatchedPending>(std::move(inner), dog_, collective, axis(), ++sequence_));
}

Request WatchedCommunicator::allReduceSum(kernels::Ptr data, std::size_t n) {
    return watched(inner_.allReduceSum(data, n), "all_reduce");
}
Request WatchedCommunicator::allReduceMax(float* data, std::size_t n) {
    return watched(inner_.allReduceMax(data, n), "all_reduce_max");
}
Request WatchedCommunicator::allGather(kernels::ConstPtr in, kernels::Ptr out, std::size_t n) {
    return watched(inner_.allGather(in, out, n), "all_gather");
}
Request WatchedCommunicator::reduceScatterSum(kernels::ConstPtr in, kernels::Ptr out,
                                              std::size_t n) {
    return watched(inner_.reduceScatterSum(in, out, n), "reduce_scatter");
}
Request WatchedCommunicator::send(kernels::ConstPtr data, std::size_t n, int peer) {
    return watched(inner_.send(data, n, peer), "send");
}
Request WatchedCommunicator::receive(kernels::Ptr data, std::size_t n, int peer) {
    return watched(inner_.receive(data, n, peer), "recv");
}
void WatchedCommunicator::barrier() {
    const Watchdog::Wait guard(dog_, "barrier", axis(), ++sequence_);
    inner_.barrier();
}
std::unique_ptr<Communicator> WatchedCommunicator::subgroup(const std::vector<int>& ranks,
                                                            const std::string& name) {
    return std::make_unique<WatchedCommunicator>(inner_.subgroup(ranks, name), dog_);
}

namespace {

class WatchedControlChannel final : public ControlChannel {
public:
    WatchedControlChannel(std::unique_ptr<ControlChannel> inner, Watchdog& dog)
        : inner_(std::move(inner)), dog_(dog) {}
    int rank() const override { return inner_->rank(); }
    int size() const override { return inner_->size(); }
    void sum(double* values, std::size_t n) override {
        const Watchdog::Wait guard(dog_, "control_sum", "control", ++sequence_);
        inner_->sum(values, n);
    }
    void send(const double* values, std::size_t n, int peer) override {
        const Watchdog::Wait guard(dog_, "control_send", "control", ++sequence_);
        inner_->send(values, n, peer);
    }
    void receive(double* values, std::size_t n, int peer) override {
        const Watchdog::Wait guard(dog_, "control_recv", "control", ++sequence_);
        inner_->receive(values, n, peer);
    }

private:
    std::unique_ptr<ControlChannel> inner_;
    Watchdog& dog_;
    std::uint64_t sequence_ = 0;
};

} // namespace

std::unique_ptr<ControlChannel> WatchedCommunicator::controlChannel() {
    return std::make_unique<WatchedControlChannel>(inner_.controlChannel(), dog_);
}

} // namespace shardscope
