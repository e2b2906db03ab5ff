#include "stream_protocol.h"

namespace shardscope::watch {

using nlohmann::json;

namespace {

bool sameToken(const std::string& a, const std::string& b) {
    unsigned char differ = a.size() == b.size() ? 0 : 1;
    for (std::size_t i = 0; i < a.size(); ++i)
        differ |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
    return differ == 0;
}

} // namespace

std::optional<Hello> acceptHello(const json& first, const std::string& token, std::string* why) {
    auto refuse = [&](const char* reason) -> std::optional<Hello> {
        if (why)
            *why = reason;
        return std::nullopt;
    };
    if (!first.is_object() || !first.contains("type") || first["type"] != "hello")
        return refuse("the first line is not a hello");
    const auto t = first.find("token");
    if (t == first.end() || !t->is_string() || !sameToken(token, t->get<std::string>()))
        return refuse("wrong or missing token");
    const auto r = first.find("rank");
    if (r == first.end() || !r->is_number_integer() || r->get<std::int64_t>() < 0 ||
        r->get<std::int64_t>() > 1'000'000)
        return refuse("no valid rank");
    Hello h;
    h.rank = r->get<int>();
    if (const auto s = first.find("session"); s != first.end() && s->is_string())
        h.session = s->get<std::string>();
    if (const auto p = first.find("pid"); p != first.end() && p->is_number_integer())
        h.pid = p->get<long>();
    if (const auto host = first.find("host"); host != first.end() && host->is_string())
        h.host = host->get<std::string>();
    if (const auto w = first.find("world_size"); w != first.end() && w->is_number_integer())
        h.worldSize = w->get<int>();
    return h;
}

bool EventNumbers::isNew(const Hello& hello, const json& event) {
    const auto seq = event.find("seq");
    if (seq == event.end() || !seq->is_number_integer())
        return true; // a stream that does not number its events cannot repeat itself
    std::int64_t& highest = highest_[{hello.rank, hello.session}];
    const std::int64_t n = seq->get<std::int64_t>();
    if (n <= highest) {
        ++repeats_;
        return false;
    }
    highest = n;
    return true;
}

} // namespace shardscope::watch
