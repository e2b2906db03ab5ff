// The Monitor page under a large run's stream: 64 ranks (pp 8 x dp 8, 1F1B, 16 microbatches, 4
// layers per stage), every span the engine writes (block spans of each F and B, pipeline sends,
// receives and waits, the gradient all-reduce, data, optimizer), at 10 steps a second.
//
// Part 1, live: 64 real TCP connections (each with its hello and token) feed the page's
// telemetry server for N seconds of wall time while the page redraws; prints the frames drawn per
// second and the time a frame takes (building the data and painting the shown tab).
// Part 2, an hour: 36,000 steps of the same stream written straight into the page's LiveRun as
// fast as they can be made; prints the process's resident memory after it and the frame time.
// Targets: 60 fps, under 300 MB after an hour.
//
//   build/release/bench/bench_monitor_stream [live-seconds] [hour-steps]
#include "core/json_io.h"
#include "pages/monitor_page.h"
#include "run/telemetry_server.h"
#include "sched/pipeline_simulator.h"
#include "session_document.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QTabWidget>
#include <QTcpSocket>
#include <QTimer>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

using namespace shardscope;
using nlohmann::json;

namespace {

constexpr int kPp = 8, kDp = 8, kRanks = kPp * kDp, kMicrobatches = 16, kLayers = 4;
constexpr double kStepSeconds = 0.1;

// One step of one rank, as the engine's lines, with times from `origin`.
class StreamMaker {
public:
    StreamMaker() {
        PipelineCosts costs;
        costs.perRank = {{0.0015, 0.0015, 0.0015}};
        timeline_ = simulate(
            buildPipelineProgram({PipelineSchedule::OneFOneB, kPp, kMicrobatches, 1}), costs);
    }

    json start(int rank) const {
        ParallelConfig p;
        p.pp = kPp;
        p.dp = kDp;
        p.microBatch = 1;
        p.globalBatch = kMicrobatches * kDp;
        json model = {{"name", "bench GPT"}, {"family", "gpt2"}, {"layers", kPp * kLayers},
                      {"hidden", 64},        {"heads", 4},       {"kv_heads", 4},
                      {"ffn_hidden", 256},   {"vocab", 256},     {"seq_len", 64},
                      {"max_positions", 64}};
        return {{"type", "event"},
                {"event", "start"},
                {"rank", rank},
                {"t", 0.0},
                {"seq", 1},
                {"pid", 1000 + rank},
                {"host", "node" + std::to_string(rank / 8)},
                {"coord", coord(rank)},
                {"world_size", kRanks},
                {"config", {{"model", model}, {"parallel", p}, {"train", {{"steps", 1000000}}}}},
                {"memory_predicted",
                 {{"parameters", 1e6},
                  {"gradients", 1e6},
                  {"optimizer", 2e6},
                  {"activations", 4e6},
                  {"stage", rank / kDp}}},
                {"prediction",
                 {{"step_time", kStepSeconds},
                  {"tokens_per_s", 100000.0},
                  {"mfu", 0.3},
                  {"bubble_fraction", 7.0 / 23}}}};
    }

