#include "engine_commands.h"

#include "core/error.h"
#include "core/json_io.h"
#include "kernels/cpu/cpu_ops.h"
#include "local_ranks.h"
#include "runtime/checkpoint.h"
#include "runtime/data.h"
#include "runtime/device_memory.h"
#include "runtime/gpt.h"
#include "runtime/mpi_communicator.h"
#include "runtime/prediction.h"
#include "runtime/rank_device.h"
#include "runtime/run_config.h"
#include "runtime/telemetry.h"
#include "runtime/trainer.h"
#include "sched/pipeline_program.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <unistd.h>

namespace shardscope::engine_cli {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Flags that override the config file's fields; unset ones leave the file alone.
struct Overrides {
    std::string config;
    std::optional<std::string> out, data, dataFormat, telemetry, recompute, schedule, precision,
        device, hfConfig;
    // The model's size, architecture kept: a smaller model of a real family for a CPU run.
    std::optional<int> layers, hidden, heads, kvHeads, seqLen;
    std::optional<std::int64_t> ffnHidden, vocab;
    std::optional<std::int64_t> steps, warmupSteps, stopAfter, checkpointEvery, evalEvery;
    std::optional<double> lr, peakTflops, bucketMb, watchdog, stallReport, clockSkew;
    std::optional<std::uint64_t> seed;
    std::optional<int> microBatch, globalBatch, threads, logEvery, dp, tp, pp, vpp, zero, cp;
    bool quiet = false;
    std::optional<bool> sequenceParallel, embeddingInPipelineSplit, lossInPipelineSplit;

