#include "commands.h"

#include "collective_report.h"
#include "core/error.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "inputs.h"
#include "plan/explain.h"
#include "plan/published_runs.h"
#include "plan/search.h"
#include "report.h"
#include "run_report.h"
#include "schedule_report.h"

#include <CLI/CLI.hpp>
#include <atomic>
#include <cmath>
#include <optional>
#include <sstream>

namespace shardscope::cli {

namespace {

struct Options {
    ModelFlags model;
    ClusterFlags cluster;
    LayoutFlags layout;
    bool json = false;
    bool explainAll = false;
    std::string figure;
    int topK = 10;
    bool tpWithinNode = false;
    bool tryZeroBubble = false;
    bool postValidation = false; // Assumptions::optimizerPostValidation
    std::optional<double> mfu;   // --mfu: the step time from an assumed MFU
    double memoryHeadroom = 0;   // --memory-headroom: a fraction of each GPU's memory kept free
    double moeHostMs = Assumptions{}.moeLayerHostSeconds * 1e3; // --moe-host-ms
    std::string flopsConvention = "causal";
};

// --moe-host-ms, as plan, search, explain and validate take it.
void checkMoeHostMs(double ms) {
    if (!std::isfinite(ms) || ms < 0 || ms > kMaxMoeLayerHostMs)
        throw InputError("--moe-host-ms must be from 0 to 1000 ms of host time a dropless MoE "
                         "layer takes a microbatch, e.g. --moe-host-ms 5; 0 for no host roof");
}

PlanInputs buildInputs(const Options& o) {
    PlanInputs in;
    in.model = buildModel(o.model);
    in.cluster = buildCluster(o.cluster);
    in.parallel = buildLayout(o.layout, in.cluster);
    in.train = buildTrain(o.layout);
    in.assume.optimizerPostValidation = o.postValidation;
    if (o.mfu) {
        if (!std::isfinite(*o.mfu) || *o.mfu <= 0 || *o.mfu > 1)
            throw InputError("--mfu must be a fraction above 0 and at most 1, e.g. --mfu 0.4 for "
                             "40%; leave it out for the modelled MFU");
        in.assume.assumedMfu = *o.mfu;
    }
    if (!std::isfinite(o.memoryHeadroom) || o.memoryHeadroom < 0 || o.memoryHeadroom > 0.9)
        throw InputError("--memory-headroom must be a fraction from 0 to 0.9, e.g. "
                         "--memory-headroom 0.1 to keep 10% of each GPU's memory free");
    in.assume.memoryHeadroom = o.memoryHeadroom;
    checkMoeHostMs(o.moeHostMs);
    in.assume.moeLayerHostSeconds = o.moeHostMs / 1e3;
    in.assume.flopsConvention = flopsConventionFromString(o.flopsConvention);
    return in;
}

void printViolations(std::ostream& err, const std::vector<Violation>& violations) {
    err << "error: the layout is not valid for this model and cluster:\n";
    for (const Violation& v : violations)
        err << "  - [" << v.rule << "] " << v.message << "\n    fix: " << v.hint << '\n';
}

int runPlan(const Options& o, std::ostream& out, std::ostream& err) {
    const PlanInputs in = buildInputs(o);
    const Estimate e = estimate(in);
    if (!e.valid()) {
        printViolations(err, e.violations);
        return 2;
    }
    if (o.json)
        out << planJson(in, e).dump(2) << '\n';
    else
        printPlan(out, in, e, o.explainAll);
    return 0;
}

int runExplain(const Options& o, std::ostream& out, std::ostream& err) {
    const FigureId id = figureFromKey(o.figure);
    const PlanInputs in = buildInputs(o);
    const Estimate e = estimate(in);
    if (!e.valid()) {
        printViolations(err, e.violations);
        return 2;
    }
    if (o.json)
        out << explanationJson(explain(in, e, id)).dump(2) << '\n';
    else
        printExplanation(out, explain(in, e, id));
    return 0;
}

int runSearch(const Options& o, std::ostream& out, std::ostream& err) {
    PlanInputs in = buildInputs(o);
    if (in.model.isBare()) {
        err << "error: search needs the model's architecture; give --model or --hf-config instead "
               "of --params\n";
        return 2;
    }
    if (in.parallel.globalBatch <= 0) {
        err << "error: --global-batch must be positive, e.g. --global-batch 512\n";
        return 2;
    }
    if (o.topK <= 0) {
        err << "error: --top must be positive, e.g. --top 10\n";
        return 2;
    }
    SearchSpace space;
    space.tpWithinNode = o.tpWithinNode;
    space.tryZeroBubble = o.tryZeroBubble;
    SearchOptions options;
    options.topK = o.topK;
    const SearchResult r =
        searchLayouts(in.model, in.cluster, in.parallel, in.train, in.assume, space, options);
    if (o.json)
        out << searchJson(in, r).dump(2) << '\n';
    else
        printSearch(out, in, r);
    return 0;
}

struct ValidateOptions {
    std::string path;
    bool markdown = false;
    std::string run; // one run's whole plan instead of the table
    bool explain = false;
    double moeHostMs = Assumptions{}.moeLayerHostSeconds * 1e3; // --moe-host-ms
};

int runValidate(const ValidateOptions& o, bool json, std::ostream& out, std::ostream& err) {
    checkMoeHostMs(o.moeHostMs);
    Assumptions assume;
    assume.moeLayerHostSeconds = o.moeHostMs / 1e3;
    const std::vector<PublishedRun> runs = loadPublishedRuns(o.path);
    if (runs.empty()) {
        // A median over no runs would read as a perfect 0 % error.
        err << "error: " << o.path << " holds no runs; give a header line and one run per line "
            << "(see tests/data/published_runs.csv)\n";
        return 2;
    }
    if (!o.run.empty()) {
        const auto it = std::find_if(runs.begin(), runs.end(),
                                     [&](const PublishedRun& r) { return r.name == o.run; });
        if (it == runs.end()) {
            err << "error: " << o.path << " has no run named '" << o.run << "'; `validate "
                << o.path << "` lists the names in its first column\n";
            return 2;
        }
        const PlanInputs in = planInputs(*it, assume);
        const RunComparison c = compareRun(*it, assume);
        if (json)
            out << validationRunJson(*it, c, in).dump(2) << '\n';
        else
            printValidationRun(out, *it, c, in, o.explain);
        return 0;
    }
    std::vector<RunComparison> results;
    for (const PublishedRun& run : runs)
        results.push_back(compareRun(run, assume));
    if (json)
        out << validationJson(runs, results).dump(2) << '\n';
    else
        printValidation(out, runs, results, o.markdown);
    return 0;
}

// --json lists every op of a schedule and every transfer of a collective: past about a million
// the output runs to hundreds of megabytes and the document to gigabytes, which no reader wants.
constexpr std::size_t kMaxListed = std::size_t(1) << 20;

std::string count(std::size_t n) {
    std::string digits = std::to_string(n);
    for (int at = int(digits.size()) - 3; at > 0; at -= 3)
        digits.insert(std::size_t(at), ",");
    return digits;
}

struct ScheduleOptions {
    std::string schedule = "1f1b";
    int pp = 4, microbatches = 8, vpp = 1;
    OpCosts costs;
    double p2p = 0;
    bool ops = false;
};

int runSchedule(const ScheduleOptions& o, bool json, std::ostream& out) {
    ScheduleSpec spec;
    spec.kind = scheduleFromString(o.schedule);
    spec.stages = o.pp;
    spec.microbatches = o.microbatches;
    spec.virtualStages = o.vpp;
    const PipelineProgram program = buildPipelineProgram(spec);
    if (json && program.opCount() > kMaxListed)
        throw InputError("--json lists every op, and this schedule has " +
                         count(program.opCount()) + ", more than the " + count(kMaxListed) +
                         " it lists: drop --json for the per-rank summary, or lower --pp or -m");
    const PipelineCosts costs = stageCosts(spec, o.costs, o.p2p);
    const PipelineTimeline t = simulate(program, costs);
    if (json)
        out << scheduleJson(program, costs, t).dump(2) << '\n';
    else
        printSchedule(out, program, costs, t, o.ops);
    return 0;
}

struct CollectiveOptions {
    std::string algorithm = "ring-allreduce";
    int ranks = 8;
    double sizeGB = 1;
    double intraGBps = 450, interGBps = 50, intraUs = 3, interUs = 10;
    int gpusPerNode = 8;
    bool steps = false;
};

// v in [least, most] (and above 0 when `positive`): NaN, infinities and absurd sizes are
// refused with the range instead of printing nan or null.
void requireRange(double v, const char* flag, double least, double most, const char* unit,
                  bool positive = false) {
    if (v >= least && v <= most && !(positive && v <= 0))
        return;
    std::ostringstream text;
    text << flag << " must be " << (positive ? "above " : "from ") << least << " "
         << (positive ? "and up to " : "to ") << most << " " << unit << " (got " << v << ")";
    throw InputError(text.str());
}

int runCollective(const CollectiveOptions& o, bool json, std::ostream& out) {
    requireRange(o.sizeGB, "--size", 0, 1e6, "GB", true);
    requireRange(o.intraGBps, "--intra-bw", 0, 1e6, "GB/s", true);
    requireRange(o.interGBps, "--inter-bw", 0, 1e6, "GB/s", true);
    requireRange(o.intraUs, "--intra-latency", 0, 1e6, "us");
    requireRange(o.interUs, "--inter-latency", 0, 1e6, "us");
    CollectiveSpec spec;
    spec.kind = collectiveFromString(o.algorithm);
    spec.ranks = o.ranks;
    spec.gpusPerNode = o.gpusPerNode;
    const CollectivePlan plan = buildCollective(spec);
    std::size_t transfers = 0;
    for (const CollectiveStep& step : plan.steps)
        transfers += step.transfers.size();
    if (json && transfers > kMaxListed)
        throw InputError("--json lists every transfer, and this collective has " +
                         count(transfers) + ", more than the " + count(kMaxListed) +
                         " it lists: drop --json for the summary, or use fewer ranks (-n)");
    LinkModel links;
    links.gpusPerNode = o.gpusPerNode;
    links.intraBandwidth = o.intraGBps * 1e9;
    links.interBandwidth = o.interGBps * 1e9;
    links.intraLatency = o.intraUs * 1e-6;
    links.interLatency = o.interUs * 1e-6;
    const CollectiveTiming t = timeCollective(plan, o.sizeGB * 1e9, links);
    if (json)
        out << collectiveJson(plan, links, t).dump(2) << '\n';
    else
        printCollective(out, plan, links, t, o.steps);
    return 0;
}

} // namespace

int runCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
    CLI::App app{"Shardscope: plan distributed training of large language models.\n"
                 "Run `shardscope-cli <command> --help` for a command's flags."};
    app.require_subcommand(1);
    Options o;

