#include "zero_store.h"

#include <algorithm>

namespace shardscope {

ZeroStore::ZeroStore(std::size_t count, ZeroSharding zero, kernels::Ops& ops,
                     DeviceAllocator& memory, kernels::DType weights, kernels::DType grads)
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
    params_ =
        memory_.tensor(MemoryCategory::Parameters, std::max<std::size_t>(1, paramFloats), weights);
    grads_ = memory_.tensor(MemoryCategory::Gradients, std::max<std::size_t>(1, gradFloats), grads);
    ops_.zero(params_.ptr(), paramFloats);
    ops_.zero(grads_.ptr(), gradFloats);
}

kernels::Ptr ZeroStore::parameterAt(std::size_t offset) const {
    return params_.ptr() + (shardsParameters() ? offset - ownedBegin_ : offset);
}

kernels::Ptr ZeroStore::gradientAt(std::size_t offset) const {
    return grads_.ptr() + (shardsGradients() ? offset - ownedBegin_ : offset);
}

void ZeroStore::setParameters(const float* whole) {
    setStoredParameters(whole + (shardsParameters() ? ownedBegin_ : 0));
}

void ZeroStore::setStoredParameters(const float* stored) {
    const std::size_t n = shardsParameters() ? ownedEnd_ - ownedBegin_ : count_;
    if (params_.type() == kernels::DType::F32) {
        ops_.copyToDevice(params_.f(), stored, n * sizeof(float));
        return;
    }
    Buffer staged = memory_.floats(MemoryCategory::Workspace, std::max<std::size_t>(1, n));
    ops_.copyToDevice(staged.f(), stored, n * sizeof(float));
    ops_.copy(params_.ptr(), staged.f(), n);
}

void ZeroStore::zeroGradients() {
    ops_.zero(grads_.ptr(), shardsGradients() ? ownedEnd_ - ownedBegin_ : count_);
}

// The other replicas' parts of the range land around this one's, which sits in its slice.
Request ZeroStore::startGather(std::size_t offset, std::size_t n, kernels::Ptr into) const {
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
    prefetched_.buffer = memory_.tensor(MemoryCategory::Workspace, n, params_.type());
    prefetched_.request = startGather(offset, n, prefetched_.buffer.ptr());
}

kernels::Ptr ZeroStore::parametersOf(std::size_t offset, std::size_t n, Buffer& holder) const {
    if (!shardsParameters())
        return params_.ptr() + offset;
    if (prefetched_.buffer && prefetched_.offset == offset && prefetched_.count == n) {
        prefetched_.request.wait();
        holder = std::move(prefetched_.buffer);
        prefetched_ = Prefetch{};
        return holder.ptr();
    }
    holder = memory_.tensor(MemoryCategory::Workspace, n, params_.type());
    startGather(offset, n, holder.ptr()).wait();
    return holder.ptr();
}

kernels::Ptr ZeroStore::gradientsFor(std::size_t offset, std::size_t n, Buffer& holder) const {
    if (!shardsGradients())
        return grads_.ptr() + offset;
    holder = memory_.tensor(MemoryCategory::Workspace, n, grads_.type());
    ops_.zero(holder.ptr(), n);
    return holder.ptr();
}

void ZeroStore::gradientsDone(std::size_t offset, std::size_t n, Buffer& holder) const {
    if (!shardsGradients())
        return;
    const std::vector<std::size_t> counts = shards_.countsOf(offset, n);
    const std::size_t mine = counts[std::size_t(group_->rank())];
    Buffer part =
        memory_.tensor(MemoryCategory::Workspace, std::max<std::size_t>(1, mine), grads_.type());
    CommunicationSpan span;
    span.collective = "reduce_scatter";
    span.axis = "dp";
    span.bytes = n * kernels::sizeOf(grads_.type());
    span.waited = true;
    span.start = span.waitStart = comms_ ? comms_->now() : 0.0;
    group_->reduceScatterSumV(holder.ptr(), part.ptr(), counts).wait();
    if (comms_) {
        span.end = comms_->now();
        comms_->communication(span);
    }
    if (mine > 0)
        ops_.addInPlace(gradientAt(std::max(offset, ownedBegin_)), part.ptr(), mine);
    holder.reset();
}

} // namespace shardscope
