// Small builders shared by the planner tests.
#pragma once

#include "core/presets.h"
#include "plan/estimate.h"

namespace shardscope::test {

inline PlanInputs inputs(const std::string& model, const std::string& gpu, int gpusPerNode,
                         int nodes, ParallelConfig p) {
    PlanInputs in;
    in.model = findModelPreset(model);
    in.cluster = makeCluster(findGpuPreset(gpu), gpusPerNode, nodes);
    in.parallel = p;
    return in;
}

inline ParallelConfig layout(int dp, int tp, int pp, int globalBatch, int zero = 0) {
    ParallelConfig p;
    p.dp = dp;
    p.tp = tp;
    p.pp = pp;
    p.globalBatch = globalBatch;
    p.zero = zero;
    return p;
}

// A GPT-3-style model (GELU, MHA, dropout, ffn = 4h) as in Korthikanti et al. 2022.
inline ModelSpec gptStyle(int layers, int hidden, int heads, int seq, long long vocab = 51200) {
    ModelSpec m;
    m.name = "gpt-style";
    m.layers = layers;
    m.hidden = hidden;
    m.heads = m.kvHeads = heads;
    m.ffnHidden = 4LL * hidden;
    m.vocab = vocab;
    m.seqLen = m.maxPositions = seq;
    m.activation = Activation::Gelu;
    m.norm = Norm::LayerNorm;
    m.positions = PositionEmbedding::Learned;
    m.attentionBias = m.outputBias = m.mlpBias = true;
    m.dropout = true;
    m.tiedEmbeddings = true;
    return m;
}

} // namespace shardscope::test
