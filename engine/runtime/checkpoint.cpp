#include "checkpoint.h"

#include "core/error.h"
#include "core/json_io.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <limits>
#include <set>
#include <signal.h>
#include <sstream>
#include <sys/stat.h>
#include <sys/types.h>
#include <system_error>
#include <unistd.h>
#include <utility>
#include <zlib.h>

namespace shardscope {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kManifestName = "manifest.json";
constexpr const char* kFormatName = "shardscope-checkpoint";
constexpr const char* kFixHint =
    "resume from an earlier checkpoint with --resume <path>, or delete this one";
constexpr const char* kUntouched = "; earlier checkpoints are untouched";

// zlib lengths are 32-bit and Linux moves at most about 2 GiB per read() or write().
constexpr std::size_t kIoChunk = std::size_t{1} << 30;
// Verifying before pruning streams each file, so a large checkpoint is never held in memory.
constexpr std::size_t kVerifyChunk = std::size_t{4} << 20;

// A failed system call while saving; save() says which checkpoint it was writing and cleans up.
class IoError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

std::string sysFailure(const std::string& what, const fs::path& path, int err) {
    return what + " " + path.string() + ": " + std::generic_category().message(err);
}

std::string hex32(std::uint32_t v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08x", static_cast<unsigned>(v));
    return buf;
}

std::string stepDirName(std::int64_t step) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
    return buf;
}

std::string temporaryName(std::int64_t step) {
    return "." + stepDirName(step) + ".tmp-" + std::to_string(::getpid());
}

// Where the ranks of a sharded save write their files before the leader's manifest names them.
std::string shardDirName(std::int64_t step) {
    return "." + stepDirName(step) + ".shards";
}

std::uint32_t crcUpdate(std::uint32_t crc, const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    uLong c = crc;
    while (bytes > 0) {
        const std::size_t n = std::min(bytes, kIoChunk);
        c = ::crc32(c, p, static_cast<uInt>(n));
        p += n;
        bytes -= n;
    }
    return static_cast<std::uint32_t>(c);
}

// File names are joined to the checkpoint directory, both when saving and when a manifest from
// disk is read, so anything but a plain name could escape the directory or hide the manifest.
std::string nameProblem(const std::string& name) {
    if (name.empty())
        return "is empty";
    if (name == "." || name == "..")
        return "is not a file name";
    if (name.find('/') != std::string::npos)
        return "contains '/'";
    if (name.find('\0') != std::string::npos)
        return "contains a NUL character";
    if (name == kManifestName)
        return "is reserved for the manifest";
    return {};
}

class Fd {
public:
    explicit Fd(int fd) : fd_(fd) {}
    ~Fd() {
        if (fd_ >= 0)
            ::close(fd_);
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    int get() const { return fd_; }
    // close() can report a write that failed late (NFS, quotas), so writers check it.
    int close() { return ::close(std::exchange(fd_, -1)); }

private:
    int fd_;
};

// Writes a new file, flushes it to the device and returns the CRC-32 of what was written.
std::uint32_t writeDurably(const fs::path& path, const void* data, std::size_t bytes) {
    Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0)
        throw IoError(sysFailure("cannot create", path, errno));
    const auto* p = static_cast<const unsigned char*>(data);
    std::size_t done = 0;
    std::uint32_t crc = 0;
    while (done < bytes) {
        const ssize_t n = ::write(fd.get(), p + done, std::min(bytes - done, kIoChunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            const int err = n < 0 ? errno : EIO;
            throw IoError(sysFailure("cannot write", path, err) + " (after " +
                          std::to_string(done) + " of " + std::to_string(bytes) + " bytes)");
        }
        crc = crcUpdate(crc, p + done, static_cast<std::size_t>(n));
        done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd.get()) != 0)
        throw IoError(sysFailure("cannot flush (fsync)", path, errno));
    if (fd.close() != 0)
        throw IoError(sysFailure("cannot close", path, errno));
    return crc;
}

// Makes the entries of a directory (a rename into it, new files) survive a crash.
void syncDirectory(const fs::path& dir) {
    Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd.get() < 0)
        throw IoError(sysFailure("cannot open directory", dir, errno));
    // Some file systems cannot fsync a directory (EINVAL); their entries are as durable as they
    // will get, and refusing to checkpoint on them would help no one.
    if (::fsync(fd.get()) != 0 && errno != EINVAL)
        throw IoError(sysFailure("cannot flush (fsync) directory", dir, errno));
    if (fd.close() != 0)
        throw IoError(sysFailure("cannot close directory", dir, errno));
}

