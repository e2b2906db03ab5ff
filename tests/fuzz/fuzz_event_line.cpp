// Telemetry as the monitor and `shardscope-cli report` read it: a rank's event lines from a
// connection (the hello first, then events, repeats dropped) and from a run directory's files
// (read line by line with limits, replayed to two moments and analysed, exported as a trace). A
// form feed splits the input between rank 0 and rank 1, so cross-rank analysis sees two ranks.
#include "core/error.h"
#include "fuzz_target.h"
#include "fuzz_temp_dir.h"
#include "watch/analysis.h"
#include "watch/run_files.h"
#include "watch/run_state.h"
#include "watch/run_trace.h"
#include "watch/stream_protocol.h"

#include <fstream>
#include <sstream>

using namespace shardscope;
using namespace shardscope::watch;

namespace {

// The collector's side: the first line must be a hello with the token; then new events only.
void readConnection(std::string_view stream, RunState& state) {
    std::optional<Hello> hello;
    EventNumbers numbers;
    double receivedAt = 0;
    while (!stream.empty()) {
        const std::size_t end = stream.find('\n');
        const std::string_view line = stream.substr(0, end);
        stream = end == std::string_view::npos ? std::string_view{} : stream.substr(end + 1);
        std::optional<nlohmann::json> event = parseEventLine(line);
        if (!event)
            continue;
        if (!hello) {
            std::string why;
            hello = acceptHello(*event, "fuzz-token", &why);
            if (!hello)
                return; // the collector closes a connection that does not open with its hello
            continue;
        }
        if (numbers.isNew(*hello, *event))
            state.add(*event, receivedAt += 0.01);
    }
    if (hello)
        state.connectionClosed(hello->rank, receivedAt + 1);
}

void write(const std::filesystem::path& path, std::string_view bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(bytes.data(), std::streamsize(bytes.size()));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view input = fuzz::text(data, size);
    const std::size_t split = input.find('\f');
    const std::string_view rank0 = input.substr(0, split);
    const std::string_view rank1 =
        split == std::string_view::npos ? std::string_view{} : input.substr(split + 1);

    RunState live;
    readConnection(rank0, live);
    readConnection(rank1, live);
    (void)analyse(live);

    const std::filesystem::path run = fuzz::tempDir() / "run";
    std::filesystem::create_directories(run / "telemetry");
    write(run / "telemetry" / "rank-0.jsonl", rank0);
    write(run / "telemetry" / "rank-1.jsonl", rank1);
    try {
        const RunFiles files = findRunFiles(run);
        std::ostringstream trace;
        (void)writeRunTrace(files, trace);
        // The report's replay reads the files as readRun does, line by line with limits.
        RunReplay replay(files);
        (void)analyse(replay.at(replay.duration() / 2));
        (void)analyse(replay.at(replay.duration()));
    } catch (const InputError&) {
    }
    return 0;
}
