#include "gradient_buckets.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace shardscope {

void GradientBuckets::shardOver(const ShardLayout& shards, DeviceAllocator& memory,
                                kernels::Ops& ops) {
    if (shards.parts() != group_.size() || shards.rank() != group_.rank() ||
        shards.total() != total_)
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
    pendingUnits_.clear();
    reportedOfUnit_.assign(shards_ ? shards_->units().size() : 0, 0);
    covered_ = 0;
}

void GradientBuckets::gradientsReady(std::size_t offset, std::size_t count) {
    if (count == 0)
        return;
    if (shards_) { // a unit joins the bucket once all of it has been reported
        const std::vector<ShardLayout::Unit>& units = shards_->units();
        for (std::size_t k = 0; k < units.size(); ++k) {
            const ShardLayout::Unit& u = units[k];
            const std::size_t a = std::max(offset, u.offset),
                              b = std::min(offset + count, u.offset + u.count);
            if (a >= b)
                continue;
            reportedOfUnit_[k] += b - a;
            if (reportedOfUnit_[k] == u.count) {
                pendingUnits_.push_back(k);
                pendingCount_ += u.count;
            }
        }
        if (pendingCount_ >= bucketFloats_)
            flush();
        progress();
        return;
    }
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
    const double started = clock_(clockContext_);
    std::vector<Request> requests;
    if (shards_) {
        std::size_t first = total_;
        for (std::size_t k : pendingUnits_) {
            const ShardLayout::Unit& u = shards_->units()[k];
            first = std::min(first, u.offset);
            reduceScatterUnit(u, requests);
        }
        timings_.push_back({first, pendingCount_, started, 0});
        pendingUnits_.clear();
    } else {
        timings_.push_back({pendingOffset_, pendingCount_, started, 0});
        requests.push_back(group_.allReduceSum(gradients_ + pendingOffset_, pendingCount_));
    }
    inFlight_.push_back({std::move(requests), false});
    covered_ += pendingCount_;
    pendingCount_ = 0;
}

// Equal parts of the unit padded to a multiple of the group: in place when it divides evenly.
void GradientBuckets::reduceScatterUnit(const ShardLayout::Unit& u,
                                        std::vector<Request>& requests) {
    const int parts = shards_->parts();
    const kernels::DType type = gradients_.type;
    Received r;
    const ShardLayout::Piece mine = shards_->pieceOf(u, group_.rank());
    r.destination = mine.flat;
    r.count = mine.count;
    r.part = memory_->tensor(MemoryCategory::Workspace, std::max<std::size_t>(1, u.shard), type);
    kernels::ConstPtr in = gradients_ + u.offset;
    if (u.padded(parts) != u.count) {
        r.padded = memory_->tensor(MemoryCategory::Workspace, u.padded(parts), type);
        ops_->copy(r.padded.ptr(), in, u.count);
        ops_->zero(r.padded.ptr() + u.count, u.padded(parts) - u.count);
        in = r.padded.ptr();
    }
    requests.push_back(group_.reduceScatterSum(in, r.part.ptr(), u.shard));
    received_.push_back(std::move(r));
}

void GradientBuckets::progress() {
    for (std::size_t i = 0; i < inFlight_.size(); ++i) {
        InFlight& bucket = inFlight_[i];
        if (bucket.complete)
            continue;
        bucket.complete = true;
        for (Request& r : bucket.requests)
            bucket.complete = r.done() && bucket.complete;
        if (bucket.complete)
            timings_[i].completed = clock_(clockContext_);
    }
}

double GradientBuckets::finish() {
    flush();
    if (covered_ != total_)
        throw std::logic_error("gradient buckets covered " + std::to_string(covered_) + " of " +
                               std::to_string(total_) + " gradients");
    const double start = clock_(clockContext_);
    for (std::size_t i = 0; i < inFlight_.size(); ++i) {
        InFlight& bucket = inFlight_[i];
        if (bucket.complete)
            continue;
        waitAll(bucket.requests);
        bucket.complete = true;
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
