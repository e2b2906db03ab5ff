#include "cli/commands.h"

#include <iostream>

int main(int argc, char** argv) {
    return shardscope::cli::runCli(argc, argv, std::cout, std::cerr);
}
