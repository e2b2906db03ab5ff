// Token streams the engine trains on, and the batches it draws from them. Every batch is a pure
// function of (seed, split, step, microbatch), so a resumed run reads exactly what an
// uninterrupted one would have read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardscope {

enum class DataFormat {
    Auto,    // from the file: llm.c magic header, else .txt/.text/.md as bytes, else nanoGPT uint16
    NanoGpt, // raw little-endian uint16 tokens (nanoGPT's train.bin / val.bin)
    LlmC,    // llm.c: 256 x int32 header (magic 20240520, version 1, token count), then uint16
    Text,    // any file read as bytes: vocabulary 256
    Synthetic, // no file: a seeded random Markov source with an exactly known entropy rate
};
std::string toString(DataFormat f);                    // "auto", "nanogpt", "llmc", ...
DataFormat dataFormatFromString(const std::string& s); // throws InputError listing the names

enum class Split { Train, Validation };

struct DataSpec {
    DataFormat format = DataFormat::Synthetic;
    std::string path;           // token or text file; empty for Synthetic
    double valFraction = 0.1;   // files: the last fraction of tokens is the validation split
    std::uint64_t seed = 1234;  // batch sampling and the synthetic source
    std::int64_t vocab = 256;   // the model's vocabulary: every token must be below it
    int seqLen = 128;           // tokens per sequence
    int syntheticBranching = 4; // synthetic: successors each token favours
};

// The data file changed under a running job (truncated or rewritten in place): the run ends with
// a checkpoint of its last whole step and this message.
class DataChangedError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A token store: a token file read where batches fall, or the synthetic source.
class Dataset {
public:
    // Opens and checks the data: throws InputError saying what is wrong and how to fix it
    // (missing file, a file too short for one sequence in either split, a token id >= vocab,
    // an llm.c header with the wrong magic or version, a size that is not whole uint16 tokens).
    static std::unique_ptr<Dataset> open(const DataSpec& spec);
    virtual ~Dataset() = default;

    // Fills inputs[batch * seqLen] and targets[batch * seqLen] (targets are inputs shifted by
    // one) for sequence rows [0, batch) of microbatch `micro` of step `step`. Deterministic.
    virtual void batch(Split split, std::int64_t step, int micro, int batch, std::int32_t* inputs,
                       std::int32_t* targets) const = 0;

    // The lowest achievable mean cross-entropy in nats per token, when known (synthetic data:
    // the Markov source's entropy rate, computed exactly from its transition matrix).
    virtual std::optional<double> lossFloor() const = 0;
    // Why the data is no longer what the run opened (a file changed in place), or nothing. A
    // batch read from a changed file throws DataChangedError.
    virtual std::optional<std::string> changedSinceOpened() const { return std::nullopt; }
    virtual std::int64_t tokens(Split split) const = 0; // tokens in the split (synthetic: 0)
    virtual std::int64_t vocab() const = 0;             // largest token id + 1 the data can hold
    virtual std::string describe() const = 0;           // one line for logs and the summary
};

// The synthetic source's dense vocab x vocab transition matrix (row-major, row = current token),
// the same chain Dataset::open builds for `spec`. Lets tests and small experiments check the
// entropy rate independently; throws InputError above 4096 tokens, where it would be too large.
std::vector<double> syntheticTransitions(const DataSpec& spec);

} // namespace shardscope
