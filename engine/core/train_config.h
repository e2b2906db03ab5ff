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
};

} // namespace shardscope
