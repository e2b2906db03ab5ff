// Data-parallel gradient reduction in buckets, each started (non-blocking) as soon as the
// backward has finished the gradients it covers, and all completed before the optimizer step:
// what PyTorch DDP does, over any Communicator. The model reports finished ranges of its flat
// gradient buffer; adjacent ranges coalesce until a bucket reaches its size. Without sharding a
// bucket is all-reduced; with ZeRO's shards a bucket is made of whole units (shard_layout.h), each
// reduce-scattered in equal padded parts, each rank receiving the sum of its own shard of it.
#pragma once

#include "runtime/communicator.h"
#include "runtime/device_memory.h"
#include "shard_layout.h"

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

    GradientBuckets(Communicator& group, kernels::Ptr gradients, std::size_t count,
                    std::size_t bucketBytes, const void* clockContext, Clock clock);
    // ZeRO: buckets are reduce-scattered by the units of `shards` (parts = the group's ranks);
    // when finish() returns, the pieces of `gradients` this rank owns hold the summed gradients,
    // the rest is stale. Padded inputs and received parts are workspace buffers from `memory`,
    // filled by `ops`.
    void shardOver(const ShardLayout& shards, DeviceAllocator& memory, kernels::Ops& ops);

    void gradientsReady(std::size_t offset, std::size_t count) override;
    // Starts what is left, waits for every bucket, and checks that every gradient was covered
    // exactly once. Returns the seconds spent waiting (communication not hidden by compute).
    double finish();

    const std::vector<BucketTiming>& buckets() const { return timings_; }
    const char* collective() const { return shards_ ? "reduce_scatter" : "all_reduce"; }
    void startStep(); // forget the last step's buckets

private:
    void flush();
    void reduceScatterUnit(const ShardLayout::Unit& unit, std::vector<Request>& requests);
    void progress(); // lets started collectives advance and notes the ones that completed

    Communicator& group_;
    kernels::Ptr gradients_;
    std::size_t total_, bucketFloats_;
    const void* clockContext_;
    Clock clock_;
    // Unsharded: the pending contiguous range. Sharded: the complete units not yet started,
    // pendingCount_ their floats, and how many floats of each unit have been reported.
    std::size_t pendingOffset_ = 0, pendingCount_ = 0;
    std::vector<std::size_t> pendingUnits_, reportedOfUnit_;
    std::size_t covered_ = 0;
    // ZeRO: each unit's padded input (where the unit does not divide evenly) and this rank's
    // received part, copied to where it belongs.
    struct Received {
        Buffer padded, part;
        std::size_t destination = 0, count = 0;
    };
    std::vector<Received> received_;
    struct InFlight { // a bucket's collectives: one, or under ZeRO one per unit
        std::vector<Request> requests;
        bool complete = false;
    };
    std::vector<InFlight> inFlight_; // after received_: destroyed (waited for) first
    const ShardLayout* shards_ = nullptr;
    DeviceAllocator* memory_ = nullptr;
    kernels::Ops* ops_ = nullptr;
    std::vector<BucketTiming> timings_;
};

} // namespace shardscope
