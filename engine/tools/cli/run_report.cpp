#include "run_report.h"

#include "core/error.h"
#include "core/units.h"
#include "text_table.h"
#include "watch/analysis.h"
#include "watch/run_files.h"
#include "watch/run_trace.h"
#include "watch/statistics.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace shardscope::cli {

using nlohmann::json;
using namespace shardscope::watch;
namespace fs = std::filesystem;

namespace {

struct Report {
    RunFiles files;
    RunState state;
    ReadCounts counts;
    RunAnalysis analysis;
};

std::string percent(double errorPercent) {
    if (!std::isfinite(errorPercent))
        return "-";
    char text[32];
    std::snprintf(text, sizeof text, "%+.1f %%", errorPercent);
    return text;
}

std::string coordText(const Coordinate& c) {
    return "dp" + std::to_string(c.dp) + " tp" + std::to_string(c.tp) + " pp" +
           std::to_string(c.pp) + " cp" + std::to_string(c.cp);
}

double medianTokensPerSecond(const RankState& r) {
    std::vector<double> v;
    for (const StepSample& s : r.steps)
        if (s.step > 1)
            v.push_back(s.tokensPerSecond);
    return median(std::move(v));
}

std::string runTitle(const Report& r) {
    const RunInfo& info = r.state.info();
    std::string title = r.files.dir.string();
    if (info.known && info.configProblem.empty())
        title += ": " + info.model.name + ", " + layoutSummary(info.parallel);
    return title;
}

// Writes through a temporary file renamed over `path`, so a failed write never leaves half a
// report where an earlier one was.
void writeAtomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
    const fs::path target(path);
    const fs::path temporary = target.string() + ".partial";
    {
        std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
        if (!out)
            throw InputError("cannot write '" + path +
                             "': its folder does not exist or is not "
                             "writable");
        write(out);
        out.flush();
        if (!out) {
            std::error_code ec;
            fs::remove(temporary, ec);
            throw InputError("cannot write '" + path + "' (disk full?)");
        }
    }
    std::error_code ec;
    fs::rename(temporary, target, ec);
    if (ec)
        throw InputError("cannot write '" + path + "': " + ec.message());
}

// ------------------------------------------------------------------------------------- text

