#include "collective_plan.h"

#include "core/error.h"

#include <algorithm>
#include <bit>

namespace shardscope {

namespace {

constexpr const char* kNames[] = {"ring-allreduce", "ring-allgather", "ring-reducescatter",
                                  "naive-allreduce", "two-level-allreduce"};

int mod(int a, int n) {
    return ((a % n) + n) % n;
}

// n - 1 steps around the ring of `members`: in step s, member i sends part i - s + offset to
// member i + 1, which adds it to its own (reduce) or takes it.
void ringPass(std::vector<CollectiveStep>& steps, const std::vector<int>& members,
              const std::vector<std::vector<int>>& parts, const std::string& phase,
              std::size_t firstStep, int offset, bool reduce) {
    const int n = int(members.size());
    for (int s = 0; s < n - 1; ++s) {
        CollectiveStep& step = steps[firstStep + std::size_t(s)];
        step.phase = phase;
        for (int i = 0; i < n; ++i) {
            for (int c : parts[std::size_t(mod(i - s + offset, n))])
                step.transfers.push_back(
                    {members[std::size_t(i)], members[std::size_t(mod(i + 1, n))], c, reduce});
        }
    }
}

// Reduce-scatter: afterwards members[i] holds the sum of parts[i] (each part a list of chunks).
void ringReduceScatter(std::vector<CollectiveStep>& steps, const std::vector<int>& members,
                       const std::vector<std::vector<int>>& parts, const std::string& phase,
                       std::size_t firstStep) {
    ringPass(steps, members, parts, phase, firstStep, -1, true);
}

// All-gather: members[i] starts with parts[i] complete and every member ends with all of them.
void ringAllGather(std::vector<CollectiveStep>& steps, const std::vector<int>& members,
                   const std::vector<std::vector<int>>& parts, const std::string& phase,
                   std::size_t firstStep) {
    ringPass(steps, members, parts, phase, firstStep, 0, false);
}

std::vector<int> range(int n, int first = 0, int stride = 1) {
    std::vector<int> v(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i)
        v[std::size_t(i)] = first + i * stride;
    return v;
}

std::vector<std::vector<int>> singleChunks(int n) {
    std::vector<std::vector<int>> parts;
    for (int i = 0; i < n; ++i)
        parts.push_back({i});
    return parts;
}

} // namespace

std::string toString(CollectiveKind k) {
    return kNames[static_cast<int>(k)];
}

CollectiveKind collectiveFromString(const std::string& s) {
    for (int i = 0; i < 5; ++i) {
        if (s == kNames[i])
            return static_cast<CollectiveKind>(i);
    }
    throw InputError("unknown collective \"" + s +
                     "\" (ring-allreduce, ring-allgather, ring-reducescatter, naive-allreduce, "
                     "two-level-allreduce)");
}

CollectivePlan buildCollective(const CollectiveSpec& spec) {
    const int n = spec.ranks;
    if (n < 2 || n > 1024)
        throw InputError("a collective needs 2 to 1024 ranks, not " + std::to_string(n));
    CollectivePlan plan;
    plan.spec = spec;
    plan.chunks = n;
    const std::vector<int> all = range(n);
    switch (spec.kind) {
    case CollectiveKind::RingAllReduce:
        plan.steps.resize(std::size_t(2 * (n - 1)));
        ringReduceScatter(plan.steps, all, singleChunks(n), "reduce-scatter", 0);
        ringAllGather(plan.steps, all, singleChunks(n), "all-gather", std::size_t(n - 1));
        break;
    case CollectiveKind::RingReduceScatter:
        plan.steps.resize(std::size_t(n - 1));
        ringReduceScatter(plan.steps, all, singleChunks(n), "reduce-scatter", 0);
        break;
    case CollectiveKind::RingAllGather:
        plan.steps.resize(std::size_t(n - 1));
        ringAllGather(plan.steps, all, singleChunks(n), "all-gather", 0);
        break;
    case CollectiveKind::NaiveAllReduce: {
        // Whole buffers, one at a time through rank 0's one link: the bottleneck the ring
        // removes. Sending them all at once would not be faster, as they share that link.
        plan.chunks = 1;
        for (int i = 1; i < n; ++i)
            plan.steps.push_back({"reduce to rank 0", {{i, 0, 0, true}}});
        for (int i = 1; i < n; ++i)
            plan.steps.push_back({"broadcast from rank 0", {{0, i, 0, false}}});
        break;
    }
    case CollectiveKind::TwoLevelAllReduce: {
        const int g = spec.gpusPerNode;
        if (g < 1 || n % g != 0)
            throw InputError("two-level all-reduce: " + std::to_string(n) +
                             " ranks are not whole nodes of " + std::to_string(g) + " GPUs");
        const int nodes = n / g;
        // Part j of a buffer (chunks j*nodes .. j*nodes + nodes - 1) belongs to local rank j.
        std::vector<std::vector<int>> parts;
        for (int j = 0; j < g; ++j)
            parts.push_back(range(nodes, j * nodes));
        const int intra = g - 1, inter = nodes - 1;
        plan.steps.resize(std::size_t(2 * intra + 2 * inter));
        // 1. Inside each node, reduce-scatter the g parts (local rank l ends with part l).
        for (int node = 0; node < nodes && g > 1; ++node)
            ringReduceScatter(plan.steps, range(g, node * g), parts, "reduce-scatter in nodes", 0);
        // 2. Across nodes, all-reduce each part among the ranks that own it, chunk by chunk.
        for (int l = 0; l < g && nodes > 1; ++l) {
            std::vector<std::vector<int>> sub;
            for (int c : parts[std::size_t(l)])
                sub.push_back({c});
            const std::vector<int> ring = range(nodes, l, g);
            ringReduceScatter(plan.steps, ring, sub, "reduce-scatter across nodes",
                              std::size_t(intra));
            ringAllGather(plan.steps, ring, sub, "all-gather across nodes",
                          std::size_t(intra + inter));
        }
        // 3. Inside each node, all-gather the parts.
        for (int node = 0; node < nodes && g > 1; ++node)
            ringAllGather(plan.steps, range(g, node * g), parts, "all-gather in nodes",
                          std::size_t(intra + 2 * inter));
        break;
    }
    }
    return plan;
}

std::vector<std::vector<double>> runCollective(const CollectivePlan& plan,
                                               std::vector<std::vector<double>> buffers) {
    const int n = plan.spec.ranks;
    if (int(buffers.size()) != n)
        throw InputError("runCollective: " + std::to_string(buffers.size()) + " buffers for " +
                         std::to_string(n) + " ranks");
    const std::size_t length = buffers.front().size();
    for (const auto& b : buffers) {
        if (b.size() != length || length % std::size_t(plan.chunks) != 0)
            throw InputError("runCollective: buffers must be equally long and a multiple of " +
                             std::to_string(plan.chunks) + " elements");
    }
    const std::size_t chunk = length / std::size_t(plan.chunks);
    for (const CollectiveStep& step : plan.steps) {
        const std::vector<std::vector<double>> before = buffers;
        for (const ChunkTransfer& t : step.transfers) {
            const std::size_t at = std::size_t(t.chunk) * chunk;
            auto& dst = buffers[std::size_t(t.to)];
            const auto& src = before[std::size_t(t.from)];
            for (std::size_t i = at; i < at + chunk; ++i)
                dst[i] = t.reduce ? dst[i] + src[i] : src[i];
        }
    }
    return buffers;
}

std::vector<ChunkSources> chunkSourcesByStep(const CollectivePlan& plan) {
    const int n = plan.spec.ranks;
    if (n > 64)
        throw InputError("chunk sources are tracked for up to 64 ranks, not " + std::to_string(n));
    // Each rank starts with its own data in every chunk, except that an all-gather's input is
    // only the rank's own chunk.
    const bool gather = plan.spec.kind == CollectiveKind::RingAllGather;
    ChunkSources state(std::size_t(n), std::vector<std::uint64_t>(std::size_t(plan.chunks), 0));
    for (int r = 0; r < n; ++r) {
        for (int c = 0; c < plan.chunks; ++c) {
            if (!gather || c == r)
                state[std::size_t(r)][std::size_t(c)] = std::uint64_t(1) << r;
        }
    }
    std::vector<ChunkSources> out = {state};
    for (const CollectiveStep& step : plan.steps) {
        const ChunkSources before = state;
        for (const ChunkTransfer& t : step.transfers) {
            std::uint64_t& dst = state[std::size_t(t.to)][std::size_t(t.chunk)];
            const std::uint64_t src = before[std::size_t(t.from)][std::size_t(t.chunk)];
            dst = t.reduce ? dst | src : src;
        }
        out.push_back(state);
    }
    return out;
}

namespace {

std::string gpu(int r) {
    return "GPU " + std::to_string(r);
}

// What the ranks hold in `state`, as the goal a phase works towards.
std::string describeHoldings(const ChunkSources& state, const CollectivePlan& plan) {
    const int n = plan.spec.ranks;
    const bool gather = plan.spec.kind == CollectiveKind::RingAllGather;
    std::vector<int> complete(std::size_t(n), 0), mostSources(std::size_t(n), 0);
    for (int r = 0; r < n; ++r) {
        for (std::uint64_t held : state[std::size_t(r)]) {
            const int sources = std::popcount(held);
            complete[std::size_t(r)] += gather ? sources > 0 : sources == n;
            mostSources[std::size_t(r)] = std::max(mostSources[std::size_t(r)], sources);
        }
    }
    const auto allEqual = [n](const std::vector<int>& v) {
        return std::count(v.begin(), v.end(), v.front()) == n;
    };
    if (allEqual(complete) && complete.front() == plan.chunks)
        return gather ? "every GPU holds all " + std::to_string(plan.chunks) + " chunks"
                      : "every GPU holds the whole sum";
    if (allEqual(complete) && complete.front() == 1)
        return "each GPU owns one fully reduced chunk, 1/" + std::to_string(plan.chunks) +
               " of the sum";
    if (allEqual(complete) && complete.front() > 1)
        return "each GPU owns " + std::to_string(complete.front()) + " of the " +
               std::to_string(plan.chunks) + " fully reduced chunks";
    if (complete.front() == plan.chunks)
        return gpu(0) + " holds the whole sum, the others only their own data";
    if (allEqual(mostSources) && mostSources.front() > 1)
        return "each GPU holds its part summed over " + std::to_string(mostSources.front()) +
               " of the " + std::to_string(n) + " GPUs";
    return {};
}

} // namespace

std::vector<std::string> narrateCollective(const CollectivePlan& plan) {
    const std::vector<ChunkSources> sources = chunkSourcesByStep(plan);
    const int n = plan.spec.ranks;
    const std::size_t total = plan.steps.size();
    std::vector<std::string> lines;
    for (std::size_t k = 0; k < total; ++k) {
        const CollectiveStep& step = plan.steps[k];
        std::size_t first = k, last = k; // the run of steps in this phase
        while (first > 0 && plan.steps[first - 1].phase == step.phase)
            --first;
        while (last + 1 < total && plan.steps[last + 1].phase == step.phase)
            ++last;

        std::string line = "Step " + std::to_string(k + 1) + " of " + std::to_string(total) + ", " +
                           step.phase + ": ";
        if (step.transfers.empty()) {
            lines.push_back(line + "nothing moves.");
            continue;
        }
        const ChunkTransfer& x = step.transfers.front();
        const std::string what = plan.chunks == 1
                                     ? (x.reduce ? "its whole buffer" : "the whole sum")
                                     : "chunk " + std::to_string(x.chunk);
        const int sums = std::popcount(sources[k + 1][std::size_t(x.to)][std::size_t(x.chunk)]);
        const std::string part = plan.chunks == 1 ? "buffer" : "chunk " + std::to_string(x.chunk);
        const std::string owner = step.transfers.size() == 1 ? gpu(x.to) + "'s " : "its ";
        std::string holds;
        if (x.reduce)
            holds = ", so " + owner + part + " now sums " + std::to_string(sums) + " of " +
                    std::to_string(n) + " GPUs' data";
        else if (sums == n && plan.spec.kind != CollectiveKind::RingAllGather && plan.chunks > 1)
            holds = ", already summed over all " + std::to_string(n);
        if (step.transfers.size() == 1) {
            line += gpu(x.from) + " sends " + what + " to " + gpu(x.to) +
                    (x.reduce ? ", which adds it to its own" : ", which keeps it") + holds;
            if (n > 2)
                line += "; the other " + std::to_string(n - 2) + " GPUs' links are idle";
        } else {
            std::vector<int> sent(std::size_t(n), 0);
            for (const ChunkTransfer& t : step.transfers)
                ++sent[std::size_t(t.from)];
            const auto senders = std::count_if(sent.begin(), sent.end(), [](int c) { return c; });
            const int most = *std::max_element(sent.begin(), sent.end());
            line += std::to_string(senders) + " GPUs each pass " +
                    (most == 1 ? std::string("one chunk") : std::to_string(most) + " chunks") +
                    " to the next GPU in their ring; " + gpu(x.to) +
                    (x.reduce ? " adds " : " takes ") + what + " from " + gpu(x.from) + holds;
        }
        line += ".";
        const std::string goal = describeHoldings(sources[last + 1], plan);
        if (!goal.empty()) {
            if (last == k)
                line += " After this step " + goal + ".";
            else
                line += " After " + std::to_string(last - first + 1) + " steps of " + step.phase +
                        " (" + std::to_string(last - k) + " more) " + goal + ".";
        }
        lines.push_back(line);
    }
    const std::string end = describeHoldings(sources.back(), plan);
    lines.push_back("Done in " + std::to_string(total) + " steps: " +
                    (end.empty() ? std::string("the collective is complete") : end) + ".");
    return lines;
}

double busBandwidthFactor(CollectiveKind kind, int ranks) {
    const double n = ranks;
    switch (kind) {
    case CollectiveKind::RingAllReduce:
    case CollectiveKind::NaiveAllReduce:
    case CollectiveKind::TwoLevelAllReduce:
        return 2.0 * (n - 1) / n;
    case CollectiveKind::RingAllGather:
    case CollectiveKind::RingReduceScatter:
        return (n - 1) / n;
    }
    return 1.0;
}

CollectiveTiming timeCollective(const CollectivePlan& plan, double bytes, const LinkModel& links) {
    if (!(bytes > 0))
        throw InputError("collective size must be positive");
    if (!(links.intraBandwidth > 0) || !(links.interBandwidth > 0) || links.gpusPerNode < 1)
        throw InputError("link bandwidths must be positive and nodes must hold a GPU");
    const int n = plan.spec.ranks;
    // All-gather's S is its output: each rank's buffer is the whole of it too.
    const double chunkBytes = bytes / plan.chunks;
    CollectiveTiming t;
    t.bytes = bytes;
    t.sentPerRank.assign(std::size_t(n), 0.0);
    for (const CollectiveStep& step : plan.steps) {
        std::vector<double> sendTime(std::size_t(n), 0.0), recvTime(std::size_t(n), 0.0);
        double latency = 0;
        for (const ChunkTransfer& x : step.transfers) {
            const bool sameNode = x.from / links.gpusPerNode == x.to / links.gpusPerNode;
            const double bw = sameNode ? links.intraBandwidth : links.interBandwidth;
            latency = std::max(latency, sameNode ? links.intraLatency : links.interLatency);
            sendTime[std::size_t(x.from)] += chunkBytes / bw;
            recvTime[std::size_t(x.to)] += chunkBytes / bw;
            t.sentPerRank[std::size_t(x.from)] += chunkBytes;
            t.perLink[{x.from, x.to}] += chunkBytes;
        }
        double busiest = 0;
        for (int r = 0; r < n; ++r)
            busiest = std::max({busiest, sendTime[std::size_t(r)], recvTime[std::size_t(r)]});
        t.stepSeconds.push_back(latency + busiest);
        t.seconds += latency + busiest;
    }
    for (double b : t.sentPerRank)
        t.busiestRank = std::max(t.busiestRank, b);
    for (const auto& [link, b] : t.perLink)
        t.busiestLink = std::max(t.busiestLink, b);
    t.algbw = t.seconds > 0 ? bytes / t.seconds : 0.0;
    t.busbw = t.algbw * busBandwidthFactor(plan.spec.kind, n);
    return t;
}

} // namespace shardscope