    // The lines of `step` on `rank`, appended to `out` (one event per line). `light`: only what
    // outlives a step in the monitor's state (the step summary and the spans its per-step
    // activity sums: data parallelism's, the optimizer's); the block and pipeline spans of a
    // step are dropped three steps later, so an hour's worth need not be made.
    void step(int rank, std::int64_t step, std::int64_t& seq, std::string& out,
              bool light = false) const {
        const int pp = rank / kDp; // pp outermost, as Megatron orders ranks
        const double origin = double(step) * kStepSeconds;
        auto put = [&](json e) {
            e["rank"] = rank;
            e["seq"] = ++seq;
            e["v"] = 2;
            e["coord"] = coord(rank);
            out += e.dump();
            out += '\n';
        };
        auto span = [&](const char* kind, int mb, double start, double end) {
            return json{{"type", "span"}, {"kind", kind},   {"step", step}, {"mb", mb},
                        {"chunk", 0},     {"start", start}, {"end", end},   {"t", end}};
        };
        put(span("data", -1, origin, origin + 0.001));
        for (const TimedOp& op :
             light ? std::vector<TimedOp>{} : timeline_.ranks[std::size_t(pp)]) {
            const double s = origin + 0.002 + op.start, width = (op.end - op.start) / kLayers;
            for (int l = 0; l < kLayers; ++l) {
                json e = span(op.op.kind == OpKind::Forward ? "forward" : "backward",
                              op.op.microbatch, s + l * width, s + (l + 1) * width);
                e["block"] = "layer";
                e["layer"] = pp * kLayers + l;
                put(e);
            }
            if (op.op.recv) {
                json w = span("wait", op.op.microbatch, s - 0.0004, s);
                w["collective"] = "recv";
                w["axis"] = "pp";
                w["peer"] = op.op.recv->peer;
                put(w);
                w["kind"] = "communication";
                w["bytes"] = 16384;
                put(w);
            }
            if (op.op.send) {
                json c = span("communication", op.op.microbatch, s + (op.end - op.start),
                              s + (op.end - op.start) + 0.0002);
                c["collective"] = "send";
                c["axis"] = "pp";
                c["bytes"] = 16384;
                put(c);
            }
        }
        const double after = origin + 0.002 + timeline_.makespan;
        json reduce = span("communication", -1, after - 0.004, after + 0.002);
        reduce["collective"] = "all_reduce";
        reduce["axis"] = "dp";
        reduce["bytes"] = 4e6;
        put(reduce);
        json wait = span("wait", -1, after, after + 0.002);
        wait["collective"] = "all_reduce";
        wait["axis"] = "dp";
        put(wait);
        put(span("optimizer", -1, after + 0.002, after + 0.004));
        put({{"type", "step"},
             {"step", step},
             {"t", after + 0.005},
             {"loss", 5.0 / (1 + 0.001 * double(step))},
             {"grad_norm", 1.0},
             {"lr", 1e-3},
             {"tokens", 8192},
             {"step_time", kStepSeconds},
             {"tokens_per_s", 81920.0 + rank},
             {"mfu", 0.25},
             {"memory", {{"parameters", 1e6}, {"activations", 1e5}}},
             {"memory_peak",
              {{"parameters", 1e6},
               {"gradients", 1e6},
               {"optimizer", 2e6},
               {"activations", 4.1e6}}}});
    }

private:
    static json coord(int rank) {
        return {{"dp", rank % kDp}, {"tp", 0}, {"pp", rank / kDp}, {"cp", 0}};
    }
    PipelineTimeline timeline_;
};

double residentMegabytes() {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        if (line.rfind("VmRSS:", 0) == 0)
            return std::stod(line.substr(6)) / 1024.0;
    return 0;
}

struct FrameStats {
    std::vector<double> ms;
    void add(double v) { ms.push_back(v); }
    double percentile(double p) {
        if (ms.empty())
            return 0;
        std::sort(ms.begin(), ms.end());
        return ms[std::min(ms.size() - 1, std::size_t(p * double(ms.size())))];
    }
};

} // namespace