void printText(std::ostream& out, const Report& r) {
    const RunInfo& info = r.state.info();
    const RunAnalysis& a = r.analysis;
    out << "Run " << runTitle(r) << "\n";
    if (info.known) {
        out << "backend: " << info.backend << "; peak " << formatRate(info.peakFlops) << " ("
            << info.peakSource << ")\n";
        out << "data: " << info.data;
        if (info.lossFloor)
            out << "; loss floor " << formatNumber(*info.lossFloor, 4) << " nats/token";
        out << "\n";
    }
    out << "steps: " << r.state.latestStep();
    if (info.totalSteps > 0)
        out << " of " << info.totalSteps;
    out << "\n\nRanks\n";
    Table ranks(
        {"rank", "coordinate", "host", "status", "steps", "tokens/s", "peak memory", "predicted"});
    for (const RankHealth& h : a.health) {
        const RankState* s = r.state.rank(h.rank);
        if (!s) {
            ranks.add({rankLabel(h), "-", "-", toString(h.status), "0", "-", "-", "-"});
            continue;
        }
        const MemoryBytes peak = s->steps.empty() ? MemoryBytes{} : s->steps.back().memoryPeak;
        ranks.add({std::to_string(h.rank), coordText(s->coord), s->host, toString(h.status),
                   std::to_string(s->lastStep()), formatNumber(medianTokensPerSecond(*s), 4),
                   formatBytes(peak.total()), formatBytes(s->predictedMemory.total())});
    }
    ranks.print(out);
    if (!a.diagnosis.empty())
        out << "\n" << a.diagnosis << "\n";
    for (const RankHealth& h : a.health)
        if (h.status != RankStatus::Running && h.status != RankStatus::Finished)
            out << (h.lastRank > h.rank ? "  ranks " : "  rank ") << rankLabel(h) << " "
                << toString(h.status) << ": " << h.detail << "\n";

    out << "\nPredicted against measured\n";
    Table cmp({"figure", "predicted", "measured", "error"});
    for (const ComparisonRow& row : a.comparison)
        cmp.add({row.label, row.hasPredicted ? formatValue(row.predicted, row.unit) : "-",
                 row.hasMeasured ? formatValue(row.measured, row.unit) : "-",
                 percent(row.errorPercent())});
    cmp.print(out);
    if (info.prediction.is_object() && info.prediction.contains("cluster"))
        out << "Predictions: the planner on "
            << info.prediction["cluster"]["gpu"].value("name", std::string("?")) << " x "
            << info.worldSize << " (the engine's description of its hardware, in the start "
            << "event)\n";

    out << "\nPipeline";
    if (a.pipeline.ok()) {
        out << " (step " << a.pipeline.step << ", replica " << a.pipeline.replica << ")\n";
        Table pipe({"pipeline rank", "rank", "busy", "measured bubble", "simulated bubble"});
        for (std::size_t pp = 0; pp < a.pipeline.measured.ranks.size(); ++pp)
            pipe.add({std::to_string(pp), std::to_string(a.pipeline.rank[pp]),
                      formatSeconds(a.pipeline.measured.busy[pp]),
                      formatPercent(a.pipeline.measured.bubble[pp]),
                      pp < a.pipeline.simulated.bubble.size()
                          ? formatPercent(a.pipeline.simulated.bubble[pp])
                          : "-"});
        pipe.print(out);
    } else {
        out << ": " << a.pipeline.problem << "\n";
    }

    out << "\nCommunication per step (medians)\n";
    if (a.exposure.empty()) {
        out << "none measured\n";
    } else {
        Table comm({"rank", "axis", "in flight", "exposed", "hidden"});
        for (const AxisExposure& e : a.exposure)
            comm.add({std::to_string(e.rank), e.axis, formatSeconds(e.busy),
                      formatSeconds(e.exposed), formatPercent(e.hidden())});
        comm.print(out);
    }

    out << "\nStragglers: ";
    if (a.stragglers.empty())
        out << "none (a rank is flagged when its compute per step exceeds its stage peers' median "
               "by 15 % in each of the newest 5 steps)\n";
    for (const Straggler& s : a.stragglers)
        out << "\n  rank " << s.rank << " on " << s.host << " (stage " << s.stage
            << "): " << formatPercent(s.slowdown) << " slower than its " << s.peers - 1
            << " peers' median over steps " << s.steps.front() << "-" << s.steps.back()
            << ", costing " << formatNumber(s.throughputCost, 3) << " tokens/s";
    if (!a.stragglers.empty())
        out << "\n";

    std::int64_t missed = 0;
    double dropped = 0;
    for (const auto& [id, s] : r.state.ranks()) {
        missed += s.missedSeq;
        dropped += s.droppedEvents;
    }
    out << "\nTelemetry: " << r.counts.events << " events read, " << r.counts.badLines
        << " unreadable lines, " << missed << " events missing from the numbering; the streams "
        << "dropped " << dropped << " (the files have them)\n";
}

// ------------------------------------------------------------------------------------- JSON

