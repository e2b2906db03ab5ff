// Collective step lists executed on real vectors, and their alpha-beta times against the closed
// forms and nccl-tests' bus bandwidth.
#include "core/error.h"
#include "sched/collective_plan.h"

#include <gtest/gtest.h>
#include <random>

namespace shardscope {
namespace {

// Rank r's buffer: `length` random values, different on every rank.
std::vector<std::vector<double>> randomBuffers(int ranks, std::size_t length, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(-1, 1);
    std::vector<std::vector<double>> b(static_cast<std::size_t>(ranks),
                                       std::vector<double>(length));
    for (auto& buf : b)
        for (double& x : buf)
            x = dist(gen);
    return b;
}

std::vector<double> sum(const std::vector<std::vector<double>>& buffers) {
    std::vector<double> s(buffers.front().size(), 0.0);
    for (const auto& b : buffers)
        for (std::size_t i = 0; i < b.size(); ++i)
            s[i] += b[i];
    return s;
}

void expectNear(const std::vector<double>& a, const std::vector<double>& b, std::size_t from,
                std::size_t to) {
    for (std::size_t i = from; i < to; ++i)
        ASSERT_NEAR(a[i], b[i], 1e-12) << "element " << i;
}

TEST(Collectives, AllReducesLeaveTheSumOnEveryRank) {
    for (CollectiveKind kind : {CollectiveKind::RingAllReduce, CollectiveKind::NaiveAllReduce,
                                CollectiveKind::TwoLevelAllReduce}) {
        for (int n : {2, 3, 4, 8, 16}) {
            const int g = kind == CollectiveKind::TwoLevelAllReduce && n % 4 == 0 ? 4 : n;
            const CollectivePlan plan = buildCollective({kind, n, g});
            const auto in = randomBuffers(n, std::size_t(plan.chunks) * 3, unsigned(n));
            const auto out = runCollective(plan, in);
            const auto expected = sum(in);
            for (int r = 0; r < n; ++r) {
                SCOPED_TRACE(toString(kind) + " n" + std::to_string(n) + " rank " +
                             std::to_string(r));
                expectNear(out[std::size_t(r)], expected, 0, expected.size());
            }
        }
    }
}

TEST(Collectives, RingAllReduceIsTwoNMinusOneStepsOfOneChunkEach) {
    const CollectivePlan plan = buildCollective({CollectiveKind::RingAllReduce, 8, 8});
    EXPECT_EQ(plan.steps.size(), 14u);
    EXPECT_EQ(plan.chunks, 8);
    for (const CollectiveStep& step : plan.steps) {
        EXPECT_EQ(step.transfers.size(), 8u); // every rank sends one chunk to its neighbour
        for (const ChunkTransfer& t : step.transfers)
            EXPECT_EQ(t.to, (t.from + 1) % 8);
    }
    EXPECT_EQ(plan.steps.front().phase, "reduce-scatter");
    EXPECT_EQ(plan.steps.back().phase, "all-gather");
}

TEST(Collectives, ReduceScatterLeavesRankIWithTheSumOfChunkI) {
    const int n = 6;
    const CollectivePlan plan = buildCollective({CollectiveKind::RingReduceScatter, n, n});
    const auto in = randomBuffers(n, std::size_t(n) * 4, 7);
    const auto out = runCollective(plan, in);
    const auto expected = sum(in);
    for (int r = 0; r < n; ++r)
        expectNear(out[std::size_t(r)], expected, std::size_t(r) * 4, std::size_t(r + 1) * 4);
}

TEST(Collectives, AllGatherGivesEveryoneEveryRanksChunk) {
    const int n = 5;
    const CollectivePlan plan = buildCollective({CollectiveKind::RingAllGather, n, n});
    auto in = randomBuffers(n, std::size_t(n) * 2, 11);
    std::vector<double> expected(std::size_t(n) * 2);
    for (int r = 0; r < n; ++r)
        for (int i = 0; i < 2; ++i)
            expected[std::size_t(r * 2 + i)] = in[std::size_t(r)][std::size_t(r * 2 + i)];
    const auto out = runCollective(plan, in);
    for (int r = 0; r < n; ++r)
        expectNear(out[std::size_t(r)], expected, 0, expected.size());
}

TEST(Collectives, RingTimeAndBusBandwidthMatchTheClosedForms) {
    const int n = 8;
    const double S = 1e9;
    LinkModel links;
    links.gpusPerNode = 8;
    links.intraBandwidth = 100e9;
    links.intraLatency = 5e-6;
    const CollectiveTiming t =
        timeCollective(buildCollective({CollectiveKind::RingAllReduce, n, n}), S, links);
    // 2(n-1) steps of alpha + S/(n B).
    EXPECT_NEAR(t.seconds, 2 * (n - 1) * (5e-6 + S / n / 100e9), 1e-12);
    EXPECT_NEAR(t.algbw, S / t.seconds, 1e-3);
    EXPECT_NEAR(t.busbw, t.algbw * 2 * (n - 1) / n, 1e-3);
    // Without latency the ring's bus bandwidth is the link's: the point of the definition.
    links.intraLatency = 0;
    const CollectiveTiming ideal =
        timeCollective(buildCollective({CollectiveKind::RingAllReduce, n, n}), S, links);
    EXPECT_NEAR(ideal.busbw, 100e9, 1e-3);
    // Every rank sends 2(n-1)/n of the buffer.
    for (double sent : ideal.sentPerRank)
        EXPECT_NEAR(sent, 2.0 * (n - 1) / n * S, 1e-3);
}

TEST(Collectives, TheNaiveAlgorithmBottlenecksOnRankZero) {
    const int n = 8;
    const double S = 1e9;
    LinkModel links;
    links.intraBandwidth = 100e9;
    links.intraLatency = 0;
    const CollectiveTiming naive =
        timeCollective(buildCollective({CollectiveKind::NaiveAllReduce, n, n}), S, links);
    const CollectiveTiming ring =
        timeCollective(buildCollective({CollectiveKind::RingAllReduce, n, n}), S, links);
    EXPECT_NEAR(naive.seconds, 2.0 * (n - 1) * S / 100e9, 1e-12); // rank 0 takes in n-1 buffers
    EXPECT_NEAR(naive.seconds / ring.seconds, double(n), 1e-9);
    EXPECT_NEAR(naive.sentPerRank[0], (n - 1) * S, 1e-3);
    EXPECT_NEAR(naive.sentPerRank[1], S, 1e-3);
    EXPECT_NEAR(naive.busiestRank, (n - 1) * S, 1e-3);
    EXPECT_NEAR(naive.busiestLink, S, 1e-3);
    EXPECT_NEAR(ring.busiestLink, 2.0 * (n - 1) / n * S, 1e-3);
}

TEST(Collectives, TwoLevelKeepsMostTrafficInsideNodes) {
    const int n = 16, g = 8;
    LinkModel links;
    links.gpusPerNode = g;
    links.intraLatency = links.interLatency = 0;
    const double S = 1e9;
    const CollectivePlan two = buildCollective({CollectiveKind::TwoLevelAllReduce, n, g});
    const CollectivePlan flat = buildCollective({CollectiveKind::RingAllReduce, n, g});
    const CollectiveTiming t2 = timeCollective(two, S, links);
    const CollectiveTiming t1 = timeCollective(flat, S, links);
    double crossTwo = 0;
    for (const auto& [link, bytes] : t2.perLink) {
        if (link.first / g != link.second / g)
            crossTwo += bytes;
    }
    // Across nodes each rank moves 2(nodes-1)/nodes of its 1/g share: S/g per rank pair here.
    EXPECT_NEAR(crossTwo, double(g) * 2 * (2 - 1) / 2.0 * (S / g) * 2, 1e-3);
    EXPECT_LT(t2.seconds, t1.seconds); // the flat ring waits on the network every step
    EXPECT_EQ(two.steps.size(), std::size_t(2 * (g - 1) + 2 * (n / g - 1)));
}

TEST(Collectives, BadShapesAreRefused) {
    EXPECT_THROW(buildCollective({CollectiveKind::RingAllReduce, 1, 8}), InputError);
    EXPECT_THROW(buildCollective({CollectiveKind::TwoLevelAllReduce, 12, 8}), InputError);
    EXPECT_THROW(collectiveFromString("allreduce-sideways"), InputError);
    const CollectivePlan plan = buildCollective({CollectiveKind::RingAllReduce, 4, 4});
    EXPECT_THROW(runCollective(plan, randomBuffers(4, 6, 1)), InputError); // 6 % 4 != 0
    EXPECT_THROW(timeCollective(plan, 0, LinkModel{}), InputError);
    EXPECT_EQ(collectiveFromString("two-level-allreduce"), CollectiveKind::TwoLevelAllReduce);
}

TEST(Collectives, ChunkSourcesFollowTheSteps) {
    const int n = 4;
    const CollectivePlan plan = buildCollective({CollectiveKind::RingAllReduce, n, n});
    const auto sources = chunkSourcesByStep(plan);
    ASSERT_EQ(sources.size(), plan.steps.size() + 1);
    const std::uint64_t all = (1u << n) - 1;
    EXPECT_EQ(sources.front()[2][0], 1u << 2); // before: rank 2 holds only its own data
    // After the reduce-scatter, rank i holds the whole sum of chunk i and only that.
    for (int r = 0; r < n; ++r) {
        EXPECT_EQ(sources[std::size_t(n - 1)][std::size_t(r)][std::size_t(r)], all);
        EXPECT_NE(sources[std::size_t(n - 1)][std::size_t(r)][std::size_t((r + 1) % n)], all);
    }
    for (const auto& chunks : sources.back())
        for (std::uint64_t c : chunks)
            EXPECT_EQ(c, all);
    EXPECT_THROW(chunkSourcesByStep(buildCollective({CollectiveKind::RingAllReduce, 65, 8})),
                 InputError);
}

TEST(Collectives, TheNaiveAlgorithmTakesOneBufferAtATimeThroughRankZero) {
    const CollectivePlan plan = buildCollective({CollectiveKind::NaiveAllReduce, 8, 8});
    ASSERT_EQ(plan.steps.size(), 14u); // 7 buffers in, 7 sums out, each over rank 0's one link
    for (std::size_t k = 0; k < plan.steps.size(); ++k) {
        ASSERT_EQ(plan.steps[k].transfers.size(), 1u);
        const ChunkTransfer& t = plan.steps[k].transfers.front();
        EXPECT_EQ(k < 7 ? t.to : t.from, 0);
    }
}

// Narration: the count of GPUs a chunk sums after a ring reduce-scatter step is the step's
// number plus one (each step adds one neighbour's data), and each phase ends in the state the
// algorithm is defined by.
TEST(Collectives, EachStepIsNarratedWithWhatMovesAndWhy) {
    const auto ring = narrateCollective(buildCollective({CollectiveKind::RingAllReduce, 8, 8}));
    ASSERT_EQ(ring.size(), 15u); // 14 steps and the finished state
    EXPECT_EQ(ring[2].rfind("Step 3 of 14, reduce-scatter: 8 GPUs each pass one chunk", 0), 0u)
        << ring[2];
    // Step 3 (s = 2): GPU 0 sends chunk (0 - 2 - 1) mod 8 = 5 to GPU 1.
    EXPECT_NE(ring[2].find("GPU 1 adds chunk 5 from GPU 0, so its chunk 5 now sums 4 of 8"),
              std::string::npos)
        << ring[2];
    EXPECT_NE(ring[2].find("After 7 steps of reduce-scatter (4 more) each GPU owns one fully "
                           "reduced chunk"),
              std::string::npos)
        << ring[2];
    EXPECT_NE(ring[6].find("After this step each GPU owns one fully reduced chunk"),
              std::string::npos);
    EXPECT_NE(ring[7].find("GPU 1 takes chunk"), std::string::npos) << ring[7];
    EXPECT_NE(ring[13].find("every GPU holds the whole sum"), std::string::npos);
    EXPECT_EQ(ring.back(), "Done in 14 steps: every GPU holds the whole sum.");

    const auto naive = narrateCollective(buildCollective({CollectiveKind::NaiveAllReduce, 8, 8}));
    EXPECT_NE(naive[0].find("GPU 1 sends its whole buffer to GPU 0"), std::string::npos);
    EXPECT_NE(naive[0].find("the other 6 GPUs' links are idle"), std::string::npos);
    EXPECT_NE(naive[0].find("GPU 0 holds the whole sum"), std::string::npos) << naive[0];
    EXPECT_NE(naive[7].find("GPU 0 sends the whole sum to GPU 1"), std::string::npos);

    const auto gather = narrateCollective(buildCollective({CollectiveKind::RingAllGather, 5, 5}));
    EXPECT_NE(gather.back().find("every GPU holds all 5 chunks"), std::string::npos);
    // Two levels, 4 nodes of 4: after the in-node reduce-scatter each part sums one node.
    const auto two = narrateCollective(buildCollective({CollectiveKind::TwoLevelAllReduce, 16, 4}));
    EXPECT_NE(two[0].find("each GPU holds its part summed over 4 of the 16 GPUs"),
              std::string::npos)
        << two[0];
}

} // namespace
} // namespace shardscope
