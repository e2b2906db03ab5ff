// The operators a GPT training step is made of, behind one interface. The model code calls only
// these, on pointers the backend allocated, so the same model runs on any backend: kernels/cpu
// (OpenBLAS and vectorised loops) now, kernels/cuda next. Tensors are row-major and contiguous;
// shapes are given in the names (B batch, T sequence, C channels, NH heads, V vocabulary, N = B*T
// rows, OC output channels). Functions named ...Accumulate add into their outputs, so gradients of
// several microbatches sum in place.
//
// Weights, activations and gradients are typed pointers (Ptr, ConstPtr): fp32 or bf16, chosen per
// tensor by the precision policy, and an operator takes any mix. Arithmetic is fp32 whatever the
// storage (bf16 is widened on load and rounded to nearest even on store); a GEMM with a bf16
// operand multiplies in bf16 with fp32 accumulation (an fp32 operand is rounded to bf16 first, as
// PyTorch's autocast casts it). The loss side (logits, row statistics) and the optimizer's
// master weights and moments are fp32 only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace shardscope::kernels {

enum class DType : std::uint8_t { F32, BF16 };
constexpr std::size_t sizeOf(DType t) {
    return t == DType::F32 ? 4 : 2;
}
inline std::string toString(DType t) {
    return t == DType::F32 ? "fp32" : "bf16";
}

// A device pointer and the type of its elements; a float* converts to one (fp32).
struct Ptr {
    void* data = nullptr;
    DType type = DType::F32;
    constexpr Ptr() = default;
    constexpr Ptr(std::nullptr_t) {}
    constexpr Ptr(float* p) : data(p) {}
    constexpr Ptr(void* p, DType t) : data(p), type(t) {}
    explicit operator bool() const { return data != nullptr; }
    // `elements` further on.
    Ptr operator+(std::size_t elements) const {
        return {static_cast<char*>(data) + elements * sizeOf(type), type};
    }
};

struct ConstPtr {
    const void* data = nullptr;
    DType type = DType::F32;
    constexpr ConstPtr() = default;
    constexpr ConstPtr(std::nullptr_t) {}
    constexpr ConstPtr(const float* p) : data(p) {}
    constexpr ConstPtr(Ptr p) : data(p.data), type(p.type) {}
    constexpr ConstPtr(const void* p, DType t) : data(p), type(t) {}
    explicit operator bool() const { return data != nullptr; }
    ConstPtr operator+(std::size_t elements) const {
        return {static_cast<const char*>(data) + elements * sizeOf(type), type};
    }
};

// The elements of p as fp32, for code that handles only fp32: std::logic_error otherwise.
inline float* asFloats(Ptr p) {
    if (p.type != DType::F32)
        throw std::logic_error("fp32-only code was given " + toString(p.type) + " elements");
    return static_cast<float*>(p.data);
}
inline const float* asFloats(ConstPtr p) {
    if (p.type != DType::F32)
        throw std::logic_error("fp32-only code was given " + toString(p.type) + " elements");
    return static_cast<const float*>(p.data);
}

// A point in a stream: complete once the work enqueued before it has run.
class Event {
public:
    virtual ~Event() = default;
    virtual bool done() = 0; // without blocking
    virtual void wait() = 0; // the host blocks until done
    // When the work before it finished, in seconds of std::chrono::steady_clock (the device's
    // clock mapped onto the host's); only once done().
    virtual double seconds() = 0;
};

// An ordered queue of device work.
class Stream {
public:
    virtual ~Stream() = default;
    // `event` completes when everything enqueued here so far has run.
    virtual void record(Event& event) = 0;
    // Work enqueued here from now on runs after `event` completes; the host does not wait.
    virtual void waitFor(Event& event) = 0;
    virtual void synchronize() = 0; // the host blocks until everything enqueued has run
};

class Ops {
public:
    virtual ~Ops() = default;
    virtual std::string name() const = 0; // "cpu (OpenBLAS 0.3.21, 2 threads)"

    // ---- execution: every operator and copy below is enqueued, in order, on the compute stream
    // and may run after the call returns; an Event marks a point in a stream. The host waits
    // only where it must: before it reads device memory (copyToHost waits for the compute
    // stream), and before a host-side library touches a buffer (see Event::wait). The CPU
    // backend runs work at once, so its events complete when they are recorded.
    virtual Stream& computeStream() = 0;
    // A stream of its own (communication), ordered against the compute stream only by events.
    virtual std::unique_ptr<Stream> createStream() = 0;
    virtual std::unique_ptr<Event> createEvent() = 0;

