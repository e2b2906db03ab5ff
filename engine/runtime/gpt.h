// A decoder of any size a ModelSpec describes, trained operator by operator through
// kernels::Ops, in either block family (gpt_parameters.h): GPT-2's (learned positions, pre-
// LayerNorm, GELU MLP, causal multi-head attention, biases) or the Llama family's (rotary
// positions, pre-RMSNorm, SwiGLU MLP, grouped-query attention, no biases); tied or separate
// output embedding. The families share every line but the norm, the attention's positions and
// heads, and the MLP's activation. Parameters, gradients and activations live in DeviceAllocator
// buffers, so every byte is counted. One microbatch at a time: forward() keeps what backward()
// needs in a MicrobatchState; backward() can leave the weight gradients of the linear layers for
// backwardWeights() (the B / W split of zero-bubble schedules).
//
// A GptModel holds one pipeline rank's share of the model: one or more chunks (virtual stages),
// each a contiguous run of layers. The same code runs the whole model (one chunk with the
// embedding and the head) and every pipeline layout; tensors keep the whole model's names.
//
// Each parallelism axis lives in its own file under parallel/ and is composed here: tensor
// parallelism cuts the layers (tensor_parallel.h), sequence parallelism sits at the edges of each
// tensor-parallel block (sequence_parallel.h), the vocabulary is cut for the embedding and the
// loss (vocab_parallel.h), ZeRO-2/3 keep slices of the flat buffers (zero_store.h), pipeline
// ranks hold chunks (pipeline_chunks.h), and context-parallel ranks hold slices of every sequence
// whose attention meets around a ring (context_parallel.h).
#pragma once

#include "communicator.h"
#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "device_memory.h"
#include "gpt_parameters.h"
#include "kernels/ops.h"
#include "parallel/context_parallel.h"
#include "parallel/gradient_buckets.h"
#include "parallel/pipeline_chunks.h"
#include "parallel/sequence_parallel.h"
#include "parallel/tensor_parallel.h"
#include "parallel/vocab_parallel.h"
#include "parallel/zero_store.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shardscope {

// Receives a span for each operator group of a microbatch, timed by events on the compute stream
// (the device's clock, not the host's around a launch that returns before the work runs).
class SpanSink {
public:
    virtual ~SpanSink() = default;
    // The microbatch, model chunk and op ("forward", "backward", ...) the next spans belong to.
    virtual void setMicrobatch(int /*microbatch*/, int /*chunk*/ = 0, const char* /*op*/ = "") {}
    // An event recorded where the compute stream is now: a span's start.
    virtual std::unique_ptr<kernels::Event> mark() = 0;
    // kind: forward | backward | backward_input | backward_weight; block: embedding|layer|head.
    // The span ends where the compute stream is now; it is written once both events complete.
    virtual void span(const char* kind, const char* block, int layer,
                      std::unique_ptr<kernels::Event> start) = 0;
};

// What one layer keeps from its forward for its backward (all empty under full recompute). qkv
// holds this rank's query, key and value heads, rotated in the Llama family (grouped-query heads
// are expanded for the attention kernels only while they run); fc the MLP's first projection
// (GELU's input, or SwiGLU's gate and up), gelu the activation's output. The means are
// LayerNorm's only. Under context parallelism lse holds the softmax's log-normalisers, which ring
// attention's backward reads (it never stores probabilities).
struct LayerActivations {
    Buffer ln1, ln1Mean, ln1Rstd, qkv, probs, lse, attention, residual, ln2, ln2Mean, ln2Rstd, fc,
        gelu;
    // Sequence parallelism: the norms' outputs gathered again for the weight gradients.
    Buffer ln1Gathered, ln2Gathered;
};

// A linear layer's weight gradient waiting for its W op: dout and the layer input it needs.
struct DeferredWeightGradient {
    int layer = 0;
    std::size_t weight = 0, bias = 0; // tensor indices
    Buffer dout;
    kernels::ConstPtr input; // points into activations the state keeps alive
    int N = 0, C = 0, OC = 0;
};