    auto* plan = app.add_subcommand("plan", "Memory, communication, bubble, step time, MFU and "
                                            "time to train for one layout");
    addModelFlags(*plan, o.model);
    addClusterFlags(*plan, o.cluster);
    addLayoutFlags(*plan, o.layout);
    plan->add_flag("--json", o.json, "Machine-readable output (schema in docs/cli.md)");
    plan->add_flag("--explain", o.explainAll, "Show the formula and source of every figure");
    const char* mfuHelp = "Assume this MFU (a fraction, e.g. 0.4) for the step time, time, "
                          "GPU-hours and cost to train; default: the modelled MFU";
    plan->add_option("--mfu", o.mfu, mfuHelp);
    static const std::string conventionHelp =
        "How MFU and model FLOP/s count a token's FLOPs: " + flopsConventionNames() +
        " (causal: 6 x matmul params + the causal half of attention; palm: the whole square; "
        "megatron: Narayanan et al. 2021 with recompute; 6n: 6 x all params)";
    plan->add_option("--flops-convention", o.flopsConvention, conventionHelp)
        ->capture_default_str();
    static const char* postValidationHelp =
        "Assume the framework validates the optimizer step after taking it (Qi et al. 2024), so "
        "the pipeline ranks' staggered starts overlap: ZB-1p and ZB-2p then count each rank's "
        "span, not the makespan";
    plan->add_flag("--post-validation", o.postValidation, postValidationHelp);
    static const char* headroomHelp =
        "Keep this fraction of each GPU's memory free (e.g. 0.1): a layout fits only within the "
        "rest, and the search ranks only those; default 0";
    plan->add_option("--memory-headroom", o.memoryHeadroom, headroomHelp);
    static const char* moeHostHelp =
        "Host time of one token-dropless MoE layer for one microbatch, forward and backward, in "
        "ms: dropless routing syncs the host once a layer, so a microbatch takes at least its "
        "MoE layers times this (Megatron-Core with DeepEP on H100; less with HybridEP or "
        "CUDA-graphed routers); 0 for no host roof";
    plan->add_option("--moe-host-ms", o.moeHostMs, moeHostHelp)->capture_default_str();

