#include "runtime/gpt_parameters.h"

#include <cmath>
#include <gtest/gtest.h>
#include <numbers>
#include <string>
#include <vector>

namespace shardscope {
namespace {

// A second method: splitmix64 drawn in order, Box-Muller on each pair (cosine, then sine), as
// the engine drew its initial weights before it could compute any one of them on its own.
class SequentialNormals {
public:
    explicit SequentialNormals(std::uint64_t seed) : state_(seed) {}
    double next() {
        if (spare_) {
            spare_ = false;
            return spareValue_;
        }
        const double u1 = (double(bits() >> 11) + 1.0) * 0x1.0p-53;
        const double u2 = double(bits() >> 11) * 0x1.0p-53;
        const double r = std::sqrt(-2.0 * std::log(u1));
        spareValue_ = r * std::sin(2.0 * std::numbers::pi * u2);
        spare_ = true;
        return r * std::cos(2.0 * std::numbers::pi * u2);
    }

private:
    std::uint64_t bits() {
        std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    std::uint64_t state_;
    bool spare_ = false;
    double spareValue_ = 0;
};

TEST(GptParameters, ANormalComputedOnItsOwnEqualsTheSequentialStreams) {
    for (std::uint64_t seed : {0ull, 7ull, 0xFFFFFFFFFFFFFFFFull}) {
        SequentialNormals stream(seed);
        for (std::uint64_t n = 0; n < 10001; ++n)
            ASSERT_EQ(normalAt(seed, n), stream.next()) << "seed " << seed << " n " << n;
    }
}

GptShape smallShape() {
    GptShape s;
    s.layers = 2;
    s.channels = 8;
    s.heads = 4;
    s.kvHeads = 4;
    s.ffn = 32;
    s.vocab = 12;
    s.maxPositions = 6;
    s.seqLen = 6;
    s.tied = false;
    return s;
}

// The Llama family with grouped-query attention: 8 query heads of 2 channels, each pair sharing
// one of 4 key and value heads.
GptShape smallLlamaShape() {
    GptShape s = smallShape();
    s.family = BlockFamily::Llama;
    s.channels = 16;
    s.heads = 8;
    s.kvHeads = 4;
    s.ffn = 24;
    return s;
}

// Each tensor-parallel share, and any range of it, equals the whole model's values cut by
// copyTensorParallelShare (tested against Megatron's splits on its own): ranks compute only
// what they keep and still start from one process's weights.
class GptParametersOfFamily : public ::testing::TestWithParam<BlockFamily> {
protected:
    GptShape shape() const {
        return GetParam() == BlockFamily::Llama ? smallLlamaShape() : smallShape();
    }
};

TEST_P(GptParametersOfFamily, AnyRangeOfAnyShareIsCutFromTheWholeModelsValues) {
    const GptShape shape = this->shape();
    const std::vector<ModelChunk> all = pipelineChunks(shape.layers, 1, 1, 0);
    const TensorTable whole = tensorTable(shape, all, 1);
    const std::vector<float> values = initialParameters(shape, whole, 5, 1, 0);
    for (int tp : {2, 4})
        for (int rank = 0; rank < tp; ++rank) {
            const TensorTable local = tensorTable(shape, all, tp);
            std::vector<float> expected(local.count);
            for (std::size_t i = 0; i < local.tensors.size(); ++i)
                copyTensorParallelShare(expected.data() + local.tensors[i].offset,
                                        values.data() + whole.tensors[i].offset,
                                        whole.tensors[i].shape, local.tensors[i].split, tp, rank,
                                        whole.tensors[i].rowBlocks);
            EXPECT_EQ(initialParameters(shape, local, 5, tp, rank), expected)
                << "tp " << tp << " rank " << rank;
            const InitialValues init(shape, local, 5, tp, rank);
            for (std::size_t begin = 0; begin < local.count; begin += 37) {
                const std::size_t n = std::min<std::size_t>(53, local.count - begin);
                std::vector<float> range(n);
                init.fill(begin, n, range.data());
                ASSERT_EQ(range, std::vector<float>(expected.begin() + std::ptrdiff_t(begin),
                                                    expected.begin() + std::ptrdiff_t(begin + n)))
                    << "tp " << tp << " rank " << rank << " from " << begin;
            }
        }
}

// GPT-2's scheme: unit norm weights, zero biases, N(0, 0.02) matrices.
TEST_P(GptParametersOfFamily, NormsAreOneBiasesZeroAndWeightsSmall) {
    const GptShape shape = this->shape();
    const TensorTable table = tensorTable(shape, pipelineChunks(shape.layers, 1, 1, 0), 1);
    const std::vector<float> v = initialParameters(shape, table, 1, 1, 0);
    for (const ParameterTensor& t : table.tensors)
        for (std::size_t i = 0; i < t.count; ++i) {
            const float w = v[t.offset + i];
            if (t.name.ends_with(".bias"))
                ASSERT_EQ(w, 0.0f) << t.name;
            else if (t.name.find("ln_") != std::string::npos)
                ASSERT_EQ(w, 1.0f) << t.name;
            else
                ASSERT_LT(std::fabs(w), 0.02f * 6) << t.name; // six standard deviations
        }
}

INSTANTIATE_TEST_SUITE_P(BothFamilies, GptParametersOfFamily,
                         ::testing::Values(BlockFamily::Gpt2, BlockFamily::Llama),
                         [](const auto& param) {
                             return param.param == BlockFamily::Llama ? "Llama" : "Gpt2";
                         });

// The Llama family's tensors as Hugging Face's LlamaForCausalLM holds them (q_proj, k_proj and
// v_proj fused in that order; gate_proj and up_proj fused), without biases or position table.
TEST(GptParameters, TheLlamaFamilysTensorsAreHuggingFacesFused) {
    const GptShape s = smallLlamaShape();
    const TensorTable t = tensorTable(s, pipelineChunks(s.layers, 1, 1, 0), 1);
    std::vector<std::string> names;
    for (const ParameterTensor& x : t.tensors)
        names.push_back(x.name);
    EXPECT_EQ(names, (std::vector<std::string>{
                         "wte", "h.0.ln_1.weight", "h.0.attn.qkv.weight", "h.0.attn.proj.weight",
                         "h.0.ln_2.weight", "h.0.mlp.gate_up.weight", "h.0.mlp.proj.weight",
                         "h.1.ln_1.weight", "h.1.attn.qkv.weight", "h.1.attn.proj.weight",
                         "h.1.ln_2.weight", "h.1.mlp.gate_up.weight", "h.1.mlp.proj.weight",
                         "ln_f.weight", "lm_head.weight"}));
    // q: 8 heads x 2, k and v: 4 heads x 2 each, over 16 channels; gate and up: 24 rows each.
    EXPECT_EQ(t.tensors[2].shape, (std::vector<int>{16 + 8 + 8, 16}));
    EXPECT_EQ(t.tensors[2].rowBlocks, (std::vector<int>{16, 8, 8}));
    EXPECT_EQ(t.tensors[5].shape, (std::vector<int>{48, 16}));
    EXPECT_EQ(t.tensors[6].shape, (std::vector<int>{16, 24}));
    EXPECT_EQ(t.wpe, TensorTable::npos);
    EXPECT_EQ(t.lnfBias, TensorTable::npos);
    // Under tp 2 each rank holds 4 query heads and the 2 key and value heads they share.
    const TensorTable half = tensorTable(s, pipelineChunks(s.layers, 1, 1, 0), 2);
    EXPECT_EQ(half.tensors[2].shape, (std::vector<int>{8 + 4 + 4, 16}));
    EXPECT_EQ(half.tensors[5].shape, (std::vector<int>{24, 16}));
}

} // namespace
} // namespace shardscope
