#include "core/error.h"
#include "runtime/data.h"
#include "support/temp_dir.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <random>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

namespace shardscope {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

void writeBytes(const std::string& path, const std::vector<unsigned char>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
}

void appendLe16(std::vector<unsigned char>& bytes, std::uint32_t v) {
    bytes.push_back(static_cast<unsigned char>(v & 0xffu));
    bytes.push_back(static_cast<unsigned char>((v >> 8) & 0xffu));
}

void appendLe32(std::vector<unsigned char>& bytes, std::int32_t value) {
    const auto v = static_cast<std::uint32_t>(value);
    for (int shift = 0; shift < 32; shift += 8)
        bytes.push_back(static_cast<unsigned char>((v >> shift) & 0xffu));
}

std::vector<unsigned char> le16Tokens(const std::vector<std::uint32_t>& tokens) {
    std::vector<unsigned char> bytes;
    for (const std::uint32_t t : tokens)
        appendLe16(bytes, t);
    return bytes;
}

// 0, 1, 2, ...: a window's first input names its offset, which makes every read checkable.
std::vector<std::uint32_t> ramp(std::uint32_t n, std::uint32_t first = 0) {
    std::vector<std::uint32_t> t(n);
    for (std::uint32_t i = 0; i < n; ++i)
        t[i] = first + i;
    return t;
}

std::vector<unsigned char> llmcFile(const std::vector<std::uint32_t>& tokens,
                                    std::int32_t magic = 20240520, std::int32_t version = 1,
                                    std::int64_t declared = -1) {
    std::vector<unsigned char> bytes;
    appendLe32(bytes, magic);
    appendLe32(bytes, version);
    appendLe32(bytes, static_cast<std::int32_t>(
                          declared >= 0 ? declared : static_cast<std::int64_t>(tokens.size())));
    while (bytes.size() < 1024)
        appendLe32(bytes, 0);
    for (const std::uint32_t t : tokens)
        appendLe16(bytes, t);
    return bytes;
}

DataSpec fileSpec(const std::string& path, DataFormat format, int seqLen = 16,
                  std::int64_t vocab = 50304) {
    DataSpec s;
    s.format = format;
    s.path = path;
    s.seqLen = seqLen;
    s.vocab = vocab;
    return s;
}

struct Batch {
    std::vector<std::int32_t> inputs;
    std::vector<std::int32_t> targets;
    bool operator==(const Batch&) const = default;
};

Batch draw(const Dataset& d, int seqLen, Split split, std::int64_t step, int micro, int rows) {
    Batch b{std::vector<std::int32_t>(static_cast<std::size_t>(rows * seqLen)),
            std::vector<std::int32_t>(static_cast<std::size_t>(rows * seqLen))};
    d.batch(split, step, micro, rows, b.inputs.data(), b.targets.data());
    return b;
}

std::string openError(const DataSpec& spec) {
    try {
        Dataset::open(spec);
    } catch (const InputError& e) {
        return e.what();
    }
    ADD_FAILURE() << "Dataset::open accepted " << spec.path;
    return {};
}

// Checks every row is a contiguous window of the ramp and returns the windows' offsets.
std::vector<std::int32_t> rampOffsets(const Batch& b, int seqLen, std::int32_t first = 0) {
    std::vector<std::int32_t> offsets;
    for (std::size_t row = 0; row * static_cast<std::size_t>(seqLen) < b.inputs.size(); ++row) {
        const std::size_t at = row * static_cast<std::size_t>(seqLen);
        const std::int32_t offset = b.inputs[at] - first;
        for (std::size_t t = 0; t < static_cast<std::size_t>(seqLen); ++t) {
            EXPECT_EQ(b.inputs[at + t], first + offset + static_cast<std::int32_t>(t));
            EXPECT_EQ(b.targets[at + t], first + offset + static_cast<std::int32_t>(t) + 1);
        }
        offsets.push_back(offset);
    }
    return offsets;
}

// ---------------------------------------------------------------------------------------------

TEST(DataFormatNames, RoundTrip) {
    for (DataFormat f : {DataFormat::Auto, DataFormat::NanoGpt, DataFormat::LlmC, DataFormat::Text,
                         DataFormat::Synthetic})
        EXPECT_EQ(dataFormatFromString(toString(f)), f);
    EXPECT_EQ(toString(DataFormat::NanoGpt), "nanogpt");
    EXPECT_EQ(toString(DataFormat::LlmC), "llmc");
    EXPECT_EQ(dataFormatFromString("Synthetic"), DataFormat::Synthetic);
}

TEST(DataFormatNames, UnknownNameListsTheValidOnes) {
    try {
        dataFormatFromString("parquet");
        FAIL() << "parquet was accepted";
    } catch (const InputError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("parquet"), std::string::npos) << m;
        for (const char* name : {"auto", "nanogpt", "llmc", "text", "synthetic"})
            EXPECT_NE(m.find(name), std::string::npos) << m;
    }
}

