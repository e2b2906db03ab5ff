#include "units.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>

namespace shardscope {

namespace {

// v rounded to `significant` digits, so unit choice can look at the value that will be printed
// (999.7 MB must become "1.00 GB", not "1000 MB").
double roundSignificant(double v, int significant) {
    if (v == 0 || !std::isfinite(v))
        return v;
    const double scale =
        std::pow(10.0, significant - 1 - int(std::floor(std::log10(std::fabs(v)))));
    return std::round(v * scale) / scale;
}

struct Unit {
    double scale;
    const char* name;
    double limit; // the next unit takes over once the printed value reaches this
};

// Picks the first unit whose printed value stays under its limit; the last unit has no limit.
// Values below the first unit are printed in the first unit ("0.500 us").
template <std::size_t N>
std::string formatScaled(double v, const Unit (&units)[N], int significant = 3) {
    if (!std::isfinite(v))
        return formatNumber(v) + " " + units[0].name;
    for (std::size_t i = 0; i + 1 < N; ++i) {
        const double scaled = roundSignificant(std::fabs(v) / units[i].scale, significant);
        if (scaled < units[i].limit)
            return formatNumber(v / units[i].scale, significant) + " " + units[i].name;
    }
    return formatNumber(v / units[N - 1].scale, significant) + " " + units[N - 1].name;
}

// Whole numbers of bytes or items below a thousand print as they are ("3 B", not "3.00 B").
bool isSmallWholeNumber(double v) {
    return std::fabs(v) < 1000 && v == std::floor(v);
}

std::string wholeNumber(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
}

} // namespace

std::string formatNumber(double v, int significant) {
    if (std::isnan(v))
        return "nan";
    if (std::isinf(v))
        return v < 0 ? "-inf" : "inf";
    if (significant < 1)
        significant = 1;
    const double rounded = roundSignificant(v, significant);
    int decimals = 0;
    if (rounded != 0) {
        const int exponent = int(std::floor(std::log10(std::fabs(rounded))));
        decimals = std::max(0, significant - 1 - exponent);
    }
    char buf[64];
    // From a million on, the zeros a rounded value would be written with claim a precision it
    // does not have (2270000000 for 2.27e9): scientific notation keeps the real digits.
    if (std::fabs(rounded) < 1e6) {
        std::snprintf(buf, sizeof buf, "%.*f", decimals, rounded);
        return buf;
    }
    std::snprintf(buf, sizeof buf, "%.*e", significant - 1, rounded);
    // "2.27e+09" -> "2.27e9"
    std::string out = buf;
    const std::size_t e = out.find('e');
    std::size_t digits = e + 1;
    if (digits < out.size() && out[digits] == '+')
        out.erase(digits, 1);
    while (digits + 1 < out.size() && out[digits] == '0')
        out.erase(digits, 1);
    return out;
}

std::string formatBytes(double bytes) {
    static constexpr Unit units[] = {{1, "B", 1000},   {KB, "KB", 1000}, {MB, "MB", 1000},
                                     {GB, "GB", 1000}, {TB, "TB", 1000}, {PB, "PB", 0}};
    if (isSmallWholeNumber(bytes))
        return wholeNumber(bytes) + " B";
    return formatScaled(bytes, units);
}

std::string formatSeconds(double seconds) {
    static constexpr Unit units[] = {{1e-6, "us", 1000},
                                     {1e-3, "ms", 1000},
                                     {1, "s", 60},
                                     {60, "min", 60},
                                     {kSecondsPerHour, "h", 24},
                                     {kSecondsPerDay, "days", 365.25},
                                     {kSecondsPerYear, "years", 0}};
    if (seconds == 0)
        return "0 s";
    return formatScaled(seconds, units);
}

std::string formatFlops(double flops) {
    if (!std::isfinite(flops))
        return formatNumber(flops) + " FLOP";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2e FLOP", flops);
    return buf;
}

std::string formatRate(double flopsPerSecond) {
    static constexpr Unit units[] = {{1e9, "GFLOP/s", 1000},
                                     {TFLOPS, "TFLOP/s", 1000},
                                     {PFLOPS, "PFLOP/s", 1000},
                                     {1e18, "EFLOP/s", 0}};
    return formatScaled(flopsPerSecond, units);
}

std::string formatCount(double n) {
    static constexpr Unit units[] = {
        {1, "", 1000}, {1e3, "K", 1000}, {1e6, "M", 1000}, {1e9, "B", 1000}, {1e12, "T", 0}};
    if (isSmallWholeNumber(n))
        return wholeNumber(n);
    std::string s = formatScaled(n, units);
    if (!s.empty() && s.back() == ' ')
        s.pop_back(); // plain counts carry no unit
    return s;
}

std::string formatPercent(double fraction) {
    return formatNumber(fraction * 100.0) + " %";
}

} // namespace shardscope
