// Strategy search: ranked, valid, fitting layouts and honest rejection counts.
#include "plan/search.h"
#include "plan_test_support.h"

#include <gtest/gtest.h>
#include <set>

namespace shardscope {
namespace {

SearchResult searchLlama8b(SearchOptions options = {}, SearchSpace space = {}, int nodes = 3,
                           Assumptions assume = {}) {
    const ModelSpec m = findModelPreset("llama3-8b");
    const ClusterSpec c = makeCluster(findGpuPreset("h100-sxm"), 8, nodes);
    ParallelConfig base;
    base.globalBatch = 256;
    return searchLayouts(m, c, base, TrainConfig{}, assume, space, options);
}

TEST(Search, TopLayoutsAreValidFitAndRanked) {
    const SearchResult r = searchLlama8b();
    ASSERT_FALSE(r.top.empty());
    const ModelSpec m = findModelPreset("llama3-8b");
    const ClusterSpec c = makeCluster(findGpuPreset("h100-sxm"), 8, 3);
    for (std::size_t i = 0; i < r.top.size(); ++i) {
        const Candidate& cand = r.top[i];
        EXPECT_TRUE(cand.fits);
        EXPECT_EQ(cand.config.worldSize(), 24);
        EXPECT_TRUE(validate(m, c, cand.config).empty()) << i;
        if (i > 0) {
            EXPECT_LE(cand.tokensPerSecond, r.top[i - 1].tokensPerSecond);
        }
        // The candidate's figures are the estimate's.
        PlanInputs in{m, c, cand.config, {}, {}};
        EXPECT_DOUBLE_EQ(estimate(in).tokensPerSecond, cand.tokensPerSecond);
    }
}

// Beside a full-recompute layout that fits, the search offers the same with only the first n
// layers of each virtual stage recomputed, n the fewest that fit: faster than recomputing every
// layer, and with one layer fewer it would not fit.
TEST(Search, RecomputesOnlyTheLayersTheMemoryNeeds) {
    SearchOptions options;
    options.keepAll = true;
    const SearchResult r = searchLlama8b(options);
    const ModelSpec m = findModelPreset("llama3-8b");
    const ClusterSpec c = makeCluster(findGpuPreset("h100-sxm"), 8, 3);
    int partial = 0, checkedFewest = 0;
    for (const Candidate& cand : r.all) {
        const ParallelConfig& p = cand.config;
        if (p.recomputeLayers == 0 || !cand.fits)
            continue;
        ++partial;
        SCOPED_TRACE(layoutSummary(p));
        EXPECT_EQ(p.recompute, Recompute::Full);
        EXPECT_TRUE(validate(m, c, p).empty());
        PlanInputs in{m, c, p, {}, {}};
        in.parallel.recomputeLayers = 0;
        const Estimate every = estimate(in);
        EXPECT_TRUE(every.fits);
        EXPECT_GT(cand.tokensPerSecond, every.tokensPerSecond);
        if (p.recomputeLayers > 1) {
            in.parallel.recomputeLayers = p.recomputeLayers - 1;
            EXPECT_FALSE(estimate(in).fits);
            ++checkedFewest;
        }
    }
    EXPECT_GT(partial, 0);
    EXPECT_GT(checkedFewest, 0);
    SearchSpace without;
    without.tryRecomputeLayers = false;
    for (const Candidate& cand : searchLlama8b(options, without).all)
        EXPECT_EQ(cand.config.recomputeLayers, 0);
}

// TP overlap needs sequence parallelism: asked for, the search keeps it on the layouts with SP
// and drops it from those without, so every layout it keeps is valid.
TEST(Search, TpCommOverlapGoesOnlyWithSequenceParallelism) {
    const ModelSpec m = findModelPreset("llama3-8b");
    const ClusterSpec c = makeCluster(findGpuPreset("h100-sxm"), 8, 2);
    ParallelConfig base;
    base.globalBatch = 256;
    base.tpCommOverlap = true;
    SearchOptions options;
    options.keepAll = true;
    const SearchResult r = searchLayouts(m, c, base, TrainConfig{}, Assumptions{}, {}, options);
    ASSERT_FALSE(r.all.empty());
    EXPECT_EQ(r.rejected.count("tp-comm-overlap"), 0u);
    int overlapped = 0;
    for (const Candidate& cand : r.all) {
        EXPECT_TRUE(validate(m, c, cand.config).empty()) << layoutSummary(cand.config);
        EXPECT_EQ(cand.config.tpCommOverlap, cand.config.sequenceParallel)
            << layoutSummary(cand.config);
        overlapped += cand.config.tpCommOverlap && cand.config.tp > 1;
    }
    EXPECT_GT(overlapped, 0);
}

// With a memory headroom the search ranks only layouts that leave it free, and recomputes the
// fewest layers that fit within the rest; without it, some layouts it ranked use that memory.
TEST(Search, LeavesTheMemoryHeadroomFree) {
    const ModelSpec m = findModelPreset("llama3-8b");
    const ClusterSpec c = makeCluster(findGpuPreset("h100-sxm"), 8, 3);
    SearchOptions options;
    options.keepAll = true;
    const double usable = 0.7 * 80e9;
    int usedTheHeadroom = 0;
    for (const Candidate& cand : searchLlama8b(options).all)
        usedTheHeadroom += cand.fits && cand.memory > usable;
    EXPECT_GT(usedTheHeadroom, 0);

    Assumptions assume;
    assume.memoryHeadroom = 0.3;
    const SearchResult r = searchLlama8b(options, {}, 3, assume);
    int fitting = 0, fewestChecked = 0;
    for (const Candidate& cand : r.all) {
        if (!cand.fits)
            continue;
        ++fitting;
        EXPECT_LE(cand.memory, usable) << layoutSummary(cand.config);
        if (cand.config.recomputeLayers > 1) { // one layer fewer would not leave the headroom
            PlanInputs in{m, c, cand.config, {}, assume};
            --in.parallel.recomputeLayers;
            EXPECT_FALSE(estimate(in).fits) << layoutSummary(cand.config);
            ++fewestChecked;
        }
    }
    EXPECT_GT(fitting, 0);
    EXPECT_GT(fewestChecked, 0);
    for (const Candidate& cand : r.top)
        EXPECT_LE(cand.memory, usable);
}

// An assumed MFU is a what-if for one layout: with it every layout would run at the same MFU, so
// the search ranks by the modelled speed whatever the assumption says.
TEST(Search, RanksByTheModelledSpeedWhateverMfuIsAssumed) {
    const ModelSpec m = findModelPreset("llama3-8b");
    const ClusterSpec c = makeCluster(findGpuPreset("h100-sxm"), 8, 3);
    ParallelConfig base;
    base.globalBatch = 256;
    Assumptions assume;
    assume.assumedMfu = 0.3;
    const SearchResult withMfu =
        searchLayouts(m, c, base, TrainConfig{}, assume, SearchSpace{}, SearchOptions{});
    const SearchResult plain = searchLlama8b();
    ASSERT_EQ(withMfu.top.size(), plain.top.size());
    for (std::size_t i = 0; i < plain.top.size(); ++i)
        EXPECT_DOUBLE_EQ(withMfu.top[i].tokensPerSecond, plain.top[i].tokensPerSecond) << i;
    EXPECT_GT(plain.top.front().tokensPerSecond, plain.top.back().tokensPerSecond);
}

// 65,536 GPUs: tp x pp x cp over their divisors once wrapped a 32-bit product to 0 and divided
// by it (SIGFPE). Every GPU count that is a multiple of 65,536 did; ten million is the CLI's cap.
TEST(Search, GpuCountsWhoseDivisorProductsPassTwoToThe32Search) {
    const ModelSpec m = findModelPreset("gpt2-1.5b");
    for (int nodes : {8192, 8192 * 3, 1250000}) {
        const ClusterSpec c = makeCluster(findGpuPreset("h100-sxm"), 8, nodes);
        ParallelConfig base;
        base.globalBatch = 8 * nodes;
        const SearchResult r =
            searchLayouts(m, c, base, TrainConfig{}, Assumptions{}, SearchSpace{}, {});
        EXPECT_GT(r.evaluated, 0) << nodes << " nodes";
        for (const Candidate& cand : r.top)
            EXPECT_EQ(std::int64_t(cand.config.worldSize()), std::int64_t(8) * nodes);
    }
}

TEST(Search, CountsAddUp) {
    const SearchResult r = searchLlama8b();
    long long rejected = 0;
    for (const auto& [rule, n] : r.rejected)
        rejected += n;
    EXPECT_EQ(r.considered, r.evaluated + rejected - r.rejected.at("memory"));
    EXPECT_EQ(r.evaluated, r.fitting + r.rejected.at("memory"));
    EXPECT_GT(r.rejected.at("tp-heads"), 0);
    EXPECT_GT(r.rejected.at("global-batch"), 0);
}

TEST(Search, RejectedStructuralLayoutsAreReallyInvalid) {
    // Every layout the search skips for a rule, validate() also rejects: spot-check tp = 3.
    const ModelSpec m = findModelPreset("llama3-8b");
    const ClusterSpec c = makeCluster(findGpuPreset("h100-sxm"), 8, 3);
    ParallelConfig p = test::layout(8, 3, 1, 256);
    bool found = false;
    for (const Violation& v : validate(m, c, p))
        found |= v.rule == "tp-kv-heads" || v.rule == "tp-heads";
    EXPECT_TRUE(found);
}

TEST(Search, KeepAllReturnsEveryEvaluatedLayout) {
    SearchOptions o;
    o.keepAll = true;
    const SearchResult r = searchLlama8b(o);
    EXPECT_EQ(static_cast<long long>(r.all.size()), r.evaluated);
}

TEST(Search, EveryEvaluatedLayoutPassesValidate) {
    // The search's fast rule check must not let through anything validate() rejects.
    SearchOptions o;
    o.keepAll = true;
    const SearchResult r = searchLlama8b(o);
    const ModelSpec m = findModelPreset("llama3-8b");
    const ClusterSpec c = makeCluster(findGpuPreset("h100-sxm"), 8, 3);
    for (const Candidate& cand : r.all)
        ASSERT_TRUE(validate(m, c, cand.config).empty());
}

// 32 GPUs in 4 nodes of 8: ZeRO's states are also tried sharded over a node's dp x cp ranks and
// replicated across the nodes; never for ZeRO-0, nor where dp x cp fits in one node.
TEST(Search, TriesHybridShardingOverEachNode) {
    const ModelSpec m = findModelPreset("llama3-8b");
    const ClusterSpec cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 4);
    SearchOptions o;
    o.keepAll = true;
    const SearchResult r = searchLlama8b(o, SearchSpace{}, 4);
    long long hybrid = 0;
    for (const Candidate& c : r.all) {
        const ParallelConfig& p = c.config;
        if (p.shardGroup == 0)
            continue;
        ++hybrid;
        EXPECT_GE(p.zero, 1) << layoutSummary(p);
        EXPECT_EQ(p.shardGroup * p.tp, 8) << layoutSummary(p); // a node's dp x cp ranks
        EXPECT_GT(p.zeroReplicas(), 1) << layoutSummary(p);
        EXPECT_TRUE(validate(m, cluster, p).empty()) << layoutSummary(p);
    }
    EXPECT_GT(hybrid, 0);
    SearchSpace without;
    without.tryHybridShard = false;
    EXPECT_EQ(searchLlama8b(o, without, 4).evaluated + hybrid, r.evaluated);
}

// A mixture of experts on 16 H100s: every ep that divides the 8 experts and dp x cp is tried
// (none for a dense model), each layout valid; the best with EP is no slower than without.
TEST(Search, TriesExpertParallelismForAMixtureOfExperts) {
    const ModelSpec m = test::mixtral8x7b();
    const ClusterSpec cl = makeCluster(findGpuPreset("h100-sxm"), 8, 2);
    ParallelConfig base;
    base.globalBatch = 64;
    SearchOptions o;
    o.keepAll = true;
    const SearchResult r = searchLayouts(m, cl, base, {}, {}, SearchSpace{}, o);
    std::set<int> degrees, foldedDegrees;
    long long apart = 0;
    bool foldedPastDp = false;
    for (const Candidate& c : r.all) {
        const ParallelConfig& p = c.config;
        if (!p.expertsApart())
            continue;
        ++apart;
        EXPECT_TRUE(validate(m, cl, p).empty()) << layoutSummary(p);
        if (p.etp == 0) { // the experts split over the dense weights' dp x cp
            degrees.insert(p.ep);
            EXPECT_EQ(p.dp * p.cp % p.ep, 0) << layoutSummary(p);
            continue;
        }
        // Folded: etp 1 beside tp > 1 (with the SP it needs), ep over tp x dp x cp.
        EXPECT_EQ(p.etp, 1) << layoutSummary(p);
        EXPECT_GT(p.tp, 1) << layoutSummary(p);
        EXPECT_TRUE(p.sequenceParallel) << layoutSummary(p);
        EXPECT_EQ(p.tp * p.dp * p.cp % p.ep, 0) << layoutSummary(p);
        foldedDegrees.insert(p.ep);
        foldedPastDp = foldedPastDp || p.ep > p.dp * p.cp;
    }
    EXPECT_EQ(degrees, (std::set<int>{2, 4, 8}));
    EXPECT_EQ(foldedDegrees, (std::set<int>{1, 2, 4, 8}));
    EXPECT_TRUE(foldedPastDp); // folding reaches an ep that dp x cp alone cannot hold
    SearchSpace without;
    without.tryExpertParallel = false;
    const SearchResult dense = searchLayouts(m, cl, base, {}, {}, without, o);
    EXPECT_EQ(dense.evaluated + apart, r.evaluated);
    ASSERT_FALSE(r.top.empty());
    ASSERT_FALSE(dense.top.empty());
    EXPECT_GE(r.top[0].tokensPerSecond, dense.top[0].tokensPerSecond);
    for (const Candidate& c : searchLlama8b(o).all)
        EXPECT_EQ(c.config.ep, 1);
}

// Asked to, the search tries ZB-H1 in 1F1B's place, and ZB-2p beside it when the optimizer is
// post-validated (without, ZB-2p has ZB-H1's bubble and more memory): every pipelined layout
// without virtual stages once or twice, none with 1F1B; each as fast as that layout with 1F1B
// or faster, ZB-2p with at least ZB-H1's memory; and the best layout no slower than without.
TEST(Search, TriesTheZeroBubbleSchedulesInPlaceOf1F1B) {
    const ModelSpec m = findModelPreset("llama3-8b");
    const ClusterSpec cl = makeCluster(findGpuPreset("h100-sxm"), 8, 3);
    ParallelConfig base;
    base.globalBatch = 256;
    SearchOptions o;
    o.keepAll = true;
    for (bool validated : {false, true}) {
        Assumptions assume;
        assume.optimizerPostValidation = validated;
        // One layout for one: the recompute-layers layouts the two would add are not.
        SearchSpace plainSpace;
        plainSpace.tryRecomputeLayers = false;
        const SearchResult plain = searchLayouts(m, cl, base, {}, assume, plainSpace, o);
        SearchSpace space = plainSpace;
        space.tryZeroBubble = true;
        const SearchResult zb = searchLayouts(m, cl, base, {}, assume, space, o);
        long long oneF = 0, h1 = 0, twoP = 0;
        for (const Candidate& c : plain.all)
            oneF += c.config.schedule == PipelineSchedule::OneFOneB && c.config.pp > 1;
        for (const Candidate& c : zb.all) {
            const ParallelConfig& p = c.config;
            EXPECT_FALSE(p.schedule == PipelineSchedule::OneFOneB && p.pp > 1) << layoutSummary(p);
            const bool two = p.schedule == PipelineSchedule::ZeroBubble2p;
            if (p.schedule != PipelineSchedule::ZeroBubble && !two)
                continue;
            (two ? twoP : h1) += 1;
            ParallelConfig asOneF = p;
            asOneF.schedule = PipelineSchedule::OneFOneB;
            EXPECT_GE(c.tokensPerSecond,
                      estimate(PlanInputs{m, cl, asOneF, {}, assume}).tokensPerSecond * (1 - 1e-12))
                << layoutSummary(p);
            if (two) {
                ParallelConfig asH1 = p;
                asH1.schedule = PipelineSchedule::ZeroBubble;
                EXPECT_GE(c.memory, estimate(PlanInputs{m, cl, asH1, {}, assume}).memory.total())
                    << layoutSummary(p);
            }
        }
        EXPECT_GT(oneF, 0);
        EXPECT_EQ(h1, oneF);
        EXPECT_EQ(twoP, validated ? oneF : 0);
        EXPECT_EQ(zb.evaluated, plain.evaluated + (validated ? oneF : 0));
        ASSERT_FALSE(zb.top.empty());
        EXPECT_GE(zb.top.front().tokensPerSecond, plain.top.front().tokensPerSecond);
    }
}

TEST(Search, CancelStopsEarly) {
    std::atomic<bool> cancel{true};
    SearchOptions o;
    o.cancel = &cancel;
    const SearchResult r = searchLlama8b(o);
    EXPECT_TRUE(r.cancelled);
    EXPECT_LE(r.considered, 1);
}

TEST(Search, ProgressReachesOne) {
    double last = 0;
    SearchOptions o;
    o.progress = [&](double f) { last = f; };
    searchLlama8b(o);
    EXPECT_DOUBLE_EQ(last, 1.0);
}

TEST(Search, NothingFitsIsReported) {
    const ModelSpec m = findModelPreset("llama3-405b");
    const ClusterSpec c = makeCluster(findGpuPreset("rtx4090"), 1, 1);
    ParallelConfig base;
    base.globalBatch = 8;
    const SearchResult r = searchLayouts(m, c, base, {}, {}, SearchSpace{}, {});
    EXPECT_TRUE(r.top.empty());
    EXPECT_GT(r.rejected.at("memory"), 0);
}

Candidate point(double memory, double tps, bool fits = true) {
    Candidate c;
    c.memory = memory;
    c.tokensPerSecond = tps;
    c.fits = fits;
    return c;
}

TEST(ParetoFront, KeepsOnlyUnbeatenFittingPointsByMemory) {
    const std::vector<Candidate> cs = {
        point(50, 100),        // beaten by #2 (less memory, same speed is not enough: #2 is faster)
        point(60, 300),        // front
        point(40, 120),        // front
        point(30, 500, false), // does not fit: ignored even though it beats everything
        point(20, 80),         // front: least memory
        point(70, 250),        // beaten by #1
        point(40, 110),        // same memory as #2, slower: beaten
    };
    const std::vector<std::size_t> front = paretoFront(cs);
    EXPECT_EQ(front, (std::vector<std::size_t>{4, 2, 1}));
}

TEST(ParetoFront, EveryFittingSearchCandidateIsOnOrBehindTheFront) {
    SearchOptions o;
    o.keepAll = true;
    const SearchResult r = searchLlama8b(o);
    const auto front = paretoFront(r.all);
    ASSERT_FALSE(front.empty());
    // The fastest fitting layout is always on the front.
    EXPECT_DOUBLE_EQ(r.all[front.back()].tokensPerSecond, r.top.front().tokensPerSecond);
    for (const Candidate& c : r.all) {
        if (!c.fits) {
            continue;
        }
        bool dominatedOrOn = false;
        for (std::size_t f : front) {
            if (r.all[f].memory <= c.memory && r.all[f].tokensPerSecond >= c.tokensPerSecond) {
                dominatedOrOn = true;
            }
        }
        EXPECT_TRUE(dominatedOrOn);
    }
}

} // namespace
} // namespace shardscope
