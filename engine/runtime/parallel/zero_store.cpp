#include "zero_store.h"

#include <algorithm>

namespace shardscope {

ZeroStore::ZeroStore(std::size_t count, const std::vector<std::size_t>& units, ZeroSharding zero,
                     kernels::Ops& ops, DeviceAllocator& memory, kernels::DType weights,
                     kernels::DType grads)
    : count_(count),
      stage_(zero.stage >= 2 && zero.group && zero.group->size() > 1 ? zero.stage : 0),
      group_(zero.group), ops_(ops), memory_(memory),
      layout_(zero.stage >= 1 && zero.group && zero.group->size() > 1
                  ? ShardLayout(count, units, zero.group->size(), zero.group->rank())
                  : ShardLayout(count)) {
    // At least one element, so a replica storing nothing still has valid pointers.
    params_ = memory_.tensor(MemoryCategory::Parameters,
                             std::max<std::size_t>(1, storedParameters()), weights);
    grads_ = memory_.tensor(MemoryCategory::Gradients, std::max<std::size_t>(1, storedGradients()),
                            grads);
    ops_.zero(params_.ptr(), storedParameters());
    ops_.zero(grads_.ptr(), storedGradients());
}

kernels::Ptr ZeroStore::parameterAt(std::size_t offset) const {
    return params_.ptr() + (shardsParameters() ? layout_.storedIndex(offset) : offset);
}

kernels::Ptr ZeroStore::gradientAt(std::size_t offset) const {
    return grads_.ptr() + (shardsGradients() ? layout_.storedIndex(offset) : offset);
}

void ZeroStore::setParameters(const float* whole) {
    if (!shardsParameters())
        return setStoredParameters(whole);
    const std::vector<float> stored = layout_.pack(whole);
    setStoredParameters(stored.data());
}

void ZeroStore::setStoredParameters(const float* stored) {
    const std::size_t n = storedParameters();
    if (params_.type() == kernels::DType::F32) {
        ops_.copyToDevice(params_.f(), stored, n * sizeof(float));
        return;
    }
    Buffer staged = memory_.floats(MemoryCategory::Workspace, std::max<std::size_t>(1, n));
    ops_.copyToDevice(staged.f(), stored, n * sizeof(float));
    ops_.copy(params_.ptr(), staged.f(), n);
}

void ZeroStore::storeParameters(std::size_t offset, const float* values, std::size_t n) {
    if (n == 0)
        return;
    const kernels::Ptr at = parameterAt(offset);
    if (at.type == kernels::DType::F32) {
        ops_.copyToDevice(at.data, values, n * sizeof(float));
        return;
    }
    Buffer staged = memory_.floats(MemoryCategory::Workspace, n);
    ops_.copyToDevice(staged.f(), values, n * sizeof(float));
    ops_.copy(at, staged.f(), n);
}

void ZeroStore::zeroGradients() {
    ops_.zero(grads_.ptr(), storedGradients());
}

// Every replica sends its whole shard, padding included, so the parts are of one size.
Request ZeroStore::startGather(const ShardLayout::Unit& unit, kernels::Ptr into) const {
    return group_->allGather(params_.ptr() + unit.stored, into, unit.shard);
}

void ZeroStore::prefetch(std::size_t offset, std::size_t n) const {
    if (!shardsParameters())
        return;
    const ShardLayout::Unit& unit = layout_.unitOf(offset, n);
    prefetched_.request.wait(); // an unused earlier one completes before its buffer goes
    prefetched_ = Prefetch{};
    prefetched_.offset = offset;
    prefetched_.count = n;
    prefetched_.buffer =
        memory_.tensor(MemoryCategory::Workspace, unit.padded(layout_.parts()), params_.type());
    prefetched_.request = startGather(unit, prefetched_.buffer.ptr());
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
    const ShardLayout::Unit& unit = layout_.unitOf(offset, n);
    holder =
        memory_.tensor(MemoryCategory::Workspace, unit.padded(layout_.parts()), params_.type());
    startGather(unit, holder.ptr()).wait();
    return holder.ptr();
}

kernels::Ptr ZeroStore::gradientsFor(std::size_t offset, std::size_t n, Buffer& holder) const {
    if (!shardsGradients())
        return grads_.ptr() + offset;
    const std::size_t padded = layout_.unitOf(offset, n).padded(layout_.parts());
    holder = memory_.tensor(MemoryCategory::Workspace, padded, grads_.type());
    ops_.zero(holder.ptr(), padded); // the padding too: it is summed with the rest
    return holder.ptr();
}

void ZeroStore::gradientsDone(std::size_t offset, std::size_t n, Buffer& holder) const {
    if (!shardsGradients())
        return;
    const ShardLayout::Unit& unit = layout_.unitOf(offset, n);
    Buffer part = memory_.tensor(MemoryCategory::Workspace, std::max<std::size_t>(1, unit.shard),
                                 grads_.type());
    CommunicationSpan span;
    span.collective = "reduce_scatter";
    span.axis = "dp";
    span.bytes = unit.padded(layout_.parts()) * kernels::sizeOf(grads_.type());
    span.waited = true;
    span.start = span.waitStart = comms_ ? comms_->now() : 0.0;
    group_->reduceScatterSum(holder.ptr(), part.ptr(), unit.shard).wait();
    if (comms_) {
        span.end = comms_->now();
        comms_->communication(span);
    }
    // The whole shard, padding included: the padding's sum is zero.
    ops_.addInPlace(grads_.ptr() + unit.stored, part.ptr(), unit.shard);
    holder.reset();
}

} // namespace shardscope
