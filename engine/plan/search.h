// Strategy search: every valid layout of a model on a cluster for a global batch, ranked by
// predicted throughput among those that fit.
#pragma once

#include "estimate.h"

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace shardscope {

struct SearchSpace {
    std::vector<int> zeroStages = {0, 1, 2, 3};
    std::vector<Recompute> recompute = {Recompute::None, Recompute::Selective, Recompute::Full};
    bool trySequenceParallel = true;
    bool tryContextParallel = true;
    bool tryInterleaved = true;
    // ZB-H1 in 1F1B's place (pp > 1, no virtual stages), and ZB-2p beside it under
    // Assumptions::optimizerPostValidation.
    bool tryZeroBubble = false;
    // ZeRO stages 1-3 also with their states sharded inside a node and replicated across nodes
    // (hybrid sharding, shard group = the dp x cp ranks of one node), where dp x cp spans more.
    bool tryHybridShard = true;
    // Expert parallelism for MoE models: every ep that divides the experts and dp x cp, and,
    // beside tp > 1, the experts folded onto the TP ranks (etp 1, ep dividing tp x dp x cp).
    bool tryExpertParallel = true;
    // Beside each full-recompute layout that fits, the same with only as many layers of each
    // virtual stage recomputed as the memory needs (Megatron-LM's --recompute-num-layers).
    bool tryRecomputeLayers = true;
    int maxVirtualStages = 4;
    int maxMicroBatch = 16;
    bool tpWithinNode = false; // when set, TP groups larger than a node are rejected
};

struct Candidate {
    ParallelConfig config;
    double memory = 0; // bytes per GPU on the most loaded stage
    double tokensPerSecond = 0;
    double stepTime = 0;
    double mfu = 0;
    bool fits = false;
};

struct SearchResult {
    std::vector<Candidate> top; // best first, only layouts that fit
    std::vector<Candidate> all; // every valid layout evaluated (when keepAll), fitting or not
    long long considered = 0;   // layouts enumerated
    long long evaluated = 0;    // layouts that passed the rules and were estimated
    long long fitting = 0;
    std::map<std::string, long long> rejected; // rule id or "memory" -> count
    bool cancelled = false;
};

struct SearchOptions {
    int topK = 10;
    bool keepAll = false;
    const std::atomic<bool>* cancel = nullptr;
    // Called now and then with the fraction done (0..1); may be empty.
    std::function<void(double)> progress;
};

// `base` supplies what is not searched: precision, optimizer, offload and the global batch.
SearchResult searchLayouts(const ModelSpec& model, const ClusterSpec& cluster,
                           const ParallelConfig& base, const TrainConfig& train,
                           const Assumptions& assume, const SearchSpace& space,
                           const SearchOptions& options = {});

// Indices of the candidates no other candidate beats on both memory (lower) and throughput
// (higher), ordered by increasing memory. Only fitting candidates are considered.
std::vector<std::size_t> paretoFront(const std::vector<Candidate>& candidates);

} // namespace shardscope
