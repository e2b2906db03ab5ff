#include "gpt.h"

#include "core/error.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace shardscope {

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

struct GptModel::LayerWeights {
    kernels::Ptr ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
};

namespace {

// The layout's tensor parallelism, when it can cut this model; else InputError with the rule.
TensorParallel checkedTensorParallel(const GptShape& shape, TensorParallel tp) {
    const int t = tp.size;
    if (t >= 1 && (shape.heads % t || shape.ffn % t || shape.vocab % t))
        throw InputError("tp " + std::to_string(t) + " must divide heads (" +
                         std::to_string(shape.heads) + "), ffn_hidden (" +
                         std::to_string(shape.ffn) + ") and vocab (" + std::to_string(shape.vocab) +
                         "): each rank holds an equal share of each; pad the vocabulary or "
                         "choose another tp");
    return tp;
}

// micro_batch x seq_len, when the kernels can index it; else InputError.
int checkedRows(int microBatch, int seqLen) {
    if (microBatch <= 0)
        throw InputError("micro batch must be at least 1");
    if (std::int64_t(microBatch) * seqLen > std::numeric_limits<int>::max() / 4)
        throw InputError(
            "micro_batch x seq_len = " + std::to_string(std::int64_t(microBatch) * seqLen) +
            " tokens per microbatch is more than the engine handles (2^29); use a "
            "smaller micro_batch and more gradient accumulation");
    return microBatch * seqLen;
}

} // namespace

GptModel::GptModel(const ModelSpec& model, int microBatch, kernels::Ops& ops,
                   DeviceAllocator& memory, RecomputePolicy recompute, bool storeAttentionProbs,
                   std::vector<ModelChunk> chunks, TensorParallel tp, ZeroSharding zero,
                   TensorTypes types)
    : shape_(GptShape::of(model)), microBatch_(microBatch), tp_(checkedTensorParallel(shape_, tp)),
      localChannels_(tp_.share(shape_.channels)), localHeads_(tp_.share(shape_.heads)),
      localFfn_(tp_.share(shape_.ffn)), ops_(ops), memory_(memory), recompute_(recompute),
      storeProbs_(storeAttentionProbs && recompute.policy != Recompute::Selective),
      sp_(tp_, tp.sequenceParallel, checkedRows(microBatch, shape_.seqLen), shape_.channels, ops,
          memory),
      vocab_(tp_, shape_.vocab, ops, memory), types_(types), chunks_(std::move(chunks)) {
    if (chunks_.empty())
        chunks_ = pipelineChunks(shape_.layers, 1, 1, 0);
    buildTensorTable();
    store_ = std::make_unique<ZeroStore>(parameterCount_, shardUnits(), zero, ops_, memory_,
                                         types_.weights, types_.gradients);
}

kernels::Ptr GptModel::parametersOf(std::size_t first, std::size_t last, Buffer& holder) const {
    const auto [offset, count] = rangeOf(first, last);
    return store_->parametersOf(offset, count, holder);
}

void GptModel::prefetchParameters(std::size_t first, std::size_t last) const {
    const auto [offset, count] = rangeOf(first, last);
    store_->prefetch(offset, count);
}

kernels::Ptr GptModel::gradientsFor(std::size_t first, std::size_t last, Buffer& holder) const {
    const auto [offset, count] = rangeOf(first, last);
    return store_->gradientsFor(offset, count, holder);
}

void GptModel::gradientsDone(std::size_t first, std::size_t last, Buffer& holder) const {
    const auto [offset, count] = rangeOf(first, last);
    store_->gradientsDone(offset, count, holder);
}

GptModel::~GptModel() = default;

