#include "search.h"

#include "formulas.h"

#include <algorithm>
#include <cstdint>
#include <queue>
#include <span>
#include <utility>

namespace shardscope {

namespace {

std::vector<int> divisorsOf(int n) {
    std::vector<int> d;
    for (int i = 1; i * i <= n; ++i)
        if (n % i == 0) {
            d.push_back(i);
            if (i != n / i)
                d.push_back(n / i);
        }
    std::sort(d.begin(), d.end());
    return d;
}

bool better(const Candidate& a, const Candidate& b) {
    if (a.tokensPerSecond != b.tokensPerSecond)
        return a.tokensPerSecond > b.tokensPerSecond;
    return a.memory < b.memory;
}

// The structural rules of validate(), as cheap integer tests: the search calls this for every
// layout, so it must not allocate. The rule ids match validate()'s. (Expert parallelism's rules
// hold by construction: the search generates only the ep values and layouts they allow.)
const char* firstBrokenRule(const ModelSpec& m, const ParallelConfig& p, int gpusPerNode,
                            bool tpWithinNode) {
    if (m.heads % p.tp != 0)
        return "tp-heads";
    if (m.kvHeads % p.tp != 0 && p.tp % m.kvHeads != 0)
        return "tp-kv-heads";
    // The search's folded layouts (etp 1) split no routed expert by tp; shared experts it does.
    const bool tpSplitsExperts = p.expertTp() == p.tp || m.moe.sharedExperts > 0;
    if (m.ffnHidden % p.tp != 0 ||
        (m.moe.enabled() && tpSplitsExperts && m.expertFfn() % p.tp != 0))
        return "tp-ffn";
    if (tpWithinNode && p.tp > gpusPerNode)
        return "tp-crosses-node";
    if (p.pp * p.vpp > p.pipelineSlots(m.layers))
        return "pp-layers";
    if (p.cp > 1 && m.seqLen % (2 * p.cp) != 0)
        return "cp-seq";
    if (p.globalBatch % (std::int64_t(p.microBatch) * p.dp) != 0)
        return "global-batch";
    if (p.schedule == PipelineSchedule::Interleaved && p.microbatches() % p.pp != 0)
        return "interleaved-microbatches";
    return nullptr;
}

// The pipeline schedules a layout is tried with: 1F1B, interleaved when it has virtual stages,
// and, when asked, ZB-H1 (1F1B's memory, a third of its bubble) in 1F1B's place, with ZB-2p
// (twice the memory, no bubble once m >= 2p) where the optimizer is post-validated.
std::span<const PipelineSchedule> schedulesFor(int pp, int vpp, const SearchSpace& space,
                                               const Assumptions& assume) {
    static constexpr PipelineSchedule kOneFOneB[] = {PipelineSchedule::OneFOneB};
    static constexpr PipelineSchedule kInterleaved[] = {PipelineSchedule::Interleaved};
    static constexpr PipelineSchedule kZeroBubble[] = {PipelineSchedule::ZeroBubble};
    static constexpr PipelineSchedule kBothZeroBubbles[] = {PipelineSchedule::ZeroBubble,
                                                            PipelineSchedule::ZeroBubble2p};
    if (pp > 1 && vpp > 1)
        return kInterleaved;
    // Without post-validation ZB-2p has ZB-H1's bubble with more memory: not worth a try.
    if (pp > 1 && space.tryZeroBubble)
        return assume.optimizerPostValidation ? std::span<const PipelineSchedule>(kBothZeroBubbles)
                                              : kZeroBubble;
    return kOneFOneB;
}

} // namespace

SearchResult searchLayouts(const ModelSpec& model, const ClusterSpec& cluster,
                           const ParallelConfig& base, const TrainConfig& train,
                           const Assumptions& assume, const SearchSpace& space,
                           const SearchOptions& options) {
    SearchResult r;
    const int world = cluster.worldSize();
    if (world <= 0 || model.isBare() || base.globalBatch <= 0)
        return r;

    auto worse = [](const Candidate& a, const Candidate& b) { return better(a, b); };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> best(worse);

    PlanInputs in{model, cluster, base, train, assume};
    in.assume.assumedMfu = 0; // layouts rank by their modelled speed, not by a what-if MFU
    const std::vector<int> worldDivisors = divisorsOf(world);
    std::vector<int> microBatches;
    for (int mb = 1; mb <= space.maxMicroBatch; mb *= 2)
        microBatches.push_back(mb);

    // The layout in `in`, estimated: counted, and kept when it fits among the best.
    const auto keep = [&](const Estimate& e) {
        ++r.evaluated;
        Candidate c{in.parallel, e.memory.total(), e.tokensPerSecond, e.stepTime, e.mfu, e.fits};
        if (options.keepAll)
            r.all.push_back(c);
        if (!e.fits) {
            ++r.rejected["memory"];
            return;
        }
        ++r.fitting;
        best.push(c);
        if (int(best.size()) > options.topK)
            best.pop();
    };
    // A full-recompute layout that fits, again with the fewest recomputed layers of each virtual
    // stage that still fit (memory only grows as fewer layers recompute: a bisection on it),
    // kept where that is faster than recomputing them all.
    const auto fewerRecomputedLayers = [&](const Estimate& full) {
        ParallelConfig& p = in.parallel;
        // Without its recomputed forward a step saves at most a third of its compute (a forward
        // is no more than its backward), of its TP and EP waits (two passes of three) and of its
        // bubble (which paces at their sum): where even that would not rank, nothing to try.
        const double shortest =
            full.stepTime - (full.computeTime + full.bubbleTime + full.axis(Axis::TP).exposed +
                             full.axis(Axis::EP).exposed) /
                                3;
        if (int(best.size()) >= options.topK && !options.keepAll && shortest > 0 &&
            full.tokensPerStep / shortest <= best.top().tokensPerSecond)
            return;
        // Where the layout fits without recompute it is faster that way, and among the layouts
        // tried. First a bound: what each layer would keep more, at most the most layers a
        // stage holds times the first stage's in-flight microbatches (the most any stage holds),
        // on top of the most loaded stage; then the memory itself.
        const int most = p.mostSlotsOnChunk(model.layers);
        ParallelConfig none = p;
        none.recompute = Recompute::None;
        // bf16 inputs: an upper bound whatever the FP8 library keeps.
        double kept = activationBytesPerLayer(model, none);
        if (model.moe.enabled() && model.denseLayerCount() > 0)
            kept = std::max(kept, activationBytesPerLayer(model, none, LayerKind::Dense));
        const double inflight =
            pipelineInflightMicrobatches(p.schedule, p.pp, p.microbatches(), p.vpp, 0);
        if (full.memory.total() + (1.0 + assume.fragmentation) * most * p.vpp * inflight * kept <=
            full.capacity)
            return;
        const Recompute policy = p.recompute;
        p.recompute = Recompute::None;
        const bool fitsWithout =
            mostLoadedStageMemory(in, full.params, nullptr).total() <= full.capacity;
        p.recompute = policy;
        if (fitsWithout)
            return;
        int fits = most, fails = 0; // recomputing `fits` layers fits, `fails` does not
        while (fits - fails > 1) {
            p.recomputeLayers = (fits + fails) / 2;
            if (mostLoadedStageMemory(in, full.params, nullptr).total() <= full.capacity)
                fits = p.recomputeLayers;
            else
                fails = p.recomputeLayers;
        }
        if (fits < most) {
            p.recomputeLayers = fits;
            const Estimate e = evaluate(in);
            // A stage that holds `fits` layers or fewer recomputes them all either way, and may
            // set the pace.
            if (e.tokensPerSecond > full.tokensPerSecond) {
                ++r.considered;
                keep(e);
            }
        }
        p.recomputeLayers = 0;
    };
    // The layout in `in`: counted, checked against the structural rules, estimated, and kept
    // when it fits among the best.
    const auto consider = [&] {
        const ParallelConfig& p = in.parallel;
        ++r.considered;
        if (const char* rule = firstBrokenRule(model, p, cluster.gpusPerNode, space.tpWithinNode)) {
            ++r.rejected[rule];
            return;
        }
        const Estimate e = evaluate(in);
        keep(e);
        if (e.fits && p.recompute == Recompute::Full && space.tryRecomputeLayers)
            fewerRecomputedLayers(e);
    };

    std::vector<std::pair<int, int>> shardings; // (ZeRO stage, shard group) for one tp, cp
    // (etp, ep) for one tp x dp x cp: the experts split as the dense weights (etp 0, ep over
    // dp x cp), or folded (etp 1, ep over tp x dp x cp: MoE parallel folding).
    std::vector<std::pair<int, int>> expertLayouts;
    const std::vector<int> expertDivisors = model.moe.enabled() && space.tryExpertParallel
                                                ? divisorsOf(model.moe.experts)
                                                : std::vector<int>{1};
    std::size_t tpDone = 0;
    for (int tp : worldDivisors) {
        for (int pp : worldDivisors) {
            // Divisors of up to ten million GPUs: their products need 64 bits (a product that
            // wrapped to 0 was once a division by zero).
            const std::int64_t tpPp = std::int64_t(tp) * pp;
            if (pp > base.pipelineSlots(model.layers) || world % tpPp != 0)
                continue;
            for (int cp : worldDivisors) {
                if (cp > 1 && !space.tryContextParallel)
                    break;
                const std::int64_t modelParallel = tpPp * cp;
                if (world % modelParallel != 0)
                    continue;
                const int dp = int(world / modelParallel);
                // Each ZeRO stage over all dp x cp ranks, and over those of one node (the ranks
                // of a node are consecutive: gpusPerNode / tp of them share a tp index).
                const std::int64_t perNode = cluster.gpusPerNode / tp;
                const bool nodeGroups = space.tryHybridShard && cluster.gpusPerNode % tp == 0 &&
                                        perNode > 1 && perNode < std::int64_t(dp) * cp &&
                                        std::int64_t(dp) * cp % perNode == 0;
                shardings.clear();
                for (int zero : space.zeroStages) {
                    shardings.push_back({zero, 0});
                    if (zero >= 1 && nodeGroups)
                        shardings.push_back({zero, int(perNode)});
                }
                expertLayouts.clear();
                for (int ep : expertDivisors) {
                    if (std::int64_t(dp) * cp % ep == 0)
                        expertLayouts.push_back({0, ep});
                    if (tp > 1 && model.moe.enabled() && space.tryExpertParallel &&
                        std::int64_t(tp) * dp * cp % ep == 0)
                        expertLayouts.push_back({1, ep});
                }
                for (int vpp = 1;
                     vpp <= (pp > 1 && space.tryInterleaved ? space.maxVirtualStages : 1); ++vpp) {
                    for (int mb : microBatches) {
                        for (const auto& [zero, shardGroup] : shardings) {
                            // An MoE model under tp runs only with SP (Megatron-Core's rule).
                            const bool moeTp = model.moe.enabled() && tp > 1;
                            for (int sp = moeTp ? 1 : 0;
                                 sp <= (tp > 1 && (space.trySequenceParallel || moeTp) ? 1 : 0);
                                 ++sp) {
                                for (Recompute rc : space.recompute) {
                                    for (PipelineSchedule schedule :
                                         schedulesFor(pp, vpp, space, assume)) {
                                        if (options.cancel &&
                                            options.cancel->load(std::memory_order_relaxed)) {
                                            r.cancelled = true;
                                            goto done;
                                        }
                                        ParallelConfig& p = in.parallel;
                                        p = base;
                                        p.tp = tp;
                                        p.pp = pp;
                                        p.cp = cp;
                                        p.dp = dp;
                                        p.vpp = vpp;
                                        p.microBatch = mb;
                                        p.zero = zero;
                                        p.shardGroup = shardGroup;
                                        p.sequenceParallel = sp != 0;
                                        // TP overlap needs SP: without it the TP traffic waits.
                                        p.tpCommOverlap = base.tpCommOverlap && p.sequenceParallel;
                                        p.recompute = rc;
                                        p.recomputeLayers = 0; // every layer or none
                                        p.schedule = schedule;
                                        for (const auto& [etp, ep] : expertLayouts) {
                                            // Megatron-Core's EP and ETP have no shard group:
                                            // not layouts to try.
                                            if ((ep > 1 || etp > 0) && shardGroup > 0)
                                                continue;
                                            p.etp = etp;
                                            p.ep = ep;
                                            consider();
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        ++tpDone;
        if (options.progress)
            options.progress(double(tpDone) / double(worldDivisors.size()));
    }
done:
    while (!best.empty()) {
        r.top.push_back(best.top());
        best.pop();
    }
    std::reverse(r.top.begin(), r.top.end());
    return r;
}

std::vector<std::size_t> paretoFront(const std::vector<Candidate>& candidates) {
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
        if (candidates[i].fits) {
            order.push_back(i);
        }
    }
    // Sweep by memory (ties: faster first); a point is on the front when it is faster than
    // everything that uses less memory.
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        if (candidates[a].memory != candidates[b].memory) {
            return candidates[a].memory < candidates[b].memory;
        }
        return candidates[a].tokensPerSecond > candidates[b].tokensPerSecond;
    });
    std::vector<std::size_t> front;
    double best = -1;
    for (std::size_t i : order) {
        if (candidates[i].tokensPerSecond > best) {
            front.push_back(i);
            best = candidates[i].tokensPerSecond;
        }
    }
    return front;
}

} // namespace shardscope