std::string alreadyExists(const fs::path& dir) {
    return "checkpoint " + dir.string() +
           " already exists; it is never overwritten: resume from it with --resume " +
           dir.string() + ", delete it, or save a different step";
}

// Moves the finished temporary directory into place, refusing to replace anything there, even
// an empty directory created since save() looked.
void publish(const fs::path& from, const fs::path& to) {
#ifdef RENAME_NOREPLACE
    int rc = ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE);
    // File systems without RENAME_NOREPLACE: the existence check in save() has to do.
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS))
        rc = ::rename(from.c_str(), to.c_str());
#else
    const int rc = ::rename(from.c_str(), to.c_str());
#endif
    if (rc == 0)
        return;
    if (errno == EEXIST || errno == ENOTEMPTY)
        throw CheckpointError(alreadyExists(to));
    throw IoError(sysFailure("cannot rename " + from.string() + " to", to, errno));
}

// The owner of a temporary directory ".step-XXXXXXXX.tmp-<pid>", if the name is one.
std::optional<pid_t> temporaryOwner(const std::string& name) {
    const std::string marker = ".tmp-";
    const std::size_t at = name.rfind(marker);
    if (name.rfind(".step-", 0) != 0 || at == std::string::npos)
        return std::nullopt;
    const char* first = name.data() + at + marker.size();
    const char* last = name.data() + name.size();
    pid_t pid = 0;
    const auto [end, ec] = std::from_chars(first, last, pid);
    if (first == last || ec != std::errc() || end != last)
        return std::nullopt;
    return pid;
}

bool processAlive(pid_t pid) {
    if (pid <= 0) // kill() would address a process group
        return false;
    return ::kill(pid, 0) == 0 || errno == EPERM;
}

// A temporary directory whose process has ended was left by a crash (or a kill) during a save or
// a prune. One whose process still runs on this host may be a save in progress and is left alone;
// so is this process's own, which another store here may be using.
void removeStaleTemporaries(const fs::path& root) {
    std::vector<fs::path> stale;
    std::error_code ec;
    fs::directory_iterator it(root, ec);
    for (const fs::directory_iterator end; !ec && it != end; it.increment(ec)) {
        const auto pid = temporaryOwner(it->path().filename().string());
        if (pid && *pid != ::getpid() && !processAlive(*pid))
            stale.push_back(it->path());
    }
    // Cleaning up is housekeeping: a directory that cannot be read or removed now must not stop
    // the checkpoint the caller asked for, and the next save tries again.
    for (const fs::path& p : stale)
        fs::remove_all(p, ec);
}

[[noreturn]] void unusable(const fs::path& dir, const std::string& what,
                           const std::string& hint = kFixHint) {
    throw CheckpointError("checkpoint " + dir.string() + ": " + what + "; " + hint);
}

[[noreturn]] void malformed(const fs::path& dir, const std::string& what) {
    unusable(dir, std::string(kManifestName) + " is malformed: " + what);
}

[[noreturn]] void truncated(const fs::path& dir, const std::string& name, std::uint64_t have,
                            std::uint64_t want) {
    unusable(dir, name + ": truncated: " + std::to_string(have) + " of " + std::to_string(want) +
                      " bytes");
}

const json* member(const json& object, const char* key) {
    const auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
}

struct ManifestFile {
    std::string name;
    std::uint64_t bytes = 0;
    std::uint32_t crc = 0;
};

struct Manifest {
    std::int64_t step = 0;
    json meta;
    std::vector<ManifestFile> files;
};

std::string readManifestText(const fs::path& dir) {
    const fs::path path = dir / kManifestName;
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
        if (errno == ENOENT)
            unusable(dir, std::string(kManifestName) +
                              " is missing (the save did not finish, or this is not a checkpoint)");
        unusable(dir, sysFailure("cannot open", path, errno));
    }
    std::string text;
    char buf[65536];
    for (;;) {
        const ssize_t n = ::read(fd.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            unusable(dir, sysFailure("cannot read", path, errno));
        if (n == 0)
            return text;
        text.append(buf, static_cast<std::size_t>(n));
        if (text.size() > kMaxJsonFileBytes)
            unusable(dir, std::string(kManifestName) + " is larger than " +
                              std::to_string(kMaxJsonFileBytes >> 20) +
                              " MiB, far more than any manifest");
    }
}

