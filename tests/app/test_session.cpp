// Sessions: JSON round trip, versioning, clear errors, atomic saves, layout/cluster fitting.
#include "core/error.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "session.h"

#include <QDir>
#include <QTemporaryDir>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sstream>

namespace shardscope {
namespace {

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

void write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
}

TEST(Session, DefaultIsLlama3_70BOn8x8H100) {
    const Session s = defaultSession();
    EXPECT_EQ(s.model.id, "llama3-70b");
    EXPECT_EQ(s.cluster.worldSize(), 64);
    EXPECT_EQ(s.cluster.gpu.id, "h100-sxm");
    EXPECT_EQ(s.parallel.worldSize(), 64);
    EXPECT_TRUE(estimate(s.planInputs()).valid());
}

TEST(Session, JsonRoundTripKeepsEverything) {
    Session s = defaultSession();
    s.modelSource = ModelSource::Custom;
    s.model.layers = 40;
    s.model.name = "mine";
    s.cluster.nodes = 3;
    s.cluster.interBandwidth = 12.5e9;
    s.parallel.tp = 4;
    s.parallel.schedule = PipelineSchedule::Interleaved;
    s.parallel.vpp = 3;
    s.parallel.precision = {Precision::Bf16, Precision::Fp32, false};
    s.train.trainTokens = 2e12;
    s.page = "explorer";
    s.pipeline.followsLayout = false; // an experiment on the Pipeline page
    s.pipeline.schedule = PipelineSchedule::Interleaved;
    s.pipeline.compare.reset();
    s.pipeline.microbatches = 12;
    s.pipeline.costs.backwardWeight = 0.5;
    s.launch.target = LaunchTarget::Ssh;
    s.launch.hostfile = "node1 slots=4\nnode2 slots=4\n";
    s.launch.telemetryAddress = "login1:9400";
    s.launch.stallSeconds = 2.5;
    const Session back = sessionFromJson(sessionToJson(s));
    EXPECT_EQ(sessionToJson(back), sessionToJson(s));
    EXPECT_EQ(back.model.layers, 40);
    EXPECT_EQ(back.modelSource, ModelSource::Custom);
    EXPECT_EQ(back.parallel.vpp, 3);
    EXPECT_FALSE(back.parallel.precision.fp32Master);
    EXPECT_DOUBLE_EQ(back.cluster.interBandwidth, 12.5e9);
    EXPECT_EQ(back.page, "explorer");
    EXPECT_FALSE(back.pipeline.followsLayout);
    EXPECT_EQ(back.pipeline.schedule, PipelineSchedule::Interleaved);
    EXPECT_FALSE(back.pipeline.compare.has_value());
    EXPECT_EQ(back.pipeline.microbatches, 12);
    EXPECT_DOUBLE_EQ(back.pipeline.costs.backwardWeight, 0.5);
    EXPECT_EQ(back.launch.target, LaunchTarget::Ssh);
    EXPECT_EQ(back.launch.hostfile, "node1 slots=4\nnode2 slots=4\n");
    EXPECT_EQ(back.launch.telemetryAddress, "login1:9400");
    EXPECT_DOUBLE_EQ(back.launch.stallSeconds, 2.5);
}

TEST(Session, AFileCannotCarryOptionsThatRunCommands) {
    Session s = defaultSession();
    s.launch.sshOptions = "-o ProxyCommand=touch /tmp/x";
    s.launch.mpiOptions = ": /bin/sh";
    s.launch.remoteEngine = "/tmp/evil";
    const nlohmann::json j = sessionToJson(s);
    for (const char* key : {"ssh_options", "mpi_options", "remote_engine"})
        EXPECT_FALSE(j["launch"].contains(key)) << key;
    nlohmann::json planted = j;
    planted["launch"]["ssh_options"] = "-o ProxyCommand=touch /tmp/x";
    planted["launch"]["remote_engine"] = "/tmp/evil";
    const Session back = sessionFromJson(planted);
    EXPECT_EQ(back.launch.sshOptions, "");
    EXPECT_EQ(back.launch.remoteEngine, "");
}

TEST(Session, BadLaunchSettingsNameTheProblem) {
    nlohmann::json j = sessionToJson(defaultSession());
    j["launch"]["target"] = "cloud";
    EXPECT_THROW(sessionFromJson(j), InputError);
    j = sessionToJson(defaultSession());
    j["launch"]["stall_report_s"] = -1;
    try {
        sessionFromJson(j);
        FAIL();
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("stall_report_s"), std::string::npos) << e.what();
    }
    j.erase("launch"); // sessions written before launch settings existed still open
    EXPECT_EQ(sessionFromJson(j).launch.target, LaunchTarget::Local);
}