json reportJson(const Report& r) {
    const RunInfo& info = r.state.info();
    const RunAnalysis& a = r.analysis;
    json j;
    j["schema"] = kRunReportSchema;
    j["dir"] = r.files.dir.string();
    j["config"] = info.config;
    j["world_size"] = info.worldSize;
    j["steps"] = r.state.latestStep();
    j["total_steps"] = info.totalSteps;
    j["loss_floor"] = info.lossFloor ? json(*info.lossFloor) : json();
    j["diagnosis"] = a.diagnosis;
    j["ranks"] = json::array();
    for (const RankHealth& h : a.health) {
        json rank = {{"rank", h.rank}, {"status", toString(h.status)}, {"detail", h.detail}};
        if (h.lastRank > h.rank)
            rank["last_rank"] = h.lastRank; // a row for ranks rank..last_rank, none started
        if (const RankState* s = r.state.rank(h.rank)) {
            rank["coord"] = {
                {"dp", s->coord.dp}, {"tp", s->coord.tp}, {"pp", s->coord.pp}, {"cp", s->coord.cp}};
            rank["host"] = s->host;
            rank["pid"] = s->pid;
            rank["steps"] = s->lastStep();
            rank["tokens_per_s"] = medianTokensPerSecond(*s);
            rank["missed_events"] = s->missedSeq;
        }
        j["ranks"].push_back(rank);
    }
    j["comparison"] = json::array();
    for (const ComparisonRow& row : a.comparison)
        j["comparison"].push_back(
            {{"key", row.key},
             {"label", row.label},
             {"predicted", row.hasPredicted ? json(row.predicted) : json()},
             {"measured", row.hasMeasured ? json(row.measured) : json()},
             {"error_percent",
              std::isfinite(row.errorPercent()) ? json(row.errorPercent()) : json()},
             {"how", row.how}});
    j["memory"] = json::array();
    for (const RankMemory& m : a.memory) {
        auto bytes = [](const MemoryBytes& b) {
            return json{{"parameters", b.parameters},
                        {"gradients", b.gradients},
                        {"optimizer", b.optimizer},
                        {"activations", b.activations},
                        {"workspace", b.workspace}};
        };
        j["memory"].push_back({{"rank", m.rank},
                               {"stage", m.stage},
                               {"measured", bytes(m.measured)},
                               {"predicted", bytes(m.predicted)}});
    }
    j["pipeline"] = {{"step", a.pipeline.step}, {"problem", a.pipeline.problem}};
    if (a.pipeline.ok()) {
        j["pipeline"]["makespan"] = a.pipeline.measured.makespan;
        j["pipeline"]["bubble_fraction"] = a.pipeline.measured.bubbleFraction;
        j["pipeline"]["bubble"] = a.pipeline.measured.bubble;
        j["pipeline"]["simulated_bubble_fraction"] = a.pipeline.simulated.bubbleFraction;
        j["pipeline"]["simulated_bubble"] = a.pipeline.simulated.bubble;
    }
    j["communication"] = json::array();
    for (const AxisExposure& e : a.exposure)
        j["communication"].push_back({{"rank", e.rank},
                                      {"axis", e.axis},
                                      {"busy", e.busy},
                                      {"exposed", e.exposed},
                                      {"hidden", e.hidden()}});
    j["stragglers"] = json::array();
    for (const Straggler& s : a.stragglers)
        j["stragglers"].push_back({{"rank", s.rank},
                                   {"host", s.host},
                                   {"stage", s.stage},
                                   {"peers", s.peers},
                                   {"slowdown", s.slowdown},
                                   {"excess_s", s.excess},
                                   {"throughput_cost", s.throughputCost},
                                   {"steps", s.steps}});
    j["telemetry"] = {{"events", r.counts.events}, {"unreadable_lines", r.counts.badLines}};
    return j;
}

// ------------------------------------------------------------------------------------- HTML

std::string escape(const std::string& s) {
    std::string out;
    for (const char c : s) {
        switch (c) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '"':
            out += "&quot;";
            break;
        default:
            out += c;
        }
    }
    return out;
}

const char* const kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