Manifest readManifest(const fs::path& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        throw CheckpointError("checkpoint " + dir.string() +
                              " is not a directory; pass a checkpoint directory such as "
                              "<root>/step-00000100 to --resume");
    json j;
    try {
        j = parseJson(readManifestText(dir), kManifestName);
    } catch (const InputError& e) { // too deep, not JSON, a number out of range
        unusable(dir, e.what());
    }
    const auto field = [&](const char* key) { return member(j, key); };
    if (!j.is_object() || !field("format") || *field("format") != kFormatName)
        unusable(dir, std::string(kManifestName) +
                          " is not a Shardscope checkpoint manifest (its "
                          "\"format\" is not \"" +
                          kFormatName + "\")");

    // The version is judged before anything else: a newer format may be laid out differently.
    const json* version = field("version");
    if (!version || !version->is_number_integer())
        malformed(dir, "\"version\" is not an integer");
    if (version->is_number_unsigned() &&
        version->get<std::uint64_t>() > static_cast<std::uint64_t>(kCheckpointFormatVersion))
        unusable(dir,
                 "written by a newer Shardscope (checkpoint format version " + version->dump() +
                     "; this build reads versions up to " +
                     std::to_string(kCheckpointFormatVersion) + ")",
                 "open it with that Shardscope, or resume from an earlier checkpoint with "
                 "--resume <path>");
    if (!version->is_number_unsigned() || version->get<std::uint64_t>() < 1)
        malformed(dir, "\"version\" " + version->dump() + " is not a format version");

    Manifest m;
    const json* step = field("step");
    if (!step || !step->is_number_unsigned() ||
        step->get<std::uint64_t>() >
            static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        malformed(dir, "\"step\" is not a non-negative integer");
    m.step = step->get<std::int64_t>();
    if (const json* meta = field("meta"))
        m.meta = *meta;

    const json* files = field("files");
    if (!files || !files->is_array())
        malformed(dir, "\"files\" is not an array");
    std::set<std::string> seen;
    for (std::size_t i = 0; i < files->size(); ++i) {
        const json& f = (*files)[i];
        const std::string where = "files[" + std::to_string(i) + "]";
        if (!f.is_object())
            malformed(dir, where + " is not an object");
        const json* name = member(f, "name");
        const json* bytes = member(f, "bytes");
        const json* crc = member(f, "crc32");
        if (!name || !name->is_string())
            malformed(dir, where + ".name is not a string");
        ManifestFile mf;
        mf.name = name->get<std::string>();
        if (const std::string problem = nameProblem(mf.name); !problem.empty())
            malformed(dir, where + ".name \"" + mf.name + "\" " + problem);
        if (!seen.insert(mf.name).second)
            malformed(dir, where + ".name \"" + mf.name + "\" appears twice");
        if (!bytes || !bytes->is_number_unsigned())
            malformed(dir, where + ".bytes is not a non-negative integer");
        if (!crc || !crc->is_number_unsigned() ||
            crc->get<std::uint64_t>() > std::numeric_limits<std::uint32_t>::max())
            malformed(dir, where + ".crc32 is not a 32-bit unsigned integer");
        mf.bytes = bytes->get<std::uint64_t>();
        mf.crc = static_cast<std::uint32_t>(crc->get<std::uint64_t>());
        m.files.push_back(std::move(mf));
    }
    return m;
}

// Checks one file against its manifest entry; keeps its bytes in `out` when one is given.
void verifyFile(const fs::path& dir, const ManifestFile& f, std::vector<std::byte>* out) {
    const fs::path path = dir / f.name;
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
        if (errno == ENOENT)
            unusable(dir, f.name + " is missing");
        unusable(dir, sysFailure("cannot open", path, errno));
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0)
        unusable(dir, sysFailure("cannot stat", path, errno));
    if (!S_ISREG(st.st_mode))
        unusable(dir, f.name + " is not a regular file");
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size < f.bytes)
        truncated(dir, f.name, size, f.bytes);
    if (size > f.bytes)
        unusable(dir, f.name + ": " + std::to_string(size) + " bytes, but the manifest says " +
                          std::to_string(f.bytes));
    if (f.bytes > std::numeric_limits<std::size_t>::max())
        unusable(dir, f.name + ": too large for this machine's address space");

    const auto total = static_cast<std::size_t>(f.bytes);
    std::vector<std::byte> chunk;
    if (out)
        out->resize(total);
    else
        chunk.resize(std::min(total, kVerifyChunk));
    std::size_t done = 0;
    std::uint32_t crc = 0;
    while (done < total) {
        std::byte* at = out ? out->data() + done : chunk.data();
        const std::size_t want = std::min(total - done, out ? kIoChunk : chunk.size());
        const ssize_t n = ::read(fd.get(), at, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            unusable(dir, sysFailure("cannot read", path, errno));
        if (n == 0) // shrank since fstat()
            truncated(dir, f.name, done, f.bytes);
        crc = crcUpdate(crc, at, static_cast<std::size_t>(n));
        done += static_cast<std::size_t>(n);
    }
    if (crc != f.crc)
        unusable(dir,
                 f.name + ": checksum mismatch: expected " + hex32(f.crc) + ", got " + hex32(crc));
}

