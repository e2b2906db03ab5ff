#include "cluster_spec.h"

#include "error.h"

#include <algorithm>
#include <cctype>
#include <span>

namespace shardscope {

namespace {

using enum Precision;

// Where a precision falls back when a part lacks it: FP8 GEMMs run in BF16, BF16 and FP16 have the
// same tensor-core rate on every part that has both, TF32 is the tensor-core path for FP32.
constexpr Precision kFromFp8[] = {Fp8, Bf16, Fp16, Tf32, Fp32};
constexpr Precision kFromBf16[] = {Bf16, Fp16, Tf32, Fp32};
constexpr Precision kFromFp16[] = {Fp16, Bf16, Tf32, Fp32};
constexpr Precision kFromTf32[] = {Tf32, Fp32};
constexpr Precision kFromFp32[] = {Fp32};

std::span<const Precision> fallbackOrder(Precision p) {
    switch (p) {
    case Fp8:
        return kFromFp8;
    case Bf16:
        return kFromBf16;
    case Fp16:
        return kFromFp16;
    case Tf32:
        return kFromTf32;
    case Fp32:
        break;
    }
    return kFromFp32;
}

} // namespace

double GpuSpec::peak(Precision p) const {
    for (Precision candidate : fallbackOrder(p)) {
        const auto it = peakFlops.find(candidate);
        if (it != peakFlops.end() && it->second > 0) // 0 in a preset means "not supported"
            return it->second;
    }
    return 0;
}

Precision GpuSpec::peakPrecision(Precision p) const {
    for (Precision candidate : fallbackOrder(p)) {
        const auto it = peakFlops.find(candidate);
        if (it != peakFlops.end() && it->second > 0)
            return candidate;
    }
    return p;
}

double GpuSpec::ceiling(Precision p) const {
    const Precision used = peakPrecision(p);
    auto it = matmulCeiling.find(used);
    if (it == matmulCeiling.end() && (used == Fp16 || used == Bf16))
        it = matmulCeiling.find(used == Fp16 ? Bf16 : Fp16);
    return it != matmulCeiling.end() ? it->second : 0.0;
}

std::string toString(Precision p) {
    switch (p) {
    case Precision::Fp32:
        return "fp32";
    case Precision::Tf32:
        return "tf32";
    case Precision::Bf16:
        return "bf16";
    case Precision::Fp16:
        return "fp16";
    case Precision::Fp8:
        return "fp8";
    }
    return "?";
}

Precision precisionFromString(const std::string& s) {
    std::string lower = s;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    for (Precision p :
         {Precision::Fp32, Precision::Tf32, Precision::Bf16, Precision::Fp16, Precision::Fp8}) {
        if (lower == toString(p))
            return p;
    }
    throw InputError("unknown precision '" + s + "'; expected one of fp32, tf32, bf16, fp16, fp8");
}

} // namespace shardscope