    void addTo(CLI::App& app) {
        app.add_option("--config,-c", config, "run config JSON: {model, parallel, train, engine}")
            ->check(CLI::ExistingFile);
        app.add_option("--hf-config", hfConfig,
                       "Hugging Face config.json whose architecture replaces the config's model "
                       "(GPT-2, or the Llama family: Llama, Mistral, Qwen without biases)")
            ->check(CLI::ExistingFile);
        const char* size = "Model size (the architecture kept; see docs/engine.md)";
        app.add_option("--layers", layers, "decoder layers")
            ->check(CLI::PositiveNumber)
            ->group(size);
        app.add_option("--hidden", hidden, "model width (a multiple of --heads)")
            ->check(CLI::PositiveNumber)
            ->group(size);
        app.add_option("--heads", heads, "attention (query) heads")
            ->check(CLI::PositiveNumber)
            ->group(size);
        app.add_option("--kv-heads", kvHeads, "key and value heads (dividing --heads)")
            ->check(CLI::PositiveNumber)
            ->group(size);
        app.add_option("--ffn-hidden", ffnHidden, "MLP width")
            ->check(CLI::PositiveNumber)
            ->group(size);
        app.add_option("--vocab", vocab, "vocabulary (synthetic data, or a tokenizer's that fits)")
            ->check(CLI::PositiveNumber)
            ->group(size);
        app.add_option("--seq-len", seqLen, "training sequence length")
            ->check(CLI::PositiveNumber)
            ->group(size);
        app.add_option("--out,-o", out, "run directory (default runs/DATE-TIME)");
        app.add_option("--steps", steps, "optimizer steps")->check(CLI::PositiveNumber);
        app.add_option("--warmup-steps", warmupSteps, "steps of linear learning-rate warmup")
            ->check(CLI::NonNegativeNumber);
        app.add_option("--lr", lr, "peak learning rate")->check(CLI::PositiveNumber);
        app.add_option("--seed", seed, "seed for weights and data order");
        app.add_option("--data", data, "token file (nanoGPT .bin, llm.c .bin) or text file");
        app.add_option("--data-format", dataFormat, "auto, nanogpt, llmc, text or synthetic");
        app.add_option("--micro-batch", microBatch, "sequences per microbatch")
            ->check(CLI::PositiveNumber);
        app.add_option("--global-batch", globalBatch, "sequences per optimizer step")
            ->check(CLI::PositiveNumber);
        app.add_option("--dp", dp, "data-parallel replicas (the job needs dp ranks: --ranks)")
            ->check(CLI::PositiveNumber);
        app.add_option("--tp", tp,
                       "tensor-parallel ranks (Megatron-LM: heads, MLP columns and "
                       "vocabulary split)")
            ->check(CLI::PositiveNumber);
        app.add_option("--cp", cp,
                       "context-parallel ranks: each holds a slice of every sequence (2 x cp "
                       "chunks, load-balanced), attention meets around a ring")
            ->check(CLI::PositiveNumber);
        app.add_flag("--sp,!--no-sp", sequenceParallel,
                     "sequence parallelism over the tp group (norms and the residual stream on "
                     "token shards)");
        app.add_flag("--embedding-in-pipeline-split,!--no-embedding-in-pipeline-split",
                     embeddingInPipelineSplit,
                     "the first pipeline stage holds one layer fewer for the embedding "
                     "(Megatron's --account-for-embedding-in-pipeline-split)");
        app.add_flag("--loss-in-pipeline-split,!--no-loss-in-pipeline-split", lossInPipelineSplit,
                     "the last pipeline stage holds one layer fewer for the head and loss "
                     "(Megatron's --account-for-loss-in-pipeline-split)");
        app.add_option("--pp", pp, "pipeline stages (the job needs dp x pp ranks: --ranks)")
            ->check(CLI::PositiveNumber);
        app.add_option("--zero", zero,
                       "ZeRO stage over the dp replicas: 0; 1 optimizer state, 2 and gradients, 3 "
                       "and parameters sharded")
            ->check(CLI::Range(0, 3));
        app.add_option("--vpp", vpp, "model chunks per pipeline rank (interleaved schedule)")
            ->check(CLI::PositiveNumber);
        app.add_option("--bucket-mb", bucketMb,
                       "data-parallel gradient bucket size in MiB (default 25, as PyTorch DDP)")
            ->check(CLI::PositiveNumber);
        app.add_option("--watchdog-timeout", watchdog,
                       "seconds a rank may wait in one collective or receive before the job is "
                       "ended as hung (default 300)")
            ->check(CLI::PositiveNumber);
        app.add_option("--stall-report", stallReport,
                       "seconds a rank may wait in one collective or receive before it reports "
                       "the wait as a stall event, so a monitor names it (default 5; 0: never)")
            ->check(CLI::NonNegativeNumber);
        app.add_option("--recompute", recompute, "activation recompute: none, selective, full");
        app.add_option("--precision", precision,
                       "fp32, bf16 (bf16 weights and activations, fp32 gradients and master "
                       "weights) or bf16-bf16grads");
        app.add_option(
            "--schedule", schedule,
            "pipeline schedule: naive, gpipe, 1f1b, interleaved, zero-bubble, zb-1p, zb-2p");
        app.add_option("--device", device,
                       "the backend each rank computes on: cpu, or cuda (each rank on the GPU of "
                       "its local rank)")
            ->check(CLI::IsMember(kDeviceKinds));
        app.add_option("--threads", threads, "CPU threads (default: one per core)")
            ->check(CLI::NonNegativeNumber);
        app.add_option("--peak-tflops", peakTflops, "peak TFLOP/s that MFU is measured against")
            ->check(CLI::PositiveNumber);
        app.add_option("--checkpoint-every", checkpointEvery, "steps between checkpoints")
            ->check(CLI::NonNegativeNumber);
        app.add_option("--eval-every", evalEvery, "steps between validation passes")
            ->check(CLI::NonNegativeNumber);
        app.add_option("--log-every", logEvery, "steps between progress lines")
            ->check(CLI::PositiveNumber);
        app.add_flag("--quiet,-q", quiet, "no progress lines");
        app.add_option("--debug-clock-skew", clockSkew,
                       "debugging: shift rank r's clock by r x SECONDS before the ranks' clocks "
                       "are aligned, as on hosts whose clocks disagree (telemetry shows whether "
                       "the alignment undoes it)")
            ->group("Debugging");
    }

