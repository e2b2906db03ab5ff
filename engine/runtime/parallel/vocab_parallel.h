// Megatron-LM's vocabulary-parallel embedding and cross-entropy: rank r of t holds rows
// [r V/t, (r+1) V/t) of the token embedding and of the LM head (one tensor when tied), so neither
// the table nor the [N, V] logits are ever whole on one rank. The embedding of a token comes from
// the one rank that holds its row and is summed over the group; the loss needs from the other
// ranks only each row's maximum logit, sum of exponentials and target logit.
#pragma once

#include "kernels/ops.h"
#include "runtime/device_memory.h"
#include "tensor_parallel.h"

#include <cstdint>

namespace shardscope {

class VocabParallel {
public:
    // Throws InputError when the group does not divide the vocabulary.
    VocabParallel(const TensorParallelGroup& tp, int vocab, kernels::Ops& ops,
                  DeviceAllocator& memory);

    int start() const { return start_; } // this rank's first vocabulary row
    int count() const { return count_; } // and how many it holds

    // out[B*T, C] = wte[token] + wpe[t] with one rank; with a group, the rows of the tokens this
    // rank holds (zero for the others), and the positions on one rank: a partial sum, which the
    // caller sums over the group (SequenceParallel::reduce).
    void embeddingForward(kernels::Ptr out, const std::int32_t* tokens, kernels::ConstPtr wte,
                          kernels::ConstPtr wpe, int B, int T, int C) const;
    // dwte (this rank's rows) += dout of the tokens it holds; dwpe += dout. dout is whole.
    void embeddingBackward(kernels::Ptr dwte, kernels::Ptr dwpe, kernels::ConstPtr dout,
                           const std::int32_t* tokens, int B, int T, int C) const;
    // The summed token losses of logits[N, this rank's vocabulary] are added to lossSum[0] (a
    // device double), and the logits become dloss/dlogits * gradScale in place.
    void crossEntropy(float* logits, const std::int32_t* targets, int N, float gradScale,
                      double* lossSum) const;

private:
    const TensorParallelGroup& tp_;
    int start_, count_;
    kernels::Ops& ops_;
    DeviceAllocator& memory_;
};

} // namespace shardscope