    // ---- memory: device buffers, and the copies and fills a step needs
    // Whether the host may read and write this backend's buffers directly (CPU memory); where it
    // may not (a GPU's), host libraries such as MPI get them only through copies.
    virtual bool memoryIsHostMemory() const = 0;
    virtual void* allocate(std::size_t bytes) = 0; // never returns null: throws std::bad_alloc
    virtual void release(void* p, std::size_t bytes) = 0;
    // Enqueued; src is read before the call returns, so the host may reuse it at once.
    virtual void copyToDevice(void* dst, const void* src, std::size_t bytes) = 0;
    // Waits for the compute stream's work so far, then copies: the host's one way to read.
    virtual void copyToHost(void* dst, const void* src, std::size_t bytes) = 0;
    // n elements; converts when the types differ (fp32 to bf16 rounds to nearest even).
    virtual void copy(Ptr dst, ConstPtr src, std::size_t n) = 0;
    virtual void zero(Ptr x, std::size_t n) = 0;

    // ---- embedding: out[N,C] = wte[token] + wpe[t]; a null wpe (dwpe) is a model without
    // learned positions (rotary ones are applied inside attention)
    virtual void embeddingForward(Ptr out, const std::int32_t* tokens, ConstPtr wte, ConstPtr wpe,
                                  int B, int T, int C) = 0;
    virtual void embeddingBackwardAccumulate(Ptr dwte, Ptr dwpe, ConstPtr dout,
                                             const std::int32_t* tokens, int B, int T, int C) = 0;

    // ---- vocabulary-parallel embedding (Megatron-LM): this rank holds rows [vocabStart,
    // vocabStart + vocabCount) of wte. out[N,C] = wte row of the token when this rank holds it,
    // else 0, plus wpe[t] when wpe is given (one rank adds it); the tensor-parallel group sums.
    virtual void embeddingShardForward(Ptr out, const std::int32_t* tokens, ConstPtr wte,
                                       int vocabStart, int vocabCount, ConstPtr wpe, int B, int T,
                                       int C) = 0;
    // dwte (this rank's rows) += dout of the tokens it holds; dwpe += dout (every rank) when
    // dwpe is given.
    virtual void embeddingShardBackwardAccumulate(Ptr dwte, int vocabStart, int vocabCount,
                                                  Ptr dwpe, ConstPtr dout,
                                                  const std::int32_t* tokens, int B, int T,
                                                  int C) = 0;

    // ---- layer norm over C, eps 1e-5; mean and rstd [N] are kept for the backward
    virtual void layerNormForward(Ptr out, float* mean, float* rstd, ConstPtr inp, ConstPtr weight,
                                  ConstPtr bias, int N, int C) = 0;
    // dinp += ..., dweight += ..., dbias += ...
    virtual void layerNormBackwardAccumulate(Ptr dinp, Ptr dweight, Ptr dbias, ConstPtr dout,
                                             ConstPtr inp, ConstPtr weight, const float* mean,
                                             const float* rstd, int N, int C) = 0;

    // ---- linear layer, PyTorch's layout: out[N,OC] = inp[N,C] weight[OC,C]^T + bias[OC]
    virtual void matmulForward(Ptr out, ConstPtr inp, ConstPtr weight, ConstPtr bias, int N, int C,
                               int OC) = 0;
    // dinp[N,C] = dout[N,OC] weight[OC,C] (overwrites; accumulate = true adds instead)
    virtual void matmulBackwardInput(Ptr dinp, ConstPtr dout, ConstPtr weight, int N, int C, int OC,
                                     bool accumulate) = 0;
    // dweight[OC,C] += dout^T inp, dbias[OC] += column sums of dout (bias may be null)
    virtual void matmulBackwardWeightAccumulate(Ptr dweight, Ptr dbias, ConstPtr dout, ConstPtr inp,
                                                int N, int C, int OC) = 0;

    // ---- causal multi-head attention on qkv[B,T,3C] (q, k, v each [B,T,NH,C/NH]) -> out[B,T,C].
    // probs[B,NH,T,T] keeps the softmax for the backward; when null it is not stored and the
    // backward recomputes each row with the same code, so results are bit-identical.
    virtual void attentionForward(Ptr out, Ptr probs, ConstPtr qkv, int B, int T, int C,
                                  int NH) = 0;
    // dqkv[B,T,3C] = gradient (overwrites)
    virtual void attentionBackward(Ptr dqkv, ConstPtr dout, ConstPtr qkv, ConstPtr probs, int B,
                                   int T, int C, int NH) = 0;

