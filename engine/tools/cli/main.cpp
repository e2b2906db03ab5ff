#include <iostream>

#include "cli/commands.h"

int main(int argc, char** argv) {
    return shardscope::cli::runCli(argc, argv, std::cout, std::cerr);
}
