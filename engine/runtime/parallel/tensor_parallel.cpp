#include "tensor_parallel.h"

#include <algorithm>
#include <stdexcept>

namespace shardscope {

void copyTensorParallelShare(float* dst, const float* src, const std::vector<int>& dims,
                             TpSplit split, int t, int r, const std::vector<int>& rowBlocks) {
    const std::size_t rows = std::size_t(dims[0]);
    const std::size_t cols = dims.size() > 1 ? std::size_t(dims[1]) : 1;
    switch (split) {
    case TpSplit::None:
        std::copy(src, src + rows * cols, dst);
        return;
    case TpSplit::Rows: {
        const std::size_t share = rows / std::size_t(t) * cols;
        std::copy(src + std::size_t(r) * share, src + std::size_t(r + 1) * share, dst);
        return;
    }
    case TpSplit::Columns: {
        const std::size_t share = cols / std::size_t(t);
        for (std::size_t i = 0; i < rows; ++i, dst += share)
            std::copy(src + i * cols + std::size_t(r) * share,
                      src + i * cols + std::size_t(r + 1) * share, dst);
        return;
    }
    case TpSplit::BlockRows: // this rank's rows of each block in turn
        for (const int block : rowBlocks) {
            const std::size_t share = std::size_t(block / t) * cols;
            std::copy(src + std::size_t(r) * share, src + std::size_t(r + 1) * share, dst);
            src += std::size_t(block) * cols;
            dst += share;
        }
        return;
    }
}

TensorParallelGroup::TensorParallelGroup(TensorParallel tp) : tp_(tp) {
    if (tp_.size < 1 || tp_.rank < 0 || tp_.rank >= tp_.size || (tp_.size > 1 && !tp_.group))
        throw std::logic_error("tensor parallelism needs its group and a rank within it");
}

void TensorParallelGroup::run(const char* collective, std::size_t bytes, Request request) const {
    CommunicationSpan span;
    span.collective = collective;
    span.axis = "tp";
    span.bytes = bytes;
    span.waited = true;
    span.start = span.waitStart = comms_ ? comms_->now() : 0.0;
    request.wait();
    if (comms_) {
        span.end = comms_->now();
        comms_->communication(span);
    }
}

void TensorParallelGroup::allReduceSum(kernels::Ptr x, std::size_t n) const {
    if (tp_.size > 1)
        run("all_reduce", n * kernels::sizeOf(x.type), tp_.group->allReduceSum(x, n));
}

void TensorParallelGroup::allReduceMax(float* x, std::size_t n) const {
    if (tp_.size > 1)
        run("all_reduce", n * sizeof(float), tp_.group->allReduceMax(x, n));
}

void TensorParallelGroup::allGather(kernels::ConstPtr mine, kernels::Ptr all, std::size_t n) const {
    if (tp_.size == 1)
        throw std::logic_error("an all-gather needs a tensor-parallel group");
    run("all_gather", n * kernels::sizeOf(mine.type), tp_.group->allGather(mine, all, n));
}

void TensorParallelGroup::reduceScatterSum(kernels::ConstPtr all, kernels::Ptr mine,
                                           std::size_t n) const {
    if (tp_.size == 1)
        throw std::logic_error("a reduce-scatter needs a tensor-parallel group");
    run("reduce_scatter", n * std::size_t(tp_.size) * kernels::sizeOf(all.type),
        tp_.group->reduceScatterSum(all, mine, n));
}

} // namespace shardscope
