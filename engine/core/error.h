// The one exception type for bad input (files, flags, presets). Its message says what was wrong
// and how to fix it; callers at the edge (CLI, app) turn it into a message, never a crash.
#pragma once

#include <stdexcept>
#include <string>

namespace shardscope {

class InputError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A message as the edge prints it: any run of more than 120 characters without a space (a
// pasted path, a 100,000-character argument quoted back) cut to its first 60 and its length,
// so a message stays a message.
inline std::string withShortQuotes(const std::string& message) {
    constexpr std::size_t kLongest = 120, kKept = 60;
    std::string out;
    std::size_t i = 0;
    while (i < message.size()) {
        const std::size_t end = message.find_first_of(" \n\t", i);
        const std::size_t stop = end == std::string::npos ? message.size() : end;
        if (stop - i > kLongest)
            out += message.substr(i, kKept) + "...(" + std::to_string(stop - i) + " characters)";
        else
            out += message.substr(i, stop - i);
        if (stop < message.size())
            out += message[stop];
        i = stop + 1;
    }
    return out;
}

} // namespace shardscope
