// Hugging Face transformers config.json -> ModelSpec.
//
// Only fields that change the parameter count, the FLOPs or the activation memory are read.
// Everything the config leaves out falls back to the defaults transformers itself uses for that
// model_type, so an imported model counts the same parameters the checkpoint holds.

#include "error.h"
#include "json_io.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace shardscope {

using nlohmann::json;

namespace {

// What transformers hard-codes (or defaults) per model_type.
struct Family {
    const char* modelType;
    Activation activation; // Gelu: a two-matrix MLP; SwiGlu/GeGlu: gated, three matrices
    Norm norm;
    PositionEmbedding positions;
    bool tiedEmbeddings; // default of tie_word_embeddings
    bool qkvBias, outputBias, mlpBias;
    bool biasFromConfig; // attention_bias / mlp_bias fields override the defaults
};

using enum Activation;
constexpr Norm kRms = Norm::RmsNorm, kLn = Norm::LayerNorm;
constexpr PositionEmbedding kRope = PositionEmbedding::Rope;
constexpr PositionEmbedding kLearned = PositionEmbedding::Learned;

constexpr Family kFamilies[] = {
    {"llama", SwiGlu, kRms, kRope, false, false, false, false, true},
    {"mistral", SwiGlu, kRms, kRope, false, false, false, false, true},
    {"mixtral", SwiGlu, kRms, kRope, false, false, false, false, true},
    // Qwen2 has bias on Q, K and V only, hard-coded.
    {"qwen2", SwiGlu, kRms, kRope, false, true, false, false, false},
    {"qwen2_moe", SwiGlu, kRms, kRope, false, true, false, false, false},
    {"gemma", GeGlu, kRms, kRope, true, false, false, false, true},
    {"gemma2", GeGlu, kRms, kRope, true, false, false, false, true},
    {"gemma3", GeGlu, kRms, kRope, true, false, false, false, true},
    {"gemma3_text", GeGlu, kRms, kRope, true, false, false, false, true},
    {"phi3", SwiGlu, kRms, kRope, false, false, false, false, true},
    {"gpt2", Gelu, kLn, kLearned, true, true, true, true, false},
    // GPT-NeoX: embed_in and embed_out are separate matrices; attention_bias defaults to true.
    {"gpt_neox", Gelu, kLn, kRope, false, true, true, true, true},
};
// Anything else is read as a Llama-like decoder, refined by the fields it does carry.
constexpr Family kGeneric = {"", SwiGlu, kRms, kRope, false, false, false, false, true};

const Family& familyOf(const std::string& modelType) {
    for (const Family& f : kFamilies) {
        if (modelType == f.modelType)
            return f;
    }
    return kGeneric;
}

using Aliases = std::initializer_list<const char*>;

// "hidden_size (or n_embd, d_model)": how a missing field is named to the user.
std::string aliasText(Aliases names) {
    std::string out = *names.begin();
    if (names.size() > 1) {
        out += " (or ";
        for (auto it = names.begin() + 1; it != names.end(); ++it)
            out += (it == names.begin() + 1 ? "" : ", ") + std::string(*it);
        out += ")";
    }
    return out;
}

// Reads config fields under any of their names, collecting every missing or invalid one so the
// error lists them all at once. null reads as absent (GPT-2 writes "n_inner": null).
class ConfigReader {
public:
    explicit ConfigReader(const json& config) : config_(config) {}

    // The first alias present, or {nullptr, nullptr}.
    std::pair<const char*, const json*> find(Aliases names) const {
        for (const char* name : names) {
            const auto it = config_.find(name);
            if (it != config_.end() && !it->is_null())
                return {name, &*it};
        }
        return {nullptr, nullptr};
    }

    std::optional<std::int64_t> whole(Aliases names, bool required, std::int64_t lo = 1) {
        const auto [name, v] = find(names);
        if (!v) {
            if (required)
                missing_.push_back(aliasText(names));
            return std::nullopt;
        }
        double d = v->is_number() ? v->get<double>() : std::nan("");
        if (v->is_number_integer()) // exact, where a double would round
            d = v->is_number_unsigned() ? double(v->get<std::uint64_t>())
                                        : double(v->get<std::int64_t>());
        if (!std::isfinite(d) || d != std::floor(d) || d < double(lo) ||
            d > double(std::numeric_limits<int>::max())) {
            invalid_.push_back(std::string(name) + ": expected a whole number >= " +
                               std::to_string(lo) + ", got " + jsonExcerpt(*v));
            return std::nullopt;
        }
        return std::int64_t(d);
    }

