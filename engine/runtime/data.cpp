#include "data.h"

#include "core/error.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <limits>
#include <numbers>
#include <numeric>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace shardscope {

namespace {

// ---------------------------------------------------------------------------------------------
// Counter-based randomness: every draw is a pure function of its key, so batches can be
// produced in any order, on any rank, and after a resume, without carrying generator state.

constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

std::uint64_t mix64(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// Separate domains keep train batches, validation batches and the chain's construction
// independent even when their counters coincide.
enum class Domain : std::uint64_t { TrainBatch = 1, ValidationBatch = 2, ChainRow = 3 };

Domain batchDomain(Split split) {
    return split == Split::Train ? Domain::TrainBatch : Domain::ValidationBatch;
}

std::uint64_t hashKey(std::uint64_t seed, Domain domain, std::uint64_t a, std::uint64_t b = 0,
                      std::uint64_t c = 0) {
    std::uint64_t h = mix64(seed + kGolden);
    for (const std::uint64_t v : {static_cast<std::uint64_t>(domain), a, b, c})
        h = mix64(h ^ mix64(v + kGolden)); // chained bijections: the order of fields matters
    return h;
}

__extension__ typedef unsigned __int128 Wide;

// SplitMix64 started from a hashed key: a short, private stream for one row of one batch.
class KeyedStream {
public:
    explicit KeyedStream(std::uint64_t key) : state_(key) {}

    std::uint64_t next() {
        state_ += kGolden;
        return mix64(state_);
    }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; } // [0, 1)

    // Uniform in [0, n) by a 64x64 -> 128-bit multiply; the bias, n / 2^64, is far below
    // anything a training run could notice.
    std::uint64_t below(std::uint64_t n) {
        return static_cast<std::uint64_t>((static_cast<Wide>(next()) * n) >> 64);
    }

    double gaussian() {
        const double u1 = 1.0 - uniform(); // (0, 1]: keeps the logarithm finite
        const double u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    }

private:
    std::uint64_t state_;
};

std::uint64_t rowKey(std::uint64_t seed, Split split, std::int64_t step, int micro, int row) {
    return hashKey(seed, batchDomain(split), static_cast<std::uint64_t>(step),
                   static_cast<std::uint64_t>(static_cast<std::int64_t>(micro)),
                   static_cast<std::uint64_t>(static_cast<std::int64_t>(row)));
}

// ---------------------------------------------------------------------------------------------
// Spec checks shared by every format.

template <class T> std::string str(const T& v) {
    std::ostringstream o;
    o << v;
    return o.str();
}

void checkSequenceLength(const DataSpec& spec) {
    if (spec.seqLen < 1)
        throw InputError("data: sequence length " + str(spec.seqLen) +
                         " is not positive: set seqLen to at least 1 (e.g. 1024)");
}

void checkVocab(const DataSpec& spec) {
    if (spec.vocab < 1 || spec.vocab > std::numeric_limits<std::int32_t>::max())
        throw InputError("data: the model's vocabulary " + str(spec.vocab) +
                         " is out of range: set vocab between 1 and " +
                         str(std::numeric_limits<std::int32_t>::max()));
}

void checkValFraction(const DataSpec& spec) {
    if (!(spec.valFraction >= 0.0 && spec.valFraction <= 0.5))
        throw InputError("data: validation fraction " + str(spec.valFraction) +
                         " is outside [0, 0.5]: use e.g. 0.1 for the last 10% of the file, or 0 "
                         "to validate on the train split");
}

// ---------------------------------------------------------------------------------------------
// A token file, read with pread where a batch needs it: files can be tens of gigabytes, so they
// are never copied, and not memory-mapped either, since a mapped file truncated under a run kills
// it with SIGBUS. The file stays open, so one replaced by a rename is still the one read; one
// changed in place (truncated, rewritten) is told apart by its size and modification time.

class TokenFile {
public:
    explicit TokenFile(const std::string& path) : path_(path) {
        fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd_ < 0)
            throw openError(errno);
        try {
            check();
        } catch (...) {
            ::close(fd_);
            throw;
        }
    }
    ~TokenFile() { ::close(fd_); }
    TokenFile(const TokenFile&) = delete;
    TokenFile& operator=(const TokenFile&) = delete;

