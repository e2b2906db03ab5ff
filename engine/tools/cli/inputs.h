// Command-line flags -> the shared specs. Every flag has a default so that a bare `plan` is a
// useful example (Llama 3 70B on 8 nodes x 8 H100).
#pragma once

#include "plan/estimate.h"

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace shardscope::cli {

struct ModelFlags {
    std::string preset = "llama3-70b";
    std::optional<double> params; // --params: the quick form
    std::string hfConfig;         // --hf-config FILE
    std::optional<int> seqLen;    // --seq overrides the model's training sequence length
};

struct ClusterFlags {
    std::string gpu = "h100-sxm";
    int gpusPerNode = 8;
    int nodes = 8;
    std::optional<double> interGBps; // per GPU across nodes; the GPU's network when not given
    double mtbfHours = 0;            // 0: keep the default
    double checkpointGBps = 0;
    double price = 0;
};

struct LayoutFlags {
    int dp = 0; // 0: world / (tp pp cp)
    int tp = 8, pp = 4, vpp = 1, cp = 1, ep = 1, zero = 1;
    int etp = 0;               // 0: the experts split as tp splits the dense weights
    int shardGroup = 0;        // 0: ZeRO shards over all dp*cp ranks
    double capacityFactor = 0; // 0: dropless MoE
    bool sp = true;
    std::string schedule = "1f1b";
    int microBatch = 1;
    int globalBatch = 512;
    std::string recompute = "selective";
    int recomputeLayers = 0; // with full recompute: layers of each virtual stage (0 = all)
    std::string precision = "bf16";
    std::string optimizer = "adamw";
    bool offload = false;
    bool flashAttention = true;
    std::string attentionKernel = "auto";
    bool fusedElementwise = true;
    bool embeddingInPipelineSplit = false, lossInPipelineSplit = false;
    bool overlapGradReduce = true, overlapParamGather = true, tpCommOverlap = false;
    std::string backwardPrefetch = "pre";
    bool epCommOverlap = false;
    double trainTokens = 15e12;
};

void addModelFlags(CLI::App& app, ModelFlags& f);
void addClusterFlags(CLI::App& app, ClusterFlags& f);
void addLayoutFlags(CLI::App& app, LayoutFlags& f, bool searchOnly = false);

// Throw InputError with a message that names the flag when a value is unusable.
ModelSpec buildModel(const ModelFlags& f);
ClusterSpec buildCluster(const ClusterFlags& f);
ParallelConfig buildLayout(const LayoutFlags& f, const ClusterSpec& cluster);
TrainConfig buildTrain(const LayoutFlags& f);

} // namespace shardscope::cli
