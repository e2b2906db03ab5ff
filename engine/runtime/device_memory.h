// Every byte the engine puts on a device comes from here, counted by what it is for, so measured
// memory can stand beside the planner's prediction category by category. Freed blocks are kept
// for reuse by exact size: after the first step a training step asks the backend for nothing.
// Work on the compute stream runs in order, so a block it let go can go to the next request at
// once; a block another stream used (a transfer) waits until that stream is done with it.
#pragma once

#include "event_pool.h"
#include "kernels/ops.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace shardscope {

enum class MemoryCategory { Parameters, Gradients, Optimizer, Activations, Workspace };
inline constexpr std::size_t kMemoryCategoryCount = 5;
inline constexpr std::array<MemoryCategory, kMemoryCategoryCount> kMemoryCategories = {
    MemoryCategory::Parameters, MemoryCategory::Gradients, MemoryCategory::Optimizer,
    MemoryCategory::Activations, MemoryCategory::Workspace};
std::string toString(MemoryCategory c); // "parameters", "gradients", ...

struct MemoryUsage {
    std::array<std::int64_t, kMemoryCategoryCount> bytes{};
    std::int64_t operator[](MemoryCategory c) const { return bytes[std::size_t(c)]; }
    std::int64_t total() const;
};

class DeviceAllocator;

// A block of device memory owned by one holder; it goes back to the allocator's cache when the
// holder lets go.
class Buffer {
public:
    Buffer() = default;
    Buffer(Buffer&& other) noexcept;
    Buffer& operator=(Buffer&& other) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() { reset(); }

    template <typename T = float> T* as() const { return static_cast<T*>(data_); }
    // The elements as fp32: std::logic_error when they are bf16.
    float* f() const;
    kernels::Ptr ptr() const { return {data_, type_}; }
    kernels::DType type() const { return type_; }
    std::size_t bytes() const { return bytes_; }
    explicit operator bool() const { return data_ != nullptr; }
    void reset();
    // Work enqueued on `stream` (not the compute stream) uses the buffer: once let go, the block
    // is reused only after what `stream` has enqueued by then has run.
    void recordStream(kernels::Stream& stream);

private:
    friend class DeviceAllocator;
    DeviceAllocator* owner_ = nullptr;
    void* data_ = nullptr;
    std::size_t bytes_ = 0;
    MemoryCategory category_ = MemoryCategory::Workspace;
    kernels::DType type_ = kernels::DType::F32;
    std::vector<kernels::Stream*> streams_;
};

class DeviceAllocator {
public:
    explicit DeviceAllocator(kernels::Ops& ops) : ops_(ops), events_(ops) {}
    ~DeviceAllocator(); // every Buffer must be gone by now; waits for the device first
    DeviceAllocator(const DeviceAllocator&) = delete;
    DeviceAllocator& operator=(const DeviceAllocator&) = delete;

    Buffer allocate(MemoryCategory category, std::size_t bytes);
    Buffer floats(MemoryCategory category, std::size_t n) {
        return allocate(category, n * sizeof(float));
    }
    // n elements of `type`.
    Buffer tensor(MemoryCategory category, std::size_t n, kernels::DType type) {
        Buffer b = allocate(category, n * kernels::sizeOf(type));
        b.type_ = type;
        return b;
    }

    const MemoryUsage& live() const { return live_; }     // held by Buffers now
    const MemoryUsage& peak() const { return peak_; }     // highest live, per category
    std::int64_t peakTotal() const { return peakTotal_; } // highest sum, at one moment
    std::int64_t backendAllocations() const { return backendAllocations_; }
    std::int64_t cachedBytes() const { return cachedBytes_; }
    // Blocks let go while another stream may still use them.
    std::size_t blocksInUseElsewhere() const { return inUseElsewhere_.size(); }

private:
    friend class Buffer;
    void giveBack(Buffer& b);
    void reclaimFinished(); // blocks whose streams are done go back to the cache

    kernels::Ops& ops_;
    // Free blocks by size. Vectors keep their capacity, so once every size has been seen a
    // free and a reuse touch no host allocator either.
    std::map<std::size_t, std::vector<void*>> cache_;
    struct InUseElsewhere {
        void* data;
        std::size_t bytes;
        std::vector<std::unique_ptr<kernels::Event>> events; // one per stream that used it
    };
    std::vector<InUseElsewhere> inUseElsewhere_;
    EventPool events_;
    MemoryUsage live_, peak_;
    std::int64_t peakTotal_ = 0;
    std::int64_t backendAllocations_ = 0;
    std::int64_t cachedBytes_ = 0;
};

} // namespace shardscope