    std::int64_t size() const { return size_; }
    const std::string& path() const { return path_; }

    // `bytes` bytes from `offset`; throws DataChangedError when the file no longer holds them.
    void read(std::int64_t offset, void* dst, std::size_t bytes) const {
        auto* out = static_cast<unsigned char*>(dst);
        std::size_t done = 0;
        while (done < bytes) {
            const ssize_t n = ::pread(fd_, out + done, bytes - done, off_t(offset) + off_t(done));
            if (n > 0) {
                done += std::size_t(n);
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            throw DataChangedError(changed().value_or(
                "data file '" + path_ + "' could not be read at byte " +
                std::to_string(offset + std::int64_t(done)) + " (" +
                (n < 0 ? std::string(std::strerror(errno)) : std::string("end of file")) + ")"));
        }
    }

    // Why the file is not the one opened (size or modification time changed), or nothing.
    std::optional<std::string> changed() const {
        struct stat st {};
        if (::fstat(fd_, &st) != 0)
            return "data file '" + path_ + "' cannot be examined: " + std::strerror(errno);
        if (std::int64_t(st.st_size) != size_)
            return "data file '" + path_ + "' changed during the run: it held " + str(size_) +
                   " bytes and now holds " + str(std::int64_t(st.st_size));
        if (st.st_mtim.tv_sec != mtime_.tv_sec || st.st_mtim.tv_nsec != mtime_.tv_nsec)
            return "data file '" + path_ +
                   "' changed during the run: it was written to after "
                   "the run opened it";
        return std::nullopt;
    }

private:
    InputError openError(int err) const {
        if (err == ENOENT)
            return InputError("data file '" + path_ + "' does not exist: check the path " +
                              "(relative paths start at " +
                              std::filesystem::current_path().string() + ")");
        return InputError("cannot open data file '" + path_ + "': " + std::strerror(err) +
                          ": check that it exists and is readable");
    }

    void check() {
        struct stat st {};
        if (::fstat(fd_, &st) != 0)
            throw InputError("cannot read the size of data file '" + path_ +
                             "': " + std::strerror(errno));
        if (S_ISDIR(st.st_mode))
            throw InputError("data file '" + path_ +
                             "' is a directory: give the path of a token or text file inside it");
        if (!S_ISREG(st.st_mode))
            throw InputError("data file '" + path_ +
                             "' is not a regular file: give the path of a token or text file");
        size_ = std::int64_t(st.st_size);
        mtime_ = st.st_mtim;
        ::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM); // batches jump to random offsets
    }

    std::string path_;
    int fd_ = -1;
    std::int64_t size_ = 0;
    timespec mtime_{};
};

// ---------------------------------------------------------------------------------------------
// Token layouts.

std::uint32_t loadLe16(const unsigned char* p) {
    std::uint16_t v;
    std::memcpy(&v, p, sizeof v);
    if constexpr (std::endian::native == std::endian::big)
        v = static_cast<std::uint16_t>((v >> 8) | (v << 8));
    return v;
}

std::int32_t loadLe32(const unsigned char* p) {
    std::uint32_t v;
    std::memcpy(&v, p, sizeof v);
    if constexpr (std::endian::native == std::endian::big)
        v = ((v >> 24) & 0xffu) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
    return static_cast<std::int32_t>(v);
}

// The tokens of a file: `count` tokens of `width` bytes from byte `begin`.
struct TokenView {
    const TokenFile* file = nullptr;
    std::int64_t begin = 0;
    int width = 2; // bytes per token: 2 for uint16 token files, 1 for text
    std::int64_t count = 0;

