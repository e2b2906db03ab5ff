// Shared by the core tests: fixture locations, file reading, and field-by-field comparison of the
// spec types (which have no operator==: the engine never compares them).
#pragma once

#include "core/cluster_spec.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/train_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <string>
#include <vector>

namespace shardscope::test {

inline std::filesystem::path hfDataDir() {
    return std::filesystem::path(SHARDSCOPE_TEST_DATA) / "hf";
}
inline std::filesystem::path presetDir(const char* kind) {
    return std::filesystem::path(SHARDSCOPE_SOURCE_DIR) / "resources" / "presets" / kind;
}

inline std::string readText(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in) << "cannot open " << path;
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// The *.json files of a directory, sorted, optionally leaving one name out.
inline std::vector<std::filesystem::path> jsonFiles(const std::filesystem::path& dir,
                                                    const std::string& except = {}) {
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        if (entry.path().extension() == ".json" && entry.path().filename() != except)
            files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    return files;
}

inline void expectSame(const ModelSpec& a, const ModelSpec& b) {
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.family, b.family);
    EXPECT_EQ(a.layers, b.layers);
    EXPECT_EQ(a.hidden, b.hidden);
    EXPECT_EQ(a.heads, b.heads);
    EXPECT_EQ(a.kvHeads, b.kvHeads);
    EXPECT_EQ(a.headDim, b.headDim);
    EXPECT_EQ(a.ffnHidden, b.ffnHidden);
    EXPECT_EQ(a.vocab, b.vocab);
    EXPECT_EQ(a.seqLen, b.seqLen);
    EXPECT_EQ(a.maxPositions, b.maxPositions);
    EXPECT_EQ(a.tiedEmbeddings, b.tiedEmbeddings);
    EXPECT_EQ(a.activation, b.activation);
    EXPECT_EQ(a.norm, b.norm);
    EXPECT_EQ(a.positions, b.positions);
    EXPECT_EQ(a.attentionBias, b.attentionBias);
    EXPECT_EQ(a.outputBias, b.outputBias);
    EXPECT_EQ(a.mlpBias, b.mlpBias);
    EXPECT_EQ(a.dropout, b.dropout);
    EXPECT_EQ(a.moe.experts, b.moe.experts);
    EXPECT_EQ(a.moe.topK, b.moe.topK);
    EXPECT_EQ(a.moe.sharedExperts, b.moe.sharedExperts);
    EXPECT_EQ(a.moe.expertFfn, b.moe.expertFfn);
    EXPECT_EQ(a.moe.firstDenseLayers, b.moe.firstDenseLayers);
    EXPECT_EQ(a.mtpModules, b.mtpModules);
    EXPECT_EQ(a.ropeTheta, b.ropeTheta);
    EXPECT_EQ(a.normEps, b.normEps);
    EXPECT_EQ(a.ropeScaling.type, b.ropeScaling.type);
    EXPECT_EQ(a.ropeScaling.factor, b.ropeScaling.factor);
    EXPECT_EQ(a.ropeScaling.lowFreqFactor, b.ropeScaling.lowFreqFactor);
    EXPECT_EQ(a.ropeScaling.highFreqFactor, b.ropeScaling.highFreqFactor);
    EXPECT_EQ(a.ropeScaling.originalMaxPositions, b.ropeScaling.originalMaxPositions);
    EXPECT_EQ(a.mla.qLoraRank, b.mla.qLoraRank);
    EXPECT_EQ(a.mla.kvLoraRank, b.mla.kvLoraRank);
    EXPECT_EQ(a.mla.qkNopeHeadDim, b.mla.qkNopeHeadDim);
    EXPECT_EQ(a.mla.qkRopeHeadDim, b.mla.qkRopeHeadDim);
    EXPECT_EQ(a.mla.vHeadDim, b.mla.vHeadDim);
    EXPECT_DOUBLE_EQ(a.publishedParams, b.publishedParams);
    EXPECT_EQ(a.source, b.source);
    EXPECT_EQ(a.bareParams, b.bareParams);
}

inline void expectSame(const GpuSpec& a, const GpuSpec& b) {
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.vendor, b.vendor);
    // The files hold GB and TFLOP/s, the structs bytes and FLOP/s: allow the rounding of x/1e9*1e9.
    EXPECT_DOUBLE_EQ(a.memoryBytes, b.memoryBytes);
    EXPECT_DOUBLE_EQ(a.hbmBandwidth, b.hbmBandwidth);
    EXPECT_DOUBLE_EQ(a.nvlinkBandwidth, b.nvlinkBandwidth);
    EXPECT_DOUBLE_EQ(a.networkBandwidth, b.networkBandwidth);
    EXPECT_EQ(a.sms, b.sms);
    EXPECT_EQ(a.computeCapability, b.computeCapability);
    ASSERT_EQ(a.peakFlops.size(), b.peakFlops.size());
    for (const auto& [precision, flops] : a.peakFlops) {
        ASSERT_TRUE(b.peakFlops.count(precision)) << toString(precision);
        EXPECT_DOUBLE_EQ(flops, b.peakFlops.at(precision)) << toString(precision);
    }
    ASSERT_EQ(a.matmulCeiling.size(), b.matmulCeiling.size());
    for (const auto& [precision, fraction] : a.matmulCeiling) {
        ASSERT_TRUE(b.matmulCeiling.count(precision)) << toString(precision);
        EXPECT_DOUBLE_EQ(fraction, b.matmulCeiling.at(precision)) << toString(precision);
    }
    EXPECT_EQ(a.matchNames, b.matchNames);
    EXPECT_EQ(a.sources, b.sources);
}

