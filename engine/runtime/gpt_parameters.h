// A GPT-2 decoder's shape and parameters: which tensors a pipeline rank's chunks hold, where each
// lies in the flat parameter buffer, how tensor parallelism cuts it, and GPT-2's initial values.
#pragma once

#include "core/model_spec.h"
#include "parallel/pipeline_chunks.h"
#include "parallel/tensor_parallel.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shardscope {

// The sizes the kernels need. Throws InputError listing everything in the ModelSpec that is not
// a GPT-2 architecture (gated MLP, RMSNorm, rotary positions, GQA, MoE, dropout, missing biases,
// seq_len > max_positions, hidden not divisible by heads).
struct GptShape {
    int layers = 0, channels = 0, heads = 0, ffn = 0, vocab = 0, maxPositions = 0, seqLen = 0;
    bool tied = true;
    static GptShape of(const ModelSpec& model);
};

struct ParameterTensor {
    std::string name;       // "h.3.attn.qkv.weight"
    std::size_t offset = 0; // in floats, into the flat parameter buffer
    std::size_t count = 0;
    std::vector<int> shape;
    bool decay = false; // matrices and embeddings decay; norms and biases do not
    TpSplit split = TpSplit::None;
};

// A layer's tensors, in flat-buffer order.
inline constexpr int kTensorsPerLayer = 12;
enum LayerTensor { Ln1W, Ln1B, QkvW, QkvB, ProjW, ProjB, Ln2W, Ln2B, FcW, FcB, FcProjW, FcProjB };

struct TensorTable {
    static constexpr std::size_t npos = std::size_t(-1);
    std::vector<ParameterTensor> tensors;
    std::size_t count = 0;                // floats in all
    std::vector<std::size_t> layerTensor; // per model layer: its first tensor, or npos
    std::size_t wte = npos, wpe = npos, lnfWeight = npos, lnfBias = npos, lmHead = npos;
};

// The tensors of `chunks`, tensor-parallel rank shares of tp ranks, chunk by chunk in model order:
// the embeddings, the layers, the final norm and the head. For the whole model this is GPT-2's
// order, so checkpoints of one process keep their layout.
TensorTable tensorTable(const GptShape& shape, const std::vector<ModelChunk>& chunks, int tp);

// GPT-2's initialisation, deterministic for a seed: N(0, 0.02) weights, residual output
// projections N(0, 0.02 / sqrt(2 L)), zero biases, unit norm weights. The whole model's values
// are drawn in its own order and the share `table` describes (tensor-parallel rank tpRank of
// tp) is kept, so any layout starts from the weights of a single process.
std::vector<float> initialParameters(const GptShape& shape, const TensorTable& table,
                                     std::uint64_t seed, int tp, int tpRank);

} // namespace shardscope
