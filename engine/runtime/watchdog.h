// Ends a job that hangs instead of letting it wait forever. Every blocking wait on a collective
// or a receive goes through a WatchedCommunicator, which tells the rank's Watchdog what it is
// waiting for (collective, axis, sequence number) while the training loop tells it where it is
// (step, microbatch, op). A wait that outlasts the stall threshold is reported as it happens
// (a `stall` event, so a monitor names the blocked op within seconds); when one outlasts the
// timeout, the watchdog thread writes this rank's report to the run directory and as a `hang`
// event, gives the other ranks' watchdogs a moment to write theirs, names the ranks that never
// reported (hung outside a collective, stopped or dead) and ends the whole job through the
// communicator.
#pragma once

#include "communicator.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <thread>
#include <vector>

namespace shardscope {

class Watchdog {
public:
    // abort: ends this process with the code (the launcher ends the other ranks); called from
    // the watchdog's thread with the message printed and the telemetry drained, so it must not
    // call into MPI or NCCL.
    Watchdog(double timeoutSeconds, int rank, int worldSize, std::function<void(int)> abort);
    ~Watchdog();
    Watchdog(const Watchdog&) = delete;
    Watchdog& operator=(const Watchdog&) = delete;

    // Where reports go (the run directory's telemetry folder); none are written before.
    void setReportDirectory(const std::filesystem::path& dir);
    // Telemetry for stall and hang reports: `write` takes an event, `drain` gives the stream a
    // moment to deliver before the job is ended. A wait longer than `stallSeconds` (<= 0: never)
    // is reported once as a stall. Called from the watchdog's thread; setEvents({}, 0) before
    // what they write to goes away.
    struct Events {
        std::function<void(nlohmann::json)> write;
        std::function<void()> drain;
    };
    void setEvents(Events events, double stallSeconds);
    // Where the training loop is; a wait's report names it.
    void setPosition(std::int64_t step, int microbatch, const char* op);

    // The job's other processes on this host (rank, pid). While this rank waits, they are looked
    // at every kPeerCheckSeconds: one that no longer runs (killed, or crashed without a message)
    // is named at once with where this rank was, as a `rank_lost` event and on stderr, and the
    // job is ended (exit 5), before the launcher kills the rest without a word.
    struct Peer {
        int rank = 0;
        long pid = 0;
    };
    void setLocalPeers(std::vector<Peer> peers);
    static constexpr double kPeerCheckSeconds = 0.1;

    // While a Wait lives, this rank is blocked on one operation.
    class Wait {
    public:
        Wait(Watchdog& dog, const char* collective, const std::string& axis,
             std::uint64_t sequence);
        ~Wait();
        Wait(const Wait&) = delete;
        Wait& operator=(const Wait&) = delete;

    private:
        Watchdog& dog_;
    };

    // While a Lenient lives (a checkpoint: replicas wait for the writers' disks), a wait may
    // last kLenience times the timeout; a rank that dies then is still caught. null: no dog.
    static constexpr double kLenience = 10;
    class Lenient {
    public:
        explicit Lenient(Watchdog* dog);
        ~Lenient();
        Lenient(const Lenient&) = delete;
        Lenient& operator=(const Lenient&) = delete;

    private:
        Watchdog* dog_;
    };

    double timeout() const { return timeout_; }

private:
    void watch();
    void fire(double waited);
    void peerLost(const Peer& lost, double waited);
    nlohmann::json position(double waited) const; // with mutex_ held
    void emit(nlohmann::json event);              // without mutex_ held
    void drain();                                 // without mutex_ held

    const double timeout_;
    const int rank_, worldSize_;
    std::function<void(int)> abort_;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
    int lenient_ = 0;
    std::filesystem::path reportDir_;
    Events events_;
    double stallSeconds_ = 0;
    bool stallReported_ = false; // for the wait in progress
    std::vector<Peer> localPeers_;
    // Guarded by mutex_: the position and the wait in progress.
    std::int64_t step_ = 0;
    int microbatch_ = -1;
    std::string op_ = "start";
    bool waiting_ = false;
    const char* collective_ = "";
    std::string axis_;
    std::uint64_t sequence_ = 0;
    std::chrono::steady_clock::time_point since_;
    std::thread thread_;
};

// A Communicator whose every operation is numbered and whose every wait is watched.
class WatchedCommunicator final : public Communicator {
public:
    WatchedCommunicator(std::unique_ptr<Communicator> owned, Watchdog& dog);
    WatchedCommunicator(Communicator& inner, Watchdog& dog);

    int rank() const override { return inner_.rank(); }
    int size() const override { return inner_.size(); }
    std::string name() const override { return inner_.name(); }
    Request allReduceSum(kernels::Ptr data, std::size_t n) override;
    Request allReduceMax(float* data, std::size_t n) override;
    Request allGather(kernels::ConstPtr in, kernels::Ptr out, std::size_t n) override;
    Request reduceScatterSum(kernels::ConstPtr in, kernels::Ptr out, std::size_t n) override;
    Request send(kernels::ConstPtr data, std::size_t n, int peer) override;
    Request receive(kernels::Ptr data, std::size_t n, int peer) override;
    void barrier() override;
    void orderAfter(kernels::Stream& compute) override { inner_.orderAfter(compute); }
    // The inner group's channel, its every call watched as a wait on the axis "control".
    std::unique_ptr<ControlChannel> controlChannel() override;
    void abortJob(int code) override { inner_.abortJob(code); }
    std::unique_ptr<Communicator> subgroup(const std::vector<int>& ranks,
                                           const std::string& name) override;

private:
    Request watched(Request inner, const char* collective);
    std::string axis() const;

    std::unique_ptr<Communicator> owned_;
    Communicator& inner_;
    Watchdog& dog_;
    std::uint64_t sequence_ = 0;
};

} // namespace shardscope