// A line chart of y against step, one line per series, as inline SVG.
std::string
lineChart(const std::string& title,
          const std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>>& series,
          const std::string& yLabel) {
    const double w = 640, h = 260, left = 60, right = 150, top = 30, bottom = 40;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (const auto& [name, points] : series)
        for (const auto& [x, y] : points)
            if (std::isfinite(y)) {
                x0 = std::min(x0, x), x1 = std::max(x1, x);
                y0 = std::min(y0, y), y1 = std::max(y1, y);
            }
    std::ostringstream svg;
    svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << h
        << "' font-family='sans-serif' font-size='11'><text x='" << left << "' y='18' "
        << "font-weight='bold'>" << escape(title) << "</text>";
    if (!std::isfinite(x0)) {
        svg << "<text x='" << left << "' y='60'>no data</text></svg>";
        return svg.str();
    }
    if (x1 == x0)
        x1 = x0 + 1;
    if (y1 == y0)
        y1 = y0 + 1, y0 -= 1;
    const double pw = w - left - right, ph = h - top - bottom;
    auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
    auto py = [&](double y) { return top + (1 - (y - y0) / (y1 - y0)) * ph; };
    svg << "<rect x='" << left << "' y='" << top << "' width='" << pw << "' height='" << ph
        << "' fill='none' stroke='#999'/>";
    for (int i = 0; i <= 4; ++i) {
        const double y = y0 + (y1 - y0) * i / 4;
        svg << "<text x='" << left - 4 << "' y='" << py(y) + 4 << "' text-anchor='end'>"
            << formatNumber(y, 3) << "</text>";
    }
    svg << "<text x='" << left << "' y='" << h - 8 << "'>step " << formatNumber(x0, 6)
        << "</text><text x='" << left + pw << "' y='" << h - 8 << "' text-anchor='end'>step "
        << formatNumber(x1, 6) << "</text><text x='" << left + pw / 2 << "' y='" << h - 8
        << "' text-anchor='middle'>" << escape(yLabel) << "</text>";
    for (std::size_t i = 0; i < series.size(); ++i) {
        const char* color = kPalette[i % 8];
        svg << "<polyline fill='none' stroke='" << color << "' stroke-width='1.5' points='";
        for (const auto& [x, y] : series[i].second)
            if (std::isfinite(y))
                svg << px(x) << "," << py(y) << " ";
        svg << "'/><text x='" << left + pw + 8 << "' y='" << top + 14 * double(i) + 10 << "' fill='"
            << color << "'>" << escape(series[i].first) << "</text>";
    }
    svg << "</svg>";
    return svg.str();
}

// A pipeline timeline as SVG rows: F blue, B green, W orange, waits hatched red.
std::string timelineSvg(const std::string& title, const PipelineTimeline& t,
                        const std::vector<std::vector<Interval>>* waits, double scale) {
    const double w = 900, left = 80, row = 22, top = 28;
    const double h = top + row * double(t.ranks.size()) + 20;
    const double pw = w - left - 20;
    const double span = scale > 0 ? scale : std::max(t.makespan, 1e-9);
    std::ostringstream svg;
    svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << h
        << "' font-family='sans-serif' font-size='11'><text x='" << left << "' y='18' "
        << "font-weight='bold'>" << escape(title) << "</text>";
    for (std::size_t r = 0; r < t.ranks.size(); ++r) {
        const double y = top + row * double(r);
        svg << "<text x='4' y='" << y + 15 << "'>pp " << r << "</text><rect x='" << left << "' y='"
            << y << "' width='" << pw << "' height='" << row - 4 << "' fill='#eee'/>";
        if (waits && r < waits->size())
            for (const Interval& i : (*waits)[r])
                svg << "<rect x='" << left + i.start / span * pw << "' y='" << y + row - 8
                    << "' width='" << std::max(0.5, (i.end - i.start) / span * pw)
                    << "' height='4' fill='#d62728'/>";
        for (const TimedOp& op : t.ranks[r]) {
            const char* color = op.op.kind == OpKind::Forward          ? "#1f77b4"
                                : op.op.kind == OpKind::BackwardWeight ? "#ff7f0e"
                                                                       : "#2ca02c";
            svg << "<rect x='" << left + op.start / span * pw << "' y='" << y << "' width='"
                << std::max(0.5, (op.end - op.start) / span * pw) << "' height='" << row - 8
                << "' fill='" << color << "' stroke='white'><title>" << toString(op.op.kind)
                << op.op.microbatch << " chunk " << op.op.chunk << ": "
                << formatSeconds(op.end - op.start) << "</title></rect>";
        }
    }
    svg << "<text x='" << left + pw << "' y='" << h - 4 << "' text-anchor='end'>"
        << formatSeconds(span) << "</text></svg>";
    return svg.str();
}