// Everything one microbatch holds between its forward, backward and weight-gradient ops.
struct MicrobatchState {
    Buffer tokens;                  // inputs then targets, int32 (the embedding chunk)
    std::vector<Buffer> layerInput; // [0] chunk input ... [L] final norm input (head chunk)
    Buffer output;                  // a chunk without the head: what the next stage receives
    Buffer inputGrad; // a chunk without the embedding: what the previous stage receives
    std::vector<LayerActivations> layers;
    Buffer finalMean, finalRstd, finalNormGrad; // head: the gradient at the final norm's output
    std::vector<DeferredWeightGradient> deferred;
    // ZeRO-2/3: each deferred layer's gradient buffer, reduce-scattered once its W op is done.
    std::vector<std::pair<int, Buffer>> deferredGradients;
    std::vector<LayerActivations> keptForWeights; // recomputed activations W still reads
    bool forwardDone = false, backwardDone = false;

    // Lets every buffer go but keeps the vectors' capacity, so steps after the first do not
    // allocate host memory either.
    void reset();
};

// What the model's tensors are stored in, from the precision policy: fp32, or bf16 weights and
// activations with fp32 or bf16 gradients (the fp32 master weights are the optimizer's). The
// logits and the norms' statistics stay fp32.
struct TensorTypes {
    kernels::DType weights = kernels::DType::F32, activations = kernels::DType::F32,
                   gradients = kernels::DType::F32;
    // Throws InputError for a policy the engine does not store (fp8).
    static TensorTypes of(const PrecisionPolicy& policy);
};

// What the layers keep for their backward: None keeps all, Selective drops the attention
// probabilities, Full keeps only each layer's input. Under Full, layers > 0 limits it to the first
// that many layers of each chunk (Megatron-LM's --recompute-method block); the others keep all.
struct RecomputePolicy {
    Recompute policy = Recompute::None;
    int layers = 0;
    // Implicit: a Recompute alone covers every layer.
    RecomputePolicy(Recompute r = Recompute::None, int firstLayers = 0)
        : policy(r), layers(firstLayers) {}
    // Whether layer `indexInChunk` of a chunk keeps only its input and reruns its forward.
    bool rerunsLayer(int indexInChunk) const {
        return policy == Recompute::Full && (layers <= 0 || indexInChunk < layers);
    }
};

class GptModel {
public:
    // recompute: what is kept for the backward (RecomputePolicy); storeAttentionProbs: whether a
    // layer that keeps its activations keeps the B x heads x T x T probabilities (false = the
    // fused-attention behaviour).
    // chunks: this rank's share (pipelineChunks); empty means the whole model in one chunk.
    // cp: this rank's slice of every sequence (context parallelism); the host arrays the
    // forward takes stay whole sequences, of which it uses its slice.
    GptModel(const ModelSpec& model, int microBatch, kernels::Ops& ops, DeviceAllocator& memory,
             RecomputePolicy recompute, bool storeAttentionProbs,
             std::vector<ModelChunk> chunks = {}, TensorParallel tp = {}, ZeroSharding zero = {},
             TensorTypes types = {}, ContextParallel cp = {});
    ~GptModel();

    const GptShape& shape() const { return shape_; }
    const std::vector<ModelChunk>& chunks() const { return chunks_; }
    // Receives a span for each tensor-parallel and ZeRO collective the layers run.
    void setCommunicationSink(CommunicationSink* sink) {
        tp_.setCommunicationSink(sink);
        cp_.setCommunicationSink(sink);
        store_->setCommunicationSink(sink);
    }
    int microBatch() const { return microBatch_; }
    const std::vector<ParameterTensor>& tensors() const { return tensors_; }
    std::size_t parameterCount() const { return parameterCount_; }
    // The stored parameters and gradients: the whole flat buffers, or under ZeRO-3 (ZeRO-2 for
    // gradients) this replica's shards of them, as shardLayout() places them.
    kernels::Ptr parameters() const { return store_->parameters(); }
    kernels::Ptr gradients() const { return store_->gradients(); }
    // What this replica owns under ZeRO 1-3, unit by unit (the embeddings, each layer, the final
    // norm, the head); everything without ZeRO.
    const ShardLayout& shardLayout() const { return store_->layout(); }
    bool shardsGradients() const { return store_->shardsGradients(); }
    bool shardsParameters() const { return store_->shardsParameters(); }
    // Where the stored value of flat offset `offset` is (an owned one, when sharded).
    kernels::Ptr parameterAt(std::size_t offset) const { return store_->parameterAt(offset); }
    kernels::Ptr gradientAt(std::size_t offset) const { return store_->gradientAt(offset); }

