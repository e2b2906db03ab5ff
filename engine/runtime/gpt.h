// A GPT-2 decoder (learned positions, pre-LayerNorm, GELU MLP, causal multi-head attention, tied
// or separate output embedding) of any size a ModelSpec describes, trained operator by operator
// through kernels::Ops. Parameters, gradients and activations live in DeviceAllocator buffers,
// so every byte is counted. One microbatch at a time: forward() keeps what backward() needs in a
// MicrobatchState; backward() can leave the weight gradients of the linear layers for
// backwardWeights() (the B / W split of zero-bubble schedules).
#pragma once

#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "device_memory.h"
#include "gradient_buckets.h"
#include "kernels/ops.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shardscope {

// The sizes the kernels need. Throws InputError listing everything in the ModelSpec that is not
// a GPT-2 architecture (gated MLP, RMSNorm, rotary positions, GQA, MoE, dropout, missing biases,
// seq_len > max_positions, hidden not divisible by heads).
struct GptShape {
    int layers = 0, channels = 0, heads = 0, ffn = 0, vocab = 0, maxPositions = 0, seqLen = 0;
    bool tied = true;
    static GptShape of(const ModelSpec& model);
};

struct ParameterTensor {
    std::string name;       // "h.3.attn.qkv.weight"
    std::size_t offset = 0; // in floats, into the flat parameter buffer
    std::size_t count = 0;
    std::vector<int> shape;
    bool decay = false; // matrices and embeddings decay; norms and biases do not
};

// Receives a timed span for each operator group of a microbatch.
class SpanSink {
public:
    virtual ~SpanSink() = default;
    virtual double now() const = 0;
    virtual void setMicrobatch(int /*microbatch*/) {} // the one the next spans belong to
    // kind: forward | backward | backward_input | backward_weight; block: embedding|layer|head
    virtual void span(const char* kind, const char* block, int layer, double start, double end) = 0;
};

// What one layer keeps from its forward for its backward (all empty under full recompute).
struct LayerActivations {
    Buffer ln1, ln1Mean, ln1Rstd, qkv, probs, attention, residual, ln2, ln2Mean, ln2Rstd, fc, gelu;
};

// A linear layer's weight gradient waiting for its W op: dout and the layer input it needs.
struct DeferredWeightGradient {
    int layer = 0;
    std::size_t weight = 0, bias = 0; // tensor indices
    Buffer dout;
    const float* input = nullptr; // points into activations the state keeps alive
    int N = 0, C = 0, OC = 0;
};

// Everything one microbatch holds between its forward, backward and weight-gradient ops.
struct MicrobatchState {
    Buffer tokens;                  // inputs then targets, int32
    std::vector<Buffer> layerInput; // [0] embedding output ... [L] final norm input
    std::vector<LayerActivations> layers;
    Buffer finalMean, finalRstd, finalNormGrad; // head: the gradient at the final norm's output
    std::vector<DeferredWeightGradient> deferred;
    std::vector<LayerActivations> keptForWeights; // recomputed activations W still reads
    bool forwardDone = false, backwardDone = false;

    // Lets every buffer go but keeps the vectors' capacity, so steps after the first do not
    // allocate host memory either.
    void reset();
};

class GptModel {
public:
    // recompute: what is kept for the backward (None keeps all, Selective drops the attention
    // probabilities, Full keeps only each layer's input); storeAttentionProbs: whether None
    // keeps the B x heads x T x T probabilities (false = the fused-attention behaviour).
    GptModel(const ModelSpec& model, int microBatch, kernels::Ops& ops, DeviceAllocator& memory,
             Recompute recompute, bool storeAttentionProbs);
    ~GptModel();

    const GptShape& shape() const { return shape_; }
    int microBatch() const { return microBatch_; }
    const std::vector<ParameterTensor>& tensors() const { return tensors_; }
    std::size_t parameterCount() const { return parameterCount_; }
    float* parameters() const { return params_.f(); }
    float* gradients() const { return grads_.f(); }

    // GPT-2's initialisation, deterministic for a seed: N(0, 0.02) weights, residual output
    // projections N(0, 0.02 / sqrt(2 L)), zero biases, unit norm weights.
    void initialize(std::uint64_t seed);
    void zeroGradients();

    // Runs the forward of one microbatch of microBatch x seqLen tokens (host arrays) and the
    // loss; the loss gradient, scaled by lossGradScale, flows back into the head's weights at
    // once and leaves only the gradient at the final norm's output in the state. Returns the
    // summed token losses. logits (host, optional) receives the [B*T, V] logits before the loss.
    double forward(MicrobatchState& state, const std::int32_t* inputs, const std::int32_t* targets,
                   float lossGradScale, SpanSink* sink, std::vector<float>* logits = nullptr);
    // The loss only, keeping nothing and touching no gradient (validation).
    double evaluate(const std::int32_t* inputs, const std::int32_t* targets);
    // Gradients of everything; deferWeights leaves the linear layers' weight gradients for
    // backwardWeights and keeps what they need.
    void backward(MicrobatchState& state, bool deferWeights, SpanSink* sink);
    void backwardWeights(MicrobatchState& state, SpanSink* sink);

    // While set, each backward (or W) op reports every range of the gradient buffer it has
    // finished to `listener`: set it for the ops that complete a step's gradients, so
    // data-parallel buckets can start while the rest of the backward runs.
    void setGradientListener(GradientListener* listener) { listener_ = listener; }

private:
    struct LayerWeights;
    LayerWeights weightsOf(int layer, float* base) const;
    float* tensor(float* base, std::size_t index) const { return base + tensors_[index].offset; }
    void buildTensorTable();
    LayerActivations allocateLayer(MemoryCategory category) const;
    void layerForward(int layer, LayerActivations& a, const float* input, float* output);
    Buffer layerBackward(int layer, LayerActivations& a, const float* input, Buffer dout,
                         bool deferWeights, MicrobatchState& state);
    double headForward(MicrobatchState* state, const float* input, const std::int32_t* targets,
                       float lossGradScale, std::vector<float>* logits);
    void weightGradient(int layer, std::size_t weight, std::size_t bias, Buffer dout,
                        const float* input, int N, int C, int OC, bool defer,
                        MicrobatchState& state);
    int rows() const { return microBatch_ * shape_.seqLen; }
    void reportReady(std::size_t firstTensor, std::size_t lastTensor) const;
    // Inputs then targets of one microbatch, copied to the device.
    Buffer uploadTokens(MemoryCategory category, const std::int32_t* inputs,
                        const std::int32_t* targets) const;
    void embed(float* out, const Buffer& tokens) const; // token + position embeddings

    GptShape shape_;
    int microBatch_;
    kernels::Ops& ops_;
    DeviceAllocator& memory_;
    Recompute recompute_;
    bool storeProbs_;
    std::vector<ParameterTensor> tensors_;
    std::size_t parameterCount_ = 0;
    Buffer params_, grads_;
    GradientListener* listener_ = nullptr;
    // Tensor indices: embeddings, the first of each layer's twelve, the final norm, the LM head.
    std::size_t wte_ = 0, wpe_ = 0, firstLayerTensor_ = 0, lnfWeight_ = 0, lnfBias_ = 0,
                lmHead_ = 0;
};

} // namespace shardscope