TEST(NanoGptFile, BatchesAreWindowsOfTheTrainSplit) {
    TempDir dir;
    const std::string path = dir.file("train.bin");
    writeBytes(path, le16Tokens(ramp(1000)));
    const auto d = Dataset::open(fileSpec(path, DataFormat::NanoGpt, 16, 1000));
    EXPECT_EQ(d->tokens(Split::Train), 900);
    EXPECT_EQ(d->tokens(Split::Validation), 100);
    EXPECT_EQ(d->vocab(), 1000);
    EXPECT_FALSE(d->lossFloor().has_value());
    for (std::int64_t step = 0; step < 50; ++step)
        for (const std::int32_t offset : rampOffsets(draw(*d, 16, Split::Train, step, 0, 8), 16)) {
            EXPECT_GE(offset, 0);
            EXPECT_LE(offset + 16, 899); // the last target is still a train token
        }
}

// A file truncated under a run (it was memory-mapped: SIGBUS, no message) is named by what
// changed, and a batch that falls past its new end throws DataChangedError instead of reading.
TEST(NanoGptFile, AFileTruncatedUnderTheRunIsNamedNotRead) {
    TempDir dir;
    const std::string path = dir.file("train.bin");
    writeBytes(path, le16Tokens(ramp(1000)));
    const auto d = Dataset::open(fileSpec(path, DataFormat::NanoGpt, 16, 1000));
    EXPECT_FALSE(d->changedSinceOpened());
    std::filesystem::resize_file(path, 100);
    const std::optional<std::string> why = d->changedSinceOpened();
    ASSERT_TRUE(why);
    EXPECT_NE(why->find("held 2000 bytes and now holds 100"), std::string::npos) << *why;
    bool thrown = false;
    for (std::int64_t step = 0; step < 20 && !thrown; ++step) // some window lies past byte 100
        try {
            draw(*d, 16, Split::Train, step, 0, 8);
        } catch (const DataChangedError& e) {
            thrown = true;
            EXPECT_NE(std::string(e.what()).find("train.bin"), std::string::npos) << e.what();
        }
    EXPECT_TRUE(thrown);
}

// Rewritten in place at the same size: told apart by its modification time. Replaced by a new
// file under the same name: the run keeps reading the file it opened, unchanged.
TEST(NanoGptFile, RewrittenInPlaceIsChangedReplacedByRenameIsNot) {
    TempDir dir;
    const std::string path = dir.file("train.bin");
    writeBytes(path, le16Tokens(ramp(1000)));
    const auto d = Dataset::open(fileSpec(path, DataFormat::NanoGpt, 16, 1000));
    const Batch before = draw(*d, 16, Split::Train, 3, 0, 4);

    const std::string replacement = dir.file("new.bin");
    writeBytes(replacement, le16Tokens(ramp(1000, 7)));
    std::filesystem::rename(replacement, path);
    EXPECT_FALSE(d->changedSinceOpened());
    const Batch after = draw(*d, 16, Split::Train, 3, 0, 4);
    EXPECT_EQ(after.inputs, before.inputs);

    const auto again = Dataset::open(fileSpec(path, DataFormat::NanoGpt, 16, 1007));
    std::filesystem::last_write_time(path, std::filesystem::last_write_time(path) +
                                               std::chrono::seconds(5));
    const std::optional<std::string> why = again->changedSinceOpened();
    ASSERT_TRUE(why);
    EXPECT_NE(why->find("written to after the run opened it"), std::string::npos) << *why;
}