bool verifies(const fs::path& dir) {
    try {
        const Manifest m = readManifest(dir);
        for (const ManifestFile& f : m.files)
            verifyFile(dir, f, nullptr);
        return true;
    } catch (const CheckpointError&) {
        return false;
    }
}

// Makes sure the root exists and `step` is not saved there yet, and clears what crashed saves
// left behind, before a save writes anything.
void prepareRootFor(const fs::path& root, std::int64_t step) {
    const fs::path finalDir = root / stepDirName(step);
    const std::string context = "cannot save checkpoint " + finalDir.string() + ": ";
    std::error_code ec;
    fs::create_directories(root, ec);
    if (ec)
        throw CheckpointError(context + "cannot create the checkpoint directory " + root.string() +
                              ": " + ec.message());
    struct stat st {};
    if (::lstat(finalDir.c_str(), &st) == 0)
        throw CheckpointError(alreadyExists(finalDir));
    if (errno != ENOENT)
        throw CheckpointError(context + sysFailure("cannot look at", finalDir, errno));
    removeStaleTemporaries(root);
}

// Renamed out of the step-* namespace first, so list() never sees a half-deleted checkpoint; a
// crash during remove_all leaves a temporary directory that a later save removes.
void removeCheckpoint(const fs::path& root, const CheckpointInfo& c) {
    const fs::path trash = root / temporaryName(c.step);
    if (::rename(c.dir.c_str(), trash.c_str()) != 0)
        return;
    std::error_code ec;
    fs::remove_all(trash, ec);
}

} // namespace

CheckpointStore::CheckpointStore(std::filesystem::path root, int keepLast)
    : root_(std::move(root)), keepLast_(keepLast) {
    if (keepLast_ < 1)
        throw std::invalid_argument("CheckpointStore: keepLast must be >= 1, got " +
                                    std::to_string(keepLast_));
}

CheckpointInfo CheckpointStore::save(std::int64_t step, const nlohmann::json& meta,
                                     const std::vector<CheckpointBlob>& blobs) {
    if (step < 0)
        throw std::invalid_argument("checkpoint step must be >= 0, got " + std::to_string(step));
    std::set<std::string> seen;
    for (const CheckpointBlob& b : blobs) {
        if (const std::string problem = nameProblem(b.name); !problem.empty())
            throw std::invalid_argument("checkpoint blob name \"" + b.name + "\" " + problem +
                                        "; it must be a plain file name");
        if (!seen.insert(b.name).second)
            throw std::invalid_argument("checkpoint blob name \"" + b.name + "\" appears twice");
        if (b.data == nullptr && b.bytes > 0)
            throw std::invalid_argument("checkpoint blob \"" + b.name + "\" has " +
                                        std::to_string(b.bytes) + " bytes but no data");
    }
    // Serialising is the only way to find meta that JSON cannot hold (invalid UTF-8); finding it
    // after the blobs are on disk would waste the writes.
    try {
        (void)meta.dump();
    } catch (const json::type_error& e) {
        throw std::invalid_argument(std::string("checkpoint meta cannot be written: ") + e.what());
    }

    const fs::path finalDir = root_ / stepDirName(step);
    const std::string context = "cannot save checkpoint " + finalDir.string() + ": ";
    std::error_code ec;
    prepareRootFor(root_, step);
    const fs::path tmp = root_ / temporaryName(step);
    // Only a failed clean-up in this process leaves one of its own names behind.
    fs::remove_all(tmp, ec);
    if (::mkdir(tmp.c_str(), 0777) != 0)
        throw CheckpointError(context + sysFailure("cannot create", tmp, errno) + kUntouched);

    const auto discard = [&]() -> std::string {
        std::error_code rmEc;
        fs::remove_all(tmp, rmEc);
        return rmEc ? " (the temporary directory " + tmp.string() +
                          " could not be removed: " + rmEc.message() + ")"
                    : std::string();
    };
    try {
        json files = json::array();
        for (const CheckpointBlob& b : blobs) {
            json f = json::object();
            f["name"] = b.name;
            f["bytes"] = b.bytes;
            f["crc32"] = writeDurably(tmp / b.name, b.data, b.bytes);
            files.push_back(std::move(f));
        }
        publishWithManifest(tmp, step, meta, std::move(files));
    } catch (const IoError& e) {
        const std::string note = discard();
        throw CheckpointError(context + e.what() + note + kUntouched);
    } catch (...) {
        discard();
        throw;
    }
    return afterPublish(step, meta);
}

