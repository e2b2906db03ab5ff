// The engine's telemetry: newline-delimited JSON events (schema in docs/telemetry.md) written to
// the run directory, and optionally streamed to a collector over TCP. The file always gets every
// event; the stream runs on its own thread behind a bounded queue, so a slow, absent or vanishing
// collector never slows or stops training. What the queue drops is counted. Every connection to
// the collector opens with a hello line (the run's token, this process's session id) and the
// latest start event, so a collector that connects late or reconnects knows the run.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

namespace shardscope {

inline constexpr int kTelemetrySchemaVersion = 2;
// The environment variable that carries the collector's token (never the command line, which
// `ps` shows to every user of the host).
inline constexpr const char* kTelemetryTokenVariable = "SHARDSCOPE_TELEMETRY_TOKEN";

struct TelemetryOptions {
    std::string path;      // NDJSON file, created (with its directory) or truncated
    std::string collector; // "", "tcp://HOST:PORT" or "unix:PATH"
    int rank = 0;
    bool append = false;              // keep earlier events (a resumed run)
    std::size_t queueCapacity = 8192; // events held for the collector before new ones are dropped
    nlohmann::json coordinate = nullptr; // the rank's place in the mesh, added to every event
    std::string token{};                 // sent in the hello line that opens every connection
    nlohmann::json hello = nullptr;      // more fields for the hello line (host, pid)
};

struct TelemetryStats {
    std::int64_t written = 0; // events in the file
    std::int64_t sent = 0;    // events the collector's socket accepted
    std::int64_t dropped = 0; // events the collector never got (queue full or disconnected)
    bool connected = false;
};

class TcpEventStream;

// Every member may be called from any thread (the training thread writes spans, the watchdog's
// thread writes stall and hang reports).
class TelemetryWriter {
public:
    // Throws InputError for an unwritable path or a malformed collector address.
    explicit TelemetryWriter(TelemetryOptions options);
    ~TelemetryWriter(); // flushes the file; gives the stream up to a second to drain
    TelemetryWriter(const TelemetryWriter&) = delete;
    TelemetryWriter& operator=(const TelemetryWriter&) = delete;

    // Seconds since the writer was created, from the monotonic clock, plus the clock offset:
    // every timestamp in events.
    double now() const;
    // The same clock at a moment given as seconds of std::chrono::steady_clock (an event's).
    double timeOfSteadyClock(double steadySeconds) const;
    // Shifts now() onto another clock (rank 0's, clock_sync.h); set before the first event.
    void setClockOffset(double seconds) { offset_.store(seconds, std::memory_order_relaxed); }
    // Adds "v" (schema version), "rank", "seq" (1, 2, ... in this process) and, when absent,
    // "t" (now()); appends one line to the file and offers it to the stream. Never blocks on the
    // network. The event must be a JSON object (std::invalid_argument otherwise); a failed file
    // write throws InputError. A start event becomes the one re-sent on every new connection.
    void write(nlohmann::json event);
    // The run's last event, with "telemetry": {written, sent, dropped} added: queued events get
    // up to `drainTime` to reach the collector and the rest are dropped first, so the counts add
    // up: sent + dropped == written - 1 (the end event itself is written, not yet sent).
    void writeEnd(nlohmann::json event, std::chrono::milliseconds drainTime);
    void flush(); // the file, to the OS; InputError if that fails (disk full)
    // Waits until the stream has sent what is queued (at most `timeout`); true when it has, or
    // when there is no stream. Used before the process is ended from outside (a hang).
    bool drain(std::chrono::milliseconds timeout);
    TelemetryStats stats() const;
    // The random id of this process's stream, in its hello line: with "seq", it tells a
    // collector which events it has already seen.
    const std::string& session() const { return session_; }

private:
    void stamp(nlohmann::json& event) const; // v, rank, coord, t
    void append(nlohmann::json event);       // seq; the file and the stream; mutex_ held

    TelemetryOptions options_;
    std::chrono::steady_clock::time_point epoch_;
    std::string session_;
    std::mutex mutex_; // one event at a time into the file and the stream
    std::FILE* file_ = nullptr;
    std::int64_t seq_ = 0;                 // guarded by mutex_
    std::atomic<std::int64_t> written_{0}; // read by stats() from any thread
    std::atomic<double> offset_{0.0};
    std::unique_ptr<TcpEventStream> stream_;
};

} // namespace shardscope
