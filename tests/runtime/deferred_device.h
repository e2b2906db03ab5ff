// A fake device for tests: the CPU operators, but run late. Every operator and copy is queued on
// its stream and runs only when the host forces it (an event's wait, a stream's synchronize, a
// copy to the host) or when a poll of an event happens to let it (one poll in `patience`), so
// events complete late, and events of different streams complete in whatever order the host
// forces them. Fresh memory is filled with NaN, so anything that reads a buffer before the work
// that writes it has run gets NaN instead of the right number. A runtime that waits where it
// must gives bit-identical results on this device and on the CPU backend.
#pragma once

#include "kernels/cpu/cpu_ops.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace shardscope::testing {

class DeferredStream final : public kernels::Stream {
public:
    using Work = std::function<void()>;
    void enqueue(Work work) {
        queue_.push_back(std::move(work));
        ++enqueued_;
    }
    // Runs queued work until `position` items have run.
    void runUntil(std::uint64_t position) {
        while (executed_ < position && !queue_.empty()) {
            Work work = std::move(queue_.front());
            queue_.pop_front();
            work();
            ++executed_;
        }
    }
    std::uint64_t enqueued() const { return enqueued_; }
    std::uint64_t executed() const { return executed_; }
    std::size_t pending() const { return queue_.size(); }

    void record(kernels::Event& event) override;
    void waitFor(kernels::Event& event) override;
    void synchronize() override { runUntil(enqueued_); }

private:
    std::deque<Work> queue_;
    std::uint64_t enqueued_ = 0, executed_ = 0;
};

class DeferredEvent final : public kernels::Event {
public:
    explicit DeferredEvent(int patience) : patience_(patience) {}
    bool done() override {
        if (!stream_ || stream_->executed() >= position_)
            return true;
        if (++polls_ % patience_ == 0)
            stream_->runUntil(position_);
        return stream_->executed() >= position_;
    }
    void wait() override {
        if (stream_)
            stream_->runUntil(position_);
    }
    double seconds() override { return seconds_; }

private:
    friend class DeferredStream;
    DeferredStream* stream_ = nullptr;
    std::uint64_t position_ = 0;
    double seconds_ = 0;
    int patience_;
    int polls_ = 0;
};

inline void DeferredStream::record(kernels::Event& e) {
    auto& event = static_cast<DeferredEvent&>(e);
    event.stream_ = this;
    enqueue([&event] {
        event.seconds_ =
            std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                .count();
    });
    event.position_ = enqueued_;
}

inline void DeferredStream::waitFor(kernels::Event& e) {
    auto& event = static_cast<DeferredEvent&>(e);
    DeferredStream* other = event.stream_;
    const std::uint64_t position = event.position_;
    if (other && other != this)
        enqueue([other, position] { other->runUntil(position); });
}

class DeferredOps final : public kernels::Ops {
public:
    explicit DeferredOps(int threads = 2, int patience = 3)
        : cpu_(kernels::makeCpuOps(threads)), patience_(patience) {}

    std::string name() const override { return "deferred " + cpu_->name(); }
    kernels::Stream& computeStream() override { return compute_; }
    std::unique_ptr<kernels::Stream> createStream() override {
        return std::make_unique<DeferredStream>();
    }
    std::unique_ptr<kernels::Event> createEvent() override {
        return std::make_unique<DeferredEvent>(patience_);
    }
    DeferredStream& compute() { return compute_; }

