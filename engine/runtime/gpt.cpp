#include "gpt.h"

#include "core/error.h"
#include "rotary.h"

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
    if (tp.size >= 1)
        if (const std::string problem = tensorParallelProblem(shape, tp.size); !problem.empty())
            throw InputError(problem);
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
                   TensorTypes types, ContextParallel cp)
    : shape_(GptShape::of(model)), microBatch_(microBatch), tp_(checkedTensorParallel(shape_, tp)),
      cp_(cp, shape_.seqLen, ops, memory), localChannels_(tp_.share(shape_.channels)),
      localHeads_(tp_.share(shape_.heads)), localKvHeads_(tp_.share(shape_.kvHeads)),
      localQkv_((localHeads_ + 2 * localKvHeads_) * shape_.headDim()),
      localFfn_(tp_.share(shape_.ffn)), ops_(ops), memory_(memory), recompute_(recompute),
      // Ring attention never materialises the probabilities.
      storeProbs_(storeAttentionProbs && recompute.policy != Recompute::Selective && !cp_.on()),
      sp_(tp_, tp.sequenceParallel, checkedRows(microBatch, cp_.localSeqLen()), shape_.channels,
          ops, memory),
      vocab_(tp_, shape_.vocab, ops, memory), types_(types), chunks_(std::move(chunks)) {
    if (chunks_.empty())
        chunks_ = pipelineChunks(shape_.layers, 1, 1, 0);
    slotIndex_.fill(-1);
    const std::vector<LayerTensor>& slots = layerTensors(shape_.family);
    for (std::size_t k = 0; k < slots.size(); ++k)
        slotIndex_[slots[k]] = int(k);
    if (shape_.llama()) { // the angles of this rank's positions, uploaded once
        RotaryTables angles =
            rotaryTables(shape_.ropeTheta, shape_.headDim(), shape_.seqLen, shape_.ropeScaling);
        if (cp_.on()) { // the rows of this rank's slice, in its order
            angles.cos = cp_.selectRows(angles.cos, shape_.headDim() / 2);
            angles.sin = cp_.selectRows(angles.sin, shape_.headDim() / 2);
        }
        ropeCos_ = memory_.floats(MemoryCategory::Workspace, angles.cos.size());
        ropeSin_ = memory_.floats(MemoryCategory::Workspace, angles.sin.size());
        ops_.copyToDevice(ropeCos_.f(), angles.cos.data(), angles.cos.size() * sizeof(float));
        ops_.copyToDevice(ropeSin_.f(), angles.sin.data(), angles.sin.size() * sizeof(float));
    }
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
    auto t = [&](LayerTensor slot) {
        return optionalTensorIn(base, origin, tensorOf(layer, slot));
    };
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
                      T = std::size_t(seqLen()), Ns = std::size_t(tokenRows());
    const bool layerNorm = !shape_.llama();
    LayerActivations a; // the norms and the residual on this rank's token rows
    a.ln1 = activations(c, Ns * C);
    if (layerNorm)
        a.ln1Mean = memory_.floats(c, Ns);
    a.ln1Rstd = memory_.floats(c, Ns);
    a.qkv = activations(c, N * std::size_t(localQkv_));
    if (cp_.on())
        a.lse = memory_.floats(c, std::size_t(microBatch_) * std::size_t(localHeads_) * T);
    if (storeProbs_)
        a.probs = activations(c, std::size_t(microBatch_) * std::size_t(localHeads_) * T * T);
    a.attention = activations(c, N * Ca);
    a.residual = activations(c, Ns * C);
    a.ln2 = activations(c, Ns * C);
    if (layerNorm)
        a.ln2Mean = memory_.floats(c, Ns);
    a.ln2Rstd = memory_.floats(c, Ns);
    a.fc = activations(c, N * std::size_t(mlpUpWidth()));
    a.gelu = activations(c, N * F);
    return a;
}

