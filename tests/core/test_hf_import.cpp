#include "core/error.h"
#include "core/json_io.h"
#include "core_test_support.h"
#include "json_mutation.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace shardscope {
namespace {

using nlohmann::json;
using test::withinRelative;

ModelSpec importFixture(const std::string& stem) {
    const auto path = test::hfDataDir() / (stem + ".json");
    return modelFromHuggingFace(readJsonFile(path.string()), stem);
}

std::string importError(const json& config) {
    try {
        modelFromHuggingFace(config, "test");
    } catch (const InputError& e) {
        return e.what();
    }
    ADD_FAILURE() << "expected an InputError for " << config.dump();
    return {};
}

json llamaConfig() {
    return json::parse(R"({
        "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "vocab_size": 128256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
        "hidden_act": "silu", "tie_word_embeddings": false})");
}

// tests/data/hf/expected.json: {"<fixture stem>": {"total": N, "active": N (MoE), "active_within":
// relative tolerance where the figure is published rounded (default 0.5 %), "main_model": true
// where both leave out the MTP modules, "active_without_input_embedding": true where the active
// count does, "source": ...}}
TEST(HfImport, EveryFixtureMatchesItsPublishedCount) {
    const auto expectedPath = test::hfDataDir() / "expected.json";
    ASSERT_TRUE(std::filesystem::exists(expectedPath))
        << expectedPath << " is missing: it lists the published parameter count of each fixture";
    const json expected = json::parse(test::readText(expectedPath));
    ASSERT_FALSE(expected.empty());
    for (const auto& [stem, published] : expected.items()) {
        SCOPED_TRACE(stem);
        const ModelSpec m = importFixture(stem);
        const ParamCount c = countParameters(m);
        // DeepSeek-V3 states its main model without the multi-token prediction module.
        const bool mainModel = published.value("main_model", false);
        const double mtpActive =
            m.mtpModules *
            (c.mtpPerModule - (c.layerMlp(m.mtpLayerKind()) - c.layerMlpActive(m.mtpLayerKind())));
        const double total = mainModel ? c.total - c.mtp : c.total;
        EXPECT_TRUE(withinRelative(total, published.at("total").get<double>(), 0.005)) << total;
        if (published.contains("active")) {
            double active = mainModel ? c.active - mtpActive : c.active;
            if (published.value("active_without_input_embedding", false))
                active -= double(m.vocab) * m.hidden;
            // A figure published to two digits ("2.8B") is only that close: the entry says so.
            const double within = published.value("active_within", 0.005);
            EXPECT_TRUE(withinRelative(active, published["active"].get<double>(), within))
                << active;
        }
    }
    // A fixture without an expected count would go unchecked.
    for (const auto& file : test::jsonFiles(test::hfDataDir(), "expected.json"))
        EXPECT_TRUE(expected.contains(file.stem().string()))
            << file.filename() << " has no entry in expected.json";
}

TEST(HfImport, Gpt2) {
    const ModelSpec m = importFixture("gpt2");
    EXPECT_EQ(countParameters(m).total, 124'439'808);
    EXPECT_EQ(m.family, "gpt2");
    EXPECT_EQ(m.name, "gpt2");
    EXPECT_EQ(m.ffnHidden, 4 * 768); // n_inner is null
    EXPECT_EQ(m.positions, PositionEmbedding::Learned);
    EXPECT_EQ(m.norm, Norm::LayerNorm);
    EXPECT_EQ(m.activation, Activation::Gelu);
    EXPECT_TRUE(m.tiedEmbeddings);
    EXPECT_TRUE(m.attentionBias && m.outputBias && m.mlpBias);
    EXPECT_TRUE(m.dropout);
    EXPECT_EQ(m.seqLen, 1024);
    EXPECT_EQ(m.maxPositions, 1024);
}