std::string table(const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows) {
    std::string html = "<table><tr>";
    for (const std::string& h : header)
        html += "<th>" + escape(h) + "</th>";
    html += "</tr>";
    for (const auto& row : rows) {
        html += "<tr>";
        for (const std::string& cell : row)
            html += "<td>" + escape(cell) + "</td>";
        html += "</tr>";
    }
    return html + "</table>";
}

void printHtml(std::ostream& out, const Report& r) {
    const RunAnalysis& a = r.analysis;
    // One line per rank (up to 8), or rank 0 alone for larger jobs.
    std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>> loss, tps, mem;
    for (const auto& [id, s] : r.state.ranks()) {
        if (r.state.ranks().size() > 8 && id != 0)
            continue;
        std::vector<std::pair<double, double>> l, t, m;
        for (const StepSample& step : s.steps) {
            l.emplace_back(double(step.step), step.loss);
            t.emplace_back(double(step.step), step.tokensPerSecond);
            m.emplace_back(double(step.step), step.memory.total() / MiB);
        }
        loss.push_back({"rank " + std::to_string(id), l});
        tps.push_back({"rank " + std::to_string(id), t});
        mem.push_back({"rank " + std::to_string(id), m});
    }
    out << "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Shardscope run report: "
        << escape(runTitle(r))
        << "</title><style>body{font-family:sans-serif;margin:2em;max-width:980px}"
           "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
           "padding:3px 8px;text-align:right}th{background:#f4f4f4}td:first-child{text-align:"
           "left}.bad{color:#b00}</style></head><body>";
    out << "<h1>Run report</h1><p>" << escape(runTitle(r)) << "</p>";
    if (!a.diagnosis.empty())
        out << "<p class='bad'>" << escape(a.diagnosis) << "</p>";
    std::vector<std::vector<std::string>> rows;
    for (const RankHealth& h : a.health)
        rows.push_back({rankLabel(h), toString(h.status), h.detail});
    out << "<h2>Ranks</h2>" << table({"rank", "status", "detail"}, rows);
    rows.clear();
    for (const ComparisonRow& row : a.comparison)
        rows.push_back({row.label, row.hasPredicted ? formatValue(row.predicted, row.unit) : "-",
                        row.hasMeasured ? formatValue(row.measured, row.unit) : "-",
                        percent(row.errorPercent()), row.how});
    out << "<h2>Predicted against measured</h2>"
        << table({"figure", "predicted", "measured", "error", "how"}, rows);
    out << "<h2>Training</h2>" << lineChart("Loss", loss, "nats/token")
        << lineChart("Throughput", tps, "tokens/s") << lineChart("Memory in use", mem, "MiB");
    out << "<h2>Pipeline</h2>";
    if (a.pipeline.ok()) {
        const double scale = std::max(a.pipeline.measured.makespan, a.pipeline.simulated.makespan);
        out << timelineSvg("Measured, step " + std::to_string(a.pipeline.step) + ": bubble " +
                               formatPercent(a.pipeline.measured.bubbleFraction) +
                               " (red: waiting)",
                           a.pipeline.measured, &a.pipeline.waits, scale)
            << timelineSvg("The schedule simulated with the measured op costs: bubble " +
                               formatPercent(a.pipeline.simulated.bubbleFraction),
                           a.pipeline.simulated, nullptr, scale);
    } else {
        out << "<p>" << escape(a.pipeline.problem) << "</p>";
    }
    rows.clear();
    for (const AxisExposure& e : a.exposure)
        rows.push_back({std::to_string(e.rank), e.axis, formatSeconds(e.busy),
                        formatSeconds(e.exposed), formatPercent(e.hidden())});
    out << "<h2>Communication per step</h2>"
        << table({"rank", "axis", "in flight", "exposed", "hidden"}, rows);
    rows.clear();
    for (const Straggler& s : a.stragglers)
        rows.push_back({std::to_string(s.rank), s.host, formatPercent(s.slowdown),
                        formatNumber(s.throughputCost, 3) + " tokens/s"});
    out << "<h2>Stragglers</h2>"
        << (rows.empty() ? std::string("<p>none</p>")
                         : table({"rank", "host", "slower by", "costs"}, rows));
    out << "<p>Made by shardscope-cli report from " << r.counts.events
        << " telemetry events.</p></body></html>\n";
}

