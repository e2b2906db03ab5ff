#include "gradient_buckets.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace shardscope {

std::size_t FlatShards::begin(int part) const {
    const std::size_t each = (total + std::size_t(parts) - 1) / std::size_t(parts);
    return std::min(total, each * std::size_t(part));
}

std::size_t FlatShards::end(int part) const {
    return begin(part + 1);
}

std::vector<std::size_t> FlatShards::countsOf(std::size_t offset, std::size_t count) const {
    std::vector<std::size_t> counts;
    for (int p = 0; p < parts; ++p) {
        const std::size_t a = std::max(offset, begin(p)), b = std::min(offset + count, end(p));
        counts.push_back(b > a ? b - a : 0);
    }
    return counts;
}

void GradientBuckets::shardOver(const FlatShards& shards, DeviceAllocator& memory,
                                kernels::Ops& ops) {
    if (shards.parts != group_.size() || shards.total != total_)
        throw std::logic_error("ZeRO shards must split the gradient buffer over the group");
    shards_ = &shards;
    memory_ = &memory;
    ops_ = &ops;
}

GradientBuckets::GradientBuckets(Communicator& group, kernels::Ptr gradients, std::size_t count,
                                 std::size_t bucketBytes, const void* clockContext, Clock clock)
    : group_(group), gradients_(gradients), total_(count),
      bucketFloats_(std::max<std::size_t>(1, bucketBytes / kernels::sizeOf(gradients.type))),
      clockContext_(clockContext), clock_(clock) {}

void GradientBuckets::startStep() {
    inFlight_.clear();
    received_.clear();
    timings_.clear();
    pendingCount_ = 0;
    covered_ = 0;
}

void GradientBuckets::gradientsReady(std::size_t offset, std::size_t count) {
    if (count == 0)
        return;
    // The backward finishes ranges from the end of the buffer towards its start, so a new range
    // usually ends where the pending one begins.
    if (pendingCount_ > 0 && offset + count != pendingOffset_)
        flush();
    pendingOffset_ = offset;
    pendingCount_ += count;
    if (pendingCount_ >= bucketFloats_)
        flush();
    progress();
}

void GradientBuckets::flush() {
    if (pendingCount_ == 0)
        return;
    timings_.push_back({pendingOffset_, pendingCount_, clock_(clockContext_), 0});
    if (shards_) {
        const std::vector<std::size_t> counts = shards_->countsOf(pendingOffset_, pendingCount_);
        const int me = group_.rank();
        Received r;
        r.count = counts[std::size_t(me)];
        r.destination = std::max(pendingOffset_, shards_->begin(me));
        r.part = memory_->tensor(MemoryCategory::Workspace, std::max<std::size_t>(1, r.count),
                                 gradients_.type);
        inFlight_.push_back(
            group_.reduceScatterSumV(gradients_ + pendingOffset_, r.part.ptr(), counts));
        received_.push_back(std::move(r));
    } else {
        inFlight_.push_back(group_.allReduceSum(gradients_ + pendingOffset_, pendingCount_));
    }
    covered_ += pendingCount_;
    pendingCount_ = 0;
}

void GradientBuckets::progress() {
    for (std::size_t i = 0; i < inFlight_.size(); ++i)
        if (inFlight_[i].active() && inFlight_[i].done())
            timings_[i].completed = clock_(clockContext_);
}

double GradientBuckets::finish() {
    flush();
    if (covered_ != total_)
        throw std::logic_error("gradient buckets covered " + std::to_string(covered_) + " of " +
                               std::to_string(total_) + " gradients");
    const double start = clock_(clockContext_);
    for (std::size_t i = 0; i < inFlight_.size(); ++i)
        if (inFlight_[i].active()) {
            inFlight_[i].wait();
            timings_[i].completed = clock_(clockContext_);
        }
    const double waited = clock_(clockContext_) - start;
    for (Received& r : received_)
        if (r.count > 0)
            ops_->copy(gradients_ + r.destination, r.part.ptr(), r.count);
    received_.clear();
    return waited;
}

} // namespace shardscope
