// A fake device for tests of code that moves device memory: its buffers are addresses in a
// mapping the host may not touch (PROT_NONE: any direct read or write kills the process), backed
// by a private arena that only the device's own copies use. Code that passes through it only by
// copyToHost and copyToDevice works; code that dereferences a device pointer on the host, or hands
// one to a host library, crashes. It has memory and copies, no operators.
#pragma once

#include "kernels/ops.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <sys/mman.h>
#include <vector>

namespace shardscope::testing {

class UntouchableDevice final : public kernels::Ops {
public:
    explicit UntouchableDevice(std::size_t bytes = 64u << 20) : arena_(bytes) {
        void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            throw std::runtime_error("mmap of the untouchable region failed");
        region_ = static_cast<unsigned char*>(p);
    }
    ~UntouchableDevice() override { ::munmap(region_, arena_.size()); }
    UntouchableDevice(const UntouchableDevice&) = delete;
    UntouchableDevice& operator=(const UntouchableDevice&) = delete;

    std::string name() const override { return "untouchable"; }
    kernels::Stream& computeStream() override { return stream_; }
    std::unique_ptr<kernels::Stream> createStream() override {
        return std::make_unique<Immediate>();
    }
    std::unique_ptr<kernels::Event> createEvent() override { return std::make_unique<Done>(); }

    void* allocate(std::size_t bytes) override {
        const std::size_t at = (used_ + 63) / 64 * 64;
        if (at + bytes > arena_.size())
            throw std::bad_alloc();
        used_ = at + bytes;
        return region_ + at;
    }
    void release(void*, std::size_t) override {}
    bool memoryIsHostMemory() const override { return false; }
    void copyToDevice(void* dst, const void* src, std::size_t bytes) override {
        std::memcpy(host(dst, bytes), src, bytes);
    }
    void copyToHost(void* dst, const void* src, std::size_t bytes) override {
        std::memcpy(dst, host(src, bytes), bytes);
    }
    void copy(kernels::Ptr dst, kernels::ConstPtr src, std::size_t n) override {
        if (dst.type != src.type)
            noOperators();
        const std::size_t bytes = n * kernels::sizeOf(dst.type);
        std::memmove(host(dst.data, bytes), host(src.data, bytes), bytes);
    }
    void zero(kernels::Ptr x, std::size_t n) override {
        const std::size_t bytes = n * kernels::sizeOf(x.type);
        std::memset(host(x.data, bytes), 0, bytes);
    }

