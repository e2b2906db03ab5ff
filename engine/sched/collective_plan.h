// Collective algorithms as step lists: in each step some ranks send one chunk of their buffer to
// another rank, which adds it to its own (reduce) or takes it (gather). The Collectives page
// animates the steps, a test executes them on real vectors, and the alpha-beta model times them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace shardscope {

enum class CollectiveKind {
    RingAllReduce,     // reduce-scatter then all-gather around a ring: 2(n-1) steps
    RingAllGather,     // n-1 steps
    RingReduceScatter, // n-1 steps
    NaiveAllReduce,    // each rank in turn sends its buffer to rank 0, which sends the sum back
    TwoLevelAllReduce, // ring inside each node, ring across nodes, ring inside each node
};
std::string toString(CollectiveKind k);                    // "ring-allreduce", ...
CollectiveKind collectiveFromString(const std::string& s); // throws InputError listing the names

struct ChunkTransfer {
    int from = 0;
    int to = 0;
    int chunk = 0;
    bool reduce = true; // the receiver adds the chunk to its own; otherwise it replaces its own
};

struct CollectiveStep {
    std::string phase; // "reduce-scatter", "all-gather", "reduce to rank 0", ...
    std::vector<ChunkTransfer> transfers;
};

struct CollectiveSpec {
    CollectiveKind kind = CollectiveKind::RingAllReduce;
    int ranks = 8;
    int gpusPerNode = 8; // for the two-level algorithm: ranks = nodes x gpusPerNode
};

struct CollectivePlan {
    CollectiveSpec spec;
    int chunks = 1; // every buffer is split into this many equal chunks
    std::vector<CollectiveStep> steps;
};

// Throws InputError for fewer than 2 ranks, more than 1024, or a two-level shape whose ranks
// are not a multiple of gpusPerNode.
CollectivePlan buildCollective(const CollectiveSpec& spec);

// Run the steps on real buffers (one per rank, each a multiple of `chunks` long). All transfers of
// a step read the buffers as they were before the step. For all-reduce every rank ends with the
// element-wise sum; for reduce-scatter rank i's chunk i is the sum; for all-gather every rank
// ends with every rank's chunk i from rank i.
std::vector<std::vector<double>> runCollective(const CollectivePlan& plan,
                                               std::vector<std::vector<double>> buffers);

// Whose data each chunk of each rank holds, before any step and after each one: bit r of
// sources[step][rank][chunk] is set when rank r's contribution is in it. The symbolic
// counterpart of runCollective, for animations; needs at most 64 ranks.
using ChunkSources = std::vector<std::vector<std::uint64_t>>;
std::vector<ChunkSources> chunkSourcesByStep(const CollectivePlan& plan);

// One sentence per step for a student, saying what moves, from whom to whom, and why: "Step 3
// of 14, reduce-scatter: 8 GPUs each pass one chunk to the next GPU in their ring; GPU 1
// adds chunk 5 from GPU 0, so its chunk 5 now sums 4 of 8 GPUs' data. After 7 steps of
// reduce-scatter (4 more) each GPU owns one fully reduced chunk." Then one more line for the
// finished state. Needs at most 64 ranks, as chunkSourcesByStep does.
std::vector<std::string> narrateCollective(const CollectivePlan& plan);

// Links between ranks: NVLink-class inside a node, network across nodes.
struct LinkModel {
    int gpusPerNode = 8;
    double intraBandwidth = 450e9; // bytes/s per GPU per direction
    double intraLatency = 3e-6;
    double interBandwidth = 50e9;
    double interLatency = 10e-6;
};

struct CollectiveTiming {
    std::vector<double> stepSeconds;
    double seconds = 0;
    double bytes = 0; // S as nccl-tests counts it (all-reduce: the buffer; all-gather: output)
    double algbw = 0; // S / seconds
    double busbw = 0; // algbw x busBandwidthFactor
    std::vector<double> sentPerRank;               // bytes each rank sends in all
    std::map<std::pair<int, int>, double> perLink; // (from, to) -> bytes over that link
    double busiestRank = 0;                        // most bytes any rank sends
    double busiestLink = 0;                        // most bytes over any one link
};

// nccl-tests' bus-bandwidth factor: 2(n-1)/n for all-reduce, (n-1)/n for all-gather and
// reduce-scatter (docs/PERFORMANCE.md of nccl-tests).
double busBandwidthFactor(CollectiveKind kind, int ranks);

// Alpha-beta time of each step: the latency of the slowest link used plus the longest time any
// rank spends sending or receiving its chunks (a rank's transfers in one step share its links).
// `bytes` is S as nccl-tests counts it.
CollectiveTiming timeCollective(const CollectivePlan& plan, double bytes, const LinkModel& links);

} // namespace shardscope
