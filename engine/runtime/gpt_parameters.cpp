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

// A counter-based normal generator: the same seed gives the same weights on every platform.
class NormalStream {
public:
    explicit NormalStream(std::uint64_t seed) : state_(seed) {}
    double next() {
        if (spare_) {
            spare_ = false;
            return spareValue_;
        }
        const double u1 = (double(nextBits() >> 11) + 1.0) * 0x1.0p-53; // (0, 1]
        const double u2 = double(nextBits() >> 11) * 0x1.0p-53;
        const double r = std::sqrt(-2.0 * std::log(u1));
        spareValue_ = r * std::sin(2.0 * std::numbers::pi * u2);
        spare_ = true;
        return r * std::cos(2.0 * std::numbers::pi * u2);
    }

private:
    std::uint64_t nextBits() { // splitmix64
        std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    std::uint64_t state_;
    bool spare_ = false;
    double spareValue_ = 0;
};

} // namespace

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

std::vector<float> initialParameters(const GptShape& shape, const TensorTable& table,
                                     std::uint64_t seed, int tp, int tpRank) {
    const TensorTable whole = tensorTable(shape, pipelineChunks(shape.layers, 1, 1, 0), 1);
    std::vector<float> values(whole.count, 0.0f);
    NormalStream normal(seed);
    const double residualStd = 0.02 / std::sqrt(2.0 * shape.layers);
    std::map<std::string, const ParameterTensor*> byName;
    for (const ParameterTensor& t : whole.tensors) {
        byName[t.name] = &t;
        const bool norm = t.name.find(".ln_") != std::string::npos || t.name.starts_with("ln_");
        const bool bias = t.name.ends_with(".bias");
        const bool residualProjection =
            t.name.ends_with("attn.proj.weight") || t.name.ends_with("mlp.proj.weight");
        for (std::size_t i = 0; i < t.count; ++i) {
            float& w = values[t.offset + i];
            if (bias)
                w = 0.0f;
            else if (norm)
                w = 1.0f;
            else
                w = static_cast<float>(normal.next() * (residualProjection ? residualStd : 0.02));
        }
    }
    std::vector<float> local(table.count);
    for (const ParameterTensor& t : table.tensors) {
        const bool tiedCopy = shape.tied && t.name == "lm_head.weight";
        const ParameterTensor& from = *byName.at(tiedCopy ? "wte" : t.name);
        copyTensorParallelShare(local.data() + t.offset, values.data() + from.offset, from.shape,
                                t.split, tp, tpRank);
    }
    return local;
}

} // namespace shardscope