void GptModel::buildTensorTable() {
    TensorTable t = tensorTable(shape_, chunks_, tp_.size());
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

std::vector<std::size_t> GptModel::shardUnits() const {
    std::vector<std::size_t> firsts; // tensors that begin a unit
    for (std::size_t t : {wte_, lnfWeight_, lmHead_})
        if (t != npos)
            firsts.push_back(t);
    for (std::size_t t : layerTensor_)
        if (t != npos)
            firsts.push_back(t);
    std::vector<std::size_t> offsets{0};
    for (std::size_t t : firsts)
        offsets.push_back(tensors_[t].offset);
    std::sort(offsets.begin(), offsets.end());
    offsets.erase(std::unique(offsets.begin(), offsets.end()), offsets.end());
    return offsets;
}

const ModelChunk& GptModel::chunkAt(int chunk) const {
    if (chunk < 0 || std::size_t(chunk) >= chunks_.size())
        throw std::logic_error("chunk " + std::to_string(chunk) + " is not on this rank");
    return chunks_[std::size_t(chunk)];
}

GptModel::LayerWeights GptModel::weightsOf(int layer, kernels::Ptr base, std::size_t origin) const {
    const std::size_t i = firstTensorOf(layer);
    auto t = [&](int k) { return tensorIn(base, origin, i + std::size_t(k)); };
    return {t(Ln1W), t(Ln1B), t(QkvW), t(QkvB), t(ProjW),   t(ProjB),
            t(Ln2W), t(Ln2B), t(FcW),  t(FcB),  t(FcProjW), t(FcProjB)};
}

TensorTypes TensorTypes::of(const PrecisionPolicy& p) {
    using kernels::DType;
    const auto type = [](Precision x) {
        if (x == Precision::Fp32)
            return DType::F32;
        if (x == Precision::Bf16)
            return DType::BF16;
        throw InputError("the engine stores tensors in fp32 or bf16, not " + toString(x) +
                         ": use \"precision\": \"fp32\", \"bf16\" or \"bf16-bf16grads\"");
    };
    TensorTypes t;
    t.weights = t.activations = type(p.compute);
    t.gradients = type(p.grads);
    return t;
}

std::vector<float> GptModel::initialValues(std::uint64_t seed) const {
    std::vector<float> values(parameterCount_);
    initialValues(seed, 0, parameterCount_, values.data());
    return values;
}

void GptModel::initialValues(std::uint64_t seed, std::size_t offset, std::size_t n,
                             float* out) const {
    TensorTable table;
    table.tensors = tensors_;
    table.count = parameterCount_;
    InitialValues(shape_, table, seed, tp_.size(), tp_.rank()).fill(offset, n, out);
}

void GptModel::initialize(std::uint64_t seed) {
    TensorTable table;
    table.tensors = tensors_;
    table.count = parameterCount_;
    const InitialValues values(shape_, table, seed, tp_.size(), tp_.rank());
    const std::vector<ShardLayout::Piece> stored =
        shardsParameters() ? shardLayout().owned()
                           : std::vector<ShardLayout::Piece>{{0, parameterCount_, 0}};
    forEachChunk(stored, [&](std::size_t flat, std::size_t n, float* host) {
        values.fill(flat, n, host);
        storeParameters(flat, host, n);
    });
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
    a.ln1 = activations(c, Ns * C);
    a.ln1Mean = memory_.floats(c, Ns);
    a.ln1Rstd = memory_.floats(c, Ns);
    a.qkv = activations(c, N * 3 * Ca);
    if (storeProbs_)
        a.probs = activations(c, std::size_t(microBatch_) * std::size_t(localHeads_) * T * T);
    a.attention = activations(c, N * Ca);
    a.residual = activations(c, Ns * C);
    a.ln2 = activations(c, Ns * C);
    a.ln2Mean = memory_.floats(c, Ns);
    a.ln2Rstd = memory_.floats(c, Ns);
    a.fc = activations(c, N * F);
    a.gelu = activations(c, N * F);
    return a;
}

// Column-parallel QKV and MLP up-projection, row-parallel output projections: each block's
// partial outputs are summed over the tensor-parallel group once. The row-parallel bias is
// added by one rank, so the sum has it once.
void GptModel::layerForward(int layer, LayerActivations& a, kernels::ConstPtr x, kernels::Ptr y,
                            int prefetch) {
    const int N = rows(), Ns = tokenRows(), C = shape_.channels, Ca = localChannels_, F = localFfn_;
    Buffer gathered; // ZeRO-3: this layer's parameters, whole while it runs
    const std::size_t first = firstTensorOf(layer);
    kernels::Ptr params = parametersOf(first, lastTensorOf(layer), gathered);
    if (prefetch >= 0)
        prefetchParameters(firstTensorOf(prefetch), lastTensorOf(prefetch));
    const LayerWeights w = weightsOf(layer, params, offsetOf(first));
    Buffer projected = activations(MemoryCategory::Workspace, std::size_t(N) * std::size_t(C));
    Buffer projectedShard; // sequence parallelism: this rank's token rows of the block output
    const std::size_t NsC = std::size_t(Ns) * std::size_t(C);
    const bool addsBias = tp_.addsReplicatedTerms();

    ops_.layerNormForward(a.ln1.ptr(), a.ln1Mean.f(), a.ln1Rstd.f(), x, w.ln1w, w.ln1b, Ns, C);
    Buffer ln1Whole;
    ops_.matmulForward(a.qkv.ptr(), sp_.whole(a.ln1.ptr(), ln1Whole), w.qkvw, w.qkvb, N, C, 3 * Ca);
    ln1Whole.reset();
    ops_.attentionForward(a.attention.ptr(), a.probs ? a.probs.ptr() : nullptr, a.qkv.ptr(),
                          microBatch_, shape_.seqLen, Ca, localHeads_);
    ops_.matmulForward(projected.ptr(), a.attention.ptr(), w.projw, addsBias ? w.projb : nullptr, N,
                       Ca, C);
    ops_.add(a.residual.ptr(), x, sp_.reduce(projected, projectedShard), NsC);

    ops_.layerNormForward(a.ln2.ptr(), a.ln2Mean.f(), a.ln2Rstd.f(), a.residual.ptr(), w.ln2w,
                          w.ln2b, Ns, C);
    Buffer ln2Whole;
    ops_.matmulForward(a.fc.ptr(), sp_.whole(a.ln2.ptr(), ln2Whole), w.fcw, w.fcb, N, C, F);
    ln2Whole.reset();
    ops_.geluForward(a.gelu.ptr(), a.fc.ptr(), std::size_t(N) * std::size_t(F));
    ops_.matmulForward(projected.ptr(), a.gelu.ptr(), w.fcprojw, addsBias ? w.fcprojb : nullptr, N,
                       F, C);
    ops_.add(y, a.residual.ptr(), sp_.reduce(projected, projectedShard), NsC);
}

void GptModel::weightGradient(int layer, kernels::Ptr grads, std::size_t origin, std::size_t weight,
                              std::size_t bias, Buffer dout, kernels::ConstPtr input, int N, int C,
                              int OC, bool defer, MicrobatchState& state) {
    if (defer) {
        state.deferred.push_back({layer, weight, bias, std::move(dout), input, N, C, OC});
        return;
    }
    ops_.matmulBackwardWeightAccumulate(tensorIn(grads, origin, weight),
                                        tensorIn(grads, origin, bias), dout.ptr(), input, N, C, OC);
}

// The output gradient is whole on every tensor-parallel rank (gathered from the token shards
// with sequence parallelism); the input gradients of the column-parallel projections are
// partial and summed over the group (reduce-scattered to token shards), once per block.
Buffer GptModel::layerBackward(int layer, LayerActivations& a, kernels::ConstPtr x, Buffer dout,
                               bool defer, MicrobatchState& state, int prefetch) {
    const int N = rows(), Ns = tokenRows(), C = shape_.channels, Ca = localChannels_, F = localFfn_;
    const std::size_t NC = std::size_t(N) * std::size_t(C), NF = std::size_t(N) * std::size_t(F),
                      NCa = std::size_t(N) * std::size_t(Ca),
                      NsC = std::size_t(Ns) * std::size_t(C);
    const std::size_t first = firstTensorOf(layer), last = lastTensorOf(layer),
                      origin = offsetOf(first);
    Buffer gathered, gradients; // ZeRO-3's parameters, ZeRO-2/3's microbatch gradients
    kernels::Ptr params = parametersOf(first, last, gathered);
    if (prefetch >= 0)
        prefetchParameters(firstTensorOf(prefetch), lastTensorOf(prefetch));
    kernels::Ptr grads = gradientsFor(first, last, gradients);
    const LayerWeights w = weightsOf(layer, params, origin);
    const LayerWeights g = weightsOf(layer, grads, origin);
    auto ws = [&](std::size_t n) { return activations(MemoryCategory::Workspace, n); };
    Buffer shard; // sequence parallelism: reduce-scattered input gradients
    // The weight gradients read the norms' outputs whole.
    const kernels::ConstPtr ln1 = sp_.whole(a.ln1.ptr(), a.ln1Gathered);
    const kernels::ConstPtr ln2 = sp_.whole(a.ln2.ptr(), a.ln2Gathered);

    // MLP: y = residual + proj(gelu(fc(ln2(residual))))
    Buffer dresidual = ws(NsC);
    ops_.copy(dresidual.ptr(), dout.ptr(), NsC);
    if (sp_.on())
        dout = sp_.gather(dout.ptr());
    Buffer dfc = ws(NF);
    ops_.matmulBackwardInput(dfc.ptr(), dout.ptr(), w.fcprojw, N, F, C, false);
    weightGradient(layer, grads, origin, first + FcProjW, first + FcProjB, std::move(dout),
                   a.gelu.ptr(), N, F, C, defer, state);
    ops_.geluBackward(dfc.ptr(), a.fc.ptr(), dfc.ptr(), NF);
    Buffer dln = ws(NC);
    ops_.matmulBackwardInput(dln.ptr(), dfc.ptr(), w.fcw, N, C, F, false);
    const kernels::ConstPtr dln2 = sp_.reduce(dln, shard);
    weightGradient(layer, grads, origin, first + FcW, first + FcB, std::move(dfc), ln2, N, C, F,
                   defer, state);
    sp_.layerNormBackward(dresidual.ptr(), g.ln2w, dln2, a.residual.ptr(), w.ln2w, a.ln2Mean.f(),
                          a.ln2Rstd.f());

    // Attention: residual = x + proj(attention(qkv(ln1(x))))
    Buffer dx = ws(NsC);
    ops_.copy(dx.ptr(), dresidual.ptr(), NsC);
    if (sp_.on())
        dresidual = sp_.gather(dresidual.ptr());
    Buffer dattention = ws(NCa);
    ops_.matmulBackwardInput(dattention.ptr(), dresidual.ptr(), w.projw, N, Ca, C, false);
    weightGradient(layer, grads, origin, first + ProjW, first + ProjB, std::move(dresidual),
                   a.attention.ptr(), N, Ca, C, defer, state);
    Buffer dqkv = ws(NCa * 3);
    ops_.attentionBackward(dqkv.ptr(), dattention.ptr(), a.qkv.ptr(),
                           a.probs ? a.probs.ptr() : nullptr, microBatch_, shape_.seqLen, Ca,
                           localHeads_);
    dattention.reset();
    ops_.matmulBackwardInput(dln.ptr(), dqkv.ptr(), w.qkvw, N, C, 3 * Ca, false);
    const kernels::ConstPtr dln1 = sp_.reduce(dln, shard);
    weightGradient(layer, grads, origin, first + QkvW, first + QkvB, std::move(dqkv), ln1, N, C,
                   3 * Ca, defer, state);
    sp_.layerNormBackward(dx.ptr(), g.ln1w, dln1, x, w.ln1w, a.ln1Mean.f(), a.ln1Rstd.f());
    if (!defer)
        gradientsDone(first, last, gradients);
    else if (gradients) // the W op finishes them
        state.deferredGradients.emplace_back(layer, std::move(gradients));
    return dx;
}

void GptModel::headForward(MicrobatchState* state, kernels::ConstPtr input,
                           const std::int32_t* targets, float lossGradScale, double* lossSum,
                           std::vector<float>* logits) {
    const int N = rows(), Ns = tokenRows(), C = shape_.channels, V = vocab_.count();
    const std::size_t NC = std::size_t(N) * std::size_t(C);
    const MemoryCategory kept = state ? MemoryCategory::Activations : MemoryCategory::Workspace;
    Buffer normed = activations(MemoryCategory::Workspace, std::size_t(Ns) * std::size_t(C));
    Buffer mean = memory_.floats(kept, std::size_t(Ns)),
           rstd = memory_.floats(kept, std::size_t(Ns));
    Buffer gatheredNorm, gatheredHead; // ZeRO-3
    const kernels::ConstPtr lnf = parametersOf(lnfWeight_, lnfBias_, gatheredNorm);
    ops_.layerNormForward(normed.ptr(), mean.f(), rstd.f(), input, lnf, lnf + C, Ns, C);
    if (sp_.on()) // the head reads every token
        normed = sp_.gather(normed.ptr());
    Buffer lg = memory_.floats(MemoryCategory::Workspace, std::size_t(N) * std::size_t(V));
    // A tied head is the token table, gathered and reduced with the embeddings' unit.
    const std::size_t headUnit = lmHead_ == wte_ ? wpe_ : lmHead_;
    const kernels::ConstPtr head = parametersOf(lmHead_, headUnit, gatheredHead);
    ops_.matmulForward(lg.f(), normed.ptr(), head, nullptr, N, C, V);
    if (logits) {
        logits->resize(std::size_t(N) * std::size_t(V));
        ops_.copyToHost(logits->data(), lg.f(), logits->size() * sizeof(float));
    }
    vocab_.crossEntropy(lg.f(), targets, N, lossGradScale, lossSum);
    if (state) {
        // The logits' gradient is known now; folding it into the head here keeps one
        // [N, C] gradient per microbatch instead of [N, V] logits (llm.c does the same).
        Buffer partial =
            activations(sp_.on() ? MemoryCategory::Workspace : MemoryCategory::Activations, NC);
        ops_.matmulBackwardInput(partial.ptr(), lg.f(), head, N, C, V, false);
        Buffer shard = sp_.on() ? activationBuffer(MemoryCategory::Activations) : Buffer{};
        sp_.reduce(partial, shard);
        state->finalNormGrad = sp_.on() ? std::move(shard) : std::move(partial);
        Buffer gradients;
        ops_.matmulBackwardWeightAccumulate(gradientsFor(lmHead_, headUnit, gradients), nullptr,
                                            lg.f(), normed.ptr(), N, C, V);
        gradientsDone(lmHead_, headUnit, gradients);
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

void GptModel::embed(kernels::Ptr out, const Buffer& tokens) const {
    const int C = shape_.channels;
    Buffer gathered; // ZeRO-3
    const kernels::Ptr table = parametersOf(wte_, wpe_, gathered);
    const std::size_t origin = offsetOf(wte_);
    const kernels::ConstPtr wte = tensorIn(table, origin, wte_);
    const kernels::ConstPtr wpe = tensorIn(table, origin, wpe_);
    const std::int32_t* ids = tokens.as<std::int32_t>();
    if (!sp_.on()) { // the whole stream on every rank: the group sums the vocabulary shards
        vocab_.embeddingForward(out, ids, wte, wpe, microBatch_, shape_.seqLen, C);
        tp_.allReduceSum(out, std::size_t(rows()) * std::size_t(C));
        return;
    }
    Buffer partial = activations(MemoryCategory::Workspace, std::size_t(rows()) * std::size_t(C));
    vocab_.embeddingForward(partial.ptr(), ids, wte, wpe, microBatch_, shape_.seqLen, C);
    Buffer shard;
    ops_.copy(out, sp_.reduce(partial, shard), sp_.tokenElements());
}

void GptModel::embeddingBackward(kernels::ConstPtr dout, const Buffer& tokens) const {
    const int C = shape_.channels;
    Buffer whole;
    dout = sp_.whole(dout, whole);
    Buffer gradients; // ZeRO-2/3
    const kernels::Ptr table = gradientsFor(wte_, wpe_, gradients);
    const std::size_t origin = offsetOf(wte_);
    const kernels::Ptr dwte = tensorIn(table, origin, wte_);
    const kernels::Ptr dwpe = tensorIn(table, origin, wpe_);
    vocab_.embeddingBackward(dwte, dwpe, dout, tokens.as<std::int32_t>(), microBatch_,
                             shape_.seqLen, C);
    gradientsDone(wte_, wpe_, gradients);
}

Buffer GptModel::activationBuffer(MemoryCategory category) const {
    return activations(category, std::size_t(tokenRows()) * std::size_t(shape_.channels));
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
        embed(state.layerInput[0].ptr(), state.tokens);
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
        if (recompute_.rerunsLayer(i)) {
            LayerActivations scratch = allocateLayer(MemoryCategory::Workspace);
            layerForward(l, scratch, state.layerInput[k].ptr(), out.ptr(), next);
        } else {
            state.layers[k] = allocateLayer(MemoryCategory::Activations);
            layerForward(l, state.layers[k], state.layerInput[k].ptr(), out.ptr(), next);
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
        headForward(&state, state.layerInput[std::size_t(L)].ptr(), deviceTargets, lossGradScale,
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
        embed(x.ptr(), tokens);
    } else {
        if (!input)
            throw std::logic_error("chunk " + std::to_string(chunk) + " needs its stage's input");
        x = std::move(input);
    }
    for (int l = c.firstLayer; l < c.firstLayer + c.layers; ++l) {
        LayerActivations scratch = allocateLayer(MemoryCategory::Workspace);
        Buffer y = activationBuffer(MemoryCategory::Workspace);
        layerForward(l, scratch, x.ptr(), y.ptr(), l + 1 < c.firstLayer + c.layers ? l + 1 : -1);
        x = std::move(y);
    }
    if (!c.head)
        return x;
    headForward(nullptr, x.ptr(), tokens.as<std::int32_t>() + N, 0.0f, lossSum, nullptr);
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
        ops_.zero(dout.ptr(), NsC);
        Buffer gathered, gradients; // ZeRO-3, ZeRO-2/3
        const kernels::ConstPtr lnf = parametersOf(lnfWeight_, lnfBias_, gathered);
        const kernels::Ptr dlnf = gradientsFor(lnfWeight_, lnfBias_, gradients);
        sp_.layerNormBackward(dout.ptr(), dlnf, state.finalNormGrad.ptr(),
                              state.layerInput[std::size_t(L)].ptr(), lnf, state.finalMean.f(),
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
        if (recompute_.rerunsLayer(i)) {
            a = allocateLayer(MemoryCategory::Workspace);
            Buffer y = activationBuffer(MemoryCategory::Workspace);
            layerForward(l, a, state.layerInput[k].ptr(), y.ptr());
        } else {
            a = std::move(state.layers[k]);
        }
        dout = layerBackward(l, a, state.layerInput[k].ptr(), std::move(dout), deferWeights, state,
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
        embeddingBackward(dout.ptr(), state.tokens);
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
        const kernels::Ptr grads = held ? held->ptr() : store_->gradients();
        const std::size_t first = firstTensorOf(layer), origin = held ? offsetOf(first) : 0;
        for (; i < state.deferred.size() && state.deferred[i].layer == layer; ++i) {
            DeferredWeightGradient& d = state.deferred[i];
            ops_.matmulBackwardWeightAccumulate(tensorIn(grads, origin, d.weight),
                                                tensorIn(grads, origin, d.bias), d.dout.ptr(),
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
