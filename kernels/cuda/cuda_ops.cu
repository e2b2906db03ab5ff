#include "attention.h"
#include "cross_entropy.h"
#include "cuda_ops.h"
#include "device_elements.cuh"
#include "elementwise.h"
#include "embedding.h"
#include "layernorm.h"
#include "llama_ops.h"
#include "matmul.h"
#include "ring_attention.h"

#include <chrono>
#include <climits>
#include <cmath>
#include <mutex>
#include <new>
#include <string>

namespace shardscope::cuda {

namespace {

using namespace detail;
using kernels::ConstPtr;
using kernels::DType;
using kernels::Ptr;

double hostSeconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// Maps GPU event times onto the host's steady clock through a reference event whose host time is
// known. cudaEventElapsedTime gives float milliseconds: about 0.5 us apart within seconds of the
// reference but coarser far from it, so a new reference is taken (on an idle stream of its own,
// so it completes at once) when an event lies more than a few seconds away.
class DeviceClock {
public:
    DeviceClock() {
        check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "clock stream");
        check(cudaEventCreate(&reference_), "cudaEventCreate");
        anchor();
    }
    ~DeviceClock() {
        cudaEventDestroy(reference_);
        cudaStreamDestroy(stream_);
    }
    DeviceClock(const DeviceClock&) = delete;
    DeviceClock& operator=(const DeviceClock&) = delete;

    // The host time of a completed event.
    double seconds(cudaEvent_t event) {
        const std::lock_guard lock(mutex_);
        float ms = elapsedMs(event);
        if (std::fabs(ms) > kReanchorMs) {
            anchor();
            ms = elapsedMs(event);
        }
        return referenceSeconds_ + double(ms) / 1e3;
    }

private:
    static constexpr float kReanchorMs = 4000;
    void anchor() {
        check(cudaEventRecord(reference_, stream_), "cudaEventRecord");
        check(cudaEventSynchronize(reference_), "cudaEventSynchronize");
        referenceSeconds_ = hostSeconds();
    }
    float elapsedMs(cudaEvent_t event) {
        float ms = 0;
        check(cudaEventElapsedTime(&ms, reference_, event), "cudaEventElapsedTime");
        return ms;
    }

    std::mutex mutex_;
    cudaStream_t stream_ = nullptr;
    cudaEvent_t reference_ = nullptr;
    double referenceSeconds_ = 0;
};

class CudaEvent final : public kernels::Event {
public:
    explicit CudaEvent(DeviceClock& clock) : clock_(clock) {
        check(cudaEventCreate(&event_), "cudaEventCreate");
    }
    ~CudaEvent() override { cudaEventDestroy(event_); }
    CudaEvent(const CudaEvent&) = delete;
    CudaEvent& operator=(const CudaEvent&) = delete;

    bool done() override {
        const cudaError_t e = cudaEventQuery(event_);
        if (e == cudaErrorNotReady)
            return false;
        check(e, "cudaEventQuery");
        return true;
    }
    void wait() override { check(cudaEventSynchronize(event_), "cudaEventSynchronize"); }
    double seconds() override { return clock_.seconds(event_); }
    cudaEvent_t get() const { return event_; }

private:
    DeviceClock& clock_;
    cudaEvent_t event_ = nullptr;
};

class CudaStream final : public kernels::Stream {
public:
    CudaStream() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"); }
    ~CudaStream() override { cudaStreamDestroy(stream_); }
    CudaStream(const CudaStream&) = delete;
    CudaStream& operator=(const CudaStream&) = delete;

    void record(kernels::Event& event) override {
        check(cudaEventRecord(static_cast<CudaEvent&>(event).get(), stream_), "cudaEventRecord");
    }
    void waitFor(kernels::Event& event) override {
        check(cudaStreamWaitEvent(stream_, static_cast<CudaEvent&>(event).get(), 0),
              "cudaStreamWaitEvent");
    }
    void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
    cudaStream_t get() const { return stream_; }

private:
    cudaStream_t stream_ = nullptr;
};

int useDevice(int device) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        throw std::runtime_error(std::string("no usable CUDA device: ") + cudaGetErrorString(e));
    if (device < 0 || device >= count)
        throw std::runtime_error("CUDA device " + std::to_string(device) +
                                 " does not exist: " + "this host has " + std::to_string(count) +
                                 " (0 to " + std::to_string(count - 1) + ")");
    check(cudaSetDevice(device), "cudaSetDevice");
    return device;
}

