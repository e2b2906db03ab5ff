#include "flops_convention.h"

#include "core/error.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

namespace shardscope {

namespace {

constexpr std::array<std::pair<FlopsConvention, const char*>, 4> kKeys = {{
    {FlopsConvention::Causal, "causal"},
    {FlopsConvention::Palm, "palm"},
    {FlopsConvention::Megatron, "megatron"},
    {FlopsConvention::SixN, "6n"},
}};

} // namespace

std::string toString(FlopsConvention c) {
    for (const auto& [convention, key] : kKeys)
        if (convention == c)
            return key;
    return "?";
}

std::string flopsConventionNames() {
    std::string names;
    for (const auto& [convention, key] : kKeys)
        names += (names.empty() ? "" : ", ") + std::string(key);
    return names;
}

FlopsConvention flopsConventionFromString(const std::string& s) {
    std::string lower = s;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char ch) { return char(std::tolower(ch)); });
    for (const auto& [convention, key] : kKeys)
        if (lower == key)
            return convention;
    throw InputError("flops_convention '" + s + "' is not one of " + flopsConventionNames());
}

} // namespace shardscope
