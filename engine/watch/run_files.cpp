#include "run_files.h"

#include "core/error.h"
#include "core/json_io.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>

namespace shardscope::watch {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

bool isStart(const json& e) {
    const auto type = e.find("type"), event = e.find("event");
    return type != e.end() && *type == "event" && event != e.end() && *event == "start";
}

double numberOr(const json& e, const char* key, double fallback) {
    const auto it = e.find(key);
    return it != e.end() && it->is_number() ? it->get<double>() : fallback;
}

} // namespace

std::optional<json> parseEventLine(std::string_view line, std::string* why) {
    auto fail = [&](const std::string& reason) -> std::optional<json> {
        if (why)
            *why = reason;
        return std::nullopt;
    };
    if (line.size() > kMaxEventBytes)
        return fail("a line of " + std::to_string(line.size()) + " bytes (the limit is " +
                    std::to_string(kMaxEventBytes) + ")");
    if (jsonNestingDepth(line) > std::size_t(kMaxEventDepth))
        return fail("nested deeper than " + std::to_string(kMaxEventDepth) + " levels");
    json e = json::parse(line.begin(), line.end(), nullptr, false);
    if (e.is_discarded())
        return fail("not JSON");
    if (!e.is_object())
        return fail(std::string("a JSON ") + e.type_name() + ", not an object");
    return e;
}

EventLineReader::EventLineReader(const fs::path& path)
    : file_(std::fopen(path.c_str(), "rb")), buffer_(64 * 1024) {}

EventLineReader::~EventLineReader() {
    if (file_)
        std::fclose(file_);
}

bool EventLineReader::next(std::string& line, bool* tooLong) {
    line.clear();
    *tooLong = false;
    if (!file_)
        return false;
    for (;;) {
        if (begin_ == end_) {
            begin_ = 0;
            end_ = std::fread(buffer_.data(), 1, buffer_.size(), file_);
            if (end_ == 0)
                return false;
        }
        const char* from = buffer_.data() + begin_;
        const char* nl = static_cast<const char*>(std::memchr(from, '\n', end_ - begin_));
        const std::size_t length = nl ? std::size_t(nl - from) : end_ - begin_;
        const std::size_t room = kMaxEventBytes - std::min(kMaxEventBytes, line.size());
        line.append(from, std::min(length, room));
        if (length > room)
            *tooLong = true;
        begin_ += length;
        if (nl) {
            ++begin_;
            return true;
        }
    }
}

RunFiles findRunFiles(const fs::path& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        throw InputError("'" + dir.string() +
                         "' is not a directory: give a run directory (the "
                         "--out of shardscope-engine train)");
    RunFiles files;
    files.dir = dir;
    const fs::path telemetry = dir / "telemetry";
    const std::regex name("rank-([0-9]{1,7})\\.jsonl");
    if (fs::is_directory(telemetry, ec))
        for (const fs::directory_entry& entry : fs::directory_iterator(telemetry, ec)) {
            std::smatch m;
            const std::string file = entry.path().filename().string();
            if (entry.is_regular_file(ec) && std::regex_match(file, m, name))
                files.ranks.emplace_back(std::stoi(m[1]), entry.path());
        }
    if (files.ranks.empty())
        throw InputError("'" + dir.string() +
                         "' has no telemetry/rank-<r>.jsonl files: it is "
                         "not a run directory, or its run has not started");
    std::sort(files.ranks.begin(), files.ranks.end());
    // summary.json is pretty-printed: its lines are joined before parsing.
    EventLineReader summary(dir / "summary.json");
    std::string text, line;
    bool tooLong = false;
    while (summary.next(line, &tooLong) && !tooLong && text.size() < kMaxEventBytes)
        text += line;
    if (auto s = parseEventLine(text))
        files.summary = std::move(*s);
    return files;
}

ReadCounts readRun(const RunFiles& files, RunState& state) {
    ReadCounts counts;
    std::string line;
    for (const auto& [rank, path] : files.ranks) {
        EventLineReader in(path);
        bool tooLong = false;
        while (in.next(line, &tooLong)) {
            std::optional<json> e = tooLong ? std::nullopt : parseEventLine(line);
            if (!e) {
                ++counts.badLines;
                continue;
            }
            state.add(*e);
            ++counts.events;
        }
    }
    return counts;
}

RunReplay::RunReplay(RunFiles files) : files_(std::move(files)) {
    // The run begins at the earliest first start event; its length is the latest event's time
    // as at() places it.
    origin_ = std::numeric_limits<double>::infinity();
    restart();
    for (Reader& r : readers_)
        while (next(r))
            if (isStart(*r.pending)) {
                origin_ = std::min(origin_, numberOr(*r.pending, "wall_clock", 0));
                break;
            }
    if (!std::isfinite(origin_))
        origin_ = 0;
    restart();
    for (Reader& r : readers_)
        while (next(r)) {
            duration_ = std::max(duration_, r.pendingAt);
            state_.add(*r.pending); // next() tells segments apart by what the state has seen
        }
    restart();
}

void RunReplay::restart() {
    readers_.clear();
    for (const auto& [rank, path] : files_.ranks) {
        Reader r;
        r.rank = rank;
        r.in = std::make_unique<EventLineReader>(path);
        readers_.push_back(std::move(r));
    }
    state_ = RunState();
    position_ = -std::numeric_limits<double>::infinity();
}

bool RunReplay::next(Reader& r) {
    std::string line;
    bool tooLong = false;
    while (r.in->next(line, &tooLong)) {
        std::optional<json> e = tooLong ? std::nullopt : parseEventLine(line);
        if (!e)
            continue;
        if (isStart(*e)) {
            // The first segment starts at 0 for every rank (their t is already aligned); a
            // resumed one on its own wall clock.
            const double wall = numberOr(*e, "wall_clock", origin_);
            r.segmentStart = state_.rank(r.rank) ? wall - origin_ : 0.0;
        }
        r.pendingAt = r.segmentStart + numberOr(*e, "t", 0);
        r.pending = std::move(e);
        return true;
    }
    r.done = true;
    return false;
}

const RunState& RunReplay::at(double seconds) {
    if (seconds < position_)
        restart();
    position_ = seconds;
    for (Reader& r : readers_) {
        for (;;) {
            if (!r.pending && (r.done || !next(r)))
                break;
            if (r.pendingAt > seconds)
                break;
            state_.add(*r.pending);
            r.pending.reset();
        }
    }
    return state_;
}

} // namespace shardscope::watch
