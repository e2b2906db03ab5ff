#include "run_config.h"

#include "core/error.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "data.h"
#include "gpt_parameters.h"
#include "kernels/cpu/cpu_ops.h"
#include "parallel/pipeline_chunks.h"
#include "rank_device.h"
#include "sched/pipeline_program.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <type_traits>

namespace shardscope {

using nlohmann::json;

namespace {

// Keys a section may hold: those its writer produces, plus extra spellings the reader accepts.
void rejectUnknownKeys(const json& section, const json& written, const std::string& where,
                       std::set<std::string> extra = {}) {
    std::vector<std::string> unknown;
    for (const auto& [key, value] : section.items())
        if (!written.contains(key) && !extra.contains(key))
            unknown.push_back(key);
    if (unknown.empty())
        return;
    std::string known;
    for (const auto& [key, value] : written.items())
        known += (known.empty() ? "" : ", ") + key;
    std::string names;
    for (const std::string& k : unknown)
        names += (names.empty() ? "'" : ", '") + k + "'";
    throw InputError(where + ": unknown field" + (unknown.size() > 1 ? "s " : " ") + names +
                     "; known fields are " + known);
}

ModelSpec readModel(const json& j) {
    if (j.is_string())
        return findModelPreset(j.get<std::string>());
    if (!j.is_object())
        throw InputError("run config: \"model\" must be a preset id or an object");
    json merged = j;
    // A preset or a Hugging Face config.json gives the architecture; the object's other fields
    // override it (a smaller model of the same architecture for a CPU run, say).
    if (j.contains("preset") && j.contains("hf_config"))
        throw InputError("run config: model has both preset and hf_config; keep one");
    if (j.contains("preset") || j.contains("hf_config")) {
        const std::string base = j.contains("preset") ? "preset" : "hf_config";
        if (!j[base].is_string())
            throw InputError("run config: model." + base + " must be " +
                             (base == "preset" ? "a preset id string" : "a path string"));
        const std::string value = j[base].get<std::string>();
        if (base == "preset") {
            merged = json(findModelPreset(value));
        } else {
            // A file, never a device or a pipe that could block the read.
            if (std::error_code ec; !std::filesystem::is_regular_file(value, ec))
                throw InputError("run config: model.hf_config \"" + value +
                                 "\" is not a file; give the path of a Hugging Face config.json");
            const json config = readJsonFile(value);
            merged = json(modelFromHuggingFace(config, huggingFaceModelName(config, value)));
        }
        for (const auto& [key, field] : j.items())
            if (key != base)
                merged[key] = field;
    }
    rejectUnknownKeys(
        merged, json(defaultRunConfig().model), "run config model",
        {"params", "moe", "kv_heads", "seq_len", "max_positions", "head_dim", "rope_scaling"});
    return merged.get<ModelSpec>();
}

} // namespace

std::int64_t RunConfig::totalSteps() const {
    if (train.steps > 0)
        return train.steps;
    const double perStep = double(tokensPerStep());
    return perStep > 0 ? std::int64_t(std::ceil(train.trainTokens / perStep)) : 0;
}

RunConfig defaultRunConfig() {
    RunConfig c;
    ModelSpec& m = c.model;
    m.name = "tiny GPT (engine default)";
    m.family = "gpt2";
    m.layers = 4;
    m.hidden = 128;
    m.heads = 4;
    m.kvHeads = 4;
    m.ffnHidden = 512;
    m.vocab = 256;
    m.seqLen = 128;
    m.maxPositions = 128;
    m.tiedEmbeddings = true;
    m.activation = Activation::Gelu;
    m.norm = Norm::LayerNorm;
    m.positions = PositionEmbedding::Learned;
    m.attentionBias = m.outputBias = m.mlpBias = true;
    m.dropout = false;
    m.source = "Shardscope engine default";

    ParallelConfig& p = c.parallel;
    p.microBatch = 8;
    p.globalBatch = 16;
    p.precision = PrecisionPolicy::fp32();
    p.schedule = PipelineSchedule::OneFOneB;

    TrainConfig& t = c.train;
    t.steps = 200;
    t.learningRate = 1e-3;
    t.minLearningRate = 1e-4;
    t.warmupSteps = 20;
    t.weightDecay = 0.1;
    t.dataFormat = "synthetic";
    t.evalEvery = 50;
    t.checkpointEvery = 100;
    return c;
}

namespace {

// engine.<key> as T, or `fallback` when absent or null; the wrong type is an InputError that
// names the field and quotes the value (not the JSON library's text).
template <typename T> T engineField(const json& section, const char* key, T fallback) {
    const auto it = section.find(key);
    if (it == section.end() || it->is_null())
        return fallback;
    const std::string where = std::string("run config engine: ") + key + ": expected ";
    if constexpr (std::is_same_v<T, std::string>) {
        if (!it->is_string())
            throw InputError(where + "a string, got " + jsonExcerpt(*it));
        return it->template get<std::string>();
    } else if constexpr (std::is_integral_v<T>) {
        const bool whole = it->is_number_integer() ||
                           (it->is_number_float() &&
                            std::floor(it->template get<double>()) == it->template get<double>());
        const double v = whole ? it->template get<double>() : 0;
        if (!whole || v < double(std::numeric_limits<T>::min()) ||
            v > double(std::numeric_limits<T>::max()))
            throw InputError(where + "a whole number, got " + jsonExcerpt(*it));
        return T(v);
    } else {
        if (!it->is_number())
            throw InputError(where + "a number, got " + jsonExcerpt(*it));
        return it->template get<T>();
    }
}

} // namespace

RunConfig runConfigFromJson(const json& j) {
    if (!j.is_object())
        throw InputError("run config: expected a JSON object with \"model\", \"parallel\", "
                         "\"train\" and \"engine\"");
    rejectUnknownKeys(j, json{{"model", 0}, {"parallel", 0}, {"train", 0}, {"engine", 0}},
                      "run config", {"format", "version"});
    RunConfig c = defaultRunConfig();
    if (j.contains("model"))
        c.model = readModel(j["model"]);
    if (j.contains("parallel")) {
        rejectUnknownKeys(j["parallel"], json(ParallelConfig{}), "run config parallel");
        // Fields left out keep the engine's defaults (fp32, not the planner's bf16).
        json merged = json(c.parallel);
        merged.update(j["parallel"]);
        c.parallel = merged.get<ParallelConfig>();
    }
    if (j.contains("train")) {
        rejectUnknownKeys(j["train"], json(TrainConfig{}), "run config train");
        json merged = json(c.train);
        merged.update(j["train"]);
        c.train = merged.get<TrainConfig>();
    }
    if (j.contains("engine")) {
        const json& e = j["engine"];
        rejectUnknownKeys(e, toJson(c)["engine"], "run config engine");
        EngineOptions& o = c.engine;
        o.runDir = engineField(e, "run_dir", o.runDir);
        o.device = engineField(e, "device", o.device);
        o.threads = engineField(e, "threads", o.threads);
        o.telemetry = engineField(e, "telemetry", o.telemetry);
        o.peakFlops = engineField(e, "peak_tflops", o.peakFlops / 1e12) * 1e12;
        o.logEvery = engineField(e, "log_every", o.logEvery);
        o.bucketMiB = engineField(e, "bucket_mb", o.bucketMiB);
        o.watchdogSeconds = engineField(e, "watchdog_timeout_s", o.watchdogSeconds);
        o.stallSeconds = engineField(e, "stall_report_s", o.stallSeconds);
        if (std::find(kDeviceKinds.begin(), kDeviceKinds.end(), c.engine.device) ==
            kDeviceKinds.end())
            throw InputError("run config engine: device is \"" + c.engine.device.substr(0, 24) +
                             (c.engine.device.size() > 24 ? "...\"" : "\"") +
                             ": use \"cpu\" or \"cuda\"");
        if (c.engine.threads < 0 || c.engine.logEvery < 1 || c.engine.peakFlops < 0 ||
            !(c.engine.bucketMiB > 0) || !(c.engine.watchdogSeconds > 0) ||
            !(c.engine.stallSeconds >= 0) || !std::isfinite(c.engine.stallSeconds))
            throw InputError("run config engine: threads >= 0, log_every >= 1, peak_tflops >= 0, "
                             "bucket_mb > 0, watchdog_timeout_s > 0 and stall_report_s >= 0 are "
                             "required");
    }
    return c;
}

json toJson(const RunConfig& c) {
    return json{{"format", "shardscope-run"},
                {"version", 1},
                {"model", c.model},
                {"parallel", c.parallel},
                {"train", c.train},
                {"engine",
                 {{"run_dir", c.engine.runDir},
                  {"device", c.engine.device},
                  {"threads", c.engine.threads},
                  {"telemetry", c.engine.telemetry},
                  {"peak_tflops", c.engine.peakFlops / 1e12},
                  {"log_every", c.engine.logEvery},
                  {"bucket_mb", c.engine.bucketMiB},
                  {"watchdog_timeout_s", c.engine.watchdogSeconds},
                  {"stall_report_s", c.engine.stallSeconds}}}};
}

std::filesystem::path defaultRunDirectory() {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char name[64];
    std::strftime(name, sizeof name, "runs/%Y%m%d-%H%M%S", &local);
    return name;
}

DataSpec dataSpecOf(const RunConfig& c) {
    DataSpec d;
    d.format = dataFormatFromString(c.train.dataFormat);
    d.path = c.train.dataPath;
    if (d.format == DataFormat::Auto && d.path.empty())
        d.format = DataFormat::Synthetic;
    if (d.format != DataFormat::Synthetic && d.path.empty())
        throw InputError("data format '" + c.train.dataFormat +
                         "' reads a file: set train.data_path (or --data PATH), or use "
                         "\"data_format\": \"synthetic\"");
    d.valFraction = c.train.valFraction;
    d.seed = c.train.seed;
    d.vocab = c.model.vocab;
    d.seqLen = c.model.seqLen;
    return d;
}

void checkTrainable(const RunConfig& c) {
    const std::vector<std::string> problems = engineProblems(c);
    if (problems.empty())
        return;
    std::string text = "the run config cannot be trained: ";
    for (std::size_t i = 0; i < problems.size(); ++i)
        text += (i ? "; " : "") + problems[i];
    throw InputError(text);
}

std::string adoptEngineOverlap(ParallelConfig& p) {
    std::string changed;
    auto adopt = [&](bool& flag, bool engine, const char* name, const char* what) {
        if (flag == engine)
            return;
        flag = engine;
        changed += std::string(changed.empty() ? "" : "; ") + name + " " +
                   (engine ? "true" : "false") + ": " + what;
    };
    if (p.gradReduceMatters())
        adopt(p.overlapGradReduce, p.zero <= 1, "overlap_grad_reduce",
              p.zero <= 1 ? "the engine reduces gradients bucket by bucket during the backward"
                          : "the engine's ZeRO-2/3 reduce-scatters block the backward");
    if (p.paramGatherMatters())
        adopt(p.overlapParamGather, p.zero >= 3, "overlap_param_gather",
              p.zero >= 3 ? "the engine gathers ZeRO-3's next unit ahead of use"
                          : "the engine gathers ZeRO-1/2's updated parameters after the "
                            "optimizer step, before the next forward");
    if (p.backwardGathersWait() && p.backwardPrefetchMatters()) {
        changed += std::string(changed.empty() ? "" : "; ") + "backward_prefetch pre: " +
                   "the engine gathers ZeRO-3's next unit before the current one's backward";
        p.backwardPrefetch = BackwardPrefetch::Pre;
    }
    if (p.tpOverlapMatters())
        adopt(p.tpCommOverlap, false, "tp_comm_overlap",
              "the engine's TP collectives wait between the GEMMs");
    return changed.empty()
               ? changed
               : "overlap as the engine runs it (the prediction models this): " + changed;
}

std::vector<std::string> engineProblems(const RunConfig& c) {
    std::vector<std::string> out;
    for (const Violation& v : validate(c.model, c.parallel))
        out.push_back(v.message + (v.hint.empty() ? "" : " (" + v.hint + ")"));
    const ParallelConfig& p = c.parallel;
    // The architecture (GPT-2's blocks or the Llama family's), and how the engine's tp cuts it
    // (validate() above has the planner's rules, cp's among them).
    try {
        const GptShape shape = GptShape::of(c.model);
        if (p.tp > 1)
            if (std::string problem = tensorParallelProblem(shape, p.tp); !problem.empty())
                out.push_back(std::move(problem));
    } catch (const InputError& e) {
        out.push_back(e.what());
    }
    if (!engineRunsOn(c.engine.device))
        out.push_back("engine.device " + c.engine.device +
                      ": this engine was built without CUDA (no nvcc or NCCL when it was "
                      "configured); use \"device\": \"cpu\" (--device cpu), or rebuild it where "
                      "the CUDA toolkit is installed");
    if (c.engine.threads > kMaxEngineThreads)
        out.push_back("engine.threads is " + std::to_string(c.engine.threads) + ": at most " +
                      std::to_string(kMaxEngineThreads) + " (this machine has " +
                      std::to_string(kernels::cpuCores()) + " cores; 0 takes one thread per core)");
    if (p.cp > 1 && !p.flashAttention)
        out.push_back("ring attention (cp > 1) never stores the attention probabilities: set "
                      "\"flash_attention\": true, as the planner then assumes");
    if (p.ep != 1)
        out.push_back("the engine has no mixture-of-experts layers, so no expert parallelism: ep "
                      "must be 1 (got " +
                      layoutSummary(p) + "); expert parallelism is modelled by the planner only");
    if (p.etp != 0 && p.etp != p.tp)
        out.push_back("the engine has no mixture-of-experts layers, so no expert tensor "
                      "parallelism: etp must be 0 or tp (got " +
                      layoutSummary(p) + "); it is modelled by the planner only");
    if (p.recompute == Recompute::SelectiveOp)
        out.push_back("the engine recomputes none, selective (attention's core) or full (each "
                      "layer's forward); op-level recompute (selective-op, torchtitan's policy) "
                      "is modelled by the planner only: set \"recompute\" to one of those");
    if (p.hybridShard())
        out.push_back("the engine shards ZeRO's states over the whole data-parallel group: "
                      "shard_group must be 0 or dp (got " +
                      layoutSummary(p) + "); hybrid sharding is modelled by the planner only");
    const int sliceRows = p.microBatch * c.model.seqLen / std::max(1, p.cp);
    if (p.sequenceParallel && p.tp > 1 && sliceRows % p.tp)
        out.push_back("sequence parallelism splits each microbatch's micro_batch x seq_len" +
                      std::string(p.cp > 1 ? " / cp" : "") + " = " + std::to_string(sliceRows) +
                      " token rows over tp " + std::to_string(p.tp) + ": they must divide evenly");
    if (p.zero >= 2 && p.dp > 1 && p.pp > 1 && c.model.tiedEmbeddings)
        out.push_back("ZeRO-" + std::to_string(p.zero) +
                      " with a tied embedding split between the first and last pipeline stage is "
                      "not in the engine yet: set \"tied_embeddings\": false, use \"zero\": 1, "
                      "or pp 1");
    // What the layout rules above leave to the schedule itself (m divisible by pp when
    // interleaving, ...) and to the deal of layers (a stage holding only the embedding or the
    // loss), said once, before any rank starts.
    if (out.empty()) {
        try {
            buildPipelineProgram({p.schedule, p.pp, p.microbatches(), p.vpp});
            for (int rank = 0; rank < p.pp; ++rank)
                pipelineChunks(c.model.layers, p, rank);
        } catch (const InputError& e) {
            out.push_back(e.what());
        }
    }
    const PrecisionPolicy& prec = p.precision;
    const bool fp32 = prec.compute == Precision::Fp32 && prec.grads == Precision::Fp32;
    const bool bf16 = prec.compute == Precision::Bf16 && prec.fp32Master &&
                      !prec.autocastsWeights() &&
                      (prec.grads == Precision::Fp32 || prec.grads == Precision::Bf16);
    if (!fp32 && !bf16)
        out.push_back("the engine trains in \"precision\": \"fp32\", \"bf16\" (bf16 weights and "
                      "activations, fp32 gradients and master weights) or \"bf16-bf16grads\"; " +
                      prec.name() + " is not in it");
    if (p.optimizer != Optimizer::AdamW)
        out.push_back("the engine's optimizer is AdamW: set \"optimizer\": \"adamw\"");
    if (p.offloadOptimizer)
        out.push_back("optimizer offload is for GPUs; set \"offload_optimizer\": false");
    if (c.totalSteps() <= 0)
        out.push_back("train.steps (or train.train_tokens) must be positive");
    if (c.train.minLearningRate > c.train.learningRate)
        out.push_back("train.min_learning_rate must not exceed train.learning_rate");
    if (c.train.warmupSteps >= c.totalSteps() && c.totalSteps() > 0 && c.train.warmupSteps > 0)
        out.push_back("train.warmup_steps (" + std::to_string(c.train.warmupSteps) +
                      ") must be fewer than the run's steps (" + std::to_string(c.totalSteps()) +
                      "): lower it (--warmup-steps) or train longer");
    return out;
}

} // namespace shardscope
