// A directory of this fuzzing process's own for targets whose input is a file, made once and
// reused by every run (so parallel fuzzing jobs never share one).
#pragma once

#include <filesystem>
#include <string>
#include <unistd.h>

namespace shardscope::fuzz {

inline const std::filesystem::path& tempDir() {
    static const std::filesystem::path dir = [] {
        const std::filesystem::path d = std::filesystem::temp_directory_path() /
                                        ("shardscope-fuzz-" + std::to_string(::getpid()));
        std::filesystem::remove_all(d);
        std::filesystem::create_directories(d);
        return d;
    }();
    return dir;
}

} // namespace shardscope::fuzz