TEST(NanoGptFile, ValidationReadsOnlyTheLastFraction) {
    TempDir dir;
    const std::string path = dir.file("tokens.bin");
    writeBytes(path, le16Tokens(ramp(1000)));
    const auto d = Dataset::open(fileSpec(path, DataFormat::NanoGpt, 16, 1000));
    std::set<std::int32_t> seen;
    for (std::int64_t step = 0; step < 400; ++step)
        for (const std::int32_t o : rampOffsets(draw(*d, 16, Split::Validation, step, 0, 4), 16)) {
            EXPECT_GE(o, 900);
            EXPECT_LE(o + 16, 999);
            seen.insert(o);
        }
    EXPECT_EQ(seen.size(), 100u - 16u) << "every validation window start is drawn";
}

TEST(NanoGptFile, StartsCoverTheWholeSplitEvenly) {
    TempDir dir;
    const std::string path = dir.file("small.bin");
    writeBytes(path, le16Tokens(ramp(41)));
    DataSpec spec = fileSpec(path, DataFormat::NanoGpt, 8, 64);
    spec.valFraction = 0; // 33 possible starts over the whole file
    const auto d = Dataset::open(spec);
    std::vector<int> hits(33, 0);
    const int rows = 16, steps = 500;
    for (std::int64_t step = 0; step < steps; ++step)
        for (const std::int32_t o : rampOffsets(draw(*d, 8, Split::Train, step, 0, rows), 8)) {
            ASSERT_GE(o, 0);
            ASSERT_LT(o, 33);
            ++hits[static_cast<std::size_t>(o)];
        }
    const double expected = rows * steps / 33.0;
    for (const int h : hits)
        EXPECT_NEAR(h, expected, 5 * std::sqrt(expected)); // both ends reached, none favoured
}

TEST(NanoGptFile, BatchesAreDeterministicAndVaryWithTheirCoordinates) {
    TempDir dir;
    const std::string path = dir.file("train.bin");
    writeBytes(path, le16Tokens(ramp(20000)));
    const DataSpec spec = fileSpec(path, DataFormat::NanoGpt, 32, 20000);
    const auto a = Dataset::open(spec);
    const auto b = Dataset::open(spec);
    const Batch base = draw(*a, 32, Split::Train, 7, 2, 4);
    EXPECT_EQ(base, draw(*a, 32, Split::Train, 7, 2, 4));
    EXPECT_EQ(base, draw(*b, 32, Split::Train, 7, 2, 4)) << "a reopened file reads the same";
    EXPECT_NE(base, draw(*a, 32, Split::Train, 8, 2, 4));
    EXPECT_NE(base, draw(*a, 32, Split::Train, 7, 3, 4));
    DataSpec other = spec;
    other.seed = spec.seed + 1;
    EXPECT_NE(base, draw(*Dataset::open(other), 32, Split::Train, 7, 2, 4));

    // Rows are drawn independently: a larger batch starts with the smaller one.
    const Batch wider = draw(*a, 32, Split::Train, 7, 2, 6);
    EXPECT_TRUE(std::equal(base.inputs.begin(), base.inputs.end(), wider.inputs.begin()));
    const std::vector<std::int32_t> offsets = rampOffsets(wider, 32);
    EXPECT_EQ(std::set<std::int32_t>(offsets.begin(), offsets.end()).size(), offsets.size());
}

TEST(NanoGptFile, ZeroValidationFractionReusesTheTrainSplit) {
    TempDir dir;
    const std::string path = dir.file("train.bin");
    writeBytes(path, le16Tokens(ramp(500)));
    DataSpec spec = fileSpec(path, DataFormat::NanoGpt, 16, 500);
    spec.valFraction = 0;
    const auto d = Dataset::open(spec);
    EXPECT_EQ(d->tokens(Split::Train), 500);
    EXPECT_EQ(d->tokens(Split::Validation), 500);
    EXPECT_NE(d->describe().find("reuses the train split"), std::string::npos) << d->describe();
    // Validation has its own hash domain even when it reads the same tokens.
    EXPECT_NE(draw(*d, 16, Split::Train, 3, 0, 4), draw(*d, 16, Split::Validation, 3, 0, 4));
}

