// A checkpoint's manifest.json as `--resume` reads it: the checkpoint directory holds two real
// files (16 and 8 bytes) beside the manifest under test; the store lists the root, names what it
// skips, picks the latest, and loads the checkpoint, verifying each file the manifest names.
#include "fuzz_target.h"
#include "fuzz_temp_dir.h"
#include "runtime/checkpoint.h"

#include <fstream>

using namespace shardscope;

namespace {

void write(const std::filesystem::path& path, std::string_view bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(bytes.data(), std::streamsize(bytes.size()));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::filesystem::path root = fuzz::tempDir() / "checkpoints";
    const std::filesystem::path dir = root / "step-00000007";
    static const bool made = [&] {
        std::filesystem::create_directories(dir);
        write(dir / "params.f32", "0123456789abcdef");
        write(dir / "adam_m.f32", "ABCDEFGH");
        return true;
    }();
    (void)made;
    write(dir / "manifest.json", fuzz::text(data, size));

    const CheckpointStore store(root, 2);
    std::vector<std::pair<std::filesystem::path, std::string>> skipped;
    const std::vector<CheckpointInfo> listed = store.list(&skipped);
    if (listed.size() + skipped.size() != 1)
        fuzz::broken("the one step directory is either listed or skipped with a reason");
    if (!skipped.empty() && skipped[0].second.empty())
        fuzz::broken("a skipped checkpoint says why");
    try {
        const LoadedCheckpoint loaded = CheckpointStore::load(dir);
        if (listed.empty() && loaded.info.step == 7)
            fuzz::broken("a checkpoint that loads is listed");
        for (const auto& [name, bytes] : loaded.blobs)
            if (bytes.size() != std::filesystem::file_size(dir / name))
                fuzz::broken("a loaded file has the size the manifest verified");
    } catch (const CheckpointError&) {
    }
    return 0;
}
