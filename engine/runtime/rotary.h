// The angles of rotary position embeddings (Su et al. 2021): what kernels::Ops::rotaryEmbedding
// turns each query and key pair by. Host-side, once per sequence length, in double before the
// fp32 tables the kernels read.
#pragma once

#include <vector>

namespace shardscope {

// Llama 3's stretching of the slow frequencies for long contexts (Hugging Face's rope_scaling
// with rope_type "llama3"): wavelengths longer than originalMaxPositions / lowFreqFactor are
// divided by `factor`, shorter than originalMaxPositions / highFreqFactor kept, and those
// between blended. factor 0: no scaling.
struct RopeScaling {
    double factor = 0;
    double lowFreqFactor = 1;
    double highFreqFactor = 4;
    int originalMaxPositions = 8192;
    bool enabled() const { return factor > 0; }
};

// theta^(-2i / headDim) for i < headDim / 2, scaled as `scaling` says. Throws InputError for an
// odd or non-positive head size, theta <= 1, or a scaling whose factors do not order.
std::vector<double> rotaryInverseFrequencies(double theta, int headDim,
                                             const RopeScaling& scaling = {});

// cos and sin of position t times each inverse frequency: [seqLen, headDim / 2], row-major.
struct RotaryTables {
    std::vector<float> cos, sin;
};
RotaryTables rotaryTables(double theta, int headDim, int seqLen, const RopeScaling& scaling = {});

} // namespace shardscope
