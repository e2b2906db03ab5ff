#include "sequence_parallel.h"

#include "core/error.h"

#include <string>

namespace shardscope {

SequenceParallel::SequenceParallel(const TensorParallelGroup& tp, bool on, int rows, int channels,
                                   kernels::Ops& ops, DeviceAllocator& memory)
    : tp_(tp), on_(on && tp.size() > 1), rows_(rows), channels_(channels), ops_(ops),
      memory_(memory) {
    if (on_ && rows_ % tp_.size())
        throw InputError("sequence parallelism splits the microbatch's " + std::to_string(rows_) +
                         " token rows (micro_batch x seq_len) over tp " +
                         std::to_string(tp_.size()) + ": they must divide evenly");
}

Buffer SequenceParallel::gather(const float* mine) const {
    Buffer whole =
        memory_.floats(MemoryCategory::Workspace, tokenElements() * std::size_t(tp_.size()));
    tp_.allGather(mine, whole.f(), tokenElements());
    return whole;
}

const float* SequenceParallel::whole(const float* mine, Buffer& holder) const {
    if (!on_)
        return mine;
    holder = gather(mine);
    return holder.f();
}

const float* SequenceParallel::reduce(Buffer& partial, Buffer& shard) const {
    if (!on_) {
        tp_.allReduceSum(partial.f(), tokenElements());
        return partial.f();
    }
    if (!shard)
        shard = memory_.floats(MemoryCategory::Workspace, tokenElements());
    tp_.reduceScatterSum(partial.f(), shard.f(), tokenElements());
    return shard.f();
}

void SequenceParallel::layerNormBackward(float* dinp, float* dweight, const float* dout,
                                         const float* inp, const float* weight, const float* mean,
                                         const float* rstd) const {
    const int N = tokenRows(), C = channels_;
    if (!on_) {
        ops_.layerNormBackwardAccumulate(dinp, dweight, dweight + C, dout, inp, weight, mean, rstd,
                                         N, C);
        return;
    }
    Buffer partial = memory_.floats(MemoryCategory::Workspace, 2 * std::size_t(C));
    ops_.zero(partial.f(), 2 * std::size_t(C));
    ops_.layerNormBackwardAccumulate(dinp, partial.f(), partial.f() + C, dout, inp, weight, mean,
                                     rstd, N, C);
    tp_.allReduceSum(partial.f(), 2 * std::size_t(C));
    ops_.addInPlace(dweight, partial.f(), 2 * std::size_t(C));
}

} // namespace shardscope
