// A run as the monitor sees it while it happens: the telemetry server's thread writes events in
// under a lock; the GUI thread takes what it draws under the same lock, at most once a frame
// (PlotJuggler's pattern). Also counts what the server refused or dropped.
#pragma once

#include "watch/run_state.h"

#include <QElapsedTimer>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>

namespace shardscope {

class LiveRun {
public:
    LiveRun() { clock_.start(); }

    // Seconds on the receiver's clock, which silence is measured against.
    double now() const { return double(clock_.nsecsElapsed()) * 1e-9; }

    // Producer side (the server's thread). Each returns true when the run had been clean, i.e.
    // the consumer needs telling.
    bool add(const nlohmann::json& event);
    bool connectionClosed(int rank);
    bool launcherNotice(const watch::LauncherNotice& notice); // from the launcher's output
    bool refused();
    bool repeated();

    // Consumer side: `read` runs under the lock with the state; the dirty mark is cleared.
    void read(const std::function<void(const watch::RunState&)>& read);
    bool dirty() const { return dirty_.load(); }

    std::int64_t refusedConnections() const { return refused_.load(); }
    std::int64_t repeatedEvents() const { return repeated_.load(); }
    std::int64_t events() const { return events_.load(); }

    // Starts over for a new run (the server must be idle).
    void reset();

private:
    bool markDirty() { return !dirty_.exchange(true); }

    QElapsedTimer clock_;
    mutable std::mutex mutex_;
    watch::RunState state_; // guarded by mutex_
    std::atomic<bool> dirty_{false};
    std::atomic<std::int64_t> refused_{0}, repeated_{0}, events_{0};
};

} // namespace shardscope
