#include "gpt.h"

#include "core/error.h"

#include <cmath>
#include <limits>
#include <map>
#include <numbers>
#include <stdexcept>
#include <utility>

namespace shardscope {

namespace {

constexpr int kTensorsPerLayer = 12;
enum LayerTensor { Ln1W, Ln1B, QkvW, QkvB, ProjW, ProjB, Ln2W, Ln2B, FcW, FcB, FcProjW, FcProjB };
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

constexpr std::size_t npos = GptModel::npos;

struct TensorTable {
    std::vector<ParameterTensor> tensors;
    std::size_t count = 0;
    std::vector<std::size_t> layerTensor; // per model layer: its first tensor, or npos
    std::size_t wte = npos, wpe = npos, lnfWeight = npos, lnfBias = npos, lmHead = npos;
};

// Chunk by chunk in model order: the embeddings, the layers, the final norm and the head. For
// the whole model this is GPT-2's order, so checkpoints of one process keep their layout.
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

// Copies tensor-parallel rank r's share of a whole-model tensor (dims: the whole tensor's).
void copyShare(float* dst, const float* src, const std::vector<int>& dims, TpSplit split, int t,
               int r) {
    const std::size_t rows = std::size_t(dims[0]);
    const std::size_t cols = dims.size() > 1 ? std::size_t(dims[1]) : 1;
    switch (split) {
    case TpSplit::None:
        std::copy(src, src + rows * cols, dst);
        return;
    case TpSplit::Rows: {
        const std::size_t share = rows / std::size_t(t) * cols;
        std::copy(src + std::size_t(r) * share, src + std::size_t(r + 1) * share, dst);
        return;
    }
    case TpSplit::Columns: {
        const std::size_t share = cols / std::size_t(t);
        for (std::size_t i = 0; i < rows; ++i, dst += share)
            std::copy(src + i * cols + std::size_t(r) * share,
                      src + i * cols + std::size_t(r + 1) * share, dst);
        return;
    }
    case TpSplit::QkvRows: { // q, k and v blocks, each rows / 3 long: this rank's heads of each
        const std::size_t block = rows / 3, share = block / std::size_t(t) * cols;
        for (std::size_t part = 0; part < 3; ++part, dst += share) {
            const float* from = src + part * block * cols + std::size_t(r) * share;
            std::copy(from, from + share, dst);
        }
        return;
    }
    }
}

} // namespace

void MicrobatchState::reset() {
    tokens.reset();
    deferredGradients.clear();
    output.reset();
    inputGrad.reset();
    for (Buffer& b : layerInput)
        b.reset();
    for (LayerActivations& a : layers)
        a = LayerActivations{};
    finalMean.reset();
    finalRstd.reset();
    finalNormGrad.reset();
    deferred.clear();
    keptForWeights.clear();
    forwardDone = backwardDone = false;
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

std::vector<ModelChunk> pipelineChunks(const GptShape& shape, int pp, int vpp, int rank) {
    const int stages = pp * vpp;
    if (shape.layers < stages)
        throw InputError("the model has " + std::to_string(shape.layers) +
                         " layers and the layout " + std::to_string(pp) + " pipeline ranks x " +
                         std::to_string(vpp) + " chunks makes " + std::to_string(stages) +
                         " virtual stages: every stage needs a layer; lower pp or vpp");
    const int base = shape.layers / stages, extra = shape.layers % stages;
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

struct GptModel::LayerWeights {
    float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};

GptModel::GptModel(const ModelSpec& model, int microBatch, kernels::Ops& ops,
                   DeviceAllocator& memory, Recompute recompute, bool storeAttentionProbs,
                   std::vector<ModelChunk> chunks, TensorParallel tp, ZeroSharding zero)
    : shape_(GptShape::of(model)), tp_(tp), microBatch_(microBatch), ops_(ops), memory_(memory),
      recompute_(recompute), storeProbs_(storeAttentionProbs && recompute != Recompute::Selective),
      chunks_(std::move(chunks)) {
    if (chunks_.empty())
        chunks_ = pipelineChunks(shape_, 1, 1, 0);
    const int t = tp_.size;
    if (t < 1 || tp_.rank < 0 || tp_.rank >= t || (t > 1 && !tp_.group))
        throw std::logic_error("tensor parallelism needs its group and a rank within it");
    if (shape_.heads % t || shape_.ffn % t || shape_.vocab % t)
        throw InputError("tp " + std::to_string(t) + " must divide heads (" +
                         std::to_string(shape_.heads) + "), ffn_hidden (" +
                         std::to_string(shape_.ffn) + ") and vocab (" +
                         std::to_string(shape_.vocab) +
                         "): each rank holds an equal share of each; pad the vocabulary or "
                         "choose another tp");
    localHeads_ = shape_.heads / t;
    localChannels_ = shape_.channels / t;
    localFfn_ = shape_.ffn / t;
    localVocab_ = shape_.vocab / t;
    vocabStart_ = tp_.rank * localVocab_;
    sequenceParallel_ = tp_.sequenceParallel && t > 1;
    if (sequenceParallel_ && rows() % t)
        throw InputError("sequence parallelism splits the microbatch's " + std::to_string(rows()) +
                         " token rows (micro_batch x seq_len) over tp " + std::to_string(t) +
                         ": they must divide evenly");
    if (microBatch <= 0)
        throw InputError("micro batch must be at least 1");
    if (std::int64_t(microBatch) * shape_.seqLen > std::numeric_limits<int>::max() / 4)
        throw InputError(
            "micro_batch x seq_len = " + std::to_string(std::int64_t(microBatch) * shape_.seqLen) +
            " tokens per microbatch is more than the engine handles (2^29); use a "
            "smaller micro_batch and more gradient accumulation");
    buildTensorTable();
    store_ = std::make_unique<FlatStore>(parameterCount_, zero, ops_, memory_);
}

float* GptModel::parametersOf(std::size_t first, std::size_t last, Buffer& holder) const {
    const auto [offset, count] = rangeOf(first, last);
    return store_->parametersOf(offset, count, holder);
}

void GptModel::prefetchParameters(std::size_t first, std::size_t last) const {
    const auto [offset, count] = rangeOf(first, last);
    store_->prefetch(offset, count);
}

float* GptModel::gradientsFor(std::size_t first, std::size_t last, Buffer& holder) const {
    const auto [offset, count] = rangeOf(first, last);
    return store_->gradientsFor(offset, count, holder);
}

void GptModel::gradientsDone(std::size_t first, std::size_t last, Buffer& holder) const {
    const auto [offset, count] = rangeOf(first, last);
    store_->gradientsDone(offset, count, holder);
}

GptModel::~GptModel() = default;

void GptModel::buildTensorTable() {
    TensorTable t = tensorTable(shape_, chunks_, tp_.size);
    tensors_ = std::move(t.tensors);
    parameterCount_ = t.count;
    layerTensor_ = std::move(t.layerTensor);
    wte_ = t.wte;
    wpe_ = t.wpe;
    lnfWeight_ = t.lnfWeight;
    lnfBias_ = t.lnfBias;
    lmHead_ = t.lmHead;
    if (shape_.tied && (wte_ == npos) != (lmHead_ == npos))
        shared_ = wte_ != npos ? wte_ : lmHead_;
}

const ModelChunk& GptModel::chunkAt(int chunk) const {
    if (chunk < 0 || std::size_t(chunk) >= chunks_.size())
        throw std::logic_error("chunk " + std::to_string(chunk) + " is not on this rank");
    return chunks_[std::size_t(chunk)];
}

GptModel::LayerWeights GptModel::weightsOf(int layer, float* base, std::size_t origin) const {
    const std::size_t i = firstTensorOf(layer);
    auto t = [&](int k) { return tensorIn(base, origin, i + std::size_t(k)); };
    return {t(Ln1W), t(Ln1B), t(QkvW), t(QkvB), t(ProjW),   t(ProjB),
            t(Ln2W), t(Ln2B), t(FcW),  t(FcB),  t(FcProjW), t(FcProjB)};
}

void GptModel::initialize(std::uint64_t seed) {
    // The whole model's values in its own order, whatever share this rank holds.
    const TensorTable whole = tensorTable(shape_, pipelineChunks(shape_, 1, 1, 0), 1);
    std::vector<float> values(whole.count, 0.0f);
    NormalStream normal(seed);
    const double residualStd = 0.02 / std::sqrt(2.0 * shape_.layers);
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
    std::vector<float> local(parameterCount_);
    for (const ParameterTensor& t : tensors_) {
        const bool tiedCopy = shape_.tied && t.name == "lm_head.weight";
        const ParameterTensor& from = *byName.at(tiedCopy ? "wte" : t.name);
        copyShare(local.data() + t.offset, values.data() + from.offset, from.shape, t.split,
                  tp_.size, tp_.rank);
    }
    store_->setParameters(local.data());
}

void GptModel::reportReady(std::size_t firstTensor, std::size_t lastTensor) const {
    if (!listener_)
        return;
    auto report = [&](std::size_t first, std::size_t last) { // tensors first..last, inclusive
        if (first > last || first == npos)
            return;
        const std::size_t begin = tensors_[first].offset;
        listener_->gradientsReady(begin, tensors_[last].offset + tensors_[last].count - begin);
    };
    if (shared_ >= firstTensor && shared_ <= lastTensor) { // summed across stages first
        report(shared_ + 1, lastTensor);
        if (shared_ > firstTensor)
            report(firstTensor, shared_ - 1);
        return;
    }
    report(firstTensor, lastTensor);
}

void GptModel::zeroGradients() {
    store_->zeroGradients();
}

LayerActivations GptModel::allocateLayer(MemoryCategory c) const {
    const std::size_t N = std::size_t(rows()), C = std::size_t(shape_.channels),
                      Ca = std::size_t(localChannels_), F = std::size_t(localFfn_),
                      T = std::size_t(shape_.seqLen), Ns = std::size_t(tokenRows());
    LayerActivations a; // the norms and the residual on this rank's token rows
    a.ln1 = memory_.floats(c, Ns * C);
    a.ln1Mean = memory_.floats(c, Ns);
    a.ln1Rstd = memory_.floats(c, Ns);
    a.qkv = memory_.floats(c, N * 3 * Ca);
    if (storeProbs_)
        a.probs = memory_.floats(c, std::size_t(microBatch_) * std::size_t(localHeads_) * T * T);
    a.attention = memory_.floats(c, N * Ca);
    a.residual = memory_.floats(c, Ns * C);
    a.ln2 = memory_.floats(c, Ns * C);
    a.ln2Mean = memory_.floats(c, Ns);
    a.ln2Rstd = memory_.floats(c, Ns);
    a.fc = memory_.floats(c, N * F);
    a.gelu = memory_.floats(c, N * F);
    return a;
}

// Runs one blocking tensor-parallel collective of `bytes` and reports it as a span.
void GptModel::tensorParallelCollective(const char* collective, std::size_t bytes,
                                        Request request) const {
    CommunicationSpan span;
    span.collective = collective;
    span.axis = "tp";
    span.bytes = bytes;
    span.waited = true;
    span.start = span.waitStart = comms_ ? comms_->now() : 0.0;
    request.wait();
    if (comms_) {
        span.end = comms_->now();
        comms_->communication(span);
    }
}

void GptModel::sumOverTensorParallel(float* x, std::size_t n) const {
    if (tp_.size > 1)
        tensorParallelCollective("all_reduce", n * sizeof(float), tp_.group->allReduceSum(x, n));
}

Buffer GptModel::gatherTokens(const float* shard) const {
    const std::size_t n = std::size_t(tokenRows()) * std::size_t(shape_.channels);
    Buffer whole = memory_.floats(MemoryCategory::Workspace, n * std::size_t(tp_.size));
    tensorParallelCollective("all_gather", n * sizeof(float),
                             tp_.group->allGather(shard, whole.f(), n));
    return whole;
}

const float* GptModel::finishRowParallel(Buffer& partial, Buffer& shard) const {
    const std::size_t n = std::size_t(tokenRows()) * std::size_t(shape_.channels);
    if (!sequenceParallel_) {
        sumOverTensorParallel(partial.f(), n);
        return partial.f();
    }
    if (!shard)
        shard = memory_.floats(MemoryCategory::Workspace, n);
    tensorParallelCollective("reduce_scatter", n * std::size_t(tp_.size) * sizeof(float),
                             tp_.group->reduceScatterSum(partial.f(), shard.f(), n));
    return shard.f();
}

void GptModel::layerNormBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                                 const float* weight, const float* mean, const float* rstd) const {
    const int N = tokenRows(), C = shape_.channels;
    if (!sequenceParallel_) {
        ops_.layerNormBackwardAccumulate(dinp, dweight, dweight + C, dout, inp, weight, mean, rstd,
                                         N, C);
        return;
    }
    Buffer partial = memory_.floats(MemoryCategory::Workspace, 2 * std::size_t(C));
    ops_.zero(partial.f(), 2 * std::size_t(C));
    ops_.layerNormBackwardAccumulate(dinp, partial.f(), partial.f() + C, dout, inp, weight, mean,
                                     rstd, N, C);
    sumOverTensorParallel(partial.f(), 2 * std::size_t(C));
    ops_.addInPlace(dweight, partial.f(), 2 * std::size_t(C));
}

// Column-parallel QKV and MLP up-projection, row-parallel output projections: each block's
// partial outputs are summed over the tensor-parallel group once. The row-parallel bias is
// added by one rank, so the sum has it once.
void GptModel::layerForward(int layer, LayerActivations& a, const float* x, float* y,
                            int prefetch) {
    const int N = rows(), Ns = tokenRows(), C = shape_.channels, Ca = localChannels_, F = localFfn_;
    Buffer gathered; // ZeRO-3: this layer's parameters, whole while it runs
    const std::size_t first = firstTensorOf(layer);
    float* params = parametersOf(first, lastTensorOf(layer), gathered);
    if (prefetch >= 0)
        prefetchParameters(firstTensorOf(prefetch), lastTensorOf(prefetch));
    const LayerWeights w = weightsOf(layer, params, offsetOf(first));
    Buffer projected = memory_.floats(MemoryCategory::Workspace, std::size_t(N) * std::size_t(C));
    Buffer projectedShard; // sequence parallelism: this rank's token rows of the block output
    const std::size_t NsC = std::size_t(Ns) * std::size_t(C);
    const bool addsBias = tp_.rank == 0;

    ops_.layerNormForward(a.ln1.f(), a.ln1Mean.f(), a.ln1Rstd.f(), x, w.ln1w, w.ln1b, Ns, C);
    Buffer ln1Whole = sequenceParallel_ ? gatherTokens(a.ln1.f()) : Buffer{};
    ops_.matmulForward(a.qkv.f(), ln1Whole ? ln1Whole.f() : a.ln1.f(), w.qkvw, w.qkvb, N, C,
                       3 * Ca);
    ln1Whole.reset();
    ops_.attentionForward(a.attention.f(), a.probs ? a.probs.f() : nullptr, a.qkv.f(), microBatch_,
                          shape_.seqLen, Ca, localHeads_);
    ops_.matmulForward(projected.f(), a.attention.f(), w.projw, addsBias ? w.projb : nullptr, N, Ca,
                       C);
    ops_.add(a.residual.f(), x, finishRowParallel(projected, projectedShard), NsC);

    ops_.layerNormForward(a.ln2.f(), a.ln2Mean.f(), a.ln2Rstd.f(), a.residual.f(), w.ln2w, w.ln2b,
                          Ns, C);
    Buffer ln2Whole = sequenceParallel_ ? gatherTokens(a.ln2.f()) : Buffer{};
    ops_.matmulForward(a.fc.f(), ln2Whole ? ln2Whole.f() : a.ln2.f(), w.fcw, w.fcb, N, C, F);
    ln2Whole.reset();
    ops_.geluForward(a.gelu.f(), a.fc.f(), std::size_t(N) * std::size_t(F));
    ops_.matmulForward(projected.f(), a.gelu.f(), w.fcprojw, addsBias ? w.fcprojb : nullptr, N, F,
                       C);
    ops_.add(y, a.residual.f(), finishRowParallel(projected, projectedShard), NsC);
}

void GptModel::weightGradient(int layer, float* grads, std::size_t origin, std::size_t weight,
                              std::size_t bias, Buffer dout, const float* input, int N, int C,
                              int OC, bool defer, MicrobatchState& state) {
    if (defer) {
        state.deferred.push_back({layer, weight, bias, std::move(dout), input, N, C, OC});
        return;
    }
    ops_.matmulBackwardWeightAccumulate(tensorIn(grads, origin, weight),
                                        tensorIn(grads, origin, bias), dout.f(), input, N, C, OC);
}

// The output gradient is whole on every tensor-parallel rank (gathered from the token shards
// with sequence parallelism); the input gradients of the column-parallel projections are
// partial and summed over the group (reduce-scattered to token shards), once per block.
Buffer GptModel::layerBackward(int layer, LayerActivations& a, const float* x, Buffer dout,
                               bool defer, MicrobatchState& state, int prefetch) {
    const int N = rows(), Ns = tokenRows(), C = shape_.channels, Ca = localChannels_, F = localFfn_;
    const std::size_t NC = std::size_t(N) * std::size_t(C), NF = std::size_t(N) * std::size_t(F),
                      NCa = std::size_t(N) * std::size_t(Ca),
                      NsC = std::size_t(Ns) * std::size_t(C);
    const std::size_t first = firstTensorOf(layer), last = lastTensorOf(layer),
                      origin = offsetOf(first);
    Buffer gathered, gradients; // ZeRO-3's parameters, ZeRO-2/3's microbatch gradients
    float* params = parametersOf(first, last, gathered);
    if (prefetch >= 0)
        prefetchParameters(firstTensorOf(prefetch), lastTensorOf(prefetch));
    float* grads = gradientsFor(first, last, gradients);
    const LayerWeights w = weightsOf(layer, params, origin);
    const LayerWeights g = weightsOf(layer, grads, origin);
    auto ws = [&](std::size_t n) { return memory_.floats(MemoryCategory::Workspace, n); };
    Buffer shard;            // sequence parallelism: reduce-scattered input gradients
    if (sequenceParallel_) { // the weight gradients read the norms' outputs whole
        a.ln1Gathered = gatherTokens(a.ln1.f());
        a.ln2Gathered = gatherTokens(a.ln2.f());
    }
    const float* ln1 = sequenceParallel_ ? a.ln1Gathered.f() : a.ln1.f();
    const float* ln2 = sequenceParallel_ ? a.ln2Gathered.f() : a.ln2.f();

    // MLP: y = residual + proj(gelu(fc(ln2(residual))))
    Buffer dresidual = ws(NsC);
    ops_.copy(dresidual.f(), dout.f(), NsC);
    if (sequenceParallel_)
        dout = gatherTokens(dout.f());
    Buffer dfc = ws(NF);
    ops_.matmulBackwardInput(dfc.f(), dout.f(), w.fcprojw, N, F, C, false);
    weightGradient(layer, grads, origin, first + FcProjW, first + FcProjB, std::move(dout),
                   a.gelu.f(), N, F, C, defer, state);
    ops_.geluBackward(dfc.f(), a.fc.f(), dfc.f(), NF);
    Buffer dln = ws(NC);
    ops_.matmulBackwardInput(dln.f(), dfc.f(), w.fcw, N, C, F, false);
    const float* dln2 = finishRowParallel(dln, shard);
    weightGradient(layer, grads, origin, first + FcW, first + FcB, std::move(dfc), ln2, N, C, F,
                   defer, state);
    layerNormBackward(dresidual.f(), g.ln2w, dln2, a.residual.f(), w.ln2w, a.ln2Mean.f(),
                      a.ln2Rstd.f());

    // Attention: residual = x + proj(attention(qkv(ln1(x))))
    Buffer dx = ws(NsC);
    ops_.copy(dx.f(), dresidual.f(), NsC);
    if (sequenceParallel_)
        dresidual = gatherTokens(dresidual.f());
    Buffer dattention = ws(NCa);
    ops_.matmulBackwardInput(dattention.f(), dresidual.f(), w.projw, N, Ca, C, false);
    weightGradient(layer, grads, origin, first + ProjW, first + ProjB, std::move(dresidual),
                   a.attention.f(), N, Ca, C, defer, state);
    Buffer dqkv = ws(NCa * 3);
    ops_.attentionBackward(dqkv.f(), dattention.f(), a.qkv.f(), a.probs ? a.probs.f() : nullptr,
                           microBatch_, shape_.seqLen, Ca, localHeads_);
    dattention.reset();
    ops_.matmulBackwardInput(dln.f(), dqkv.f(), w.qkvw, N, C, 3 * Ca, false);
    const float* dln1 = finishRowParallel(dln, shard);
    weightGradient(layer, grads, origin, first + QkvW, first + QkvB, std::move(dqkv), ln1, N, C,
                   3 * Ca, defer, state);
    layerNormBackward(dx.f(), g.ln1w, dln1, x, w.ln1w, a.ln1Mean.f(), a.ln1Rstd.f());
    if (!defer)
        gradientsDone(first, last, gradients);
    else if (gradients) // the W op finishes them
        state.deferredGradients.emplace_back(layer, std::move(gradients));
    return dx;
}

void GptModel::crossEntropy(float* logits, const std::int32_t* targets, float lossGradScale,
                            double* lossSum) const {
    const int N = rows(), V = localVocab_;
    if (tp_.size == 1) {
        ops_.crossEntropyForwardBackward(logits, targets, N, V, lossGradScale, lossSum);
        return;
    }
    // Vocabulary-parallel (Megatron-LM): the row maximum, the sum of exponentials and the
    // target's logit are the only things a rank cannot know alone.
    const std::size_t n = std::size_t(N);
    Buffer max = memory_.floats(MemoryCategory::Workspace, n);
    Buffer sums = memory_.floats(MemoryCategory::Workspace, 2 * n); // sumExp, then targetLogit
    ops_.rowMax(logits, N, V, max.f());
    tp_.group->allReduceMax(max.f(), n).wait();
    ops_.softmaxShardSums(logits, max.f(), targets, N, V, vocabStart_, sums.f(), sums.f() + n);
    sumOverTensorParallel(sums.f(), 2 * n);
    ops_.crossEntropyShardLoss(max.f(), sums.f(), sums.f() + n, N, lossSum);
    ops_.crossEntropyShardBackward(logits, max.f(), sums.f(), targets, N, V, vocabStart_,
                                   lossGradScale);
}

void GptModel::headForward(MicrobatchState* state, const float* input, const std::int32_t* targets,
                           float lossGradScale, double* lossSum, std::vector<float>* logits) {
    const int N = rows(), Ns = tokenRows(), C = shape_.channels, V = localVocab_;
    const std::size_t NC = std::size_t(N) * std::size_t(C);
    const MemoryCategory kept = state ? MemoryCategory::Activations : MemoryCategory::Workspace;
    Buffer normed = memory_.floats(MemoryCategory::Workspace, std::size_t(Ns) * std::size_t(C));
    Buffer mean = memory_.floats(kept, std::size_t(Ns)),
           rstd = memory_.floats(kept, std::size_t(Ns));
    Buffer gatheredNorm, gatheredHead; // ZeRO-3
    const float* lnf = parametersOf(lnfWeight_, lnfBias_, gatheredNorm);
    ops_.layerNormForward(normed.f(), mean.f(), rstd.f(), input, lnf, lnf + C, Ns, C);
    if (sequenceParallel_) // the head reads every token
        normed = gatherTokens(normed.f());
    Buffer lg = memory_.floats(MemoryCategory::Workspace, std::size_t(N) * std::size_t(V));
    const float* head = parametersOf(lmHead_, lmHead_, gatheredHead);
    ops_.matmulForward(lg.f(), normed.f(), head, nullptr, N, C, V);
    if (logits) {
        logits->resize(std::size_t(N) * std::size_t(V));
        ops_.copyToHost(logits->data(), lg.f(), logits->size() * sizeof(float));
    }
    crossEntropy(lg.f(), targets, lossGradScale, lossSum);
    if (state) {
        // The logits' gradient is known now; folding it into the head here keeps one
        // [N, C] gradient per microbatch instead of [N, V] logits (llm.c does the same).
        Buffer partial = memory_.floats(
            sequenceParallel_ ? MemoryCategory::Workspace : MemoryCategory::Activations, NC);
        ops_.matmulBackwardInput(partial.f(), lg.f(), head, N, C, V, false);
        if (sequenceParallel_) {
            state->finalNormGrad = activationBuffer(MemoryCategory::Activations);
            finishRowParallel(partial, state->finalNormGrad);
        } else {
            sumOverTensorParallel(partial.f(), NC);
            state->finalNormGrad = std::move(partial);
        }
        Buffer gradients;
        ops_.matmulBackwardWeightAccumulate(gradientsFor(lmHead_, lmHead_, gradients), nullptr,
                                            lg.f(), normed.f(), N, C, V);
        gradientsDone(lmHead_, lmHead_, gradients);
        state->finalMean = std::move(mean);
        state->finalRstd = std::move(rstd);
    }
}

Buffer GptModel::lossAccumulator() const {
    Buffer sum = memory_.allocate(MemoryCategory::Workspace, sizeof(double));
    ops_.zeroDoubles(sum.as<double>(), 1);
    return sum;
}

double GptModel::readScalar(const Buffer& scalar) const {
    double value = 0;
    ops_.copyToHost(&value, scalar.as<double>(), sizeof(double));
    return value;
}

namespace {
struct ScopedSpan {
    SpanSink* sink;
    const char* kind;
    const char* block;
    int layer;
    std::unique_ptr<kernels::Event> start;
    ScopedSpan(SpanSink* s, const char* k, const char* b, int l)
        : sink(s), kind(k), block(b), layer(l), start(s ? s->mark() : nullptr) {}
    ~ScopedSpan() {
        if (sink)
            sink->span(kind, block, layer, std::move(start));
    }
    ScopedSpan(const ScopedSpan&) = delete;
    ScopedSpan& operator=(const ScopedSpan&) = delete;
};
} // namespace

Buffer GptModel::uploadTokens(MemoryCategory category, const std::int32_t* inputs,
                              const std::int32_t* targets) const {
    const std::size_t N = std::size_t(rows());
    Buffer tokens = memory_.allocate(category, 2 * N * sizeof(std::int32_t));
    ops_.copyToDevice(tokens.as<std::int32_t>(), inputs, N * sizeof(std::int32_t));
    ops_.copyToDevice(tokens.as<std::int32_t>() + N, targets, N * sizeof(std::int32_t));
    return tokens;
}

void GptModel::embed(float* out, const Buffer& tokens) const {
    const int C = shape_.channels;
    Buffer gathered; // ZeRO-3
    float* table = parametersOf(wte_, wpe_, gathered);
    const std::size_t origin = offsetOf(wte_);
    const float* wte = tensorIn(table, origin, wte_);
    const float* wpe = tensorIn(table, origin, wpe_);
    if (tp_.size == 1) {
        ops_.embeddingForward(out, tokens.as<std::int32_t>(), wte, wpe, microBatch_, shape_.seqLen,
                              C);
        return;
    }
    // Vocabulary-parallel: each rank adds the rows it holds, one rank the positions.
    Buffer partial = sequenceParallel_ ? memory_.floats(MemoryCategory::Workspace,
                                                        std::size_t(rows()) * std::size_t(C))
                                       : Buffer{};
    ops_.embeddingShardForward(partial ? partial.f() : out, tokens.as<std::int32_t>(), wte,
                               vocabStart_, localVocab_, tp_.rank == 0 ? wpe : nullptr, microBatch_,
                               shape_.seqLen, C);
    if (!sequenceParallel_) {
        sumOverTensorParallel(out, std::size_t(rows()) * std::size_t(C));
        return;
    }
    Buffer shard;
    ops_.copy(out, finishRowParallel(partial, shard), std::size_t(tokenRows()) * std::size_t(C));
}

void GptModel::embeddingBackward(const float* dout, const Buffer& tokens) const {
    const int C = shape_.channels;
    Buffer whole = sequenceParallel_ ? gatherTokens(dout) : Buffer{};
    if (whole)
        dout = whole.f();
    Buffer gradients; // ZeRO-2/3
    float* table = gradientsFor(wte_, wpe_, gradients);
    const std::size_t origin = offsetOf(wte_);
    float* dwte = tensorIn(table, origin, wte_);
    float* dwpe = tensorIn(table, origin, wpe_);
    if (tp_.size == 1)
        ops_.embeddingBackwardAccumulate(dwte, dwpe, dout, tokens.as<std::int32_t>(), microBatch_,
                                         shape_.seqLen, C);
    else
        ops_.embeddingShardBackwardAccumulate(dwte, vocabStart_, localVocab_, dwpe, dout,
                                              tokens.as<std::int32_t>(), microBatch_, shape_.seqLen,
                                              C);
    gradientsDone(wte_, wpe_, gradients);
}

Buffer GptModel::activationBuffer(MemoryCategory category) const {
    return memory_.floats(category, std::size_t(tokenRows()) * std::size_t(shape_.channels));
}

double GptModel::forward(MicrobatchState& state, const std::int32_t* inputs,
                         const std::int32_t* targets, float lossGradScale, SpanSink* sink,
                         std::vector<float>* logits) {
    if (chunks_.size() != 1 || !chunks_[0].embedding || !chunks_[0].head)
        throw std::logic_error("forward() runs a whole model; a pipeline rank runs forwardChunk()");
    const Buffer loss = lossAccumulator();
    forwardChunk(state, 0, inputs, targets, Buffer{}, lossGradScale, loss.as<double>(), sink,
                 logits);
    return readScalar(loss);
}

void GptModel::backward(MicrobatchState& state, bool deferWeights, SpanSink* sink) {
    backwardChunk(state, 0, Buffer{}, deferWeights, sink);
}

double GptModel::evaluate(const std::int32_t* inputs, const std::int32_t* targets) {
    if (chunks_.size() != 1 || !chunks_[0].embedding || !chunks_[0].head)
        throw std::logic_error("evaluate() runs a whole model; a pipeline rank runs "
                               "evaluateChunk()");
    const Buffer loss = lossAccumulator();
    evaluateChunk(0, inputs, targets, Buffer{}, loss.as<double>());
    return readScalar(loss);
}

void GptModel::forwardChunk(MicrobatchState& state, int chunk, const std::int32_t* inputs,
                            const std::int32_t* targets, Buffer input, float lossGradScale,
                            double* lossSum, SpanSink* sink, std::vector<float>* logits) {
    if (state.forwardDone)
        throw std::logic_error("forward ran twice on one microbatch state");
    const ModelChunk& c = chunkAt(chunk);
    const int N = rows(), L = c.layers;
    state.layerInput.resize(std::size_t(L) + 1);
    state.layers.resize(std::size_t(L));
    if (c.embedding) {
        ScopedSpan span(sink, "forward", "embedding", -1);
        state.tokens = uploadTokens(MemoryCategory::Activations, inputs, targets);
        state.layerInput[0] = activationBuffer(MemoryCategory::Activations);
        embed(state.layerInput[0].f(), state.tokens);
    } else {
        if (!input)
            throw std::logic_error("chunk " + std::to_string(chunk) + " needs its stage's input");
        state.layerInput[0] = std::move(input);
    }
    for (int i = 0; i < L; ++i) {
        const int l = c.firstLayer + i;
        const int next = i + 1 < L ? l + 1 : -1; // ZeRO-3 gathers it while this layer runs
        const auto k = std::size_t(i);
        ScopedSpan span(sink, "forward", "layer", l);
        // The last layer of a chunk without the head writes what the next stage receives.
        Buffer& out = i + 1 == L && !c.head ? state.output : state.layerInput[k + 1];
        out = activationBuffer(i + 1 == L && !c.head ? MemoryCategory::Workspace
                                                     : MemoryCategory::Activations);
        if (recompute_ == Recompute::Full) {
            LayerActivations scratch = allocateLayer(MemoryCategory::Workspace);
            layerForward(l, scratch, state.layerInput[k].f(), out.f(), next);
        } else {
            state.layers[k] = allocateLayer(MemoryCategory::Activations);
            layerForward(l, state.layers[k], state.layerInput[k].f(), out.f(), next);
        }
    }
    if (c.head) {
        ScopedSpan span(sink, "forward", "head", -1);
        Buffer uploaded;
        const std::int32_t* deviceTargets = nullptr;
        if (c.embedding) {
            deviceTargets = state.tokens.as<std::int32_t>() + N;
        } else {
            uploaded =
                memory_.allocate(MemoryCategory::Workspace, std::size_t(N) * sizeof(std::int32_t));
            ops_.copyToDevice(uploaded.as<std::int32_t>(), targets,
                              std::size_t(N) * sizeof(std::int32_t));
            deviceTargets = uploaded.as<std::int32_t>();
        }
        headForward(&state, state.layerInput[std::size_t(L)].f(), deviceTargets, lossGradScale,
                    lossSum, logits);
    }
    state.forwardDone = true;
}

Buffer GptModel::evaluateChunk(int chunk, const std::int32_t* inputs, const std::int32_t* targets,
                               Buffer input, double* lossSum) {
    const ModelChunk& c = chunkAt(chunk);
    const int N = rows();
    Buffer tokens, x;
    if (c.embedding || c.head)
        tokens = uploadTokens(MemoryCategory::Workspace, inputs, targets);
    if (c.embedding) {
        x = activationBuffer(MemoryCategory::Workspace);
        embed(x.f(), tokens);
    } else {
        if (!input)
            throw std::logic_error("chunk " + std::to_string(chunk) + " needs its stage's input");
        x = std::move(input);
    }
    for (int l = c.firstLayer; l < c.firstLayer + c.layers; ++l) {
        LayerActivations scratch = allocateLayer(MemoryCategory::Workspace);
        Buffer y = activationBuffer(MemoryCategory::Workspace);
        layerForward(l, scratch, x.f(), y.f(), l + 1 < c.firstLayer + c.layers ? l + 1 : -1);
        x = std::move(y);
    }
    if (!c.head)
        return x;
    headForward(nullptr, x.f(), tokens.as<std::int32_t>() + N, 0.0f, lossSum, nullptr);
    return Buffer{};
}

void GptModel::backwardChunk(MicrobatchState& state, int chunk, Buffer outputGrad,
                             bool deferWeights, SpanSink* sink) {
    if (!state.forwardDone || state.backwardDone)
        throw std::logic_error("backward needs exactly one forward before it");
    const ModelChunk& c = chunkAt(chunk);
    const int C = shape_.channels, L = c.layers;
    const std::size_t NsC = std::size_t(tokenRows()) * std::size_t(C);
    const char* kind = deferWeights ? "backward_input" : "backward";
    Buffer dout;
    if (c.head) {
        ScopedSpan span(sink, kind, "head", -1);
        dout = activationBuffer(MemoryCategory::Workspace);
        ops_.zero(dout.f(), NsC);
        Buffer gathered, gradients; // ZeRO-3, ZeRO-2/3
        const float* lnf = parametersOf(lnfWeight_, lnfBias_, gathered);
        float* dlnf = gradientsFor(lnfWeight_, lnfBias_, gradients);
        layerNormBackward(dout.f(), dlnf, state.finalNormGrad.f(),
                          state.layerInput[std::size_t(L)].f(), lnf, state.finalMean.f(),
                          state.finalRstd.f());
        gradientsDone(lnfWeight_, lnfBias_, gradients);
        state.finalNormGrad.reset();
        state.finalMean.reset();
        state.finalRstd.reset();
        state.layerInput[std::size_t(L)].reset();
        // The final norm and a separate head (its gradient came in the forward) are done.
        reportReady(lnfWeight_, lmHead_ == wte_ ? lnfBias_ : lmHead_);
    } else {
        if (!outputGrad)
            throw std::logic_error("chunk " + std::to_string(chunk) +
                                   " needs the gradient at its output");
        dout = std::move(outputGrad);
    }
    for (int i = L - 1; i >= 0; --i) {
        const int l = c.firstLayer + i;
        const auto k = std::size_t(i);
        ScopedSpan span(sink, kind, "layer", l);
        LayerActivations a;
        if (recompute_ == Recompute::Full) {
            a = allocateLayer(MemoryCategory::Workspace);
            Buffer y = activationBuffer(MemoryCategory::Workspace);
            layerForward(l, a, state.layerInput[k].f(), y.f());
        } else {
            a = std::move(state.layers[k]);
        }
        dout = layerBackward(l, a, state.layerInput[k].f(), std::move(dout), deferWeights, state,
                             i > 0 ? l - 1 : -1);
        if (deferWeights)
            state.keptForWeights.push_back(std::move(a));
        else
            reportReady(firstTensorOf(l), firstTensorOf(l) + kTensorsPerLayer - 1);
        if (i > 0 || !c.embedding)
            state.layerInput[k].reset();
    }
    if (c.embedding) {
        ScopedSpan span(sink, kind, "embedding", -1);
        embeddingBackward(dout.f(), state.tokens);
        state.layerInput[0].reset();
        state.tokens.reset();
        reportReady(wte_, wpe_);
    } else {
        state.inputGrad = std::move(dout);
    }
    state.backwardDone = true;
}

void GptModel::backwardWeights(MicrobatchState& state, SpanSink* sink) {
    if (!state.backwardDone)
        throw std::logic_error("backwardWeights needs the backward of its microbatch first");
    std::size_t i = 0;
    while (i < state.deferred.size()) {
        const int layer = state.deferred[i].layer;
        ScopedSpan span(sink, "backward_weight", "layer", layer);
        // ZeRO-2/3: the layer's microbatch gradients wait in their own buffer.
        Buffer* held = nullptr;
        for (auto& [l, buffer] : state.deferredGradients)
            if (l == layer)
                held = &buffer;
        float* grads = held ? held->f() : store_->gradients();
        const std::size_t first = firstTensorOf(layer), origin = held ? offsetOf(first) : 0;
        for (; i < state.deferred.size() && state.deferred[i].layer == layer; ++i) {
            DeferredWeightGradient& d = state.deferred[i];
            ops_.matmulBackwardWeightAccumulate(tensorIn(grads, origin, d.weight),
                                                tensorIn(grads, origin, d.bias), d.dout.f(),
                                                d.input, d.N, d.C, d.OC);
            d.dout.reset();
        }
        reportReady(first, lastTensorOf(layer));
        if (held)
            gradientsDone(first, lastTensorOf(layer), *held);
    }
    state.deferred.clear();
    state.deferredGradients.clear();
    state.keptForWeights.clear();
    state.layers.clear();
}

} // namespace shardscope