    // With tied embeddings split over pipeline stages, the first stage's wte and the last
    // stage's copy of it (lm_head.weight): their gradients must be summed across the two ranks
    // before the update, and they are not reported to the gradient listener. npos otherwise.
    static constexpr std::size_t npos = std::size_t(-1);
    std::size_t sharedTensor() const { return shared_; }

    // The initialisation for a seed (InitialValues): each value comes from its place in the
    // whole model, so any layout starts from the weights of a single process, and this rank
    // computes and stores only what it keeps (its ZeRO-3 shards, or its stage's share), a
    // bounded range at a time.
    void initialize(std::uint64_t seed);
    // The same values in fp32 of the flat range [offset, offset + n) (what initialize stores,
    // before rounding to the weights' type): mixed precision's master weights start from them.
    void initialValues(std::uint64_t seed, std::size_t offset, std::size_t n, float* out) const;
    // This rank's whole share at once (tools and tests).
    std::vector<float> initialValues(std::uint64_t seed) const;
    // Stores host fp32 values of exactly what this rank stores (its ZeRO-3 shards, or the whole),
    // in the weights' type: a checkpoint's parameters.
    void setStoredParameters(const float* values) { store_->setStoredParameters(values); }
    // The same from the whole flat buffer's values (this rank keeps what it stores).
    void setParameters(const float* whole) { store_->setParameters(whole); }
    // Host fp32 values of the flat range [offset, offset + n), which this rank stores whole.
    void storeParameters(std::size_t offset, const float* values, std::size_t n) {
        store_->storeParameters(offset, values, n);
    }
    void zeroGradients();

    // Runs the forward of one microbatch of microBatch x seqLen tokens (host arrays) and the
    // loss; the loss gradient, scaled by lossGradScale, flows back into the head's weights at
    // once and leaves only the gradient at the final norm's output in the state. Returns the
    // summed token losses, read back from the device at once (tests and tools; a training step
    // runs forwardChunk and reads its loss once). logits (host, optional) receives the [B*T, V]
    // logits before the loss.
    double forward(MicrobatchState& state, const std::int32_t* inputs, const std::int32_t* targets,
                   float lossGradScale, SpanSink* sink, std::vector<float>* logits = nullptr);
    // The loss only, keeping nothing and touching no gradient (validation), read back at once.
    double evaluate(const std::int32_t* inputs, const std::int32_t* targets);
    // Gradients of everything; deferWeights leaves the linear layers' weight gradients for
    // backwardWeights and keeps what they need.
    void backward(MicrobatchState& state, bool deferWeights, SpanSink* sink);
    void backwardWeights(MicrobatchState& state, SpanSink* sink);

    // The same for one chunk of a pipeline rank. `input` is the previous stage's output (empty
    // for the embedding chunk, which reads `inputs`); a chunk without the head leaves its output
    // in state.output. Only the head chunk reads `targets` and adds its summed token losses to
    // lossSum[0], a device double (the caller reads it when the step's work is enqueued).
    void forwardChunk(MicrobatchState& state, int chunk, const std::int32_t* inputs,
                      const std::int32_t* targets, Buffer input, float lossGradScale,
                      double* lossSum, SpanSink* sink, std::vector<float>* logits = nullptr);
    // outputGrad: the next stage's gradient at this chunk's output (empty for the head chunk).
    // A chunk without the embedding leaves the gradient at its input in state.inputGrad.
    void backwardChunk(MicrobatchState& state, int chunk, Buffer outputGrad, bool deferWeights,
                       SpanSink* sink);
    // Validation through one chunk: returns the output, or for the head chunk adds the summed
    // token losses to lossSum[0] (a device double) and returns nothing.
    Buffer evaluateChunk(int chunk, const std::int32_t* inputs, const std::int32_t* targets,
                         Buffer input, double* lossSum);
    // A device double for loss sums, zeroed (Workspace: the caller lets it go after reading it).
    Buffer lossAccumulator() const;
    // Reads a device double: the host waits for the work before it.
    double readScalar(const Buffer& scalar) const;
    // A buffer of one microbatch's activations ([microBatch x seqLen, channels], or this rank's
    // token rows of it with sequence parallelism), what a stage receives: Activations when kept
    // for the backward, Workspace when used and let go.
    Buffer activationBuffer(MemoryCategory category) const;

