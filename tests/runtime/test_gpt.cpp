#include "core/error.h"
#include "engine_test_support.h"
#include "kernels/cpu/cpu_ops.h"
#include "runtime/data.h"
#include "runtime/gpt.h"

#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <string>
#include <vector>

namespace shardscope {
namespace {

using testing::tinyGpt;
using testing::tinyLlama;

struct Batch {
    std::vector<std::int32_t> inputs, targets;
};

Batch batchFor(const ModelSpec& m, int B, int micro = 0) {
    DataSpec spec;
    spec.format = DataFormat::Synthetic;
    spec.vocab = m.vocab;
    spec.seqLen = m.seqLen;
    spec.seed = 5;
    const auto data = Dataset::open(spec);
    Batch b;
    b.inputs.resize(std::size_t(B) * std::size_t(m.seqLen));
    b.targets.resize(b.inputs.size());
    data->batch(Split::Train, 0, micro, B, b.inputs.data(), b.targets.data());
    return b;
}

// Loss and gradients of one microbatch under a recompute policy.
struct Result {
    double loss = 0;
    std::vector<float> grads;
};

Result lossAndGradients(const ModelSpec& m, int B, RecomputePolicy r, bool storeProbs, bool split) {
    auto ops = kernels::makeCpuOps(2);
    DeviceAllocator memory(*ops);
    GptModel model(m, B, *ops, memory, r, storeProbs);
    model.initialize(3);
    const Batch b = batchFor(m, B);
    MicrobatchState state;
    const double N = double(b.inputs.size());
    Result out;
    out.loss = model.forward(state, b.inputs.data(), b.targets.data(), float(1.0 / N), nullptr) / N;
    model.backward(state, split, nullptr);
    if (split)
        model.backwardWeights(state, nullptr);
    out.grads.assign(kernels::asFloats(model.gradients()),
                     kernels::asFloats(model.gradients()) + model.parameterCount());
    return out;
}

// The planner's parameter count (countParameters, its own formulas) for both block families.
TEST(GptModel, ParameterCountEqualsTheModelSpecCount) {
    auto ops = kernels::makeCpuOps(1);
    DeviceAllocator memory(*ops);
    for (bool llama : {false, true})
        for (bool tied : {true, false}) {
            ModelSpec m = llama ? tinyLlama(3, 24, 6, 2, 50, 10) : tinyGpt(3, 24, 3, 50, 10);
            m.maxPositions = 16;
            m.tiedEmbeddings = tied;
            const std::int64_t before = memory.live()[MemoryCategory::Parameters];
            GptModel model(m, 1, *ops, memory, Recompute::None, false);
            EXPECT_EQ(double(model.parameterCount()), countParameters(m).total)
                << m.name << " tied " << tied;
            EXPECT_EQ(memory.live()[MemoryCategory::Parameters] - before,
                      std::int64_t(model.parameterCount() * 4));
        }
}

std::string refusal(const ModelSpec& m) {
    try {
        GptShape::of(m);
    } catch (const InputError& e) {
        return e.what();
    }
    return "(accepted)";
}

TEST(GptModel, RefusesWhatIsNeitherFamilyWithEveryReason) {
    ModelSpec m = tinyGpt();
    m.activation = Activation::SwiGlu; // GPT-2's norm and positions with a gated MLP
    m.dropout = true;
    m.mla.kvLoraRank = 16;
    m.mtpModules = 1;
    const std::string what = refusal(m);
    for (const char* word : {"swiglu", "layernorm", "learned", "neither", "dropout",
                             "latent attention", "multi-token prediction"})
        EXPECT_NE(what.find(word), std::string::npos) << word << " in: " << what;
    ModelSpec gqa = tinyGpt();
    gqa.kvHeads = 1;
    EXPECT_NE(refusal(gqa).find("kv_heads 1 differs"), std::string::npos) << refusal(gqa);
}

TEST(GptModel, RefusesLlamaFamilyModelsItCannotBuildWithEveryReason) {
    ModelSpec m = tinyLlama(2, 12, 4, 3); // head size 3: odd; 3 kv heads do not divide 4
    m.attentionBias = true;               // Qwen2's QKV bias
    m.ropeScaling.type = "yarn";
    const std::string what = refusal(m);
    for (const char* word :
         {"must be even", "kv_heads 3 must divide heads 4", "no biases", "\"yarn\""})
        EXPECT_NE(what.find(word), std::string::npos) << word << " in: " << what;
    EXPECT_EQ(refusal(tinyLlama()), "(accepted)");
}

// Megatron-LM splits query groups whole: tp must divide kv_heads, and the error says so.
TEST(GptModel, TensorParallelismMustDivideTheKeyAndValueHeads) {
    auto ops = kernels::makeCpuOps(1);
    DeviceAllocator memory(*ops);
    const ModelSpec m = tinyLlama(2, 16, 4, 1, 24, 8); // multi-query: one kv head
    try {
        GptModel model(m, 1, *ops, memory, Recompute::None, false, {}, TensorParallel{2, 0});
        FAIL() << "tp 2 over one kv head was accepted";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("tp 2 must divide kv_heads (1)"), std::string::npos)
            << e.what();
    }
}

class GptModelOfFamily : public ::testing::TestWithParam<bool> {
protected:
    bool llama() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(BothFamilies, GptModelOfFamily, ::testing::Values(false, true),
                         [](const auto& param) { return param.param ? "Llama" : "Gpt2"; });

TEST_P(GptModelOfFamily, GradientsMatchFiniteDifferences) {
    // Llama: 4 query heads of 2 channels over 2 key and value heads.
    const ModelSpec m = llama() ? tinyLlama(1, 8, 4, 2, 11, 5) : tinyGpt(1, 8, 2, 11, 5);
    const int B = 2;
    auto ops = kernels::makeCpuOps(1);
    DeviceAllocator memory(*ops);
    GptModel model(m, B, *ops, memory, Recompute::None, true);
    model.initialize(9);
    // Larger weights than GPT-2's init make every path's gradient visible above fp32 noise.
    for (std::size_t i = 0; i < model.parameterCount(); ++i)
        kernels::asFloats(model.parameters())[i] *= 10.0f;
    const Batch b = batchFor(m, B);
    const double N = double(b.inputs.size());
    model.zeroGradients();
    MicrobatchState state;
    model.forward(state, b.inputs.data(), b.targets.data(), float(1.0 / N), nullptr);
    model.backward(state, false, nullptr);
    const std::vector<float> analytic(kernels::asFloats(model.gradients()),
                                      kernels::asFloats(model.gradients()) +
                                          model.parameterCount());

    const float eps = 1e-2f;
    int checked = 0;
    for (const ParameterTensor& t : model.tensors()) {
        for (std::size_t k : {std::size_t(0), t.count / 2, t.count - 1}) {
            float& w = kernels::asFloats(model.parameters())[t.offset + k];
            const float saved = w;
            w = saved + eps;
            const double up = model.evaluate(b.inputs.data(), b.targets.data()) / N;
            w = saved - eps;
            const double down = model.evaluate(b.inputs.data(), b.targets.data()) / N;
            w = saved;
            const double numeric = (up - down) / (2.0 * eps);
            const double g = analytic[t.offset + k];
            EXPECT_NEAR(g, numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << t.name << "[" << k << "]";
            ++checked;
        }
    }
    EXPECT_EQ(checked, 3 * int(model.tensors().size()));
}

TEST_P(GptModelOfFamily, RecomputePoliciesGiveBitIdenticalResults) {
    const ModelSpec m = llama() ? tinyLlama(3, 16, 4, 2, 19, 9) : tinyGpt(3, 16, 2, 19, 9);
    const Result base = lossAndGradients(m, 3, Recompute::None, true, false);
    // Full recompute of the first layer, or of the first two, keeps the others' activations.
    for (auto [r, probs] : {std::pair{RecomputePolicy{Recompute::None}, false},
                            std::pair{RecomputePolicy{Recompute::Selective}, true},
                            std::pair{RecomputePolicy{Recompute::Full}, true},
                            std::pair{RecomputePolicy{Recompute::Full}, false},
                            std::pair{RecomputePolicy{Recompute::Full, 1}, true},
                            std::pair{RecomputePolicy{Recompute::Full, 2}, false}}) {
        const Result other = lossAndGradients(m, 3, r, probs, false);
        EXPECT_EQ(other.loss, base.loss) << toString(r.policy) << " " << r.layers;
        ASSERT_EQ(other.grads.size(), base.grads.size());
        EXPECT_EQ(std::memcmp(other.grads.data(), base.grads.data(), base.grads.size() * 4), 0)
            << toString(r.policy) << " " << r.layers << " probs " << probs;
    }
}

TEST_P(GptModelOfFamily, SplitBackwardEqualsFusedBackward) {
    const ModelSpec m = llama() ? tinyLlama(2, 16, 4, 1, 13, 7) : tinyGpt(2, 16, 4, 13, 7);
    for (Recompute r : {Recompute::None, Recompute::Full}) {
        const Result fused = lossAndGradients(m, 2, r, false, false);
        const Result split = lossAndGradients(m, 2, r, false, true);
        EXPECT_EQ(std::memcmp(split.grads.data(), fused.grads.data(), fused.grads.size() * 4), 0)
            << toString(r);
    }
}

TEST_P(GptModelOfFamily, BackwardFreesWhatForwardKept) {
    const ModelSpec m = llama() ? tinyLlama() : tinyGpt();
    auto ops = kernels::makeCpuOps(1);
    DeviceAllocator memory(*ops);
    GptModel model(m, 2, *ops, memory, Recompute::None, true);
    model.initialize(1);
    // The rotary angles' cos and sin tables, [seq_len, head size / 2] each, stay for the run.
    const std::int64_t tables = llama() ? 2 * m.seqLen * (m.hidden / m.heads / 2) * 4 : 0;
    EXPECT_EQ(memory.live()[MemoryCategory::Workspace], tables);
    const Batch b = batchFor(m, 2);
    MicrobatchState state;
    model.forward(state, b.inputs.data(), b.targets.data(), 0.1f, nullptr);
    EXPECT_GT(memory.live()[MemoryCategory::Activations], 0);
    model.backward(state, true, nullptr);
    EXPECT_GT(memory.live()[MemoryCategory::Activations] + memory.live()[MemoryCategory::Workspace],
              0); // the W op still needs its inputs and output gradients
    model.backwardWeights(state, nullptr);
    state.reset();
    EXPECT_EQ(memory.live()[MemoryCategory::Activations], 0);
    EXPECT_EQ(memory.live()[MemoryCategory::Workspace], tables);
}

TEST(GptModel, InitialisationIsDeterministicAndGpt2Like) {
    const ModelSpec m = tinyGpt(2, 32, 4, 64, 8);
    auto ops = kernels::makeCpuOps(1);
    DeviceAllocator memory(*ops);
    GptModel a(m, 1, *ops, memory, Recompute::None, false),
        b(m, 1, *ops, memory, Recompute::None, false);
    a.initialize(42);
    b.initialize(42);
    EXPECT_EQ(std::memcmp(kernels::asFloats(a.parameters()), kernels::asFloats(b.parameters()),
                          a.parameterCount() * 4),
              0);
    for (const ParameterTensor& t : a.tensors()) {
        double sum2 = 0;
        for (std::size_t i = 0; i < t.count; ++i)
            sum2 += double(kernels::asFloats(a.parameters())[t.offset + i]) *
                    kernels::asFloats(a.parameters())[t.offset + i];
        const double rms = std::sqrt(sum2 / double(t.count));
        if (t.name.ends_with(".bias"))
            EXPECT_EQ(rms, 0.0) << t.name;
        else if (t.name.find("ln_") != std::string::npos)
            EXPECT_EQ(rms, 1.0) << t.name;
        else if (t.name.ends_with("proj.weight"))
            EXPECT_NEAR(rms, 0.02 / std::sqrt(4.0), 0.003) << t.name;
        else
            EXPECT_NEAR(rms, 0.02, 0.003) << t.name;
    }
}

// A pipeline rank starts from the single process's weights for its own tensors; the last stage's
// copy of a tied embedding starts equal to the first stage's, and is the shared tensor.
TEST(GptModel, PipelineRanksStartFromTheWholeModelsWeights) {
    for (const bool tied : {true, false}) {
        ModelSpec m = tinyGpt(4, 16, 2, 32, 8);
        m.tiedEmbeddings = tied;
        auto ops = kernels::makeCpuOps(1);
        DeviceAllocator memory(*ops);
        GptModel whole(m, 1, *ops, memory, Recompute::None, false);
        whole.initialize(9);
        auto valuesOf = [](const GptModel& g, const std::string& name) {
            for (const ParameterTensor& t : g.tensors())
                if (t.name == name)
                    return std::vector<float>(kernels::asFloats(g.parameters()) + t.offset,
                                              kernels::asFloats(g.parameters()) + t.offset +
                                                  t.count);
            return std::vector<float>{};
        };
        std::size_t total = 0;
        for (int rank = 0; rank < 2; ++rank) {
            GptModel part(m, 1, *ops, memory, Recompute::None, false,
                          pipelineChunks(whole.shape().layers, 2, 2, rank));
            part.initialize(9);
            for (const ParameterTensor& t : part.tensors()) {
                const bool copy = tied && t.name == "lm_head.weight";
                EXPECT_EQ(valuesOf(part, t.name), valuesOf(whole, copy ? "wte" : t.name)) << t.name;
                total += copy ? 0 : t.count;
            }
            const std::size_t shared = part.sharedTensor();
            if (tied) {
                ASSERT_NE(shared, GptModel::npos);
                EXPECT_EQ(part.tensors()[shared].name, rank == 0 ? "wte" : "lm_head.weight");
            } else {
                EXPECT_EQ(shared, GptModel::npos);
            }
        }
        EXPECT_EQ(total, whole.parameterCount()); // every tensor on exactly one rank
        EXPECT_EQ(whole.sharedTensor(), GptModel::npos);
    }
}

} // namespace
} // namespace shardscope
