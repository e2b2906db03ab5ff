#include "run_trace.h"

#include <cmath>
#include <string>

namespace shardscope::watch {

using nlohmann::json;

namespace {

std::string textOf(const json& e, const char* key) {
    const auto it = e.find(key);
    return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
}

double numberOf(const json& e, const char* key) {
    const auto it = e.find(key);
    return it != e.end() && it->is_number() ? it->get<double>() : NAN;
}

// Name of a compute or wait span: "forward layer 3", "wait recv pp".
std::string spanName(const json& e, const std::string& kind) {
    std::string name = kind;
    if (const std::string block = textOf(e, "block"); !block.empty()) {
        name += " " + block;
        if (const auto l = e.find("layer"); l != e.end() && l->is_number_integer())
            name += " " + std::to_string(l->get<int>());
    }
    if (const std::string c = textOf(e, "collective"); !c.empty())
        name += " " + c + " " + textOf(e, "axis");
    return name;
}

} // namespace

TraceCounts writeRunTrace(const RunFiles& files, std::ostream& out) {
    TraceCounts counts;
    bool first = true;
    auto emit = [&](const json& event) {
        out << (first ? "\n" : ",\n") << event.dump(-1, ' ', false, json::error_handler_t::replace);
        first = false;
    };
    out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [";
    std::int64_t asyncId = 0;
    std::string line;
    for (const auto& [rank, path] : files.ranks) {
        emit({{"name", "process_sort_index"},
              {"ph", "M"},
              {"pid", rank},
              {"args", {{"sort_index", rank}}}});
        emit({{"name", "thread_name"},
              {"ph", "M"},
              {"pid", rank},
              {"tid", 0},
              {"args", {{"name", "compute and waits"}}}});
        bool named = false;
        double segment = 0, origin = NAN;
        EventLineReader in(path);
        bool tooLong = false;
        while (in.next(line, &tooLong)) {
            const std::optional<json> e = tooLong ? std::nullopt : parseEventLine(line);
            if (!e) {
                ++counts.badLines;
                continue;
            }
            const std::string type = textOf(*e, "type");
            if (type == "event" && textOf(*e, "event") == "start") {
                // Segments of a resumed run follow each other on their wall clocks.
                const double wall = numberOf(*e, "wall_clock");
                if (std::isnan(origin))
                    origin = std::isfinite(wall) ? wall : 0;
                segment = std::isfinite(wall) ? wall - origin : segment;
                if (!named) {
                    std::string label = "rank " + std::to_string(rank);
                    if (const auto c = e->find("coord"); c != e->end() && c->is_object())
                        label += " (dp " + c->value("dp", json(0)).dump() + ", tp " +
                                 c->value("tp", json(0)).dump() + ", pp " +
                                 c->value("pp", json(0)).dump() + ")";
                    if (const std::string host = textOf(*e, "host"); !host.empty())
                        label += " on " + host;
                    emit({{"name", "process_name"},
                          {"ph", "M"},
                          {"pid", rank},
                          {"args", {{"name", label}}}});
                    named = true;
                }
                continue;
            }
            if (type != "span")
                continue;
            const double start = numberOf(*e, "start"), end = numberOf(*e, "end");
            if (!std::isfinite(start) || !std::isfinite(end) || end < start) {
                ++counts.badLines;
                continue;
            }
            const std::string kind = textOf(*e, "kind");
            json args = {{"step", e->value("step", json())}, {"mb", e->value("mb", json())}};
            for (const char* key : {"chunk", "bytes", "peer", "tensor"})
                if (e->contains(key))
                    args[key] = (*e)[key];
            const double ts = (segment + start) * 1e6;
            if (kind == "communication") {
                const std::string axis = textOf(*e, "axis");
                const json common = {{"name", textOf(*e, "collective")},
                                     {"cat", axis.empty() ? "communication" : axis},
                                     {"pid", rank},
                                     {"tid", 1},
                                     {"id", ++asyncId}};
                json begin = common, finish = common;
                begin["ph"] = "b";
                begin["ts"] = ts;
                begin["args"] = args;
                finish["ph"] = "e";
                finish["ts"] = (segment + end) * 1e6;
                emit(begin);
                emit(finish);
            } else {
                emit({{"name", spanName(*e, kind)},
                      {"cat", kind},
                      {"ph", "X"},
                      {"pid", rank},
                      {"tid", 0},
                      {"ts", ts},
                      {"dur", (end - start) * 1e6},
                      {"args", args}});
            }
            ++counts.spans;
        }
    }
    out << "\n]}\n";
    return counts;
}

} // namespace shardscope::watch
