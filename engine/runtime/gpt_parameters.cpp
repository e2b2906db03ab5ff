#include "gpt_parameters.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>

namespace shardscope {

namespace {

constexpr std::size_t npos = TensorTable::npos;

// A layer tensor's name in each family (Hugging Face's Llama calls FcW gate_proj and up_proj).
std::string layerTensorName(BlockFamily family, LayerTensor slot) {
    constexpr const char* kNames[kLayerSlots] = {
        "ln_1.weight",      "ln_1.bias",      "attn.qkv.weight", "attn.qkv.bias",
        "attn.proj.weight", "attn.proj.bias", "ln_2.weight",     "ln_2.bias",
        "mlp.fc.weight",    "mlp.fc.bias",    "mlp.proj.weight", "mlp.proj.bias"};
    return family == BlockFamily::Llama && slot == FcW ? "mlp.gate_up.weight" : kNames[slot];
}

} // namespace

const std::vector<LayerTensor>& layerTensors(BlockFamily family) {
    static const std::vector<LayerTensor> gpt2{Ln1W, Ln1B, QkvW, QkvB, ProjW,   ProjB,
                                               Ln2W, Ln2B, FcW,  FcB,  FcProjW, FcProjB};
    static const std::vector<LayerTensor> llama{Ln1W, QkvW, ProjW, Ln2W, FcW, FcProjW};
    return family == BlockFamily::Llama ? llama : gpt2;
}

// The n-th value of a stream of standard normals, found without drawing the ones before it:
// Box-Muller on pairs of splitmix64 draws, a counter-based generator (draw k is the mix of
// seed + k x the golden-ratio increment), so every rank computes only the values it stores,
// and the same seed gives the same weights on every platform.
double normalAt(std::uint64_t seed, std::uint64_t n) {
    auto draw = [seed](std::uint64_t k) { // splitmix64's k-th output (k from 1)
        std::uint64_t z = seed + k * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    };
    const std::uint64_t pair = n / 2;
    const double u1 = (double(draw(2 * pair + 1) >> 11) + 1.0) * 0x1.0p-53; // (0, 1]
    const double u2 = double(draw(2 * pair + 2) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    return n % 2 ? r * std::sin(2.0 * std::numbers::pi * u2)
                 : r * std::cos(2.0 * std::numbers::pi * u2);
}

TensorTable tensorTable(const GptShape& shape, const std::vector<ModelChunk>& chunks, int tp) {
    TensorTable t;
    const int C = shape.channels, F = shape.ffn / tp, V = shape.vocab / tp,
              Ca = shape.heads / tp * shape.headDim(), // this rank's query (and output) width
        qkvRows = (shape.heads + 2 * shape.kvHeads) / tp * shape.headDim();
    const bool llama = shape.llama();
    auto add = [&](std::string name, std::vector<int> dims, bool decay, TpSplit split,
                   std::vector<int> blocks = {}) {
        std::size_t count = 1;
        for (int d : dims)
            count *= std::size_t(d);
        t.tensors.push_back(
            {std::move(name), t.count, count, std::move(dims), decay, split, std::move(blocks)});
        t.count += count;
        return t.tensors.size() - 1;
    };
    using enum TpSplit;
    struct Shape {
        std::vector<int> dims;
        TpSplit split;
        std::vector<int> blocks;
    };
    const Shape shapes[kLayerSlots] = {
        {{C}, None, {}},
        {{C}, None, {}},
        {{qkvRows, C}, BlockRows, shape.qkvBlocks()},
        {{qkvRows}, BlockRows, shape.qkvBlocks()},
        {{C, Ca}, Columns, {}},
        {{C}, None, {}},
        {{C}, None, {}},
        {{C}, None, {}},
        // SwiGLU's gate and up projections, fused
        {{llama ? 2 * F : F, C},
         llama ? BlockRows : Rows,
         llama ? std::vector<int>{shape.ffn, shape.ffn} : std::vector<int>{}},
        {{F}, Rows, {}},
        {{C, F}, Columns, {}},
        {{C}, None, {}}};
    t.layerTensor.assign(std::size_t(shape.layers), npos);
    for (const ModelChunk& chunk : chunks) {
        if (chunk.embedding) {
            t.wte = add("wte", {V, C}, true, Rows);
            if (!llama)
                t.wpe = add("wpe", {shape.maxPositions, C}, true, None);
        }
        for (int l = chunk.firstLayer; l < chunk.firstLayer + chunk.layers; ++l) {
            const std::string p = "h." + std::to_string(l) + ".";
            t.layerTensor[std::size_t(l)] = t.tensors.size();
            for (const LayerTensor slot : layerTensors(shape.family)) {
                const Shape& sh = shapes[slot];
                add(p + layerTensorName(shape.family, slot), sh.dims, sh.dims.size() == 2, sh.split,
                    sh.blocks);
            }
        }
        if (chunk.head) {
            t.lnfWeight = add("ln_f.weight", {C}, false, None);
            if (!llama)
                t.lnfBias = add("ln_f.bias", {C}, false, None);
            // A tied head on a rank without the embedding keeps its own copy of it.
            t.lmHead =
                shape.tied && t.wte != npos ? t.wte : add("lm_head.weight", {V, C}, true, Rows);
        }
    }
    return t;
}

GptShape GptShape::of(const ModelSpec& m) {
    std::vector<std::string> problems;
    if (m.isBare())
        problems.push_back("it is a bare parameter count; the engine needs the architecture "
                           "(layers, hidden, heads, ffn_hidden, vocab, seq_len)");
    const bool gpt2 = m.activation == Activation::Gelu && m.norm == Norm::LayerNorm &&
                      m.positions == PositionEmbedding::Learned;
    const bool llama = m.activation == Activation::SwiGlu && m.norm == Norm::RmsNorm &&
                       m.positions == PositionEmbedding::Rope;
    if (!gpt2 && !llama)
        problems.push_back("activation " + toString(m.activation) + ", norm " + toString(m.norm) +
                           " and positions " + toString(m.positions) +
                           " are neither GPT-2's blocks (gelu, layernorm, learned) nor the Llama "
                           "family's (swiglu, rmsnorm, rope)");
    if (gpt2 && m.kvHeads != m.heads)
        problems.push_back("kv_heads " + std::to_string(m.kvHeads) + " differs from heads " +
                           std::to_string(m.heads) +
                           " (GPT-2's blocks have multi-head attention; grouped-query attention "
                           "comes with the Llama family's)");
    if (m.heads <= 0 || m.hidden <= 0 || m.hidden % m.heads != 0)
        problems.push_back("hidden " + std::to_string(m.hidden) +
                           " must be a positive multiple "
                           "of heads " +
                           std::to_string(m.heads));
    else if (m.headDim != 0 && m.headDim != m.hidden / m.heads)
        problems.push_back("head_dim must be hidden / heads");
    else if (llama && (m.hidden / m.heads) % 2 != 0)
        problems.push_back("the head size hidden / heads = " + std::to_string(m.hidden / m.heads) +
                           " must be even: rotary embeddings turn pairs of channels");
    if (llama && (m.kvHeads <= 0 || m.heads % std::max(1, m.kvHeads) != 0))
        problems.push_back("kv_heads " + std::to_string(m.kvHeads) + " must divide heads " +
                           std::to_string(m.heads) +
                           " (each key and value head serves a group of query heads)");
    if (llama && !m.ropeScaling.type.empty() && !m.ropeScaling.isLlama3())
        problems.push_back("rope_scaling type \"" + m.ropeScaling.type +
                           "\" is not in the engine (it has Llama 3's, \"llama3\", or none)");
    if (m.moe.enabled())
        problems.push_back("mixture-of-experts layers are not in the engine");
    if (m.mla.enabled())
        problems.push_back("multi-head latent attention is not in the engine");
    if (m.mtpModules > 0)
        problems.push_back("multi-token prediction modules are not in the engine (set "
                           "\"mtp_modules\": 0)");
    if (m.dropout)
        problems.push_back("dropout is on; the engine trains without dropout (set "
                           "\"dropout\": false, as modern pre-training runs do)");
    if (gpt2 && (!m.attentionBias || !m.outputBias || !m.mlpBias))
        problems.push_back("GPT-2 has biases on attention, output and MLP projections: set "
                           "attention_bias, output_bias and mlp_bias to true");
    if (llama && (m.attentionBias || m.outputBias || m.mlpBias))
        problems.push_back("the engine's Llama-family blocks have no biases (Qwen2's QKV bias is "
                           "not in the engine): set attention_bias, output_bias and mlp_bias to "
                           "false");
    if (m.layers <= 0 || m.ffnHidden <= 0 || m.vocab <= 0 || m.seqLen <= 0)
        problems.push_back("layers, ffn_hidden, vocab and seq_len must be positive");
    if (m.seqLen > m.maxPositions)
        problems.push_back("seq_len " + std::to_string(m.seqLen) + " exceeds max_positions " +
                           std::to_string(m.maxPositions));
    if (m.vocab > (1 << 30) || m.ffnHidden > (1 << 30))
        problems.push_back("vocab and ffn_hidden must be below 2^30");
    if (!problems.empty()) {
        std::string text = "the engine trains GPT-2 and Llama-family decoders, and this model "
                           "differs: ";
        for (std::size_t i = 0; i < problems.size(); ++i)
            text += (i ? "; " : "") + problems[i];
        throw InputError(text);
    }
    GptShape s;
    s.family = llama ? BlockFamily::Llama : BlockFamily::Gpt2;
    s.layers = m.layers;
    s.channels = m.hidden;
    s.heads = m.heads;
    s.kvHeads = m.kvHeads;
    s.ffn = static_cast<int>(m.ffnHidden);
    s.vocab = static_cast<int>(m.vocab);
    s.maxPositions = m.maxPositions;
    s.seqLen = m.seqLen;
    s.tied = m.tiedEmbeddings;
    s.normEps = static_cast<float>(m.normEps);
    s.ropeTheta = m.ropeTheta;
    s.ropeScaling = m.ropeScaling;
    return s;
}

std::string tensorParallelProblem(const GptShape& shape, int tp) {
    const std::string t = std::to_string(tp);
    if (shape.heads % tp || shape.ffn % tp || shape.vocab % tp)
        return "tp " + t + " must divide heads (" + std::to_string(shape.heads) +
               "), ffn_hidden (" + std::to_string(shape.ffn) + ") and vocab (" +
               std::to_string(shape.vocab) +
               "): each rank holds an equal share of each; pad the vocabulary or choose another tp";
    if (shape.kvHeads % tp)
        return "tp " + t + " must divide kv_heads (" + std::to_string(shape.kvHeads) +
               "): each rank holds whole key and value heads with the query heads they serve, as "
               "Megatron-LM splits query groups; choose a tp that divides " +
               std::to_string(shape.kvHeads);
    return "";
}

InitialValues::InitialValues(const GptShape& shape, const TensorTable& table, std::uint64_t seed,
                             int tp, int tpRank)
    : table_(table), seed_(seed), tp_(tp), tpRank_(tpRank) {
    const TensorTable whole = tensorTable(shape, pipelineChunks(shape.layers, 1, 1, 0), 1);
    const double residualStd = 0.02 / std::sqrt(2.0 * shape.layers);
    std::uint64_t drawn = 0; // normals drawn by the tensors before, in the whole model's order
    std::map<std::string, Rule> byName;
    for (const ParameterTensor& t : whole.tensors) {
        Rule rule;
        if (t.name.ends_with(".bias")) {
            rule.constant = 0.0f;
        } else if (t.name.find(".ln_") != std::string::npos || t.name.starts_with("ln_")) {
            rule.constant = 1.0f;
        } else {
            rule.firstDraw = drawn;
            rule.std = t.name.ends_with("attn.proj.weight") || t.name.ends_with("mlp.proj.weight")
                           ? residualStd
                           : 0.02;
            drawn += t.count;
        }
        byName[t.name] = rule;
    }
    for (const ParameterTensor& t : table_.tensors) // a tied head's copy is the token table
        rules_.push_back(byName.at(shape.tied && t.name == "lm_head.weight" ? "wte" : t.name));
}

// Where element j of a tensor-parallel rank's share lies in the whole tensor (the inverse of
// copyTensorParallelShare).
std::size_t InitialValues::wholeIndex(const ParameterTensor& t, std::size_t j) const {
    const std::size_t cols = t.shape.size() > 1 ? std::size_t(t.shape[1]) : 1;
    const std::size_t r = std::size_t(tpRank_), n = std::size_t(tp_);
    switch (t.split) {
    case TpSplit::None:
        return j;
    case TpSplit::Rows:
        return r * std::size_t(t.shape[0]) * cols + j;
    case TpSplit::Columns: {
        const std::size_t share = cols, wholeCols = cols * n;
        return j / share * wholeCols + r * share + j % share;
    }
    case TpSplit::BlockRows: { // find j's block; the whole blocks before it come first
        std::size_t row = j / cols, wholeBefore = 0;
        for (const int block : t.rowBlocks) {
            const std::size_t share = std::size_t(block) / n;
            if (row < share)
                return (wholeBefore + r * share + row) * cols + j % cols;
            row -= share;
            wholeBefore += std::size_t(block);
        }
        break;
    }
    }
    return j;
}

void InitialValues::fill(std::size_t offset, std::size_t n, float* out) const {
    const std::size_t end = offset + n;
    for (std::size_t i = 0; i < table_.tensors.size(); ++i) {
        const ParameterTensor& t = table_.tensors[i];
        const std::size_t a = std::max(offset, t.offset), b = std::min(end, t.offset + t.count);
        if (a >= b)
            continue;
        const Rule& rule = rules_[i];
        for (std::size_t k = a; k < b; ++k)
            out[k - offset] =
                rule.firstDraw == kConstant
                    ? rule.constant
                    : static_cast<float>(
                          normalAt(seed_, rule.firstDraw + wholeIndex(t, k - t.offset)) * rule.std);
    }
}

std::vector<float> initialParameters(const GptShape& shape, const TensorTable& table,
                                     std::uint64_t seed, int tp, int tpRank) {
    std::vector<float> values(table.count);
    InitialValues(shape, table, seed, tp, tpRank).fill(0, table.count, values.data());
    return values;
}

} // namespace shardscope
