// A decoder-only transformer, as the planner and the engine both see it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

namespace shardscope {

enum class Activation { Gelu, SwiGlu, GeGlu };  // SwiGLU and GeGLU are gated: three MLP matrices
enum class Norm { LayerNorm, RmsNorm };         // LayerNorm has a bias, RMSNorm does not
enum class PositionEmbedding { Rope, Learned }; // learned adds a max_positions x hidden table

struct MoeSpec {
    int experts = 0;            // routed experts per MoE layer; 0 means a dense model
    int topK = 0;               // experts each token is routed to
    int sharedExperts = 0;      // always-on experts (DeepSeek/Qwen-MoE style)
    std::int64_t expertFfn = 0; // FFN width of one expert; 0 means ffnHidden
    // The first this many layers have a dense MLP of width ffnHidden instead of experts
    // (DeepSeek's first_k_dense_replace: 1 in DeepSeek-MoE and V2, 3 in V3).
    int firstDenseLayers = 0;
    bool enabled() const { return experts > 0; }
};

// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): queries through an optional low-rank
// bottleneck, keys and values up-projected per head from one shared latent, and a rotary part of
// each key shared by all heads. Its down projections and their norms are replicated on every
// tensor-parallel rank (Megatron-Core's MLA); the up projections split by heads.
struct MlaSpec {
    int qLoraRank = 0;     // 0: queries projected from the hidden state directly (V2-Lite)
    int kvLoraRank = 0;    // the shared key-value latent; 0 means not MLA
    int qkNopeHeadDim = 0; // per head, the part of a query and a key without positions
    int qkRopeHeadDim = 0; // per head, the rotary part (a key's is shared by the heads)
    int vHeadDim = 0;      // per head, a value's width
    bool enabled() const { return kvLoraRank > 0; }
    int qkHeadDim() const { return qkNopeHeadDim + qkRopeHeadDim; }
};

// The two kinds of layer a model can have: every layer of a dense model is Dense; an MoE model's
// layers are Moe, after its first dense ones.
enum class LayerKind { Dense, Moe };

// How a model stretches its rotary embedding's wavelengths for contexts longer than it was
// trained on (Hugging Face's rope_scaling). "llama3" (Meta's apply_scaling, Llama 3.1 on):
// wavelengths longer than originalMaxPositions / lowFreqFactor are `factor` times longer, those
// shorter than originalMaxPositions / highFreqFactor kept, those between blended. Any other type
// ("yarn", "linear", ...) is kept by name: the planner's figures do not depend on it, and the
// engine refuses to train with a scaling it does not compute.
struct RopeScaling {
    std::string type; // "" for none
    double factor = 1;
    double lowFreqFactor = 1;
    double highFreqFactor = 4;
    int originalMaxPositions = 8192;
    bool enabled() const { return !type.empty(); }
    bool isLlama3() const { return type == "llama3"; }
};

struct ModelSpec {
    std::string id; // preset id, "llama3-8b"; empty for custom or imported models
    std::string name;
    std::string family; // "llama", "gpt2", ... (informational)
    int layers = 0;
    int hidden = 0;
    int heads = 0;
    int kvHeads = 0; // == heads for multi-head attention, fewer for GQA, 1 for MQA
    int headDim = 0; // 0 means hidden / heads (Gemma sets it explicitly)
    std::int64_t ffnHidden = 0;
    std::int64_t vocab = 0;
    int seqLen = 0; // training sequence length
    int maxPositions = 0;
    bool tiedEmbeddings = false;
    Activation activation = Activation::SwiGlu;
    Norm norm = Norm::RmsNorm;
    PositionEmbedding positions = PositionEmbedding::Rope;
    bool attentionBias = false; // bias on Q, K, V (and O where outputBias)
    bool outputBias = false;    // bias on the attention output projection
    bool mlpBias = false;
    bool dropout = false; // dropout masks are stored as activations when on
    // Rotary embedding's base (rope_theta) and long-context scaling, and the norms' epsilon
    // (rms_norm_eps, layer_norm_epsilon): what the engine computes with; no planner figure
    // depends on them.
    double ropeTheta = 10000;
    RopeScaling ropeScaling;
    double normEps = 1e-5;
    MoeSpec moe;
    MlaSpec mla;
    // Multi-token prediction modules (DeepSeek-V3's num_nextn_predict_layers, Megatron-Core's
    // --mtp-num-layers): each predicts one token further ahead with one more layer of the
    // model's last kind, a 2h -> h projection of its normed input and the next token's
    // embedding, and its own norms, sharing the embedding and the output head. They train with
    // the model, on the last pipeline stage.
    int mtpModules = 0;
    double publishedParams = 0; // total the model's authors state, for checks; 0 if unknown
    std::string source;         // where the numbers come from

    // The quick form: only a parameter count is known ("a 7B model"). Model-state memory can be
    // computed from it; activations, FLOPs per layer and TP rules cannot, and say so.
    std::optional<double> bareParams;
    bool isBare() const { return bareParams.has_value(); }