// ------------------------------------------------------------------------------------- CSV

void printCsv(std::ostream& out, const RunFiles& files) {
    out << "rank,step,t,loss,val_loss,grad_norm,lr,tokens,step_time,tokens_per_s,mfu,"
           "memory_total,memory_peak_total,dp_exposed_communication\n";
    std::string line;
    auto number = [](const json& e, const char* key) -> std::string {
        const auto it = e.find(key);
        if (it == e.end() || !it->is_number())
            return "";
        char text[40];
        std::snprintf(text, sizeof text, "%.9g", it->get<double>());
        return text;
    };
    auto total = [&number](const json& e, const char* key) -> std::string {
        const auto it = e.find(key);
        return it != e.end() && it->is_object() ? number(*it, "total") : std::string();
    };
    for (const auto& [rank, path] : files.ranks) {
        EventLineReader in(path);
        bool tooLong = false;
        while (in.next(line, &tooLong)) {
            const std::optional<json> e = tooLong ? std::nullopt : parseEventLine(line);
            if (!e || !e->contains("type") || (*e)["type"] != "step")
                continue;
            out << rank << "," << number(*e, "step") << "," << number(*e, "t") << ","
                << number(*e, "loss") << "," << number(*e, "val_loss") << ","
                << number(*e, "grad_norm") << "," << number(*e, "lr") << "," << number(*e, "tokens")
                << "," << number(*e, "step_time") << "," << number(*e, "tokens_per_s") << ","
                << number(*e, "mfu") << "," << total(*e, "memory") << ","
                << total(*e, "memory_peak") << "," << number(*e, "dp_exposed_communication")
                << "\n";
        }
    }
}

} // namespace

int runReport(const std::string& dir, const RunReportOptions& o, std::ostream& out,
              std::ostream& err) {
    try {
        Report r;
        r.files = findRunFiles(dir);
        r.counts = readRun(r.files, r.state);
        r.analysis = analyse(r.state);
        if (!o.trace.empty())
            writeAtomically(o.trace, [&](std::ostream& s) { writeRunTrace(r.files, s); });
        if (!o.csv.empty())
            writeAtomically(o.csv, [&](std::ostream& s) { printCsv(s, r.files); });
        if (!o.html.empty())
            writeAtomically(o.html, [&](std::ostream& s) { printHtml(s, r); });
        if (o.json) {
            out << reportJson(r).dump(2) << "\n";
        } else {
            // Host names, messages and paths come from the telemetry: a control character in
            // them must not reach the terminal as one.
            std::ostringstream text;
            printText(text, r);
            std::string shown = text.str();
            for (char& c : shown)
                if ((static_cast<unsigned char>(c) < 0x20 && c != '\n') || c == 0x7f)
                    c = '?';
            out << shown;
        }
        return 0;
    } catch (const InputError& e) {
        err << "error: " << e.what() << "\n";
        return 2;
    }
}

} // namespace shardscope::cli