TEST(HfImport, LlamaFamilies) {
    const ModelSpec llama = importFixture("llama-3-8b");
    EXPECT_EQ(llama.family, "llama");
    EXPECT_EQ(llama.kvHeads, 8);
    EXPECT_EQ(llama.activation, Activation::SwiGlu);
    EXPECT_EQ(llama.norm, Norm::RmsNorm);
    EXPECT_FALSE(llama.tiedEmbeddings);
    EXPECT_FALSE(llama.attentionBias || llama.outputBias || llama.mlpBias);
    EXPECT_EQ(llama.seqLen, 8192);

    const ModelSpec mistral = importFixture("mistral-7b-v0.1");
    EXPECT_EQ(mistral.maxPositions, 32768);
    EXPECT_EQ(mistral.seqLen, 8192); // capped

    const ModelSpec mixtral = importFixture("mixtral-8x7b-v0.1");
    EXPECT_EQ(mixtral.moe.experts, 8);
    EXPECT_EQ(mixtral.moe.topK, 2);
    EXPECT_EQ(mixtral.expertFfn(), 14336);
}

// What the engine computes with: rotary embedding's base and long-context scaling, and the norms'
// epsilon, as each config states them (or transformers' defaults).
TEST(HfImport, RotaryBaseScalingAndNormEpsilon) {
    const ModelSpec llama3 = importFixture("llama-3-8b");
    EXPECT_EQ(llama3.ropeTheta, 500000);
    EXPECT_FALSE(llama3.ropeScaling.enabled()); // "rope_scaling": null
    EXPECT_EQ(llama3.normEps, 1e-5);

    const ModelSpec llama31 = importFixture("llama-3.1-8b");
    EXPECT_TRUE(llama31.ropeScaling.isLlama3());
    EXPECT_EQ(llama31.ropeScaling.factor, 8);
    EXPECT_EQ(llama31.ropeScaling.lowFreqFactor, 1);
    EXPECT_EQ(llama31.ropeScaling.highFreqFactor, 4);
    EXPECT_EQ(llama31.ropeScaling.originalMaxPositions, 8192);

    const ModelSpec deepseek = importFixture("deepseek-v2.5"); // YaRN: kept by name
    EXPECT_EQ(deepseek.ropeScaling.type, "yarn");
    EXPECT_EQ(deepseek.ropeScaling.factor, 40);
    EXPECT_EQ(deepseek.ropeScaling.originalMaxPositions, 4096);
    EXPECT_EQ(deepseek.normEps, 1e-6);

    const ModelSpec qwen = importFixture("qwen2-7b");
    EXPECT_EQ(qwen.ropeTheta, 1e6);
    EXPECT_EQ(qwen.normEps, 1e-6);
    EXPECT_EQ(importFixture("gpt2").normEps, 1e-5); // layer_norm_epsilon

    json config = llamaConfig(); // neither given: transformers' defaults
    config.erase("rms_norm_eps");
    const ModelSpec defaults = modelFromHuggingFace(config, "test");
    EXPECT_EQ(defaults.ropeTheta, 10000);
    EXPECT_EQ(defaults.normEps, 1e-5);

    config["rope_theta"] = "fast";
    EXPECT_NE(importError(config).find("rope_theta"), std::string::npos);
    config["rope_theta"] = 0.5;
    EXPECT_NE(importError(config).find("rope_theta"), std::string::npos);
    config["rope_theta"] = 500000;
    config["rope_scaling"] = {
        {"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", 4}, {"high_freq_factor", 1}};
    EXPECT_NE(importError(config).find("high_freq_factor above low_freq_factor"),
              std::string::npos);
    config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", "eight"}};
    EXPECT_NE(importError(config).find("factor"), std::string::npos);
    config["rope_scaling"] = "linear"; // not an object: refused, not ignored
    EXPECT_NE(importError(config).find("rope_scaling: expected an object"), std::string::npos);
}

TEST(HfImport, Qwen2HasBiasOnQkvOnly) {
    const ModelSpec m = importFixture("qwen2-7b");
    EXPECT_TRUE(m.attentionBias);
    EXPECT_FALSE(m.outputBias);
    EXPECT_FALSE(m.mlpBias);
    EXPECT_TRUE(importFixture("qwen2-0.5b").tiedEmbeddings); // per the config field
}