inline void expectSame(const ClusterSpec& a, const ClusterSpec& b) {
    expectSame(a.gpu, b.gpu);
    EXPECT_EQ(a.gpusPerNode, b.gpusPerNode);
    EXPECT_EQ(a.nodes, b.nodes);
    EXPECT_DOUBLE_EQ(a.intraBandwidth, b.intraBandwidth);
    EXPECT_DOUBLE_EQ(a.intraLatency, b.intraLatency);
    EXPECT_DOUBLE_EQ(a.interBandwidth, b.interBandwidth);
    EXPECT_DOUBLE_EQ(a.interLatency, b.interLatency);
    EXPECT_DOUBLE_EQ(a.gpuMtbfHours, b.gpuMtbfHours);
    EXPECT_DOUBLE_EQ(a.checkpointBandwidth, b.checkpointBandwidth);
    EXPECT_DOUBLE_EQ(a.restartSeconds, b.restartSeconds);
    EXPECT_DOUBLE_EQ(a.gpuHourCost, b.gpuHourCost);
}

inline void expectSame(const ParallelConfig& a, const ParallelConfig& b) {
    EXPECT_EQ(a.dp, b.dp);
    EXPECT_EQ(a.tp, b.tp);
    EXPECT_EQ(a.pp, b.pp);
    EXPECT_EQ(a.vpp, b.vpp);
    EXPECT_EQ(a.cp, b.cp);
    EXPECT_EQ(a.ep, b.ep);
    EXPECT_EQ(a.etp, b.etp);
    EXPECT_EQ(a.expertCapacityFactor, b.expertCapacityFactor);
    EXPECT_EQ(a.zero, b.zero);
    EXPECT_EQ(a.shardGroup, b.shardGroup);
    EXPECT_EQ(a.overlapGradReduce, b.overlapGradReduce);
    EXPECT_EQ(a.overlapParamGather, b.overlapParamGather);
    EXPECT_EQ(a.backwardPrefetch, b.backwardPrefetch);
    EXPECT_EQ(a.tpCommOverlap, b.tpCommOverlap);
    EXPECT_EQ(a.epCommOverlap, b.epCommOverlap);
    EXPECT_EQ(a.embeddingInPipelineSplit, b.embeddingInPipelineSplit);
    EXPECT_EQ(a.lossInPipelineSplit, b.lossInPipelineSplit);
    EXPECT_EQ(a.flashAttention, b.flashAttention);
    EXPECT_EQ(a.fusedElementwise, b.fusedElementwise);
    EXPECT_EQ(a.attentionKernel, b.attentionKernel);
    EXPECT_EQ(a.sequenceParallel, b.sequenceParallel);
    EXPECT_EQ(a.schedule, b.schedule);
    EXPECT_EQ(a.microBatch, b.microBatch);
    EXPECT_EQ(a.globalBatch, b.globalBatch);
    EXPECT_EQ(a.recompute, b.recompute);
    EXPECT_EQ(a.recomputeLayers, b.recomputeLayers);
    EXPECT_EQ(a.precision.compute, b.precision.compute);
    EXPECT_EQ(a.precision.grads, b.precision.grads);
    EXPECT_EQ(a.precision.fp32Master, b.precision.fp32Master);
    EXPECT_TRUE(a.precision == b.precision) << a.precision.name() << " vs " << b.precision.name();
    EXPECT_EQ(a.optimizer, b.optimizer);
    EXPECT_EQ(a.offloadOptimizer, b.offloadOptimizer);
}

inline void expectSame(const TrainConfig& a, const TrainConfig& b) {
    EXPECT_DOUBLE_EQ(a.trainTokens, b.trainTokens);
    EXPECT_EQ(a.steps, b.steps);
    EXPECT_DOUBLE_EQ(a.learningRate, b.learningRate);
    EXPECT_DOUBLE_EQ(a.weightDecay, b.weightDecay);
    EXPECT_EQ(a.seed, b.seed);
    EXPECT_EQ(a.dataPath, b.dataPath);
}

// |actual / expected - 1| <= tolerance, with a message that shows both.
inline ::testing::AssertionResult withinRelative(double actual, double expected, double tolerance) {
    const double error = expected != 0 ? std::abs(actual / expected - 1) : std::abs(actual);
    if (error <= tolerance)
        return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << actual << " is " << error * 100 << " % away from "
                                         << expected << " (allowed " << tolerance * 100 << " %)";
}

} // namespace shardscope::test