void GptModel::normForward(kernels::Ptr out, Buffer& mean, Buffer& rstd, kernels::ConstPtr x,
                           kernels::ConstPtr weight, kernels::ConstPtr bias) const {
    if (shape_.llama())
        ops_.rmsNormForward(out, rstd.f(), x, weight, tokenRows(), shape_.channels, shape_.normEps);
    else
        ops_.layerNormForward(out, mean.f(), rstd.f(), x, weight, bias, tokenRows(),
                              shape_.channels);
}

void GptModel::normBackward(kernels::Ptr dinp, kernels::Ptr dweight, kernels::ConstPtr dout,
                            kernels::ConstPtr x, kernels::ConstPtr weight, const Buffer& mean,
                            const Buffer& rstd) const {
    if (shape_.llama())
        sp_.rmsNormBackward(dinp, dweight, dout, x, weight, rstd.f());
    else
        sp_.layerNormBackward(dinp, dweight, dout, x, weight, mean.f(), rstd.f());
}

kernels::ConstPtr GptModel::attentionHeads(kernels::ConstPtr qkv, Buffer& holder) const {
    if (localKvHeads_ == localHeads_) // multi-head: q, k and v heads already line up
        return qkv;
    holder = activations(MemoryCategory::Workspace, std::size_t(rows()) * 3 * localChannels_);
    ops_.expandKvHeads(holder.ptr(), qkv, rows(), localHeads_, localKvHeads_, shape_.headDim());
    return holder.ptr();
}

void GptModel::attentionForward(LayerActivations& a) const {
    const int B = microBatch_, T = seqLen(), d = shape_.headDim();
    if (shape_.llama()) { // queries and keys turn by their positions' angles
        ops_.rotaryEmbedding(a.qkv.ptr(), ropeCos_.f(), ropeSin_.f(), B, T, localHeads_, d,
                             localQkv_, false);
        ops_.rotaryEmbedding(a.qkv.ptr() + std::size_t(localHeads_ * d), ropeCos_.f(), ropeSin_.f(),
                             B, T, localKvHeads_, d, localQkv_, false);
    }
    if (cp_.on()) { // grouped heads meet their keys in the ring's kernels, unexpanded
        cp_.attentionForward(a.attention.ptr(), a.lse.f(), a.qkv.ptr(), localQkv_, B, localHeads_,
                             localKvHeads_, d);
        return;
    }
    Buffer expanded;
    ops_.attentionForward(a.attention.ptr(), a.probs ? a.probs.ptr() : nullptr,
                          attentionHeads(a.qkv.ptr(), expanded), B, T, localChannels_, localHeads_);
}

void GptModel::attentionBackward(kernels::Ptr dqkv, kernels::ConstPtr dattention,
                                 const LayerActivations& a) const {
    const int B = microBatch_, T = seqLen(), d = shape_.headDim(), N = rows();
    if (cp_.on()) {
        cp_.attentionBackward(dqkv, dattention, a.attention.ptr(), a.lse.f(), a.qkv.ptr(),
                              localQkv_, B, localHeads_, localKvHeads_, d);
    } else {
        Buffer expanded, dexpanded;
        const kernels::ConstPtr heads = attentionHeads(a.qkv.ptr(), expanded);
        const bool grouped = bool(expanded);
        if (grouped)
            dexpanded = activations(MemoryCategory::Workspace, std::size_t(N) * 3 * localChannels_);
        ops_.attentionBackward(grouped ? dexpanded.ptr() : dqkv, dattention, heads,
                               a.probs ? a.probs.ptr() : nullptr, B, T, localChannels_,
                               localHeads_);
        if (grouped)
            ops_.sumKvHeadGradients(dqkv, dexpanded.ptr(), N, localHeads_, localKvHeads_, d);
    }
    if (shape_.llama()) { // the rotation's transpose carries the gradient back to the projection
        ops_.rotaryEmbedding(dqkv, ropeCos_.f(), ropeSin_.f(), B, T, localHeads_, d, localQkv_,
                             true);
        ops_.rotaryEmbedding(dqkv + std::size_t(localHeads_ * d), ropeCos_.f(), ropeSin_.f(), B, T,
                             localKvHeads_, d, localQkv_, true);
    }
}