    int effectiveHeadDim() const {
        return headDim > 0 ? headDim : (heads > 0 ? hidden / heads : 0);
    }
    std::int64_t qDim() const { return std::int64_t(heads) * effectiveHeadDim(); }
    std::int64_t kvDim() const { return std::int64_t(kvHeads) * effectiveHeadDim(); }
    // What attention's core multiplies, per token and over all heads: the width of a query and of
    // a key in the scores, and of a value. MLA's queries and keys are wider than its values;
    // otherwise both are heads x head_dim (keys and values of GQA are repeated to every head).
    std::int64_t scoreDim() const {
        return mla.enabled() ? std::int64_t(heads) * mla.qkHeadDim() : qDim();
    }
    std::int64_t valueDim() const {
        return mla.enabled() ? std::int64_t(heads) * mla.vHeadDim : qDim();
    }
    // The q of the papers' 12 l q s attention term: the mean of the score and value widths.
    double attentionWidth() const { return 0.5 * double(scoreDim() + valueDim()); }
    // Keys and values as a layer stores them for its backward and passes them around a CP ring,
    // per token: MLA up-projects both for every head; GQA keeps its kv heads.
    std::int64_t keyDim() const { return mla.enabled() ? scoreDim() : kvDim(); }
    std::int64_t storedValueDim() const { return mla.enabled() ? valueDim() : kvDim(); }
    std::int64_t expertFfn() const { return moe.expertFfn > 0 ? moe.expertFfn : ffnHidden; }
    int moeLayerCount() const {
        return moe.enabled() ? layers - std::min(layers, std::max(0, moe.firstDenseLayers)) : 0;
    }
    int denseLayerCount() const { return layers - moeLayerCount(); }
    // The kind of layer an MTP module repeats: the model's last layer's.
    LayerKind mtpLayerKind() const { return moe.enabled() ? LayerKind::Moe : LayerKind::Dense; }
    // Layers of a kind a token passes through in training, the MTP modules' included.
    int trainedLayers(LayerKind kind) const {
        return (kind == LayerKind::Moe ? moeLayerCount() : denseLayerCount()) +
               (mtpLayerKind() == kind ? mtpModules : 0);
    }
    // Whether a layer of this kind routes its tokens to experts (never in a dense model).
    bool routes(LayerKind kind) const { return kind == LayerKind::Moe && moe.enabled(); }
    // FFN width of one MLP of a layer of this kind: an expert's, or the dense MLP's.
    std::int64_t layerFfn(LayerKind kind) const { return routes(kind) ? expertFfn() : ffnHidden; }
    bool gated() const { return activation != Activation::Gelu; }
};

// Exact parameter count by part. Embeddings include learned position tables; lmHead is zero when
// tied to the embedding. Per-layer figures are for one transformer layer.
struct ParamCount {
    double embeddings = 0;
    double attention = 0; // all layers (not the MTP modules')
    double mlp = 0;       // all layers, all experts (and the router)
    double norms = 0;     // all layer norms plus the final norm
    double lmHead = 0;
    double mtp = 0;          // the multi-token prediction modules (in total, not in the parts)
    double mtpPerModule = 0; // one of them: a layer, the 2h x h projection, three norms
    double total = 0;
    double active = 0; // parameters touched per token (MoE: top-k + shared experts only)

    double attentionPerLayer = 0;
    double attentionReplicatedPerLayer = 0; // of it, whole on every tp rank (MLA's down proj.)
    double mlpPerLayer = 0;                 // all experts (of an MoE layer)
    double mlpActivePerLayer = 0;           // top-k + shared experts
    double routedExpertsPerLayer = 0;       // the routed experts of mlpPerLayer (what EP splits)
    double denseMlpPerLayer = 0;            // a dense layer's MLP (ffnHidden wide)
    double normsPerLayer = 0;
    double finalNorm = 0;
    double layerMlp(LayerKind kind) const {
        return kind == LayerKind::Moe ? mlpPerLayer : denseMlpPerLayer;
    }
    double layerMlpActive(LayerKind kind) const {
        return kind == LayerKind::Moe ? mlpActivePerLayer : denseMlpPerLayer;
    }
    double layerRoutedExperts(LayerKind kind) const {
        return kind == LayerKind::Moe ? routedExpertsPerLayer : 0.0;
    }
    double layer(LayerKind kind = LayerKind::Moe) const {
        return attentionPerLayer + layerMlp(kind) + normsPerLayer;
    }
};

ParamCount countParameters(const ModelSpec& m);

// Parameters that take part in matrix multiplies for one token (attention, active MLP, LM head),
// i.e. what 2 x N FLOPs per token counts. Embedding lookups and norms are excluded.
double matmulParamsPerToken(const ModelSpec& m);

std::string toString(Activation a);
Activation
activationFromString(const std::string& s); // "gelu", "swiglu", "geglu"; throws InputError
std::string toString(Norm n);
std::string toString(PositionEmbedding p);

} // namespace shardscope
