// Checkpoints on disk: one directory per step under a root, written atomically (files in a
// temporary directory, each fsynced, a manifest with sizes and CRC-32s written last, the directory
// renamed into place, the root fsynced), keeping the newest K. A checkpoint whose files do not
// match its manifest is reported, never silently used, and never overwritten or pruned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace shardscope {

inline constexpr int kCheckpointFormatVersion = 1;

// A checkpoint that cannot be used: names the directory, the file and what is wrong.
class CheckpointError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct CheckpointBlob {
    std::string name; // file name inside the checkpoint directory, e.g. "params.f32"
    const void* data = nullptr;
    std::size_t bytes = 0;
};

struct CheckpointInfo {
    std::filesystem::path dir; // root/step-00000123
    std::int64_t step = 0;
    nlohmann::json meta; // what the caller stored with it
};

struct LoadedCheckpoint {
    CheckpointInfo info;
    std::map<std::string, std::vector<std::byte>> blobs;
};

class CheckpointStore {
public:
    CheckpointStore(std::filesystem::path root, int keepLast);

    // Writes root/step-<step> (8 digits). Throws CheckpointError when that directory already
    // exists (it is never replaced) or the disk write fails (the temporary directory is removed).
    // Afterwards deletes the oldest checkpoints beyond keepLast; only ones that verify.
    CheckpointInfo save(std::int64_t step, const nlohmann::json& meta,
                        const std::vector<CheckpointBlob>& blobs);

    // Checkpoints whose manifest parses, oldest first (files not verified). Leftover temporary
    // directories from an interrupted save are ignored.
    // skipped (when given) receives each step-* directory left out and why (no manifest, one
    // that does not parse, a name that is not its step's).
    std::vector<CheckpointInfo>
    list(std::vector<std::pair<std::filesystem::path, std::string>>* skipped = nullptr) const;
    std::optional<CheckpointInfo> latest() const;

    // Reads a checkpoint directory (any path, not only under this root) and verifies every file's
    // size and CRC-32 against the manifest. Throws CheckpointError naming the file on mismatch,
    // truncation, a missing file or a manifest that does not parse or has a newer version.
    // want: which of the manifest's files to read (all when empty); the others are not touched.
    static LoadedCheckpoint load(const std::filesystem::path& dir,
                                 const std::function<bool(const std::string&)>& want = {});

    // A checkpoint written by several processes, each its own shard, with one manifest:
    //   the leader calls prepareShards(step);  (everyone waits for it)
    //   each shard's writer calls writeShard(step, shard, blobs): files "<shard>.<blob name>";
    //   (everyone waits; all must have succeeded, or the leader calls abandonShards)
    //   the leader calls commitShards(step, meta, every shard), which writes the manifest
    //   listing every shard's files last, renames the directory into place and prunes.
    // Each step throws CheckpointError as save() does; nothing published is ever touched.
    void prepareShards(std::int64_t step);
    void writeShard(std::int64_t step, const std::string& shard,
                    const std::vector<CheckpointBlob>& blobs);
    CheckpointInfo commitShards(std::int64_t step, const nlohmann::json& meta,
                                const std::vector<std::string>& shards);
    void abandonShards(std::int64_t step);

    const std::filesystem::path& root() const { return root_; }

private:
    void publishWithManifest(const std::filesystem::path& tmp, std::int64_t step,
                             const nlohmann::json& meta, nlohmann::json files);
    CheckpointInfo afterPublish(std::int64_t step, const nlohmann::json& meta);

    std::filesystem::path root_;
    int keepLast_;
};

} // namespace shardscope
