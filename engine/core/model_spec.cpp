#include "model_spec.h"

namespace shardscope {

namespace {

double normParams(const ModelSpec& m) {
    return m.norm == Norm::LayerNorm ? 2.0 * m.hidden : 1.0 * m.hidden; // weight (+ bias)
}

// One expert's (or a dense model's) MLP of width `ffn`.
double mlpParams(const ModelSpec& m, double ffn) {
    const double h = m.hidden;
    const double matrices = m.gated() ? 3.0 : 2.0;
    double bias = 0;
    if (m.mlpBias)
        bias = (m.gated() ? 2.0 * ffn : ffn) + h;
    return matrices * h * ffn + bias;
}

} // namespace

ParamCount countParameters(const ModelSpec& m) {
    ParamCount c;
    if (m.isBare()) {
        c.total = c.active = *m.bareParams;
        return c;
    }
    const double h = m.hidden, V = double(m.vocab), L = m.layers;
    const double q = double(m.qDim()), kv = double(m.kvDim());

    c.embeddings = V * h;
    if (m.positions == PositionEmbedding::Learned)
        c.embeddings += double(m.maxPositions) * h;
    c.lmHead = m.tiedEmbeddings ? 0.0 : V * h;

    if (m.mla.enabled()) {
        // DeepSeek-V2/V3's modeling code: q_a_proj, its norm and q_b_proj (or one q_proj),
        // kv_a_proj_with_mqa (the latent and the shared rotary key), its norm, kv_b_proj (a key's
        // position-free part and a value, per head), o_proj.
        const MlaSpec& a = m.mla;
        const double scores = double(m.scoreDim()), values = double(m.valueDim());
        const double qLora = a.qLoraRank, kvLora = a.kvLoraRank;
        const double qDown = qLora > 0 ? h * qLora + qLora : 0.0;
        const double kvDown = h * (kvLora + a.qkRopeHeadDim) + kvLora;
        const double qUp = (qLora > 0 ? qLora : h) * scores;
        const double kvUp = kvLora * m.heads * double(a.qkNopeHeadDim + a.vHeadDim);
        c.attentionReplicatedPerLayer = qDown + kvDown;
        c.attentionPerLayer = qDown + kvDown + qUp + kvUp + values * h;
    } else {
        c.attentionPerLayer = h * q + 2.0 * h * kv + q * h;
        if (m.attentionBias)
            c.attentionPerLayer += q + 2.0 * kv;
    }
    if (m.outputBias)
        c.attentionPerLayer += h;

    c.denseMlpPerLayer = mlpParams(m, double(m.ffnHidden));
    if (m.moe.enabled()) {
        const double expert = mlpParams(m, double(m.expertFfn()));
        const double router = h * m.moe.experts;
        c.mlpPerLayer = expert * (m.moe.experts + m.moe.sharedExperts) + router;
        c.mlpActivePerLayer = expert * (m.moe.topK + m.moe.sharedExperts) + router;
        c.routedExpertsPerLayer = expert * m.moe.experts;
    } else {
        c.mlpPerLayer = c.mlpActivePerLayer = c.denseMlpPerLayer;
    }

    c.normsPerLayer = 2.0 * normParams(m);
    c.finalNorm = normParams(m);

    const double moeLayers = m.moeLayerCount(), denseLayers = m.denseLayerCount();
    c.attention = L * c.attentionPerLayer;
    c.mlp = moeLayers * c.mlpPerLayer + denseLayers * c.denseMlpPerLayer;
    c.norms = L * c.normsPerLayer + c.finalNorm;
    // An MTP module: a layer, the projection of [norm(h); norm(embedding)] to h, and the norms
    // of its two inputs and of its output before the shared head (DeepSeek-V3's enorm, hnorm,
    // eh_proj and shared_head.norm).
    const LayerKind mtpKind = m.mtpLayerKind();
    c.mtpPerModule = c.layer(mtpKind) + 2.0 * h * h + 3.0 * normParams(m);
    c.mtp = m.mtpModules * c.mtpPerModule;
    c.total = c.embeddings + c.attention + c.mlp + c.norms + c.lmHead + c.mtp;
    c.active = c.total - moeLayers * (c.mlpPerLayer - c.mlpActivePerLayer) -
               m.mtpModules * (c.layerMlp(mtpKind) - c.layerMlpActive(mtpKind));
    return c;
}

double matmulParamsPerToken(const ModelSpec& m) {
    if (m.isBare())
        return *m.bareParams;
    const ParamCount c = countParameters(m);
    const double lmHead = double(m.vocab) * m.hidden; // the output projection runs even when tied
    // Each MTP module runs a layer, its projection and the output head once more.
    const double mtp = m.mtpModules * (c.attentionPerLayer + c.layerMlpActive(m.mtpLayerKind()) +
                                       2.0 * m.hidden * m.hidden + lmHead);
    return m.layers * c.attentionPerLayer + m.moeLayerCount() * c.mlpActivePerLayer +
           m.denseLayerCount() * c.denseMlpPerLayer + lmHead + mtp;
}

std::string toString(Activation a) {
    switch (a) {
    case Activation::Gelu:
        return "gelu";
    case Activation::SwiGlu:
        return "swiglu";
    case Activation::GeGlu:
        return "geglu";
    }
    return "?";
}

std::string toString(Norm n) {
    return n == Norm::LayerNorm ? "layernorm" : "rmsnorm";
}

std::string toString(PositionEmbedding p) {
    return p == PositionEmbedding::Learned ? "learned" : "rope";
}

} // namespace shardscope
