// The collector's side of the stream protocol: hellos with the token, and events seen twice.
#include "watch/stream_protocol.h"

#include <gtest/gtest.h>

namespace shardscope::watch {
namespace {

using nlohmann::json;

json hello(const std::string& token, int rank = 1) {
    return {{"type", "hello"}, {"v", 2},    {"rank", rank}, {"session", "abc"},
            {"token", token},  {"pid", 77}, {"host", "n1"}, {"world_size", 4}};
}

TEST(StreamProtocol, AHelloWithTheRightTokenIsAccepted) {
    std::string why;
    const auto h = acceptHello(hello("secret"), "secret", &why);
    ASSERT_TRUE(h) << why;
    EXPECT_EQ(h->rank, 1);
    EXPECT_EQ(h->session, "abc");
    EXPECT_EQ(h->pid, 77);
    EXPECT_EQ(h->host, "n1");
    EXPECT_EQ(h->worldSize, 4);
}

TEST(StreamProtocol, AnythingElseIsRefusedWithTheReason) {
    std::string why;
    EXPECT_FALSE(acceptHello(hello("wrong"), "secret", &why));
    EXPECT_EQ(why, "wrong or missing token");
    EXPECT_FALSE(acceptHello(hello("secre"), "secret", &why)); // a prefix is not the token
    EXPECT_FALSE(acceptHello(hello("secret!"), "secret", &why));
    json noToken = hello("secret");
    noToken.erase("token");
    EXPECT_FALSE(acceptHello(noToken, "secret", &why));
    EXPECT_FALSE(acceptHello(json{{"type", "span"}, {"rank", 0}}, "secret", &why));
    EXPECT_EQ(why, "the first line is not a hello");
    EXPECT_FALSE(acceptHello(hello("secret", -1), "secret", &why));
    EXPECT_EQ(why, "no valid rank");
    EXPECT_FALSE(acceptHello(json::array(), "secret", &why));
}

TEST(StreamProtocol, EventsSeenBeforeAreDroppedPerRankAndProcess) {
    const Hello a = *acceptHello(hello("t", 0), "t", nullptr);
    Hello b = a;
    b.session = "another process";
    EventNumbers numbers;
    EXPECT_TRUE(numbers.isNew(a, {{"seq", 1}}));
    EXPECT_TRUE(numbers.isNew(a, {{"seq", 2}}));
    EXPECT_TRUE(numbers.isNew(a, {{"seq", 9}}));
    EXPECT_FALSE(numbers.isNew(a, {{"seq", 1}}));  // the start event, re-sent on reconnection
    EXPECT_TRUE(numbers.isNew(b, {{"seq", 1}}));   // a resumed run is a new process
    EXPECT_TRUE(numbers.isNew(a, json::object())); // unnumbered (schema 1) events pass
    EXPECT_EQ(numbers.repeats(), 1);
}

} // namespace
} // namespace shardscope::watch