    void* allocate(std::size_t bytes) override {
        void* p = cpu_->allocate(bytes);
        const float nan = std::numeric_limits<float>::quiet_NaN();
        for (std::size_t i = 0; i < bytes / sizeof(float); ++i)
            std::memcpy(static_cast<char*>(p) + i * sizeof(float), &nan, sizeof(float));
        return p;
    }
    void release(void* p, std::size_t bytes) override { cpu_->release(p, bytes); }
    bool memoryIsHostMemory() const override { return true; }
    void copyToDevice(void* dst, const void* src, std::size_t bytes) override {
        auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                          static_cast<const char*>(src) + bytes);
        later([=, this] { cpu_->copyToDevice(dst, staged->data(), bytes); });
    }
    void copyToHost(void* dst, const void* src, std::size_t bytes) override {
        compute_.synchronize();
        cpu_->copyToHost(dst, src, bytes);
    }
    void copy(kernels::Ptr dst, kernels::ConstPtr src, std::size_t n) override {
        later([=, this] { cpu_->copy(dst, src, n); });
    }
    void zero(kernels::Ptr x, std::size_t n) override {
        later([=, this] { cpu_->zero(x, n); });
    }

    void embeddingForward(kernels::Ptr out, const std::int32_t* tokens, kernels::ConstPtr wte,
                          kernels::ConstPtr wpe, int B, int T, int C) override {
        later([=, this] { cpu_->embeddingForward(out, tokens, wte, wpe, B, T, C); });
    }
    void embeddingBackwardAccumulate(kernels::Ptr dwte, kernels::Ptr dwpe, kernels::ConstPtr dout,
                                     const std::int32_t* tokens, int B, int T, int C) override {
        later([=, this] { cpu_->embeddingBackwardAccumulate(dwte, dwpe, dout, tokens, B, T, C); });
    }
    void embeddingShardForward(kernels::Ptr out, const std::int32_t* tokens, kernels::ConstPtr wte,
                               int vocabStart, int vocabCount, kernels::ConstPtr wpe, int B, int T,
                               int C) override {
        later([=, this] {
            cpu_->embeddingShardForward(out, tokens, wte, vocabStart, vocabCount, wpe, B, T, C);
        });
    }
    void embeddingShardBackwardAccumulate(kernels::Ptr dwte, int vocabStart, int vocabCount,
                                          kernels::Ptr dwpe, kernels::ConstPtr dout,
                                          const std::int32_t* tokens, int B, int T,
                                          int C) override {
        later([=, this] {
            cpu_->embeddingShardBackwardAccumulate(dwte, vocabStart, vocabCount, dwpe, dout, tokens,
                                                   B, T, C);
        });
    }
    void layerNormForward(kernels::Ptr out, float* mean, float* rstd, kernels::ConstPtr inp,
                          kernels::ConstPtr weight, kernels::ConstPtr bias, int N, int C) override {
        later([=, this] { cpu_->layerNormForward(out, mean, rstd, inp, weight, bias, N, C); });
    }
    void layerNormBackwardAccumulate(kernels::Ptr dinp, kernels::Ptr dweight, kernels::Ptr dbias,
                                     kernels::ConstPtr dout, kernels::ConstPtr inp,
                                     kernels::ConstPtr weight, const float* mean, const float* rstd,
                                     int N, int C) override {
        later([=, this] {
            cpu_->layerNormBackwardAccumulate(dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                                              N, C);
        });
    }
    void matmulForward(kernels::Ptr out, kernels::ConstPtr inp, kernels::ConstPtr weight,
                       kernels::ConstPtr bias, int N, int C, int OC) override {
        later([=, this] { cpu_->matmulForward(out, inp, weight, bias, N, C, OC); });
    }
    void matmulBackwardInput(kernels::Ptr dinp, kernels::ConstPtr dout, kernels::ConstPtr weight,
                             int N, int C, int OC, bool accumulate) override {
        later([=, this] { cpu_->matmulBackwardInput(dinp, dout, weight, N, C, OC, accumulate); });
    }
    void matmulBackwardWeightAccumulate(kernels::Ptr dweight, kernels::Ptr dbias,
                                        kernels::ConstPtr dout, kernels::ConstPtr inp, int N, int C,
                                        int OC) override {
        later([=, this] {
            cpu_->matmulBackwardWeightAccumulate(dweight, dbias, dout, inp, N, C, OC);
        });
    }
    void attentionForward(kernels::Ptr out, kernels::Ptr probs, kernels::ConstPtr qkv, int B, int T,
                          int C, int NH) override {
        later([=, this] { cpu_->attentionForward(out, probs, qkv, B, T, C, NH); });
    }
    void attentionBackward(kernels::Ptr dqkv, kernels::ConstPtr dout, kernels::ConstPtr qkv,
                           kernels::ConstPtr probs, int B, int T, int C, int NH) override {
        later([=, this] { cpu_->attentionBackward(dqkv, dout, qkv, probs, B, T, C, NH); });
    }
    void geluForward(kernels::Ptr out, kernels::ConstPtr inp, std::size_t n) override {
        later([=, this] { cpu_->geluForward(out, inp, n); });
    }
    void geluBackward(kernels::Ptr dinp, kernels::ConstPtr inp, kernels::ConstPtr dout,
                      std::size_t n) override {
        later([=, this] { cpu_->geluBackward(dinp, inp, dout, n); });
    }
    void rmsNormForward(kernels::Ptr out, float* rstd, kernels::ConstPtr inp,
                        kernels::ConstPtr weight, int N, int C, float eps) override {
        later([=, this] { cpu_->rmsNormForward(out, rstd, inp, weight, N, C, eps); });
    }
    void rmsNormBackwardAccumulate(kernels::Ptr dinp, kernels::Ptr dweight, kernels::ConstPtr dout,
                                   kernels::ConstPtr inp, kernels::ConstPtr weight,
                                   const float* rstd, int N, int C) override {
        later([=, this] {
            cpu_->rmsNormBackwardAccumulate(dinp, dweight, dout, inp, weight, rstd, N, C);
        });
    }
    void rotaryEmbedding(kernels::Ptr x, const float* cos, const float* sin, int B, int T,
                         int heads, int headDim, int rowStride, bool inverse) override {
        later([=, this] {
            cpu_->rotaryEmbedding(x, cos, sin, B, T, heads, headDim, rowStride, inverse);
        });
    }
    void swigluForward(kernels::Ptr out, kernels::ConstPtr gateUp, int N, int F) override {
        later([=, this] { cpu_->swigluForward(out, gateUp, N, F); });
    }
    void swigluBackward(kernels::Ptr dgateUp, kernels::ConstPtr gateUp, kernels::ConstPtr dout,
                        int N, int F) override {
        later([=, this] { cpu_->swigluBackward(dgateUp, gateUp, dout, N, F); });
    }
    void expandKvHeads(kernels::Ptr expanded, kernels::ConstPtr qkv, int N, int heads, int kvHeads,
                       int headDim) override {
        later([=, this] { cpu_->expandKvHeads(expanded, qkv, N, heads, kvHeads, headDim); });
    }
    void sumKvHeadGradients(kernels::Ptr dqkv, kernels::ConstPtr dexpanded, int N, int heads,
                            int kvHeads, int headDim) override {
        later([=, this] { cpu_->sumKvHeadGradients(dqkv, dexpanded, N, heads, kvHeads, headDim); });
    }
    void attentionBlockForward(float* acc, float* rowMax, float* rowSum, kernels::ConstPtr q,
                               int qStride, kernels::ConstPtr k, kernels::ConstPtr v, int kvStride,
                               const std::int32_t* qPos, const std::int32_t* kPos, int B, int Tq,
                               int Tk, int NH, int KV, int hd) override {
        later([=, this] {
            cpu_->attentionBlockForward(acc, rowMax, rowSum, q, qStride, k, v, kvStride, qPos, kPos,
                                        B, Tq, Tk, NH, KV, hd);
        });
    }
    void attentionBlockFinish(kernels::Ptr out, float* lse, const float* acc, const float* rowMax,
                              const float* rowSum, int B, int Tq, int NH, int hd) override {
        later([=, this] {
            cpu_->attentionBlockFinish(out, lse, acc, rowMax, rowSum, B, Tq, NH, hd);
        });
    }
    void attentionBlockDelta(float* delta, kernels::ConstPtr dout, kernels::ConstPtr out, int B,
                             int Tq, int NH, int hd) override {
        later([=, this] { cpu_->attentionBlockDelta(delta, dout, out, B, Tq, NH, hd); });
    }
    void attentionBlockBackward(float* dq, float* dk, float* dv, int dkvStride,
                                kernels::ConstPtr dout, const float* lse, const float* delta,
                                kernels::ConstPtr q, int qStride, kernels::ConstPtr k,
                                kernels::ConstPtr v, int kvStride, const std::int32_t* qPos,
                                const std::int32_t* kPos, int B, int Tq, int Tk, int NH, int KV,
                                int hd) override {
        later([=, this] {
            cpu_->attentionBlockBackward(dq, dk, dv, dkvStride, dout, lse, delta, q, qStride, k, v,
                                         kvStride, qPos, kPos, B, Tq, Tk, NH, KV, hd);
        });
    }
    void copyRows(kernels::Ptr dst, int dstStride, kernels::ConstPtr src, int srcStride, int rows,
                  int cols) override {
        later([=, this] { cpu_->copyRows(dst, dstStride, src, srcStride, rows, cols); });
    }
    void add(kernels::Ptr out, kernels::ConstPtr a, kernels::ConstPtr b, std::size_t n) override {
        later([=, this] { cpu_->add(out, a, b, n); });
    }
    void addInPlace(kernels::Ptr x, kernels::ConstPtr y, std::size_t n) override {
        later([=, this] { cpu_->addInPlace(x, y, n); });
    }
    void crossEntropyForwardBackward(float* logits, const std::int32_t* targets, int N, int V,
                                     float gradScale, double* lossSum) override {
        later([=, this] {
            cpu_->crossEntropyForwardBackward(logits, targets, N, V, gradScale, lossSum);
        });
    }
    void rowMax(const float* x, int N, int V, float* out) override {
        later([=, this] { cpu_->rowMax(x, N, V, out); });
    }
    void softmaxShardSums(const float* logits, const float* max, const std::int32_t* targets, int N,
                          int V, int vocabStart, float* sumExp, float* targetLogit) override {
        later([=, this] {
            cpu_->softmaxShardSums(logits, max, targets, N, V, vocabStart, sumExp, targetLogit);
        });
    }
    void crossEntropyShardLoss(const float* max, const float* sumExp, const float* targetLogit,
                               int N, double* lossSum) override {
        later([=, this] { cpu_->crossEntropyShardLoss(max, sumExp, targetLogit, N, lossSum); });
    }
    void crossEntropyShardBackward(float* logits, const float* max, const float* sumExp,
                                   const std::int32_t* targets, int N, int V, int vocabStart,
                                   float gradScale) override {
        later([=, this] {
            cpu_->crossEntropyShardBackward(logits, max, sumExp, targets, N, V, vocabStart,
                                            gradScale);
        });
    }
    void sumOfSquaresAccumulate(kernels::ConstPtr x, std::size_t n, double* sum) override {
        later([=, this] { cpu_->sumOfSquaresAccumulate(x, n, sum); });
    }
    void zeroDoubles(double* x, std::size_t n) override {
        later([=, this] { cpu_->zeroDoubles(x, n); });
    }
    void adamwUpdate(float* param, kernels::ConstPtr grad, float* m, float* v, std::size_t n,
                     float lr, float beta1, float beta2, float eps, float weightDecay,
                     float gradScale, int t, kernels::Ptr working) override {
        later([=, this] {
            cpu_->adamwUpdate(param, grad, m, v, n, lr, beta1, beta2, eps, weightDecay, gradScale,
                              t, working);
        });
    }

private:
    void later(DeferredStream::Work work) { compute_.enqueue(std::move(work)); }

    std::unique_ptr<kernels::Ops> cpu_;
    int patience_;
    DeferredStream compute_;
};

} // namespace shardscope::testing
