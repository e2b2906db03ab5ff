// Data-parallel gradient reduction in buckets, each started (non-blocking) as soon as the
// backward has finished the gradients it covers, and all completed before the optimizer step:
// what PyTorch DDP does, over any Communicator. The model reports finished ranges of its flat
// gradient buffer; adjacent ranges coalesce until a bucket reaches its size. Without sharding a
// bucket is all-reduced; with ZeRO's shards it is reduce-scattered, each rank receiving the sum
// of the part of the bucket that lies in its own shard.
#pragma once

#include "runtime/communicator.h"
#include "runtime/device_memory.h"

#include <cstddef>
#include <vector>

namespace shardscope {

// Told which gradient ranges are final (no more contributions this step).
class GradientListener {
public:
    virtual ~GradientListener() = default;
    virtual void gradientsReady(std::size_t offset, std::size_t count) = 0;
};

// The contiguous slices of a flat buffer of `total` floats that ZeRO gives each of `parts` ranks
// to own: ceil(total / parts) each, the last ones shorter.
struct FlatShards {
    std::size_t total = 0;
    int parts = 1;
    std::size_t begin(int part) const;
    std::size_t end(int part) const;
    std::size_t size(int part) const { return end(part) - begin(part); }
    // How many of the floats [offset, offset + count) fall in each part's slice.
    std::vector<std::size_t> countsOf(std::size_t offset, std::size_t count) const;
};

struct BucketTiming {
    std::size_t offset = 0, count = 0;
    double started = 0, completed = 0; // seconds on the caller's clock
};

class GradientBuckets final : public GradientListener {
public:
    using Clock = double (*)(const void* context);

    GradientBuckets(Communicator& group, kernels::Ptr gradients, std::size_t count,
                    std::size_t bucketBytes, const void* clockContext, Clock clock);
    // ZeRO: buckets are reduce-scattered over `shards` (parts = the group's ranks); when finish()
    // returns, this rank's slice of `gradients` holds the summed gradients, the rest is stale.
    // Each bucket's own part arrives in a workspace buffer from `memory`, copied in by `ops`.
    void shardOver(const FlatShards& shards, DeviceAllocator& memory, kernels::Ops& ops);

    void gradientsReady(std::size_t offset, std::size_t count) override;
    // Starts what is left, waits for every bucket, and checks that every gradient was covered
    // exactly once. Returns the seconds spent waiting (communication not hidden by compute).
    double finish();

    const std::vector<BucketTiming>& buckets() const { return timings_; }
    const char* collective() const { return shards_ ? "reduce_scatter" : "all_reduce"; }
    void startStep(); // forget the last step's buckets

private:
    void flush();
    void progress(); // lets started collectives advance and notes the ones that completed

    Communicator& group_;
    kernels::Ptr gradients_;
    std::size_t total_, bucketFloats_;
    const void* clockContext_;
    Clock clock_;
    std::size_t pendingOffset_ = 0, pendingCount_ = 0;
    std::size_t covered_ = 0;
    // ZeRO: each bucket's own part, received here and copied to where it belongs.
    struct Received {
        Buffer part;
        std::size_t destination = 0, count = 0;
    };
    std::vector<Received> received_;
    std::vector<Request> inFlight_; // after received_: destroyed (waited for) first
    const FlatShards* shards_ = nullptr;
    DeviceAllocator* memory_ = nullptr;
    kernels::Ops* ops_ = nullptr;
    std::vector<BucketTiming> timings_;
};

} // namespace shardscope
