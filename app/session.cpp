#include "session.h"

#include "core/error.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "plan/layout.h"

#include <QFile>
#include <QSaveFile>
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

// Absent fields keep their defaults; present ones must have the right type and range.
PipelineLesson readPipelineLesson(const nlohmann::json& j) {
    PipelineLesson l;
    try {
        if (!j.is_object())
            throw InputError("expected an object");
        if (j.contains("schedule"))
            l.schedule = scheduleFromString(j.at("schedule").get<std::string>());
        if (j.contains("compare"))
            l.compare = j.at("compare").is_null()
                            ? std::nullopt
                            : std::optional(scheduleFromString(j.at("compare").get<std::string>()));
        const auto whole = [&](const char* key, int& out, int lo, int hi) {
            if (!j.contains(key))
                return;
            out = j.at(key).get<int>();
            if (out < lo || out > hi)
                throw InputError(std::string(key) + " must be " + std::to_string(lo) + " to " +
                                 std::to_string(hi));
        };
        whole("pp", l.stages, 1, 64);
        whole("microbatches", l.microbatches, 1, 1024);
        whole("vpp", l.virtualStages, 1, 16);
        const auto number = [&](const char* key, double& out) {
            if (!j.contains(key))
                return;
            out = j.at(key).get<double>();
            if (!(out >= 0) || out > 1e6)
                throw InputError(std::string(key) + " must be between 0 and 1e6");
        };
        number("forward", l.costs.forward);
        number("backward_input", l.costs.backwardInput);
        number("backward_weight", l.costs.backwardWeight);
        number("p2p", l.p2p);
    } catch (const nlohmann::json::exception& e) {
        throw InputError(std::string("session \"pipeline\": ") + e.what());
    } catch (const InputError& e) {
        throw InputError(std::string("session \"pipeline\": ") + e.what());
    }
    return l;
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
    j["pipeline"] = {{"schedule", toString(l.schedule)},
                     {"compare", l.compare ? nlohmann::json(toString(*l.compare)) : nullptr},
                     {"pp", l.stages},
                     {"microbatches", l.microbatches},
                     {"vpp", l.virtualStages},
                     {"forward", l.costs.forward},
                     {"backward_input", l.costs.backwardInput},
                     {"backward_weight", l.costs.backwardWeight},
                     {"p2p", l.p2p}};
    j["page"] = s.page;
    return j;
}

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
    s.cluster = readPart<ClusterSpec>(j, "cluster");
    s.parallel = readPart<ParallelConfig>(j, "layout");
    s.train = readPart<TrainConfig>(j, "train");
    if (j.contains("pipeline"))
        s.pipeline = readPipelineLesson(j["pipeline"]);
    if (j.contains("page"))
        s.page = readPart<std::string>(j, "page");
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
    QSaveFile file(QString::fromStdString(path));
    if (!file.open(QIODevice::WriteOnly))
        throw InputError("cannot write " + path + ": " + file.errorString().toStdString());
    file.write(text.data(), qint64(text.size()));
    if (!file.commit())
        throw InputError("cannot write " + path + ": " + file.errorString().toStdString());
}

} // namespace shardscope
