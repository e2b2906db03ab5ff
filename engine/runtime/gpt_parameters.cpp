#include "gpt_parameters.h"

#include "core/error.h"

#include <cmath>
#include <map>
#include <numbers>

namespace shardscope {

namespace {

constexpr std::size_t npos = TensorTable::npos;
constexpr const char* kLayerTensorNames[kTensorsPerLayer] = {
    "ln_1.weight",      "ln_1.bias",      "attn.qkv.weight", "attn.qkv.bias",
    "attn.proj.weight", "attn.proj.bias", "ln_2.weight",     "ln_2.bias",
    "mlp.fc.weight",    "mlp.fc.bias",    "mlp.proj.weight", "mlp.proj.bias"};

} // namespace

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
    const int C = shape.channels, F = shape.ffn / tp, Ca = shape.channels / tp,
              V = shape.vocab / tp;
    auto add = [&](std::string name, std::vector<int> dims, bool decay, TpSplit split) {
        std::size_t count = 1;
        for (int d : dims)
            count *= std::size_t(d);
        t.tensors.push_back({std::move(name), t.count, count, std::move(dims), decay, split});
        t.count += count;
        return t.tensors.size() - 1;
    };
    using enum TpSplit;
    t.layerTensor.assign(std::size_t(shape.layers), npos);
    for (const ModelChunk& chunk : chunks) {
        if (chunk.embedding) {
            t.wte = add("wte", {V, C}, true, Rows);
            t.wpe = add("wpe", {shape.maxPositions, C}, true, None);
        }
        for (int l = chunk.firstLayer; l < chunk.firstLayer + chunk.layers; ++l) {
            const std::string p = "h." + std::to_string(l) + ".";
            struct Shape {
                std::vector<int> dims;
                TpSplit split;
            };
            const Shape shapes[kTensorsPerLayer] = {
                {{C}, None},         {{C}, None},        {{3 * Ca, C}, QkvRows},
                {{3 * Ca}, QkvRows}, {{C, Ca}, Columns}, {{C}, None},
                {{C}, None},         {{C}, None},        {{F, C}, Rows},
                {{F}, Rows},         {{C, F}, Columns},  {{C}, None}};
            t.layerTensor[std::size_t(l)] = t.tensors.size();
            for (const Shape& sh : shapes)
                add(p + kLayerTensorNames[&sh - shapes], sh.dims, sh.dims.size() == 2, sh.split);
        }
        if (chunk.head) {
            t.lnfWeight = add("ln_f.weight", {C}, false, None);
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
    if (m.activation != Activation::Gelu)
        problems.push_back("activation is " + toString(m.activation) + ", the engine has GELU");
    if (m.norm != Norm::LayerNorm)
        problems.push_back("norm is " + toString(m.norm) + ", the engine has LayerNorm");
    if (m.positions != PositionEmbedding::Learned)
        problems.push_back("positions are " + toString(m.positions) +
                           ", the engine has learned position embeddings");
    if (m.kvHeads != m.heads)
        problems.push_back("kv_heads " + std::to_string(m.kvHeads) + " differs from heads " +
                           std::to_string(m.heads) + " (the engine has multi-head attention)");
    if (m.heads <= 0 || m.hidden <= 0 || m.hidden % m.heads != 0)
        problems.push_back("hidden " + std::to_string(m.hidden) +
                           " must be a positive multiple "
                           "of heads " +
                           std::to_string(m.heads));
    else if (m.headDim != 0 && m.headDim != m.hidden / m.heads)
        problems.push_back("head_dim must be hidden / heads");
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
    if (!m.attentionBias || !m.outputBias || !m.mlpBias)
        problems.push_back("GPT-2 has biases on attention, output and MLP projections: set "
                           "attention_bias, output_bias and mlp_bias to true");
    if (m.layers <= 0 || m.ffnHidden <= 0 || m.vocab <= 0 || m.seqLen <= 0)
        problems.push_back("layers, ffn_hidden, vocab and seq_len must be positive");
    if (m.seqLen > m.maxPositions)
        problems.push_back("seq_len " + std::to_string(m.seqLen) + " exceeds max_positions " +
                           std::to_string(m.maxPositions));
    if (m.vocab > (1 << 30) || m.ffnHidden > (1 << 30))
        problems.push_back("vocab and ffn_hidden must be below 2^30");
    if (!problems.empty()) {
        std::string text = "the engine trains GPT-2 architectures, and this model differs: ";
        for (std::size_t i = 0; i < problems.size(); ++i)
            text += (i ? "; " : "") + problems[i];
        throw InputError(text);
    }
    GptShape s;
    s.layers = m.layers;
    s.channels = m.hidden;
    s.heads = m.heads;
    s.ffn = static_cast<int>(m.ffnHidden);
    s.vocab = static_cast<int>(m.vocab);
    s.maxPositions = m.maxPositions;
    s.seqLen = m.seqLen;
    s.tied = m.tiedEmbeddings;
    return s;
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
    const std::size_t rows =
        std::size_t(t.shape[0]) *
        (t.split == TpSplit::Rows || t.split == TpSplit::QkvRows ? std::size_t(tp_) : 1);
    const std::size_t cols = t.shape.size() > 1 ? std::size_t(t.shape[1]) : 1;
    const std::size_t r = std::size_t(tpRank_), n = std::size_t(tp_);
    switch (t.split) {
    case TpSplit::None:
        return j;
    case TpSplit::Rows:
        return r * (rows / n * cols) + j;
    case TpSplit::Columns: {
        const std::size_t share = cols, wholeCols = cols * n;
        return j / share * wholeCols + r * share + j % share;
    }
    case TpSplit::QkvRows: {
        const std::size_t block = rows / 3, share = block / n * cols;
        return j / share * block * cols + r * share + j % share;
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