TEST(LlmCFile, TokensFollowTheHeader) {
    TempDir dir;
    const std::string path = dir.file("fineweb_train_000001.bin");
    std::vector<unsigned char> bytes = llmcFile(ramp(3000, 100));
    appendLe16(bytes, 60000); // beyond the declared count: never read
    writeBytes(path, bytes);
    const auto d = Dataset::open(fileSpec(path, DataFormat::LlmC, 24, 3100));
    EXPECT_EQ(d->tokens(Split::Train), 2700);
    EXPECT_EQ(d->tokens(Split::Validation), 300);
    EXPECT_EQ(d->vocab(), 3100);
    for (std::int64_t step = 0; step < 20; ++step) {
        for (const std::int32_t o : rampOffsets(draw(*d, 24, Split::Train, step, 0, 4), 24, 100))
            EXPECT_LE(o + 24, 2699);
        for (const std::int32_t o :
             rampOffsets(draw(*d, 24, Split::Validation, step, 0, 4), 24, 100))
            EXPECT_GE(o, 2700);
    }
}

TEST(TextFile, EveryByteIsAToken) {
    TempDir dir;
    const std::string path = dir.file("shakespeare.txt");
    std::string text;
    for (int i = 0; i < 40; ++i)
        text += "To be, or not to be, that is the question. \xc3\xa9\n";
    writeBytes(path, std::vector<unsigned char>(text.begin(), text.end()));
    DataSpec spec = fileSpec(path, DataFormat::Text, 32, 256);
    const auto d = Dataset::open(spec);
    EXPECT_EQ(d->vocab(), 256);
    EXPECT_EQ(d->tokens(Split::Train) + d->tokens(Split::Validation),
              static_cast<std::int64_t>(text.size()));
    const Batch b = draw(*d, 32, Split::Train, 1, 0, 8);
    for (int row = 0; row < 8; ++row) {
        std::string window;
        for (int t = 0; t < 32; ++t) {
            const std::int32_t token = b.inputs[static_cast<std::size_t>(row * 32 + t)];
            ASSERT_GE(token, 0);
            ASSERT_LT(token, 256);
            window += static_cast<char>(token);
            if (t + 1 < 32) {
                EXPECT_EQ(b.targets[static_cast<std::size_t>(row * 32 + t)],
                          b.inputs[static_cast<std::size_t>(row * 32 + t + 1)]);
            }
        }
        const std::size_t at = text.find(window);
        ASSERT_NE(at, std::string::npos) << window;
        EXPECT_EQ(b.targets[static_cast<std::size_t>(row * 32 + 31)],
                  static_cast<unsigned char>(text[at + 32]));
    }
}

TEST(AutoFormat, DetectsEachFormat) {
    TempDir dir;
    // llm.c: the magic wins over the extension, and only the declared tokens count.
    const std::string llmc = dir.file("tokens.txt");
    writeBytes(llmc, llmcFile(ramp(200)));
    const auto a = Dataset::open(fileSpec(llmc, DataFormat::Auto));
    EXPECT_EQ(a->tokens(Split::Train) + a->tokens(Split::Validation), 200);
    EXPECT_NE(a->describe().find("llm.c"), std::string::npos) << a->describe();

    for (const char* name : {"input.txt", "notes.md", "book.TEXT"}) {
        const std::string path = dir.file(name);
        writeBytes(path, std::vector<unsigned char>(300, 'a'));
        const auto t = Dataset::open(fileSpec(path, DataFormat::Auto));
        EXPECT_EQ(t->tokens(Split::Train) + t->tokens(Split::Validation), 300) << name;
        EXPECT_EQ(t->vocab(), 256) << name;
        EXPECT_NE(t->describe().find("text"), std::string::npos) << t->describe();
    }

    const std::string bin = dir.file("train.bin");
    writeBytes(bin, le16Tokens(ramp(300)));
    const auto n = Dataset::open(fileSpec(bin, DataFormat::Auto, 16, 300));
    EXPECT_EQ(n->tokens(Split::Train) + n->tokens(Split::Validation), 300);
    EXPECT_EQ(n->vocab(), 300);
    EXPECT_NE(n->describe().find("nanoGPT"), std::string::npos) << n->describe();
    rampOffsets(draw(*n, 16, Split::Train, 0, 0, 4), 16);
}

