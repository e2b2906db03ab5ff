#include "core/error.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "core_test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

namespace shardscope {
namespace {

TEST(Presets, EveryFileIsCompiledInAndParses) {
    EXPECT_EQ(modelPresets().size(), test::jsonFiles(test::presetDir("models")).size());
    EXPECT_EQ(gpuPresets().size(), test::jsonFiles(test::presetDir("gpus")).size());
    // The files on disk are the same documents: each parses on its own and matches its preset.
    for (const auto& file : test::jsonFiles(test::presetDir("models"))) {
        SCOPED_TRACE(file.filename().string());
        const auto m = readJsonFile(file.string()).get<ModelSpec>();
        EXPECT_EQ(m.id + ".json", file.filename().string());
        test::expectSame(findModelPreset(m.id), m);
    }
    for (const auto& file : test::jsonFiles(test::presetDir("gpus"))) {
        SCOPED_TRACE(file.filename().string());
        const auto g = readJsonFile(file.string()).get<GpuSpec>();
        EXPECT_EQ(g.id + ".json", file.filename().string());
        test::expectSame(findGpuPreset(g.id), g);
    }
}

TEST(Presets, IdsAreUniqueAndEveryPresetIsComplete) {
    std::set<std::string> ids;
    for (const ModelSpec& m : modelPresets()) {
        EXPECT_TRUE(ids.insert(m.id).second) << m.id;
        EXPECT_FALSE(m.name.empty()) << m.id;
        EXPECT_FALSE(m.source.empty()) << m.id;
        EXPECT_GT(m.seqLen, 0) << m.id;
    }
    for (const GpuSpec& g : gpuPresets()) {
        EXPECT_TRUE(ids.insert(g.id).second) << g.id;
        EXPECT_GT(g.peak(Precision::Bf16), 0) << g.id;
        EXPECT_GT(g.memoryBytes, 0) << g.id;
        EXPECT_FALSE(g.matchNames.empty()) << g.id;
        EXPECT_GT(g.networkBandwidth, 0) << g.id;
        EXPECT_TRUE(g.sources.count("network_gbps")) << g.id; // where the NIC share comes from
        if (!g.matmulCeiling.empty()) {
            EXPECT_TRUE(g.sources.count("matmul_ceiling")) << g.id; // who measured it
        }
    }
}

// The network comes with the GPU's generation, as the reference systems ship it: DGX A100 has
// one 200 Gb/s HDR NIC per GPU, DGX H100 and DGX H200 one 400 Gb/s NDR NIC per GPU (NVIDIA's
// datasheets), unless the cluster sets another.
// The rotary base, scaling and norm epsilon of the presets are their configs': the same as the
// Hugging Face config.json fixtures import.
TEST(Presets, RotarySettingsAreTheirConfigs) {
    for (const auto& [preset, fixture] : {std::pair{"llama3-8b", "llama-3-8b"},
                                          {"llama3-70b", "llama-3-70b"},
                                          {"llama2-7b", "llama-2-7b"},
                                          {"mistral-7b", "mistral-7b-v0.1"},
                                          {"mixtral-8x7b", "mixtral-8x7b-v0.1"}}) {
        const ModelSpec p = findModelPreset(preset);
        const ModelSpec hf = modelFromHuggingFace(
            readJsonFile((test::hfDataDir() / (std::string(fixture) + ".json")).string()), fixture);
        EXPECT_EQ(p.ropeTheta, hf.ropeTheta) << preset;
        EXPECT_EQ(p.normEps, hf.normEps) << preset;
        EXPECT_EQ(p.ropeScaling.type, hf.ropeScaling.type) << preset;
    }
    // Llama 3.1's 405B stretches its slow wavelengths as the 3.1 8B config says.
    const ModelSpec big = findModelPreset("llama3-405b");
    const ModelSpec hf31 = modelFromHuggingFace(
        readJsonFile((test::hfDataDir() / "llama-3.1-8b.json").string()), "llama-3.1-8b");
    EXPECT_TRUE(big.ropeScaling.isLlama3());
    EXPECT_EQ(big.ropeScaling.factor, hf31.ropeScaling.factor);
    EXPECT_EQ(big.ropeScaling.lowFreqFactor, hf31.ropeScaling.lowFreqFactor);
    EXPECT_EQ(big.ropeScaling.highFreqFactor, hf31.ropeScaling.highFreqFactor);
    EXPECT_EQ(big.ropeScaling.originalMaxPositions, hf31.ropeScaling.originalMaxPositions);
    EXPECT_EQ(big.ropeTheta, hf31.ropeTheta);
}

TEST(Presets, TheNetworkFollowsTheGpuGeneration) {
    EXPECT_DOUBLE_EQ(makeCluster(findGpuPreset("a100-80gb"), 8, 4).interBandwidth, 200e9 / 8);
    EXPECT_DOUBLE_EQ(makeCluster(findGpuPreset("a100-40gb"), 8, 4).interBandwidth, 200e9 / 8);
    EXPECT_DOUBLE_EQ(makeCluster(findGpuPreset("h100-sxm"), 8, 4).interBandwidth, 400e9 / 8);
    EXPECT_DOUBLE_EQ(makeCluster(findGpuPreset("h200"), 8, 4).interBandwidth, 400e9 / 8);
    EXPECT_DOUBLE_EQ(makeCluster(findGpuPreset("a100-80gb"), 8, 4, 50e9).interBandwidth, 50e9);
    // Another GPU for a cluster: its network comes along unless the old one was set by hand.
    const ClusterSpec a100 = makeCluster(findGpuPreset("a100-80gb"), 8, 4);
    const ClusterSpec h100 = withGpu(a100, findGpuPreset("h100-sxm"));
    EXPECT_DOUBLE_EQ(h100.interBandwidth, 400e9 / 8);
    EXPECT_EQ(h100.intraBandwidth, findGpuPreset("h100-sxm").nvlinkBandwidth);
    EXPECT_EQ(h100.worldSize(), 32);
    EXPECT_DOUBLE_EQ(
        withGpu(makeCluster(findGpuPreset("a100-80gb"), 8, 4, 40e9), findGpuPreset("h100-sxm"))
            .interBandwidth,
        40e9);
    GpuSpec custom = findGpuPreset("a100-80gb");
    custom.networkBandwidth = 0; // a GPU file that says nothing: 400 Gb/s
    EXPECT_DOUBLE_EQ(makeCluster(custom, 8, 4).interBandwidth, 50e9);
}

TEST(Presets, LookupIgnoresCaseSpacesDashesUnderscoresAndDots) {
    const ModelSpec& byId = findModelPreset("llama3-70b");
    EXPECT_EQ(&findModelPreset("Llama 3 70B"), &byId);
    EXPECT_EQ(&findModelPreset("LLAMA3_70B"), &byId);
    EXPECT_EQ(&findModelPreset("llama-3-70b"), &byId);
    EXPECT_EQ(findModelPreset("Llama 3.1 405B").id, "llama3-405b"); // by name
    EXPECT_EQ(findModelPreset("gpt2_1.5b").id, "gpt2-1.5b");

    const GpuSpec& h100 = findGpuPreset("h100-sxm");
    EXPECT_EQ(&findGpuPreset("H100 SXM"), &h100);
    EXPECT_EQ(&findGpuPreset("NVIDIA H100 SXM5 80 GB"), &h100);
}

TEST(Presets, UnknownNamesListTheKnownOnes) {
    try {
        findModelPreset("llama5-9000b");
        ADD_FAILURE() << "found a preset that does not exist";
    } catch (const InputError& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("unknown model preset 'llama5-9000b'"), std::string::npos);
        for (const ModelSpec& m : modelPresets())
            EXPECT_NE(message.find(m.id), std::string::npos) << m.id << " in: " << message;
    }
    try {
        findGpuPreset("");
        ADD_FAILURE() << "found a GPU for the empty name";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("h100-sxm"), std::string::npos) << e.what();
    }
}