    // Tokens [first, first + n) into out.
    void read(std::int64_t first, std::int64_t n, std::uint32_t* out,
              std::vector<unsigned char>& bytes) const {
        bytes.resize(std::size_t(n) * std::size_t(width));
        file->read(begin + first * width, bytes.data(), bytes.size());
        for (std::int64_t i = 0; i < n; ++i)
            out[i] = width == 1 ? bytes[std::size_t(i)] : loadLe16(bytes.data() + 2 * i);
    }

    // Calls f(first, tokens, n) over the whole view, a megabyte at a time.
    template <typename F> void scan(F f) const {
        constexpr std::int64_t kChunk = 1 << 20;
        std::vector<std::uint32_t> tokens;
        std::vector<unsigned char> bytes;
        for (std::int64_t first = 0; first < count; first += kChunk) {
            const std::int64_t n = std::min(kChunk, count - first);
            tokens.resize(std::size_t(n));
            read(first, n, tokens.data(), bytes);
            f(first, tokens.data(), n);
        }
    }
};

std::uint32_t largestToken(const TokenView& v) {
    std::uint32_t best = 0;
    v.scan([&](std::int64_t, const std::uint32_t* t, std::int64_t n) {
        best = std::max(best, *std::max_element(t, t + n));
    });
    return best;
}

std::int64_t firstPositionOf(const TokenView& v, std::uint32_t token) {
    std::int64_t found = -1;
    v.scan([&](std::int64_t first, const std::uint32_t* t, std::int64_t n) {
        if (found < 0)
            if (const auto* it = std::find(t, t + n, token); it != t + n)
                found = first + (it - t);
    });
    return found;
}

constexpr std::int32_t kLlmcMagic = 20240520;
constexpr std::int64_t kLlmcHeaderBytes = 256 * 4;

// The little-endian int32 at `offset`.
std::int32_t int32At(const TokenFile& f, std::int64_t offset) {
    unsigned char b[4];
    f.read(offset, b, sizeof b);
    return loadLe32(b);
}

bool hasLlmcMagic(const TokenFile& f) {
    return f.size() >= 4 && int32At(f, 0) == kLlmcMagic;
}

bool hasTextExtension(const std::string& path) {
    std::string ext = std::filesystem::path(path).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return ext == ".txt" || ext == ".text" || ext == ".md";
}

bool hasBinExtension(const std::string& path) {
    std::string ext = std::filesystem::path(path).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return ext == ".bin";
}

// An llm.c header but for its first word: a version llm.c writes and a token count that matches
// the file's size exactly. Raw tokens almost never line up like this by chance.
bool looksLikeLlmcWithoutItsMagic(const TokenFile& f) {
    if (f.size() < kLlmcHeaderBytes || hasLlmcMagic(f))
        return false;
    const std::int32_t version = int32At(f, 4);
    const std::int64_t declared = int32At(f, 8), payload = f.size() - kLlmcHeaderBytes;
    return (version == 1 && declared * 2 == payload) || (version == 2 && declared * 4 == payload);
}

// Only on a positive sign: llm.c's magic number, a text extension, or nanoGPT's .bin. Anything
// else (a .dat file, random bytes, an llm.c file whose magic was damaged) is refused rather than
// trained on as whatever it happens to parse as.
DataFormat detectFormat(const TokenFile& f) {
    if (hasLlmcMagic(f))
        return DataFormat::LlmC;
    if (hasTextExtension(f.path()))
        return DataFormat::Text;
    if (looksLikeLlmcWithoutItsMagic(f))
        throw InputError("data file '" + f.path() + "' has an llm.c header whose magic number is " +
                         str(int32At(f, 0)) + ", not " + str(kLlmcMagic) +
                         ": the file is damaged; tokenize it again, or give --data-format "
                         "nanogpt to read it as raw tokens anyway");
    if (hasBinExtension(f.path()))
        return DataFormat::NanoGpt;
    throw InputError("the format of data file '" + f.path() +
                     "' cannot be told: auto-detection knows llm.c files (by their magic "
                     "number), nanoGPT .bin files and .txt/.text/.md text; give --data-format "
                     "(data_format) nanogpt, llmc or text");
}

