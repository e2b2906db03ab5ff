// The shardscope-cli entry point, callable in-process (tests) as well as from main().
#pragma once

#include <ostream>

namespace shardscope::cli {

// Exit codes: 0 success, 2 bad input (with a message on `err` saying what and how to fix it).
int runCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

} // namespace shardscope::cli
