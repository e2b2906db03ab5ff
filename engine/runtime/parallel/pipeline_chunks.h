// Pipeline parallelism's share of the model: which contiguous runs of layers (chunks, or virtual
// stages) a pipeline rank holds, dealt exactly as the planner deals them, so the engine's stages
// hold the layers the planner predicted memory and compute for.
#pragma once

#include "core/parallel_config.h"

#include <vector>

namespace shardscope {

// One virtual pipeline stage: a contiguous run of layers; the first stage of the model also embeds
// the tokens, and the last has the final norm, the LM head and the loss.
struct ModelChunk {
    int firstLayer = 0, layers = 0;
    bool embedding = false, head = false;
};

// The chunks pipeline rank `rank` of `pp` holds with `vpp` chunks each, for a model of `layers`
// layers: virtual stage chunk * pp + rank, engine/sched's numbering, with layers dealt as
// plan/layout's layersOnStage deals them (the remainder to the first virtual stages). Throws
// InputError when a virtual stage would get no layer.
std::vector<ModelChunk> pipelineChunks(int layers, int pp, int vpp, int rank);
// The same for a layout that may count the embedding and the loss as layers
// (ParallelConfig::embeddingInPipelineSplit, lossInPipelineSplit): dealt by core's
// layersOnChunk. Throws InputError when a stage would hold only the embedding or the loss.
std::vector<ModelChunk> pipelineChunks(int layers, const ParallelConfig& p, int rank);

} // namespace shardscope