TokenView nanoGptView(const TokenFile& f, bool detected) {
    if (f.size() % 2 != 0)
        throw InputError(
            "data file '" + f.path() + "' has " + str(f.size()) +
            " bytes, not a whole number of 2-byte tokens: a nanoGPT .bin holds little-endian "
            "uint16 tokens, so the file is truncated or is not nanoGPT data" +
            (detected ? std::string(" (it was read as nanoGPT because it has no llm.c header "
                                    "and is not .txt/.text/.md; set the format to text for "
                                    "plain text)")
                      : std::string(" (set the format to text for plain text)")));
    return {&f, 0, 2, f.size() / 2};
}

TokenView llmcView(const TokenFile& f) {
    const std::string name = "data file '" + f.path() + "'";
    if (!hasLlmcMagic(f))
        throw InputError(
            name + " does not start with the llm.c magic number " + str(kLlmcMagic) +
            (f.size() >= 4 ? " (it starts with " + str(int32At(f, 0)) + ")"
                           : " (it has only " + str(f.size()) + " bytes)") +
            ": it is not an llm.c token file; use format nanogpt for raw uint16 tokens, text "
            "for plain text, or auto to detect");
    if (f.size() < kLlmcHeaderBytes)
        throw InputError(name + " has " + str(f.size()) + " bytes, less than the " +
                         str(kLlmcHeaderBytes) +
                         "-byte llm.c header: the file is truncated; write it again with "
                         "llm.c's tokenizer script");
    const int version = int32At(f, 4);
    if (version == 2)
        throw InputError(name + " is llm.c version 2 (uint32 tokens, as llm.c writes for Llama 3), "
                                "which is not supported: tokenize with a GPT-2-style tokenizer "
                                "(vocabulary at most 65536) to write version 1 uint16 tokens");
    if (version != 1)
        throw InputError(name + " has llm.c version " + str(version) +
                         ", but only version 1 (uint16 tokens) is supported: the header is "
                         "corrupt or from a newer llm.c; re-tokenize with llm.c's scripts");
    const std::int64_t declared = int32At(f, 8);
    const std::int64_t available = (f.size() - kLlmcHeaderBytes) / 2;
    if (declared < 0 || declared > available)
        throw InputError(name + " declares " + str(declared) +
                         " tokens in its llm.c header, but only " + str(available) + " tokens (" +
                         str(f.size() - kLlmcHeaderBytes) +
                         " bytes) follow the header: the file is truncated or its header is "
                         "corrupt; download or tokenize it again");
    return {&f, kLlmcHeaderBytes, 2, declared};
}

TokenView textView(const TokenFile& f) {
    return {&f, 0, 1, f.size()};
}

TokenView tokenView(const TokenFile& f, DataFormat format, bool detected) {
    switch (format) {
    case DataFormat::LlmC:
        return llmcView(f);
    case DataFormat::Text:
        return textView(f);
    default:
        return nanoGptView(f, detected);
    }
}

std::string formatLabel(DataFormat format) {
    switch (format) {
    case DataFormat::LlmC:
        return "llm.c uint16 tokens";
    case DataFormat::Text:
        return "text bytes";
    default:
        return "nanoGPT uint16 tokens";
    }
}

std::string percent(double fraction) {
    return str(fraction * 100.0) + "%";
}

// ---------------------------------------------------------------------------------------------
// Token files: nanoGPT, llm.c and text.

struct SplitRange {
    std::int64_t begin = 0;
    std::int64_t count = 0;
};

class FileDataset final : public Dataset {
public:
    explicit FileDataset(const DataSpec& spec)
        : spec_(spec), file_(spec.path), detected_(spec.format == DataFormat::Auto),
          format_(detected_ ? detectFormat(file_) : spec.format),
          view_(tokenView(file_, format_, detected_)) {
        largest_ = largestToken(view_);
        checkTokensFitVocab();
        makeSplits();
    }

