// The accelerators of this machine (label "gpu"). Without a CUDA device every test here skips
// with the reason queryDevices() gives, which is how GPU tests skip cleanly on CI.

#include "core/presets.h"
#include "runtime/devices.h"

#include <gtest/gtest.h>
#include <regex>
#include <string>

namespace {

using shardscope::DeviceInfo;
using shardscope::DeviceReport;

const DeviceReport& report() {
    static const DeviceReport r = shardscope::queryDevices();
    return r;
}

#define SKIP_WITHOUT_DEVICES()                                                                     \
    do {                                                                                           \
        if (report().devices.empty()) {                                                            \
            GTEST_SKIP() << "no CUDA device: " << report().reason;                                 \
        }                                                                                          \
    } while (0)

TEST(Devices, AnEmptyListComesWithAReason) {
    const DeviceReport& r = report();
    if (r.devices.empty()) {
        EXPECT_FALSE(r.reason.empty());
        if (!r.builtWithCuda) {
            EXPECT_NE(r.reason.find("CUDA"), std::string::npos) << r.reason;
        }
        GTEST_SKIP() << "no CUDA device: " << r.reason;
    }
    EXPECT_TRUE(r.builtWithCuda);
    EXPECT_FALSE(r.versions.empty());
}

TEST(Devices, EachDeviceIsDescribed) {
    SKIP_WITHOUT_DEVICES();
    const std::regex capability(R"(\d+\.\d+)");
    for (std::size_t i = 0; i < report().devices.size(); ++i) {
        const DeviceInfo& d = report().devices[i];
        SCOPED_TRACE(d.name);
        EXPECT_EQ(d.index, int(i));
        EXPECT_FALSE(d.name.empty());
        EXPECT_GT(d.memoryBytes, 1e9);
        EXPECT_GT(d.sms, 0);
        EXPECT_TRUE(std::regex_match(d.computeCapability, capability)) << d.computeCapability;
    }
}

// Driver names as the CUDA runtime reports them, and the preset each one is.
struct KnownPart {
    const char* fragment; // part of the device name
    const char* presetId;
    const char* capability;
};
constexpr KnownPart kKnownParts[] = {
    {"H100 80GB HBM3", "h100-sxm", "9.0"},  {"H100 SXM", "h100-sxm", "9.0"},
    {"H100 PCIe", "h100-pcie", "9.0"},      {"H200", "h200", "9.0"},
    {"A100-SXM4-80GB", "a100-80gb", "8.0"}, {"A100-SXM-80GB", "a100-80gb", "8.0"},
    {"A100-SXM4-40GB", "a100-40gb", "8.0"},
};

TEST(Devices, DataCenterPartsMapToTheirPresets) {
    SKIP_WITHOUT_DEVICES();
    for (const DeviceInfo& d : report().devices) {
        SCOPED_TRACE(d.name);
        bool known = false;
        for (const KnownPart& part : kKnownParts) {
            if (d.name.find(part.fragment) == std::string::npos)
                continue;
            known = true;
            ASSERT_NE(d.preset, nullptr) << "no preset for " << d.name;
            EXPECT_EQ(d.preset->id, part.presetId);
            EXPECT_EQ(d.computeCapability, part.capability);
            EXPECT_EQ(d.preset->computeCapability, d.computeCapability);
            break;
        }
        // Another variant of a family we have presets for (H100 NVL, A100 PCIe, ...) must
        // either match nothing or a preset of the same family, never a different GPU.
        if (!known && d.preset) {
            for (const char* family : {"H100", "H200", "A100"}) {
                if (d.name.find(family) != std::string::npos) {
                    EXPECT_NE(d.preset->name.find(family), std::string::npos) << d.preset->id;
                }
            }
        }
    }
}

// The name matching itself needs no device: these run everywhere the "gpu" label runs.
TEST(DeviceNames, DriverNamesMatchPresets) {
    const std::pair<const char*, const char*> cases[] = {
        {"NVIDIA H100 80GB HBM3", "h100-sxm"},
        {"NVIDIA H100 PCIe", "h100-pcie"},
        {"NVIDIA H200", "h200"},
        {"NVIDIA A100-SXM4-80GB", "a100-80gb"},
        {"NVIDIA A100-SXM4-40GB", "a100-40gb"},
    };
    for (const auto& [name, id] : cases) {
        const shardscope::GpuSpec* g = shardscope::matchGpuPreset(name);
        ASSERT_NE(g, nullptr) << name;
        EXPECT_EQ(g->id, id) << name;
    }
    EXPECT_EQ(shardscope::matchGpuPreset("Some Other Accelerator"), nullptr);
}

} // namespace
