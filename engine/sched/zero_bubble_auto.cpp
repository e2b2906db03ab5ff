#include "zero_bubble_auto.h"

#include "core/error.h"

#include <algorithm>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

namespace shardscope {

namespace {

std::size_t sz(int i) {
    return static_cast<std::size_t>(i);
}

// One run of the heuristic (Qi et al. 2024, section 3.1). Each rank keeps 1F1B's order of F and
// B: a warm-up of forwards, then one F and one B in turn, then the last Bs. Ws go wherever the
// rank would otherwise wait for its next input, and before a forward when the rank holds its
// limit; the rest come at the end. Two choices the paper leaves open are parameters: the warm-up
// (`greedyWarmUp`: as many forwards as fit before the first B can start, within the limit, as
// ZB-2p needs; otherwise 1F1B's p - r), and whether a gap shorter than a W is filled anyway
// (`fillShort`), delaying the waiting pass a little to save the W's time later.
class Greedy {
public:
    Greedy(int p, int m, int limit, const OpCosts& c, double comm, bool greedyWarmUp,
           bool fillShort)
        : p_(p), m_(m), limit_(limit), c_(c), comm_(comm), fillShort_(fillShort), ranks_(sz(p)),
          endF_(sz(p), std::vector<double>(sz(m), kNever)),
          endB_(sz(p), std::vector<double>(sz(m), kNever)) {
        const std::vector<int> warm = greedyWarmUp ? warmUpThatFits() : warmUpOf1F1B();
        for (int r = 0; r < p; ++r) {
            auto& skeleton = ranks_[sz(r)].skeleton;
            const int n = warm[sz(r)];
            for (int i = 0; i < n; ++i)
                skeleton.push_back(OpKind::Forward);
            for (int i = n; i < m; ++i) {
                skeleton.push_back(OpKind::BackwardInput);
                skeleton.push_back(OpKind::Forward);
            }
            for (int i = 0; i < n; ++i)
                skeleton.push_back(OpKind::BackwardInput);
        }
    }

    // Passes in the order they start, ties to the lower rank. A pass changes only its own rank's
    // next choice and its neighbours' (whose input it may be), so only those are looked at again.
    ZeroBubbleOrder run() {
        std::set<std::pair<double, int>> soonest;
        std::vector<double> keyOf(sz(p_), kNever);
        const auto refresh = [&](int r) {
            if (r < 0 || r >= p_)
                return;
            soonest.erase({keyOf[sz(r)], r});
            keyOf[sz(r)] = next(r).start;
            if (keyOf[sz(r)] < kNever)
                soonest.insert({keyOf[sz(r)], r});
        };
        for (int r = 0; r < p_; ++r)
            refresh(r);
        for (long long left = 3LL * p_ * m_; left > 0; --left) {
            if (soonest.empty())
                throw std::logic_error("zero-bubble heuristic: no rank can proceed");
            const int r = soonest.begin()->second;
            put(r, next(r));
            for (int q : {r - 1, r, r + 1})
                refresh(q);
        }
        ZeroBubbleOrder out;
        for (auto& r : ranks_) {
            out.span = std::max(out.span, r.clock - r.first);
            out.makespan = std::max(out.makespan, r.clock);
            out.peakHeld.push_back(r.peak);
            out.ranks.push_back(std::move(r.order));
        }
        return out;
    }

private:
    static constexpr double kNever = std::numeric_limits<double>::infinity();
    struct Rank {
        std::vector<OpKind> skeleton; // F and B in 1F1B's order
        std::size_t step = 0;         // the next of them
        int f = 0, b = 0, w = 0, held = 0, peak = 0;
        double clock = 0, first = -1;
        std::vector<ScheduledPass> order;
    };
    struct Choice {
        OpKind kind = OpKind::Forward;
        double start = kNever;
    };

    // When rank r's next F or B (`kind`) may start as far as is known now (never: not yet sent).
    double inputOf(int r, OpKind kind) const {
        const Rank& me = ranks_[sz(r)];
        if (kind == OpKind::Forward)
            return r == 0 ? 0.0 : endF_[sz(r - 1)][sz(me.f)] + comm_;
        return r == p_ - 1 ? endF_[sz(r)][sz(me.b)] : endB_[sz(r + 1)][sz(me.b)] + comm_;
    }

    // The pass rank r would start next, and when.
    Choice next(int r) const {
        const Rank& me = ranks_[sz(r)];
        const bool pendingW = me.w < me.b;
        if (me.step == me.skeleton.size())
            return pendingW ? Choice{OpKind::BackwardWeight, me.clock} : Choice{};
        const OpKind kind = me.skeleton[me.step];
        if (kind == OpKind::Forward && me.held >= limit_)
            return pendingW ? Choice{OpKind::BackwardWeight, me.clock} : Choice{};
        const double input = inputOf(r, kind);
        if (input <= me.clock)
            return {kind, me.clock};
        if (pendingW && (fillShort_ || me.clock + c_.backwardWeight <= input))
            return {OpKind::BackwardWeight, me.clock};
        return {kind, input};
    }

