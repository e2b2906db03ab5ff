// The run's spans, written to telemetry: the model's operator groups timed by events on the
// compute stream, communication from posting to completion (and the time blocked on it), and
// host work timed by the host clock; each stamped with the step, microbatch and chunk running
// now.
#pragma once

#include "communicator.h"
#include "event_pool.h"
#include "gpt.h"
#include "kernels/ops.h"
#include "telemetry.h"
#include "watchdog.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace shardscope {

class TelemetrySpans final : public SpanSink, public CommunicationSink {
public:
    TelemetrySpans(TelemetryWriter& writer, Watchdog* watchdog, kernels::Ops& ops)
        : writer_(writer), watchdog_(watchdog), ops_(ops), events_(ops) {}
    std::int64_t step = 0;
    int microbatch = -1, chunk = 0;
    double now() const override { return writer_.now(); }
    void setMicrobatch(int mb, int ch, const char* op) override {
        microbatch = mb;
        chunk = ch;
        at(op);
    }
    // Tells the watchdog where the rank is, so a hang report names it.
    void at(const char* op) const {
        if (watchdog_)
            watchdog_->setPosition(step, microbatch, op);
    }
    // A transfer or collective from posting to completion, and the time blocked on it as a
    // wait span: bubbles and exposed communication are measured, not inferred.
    void communication(const CommunicationSpan& c) override {
        nlohmann::json e = spanEvent("communication", c.start, c.end);
        e["collective"] = c.collective;
        e["axis"] = c.axis;
        e["bytes"] = c.bytes;
        if (c.peer >= 0)
            e["peer"] = c.peer;
        if (*c.tensor)
            e["tensor"] = c.tensor;
        if (c.microbatch >= 0) { // a send seen complete later still belongs to its own op
            e["mb"] = c.microbatch;
            e["chunk"] = c.chunk;
        }
        write(e);
        if (c.waited) {
            e["kind"] = "wait";
            e["start"] = c.waitStart;
            write(std::move(e));
        }
    }
    std::unique_ptr<kernels::Event> mark() override { return events_.record(ops_.computeStream()); }
    // Written once the device has run the span's work; times are the events', on the
    // telemetry clock.
    void span(const char* kind, const char* block, int layer,
              std::unique_ptr<kernels::Event> start) override {
        nlohmann::json e = spanEvent(kind, 0, 0);
        if (*block)
            e["block"] = block;
        if (layer >= 0)
            e["layer"] = layer;
        pending_.push_back({std::move(e), std::move(start), mark()});
        writeFinished(false);
    }
    // Writes the spans whose events completed, in the order they were enqueued; with `wait`,
    // every one (the step's end: no span of a step is written after its step event).
    void writeFinished(bool wait) noexcept {
        while (!pending_.empty()) {
            DeviceSpan& s = pending_.front();
            if (wait)
                s.end->wait();
            else if (!s.end->done())
                return;
            s.event["start"] = writer_.timeOfSteadyClock(s.start->seconds());
            s.event["end"] = writer_.timeOfSteadyClock(s.end->seconds());
            write(std::move(s.event));
            events_.giveBack(std::move(s.start));
            events_.giveBack(std::move(s.end));
            pending_.pop_front();
        }
    }
    // A span of the step and microbatch running now; callers add what is particular to it.
    nlohmann::json spanEvent(const char* kind, double start, double end) const {
        return {{"type", "span"}, {"kind", kind},   {"step", step}, {"mb", microbatch},
                {"chunk", chunk}, {"start", start}, {"end", end}};
    }
    // Spans are written from destructors, so a failed write (a full disk) is kept here and
    // raised by the training loop after the step instead of terminating the process.
    void write(nlohmann::json e) noexcept {
        try {
            writer_.write(std::move(e));
        } catch (const std::exception& ex) {
            if (error.empty())
                error = ex.what();
        }
    }
    std::string error;
    // A span around host work that is not a model block (data, eval, checkpoint).
    template <typename Work> auto timed(const char* kind, Work&& work) {
        const double start = now();
        struct Emit {
            TelemetrySpans* self;
            const char* kind;
            double start;
            ~Emit() { self->write(self->spanEvent(kind, start, self->now())); }
        } emit{this, kind, start};
        return work();
    }
    // The same around work enqueued on the device (gradient norm, optimizer): timed by events.
    template <typename Work> auto timedOnDevice(const char* kind, Work&& work) {
        struct Emit {
            TelemetrySpans* self;
            const char* kind;
            std::unique_ptr<kernels::Event> start;
            ~Emit() { self->span(kind, "", -1, std::move(start)); }
        } emit{this, kind, mark()};
        return work();
    }

private:
    struct DeviceSpan {
        nlohmann::json event;
        std::unique_ptr<kernels::Event> start, end;
    };
    TelemetryWriter& writer_;
    Watchdog* watchdog_;
    kernels::Ops& ops_;
    std::deque<DeviceSpan> pending_;
    EventPool events_;
};

} // namespace shardscope
