// Context parallelism (Megatron-LM's --context-parallel-size; ring attention, Liu et al. 2023):
// each rank of the cp group holds a slice of every sequence, and attention is the only place the
// slices meet. A rank's queries meet every rank's keys and values as these pass around the ring
// (non-blocking send and receive to the neighbours, posted before the block's compute and waited
// for after it), merged with an online softmax; the backward passes the keys and values around
// again, each with the gradient it has gathered so far, which arrives back at its owner after a
// full turn. Causal load balancing as Megatron-LM and Llama 3 do it: a sequence is cut into 2 cp
// chunks, rank i holding chunks i and 2 cp - 1 - i, so every rank has as many query-key pairs
// under the mask. Everything per token (norms, projections, MLP, loss) runs on the rank's own
// rows unchanged; the cp ranks of a replica hold the same weights, so their gradients are summed
// with the data-parallel ones (the trainer's dp x cp group). Each ring step is reported to
// telemetry as a `cp` span.
#pragma once

#include "kernels/ops.h"
#include "runtime/communicator.h"
#include "runtime/device_memory.h"

#include <cstdint>
#include <vector>

namespace shardscope {

struct ContextParallel {
    int size = 1, rank = 0;
    Communicator* group = nullptr; // the cp group, when size > 1
};

// The positions in a sequence of seqLen tokens that rank `rank` of cp holds, in order: chunks
// rank and 2 cp - 1 - rank of 2 cp equal chunks. Throws InputError when 2 cp does not divide
// seqLen.
std::vector<int> contextPositions(int seqLen, int cp, int rank);

class ContextParallelGroup {
public:
    // Throws InputError when 2 cp does not divide seqLen, std::logic_error when cp > 1 without a
    // group or with a rank outside it.
    ContextParallelGroup(ContextParallel cp, int seqLen, kernels::Ops& ops,
                         DeviceAllocator& memory);

    bool on() const { return cp_.size > 1; }
    int size() const { return cp_.size; }
    int rank() const { return cp_.rank; }
    int localSeqLen() const { return seqLen_ / cp_.size; }
    const std::vector<int>& positions() const { return positions_[std::size_t(cp_.rank)]; }
    void setCommunicationSink(CommunicationSink* sink) { comms_ = sink; }

    // This rank's tokens of each of B whole sequences (host arrays): mine[B, localSeqLen].
    void selectTokens(const std::int32_t* whole, int B, std::int32_t* mine) const;
    // This rank's rows of a host table with `width` values per position of one sequence
    // ([seqLen, width], the rotary angles): [localSeqLen, width].
    std::vector<float> selectRows(const std::vector<float>& perPosition, int width) const;
    // This rank's rows of each sequence of whole[B seqLen, C] into mine[B localSeqLen, C], and
    // back: whole gets mine's rows where they belong and zeros elsewhere.
    void gatherRows(kernels::Ptr mine, kernels::ConstPtr whole, int B, int C) const;
    void scatterRows(kernels::Ptr whole, kernels::ConstPtr mine, int B, int C) const;

    // Causal attention of this rank's rows over the whole sequences. qkv: [B localSeqLen] rows
    // `stride` apart, each NH query heads, then KV key heads and KV value heads, of hd (keys
    // already rotated where the model rotates them). out [B localSeqLen, NH hd]; lse [B, NH,
    // localSeqLen] (fp32) is kept for the backward.
    void attentionForward(kernels::Ptr out, float* lse, kernels::ConstPtr qkv, int stride, int B,
                          int NH, int KV, int hd) const;
    // dqkv (same rows) = the gradient at qkv from the one at out (overwrites).
    void attentionBackward(kernels::Ptr dqkv, kernels::ConstPtr dout, kernels::ConstPtr out,
                           const float* lse, kernels::ConstPtr qkv, int stride, int B, int NH,
                           int KV, int hd) const;

private:
    // Posts this rank's `send` to the next rank and a receive of the previous rank's into
    // `receive`; the span is reported when finish() has waited for both.
    struct RingTransfer {
        std::vector<Request> requests;
        CommunicationSpan span;
    };
    void post(RingTransfer& t, kernels::ConstPtr send, kernels::Ptr receive, std::size_t n) const;
    void finish(RingTransfer& t) const;
    // f(first row in the whole sequences, first row in this rank's, rows) for each of the two
    // runs of consecutive positions this rank holds in each of B sequences.
    template <typename F> void forEachRun(int B, F f) const;
    // This rank's key and value heads of qkv, packed: [B localSeqLen, 2 KV hd].
    Buffer packKeysAndValues(kernels::ConstPtr qkv, int stride, int B, int NH, int KV,
                             int hd) const;
    const std::int32_t* devicePositions(int rank) const {
        return positionsOnDevice_[std::size_t(rank)].as<std::int32_t>();
    }
    int next() const { return (cp_.rank + 1) % cp_.size; }
    int previous() const { return (cp_.rank + cp_.size - 1) % cp_.size; }

    ContextParallel cp_;
    int seqLen_;
    kernels::Ops& ops_;
    DeviceAllocator& memory_;
    CommunicationSink* comms_ = nullptr;
    std::vector<std::vector<int>> positions_; // per cp rank
    std::vector<Buffer> positionsOnDevice_;   // per cp rank, int32
    mutable std::vector<float> lowest_;       // -infinity: where each running maximum starts
};

} // namespace shardscope