int main(int argc, char** argv) {
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    const double liveSeconds = argc > 1 ? std::max(2.0, std::atof(argv[1])) : 20.0;
    const std::int64_t hourSteps =
        argc > 2 ? std::max<std::int64_t>(100, std::atoll(argv[2])) : 36000;
    StreamMaker maker;

    SessionDocument doc;
    MonitorPage page(&doc);
    page.resize(1600, 1000);
    page.show();
    page.tabs()->setCurrentIndex(0); // the training plots: the busiest tab

    // ------------------------------------------------------------- part 1: live, over TCP
    TelemetryServer server(page.live());
    QString error;
    const quint16 port = server.start(QHostAddress::LocalHost, 0, "bench-token", &error);
    if (!port) {
        std::fprintf(stderr, "%s\n", qPrintable(error));
        return 1;
    }
    std::atomic<bool> stop{false};
    std::atomic<std::int64_t> linesSent{0};
    std::atomic<std::int64_t> stepsSent{0};
    // The ranks' side in one thread: 64 blocking sockets, one step of every rank every 100 ms.
    std::thread ranks([&] {
        std::vector<std::unique_ptr<QTcpSocket>> sockets;
        std::vector<std::int64_t> seq(kRanks, 1);
        for (int r = 0; r < kRanks; ++r) {
            auto s = std::make_unique<QTcpSocket>();
            s->connectToHost(QHostAddress::LocalHost, port);
            s->waitForConnected(5000);
            const std::string hello = json{{"type", "hello"},
                                           {"v", 2},
                                           {"rank", r},
                                           {"session", "bench" + std::to_string(r)},
                                           {"token", "bench-token"}}
                                          .dump() +
                                      "\n" + maker.start(r).dump() + "\n";
            s->write(hello.data(), qint64(hello.size()));
            s->waitForBytesWritten(5000);
            sockets.push_back(std::move(s));
        }
        QElapsedTimer clock;
        clock.start();
        std::string lines;
        for (std::int64_t step = 1; !stop; ++step) {
            for (int r = 0; r < kRanks; ++r) {
                lines.clear();
                maker.step(r, step, seq[std::size_t(r)], lines);
                sockets[std::size_t(r)]->write(lines.data(), qint64(lines.size()));
                sockets[std::size_t(r)]->waitForBytesWritten(1000);
                linesSent += std::count(lines.begin(), lines.end(), '\n');
            }
            stepsSent = step;
            const double due = double(step) * kStepSeconds;
            const double now = double(clock.nsecsElapsed()) / 1e9;
            if (due > now)
                std::this_thread::sleep_for(std::chrono::duration<double>(due - now));
        }
        for (auto& s : sockets)
            s->disconnectFromHost();
    });

    FrameStats live;
    int frames = 0;
    QElapsedTimer wall;
    wall.start();
    QObject::connect(&page, &MonitorPage::refreshed, &page, [&] { ++frames; });
    // Every frame builds the data and paints the shown tab; time both together.
    QTimer frameTimer;
    frameTimer.setInterval(0);
    QObject::connect(&frameTimer, &QTimer::timeout, &page, [&] {
        QElapsedTimer t;
        t.start();
        page.refreshNow();
        page.repaint();
        live.add(double(t.nsecsElapsed()) / 1e6);
        if (double(wall.elapsed()) > liveSeconds * 1000)
            app.quit();
    });
    frameTimer.start();
    app.exec();
    frameTimer.stop();
    stop = true;
    ranks.join();
    const double seconds = double(wall.nsecsElapsed()) / 1e9;
    std::int64_t received = page.live()->events();
    std::printf("live: %d ranks (pp %d x dp %d), %lld steps at 10 steps/s, %.0f events/s sent, "
                "%.0f events/s received\n",
                kRanks, kPp, kDp, static_cast<long long>(stepsSent.load()),
                double(linesSent.load()) / seconds, double(received) / seconds);
    std::printf("live: %zu frames in %.1f s = %.1f fps; frame time median %.1f ms, p95 %.1f ms\n",
                live.ms.size(), seconds, double(live.ms.size()) / seconds, live.percentile(0.5),
                live.percentile(0.95));
    std::printf("live: resident memory %.0f MB\n", residentMegabytes());
    server.stop();

    // ------------------------------------------------------------- part 2: an hour of steps
    QElapsedTimer feed;
    feed.start();
    std::string lines;
    std::vector<std::int64_t> seq(kRanks, 1 << 20);
    const std::int64_t last = stepsSent + hourSteps;
    for (std::int64_t step = stepsSent + 1; step <= last; ++step)
        for (int r = 0; r < kRanks; ++r) {
            lines.clear();
            maker.step(r, step, seq[std::size_t(r)], lines, step <= last - 100);
            std::size_t begin = 0;
            for (std::size_t nl; (nl = lines.find('\n', begin)) != std::string::npos;
                 begin = nl + 1)
                page.live()->add(json::parse(lines.begin() + std::ptrdiff_t(begin),
                                             lines.begin() + std::ptrdiff_t(nl)));
        }
    const double fed = double(feed.nsecsElapsed()) / 1e9;
    FrameStats hour;
    const int hourFrames = argc > 3 ? std::max(1, std::atoi(argv[3])) : 30;
    for (int i = 0; i < hourFrames; ++i) {
        QElapsedTimer t;
        t.start();
        page.refreshNow();
        page.repaint();
        hour.add(double(t.nsecsElapsed()) / 1e6);
    }
    std::printf("hour: %lld more steps (%.0f simulated minutes) fed in %.0f s; resident memory "
                "%.0f MB; frame time median %.1f ms, p95 %.1f ms\n",
                static_cast<long long>(hourSteps), double(hourSteps) * kStepSeconds / 60, fed,
                residentMegabytes(), hour.percentile(0.5), hour.percentile(0.95));
    return 0;
}
