// Megatron-LM tensor parallelism (Shoeybi et al. 2019): each rank of the tp group holds a share
// of every layer's heads, MLP columns and vocabulary. Column-parallel layers (QKV, MLP up, the LM
// head) hold rows of the weight and produce a slice of the output features; row-parallel layers
// (the attention and MLP output projections) hold columns and produce a partial sum, added up
// over the group once per block. This file has how tensors are cut and the group's collectives,
// each reported to telemetry as a `tp` span; sequence_parallel.h has where the collectives sit
// at a block's edges, vocab_parallel.h the embedding and the loss.
#pragma once

#include "runtime/communicator.h"

#include <cstddef>
#include <vector>

namespace shardscope {

struct TensorParallel {
    int size = 1, rank = 0;
    Communicator* group = nullptr; // the tp group, when size > 1
    bool sequenceParallel = false;
};

// How a tensor is cut across tensor-parallel ranks, from the whole model's tensor.
enum class TpSplit {
    None,    // replicated: norms, position embedding, row-parallel biases
    Rows,    // rank r holds rows [r R/t, (r+1) R/t): column-parallel weights and biases, vocab
    Columns, // rank r holds columns [r K/t, (r+1) K/t) of every row: row-parallel weights
    // Rows of each block of a fused projection, Rows within each: q, k and v of the QKV
    // projection (with grouped-query attention k and v are shorter), gate and up of SwiGLU's.
    BlockRows,
};

// Copies rank r of t's share of a whole-model tensor of shape `dims` into dst. rowBlocks: the
// whole tensor's rows, block by block (BlockRows only).
void copyTensorParallelShare(float* dst, const float* src, const std::vector<int>& dims,
                             TpSplit split, int t, int r, const std::vector<int>& rowBlocks = {});

class TensorParallelGroup {
public:
    // Throws std::logic_error when tp.size > 1 without a group, or the rank is outside it.
    explicit TensorParallelGroup(TensorParallel tp);

    int size() const { return tp_.size; }
    int rank() const { return tp_.rank; }
    // This rank's share of `whole` features (heads, channels, MLP columns, vocabulary rows).
    int share(int whole) const { return whole / tp_.size; }
    // A row-parallel layer's bias is added by one rank, so the group's sum has it once.
    bool addsReplicatedTerms() const { return tp_.rank == 0; }
    void setCommunicationSink(CommunicationSink* sink) { comms_ = sink; }

    // Blocking collectives over the group, n floats per rank as the communicator's. With one
    // rank the reductions do nothing; a gather or scatter needs a group (std::logic_error).
    void allReduceSum(kernels::Ptr x, std::size_t n) const;
    void allReduceMax(float* x, std::size_t n) const;
    void allGather(kernels::ConstPtr mine, kernels::Ptr all, std::size_t n) const;
    void reduceScatterSum(kernels::ConstPtr all, kernels::Ptr mine, std::size_t n) const;

private:
    void run(const char* collective, std::size_t bytes, Request request) const;

    TensorParallel tp_;
    CommunicationSink* comms_ = nullptr;
};

} // namespace shardscope
