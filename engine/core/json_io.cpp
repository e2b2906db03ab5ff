#include "json_io.h"

#include "error.h"
#include "presets.h"
#include "units.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

namespace shardscope {

using nlohmann::json;

namespace {

// Limits past which a value is a typo or a unit mix-up, not a real model or machine.
constexpr std::int64_t kMaxLayers = 100'000;
constexpr std::int64_t kMaxHidden = 1'000'000;
constexpr std::int64_t kMaxHeads = 100'000;
constexpr std::int64_t kMaxFfn = 100'000'000;
constexpr std::int64_t kMaxVocab = 100'000'000;
constexpr std::int64_t kMaxSeqLen = 100'000'000;
constexpr std::int64_t kMaxExperts = 100'000;
constexpr double kMaxParams = 1e15;
constexpr std::int64_t kMaxDegree = 1'000'000;
constexpr std::int64_t kMaxWorld = kMaxWorldSize;
constexpr std::int64_t kMaxBatch = 1'000'000'000;

// "80", "1e+15": bounds in messages read like the numbers a user would type.
std::string plain(double v) {
    char buf[32];
    if (v == std::floor(v) && std::fabs(v) < 1e7)
        std::snprintf(buf, sizeof buf, "%.0f", v);
    else
        std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

// A value as it appears in an error message: numbers as written, anything else with its type.
std::string describe(const json& v) {
    const std::string text = jsonExcerpt(v);
    return v.is_number() || v.is_array() || v.is_object() ? text
                                                          : std::string(v.type_name()) + " " + text;
}

// An integer written as one, or as a float with no fraction ("vocab": 5e4); nullopt otherwise.
std::optional<std::int64_t> asWhole(const json& v) {
    if (v.is_number_unsigned()) {
        const auto u = v.get<std::uint64_t>();
        if (u > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
            return std::nullopt;
        return std::int64_t(u);
    }
    if (v.is_number_integer())
        return v.get<std::int64_t>();
    if (v.is_number_float()) {
        const double d = v.get<double>();
        if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9e18)
            return std::nullopt;
        return std::int64_t(d);
    }
    return std::nullopt;
}

std::string join(const std::vector<std::string>& parts, const char* separator) {
    std::string out;
    for (const std::string& p : parts)
        out += (out.empty() ? "" : separator) + p;
    return out;
}

// Problems found while reading one document; reported together so one edit fixes them all.
class Problems {
public:
    void missing(std::string field) { missing_.push_back(std::move(field)); }
    void invalid(std::string text) { invalid_.push_back(std::move(text)); }
    bool empty() const { return missing_.empty() && invalid_.empty(); }

    void throwIfAny(const std::string& what) const {
        if (empty())
            return;
        std::vector<std::string> parts;
        if (!missing_.empty())
            parts.push_back(std::string(missing_.size() > 1 ? "missing required fields "
                                                            : "missing required field ") +
                            join(missing_, ", "));
        parts.insert(parts.end(), invalid_.begin(), invalid_.end());
        throw InputError(what + ": " + join(parts, "; "));
    }

private:
    std::vector<std::string> missing_, invalid_;
};

struct Bounds {
    double lo, hi;
    bool loExclusive = false;
    std::string text() const {
        return loExclusive ? "a number > " + plain(lo) + " and <= " + plain(hi)
                           : "a number from " + plain(lo) + " to " + plain(hi);
    }
};
enum class Need { Optional, Required };

// Reads the fields of one JSON object. A null field counts as absent. Every getter assigns only
// a valid value and records anything else in the shared Problems.
class Reader {
public:
    Reader(const json* object, Problems& problems, std::string prefix = {})
        : obj_(object), problems_(problems), prefix_(std::move(prefix)) {}

    const json* get(const char* key) const {
        if (!obj_)
            return nullptr;
        const auto it = obj_->find(key);
        return it == obj_->end() || it->is_null() ? nullptr : &*it;
    }
    bool has(const char* key) const { return get(key) != nullptr; }
    std::string field(const char* key) const { return prefix_ + key; }
    Problems& problems() const { return problems_; }

    void invalid(const char* key, const std::string& expected, const json& got) const {
        problems_.invalid(field(key) + ": expected " + expected + ", got " + describe(got));
    }

    template <typename Int>
    bool whole(const char* key, Int& out, std::int64_t lo, std::int64_t hi,
               Need need = Need::Optional) const {
        const json* v = present(key, need);
        if (!v)
            return false;
        const auto n = asWhole(*v);
        if (!n || *n < lo || *n > hi) {
            invalid(key, "a whole number from " + plain(double(lo)) + " to " + plain(double(hi)),
                    *v);
            return false;
        }
        out = Int(*n);
        return true;
    }

    bool unsignedWhole(const char* key, std::uint64_t& out) const {
        const json* v = present(key, Need::Optional);
        if (!v)
            return false;
        if (v->is_number_unsigned()) {
            out = v->get<std::uint64_t>();
            return true;
        }
        const auto n = asWhole(*v);
        if (!n || *n < 0) {
            invalid(key, "a whole number >= 0", *v);
            return false;
        }
        out = std::uint64_t(*n);
        return true;
    }

    // Stores value * scale: files hold GB and TFLOP/s, the structs hold bytes and FLOP/s.
    bool number(const char* key, double& out, const Bounds& b, double scale = 1,
                Need need = Need::Optional) const {
        const json* v = present(key, need);
        if (!v)
            return false;
        const double d = v->is_number() ? v->get<double>() : std::nan("");
        const bool aboveLo = b.loExclusive ? d > b.lo : d >= b.lo;
        if (!v->is_number() || !std::isfinite(d) || !aboveLo || d > b.hi) {
            invalid(key, b.text(), *v);
            return false;
        }
        out = d * scale;
        return true;
    }

    bool boolean(const char* key, bool& out) const {
        const json* v = present(key, Need::Optional);
        if (!v)
            return false;
        if (!v->is_boolean()) {
            invalid(key, "true or false", *v);
            return false;
        }
        out = v->get<bool>();
        return true;
    }

    bool text(const char* key, std::string& out, Need need = Need::Optional) const {
        const json* v = present(key, need);
        if (!v)
            return false;
        if (!v->is_string()) {
            invalid(key, "a string", *v);
            return false;
        }
        out = v->get<std::string>();
        return true;
    }

    // A string naming an enum value; `parse` throws InputError listing the accepted spellings.
    template <typename E>
    bool choice(const char* key, E& out, E (*parse)(const std::string&)) const {
        std::string s;
        if (!text(key, s))
            return false;
        try {
            out = parse(s);
            return true;
        } catch (const InputError& e) {
            problems_.invalid(field(key) + ": " + e.what());
            return false;
        }
    }

    // The nested object under key; reads nothing (and records why) when it is not an object.
    Reader child(const char* key) const {
        const json* v = get(key);
        if (v && !v->is_object()) {
            invalid(key, "an object", *v);
            v = nullptr;
        }
        return Reader(v, problems_, field(key) + ".");
    }

private:
    const json* present(const char* key, Need need) const {
        const json* v = get(key);
        if (!v && need == Need::Required)
            problems_.missing(field(key));
        return v;
    }

    const json* obj_;
    Problems& problems_;
    std::string prefix_;
};

void requireObject(const json& j, const std::string& what) {
    if (!j.is_object())
        throw InputError(what + ": expected a JSON object, got " + describe(j));
}

// "model 'Llama 3 8B'": names the document in messages when it has a readable name.
std::string titled(const json& j, const char* kind) {
    for (const char* key : {"name", "id"}) {
        const auto it = j.find(key);
        if (it != j.end() && it->is_string() && !it->get_ref<const std::string&>().empty())
            return std::string(kind) + " '" + it->get<std::string>() + "'";
    }
    return kind;
}

template <typename E, std::size_t N>
E enumFromString(const std::string& s, const E (&values)[N], const char* what) {
    std::string lower = s;
    for (char& c : lower)
        c = char(std::tolower(static_cast<unsigned char>(c)));
    std::string known;
    for (E v : values) {
        if (lower == toString(v))
            return v;
        known += (known.empty() ? "" : ", ") + toString(v);
    }
    throw InputError("unknown " + std::string(what) + " '" + s + "'; expected one of " + known);
}

Norm normFromString(const std::string& s) {
    static constexpr Norm all[] = {Norm::RmsNorm, Norm::LayerNorm};
    return enumFromString(s, all, "norm");
}
PositionEmbedding positionsFromString(const std::string& s) {
    static constexpr PositionEmbedding all[] = {PositionEmbedding::Rope,
                                                PositionEmbedding::Learned};
    return enumFromString(s, all, "position embedding");
}

// ---- model --------------------------------------------------------------------------------

constexpr const char* kArchitectureKeys[] = {"layers",   "hidden",     "heads", "kv_heads",
                                             "head_dim", "ffn_hidden", "vocab"};

void readModelArchitecture(const Reader& r, ModelSpec& m) {
    const Need req = Need::Required;
    r.whole("layers", m.layers, 1, kMaxLayers, req);
    r.whole("hidden", m.hidden, 1, kMaxHidden, req);
    const bool haveHeads = r.whole("heads", m.heads, 1, kMaxHeads, req);
    r.whole("ffn_hidden", m.ffnHidden, 1, kMaxFfn, req);
    r.whole("vocab", m.vocab, 1, kMaxVocab, req);
    // Multi-head attention unless told otherwise.
    if (!r.whole("kv_heads", m.kvHeads, 1, kMaxHeads))
        m.kvHeads = m.heads;
    r.whole("head_dim", m.headDim, 0, kMaxHidden); // 0: hidden / heads

    r.choice("activation", m.activation, activationFromString);
    r.choice("norm", m.norm, normFromString);
    r.choice("positions", m.positions, positionsFromString);
    r.boolean("tied_embeddings", m.tiedEmbeddings);
    r.boolean("attention_bias", m.attentionBias);
    r.boolean("output_bias", m.outputBias);
    r.boolean("mlp_bias", m.mlpBias);
    r.boolean("dropout", m.dropout);

    const Reader moe = r.child("moe");
    moe.whole("experts", m.moe.experts, 0, kMaxExperts);
    moe.whole("top_k", m.moe.topK, 0, kMaxExperts);
    moe.whole("shared_experts", m.moe.sharedExperts, 0, kMaxExperts);
    moe.whole("expert_ffn", m.moe.expertFfn, 0, kMaxFfn);
    moe.whole("first_dense_layers", m.moe.firstDenseLayers, 0, kMaxLayers);

    r.whole("mtp_modules", m.mtpModules, 0, 64);

    r.number("rope_theta", m.ropeTheta, {1, 1e12, true});
    r.number("norm_eps", m.normEps, {0, 0.1, true});
    const Reader scaling = r.child("rope_scaling");
    // A scaling names its type: without it the factors would be read and then ignored.
    const bool scaled = r.has("rope_scaling") && r.get("rope_scaling")->is_object();
    scaling.text("type", m.ropeScaling.type, scaled ? Need::Required : Need::Optional);
    scaling.number("factor", m.ropeScaling.factor, {0, 1e6, true});
    scaling.number("low_freq_factor", m.ropeScaling.lowFreqFactor, {0, 1e6, true});
    scaling.number("high_freq_factor", m.ropeScaling.highFreqFactor, {0, 1e6, true});
    scaling.whole("original_max_position_embeddings", m.ropeScaling.originalMaxPositions, 1,
                  kMaxSeqLen);

    const Reader mla = r.child("mla");
    mla.whole("q_lora_rank", m.mla.qLoraRank, 0, kMaxHidden);
    mla.whole("kv_lora_rank", m.mla.kvLoraRank, 0, kMaxHidden);
    mla.whole("qk_nope_head_dim", m.mla.qkNopeHeadDim, 0, kMaxHidden);
    mla.whole("qk_rope_head_dim", m.mla.qkRopeHeadDim, 0, kMaxHidden);
    mla.whole("v_head_dim", m.mla.vHeadDim, 0, kMaxHidden);

    // Relations between fields, checked only when the fields themselves were valid.
    Problems& p = r.problems();
    if (haveHeads && m.kvHeads > 0 && (m.kvHeads > m.heads || m.heads % m.kvHeads != 0))
        p.invalid("kv_heads: " + std::to_string(m.kvHeads) + " must divide heads (" +
                  std::to_string(m.heads) + "); use " + std::to_string(m.heads) +
                  " for multi-head attention or a divisor for grouped-query attention");
    if (haveHeads && m.headDim == 0 && !m.mla.enabled() && m.hidden > 0 && m.hidden % m.heads != 0)
        p.invalid("head_dim: hidden (" + std::to_string(m.hidden) +
                  ") is not divisible by heads (" + std::to_string(m.heads) +
                  "); give head_dim explicitly");
    if (m.ropeScaling.isLlama3() && m.ropeScaling.highFreqFactor <= m.ropeScaling.lowFreqFactor)
        p.invalid("rope_scaling: Llama 3 scaling needs high_freq_factor above low_freq_factor, "
                  "got " +
                  std::to_string(m.ropeScaling.highFreqFactor) + " and " +
                  std::to_string(m.ropeScaling.lowFreqFactor));
    if (m.moe.experts > 0 && (m.moe.topK < 1 || m.moe.topK > m.moe.experts))
        p.invalid("moe.top_k: expected a whole number from 1 to moe.experts (" +
                  std::to_string(m.moe.experts) + "), got " + std::to_string(m.moe.topK));
    if (m.moe.experts == 0 &&
        (m.moe.topK > 0 || m.moe.sharedExperts > 0 || m.moe.firstDenseLayers > 0))
        p.invalid("moe.experts: expected a whole number >= 1 when moe.top_k, "
                  "moe.shared_experts or moe.first_dense_layers is set, got 0");
    if (m.mla.enabled()) {
        if (m.mla.qkHeadDim() < 1 || m.mla.vHeadDim < 1)
            p.invalid("mla: expected qk_nope_head_dim + qk_rope_head_dim >= 1 and v_head_dim >= 1 "
                      "for multi-head latent attention, got " +
                      std::to_string(m.mla.qkHeadDim()) + " and " + std::to_string(m.mla.vHeadDim));
        if (haveHeads && m.kvHeads != m.heads)
            p.invalid("kv_heads: multi-head latent attention up-projects keys and values for "
                      "every head, so kv_heads must equal heads (" +
                      std::to_string(m.heads) + "), got " + std::to_string(m.kvHeads));
        if (m.attentionBias)
            p.invalid("attention_bias: multi-head latent attention is modelled without biases; "
                      "set it false");
    } else if (m.mla.qLoraRank > 0 || m.mla.qkHeadDim() > 0 || m.mla.vHeadDim > 0) {
        p.invalid("mla.kv_lora_rank: expected a whole number >= 1 when other mla fields are set, "
                  "got 0");
    }
    if (m.moe.experts > 0 && m.layers > 0 && m.moe.firstDenseLayers >= m.layers)
        p.invalid("moe.first_dense_layers: expected fewer than layers (" +
                  std::to_string(m.layers) + ") so that some layers have experts, got " +
                  std::to_string(m.moe.firstDenseLayers) + "; for a dense model leave out moe");
}

} // namespace

Activation activationFromString(const std::string& s) {
    static constexpr Activation all[] = {Activation::Gelu, Activation::SwiGlu, Activation::GeGlu};
    return enumFromString(s, all, "activation");
}

void to_json(json& j, const ModelSpec& m) {
    j = json{{"id", m.id}, {"name", m.name}, {"family", m.family}};
    if (m.isBare()) {
        j["params"] = *m.bareParams;
    } else {
        j["layers"] = m.layers;
        j["hidden"] = m.hidden;
        j["heads"] = m.heads;
        if (m.kvHeads > 0)
            j["kv_heads"] = m.kvHeads;
        j["head_dim"] = m.headDim;
        j["ffn_hidden"] = m.ffnHidden;
        j["vocab"] = m.vocab;
        j["tied_embeddings"] = m.tiedEmbeddings;
        j["activation"] = toString(m.activation);
        j["norm"] = toString(m.norm);
        j["positions"] = toString(m.positions);
        j["attention_bias"] = m.attentionBias;
        j["output_bias"] = m.outputBias;
        j["mlp_bias"] = m.mlpBias;
        j["dropout"] = m.dropout;
        if (m.moe.enabled() || m.moe.topK || m.moe.sharedExperts || m.moe.expertFfn)
            j["moe"] = {{"experts", m.moe.experts},
                        {"top_k", m.moe.topK},
                        {"shared_experts", m.moe.sharedExperts},
                        {"expert_ffn", m.moe.expertFfn},
                        {"first_dense_layers", m.moe.firstDenseLayers}};
        if (m.mtpModules > 0)
            j["mtp_modules"] = m.mtpModules;
        j["rope_theta"] = m.ropeTheta;
        j["norm_eps"] = m.normEps;
        if (m.ropeScaling.enabled())
            j["rope_scaling"] = {
                {"type", m.ropeScaling.type},
                {"factor", m.ropeScaling.factor},
                {"low_freq_factor", m.ropeScaling.lowFreqFactor},
                {"high_freq_factor", m.ropeScaling.highFreqFactor},
                {"original_max_position_embeddings", m.ropeScaling.originalMaxPositions}};
        if (m.mla.enabled() || m.mla.qLoraRank || m.mla.qkHeadDim() || m.mla.vHeadDim)
            j["mla"] = {{"q_lora_rank", m.mla.qLoraRank},
                        {"kv_lora_rank", m.mla.kvLoraRank},
                        {"qk_nope_head_dim", m.mla.qkNopeHeadDim},
                        {"qk_rope_head_dim", m.mla.qkRopeHeadDim},
                        {"v_head_dim", m.mla.vHeadDim}};
    }
    // Zero means "not known" for these; leaving them out keeps that meaning on the way back.
    if (m.seqLen > 0)
        j["seq_len"] = m.seqLen;
    if (m.maxPositions > 0 && !m.isBare())
        j["max_positions"] = m.maxPositions;
    j["published_params"] = m.publishedParams;
    j["source"] = m.source;
}

void from_json(const json& j, ModelSpec& out) {
    const std::string what = j.is_object() ? titled(j, "model") : "model";
    requireObject(j, what);
    Problems problems;
    const Reader r(&j, problems);
    ModelSpec m;
    r.text("id", m.id);
    r.text("name", m.name);
    r.text("family", m.family);
    r.text("source", m.source);
    r.number("published_params", m.publishedParams, {0, kMaxParams});
    r.whole("seq_len", m.seqLen, 1, kMaxSeqLen);

    bool hasArchitecture = false;
    for (const char* key : kArchitectureKeys)
        hasArchitecture = hasArchitecture || r.has(key);

    if (r.has("params") && hasArchitecture) {
        problems.invalid("params: a bare parameter count cannot be combined with an architecture "
                         "(layers, hidden, ...); give one or the other");
    } else if (r.has("params")) {
        double params = 0;
        if (r.number("params", params, {0, kMaxParams, true}))
            m.bareParams = params;
    } else {
        r.whole("max_positions", m.maxPositions, 1, kMaxSeqLen);
        readModelArchitecture(r, m);
        // Each length stands in for the other when only one is given (same cap as the HF import).
        if (m.maxPositions == 0)
            m.maxPositions = m.seqLen;
        if (m.seqLen == 0)
            m.seqLen = std::min(m.maxPositions, 8192);
    }

    if (problems.empty() && !m.isBare()) {
        const double total = countParameters(m).total;
        if (!(total <= kMaxParams))
            problems.invalid("the architecture has " + plain(total) +
                             " parameters, more than the " + plain(kMaxParams) +
                             " this tool accepts; check layers, hidden, ffn_hidden and vocab");
    }
    problems.throwIfAny(what);
    out = std::move(m);
}

// ---- GPU ----------------------------------------------------------------------------------

namespace {

struct PrecisionKey {
    Precision precision;
    const char* key;
};
constexpr PrecisionKey kPeakKeys[] = {{Precision::Fp32, "fp32"},
                                      {Precision::Tf32, "tf32"},
                                      {Precision::Bf16, "bf16"},
                                      {Precision::Fp16, "fp16"},
                                      {Precision::Fp8, "fp8"}};

void readGpu(const Reader& r, GpuSpec& g) {
    r.text("id", g.id);
    r.text("name", g.name);
    r.text("vendor", g.vendor);
    r.number("memory_gb", g.memoryBytes, {0, 1e6, true}, GB, Need::Required);
    r.number("hbm_bandwidth_gbps", g.hbmBandwidth, {0, 1e6, true}, GB, Need::Required);
    r.number("nvlink_bandwidth_gbps", g.nvlinkBandwidth, {0, 1e6}, GB);
    r.number("network_gbps", g.networkBandwidth, {0, 1e6}, GB); // 0: not given
    r.whole("sms", g.sms, 0, 1'000'000);
    // Datasheets print compute capability as a number, so accept "9.0" and 9.0 alike.
    if (const json* cc = r.get("compute_capability"); cc && cc->is_number()) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f", cc->get<double>());
        g.computeCapability = buf;
    } else {
        r.text("compute_capability", g.computeCapability);
    }

