// Seeded random damage to JSON documents, for the "never anything but InputError" tests.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace shardscope::test {

class JsonMutator {
public:
    explicit JsonMutator(std::uint64_t seed) : rng_(seed) {}

    // The document after one to three structural edits: a key deleted, a value replaced by one
    // of the wrong type or size (NaN and infinity included, which text cannot carry).
    nlohmann::json edit(const nlohmann::json& original) {
        nlohmann::json doc = original;
        const std::uint64_t edits = 1 + below(3);
        for (std::uint64_t i = 0; i < edits; ++i)
            below(3) == 0 ? deleteKey(doc) : replaceValue(doc);
        return doc;
    }

    // Serialized text after structural edits, truncation and flipped bytes, in random measure.
    std::string damage(const nlohmann::json& original) {
        std::string text = below(2) ? edit(original).dump() : original.dump();
        const std::uint64_t edits = 1 + below(2);
        for (std::uint64_t i = 0; i < edits; ++i)
            below(2) ? truncate(text) : flipByte(text);
        return text;
    }

    // Bytes of any value, any length up to maxLength.
    std::string randomBytes(std::size_t maxLength) {
        std::string s(below(maxLength + 1), '\0');
        for (char& c : s)
            c = char(below(256));
        return s;
    }

    // A string of JSON tokens in random order: gets past the first byte far more often than bytes.
    std::string randomTokens(std::size_t maxTokens) {
        static const char* tokens[] = {
            "{",          "}",          "[",       "]",       ":",           ",",  "\"layers\"",
            "\"hidden\"", "\"params\"", "\"gpu\"", "\"moe\"", "1",           "-1", "1e400",
            "0.5",        "null",       "true",    "\"x\"",   "\"\\u0000\"", " "};
        std::string s;
        const std::size_t n = below(maxTokens + 1);
        for (std::size_t i = 0; i < n; ++i)
            s += tokens[below(std::size(tokens))];
        return s;
    }

private:
    std::uint64_t below(std::uint64_t n) {
        return n == 0 ? 0 : std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng_);
    }

    // Pointers to every value in the document, the root included.
    static void collect(const nlohmann::json& j, const nlohmann::json::json_pointer& at,
                        std::vector<nlohmann::json::json_pointer>& out) {
        out.push_back(at);
        if (j.is_object()) {
            for (const auto& [key, value] : j.items())
                collect(value, at / key, out);
        } else if (j.is_array()) {
            for (std::size_t i = 0; i < j.size(); ++i)
                collect(j[i], at / i, out);
        }
    }

    nlohmann::json::json_pointer randomPointer(const nlohmann::json& doc) {
        std::vector<nlohmann::json::json_pointer> all;
        collect(doc, nlohmann::json::json_pointer(), all);
        return all[below(all.size())];
    }

    void deleteKey(nlohmann::json& doc) {
        const auto at = randomPointer(doc);
        if (at.empty())
            return;
        nlohmann::json& parent = doc[at.parent_pointer()];
        if (parent.is_object())
            parent.erase(at.back());
        else if (parent.is_array() && !parent.empty())
            parent.erase(parent.begin() + std::ptrdiff_t(below(parent.size())));
    }

    void replaceValue(nlohmann::json& doc) {
        static const nlohmann::json replacements[] = {
            nullptr,
            "4096",
            "",
            -1,
            0,
            0.5,
            -1e300,
            1e300,
            std::numeric_limits<double>::quiet_NaN(),
            std::numeric_limits<double>::infinity(),
            std::numeric_limits<std::int64_t>::max(),
            std::numeric_limits<std::int64_t>::min(),
            std::numeric_limits<std::uint64_t>::max(),
            2147483648LL,
            true,
            nlohmann::json::array(),
            nlohmann::json::array({1, "a", nullptr}),
            nlohmann::json::object(),
            nlohmann::json::object({{"experts", -3}, {"fp8", "fast"}}),
        };
        doc[randomPointer(doc)] = replacements[below(std::size(replacements))];
    }

    void truncate(std::string& text) { text.resize(below(text.size() + 1)); }

    void flipByte(std::string& text) {
        if (text.empty())
            return;
        const std::size_t at = below(text.size());
        text[at] = below(2) ? char(text[at] ^ char(1 << below(8))) : char(below(256));
    }

    std::mt19937_64 rng_;
};

} // namespace shardscope::test
