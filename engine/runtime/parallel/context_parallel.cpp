#include "context_parallel.h"

#include "core/error.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace shardscope {

std::vector<int> contextPositions(int seqLen, int cp, int rank) {
    if (cp < 1 || seqLen % (2 * cp) != 0)
        throw InputError(
            "context parallelism cuts each sequence into 2 x cp = " + std::to_string(2 * cp) +
            " equal chunks (two per rank, for causal load "
            "balancing), so 2 x cp must divide seq_len " +
            std::to_string(seqLen) + ": choose a cp or a seq_len that divides");
    const int chunk = seqLen / (2 * cp);
    std::vector<int> positions;
    for (const int c : {rank, 2 * cp - 1 - rank})
        for (int t = 0; t < chunk; ++t)
            positions.push_back(c * chunk + t);
    return positions;
}

ContextParallelGroup::ContextParallelGroup(ContextParallel cp, int seqLen, kernels::Ops& ops,
                                           DeviceAllocator& memory)
    : cp_(cp), seqLen_(seqLen), ops_(ops), memory_(memory) {
    if (cp_.size < 1 || cp_.rank < 0 || cp_.rank >= cp_.size || (cp_.size > 1 && !cp_.group))
        throw std::logic_error("context parallelism needs its group and a rank within it");
    if (!on())
        return;
    for (int r = 0; r < cp_.size; ++r) {
        positions_.push_back(contextPositions(seqLen, cp_.size, r));
        const std::vector<int>& p = positions_.back();
        Buffer onDevice = memory_.allocate(MemoryCategory::Workspace, p.size() * sizeof(int));
        ops_.copyToDevice(onDevice.as<std::int32_t>(), p.data(), p.size() * sizeof(int));
        positionsOnDevice_.push_back(std::move(onDevice));
    }
}

// A rank's positions are two runs of consecutive ones: each sequence's rows move as two blocks,
// f(row in whole, row in mine, rows) for each.
template <typename F> void ContextParallelGroup::forEachRun(int B, F f) const {
    const std::size_t chunk = std::size_t(localSeqLen() / 2);
    const std::vector<int>& p = positions();
    for (int b = 0; b < B; ++b)
        for (std::size_t half = 0; half < 2; ++half)
            f(std::size_t(b) * std::size_t(seqLen_) + std::size_t(p[half * chunk]),
              std::size_t(b) * std::size_t(localSeqLen()) + half * chunk, chunk);
}

void ContextParallelGroup::selectTokens(const std::int32_t* whole, int B,
                                        std::int32_t* mine) const {
    forEachRun(B, [&](std::size_t from, std::size_t to, std::size_t n) {
        std::copy(whole + from, whole + from + n, mine + to);
    });
}

std::vector<float> ContextParallelGroup::selectRows(const std::vector<float>& perPosition,
                                                    int width) const {
    const std::size_t w = std::size_t(width);
    std::vector<float> mine(std::size_t(localSeqLen()) * w);
    forEachRun(1, [&](std::size_t from, std::size_t to, std::size_t n) {
        std::copy(perPosition.begin() + std::ptrdiff_t(from * w),
                  perPosition.begin() + std::ptrdiff_t((from + n) * w),
                  mine.begin() + std::ptrdiff_t(to * w));
    });
    return mine;
}

void ContextParallelGroup::gatherRows(kernels::Ptr mine, kernels::ConstPtr whole, int B,
                                      int C) const {
    const std::size_t w = std::size_t(C);
    forEachRun(B, [&](std::size_t from, std::size_t to, std::size_t n) {
        ops_.copy(mine + to * w, whole + from * w, n * w);
    });
}

void ContextParallelGroup::scatterRows(kernels::Ptr whole, kernels::ConstPtr mine, int B,
                                       int C) const {
    const std::size_t w = std::size_t(C);
    ops_.zero(whole, std::size_t(B) * std::size_t(seqLen_) * w);
    forEachRun(B, [&](std::size_t from, std::size_t to, std::size_t n) {
        ops_.copy(whole + from * w, mine + to * w, n * w);
    });
}

void ContextParallelGroup::post(RingTransfer& t, kernels::ConstPtr send, kernels::Ptr receive,
                                std::size_t n) const {
    t.span.collective = "send_recv";
    t.span.axis = "cp";
    t.span.peer = next();
    t.span.bytes = n * kernels::sizeOf(send.type);
    t.span.start = comms_ ? comms_->now() : 0.0;
    t.requests.push_back(cp_.group->send(send, n, next()));
    t.requests.push_back(cp_.group->receive(receive, n, previous()));
}

void ContextParallelGroup::finish(RingTransfer& t) const {
    t.span.waited = true;
    t.span.waitStart = comms_ ? comms_->now() : 0.0;
    waitAll(t.requests);
    if (comms_) {
        t.span.end = comms_->now();
        comms_->communication(t.span);
    }
}

Buffer ContextParallelGroup::packKeysAndValues(kernels::ConstPtr qkv, int stride, int B, int NH,
                                               int KV, int hd) const {
    const int rows = B * localSeqLen(), width = 2 * KV * hd;
    Buffer kv =
        memory_.tensor(MemoryCategory::Workspace, std::size_t(rows) * std::size_t(width), qkv.type);
    ops_.copyRows(kv.ptr(), width, qkv + std::size_t(NH * hd), stride, rows, width);
    return kv;
}

