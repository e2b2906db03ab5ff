#include "session.h"

#include "core/error.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "plan/layout.h"
#include "save_file.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace shardscope {

namespace {

constexpr const char* kSourceNames[] = {"preset", "custom", "bare", "huggingface"};

template <typename T> T readPart(const nlohmann::json& j, const char* key) {
    if (!j.contains(key))
        throw InputError(std::string("session: missing \"") + key + "\"");
    try {
        return j.at(key).get<T>();
    } catch (const InputError& e) {
        throw InputError(std::string("session \"") + key + "\": " + e.what());
    } catch (const nlohmann::json::exception& e) {
        throw InputError(std::string("session \"") + key + "\": " + e.what());
    }
}

// j[key] into `out` when present, within [lo, hi] (after scaling for numbers). Absent fields
// keep their defaults; the caller names the part in errors.
void readWhole(const nlohmann::json& j, const char* key, int& out, int lo, int hi) {
    if (!j.contains(key))
        return;
    const int v = j.at(key).get<int>();
    if (v < lo || v > hi)
        throw InputError(std::string(key) + " must be " + std::to_string(lo) + " to " +
                         std::to_string(hi));
    out = v;
}

void readNumber(const nlohmann::json& j, const char* key, double& out, double lo, double hi,
                double scale = 1.0) {
    if (!j.contains(key))
        return;
    const double v = j.at(key).get<double>();
    if (!(v >= lo && v <= hi))
        throw InputError(std::string(key) + " must be between " + std::to_string(lo) + " and " +
                         std::to_string(hi));
    out = v * scale;
}

PipelineLesson readPipelineLesson(const nlohmann::json& j) {
    PipelineLesson l;
    try {
        if (!j.is_object())
            throw InputError("expected an object");
        if (j.contains("follows_layout"))
            l.followsLayout = j.at("follows_layout").get<bool>();
        if (j.contains("schedule"))
            l.schedule = scheduleFromString(j.at("schedule").get<std::string>());
        if (j.contains("compare"))
            l.compare = j.at("compare").is_null()
                            ? std::nullopt
                            : std::optional(scheduleFromString(j.at("compare").get<std::string>()));
        readWhole(j, "pp", l.stages, 1, 64);
        readWhole(j, "microbatches", l.microbatches, 1, 1024);
        readWhole(j, "vpp", l.virtualStages, 1, 16);
        readNumber(j, "forward", l.costs.forward, 0, 1e6);
        readNumber(j, "backward_input", l.costs.backwardInput, 0, 1e6);
        readNumber(j, "backward_weight", l.costs.backwardWeight, 0, 1e6);
        readNumber(j, "p2p", l.p2p, 0, 1e6);
    } catch (const nlohmann::json::exception& e) {
        throw InputError(std::string("session \"pipeline\": ") + e.what());
    } catch (const InputError& e) {
        throw InputError(std::string("session \"pipeline\": ") + e.what());
    }
    return l;
}

CollectivesLesson readCollectivesLesson(const nlohmann::json& j) {
    CollectivesLesson c;
    try {
        if (!j.is_object())
            throw InputError("expected an object");
        if (j.contains("algorithm"))
            c.algorithm = collectiveFromString(j.at("algorithm").get<std::string>());
        readWhole(j, "ranks", c.ranks, 2, 16);
        readWhole(j, "gpus_per_node", c.links.gpusPerNode, 1, 16);
        readNumber(j, "size_gb", c.sizeGB, 1e-6, 1e9);
        readNumber(j, "intra_bandwidth_gbps", c.links.intraBandwidth, 1e-3, 1e9, 1e9);
        readNumber(j, "inter_bandwidth_gbps", c.links.interBandwidth, 1e-3, 1e9, 1e9);
        readNumber(j, "intra_latency_us", c.links.intraLatency, 0, 1e9, 1e-6);
        readNumber(j, "inter_latency_us", c.links.interLatency, 0, 1e9, 1e-6);
    } catch (const nlohmann::json::exception& e) {
        throw InputError(std::string("session \"collectives\": ") + e.what());
    } catch (const InputError& e) {
        throw InputError(std::string("session \"collectives\": ") + e.what());
    }
    return c;
}

} // namespace

std::string toString(ModelSource s) {
    return kSourceNames[static_cast<int>(s)];
}