    // ---- GELU, tanh approximation (GPT-2)
    virtual void geluForward(Ptr out, ConstPtr inp, std::size_t n) = 0;
    virtual void geluBackward(Ptr dinp, ConstPtr inp, ConstPtr dout, std::size_t n) = 0;

    // ---- RMSNorm over C (Llama-family layers; Zhang and Sennrich 2019): out = inp * rstd *
    // weight with rstd = 1 / sqrt(mean(inp^2) + eps); rstd [N] is kept for the backward
    virtual void rmsNormForward(Ptr out, float* rstd, ConstPtr inp, ConstPtr weight, int N, int C,
                                float eps) = 0;
    // dinp += ..., dweight += ...
    virtual void rmsNormBackwardAccumulate(Ptr dinp, Ptr dweight, ConstPtr dout, ConstPtr inp,
                                           ConstPtr weight, const float* rstd, int N, int C) = 0;

    // ---- rotary position embedding (Su et al. 2021), in place, in Hugging Face's Llama layout
    // (rotate_half): each of the B*T rows of x, `rowStride` elements apart, starts with `heads`
    // heads of headDim elements; element i of a head's first half turns with element
    // i + headDim/2 by the angle whose cosine and sine are cos[t, i] and sin[t, i] ([T,
    // headDim/2], fp32 device memory), t the row's position in its sequence. inverse turns by
    // minus the angle: the backward (a rotation's transpose is its inverse).
    virtual void rotaryEmbedding(Ptr x, const float* cos, const float* sin, int B, int T, int heads,
                                 int headDim, int rowStride, bool inverse) = 0;

    // ---- SwiGLU (Shazeer 2020): out[N,F] = silu(gate) * up, gateUp[N,2F] holding each row's
    // gate projection, then its up projection
    virtual void swigluForward(Ptr out, ConstPtr gateUp, int N, int F) = 0;
    // dgateUp[N,2F] = gradient (overwrites)
    virtual void swigluBackward(Ptr dgateUp, ConstPtr gateUp, ConstPtr dout, int N, int F) = 0;

    // ---- grouped-query attention (Ainslie et al. 2023) through the multi-head attention above:
    // each of the N rows of qkv holds `heads` query heads, then kvHeads key heads, then kvHeads
    // value heads, headDim wide; expanded rows hold 3 x heads heads, query head h keeping its
    // place and meeting key and value head h / (heads / kvHeads), as Hugging Face's repeat_kv
    // deals them. heads is a multiple of kvHeads.
    virtual void expandKvHeads(Ptr expanded, ConstPtr qkv, int N, int heads, int kvHeads,
                               int headDim) = 0;
    // dqkv[N, (heads + 2 kvHeads) headDim] = the expanded rows' gradient, each key and value
    // head's summed over the query heads it served, in order (overwrites)
    virtual void sumKvHeadGradients(Ptr dqkv, ConstPtr dexpanded, int N, int heads, int kvHeads,
                                    int headDim) = 0;

