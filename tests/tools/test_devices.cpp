#include <gtest/gtest.h>
TEST(Devices, Placeholder) {}
