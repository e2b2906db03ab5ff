// JSON round trip of the shared types, and the Hugging Face config.json import.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "cluster_spec.h"
#include "model_spec.h"
#include "parallel_config.h"
#include "train_config.h"

namespace shardscope {

// to_json/from_json overloads let nlohmann::json convert the types directly. from_json throws
// InputError naming the offending field and what was expected.
void to_json(nlohmann::json& j, const ModelSpec& m);
void from_json(const nlohmann::json& j, ModelSpec& m);
void to_json(nlohmann::json& j, const GpuSpec& g);
void from_json(const nlohmann::json& j, GpuSpec& g);
void to_json(nlohmann::json& j, const ClusterSpec& c);
void from_json(const nlohmann::json& j, ClusterSpec& c);
void to_json(nlohmann::json& j, const ParallelConfig& p);
void from_json(const nlohmann::json& j, ParallelConfig& p);
void to_json(nlohmann::json& j, const TrainConfig& t);
void from_json(const nlohmann::json& j, TrainConfig& t);

// Parse text as JSON; a syntax error becomes an InputError that names `what` and the position.
nlohmann::json parseJson(const std::string& text, const std::string& what);
nlohmann::json readJsonFile(const std::string& path); // InputError when unreadable or malformed

// A Hugging Face transformers config.json (Llama, Mistral, Mixtral, Qwen2, GPT-2, GPT-NeoX, Gemma
// and close relatives) as a ModelSpec. Throws InputError listing missing or invalid fields.
ModelSpec modelFromHuggingFace(const nlohmann::json& config, const std::string& name = {});

} // namespace shardscope