    // ---- no operators
    void embeddingForward(kernels::Ptr, const std::int32_t*, kernels::ConstPtr, kernels::ConstPtr,
                          int, int, int) override {
        noOperators();
    }
    void embeddingBackwardAccumulate(kernels::Ptr, kernels::Ptr, kernels::ConstPtr,
                                     const std::int32_t*, int, int, int) override {
        noOperators();
    }
    void embeddingShardForward(kernels::Ptr, const std::int32_t*, kernels::ConstPtr, int, int,
                               kernels::ConstPtr, int, int, int) override {
        noOperators();
    }
    void embeddingShardBackwardAccumulate(kernels::Ptr, int, int, kernels::Ptr, kernels::ConstPtr,
                                          const std::int32_t*, int, int, int) override {
        noOperators();
    }
    void layerNormForward(kernels::Ptr, float*, float*, kernels::ConstPtr, kernels::ConstPtr,
                          kernels::ConstPtr, int, int) override {
        noOperators();
    }
    void layerNormBackwardAccumulate(kernels::Ptr, kernels::Ptr, kernels::Ptr, kernels::ConstPtr,
                                     kernels::ConstPtr, kernels::ConstPtr, const float*,
                                     const float*, int, int) override {
        noOperators();
    }
    void matmulForward(kernels::Ptr, kernels::ConstPtr, kernels::ConstPtr, kernels::ConstPtr, int,
                       int, int) override {
        noOperators();
    }
    void matmulBackwardInput(kernels::Ptr, kernels::ConstPtr, kernels::ConstPtr, int, int, int,
                             bool) override {
        noOperators();
    }
    void matmulBackwardWeightAccumulate(kernels::Ptr, kernels::Ptr, kernels::ConstPtr,
                                        kernels::ConstPtr, int, int, int) override {
        noOperators();
    }
    void attentionForward(kernels::Ptr, kernels::Ptr, kernels::ConstPtr, int, int, int,
                          int) override {
        noOperators();
    }
    void attentionBackward(kernels::Ptr, kernels::ConstPtr, kernels::ConstPtr, kernels::ConstPtr,
                           int, int, int, int) override {
        noOperators();
    }
    void geluForward(kernels::Ptr, kernels::ConstPtr, std::size_t) override { noOperators(); }
    void geluBackward(kernels::Ptr, kernels::ConstPtr, kernels::ConstPtr, std::size_t) override {
        noOperators();
    }
    void rmsNormForward(kernels::Ptr, float*, kernels::ConstPtr, kernels::ConstPtr, int, int,
                        float) override {
        noOperators();
    }
    void rmsNormBackwardAccumulate(kernels::Ptr, kernels::Ptr, kernels::ConstPtr, kernels::ConstPtr,
                                   kernels::ConstPtr, const float*, int, int) override {
        noOperators();
    }
    void rotaryEmbedding(kernels::Ptr, const float*, const float*, int, int, int, int, int,
                         bool) override {
        noOperators();
    }
    void swigluForward(kernels::Ptr, kernels::ConstPtr, int, int) override { noOperators(); }
    void swigluBackward(kernels::Ptr, kernels::ConstPtr, kernels::ConstPtr, int, int) override {
        noOperators();
    }
    void expandKvHeads(kernels::Ptr, kernels::ConstPtr, int, int, int, int) override {
        noOperators();
    }
    void sumKvHeadGradients(kernels::Ptr, kernels::ConstPtr, int, int, int, int) override {
        noOperators();
    }
    void attentionBlockForward(float*, float*, float*, kernels::ConstPtr, int, kernels::ConstPtr,
                               kernels::ConstPtr, int, const std::int32_t*, const std::int32_t*,
                               int, int, int, int, int, int) override {
        noOperators();
    }
    void attentionBlockFinish(kernels::Ptr, float*, const float*, const float*, const float*, int,
                              int, int, int) override {
        noOperators();
    }
    void attentionBlockDelta(float*, kernels::ConstPtr, kernels::ConstPtr, int, int, int,
                             int) override {
        noOperators();
    }
    void attentionBlockBackward(float*, float*, float*, int, kernels::ConstPtr, const float*,
                                const float*, kernels::ConstPtr, int, kernels::ConstPtr,
                                kernels::ConstPtr, int, const std::int32_t*, const std::int32_t*,
                                int, int, int, int, int, int) override {
        noOperators();
    }
    void copyRows(kernels::Ptr, int, kernels::ConstPtr, int, int, int) override { noOperators(); }
    void add(kernels::Ptr, kernels::ConstPtr, kernels::ConstPtr, std::size_t) override {
        noOperators();
    }
    void addInPlace(kernels::Ptr, kernels::ConstPtr, std::size_t) override { noOperators(); }
    void crossEntropyForwardBackward(float*, const std::int32_t*, int, int, float,
                                     double*) override {
        noOperators();
    }
    void rowMax(const float*, int, int, float*) override { noOperators(); }
    void softmaxShardSums(const float*, const float*, const std::int32_t*, int, int, int, float*,
                          float*) override {
        noOperators();
    }
    void crossEntropyShardLoss(const float*, const float*, const float*, int, double*) override {
        noOperators();
    }
    void crossEntropyShardBackward(float*, const float*, const float*, const std::int32_t*, int,
                                   int, int, float) override {
        noOperators();
    }
    void sumOfSquaresAccumulate(kernels::ConstPtr, std::size_t, double*) override { noOperators(); }
    void zeroDoubles(double*, std::size_t) override { noOperators(); }
    void adamwUpdate(float*, kernels::ConstPtr, float*, float*, std::size_t, float, float, float,
                     float, float, float, int, kernels::Ptr) override {
        noOperators();
    }

private:
    class Done final : public kernels::Event {
    public:
        bool done() override { return true; }
        void wait() override {}
        double seconds() override {
            return std::chrono::duration<double>(
                       std::chrono::steady_clock::now().time_since_epoch())
                .count();
        }
    };
    class Immediate final : public kernels::Stream {
    public:
        void record(kernels::Event&) override {}
        void waitFor(kernels::Event&) override {}
        void synchronize() override {}
    };

    // The arena bytes behind a device address; a range outside the region is a test bug.
    unsigned char* host(const void* device, std::size_t bytes) {
        const auto* p = static_cast<const unsigned char*>(device);
        if (p < region_ || p + bytes > region_ + arena_.size())
            throw std::logic_error("not an address of this device");
        return arena_.data() + (p - region_);
    }
    [[noreturn]] static void noOperators() {
        throw std::logic_error("the untouchable device has memory and copies only");
    }

    std::vector<unsigned char> arena_;
    unsigned char* region_ = nullptr;
    std::size_t used_ = 0;
    Immediate stream_;
};

} // namespace shardscope::testing
