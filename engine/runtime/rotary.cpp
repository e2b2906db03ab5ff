#include "rotary.h"

#include "core/error.h"

#include <cmath>
#include <numbers>
#include <string>

namespace shardscope {

std::vector<double> rotaryInverseFrequencies(double theta, int headDim,
                                             const RopeScaling& scaling) {
    if (headDim <= 0 || headDim % 2 != 0)
        throw InputError("rotary embedding: the head size must be even and positive, not " +
                         std::to_string(headDim));
    if (!(theta > 1) || !std::isfinite(theta))
        throw InputError("rotary embedding: rope_theta must be a finite number above 1, not " +
                         std::to_string(theta));
    const int half = headDim / 2;
    std::vector<double> inv(std::size_t(half), 0.0);
    for (int i = 0; i < half; ++i)
        inv[std::size_t(i)] = std::pow(theta, -2.0 * i / headDim);
    if (!scaling.enabled())
        return inv;
    const RopeScaling& s = scaling;
    if (!s.isLlama3())
        throw InputError("rotary embedding: rope_scaling type \"" + s.type +
                         "\" is not one the engine computes (llama3 is); train at the model's "
                         "original context without it");
    if (!(s.factor > 0) || !std::isfinite(s.factor) || !(s.lowFreqFactor > 0) ||
        !(s.highFreqFactor > s.lowFreqFactor) || s.originalMaxPositions <= 0)
        throw InputError("rotary embedding: Llama 3 scaling needs factor > 0, 0 < "
                         "low_freq_factor < high_freq_factor and "
                         "original_max_position_embeddings > 0");
    // Meta's apply_scaling (llama3.1 reference code), as Hugging Face's llama3 rope type.
    const double context = s.originalMaxPositions;
    const double lowFreqWavelen = context / s.lowFreqFactor;
    const double highFreqWavelen = context / s.highFreqFactor;
    for (double& f : inv) {
        const double wavelen = 2 * std::numbers::pi / f;
        if (wavelen < highFreqWavelen)
            continue; // fast: kept
        if (wavelen > lowFreqWavelen) {
            f /= s.factor; // slow: stretched
            continue;
        }
        const double smooth =
            (context / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
        f = (1 - smooth) * f / s.factor + smooth * f;
    }
    return inv;
}

RotaryTables rotaryTables(double theta, int headDim, int seqLen, const RopeScaling& scaling) {
    if (seqLen < 0)
        throw InputError("rotary embedding: the sequence length must not be negative");
    const std::vector<double> inv = rotaryInverseFrequencies(theta, headDim, scaling);
    RotaryTables t;
    const std::size_t n = std::size_t(seqLen) * inv.size();
    t.cos.resize(n);
    t.sin.resize(n);
    for (int pos = 0; pos < seqLen; ++pos)
        for (std::size_t i = 0; i < inv.size(); ++i) {
            const double angle = pos * inv[i];
            t.cos[std::size_t(pos) * inv.size() + i] = float(std::cos(angle));
            t.sin[std::size_t(pos) * inv.size() + i] = float(std::sin(angle));
        }
    return t;
}

} // namespace shardscope