TEST(Session, SaveAndLoadThroughAFile) {
    QTemporaryDir dir;
    const std::string path = QDir(dir.path()).filePath("a.shardscope").toStdString();
    Session s = defaultSession();
    s.parallel.zero = 3;
    saveSession(s, path);
    // The MIME type's magic looks for this in the first 256 bytes.
    const std::size_t at = slurp(path).find("\"format\": \"shardscope-session\"");
    EXPECT_LT(at, 256u);
    EXPECT_LT(slurp(path).find("\"version\": " + std::to_string(Session::kFormatVersion)), 256u);
    EXPECT_EQ(loadSession(path).parallel.zero, 3);
}

// A version-1 session's GPU has no matmul ceiling (they came with version 2). One saved from a
// preset takes the preset's, so the old session plans as a new one does; a GPU of the user's
// own, or one whose peaks were edited, keeps what it said; a version-2 file is read as written.
TEST(Session, Version1GpusFromPresetsTakeTheirMatmulCeilings) {
    const auto withGpu = [](const GpuSpec& gpu, int version) {
        nlohmann::json j = sessionToJson(defaultSession());
        j["cluster"]["gpu"] = gpu;
        j["version"] = version;
        return sessionFromJson(j).cluster.gpu;
    };
    const GpuSpec& h100 = findGpuPreset("h100-sxm");
    ASSERT_FALSE(h100.matmulCeiling.empty());
    GpuSpec saved = h100; // as version 1 wrote it: no ceilings
    saved.matmulCeiling.clear();
    saved.sources.erase("matmul_ceiling");

    const GpuSpec migrated = withGpu(saved, 1);
    EXPECT_EQ(migrated.matmulCeiling, h100.matmulCeiling);
    EXPECT_EQ(migrated.sources.count("matmul_ceiling"), 1u);
    EXPECT_TRUE(withGpu(saved, 2).matmulCeiling.empty());

    GpuSpec edited = saved;
    edited.peakFlops[Precision::Bf16] = 900e12;
    EXPECT_TRUE(withGpu(edited, 1).matmulCeiling.empty());
    GpuSpec own = saved;
    own.id = "my-gpu";
    EXPECT_TRUE(withGpu(own, 1).matmulCeiling.empty());
}

TEST(Session, NewerVersionIsRefusedWithAClearMessage) {
    nlohmann::json j = sessionToJson(defaultSession());
    j["version"] = 7;
    try {
        sessionFromJson(j);
        FAIL() << "accepted a future version";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("newer Shardscope"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("version 7"), std::string::npos) << e.what();
    }
}

