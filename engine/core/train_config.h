// What a training run is asked to do, beyond the model and the layout.
#pragma once

#include <cstdint>
#include <string>

namespace shardscope {

struct TrainConfig {
    double trainTokens = 0; // D in 6ND; 0 when only a step is planned
    std::int64_t steps = 0; // 0 means derived from trainTokens
    double learningRate = 3e-4;
    double weightDecay = 0.1;
    std::uint64_t seed = 1234;
    std::string dataPath; // empty: synthetic tokens

    // Optimizer and learning-rate schedule: linear warmup, then cosine decay to minLearningRate.
    std::int64_t warmupSteps = 0;
    double minLearningRate = 3e-5;
    double gradClip = 1.0; // max global gradient norm; 0 turns clipping off
    double beta1 = 0.9;
    double beta2 = 0.95;
    double epsilon = 1e-8;

    // Data: "auto", "nanogpt", "llmc", "text" or "synthetic"; validation split and cadence.
    std::string dataFormat = "auto";
    double valFraction = 0.1;
    std::int64_t evalEvery = 0; // steps between validation passes; 0: only at the end
    int evalBatches = 4;        // microbatches per validation pass

    // Checkpoints: every N steps (0: only at the end), keeping the newest K.
    std::int64_t checkpointEvery = 0;
    int keepCheckpoints = 3;
};

} // namespace shardscope