    RunConfig resolve() const {
        RunConfig c = config.empty() ? defaultRunConfig() : runConfigFromJson(readJsonFile(config));
        if (hfConfig) {
            if (std::error_code ec; !fs::is_regular_file(*hfConfig, ec))
                throw InputError("--hf-config " + *hfConfig +
                                 " is not a file; give the path of a Hugging Face config.json");
            const json hf = readJsonFile(*hfConfig);
            c.model = modelFromHuggingFace(hf, huggingFaceModelName(hf, *hfConfig));
        }
        resize(c.model);
        if (out)
            c.engine.runDir = *out;
        if (steps)
            c.train.steps = *steps;
        if (warmupSteps)
            c.train.warmupSteps = *warmupSteps;
        if (lr)
            c.train.learningRate = *lr;
        if (seed)
            c.train.seed = *seed;
        if (data) {
            c.train.dataPath = *data;
            if (!dataFormat && c.train.dataFormat == "synthetic")
                c.train.dataFormat = "auto";
        }
        if (dataFormat)
            c.train.dataFormat = *dataFormat;
        if (microBatch)
            c.parallel.microBatch = *microBatch;
        if (globalBatch)
            c.parallel.globalBatch = *globalBatch;
        if (dp)
            c.parallel.dp = *dp;
        if (tp)
            c.parallel.tp = *tp;
        if (cp)
            c.parallel.cp = *cp;
        if (sequenceParallel)
            c.parallel.sequenceParallel = *sequenceParallel;
        if (embeddingInPipelineSplit)
            c.parallel.embeddingInPipelineSplit = *embeddingInPipelineSplit;
        if (lossInPipelineSplit)
            c.parallel.lossInPipelineSplit = *lossInPipelineSplit;
        if (pp)
            c.parallel.pp = *pp;
        if (vpp)
            c.parallel.vpp = *vpp;
        if (zero)
            c.parallel.zero = *zero;
        if (bucketMb)
            c.engine.bucketMiB = *bucketMb;
        if (watchdog)
            c.engine.watchdogSeconds = *watchdog;
        if (stallReport)
            c.engine.stallSeconds = *stallReport;
        if (clockSkew) {
            if (!std::isfinite(*clockSkew) || std::fabs(*clockSkew) > 86400)
                throw InputError("--debug-clock-skew " + std::to_string(*clockSkew) +
                                 ": give seconds between -86400 and 86400");
            c.engine.debugClockSkew = *clockSkew;
        }
        if (recompute)
            c.parallel.recompute = recomputeFromString(*recompute);
        if (precision)
            c.parallel.precision = precisionPolicyFromString(*precision);
        if (schedule)
            c.parallel.schedule = scheduleFromString(*schedule);
        if (threads)
            c.engine.threads = *threads;
        if (device)
            c.engine.device = *device;
        if (telemetry)
            c.engine.telemetry = *telemetry;
        if (peakTflops)
            c.engine.peakFlops = *peakTflops * 1e12;
        if (checkpointEvery)
            c.train.checkpointEvery = *checkpointEvery;
        if (evalEvery)
            c.train.evalEvery = *evalEvery;
        if (logEvery)
            c.engine.logEvery = *logEvery;
        if (stopAfter)
            c.engine.stopAfter = *stopAfter;
        c.engine.quiet = quiet;
        return c;
    }

