// Every byte the engine puts on a device comes from here, counted by what it is for, so measured
// memory can stand beside the planner's prediction category by category. Freed blocks are kept
// for reuse by exact size: after the first step a training step asks the backend for nothing.
#pragma once

#include "kernels/ops.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
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
    float* f() const { return as<float>(); }
    std::size_t bytes() const { return bytes_; }
    explicit operator bool() const { return data_ != nullptr; }
    void reset();

private:
    friend class DeviceAllocator;
    DeviceAllocator* owner_ = nullptr;
    void* data_ = nullptr;
    std::size_t bytes_ = 0;
    MemoryCategory category_ = MemoryCategory::Workspace;
};

class DeviceAllocator {
public:
    explicit DeviceAllocator(kernels::Ops& ops) : ops_(ops) {}
    ~DeviceAllocator(); // every Buffer must be gone by now
    DeviceAllocator(const DeviceAllocator&) = delete;
    DeviceAllocator& operator=(const DeviceAllocator&) = delete;

    Buffer allocate(MemoryCategory category, std::size_t bytes);
    Buffer floats(MemoryCategory category, std::size_t n) {
        return allocate(category, n * sizeof(float));
    }

    const MemoryUsage& live() const { return live_; }     // held by Buffers now
    const MemoryUsage& peak() const { return peak_; }     // highest live, per category
    std::int64_t peakTotal() const { return peakTotal_; } // highest sum, at one moment
    std::int64_t backendAllocations() const { return backendAllocations_; }
    std::int64_t cachedBytes() const { return cachedBytes_; }

private:
    friend class Buffer;
    void giveBack(Buffer& b);

    kernels::Ops& ops_;
    // Free blocks by size. Vectors keep their capacity, so once every size has been seen a
    // free and a reuse touch no host allocator either.
    std::map<std::size_t, std::vector<void*>> cache_;
    MemoryUsage live_, peak_;
    std::int64_t peakTotal_ = 0;
    std::int64_t backendAllocations_ = 0;
    std::int64_t cachedBytes_ = 0;
};

} // namespace shardscope
