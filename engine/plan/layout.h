// How a layout places the model on ranks: layers and parameters per pipeline stage, and where
// each parallel group sits in the cluster. Shared by the memory, compute and communication models.
#pragma once

#include "estimate.h"

namespace shardscope {

// Transformer layers held by pipeline rank `stage`: the sum over its chunks of layersOnChunk
// (core/parallel_config.h), the remainder to the first chunks, the embedding's and the loss's
// slots taken from the first and last where the layout counts them.
int layersOnStage(const ModelSpec& m, const ParallelConfig& p, int stage);

// Full recompute that covers only some layers of each virtual stage (recomputeLayers) makes a
// stage, layer by layer, a mix of the same layout recomputing every layer and recomputing none.
// Where that is so, `every` and `none` are those two layouts, and `share` weighs them for a stage.
struct RecomputeMix {
    ParallelConfig every, none;
};
inline bool recomputesSomeLayers(const ModelSpec& m, const ParallelConfig& p) {
    return p.recompute == Recompute::Full && p.recomputeLayers > 0 && !m.isBare();
}
RecomputeMix recomputeMixOf(const ParallelConfig& p);
// The share of pipeline rank `stage`'s layers that rerun their forward under full recompute (1
// where every layer does, 0 under the other policies); stage -1: over the whole model.
double fullRecomputeShare(const ModelSpec& m, const ParallelConfig& p, int stage = -1);

// The same layers by kind: an MoE model's first dense layers (moe.firstDenseLayers) sit on the
// first chunks, so on pipeline rank 0 unless they outnumber its first chunk's layers. Every
// layer of a dense model is dense. The last stage also runs the MTP modules' layers
// (ModelSpec::mtpModules), of the model's last kind.
struct StageLayers {
    int dense = 0;
    int moe = 0;
    int total() const { return dense + moe; }
    int of(LayerKind kind) const { return kind == LayerKind::Moe ? moe : dense; }
};
StageLayers stageLayers(const ModelSpec& m, const ParallelConfig& p, int stage);

// MLPs a token runs through in a layer of this kind: one in a dense layer; in an MoE layer its
// top-k routed experts, padded to the capacity factor, and the shared experts.
// Inline: the search calls both for every stage it plans.
inline double mlpsPerToken(const ModelSpec& m, LayerKind kind, const ParallelConfig& p) {
    return m.routes(kind) ? m.moe.topK * p.expertLoad() + m.moe.sharedExperts : 1.0;
}

// Keys' and values' width summed over a tensor-parallel group's ranks: kvDim, more where tp
// outnumbers the kv heads and each rank keeps a whole replicated head (Megatron-LM).
inline double kvDimOverTpGroup(const ModelSpec& m, int tp) {
    return tp > m.kvHeads && m.kvHeads > 0 ? double(m.kvDim()) * tp / m.kvHeads : double(m.kvDim());
}

// Parameters of one transformer layer of `kind` held by one tensor-parallel rank. Norms and MLA's
// down projections are replicated; K/V projections are replicated when tp exceeds the KV head
// count; the routed experts are split over ep x etp ranks instead (etp 0 follows tp,
// Megatron-Core's default).
double layerParamsPerTpRank(const ModelSpec& m, const ParamCount& c, int tp, int ep = 1,
                            int etp = 0, LayerKind kind = LayerKind::Moe);

// Parameters held by one rank of pipeline stage `stage` (before ZeRO-3 sharding), and the part
// of them that are routed experts' (sharded by ZeRO over the expert data-parallel ranks).
double paramsOnStage(const ModelSpec& m, const ParamCount& c, const ParallelConfig& p, int stage);
// Of those, the ones outside the stage's transformer layers: the embeddings, the output head,
// the final norm and the MTP modules' projections (0 for a bare parameter count).
double nonLayerParamsOnStage(const ModelSpec& m, const ParamCount& c, const ParallelConfig& p,
                             int stage);
// The weights a stage's GEMMs multiply on one rank: its layers' parameters less their norms,
// and the output head's on the last stage (the embedding lookup multiplies nothing). What
// autocast over fp32 weights casts to bf16 as each GEMM runs (0 for a bare parameter count).
struct GemmWeights {
    double layers = 0;
    double head = 0;
};
GemmWeights gemmWeightsOnStage(const ModelSpec& m, const ParamCount& c, const ParallelConfig& p,
                               int stage);
// Bytes a parameter of a rank's weights take on a GPU, on average over `params` of which
// `nonLayerParams` lie outside the layers. FP8 weights (PrecisionPolicy::fp8Params) are the
// layers' linear weights, which Transformer Engine quantizes; the embeddings, the output head and
// the final norm stay bf16 (Megatron-Core's fp8_param_gather covers TE modules only). Any other
// policy holds every weight alike.
double meanWeightBytes(const PrecisionPolicy& prec, const GpuSpec& gpu, double params,
                       double nonLayerParams);
// What the MTP modules add to the last stage beside their layers: each module's projection
// (split over tp) and norms, and with pp > 1 and an untied head a copy of the embedding the
// modules look the next tokens up in (Megatron-Core builds it where MTP runs).
double mtpParamsBesideLayers(const ModelSpec& m, const ParamCount& c, const ParallelConfig& p);
double expertParamsOnStage(const ModelSpec& m, const ParamCount& c, const ParallelConfig& p,
                           int stage);
// Of `params` on a rank (`expertParams` of them routed experts'), the share whose state ZeRO
// leaves it: the dense ones over ZeRO's shards, the experts' on a mesh of their own (ep, or etp
// apart from tp) over the tp*dp*cp/(etp*ep) ranks holding the same experts (otherwise they shard
// with the rest).
double shardedParamsOnRank(const ParallelConfig& p, double params, double expertParams);

// Ranks are numbered tp fastest, then cp, dp, pp (Megatron's default order), so TP groups are
// contiguous and a group crosses nodes when its span exceeds a node.
struct GroupPlacement {
    int size = 1;
    int stride = 1;
    bool crossesNodes = false;
    double bandwidth = 0; // per GPU, after commEfficiency
    double latency = 0;
};
// A collective's group crossing nodes moves its data over the NICs of all its members on a node
// at once (a ring per NIC, as NCCL builds them on rail-optimised clusters); pipeline sends go
// one GPU to one GPU.
enum class Traffic { Collective, PointToPoint };
GroupPlacement placeGroup(const ClusterSpec& cluster, const Assumptions& a, int size, int stride,
                          Traffic traffic = Traffic::Collective);
GroupPlacement placeAxis(const ClusterSpec& cluster, const ParallelConfig& p, const Assumptions& a,
                         Axis axis);

// One all-to-all in which each of `size` ranks (`stride` apart) holds `bytes` and sends 1/size of
// them to every other member: the latency, then the slower of the part sent inside the node (over
// NVLink) and the part sent to other nodes (over the rank's own NIC, as NCCL's all-to-all sends
// point to point); the rank on the node with the fewest members sends the most across.
double allToAllSeconds(const ClusterSpec& cluster, const Assumptions& a, int size, int stride,
                       double bytes);

// Where global rank `rank` sits in each parallel group, in the order placeAxis assumes.
struct RankCoordinate {
    int dp = 0, tp = 0, pp = 0, cp = 0;
    int node = 0;    // node index for a cluster of `gpusPerNode`
    int tpGroup = 0; // index of its tensor-parallel group (ranks sharing dp, pp and cp)
};
RankCoordinate rankCoordinate(const ParallelConfig& p, int rank, int gpusPerNode);

// True when some tensor-parallel group spans more than one node.
bool tpCrossesNodes(const ParallelConfig& p, int gpusPerNode);

// The cluster a layout of `world` GPUs occupies, for questions that do not depend on the
// network (memory): whole nodes of cluster.gpusPerNode when `world` is a multiple of it, one
// partial node when it is smaller, otherwise nodes of gcd(world, gpusPerNode) GPUs.
ClusterSpec clusterForWorld(const ClusterSpec& cluster, int world);

// Tokens of one microbatch on one context-parallel rank.
inline double localTokens(const ModelSpec& m, const ParallelConfig& p) {
    return double(m.seqLen) / std::max(1, p.cp) * p.microBatch;
}

} // namespace shardscope
