// How model FLOPs are counted for MFU and model FLOP/s: papers differ, so the planner states the
// one it uses and lets the user pick. The counts themselves are conventionFlopsPerToken
// (compute.h).
#pragma once

#include <string>

namespace shardscope {

enum class FlopsConvention {
    Causal,   // the planner's own: 6 x matmul parameters + 6 L s q (the causal half of attention)
    Palm,     // Chowdhery et al. 2022, Appendix B: 6N + 12 L H Q T per token (the full square)
    Megatron, // Narayanan et al. 2021: 96 B s l h^2 (1 + s/6h + V/16lh) per step (recompute
              // included)
    SixN,     // 6N per token, N every parameter
};

std::string toString(FlopsConvention c); // "causal", "palm", "megatron", "6n"
// By its key, any case; InputError lists the keys.
FlopsConvention flopsConventionFromString(const std::string& s);
std::string flopsConventionNames(); // "causal, palm, megatron, 6n"

} // namespace shardscope
