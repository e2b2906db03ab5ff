// What the edge prints of an error: long unbroken runs (pasted paths, huge arguments) cut to an
// excerpt and their length, everything else as written.
#include "core/error.h"

#include <gtest/gtest.h>
#include <string>

namespace shardscope {
namespace {

TEST(WithShortQuotes, CutsLongRunsAndKeepsTheRest) {
    const std::string huge(100000, 'x');
    const std::string shown = withShortQuotes("unknown preset '" + huge + "'; known: a, b");
    EXPECT_LT(shown.size(), 200u) << shown;
    // The run is the quoted value with its quotes and semicolon: 100,003 characters.
    EXPECT_NE(shown.find("'" + std::string(59, 'x') + "...(100003 characters) known: a, b"),
              std::string::npos)
        << shown;
    const std::string ordinary = "--nodes must be a positive number (got 0)\nline two\tend";
    EXPECT_EQ(withShortQuotes(ordinary), ordinary);
    EXPECT_EQ(withShortQuotes(""), "");
    EXPECT_EQ(withShortQuotes(std::string(120, 'y')), std::string(120, 'y'));
    EXPECT_EQ(withShortQuotes(std::string(121, 'y')), std::string(60, 'y') + "...(121 characters)");
}

} // namespace
} // namespace shardscope
