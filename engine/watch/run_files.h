// Telemetry from disk: one event line with limits (a line is untrusted input), a run directory's
// files, and a replay that brings a RunState to any moment of a finished run.
#pragma once

#include "run_state.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope::watch {

// The largest event line read (a start event with a large model config is about 10 KB) and the
// deepest nesting (the engine writes 4 levels): beyond either a line is rejected, never parsed.
inline constexpr std::size_t kMaxEventBytes = 1u << 20;
inline constexpr int kMaxEventDepth = 32;

// The event on one line, or nullopt with *why set: not JSON, not an object, too long, too deep.
std::optional<nlohmann::json> parseEventLine(std::string_view line, std::string* why = nullptr);

// A telemetry file read line by line, never holding more than kMaxEventBytes of one line.
class EventLineReader {
public:
    explicit EventLineReader(const std::filesystem::path& path); // an unreadable file reads empty
    ~EventLineReader();
    EventLineReader(const EventLineReader&) = delete;
    EventLineReader& operator=(const EventLineReader&) = delete;

    // The next line into `line` (without '\n'); a longer one is skipped to its end and *tooLong
    // set. False at the end: a last line without '\n' (a run still writing it, or killed in the
    // middle of it) is not returned.
    bool next(std::string& line, bool* tooLong);

private:
    std::FILE* file_ = nullptr;
    std::vector<char> buffer_;
    std::size_t begin_ = 0, end_ = 0;
};

struct RunFiles {
    std::filesystem::path dir;
    std::vector<std::pair<int, std::filesystem::path>> ranks; // telemetry/rank-<r>.jsonl
    nlohmann::json summary;                                   // summary.json, or null
};

// Throws InputError naming the directory and what is missing when it is not a run directory
// (no telemetry/rank-*.jsonl files).
RunFiles findRunFiles(const std::filesystem::path& dir);

struct ReadCounts {
    std::int64_t events = 0;
    std::int64_t badLines = 0; // not JSON, too long or too deep
};

// Every event of every rank into `state`.
ReadCounts readRun(const RunFiles& files, RunState& state);

// A finished (or still running) run replayed up to any moment: time runs from 0 at the first
// event to duration(), resumed segments one after the other on their wall clocks.
class RunReplay {
public:
    explicit RunReplay(RunFiles files);
    double duration() const { return duration_; }
    // The run as it was `seconds` after its first event. Moving forward reads on from where the
    // last call stopped; moving back reads again from the start.
    const RunState& at(double seconds);
    const RunFiles& files() const { return files_; }

private:
    struct Reader {
        int rank = 0;
        std::unique_ptr<EventLineReader> in;
        std::optional<nlohmann::json> pending; // read, not yet due
        double pendingAt = 0;
        double segmentStart = 0; // replay time of the current segment's t = 0
        bool done = false;
    };
    void restart();
    bool next(Reader& r); // reads the next event into r.pending

    RunFiles files_;
    std::vector<Reader> readers_;
    RunState state_;
    double position_ = -std::numeric_limits<double>::infinity();
    double duration_ = 0;
    double origin_ = 0; // wall clock of the run's first segment
};

} // namespace shardscope::watch