void expectContains(const std::string& message, const std::vector<std::string>& facts) {
    for (const std::string& f : facts)
        EXPECT_NE(message.find(f), std::string::npos) << "'" << f << "' missing in: " << message;
}

// Detection needs a positive sign: a damaged llm.c header once trained as nanoGPT tokens, and a
// .dat text file or random bytes trained too.
TEST(AutoFormat, RefusesWhatItCannotTell) {
    TempDir dir;
    std::vector<unsigned char> damaged = llmcFile(ramp(200));
    damaged[0] ^= 0xff;
    const std::string llmc = dir.file("tokens.bin");
    writeBytes(llmc, damaged);
    expectContains(openError(fileSpec(llmc, DataFormat::Auto)),
                   {"tokens.bin", "llm.c header", "damaged", "--data-format"});
    // Told explicitly, it reads the file as raw tokens.
    EXPECT_NO_THROW(Dataset::open(fileSpec(llmc, DataFormat::NanoGpt, 16, 65536)));

    const std::string dat = dir.file("corpus.dat");
    writeBytes(dat, std::vector<unsigned char>(300, 'a'));
    expectContains(openError(fileSpec(dat, DataFormat::Auto)),
                   {"corpus.dat", "cannot be told", "nanogpt, llmc or text"});
    const std::string bare = dir.file("random");
    std::vector<unsigned char> noise(4096);
    std::mt19937 gen(3);
    for (unsigned char& b : noise)
        b = static_cast<unsigned char>(gen());
    writeBytes(bare, noise);
    expectContains(openError(fileSpec(bare, DataFormat::Auto)), {"cannot be told"});
}

TEST(DataErrors, MissingFile) {
    TempDir dir;
    const std::string path = dir.file("nowhere.bin");
    expectContains(openError(fileSpec(path, DataFormat::Auto)), {path, "does not exist"});
    expectContains(openError(fileSpec("", DataFormat::NanoGpt)), {"no data path"});
}

TEST(DataErrors, OddSizedNanoGptFile) {
    TempDir dir;
    const std::string path = dir.file("train.bin");
    std::vector<unsigned char> bytes = le16Tokens(ramp(500));
    bytes.push_back(7);
    writeBytes(path, bytes);
    expectContains(openError(fileSpec(path, DataFormat::NanoGpt)), {path, "1001 bytes", "uint16"});
    expectContains(openError(fileSpec(path, DataFormat::Auto)), {path, "1001 bytes", "text"});
}

TEST(DataErrors, LlmCHeaderProblems) {
    TempDir dir;
    const std::string wrongMagic = dir.file("magic.bin");
    writeBytes(wrongMagic, llmcFile(ramp(500), 20240521));
    expectContains(openError(fileSpec(wrongMagic, DataFormat::LlmC)),
                   {wrongMagic, "20240520", "20240521"});

    const std::string version2 = dir.file("llama3.bin");
    writeBytes(version2, llmcFile(ramp(500), 20240520, 2));
    expectContains(openError(fileSpec(version2, DataFormat::LlmC)),
                   {version2, "version 2", "uint32"});
    expectContains(openError(fileSpec(version2, DataFormat::Auto)), {version2, "version 2"});

    const std::string version7 = dir.file("future.bin");
    writeBytes(version7, llmcFile(ramp(500), 20240520, 7));
    expectContains(openError(fileSpec(version7, DataFormat::LlmC)), {version7, "version 7"});

    const std::string truncated = dir.file("truncated.bin");
    writeBytes(truncated, llmcFile(ramp(500), 20240520, 1, 800));
    expectContains(openError(fileSpec(truncated, DataFormat::LlmC)),
                   {truncated, "800", "500", "truncated"});

    const std::string shortHeader = dir.file("header.bin");
    std::vector<unsigned char> head = llmcFile({});
    head.resize(100);
    writeBytes(shortHeader, head);
    expectContains(openError(fileSpec(shortHeader, DataFormat::Auto)),
                   {shortHeader, "100 bytes", "1024"});
}

