// Token and position embeddings on the GPU, with the contracts of kernels::Ops, for a whole token
// table (vocabStart 0, vocabCount V) or a tensor-parallel rank's rows of it (Megatron-LM's
// vocabulary-parallel embedding). tokens is a device array of B x T ids.
#pragma once

#include "ops.h"

#include <cstdint>

namespace shardscope::cuda {

// out[N,C] = wte row of the token where this rank holds it (else 0) + wpe[t] (when wpe is given).
void embeddingForward(kernels::Ptr out, const std::int32_t* tokens, kernels::ConstPtr wte,
                      int vocabStart, int vocabCount, kernels::ConstPtr wpe, int B, int T, int C,
                      void* stream);
// dwte (the rows held) += dout of their tokens, one rounding per added row as the CPU backend
// does; dwpe (when given) += dout summed over the batch. Rows are added in order, one thread per
// channel, so the same inputs give the same bits.
void embeddingBackwardAccumulate(kernels::Ptr dwte, int vocabStart, int vocabCount,
                                 kernels::Ptr dwpe, kernels::ConstPtr dout,
                                 const std::int32_t* tokens, int B, int T, int C, void* stream);

} // namespace shardscope::cuda
