#include "report.h"

#include "core/json_io.h"
#include "core/presets.h"
#include "core/units.h"
#include "text_table.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

namespace shardscope::cli {

nlohmann::json explanationJson(const Explanation& x) {
    return {{"key", x.key},
            {"label", x.label},
            {"value", x.value},
            {"unit", x.unit},
            {"display", x.display},
            {"formula", x.formula},
            {"substituted", x.substituted},
            {"source", x.source}};
}

nlohmann::json planJson(const PlanInputs& in, const Estimate& e) {
    nlohmann::json j;
    j["schema"] = kPlanSchema;
    j["model"] = in.model;
    j["cluster"] = in.cluster;
    j["parallel"] = in.parallel;
    j["train"] = in.train;
    j["valid"] = e.valid();
    j["violations"] = nlohmann::json::array();
    for (const Violation& v : e.violations)
        j["violations"].push_back({{"rule", v.rule}, {"message", v.message}, {"hint", v.hint}});
    j["params"] = {{"total", e.params.total},
                   {"active", e.params.active},
                   {"embeddings", e.params.embeddings},
                   {"attention", e.params.attention},
                   {"mlp", e.params.mlp},
                   {"norms", e.params.norms},
                   {"lm_head", e.params.lmHead}};
    const MemoryBreakdown& m = e.memory;
    j["memory"] = {{"parameters", m.parameters},
                   {"gradients", m.gradients},
                   {"optimizer", m.optimizer},
                   {"activations", m.activations},
                   {"temporary", m.temporary},
                   {"overhead", m.overhead},
                   {"total", m.total()},
                   {"capacity", e.capacity},
                   {"gpu_memory", e.gpuMemory},
                   {"memory_headroom", in.assume.memoryHeadroom},
                   {"fits", e.fits},
                   {"worst_stage", e.worstStage},
                   {"cpu_offloaded", m.cpuOffloaded}};
    for (Axis a : kAxes) {
        const AxisComm& c = e.axis(a);
        std::string key = toString(a);
        std::transform(key.begin(), key.end(), key.begin(), ::tolower);
        j["comm"][key] = {{"group_size", c.groupSize},
                          {"crosses_nodes", c.crossesNodes},
                          {"bytes", c.bytes},
                          {"seconds", c.seconds},
                          {"exposed_seconds", c.exposed}};
    }
    j["summary"] = {{"step_time_s", e.stepTime},
                    {"compute_time_s", e.computeTime},
                    {"bubble_fraction", e.bubbleFraction},
                    {"host_wait_s", e.hostWait},
                    {"tokens_per_second", e.tokensPerSecond},
                    {"tflops_per_gpu", e.tflopsPerGpu / 1e12},
                    {"hardware_tflops_per_gpu", e.hardwareFlopsPerGpu / 1e12},
                    {"model_flops_per_token", e.modelFlopsPerToken},
                    {"hardware_flops_per_token", e.hardwareFlopsPerToken},
                    {"mfu", e.mfu},
                    {"flops_convention", toString(in.assume.flopsConvention)},
                    {"optimizer_post_validation", in.assume.optimizerPostValidation},
                    {"hfu", e.hfu},
                    {"mfu_assumed", e.mfuAssumed},
                    {"modelled_step_time_s", e.modelledStepTime},
                    {"modelled_mfu", e.modelledMfu},
                    {"time_to_train_s", e.timeToTrain},
                    {"wall_time_to_train_s", e.wallTimeToTrain},
                    {"gpu_hours", e.gpuHours},
                    {"cost", e.cost},
                    {"training_fraction", e.trainingFraction}};
    j["figures"] = nlohmann::json::array();
    for (FigureId id : allFigures())
        j["figures"].push_back(explanationJson(explain(in, e, id)));
    return j;
}

void printExplanation(std::ostream& out, const Explanation& x) {
    out << x.label << " (" << x.key << "): " << x.display << '\n'
        << "  formula:     " << x.formula << '\n'
        << "  substituted: " << x.substituted << '\n'
        << "  source:      " << x.source << '\n';
}

void printPlan(std::ostream& out, const PlanInputs& in, const Estimate& e, bool explainAll) {
    const ParallelConfig& p = in.parallel;
    out << in.model.name << " on " << in.cluster.nodes << " x " << in.cluster.gpusPerNode << " "
        << in.cluster.gpu.name << "\n"
        << "Layout: " << layoutSummary(p) << ", global batch " << p.globalBatch << " x "
        << in.model.seqLen << " tokens, " << p.precision.name() << ", " << toString(p.optimizer)
        << (p.offloadOptimizer ? " (offloaded)" : "") << "\n\n";

    out << "Memory per GPU (pipeline stage " << e.worstStage << ")\n";
    Table mem({"category", "bytes", "share"});
    const double total = e.memory.total();
    for (FigureId id : {FigureId::MemParameters, FigureId::MemGradients, FigureId::MemOptimizer,
                        FigureId::MemActivations, FigureId::MemTemporary, FigureId::MemOverhead}) {
        const Explanation x = explain(in, e, id);
        mem.add({x.label, x.display, formatPercent(total > 0 ? x.value / total : 0)});
    }
    mem.add({"total", formatBytes(total),
             formatPercent(e.capacity > 0 ? total / e.capacity : 0) + " of " +
                 describeCapacity(in, e)});
    mem.print(out);
    out << (e.fits ? "Fits: " + formatBytes(e.capacity - total) + " free on each GPU\n"
                   : "Does NOT fit: " + formatBytes(total - e.capacity) + " over the capacity\n");
    if (e.memory.cpuOffloaded > 0)
        out << "Host memory per GPU for offloaded state: " << formatBytes(e.memory.cpuOffloaded)
            << '\n';

    out << "\nCommunication per step\n";
    Table comm({"axis", "group", "link", "sent/rank", "time", "exposed"});
    for (Axis a : kAxes) {
        const AxisComm& c = e.axis(a);
        comm.add({toString(a), std::to_string(c.groupSize),
                  c.groupSize <= 1 ? "-" : (c.crossesNodes ? "network" : "in node"),
                  formatBytes(c.bytes), formatSeconds(c.seconds), formatSeconds(c.exposed)});
    }
    comm.print(out);

    out << "\nTime\n";
    Table time({"figure", "value"});
    time.add({"compute", formatSeconds(e.computeTime)});
    time.add({"pipeline bubble",
              formatSeconds(e.bubbleTime) + " (" + formatPercent(e.bubbleFraction) + ")"});
    time.add({"exposed communication", formatSeconds(e.exposedComm)});
    if (e.hostMicrobatch > 0)
        time.add({"host-bound wait", formatSeconds(e.hostWait) + " (MoE host time " +
                                         formatSeconds(e.hostMicrobatch) + " a microbatch)"});
    time.add({"optimizer step", formatSeconds(e.optimizerTime)});
    if (e.mfuAssumed)
        time.add({"step time", formatSeconds(e.stepTime) + " at the assumed MFU (modelled: " +
                                   formatSeconds(e.modelledStepTime) + ", MFU " +
                                   formatPercent(e.modelledMfu) + ")"});
    else
        time.add({"step time", formatSeconds(e.stepTime)});
    time.add({"throughput", formatNumber(e.tokensPerSecond) + " tokens/s"});
    time.add({"model FLOP/s per GPU", formatRate(e.tflopsPerGpu)});
    time.add({"MFU", formatPercent(e.mfu) + (e.mfuAssumed ? " (assumed, --mfu)" : "") +
                         (in.assume.flopsConvention != FlopsConvention::Causal
                              ? " (" + toString(in.assume.flopsConvention) + " FLOP count)"
                              : "")});
    time.add({"hardware FLOP/s per GPU", formatRate(e.hardwareFlopsPerGpu)});
    time.add({"HFU (recompute counted)", formatPercent(e.hfu)});
    if (in.train.trainTokens > 0) {
        time.add({"time to train " + formatCount(in.train.trainTokens) + " tokens",
                  formatSeconds(e.timeToTrain)});
        time.add({"  with failures and checkpoints", formatSeconds(e.wallTimeToTrain)});
        time.add({"GPU-hours", formatNumber(e.gpuHours)});
        time.add({"cost", formatNumber(e.cost) + " at " + formatNumber(in.cluster.gpuHourCost) +
                              " per GPU-hour"});
    }
    time.add({"job MTBF", formatSeconds(e.jobMtbf)});
    time.add({"checkpoint write",
              formatSeconds(e.checkpointWrite) + " (" + formatBytes(e.checkpointBytes) + ")"});
    time.add({"optimal checkpoint interval", formatSeconds(e.checkpointInterval)});
    time.add({"expected training-time fraction", formatPercent(e.trainingFraction)});
    time.print(out);

    if (explainAll) {
        out << "\nHow each figure is computed\n";
        for (FigureId id : allFigures()) {
            out << '\n';
            printExplanation(out, explain(in, e, id));
        }
    } else {
        out << "\nRun with --explain for every formula, or `explain <figure>` for one.\n";
    }
}

nlohmann::json searchJson(const PlanInputs& in, const SearchResult& r) {
    nlohmann::json j;
    j["schema"] = kSearchSchema;
    j["model"] = in.model;
    j["cluster"] = in.cluster;
    j["flops_convention"] = toString(in.assume.flopsConvention); // how each layout's MFU counts
    j["considered"] = r.considered;
    j["evaluated"] = r.evaluated;
    j["fitting"] = r.fitting;
    j["cancelled"] = r.cancelled;
    j["rejected"] = r.rejected;
    j["top"] = nlohmann::json::array();
    for (const Candidate& c : r.top)
        j["top"].push_back({{"parallel", c.config},
                            {"memory_bytes", c.memory},
                            {"tokens_per_second", c.tokensPerSecond},
                            {"step_time_s", c.stepTime},
                            {"mfu", c.mfu}});
    return j;
}

void printSearch(std::ostream& out, const PlanInputs& in, const SearchResult& r) {
    out << "Search: " << in.model.name << " on " << in.cluster.worldSize() << " x "
        << in.cluster.gpu.name << ", global batch " << in.parallel.globalBatch << " x "
        << in.model.seqLen << " tokens\n"
        << r.considered << " layouts considered, " << r.evaluated << " valid, " << r.fitting
        << " fit in memory\n";
    if (!r.rejected.empty()) {
        out << "Rejected:";
        for (const auto& [rule, count] : r.rejected)
            out << ' ' << rule << '=' << count;
        out << '\n';
    }
    out << '\n';
    if (r.top.empty()) {
        out << "No layout fits. Try more GPUs, ZeRO-3, full recompute, or a smaller micro batch.\n";
        return;
    }
    Table t({"#", "layout", "memory/GPU", "step", "tokens/s", "MFU"});
    int rank = 1;
    for (const Candidate& c : r.top)
        t.add({std::to_string(rank++), layoutSummary(c.config), formatBytes(c.memory),
               formatSeconds(c.stepTime), formatNumber(c.tokensPerSecond), formatPercent(c.mfu)});
    t.print(out);
}

namespace {

nlohmann::json summaryJson(const ErrorSummary& s) {
    // A part without runs has no error to report, not a perfect one.
    const auto figure = [&](double v) { return s.runs > 0 ? nlohmann::json(v) : nlohmann::json(); };
    nlohmann::json j{{"runs", s.runs},
                     {"median_absolute_error", figure(s.medianAbsolute)},
                     {"p90_absolute_error", figure(s.p90Absolute)},
                     {"over_memory", s.overMemory},
                     {"worst_memory_ratio", figure(s.worstMemoryRatio)},
                     {"sources", nlohmann::json::array()}};
    for (const ErrorSummary::Source& source : s.sources)
        j["sources"].push_back({{"id", source.id},
                                {"runs", source.runs},
                                {"median_signed_error", source.medianSigned}});
    return j;
}

// "validation: 40 runs, median 7.1 %, p90 18 %; per source (median signed): a +3 % (12), ..."
std::string summaryLine(const std::string& label, const ErrorSummary& s) {
    std::string text = label + ": " + std::to_string(s.runs) + " runs, median absolute error " +
                       formatPercent(s.medianAbsolute) + ", p90 " + formatPercent(s.p90Absolute) +
                       "; median signed error per source:";
    for (std::size_t i = 0; i < s.sources.size(); ++i)
        text += (i ? ", " : " ") + s.sources[i].id + " " +
                (s.sources[i].medianSigned > 0 ? "+" : "") +
                formatPercent(s.sources[i].medianSigned) + " (" +
                std::to_string(s.sources[i].runs) + ")";
    // Each run ran: one planned over its GPU's memory says where the memory model is off.
    text += "; memory: " + std::to_string(s.overMemory) + " of " + std::to_string(s.runs) +
            " planned over their GPU's, the largest at " + formatNumber(s.worstMemoryRatio) +
            " x it";
    return text;
}

// "89.3 GB / 80.0 GB": the most loaded stage's planned memory beside the GPU's.
std::string memoryText(const RunComparison& c) {
    return formatBytes(c.estimate.memory.total()) + " / " + formatBytes(c.estimate.gpuMemory);
}

std::string metricText(const RunComparison& c, double v) {
    if (c.metric == "MFU" || c.metric == "HFU")
        return formatPercent(v);
    return formatNumber(v) + (c.metric == "tokens/s per GPU" ? " tokens/s" : " TFLOP/s");
}

} // namespace

namespace {

// One run beside its prediction, as `validate --json` lists it.
nlohmann::json runJson(const PublishedRun& run, const RunComparison& c) {
    return {{"name", run.name},
            {"source_id", run.sourceId},
            {"split", toString(run.split)},
            {"metric", c.metric},
            {"reported", c.reported},
            {"predicted", c.predicted},
            {"error", c.error},
            {"convention", toString(run.convention)},
            {"planned_memory", c.estimate.memory.total()},
            {"gpu_memory", c.estimate.gpuMemory},
            {"fits", c.estimate.fits},
            {"source", run.source}};
}

// The metric compared, with the FLOP convention where it counts FLOPs.
std::string metricLabel(const PublishedRun& run, const RunComparison& c) {
    return c.metric == "tokens/s per GPU" ? c.metric
                                          : c.metric + " (" + toString(run.convention) + ")";
}

} // namespace

nlohmann::json validationJson(const std::vector<PublishedRun>& runs,
                              const std::vector<RunComparison>& results) {
    nlohmann::json j;
    j["median_absolute_error"] = medianAbsoluteError(results);
    j["all"] = summaryJson(summarizeErrors(runs, results));
    for (const RunSplit split : {RunSplit::Calibration, RunSplit::Validation})
        j[toString(split)] = summaryJson(summarizeErrors(runs, results, split));
    j["runs"] = nlohmann::json::array();
    for (std::size_t i = 0; i < runs.size(); ++i)
        j["runs"].push_back(runJson(runs[i], results[i]));
    return j;
}

void printValidation(std::ostream& out, const std::vector<PublishedRun>& runs,
                     const std::vector<RunComparison>& results, bool markdown) {
    std::vector<std::string> summaries;
    for (const RunSplit split : {RunSplit::Calibration, RunSplit::Validation})
        if (const ErrorSummary s = summarizeErrors(runs, results, split); s.runs > 0)
            summaries.push_back(summaryLine(toString(split), s));
    if (markdown) {
        out << "| run | source | split | GPU | GPUs | layout | metric | reported | predicted | "
               "error | memory (planned / GPU) |\n"
            << "|---|---|---|---|---|---|---|---|---|---|---|\n";
        for (std::size_t i = 0; i < runs.size(); ++i) {
            const RunComparison& c = results[i];
            out << "| " << runs[i].name << " | " << runs[i].sourceId << " | "
                << toString(runs[i].split) << " | " << runs[i].gpuId << " | "
                << runs[i].parallel.worldSize() << " | " << layoutSummary(runs[i].parallel) << " | "
                << metricLabel(runs[i], c) << " | " << metricText(c, c.reported) << " | "
                << metricText(c, c.predicted) << " | " << formatPercent(c.error) << " | "
                << memoryText(c) << (c.estimate.fits ? "" : ", over") << " |\n";
        }
        out << "\nMedian absolute error: " << formatPercent(medianAbsoluteError(results))
            << " over " << runs.size() << " runs.\n";
        for (const std::string& line : summaries)
            out << "\n- " << line << "\n";
        return;
    }
    Table t({"run", "split", "metric", "reported", "predicted", "error", "memory"});
    for (std::size_t i = 0; i < runs.size(); ++i) {
        const RunComparison& c = results[i];
        t.add({runs[i].name, toString(runs[i].split), c.metric, metricText(c, c.reported),
               metricText(c, c.predicted), formatPercent(c.error),
               memoryText(c) + (c.estimate.fits ? "" : " over")});
    }
    t.print(out);
    out << "Median absolute error: " << formatPercent(medianAbsoluteError(results)) << '\n';
    for (const std::string& line : summaries)
        out << line << '\n';
}

nlohmann::json validationRunJson(const PublishedRun& run, const RunComparison& c,
                                 const PlanInputs& in) {
    nlohmann::json j = runJson(run, c);
    j["gpu"] = run.gpuId;
    j["plan"] = planJson(in, c.estimate);
    return j;
}

void printValidationRun(std::ostream& out, const PublishedRun& run, const RunComparison& c,
                        const PlanInputs& in, bool explainAll) {
    out << run.name << " (" << run.sourceId << ", " << toString(run.split) << " part)\n"
        << run.parallel.worldSize() << " x " << run.gpuId << ", " << layoutSummary(run.parallel)
        << '\n'
        << metricLabel(run, c) << ": reported " << metricText(c, c.reported) << ", predicted "
        << metricText(c, c.predicted) << ", error " << formatPercent(c.error) << '\n'
        << "Source: " << run.source << "\n\n";
    printPlan(out, in, c.estimate, explainAll);
}

void printModels(std::ostream& out) {
    Table t({"id", "name", "params", "layers", "hidden", "heads/kv", "ffn", "vocab", "seq"});
    for (const ModelSpec& m : modelPresets()) {
        const ParamCount c = countParameters(m);
        t.add({m.id, m.name,
               formatCount(c.total) +
                   (m.moe.enabled() ? " (" + formatCount(c.active) + " active)" : ""),
               std::to_string(m.layers), std::to_string(m.hidden),
               std::to_string(m.heads) + "/" + std::to_string(m.kvHeads),
               std::to_string(m.ffnHidden), std::to_string(m.vocab), std::to_string(m.seqLen)});
    }
    t.print(out);
}

void printGpus(std::ostream& out) {
    Table t({"id", "name", "memory", "HBM", "NVLink/dir", "network", "bf16 dense", "fp8 dense"});
    for (const GpuSpec& g : gpuPresets()) {
        const auto fp8 = g.peakFlops.find(Precision::Fp8);
        t.add({g.id, g.name, formatBytes(g.memoryBytes),
               formatNumber(g.hbmBandwidth / 1e9) + " GB/s",
               formatNumber(g.nvlinkBandwidth / 1e9) + " GB/s",
               formatNumber(defaultNetworkBandwidth(g) / 1e9) + " GB/s",
               formatRate(g.peak(Precision::Bf16)),
               fp8 == g.peakFlops.end() ? "-" : formatRate(fp8->second)});
    }
    t.print(out);
}

nlohmann::json devicesJson(const DeviceReport& r) {
    nlohmann::json j;
    j["built_with_cuda"] = r.builtWithCuda;
    j["versions"] = r.versions;
    j["reason"] = r.reason;
    j["devices"] = nlohmann::json::array();
    for (const DeviceInfo& d : r.devices)
        j["devices"].push_back({{"index", d.index},
                                {"name", d.name},
                                {"memory_bytes", d.memoryBytes},
                                {"sms", d.sms},
                                {"compute_capability", d.computeCapability},
                                {"preset", d.preset ? d.preset->id : ""}});
    return j;
}

void printDevices(std::ostream& out, const DeviceReport& r) {
    if (!r.versions.empty())
        out << r.versions << '\n';
    if (r.devices.empty()) {
        out << "No CUDA GPU: " << r.reason << '\n';
        return;
    }
    Table t({"#", "name", "memory", "SMs", "compute capability", "preset"});
    for (const DeviceInfo& d : r.devices)
        t.add({std::to_string(d.index), d.name, formatBytes(d.memoryBytes), std::to_string(d.sms),
               d.computeCapability, d.preset ? d.preset->id : "(no matching preset)"});
    t.print(out);
}

} // namespace shardscope::cli