    void batch(Split split, std::int64_t step, int micro, int batch, std::int32_t* inputs,
               std::int32_t* targets) const override {
        const SplitRange& range = rangeOf(split);
        const std::int64_t seq = spec_.seqLen;
        // Starts in [0, count - seq - 1]: the last window's target is the split's last token.
        const auto starts = static_cast<std::uint64_t>(range.count - seq);
        std::vector<std::uint32_t> window(std::size_t(seq) + 1);
        std::vector<unsigned char> bytes;
        for (int row = 0; row < batch; ++row) {
            KeyedStream rng(rowKey(spec_.seed, split, step, micro, row));
            const std::int64_t offset = range.begin + static_cast<std::int64_t>(rng.below(starts));
            view_.read(offset, seq + 1, window.data(), bytes);
            std::int32_t* in = inputs + row * seq;
            std::int32_t* out = targets + row * seq;
            for (std::int64_t t = 0; t < seq; ++t) {
                in[t] = static_cast<std::int32_t>(window[std::size_t(t)]);
                out[t] = static_cast<std::int32_t>(window[std::size_t(t) + 1]);
            }
        }
    }

    std::optional<double> lossFloor() const override { return std::nullopt; }
    std::optional<std::string> changedSinceOpened() const override { return file_.changed(); }
    std::int64_t tokens(Split split) const override { return rangeOf(split).count; }
    std::int64_t vocab() const override {
        return format_ == DataFormat::Text ? 256 : static_cast<std::int64_t>(largest_) + 1;
    }

    std::string describe() const override {
        std::string s = formatLabel(format_) + " from '" + file_.path() + "'" +
                        (detected_ ? " (detected)" : "") + ": " + str(view_.count) +
                        " tokens, largest id " + str(largest_) + "; train " + str(train_.count);
        if (spec_.valFraction > 0)
            s += ", validation " + str(validation_.count) + " (the last " +
                 percent(spec_.valFraction) + ")";
        else
            s += ", validation reuses the train split (valFraction 0)";
        return s;
    }

private:
    const SplitRange& rangeOf(Split split) const {
        return split == Split::Train ? train_ : validation_;
    }

    void checkTokensFitVocab() const {
        if (view_.count == 0 || static_cast<std::int64_t>(largest_) < spec_.vocab)
            return;
        throw InputError("data file '" + file_.path() + "' has token id " + str(largest_) +
                         " at position " + str(firstPositionOf(view_, largest_)) +
                         ", but the model's vocabulary is " + str(spec_.vocab) +
                         ": set the model's vocab to at least " + str(std::int64_t{largest_} + 1) +
                         " or use the tokenizer the model was built for");
    }

    void makeSplits() {
        const std::int64_t total = view_.count;
        const std::int64_t needed = std::int64_t{spec_.seqLen} + 1;
        const std::string name = "data file '" + file_.path() + "'";
        if (total < needed)
            throw InputError(name + " holds " + str(total) + " tokens, but one sequence of " +
                             str(spec_.seqLen) + " tokens needs " + str(needed) +
                             " (inputs plus the next-token target): use a longer file or a "
                             "shorter sequence length");
        const auto valCount =
            static_cast<std::int64_t>(std::floor(static_cast<double>(total) * spec_.valFraction));
        train_ = {0, total - valCount};
        validation_ = spec_.valFraction > 0 ? SplitRange{total - valCount, valCount} : train_;
        if (train_.count < needed)
            throw InputError(name + " holds " + str(total) +
                             " tokens; after setting aside the "
                             "last " +
                             percent(spec_.valFraction) +
                             " for validation its train "
                             "split keeps " +
                             str(train_.count) + ", but one sequence of " + str(spec_.seqLen) +
                             " tokens needs " + str(needed) +
                             ": use a longer file, a smaller validation fraction or a shorter "
                             "sequence length");
        if (validation_.count < needed)
            throw InputError(name + " holds " + str(total) +
                             " tokens; its validation split "
                             "(the last " +
                             percent(spec_.valFraction) + ") holds " + str(validation_.count) +
                             ", but one sequence of " + str(spec_.seqLen) + " tokens needs " +
                             str(needed) +
                             ": use a longer file, a larger validation fraction, a shorter "
                             "sequence length, or validation fraction 0 to validate on the "
                             "train split");
    }