void ContextParallelGroup::attentionForward(kernels::Ptr out, float* lse, kernels::ConstPtr qkv,
                                            int stride, int B, int NH, int KV, int hd) const {
    const int T = localSeqLen(), width = 2 * KV * hd;
    const std::size_t rows = std::size_t(B) * std::size_t(T), stats = rows * std::size_t(NH);
    Buffer acc = memory_.floats(MemoryCategory::Workspace, rows * std::size_t(NH * hd));
    Buffer rowMax = memory_.floats(MemoryCategory::Workspace, stats);
    Buffer rowSum = memory_.floats(MemoryCategory::Workspace, stats);
    ops_.zero(acc.f(), rows * std::size_t(NH * hd));
    ops_.zero(rowSum.f(), stats);
    // -infinity in every running maximum, copied from a host row kept for the next layer.
    if (lowest_.size() < stats)
        lowest_.assign(stats, -std::numeric_limits<float>::infinity());
    ops_.copyToDevice(rowMax.f(), lowest_.data(), stats * sizeof(float));

    Buffer visiting = packKeysAndValues(qkv, stride, B, NH, KV, hd);
    for (int step = 0; step < cp_.size; ++step) {
        const int owner = (cp_.rank - step + cp_.size) % cp_.size; // whose keys are here
        RingTransfer transfer;
        Buffer arriving;
        if (step + 1 < cp_.size) { // the next block travels while this one is computed
            arriving = memory_.tensor(MemoryCategory::Workspace, rows * std::size_t(width),
                                      visiting.type());
            post(transfer, visiting.ptr(), arriving.ptr(), rows * std::size_t(width));
        }
        ops_.attentionBlockForward(acc.f(), rowMax.f(), rowSum.f(), qkv, stride, visiting.ptr(),
                                   visiting.ptr() + std::size_t(KV * hd), width,
                                   devicePositions(cp_.rank), devicePositions(owner), B, T, T, NH,
                                   KV, hd);
        if (arriving) {
            finish(transfer);
            visiting = std::move(arriving);
        }
    }
    ops_.attentionBlockFinish(out, lse, acc.f(), rowMax.f(), rowSum.f(), B, T, NH, hd);
}

void ContextParallelGroup::attentionBackward(kernels::Ptr dqkv, kernels::ConstPtr dout,
                                             kernels::ConstPtr out, const float* lse,
                                             kernels::ConstPtr qkv, int stride, int B, int NH,
                                             int KV, int hd) const {
    const int T = localSeqLen(), width = 2 * KV * hd;
    const std::size_t rows = std::size_t(B) * std::size_t(T), stats = rows * std::size_t(NH);
    Buffer delta = memory_.floats(MemoryCategory::Workspace, stats);
    ops_.attentionBlockDelta(delta.f(), dout, out, B, T, NH, hd);
    Buffer dq = memory_.floats(MemoryCategory::Workspace, rows * std::size_t(NH * hd));
    ops_.zero(dq.f(), rows * std::size_t(NH * hd));

    // The visiting keys and values travel as in the forward. The gradient of each block's keys
    // and values follows it one step behind: this rank computes its queries' part for the block
    // while the part the previous ranks gathered arrives, adds it, and sends the sum on; after a
    // full turn each rank receives its own keys' gradient, summed over every rank's queries.
    const std::size_t kvElements = rows * std::size_t(width);
    Buffer visiting = packKeysAndValues(qkv, stride, B, NH, KV, hd);
    RingTransfer gradient;
    Buffer gathered; // arriving: the visiting block's gradient from the ranks before this one
    Buffer sending;  // in flight to the next rank until the next step's finish(gradient)
    for (int step = 0; step < cp_.size; ++step) {
        const int owner = (cp_.rank - step + cp_.size) % cp_.size;
        RingTransfer keys;
        Buffer arriving;
        if (step + 1 < cp_.size) {
            arriving = memory_.tensor(MemoryCategory::Workspace, kvElements, visiting.type());
            post(keys, visiting.ptr(), arriving.ptr(), kvElements);
        }
        Buffer mine = memory_.floats(MemoryCategory::Workspace, kvElements);
        ops_.zero(mine.f(), kvElements);
        ops_.attentionBlockBackward(
            dq.f(), mine.f(), mine.f() + std::size_t(KV * hd), width, dout, lse, delta.f(), qkv,
            stride, visiting.ptr(), visiting.ptr() + std::size_t(KV * hd), width,
            devicePositions(cp_.rank), devicePositions(owner), B, T, T, NH, KV, hd);
        if (gathered) {
            finish(gradient);
            ops_.addInPlace(mine.f(), gathered.f(), kvElements);
        }
        gradient = RingTransfer{};
        gathered = memory_.floats(MemoryCategory::Workspace, kvElements);
        post(gradient, mine.f(), gathered.f(), kvElements);
        sending = std::move(mine);
        if (arriving) {
            finish(keys);
            visiting = std::move(arriving);
        }
    }
    finish(gradient); // this rank's own keys and values, with every rank's part
    ops_.copyRows(dqkv, stride, dq.f(), NH * hd, int(rows), NH * hd);
    ops_.copyRows(dqkv + std::size_t(NH * hd), stride, gathered.f(), width, int(rows), width);
}

} // namespace shardscope