    if (!r.has("peak_tflops"))
        r.problems().missing(r.field("peak_tflops"));
    const Reader peaks = r.child("peak_tflops");
    for (const auto& [precision, key] : kPeakKeys) {
        double flops = 0;
        if (peaks.number(key, flops, {0, 1e7}, TFLOPS))
            g.peakFlops[precision] = flops;
    }
    // Fp8 falls back through every other precision, so this asks "is any peak given?".
    if (r.has("peak_tflops") && r.get("peak_tflops")->is_object() && g.peak(Precision::Fp8) <= 0)
        r.problems().invalid(r.field("peak_tflops") +
                             ": expected at least one of fp32, tf32, bf16, fp16, fp8 above 0");

    if (r.has("matmul_ceiling")) {
        const Reader ceilings = r.child("matmul_ceiling");
        for (const auto& [precision, key] : kPeakKeys) {
            double fraction = 0;
            if (ceilings.number(key, fraction, {0, 1, true}))
                g.matmulCeiling[precision] = fraction;
        }
    }
    if (const json* match = r.get("match")) {
        if (!match->is_array())
            r.invalid("match", "an array of strings", *match);
        else
            for (const json& name : *match) {
                if (name.is_string())
                    g.matchNames.push_back(name.get<std::string>());
                else
                    r.invalid("match", "an array of strings, each a device name fragment", name);
            }
    }
    if (const json* sources = r.get("sources")) {
        if (!sources->is_object())
            r.invalid("sources", "an object of field name -> source", *sources);
        else
            for (const auto& [key, value] : sources->items()) {
                if (value.is_string())
                    g.sources[key] = value.get<std::string>();
                else
                    r.invalid("sources", "string values", value);
            }
    }
}

json gpuJson(const GpuSpec& g) {
    json peaks = json::object();
    for (const auto& [precision, key] : kPeakKeys) {
        if (const auto it = g.peakFlops.find(precision); it != g.peakFlops.end())
            peaks[key] = it->second / TFLOPS;
    }
    json ceilings = json::object();
    for (const auto& [precision, key] : kPeakKeys)
        if (const auto it = g.matmulCeiling.find(precision); it != g.matmulCeiling.end())
            ceilings[key] = it->second;
    return json{{"id", g.id},
                {"name", g.name},
                {"vendor", g.vendor},
                {"memory_gb", g.memoryBytes / GB},
                {"hbm_bandwidth_gbps", g.hbmBandwidth / GB},
                {"nvlink_bandwidth_gbps", g.nvlinkBandwidth / GB},
                {"network_gbps", g.networkBandwidth / GB},
                {"sms", g.sms},
                {"compute_capability", g.computeCapability},
                {"peak_tflops", peaks},
                {"matmul_ceiling", ceilings},
                {"match", g.matchNames},
                {"sources", g.sources}};
}

} // namespace

void to_json(json& j, const GpuSpec& g) {
    j = gpuJson(g);
}

void from_json(const json& j, GpuSpec& out) {
    const std::string what = j.is_object() ? titled(j, "GPU") : "GPU";
    requireObject(j, what);
    Problems problems;
    GpuSpec g;
    readGpu(Reader(&j, problems), g);
    problems.throwIfAny(what);
    out = std::move(g);
}

// ---- cluster ------------------------------------------------------------------------------

void to_json(json& j, const ClusterSpec& c) {
    j = json{{"gpu", gpuJson(c.gpu)},
             {"gpus_per_node", c.gpusPerNode},
             {"nodes", c.nodes},
             {"intra_bandwidth_gbps", c.intraBandwidth / GB},
             {"intra_latency_us", c.intraLatency / 1e-6},
             {"inter_bandwidth_gbps", c.interBandwidth / GB},
             {"inter_latency_us", c.interLatency / 1e-6},
             {"gpu_mtbf_hours", c.gpuMtbfHours},
             {"checkpoint_bandwidth_gbps", c.checkpointBandwidth / GB},
             {"restart_seconds", c.restartSeconds},
             {"gpu_hour_cost", c.gpuHourCost}};
}

void from_json(const json& j, ClusterSpec& out) {
    requireObject(j, "cluster");
    Problems problems;
    const Reader r(&j, problems);
    GpuSpec gpu;
    if (const json* g = r.get("gpu"); !g) {
        problems.missing("gpu");
    } else if (g->is_string()) {
        try {
            gpu = findGpuPreset(g->get<std::string>());
        } catch (const InputError& e) {
            problems.invalid(std::string("gpu: ") + e.what());
        }
    } else if (g->is_object()) {
        readGpu(r.child("gpu"), gpu);
    } else {
        r.invalid("gpu", "a GPU object or the name of a GPU preset", *g);
    }
    int gpusPerNode = 8, nodes = 1;
    r.whole("gpus_per_node", gpusPerNode, 1, kMaxDegree);
    r.whole("nodes", nodes, 1, kMaxDegree);
    if (std::int64_t(gpusPerNode) * nodes > kMaxWorld)
        problems.invalid("nodes: " + std::to_string(nodes) + " nodes x " +
                         std::to_string(gpusPerNode) + " GPUs is more than " +
                         plain(double(kMaxWorld)) + " GPUs");

    // Unset links default as in makeCluster: NVLink inside a node, the GPU's network across.
    ClusterSpec c = makeCluster(gpu, gpusPerNode, nodes);
    r.number("intra_bandwidth_gbps", c.intraBandwidth, {0, 1e6}, GB);
    r.number("intra_latency_us", c.intraLatency, {0, 1e9}, 1e-6);
    r.number("inter_bandwidth_gbps", c.interBandwidth, {0, 1e6, true}, GB);
    r.number("inter_latency_us", c.interLatency, {0, 1e9}, 1e-6);
    r.number("gpu_mtbf_hours", c.gpuMtbfHours, {0, 1e12, true});
    r.number("checkpoint_bandwidth_gbps", c.checkpointBandwidth, {0, 1e9, true}, GB);
    r.number("restart_seconds", c.restartSeconds, {0, 1e9});
    r.number("gpu_hour_cost", c.gpuHourCost, {0, 1e9});
    problems.throwIfAny("cluster");
    out = std::move(c);
}

// ---- parallel layout ----------------------------------------------------------------------

namespace {

// A named policy writes back as its name, so that a file says what precisionPolicyFromString
// reads.
json policyJson(const PrecisionPolicy& p) {
    for (const NamedPrecisionPolicy& named : namedPrecisionPolicies()) {
        if (p == named.policy)
            return named.key;
    }
    // Any other combination is written out field by field.
    json j{{"compute", toString(p.compute)},
           {"grads", toString(p.grads)},
           {"fp32_master", p.fp32Master && !p.autocastsWeights()}};
    if (p.compute == Precision::Fp8 && p.fp8Params)
        j["fp8_params"] = true;
    if (p.autocastsWeights())
        j["fp32_weights"] = true;
    return j;
}

void readPolicy(const Reader& r, PrecisionPolicy& p) {
    const json* v = r.get("precision");
    if (!v)
        return;
    if (v->is_object()) {
        const Reader fields = r.child("precision");
        fields.choice("compute", p.compute, precisionFromString);
        fields.choice("grads", p.grads, precisionFromString);
        fields.boolean("fp32_master", p.fp32Master);
        fields.boolean("fp8_params", p.fp8Params);
        if (p.fp8Params && p.compute != Precision::Fp8)
            r.problems().invalid(
                fields.field("fp8_params") + ": FP8 weights need \"compute\": \"fp8\", got \"" +
                toString(p.compute) + "\"; set compute to fp8 or fp8_params to false");
        fields.boolean("fp32_weights", p.fp32Weights);
        if (p.fp32Weights && p.compute != Precision::Bf16)
            r.problems().invalid(
                fields.field("fp32_weights") +
                ": autocast over fp32 weights needs \"compute\": \"bf16\", got \"" +
                toString(p.compute) + "\"; set compute to bf16 or fp32_weights to false");
    } else {
        r.choice("precision", p, precisionPolicyFromString);
    }
}

} // namespace

void to_json(json& j, const ParallelConfig& p) {
    j = json{{"dp", p.dp},
             {"tp", p.tp},
             {"pp", p.pp},
             {"vpp", p.vpp},
             {"cp", p.cp},
             {"ep", p.ep},
             {"etp", p.etp},
             {"expert_capacity_factor", p.expertCapacityFactor},
             {"zero", p.zero},
             {"shard_group", p.shardGroup},
             {"sequence_parallel", p.sequenceParallel},
             {"schedule", toString(p.schedule)},
             {"micro_batch", p.microBatch},
             {"global_batch", p.globalBatch},
             {"recompute", toString(p.recompute)},
             {"recompute_layers", p.recomputeLayers},
             {"precision", policyJson(p.precision)},
             {"optimizer", toString(p.optimizer)},
             {"offload_optimizer", p.offloadOptimizer},
             {"flash_attention", p.flashAttention},
             {"attention_kernel", toString(p.attentionKernel)},
             {"fused_elementwise", p.fusedElementwise},
             {"overlap_grad_reduce", p.overlapGradReduce},
             {"overlap_param_gather", p.overlapParamGather},
             {"backward_prefetch", toString(p.backwardPrefetch)},
             {"tp_comm_overlap", p.tpCommOverlap},
             {"ep_comm_overlap", p.epCommOverlap},
             {"embedding_in_pipeline_split", p.embeddingInPipelineSplit},
             {"loss_in_pipeline_split", p.lossInPipelineSplit}};
}

void from_json(const json& j, ParallelConfig& out) {
    requireObject(j, "parallel config");
    Problems problems;
    const Reader r(&j, problems);
    ParallelConfig p;
    r.whole("dp", p.dp, 1, kMaxDegree);
    r.whole("tp", p.tp, 1, kMaxDegree);
    r.whole("pp", p.pp, 1, kMaxDegree);
    r.whole("vpp", p.vpp, 1, kMaxDegree);
    r.whole("cp", p.cp, 1, kMaxDegree);
    r.whole("ep", p.ep, 1, kMaxDegree);
    r.whole("etp", p.etp, 0, kMaxDegree); // 0: follows tp
    r.number("expert_capacity_factor", p.expertCapacityFactor, {0, double(kMaxExperts)});
    if (std::int64_t(p.dp) * p.tp * p.pp * p.cp > kMaxWorld)
        problems.invalid("dp*tp*pp*cp = " + plain(double(std::int64_t(p.dp) * p.tp * p.pp * p.cp)) +
                         " GPUs is more than " + plain(double(kMaxWorld)));
    r.whole("zero", p.zero, 0, 3);
    r.whole("shard_group", p.shardGroup, 0, kMaxDegree);
    r.boolean("sequence_parallel", p.sequenceParallel);
    r.choice("schedule", p.schedule, scheduleFromString);
    r.whole("micro_batch", p.microBatch, 1, kMaxBatch);
    r.whole("global_batch", p.globalBatch, 1, kMaxBatch);
    // microbatches() multiplies these two in int.
    if (std::int64_t(p.microBatch) * p.dp > kMaxBatch)
        problems.invalid(
            "micro_batch: micro_batch*dp = " + plain(double(std::int64_t(p.microBatch) * p.dp)) +
            " sequences per step is more than " + plain(double(kMaxBatch)));
    r.choice("recompute", p.recompute, recomputeFromString);
    r.whole("recompute_layers", p.recomputeLayers, 0, kMaxLayers); // 0: every layer
    readPolicy(r, p.precision);
    r.choice("optimizer", p.optimizer, optimizerFromString);
    r.boolean("offload_optimizer", p.offloadOptimizer);
    r.boolean("flash_attention", p.flashAttention);
    r.choice("attention_kernel", p.attentionKernel, attentionKernelFromString);
    r.boolean("fused_elementwise", p.fusedElementwise);
    r.boolean("overlap_grad_reduce", p.overlapGradReduce);
    r.boolean("overlap_param_gather", p.overlapParamGather);
    r.choice("backward_prefetch", p.backwardPrefetch, backwardPrefetchFromString);
    r.boolean("tp_comm_overlap", p.tpCommOverlap);
    r.boolean("ep_comm_overlap", p.epCommOverlap);
    r.boolean("embedding_in_pipeline_split", p.embeddingInPipelineSplit);
    r.boolean("loss_in_pipeline_split", p.lossInPipelineSplit);
    problems.throwIfAny("parallel config");
    out = p;
}

// ---- training run -------------------------------------------------------------------------

void to_json(json& j, const TrainConfig& t) {
    j = json{{"train_tokens", t.trainTokens},
             {"steps", t.steps},
             {"learning_rate", t.learningRate},
             {"weight_decay", t.weightDecay},
             {"seed", t.seed},
             {"data_path", t.dataPath},
             {"warmup_steps", t.warmupSteps},
             {"min_learning_rate", t.minLearningRate},
             {"grad_clip", t.gradClip},
             {"beta1", t.beta1},
             {"beta2", t.beta2},
             {"epsilon", t.epsilon},
             {"data_format", t.dataFormat},
             {"val_fraction", t.valFraction},
             {"eval_every", t.evalEvery},
             {"eval_batches", t.evalBatches},
             {"checkpoint_every", t.checkpointEvery},
             {"keep_checkpoints", t.keepCheckpoints}};
}

void from_json(const json& j, TrainConfig& out) {
    requireObject(j, "training config");
    Problems problems;
    const Reader r(&j, problems);
    TrainConfig t;
    r.number("train_tokens", t.trainTokens, {0, 1e18});
    r.whole("steps", t.steps, 0, 1'000'000'000'000);
    r.number("learning_rate", t.learningRate, {0, 1e3});
    r.number("weight_decay", t.weightDecay, {0, 1e3});
    r.unsignedWhole("seed", t.seed);
    r.text("data_path", t.dataPath);
    r.whole("warmup_steps", t.warmupSteps, 0, 1'000'000'000'000);
    r.number("min_learning_rate", t.minLearningRate, {0, 1e3});
    r.number("grad_clip", t.gradClip, {0, 1e9});
    r.number("beta1", t.beta1, {0, 0.999999});
    r.number("beta2", t.beta2, {0, 0.999999999});
    r.number("epsilon", t.epsilon, {0, 1, true});
    r.text("data_format", t.dataFormat);
    r.number("val_fraction", t.valFraction, {0, 0.5});
    r.whole("eval_every", t.evalEvery, 0, 1'000'000'000'000);
    r.whole("eval_batches", t.evalBatches, 1, 1'000'000);
    r.whole("checkpoint_every", t.checkpointEvery, 0, 1'000'000'000'000);
    r.whole("keep_checkpoints", t.keepCheckpoints, 1, 1'000'000);
    problems.throwIfAny("training config");
    out = std::move(t);
}

// ---- text and files -----------------------------------------------------------------------

std::size_t jsonNestingDepth(std::string_view text) {
    std::size_t depth = 0, deepest = 0;
    bool inString = false, escaped = false;
    for (const char c : text) {
        if (inString) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                inString = false;
            continue;
        }
        if (c == '"')
            inString = true;
        else if (c == '{' || c == '[')
            deepest = std::max(deepest, ++depth);
        else if (c == '}' || c == ']')
            depth -= depth > 0 ? 1 : 0;
    }
    return deepest;
}