ModelSource modelSourceFromString(const std::string& s) {
    for (int i = 0; i < 4; ++i) {
        if (s == kSourceNames[i])
            return static_cast<ModelSource>(i);
    }
    throw InputError("unknown model source \"" + s +
                     "\" (expected preset, custom, bare or huggingface)");
}

void fitDataParallelToCluster(Session& s) {
    const int inner = std::max(1, s.parallel.tp * s.parallel.pp * s.parallel.cp);
    const int world = s.cluster.worldSize();
    if (world % inner == 0)
        s.parallel.dp = std::max(1, world / inner);
}

void fitClusterToLayout(Session& s) {
    s.cluster = clusterForWorld(s.cluster, s.parallel.worldSize());
}

PipelineLesson pipelineLessonOf(const ParallelConfig& layout, const PipelineLesson& lesson,
                                std::string* clamped) {
    PipelineLesson l = lesson;
    if (!l.followsLayout)
        return l;
    l.schedule = layout.schedule;
    l.stages = std::clamp(layout.pp, 1, PipelineLesson::kMaxStages);
    l.virtualStages = std::max(1, layout.vpp);
    const int m = std::max(1, layout.microbatches());
    l.microbatches = std::min(m, PipelineLesson::kMaxMicrobatches);
    if (l.schedule == PipelineSchedule::Interleaved && l.microbatches < m)
        l.microbatches -= l.microbatches % l.stages; // interleaving needs m divisible by p
    if (clamped) {
        clamped->clear();
        if (l.stages != layout.pp)
            *clamped =
                "pp " + std::to_string(layout.pp) + " is drawn as " + std::to_string(l.stages);
        if (l.microbatches != m)
            *clamped += (clamped->empty() ? "" : ", ") + std::to_string(m) +
                        " microbatches are drawn as " + std::to_string(l.microbatches);
    }
    return l;
}

Session defaultSession() {
    Session s;
    s.modelSource = ModelSource::Preset;
    s.modelOrigin = "llama3-70b";
    s.model = findModelPreset("llama3-70b");
    s.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 8);
    ParallelConfig& p = s.parallel;
    p.tp = 8;
    p.pp = 4;
    p.dp = 2;
    p.zero = 1;
    p.sequenceParallel = true;
    p.schedule = PipelineSchedule::OneFOneB;
    p.microBatch = 1;
    p.globalBatch = 512;
    p.recompute = Recompute::Selective;
    p.precision = PrecisionPolicy::bf16Mixed();
    s.train.trainTokens = 15e12;
    return s;
}

std::string toString(LaunchTarget t) {
    switch (t) {
    case LaunchTarget::Local:
        return "local";
    case LaunchTarget::Ssh:
        return "ssh";
    case LaunchTarget::Slurm:
        return "slurm";
    }
    return "?";
}

LaunchTarget launchTargetFromString(const std::string& s) {
    for (LaunchTarget t : {LaunchTarget::Local, LaunchTarget::Ssh, LaunchTarget::Slurm})
        if (toString(t) == s)
            return t;
    throw InputError("launch target '" + s + "' is not one of local, ssh, slurm");
}

namespace {

// The ssh and mpirun options and the engine's path on the hosts are this machine's settings,
// never a session's: a session file someone shares must not be able to make Start run a
// command of theirs (an ssh ProxyCommand, an mpirun program). The Monitor page keeps them.
nlohmann::json launchJson(const LaunchSettings& l) {
    return {{"target", toString(l.target)},
            {"runs_directory", l.runsDirectory},
            {"hostfile", l.hostfile},
            {"telemetry_address", l.telemetryAddress},
            {"slurm_partition", l.slurmPartition},
            {"slurm_time", l.slurmTime},
            {"stall_report_s", l.stallSeconds},
            {"watchdog_timeout_s", l.watchdogSeconds}};
}

LaunchSettings readLaunch(const nlohmann::json& j) {
    if (!j.is_object())
        throw InputError("session launch: expected an object");
    LaunchSettings l;
    try {
        l.target = launchTargetFromString(j.value("target", toString(l.target)));
        l.runsDirectory = j.value("runs_directory", l.runsDirectory);
        l.hostfile = j.value("hostfile", l.hostfile);
        l.telemetryAddress = j.value("telemetry_address", l.telemetryAddress);
        l.slurmPartition = j.value("slurm_partition", l.slurmPartition);
        l.slurmTime = j.value("slurm_time", l.slurmTime);
        readNumber(j, "stall_report_s", l.stallSeconds, 0, 86400);
        readNumber(j, "watchdog_timeout_s", l.watchdogSeconds, 0.1, 864000);
    } catch (const nlohmann::json::exception& e) {
        throw InputError(std::string("session launch: ") + e.what());
    } catch (const InputError& e) {
        throw InputError(std::string("session launch: ") + e.what());
    }
    return l;
}

} // namespace

