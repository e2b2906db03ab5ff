// bfloat16, the top half of an IEEE fp32 (8 exponent bits, 7 mantissa bits): the same range as
// fp32 at about 3 significant digits. Stored as its 16 bits.
#pragma once

#include <bit>
#include <cstdint>

namespace shardscope::kernels {

inline float bf16ToFloat(std::uint16_t b) {
    return std::bit_cast<float>(std::uint32_t(b) << 16);
}

// Round to nearest, ties to even (what PyTorch and CUDA's __float2bfloat16 do); infinities stay
// infinite, a NaN stays a (quiet) NaN, and values past bf16's largest round to infinity.
inline std::uint16_t floatToBf16(float f) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return std::uint16_t((u >> 16) | 0x0040u);
    return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

} // namespace shardscope::kernels