TEST(HfImport, GemmaUsesGegluExplicitHeadDimAndTiedEmbeddings) {
    const ModelSpec m = importFixture("gemma-7b");
    EXPECT_EQ(m.activation, Activation::GeGlu);
    EXPECT_EQ(m.headDim, 256);
    EXPECT_TRUE(m.tiedEmbeddings);
}

// Multimodal configs keep the language model under text_config (Gemma 3's shape: model_type
// gemma3 outside, gemma3_text inside, a vision tower beside it); it was refused as missing
// hidden_size.
TEST(HfImport, ReadsTheTextModelOfAMultimodalConfig) {
    const json config = json::parse(R"({
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "_name_or_path": "google/gemma-3-27b-it",
        "vision_config": {"hidden_size": 1152, "num_hidden_layers": 27, "model_type": "siglip"},
        "text_config": {"model_type": "gemma3_text", "hidden_size": 5376,
                        "intermediate_size": 21504, "num_hidden_layers": 62,
                        "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
                        "vocab_size": 262208, "max_position_embeddings": 131072}})");
    const ModelSpec m = modelFromHuggingFace(config);
    EXPECT_EQ(m.name, "google/gemma-3-27b-it");
    EXPECT_EQ(m.family, "gemma3_text");
    EXPECT_EQ(m.hidden, 5376);
    EXPECT_EQ(m.layers, 62);
    EXPECT_EQ(m.heads, 32);
    EXPECT_EQ(m.kvHeads, 16);
    EXPECT_EQ(m.headDim, 128);
    EXPECT_EQ(m.activation, Activation::GeGlu);
    EXPECT_TRUE(m.tiedEmbeddings);

    // What the text model lacks is named as missing, not the outer document's fields.
    json partial = config;
    partial["text_config"].erase("num_hidden_layers");
    try {
        modelFromHuggingFace(partial);
        FAIL() << "accepted a text model without layers";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("num_hidden_layers"), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find("hidden_size"), std::string::npos) << e.what();
    }
}

TEST(HfImport, GptNeoX) {
    const ModelSpec m = importFixture("pythia-1.4b");
    EXPECT_EQ(m.positions, PositionEmbedding::Rope);
    EXPECT_EQ(m.norm, Norm::LayerNorm);
    EXPECT_EQ(m.activation, Activation::Gelu);
    EXPECT_FALSE(m.tiedEmbeddings);
    EXPECT_TRUE(m.attentionBias && m.outputBias && m.mlpBias);
}

TEST(HfImport, NameFallsBackToNameOrPathThenModelType) {
    json config = llamaConfig();
    EXPECT_EQ(modelFromHuggingFace(config, "given").name, "given");
    EXPECT_EQ(modelFromHuggingFace(config).name, "llama");
    config["_name_or_path"] = "meta-llama/Meta-Llama-3-8B";
    EXPECT_EQ(modelFromHuggingFace(config).name, "meta-llama/Meta-Llama-3-8B");
}

// A file's model goes by its hub id, the last part of a local checkpoint path, the folder a
// config.json sits in, or the file's own name, in that order.
TEST(HfImport, TheModelIsNamedAfterItselfNotTheFile) {
    nlohmann::json config = {{"model_type", "llama"}};
    EXPECT_EQ(huggingFaceModelName(config, "/models/Llama-3-8B/config.json"), "Llama-3-8B");
    EXPECT_EQ(huggingFaceModelName(config, "models/Qwen2-7B/config.json"), "Qwen2-7B");
    EXPECT_EQ(huggingFaceModelName(config, "/tmp/mistral-7b-v0.1.json"), "mistral-7b-v0.1");
    EXPECT_EQ(huggingFaceModelName(config, "/config.json"), "");
    EXPECT_EQ(huggingFaceModelName(config, ""), "");
    config["_name_or_path"] = "/scratch/ckpt/my-llama-1b/";
    EXPECT_EQ(huggingFaceModelName(config, "/models/x/config.json"), "my-llama-1b");
    config["_name_or_path"] = "meta-llama/Meta-Llama-3-8B";
    EXPECT_EQ(huggingFaceModelName(config, "/models/x/config.json"), "meta-llama/Meta-Llama-3-8B");
    nlohmann::json wrapped = {{"model_type", "gemma3"},
                              {"text_config", {{"_name_or_path", "google/gemma-3-4b"}}}};
    EXPECT_EQ(huggingFaceModelName(wrapped, "/a/b/config.json"), "google/gemma-3-4b");
    EXPECT_EQ(huggingFaceModelName(nlohmann::json::array(), "/a/b/config.json"), "b");
}