    // While set, each backward (or W) op reports every range of the gradient buffer it has
    // finished to `listener`: set it for the ops that complete a step's gradients, so
    // data-parallel buckets can start while the rest of the backward runs.
    void setGradientListener(GradientListener* listener) { listener_ = listener; }

private:
    struct LayerWeights;
    // Tensor i in the storage `base` of the flat range that starts at `origin`.
    kernels::Ptr tensorIn(kernels::Ptr base, std::size_t origin, std::size_t i) const {
        return base + (tensors_[i].offset - origin);
    }
    // layer: the model's numbering; base holds the layer's range (see parametersOf).
    LayerWeights weightsOf(int layer, kernels::Ptr base, std::size_t origin) const;
    std::size_t offsetOf(std::size_t tensor) const { return tensors_[tensor].offset; }
    // Parameters of tensors first..last: a pointer into the stored buffer, or under ZeRO-3 into
    // `holder`, all-gathered now or by an earlier prefetch. The range's flat offset is origin.
    kernels::Ptr parametersOf(std::size_t first, std::size_t last, Buffer& holder) const;
    void prefetchParameters(std::size_t first, std::size_t last) const;
    // Where one microbatch's gradient of tensors first..last accumulates: the stored buffer, or
    // under ZeRO-2/3 a zeroed `holder`, which gradientsDone reduce-scatters into the slices.
    kernels::Ptr gradientsFor(std::size_t first, std::size_t last, Buffer& holder) const;
    void gradientsDone(std::size_t first, std::size_t last, Buffer& holder) const;
    std::pair<std::size_t, std::size_t> rangeOf(std::size_t first, std::size_t last) const {
        return {tensors_[first].offset,
                tensors_[last].offset + tensors_[last].count - tensors_[first].offset};
    }
    std::size_t lastTensorOf(int layer) const {
        return firstTensorOf(layer) + layerTensors(shape_.family).size() - 1;
    }
    std::size_t firstTensorOf(int layer) const { return layerTensor_[std::size_t(layer)]; }
    // The index of a layer's tensor in a slot, or npos where the family has none (biases).
    std::size_t tensorOf(int layer, LayerTensor slot) const {
        const int k = slotIndex_[slot];
        return k < 0 ? npos : firstTensorOf(layer) + std::size_t(k);
    }
    // Tensor i in `base`, or null for npos.
    kernels::Ptr optionalTensorIn(kernels::Ptr base, std::size_t origin, std::size_t i) const {
        return i == npos ? kernels::Ptr{} : tensorIn(base, origin, i);
    }
    // The last tensor of the embeddings' unit (wpe, or wte without learned positions) and of the
    // final norm's (its bias, or its weight for RMSNorm).
    std::size_t embeddingLast() const { return wpe_ != npos ? wpe_ : wte_; }
    std::size_t finalNormLast() const { return lnfBias_ != npos ? lnfBias_ : lnfWeight_; }
    void buildTensorTable();
    // Where each range gathered or reduced as one begins: the embeddings, each layer, the final
    // norm, the head.
    std::vector<std::size_t> shardUnits() const;
    LayerActivations allocateLayer(MemoryCategory category) const;
    // The family's norm over this rank's token rows: LayerNorm (mean and rstd kept; bias follows
    // the weight) or RMSNorm (rstd kept). The backward accumulates dinp and the weight's (and
    // bias's) gradient.
    void normForward(kernels::Ptr out, Buffer& mean, Buffer& rstd, kernels::ConstPtr x,
                     kernels::ConstPtr weight, kernels::ConstPtr bias) const;
    void normBackward(kernels::Ptr dinp, kernels::Ptr dweight, kernels::ConstPtr dout,
                      kernels::ConstPtr x, kernels::ConstPtr weight, const Buffer& mean,
                      const Buffer& rstd) const;
    // Attention on a layer's qkv: the Llama family first rotates the queries and keys in place;
    // grouped heads meet their keys through their expansion, or in the ring's kernels under
    // context parallelism. The backward leaves the gradient at the QKV projection's output in
    // dqkv (this rank's query, key and value heads).
    void attentionForward(LayerActivations& a) const;
    void attentionBackward(kernels::Ptr dqkv, kernels::ConstPtr dattention,
                           const LayerActivations& a) const;
    // The qkv rows as the multi-head kernels read them: `qkv` itself, or expanded into `holder`.
    kernels::ConstPtr attentionHeads(kernels::ConstPtr qkv, Buffer& holder) const;
    // The MLP's activation from fc into gelu (GELU, or SwiGLU of the gate and up halves); the
    // backward gives the gradient at fc from the one at the activation's output.
    void activationForward(LayerActivations& a) const;
    Buffer activationBackward(Buffer doutput, const LayerActivations& a) const;
    int mlpUpWidth() const { return shape_.llama() ? 2 * localFfn_ : localFfn_; }
    // prefetch: a layer whose ZeRO-3 parameters to start gathering (-1: none).
    void layerForward(int layer, LayerActivations& a, kernels::ConstPtr input, kernels::Ptr output,
                      int prefetch = -1);
    Buffer layerBackward(int layer, LayerActivations& a, kernels::ConstPtr input, Buffer dout,
                         bool deferWeights, MicrobatchState& state, int prefetch);
    void headForward(MicrobatchState* state, kernels::ConstPtr input, const std::int32_t* targets,
                     float lossGradScale, double* lossSum, std::vector<float>* logits);
    // grads: the layer's gradient storage, holding flat offsets from origin.
    void weightGradient(int layer, kernels::Ptr grads, std::size_t origin, std::size_t weight,
                        std::size_t bias, Buffer dout, kernels::ConstPtr input, int N, int C,
                        int OC, bool defer, MicrobatchState& state);
    // This rank's token rows of a microbatch: its slice of each sequence under context
    // parallelism, else every token.
    int seqLen() const { return cp_.localSeqLen(); }
    int rows() const { return microBatch_ * seqLen(); }
    // n elements of the activations' type.
    Buffer activations(MemoryCategory category, std::size_t n) const {
        return memory_.tensor(category, n, types_.activations);
    }
    // The token rows of the residual stream this rank holds: all, or its sequence shard.
    int tokenRows() const { return sp_.tokenRows(); }
    void reportReady(std::size_t firstTensor, std::size_t lastTensor) const;
    // The whole inputs, then this rank's targets, of one microbatch, copied to the device; and
    // this rank's targets alone.
    Buffer uploadTokens(MemoryCategory category, const std::int32_t* inputs,
                        const std::int32_t* targets) const;
    Buffer uploadTargets(MemoryCategory category, const std::int32_t* targets) const;
    // The host targets of this rank's rows: `targets` itself, or its slice copied to `holder`.
    const std::int32_t* myTargets(const std::int32_t* targets,
                                  std::vector<std::int32_t>& holder) const;
    std::size_t wholeRows() const { return std::size_t(microBatch_) * std::size_t(shape_.seqLen); }
    const ModelChunk& chunkAt(int chunk) const;
    void embed(kernels::Ptr out, const Buffer& tokens) const; // token + position embeddings
    void embeddingBackward(kernels::ConstPtr dout, const Buffer& tokens) const;