    DataSpec spec_;
    TokenFile file_;
    bool detected_;
    DataFormat format_;
    TokenView view_;
    std::uint32_t largest_ = 0;
    SplitRange train_;
    SplitRange validation_;
};

// ---------------------------------------------------------------------------------------------
// The synthetic source: a first-order Markov chain whose entropy rate is the exact loss floor,
// so a training curve can be judged against the best any model could do.

constexpr double kUniformMix = 0.05;  // share of each row spread uniformly over the vocabulary
constexpr double kWeightSpread = 1.0; // log-normal sigma of the favoured successors' weights
constexpr std::int64_t kMaxSyntheticVocab = 1 << 20;
constexpr int kMaxBranching = 256;
constexpr std::int64_t kMaxDenseVocab = 4096;
constexpr int kMaxPowerIterations = 20000;
constexpr double kStationaryTolerance = 1e-13;

void checkSyntheticSpec(const DataSpec& spec) {
    if (spec.vocab > kMaxSyntheticVocab)
        throw InputError("synthetic data: vocabulary " + str(spec.vocab) + " exceeds " +
                         str(kMaxSyntheticVocab) +
                         ", the largest synthetic source built: use a smaller vocab");
    if (spec.syntheticBranching < 1 || spec.syntheticBranching > kMaxBranching)
        throw InputError("synthetic data: " + str(spec.syntheticBranching) +
                         " favoured successors per token is outside [1, " + str(kMaxBranching) +
                         "]: use e.g. 4 (a few successors make the chain learnable)");
}

// Each row mixes kUniformMix of the uniform distribution with (1 - kUniformMix) on `branching`
// distinct favoured successors with weights q. The uniform share makes every transition
// possible, so the chain is irreducible and aperiodic and has one stationary distribution.
class MarkovChain {
public:
    MarkovChain(std::int64_t vocab, int branching, std::uint64_t seed)
        : vocab_(vocab), k_(static_cast<int>(std::min<std::int64_t>(vocab, branching))),
          successors_(static_cast<std::size_t>(vocab_ * k_)), weights_(successors_.size()),
          cumulative_(successors_.size()) {
        buildRows(seed);
    }

    std::int64_t vocab() const { return vocab_; }
    int branching() const { return k_; }
    double entropyRate() const { return entropyRate_; }

    void computeStationary() {
        powerIterate();
        stationaryCdf_.resize(stationary_.size());
        std::partial_sum(stationary_.begin(), stationary_.end(), stationaryCdf_.begin());
        entropyRate_ = 0;
        for (std::int64_t i = 0; i < vocab_; ++i)
            entropyRate_ += stationary_[static_cast<std::size_t>(i)] * rowEntropy(i);
    }

    std::int32_t drawStationary(KeyedStream& rng) const {
        const double u = rng.uniform() * stationaryCdf_.back();
        const auto it = std::upper_bound(stationaryCdf_.begin(), stationaryCdf_.end(), u);
        const auto i = std::min<std::ptrdiff_t>(it - stationaryCdf_.begin(), vocab_ - 1);
        return static_cast<std::int32_t>(i);
    }

    std::int32_t step(std::int32_t current, KeyedStream& rng) const {
        if (rng.uniform() < kUniformMix)
            return static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab_)));
        const std::size_t row = static_cast<std::size_t>(current) * static_cast<std::size_t>(k_);
        const double u = rng.uniform();
        int j = 0;
        while (j < k_ - 1 && u >= cumulative_[row + static_cast<std::size_t>(j)])
            ++j;
        return successors_[row + static_cast<std::size_t>(j)];
    }

    std::vector<double> dense() const {
        const auto v = static_cast<std::size_t>(vocab_);
        std::vector<double> p(v * v, uniformShare());
        for (std::size_t i = 0; i < v; ++i)
            for (std::size_t j = 0; j < static_cast<std::size_t>(k_); ++j) {
                const std::size_t e = i * static_cast<std::size_t>(k_) + j;
                p[i * v + static_cast<std::size_t>(successors_[e])] += favouredShare(e);
            }
        return p;
    }

