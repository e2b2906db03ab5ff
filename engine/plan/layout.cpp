#include "layout.h"

#include <algorithm>
#include <numeric>

namespace shardscope {

int layersOnStage(const ModelSpec& m, const ParallelConfig& p, int stage) {
    if (m.isBare())
        return 0;
    const int pp = std::max(1, p.pp), vpp = std::max(1, p.vpp);
    int layers = 0;
    for (int v = 0; v < vpp; ++v)
        layers += layersOnChunk(m.layers, p, v * pp + stage);
    return layers;
}

double layerParamsPerTpRank(const ModelSpec& m, const ParamCount& c, int tp) {
    const double t = std::max(1, tp);
    double attention = c.attentionPerLayer;
    if (m.kvHeads > 0 && t > m.kvHeads) // each rank keeps a whole KV head: replicas add weights
        attention += 2.0 * m.hidden * double(m.kvDim()) * (t / m.kvHeads - 1.0);
    // The biases of the row-parallel output projections are added after the sum, so every rank
    // keeps them whole (Megatron-LM's RowParallelLinear).
    const double replicatedBiases =
        m.moe.enabled() ? 0.0 : double(m.hidden) * ((m.outputBias ? 1 : 0) + (m.mlpBias ? 1 : 0));
    return (attention + c.mlpPerLayer - replicatedBiases) / t + replicatedBiases + c.normsPerLayer;
}

double paramsOnStage(const ModelSpec& m, const ParamCount& c, const ParallelConfig& p, int stage) {
    const double t = std::max(1, p.tp);
    if (m.isBare())
        return c.total / (t * std::max(1, p.pp));
    double params = layersOnStage(m, p, stage) * layerParamsPerTpRank(m, c, p.tp);
    const bool first = stage == 0, last = stage == p.pp - 1;
    if (first) { // the vocabulary is split; learned positions are kept whole on every rank
        const double positions = c.embeddings - double(m.vocab) * m.hidden;
        params += (c.embeddings - positions) / t + positions;
    }
    if (last) {
        // A tied LM head on a separate last stage keeps its own copy of the embedding matrix.
        const double head = c.lmHead > 0 ? c.lmHead : (p.pp > 1 ? double(m.vocab) * m.hidden : 0.0);
        params += head / t + c.finalNorm;
    }
    return params;
}

namespace {

// Members of a group (ranks 0, stride, 2 stride, ...) on the node that holds the fewest of them:
// its NICs carry the ring between nodes. The count per node repeats every `stride` nodes at most
// (fewer than a node's GPUs, else each node holds one), so those and the group's last node are all
// there is to look at.
int fewestMembersOnANode(int size, int stride, int gpusPerNode) {
    const long long s = std::max(1, stride), gpn = std::max(1, gpusPerNode);
    if (s >= gpn) // a node holds at most one member
        return 1;
    const long long lastNode = (std::max(1, size) - 1LL) * s / gpn;
    const auto before = [&](long long rank) { // members whose rank is below `rank`
        return std::min<long long>(std::max(1, size), (rank + s - 1) / s);
    };
    const auto on = [&](long long node) { return before((node + 1) * gpn) - before(node * gpn); };
    long long fewest = on(lastNode);
    for (long long node = 0; node < lastNode && node < s; ++node)
        if (const long long n = on(node); n > 0) // a stride past the node skips nodes
            fewest = std::min(fewest, n);
    return int(std::max(1LL, fewest));
}

} // namespace

GroupPlacement placeGroup(const ClusterSpec& cluster, const Assumptions& a, int size, int stride,
                          Traffic traffic) {
    GroupPlacement g;
    g.size = std::max(1, size);
    g.stride = std::max(1, stride);
    g.crossesNodes = double(g.size) * g.stride > cluster.gpusPerNode;
    double link = cluster.intraBandwidth;
    if (g.crossesNodes) {
        // NCCL runs a ring (channel) per NIC: a collective whose group has k members on each node
        // crosses between nodes over those k GPUs' NICs at once, as fast as NVLink allows. A
        // point-to-point send goes out through the sender's own NIC.
        const int members = traffic == Traffic::Collective
                                ? fewestMembersOnANode(g.size, g.stride, cluster.gpusPerNode)
                                : 1;
        link = std::min(cluster.intraBandwidth > 0 ? cluster.intraBandwidth : 1e300,
                        members * cluster.interBandwidth);
    }
    g.bandwidth = link * a.commEfficiency;
    g.latency = g.crossesNodes ? cluster.interLatency : cluster.intraLatency;
    return g;
}

GroupPlacement placeAxis(const ClusterSpec& cluster, const ParallelConfig& p, const Assumptions& a,
                         Axis axis) {
    switch (axis) {
    case Axis::TP:
        return placeGroup(cluster, a, p.tp, 1);
    case Axis::CP: // ring attention passes keys and values to the next rank: sends, not a ring
        return placeGroup(cluster, a, p.cp, p.tp, Traffic::PointToPoint);
    case Axis::DP:
        return placeGroup(cluster, a, p.dp * p.cp, p.tp); // ZeRO shards over dp x cp
    case Axis::PP:
        return placeGroup(cluster, a, p.pp, p.tp * p.cp * p.dp, Traffic::PointToPoint);
    }
    return {};
}

RankCoordinate rankCoordinate(const ParallelConfig& p, int rank, int gpusPerNode) {
    RankCoordinate c;
    const int tp = std::max(1, p.tp), cp = std::max(1, p.cp), dp = std::max(1, p.dp);
    c.tp = rank % tp;
    c.cp = (rank / tp) % cp;
    c.dp = (rank / (tp * cp)) % dp;
    c.pp = rank / (tp * cp * dp);
    c.node = rank / std::max(1, gpusPerNode);
    c.tpGroup = rank / tp;
    return c;
}

ClusterSpec clusterForWorld(const ClusterSpec& cluster, int world) {
    ClusterSpec c = cluster;
    world = std::max(1, world);
    const int node = std::max(1, cluster.gpusPerNode);
    c.gpusPerNode = world % node == 0 ? node : world < node ? world : std::gcd(world, node);
    c.nodes = world / c.gpusPerNode;
    return c;
}

bool tpCrossesNodes(const ParallelConfig& p, int gpusPerNode) {
    // TP groups are contiguous blocks of tp ranks: they stay inside nodes exactly when tp
    // divides the node size.
    return p.tp > gpusPerNode || (gpusPerNode % std::max(1, p.tp)) != 0;
}

} // namespace shardscope
