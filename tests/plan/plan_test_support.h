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

// Mixtral 8x7B as Jiang et al. 2024 ("Mixtral of Experts", Table 1) give it: dim 4096, 32
// layers, 32 heads of 128 (8 KV heads), SwiGLU experts of 14336, 8 experts with top-2 routing,
// vocabulary 32000; RMSNorm, rotary positions, no biases, untied head.
inline ModelSpec mixtral8x7b(int seq = 4096) {
    ModelSpec m;
    m.name = "Mixtral 8x7B";
    m.layers = 32;
    m.hidden = 4096;
    m.heads = 32;
    m.kvHeads = 8;
    m.ffnHidden = 14336;
    m.vocab = 32000;
    m.seqLen = m.maxPositions = seq;
    m.activation = Activation::SwiGlu;
    m.norm = Norm::RmsNorm;
    m.positions = PositionEmbedding::Rope;
    m.moe.experts = 8;
    m.moe.topK = 2;
    return m;
}

// DeepSeekMoE 16B as Dai et al. 2024 (arXiv 2401.06066) and its config.json give it: 28 layers of
// width 2048, 16 heads, a dense first layer (MLP 10944 wide), then 64 routed experts of 1408 with
// top-6 routing and 2 shared experts; vocabulary 102400, untied head.
inline ModelSpec deepSeekMoe16b(int seq = 4096) {
    ModelSpec m;
    m.name = "DeepSeekMoE 16B";
    m.layers = 28;
    m.hidden = 2048;
    m.heads = m.kvHeads = 16;
    m.ffnHidden = 10944;
    m.vocab = 102400;
    m.seqLen = m.maxPositions = seq;
    m.moe.experts = 64;
    m.moe.topK = 6;
    m.moe.sharedExperts = 2;
    m.moe.expertFfn = 1408;
    m.moe.firstDenseLayers = 1;
    return m;
}

// DeepSeek-V2-Lite as the DeepSeek-V2 paper's appendix and its config.json give it: multi-head
// latent attention with no query bottleneck (16 heads, 128 + 64 query-key and 128 value
// dimensions a head, a 512-wide key-value latent) over width 2048, 27 layers, the first dense
// (MLP 10944), then 64 routed experts of 1408 (top-6) and 2 shared.
inline ModelSpec deepSeekV2Lite(int seq = 4096) {
    ModelSpec m = deepSeekMoe16b(seq);
    m.name = "DeepSeek-V2-Lite";
    m.layers = 27;
    m.headDim = 128;
    m.mla.kvLoraRank = 512;
    m.mla.qkNopeHeadDim = 128;
    m.mla.qkRopeHeadDim = 64;
    m.mla.vHeadDim = 128;
    return m;
}

// The same shapes with every layer dense: what a dense first layer is, counted a second way.
inline ModelSpec withoutExperts(ModelSpec m) {
    m.moe = MoeSpec{};
    return m;
}

// The routed experts' weights of that model: 32 layers x 8 experts x 3 matrices of 4096 x 14336.
inline constexpr double kMixtralRoutedExperts = 32.0 * 8 * 3 * 4096 * 14336;

} // namespace shardscope::test