void GptModel::activationForward(LayerActivations& a) const {
    const int N = rows(), F = localFfn_;
    if (shape_.llama())
        ops_.swigluForward(a.gelu.ptr(), a.fc.ptr(), N, F);
    else
        ops_.geluForward(a.gelu.ptr(), a.fc.ptr(), std::size_t(N) * std::size_t(F));
}

Buffer GptModel::activationBackward(Buffer doutput, const LayerActivations& a) const {
    const int N = rows(), F = localFfn_;
    if (!shape_.llama()) {
        ops_.geluBackward(doutput.ptr(), a.fc.ptr(), doutput.ptr(),
                          std::size_t(N) * std::size_t(F));
        return doutput;
    }
    Buffer dgateUp =
        activations(MemoryCategory::Workspace, std::size_t(N) * std::size_t(mlpUpWidth()));
    ops_.swigluBackward(dgateUp.ptr(), a.fc.ptr(), doutput.ptr(), N, F);
    return dgateUp;
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

    normForward(a.ln1.ptr(), a.ln1Mean, a.ln1Rstd, x, w.ln1w, w.ln1b);
    Buffer ln1Whole;
    ops_.matmulForward(a.qkv.ptr(), sp_.whole(a.ln1.ptr(), ln1Whole), w.qkvw, w.qkvb, N, C,
                       localQkv_);
    ln1Whole.reset();
    attentionForward(a);
    ops_.matmulForward(projected.ptr(), a.attention.ptr(), w.projw, addsBias ? w.projb : nullptr, N,
                       Ca, C);
    ops_.add(a.residual.ptr(), x, sp_.reduce(projected, projectedShard), NsC);

    normForward(a.ln2.ptr(), a.ln2Mean, a.ln2Rstd, a.residual.ptr(), w.ln2w, w.ln2b);
    Buffer ln2Whole;
    ops_.matmulForward(a.fc.ptr(), sp_.whole(a.ln2.ptr(), ln2Whole), w.fcw, w.fcb, N, C,
                       mlpUpWidth());
    ln2Whole.reset();
    activationForward(a);
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
                                        optionalTensorIn(grads, origin, bias), dout.ptr(), input, N,
                                        C, OC);
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

    // MLP: y = residual + proj(act(fc(norm2(residual)))), act GELU or SwiGLU (fc: gate and up)
    const int Up = mlpUpWidth();
    Buffer dresidual = ws(NsC);
    ops_.copy(dresidual.ptr(), dout.ptr(), NsC);
    if (sp_.on())
        dout = sp_.gather(dout.ptr());
    Buffer dact = ws(NF);
    ops_.matmulBackwardInput(dact.ptr(), dout.ptr(), w.fcprojw, N, F, C, false);
    weightGradient(layer, grads, origin, tensorOf(layer, FcProjW), tensorOf(layer, FcProjB),
                   std::move(dout), a.gelu.ptr(), N, F, C, defer, state);
    Buffer dfc = activationBackward(std::move(dact), a);
    Buffer dln = ws(NC);
    ops_.matmulBackwardInput(dln.ptr(), dfc.ptr(), w.fcw, N, C, Up, false);
    const kernels::ConstPtr dln2 = sp_.reduce(dln, shard);
    weightGradient(layer, grads, origin, tensorOf(layer, FcW), tensorOf(layer, FcB), std::move(dfc),
                   ln2, N, C, Up, defer, state);
    normBackward(dresidual.ptr(), g.ln2w, dln2, a.residual.ptr(), w.ln2w, a.ln2Mean, a.ln2Rstd);

    // Attention: residual = x + proj(attention(qkv(norm1(x))))
    Buffer dx = ws(NsC);
    ops_.copy(dx.ptr(), dresidual.ptr(), NsC);
    if (sp_.on())
        dresidual = sp_.gather(dresidual.ptr());
    Buffer dattention = ws(NCa);
    ops_.matmulBackwardInput(dattention.ptr(), dresidual.ptr(), w.projw, N, Ca, C, false);
    weightGradient(layer, grads, origin, tensorOf(layer, ProjW), tensorOf(layer, ProjB),
                   std::move(dresidual), a.attention.ptr(), N, Ca, C, defer, state);
    Buffer dqkv = ws(std::size_t(N) * std::size_t(localQkv_));
    attentionBackward(dqkv.ptr(), dattention.ptr(), a);
    dattention.reset();
    ops_.matmulBackwardInput(dln.ptr(), dqkv.ptr(), w.qkvw, N, C, localQkv_, false);
    const kernels::ConstPtr dln1 = sp_.reduce(dln, shard);
    weightGradient(layer, grads, origin, tensorOf(layer, QkvW), tensorOf(layer, QkvB),
                   std::move(dqkv), ln1, N, C, localQkv_, defer, state);
    normBackward(dx.ptr(), g.ln1w, dln1, x, w.ln1w, a.ln1Mean, a.ln1Rstd);
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
    Buffer mean = shape_.llama() ? Buffer{} : memory_.floats(kept, std::size_t(Ns)),
           rstd = memory_.floats(kept, std::size_t(Ns));
    Buffer gatheredNorm, gatheredHead; // ZeRO-3
    const kernels::ConstPtr lnf = parametersOf(lnfWeight_, finalNormLast(), gatheredNorm);
    normForward(normed.ptr(), mean, rstd, input, lnf, shape_.llama() ? nullptr : lnf + C);
    if (sp_.on()) // the head reads every token
        normed = sp_.gather(normed.ptr());
    Buffer lg = memory_.floats(MemoryCategory::Workspace, std::size_t(N) * std::size_t(V));
    // A tied head is the token table, gathered and reduced with the embeddings' unit.
    const std::size_t headUnit = lmHead_ == wte_ ? embeddingLast() : lmHead_;
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