void CheckpointStore::publishWithManifest(const fs::path& tmp, std::int64_t step,
                                          const nlohmann::json& meta, nlohmann::json files) {
    json manifest = json::object();
    manifest["format"] = kFormatName;
    manifest["version"] = kCheckpointFormatVersion;
    manifest["step"] = step;
    manifest["meta"] = meta;
    manifest["files"] = std::move(files);
    manifest["created_unix"] = std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
    // Written last: a directory with a manifest has all its files.
    const std::string text = manifest.dump(2) + "\n";
    writeDurably(tmp / kManifestName, text.data(), text.size());
    syncDirectory(tmp);
    publish(tmp, root_ / stepDirName(step));
}

CheckpointInfo CheckpointStore::afterPublish(std::int64_t step, const nlohmann::json& meta) {
    const fs::path finalDir = root_ / stepDirName(step);
    const std::string context = "cannot save checkpoint " + finalDir.string() + ": ";
    try {
        syncDirectory(root_);
    } catch (const IoError& e) {
        // The caller is told the save failed, so it must not find the checkpoint later either.
        std::error_code rmEc;
        fs::remove_all(finalDir, rmEc);
        throw CheckpointError(context + e.what() + ", so the new checkpoint might not survive a " +
                              "crash" +
                              (rmEc ? "; it could not be removed either (" + rmEc.message() + ")"
                                    : std::string("; it was removed again")) +
                              kUntouched);
    }

    // Pruning keeps the newest keepLast checkpoints that verify, counting the one just written
    // (its CRCs were taken from the bytes written, so it is not read back) and never deleting it,
    // even when older-numbered than others (a run resumed from an earlier step). A checkpoint that
    // fails verification is kept for inspection and does not count, so keepLast usable ones stay.
    // Nothing is read back unless there are more than keepLast checkpoints. Pruning is
    // housekeeping after a save that succeeded: a root that cannot be listed or a checkpoint that
    // cannot be removed is left as it is, and the next save tries again.
    std::vector<CheckpointInfo> all;
    try {
        all = list();
    } catch (const CheckpointError&) {
    }
    if (all.size() > static_cast<std::size_t>(keepLast_)) {
        int kept = 1;
        for (auto it = all.rbegin(); it != all.rend(); ++it) {
            if (it->step == step || !verifies(it->dir))
                continue;
            if (kept < keepLast_)
                ++kept;
            else
                removeCheckpoint(root_, *it);
        }
    }
    return CheckpointInfo{finalDir, step, meta};
}

void CheckpointStore::prepareShards(std::int64_t step) {
    const std::string context =
        "cannot save checkpoint " + (root_ / stepDirName(step)).string() + ": ";
    std::error_code ec;
    prepareRootFor(root_, step);
    // A job has one save in progress at a time, so shard directories left here are from a job
    // that died while saving.
    for (fs::directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.starts_with(".step-") && name.ends_with(".shards")) {
            std::error_code rmEc;
            fs::remove_all(it->path(), rmEc);
        }
    }
    const fs::path dir = root_ / shardDirName(step);
    if (::mkdir(dir.c_str(), 0777) != 0)
        throw CheckpointError(context + sysFailure("cannot create", dir, errno) + kUntouched);
}

