#include "device_memory.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace shardscope {

std::string toString(MemoryCategory c) {
    switch (c) {
    case MemoryCategory::Parameters:
        return "parameters";
    case MemoryCategory::Gradients:
        return "gradients";
    case MemoryCategory::Optimizer:
        return "optimizer";
    case MemoryCategory::Activations:
        return "activations";
    case MemoryCategory::Workspace:
        return "workspace";
    }
    return "?";
}

std::int64_t MemoryUsage::total() const {
    return std::accumulate(bytes.begin(), bytes.end(), std::int64_t(0));
}

Buffer::Buffer(Buffer&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)), category_(other.category_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
    if (this != &other) {
        reset();
        owner_ = std::exchange(other.owner_, nullptr);
        data_ = std::exchange(other.data_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
        category_ = other.category_;
    }
    return *this;
}

void Buffer::reset() {
    if (owner_ && data_)
        owner_->giveBack(*this);
    owner_ = nullptr;
    data_ = nullptr;
    bytes_ = 0;
}

DeviceAllocator::~DeviceAllocator() {
    for (const auto& [bytes, blocks] : cache_)
        for (void* p : blocks)
            ops_.release(p, bytes);
}

Buffer DeviceAllocator::allocate(MemoryCategory category, std::size_t bytes) {
    Buffer b;
    b.owner_ = this;
    b.bytes_ = bytes;
    b.category_ = category;
    if (const auto it = cache_.find(bytes); it != cache_.end() && !it->second.empty()) {
        b.data_ = it->second.back();
        it->second.pop_back();
        cachedBytes_ -= std::int64_t(bytes);
    } else {
        b.data_ = ops_.allocate(bytes);
        ++backendAllocations_;
    }
    const auto i = std::size_t(category);
    live_.bytes[i] += std::int64_t(bytes);
    peak_.bytes[i] = std::max(peak_.bytes[i], live_.bytes[i]);
    peakTotal_ = std::max(peakTotal_, live_.total());
    return b;
}

void DeviceAllocator::giveBack(Buffer& b) {
    live_.bytes[std::size_t(b.category_)] -= std::int64_t(b.bytes_);
    cache_[b.bytes_].push_back(b.data_);
    cachedBytes_ += std::int64_t(b.bytes_);
}

} // namespace shardscope