std::string jsonExcerpt(const json& v) {
    constexpr std::size_t kChars = 40;
    switch (v.type()) {
    case json::value_t::array:
        return "an array of " + std::to_string(v.size());
    case json::value_t::object:
        return "an object of " + std::to_string(v.size()) + (v.size() == 1 ? " field" : " fields");
    case json::value_t::string: {
        const auto& s = v.get_ref<const std::string&>();
        const json cut = s.size() > kChars ? s.substr(0, kChars) : s;
        std::string text = cut.dump(-1, ' ', false, json::error_handler_t::replace);
        if (s.size() > kChars)
            text.insert(text.size() - 1, "...");
        return text;
    }
    default: // a scalar: nothing to walk into
        return v.dump(-1, ' ', false, json::error_handler_t::replace);
    }
}

json parseJson(const std::string& text, const std::string& what) {
    if (const std::size_t depth = jsonNestingDepth(text); depth > kMaxJsonDepth)
        throw InputError(what + ": arrays and objects nest " + std::to_string(depth) +
                         " levels deep, more than the " + std::to_string(kMaxJsonDepth) +
                         " a Shardscope document can have; is this the right file?");
    // nlohmann's messages open with a tag ("[json.exception.parse_error.101] "): users get the
    // description without it.
    const auto untagged = [](std::string detail) {
        if (const auto end = detail.find("] "); detail.starts_with("[json.") && end != detail.npos)
            detail.erase(0, end + 2);
        return detail;
    };
    try {
        return json::parse(text);
    } catch (const json::parse_error& e) {
        throw InputError(what + ": not valid JSON at byte " + std::to_string(e.byte) + ": " +
                         untagged(e.what()));
    } catch (const json::exception& e) { // a number beyond a double's range, say
        throw InputError(what + ": not valid JSON: " + untagged(e.what()));
    }
}

json readJsonFile(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        throw InputError("cannot open " + path + ": it is a directory");
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw InputError("cannot open " + path + ": " + std::strerror(errno));
    std::string text;
    char buffer[65536];
    while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
        text.append(buffer, std::size_t(in.gcount()));
        if (text.size() > kMaxJsonFileBytes)
            throw InputError(path + " is larger than " + std::to_string(kMaxJsonFileBytes >> 20) +
                             " MiB, far more than any config.json, session or run config; is "
                             "this the right file?");
    }
    if (in.bad())
        throw InputError("cannot read " + path + ": " + std::strerror(errno));
    return parseJson(text, path);
}

} // namespace shardscope