    std::optional<double> number(Aliases names) {
        const auto [name, v] = find(names);
        if (!v)
            return std::nullopt;
        if (!v->is_number() || !std::isfinite(v->get<double>())) {
            invalid_.push_back(std::string(name) + ": expected a number, got " + jsonExcerpt(*v));
            return std::nullopt;
        }
        return v->get<double>();
    }

    std::optional<bool> boolean(Aliases names) {
        const auto [name, v] = find(names);
        if (!v)
            return std::nullopt;
        if (!v->is_boolean()) {
            invalid_.push_back(std::string(name) + ": expected true or false, got " +
                               jsonExcerpt(*v));
            return std::nullopt;
        }
        return v->get<bool>();
    }

    std::optional<std::string> text(Aliases names) {
        const auto [name, v] = find(names);
        if (!v)
            return std::nullopt;
        if (!v->is_string()) {
            invalid_.push_back(std::string(name) + ": expected a string, got " + jsonExcerpt(*v));
            return std::nullopt;
        }
        return v->get<std::string>();
    }

    void missing(std::string text) { missing_.push_back(std::move(text)); }
    void invalid(std::string text) { invalid_.push_back(std::move(text)); }

    void throwIfAny(const std::string& what) const {
        if (missing_.empty() && invalid_.empty())
            return;
        std::string message = what + ":";
        if (!missing_.empty()) {
            message += " missing ";
            for (std::size_t i = 0; i < missing_.size(); ++i)
                message += (i ? ", " : "") + missing_[i];
            message += invalid_.empty() ? "" : ";";
        }
        for (std::size_t i = 0; i < invalid_.size(); ++i)
            message += (i ? "; " : " ") + invalid_[i];
        throw InputError(message);
    }

private:
    const json& config_;
    std::vector<std::string> missing_, invalid_;
};

// Known families fix whether the MLP is gated; the activation name then only picks the gate's
// function. For an unknown family the name decides: "silu" means a Llama-style gated MLP, "gelu"
// or "relu" most likely a GPT-style two-matrix one.
Activation activationFor(const Family& family, const std::optional<std::string>& name) {
    if (!name || family.activation == GeGlu)
        return family.activation;
    const bool gelu = name->starts_with("gelu") || *name == "geglu";
    if (&family != &kGeneric)
        return family.activation == Gelu ? Gelu : (gelu ? GeGlu : SwiGlu);
    if (*name == "geglu")
        return GeGlu;
    if (gelu || *name == "relu")
        return Gelu;
    return SwiGlu;
}

// How many of an MoE model's layers come first with a dense MLP, from whichever field the config
// says it with: DeepSeek's and GLM's first_k_dense_replace, or a per-layer list whose dense
// layers all come first (Qwen-MoE's mlp_only_layers [0, 1, ...], transformers' mlp_layer_types
// ["dense", ..., "sparse", ...]). -1 where a list puts dense layers elsewhere: the planner
// cannot describe that model.
int leadingDenseLayers(const json& config, ConfigReader& r, std::int64_t layers) {
    std::int64_t dense = 0;
    if (const auto k = r.whole({"first_k_dense_replace"}, false, 0))
        dense = *k;
    if (const auto it = config.find("mlp_only_layers"); it != config.end() && it->is_array()) {
        std::int64_t next = 0;
        for (const json& layer : *it) {
            if (!layer.is_number_integer() || layer.get<std::int64_t>() != next)
                return -1;
            ++next;
        }
        dense = std::max(dense, next);
    }
    if (const auto it = config.find("mlp_layer_types"); it != config.end() && it->is_array()) {
        std::int64_t leading = 0;
        bool sparseSeen = false;
        for (const json& kind : *it) {
            const std::string name = kind.is_string() ? kind.get<std::string>() : std::string();
            if (name == "dense" && !sparseSeen)
                ++leading;
            else if (name == "sparse")
                sparseSeen = true;
            else
                return -1;
        }
        dense = std::max(dense, leading);
    }
    return int(std::min(dense, layers));
}

// Layers the planner cannot describe: every layer is one kind of attention (multi-head or
// grouped-query) and one kind of MLP, an MoE model's dense ones first. A config that says
// otherwise is refused, naming what, so an import never counts a different model without a word
// (DeepSeek-V3 read as a plain MoE model would count 705 B parameters against its 671 B; it is
// now counted exactly, latent attention, dense first layers and MTP module included).
void refuseUnmodelledLayers(const json& config, ConfigReader& r, const std::string& what, bool moe,
                            bool denseLayersApart) {
    std::vector<std::string> found;
    const auto value = [&](const char* key) {
        const auto [name, v] = r.find({key});
        return v ? jsonExcerpt(*v) : std::string();
    };
    // A query bottleneck with no key-value latent is not multi-head latent attention.
    if (!value("q_lora_rank").empty() && value("kv_lora_rank").empty())
        found.push_back("a query low-rank bottleneck without multi-head latent attention "
                        "(q_lora_rank " +
                        value("q_lora_rank") + " and no kv_lora_rank)");
    const auto positive = [&](const char* key, std::int64_t above) {
        const auto n = r.number({key});
        return n && *n > double(above);
    };
    if (moe && positive("moe_layer_freq", 1))
        found.push_back("MoE in every n-th layer only (moe_layer_freq " + value("moe_layer_freq") +
                        ")");
    if (moe && positive("interleave_moe_layer_step", 1))
        found.push_back("MoE in every n-th layer only (interleave_moe_layer_step " +
                        value("interleave_moe_layer_step") + ")");
    if (moe && value("model_type").rfind("\"llama4", 0) == 0)
        found.push_back("Llama 4's always-on shared expert, which its config does not state "
                        "(model_type " +
                        value("model_type") + ")");
    if (moe && positive("decoder_sparse_step", 1))
        found.push_back("MoE in every n-th layer only (decoder_sparse_step " +
                        value("decoder_sparse_step") + ")");
    if (moe && denseLayersApart)
        found.push_back("dense layers among the MoE ones (mlp_only_layers or mlp_layer_types "
                        "other than the first layers)");
    for (const char* key : {"attn_layer_period", "expert_layer_period"})
        if (positive(key, 1))
            found.push_back(std::string("layers of several kinds (") + key + " " + value(key) +
                            ")");
    if (const auto it = config.find("layer_types"); it != config.end() && it->is_array()) {
        for (const json& kind : *it) {
            const std::string name = kind.is_string() ? kind.get<std::string>() : std::string();
            if (name != "full_attention" && name != "sliding_attention") {
                found.push_back("layers of several kinds (layer_types has " + jsonExcerpt(kind) +
                                ")");
                break;
            }
        }
    }
    if (found.empty())
        return;
    std::string list;
    for (std::size_t i = 0; i < found.size(); ++i)
        list += (i ? "; " : "") + found[i];
    throw InputError(what + ": the planner cannot model this architecture exactly: " + list +
                     ". Its parameters, FLOPs and memory would be counted for a different "
                     "model. Plan its model states from a bare parameter count (--params, the "
                     "published total), or choose a model the planner describes (see `models`)");
}

} // namespace