private:
    double uniformShare() const { return kUniformMix / static_cast<double>(vocab_); }
    double favouredShare(std::size_t entry) const { return (1.0 - kUniformMix) * weights_[entry]; }

    void buildRows(std::uint64_t seed) {
        // Floyd's sampling marks chosen tokens with the row's stamp: k distinct successors in
        // exactly k draws, whatever k is relative to the vocabulary.
        std::vector<std::int64_t> stamp(static_cast<std::size_t>(vocab_), -1);
        for (std::int64_t i = 0; i < vocab_; ++i) {
            KeyedStream rng(hashKey(seed, Domain::ChainRow, static_cast<std::uint64_t>(i)));
            const std::size_t row = static_cast<std::size_t>(i) * static_cast<std::size_t>(k_);
            for (std::int64_t j = vocab_ - k_, n = 0; j < vocab_; ++j, ++n) {
                auto t = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(j + 1)));
                if (stamp[static_cast<std::size_t>(t)] == i)
                    t = j;
                stamp[static_cast<std::size_t>(t)] = i;
                successors_[row + static_cast<std::size_t>(n)] = static_cast<std::int32_t>(t);
            }
            drawWeights(rng, row);
        }
    }

    // Log-normal weights: uneven enough that a model gains by learning them, never zero.
    void drawWeights(KeyedStream& rng, std::size_t row) {
        double sum = 0;
        for (int j = 0; j < k_; ++j) {
            const double w = std::exp(kWeightSpread * rng.gaussian());
            weights_[row + static_cast<std::size_t>(j)] = w;
            sum += w;
        }
        double running = 0;
        for (int j = 0; j < k_; ++j) {
            const std::size_t e = row + static_cast<std::size_t>(j);
            weights_[e] /= sum;
            running += weights_[e];
            cumulative_[e] = running;
        }
    }

    // pi <- pi P in O(V k) per sweep: the uniform share of every row adds the same eps / V to
    // every token, so only the favoured entries need visiting. The uniform share alone contracts
    // the L1 error by (1 - eps) per sweep, so the cap is never the binding limit in practice.
    void powerIterate() {
        const auto v = static_cast<std::size_t>(vocab_);
        const auto k = static_cast<std::size_t>(k_);
        stationary_.assign(v, 1.0 / static_cast<double>(vocab_));
        std::vector<double> next(v);
        for (int sweep = 0; sweep < kMaxPowerIterations; ++sweep) {
            std::fill(next.begin(), next.end(), uniformShare());
            for (std::size_t i = 0; i < v; ++i) {
                const double mass = stationary_[i];
                for (std::size_t j = 0; j < k; ++j)
                    next[static_cast<std::size_t>(successors_[i * k + j])] +=
                        mass * favouredShare(i * k + j);
            }
            double total = 0;
            for (const double x : next)
                total += x;
            double change = 0;
            for (std::size_t i = 0; i < v; ++i) {
                next[i] /= total; // rounding drift would otherwise accumulate over sweeps
                change += std::abs(next[i] - stationary_[i]);
            }
            stationary_.swap(next);
            if (change < kStationaryTolerance)
                break;
        }
    }

    // Exact entropy of the dense row in O(k): the V - k unfavoured entries all equal eps / V.
    double rowEntropy(std::int64_t i) const {
        const double b = uniformShare();
        double h = -static_cast<double>(vocab_ - k_) * b * std::log(b);
        const std::size_t row = static_cast<std::size_t>(i) * static_cast<std::size_t>(k_);
        for (int j = 0; j < k_; ++j) {
            const double a = favouredShare(row + static_cast<std::size_t>(j)) + b;
            h -= a * std::log(a);
        }
        return h;
    }

    std::int64_t vocab_;
    int k_;
    std::vector<std::int32_t> successors_; // vocab x k, row-major
    std::vector<double> weights_;    // q: the favoured successors' weights, each row sums to 1
    std::vector<double> cumulative_; // running sums of q per row, for sampling
    std::vector<double> stationary_;
    std::vector<double> stationaryCdf_;
    double entropyRate_ = 0;
};