    void put(int r, const Choice& c) {
        Rank& me = ranks_[sz(r)];
        const double end = c.start + cost(c.kind);
        if (me.first < 0)
            me.first = c.start;
        me.clock = end;
        int i = 0;
        if (c.kind == OpKind::Forward) {
            i = me.f++;
            endF_[sz(r)][sz(i)] = end;
            me.peak = std::max(me.peak, ++me.held);
            ++me.step;
        } else if (c.kind == OpKind::BackwardInput) {
            i = me.b++;
            endB_[sz(r)][sz(i)] = end;
            ++me.step;
        } else {
            i = me.w++;
            --me.held;
        }
        me.order.push_back({c.kind, i});
    }

    double cost(OpKind k) const {
        return k == OpKind::Forward         ? c_.forward
               : k == OpKind::BackwardInput ? c_.backwardInput
                                            : c_.backwardWeight;
    }

    std::vector<int> warmUpOf1F1B() const {
        std::vector<int> n(sz(p_));
        for (int r = 0; r < p_; ++r)
            n[sz(r)] = std::min({p_ - r, m_, limit_});
        return n;
    }

    // As many forwards on each rank as end before its first B can start, within the limit. Rank
    // r's k-th forward ends, while ranks run only forwards, at max(its (k-1)-th, rank r-1's k-th
    // + p2p) + F; the first B's start follows from the last rank back to the first.
    std::vector<int> warmUpThatFits() const {
        const int cap = std::min(m_, limit_);
        auto ends = std::vector<std::vector<double>>(sz(p_), std::vector<double>(sz(cap)));
        for (int r = 0; r < p_; ++r)
            for (int k = 0; k < cap; ++k) {
                const double previous = k > 0 ? ends[sz(r)][sz(k - 1)] : 0.0;
                const double input = r > 0 ? ends[sz(r - 1)][sz(k)] + comm_ : 0.0;
                ends[sz(r)][sz(k)] = std::max(previous, input) + c_.forward;
            }
        std::vector<int> n(sz(p_), 1);
        double firstBackwardEnd = ends[sz(p_ - 1)][0] + c_.backwardInput;
        for (int r = p_ - 2; r >= 0; --r) {
            const double ready = firstBackwardEnd + comm_;
            const auto& mine = ends[sz(r)];
            int& count = n[sz(r)];
            while (count < cap && mine[sz(count)] <= ready)
                ++count;
            firstBackwardEnd = std::max(mine[sz(count - 1)], ready) + c_.backwardInput;
        }
        // A rank cannot run a forward its predecessor has not run before its own first B.
        for (int r = 1; r < p_; ++r)
            n[sz(r)] = std::min(n[sz(r)], n[sz(r - 1)]);
        return n;
    }

    int p_, m_, limit_;
    OpCosts c_;
    double comm_;
    bool fillShort_;
    std::vector<Rank> ranks_;
    std::vector<std::vector<double>> endF_, endB_;
};

constexpr int kMostPasses = 300'000;

} // namespace

bool isAutomaticZeroBubble(PipelineSchedule s) {
    return s == PipelineSchedule::ZeroBubble1p || s == PipelineSchedule::ZeroBubble2p;
}

int zeroBubbleHeldLimit(PipelineSchedule s, int p) {
    return s == PipelineSchedule::ZeroBubble2p ? 2 * p : p;
}

ZeroBubbleOrder zeroBubbleOrder(int p, int m, int heldLimit, const OpCosts& costs, double p2p) {
    if (p < 1 || p > 1024)
        throw InputError("pipeline stages p = " + std::to_string(p) + ": use 1 to 1024");
    if (m < 1 || m > 16384)
        throw InputError("microbatches m = " + std::to_string(m) + ": use 1 to 16384");
    // Each of the heuristic's eight runs takes about a microsecond a pass: a second or two here.
    if (double(p) * m > kMostPasses)
        throw InputError("p x m = " + std::to_string(p * m) +
                         " microbatch passes is too many to schedule automatically (at most " +
                         std::to_string(kMostPasses) +
                         "; ZB-H1, --schedule zero-bubble, takes more)");
    if (heldLimit < 1)
        throw InputError("a rank must hold at least one microbatch (limit " +
                         std::to_string(heldLimit) + ")");
    for (double c : {costs.forward, costs.backwardInput, costs.backwardWeight, p2p})
        if (!(c >= 0) || c > std::numeric_limits<double>::max())
            throw InputError("pass and transfer times must be finite and >= 0");
    ZeroBubbleOrder best;
    bool have = false;
    // A schedule within 1F1B's p microbatches is within any larger limit too.
    std::vector<int> limits = {heldLimit};
    if (p < heldLimit)
        limits.push_back(p);
    for (int limit : limits)
        for (bool greedyWarmUp : {false, true})
            for (bool fillShort : {false, true}) {
                ZeroBubbleOrder candidate =
                    Greedy(p, m, limit, costs, p2p, greedyWarmUp, fillShort).run();
                if (!have || candidate.span < best.span) {
                    best = std::move(candidate);
                    have = true;
                }
            }
    return best;
}

} // namespace shardscope
