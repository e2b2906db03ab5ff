// A model's flat parameter and gradient buffers, whole or, under ZeRO-2 and ZeRO-3 (Rajbhandari
// et al. 2020), only this data-parallel replica's shards of them (shard_layout.h: an equal,
// padded shard of every unit). Each unit's gradient of one microbatch accumulates in a workspace
// buffer and is reduce-scattered into the shards as soon as it is complete, as DeepSpeed does;
// under ZeRO-3 a unit's parameters are all-gathered just before use (one gather may be started
// ahead) and let go after. Stages 0 and 1 keep everything whole here (ZeRO-1 shards only the
// optimizer, outside the model, by the same layout).
#pragma once

#include "gradient_buckets.h"
#include "kernels/ops.h"
#include "runtime/communicator.h"
#include "runtime/device_memory.h"
#include "shard_layout.h"

#include <cstddef>

namespace shardscope {

struct ZeroSharding {
    int stage = 0;
    Communicator* group = nullptr; // the dp group, for stages 2 and 3
};

class ZeroStore {
public:
    // units: where each unit of the flat buffer begins (ascending, the first 0): the ranges the
    // model gathers and reduces as one. weights, grads: the types the parameters and gradients
    // are stored in (the precision policy's); ZeRO-3's gathers and ZeRO-2's reduce-scatters move
    // them in those types.
    ZeroStore(std::size_t count, const std::vector<std::size_t>& units, ZeroSharding zero,
              kernels::Ops& ops, DeviceAllocator& memory,
              kernels::DType weights = kernels::DType::F32,
              kernels::DType grads = kernels::DType::F32);

    std::size_t count() const { return count_; }
    bool shardsGradients() const { return stage_ >= 2; }
    bool shardsParameters() const { return stage_ >= 3; }
    // What this replica owns under ZeRO 1-3 (the optimizer's share too); one part owning
    // everything without ZeRO or data parallelism.
    const ShardLayout& layout() const { return layout_; }
    // The stored buffers (whole, or this replica's shards one after another, padded), and where
    // the stored value of flat offset `offset` is.
    kernels::Ptr parameters() const { return params_.ptr(); }
    kernels::Ptr gradients() const { return grads_.ptr(); }
    kernels::Ptr parameterAt(std::size_t offset) const;
    kernels::Ptr gradientAt(std::size_t offset) const;

    // Stores the parameters this replica keeps from the whole flat buffer (host memory, fp32),
    // in the store's type.
    void setParameters(const float* whole);
    // The same from host values of exactly what this replica stores (its shards, or the whole).
    void setStoredParameters(const float* stored);
    // Host fp32 values of the flat range [offset, offset + n), which this replica stores whole.
    void storeParameters(std::size_t offset, const float* values, std::size_t n);
    void zeroGradients();
    void setCommunicationSink(CommunicationSink* sink) { comms_ = sink; }

    // The parameters of the unit [offset, offset + n): in the stored buffer, or under ZeRO-3 in
    // `holder`, all-gathered now or by the prefetch of exactly this unit.
    kernels::Ptr parametersOf(std::size_t offset, std::size_t n, Buffer& holder) const;
    void prefetch(std::size_t offset, std::size_t n) const;
    // Where one microbatch's gradient of the unit [offset, offset + n) accumulates: the stored
    // buffer, or under ZeRO-2/3 a zeroed `holder` (padded), which gradientsDone reduce-scatters
    // into the shards.
    kernels::Ptr gradientsFor(std::size_t offset, std::size_t n, Buffer& holder) const;
    void gradientsDone(std::size_t offset, std::size_t n, Buffer& holder) const;

private:
    // into: the unit's padded size; the unit's values are its first elements.
    Request startGather(const ShardLayout::Unit& unit, kernels::Ptr into) const;
    std::size_t storedParameters() const { return shardsParameters() ? layout_.stored() : count_; }
    std::size_t storedGradients() const { return shardsGradients() ? layout_.stored() : count_; }

    std::size_t count_;
    int stage_;
    Communicator* group_;
    kernels::Ops& ops_;
    DeviceAllocator& memory_;
    ShardLayout layout_;
    Buffer params_, grads_;
    CommunicationSink* comms_ = nullptr;
    struct Prefetch { // a ZeRO-3 gather started ahead of its use
        std::size_t offset = 0, count = 0;
        Buffer buffer;
        Request request; // after buffer: waited for before the buffer goes
    };
    mutable Prefetch prefetched_;
};

} // namespace shardscope
