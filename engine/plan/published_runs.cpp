#include "published_runs.h"

#include "compute.h"
#include "core/error.h"
#include "core/presets.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

namespace shardscope {

namespace {

std::vector<std::string> splitCsvLine(const std::string& line, int lineNo) {
    std::vector<std::string> cells;
    std::string cell;
    bool quoted = false;
    for (std::size_t i = 0; i < line.size(); ++i) {
        const char ch = line[i];
        if (quoted) {
            if (ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
                cell += '"';
                ++i;
            } else if (ch == '"') {
                quoted = false;
            } else {
                cell += ch;
            }
        } else if (ch == '"') {
            quoted = true;
        } else if (ch == ',') {
            cells.push_back(cell);
            cell.clear();
        } else if (ch != '\r') {
            cell += ch;
        }
    }
    if (quoted)
        throw InputError("published runs, line " + std::to_string(lineNo) +
                         ": a quoted field is not closed; close it with \"");
    cells.push_back(cell);
    return cells;
}

class Row {
public:
    Row(const std::map<std::string, std::size_t>& columns, std::vector<std::string> cells, int line)
        : columns_(columns), cells_(std::move(cells)), line_(line) {}

    const std::string& text(const std::string& column) const {
        const auto it = columns_.find(column);
        if (it == columns_.end())
            throw InputError("published runs: the header has no column '" + column + "'");
        if (it->second >= cells_.size())
            throw InputError("published runs, line " + std::to_string(line_) +
                             ": missing column '" + column + "'");
        return cells_[it->second];
    }
    double number(const std::string& column, double fallback = std::nan("")) const {
        const std::string& t = text(column);
        if (t.empty()) {
            if (std::isnan(fallback))
                throw InputError("published runs, line " + std::to_string(line_) + ": column '" +
                                 column + "' is empty but required");
            return fallback;
        }
        try {
            std::size_t used = 0;
            const double v = std::stod(t, &used);
            if (used != t.size() || !std::isfinite(v) || v < 0)
                throw std::invalid_argument(t);
            return v;
        } catch (const std::exception&) {
            throw InputError("published runs, line " + std::to_string(line_) + ": column '" +
                             column + "' should be a non-negative number, got '" + t + "'");
        }
    }
    // true or false; empty gives the fallback.
    bool flag(const std::string& column, bool fallback) const {
        const std::string& t = text(column);
        if (t.empty())
            return fallback;
        if (t != "true" && t != "false")
            throw InputError("published runs, line " + std::to_string(line_) + ": column '" +
                             column + "' should be true, false or empty, got '" + t + "'");
        return t == "true";
    }
    int integer(const std::string& column, double fallback = std::nan("")) const {
        const double v = number(column, fallback);
        if (v != std::floor(v) || v < 1 || v > 1e9)
            throw InputError("published runs, line " + std::to_string(line_) + ": column '" +
                             column + "' should be a positive whole number, got '" + text(column) +
                             "'");
        return int(v);
    }

private:
    const std::map<std::string, std::size_t>& columns_;
    std::vector<std::string> cells_;
    int line_;
};

FlopsConvention conventionFromString(const std::string& s, int line) {
    try {
        return flopsConventionFromString(s);
    } catch (const InputError& e) {
        throw InputError("published runs, line " + std::to_string(line) + ": " + e.what());
    }
}

PublishedRun parseRow(const Row& r, int line) {
    PublishedRun run;
    run.name = r.text("name");
    run.source = r.text("source");
    run.gpuId = r.text("gpu");
    ModelSpec& m = run.model;
    m.name = run.name;
    m.layers = r.integer("layers");
    m.hidden = r.integer("hidden");
    m.heads = r.integer("heads");
    m.kvHeads = r.integer("kv_heads", m.heads);
    m.ffnHidden = r.integer("ffn_hidden");
    m.vocab = r.integer("vocab");
    m.seqLen = r.integer("seq_len");
    m.maxPositions = m.seqLen;
    const std::string act = r.text("activation");
    if (act == "gelu") {
        m.activation = Activation::Gelu;
        m.norm = Norm::LayerNorm;
        m.positions = PositionEmbedding::Learned;
        m.attentionBias = m.outputBias = m.mlpBias = true;
    } else if (act == "swiglu") {
        m.activation = Activation::SwiGlu;
    } else {
        throw InputError("published runs, line " + std::to_string(line) + ": activation '" + act +
                         "' is not gelu or swiglu");
    }
    m.tiedEmbeddings = r.text("tied") == "true";

    ParallelConfig& p = run.parallel;
    p.tp = r.integer("tp");
    p.pp = r.integer("pp");
    p.vpp = r.integer("vpp", 1);
    p.cp = r.integer("cp", 1);
    p.dp = r.integer("dp");
    p.zero = int(r.number("zero", 1)); // Megatron's distributed optimizer unless stated
    p.microBatch = r.integer("micro_batch", 1);
    p.globalBatch = r.integer("global_batch");
    p.sequenceParallel = false;
    const std::string rc = r.text("recompute");
    p.recompute = rc.empty() ? Recompute::None : recomputeFromString(rc);
    p.schedule = p.vpp > 1 ? PipelineSchedule::Interleaved : PipelineSchedule::OneFOneB;
    p.precision = PrecisionPolicy::bf16Mixed();
    p.flashAttention = r.text("flash_attention") == "true";
    // Empty: what current frameworks do (ParallelConfig's defaults).
    p.overlapGradReduce = r.flag("overlap_grad_reduce", true);
    p.overlapParamGather = r.flag("overlap_param_gather", true);
    // The cluster's network where it was not its GPU's reference system's.
    run.interBandwidth = r.number("inter_bw_gbps", 0) * 1e9;
    if (p.tp * p.pp * p.cp * p.dp != r.integer("gpus"))
        throw InputError("published runs, line " + std::to_string(line) +
                         ": tp x pp x cp x dp does not equal gpus");

    run.reportedTflops = r.number("reported_tflops_per_gpu", 0);
    run.reportedMfu = r.number("reported_mfu", 0);
    if (run.reportedTflops <= 0 && run.reportedMfu <= 0)
        throw InputError("published runs, line " + std::to_string(line) +
                         ": needs reported_tflops_per_gpu or reported_mfu");
    run.convention = conventionFromString(r.text("flops_convention"), line);
    return run;
}

} // namespace

std::vector<PublishedRun> parsePublishedRuns(const std::string& csvText) {
    std::istringstream in(csvText);
    std::string line;
    if (!std::getline(in, line))
        throw InputError("published runs: the file is empty; it needs a header line");
    std::map<std::string, std::size_t> columns;
    const std::vector<std::string> header = splitCsvLine(line, 1);
    for (std::size_t i = 0; i < header.size(); ++i)
        columns[header[i]] = i;
    std::vector<PublishedRun> runs;
    int lineNo = 1;
    while (std::getline(in, line)) {
        ++lineNo;
        if (line.empty() || line == "\r")
            continue;
        runs.push_back(parseRow(Row(columns, splitCsvLine(line, lineNo), lineNo), lineNo));
    }
    return runs;
}

std::vector<PublishedRun> loadPublishedRuns(const std::string& path) {
    std::ifstream f(path);
    if (!f)
        throw InputError("cannot open published runs file '" + path + "'");
    std::stringstream text;
    text << f.rdbuf();
    return parsePublishedRuns(text.str());
}

RunComparison compareRun(const PublishedRun& run, const Assumptions& assume) {
    PlanInputs in;
    in.model = run.model;
    in.parallel = run.parallel;
    in.assume = assume;
    const GpuSpec& gpu = findGpuPreset(run.gpuId);
    const int gpusPerNode = 8;
    in.cluster = makeCluster(gpu, gpusPerNode, std::max(1, run.parallel.worldSize() / gpusPerNode),
                             run.interBandwidth);
    RunComparison c;
    c.estimate = evaluate(in);
    const double flopsPerGpu = conventionFlopsPerToken(run.model, run.convention) *
                               c.estimate.tokensPerSecond / run.parallel.worldSize();
    if (run.reportedTflops > 0) {
        c.metric = "TFLOP/s per GPU";
        c.reported = run.reportedTflops;
        c.predicted = flopsPerGpu / 1e12;
    } else {
        c.metric = "MFU";
        c.reported = run.reportedMfu;
        c.predicted = flopsPerGpu / gpu.peak(Precision::Bf16);
    }
    c.error = (c.predicted - c.reported) / c.reported;
    return c;
}

double medianAbsoluteError(const std::vector<RunComparison>& comparisons) {
    std::vector<double> errors;
    for (const RunComparison& c : comparisons)
        errors.push_back(std::abs(c.error));
    if (errors.empty())
        return 0.0;
    std::sort(errors.begin(), errors.end());
    const std::size_t n = errors.size();
    return n % 2 ? errors[n / 2] : 0.5 * (errors[n / 2 - 1] + errors[n / 2]);
}

} // namespace shardscope
