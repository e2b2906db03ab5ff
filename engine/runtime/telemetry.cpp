#include "telemetry.h"

#include "core/error.h"
#include "tcp_event_stream.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>

namespace shardscope {

using nlohmann::json;

namespace {

std::string randomSessionId() {
    std::random_device entropy;
    std::uniform_int_distribution<unsigned> nibble(0, 15);
    std::string id(16, '0');
    for (char& c : id)
        c = "0123456789abcdef"[nibble(entropy)];
    return id;
}

std::string line(const json& event) {
    // replace: a bad UTF-8 byte in a message or a path becomes U+FFFD instead of an exception
    // in the middle of training.
    return event.dump(-1, ' ', false, json::error_handler_t::replace);
}

} // namespace

TelemetryWriter::TelemetryWriter(TelemetryOptions options)
    : options_(std::move(options)), epoch_(std::chrono::steady_clock::now()),
      session_(randomSessionId()) {
    if (options_.path.empty())
        throw InputError("telemetry file path is empty");
    // The collector is checked before the file is touched, so a typo in the address does not
    // truncate the telemetry of a previous run.
    if (!options_.collector.empty()) {
        json hello = options_.hello.is_object() ? options_.hello : json::object();
        hello["type"] = "hello";
        hello["v"] = kTelemetrySchemaVersion;
        hello["rank"] = options_.rank;
        hello["session"] = session_;
        hello["token"] = options_.token;
        // The greeting is in place before the stream's thread can connect.
        stream_ = std::make_unique<TcpEventStream>(options_.collector, options_.queueCapacity,
                                                   std::vector<std::string>{line(hello)});
    }

    const std::filesystem::path path(options_.path);
    if (path.has_parent_path()) {
        std::error_code ec;
        std::filesystem::create_directories(path.parent_path(), ec);
        if (ec)
            throw InputError("cannot create the telemetry directory '" +
                             path.parent_path().string() + "': " + ec.message());
    }
    file_ = std::fopen(options_.path.c_str(), options_.append ? "ab" : "wb");
    if (file_ == nullptr)
        throw InputError("cannot open the telemetry file '" + options_.path +
                         "' for writing: " + std::strerror(errno));
    // A run killed in the middle of a line left it torn: the resumed run starts on a line of its
    // own, so only the torn line is lost (readers skip it and count it), not its first event.
    if (options_.append && std::fseek(file_, 0, SEEK_END) == 0 && std::ftell(file_) > 0) {
        std::FILE* tail = std::fopen(options_.path.c_str(), "rb");
        int last = '\n';
        if (tail && std::fseek(tail, -1, SEEK_END) == 0)
            last = std::fgetc(tail);
        if (tail)
            std::fclose(tail);
        if (last != '\n')
            std::fputc('\n', file_);
    }
}

TelemetryWriter::~TelemetryWriter() {
    // The file first: it is the record that must survive, whatever the collector does.
    if (file_ != nullptr)
        std::fclose(file_);
    stream_.reset();
}

double TelemetryWriter::now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count() +
           offset_.load(std::memory_order_relaxed);
}

double TelemetryWriter::timeOfSteadyClock(double steadySeconds) const {
    const double epoch = std::chrono::duration<double>(epoch_.time_since_epoch()).count();
    return steadySeconds - epoch + offset_.load(std::memory_order_relaxed);
}

void TelemetryWriter::stamp(json& event) const {
    if (!event.is_object())
        throw std::invalid_argument(std::string("a telemetry event must be a JSON object, not ") +
                                    event.type_name());
    event["v"] = kTelemetrySchemaVersion;
    event["rank"] = options_.rank;
    if (!options_.coordinate.is_null())
        event["coord"] = options_.coordinate;
    if (!event.contains("t"))
        event["t"] = now();
}

void TelemetryWriter::write(json event) {
    stamp(event);
    std::lock_guard lock(mutex_);
    append(std::move(event));
}

void TelemetryWriter::writeEnd(json event, std::chrono::milliseconds drainTime) {
    stamp(event);
    // Under the lock, so no other thread's event lands between the counts and the end line.
    std::lock_guard lock(mutex_);
    if (stream_)
        stream_->settle(drainTime);
    const TelemetryStats s = stats();
    event["telemetry"] = {{"written", s.written + 1}, {"sent", s.sent}, {"dropped", s.dropped}};
    append(std::move(event));
}

void TelemetryWriter::append(json event) {
    event["seq"] = ++seq_;
    std::string text = line(event);
    text += '\n';
    if (std::fwrite(text.data(), 1, text.size(), file_) != text.size())
        throw InputError("cannot write the telemetry file '" + options_.path +
                         "': " + std::strerror(errno));
    written_.fetch_add(1, std::memory_order_relaxed);
    if (stream_) {
        text.pop_back();
        if (event.value("type", "") == "event" && event.value("event", "") == "start") {
            // What a collector that connects later needs first: the config, the prediction and
            // the clock offset. Marked, so a reader that saw the original knows it again.
            event["resent"] = true;
            stream_->setGreeting({stream_->greeting().front(), line(event)});
        }
        stream_->push(std::move(text));
    }
}

bool TelemetryWriter::drain(std::chrono::milliseconds timeout) {
    return !stream_ || stream_->waitUntilSent(timeout);
}

void TelemetryWriter::flush() {
    std::lock_guard lock(mutex_);
    if (std::fflush(file_) != 0)
        throw InputError("cannot write the telemetry file '" + options_.path +
                         "': " + std::strerror(errno));
}

TelemetryStats TelemetryWriter::stats() const {
    TelemetryStats s;
    s.written = written_.load(std::memory_order_relaxed);
    if (stream_) {
        const EventStreamStats e = stream_->stats();
        s.sent = e.sent;
        s.dropped = e.dropped;
        s.connected = e.connected;
    }
    return s;
}

} // namespace shardscope
