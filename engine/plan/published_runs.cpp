#include "published_runs.h"

#include "compute.h"
#include "core/error.h"
#include "core/presets.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
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

    bool has(const std::string& column) const { return columns_.count(column) > 0; }
    const std::string& required(const std::string& column) const {
        const std::string& t = text(column);
        if (t.empty())
            throw InputError(has(column)
                                 ? "published runs, line " + std::to_string(line_) + ": column '" +
                                       column + "' is empty but required"
                                 : "published runs: the header has no column '" + column + "'");
        return t;
    }

    // A column the header lacks reads as empty; a required one then says so.
    const std::string& text(const std::string& column) const {
        static const std::string absent;
        const auto it = columns_.find(column);
        if (it == columns_.end())
            return absent;
        if (it->second >= cells_.size())
            throw InputError("published runs, line " + std::to_string(line_) +
                             ": missing column '" + column + "'");
        return cells_[it->second];
    }
    double number(const std::string& column, double fallback = std::nan("")) const {
        const std::string& t = text(column);
        if (t.empty()) {
            if (std::isnan(fallback) && !has(column))
                throw InputError("published runs: the header has no column '" + column + "'");
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

double median(std::vector<double> v) {
    if (v.empty())
        return 0.0;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

FlopsConvention conventionFromString(const std::string& s, int line) {
    try {
        return flopsConventionFromString(s);
    } catch (const InputError& e) {
        throw InputError("published runs, line " + std::to_string(line) + ": " + e.what());
    }
}

PublishedRun parseRow(const Row& r, int line) {
    PublishedRun run;
    run.name = r.required("name");
    run.source = r.required("source");
    // Without an id, runs named alike ("megatron-gpt-1.7b") are one source: the name up to '-'.
    run.sourceId = r.text("source_id");
    if (run.sourceId.empty())
        run.sourceId = run.name.substr(0, run.name.find('-'));
    const std::string split = r.text("split");
    if (split == "calibration")
        run.split = RunSplit::Calibration;
    else if (split.empty() || split == "validation")
        run.split = RunSplit::Validation; // a run the model was not tuned on
    else
        throw InputError("published runs, line " + std::to_string(line) + ": split '" + split +
                         "' is not calibration, validation or empty");
    run.gpuId = r.required("gpu");
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
    const std::string act = r.required("activation");
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
    m.tiedEmbeddings = r.flag("tied", false);
    // Optional whole numbers: empty is 0 (head_dim: hidden / heads; experts: a dense model).
    const auto optional = [&](const char* column) {
        return r.text(column).empty() ? 0 : r.integer(column);
    };
    m.headDim = optional("head_dim");
    // Mixture of experts: every layer's MLP routed to top_k of `experts` experts of width
    // expert_ffn (0: ffn_hidden), beside shared_experts always-on ones.
    m.moe.experts = optional("experts");
    if (m.moe.experts > 0) {
        m.moe.topK = r.integer("top_k");
        m.moe.sharedExperts = optional("shared_experts");
        m.moe.expertFfn = optional("expert_ffn");
    }

    ParallelConfig& p = run.parallel;
    p.tp = r.integer("tp");
    p.pp = r.integer("pp");
    p.vpp = r.integer("vpp", 1);
    p.cp = r.integer("cp", 1);
    p.ep = r.integer("ep", 1);
    p.etp = r.text("etp").empty() ? 0 : r.integer("etp");           // empty: follows tp
    p.expertCapacityFactor = r.number("expert_capacity_factor", 0); // empty: dropless
    p.dp = r.integer("dp");
    const double zero = r.number("zero", 1); // Megatron's distributed optimizer unless stated
    if (zero != std::floor(zero) || zero > 3)
        throw InputError("published runs, line " + std::to_string(line) +
                         ": column 'zero' should be 0, 1, 2 or 3, got '" + r.text("zero") + "'");
    p.zero = int(zero);
    p.microBatch = r.integer("micro_batch", 1);
    p.globalBatch = r.integer("global_batch");
    // ZeRO's states sharded over groups of this many ranks (hybrid sharding); empty: all of dp.
    p.shardGroup = r.text("shard_group").empty() ? 0 : r.integer("shard_group");
    p.sequenceParallel = r.flag("sequence_parallel", false);
    p.tpCommOverlap = r.flag("tp_comm_overlap", false);
    p.epCommOverlap = r.flag("ep_comm_overlap", false);
    p.embeddingInPipelineSplit = r.flag("embedding_in_pipeline_split", false);
    p.lossInPipelineSplit = r.flag("loss_in_pipeline_split", false);
    // Names the line and the column of a word that is not one of the known ones.
    const auto word = [&](const char* column, const auto& parse) {
        try {
            return parse(r.text(column));
        } catch (const InputError& e) {
            throw InputError("published runs, line " + std::to_string(line) + ", column '" +
                             column + "': " + e.what());
        }
    };
    const std::string rc = r.text("recompute");
    p.recompute = rc.empty() ? Recompute::None : word("recompute", recomputeFromString);
    // Full recompute of this many layers of each virtual stage; empty: every layer.
    p.recomputeLayers = optional("recompute_layers");
    p.schedule = p.vpp > 1 ? PipelineSchedule::Interleaved : PipelineSchedule::OneFOneB;
    p.precision = r.text("precision").empty() ? PrecisionPolicy::bf16Mixed()
                                              : word("precision", precisionPolicyFromString);
    run.peakPrecision = r.text("peak_precision").empty()
                            ? Precision::Bf16
                            : word("peak_precision", precisionFromString);
    const GpuSpec& gpu = word("gpu", findGpuPreset);
    if (const auto it = gpu.peakFlops.find(run.peakPrecision);
        it == gpu.peakFlops.end() || it->second <= 0)
        throw InputError("published runs, line " + std::to_string(line) +
                         ": column 'peak_precision': " + gpu.id + " has no " +
                         toString(run.peakPrecision) + " peak to divide by");
    p.flashAttention = r.flag("flash_attention", false);
    // The fused kernel the run's framework used; empty: Auto (cuDNN on Hopper, as Transformer
    // Engine picks).
    const std::string kernel = r.text("attention_kernel");
    p.attentionKernel = kernel.empty() ? AttentionKernel::Auto
                                       : word("attention_kernel", attentionKernelFromString);
    // Empty: fused, as torch.compile and Megatron-LM's kernels run them; false where the run
    // was PyTorch eager.
    p.fusedElementwise = r.flag("fused_elementwise", true);
    // Empty: what current frameworks do (ParallelConfig's defaults).
    p.overlapGradReduce = r.flag("overlap_grad_reduce", true);
    p.overlapParamGather = r.flag("overlap_param_gather", true);
    // Empty: prefetched before each layer's gradients (FSDP's and DeepSpeed's default).
    const std::string prefetch = r.text("backward_prefetch");
    p.backwardPrefetch = prefetch.empty() ? BackwardPrefetch::Pre
                                          : word("backward_prefetch", backwardPrefetchFromString);
    // The cluster's network where it was not its GPU's reference system's.
    run.interBandwidth = r.number("inter_bw_gbps", 0) * 1e9;
    if (p.tp * p.pp * p.cp * p.dp != r.integer("gpus"))
        throw InputError("published runs, line " + std::to_string(line) +
                         ": tp x pp x cp x dp does not equal gpus");

    if (const std::vector<Violation> broken = validate(m, p); !broken.empty())
        throw InputError("published runs, line " + std::to_string(line) + ": the layout breaks " +
                         broken.front().rule + ": " + broken.front().message + "; " +
                         broken.front().hint);

    run.reportedTokensPerGpu = r.number("reported_tokens_per_s_per_gpu", 0);
    run.reportedTflops = r.number("reported_tflops_per_gpu", 0);
    run.reportedMfu = r.number("reported_mfu", 0);
    run.reportedHfu = r.number("reported_hfu", 0);
    if (run.reportedTokensPerGpu <= 0 && run.reportedTflops <= 0 && run.reportedMfu <= 0 &&
        run.reportedHfu <= 0)
        throw InputError("published runs, line " + std::to_string(line) +
                         ": needs reported_tokens_per_s_per_gpu, reported_tflops_per_gpu, "
                         "reported_mfu or reported_hfu");
    for (const double fraction : {run.reportedMfu, run.reportedHfu})
        if (fraction > 1)
            throw InputError("published runs, line " + std::to_string(line) +
                             ": reported_mfu and reported_hfu are fractions (0.43 for 43 %)");
    run.convention = conventionFromString(r.required("flops_convention"), line);
    if (run.reportedHfu > 0 && run.reportedTokensPerGpu <= 0 && run.reportedTflops <= 0 &&
        run.reportedMfu <= 0 && run.convention == FlopsConvention::Megatron)
        throw InputError("published runs, line " + std::to_string(line) +
                         ": the megatron convention already counts the recomputed forward; give "
                         "the figure as reported_tflops_per_gpu, or name the convention its HFU "
                         "was counted in");
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

PlanInputs planInputs(const PublishedRun& run, const Assumptions& assume) {
    PlanInputs in;
    in.model = run.model;
    in.parallel = run.parallel;
    in.assume = assume;
    // The plan's MFU and FLOP/s in the run's own convention (the times do not depend on it).
    in.assume.flopsConvention = run.convention;
    const int gpusPerNode = 8;
    in.cluster =
        makeCluster(findGpuPreset(run.gpuId), gpusPerNode,
                    std::max(1, run.parallel.worldSize() / gpusPerNode), run.interBandwidth);
    return in;
}

RunComparison compareRun(const PublishedRun& run, const Assumptions& assume) {
    const PlanInputs in = planInputs(run, assume);
    const GpuSpec& gpu = in.cluster.gpu;
    RunComparison c;
    c.estimate = evaluate(in);
    const double tokensPerGpu = c.estimate.tokensPerSecond / run.parallel.worldSize();
    const double flopsPerGpu = conventionFlopsPerToken(run.model, run.convention) * tokensPerGpu;
    // Hardware FLOPs: the convention's count scaled by the recomputed share the planner runs.
    const double recomputed = c.estimate.modelFlopsPerToken > 0
                                  ? c.estimate.hardwareFlopsPerToken / c.estimate.modelFlopsPerToken
                                  : 1.0;
    const double peak = gpu.peak(run.peakPrecision);
    if (run.reportedTokensPerGpu > 0) {
        c.metric = "tokens/s per GPU";
        c.reported = run.reportedTokensPerGpu;
        c.predicted = tokensPerGpu;
    } else if (run.reportedTflops > 0) {
        c.metric = "TFLOP/s per GPU";
        c.reported = run.reportedTflops;
        c.predicted = flopsPerGpu / 1e12;
    } else if (run.reportedMfu > 0) {
        c.metric = "MFU";
        c.reported = run.reportedMfu;
        c.predicted = peak > 0 ? flopsPerGpu / peak : 0.0;
    } else {
        c.metric = "HFU";
        c.reported = run.reportedHfu;
        c.predicted = peak > 0 ? flopsPerGpu * recomputed / peak : 0.0;
    }
    c.error = (c.predicted - c.reported) / c.reported;
    return c;
}

std::string toString(RunSplit s) {
    return s == RunSplit::Calibration ? "calibration" : "validation";
}

namespace {

ErrorSummary summarize(const std::vector<PublishedRun>& runs,
                       const std::vector<RunComparison>& comparisons,
                       const std::optional<RunSplit>& only) {
    ErrorSummary s;
    std::vector<double> absolute;
    std::vector<std::string> order;
    std::map<std::string, std::vector<double>> signedBySource;
    for (std::size_t i = 0; i < runs.size() && i < comparisons.size(); ++i) {
        if (only && runs[i].split != *only)
            continue;
        const double e = comparisons[i].error;
        absolute.push_back(std::abs(e));
        auto& errors = signedBySource[runs[i].sourceId];
        if (errors.empty())
            order.push_back(runs[i].sourceId);
        errors.push_back(e);
        const Estimate& planned = comparisons[i].estimate;
        if (!planned.fits)
            ++s.overMemory;
        if (planned.gpuMemory > 0)
            s.worstMemoryRatio =
                std::max(s.worstMemoryRatio, planned.memory.total() / planned.gpuMemory);
    }
    s.runs = int(absolute.size());
    s.medianAbsolute = median(absolute);
    if (!absolute.empty()) {
        std::sort(absolute.begin(), absolute.end());
        const std::size_t rank = std::size_t(std::ceil(0.9 * double(absolute.size())));
        s.p90Absolute = absolute[std::max<std::size_t>(rank, 1) - 1];
    }
    for (const std::string& id : order)
        s.sources.push_back({id, int(signedBySource[id].size()), median(signedBySource[id])});
    return s;
}

} // namespace

ErrorSummary summarizeErrors(const std::vector<PublishedRun>& runs,
                             const std::vector<RunComparison>& comparisons) {
    return summarize(runs, comparisons, std::nullopt);
}

ErrorSummary summarizeErrors(const std::vector<PublishedRun>& runs,
                             const std::vector<RunComparison>& comparisons, RunSplit split) {
    return summarize(runs, comparisons, split);
}

double medianAbsoluteError(const std::vector<RunComparison>& comparisons) {
    std::vector<double> errors;
    for (const RunComparison& c : comparisons)
        errors.push_back(std::abs(c.error));
    return median(std::move(errors));
}

} // namespace shardscope