    auto* search = app.add_subcommand("search", "Rank every valid layout by predicted throughput");
    addModelFlags(*search, o.model);
    addClusterFlags(*search, o.cluster);
    addLayoutFlags(*search, o.layout, true);
    search->add_option("--top", o.topK, "How many layouts to show")->capture_default_str();
    search->add_flag("--tp-within-node", o.tpWithinNode, "Reject TP groups larger than a node");
    search->add_flag("--try-zero-bubble", o.tryZeroBubble,
                     "Try ZB-H1 in 1F1B's place, and ZB-2p with --post-validation (as the "
                     "Explorer's \"Try zero-bubble\")");
    search->add_flag("--post-validation", o.postValidation, postValidationHelp);
    search->add_option("--memory-headroom", o.memoryHeadroom, headroomHelp);
    search->add_option("--moe-host-ms", o.moeHostMs, moeHostHelp)->capture_default_str();
    search->add_flag("--json", o.json, "Machine-readable output");
    search->add_option("--flops-convention", o.flopsConvention, conventionHelp)
        ->capture_default_str();

    auto* explainCmd =
        app.add_subcommand("explain", "The formula, numbers and source of one figure");
    explainCmd->add_option("figure", o.figure, "Figure key, e.g. memory.activations")->required();
    explainCmd->add_option("--mfu", o.mfu, mfuHelp);
    explainCmd->add_option("--flops-convention", o.flopsConvention, conventionHelp)
        ->capture_default_str();
    explainCmd->add_flag("--post-validation", o.postValidation, postValidationHelp);
    explainCmd->add_option("--memory-headroom", o.memoryHeadroom, headroomHelp);
    explainCmd->add_option("--moe-host-ms", o.moeHostMs, moeHostHelp)->capture_default_str();
    addModelFlags(*explainCmd, o.model);
    addClusterFlags(*explainCmd, o.cluster);
    addLayoutFlags(*explainCmd, o.layout);
    explainCmd->add_flag("--json", o.json, "Machine-readable output");

