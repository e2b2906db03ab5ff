// bf16 rounding against IEEE's definition: the nearest bf16 value, ties to the even one.
#include "kernels/bf16.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <gtest/gtest.h>
#include <limits>

namespace shardscope::kernels {
namespace {

float rounded(float x) {
    return bf16ToFloat(floatToBf16(x));
}

TEST(Bf16, KeepsTheTopHalfOfAnFp32) {
    EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
    EXPECT_EQ(floatToBf16(-2.0f), 0xc000);
    EXPECT_EQ(bf16ToFloat(0x4049), 3.140625f); // pi to bf16's 8 significant bits
    EXPECT_EQ(rounded(0.15625f), 0.15625f);    // exactly representable values stay
}

TEST(Bf16, RoundsToNearestAndTiesToEven) {
    const float ulp = std::ldexp(1.0f, -7); // spacing of bf16 values in [1, 2)
    EXPECT_EQ(rounded(1.0f + 0.4f * ulp), 1.0f);
    EXPECT_EQ(rounded(1.0f + 0.6f * ulp), 1.0f + ulp);
    EXPECT_EQ(rounded(1.0f + 0.5f * ulp), 1.0f);              // tie: 1.0 has the even mantissa
    EXPECT_EQ(rounded(1.0f + 1.5f * ulp), 1.0f + 2.0f * ulp); // tie: up to the even one
    EXPECT_EQ(rounded(-(1.0f + 0.6f * ulp)), -(1.0f + ulp));
}

TEST(Bf16, KeepsInfinitiesNaNsSignedZeroAndOverflowsToInfinity) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(rounded(inf), inf);
    EXPECT_EQ(rounded(-inf), -inf);
    EXPECT_TRUE(std::isnan(rounded(std::numeric_limits<float>::quiet_NaN())));
    // A NaN whose payload is all in the low half must not become an infinity.
    EXPECT_TRUE(std::isnan(rounded(std::bit_cast<float>(0x7f800001u))));
    EXPECT_TRUE(std::signbit(rounded(-0.0f)));
    EXPECT_EQ(rounded(std::numeric_limits<float>::max()), inf);
    const float largest = bf16ToFloat(0x7f7f);
    EXPECT_EQ(rounded(largest), largest);
}

} // namespace
} // namespace shardscope::kernels
