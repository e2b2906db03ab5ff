#include "vocab_parallel.h"

#include "core/error.h"

#include <string>

namespace shardscope {

VocabParallel::VocabParallel(const TensorParallelGroup& tp, int vocab, kernels::Ops& ops,
                             DeviceAllocator& memory)
    : tp_(tp), start_(tp.rank() * tp.share(vocab)), count_(tp.share(vocab)), ops_(ops),
      memory_(memory) {
    if (vocab % tp.size())
        throw InputError("tp " + std::to_string(tp.size()) + " must divide the vocabulary (" +
                         std::to_string(vocab) +
                         "): each rank holds an equal share of it; pad the vocabulary or choose "
                         "another tp");
}

void VocabParallel::embeddingForward(kernels::Ptr out, const std::int32_t* tokens,
                                     kernels::ConstPtr wte, kernels::ConstPtr wpe, int B, int T,
                                     int C) const {
    if (tp_.size() == 1)
        ops_.embeddingForward(out, tokens, wte, wpe, B, T, C);
    else
        ops_.embeddingShardForward(out, tokens, wte, start_, count_,
                                   tp_.addsReplicatedTerms() ? wpe : nullptr, B, T, C);
}

void VocabParallel::embeddingBackward(kernels::Ptr dwte, kernels::Ptr dwpe, kernels::ConstPtr dout,
                                      const std::int32_t* tokens, int B, int T, int C) const {
    if (tp_.size() == 1)
        ops_.embeddingBackwardAccumulate(dwte, dwpe, dout, tokens, B, T, C);
    else
        ops_.embeddingShardBackwardAccumulate(dwte, start_, count_, dwpe, dout, tokens, B, T, C);
}

void VocabParallel::crossEntropy(float* logits, const std::int32_t* targets, int N, float gradScale,
                                 double* lossSum) const {
    if (tp_.size() == 1) {
        ops_.crossEntropyForwardBackward(logits, targets, N, count_, gradScale, lossSum);
        return;
    }
    const std::size_t n = std::size_t(N);
    Buffer max = memory_.floats(MemoryCategory::Workspace, n);
    Buffer sums = memory_.floats(MemoryCategory::Workspace, 2 * n); // sumExp, then targetLogit
    ops_.rowMax(logits, N, count_, max.f());
    tp_.allReduceMax(max.f(), n);
    ops_.softmaxShardSums(logits, max.f(), targets, N, count_, start_, sums.f(), sums.f() + n);
    tp_.allReduceSum(sums.f(), 2 * n);
    ops_.crossEntropyShardLoss(max.f(), sums.f(), sums.f() + n, N, lossSum);
    ops_.crossEntropyShardBackward(logits, max.f(), sums.f(), targets, N, count_, start_,
                                   gradScale);
}

} // namespace shardscope