    auto* models = app.add_subcommand("models", "List model presets");
    models->add_flag("--json", o.json, "Machine-readable output");
    auto* gpus = app.add_subcommand("gpus", "List GPU presets");
    gpus->add_flag("--json", o.json, "Machine-readable output");
    auto* devices = app.add_subcommand("devices", "List this machine's CUDA GPUs");
    devices->add_flag("--json", o.json, "Machine-readable output");

    ScheduleOptions so;
    auto* scheduleCmd = app.add_subcommand(
        "schedule", "A pipeline schedule's op lists per rank and its simulated timeline");
    scheduleCmd
        ->add_option("--schedule", so.schedule,
                     "naive, gpipe, 1f1b, interleaved, zero-bubble (ZB-H1), zb-1p, zb-2p")
        ->capture_default_str();
    scheduleCmd->add_option("--pp", so.pp, "Pipeline ranks p")->capture_default_str();
    scheduleCmd->add_option("--microbatches,-m", so.microbatches, "Microbatches per step m")
        ->capture_default_str();
    scheduleCmd->add_option("--vpp", so.vpp, "Model chunks per rank v (interleaved)")
        ->capture_default_str();
    scheduleCmd->add_option("--forward", so.costs.forward, "Time of one forward op")
        ->capture_default_str();
    scheduleCmd
        ->add_option("--backward-input", so.costs.backwardInput,
                     "Time of one input-gradient op (B)")
        ->capture_default_str();
    scheduleCmd
        ->add_option("--backward-weight", so.costs.backwardWeight,
                     "Time of one weight-gradient op (W)")
        ->capture_default_str();
    scheduleCmd->add_option("--p2p", so.p2p, "Time for a tensor to reach the next rank")
        ->capture_default_str();
    scheduleCmd->add_flag("--ops", so.ops, "List every op even when there are many");
    scheduleCmd->add_flag("--json", o.json, "Machine-readable output with the timeline");

    CollectiveOptions co;
    auto* collectiveCmd = app.add_subcommand(
        "collective", "A collective algorithm's steps, time, algbw and busbw (alpha-beta model)");
    collectiveCmd
        ->add_option("--algorithm", co.algorithm,
                     "ring-allreduce, ring-allgather, ring-reducescatter, naive-allreduce, "
                     "two-level-allreduce")
        ->capture_default_str();
    collectiveCmd->add_option("--ranks,-n", co.ranks, "GPUs taking part")->capture_default_str();
    collectiveCmd->add_option("--gpus-per-node", co.gpusPerNode, "GPUs per node")
        ->capture_default_str();
    collectiveCmd
        ->add_option("--size", co.sizeGB, "S in GB as nccl-tests counts it (all-gather: output)")
        ->capture_default_str();
    collectiveCmd->add_option("--intra-bw", co.intraGBps, "GB/s per GPU inside a node")
        ->capture_default_str();
    collectiveCmd->add_option("--inter-bw", co.interGBps, "GB/s per GPU across nodes")
        ->capture_default_str();
    collectiveCmd->add_option("--intra-latency", co.intraUs, "Microseconds per step in a node")
        ->capture_default_str();
    collectiveCmd->add_option("--inter-latency", co.interUs, "Microseconds per step across nodes")
        ->capture_default_str();
    collectiveCmd->add_flag("--steps", co.steps, "List every step even when there are many");
    collectiveCmd->add_flag("--json", o.json, "Machine-readable output");