class SyntheticDataset final : public Dataset {
public:
    explicit SyntheticDataset(const DataSpec& spec)
        : spec_(spec), chain_(spec.vocab, spec.syntheticBranching, spec.seed) {
        chain_.computeStationary();
    }

    // Every row starts from the stationary distribution, so each position of every sequence is
    // distributed as the chain in equilibrium and the mean loss floor is exactly the entropy rate.
    void batch(Split split, std::int64_t step, int micro, int batch, std::int32_t* inputs,
               std::int32_t* targets) const override {
        const std::int64_t seq = spec_.seqLen;
        for (int row = 0; row < batch; ++row) {
            KeyedStream rng(rowKey(spec_.seed, split, step, micro, row));
            std::int32_t* in = inputs + row * seq;
            std::int32_t* out = targets + row * seq;
            std::int32_t current = chain_.drawStationary(rng);
            for (std::int64_t t = 0; t < seq; ++t) {
                in[t] = current;
                current = chain_.step(current, rng);
                out[t] = current;
            }
        }
    }

    std::optional<double> lossFloor() const override { return chain_.entropyRate(); }
    std::int64_t tokens(Split) const override { return 0; }
    std::int64_t vocab() const override { return chain_.vocab(); }

    std::string describe() const override {
        std::ostringstream o;
        o.precision(4);
        o << "synthetic Markov source, vocab " << chain_.vocab() << ", " << chain_.branching()
          << " favoured successors, entropy rate " << chain_.entropyRate() << " nats/token (seed "
          << spec_.seed << ")";
        return o.str();
    }

private:
    DataSpec spec_;
    MarkovChain chain_;
};

struct FormatName {
    DataFormat format;
    const char* name;
};
constexpr FormatName kFormatNames[] = {{DataFormat::Auto, "auto"},
                                       {DataFormat::NanoGpt, "nanogpt"},
                                       {DataFormat::LlmC, "llmc"},
                                       {DataFormat::Text, "text"},
                                       {DataFormat::Synthetic, "synthetic"}};

} // namespace

std::string toString(DataFormat f) {
    for (const FormatName& n : kFormatNames)
        if (n.format == f)
            return n.name;
    return "unknown";
}

DataFormat dataFormatFromString(const std::string& s) {
    std::string lower = s;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string names;
    for (const FormatName& n : kFormatNames) {
        if (lower == n.name)
            return n.format;
        names += (names.empty() ? "" : ", ") + std::string(n.name);
    }
    throw InputError("unknown data format '" + s + "': use one of " + names);
}

std::unique_ptr<Dataset> Dataset::open(const DataSpec& spec) {
    checkSequenceLength(spec);
    checkVocab(spec);
    if (spec.format == DataFormat::Synthetic) {
        checkSyntheticSpec(spec);
        return std::make_unique<SyntheticDataset>(spec);
    }
    checkValFraction(spec);
    if (spec.path.empty())
        throw InputError("data format " + toString(spec.format) +
                         " reads a file, but no data path was given: set the path of a token "
                         "or text file, or use format synthetic");
    return std::make_unique<FileDataset>(spec);
}

std::vector<double> syntheticTransitions(const DataSpec& spec) {
    checkVocab(spec);
    checkSyntheticSpec(spec);
    if (spec.vocab > kMaxDenseVocab)
        throw InputError("synthetic data: a dense transition matrix for vocabulary " +
                         str(spec.vocab) + " would be too large: use a vocab of at most " +
                         str(kMaxDenseVocab));
    return MarkovChain(spec.vocab, spec.syntheticBranching, spec.seed).dense();
}

} // namespace shardscope
