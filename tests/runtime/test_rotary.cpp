// Rotary embedding's angles: theta^(-2i/d) for each pair, and Llama 3's stretching of the slow
// ones (Meta's apply_scaling in the Llama 3.1 reference code, Hugging Face's "llama3" rope type).
#include "core/error.h"
#include "runtime/rotary.h"

#include <cmath>
#include <gtest/gtest.h>
#include <numbers>

namespace shardscope {
namespace {

TEST(Rotary, FrequenciesFallGeometricallyFromOne) {
    const auto f = rotaryInverseFrequencies(10000, 64);
    ASSERT_EQ(f.size(), 32u);
    EXPECT_DOUBLE_EQ(f[0], 1.0);
    for (std::size_t i = 1; i < f.size(); ++i) // each the last times 10000^(-2/64)
        EXPECT_NEAR(f[i] / f[i - 1], std::pow(10000.0, -2.0 / 64), 1e-12) << i;
}

// Llama 3.1's own settings (its config.json): theta 500000, factor 8, low 1, high 4, 8192
// positions, head size 128. Wavelengths under 2048 keep their frequency, over 8192 are eight
// times slower, and between them the scaled frequency moves from one to the other.
TEST(Rotary, Llama3ScalingStretchesOnlyTheSlowWavelengths) {
    const RopeScaling llama31{"llama3", 8, 1, 4, 8192};
    const auto plain = rotaryInverseFrequencies(500000, 128);
    const auto scaled = rotaryInverseFrequencies(500000, 128, llama31);
    ASSERT_EQ(scaled.size(), 64u);
    int kept = 0, stretched = 0, blended = 0;
    for (std::size_t i = 0; i < scaled.size(); ++i) {
        const double wavelen = 2 * std::numbers::pi / plain[i];
        const double ratio = scaled[i] / plain[i];
        if (wavelen < 2048) {
            EXPECT_DOUBLE_EQ(ratio, 1.0) << i;
            ++kept;
        } else if (wavelen > 8192) {
            EXPECT_NEAR(ratio, 1.0 / 8, 1e-15) << i;
            ++stretched;
        } else {
            // The blend is linear in context / wavelength: 1/8 at 8192 (context / wavelength = 1),
            // 1 at 2048 (= 4).
            const double along = (8192 / wavelen - 1) / (4 - 1);
            EXPECT_NEAR(ratio, 1.0 / 8 + along * (1 - 1.0 / 8), 1e-12) << i;
            ++blended;
        }
        if (i > 0) {
            EXPECT_LT(scaled[i], scaled[i - 1]) << "frequencies fall with i";
        }
    }
    EXPECT_GT(kept, 0);
    EXPECT_GT(stretched, 0);
    EXPECT_GT(blended, 0);
}

TEST(Rotary, TablesHoldTheCosineAndSineOfEachPositionsAngle) {
    const RopeScaling llama31{"llama3", 8, 1, 4, 8192};
    const auto f = rotaryInverseFrequencies(500000, 16, llama31);
    const RotaryTables t = rotaryTables(500000, 16, 40, llama31);
    ASSERT_EQ(t.cos.size(), 40u * 8);
    ASSERT_EQ(t.sin.size(), 40u * 8);
    for (int pos = 0; pos < 40; ++pos)
        for (int i = 0; i < 8; ++i) {
            const std::size_t at = std::size_t(pos) * 8 + std::size_t(i);
            EXPECT_NEAR(t.cos[at], std::cos(pos * f[std::size_t(i)]), 1e-7);
            EXPECT_NEAR(t.sin[at], std::sin(pos * f[std::size_t(i)]), 1e-7);
            EXPECT_NEAR(t.cos[at] * t.cos[at] + t.sin[at] * t.sin[at], 1.0, 1e-6);
        }
    EXPECT_EQ(t.cos[0], 1.0f); // position 0 does not turn
    EXPECT_EQ(t.sin[0], 0.0f);
}

TEST(Rotary, BadSettingsSayWhatIsWrong) {
    const auto refuses = [](auto f, const std::string& what) {
        try {
            f();
            ADD_FAILURE() << "accepted: " << what;
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    refuses([] { rotaryInverseFrequencies(10000, 7); }, "head size must be even");
    refuses([] { rotaryInverseFrequencies(10000, 0); }, "head size must be even");
    refuses([] { rotaryInverseFrequencies(1, 64); }, "rope_theta");
    refuses([] { rotaryInverseFrequencies(std::nan(""), 64); }, "rope_theta");
    refuses(
        [] {
            rotaryInverseFrequencies(10000, 64, RopeScaling{"llama3", 8, 4, 1, 8192});
        },
        "low_freq_factor < high_freq_factor");
    refuses([] { rotaryTables(10000, 64, -1); }, "sequence length");
    refuses(
        [] {
            rotaryInverseFrequencies(10000, 128, RopeScaling{"yarn", 40, 1, 4, 4096});
        },
        "\"yarn\" is not one the engine computes");
}

} // namespace
} // namespace shardscope
