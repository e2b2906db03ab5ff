// A decoder's shape and parameters: which tensors a pipeline rank's chunks hold, where each lies
// in the flat parameter buffer, how tensor parallelism cuts it, and the initial values. Two block
// families: GPT-2's, and the Llama family's (Llama, Mistral, Qwen without biases).
#pragma once

#include "core/model_spec.h"
#include "parallel/pipeline_chunks.h"
#include "parallel/tensor_parallel.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shardscope {

// GPT-2: learned positions, LayerNorm, GELU MLP, multi-head attention, biases everywhere.
// Llama: rotary positions, RMSNorm, SwiGLU MLP, grouped-query attention, no biases.
enum class BlockFamily { Gpt2, Llama };

// The sizes the kernels need. Throws InputError listing everything in the ModelSpec that is
// neither family (GELU with RMSNorm, MoE, latent attention, dropout, biases that do not match the
// family, seq_len > max_positions, hidden not divisible by heads, heads not by kv_heads, ...).
struct GptShape {
    BlockFamily family = BlockFamily::Gpt2;
    int layers = 0, channels = 0, heads = 0, kvHeads = 0, ffn = 0, vocab = 0, maxPositions = 0,
        seqLen = 0;
    bool tied = true;
    float normEps = 1e-5f;    // RMSNorm's (GPT-2's LayerNorm kernels use 1e-5)
    double ropeTheta = 10000; // Llama family
    RopeScaling ropeScaling;  // Llama family
    bool llama() const { return family == BlockFamily::Llama; }
    int headDim() const { return channels / heads; }
    // The fused QKV projection's row blocks in the whole model: q, k and v.
    std::vector<int> qkvBlocks() const {
        return {heads * headDim(), kvHeads * headDim(), kvHeads * headDim()};
    }
    static GptShape of(const ModelSpec& model);
};

// Why tp tensor-parallel ranks cannot cut this shape, with the rule, or "" when they can: each
// rank holds an equal share of the heads, MLP columns and vocabulary, and (Megatron-LM's rule
// for query groups) whole key and value heads with the query heads they serve.
std::string tensorParallelProblem(const GptShape& shape, int tp);

struct ParameterTensor {
    std::string name;       // "h.3.attn.qkv.weight"
    std::size_t offset = 0; // in floats, into the flat parameter buffer
    std::size_t count = 0;
    std::vector<int> shape;
    bool decay = false; // matrices and embeddings decay; norms and biases do not
    TpSplit split = TpSplit::None;
    std::vector<int> rowBlocks; // BlockRows: the whole tensor's rows, block by block
};

// The places a layer's tensors can take; a family holds some of them (layerTensors).
inline constexpr int kLayerSlots = 12;
enum LayerTensor { Ln1W, Ln1B, QkvW, QkvB, ProjW, ProjB, Ln2W, Ln2B, FcW, FcB, FcProjW, FcProjB };
// The tensors a layer of the family holds, in flat-buffer order: all twelve for GPT-2; the two
// norm weights and four matrices for the Llama family, whose FcW is SwiGLU's gate and up
// projections fused (gate rows first).
const std::vector<LayerTensor>& layerTensors(BlockFamily family);

struct TensorTable {
    static constexpr std::size_t npos = std::size_t(-1);
    std::vector<ParameterTensor> tensors;
    std::size_t count = 0;                // floats in all
    std::vector<std::size_t> layerTensor; // per model layer: its first tensor, or npos
    // npos for what the rank or the family does not hold (wpe and lnfBias in the Llama family).
    std::size_t wte = npos, wpe = npos, lnfWeight = npos, lnfBias = npos, lmHead = npos;
};

// The tensors of `chunks`, tensor-parallel rank shares of tp ranks, chunk by chunk in model order:
// the embeddings, the layers, the final norm and the head. For the whole model this is GPT-2's
// order, so checkpoints of one process keep their layout.
TensorTable tensorTable(const GptShape& shape, const std::vector<ModelChunk>& chunks, int tp);

// The n-th standard normal of the stream a seed gives, computed on its own (counter-based).
double normalAt(std::uint64_t seed, std::uint64_t n);

// GPT-2's initialisation (for both families), deterministic for a seed: N(0, 0.02) weights,
// residual output projections N(0, 0.02 / sqrt(2 L)), zero biases, unit norm weights. The whole
// model's weights take the normal stream's values in its own order, and any element of the share
// `table` describes (tensor-parallel rank tpRank of tp) is computed from its place in the whole
// model alone: every layout starts from the weights of a single process, and each rank computes
// only what it stores, range by range (never the whole model in host memory).
class InitialValues {
public:
    InitialValues(const GptShape& shape, const TensorTable& table, std::uint64_t seed, int tp,
                  int tpRank);
    // out[0, n) = the values of the table's flat range [offset, offset + n).
    void fill(std::size_t offset, std::size_t n, float* out) const;

private:
    static constexpr std::uint64_t kConstant = ~std::uint64_t(0);
    struct Rule {                            // how one tensor's elements get their values
        std::uint64_t firstDraw = kConstant; // the stream position of its first element
        double std = 0;
        float constant = 0;
    };
    std::size_t wholeIndex(const ParameterTensor& t, std::size_t j) const;

    TensorTable table_;
    std::vector<Rule> rules_; // per tensor of table_
    std::uint64_t seed_;
    int tp_, tpRank_;
};

// The whole share at once (tools and tests).
std::vector<float> initialParameters(const GptShape& shape, const TensorTable& table,
                                     std::uint64_t seed, int tp, int tpRank);

} // namespace shardscope