TEST(DataErrors, TokenBeyondTheVocabulary) {
    TempDir dir;
    const std::string path = dir.file("train.bin");
    std::vector<std::uint32_t> tokens(2000, 11);
    tokens[1234] = 50300;
    tokens[1500] = 50300;
    writeBytes(path, le16Tokens(tokens));
    expectContains(openError(fileSpec(path, DataFormat::NanoGpt, 16, 50257)),
                   {path, "token id 50300", "position 1234", "50257", "at least 50301"});
    EXPECT_EQ(Dataset::open(fileSpec(path, DataFormat::NanoGpt, 16, 50301))->vocab(), 50301);

    const std::string text = dir.file("bytes.txt");
    writeBytes(text, std::vector<unsigned char>(300, 200));
    expectContains(openError(fileSpec(text, DataFormat::Text, 16, 128)),
                   {text, "token id 200", "position 0", "128"});
}

TEST(DataErrors, FileTooShortForASequence) {
    TempDir dir;
    const std::string path = dir.file("tiny.bin");
    writeBytes(path, le16Tokens(ramp(100)));
    expectContains(openError(fileSpec(path, DataFormat::NanoGpt, 128, 1000)),
                   {path, "100 tokens", "129"});
    // Long enough overall, but the validation split (the last 10 tokens) is not.
    expectContains(openError(fileSpec(path, DataFormat::NanoGpt, 16, 1000)),
                   {path, "validation", "holds 10,", "17"});
    const std::string empty = dir.file("empty.bin");
    writeBytes(empty, {});
    expectContains(openError(fileSpec(empty, DataFormat::Auto)), {empty, "0 tokens"});
}

TEST(DataErrors, BadSpecValues) {
    TempDir dir;
    const std::string path = dir.file("train.bin");
    writeBytes(path, le16Tokens(ramp(1000)));
    DataSpec spec = fileSpec(path, DataFormat::NanoGpt, 16, 1000);
    spec.valFraction = 0.7;
    expectContains(openError(spec), {"0.7", "[0, 0.5]"});
    spec.valFraction = 0.1;
    spec.seqLen = 0;
    expectContains(openError(spec), {"sequence length 0"});
    DataSpec synthetic;
    synthetic.syntheticBranching = 0;
    expectContains(openError(synthetic), {"0 favoured successors"});
    synthetic.syntheticBranching = 4;
    synthetic.vocab = 0;
    expectContains(openError(synthetic), {"vocabulary 0"});
}

// ---------------------------------------------------------------------------------------------
// The synthetic source, checked against a dense brute-force computation.

DataSpec syntheticSpec(std::int64_t vocab, int branching, std::uint64_t seed = 1234,
                       int seqLen = 64) {
    DataSpec s;
    s.format = DataFormat::Synthetic;
    s.vocab = vocab;
    s.syntheticBranching = branching;
    s.seed = seed;
    s.seqLen = seqLen;
    return s;
}

struct Dense {
    std::size_t v = 0;
    std::vector<double> p;  // row-major transitions
    std::vector<double> pi; // stationary distribution
    double entropyRate = 0;
};

