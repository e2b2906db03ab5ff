#include "pipeline_chunks.h"

#include "core/error.h"

#include <string>

namespace shardscope {

std::vector<ModelChunk> pipelineChunks(int layers, int pp, int vpp, int rank) {
    const int stages = pp * vpp;
    if (layers < stages)
        throw InputError("the model has " + std::to_string(layers) + " layers and the layout " +
                         std::to_string(pp) + " pipeline ranks x " + std::to_string(vpp) +
                         " chunks makes " + std::to_string(stages) +
                         " virtual stages: every stage needs a layer; lower pp or vpp");
    const int base = layers / stages, extra = layers % stages;
    auto layersOf = [&](int stage) { return base + (stage < extra ? 1 : 0); };
    std::vector<ModelChunk> chunks;
    for (int v = 0; v < vpp; ++v) {
        const int stage = v * pp + rank;
        ModelChunk c;
        for (int s = 0; s < stage; ++s)
            c.firstLayer += layersOf(s);
        c.layers = layersOf(stage);
        c.embedding = stage == 0;
        c.head = stage == stages - 1;
        chunks.push_back(c);
    }
    return chunks;
}

} // namespace shardscope
