#include "zero_store.h"

#include <algorithm>

namespace shardscope {

ZeroStore::ZeroStore(std::size_t count, ZeroSharding zero, kernels::Ops& ops,
                     DeviceAllocator& memory)
    : count_(count),
      stage_(zero.stage >= 2 && zero.group && zero.group->size() > 1 ? zero.stage : 0),
      group_(zero.group), ops_(ops), memory_(memory) {
    shards_ = {count_, stage_ ? group_->size() : 1};
    const int replica = stage_ ? group_->rank() : 0;
    ownedBegin_ = shards_.begin(replica);
    ownedEnd_ = shards_.end(replica);
    const std::size_t owned = ownedEnd_ - ownedBegin_;
    const std::size_t paramFloats = shardsParameters() ? owned : count_;
    const std::size_t gradFloats = shardsGradients() ? owned : count_;
    // At least one float, so a replica owning nothing still has valid pointers.
    params_ = memory_.floats(MemoryCategory::Parameters, std::max<std::size_t>(1, paramFloats));
    grads_ = memory_.floats(MemoryCategory::Gradients, std::max<std::size_t>(1, gradFloats));
    ops_.zero(params_.f(), paramFloats);
    ops_.zero(grads_.f(), gradFloats);
}

float* ZeroStore::parameterAt(std::size_t offset) const {
    return params_.f() + (shardsParameters() ? offset - ownedBegin_ : offset);
}

float* ZeroStore::gradientAt(std::size_t offset) const {
    return grads_.f() + (shardsGradients() ? offset - ownedBegin_ : offset);
}

void ZeroStore::setParameters(const float* whole) {
    const std::size_t from = shardsParameters() ? ownedBegin_ : 0,
                      to = shardsParameters() ? ownedEnd_ : count_;
    ops_.copyToDevice(params_.f(), whole + from, (to - from) * sizeof(float));
}

void ZeroStore::zeroGradients() {
    ops_.zero(grads_.f(), shardsGradients() ? ownedEnd_ - ownedBegin_ : count_);
}

// The other replicas' parts of the range land around this one's, which sits in its slice.
Request ZeroStore::startGather(std::size_t offset, std::size_t n, float* into) const {
    const std::vector<std::size_t> counts = shards_.countsOf(offset, n);
    const int me = group_->rank();
    std::size_t before = 0;
    for (int d = 0; d < me; ++d)
        before += counts[std::size_t(d)];
    if (counts[std::size_t(me)] > 0)
        ops_.copy(into + before, parameterAt(std::max(offset, ownedBegin_)),
                  counts[std::size_t(me)]);
    return group_->allGatherVInPlace(into, counts);
}

void ZeroStore::prefetch(std::size_t offset, std::size_t n) const {
    if (!shardsParameters())
        return;
    prefetched_.request.wait(); // an unused earlier one completes before its buffer goes
    prefetched_ = Prefetch{};
    prefetched_.offset = offset;
    prefetched_.count = n;
    prefetched_.buffer = memory_.floats(MemoryCategory::Workspace, n);
    prefetched_.request = startGather(offset, n, prefetched_.buffer.f());
}

float* ZeroStore::parametersOf(std::size_t offset, std::size_t n, Buffer& holder) const {
    if (!shardsParameters())
        return params_.f() + offset;
    if (prefetched_.buffer && prefetched_.offset == offset && prefetched_.count == n) {
        prefetched_.request.wait();
        holder = std::move(prefetched_.buffer);
        prefetched_ = Prefetch{};
        return holder.f();
    }
    holder = memory_.floats(MemoryCategory::Workspace, n);
    startGather(offset, n, holder.f()).wait();
    return holder.f();
}

float* ZeroStore::gradientsFor(std::size_t offset, std::size_t n, Buffer& holder) const {
    if (!shardsGradients())
        return grads_.f() + offset;
    holder = memory_.floats(MemoryCategory::Workspace, n);
    ops_.zero(holder.f(), n);
    return holder.f();
}

void ZeroStore::gradientsDone(std::size_t offset, std::size_t n, Buffer& holder) const {
    if (!shardsGradients())
        return;
    const std::vector<std::size_t> counts = shards_.countsOf(offset, n);
    const std::size_t mine = counts[std::size_t(group_->rank())];
    Buffer part = memory_.floats(MemoryCategory::Workspace, std::max<std::size_t>(1, mine));
    CommunicationSpan span;
    span.collective = "reduce_scatter";
    span.axis = "dp";
    span.bytes = n * sizeof(float);
    span.waited = true;
    span.start = span.waitStart = comms_ ? comms_->now() : 0.0;
    group_->reduceScatterSumV(holder.f(), part.f(), counts).wait();
    if (comms_) {
        span.end = comms_->now();
        comms_->communication(span);
    }
    if (mine > 0)
        ops_.addInPlace(gradientAt(std::max(offset, ownedBegin_)), part.f(), mine);
    holder.reset();
}

} // namespace shardscope