const std::int32_t* GptModel::myTargets(const std::int32_t* targets,
                                        std::vector<std::int32_t>& holder) const {
    if (!cp_.on())
        return targets;
    holder.resize(std::size_t(rows())); // this rank's slice of each sequence
    cp_.selectTokens(targets, microBatch_, holder.data());
    return holder.data();
}

Buffer GptModel::uploadTokens(MemoryCategory category, const std::int32_t* inputs,
                              const std::int32_t* targets) const {
    const std::size_t whole = wholeRows(), N = std::size_t(rows());
    Buffer tokens = memory_.allocate(category, (whole + N) * sizeof(std::int32_t));
    std::vector<std::int32_t> holder;
    ops_.copyToDevice(tokens.as<std::int32_t>(), inputs, whole * sizeof(std::int32_t));
    ops_.copyToDevice(tokens.as<std::int32_t>() + whole, myTargets(targets, holder),
                      N * sizeof(std::int32_t));
    return tokens;
}

Buffer GptModel::uploadTargets(MemoryCategory category, const std::int32_t* targets) const {
    const std::size_t N = std::size_t(rows());
    Buffer uploaded = memory_.allocate(category, N * sizeof(std::int32_t));
    std::vector<std::int32_t> holder;
    ops_.copyToDevice(uploaded.as<std::int32_t>(), myTargets(targets, holder),
                      N * sizeof(std::int32_t));
    return uploaded;
}