nlohmann::json sessionToJson(const Session& s) {
    nlohmann::json j;
    j["format"] = Session::kFormatName;
    j["version"] = Session::kFormatVersion;
    j["model_source"] = toString(s.modelSource);
    j["model_origin"] = s.modelOrigin;
    j["model"] = s.model;
    j["cluster"] = s.cluster;
    j["layout"] = s.parallel;
    j["train"] = s.train;
    const PipelineLesson& l = s.pipeline;
    j["pipeline"] = {{"follows_layout", l.followsLayout},
                     {"schedule", toString(l.schedule)},
                     {"compare", l.compare ? nlohmann::json(toString(*l.compare)) : nullptr},
                     {"pp", l.stages},
                     {"microbatches", l.microbatches},
                     {"vpp", l.virtualStages},
                     {"forward", l.costs.forward},
                     {"backward_input", l.costs.backwardInput},
                     {"backward_weight", l.costs.backwardWeight},
                     {"p2p", l.p2p}};
    const CollectivesLesson& c = s.collectives;
    j["collectives"] = {{"algorithm", toString(c.algorithm)},
                        {"ranks", c.ranks},
                        {"size_gb", c.sizeGB},
                        {"gpus_per_node", c.links.gpusPerNode},
                        {"intra_bandwidth_gbps", c.links.intraBandwidth / 1e9},
                        {"intra_latency_us", c.links.intraLatency / 1e-6},
                        {"inter_bandwidth_gbps", c.links.interBandwidth / 1e9},
                        {"inter_latency_us", c.links.interLatency / 1e-6}};
    j["launch"] = launchJson(s.launch);
    j["page"] = s.page;
    if (s.assumedMfu > 0)
        j["assumed_mfu"] = s.assumedMfu;
    j["flops_convention"] = toString(s.flopsConvention);
    if (s.optimizerPostValidation)
        j["optimizer_post_validation"] = true;
    if (s.memoryHeadroom > 0)
        j["memory_headroom"] = s.memoryHeadroom;
    if (s.moeLayerHostSeconds != Assumptions{}.moeLayerHostSeconds)
        j["moe_layer_host_ms"] = s.moeLayerHostSeconds * 1e3;
    return j;
}

namespace {

// Version 1 predates measured matmul ceilings, so its GPUs have none and would plan at the
// calibrated efficiency of their datasheet peak. A GPU saved from a preset (its id and peaks
// the preset's) takes the preset's ceilings, so an old session plans as a new one of the same
// part does; a GPU of the user's own stays as written.
void addPresetMatmulCeiling(GpuSpec& gpu) {
    if (!gpu.matmulCeiling.empty() || gpu.id.empty())
        return;
    const GpuSpec* preset = nullptr;
    for (const GpuSpec& candidate : gpuPresets())
        if (candidate.id == gpu.id)
            preset = &candidate;
    if (!preset || preset->peakFlops != gpu.peakFlops)
        return;
    gpu.matmulCeiling = preset->matmulCeiling;
    if (const auto it = preset->sources.find("matmul_ceiling"); it != preset->sources.end())
        gpu.sources[it->first] = it->second;
}

} // namespace