    ValidateOptions vo;
    auto* validateCmd = app.add_subcommand(
        "validate", "Compare the planner with published training runs (docs/validation.md)");
    validateCmd
        ->add_option("runs", vo.path, "CSV of published runs (tests/data/published_runs.csv)")
        ->required();
    auto* markdownFlag =
        validateCmd->add_flag("--markdown", vo.markdown, "Write the table as Markdown");
    auto* runOption = validateCmd->add_option(
        "--run", vo.run,
        "Show one run's whole plan beside what it reported (its name, the table's first column)");
    runOption->excludes(markdownFlag);
    validateCmd
        ->add_flag("--explain", vo.explain, "With --run: the formula and source of every figure")
        ->needs(runOption);
    validateCmd->add_flag("--json", o.json, "Machine-readable output");
    validateCmd->add_option("--moe-host-ms", vo.moeHostMs, moeHostHelp)->capture_default_str();

    std::string runDir;
    RunReportOptions ro;
    auto* reportCmd = app.add_subcommand(
        "report", "What a training run did beside what the planner predicted (from its run "
                  "directory's telemetry)");
    reportCmd->add_option("run", runDir, "Run directory (the --out of shardscope-engine train)")
        ->required();
    reportCmd->add_flag("--json", ro.json, "Machine-readable output (schema in docs/cli.md)");
    reportCmd->add_option("--html", ro.html, "Also write a self-contained HTML report with charts");
    reportCmd->add_option("--trace", ro.trace,
                          "Also write every measured span as Chrome trace JSON (Perfetto)");
    reportCmd->add_option("--csv", ro.csv, "Also write every step event of every rank as CSV");

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        out << app.help(e.get_name() == "--help" ? "" : "", CLI::AppFormatMode::Normal);
        return 0;
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) {
            app.exit(e, out, err);
            return 0;
        }
        // CLI11 reports a missing or misspelt command as "A subcommand is required"; say which.
        if (app.get_subcommands().empty() && (argc <= 1 || argv[1][0] != '-')) {
            std::string known;
            for (const CLI::App* sub : app.get_subcommands(nullptr))
                known += (known.empty() ? "" : ", ") + sub->get_name();
            err << "error: "
                << withShortQuotes(argc > 1 ? "unknown command '" + std::string(argv[1]) + "'"
                                            : "no command given")
                << "; known commands: " << known
                << "\nRun with --help to see what each one does.\n";
            return 2;
        }
        err << "error: " << withShortQuotes(e.what())
            << "\nRun with --help to see the accepted flags.\n";
        return 2;
    }

    try {
        if (plan->parsed())
            return runPlan(o, out, err);
        if (search->parsed())
            return runSearch(o, out, err);
        if (explainCmd->parsed())
            return runExplain(o, out, err);
        if (collectiveCmd->parsed())
            return runCollective(co, o.json, out);
        if (scheduleCmd->parsed())
            return runSchedule(so, o.json, out);
        if (validateCmd->parsed())
            return runValidate(vo, o.json, out, err);
        if (reportCmd->parsed())
            return runReport(runDir, ro, out, err);
        if (models->parsed()) {
            if (o.json) {
                nlohmann::json j = nlohmann::json::array();
                for (const ModelSpec& m : modelPresets())
                    j.push_back(m);
                out << j.dump(2) << '\n';
            } else {
                printModels(out);
            }
        } else if (gpus->parsed()) {
            if (o.json) {
                nlohmann::json j = nlohmann::json::array();
                for (const GpuSpec& g : gpuPresets())
                    j.push_back(g);
                out << j.dump(2) << '\n';
            } else {
                printGpus(out);
            }
        } else if (devices->parsed()) {
            const DeviceReport r = queryDevices();
            if (o.json)
                out << devicesJson(r).dump(2) << '\n';
            else
                printDevices(out, r);
        }
        return 0;
    } catch (const InputError& e) {
        err << "error: " << withShortQuotes(e.what()) << '\n';
        return 2;
    } catch (const std::bad_alloc&) {
        err << "error: this request needs more memory than this machine has: ask for a smaller "
               "model, cluster, schedule or collective\n";
        return 2;
    } catch (const std::exception& e) {
        err << "internal error: " << e.what() << "\nPlease report this with the command line.\n";
        return 1;
    }
}

} // namespace shardscope::cli