// Plain dense power iteration and the entropy of every full row: nothing shared with the
// library's sparse O(V k) computation but the matrix itself.
Dense bruteForce(const DataSpec& spec) {
    Dense d;
    d.v = static_cast<std::size_t>(spec.vocab);
    d.p = syntheticTransitions(spec);
    d.pi.assign(d.v, 1.0 / static_cast<double>(d.v));
    for (int sweep = 0; sweep < 5000; ++sweep) {
        std::vector<double> next(d.v, 0.0);
        for (std::size_t i = 0; i < d.v; ++i)
            for (std::size_t j = 0; j < d.v; ++j)
                next[j] += d.pi[i] * d.p[i * d.v + j];
        d.pi = next;
    }
    for (std::size_t i = 0; i < d.v; ++i)
        for (std::size_t j = 0; j < d.v; ++j) {
            const double pij = d.p[i * d.v + j];
            d.entropyRate -= d.pi[i] * pij * std::log(pij);
        }
    return d;
}

TEST(SyntheticSource, TransitionRowsAreTheDocumentedMixture) {
    const DataSpec spec = syntheticSpec(10, 3);
    const std::vector<double> p = syntheticTransitions(spec);
    ASSERT_EQ(p.size(), 100u);
    for (std::size_t i = 0; i < 10; ++i) {
        double sum = 0;
        int favoured = 0;
        for (std::size_t j = 0; j < 10; ++j) {
            const double x = p[i * 10 + j];
            sum += x;
            EXPECT_GE(x, 0.05 / 10 - 1e-15);
            favoured += x > 0.05 / 10 + 1e-12;
        }
        EXPECT_NEAR(sum, 1.0, 1e-12);
        EXPECT_EQ(favoured, 3) << "row " << i;
    }
    EXPECT_NE(p, syntheticTransitions(syntheticSpec(10, 3, 99))) << "the seed picks the chain";
    EXPECT_THROW(syntheticTransitions(syntheticSpec(5000, 4)), InputError);
}

TEST(SyntheticSource, LossFloorMatchesDenseBruteForce) {
    for (const DataSpec& spec :
         {syntheticSpec(8, 3), syntheticSpec(8, 4, 7), syntheticSpec(5, 5), syntheticSpec(6, 16, 3),
          syntheticSpec(40, 4, 11), syntheticSpec(1, 4)}) {
        const auto d = Dataset::open(spec);
        const Dense dense = bruteForce(spec);
        ASSERT_TRUE(d->lossFloor().has_value());
        EXPECT_NEAR(*d->lossFloor(), dense.entropyRate, 1e-9)
            << "vocab " << spec.vocab << " branching " << spec.syntheticBranching;
        EXPECT_LE(*d->lossFloor(), std::log(static_cast<double>(spec.vocab)) + 1e-12);
    }
}

TEST(SyntheticSource, EmpiricalCrossEntropyApproachesTheFloor) {
    const DataSpec spec = syntheticSpec(64, 4, 5, 128);
    const auto d = Dataset::open(spec);
    const Dense dense = bruteForce(spec);
    double sum = 0, sumSq = 0;
    std::int64_t n = 0;
    for (std::int64_t step = 0; step < 200; ++step) {
        const Batch b = draw(*d, 128, Split::Train, step, 0, 8);
        for (std::size_t i = 0; i < b.inputs.size(); ++i) {
            const double p = dense.p[static_cast<std::size_t>(b.inputs[i]) * dense.v +
                                     static_cast<std::size_t>(b.targets[i])];
            sum += -std::log(p);
            sumSq += std::log(p) * std::log(p);
            ++n;
        }
    }
    const double mean = sum / static_cast<double>(n);
    const double stdError =
        std::sqrt((sumSq / static_cast<double>(n) - mean * mean) / static_cast<double>(n));
    // Rows are independent but positions within a row are not: allow well over 4 i.i.d. errors.
    EXPECT_NEAR(mean, *d->lossFloor(), 8 * stdError) << "standard error " << stdError;
    EXPECT_LT(*d->lossFloor(), 0.6 * std::log(64.0)) << "the chain is clearly learnable";
}