    // ---- ring attention (context parallelism; Liu et al. 2023), one block at a time: causal
    // attention of this rank's queries against one rank's keys and values, merged into a running
    // softmax (Milakov and Gimelshein 2018, as FlashAttention merges its tiles). Shapes:
    // q rows [B, Tq], `qStride` elements apart, each starting with NH query heads of hd; k and v
    // rows [B, Tk], `kvStride` apart, each KV heads of hd; query head h meets key and value head
    // h / (NH / KV). qPos [Tq] and kPos [Tk] (int32, device memory) are the rows' positions in
    // their sequence: query i meets key j only when kPos[j] <= qPos[i]. The scale is 1/sqrt(hd).
    // acc [B, Tq, NH hd] (fp32, the unnormalised output), rowMax and rowSum [B, NH, Tq] (fp32)
    // carry the merge from block to block: they start at 0, -infinity and 0.
    virtual void attentionBlockForward(float* acc, float* rowMax, float* rowSum, ConstPtr q,
                                       int qStride, ConstPtr k, ConstPtr v, int kvStride,
                                       const std::int32_t* qPos, const std::int32_t* kPos, int B,
                                       int Tq, int Tk, int NH, int KV, int hd) = 0;
    // out [B, Tq, NH hd] = acc / rowSum; lse [B, NH, Tq] = rowMax + log(rowSum), the softmax's
    // log-normaliser the backward reads (lse may alias rowMax).
    virtual void attentionBlockFinish(Ptr out, float* lse, const float* acc, const float* rowMax,
                                      const float* rowSum, int B, int Tq, int NH, int hd) = 0;
    // delta [B, NH, Tq] = the sum over each head's hd channels of dout * out (overwrites).
    virtual void attentionBlockDelta(float* delta, ConstPtr dout, ConstPtr out, int B, int Tq,
                                     int NH, int hd) = 0;
    // The gradients of one block (FlashAttention's backward, with the lse and delta of the
    // whole softmax): dq [B, Tq, NH hd] += ..., and dk, dv rows [B, Tk] `dkvStride` apart, KV
    // heads of hd each, += ... (fp32 accumulators, summed over the query heads of a group).
    virtual void attentionBlockBackward(float* dq, float* dk, float* dv, int dkvStride,
                                        ConstPtr dout, const float* lse, const float* delta,
                                        ConstPtr q, int qStride, ConstPtr k, ConstPtr v,
                                        int kvStride, const std::int32_t* qPos,
                                        const std::int32_t* kPos, int B, int Tq, int Tk, int NH,
                                        int KV, int hd) = 0;
    // dst rows [rows, cols] `dstStride` apart = src rows `srcStride` apart (converting types as
    // copy does): packing a fused row's key and value heads, unpacking gradients into one.
    virtual void copyRows(Ptr dst, int dstStride, ConstPtr src, int srcStride, int rows,
                          int cols) = 0;

    // ---- out = a + b, and x += y
    virtual void add(Ptr out, ConstPtr a, ConstPtr b, std::size_t n) = 0;
    virtual void addInPlace(Ptr x, ConstPtr y, std::size_t n) = 0;

    // ---- loss: logits[N,V] become dloss/dlogits * gradScale in place (softmax - onehot), and
    // the sum over rows of -log softmax(logits)[target] is added to lossSum[0], a device double
    // (the loss stays on the device until the step reads it once).
    virtual void crossEntropyForwardBackward(float* logits, const std::int32_t* targets, int N,
                                             int V, float gradScale, double* lossSum) = 0;

    // ---- vocabulary-parallel cross-entropy over logits[N,V] of this rank's vocabulary rows
    // [vocabStart, vocabStart + V): the group takes the maximum of rowMax, sums sumExp and
    // targetLogit (0 where another rank holds the target), and the loss of a row is
    // log(sumExp) + max - targetLogit.
    virtual void rowMax(const float* x, int N, int V, float* out) = 0;
    // sumExp[n] = sum_i exp(logits[n,i] - max[n]); targetLogit[n] = the target's logit or 0.
    virtual void softmaxShardSums(const float* logits, const float* max,
                                  const std::int32_t* targets, int N, int V, int vocabStart,
                                  float* sumExp, float* targetLogit) = 0;
    // lossSum[0] += sum over rows of log(sumExp) + max - targetLogit (the group's sums).
    virtual void crossEntropyShardLoss(const float* max, const float* sumExp,
                                       const float* targetLogit, int N, double* lossSum) = 0;
    // logits become (softmax - onehot) * gradScale in place, from the group's max and sumExp.
    virtual void crossEntropyShardBackward(float* logits, const float* max, const float* sumExp,
                                           const std::int32_t* targets, int N, int V,
                                           int vocabStart, float gradScale) = 0;

    // ---- optimizer
    // sum[0] += the sum of x[i]^2, a device double: a global norm is summed on the device and
    // read once.
    virtual void sumOfSquaresAccumulate(ConstPtr x, std::size_t n, double* sum) = 0;
    // Device doubles (loss and norm sums) set to zero.
    virtual void zeroDoubles(double* x, std::size_t n) = 0;
    // AdamW with bias correction at step t (1-based); weightDecay already 0 for excluded tensors.
    // param: the fp32 (master) weights; working, when given, the lower-precision weights the
    // model computes with, rewritten from param after the update (mixed precision).
    virtual void adamwUpdate(float* param, ConstPtr grad, float* m, float* v, std::size_t n,
                             float lr, float beta1, float beta2, float eps, float weightDecay,
                             float gradScale, int t, Ptr working) = 0;
};

} // namespace shardscope::kernels
