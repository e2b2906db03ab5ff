#include "layout.h"

#include <algorithm>
#include <cstdint>
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

RecomputeMix recomputeMixOf(const ParallelConfig& p) {
    RecomputeMix mix{p, p};
    mix.every.recomputeLayers = 0;
    mix.none.recompute = Recompute::None;
    mix.none.recomputeLayers = 0;
    return mix;
}

double fullRecomputeShare(const ModelSpec& m, const ParallelConfig& p, int stage) {
    if (p.recompute != Recompute::Full)
        return 0.0;
    if (!recomputesSomeLayers(m, p))
        return 1.0;
    const int pp = std::max(1, p.pp), chunks = pp * std::max(1, p.vpp);
    int held = 0, recomputed = 0;
    for (int chunk = 0; chunk < chunks; ++chunk)
        if (stage < 0 || chunk % pp == stage) {
            held += layersOnChunk(m.layers, p, chunk);
            recomputed += recomputedLayersOnChunk(m.layers, p, chunk);
        }
    return held > 0 ? double(recomputed) / held : 0.0;
}

StageLayers stageLayers(const ModelSpec& m, const ParallelConfig& p, int stage) {
    StageLayers s;
    if (m.isBare())
        return s;
    // The MTP modules' layers run on the last stage, after the model's.
    if (stage == std::max(1, p.pp) - 1)
        (m.mtpLayerKind() == LayerKind::Moe ? s.moe : s.dense) += m.mtpModules;
    if (!m.moe.enabled() || m.moe.firstDenseLayers <= 0) { // one kind of layer (the search's case)
        (m.moe.enabled() ? s.moe : s.dense) += layersOnStage(m, p, stage);
        return s;
    }
    const int pp = std::max(1, p.pp), vpp = std::max(1, p.vpp), chunks = pp * vpp;
    const int slots = p.pipelineSlots(m.layers);
    const int base = slots / chunks, extra = slots % chunks;
    const int dense = m.denseLayerCount();
    for (int v = 0; v < vpp; ++v) {
        const int chunk = v * pp + stage;
        const int held = layersOnChunk(m.layers, p, chunk);
        // The chunk's first layer: the slots before it, less the embedding's where it has one.
        const int before = chunk * base + std::min(chunk, extra) -
                           (chunk > 0 && p.embeddingInPipelineSplit ? 1 : 0);
        const int denseHere = std::clamp(dense - before, 0, held);
        s.dense += denseHere;
        s.moe += held - denseHere;
    }
    return s;
}

double layerParamsPerTpRank(const ModelSpec& m, const ParamCount& c, int tp, int ep, int etp,
                            LayerKind kind) {
    const double t = std::max(1, tp);
    const double routed = c.layerRoutedExperts(kind);
    const double routedHeld = routed / (double(std::max(1, ep)) * (etp > 0 ? etp : t));
    double attention = c.attentionPerLayer;
    // Each rank keeps a whole KV head: replicas add weights.
    attention += 2.0 * m.hidden * (kvDimOverTpGroup(m, tp) - double(m.kvDim()));
    // The biases of the row-parallel output projections are added after the sum, so every rank
    // keeps them whole (Megatron-LM's RowParallelLinear).
    const double replicatedBiases =
        m.moe.enabled() ? 0.0 : double(m.hidden) * ((m.outputBias ? 1 : 0) + (m.mlpBias ? 1 : 0));
    const double replicated = replicatedBiases + c.attentionReplicatedPerLayer;
    return (attention + c.layerMlp(kind) - routed - replicated) / t + routedHeld + replicated +
           c.normsPerLayer;
}

namespace {
// The parameters of the stage's transformer layers on one rank.
double layerParamsOnStage(const ModelSpec& m, const ParamCount& c, const ParallelConfig& p,
                          int stage) {
    const StageLayers layers = stageLayers(m, p, stage);
    double params = 0;
    for (const LayerKind kind : {LayerKind::Dense, LayerKind::Moe})
        if (layers.of(kind) > 0)
            params += layers.of(kind) * layerParamsPerTpRank(m, c, p.tp, p.ep, p.etp, kind);
    return params;
}
} // namespace

double paramsOnStage(const ModelSpec& m, const ParamCount& c, const ParallelConfig& p, int stage) {
    if (m.isBare())
        return c.total / (std::max(1, p.tp) * std::max(1, p.pp));
    return layerParamsOnStage(m, c, p, stage) + nonLayerParamsOnStage(m, c, p, stage);
}

double nonLayerParamsOnStage(const ModelSpec& m, const ParamCount& c, const ParallelConfig& p,
                             int stage) {
    if (m.isBare())
        return 0.0;
    const double t = std::max(1, p.tp);
    double params = 0;
    if (stage == 0) { // the vocabulary is split; learned positions are kept whole on every rank
        const double positions = c.embeddings - double(m.vocab) * m.hidden;
        params += (c.embeddings - positions) / t + positions;
    }
    if (stage == p.pp - 1) {
        // A tied LM head on a separate last stage keeps its own copy of the embedding matrix.
        const double head = c.lmHead > 0 ? c.lmHead : (p.pp > 1 ? double(m.vocab) * m.hidden : 0.0);
        params += head / t + c.finalNorm;
        params += mtpParamsBesideLayers(m, c, p); // their layers are counted with the layers
    }
    return params;
}

GemmWeights gemmWeightsOnStage(const ModelSpec& m, const ParamCount& c, const ParallelConfig& p,
                               int stage) {
    if (m.isBare())
        return {};
    GemmWeights w;
    w.layers = layerParamsOnStage(m, c, p, stage) - c.normsPerLayer * layersOnStage(m, p, stage);
    w.head = stage == p.pp - 1 ? double(m.vocab) * m.hidden / std::max(1, p.tp) : 0.0;
    return w;
}

