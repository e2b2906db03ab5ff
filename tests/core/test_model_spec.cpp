#include "core/json_io.h"
#include "core/model_spec.h"
#include "core/presets.h"
#include "core_test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace shardscope {
namespace {

using test::withinRelative;

ModelSpec gpt2Small() {
    ModelSpec m;
    m.layers = 12;
    m.hidden = 768;
    m.heads = m.kvHeads = 12;
    m.ffnHidden = 3072;
    m.vocab = 50257;
    m.seqLen = m.maxPositions = 1024;
    m.tiedEmbeddings = true;
    m.activation = Activation::Gelu;
    m.norm = Norm::LayerNorm;
    m.positions = PositionEmbedding::Learned;
    m.attentionBias = m.outputBias = m.mlpBias = true;
    return m;
}

ModelSpec llama3_8b() {
    ModelSpec m;
    m.layers = 32;
    m.hidden = 4096;
    m.heads = 32;
    m.kvHeads = 8;
    m.ffnHidden = 14336;
    m.vocab = 128256;
    m.seqLen = m.maxPositions = 8192;
    return m;
}

TEST(CountParameters, Gpt2SmallIsExact) {
    const ParamCount c = countParameters(gpt2Small());
    EXPECT_EQ(c.total, 124'439'808);
    EXPECT_EQ(c.active, c.total);
    EXPECT_EQ(c.embeddings, 50257.0 * 768 + 1024.0 * 768); // tokens + learned positions
    EXPECT_EQ(c.lmHead, 0);                                // tied
    EXPECT_EQ(c.attentionPerLayer, 4.0 * 768 * 768 + 4 * 768);
    EXPECT_EQ(c.mlpPerLayer, 2.0 * 768 * 3072 + 3072 + 768);
    EXPECT_EQ(c.normsPerLayer, 4 * 768);
    EXPECT_EQ(c.finalNorm, 2 * 768);
    EXPECT_EQ(c.layer(), c.attentionPerLayer + c.mlpPerLayer + c.normsPerLayer);
}

TEST(CountParameters, Llama3_8bIsExact) {
    // The checkpoint holds 8,030,261,248 parameters.
    EXPECT_EQ(countParameters(llama3_8b()).total, 8'030'261'248);
}

TEST(CountParameters, MixtralActiveCountsTopKExperts) {
    ModelSpec m = llama3_8b();
    m.vocab = 32000;
    m.moe.experts = 8;
    m.moe.topK = 2;
    const ParamCount c = countParameters(m);
    EXPECT_TRUE(withinRelative(c.total, 46.7e9, 0.005));
    EXPECT_TRUE(withinRelative(c.active, 12.9e9, 0.005));
    EXPECT_EQ(c.mlpPerLayer - c.mlpActivePerLayer, 6 * 3.0 * 4096 * 14336);
}

// Multi-head latent attention, counted as DeepSeek-V2's modeling code builds it (q_a_proj and its
// norm, q_b_proj or one q_proj; kv_a_proj_with_mqa, its norm, kv_b_proj; o_proj), for V2-Lite
// (no query bottleneck) and V2 (q_lora_rank 1536): widths 128 heads x (128 + 64) for queries and
// keys, x 128 for values.
TEST(CountParameters, MultiHeadLatentAttentionCountsItsProjections) {
    ModelSpec lite;
    lite.layers = 27;
    lite.hidden = 2048;
    lite.heads = lite.kvHeads = 16;
    lite.headDim = 128;
    lite.ffnHidden = 10944;
    lite.vocab = 102400;
    lite.seqLen = lite.maxPositions = 4096;
    lite.mla = {0, 512, 128, 64, 128};
    EXPECT_EQ(lite.scoreDim(), 16 * 192);
    EXPECT_EQ(lite.valueDim(), 16 * 128);
    EXPECT_EQ(lite.keyDim(), 16 * 192);
    const ParamCount c = countParameters(lite);
    const double q = 2048.0 * 16 * 192, kvDown = 2048.0 * (512 + 64) + 512,
                 kvUp = 512.0 * 16 * (128 + 128), o = 16.0 * 128 * 2048;
    EXPECT_DOUBLE_EQ(c.attentionPerLayer, q + kvDown + kvUp + o);
    EXPECT_DOUBLE_EQ(c.attentionReplicatedPerLayer, kvDown);

    ModelSpec v2 = lite;
    v2.hidden = 5120;
    v2.heads = v2.kvHeads = 128;
    v2.mla.qLoraRank = 1536;
    const ParamCount c2 = countParameters(v2);
    const double qDown = 5120.0 * 1536 + 1536, qUp = 1536.0 * 128 * 192,
                 kvDown2 = 5120.0 * 576 + 512, kvUp2 = 512.0 * 128 * 256, o2 = 128.0 * 128 * 5120;
    EXPECT_DOUBLE_EQ(c2.attentionPerLayer, qDown + qUp + kvDown2 + kvUp2 + o2);
    EXPECT_DOUBLE_EQ(c2.attentionReplicatedPerLayer, qDown + kvDown2);
}

TEST(CountParameters, ExplicitHeadDimWidensAttention) {
    ModelSpec m = llama3_8b();
    m.headDim = 256; // Gemma style: heads * head_dim != hidden
    EXPECT_EQ(m.qDim(), 32 * 256);
    EXPECT_EQ(m.kvDim(), 8 * 256);
    EXPECT_EQ(countParameters(m).attentionPerLayer, 4096.0 * 8192 * 2 + 2 * 4096.0 * 2048);
}

TEST(CountParameters, BareModelIsItsCount) {
    ModelSpec m;
    m.bareParams = 7e9;
    EXPECT_TRUE(m.isBare());
    EXPECT_EQ(countParameters(m).total, 7e9);
    EXPECT_EQ(countParameters(m).active, 7e9);
    EXPECT_EQ(matmulParamsPerToken(m), 7e9);
}

TEST(MatmulParams, IncludeTheOutputProjectionEvenWhenTied) {
    const ModelSpec m = gpt2Small();
    const ParamCount c = countParameters(m);
    EXPECT_EQ(matmulParamsPerToken(m), 12 * (c.attentionPerLayer + c.mlpPerLayer) + 50257.0 * 768);
}

TEST(ModelSpec, DerivedSizes) {
    const ModelSpec m = llama3_8b();
    EXPECT_EQ(m.effectiveHeadDim(), 128);
    EXPECT_EQ(m.expertFfn(), 14336);
    EXPECT_TRUE(m.gated());
    EXPECT_FALSE(gpt2Small().gated());
    EXPECT_EQ(ModelSpec{}.effectiveHeadDim(), 0);
}

TEST(ModelSpec, EnumNames) {
    EXPECT_EQ(toString(Activation::Gelu), "gelu");
    EXPECT_EQ(toString(Activation::SwiGlu), "swiglu");
    EXPECT_EQ(toString(Activation::GeGlu), "geglu");
    EXPECT_EQ(toString(Norm::LayerNorm), "layernorm");
    EXPECT_EQ(toString(Norm::RmsNorm), "rmsnorm");
    EXPECT_EQ(toString(PositionEmbedding::Rope), "rope");
    EXPECT_EQ(toString(PositionEmbedding::Learned), "learned");
}

TEST(ModelPresets, Gpt2_124mIsExact) {
    EXPECT_EQ(countParameters(findModelPreset("gpt2-124m")).total, 124'439'808);
}

// Every preset against the total its authors publish (and the active count, for MoE presets
// whose file states one).
TEST(ModelPresets, CountsMatchPublishedWithinHalfAPercent) {
    ASSERT_FALSE(modelPresets().empty());
    for (const ModelSpec& m : modelPresets()) {
        SCOPED_TRACE(m.id);
        ASSERT_GT(m.publishedParams, 0) << "preset has no published_params to check against";
        const ParamCount c = countParameters(m);
        EXPECT_TRUE(withinRelative(c.total, m.publishedParams, 0.005));
    }
    for (const auto& file : test::jsonFiles(test::presetDir("models"))) {
        const nlohmann::json j = nlohmann::json::parse(test::readText(file));
        if (!j.contains("published_active_params"))
            continue;
        SCOPED_TRACE(file.filename().string());
        const ParamCount c = countParameters(j.get<ModelSpec>());
        EXPECT_TRUE(withinRelative(c.active, j["published_active_params"].get<double>(), 0.005));
    }
}

} // namespace
} // namespace shardscope
