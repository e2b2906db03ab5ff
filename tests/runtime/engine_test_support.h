// Small GPT configs and helpers shared by the engine tests.
#pragma once

#include "core/model_spec.h"
#include "runtime/run_config.h"
#include "support/temp_dir.h"

#include <atomic>
#include <filesystem>
#include <random>
#include <string>
#include <unistd.h>

namespace shardscope::testing {

inline ModelSpec tinyGpt(int layers = 2, int hidden = 16, int heads = 2, int vocab = 23,
                         int seq = 8) {
    RunConfig c = defaultRunConfig();
    ModelSpec m = c.model;
    m.name = "test GPT";
    m.layers = layers;
    m.hidden = hidden;
    m.heads = heads;
    m.kvHeads = heads;
    m.ffnHidden = 4 * hidden;
    m.vocab = vocab;
    m.seqLen = seq;
    m.maxPositions = seq;
    return m;
}

// The Llama family's blocks at the same scale: RMSNorm, rotary positions, SwiGLU, grouped-query
// attention (kvHeads of heads), no biases, an untied head.
inline ModelSpec tinyLlama(int layers = 2, int hidden = 16, int heads = 4, int kvHeads = 2,
                           int vocab = 23, int seq = 8) {
    ModelSpec m = tinyGpt(layers, hidden, heads, vocab, seq);
    m.name = "test Llama";
    m.family = "llama";
    m.kvHeads = kvHeads;
    m.ffnHidden = 3 * hidden;
    m.activation = Activation::SwiGlu;
    m.norm = Norm::RmsNorm;
    m.positions = PositionEmbedding::Rope;
    m.attentionBias = m.outputBias = m.mlpBias = false;
    m.tiedEmbeddings = false;
    m.normEps = 1e-5;
    return m;
}

inline RunConfig tinyRun(const std::filesystem::path& dir, int steps = 6) {
    RunConfig c = defaultRunConfig();
    c.model = tinyGpt(2, 32, 4, 32, 16);
    c.parallel.microBatch = 4;
    c.parallel.globalBatch = 8;
    c.train.steps = steps;
    c.train.warmupSteps = steps > 2 ? 2 : 0;
    c.train.learningRate = 3e-3;
    c.train.minLearningRate = 3e-4;
    c.train.evalEvery = 0;
    c.train.checkpointEvery = 0;
    c.engine.runDir = dir.string();
    c.engine.threads = 2;
    c.engine.quiet = true;
    return c;
}

} // namespace shardscope::testing
