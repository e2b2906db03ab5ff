#include "gradient_buckets.h"

#include <stdexcept>
#include <string>

namespace shardscope {

GradientBuckets::GradientBuckets(Communicator& group, float* gradients, std::size_t count,
                                 std::size_t bucketBytes, const void* clockContext, Clock clock)
    : group_(group), gradients_(gradients), total_(count),
      bucketFloats_(std::max<std::size_t>(1, bucketBytes / sizeof(float))),
      clockContext_(clockContext), clock_(clock) {}

void GradientBuckets::startStep() {
    inFlight_.clear();
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
    inFlight_.push_back(group_.allReduceSum(gradients_ + pendingOffset_, pendingCount_));
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
    return clock_(clockContext_) - start;
}

} // namespace shardscope