void CheckpointStore::writeShard(std::int64_t step, const std::string& shard,
                                 const std::vector<CheckpointBlob>& blobs) {
    const fs::path dir = root_ / shardDirName(step);
    const std::string context = "cannot save shard " + shard + " of checkpoint " +
                                (root_ / stepDirName(step)).string() + ": ";
    try {
        json files = json::array();
        for (const CheckpointBlob& b : blobs) {
            const std::string name = shard + "." + b.name;
            if (const std::string problem = nameProblem(name); !problem.empty())
                throw std::invalid_argument("checkpoint file name \"" + name + "\" " + problem);
            json f = json::object();
            f["name"] = name;
            f["bytes"] = b.bytes;
            f["crc32"] = writeDurably(dir / name, b.data, b.bytes);
            files.push_back(std::move(f));
        }
        const std::string text = json{{"files", std::move(files)}}.dump() + "\n";
        writeDurably(dir / (shard + ".shard.json"), text.data(), text.size());
    } catch (const IoError& e) {
        throw CheckpointError(context + e.what() + kUntouched);
    }
}

CheckpointInfo CheckpointStore::commitShards(std::int64_t step, const nlohmann::json& meta,
                                             const std::vector<std::string>& shards) {
    const fs::path dir = root_ / shardDirName(step);
    const std::string context =
        "cannot save checkpoint " + (root_ / stepDirName(step)).string() + ": ";
    try {
        json files = json::array();
        for (const std::string& shard : shards) {
            const fs::path list = dir / (shard + ".shard.json");
            json listed;
            try {
                std::ifstream in(list);
                std::stringstream text;
                text << in.rdbuf();
                if (jsonNestingDepth(text.str()) > kMaxJsonDepth)
                    throw IoError("shard " + shard + " left a file list nested over " +
                                  std::to_string(kMaxJsonDepth) + " levels deep: " + list.string());
                listed = json::parse(text.str());
                for (const json& f : listed.at("files"))
                    files.push_back(f);
            } catch (const json::exception& e) {
                throw IoError("shard " + shard + " left no readable file list " + list.string() +
                              " (" + e.what() + ")");
            }
            std::error_code ignored; // not in the manifest: a leftover is harmless
            fs::remove(list, ignored);
        }
        publishWithManifest(dir, step, meta, std::move(files));
    } catch (const IoError& e) {
        abandonShards(step);
        throw CheckpointError(context + e.what() + kUntouched);
    }
    return afterPublish(step, meta);
}

void CheckpointStore::abandonShards(std::int64_t step) {
    std::error_code ec;
    fs::remove_all(root_ / shardDirName(step), ec);
}

std::vector<CheckpointInfo>
CheckpointStore::list(std::vector<std::pair<std::filesystem::path, std::string>>* skipped) const {
    std::vector<CheckpointInfo> out;
    std::error_code ec;
    fs::directory_iterator it(root_, ec);
    if (ec == std::errc::no_such_file_or_directory)
        return out;
    for (const fs::directory_iterator end; !ec && it != end; it.increment(ec)) {
        const fs::path& dir = it->path();
        std::error_code typeEc;
        if (dir.filename().string().rfind("step-", 0) != 0 || !fs::is_directory(dir, typeEc))
            continue;
        try {
            Manifest m = readManifest(dir);
            // A renamed or hand-made directory would break save()'s check for an existing step.
            if (dir.filename() == stepDirName(m.step))
                out.push_back(CheckpointInfo{dir, m.step, std::move(m.meta)});
            else if (skipped)
                skipped->emplace_back(dir, "its manifest is for step " + std::to_string(m.step));
        } catch (const CheckpointError& e) {
            if (skipped)
                skipped->emplace_back(dir, e.what());
        }
    }
    if (ec)
        throw CheckpointError("cannot list the checkpoints in " + root_.string() + ": " +
                              ec.message());
    std::sort(out.begin(), out.end(),
              [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step < b.step; });
    return out;
}

std::optional<CheckpointInfo> CheckpointStore::latest() const {
    std::vector<CheckpointInfo> all = list();
    if (all.empty())
        return std::nullopt;
    return std::move(all.back());
}

LoadedCheckpoint CheckpointStore::load(const std::filesystem::path& dir,
                                       const std::function<bool(const std::string&)>& want) {
    Manifest m = readManifest(dir);
    LoadedCheckpoint out;
    out.info = CheckpointInfo{dir, m.step, std::move(m.meta)};
    for (const ManifestFile& f : m.files) {
        if (want && !want(f.name))
            continue;
        std::vector<std::byte> bytes;
        verifyFile(dir, f, &bytes);
        out.blobs.emplace(f.name, std::move(bytes));
    }
    return out;
}

} // namespace shardscope