    void resize(ModelSpec& m) const {
        const bool resized = layers || hidden || heads || kvHeads || ffnHidden || vocab || seqLen;
        if (!resized)
            return;
        std::string how;
        auto set = [&how](auto& field, const auto& value, const char* name) {
            if (!value)
                return;
            field = *value;
            how += (how.empty() ? "" : ", ") + std::string(name) + " " + std::to_string(*value);
        };
        set(m.layers, layers, "layers");
        set(m.hidden, hidden, "hidden");
        set(m.heads, heads, "heads");
        set(m.kvHeads, kvHeads, "kv_heads");
        set(m.ffnHidden, ffnHidden, "ffn_hidden");
        set(m.vocab, vocab, "vocab");
        set(m.seqLen, seqLen, "seq_len");
        if (heads && !kvHeads && m.kvHeads > m.heads)
            m.kvHeads = m.heads; // fewer heads than the model's key and value heads: MHA
        m.headDim = 0;           // hidden / heads, as the engine computes it
        if (m.seqLen > m.maxPositions)
            m.maxPositions = m.seqLen;
        m.id.clear(); // no longer the preset
        m.publishedParams = 0;
        m.name += " (resized: " + how + ")";
    }
};

// A checkpoint directory names its run: RUN/checkpoints/step-N (with or without a final '/').
fs::path runOfCheckpoint(const std::string& checkpoint) {
    fs::path p = fs::path(checkpoint).lexically_normal();
    if (p.filename().empty())
        p = p.parent_path();
    return p.parent_path().parent_path();
}

void writeFile(const fs::path& path, const void* data, std::size_t bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    if (!f)
        throw InputError("cannot write " + path.string());
}

// One optimizer step's forward and backward on step 0's batch, with everything written out.
void dump(const RunConfig& c, const fs::path& dir, std::ostream& out) {
    for (const std::string& p : engineProblems(c))
        throw InputError("the run config cannot be trained: " + p);
    auto ops = kernels::makeCpuOps(c.engine.threads);
    DeviceAllocator memory(*ops);
    GptModel model(c.model, c.parallel.microBatch, *ops, memory, c.parallel.recompute,
                   !c.parallel.flashAttention, {}, {}, {}, TensorTypes::of(c.parallel.precision));
    // fp32 values: under mixed precision the master weights the bf16 ones are rounded from.
    const std::vector<float> initial = model.initialValues(c.train.seed);
    model.setStoredParameters(initial.data());
    const auto data = Dataset::open(dataSpecOf(c));

    const int B = c.parallel.microBatch, T = c.model.seqLen, m = c.parallel.microbatches();
    const std::size_t N = std::size_t(B) * std::size_t(T);
    std::vector<std::int32_t> inputs(N * std::size_t(m)), targets(inputs.size());
    std::vector<float> logits;
    double lossSum = 0;
    model.zeroGradients();
    const float scale = 1.0f / static_cast<float>(double(N) * m);
    for (int mb = 0; mb < m; ++mb) {
        MicrobatchState state;
        std::int32_t* in = inputs.data() + std::size_t(mb) * N;
        std::int32_t* tg = targets.data() + std::size_t(mb) * N;
        data->batch(Split::Train, 0, mb, B, in, tg);
        lossSum += model.forward(state, in, tg, scale, nullptr, mb == 0 ? &logits : nullptr);
        model.backward(state, false, nullptr);
    }
    if (std::error_code ec; !fs::create_directories(dir, ec) && ec)
        throw InputError("cannot create the dump directory " + dir.string() + ": " + ec.message() +
                         "; give --out a directory that can be written");
    const std::size_t P = model.parameterCount();
    writeFile(dir / "params.f32", initial.data(), P * sizeof(float));
    Buffer grads = memory.floats(MemoryCategory::Workspace, P); // fp32, whatever they are stored in
    ops->copy(grads.f(), model.gradients(), P);
    std::vector<float> host(P);
    ops->copyToHost(host.data(), grads.f(), P * sizeof(float));
    writeFile(dir / "grads.f32", host.data(), P * sizeof(float));
    writeFile(dir / "inputs.i32", inputs.data(), inputs.size() * sizeof(std::int32_t));
    writeFile(dir / "targets.i32", targets.data(), targets.size() * sizeof(std::int32_t));
    writeFile(dir / "logits.f32", logits.data(), logits.size() * sizeof(float));
    json tensors = json::array();
    for (const ParameterTensor& t : model.tensors())
        tensors.push_back({{"name", t.name}, {"offset", t.offset}, {"shape", t.shape}});
    const json meta{{"config", toJson(c)}, {"tensors", tensors},
                    {"microbatches", m},   {"batch", B},
                    {"seq_len", T},        {"loss", lossSum / (double(N) * m)}};
    std::ofstream(dir / "meta.json") << meta.dump(2) << "\n";
    out << "wrote " << dir.string() << ": " << P << " parameters, loss "
        << meta["loss"].get<double>() << "\n";
}

// `--ranks N` without an MPI launcher: start N copies of this program under mpirun, with the
// same arguments, a run directory they all agree on, and the cores shared out between them.
[[noreturn]] void launchRanks(int argc, char** argv, int ranks, bool hasOut, bool hasThreads,
                              const std::string& collector, std::ostream& err) {
    std::vector<std::string> args = {"-n", std::to_string(ranks), "--oversubscribe",
                                     // Ranks on one host talk through shared memory: no TCP
                                     // transport, so no rank listens on any network port.
                                     "--mca", "btl", "self,vader",
                                     // mpirun's own bootstrap addresses loopback only.
                                     "--mca", "oob_tcp_if_include", "lo"};
    if (::geteuid() == 0)
        args.push_back("--allow-run-as-root"); // containers and CI run as root
    args.push_back(fs::read_symlink("/proc/self/exe").string());
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--ranks") {
            ++i;
            continue;
        }
        if (a.starts_with("--ranks="))
            continue;
        args.push_back(a);
    }
    if (!hasOut) {
        args.push_back("--out");
        args.push_back(defaultRunDirectory().string());
    }
    if (!hasThreads) {
        args.push_back("--threads");
        args.push_back(std::to_string(std::max(1, kernels::cpuCores() / ranks)));
    }
    runLocalRanks(args, collector, err);
}

