// Units and human-readable formatting shared by the planner, the CLI and the app.
#pragma once

#include <string>

namespace shardscope {

// Decimal units are what datasheets and the lessons use (80 GB, 900 GB/s); binary units are what
// allocators report. Both are available; the planner reports decimal GB unless told otherwise.
inline constexpr double KB = 1e3, MB = 1e6, GB = 1e9, TB = 1e12, PB = 1e15;
inline constexpr double KiB = 1024.0, MiB = KiB * 1024, GiB = MiB * 1024, TiB = GiB * 1024;
inline constexpr double TFLOPS = 1e12, PFLOPS = 1e15;
inline constexpr double kSecondsPerHour = 3600.0, kSecondsPerDay = 86400.0;
inline constexpr double kSecondsPerYear = 365.25 * kSecondsPerDay;

std::string formatBytes(double bytes);         // "2.73 GB", "512 MB"
std::string formatSeconds(double seconds);     // "850 us", "1.20 s", "3.4 h", "17.4 days"
std::string formatFlops(double flops);         // "3.65e+25 FLOP"
std::string formatRate(double flopsPerSecond); // "989 TFLOP/s"
std::string formatCount(double n);             // "8.03 B", "124 M"
std::string formatPercent(double fraction);    // "27.3 %"
std::string formatNumber(double v, int significant = 3);

} // namespace shardscope