ModelSpec modelFromHuggingFace(const json& config, const std::string& name) {
    if (!config.is_object())
        throw InputError("Hugging Face config: expected a JSON object, got " +
                         std::string(config.type_name()));
    // Multimodal configs (Gemma 3, LLaVA and kin) keep the language model under text_config:
    // read that, one level down only, with the outer model_type and name where it has none.
    if (const auto text = config.find("text_config");
        text != config.end() && text->is_object() && !config.contains("hidden_size")) {
        json inner = *text;
        inner.erase("text_config");
        for (const char* key : {"model_type", "_name_or_path"})
            if (!inner.contains(key) && config.contains(key))
                inner[key] = config[key];
        const std::string outerName =
            config.contains("_name_or_path") && config["_name_or_path"].is_string()
                ? config["_name_or_path"].get<std::string>()
                : std::string();
        return modelFromHuggingFace(inner, name.empty() ? outerName : name);
    }
    ConfigReader r(config);
    const std::string modelType = r.text({"model_type"}).value_or("");
    const Family& family = familyOf(modelType);

    ModelSpec m;
    m.family = modelType;
    m.name = name;
    if (m.name.empty())
        m.name = r.text({"_name_or_path"}).value_or("");
    if (m.name.empty())
        m.name = modelType.empty() ? "imported model" : modelType;
    m.source = "Hugging Face config.json";
    const std::string what = "Hugging Face config '" + m.name + "'";

    const auto hidden = r.whole({"hidden_size", "n_embd", "d_model"}, true);
    const auto layers = r.whole({"num_hidden_layers", "n_layer", "num_layers"}, true);
    const auto heads = r.whole({"num_attention_heads", "n_head", "num_heads"}, true);
    const auto vocab = r.whole({"vocab_size"}, true);
    const auto maxPositions =
        r.whole({"max_position_embeddings", "n_positions", "n_ctx", "seq_length"}, true);
    // GPT-2 leaves n_inner null for the standard 4 x n_embd MLP.
    const bool ffnDefaults = family.activation == Gelu && &family != &kGeneric;
    auto ffn = r.whole({"intermediate_size", "n_inner", "ffn_dim"}, !ffnDefaults);
    if (!ffn && ffnDefaults && hidden)
        ffn = 4 * *hidden;
    const auto headDim = r.whole({"head_dim"}, false);
    auto kvHeads = r.whole({"num_key_value_heads", "num_kv_heads", "n_head_kv"}, false);
    if (!kvHeads && r.boolean({"multi_query"}).value_or(false))
        kvHeads = 1;

    m.activation = activationFor(family, r.text({"hidden_act", "activation_function"}));
    m.positions = family.positions;
    m.norm = family.norm;
    if (&family == &kGeneric) {
        if (r.find({"layer_norm_eps", "layer_norm_epsilon"}).second)
            m.norm = Norm::LayerNorm;
        if (r.find({"rms_norm_eps"}).second)
            m.norm = Norm::RmsNorm;
    }
    m.tiedEmbeddings = r.boolean({"tie_word_embeddings"}).value_or(family.tiedEmbeddings);
    m.attentionBias = family.qkvBias;
    m.outputBias = family.outputBias;
    m.mlpBias = family.mlpBias;
    if (family.biasFromConfig) {
        if (const auto bias = r.boolean({"attention_bias"}))
            m.attentionBias = m.outputBias = *bias;
        if (const auto bias = r.boolean({"mlp_bias"}))
            m.mlpBias = *bias;
    }
    for (const char* key : {"resid_pdrop", "attn_pdrop", "embd_pdrop", "attention_dropout",
                            "hidden_dropout", "dropout"}) {
        if (r.number({key}).value_or(0) > 0)
            m.dropout = true;
    }

    // What the engine computes with: rotary embedding's base and long-context scaling
    // (rope_type, or type in older configs), and the norms' epsilon.
    m.ropeTheta = r.number({"rope_theta", "rotary_emb_base"}).value_or(10000);
    if (const auto eps = r.number({"rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps"}))
        m.normEps = *eps;
    if (const auto [key, scaling] = r.find({"rope_scaling"}); scaling && !scaling->is_object()) {
        r.invalid("rope_scaling: expected an object or null, got " + jsonExcerpt(*scaling));
    } else if (scaling) {
        ConfigReader s(*scaling);
        m.ropeScaling.type = s.text({"rope_type", "type"}).value_or("unknown");
        m.ropeScaling.factor = s.number({"factor"}).value_or(1);
        m.ropeScaling.lowFreqFactor = s.number({"low_freq_factor"}).value_or(1);
        m.ropeScaling.highFreqFactor = s.number({"high_freq_factor"}).value_or(4);
        m.ropeScaling.originalMaxPositions =
            int(s.whole({"original_max_position_embeddings"}, false).value_or(8192));
        s.throwIfAny(what + ": rope_scaling");
    }

    // Mixture of experts: Mixtral (num_local_experts), Qwen2-MoE (num_experts, a shared expert
    // as wide as shared_expert_intermediate_size), DeepSeek (n_routed_experts, n_shared_experts).
    const auto experts =
        r.whole({"num_local_experts", "num_experts", "n_routed_experts"}, false, 0);
    if (experts && *experts > 0) {
        m.moe.experts = int(*experts);
        if (const auto topK = r.whole({"num_experts_per_tok", "moe_top_k"}, true))
            m.moe.topK = int(*topK);
        if (const auto expertFfn = r.whole({"moe_intermediate_size"}, false))
            m.moe.expertFfn = *expertFfn;
        if (const auto shared = r.whole({"n_shared_experts"}, false, 0))
            m.moe.sharedExperts = int(*shared);
        const auto sharedFfn = r.whole({"shared_expert_intermediate_size"}, false, 0);
        if (sharedFfn && *sharedFfn > 0) {
            const std::int64_t width = m.moe.expertFfn > 0 ? m.moe.expertFfn : ffn.value_or(0);
            // The model has one shared expert of that width; count it as that many expert widths.
            if (width > 0)
                m.moe.sharedExperts =
                    int(std::max<std::int64_t>(1, (*sharedFfn + width / 2) / width));
        }
    }

    // Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): the latent ranks and the per-head
    // widths; keys and values exist for every head, whatever num_key_value_heads says.
    if (const auto kvLora = r.whole({"kv_lora_rank"}, false, 1)) {
        m.mla.kvLoraRank = int(*kvLora);
        m.mla.qLoraRank = int(r.whole({"q_lora_rank"}, false, 1).value_or(0));
        const auto nope = r.whole({"qk_nope_head_dim"}, true, 0);
        const auto rope = r.whole({"qk_rope_head_dim"}, true, 0);
        const auto v = r.whole({"v_head_dim"}, true);
        m.mla.qkNopeHeadDim = int(nope.value_or(0));
        m.mla.qkRopeHeadDim = int(rope.value_or(0));
        m.mla.vHeadDim = int(v.value_or(0));
    }
    // DeepSeek-V3's (and GLM-4.5's) multi-token prediction modules.
    m.mtpModules = int(r.whole({"num_nextn_predict_layers"}, false, 0).value_or(0));
    const bool moe = experts.value_or(0) > 0;
    const int firstDense = moe && layers ? leadingDenseLayers(config, r, *layers) : 0;
    m.moe.firstDenseLayers = std::max(0, firstDense);
    refuseUnmodelledLayers(config, r, what, moe, firstDense < 0);
    r.throwIfAny(what);
    m.hidden = int(*hidden);
    m.layers = int(*layers);
    m.heads = int(*heads);
    m.vocab = *vocab;
    m.ffnHidden = *ffn;
    m.maxPositions = int(*maxPositions);
    m.headDim = int(headDim.value_or(0));
    m.kvHeads = int(kvHeads.value_or(*heads));
    if (m.mla.enabled()) { // a head's output is a value wide; every head has its keys
        m.headDim = m.mla.vHeadDim;
        m.kvHeads = m.heads;
    }
    // Training runs rarely use the full context a model supports; 8192 keeps the default plan
    // realistic. Callers that train at another length set seqLen themselves.
    m.seqLen = std::min(m.maxPositions, 8192);

    // The model file reader holds the range and consistency rules (heads divisible by KV heads,
    // sizes within reason, at most 1e15 parameters); apply them to the imported model too.
    try {
        (void)json(m).get<ModelSpec>();
    } catch (const InputError& e) {
        throw InputError(what + ": " + e.what());
    }
    return m;
}

