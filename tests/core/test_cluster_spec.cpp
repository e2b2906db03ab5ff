#include "core/cluster_spec.h"
#include "core/error.h"

#include <gtest/gtest.h>

namespace shardscope {
namespace {

GpuSpec withPeaks(std::map<Precision, double> peaks) {
    GpuSpec g;
    g.peakFlops = std::move(peaks);
    return g;
}

TEST(GpuPeak, ExactPrecisionWhenPresent) {
    const GpuSpec g = withPeaks({{Precision::Fp32, 67e12},
                                 {Precision::Tf32, 495e12},
                                 {Precision::Bf16, 989e12},
                                 {Precision::Fp16, 990e12},
                                 {Precision::Fp8, 1979e12}});
    EXPECT_EQ(g.peak(Precision::Fp32), 67e12);
    EXPECT_EQ(g.peak(Precision::Tf32), 495e12);
    EXPECT_EQ(g.peak(Precision::Bf16), 989e12);
    EXPECT_EQ(g.peak(Precision::Fp16), 990e12);
    EXPECT_EQ(g.peak(Precision::Fp8), 1979e12);
}

TEST(GpuPeak, FallsBackToTheNextWiderPrecision) {
    const GpuSpec ampere = withPeaks(
        {{Precision::Fp32, 19.5e12}, {Precision::Tf32, 156e12}, {Precision::Bf16, 312e12}});
    EXPECT_EQ(ampere.peak(Precision::Fp8), 312e12);  // no FP8 on Ampere
    EXPECT_EQ(ampere.peak(Precision::Fp16), 312e12); // FP16 and BF16 stand in for each other

    const GpuSpec fp16Only = withPeaks({{Precision::Fp16, 100e12}, {Precision::Fp32, 10e12}});
    EXPECT_EQ(fp16Only.peak(Precision::Bf16), 100e12);
    EXPECT_EQ(fp16Only.peak(Precision::Tf32), 10e12);

    const GpuSpec tf32Only = withPeaks({{Precision::Tf32, 50e12}});
    EXPECT_EQ(tf32Only.peak(Precision::Bf16), 50e12);
    EXPECT_EQ(tf32Only.peak(Precision::Fp32), 0); // FP32 never runs faster on tensor cores
}

TEST(GpuPeak, ZeroWhenNothingIsKnown) {
    EXPECT_EQ(GpuSpec{}.peak(Precision::Bf16), 0);
    EXPECT_EQ(withPeaks({{Precision::Fp8, 0}}).peak(Precision::Fp8), 0);
}

TEST(PrecisionNames, RoundTripAndErrors) {
    for (auto p :
         {Precision::Fp32, Precision::Tf32, Precision::Bf16, Precision::Fp16, Precision::Fp8})
        EXPECT_EQ(precisionFromString(toString(p)), p);
    EXPECT_EQ(precisionFromString("BF16"), Precision::Bf16);
    try {
        precisionFromString("fp4");
        ADD_FAILURE();
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("fp32, tf32, bf16, fp16, fp8"), std::string::npos);
    }
}

TEST(ClusterSpec, WorldSize) {
    ClusterSpec c;
    c.gpusPerNode = 8;
    c.nodes = 16;
    EXPECT_EQ(c.worldSize(), 128);
}

} // namespace
} // namespace shardscope
