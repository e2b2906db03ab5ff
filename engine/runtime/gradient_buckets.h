// Data-parallel gradient all-reduce in buckets, each started (non-blocking) as soon as the
// backward has finished the gradients it covers, and all completed before the optimizer step:
// what PyTorch DDP does, over any Communicator. The model reports finished ranges of its flat
// gradient buffer; adjacent ranges coalesce until a bucket reaches its size.
#pragma once

#include "communicator.h"

#include <cstddef>
#include <vector>

namespace shardscope {

// Told which gradient ranges are final (no more contributions this step).
class GradientListener {
public:
    virtual ~GradientListener() = default;
    virtual void gradientsReady(std::size_t offset, std::size_t count) = 0;
};

struct BucketTiming {
    std::size_t offset = 0, count = 0;
    double started = 0, completed = 0; // seconds on the caller's clock
};

class GradientBuckets final : public GradientListener {
public:
    using Clock = double (*)(const void* context);

    GradientBuckets(Communicator& group, float* gradients, std::size_t count,
                    std::size_t bucketBytes, const void* clockContext, Clock clock);

    void gradientsReady(std::size_t offset, std::size_t count) override;
    // Starts what is left, waits for every bucket, and checks that every gradient was covered
    // exactly once. Returns the seconds spent waiting (communication not hidden by compute).
    double finish();

    const std::vector<BucketTiming>& buckets() const { return timings_; }
    void startStep(); // forget the last step's buckets

private:
    void flush();
    void progress(); // lets started collectives advance and notes the ones that completed

    Communicator& group_;
    float* gradients_;
    std::size_t total_, bucketFloats_;
    const void* clockContext_;
    Clock clock_;
    std::size_t pendingOffset_ = 0, pendingCount_ = 0;
    std::size_t covered_ = 0;
    std::vector<Request> inFlight_;
    std::vector<BucketTiming> timings_;
};

} // namespace shardscope
