// The collector's half of the telemetry stream (docs/telemetry.md, Streaming): the hello line
// that must open every connection, with the run's token, and which of the events that follow are
// new (a stream re-sends its start event on every connection).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

namespace shardscope::watch {

struct Hello {
    int rank = 0;
    std::string session; // the sending process's random id
    long pid = 0;
    std::string host;
    int worldSize = 0;
};

// The hello of a connection whose first line is `first`, when it carries `token`; nullopt with
// *why otherwise (a line that is not a hello, a wrong or missing token, a bad rank). Tokens are
// compared in constant time.
std::optional<Hello> acceptHello(const nlohmann::json& first, const std::string& token,
                                 std::string* why);

// Per rank and sending process, the highest event number seen: an event at or below it is a
// copy (the re-sent start event, or what a reconnection repeats) and is dropped.
class EventNumbers {
public:
    // True when `event` from the connection that said `hello` has not been seen before.
    bool isNew(const Hello& hello, const nlohmann::json& event);
    std::int64_t repeats() const { return repeats_; }

private:
    std::map<std::pair<int, std::string>, std::int64_t> highest_;
    std::int64_t repeats_ = 0;
};

} // namespace shardscope::watch