Session sessionFromJson(const nlohmann::json& j) {
    if (!j.is_object() || !j.contains("format") || j["format"] != Session::kFormatName)
        throw InputError("not a Shardscope session: expected an object with \"format\": \"" +
                         std::string(Session::kFormatName) + "\"");
    if (!j.contains("version") || !j["version"].is_number_integer() || j["version"] < 1)
        throw InputError("session: \"version\" must be a whole number from 1");
    const int version = j["version"].get<int>();
    if (version > Session::kFormatVersion)
        throw InputError("this session was written by a newer Shardscope (format version " +
                         std::to_string(version) + "; this build reads versions up to " +
                         std::to_string(Session::kFormatVersion) +
                         "). Update Shardscope to open it.");
    Session s;
    s.modelSource = modelSourceFromString(readPart<std::string>(j, "model_source"));
    if (j.contains("model_origin"))
        s.modelOrigin = readPart<std::string>(j, "model_origin");
    s.model = readPart<ModelSpec>(j, "model");
    // Written before models carried their rotary settings and norm epsilon: a preset's are its
    // file's (a preset no longer shipped keeps the defaults; no planner figure depends on them).
    if (s.modelSource == ModelSource::Preset && !j["model"].contains("rope_theta")) {
        for (const ModelSpec& preset : modelPresets())
            if (preset.id == s.model.id) {
                s.model.ropeTheta = preset.ropeTheta;
                s.model.ropeScaling = preset.ropeScaling;
                s.model.normEps = preset.normEps;
            }
    }
    s.cluster = readPart<ClusterSpec>(j, "cluster");
    if (version < 2)
        addPresetMatmulCeiling(s.cluster.gpu);
    s.parallel = readPart<ParallelConfig>(j, "layout");
    s.train = readPart<TrainConfig>(j, "train");
    if (j.contains("pipeline"))
        s.pipeline = readPipelineLesson(j["pipeline"]);
    if (j.contains("collectives"))
        s.collectives = readCollectivesLesson(j["collectives"]);
    if (j.contains("launch"))
        s.launch = readLaunch(j["launch"]);
    if (j.contains("page"))
        s.page = readPart<std::string>(j, "page");
    if (j.contains("assumed_mfu")) {
        const double mfu = readPart<double>(j, "assumed_mfu");
        if (!std::isfinite(mfu) || mfu < 0 || mfu > 1)
            throw InputError("session: \"assumed_mfu\" must be a fraction from 0 to 1 (0: the "
                             "modelled MFU), not " +
                             std::to_string(mfu));
        s.assumedMfu = mfu;
    }
    if (j.contains("memory_headroom")) {
        const double headroom = readPart<double>(j, "memory_headroom");
        if (!std::isfinite(headroom) || headroom < 0 || headroom > 0.9)
            throw InputError("session: \"memory_headroom\" must be a fraction from 0 to 0.9 of "
                             "each GPU's memory kept free, not " +
                             std::to_string(headroom));
        s.memoryHeadroom = headroom;
    }
    if (j.contains("moe_layer_host_ms")) {
        const double ms = readPart<double>(j, "moe_layer_host_ms");
        if (!std::isfinite(ms) || ms < 0 || ms > kMaxMoeLayerHostMs)
            throw InputError("session: \"moe_layer_host_ms\" must be from 0 to 1000 ms of host "
                             "time a dropless MoE layer takes a microbatch (0: no host roof), "
                             "not " +
                             std::to_string(ms));
        s.moeLayerHostSeconds = ms / 1e3;
    }
    if (j.contains("flops_convention")) {
        try {
            s.flopsConvention =
                flopsConventionFromString(readPart<std::string>(j, "flops_convention"));
        } catch (const InputError& e) {
            throw InputError(std::string("session: ") + e.what());
        }
    }
    if (j.contains("optimizer_post_validation"))
        s.optimizerPostValidation = readPart<bool>(j, "optimizer_post_validation");
    return s;
}

Session loadSession(const std::string& path) {
    try {
        return sessionFromJson(readJsonFile(path));
    } catch (const InputError& e) {
        const std::string what = e.what();
        // readJsonFile already names the file.
        if (what.find(path) != std::string::npos)
            throw;
        throw InputError(path + ": " + what);
    }
}

void saveSession(const Session& s, const std::string& path) {
    // "format" and "version" first, so file managers can recognise a session by its first bytes
    // (the MIME type's magic) and people see at once what the file is.
    const nlohmann::json j = sessionToJson(s);
    nlohmann::ordered_json ordered;
    ordered["format"] = j["format"];
    ordered["version"] = j["version"];
    for (const auto& [key, value] : j.items()) {
        if (key != "format" && key != "version")
            ordered[key] = value;
    }
    const std::string text = ordered.dump(2) + "\n";
    const QString error =
        saveFileAtomically(QString::fromStdString(path), QByteArray::fromStdString(text));
    if (!error.isEmpty())
        throw InputError(error.toStdString());
}

} // namespace shardscope