std::string huggingFaceModelName(const json& config, const std::string& path) {
    const auto nameIn = [](const json& j) -> std::string {
        const auto it = j.find("_name_or_path");
        return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    std::string name = config.is_object() ? nameIn(config) : std::string();
    if (name.empty() && config.is_object()) {
        if (const auto text = config.find("text_config"); text != config.end() && text->is_object())
            name = nameIn(*text);
    }
    // A checkpoint saved locally records where it was: its last part is the model's name. A hub
    // id ("meta-llama/Meta-Llama-3-8B") is kept whole.
    const bool local = name.rfind('/', 0) == 0 || name.rfind("./", 0) == 0 ||
                       name.rfind("../", 0) == 0 || name.rfind('~', 0) == 0;
    if (local) {
        while (!name.empty() && name.back() == '/')
            name.pop_back();
        name = name.substr(name.find_last_of('/') + 1);
    }
    if (!name.empty() || path.empty())
        return name;
    std::error_code error;
    std::filesystem::path file = std::filesystem::absolute(path, error);
    if (error)
        file = path;
    file = file.lexically_normal();
    if (file.filename() == "config.json") {
        const std::string folder = file.parent_path().filename().string();
        return folder == "/" ? std::string() : folder;
    }
    return file.stem().string();
}

} // namespace shardscope