    GptShape shape_;
    int microBatch_;
    TensorParallelGroup tp_;
    ContextParallelGroup cp_;
    // This rank's share of the attention channels (heads x head size), heads, key and value
    // heads, QKV projection rows and MLP columns.
    int localChannels_ = 0, localHeads_ = 0, localKvHeads_ = 0, localQkv_ = 0, localFfn_ = 0;
    std::array<int, kLayerSlots> slotIndex_{}; // slot -> place in a layer's tensors, or -1
    Buffer ropeCos_, ropeSin_;                 // Llama family: [seqLen, headDim / 2] angles
    kernels::Ops& ops_;
    DeviceAllocator& memory_;
    RecomputePolicy recompute_;
    bool storeProbs_;
    SequenceParallel sp_;
    VocabParallel vocab_;
    TensorTypes types_;
    std::vector<ModelChunk> chunks_;
    std::vector<ParameterTensor> tensors_;
    std::vector<std::size_t> layerTensor_; // per model layer: its first tensor, or npos
    std::size_t parameterCount_ = 0;
    std::unique_ptr<ZeroStore> store_; // parameters and gradients, whole or ZeRO-2/3 slices
    GradientListener* listener_ = nullptr;
    // Tensor indices of the embeddings, the final norm and the LM head (npos when not held).
    std::size_t wte_ = npos, wpe_ = npos, lnfWeight_ = npos, lnfBias_ = npos, lmHead_ = npos,
                shared_ = npos;
};

} // namespace shardscope