TEST(Session, MalformedFilesNameTheProblem) {
    QTemporaryDir dir;
    const std::string path = QDir(dir.path()).filePath("bad.shardscope").toStdString();
    const std::pair<std::string, std::string> cases[] = {
        {"{ not json", "bad.shardscope"},
        {"[1, 2]", "not a Shardscope session"},
        {R"({"format": "shardscope-session"})", "version"},
        {R"({"format": "shardscope-session", "version": "one"})", "version"},
        {R"({"format": "shardscope-session", "version": 1, "model_source": "preset"})",
         "missing \"model\""},
        // 80,000 levels crashed the app when the message described the document.
        {"{\"format\": " + std::string(80000, '[') + std::string(80000, ']') + "}",
         "80001 levels deep"},
    };
    for (const auto& [text, expected] : cases) {
        write(path, text);
        try {
            loadSession(path);
            ADD_FAILURE() << "accepted: " << text;
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
                << text << " -> " << e.what();
        }
    }
    // A session without a pipeline lesson (written before the Pipeline page) keeps the default.
    nlohmann::json old = sessionToJson(defaultSession());
    old.erase("pipeline");
    EXPECT_EQ(sessionFromJson(old).pipeline.stages, 4);
    // One written before the page followed the layout opens on the layout.
    old["pipeline"] = {{"pp", 6}};
    EXPECT_TRUE(sessionFromJson(old).pipeline.followsLayout);
    old["pipeline"] = {{"pp", 0}};
    EXPECT_THROW(sessionFromJson(old), InputError);
    old["pipeline"] = {{"schedule", "sideways"}};
    EXPECT_THROW(sessionFromJson(old), InputError);
    // A bad field inside a part names the part and the field.
    nlohmann::json j = sessionToJson(defaultSession());
    j["layout"]["tp"] = -3;
    try {
        sessionFromJson(j);
        FAIL();
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("layout"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("tp"), std::string::npos) << e.what();
    }
}

// Each value of a setting that a session file must refuse, with an error that names the setting.
void expectRefused(const Session& s, const char* key, std::initializer_list<nlohmann::json> bad) {
    for (const nlohmann::json& value : bad) {
        nlohmann::json j = sessionToJson(s);
        j[key] = value;
        try {
            sessionFromJson(j);
            ADD_FAILURE() << "accepted " << key << " " << value.dump();
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
        }
    }
}

// The Explorer's "Assume MFU" what-if travels with the session and into the planner's inputs;
// a session without it plans with the modelled MFU.
TEST(Session, AssumedMfuRoundTripsAndIsChecked) {
    Session s = defaultSession();
    EXPECT_EQ(s.planInputs().assume.assumedMfu, 0);
    EXPECT_FALSE(sessionToJson(s).contains("assumed_mfu"));
    s.assumedMfu = 0.42;
    const Session back = sessionFromJson(sessionToJson(s));
    EXPECT_DOUBLE_EQ(back.assumedMfu, 0.42);
    EXPECT_DOUBLE_EQ(back.planInputs().assume.assumedMfu, 0.42);
    expectRefused(s, "assumed_mfu",
                  {nlohmann::json(1.5), nlohmann::json(-0.1), nlohmann::json("forty")});
}

TEST(Session, MemoryHeadroomRoundTripsAndIsChecked) {
    Session s = defaultSession();
    EXPECT_EQ(s.planInputs().assume.memoryHeadroom, 0);
    EXPECT_FALSE(sessionToJson(s).contains("memory_headroom"));
    s.memoryHeadroom = 0.15;
    const Session back = sessionFromJson(sessionToJson(s));
    EXPECT_DOUBLE_EQ(back.memoryHeadroom, 0.15);
    EXPECT_DOUBLE_EQ(back.planInputs().assume.memoryHeadroom, 0.15);
    expectRefused(s, "memory_headroom",
                  {nlohmann::json(0.95), nlohmann::json(-0.1), nlohmann::json("some")});
}

TEST(Session, MoeLayerHostTimeRoundTripsAndIsChecked) {
    Session s = defaultSession();
    EXPECT_EQ(s.planInputs().assume.moeLayerHostSeconds, Assumptions{}.moeLayerHostSeconds);
    EXPECT_FALSE(sessionToJson(s).contains("moe_layer_host_ms"));
    s.moeLayerHostSeconds = 0.004;
    EXPECT_DOUBLE_EQ(sessionToJson(s).at("moe_layer_host_ms").get<double>(), 4.0);
    const Session back = sessionFromJson(sessionToJson(s));
    EXPECT_DOUBLE_EQ(back.moeLayerHostSeconds, 0.004);
    EXPECT_DOUBLE_EQ(back.planInputs().assume.moeLayerHostSeconds, 0.004);
    s.moeLayerHostSeconds = 0; // no host roof is a choice of its own, and is kept
    EXPECT_EQ(sessionFromJson(sessionToJson(s)).moeLayerHostSeconds, 0.0);
    expectRefused(s, "moe_layer_host_ms",
                  {nlohmann::json(-1.0), nlohmann::json(1001.0), nlohmann::json("fast")});
}

