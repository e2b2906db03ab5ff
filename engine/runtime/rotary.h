// The angles of rotary position embeddings (Su et al. 2021): what kernels::Ops::rotaryEmbedding
// turns each query and key pair by. Host-side, once per sequence length, in double before the
// fp32 tables the kernels read.
#pragma once

#include "core/model_spec.h"

#include <vector>

namespace shardscope {

// theta^(-2i / headDim) for i < headDim / 2, scaled as `scaling` says (ModelSpec's: Llama 3's,
// or none). Throws InputError for an odd or non-positive head size, theta <= 1, a scaling type
// other than llama3, or Llama 3 factors that do not order.
std::vector<double> rotaryInverseFrequencies(double theta, int headDim,
                                             const RopeScaling& scaling = {});

// cos and sin of position t times each inverse frequency: [seqLen, headDim / 2], row-major.
struct RotaryTables {
    std::vector<float> cos, sin;
};
RotaryTables rotaryTables(double theta, int headDim, int seqLen, const RopeScaling& scaling = {});

} // namespace shardscope