class CudaOps final : public kernels::Ops {
public:
    explicit CudaOps(int device) : device_(useDevice(device)) {
        cudaDeviceProp p{};
        check(cudaGetDeviceProperties(&p, device_), "cudaGetDeviceProperties");
        name_ = "cuda " + std::to_string(device_) + " (" + p.name + ", sm_" +
                std::to_string(p.major) + std::to_string(p.minor) + ", " + blas_.name() + ")";
    }
    ~CudaOps() override { cudaStreamSynchronize(compute_.get()); }

    std::string name() const override { return name_; }

    kernels::Stream& computeStream() override { return compute_; }
    std::unique_ptr<kernels::Stream> createStream() override {
        return std::make_unique<CudaStream>();
    }
    std::unique_ptr<kernels::Event> createEvent() override {
        return std::make_unique<CudaEvent>(clock_);
    }

    void* allocate(std::size_t bytes) override {
        void* p = nullptr;
        if (cudaMalloc(&p, std::max<std::size_t>(bytes, 1)) != cudaSuccess) {
            cudaGetLastError(); // an out-of-memory error is not sticky: clear it
            throw std::bad_alloc();
        }
        return p;
    }
    void release(void* p, std::size_t) override { check(cudaFree(p), "cudaFree"); }
    bool memoryIsHostMemory() const override { return false; }
    void copyToDevice(void* dst, const void* src, std::size_t bytes) override {
        // From pageable memory the call returns once src has been staged, so it may be reused.
        check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s()), "copy to device");
    }
    void copyToHost(void* dst, const void* src, std::size_t bytes) override {
        check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s()), "copy to host");
        check(cudaStreamSynchronize(s()), "copy to host");
    }
    void copy(Ptr dst, ConstPtr src, std::size_t n) override {
        if (dst.type == src.type)
            check(cudaMemcpyAsync(dst.data, src.data, n * kernels::sizeOf(dst.type),
                                  cudaMemcpyDeviceToDevice, s()),
                  "copy");
        else
            convertCopy(dst, src, n, s());
    }
    void zero(Ptr x, std::size_t n) override {
        check(cudaMemsetAsync(x.data, 0, n * kernels::sizeOf(x.type), s()), "zero");
    }

    void embeddingForward(Ptr out, const std::int32_t* tokens, ConstPtr wte, ConstPtr wpe, int B,
                          int T, int C) override {
        cuda::embeddingForward(out, tokens, wte, 0, INT_MAX, wpe, B, T, C, s());
    }
    void embeddingBackwardAccumulate(Ptr dwte, Ptr dwpe, ConstPtr dout, const std::int32_t* tokens,
                                     int B, int T, int C) override {
        cuda::embeddingBackwardAccumulate(dwte, 0, INT_MAX, dwpe, dout, tokens, B, T, C, s());
    }
    void embeddingShardForward(Ptr out, const std::int32_t* tokens, ConstPtr wte, int vocabStart,
                               int vocabCount, ConstPtr wpe, int B, int T, int C) override {
        cuda::embeddingForward(out, tokens, wte, vocabStart, vocabCount, wpe, B, T, C, s());
    }
    void embeddingShardBackwardAccumulate(Ptr dwte, int vocabStart, int vocabCount, Ptr dwpe,
                                          ConstPtr dout, const std::int32_t* tokens, int B, int T,
                                          int C) override {
        cuda::embeddingBackwardAccumulate(dwte, vocabStart, vocabCount, dwpe, dout, tokens, B, T, C,
                                          s());
    }

    void layerNormForward(Ptr out, float* mean, float* rstd, ConstPtr inp, ConstPtr weight,
                          ConstPtr bias, int N, int C) override {
        cuda::layerNormForward(out, mean, rstd, inp, weight, bias, N, C, s());
    }
    void layerNormBackwardAccumulate(Ptr dinp, Ptr dweight, Ptr dbias, ConstPtr dout, ConstPtr inp,
                                     ConstPtr weight, const float* mean, const float* rstd, int N,
                                     int C) override {
        cuda::layerNormBackwardAccumulate(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C,
                                          s());
    }

    void matmulForward(Ptr out, ConstPtr inp, ConstPtr weight, ConstPtr bias, int N, int C,
                       int OC) override {
        blas_.matmulForward(out, inp, weight, bias, N, C, OC, s());
    }
    void matmulBackwardInput(Ptr dinp, ConstPtr dout, ConstPtr weight, int N, int C, int OC,
                             bool accumulate) override {
        blas_.matmulBackwardInput(dinp, dout, weight, N, C, OC, accumulate, s());
    }
    void matmulBackwardWeightAccumulate(Ptr dweight, Ptr dbias, ConstPtr dout, ConstPtr inp, int N,
                                        int C, int OC) override {
        blas_.matmulBackwardWeightAccumulate(dweight, dbias, dout, inp, N, C, OC, s());
    }

    void attentionForward(Ptr out, Ptr probs, ConstPtr qkv, int B, int T, int C, int NH) override {
        cuda::attentionForward(out, probs, qkv, B, T, C, NH, s());
    }
    void attentionBackward(Ptr dqkv, ConstPtr dout, ConstPtr qkv, ConstPtr probs, int B, int T,
                           int C, int NH) override {
        const StreamBuffer workspace(sizeof(float) * attentionBackwardWorkspaceFloats(B, T, NH),
                                     s());
        cuda::attentionBackward(dqkv, dout, qkv, probs, B, T, C, NH, workspace.as<float>(), s());
    }

    void geluForward(Ptr out, ConstPtr inp, std::size_t n) override {
        cuda::geluForward(out, inp, n, s());
    }
    void geluBackward(Ptr dinp, ConstPtr inp, ConstPtr dout, std::size_t n) override {
        cuda::geluBackward(dinp, inp, dout, n, s());
    }
    void rmsNormForward(Ptr out, float* rstd, ConstPtr inp, ConstPtr weight, int N, int C,
                        float eps) override {
        cuda::rmsNormForward(out, rstd, inp, weight, N, C, eps, s());
    }
    void rmsNormBackwardAccumulate(Ptr dinp, Ptr dweight, ConstPtr dout, ConstPtr inp,
                                   ConstPtr weight, const float* rstd, int N, int C) override {
        cuda::rmsNormBackwardAccumulate(dinp, dweight, dout, inp, weight, rstd, N, C, s());
    }
    void rotaryEmbedding(Ptr x, const float* cos, const float* sin, int B, int T, int heads,
                         int headDim, int rowStride, bool inverse) override {
        cuda::rotaryEmbedding(x, cos, sin, B, T, heads, headDim, rowStride, inverse, s());
    }
    void swigluForward(Ptr out, ConstPtr gateUp, int N, int F) override {
        cuda::swigluForward(out, gateUp, N, F, s());
    }
    void swigluBackward(Ptr dgateUp, ConstPtr gateUp, ConstPtr dout, int N, int F) override {
        cuda::swigluBackward(dgateUp, gateUp, dout, N, F, s());
    }
    void expandKvHeads(Ptr expanded, ConstPtr qkv, int N, int heads, int kvHeads,
                       int headDim) override {
        cuda::expandKvHeads(expanded, qkv, N, heads, kvHeads, headDim, s());
    }
    void sumKvHeadGradients(Ptr dqkv, ConstPtr dexpanded, int N, int heads, int kvHeads,
                            int headDim) override {
        cuda::sumKvHeadGradients(dqkv, dexpanded, N, heads, kvHeads, headDim, s());
    }
    void attentionBlockForward(float* acc, float* rowMax, float* rowSum, ConstPtr q, int qStride,
                               ConstPtr k, ConstPtr v, int kvStride, const std::int32_t* qPos,
                               const std::int32_t* kPos, int B, int Tq, int Tk, int NH, int KV,
                               int hd) override {
        cuda::attentionBlockForward(acc, rowMax, rowSum, q, qStride, k, v, kvStride, qPos, kPos, B,
                                    Tq, Tk, NH, KV, hd, s());
    }
    void attentionBlockFinish(Ptr out, float* lse, const float* acc, const float* rowMax,
                              const float* rowSum, int B, int Tq, int NH, int hd) override {
        cuda::attentionBlockFinish(out, lse, acc, rowMax, rowSum, B, Tq, NH, hd, s());
    }
    void attentionBlockDelta(float* delta, ConstPtr dout, ConstPtr out, int B, int Tq, int NH,
                             int hd) override {
        cuda::attentionBlockDelta(delta, dout, out, B, Tq, NH, hd, s());
    }
    void attentionBlockBackward(float* dq, float* dk, float* dv, int dkvStride, ConstPtr dout,
                                const float* lse, const float* delta, ConstPtr q, int qStride,
                                ConstPtr k, ConstPtr v, int kvStride, const std::int32_t* qPos,
                                const std::int32_t* kPos, int B, int Tq, int Tk, int NH, int KV,
                                int hd) override {
        cuda::attentionBlockBackward(dq, dk, dv, dkvStride, dout, lse, delta, q, qStride, k, v,
                                     kvStride, qPos, kPos, B, Tq, Tk, NH, KV, hd, s());
    }
    void copyRows(Ptr dst, int dstStride, ConstPtr src, int srcStride, int rows,
                  int cols) override {
        cuda::copyRows(dst, dstStride, src, srcStride, rows, cols, s());
    }
    void add(Ptr out, ConstPtr a, ConstPtr b, std::size_t n) override {
        cuda::add(out, a, b, n, s());
    }
    void addInPlace(Ptr x, ConstPtr y, std::size_t n) override { cuda::addInPlace(x, y, n, s()); }

    void crossEntropyForwardBackward(float* logits, const std::int32_t* targets, int N, int V,
                                     float gradScale, double* lossSum) override {
        const StreamBuffer rowLoss(sizeof(double) * crossEntropyWorkspaceDoubles(N), s());
        cuda::crossEntropyForwardBackward(logits, targets, N, V, gradScale, lossSum,
                                          rowLoss.as<double>(), s());
    }
    void rowMax(const float* x, int N, int V, float* out) override {
        cuda::rowMax(x, N, V, out, s());
    }
    void softmaxShardSums(const float* logits, const float* max, const std::int32_t* targets, int N,
                          int V, int vocabStart, float* sumExp, float* targetLogit) override {
        cuda::softmaxShardSums(logits, max, targets, N, V, vocabStart, sumExp, targetLogit, s());
    }
    void crossEntropyShardLoss(const float* max, const float* sumExp, const float* targetLogit,
                               int N, double* lossSum) override {
        cuda::crossEntropyShardLoss(max, sumExp, targetLogit, N, lossSum, s());
    }
    void crossEntropyShardBackward(float* logits, const float* max, const float* sumExp,
                                   const std::int32_t* targets, int N, int V, int vocabStart,
                                   float gradScale) override {
        cuda::crossEntropyShardBackward(logits, max, sumExp, targets, N, V, vocabStart, gradScale,
                                        s());
    }

    void sumOfSquaresAccumulate(ConstPtr x, std::size_t n, double* sum) override {
        cuda::sumOfSquaresAccumulate(x, n, sum, s());
    }
    void zeroDoubles(double* x, std::size_t n) override {
        check(cudaMemsetAsync(x, 0, n * sizeof(double), s()), "zero"); // 0.0 is all zero bits
    }
    void adamwUpdate(float* param, ConstPtr grad, float* m, float* v, std::size_t n, float lr,
                     float beta1, float beta2, float eps, float weightDecay, float gradScale, int t,
                     Ptr working) override {
        cuda::adamwUpdate(param, grad, m, v, n, {lr, beta1, beta2, eps, weightDecay, gradScale, t},
                          working, s());
    }

private:
    cudaStream_t s() const { return compute_.get(); }

    int device_;
    CudaStream compute_;
    DeviceClock clock_;
    Blas blas_;
    std::string name_;
};

} // namespace

std::unique_ptr<kernels::Ops> makeCudaOps(int device) {
    return std::make_unique<CudaOps>(device);
}

} // namespace shardscope::cuda