json engineVersion() {
    return {
        {"name", "shardscope-engine"},
        {"version", SHARDSCOPE_VERSION},
        {"backends", engineRunsOn("cuda") ? json::array({"cpu", "cuda"}) : json::array({"cpu"})},
        {"telemetry_schema", kTelemetrySchemaVersion},
        {"mpi", MpiSession::libraryVersion()}};
}

} // namespace

int runEngine(int argc, char** argv, std::ostream& out, std::ostream& err) {
    CLI::App app{"shardscope-engine: trains a GPT on this machine and writes telemetry, "
                 "checkpoints and a summary into a run directory"};
    app.require_subcommand(1);
    Overrides trainFlags, dumpFlags;
    std::optional<std::string> resume;
    bool printConfig = false;
    CLI::App* trainCmd = app.add_subcommand("train", "train a model (the embedded default "
                                                     "when no --config is given)");
    trainFlags.addTo(*trainCmd);
    trainCmd->add_option("--telemetry", trainFlags.telemetry,
                         "also stream telemetry to a collector at tcp://HOST:PORT or unix:PATH");
    trainCmd
        ->add_option("--resume", resume,
                     "continue the run in --out from its latest checkpoint, or from the "
                     "checkpoint directory given")
        ->expected(0, 1)
        ->default_str("");
    trainCmd
        ->add_option("--stop-after", trainFlags.stopAfter,
                     "stop cleanly (checkpoint, exit 0) after this many steps")
        ->check(CLI::PositiveNumber);
    int ranks = 0;
    trainCmd
        ->add_option("--ranks", ranks,
                     "start this many local ranks through mpirun (a job already started by "
                     "mpirun or srun takes its ranks from there)")
        ->check(CLI::PositiveNumber);
    trainCmd->add_flag("--print-config", printConfig,
                       "print the resolved run config as JSON and exit");
    bool checkOnly = false;
    trainCmd->add_flag("--check", checkOnly,
                       "check the config (and --ranks against its layout) as the launch would, "
                       "print what would run, and exit without starting or creating anything");
    CLI::App* versionCmd = app.add_subcommand(
        "version", "print the engine's version, backends and telemetry schema (a launcher "
                   "checks each host with it)");
    bool versionJson = false;
    versionCmd->add_flag("--json", versionJson, "as one JSON object");
    CLI::App* dumpCmd = app.add_subcommand(
        "dump", "write one step's weights, batch, logits, loss and gradients (for checks)");
    dumpFlags.addTo(*dumpCmd);

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        out << app.help(e.get_name() == "--help" && trainCmd->parsed() ? "train" : "");
        return 0;
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) {
            out << app.help();
            return 0;
        }
        err << "shardscope-engine: " << withShortQuotes(e.what())
            << "\nRun with --help for usage.\n";
        return 2;
    }

    std::unique_ptr<MpiSession> mpi;
    std::unique_ptr<Communicator> world;
    // A rank that fails alone must not leave the others waiting in their next collective (or
    // for the watchdog): it says why and ends the whole job with its exit code.
    auto fail = [&](int code, const std::string& message) {
        err << "shardscope-engine: " << withShortQuotes(message) << "\n" << std::flush;
        if (world && world->size() > 1)
            world->abortJob(code);
        return code;
    };
    try {
        if (versionCmd->parsed()) {
            const json v = engineVersion();
            if (versionJson)
                out << v.dump() << "\n";
            else
                out << "shardscope-engine " << v["version"].get<std::string>()
                    << " (backends: " << v["backends"][0].get<std::string>()
                    << "; telemetry schema " << v["telemetry_schema"] << "; "
                    << v["mpi"].get<std::string>() << ")\n";
            return 0;
        }
        if (dumpCmd->parsed()) {
            RunConfig c = dumpFlags.resolve();
            adoptEngineOverlap(c.parallel); // the config.json a run with these flags writes
            if (!dumpFlags.out)
                throw InputError("dump needs --out DIR");
            dump(c, *dumpFlags.out, out);
            return 0;
        }
        const bool resuming = trainCmd->count("--resume") > 0;
        fs::path runDir;
        if (resuming) {
            const std::string from = resume.value_or("");
            if (trainFlags.out)
                runDir = *trainFlags.out;
            else if (!from.empty())
                runDir = runOfCheckpoint(from);
            else
                throw InputError("--resume needs the run directory: add --out DIR");
            // A resume continues the run's own config unless another is given.
            if (trainFlags.config.empty() && fs::exists(runDir / "config.json"))
                trainFlags.config = (runDir / "config.json").string();
        }
        RunConfig c = trainFlags.resolve();
        // What the engine runs, so that its prediction models it (said below).
        const std::string overlapNote = adoptEngineOverlap(c.parallel);
        if (resuming) {
            c.engine.resume = true;
            c.engine.resumeFrom = resume.value_or("");
            c.engine.runDir = runDir.string();
        }
        if (printConfig) {
            out << toJson(c).dump(2) << "\n";
            return 0;
        }
        const bool underMpi = MpiSession::launchedByMpi();
        if (checkOnly) {
            checkTrainable(c);
            const int needed = c.parallel.worldSize();
            if (ranks > 0 && needed != ranks)
                throw InputError("the layout " + layoutSummary(c.parallel) + " needs " +
                                 std::to_string(needed) + " ranks, not --ranks " +
                                 std::to_string(ranks));
            out << "ok: " << c.model.name << ", " << layoutSummary(c.parallel) << ", " << needed
                << (needed == 1 ? " rank" : " ranks") << ", " << c.totalSteps() << " steps\n";
            if (!overlapNote.empty())
                out << "note: " << overlapNote << "\n";
            return 0;
        }
        if (!underMpi && !overlapNote.empty()) // said once, before any rank starts
            err << "shardscope-engine: note: " << overlapNote << "\n";
        if (ranks > 1 && !underMpi) {
            checkTrainable(c); // said once, before any rank starts
            if (c.parallel.worldSize() != ranks)
                throw InputError("the layout " + layoutSummary(c.parallel) + " needs " +
                                 std::to_string(c.parallel.worldSize()) + " ranks, not --ranks " +
                                 std::to_string(ranks));
            if (c.engine.device == "cuda") // the ranks start on this host: is there a GPU?
                chooseDevice("cuda", 0, ranks, 1, c.parallel.precision.compute, queryDevices());
            launchRanks(argc, argv, ranks, trainFlags.out.has_value(),
                        trainFlags.threads.has_value(), c.engine.telemetry, err);
        }
        if (underMpi) {
            mpi = std::make_unique<MpiSession>(nullptr, nullptr);
            world = mpi->world();
            if (ranks > 0 && ranks != world->size())
                throw InputError("--ranks " + std::to_string(ranks) + " but the launcher started " +
                                 std::to_string(world->size()) + " ranks");
            if (c.engine.threads == 0)
                c.engine.threads = std::max(1, kernels::cpuCores() / ranksOnThisHost());
        }
        const TrainResult r = train(c, out, world.get());
        const bool leader = !world || world->rank() == 0;
        if (r.status == RunStatus::Failed)
            err << "shardscope-engine: " << r.message << "\n";
        else if (leader)
            out << "run " << toString(r.status) << ": " << r.stepsCompleted << " steps, "
                << r.runDir.string() << "/summary.json\n";
        world.reset();
        return r.exitCode();
    } catch (const InputError& e) {
        return fail(2, e.what());
    } catch (const CheckpointError& e) {
        return fail(4, e.what());
    } catch (const std::bad_alloc&) {
        return fail(2, "this run needs more host memory than this machine has (out of memory): "
                       "use a smaller model, sequence or micro batch");
    } catch (const fs::filesystem_error& e) { // a path the user gave that cannot be used
        return fail(2, "cannot use " + e.path1().string() + ": " + e.code().message());
    } catch (const std::exception& e) {
        return fail(1, std::string("error: ") + e.what());
    }
}

} // namespace shardscope::engine_cli