// A session written before models carried their rotary settings: a preset model takes its
// preset's (Llama 3 70B's base is 500000), anything else keeps what it says or the defaults.
TEST(Session, OlderPresetModelsTakeTheirPresetsRotarySettings) {
    nlohmann::json j = sessionToJson(defaultSession());
    ASSERT_EQ(j["model"]["id"], "llama3-70b");
    EXPECT_EQ(j["model"]["rope_theta"], 500000.0);
    j["model"].erase("rope_theta");
    j["model"].erase("norm_eps");
    EXPECT_EQ(sessionFromJson(j).model.ropeTheta, 500000);
    j["model_source"] = "custom";
    EXPECT_EQ(sessionFromJson(j).model.ropeTheta, 10000);
    j["model_source"] = "preset";
    j["model"]["rope_theta"] = 20000.0; // what a file says wins
    EXPECT_EQ(sessionFromJson(j).model.ropeTheta, 20000);
}

// The FLOP count MFU uses travels with the session; one written before it reads as the
// planner's own; a name that is none of them is refused with the names.
TEST(Session, FlopsConventionRoundTripsAndIsChecked) {
    Session s = defaultSession();
    s.flopsConvention = FlopsConvention::Megatron;
    nlohmann::json j = sessionToJson(s);
    EXPECT_EQ(j["flops_convention"], "megatron");
    EXPECT_EQ(sessionFromJson(j).planInputs().assume.flopsConvention, FlopsConvention::Megatron);
    j.erase("flops_convention");
    EXPECT_EQ(sessionFromJson(j).flopsConvention, FlopsConvention::Causal);
    j["flops_convention"] = "kaplan";
    try {
        sessionFromJson(j);
        ADD_FAILURE() << "accepted flops_convention kaplan";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("causal, palm, megatron, 6n"), std::string::npos)
            << e.what();
    }
}

// The post-validation what-if travels with the session; one written before it reads as off.
TEST(Session, PostValidationRoundTrips) {
    Session s = defaultSession();
    EXPECT_FALSE(s.planInputs().assume.optimizerPostValidation);
    s.optimizerPostValidation = true;
    nlohmann::json j = sessionToJson(s);
    EXPECT_EQ(j["optimizer_post_validation"], true);
    EXPECT_TRUE(sessionFromJson(j).planInputs().assume.optimizerPostValidation);
    j.erase("optimizer_post_validation");
    EXPECT_FALSE(sessionFromJson(j).optimizerPostValidation);
    j["optimizer_post_validation"] = "yes";
    EXPECT_THROW(sessionFromJson(j), InputError);
}

TEST(Session, FailedSaveKeepsThePreviousFile) {
    QTemporaryDir dir;
    const std::string path = QDir(dir.path()).filePath("keep.shardscope").toStdString();
    saveSession(defaultSession(), path);
    const std::string before = slurp(path);
    EXPECT_THROW(saveSession(defaultSession(), dir.path().toStdString() + "/no/such/dir/x"),
                 InputError);
    EXPECT_EQ(slurp(path), before);
}

TEST(Session, FitDataParallelToTheCluster) {
    Session s = defaultSession(); // 64 GPUs
    s.parallel.tp = 4;
    fitDataParallelToCluster(s);
    EXPECT_EQ(s.parallel.dp, 4); // 64 / (4 x 4)
    s.parallel.tp = 3;           // 64 is not a multiple of 12: left for validation to explain
    fitDataParallelToCluster(s);
    EXPECT_EQ(s.parallel.dp, 4);
}

TEST(Session, FitClusterToTheLayout) {
    Session s = defaultSession();
    s.parallel.dp = 4; // 4 x 8 x 4 = 128 GPUs
    fitClusterToLayout(s);
    EXPECT_EQ(s.cluster.worldSize(), 128);
    EXPECT_EQ(s.cluster.gpusPerNode, 8);
}

} // namespace
} // namespace shardscope