TEST(HfImport, DefaultsAndAliases) {
    json config = llamaConfig();
    config.erase("num_key_value_heads");
    EXPECT_EQ(modelFromHuggingFace(config).kvHeads, 32);
    config["multi_query"] = true;
    EXPECT_EQ(modelFromHuggingFace(config).kvHeads, 1);
    config["d_model"] = config["hidden_size"];
    config.erase("hidden_size");
    EXPECT_EQ(modelFromHuggingFace(config).hidden, 4096);
}

TEST(HfImport, UnknownModelTypeImportsLikeLlama) {
    json config = llamaConfig();
    config["model_type"] = "some_new_llm";
    const ModelSpec m = modelFromHuggingFace(config);
    EXPECT_EQ(m.family, "some_new_llm");
    EXPECT_EQ(countParameters(m).total, 8'030'261'248);

    config["hidden_act"] = "gelu";
    config.erase("rms_norm_eps");
    config["layer_norm_eps"] = 1e-5;
    const ModelSpec gptLike = modelFromHuggingFace(config);
    EXPECT_EQ(gptLike.activation, Activation::Gelu);
    EXPECT_EQ(gptLike.norm, Norm::LayerNorm);
}

TEST(HfImport, ListsAllMissingFieldsAtOnce) {
    const std::string message = importError(json{{"model_type", "llama"}});
    for (const char* field : {"hidden_size", "num_hidden_layers", "num_attention_heads",
                              "vocab_size", "intermediate_size", "max_position_embeddings"})
        EXPECT_NE(message.find(field), std::string::npos) << field << " in: " << message;
    // Mixtral needs its router's top-k as well.
    json mixtral = llamaConfig();
    mixtral["num_local_experts"] = 8;
    EXPECT_NE(importError(mixtral).find("num_experts_per_tok"), std::string::npos);
}

TEST(HfImport, InvalidFieldsAreNamed) {
    json config = llamaConfig();
    config["hidden_size"] = "4096";
    config["num_hidden_layers"] = -2;
    config["vocab_size"] = 1e300;
    config["tie_word_embeddings"] = "no";
    const std::string message = importError(config);
    for (const char* field :
         {"hidden_size", "num_hidden_layers", "vocab_size", "tie_word_embeddings"})
        EXPECT_NE(message.find(field), std::string::npos) << field << " in: " << message;

    config = llamaConfig();
    config["num_key_value_heads"] = 5; // does not divide 32 heads
    EXPECT_NE(importError(config).find("kv_heads"), std::string::npos);
    config = llamaConfig();
    config["num_hidden_layers"] = 1000000;
    EXPECT_NE(importError(config).find("layers"), std::string::npos);
}

// Configs whose layers the planner cannot describe are refused with the fields that say so.
TEST(HfImport, ArchitecturesItCannotModelAreRefusedWithTheirFields) {
    // One field at a time on a config that imports: each alone is refused.
    json moe = llamaConfig();
    moe["num_local_experts"] = 8;
    moe["num_experts_per_tok"] = 2;
    EXPECT_NO_THROW(modelFromHuggingFace(moe, "moe"));
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, json>>{{"q_lora_rank", 1536},
                                                   {"moe_layer_freq", 2},
                                                   {"decoder_sparse_step", 2},
                                                   {"mlp_only_layers", json::array({0, 5})},
                                                   {"mlp_layer_types", {"sparse", "dense"}},
                                                   {"interleave_moe_layer_step", 2},
                                                   {"model_type", "llama4_text"},
                                                   {"layer_types", {"full_attention", "mamba"}}}) {
        json config = moe;
        config[key] = value;
        const std::string message = importError(config);
        EXPECT_NE(message.find(key), std::string::npos) << key << " in: " << message;
        EXPECT_NE(message.find("--params"), std::string::npos) << message;
    }
    // What says "nothing unusual" imports: a null rank, dense layers counted as none, one MoE
    // layer in every one, sliding-window layers.
    json plain = moe;
    plain["q_lora_rank"] = nullptr;
    plain["first_k_dense_replace"] = 0;
    plain["moe_layer_freq"] = 1;
    plain["mlp_only_layers"] = json::array();
    plain["layer_types"] = {"sliding_attention", "full_attention"};
    EXPECT_NO_THROW(modelFromHuggingFace(plain, "plain"));
}