void GptModel::embed(kernels::Ptr out, const Buffer& tokens) const {
    const int C = shape_.channels;
    Buffer gathered; // ZeRO-3
    const kernels::Ptr table = parametersOf(wte_, embeddingLast(), gathered);
    const std::size_t origin = offsetOf(wte_);
    const kernels::ConstPtr wte = tensorIn(table, origin, wte_);
    const kernels::ConstPtr wpe = optionalTensorIn(table, origin, wpe_);
    const std::int32_t* ids = tokens.as<std::int32_t>();
    // Context parallelism: the whole sequences' embeddings (the learned positions are the
    // sequence's), of which this rank keeps its slice.
    auto embedMine = [&](kernels::Ptr mine) {
        if (!cp_.on()) {
            vocab_.embeddingForward(mine, ids, wte, wpe, microBatch_, shape_.seqLen, C);
            return;
        }
        Buffer whole = activations(MemoryCategory::Workspace, wholeRows() * std::size_t(C));
        vocab_.embeddingForward(whole.ptr(), ids, wte, wpe, microBatch_, shape_.seqLen, C);
        cp_.gatherRows(mine, whole.ptr(), microBatch_, C);
    };
    if (!sp_.on()) { // the whole stream on every rank: the group sums the vocabulary shards
        embedMine(out);
        tp_.allReduceSum(out, std::size_t(rows()) * std::size_t(C));
        return;
    }
    Buffer partial = activations(MemoryCategory::Workspace, std::size_t(rows()) * std::size_t(C));
    embedMine(partial.ptr());
    Buffer shard;
    ops_.copy(out, sp_.reduce(partial, shard), sp_.tokenElements());
}

void GptModel::embeddingBackward(kernels::ConstPtr dout, const Buffer& tokens) const {
    const int C = shape_.channels;
    Buffer whole;
    dout = sp_.whole(dout, whole);
    Buffer gradients; // ZeRO-2/3
    const kernels::Ptr table = gradientsFor(wte_, embeddingLast(), gradients);
    const std::size_t origin = offsetOf(wte_);
    const kernels::Ptr dwte = tensorIn(table, origin, wte_);
    const kernels::Ptr dwpe = optionalTensorIn(table, origin, wpe_);
    Buffer scattered; // context parallelism: this rank's rows in place, zeros elsewhere
    if (cp_.on()) {
        scattered = activations(MemoryCategory::Workspace, wholeRows() * std::size_t(C));
        cp_.scatterRows(scattered.ptr(), dout, microBatch_, C);
        dout = scattered.ptr();
    }
    vocab_.embeddingBackward(dwte, dwpe, dout, tokens.as<std::int32_t>(), microBatch_,
                             shape_.seqLen, C);
    gradientsDone(wte_, embeddingLast(), gradients);
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
    const int L = c.layers;
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
            deviceTargets = state.tokens.as<std::int32_t>() + wholeRows();
        } else {
            uploaded = uploadTargets(MemoryCategory::Workspace, targets);
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
    headForward(nullptr, x.ptr(), tokens.as<std::int32_t>() + wholeRows(), 0.0f, lossSum, nullptr);
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
        const kernels::ConstPtr lnf = parametersOf(lnfWeight_, finalNormLast(), gathered);
        const kernels::Ptr dlnf = gradientsFor(lnfWeight_, finalNormLast(), gradients);
        normBackward(dout.ptr(), dlnf, state.finalNormGrad.ptr(),
                     state.layerInput[std::size_t(L)].ptr(), lnf, state.finalMean, state.finalRstd);
        gradientsDone(lnfWeight_, finalNormLast(), gradients);
        state.finalNormGrad.reset();
        state.finalMean.reset();
        state.finalRstd.reset();
        state.layerInput[std::size_t(L)].reset();
        // The final norm and a separate head (its gradient came in the forward) are done.
        reportReady(lnfWeight_, lmHead_ == wte_ ? finalNormLast() : lmHead_);
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
            reportReady(firstTensorOf(l), lastTensorOf(l));
        if (i > 0 || !c.embedding)
            state.layerInput[k].reset();
    }
    if (c.embedding) {
        ScopedSpan span(sink, kind, "embedding", -1);
        embeddingBackward(dout.ptr(), state.tokens);
        state.layerInput[0].reset();
        state.tokens.reset();
        reportReady(wte_, embeddingLast());
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
                                                optionalTensorIn(grads, origin, d.bias),
                                                d.dout.ptr(), d.input, d.N, d.C, d.OC);
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
