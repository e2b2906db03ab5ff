// Hardware: one GPU type, and a cluster of identical nodes built from it.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace shardscope {

enum class Precision { Fp32, Tf32, Bf16, Fp16, Fp8 };

struct GpuSpec {
    std::string id; // "h100-sxm"
    std::string name;
    std::string vendor;
    double memoryBytes = 0;
    double hbmBandwidth = 0;    // bytes/s
    double nvlinkBandwidth = 0; // bytes/s per GPU per direction; 0 when the part has none
    // The network across nodes, bytes/s per GPU per direction (its share of the node's NICs) in
    // the part's reference system: 200 Gb/s HDR per A100 (DGX A100), 400 Gb/s NDR per H100
    // (DGX H100). 0 when not given: makeCluster then takes 50 GB/s.
    double networkBandwidth = 0;
    int sms = 0;                           // streaming multiprocessors (or compute units)
    std::string computeCapability;         // "9.0" for NVIDIA parts, empty otherwise
    std::map<Precision, double> peakFlops; // dense (not 2:4 sparse) FLOP/s per precision
    // The fraction of the dense peak the best-shaped matmul measurably reaches (the "maximum
    // achievable matmul FLOPS" of a shape sweep), per precision; absent where nobody measured it.
    std::map<Precision, double> matmulCeiling;
    std::vector<std::string> matchNames; // substrings of driver device names that mean this part
    std::map<std::string, std::string> sources; // field name -> datasheet it came from

    // Dense peak for a precision; falls back to the nearest slower precision the part has.
    double peak(Precision p) const;
    // The precision whose peak peak(p) takes (FP8 on a part without FP8: bf16).
    Precision peakPrecision(Precision p) const;
    // The measured matmul ceiling of that precision (fp16 and bf16 share tensor cores), 0 if none.
    double ceiling(Precision p) const;
    // Whether the GPU has tensor cores for this precision (a peak of its own, not a fallback):
    // an FP8 policy on an A100 runs its GEMMs in bf16 and keeps no FP8 copies.
    bool runs(Precision p) const {
        const auto it = peakFlops.find(p);
        return it != peakFlops.end() && it->second > 0;
    }
};

struct ClusterSpec {
    GpuSpec gpu;
    int gpusPerNode = 8;
    int nodes = 1;
    double intraBandwidth = 0; // bytes/s per GPU per direction inside a node (NVLink/PCIe)
    double intraLatency = 3e-6;
    double interBandwidth = 0; // bytes/s per GPU per direction across nodes (its NIC share)
    double interLatency = 10e-6;

    // Reliability and cost: inputs to time-to-train, not to step time.
    double gpuMtbfHours = 45600;        // per GPU; default from Llama 3's 466 interruptions
    double checkpointBandwidth = 100e9; // bytes/s aggregate write bandwidth to storage
    double restartSeconds = 600;        // detect, reschedule, reload
    double gpuHourCost = 2.0;           // currency units per GPU-hour

    int worldSize() const { return gpusPerNode * nodes; }
};

std::string toString(Precision p);
Precision precisionFromString(const std::string& s); // throws InputError

} // namespace shardscope