// An MoE model's dense first layers, however the config spells them (DeepSeek's and GLM's
// first_k_dense_replace, Qwen-MoE's mlp_only_layers, transformers' mlp_layer_types), are the
// same model: each of them trades an MoE layer's experts for a dense MLP of intermediate_size.
TEST(HfImport, DenseFirstLayersReadTheSameFromEverySpelling) {
    json moe = llamaConfig();
    moe["num_local_experts"] = 8;
    moe["num_experts_per_tok"] = 2;
    moe["moe_intermediate_size"] = 2048;
    const ParamCount allMoe = countParameters(modelFromHuggingFace(moe, "moe"));
    const double h = 4096, expert = 3.0 * h * 2048, dense = 3.0 * h * 14336, router = h * 8;
    json types = json::array({"dense", "dense"});
    for (int i = 2; i < 32; ++i)
        types.push_back("sparse");
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, json>>{{"first_k_dense_replace", 2},
                                                   {"mlp_only_layers", json::array({0, 1})},
                                                   {"mlp_layer_types", types}}) {
        SCOPED_TRACE(key);
        json config = moe;
        config[key] = value;
        const ModelSpec m = modelFromHuggingFace(config, "dense first");
        EXPECT_EQ(m.moe.firstDenseLayers, 2);
        EXPECT_EQ(m.moeLayerCount(), 30);
        const ParamCount c = countParameters(m);
        EXPECT_DOUBLE_EQ(c.total, allMoe.total - 2.0 * (8 * expert + router - dense));
        EXPECT_DOUBLE_EQ(c.active, allMoe.active - 2.0 * (2 * expert + router - dense));
    }
    // As many dense layers as layers leaves no MoE layer: a model file error, said as one.
    json all = moe;
    all["first_k_dense_replace"] = 32;
    EXPECT_NE(importError(all).find("first_dense_layers"), std::string::npos);
}

TEST(HfImport, NotAnObject) {
    for (const json& bad : {json::array(), json(nullptr), json("config"), json(3)})
        EXPECT_NE(importError(bad).find("object"), std::string::npos);
}

TEST(HfFuzz, MutatedFixturesOnlyEverThrowInputError) {
    const auto files = test::jsonFiles(test::hfDataDir(), "expected.json");
    ASSERT_FALSE(files.empty()) << "no Hugging Face fixtures in " << test::hfDataDir();
    test::JsonMutator mutator(1234);
    for (const auto& file : files) {
        const json original = json::parse(test::readText(file));
        for (int i = 0; i < 2000; ++i) {
            const std::string text = mutator.damage(original);
            const json edited = mutator.edit(original);
            try {
                (void)modelFromHuggingFace(edited);
            } catch (const InputError&) {
            } catch (const std::exception& e) {
                FAIL() << file.filename() << ": " << e.what() << " for " << edited.dump();
            }
            try {
                (void)modelFromHuggingFace(parseJson(text, "fuzz"));
            } catch (const InputError&) {
            } catch (const std::exception& e) {
                FAIL() << file.filename() << ": " << e.what();
            }
        }
    }
}

TEST(HfFuzz, RandomBytesOnlyEverThrowInputError) {
    test::JsonMutator mutator(99);
    for (int i = 0; i < 2000; ++i) {
        for (const std::string& text : {mutator.randomBytes(300), mutator.randomTokens(80)}) {
            try {
                (void)modelFromHuggingFace(parseJson(text, "fuzz"));
            } catch (const InputError&) {
            } catch (const std::exception& e) {
                FAIL() << e.what();
            }
        }
    }
}

} // namespace
} // namespace shardscope
