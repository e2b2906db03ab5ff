// The operators a GPT training step is made of, behind one interface. The model code calls only
// these, on pointers the backend allocated, so the same model runs on any backend: kernels/cpu
// (OpenBLAS and vectorised loops) now, kernels/cuda next. All tensors are fp32, row-major and
// contiguous; shapes are given in the names (B batch, T sequence, C channels, NH heads, V
// vocabulary, N = B*T rows, OC output channels). Functions named ...Accumulate add into their
// outputs, so gradients of several microbatches sum in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace shardscope::kernels {

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
    virtual void* allocate(std::size_t bytes) = 0; // never returns null: throws std::bad_alloc
    virtual void release(void* p, std::size_t bytes) = 0;
    // Enqueued; src is read before the call returns, so the host may reuse it at once.
    virtual void copyToDevice(void* dst, const void* src, std::size_t bytes) = 0;
    // Waits for the compute stream's work so far, then copies: the host's one way to read.
    virtual void copyToHost(void* dst, const void* src, std::size_t bytes) = 0;
    virtual void copy(float* dst, const float* src, std::size_t n) = 0;
    virtual void zero(float* x, std::size_t n) = 0;

    // ---- embedding: out[N,C] = wte[token] + wpe[t]
    virtual void embeddingForward(float* out, const std::int32_t* tokens, const float* wte,
                                  const float* wpe, int B, int T, int C) = 0;
    virtual void embeddingBackwardAccumulate(float* dwte, float* dwpe, const float* dout,
                                             const std::int32_t* tokens, int B, int T, int C) = 0;

    // ---- vocabulary-parallel embedding (Megatron-LM): this rank holds rows [vocabStart,
    // vocabStart + vocabCount) of wte. out[N,C] = wte row of the token when this rank holds it,
    // else 0, plus wpe[t] when wpe is given (one rank adds it); the tensor-parallel group sums.
    virtual void embeddingShardForward(float* out, const std::int32_t* tokens, const float* wte,
                                       int vocabStart, int vocabCount, const float* wpe, int B,
                                       int T, int C) = 0;
    // dwte (this rank's rows) += dout of the tokens it holds; dwpe += dout (every rank).
    virtual void embeddingShardBackwardAccumulate(float* dwte, int vocabStart, int vocabCount,
                                                  float* dwpe, const float* dout,
                                                  const std::int32_t* tokens, int B, int T,
                                                  int C) = 0;

    // ---- layer norm over C, eps 1e-5; mean and rstd [N] are kept for the backward
    virtual void layerNormForward(float* out, float* mean, float* rstd, const float* inp,
                                  const float* weight, const float* bias, int N, int C) = 0;
    // dinp += ..., dweight += ..., dbias += ...
    virtual void layerNormBackwardAccumulate(float* dinp, float* dweight, float* dbias,
                                             const float* dout, const float* inp,
                                             const float* weight, const float* mean,
                                             const float* rstd, int N, int C) = 0;

    // ---- linear layer, PyTorch's layout: out[N,OC] = inp[N,C] weight[OC,C]^T + bias[OC]
    virtual void matmulForward(float* out, const float* inp, const float* weight, const float* bias,
                               int N, int C, int OC) = 0;
    // dinp[N,C] = dout[N,OC] weight[OC,C] (overwrites; accumulate = true adds instead)
    virtual void matmulBackwardInput(float* dinp, const float* dout, const float* weight, int N,
                                     int C, int OC, bool accumulate) = 0;
    // dweight[OC,C] += dout^T inp, dbias[OC] += column sums of dout (bias may be null)
    virtual void matmulBackwardWeightAccumulate(float* dweight, float* dbias, const float* dout,
                                                const float* inp, int N, int C, int OC) = 0;

    // ---- causal multi-head attention on qkv[B,T,3C] (q, k, v each [B,T,NH,C/NH]) -> out[B,T,C].
    // probs[B,NH,T,T] keeps the softmax for the backward; when null it is not stored and the
    // backward recomputes each row with the same code, so results are bit-identical.
    virtual void attentionForward(float* out, float* probs, const float* qkv, int B, int T, int C,
                                  int NH) = 0;
    // dqkv[B,T,3C] = gradient (overwrites)
    virtual void attentionBackward(float* dqkv, const float* dout, const float* qkv,
                                   const float* probs, int B, int T, int C, int NH) = 0;

    // ---- GELU, tanh approximation (GPT-2)
    virtual void geluForward(float* out, const float* inp, std::size_t n) = 0;
    virtual void geluBackward(float* dinp, const float* inp, const float* dout, std::size_t n) = 0;

    // ---- out = a + b, and x += y
    virtual void add(float* out, const float* a, const float* b, std::size_t n) = 0;
    virtual void addInPlace(float* x, const float* y, std::size_t n) = 0;

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
    virtual void sumOfSquaresAccumulate(const float* x, std::size_t n, double* sum) = 0;
    // Device doubles (loss and norm sums) set to zero.
    virtual void zeroDoubles(double* x, std::size_t n) = 0;
    // AdamW with bias correction at step t (1-based); weightDecay already 0 for excluded tensors.
    virtual void adamwUpdate(float* param, const float* grad, float* m, float* v, std::size_t n,
                             float lr, float beta1, float beta2, float eps, float weightDecay,
                             float gradScale, int t) = 0;
};

} // namespace shardscope::kernels
