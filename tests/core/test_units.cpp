#include "core/units.h"

#include <cmath>
#include <gtest/gtest.h>
#include <limits>

namespace shardscope {
namespace {

TEST(FormatNumber, KeepsThreeSignificantDigits) {
    EXPECT_EQ(formatNumber(2.734), "2.73");
    EXPECT_EQ(formatNumber(1.2), "1.20");
    EXPECT_EQ(formatNumber(512), "512");
    EXPECT_EQ(formatNumber(1234.5), "1230");
    EXPECT_EQ(formatNumber(0.000123456), "0.000123");
    EXPECT_EQ(formatNumber(-2.5), "-2.50");
    EXPECT_EQ(formatNumber(0), "0");
}

TEST(FormatNumber, RoundingUpAddsNoDigit) {
    EXPECT_EQ(formatNumber(9.996), "10.0");
    EXPECT_EQ(formatNumber(99.96), "100");
}

TEST(FormatNumber, OtherPrecisionsAndNonFiniteValues) {
    EXPECT_EQ(formatNumber(2.0 / 3.0, 2), "0.67");
    EXPECT_EQ(formatNumber(2.0 / 3.0, 5), "0.66667");
    EXPECT_EQ(formatNumber(std::numeric_limits<double>::quiet_NaN()), "nan");
    EXPECT_EQ(formatNumber(std::numeric_limits<double>::infinity()), "inf");
    EXPECT_EQ(formatNumber(-std::numeric_limits<double>::infinity()), "-inf");
    EXPECT_EQ(formatNumber(3.65e25), "3.65e25");
}

// A rounded value from a million up is written with the digits it has, not with zeros that
// claim more (2.27e9, never 2270000000).
TEST(FormatNumber, LargeRoundedValuesKeepTheirRealPrecision) {
    EXPECT_EQ(formatNumber(2.2704e9), "2.27e9");
    EXPECT_EQ(formatNumber(70553706496.0), "7.06e10");
    EXPECT_EQ(formatNumber(3.8e6), "3.80e6");
    EXPECT_EQ(formatNumber(999600), "1.00e6"); // rounds up into the next decade
    EXPECT_EQ(formatNumber(999400), "999000");
    EXPECT_EQ(formatNumber(-1.5e7, 2), "-1.5e7");
    EXPECT_EQ(formatNumber(1.23456789e9, 6), "1.23457e9");
}

TEST(FormatBytes, UsesDecimalUnits) {
    EXPECT_EQ(formatBytes(2.73e9), "2.73 GB");
    EXPECT_EQ(formatBytes(512e6), "512 MB");
    EXPECT_EQ(formatBytes(80e9), "80.0 GB");
    EXPECT_EQ(formatBytes(1.5e3), "1.50 KB");
    EXPECT_EQ(formatBytes(4.2e12), "4.20 TB");
    EXPECT_EQ(formatBytes(1.5e15), "1.50 PB");
    EXPECT_EQ(formatBytes(2e18), "2000 PB");
}

TEST(FormatBytes, SmallWholeCountsPrintAsIntegers) {
    EXPECT_EQ(formatBytes(0), "0 B");
    EXPECT_EQ(formatBytes(3), "3 B");
    EXPECT_EQ(formatBytes(999), "999 B");
}

TEST(FormatBytes, MovesToTheNextUnitWhenRoundingReachesAThousand) {
    EXPECT_EQ(formatBytes(999.7e6), "1.00 GB");
    EXPECT_EQ(formatBytes(999.4e6), "999 MB");
}

TEST(FormatSeconds, PicksAReadableUnit) {
    EXPECT_EQ(formatSeconds(850e-6), "850 us");
    EXPECT_EQ(formatSeconds(0.5e-6), "0.500 us");
    EXPECT_EQ(formatSeconds(0.0123), "12.3 ms");
    EXPECT_EQ(formatSeconds(1.2), "1.20 s");
    EXPECT_EQ(formatSeconds(90), "1.50 min");
    EXPECT_EQ(formatSeconds(3.4 * kSecondsPerHour), "3.40 h");
    EXPECT_EQ(formatSeconds(17.4 * kSecondsPerDay), "17.4 days");
    EXPECT_EQ(formatSeconds(2 * kSecondsPerYear), "2.00 years");
    EXPECT_EQ(formatSeconds(0), "0 s");
}

TEST(FormatSeconds, RoundingCarriesIntoTheNextUnit) {
    EXPECT_EQ(formatSeconds(59.999), "1.00 min");
    EXPECT_EQ(formatSeconds(0.99999), "1.00 s");
}

TEST(FormatFlops, UsesScientificNotation) {
    EXPECT_EQ(formatFlops(3.65e25), "3.65e+25 FLOP");
    EXPECT_EQ(formatFlops(6e18), "6.00e+18 FLOP");
}

TEST(FormatRate, UsesFlopPerSecondUnits) {
    EXPECT_EQ(formatRate(989e12), "989 TFLOP/s");
    EXPECT_EQ(formatRate(2.5e15), "2.50 PFLOP/s");
    EXPECT_EQ(formatRate(1.5e18), "1.50 EFLOP/s");
    EXPECT_EQ(formatRate(312e9), "312 GFLOP/s");
    EXPECT_EQ(formatRate(5e8), "0.500 GFLOP/s");
}

TEST(FormatCount, UsesThousandMillionBillionTrillion) {
    EXPECT_EQ(formatCount(8.03e9), "8.03 B");
    EXPECT_EQ(formatCount(124e6), "124 M");
    EXPECT_EQ(formatCount(1500), "1.50 K");
    EXPECT_EQ(formatCount(2e12), "2.00 T");
    EXPECT_EQ(formatCount(512), "512");
    EXPECT_EQ(formatCount(0), "0");
}

TEST(FormatPercent, ScalesAFraction) {
    EXPECT_EQ(formatPercent(0.273), "27.3 %");
    EXPECT_EQ(formatPercent(1), "100 %");
    EXPECT_EQ(formatPercent(0.005), "0.500 %");
}

TEST(Units, ConstantsAreDecimalAndBinary) {
    EXPECT_EQ(GB, 1e9);
    EXPECT_EQ(GiB, 1073741824.0);
    EXPECT_EQ(kSecondsPerYear, 31557600.0);
}

} // namespace
} // namespace shardscope
