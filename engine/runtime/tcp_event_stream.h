// Telemetry lines streamed to a collector over TCP, off the training thread. push() only takes a
// mutex and appends to a bounded queue; a background thread connects, sends and reconnects. A
// collector that is absent, slow or gone costs dropped lines, never a stalled producer.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace shardscope {

// "tcp://HOST:PORT" (HOST a name, an IPv4 address or a bracketed IPv6 address, "[::1]"), or
// "unix:PATH", a Unix socket on this host: the collector of ranks kept off the network (their
// own network namespace reaches a socket file, never the host's loopback).
struct CollectorAddress {
    std::string host;
    int port = 0;
    std::string path; // unix: only, an absolute path
};

// Throws InputError naming the expected form when `text` is not tcp://HOST:PORT with a port in
// 1..65535 or unix:PATH with an absolute PATH a socket address can hold. Does not resolve the
// host.
CollectorAddress parseCollectorAddress(const std::string& text);

struct EventStreamStats {
    std::int64_t pushed = 0;  // lines offered by push()
    std::int64_t sent = 0;    // lines (with their '\n') fully accepted by the socket
    std::int64_t dropped = 0; // lines discarded: queue full, no connection, or a failed send
    bool connected = false;
};

class TcpEventStream {
public:
    // Parses and resolves the collector now, so a typo fails at startup with InputError; the
    // connection itself is made, and remade after failures, in the background, each time opened
    // with `greeting` (see setGreeting).
    TcpEventStream(const std::string& collector, std::size_t capacity,
                   std::vector<std::string> greeting = {});
    ~TcpEventStream(); // close()
    TcpEventStream(const TcpEventStream&) = delete;
    TcpEventStream& operator=(const TcpEventStream&) = delete;

    // Lines sent first on every new connection, before anything queued (the hello with the
    // collector's token, the run's start event). Not counted in the stats. Safe from any thread.
    void setGreeting(std::vector<std::string> lines);
    std::vector<std::string> greeting() const;
    // Waits until every line queued so far has been sent or dropped, at most `timeout`; true
    // when nothing is left.
    bool waitUntilSent(std::chrono::milliseconds timeout);

    // Settles the accounts: waits up to `timeout` for every queued line to be sent, then drops
    // what is still queued and cuts short a batch still being sent (its unsent lines dropped and
    // the connection closed, since a line may be cut), so that afterwards pushed == sent +
    // dropped for everything pushed before the call. The stream stays open: later lines go out
    // on a new connection. For the counts a run's last event reports.
    void settle(std::chrono::milliseconds timeout);

    // Queues one line (without '\n'; the stream terminates it). When `capacity` lines are already
    // waiting the line is dropped instead. Safe from any thread.
    void push(std::string line);
    // Stops the thread: lines still queued get up to kDrainTime to reach the collector (with one
    // connection attempt if there is none), the rest are dropped. Afterwards pushed == sent +
    // dropped. Idempotent; push() after close() counts as dropped.
    void close();
    EventStreamStats stats() const; // safe from any thread

    static constexpr std::chrono::milliseconds kConnectTimeout{1000};
    static constexpr std::chrono::milliseconds kRetryInterval{1000};
    static constexpr std::chrono::milliseconds kDrainTime{1000};
    // A collector whose socket accepts no byte for this long is treated as gone and reconnected:
    // a peer that vanished without closing would otherwise hold the stream for TCP's own timeout.
    static constexpr std::chrono::milliseconds kStallTimeout{10000};

private:
    struct Address; // a resolved sockaddr, defined where the socket headers are included
    static Address unixAddress(const std::string& path);
    void resolve(const CollectorAddress& address); // fills addresses_ or throws InputError

    void run();
    bool connectOnce(); // tries each resolved address; true with fd_ connected and greeted
    bool hasQueued();
    void disconnect();
    bool peerClosed();
    std::size_t sendAll(const char* data, std::size_t size);
    void sendBatch(const std::vector<std::string>& batch);
    void dropFor(std::chrono::milliseconds duration); // waits, dropping what arrives meanwhile
    void drop(std::vector<std::string>& lines);

    std::string collector_;
    std::vector<Address> addresses_;
    std::size_t capacity_;

    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::condition_variable idle_;      // queue empty and no batch on its way
    std::vector<std::string> queue_;    // guarded by mutex_
    std::vector<std::string> greeting_; // guarded by mutex_
    bool sending_ = false;              // guarded by mutex_: a batch taken from the queue
    bool closed_ = false;               // guarded by mutex_; push() drops from then on
    // Set by settle(): the batch being sent is given up at once. Read by sendAll().
    std::atomic<bool> abandon_{false};

    // Written before stop_ is set, read after it is seen: the end of the drain window.
    std::chrono::steady_clock::time_point drainDeadline_;
    std::atomic<bool> stop_{false};
    // Written by close() (once) and settle() to interrupt a connect or send poll().
    int wakePipe_[2] = {-1, -1};
    int fd_ = -1; // owned by the stream thread

    std::atomic<std::int64_t> pushed_{0};
    std::atomic<std::int64_t> sent_{0};
    std::atomic<std::int64_t> dropped_{0};
    std::atomic<bool> connected_{false};

    std::thread thread_; // last: starts after every member above exists
};

} // namespace shardscope
