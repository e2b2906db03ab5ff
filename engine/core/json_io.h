// JSON round trip of the shared types, and the Hugging Face config.json import.
#pragma once

#include "cluster_spec.h"
#include "model_spec.h"
#include "parallel_config.h"
#include "train_config.h"

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace shardscope {

// to_json/from_json overloads let nlohmann::json convert the types directly. from_json throws
// InputError naming the offending field and what was expected (every problem of a document in one
// message). Fields are snake_case; sizes are GB, bandwidths GB/s, peaks TFLOP/s, latencies us.
// Absent or null optional fields keep the struct defaults, except: a model's kv_heads defaults to
// heads, and a model with only one of seq_len / max_positions takes the other from it (seq_len
// capped at 8192); a cluster's intra_bandwidth_gbps defaults to the GPU's NVLink bandwidth and
// inter_bandwidth_gbps to the GPU's network_gbps (50 GB/s when it has none), as in makeCluster. A
// model written as {"params": N} with no architecture fields is a bare model.
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

// How deep arrays and objects nest in JSON text, counted over the characters (strings skipped)
// before anything is built from it: a document too deep to walk safely is refused unread.
std::size_t jsonNestingDepth(std::string_view text);
// Deeper than any config, session, manifest or preset nests (they nest 3 or 4 levels).
inline constexpr std::size_t kMaxJsonDepth = 64;

// Parse text as JSON; a syntax error becomes an InputError that names `what` and the position,
// and so does nesting deeper than kMaxJsonDepth or a number beyond a double's range.
nlohmann::json parseJson(const std::string& text, const std::string& what);
// Larger than any config, session or manifest (they are kilobytes): refused, not read on.
inline constexpr std::size_t kMaxJsonFileBytes = std::size_t(64) << 20;
// InputError when unreadable, malformed or larger than kMaxJsonFileBytes (/dev/zero, a FIFO
// that never ends and a huge file are refused after that many bytes).
nlohmann::json readJsonFile(const std::string& path);

// A Hugging Face transformers config.json (Llama, Mistral, Mixtral, Qwen2, GPT-2, GPT-NeoX, Gemma
// and close relatives) as a ModelSpec. Throws InputError listing missing or invalid fields.
// Fields the config leaves out take the transformers defaults of its model_type; an unknown
// model_type is read as a Llama-like decoder. seqLen is max_position_embeddings capped at 8192
// (training rarely uses a model's full context); callers set seqLen afterwards to train at
// another length. name defaults to "_name_or_path", then to model_type; family is model_type.
ModelSpec modelFromHuggingFace(const nlohmann::json& config, const std::string& name = {});

// The name a config.json read from `path` goes by: its "_name_or_path" (the last part of it when
// that is a local path, "/ckpt/llama-3-8b" -> "llama-3-8b"; at the top or under text_config),
// else the folder holding a file called config.json ("Llama-3-8B/config.json" -> "Llama-3-8B"),
// else the file's name without ".json"; empty when there is none of these, so the model_type
// names it.
std::string huggingFaceModelName(const nlohmann::json& config, const std::string& path);

// A value as an error message quotes it, made without walking into it: a number or boolean as
// written, a string's first 40 characters, an array or object by its size ("an array of 3",
// "an object of 2 fields").
std::string jsonExcerpt(const nlohmann::json& v);

} // namespace shardscope
