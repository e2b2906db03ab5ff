#include "runtime/checkpoint.h"

#include <algorithm>
#include <array>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace shardscope {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::byte> bytesOf(const std::string& s) {
    std::vector<std::byte> out(s.size());
    for (std::size_t i = 0; i < s.size(); ++i)
        out[i] = static_cast<std::byte>(s[i]);
    return out;
}

CheckpointBlob blobOf(const std::string& name, const std::vector<std::byte>& data) {
    return CheckpointBlob{name, data.data(), data.size()};
}

std::string readFile(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in) << "cannot open " << path;
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

void writeFile(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    ASSERT_TRUE(out) << "cannot write " << path;
}

// Every file below `dir` by relative path, with its contents: equal snapshots are byte-identical.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(dir))
        files[fs::relative(e.path(), dir).string()] = e.is_regular_file() ? readFile(e.path()) : "";
    return files;
}

std::vector<std::string> entries(const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir))
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

std::vector<std::int64_t> steps(const CheckpointStore& store) {
    std::vector<std::int64_t> out;
    for (const CheckpointInfo& c : store.list())
        out.push_back(c.step);
    return out;
}

// A table-driven CRC-32 (IEEE, reflected) written independently of zlib.
std::uint32_t referenceCrc32(const std::vector<std::byte>& data) {
    static const std::array<std::uint32_t, 256> table = [] {
        std::array<std::uint32_t, 256> t{};
        for (std::uint32_t i = 0; i < 256; ++i) {
            std::uint32_t c = i;
            for (int k = 0; k < 8; ++k)
                c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    std::uint32_t c = 0xFFFFFFFFu;
    for (std::byte b : data)
        c = table[(c ^ std::to_integer<std::uint32_t>(b)) & 0xFFu] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

template <class F> std::string checkpointErrorOf(F&& f) {
    try {
        f();
    } catch (const CheckpointError& e) {
        return e.what();
    }
    ADD_FAILURE() << "expected a CheckpointError";
    return {};
}

json manifestOf(const fs::path& dir) {
    return json::parse(readFile(dir / "manifest.json"));
}

void flipByte(const fs::path& path, std::size_t at) {
    std::string data = readFile(path);
    ASSERT_LT(at, data.size());
    data[at] = static_cast<char>(data[at] ^ 0x5a);
    writeFile(path, data);
}

// A pid that belonged to a process that has ended (and been reaped).
pid_t deadPid() {
    const pid_t pid = ::fork();
    if (pid == 0)
        ::_exit(0);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return pid;
}

class CheckpointTest : public ::testing::Test {
protected:
    void SetUp() override {
        std::random_device rd;
        std::ostringstream name;
        name << "shardscope-checkpoint-test-" << std::hex << rd() << rd();
        base_ = fs::temp_directory_path() / name.str();
        fs::create_directories(base_);
        root_ = base_ / "checkpoints";
    }
    void TearDown() override {
        std::error_code ec;
        fs::remove_all(base_, ec);
    }

    // One small blob whose contents name the step, and the step in the meta.
    static CheckpointInfo saveStep(CheckpointStore& store, std::int64_t step) {
        const std::vector<std::byte> params = bytesOf("parameters at step " + std::to_string(step));
        return store.save(step, json{{"loss", 1.0 / static_cast<double>(step + 1)}},
                          {blobOf("params.f32", params)});
    }

    fs::path base_;
    fs::path root_;
};

TEST_F(CheckpointTest, RoundTripKeepsEveryBlobAndTheMeta) {
    std::vector<std::byte> binary(256);
    for (std::size_t i = 0; i < binary.size(); ++i)
        binary[i] = static_cast<std::byte>(255 - i);
    const std::vector<std::byte> params = bytesOf("some parameters");
    const std::vector<std::byte> adam = bytesOf(std::string(10000, 'm'));
    const json meta = {{"loss", 2.5}, {"tokens", 123456}, {"config", {{"dp", 2}, {"tp", 4}}}};

    CheckpointStore store(root_, 3);
    const CheckpointInfo saved = store.save(
        42, meta, {blobOf("params.f32", params), blobOf("adam.m", adam), blobOf("rng", binary)});
    EXPECT_EQ(saved.dir, root_ / "step-00000042");
    EXPECT_EQ(saved.step, 42);
    EXPECT_EQ(saved.meta, meta);

    const LoadedCheckpoint loaded = CheckpointStore::load(saved.dir);
    EXPECT_EQ(loaded.info.dir, saved.dir);
    EXPECT_EQ(loaded.info.step, 42);
    EXPECT_EQ(loaded.info.meta, meta);
    ASSERT_EQ(loaded.blobs.size(), 3u);
    EXPECT_EQ(loaded.blobs.at("params.f32"), params);
    EXPECT_EQ(loaded.blobs.at("adam.m"), adam);
    EXPECT_EQ(loaded.blobs.at("rng"), binary);

    const json m = manifestOf(saved.dir);
    EXPECT_EQ(m["format"], "shardscope-checkpoint");
    EXPECT_EQ(m["version"], kCheckpointFormatVersion);
    EXPECT_EQ(m["step"], 42);
    EXPECT_EQ(m["meta"], meta);
    EXPECT_GT(m["created_unix"].get<std::int64_t>(), 1600000000);
    ASSERT_EQ(m["files"].size(), 3u);
    EXPECT_EQ(m["files"][0]["name"], "params.f32");
    EXPECT_EQ(m["files"][1]["name"], "adam.m");
    EXPECT_EQ(m["files"][1]["bytes"], 10000);
    EXPECT_EQ(m["files"][2]["crc32"], referenceCrc32(binary));
    EXPECT_EQ(entries(root_), std::vector<std::string>{"step-00000042"});
}

TEST_F(CheckpointTest, ManifestHoldsTheStandardCrc32) {
    CheckpointStore store(root_, 1);
    const std::vector<std::byte> check = bytesOf("123456789");
    const CheckpointInfo saved = store.save(1, json::object(), {blobOf("check", check)});
    // The published check value of CRC-32/ISO-HDLC, the polynomial zlib and gzip use.
    EXPECT_EQ(manifestOf(saved.dir)["files"][0]["crc32"], 0xCBF43926u);
}

TEST_F(CheckpointTest, ZeroByteBlobRoundTrips) {
    CheckpointStore store(root_, 1);
    const std::vector<std::byte> some = bytesOf("x");
    const CheckpointInfo saved =
        store.save(3, nullptr, {CheckpointBlob{"empty", nullptr, 0}, blobOf("some", some)});
    EXPECT_EQ(fs::file_size(saved.dir / "empty"), 0u);
    const json m = manifestOf(saved.dir);
    EXPECT_EQ(m["files"][0]["bytes"], 0);
    EXPECT_EQ(m["files"][0]["crc32"], 0);
    const LoadedCheckpoint loaded = CheckpointStore::load(saved.dir);
    EXPECT_TRUE(loaded.blobs.at("empty").empty());
    EXPECT_EQ(loaded.blobs.at("some"), some);
}

TEST_F(CheckpointTest, LargeBlobCrcMatchesAnIndependentCrc32) {
    std::vector<std::byte> big(std::size_t{64} << 20);
    std::uint32_t x = 12345;
    for (std::byte& b : big) {
        x = x * 1664525u + 1013904223u;
        b = static_cast<std::byte>(x >> 24);
    }
    CheckpointStore store(root_, 1);
    const CheckpointInfo first = store.save(1, json::object(), {blobOf("big", big)});
    EXPECT_EQ(manifestOf(first.dir)["files"][0]["crc32"], referenceCrc32(big));
    EXPECT_EQ(manifestOf(first.dir)["files"][0]["bytes"], big.size());
    EXPECT_EQ(CheckpointStore::load(first.dir).blobs.at("big"), big);

    // Pruning deletes only what verifies, reading the file in chunks rather than whole: step 1
    // goes.
    saveStep(store, 2);
    EXPECT_EQ(steps(store), std::vector<std::int64_t>{2});
    EXPECT_FALSE(fs::exists(first.dir));
}

TEST_F(CheckpointTest, ListAndLatestAreOrderedByStep) {
    CheckpointStore store(root_, 10);
    EXPECT_TRUE(store.list().empty());
    EXPECT_FALSE(store.latest().has_value());
    EXPECT_FALSE(fs::exists(root_)) << "listing must not create the root";

    for (std::int64_t step : {30, 2, 100, 7})
        saveStep(store, step);
    EXPECT_EQ(steps(store), (std::vector<std::int64_t>{2, 7, 30, 100}));
    const std::optional<CheckpointInfo> latest = store.latest();
    ASSERT_TRUE(latest.has_value());
    EXPECT_EQ(latest->step, 100);
    EXPECT_EQ(latest->dir, root_ / "step-00000100");
    EXPECT_EQ(latest->meta, (json{{"loss", 1.0 / 101.0}}));
}

TEST_F(CheckpointTest, ListIgnoresWhatIsNotACheckpoint) {
    CheckpointStore store(root_, 10);
    const CheckpointInfo real = saveStep(store, 3);
    fs::create_directories(root_ / "step-junk");
    fs::create_directories(root_ / "step-00000009"); // no manifest
    fs::create_directories(root_ / "other");
    writeFile(root_ / "notes.txt", "hello");
    writeFile(root_ / "step-00000004", "a file, not a directory");
    // A copy under a name that does not match the step it holds.
    fs::copy(real.dir, root_ / "step-00000005");
    EXPECT_EQ(steps(store), std::vector<std::int64_t>{3});
}

TEST_F(CheckpointTest, KeepLastPrunesTheOldest) {
    CheckpointStore store(root_, 2);
    for (std::int64_t step = 1; step <= 5; ++step)
        saveStep(store, step);
    EXPECT_EQ(steps(store), (std::vector<std::int64_t>{4, 5}));
    EXPECT_EQ(entries(root_), (std::vector<std::string>{"step-00000004", "step-00000005"}));
}

TEST_F(CheckpointTest, TheCheckpointJustSavedIsNeverPruned) {
    CheckpointStore store(root_, 1);
    saveStep(store, 200);
    // A run resumed from an earlier step writes a lower-numbered checkpoint.
    saveStep(store, 150);
    EXPECT_EQ(steps(store), std::vector<std::int64_t>{150});
}

TEST_F(CheckpointTest, FlippedByteIsAChecksumError) {
    CheckpointStore store(root_, 1);
    const std::vector<std::byte> params(4096, std::byte{7});
    const CheckpointInfo saved = store.save(8, json::object(), {blobOf("params.f32", params)});
    flipByte(saved.dir / "params.f32", 1234);

    const std::string message = checkpointErrorOf([&] { CheckpointStore::load(saved.dir); });
    EXPECT_NE(message.find(saved.dir.string()), std::string::npos) << message;
    EXPECT_NE(message.find("params.f32"), std::string::npos) << message;
    EXPECT_NE(message.find("checksum mismatch: expected 0x"), std::string::npos) << message;
    EXPECT_NE(message.find("--resume"), std::string::npos) << message;
}

TEST_F(CheckpointTest, TruncatedFileIsReported) {
    CheckpointStore store(root_, 1);
    const std::vector<std::byte> params(4096, std::byte{7});
    const CheckpointInfo saved = store.save(8, json::object(), {blobOf("params.f32", params)});
    fs::resize_file(saved.dir / "params.f32", 1000);

    const std::string message = checkpointErrorOf([&] { CheckpointStore::load(saved.dir); });
    EXPECT_NE(message.find("params.f32: truncated: 1000 of 4096 bytes"), std::string::npos)
        << message;
    EXPECT_NE(message.find("delete this one"), std::string::npos) << message;
}

TEST_F(CheckpointTest, MissingFileIsReported) {
    CheckpointStore store(root_, 1);
    const std::vector<std::byte> params = bytesOf("p");
    const std::vector<std::byte> adam = bytesOf("a");
    const CheckpointInfo saved =
        store.save(8, json::object(), {blobOf("params.f32", params), blobOf("adam.m", adam)});
    fs::remove(saved.dir / "adam.m");

    const std::string message = checkpointErrorOf([&] { CheckpointStore::load(saved.dir); });
    EXPECT_NE(message.find("adam.m is missing"), std::string::npos) << message;
}

TEST_F(CheckpointTest, MissingManifestIsReportedAndNotListed) {
    CheckpointStore store(root_, 1);
    const CheckpointInfo saved = saveStep(store, 8);
    fs::remove(saved.dir / "manifest.json");

    const std::string message = checkpointErrorOf([&] { CheckpointStore::load(saved.dir); });
    EXPECT_NE(message.find(saved.dir.string()), std::string::npos) << message;
    EXPECT_NE(message.find("manifest.json is missing"), std::string::npos) << message;
    EXPECT_TRUE(store.list().empty());
}

TEST_F(CheckpointTest, NewerFormatVersionIsRejectedAndNotListed) {
    CheckpointStore store(root_, 1);
    const CheckpointInfo saved = saveStep(store, 8);
    json m = manifestOf(saved.dir);
    m["version"] = 99;
    writeFile(saved.dir / "manifest.json", m.dump());

    const std::string message = checkpointErrorOf([&] { CheckpointStore::load(saved.dir); });
    EXPECT_NE(message.find("written by a newer Shardscope"), std::string::npos) << message;
    EXPECT_NE(message.find("99"), std::string::npos) << message;
    EXPECT_TRUE(store.list().empty());
}

TEST_F(CheckpointTest, MalformedManifestsAreRejected) {
    CheckpointStore store(root_, 1);
    const CheckpointInfo saved = saveStep(store, 8);
    const json good = manifestOf(saved.dir);
    const auto rejects = [&](const std::string& text, const std::string& expected) {
        writeFile(saved.dir / "manifest.json", text);
        const std::string message = checkpointErrorOf([&] { CheckpointStore::load(saved.dir); });
        EXPECT_NE(message.find(expected), std::string::npos) << text << "\n" << message;
    };
    rejects("{\"format\": \"shardscope-checkpoint\", ", "not valid JSON");
    json m = good;
    m["format"] = "something-else";
    rejects(m.dump(), "not a Shardscope checkpoint manifest");
    m = good;
    m["files"][0]["name"] = "../../escape";
    rejects(m.dump(), "contains '/'");
    m = good;
    m["files"][0]["crc32"] = -1;
    rejects(m.dump(), "crc32");
    m = good;
    m.erase("step");
    rejects(m.dump(), "\"step\"");
    // Nested past any manifest: refused before it is parsed or described.
    rejects("{\"format\": " + std::string(80000, '[') + std::string(80000, ']') + "}",
            "manifest.json: arrays and objects nest");
    // A number past a double's range escaped as nlohmann's out_of_range (fuzz_checkpoint_manifest).
    std::string overflow = good.dump();
    overflow.insert(1, "\"created_unix\": 1e795621810, ");
    rejects(overflow, "manifest.json: not valid JSON: number overflow");
    std::vector<std::pair<std::filesystem::path, std::string>> skipped;
    EXPECT_TRUE(store.list(&skipped).empty());
    ASSERT_EQ(skipped.size(), 1u);
    EXPECT_NE(skipped[0].second.find("number overflow"), std::string::npos) << skipped[0].second;
}

TEST_F(CheckpointTest, LoadOfAMissingDirectoryNamesIt) {
    const std::string message =
        checkpointErrorOf([&] { CheckpointStore::load(root_ / "step-00000001"); });
    EXPECT_NE(message.find((root_ / "step-00000001").string()), std::string::npos) << message;
}

TEST_F(CheckpointTest, SavingAnExistingStepThrowsAndKeepsTheOldOne) {
    CheckpointStore store(root_, 3);
    saveStep(store, 5);
    const auto before = snapshot(root_);

    const std::vector<std::byte> other = bytesOf("different parameters");
    const std::string message = checkpointErrorOf([&] {
        store.save(5, json{{"loss", 0.0}}, {blobOf("params.f32", other)});
    });
    EXPECT_NE(message.find((root_ / "step-00000005").string() + " already exists"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("never overwritten"), std::string::npos) << message;
    EXPECT_EQ(snapshot(root_), before);
}

TEST_F(CheckpointTest, LeftoverTemporaryDirectoryIsIgnoredAndCleanedBySave) {
    fs::create_directories(root_);
    const fs::path crashed = root_ / (".step-00000007.tmp-" + std::to_string(deadPid()));
    const fs::path running = root_ / (".step-00000009.tmp-" + std::to_string(::getppid()));
    for (const fs::path& dir : {crashed, running}) {
        fs::create_directories(dir);
        writeFile(dir / "params.f32", "half written");
    }
    // Even one that reached its manifest is not a checkpoint until renamed into place.
    writeFile(crashed / "manifest.json", readFile(crashed / "params.f32"));

    CheckpointStore store(root_, 2);
    EXPECT_TRUE(store.list().empty());
    EXPECT_FALSE(store.latest().has_value());

    saveStep(store, 1);
    EXPECT_FALSE(fs::exists(crashed));
    EXPECT_TRUE(fs::exists(running)) << "a save in progress in a live process must be left alone";
    EXPECT_EQ(steps(store), std::vector<std::int64_t>{1});
}

TEST_F(CheckpointTest, PruningNeverDeletesACorruptCheckpoint) {
    {
        CheckpointStore keepAll(root_, 10);
        for (std::int64_t step = 1; step <= 3; ++step)
            saveStep(keepAll, step);
    }
    flipByte(root_ / "step-00000002" / "params.f32", 0);
    const auto corrupt = snapshot(root_ / "step-00000002");

    CheckpointStore store(root_, 1);
    saveStep(store, 4);
    EXPECT_EQ(steps(store), (std::vector<std::int64_t>{2, 4}));
    EXPECT_EQ(snapshot(root_ / "step-00000002"), corrupt);
}

TEST_F(CheckpointTest, CorruptCheckpointsDoNotCountTowardsKeepLast) {
    {
        CheckpointStore keepAll(root_, 10);
        for (std::int64_t step = 1; step <= 3; ++step)
            saveStep(keepAll, step);
    }
    fs::resize_file(root_ / "step-00000003" / "params.f32", 1);

    // keepLast 2: the new step 4 and the good step 2 are the two kept; the corrupt 3 stays too.
    CheckpointStore store(root_, 2);
    saveStep(store, 4);
    EXPECT_EQ(steps(store), (std::vector<std::int64_t>{2, 3, 4}));
}

TEST_F(CheckpointTest, SaveUnderARegularFileThrowsWithThePathAndLeavesNothing) {
    writeFile(base_ / "plain-file", "x");
    const fs::path root = base_ / "plain-file" / "checkpoints";
    CheckpointStore store(root, 1);

    const std::string message = checkpointErrorOf([&] { saveStep(store, 1); });
    EXPECT_NE(message.find(root.string()), std::string::npos) << message;
    EXPECT_NE(message.find("Not a directory"), std::string::npos) << message;
    EXPECT_EQ(entries(base_), std::vector<std::string>{"plain-file"});
    EXPECT_EQ(readFile(base_ / "plain-file"), "x");
}

// Lowers this process's file size limit (works as root, unlike permissions), so that a write in
// the middle of a save fails with EFBIG instead of killing the process with SIGXFSZ.
class FileSizeLimit {
public:
    explicit FileSizeLimit(rlim_t bytes) {
        previousHandler_ = std::signal(SIGXFSZ, SIG_IGN);
        ::getrlimit(RLIMIT_FSIZE, &previous_);
        rlimit lower = previous_;
        lower.rlim_cur = bytes;
        EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &lower), 0);
    }
    ~FileSizeLimit() {
        ::setrlimit(RLIMIT_FSIZE, &previous_);
        std::signal(SIGXFSZ, previousHandler_);
    }
    FileSizeLimit(const FileSizeLimit&) = delete;
    FileSizeLimit& operator=(const FileSizeLimit&) = delete;

private:
    rlimit previous_{};
    void (*previousHandler_)(int) = nullptr;
};

TEST_F(CheckpointTest, FailedWriteLeavesEarlierCheckpointsIntact) {
    CheckpointStore store(root_, 1);
    saveStep(store, 1);
    const auto before = snapshot(root_);

    const std::vector<std::byte> small(1000, std::byte{1});
    const std::vector<std::byte> big(std::size_t{1} << 20, std::byte{2});
    std::string message;
    {
        FileSizeLimit limit(std::size_t{256} << 10);
        message = checkpointErrorOf([&] {
            store.save(2, json::object(), {blobOf("small.bin", small), blobOf("big.bin", big)});
        });
    }
    EXPECT_NE(message.find("big.bin"), std::string::npos) << message;
    EXPECT_NE(message.find("File too large"), std::string::npos) << message;
    EXPECT_NE(message.find("step-00000002"), std::string::npos) << message;
    EXPECT_EQ(snapshot(root_), before) << "no temporary directory, step 1 untouched";
    EXPECT_NO_THROW(CheckpointStore::load(root_ / "step-00000001"));
}

TEST_F(CheckpointTest, InvalidBlobsAreProgrammingErrors) {
    CheckpointStore store(root_, 1);
    const std::vector<std::byte> data = bytesOf("abc");
    for (const char* name : {"", "a/b", "manifest.json", ".", ".."}) {
        EXPECT_THROW(store.save(1, json::object(), {blobOf(name, data)}), std::invalid_argument)
            << "name \"" << name << "\"";
    }
    EXPECT_THROW(store.save(1, json::object(), {blobOf("x", data), blobOf("x", data)}),
                 std::invalid_argument);
    EXPECT_THROW(store.save(1, json::object(), {CheckpointBlob{"x", nullptr, 3}}),
                 std::invalid_argument);
    EXPECT_THROW(store.save(-1, json::object(), {blobOf("x", data)}), std::invalid_argument);
    EXPECT_THROW(store.save(1, json("\xff\xfe"), {blobOf("x", data)}), std::invalid_argument);
    EXPECT_FALSE(fs::exists(root_)) << "nothing may be written for a rejected call";
    EXPECT_THROW((void)CheckpointStore(root_, 0), std::invalid_argument);
}

// Two writers, one manifest: every shard's files are listed with their CRCs, each reader can
// read only its own, and a failed save leaves nothing half made.
TEST_F(CheckpointTest, ShardsOfSeveralWritersShareOneManifest) {
    CheckpointStore store(root_, 3);
    store.prepareShards(7);
    const std::vector<std::byte> a = bytesOf("stage zero"), b = bytesOf("stage one!");
    store.writeShard(7, "pp0", {blobOf("params.f32", a)});
    store.writeShard(7, "pp1", {blobOf("params.f32", b)});
    const CheckpointInfo info = store.commitShards(7, json{{"loss", 2.5}}, {"pp0", "pp1"});
    EXPECT_EQ(info.dir, root_ / "step-00000007");
    const json m = manifestOf(info.dir);
    ASSERT_EQ(m["files"].size(), 2u);
    EXPECT_EQ(m["files"][0]["name"], "pp0.params.f32");
    EXPECT_EQ(m["files"][1]["name"], "pp1.params.f32");
    EXPECT_FALSE(fs::exists(info.dir / "pp0.shard.json")); // only what the manifest names
    const LoadedCheckpoint mine = CheckpointStore::load(
        info.dir, [](const std::string& name) { return name.starts_with("pp1."); });
    ASSERT_EQ(mine.blobs.size(), 1u);
    EXPECT_EQ(mine.blobs.at("pp1.params.f32"), b);
    EXPECT_EQ(mine.info.meta["loss"], 2.5);
    // A corrupt shard of another rank does not stop this rank's load, but fails a full one.
    flipByte(info.dir / "pp0.params.f32", 0);
    EXPECT_NO_THROW(CheckpointStore::load(
        info.dir, [](const std::string& name) { return name.starts_with("pp1."); }));
    EXPECT_THROW(CheckpointStore::load(info.dir), CheckpointError);
    EXPECT_THROW(store.prepareShards(7), CheckpointError); // never overwritten
}

TEST_F(CheckpointTest, AShardThatNeverArrivedFailsTheCommitAndLeavesNothing) {
    CheckpointStore store(root_, 3);
    saveStep(store, 1);
    store.prepareShards(2);
    store.writeShard(2, "pp0", {blobOf("params.f32", bytesOf("x"))});
    try {
        store.commitShards(2, json::object(), {"pp0", "pp1"});
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("pp1"), std::string::npos) << e.what();
    }
    ASSERT_EQ(store.list().size(), 1u);
    EXPECT_EQ(store.latest()->step, 1);
    for (const auto& entry : fs::directory_iterator(root_)) // no shard directory left behind
        EXPECT_EQ(entry.path().filename().string().find(".shards"), std::string::npos);
    // The same step can be saved again afterwards, and a stale shard directory is cleared.
    store.prepareShards(2);
    store.writeShard(2, "pp0", {blobOf("params.f32", bytesOf("y"))});
    store.prepareShards(3); // a job that died mid-save left step 2's shards
    EXPECT_FALSE(fs::exists(root_ / ".step-00000002.shards"));
}

} // namespace
} // namespace shardscope
