#include "device_memory.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
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
      bytes_(std::exchange(other.bytes_, 0)), category_(other.category_), type_(other.type_),
      streams_(std::move(other.streams_)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
    if (this != &other) {
        reset();
        owner_ = std::exchange(other.owner_, nullptr);
        data_ = std::exchange(other.data_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
        category_ = other.category_;
        type_ = other.type_;
        streams_ = std::move(other.streams_);
    }
    return *this;
}

float* Buffer::f() const {
    if (type_ != kernels::DType::F32)
        throw std::logic_error("a " + kernels::toString(type_) + " buffer read as fp32");
    return as<float>();
}

void Buffer::reset() {
    if (owner_ && data_)
        owner_->giveBack(*this);
    owner_ = nullptr;
    data_ = nullptr;
    bytes_ = 0;
    streams_.clear();
}

void Buffer::recordStream(kernels::Stream& stream) {
    if (std::find(streams_.begin(), streams_.end(), &stream) == streams_.end())
        streams_.push_back(&stream);
}

DeviceAllocator::~DeviceAllocator() {
    for (InUseElsewhere& block : inUseElsewhere_) {
        for (auto& event : block.events)
            event->wait();
        cache_[block.bytes].push_back(block.data);
    }
    ops_.computeStream().synchronize(); // no block goes back while a kernel may still use it
    for (const auto& [bytes, blocks] : cache_)
        for (void* p : blocks)
            ops_.release(p, bytes);
}

Buffer DeviceAllocator::allocate(MemoryCategory category, std::size_t bytes) {
    Buffer b;
    b.owner_ = this;
    b.bytes_ = bytes;
    b.category_ = category;
    if (!inUseElsewhere_.empty())
        reclaimFinished();
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
    cachedBytes_ += std::int64_t(b.bytes_);
    if (b.streams_.empty()) {
        cache_[b.bytes_].push_back(b.data_);
        return;
    }
    InUseElsewhere block{b.data_, b.bytes_, {}};
    for (kernels::Stream* stream : b.streams_)
        block.events.push_back(events_.record(*stream));
    inUseElsewhere_.push_back(std::move(block));
}

void DeviceAllocator::reclaimFinished() {
    auto finished = [](InUseElsewhere& block) {
        return std::all_of(block.events.begin(), block.events.end(),
                           [](const auto& event) { return event->done(); });
    };
    auto kept = inUseElsewhere_.begin();
    for (auto it = inUseElsewhere_.begin(); it != inUseElsewhere_.end(); ++it) {
        if (!finished(*it)) {
            if (kept != it)
                *kept = std::move(*it);
            ++kept;
            continue;
        }
        cache_[it->bytes].push_back(it->data);
        for (auto& event : it->events)
            events_.giveBack(std::move(event));
    }
    inUseElsewhere_.erase(kept, inUseElsewhere_.end());
}

} // namespace shardscope
