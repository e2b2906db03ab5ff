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

Buffer SequenceParallel::gather(kernels::ConstPtr mine) const {
    Buffer whole = memory_.tensor(MemoryCategory::Workspace,
                                  tokenElements() * std::size_t(tp_.size()), mine.type);
    tp_.allGather(mine, whole.ptr(), tokenElements());
    return whole;
}

kernels::ConstPtr SequenceParallel::whole(kernels::ConstPtr mine, Buffer& holder) const {
    if (!on_)
        return mine;
    holder = gather(mine);
    return holder.ptr();
}

kernels::ConstPtr SequenceParallel::reduce(Buffer& partial, Buffer& shard) const {
    if (!on_) {
        if (tp_.size() > 1)
            tp_.allReduceSum(partial.ptr(), tokenElements());
        return partial.ptr();
    }
    if (!shard)
        shard = memory_.tensor(MemoryCategory::Workspace, tokenElements(), partial.type());
    tp_.reduceScatterSum(partial.ptr(), shard.ptr(), tokenElements());
    return shard.ptr();
}

void SequenceParallel::layerNormBackward(kernels::Ptr dinp, kernels::Ptr dweight,
                                         kernels::ConstPtr dout, kernels::ConstPtr inp,
                                         kernels::ConstPtr weight, const float* mean,
                                         const float* rstd) const {
    const int N = tokenRows(), C = channels_;
    const kernels::Ptr dbias = dweight + std::size_t(C);
    if (!on_) {
        ops_.layerNormBackwardAccumulate(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
        return;
    }
    Buffer partial = memory_.floats(MemoryCategory::Workspace, 2 * std::size_t(C));
    ops_.zero(partial.f(), 2 * std::size_t(C));
    ops_.layerNormBackwardAccumulate(dinp, partial.f(), partial.f() + C, dout, inp, weight, mean,
                                     rstd, N, C);
    tp_.allReduceSum(partial.f(), 2 * std::size_t(C));
    ops_.addInPlace(dweight, partial.f(), 2 * std::size_t(C));
}

void SequenceParallel::rmsNormBackward(kernels::Ptr dinp, kernels::Ptr dweight,
                                       kernels::ConstPtr dout, kernels::ConstPtr inp,
                                       kernels::ConstPtr weight, const float* rstd) const {
    const int N = tokenRows(), C = channels_;
    if (!on_) {
        ops_.rmsNormBackwardAccumulate(dinp, dweight, dout, inp, weight, rstd, N, C);
        return;
    }
    Buffer partial = memory_.floats(MemoryCategory::Workspace, std::size_t(C));
    ops_.zero(partial.f(), std::size_t(C));
    ops_.rmsNormBackwardAccumulate(dinp, partial.f(), dout, inp, weight, rstd, N, C);
    tp_.allReduceSum(partial.f(), std::size_t(C));
    ops_.addInPlace(dweight, partial.f(), std::size_t(C));
}

} // namespace shardscope
