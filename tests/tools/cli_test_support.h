// shardscope-cli run in-process with string streams, for the CLI tests.
#pragma once

#include "cli/commands.h"

#include <sstream>
#include <string>
#include <vector>

namespace shardscope::testing {

struct CliResult {
    int code = -1;
    std::string out;
    std::string err;
};

inline CliResult runCliWith(std::vector<std::string> args) {
    args.insert(args.begin(), "shardscope-cli");
    std::vector<const char*> argv;
    for (const std::string& a : args)
        argv.push_back(a.c_str());
    std::ostringstream out, err;
    CliResult r;
    r.code = shardscope::cli::runCli(int(argv.size()), argv.data(), out, err);
    r.out = out.str();
    r.err = err.str();
    return r;
}

} // namespace shardscope::testing