double meanWeightBytes(const PrecisionPolicy& prec, const GpuSpec& gpu, double params,
                       double nonLayerParams) {
    if (params <= 0)
        return prec.weightBytesOn(gpu);
    return ((params - nonLayerParams) * prec.weightBytesOn(gpu) +
            nonLayerParams * prec.nonLayerWeightBytesOn(gpu)) /
           params;
}

double mtpParamsBesideLayers(const ModelSpec& m, const ParamCount& c, const ParallelConfig& p) {
    if (m.isBare() || m.mtpModules <= 0)
        return 0.0;
    const double t = std::max(1, p.tp), projection = 2.0 * m.hidden * m.hidden;
    double params =
        m.mtpModules * (c.mtpPerModule - c.layer(m.mtpLayerKind()) - projection + projection / t);
    if (p.pp > 1 && c.lmHead > 0) // a tied head's copy on the last stage already serves
        params += double(m.vocab) * m.hidden / t;
    return params;
}

double expertParamsOnStage(const ModelSpec& m, const ParamCount& c, const ParallelConfig& p,
                           int stage) {
    if (m.isBare() || c.routedExpertsPerLayer <= 0)
        return 0.0;
    return stageLayers(m, p, stage).moe * c.routedExpertsPerLayer /
           (double(p.expertTp()) * std::max(1, p.ep));
}

double shardedParamsOnRank(const ParallelConfig& p, double params, double expertParams) {
    const double apart = p.expertsApart() ? expertParams : 0.0;
    return (params - apart) / std::max(1, p.zeroShards()) + apart / p.expertDataParallel();
}

namespace {

// How the groups of an axis (size members, `stride` ranks apart; groups side by side, then in
// blocks of size x stride ranks) sit on nodes of `gpn` GPUs in a cluster of `gpus`: whether any
// group crosses a node, and the fewest members any crossing group has on one node, whose NICs
// carry its ring between nodes.
struct NodeSpan {
    bool crosses = false;
    int fewest = 1;
};

NodeSpan spanNodes(int size, int stride, int gpn, long long gpus) {
    const long long n = std::max(1, size), s = std::max(1, stride), g = std::max(1, gpn);
    const long long span = n * s;
    if (span <= g && g % span == 0) // every group inside a node
        return {false, int(n)};
    if (s >= g) // a node holds at most one member of a group
        return {true, 1};
    if (span % g == 0 && g % s == 0) // whole nodes, gpn / stride members on each
        return {true, int(g / s)};
    // Groups out of step with the nodes (a stride or size that does not divide them): walk the
    // starts a node can see, each group's nodes (fewer than `s` in a repeat) and its last one.
    NodeSpan out{false, int(n)};
    for (long long block = 0; block < g && block * span < std::max(gpus, span); ++block)
        for (long long offset = 0; offset < s; ++offset) {
            const long long start = (block * span + offset) % g;
            const long long lastNode = (start + (n - 1) * s) / g;
            if (lastNode == 0)
                continue;
            out.crosses = true;
            const auto before = [&](long long rank) { // members below `rank`
                return std::clamp((rank - start + s - 1) / s, 0LL, n);
            };
            const auto on = [&](long long node) {
                return before((node + 1) * g) - before(node * g);
            };
            const auto count = [&](long long node) {
                out.fewest = int(std::min<long long>(out.fewest, on(node)));
            };
            const long long walk = std::min(lastNode, s); // the pattern repeats within `s` nodes
            for (long long node = 0; node <= walk; ++node)
                count(node);
            if (lastNode > walk)
                count(lastNode);
        }
    return out;
}

} // namespace

GroupPlacement placeGroup(const ClusterSpec& cluster, const Assumptions& a, int size, int stride,
                          Traffic traffic) {
    GroupPlacement g;
    g.size = std::max(1, size);
    g.stride = std::max(1, stride);
    const NodeSpan nodes = spanNodes(g.size, g.stride, cluster.gpusPerNode,
                                     std::int64_t(cluster.gpusPerNode) * cluster.nodes);
    g.crossesNodes = nodes.crosses;
    double link = cluster.intraBandwidth;
    if (g.crossesNodes) {
        // NCCL runs a ring (channel) per NIC: a collective whose group has k members on each node
        // crosses between nodes over those k GPUs' NICs at once, as fast as NVLink allows. A
        // point-to-point send goes out through the sender's own NIC.
        const int members = traffic == Traffic::Collective ? nodes.fewest : 1;
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
    case Axis::EP: // etp ranks apart on the experts' mesh; an all-to-all sends point to point
        return placeGroup(cluster, a, p.ep, p.expertTp(), Traffic::PointToPoint);
    }
    return {};
}

double allToAllSeconds(const ClusterSpec& cluster, const Assumptions& a, int size, int stride,
                       double bytes) {
    if (size <= 1 || bytes <= 0)
        return 0.0;
    const NodeSpan nodes = spanNodes(size, stride, cluster.gpusPerNode,
                                     std::int64_t(cluster.gpusPerNode) * cluster.nodes);
    const double n = size, local = nodes.crosses ? nodes.fewest : size;
    const double intra = cluster.intraBandwidth * a.commEfficiency;
    const double inter = cluster.interBandwidth * a.commEfficiency;
    const double inside = local > 1 && intra > 0 ? bytes * (local - 1) / n / intra : 0.0;
    const double across = n > local && inter > 0 ? bytes * (n - local) / n / inter : 0.0;
    return (nodes.crosses ? cluster.interLatency : cluster.intraLatency) + std::max(inside, across);
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
