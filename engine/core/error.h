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

} // namespace shardscope