TEST(Presets, MatchGpuFromTheDriverDeviceName) {
    const GpuSpec* sxm = matchGpuPreset("NVIDIA H100 80GB HBM3");
    ASSERT_NE(sxm, nullptr);
    EXPECT_EQ(sxm->id, "h100-sxm");
    const GpuSpec* pcie = matchGpuPreset("NVIDIA H100 PCIe");
    ASSERT_NE(pcie, nullptr);
    EXPECT_EQ(pcie->id, "h100-pcie");
    const GpuSpec* a100 = matchGpuPreset("nvidia a100-sxm4-80gb"); // case does not matter
    ASSERT_NE(a100, nullptr);
    EXPECT_EQ(a100->id, "a100-80gb");
    EXPECT_EQ(matchGpuPreset("Tesla K80"), nullptr);
    EXPECT_EQ(matchGpuPreset(""), nullptr);
}

TEST(Presets, MatchPrefersTheLongestFragment) {
    // Every preset's own match names must lead back to it, even when another preset's shorter
    // fragment also occurs in the name.
    for (const GpuSpec& g : gpuPresets()) {
        for (const std::string& name : g.matchNames) {
            const GpuSpec* found = matchGpuPreset("NVIDIA " + name);
            ASSERT_NE(found, nullptr) << name;
            EXPECT_EQ(found->id, g.id) << name;
        }
    }
}

TEST(Presets, MakeCluster) {
    const GpuSpec& gpu = findGpuPreset("h100-sxm");
    const ClusterSpec c = makeCluster(gpu, 8, 128);
    EXPECT_EQ(c.worldSize(), 1024);
    EXPECT_EQ(c.gpu.id, "h100-sxm");
    EXPECT_EQ(c.intraBandwidth, gpu.nvlinkBandwidth);
    EXPECT_EQ(c.interBandwidth, 50e9);
    EXPECT_EQ(makeCluster(gpu, 4, 2, 100e9).interBandwidth, 100e9);
    EXPECT_EQ(c.intraLatency, ClusterSpec{}.intraLatency);
}

} // namespace
} // namespace shardscope
