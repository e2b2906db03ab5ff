// What every fuzz target shares: libFuzzer's entry point, and a failure that names the broken
// property. A target catches the errors its input is allowed to cause (InputError and the like,
// each a clear message for the user); anything else escapes and is a crash: a library exception
// reaching the user raw, a sanitizer report, an abort, a hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace shardscope::fuzz {

inline std::string_view text(const std::uint8_t* data, std::size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

// A property every accepted input must keep (a saved document reads back the same, ...).
[[noreturn]] inline void broken(const std::string& property) {
    std::fprintf(stderr, "fuzz: property broken: %s\n", property.c_str());
    std::abort();
}

} // namespace shardscope::fuzz
