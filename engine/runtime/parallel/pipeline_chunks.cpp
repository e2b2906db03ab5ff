#include "pipeline_chunks.h"

#include "core/error.h"

#include <algorithm>
#include <string>

namespace shardscope {

std::vector<ModelChunk> pipelineChunks(int layers, const ParallelConfig& p, int rank) {
    const int pp = std::max(1, p.pp), vpp = std::max(1, p.vpp), stages = pp * vpp;
    const int slots = p.pipelineSlots(layers);
    if (slots < stages)
        throw InputError("the model has " + std::to_string(layers) + " layers and the layout " +
                         std::to_string(pp) + " pipeline ranks x " + std::to_string(vpp) +
                         " chunks makes " + std::to_string(stages) +
                         " virtual stages: every stage needs a layer; lower pp or vpp");
    std::vector<ModelChunk> chunks;
    for (int v = 0; v < vpp; ++v) {
        const int stage = v * pp + rank;
        ModelChunk c;
        for (int s = 0; s < stage; ++s)
            c.firstLayer += layersOnChunk(layers, p, s);
        c.layers = layersOnChunk(layers, p, stage);
        c.embedding = stage == 0;
        c.head = stage == stages - 1;
        if (c.layers == 0)
            throw InputError(
                "virtual stage " + std::to_string(stage) + " would hold only the " +
                (c.embedding ? "embedding" : "loss") +
                ": the engine needs a layer on every stage; lower pp or vpp, or "
                "turn off " +
                (c.embedding ? "embedding_in_pipeline_split" : "loss_in_pipeline_split"));
        chunks.push_back(c);
    }
    return chunks;
}

std::vector<ModelChunk> pipelineChunks(int layers, int pp, int vpp, int rank) {
    ParallelConfig p;
    p.pp = pp;
    p.vpp = vpp;
    return pipelineChunks(layers, p, rank);
}

} // namespace shardscope