TEST(SyntheticSource, FirstTokensFollowTheStationaryDistribution) {
    const DataSpec spec = syntheticSpec(8, 2, 21, 4);
    const auto d = Dataset::open(spec);
    const Dense dense = bruteForce(spec);
    std::vector<double> counts(8, 0.0);
    const int rows = 64, steps = 500;
    for (std::int64_t step = 0; step < steps; ++step) {
        const Batch b = draw(*d, 4, Split::Validation, step, 1, rows);
        for (int row = 0; row < rows; ++row)
            counts[static_cast<std::size_t>(b.inputs[static_cast<std::size_t>(row * 4)])] += 1;
    }
    double chiSquare = 0;
    for (std::size_t i = 0; i < 8; ++i) {
        const double expected = dense.pi[i] * rows * steps;
        chiSquare += (counts[i] - expected) * (counts[i] - expected) / expected;
    }
    EXPECT_LT(chiSquare, 30.0) << "7 degrees of freedom: 30 is beyond the 0.01% tail";
    // Not a uniform start in disguise: the chain's stationary distribution is uneven.
    const auto [lo, hi] = std::minmax_element(dense.pi.begin(), dense.pi.end());
    EXPECT_GT(*hi / *lo, 1.5);
}

TEST(SyntheticSource, TargetsContinueTheChainWithinTheVocabulary) {
    const DataSpec spec = syntheticSpec(300, 8, 4, 50);
    const auto d = Dataset::open(spec);
    const std::vector<double> p = syntheticTransitions(spec);
    EXPECT_EQ(d->vocab(), 300);
    EXPECT_EQ(d->tokens(Split::Train), 0);
    int favoured = 0, transitions = 0;
    for (const Split split : {Split::Train, Split::Validation}) {
        const Batch b = draw(*d, 50, split, 2, 0, 16);
        for (std::size_t i = 0; i < b.inputs.size(); ++i) {
            ASSERT_GE(b.inputs[i], 0);
            ASSERT_LT(b.inputs[i], 300);
            ASSERT_GE(b.targets[i], 0);
            ASSERT_LT(b.targets[i], 300);
            if (i % 50 != 49) {
                EXPECT_EQ(b.targets[i], b.inputs[i + 1]);
            }
            favoured += p[static_cast<std::size_t>(b.inputs[i]) * 300 +
                          static_cast<std::size_t>(b.targets[i])] > 0.05 / 300 + 1e-12;
            ++transitions;
        }
    }
    // Favoured successors carry 95% of the mass (plus their share of the uniform 5%).
    EXPECT_GT(favoured, 0.9 * transitions);
}

TEST(SyntheticSource, DeterministicPerCoordinateAndSplit) {
    const DataSpec spec = syntheticSpec(1000, 4, 8, 32);
    const auto a = Dataset::open(spec);
    const auto b = Dataset::open(spec);
    const Batch base = draw(*a, 32, Split::Train, 5, 1, 4);
    EXPECT_EQ(base, draw(*b, 32, Split::Train, 5, 1, 4));
    EXPECT_NE(base, draw(*a, 32, Split::Train, 6, 1, 4));
    EXPECT_NE(base, draw(*a, 32, Split::Train, 5, 0, 4));
    EXPECT_NE(base, draw(*a, 32, Split::Validation, 5, 1, 4));
    EXPECT_NE(*a->lossFloor(), *Dataset::open(syntheticSpec(1000, 4, 9, 32))->lossFloor());
}

TEST(SyntheticSource, LargeVocabulariesBuild) {
    for (const auto& [vocab, branching] :
         std::vector<std::pair<std::int64_t, int>>{{50257, 4}, {100000, 16}}) {
        const auto d = Dataset::open(syntheticSpec(vocab, branching, 1234, 256));
        ASSERT_TRUE(d->lossFloor().has_value());
        EXPECT_GT(*d->lossFloor(), 0.0);
        EXPECT_LT(*d->lossFloor(), 0.5 * std::log(static_cast<double>(vocab)));
        EXPECT_EQ(d->vocab(), vocab);
        const std::string text = d->describe();
        expectContains(text, {"vocab " + std::to_string(vocab),
                              std::to_string(branching) + " favoured successors", "nats/token"});
        const Batch b = draw(*d, 256, Split::Train, 0, 0, 4);
        for (const std::int32_t t : b.inputs) {
            ASSERT_GE(t, 0);
            ASSERT_LT(t, vocab);
        }
    }
}

} // namespace
} // namespace shardscope
