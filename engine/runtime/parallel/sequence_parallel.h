// Where a tensor-parallel block meets the residual stream, with or without sequence parallelism
// (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
// section 4.2.2).
//
// Without it the stream is whole on every rank: a column-parallel layer reads it as it is, and a
// row-parallel layer's partial output is all-reduced (Megatron-LM's f and g). With it, the stream,
// the norms and their inputs are cut over the group by token: rank r holds rows [r N/t,
// (r+1) N/t) of the microbatch's N token rows (Megatron-LM cuts [T, B] by sequence; per-token
// operations do not care which tokens a rank holds). A block's input is then all-gathered and its
// output reduce-scattered: the same bytes as one all-reduce, and every per-token activation
// outside the blocks is 1/t the size. The backward runs the conjugates: the gradient at a
// row-parallel output is gathered, the one at a column-parallel input reduced.
#pragma once

#include "kernels/ops.h"
#include "runtime/device_memory.h"
#include "tensor_parallel.h"

#include <cstddef>

namespace shardscope {

class SequenceParallel {
public:
    // rows: the microbatch's token rows (micro_batch x seq_len); channels: the stream's width.
    // on: sequence parallelism asked for; it is on only with more than one tensor-parallel rank.
    // Throws InputError when it is on and the group does not divide the rows.
    SequenceParallel(const TensorParallelGroup& tp, bool on, int rows, int channels,
                     kernels::Ops& ops, DeviceAllocator& memory);

    bool on() const { return on_; }
    // The rows of the residual stream this rank holds: all, or its share of the tokens.
    int tokenRows() const { return on_ ? rows_ / tp_.size() : rows_; }
    std::size_t tokenElements() const { return std::size_t(tokenRows()) * std::size_t(channels_); }

    // The whole [rows, C] from every rank's token rows (only when on): a column-parallel
    // layer's input, the gradient at a row-parallel layer's output.
    Buffer gather(kernels::ConstPtr mine) const;
    // The whole stream as a column-parallel layer reads it: `mine` itself, or gathered into
    // `holder`.
    kernels::ConstPtr whole(kernels::ConstPtr mine, Buffer& holder) const;
    // A partial [rows, C] (a row-parallel layer's output, a column-parallel layer's input
    // gradient) summed over the group: in place, or reduce-scattered to this rank's token rows
    // in `shard` (allocated when empty).
    kernels::ConstPtr reduce(Buffer& partial, Buffer& shard) const;
    // A layer norm's backward over this rank's token rows: dinp +=, and dweight[0, C) (weight)
    // and dweight[C, 2C) (bias) +=. When on, each rank's tokens give a partial weight gradient
    // of the norm every rank holds whole, summed over the group before it accumulates.
    void layerNormBackward(kernels::Ptr dinp, kernels::Ptr dweight, kernels::ConstPtr dout,
                           kernels::ConstPtr inp, kernels::ConstPtr weight, const float* mean,
                           const float* rstd) const;
    // The same for an RMSNorm (a weight, no bias).
    void rmsNormBackward(kernels::Ptr dinp, kernels::Ptr dweight, kernels::ConstPtr dout,
                         kernels::ConstPtr inp, kernels::ConstPtr weight, const float* rstd) const;

private:
    const TensorParallelGroup& tp_;
    bool on_;
    int rows_, channels_;
    kernels::Ops& ops_;
    DeviceAllocator& memory_;
};

} // namespace shardscope
