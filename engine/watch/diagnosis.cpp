#include "diagnosis.h"

#include "statistics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

namespace shardscope::watch {

namespace {

std::string seconds(double s) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f s", s);
    return text;
}

std::string blockedText(const BlockedIn& b) {
    std::string text = "blocked in " +
                       (b.collective.empty() ? std::string("a wait") : b.collective) + " #" +
                       std::to_string(b.sequence);
    if (!b.axis.empty())
        text += " on " + b.axis;
    text += " at step " + std::to_string(b.step);
    if (b.microbatch >= 0)
        text += ", microbatch " + std::to_string(b.microbatch);
    if (!b.op.empty())
        text += " (" + b.op + ")";
    text += ", reported after " + seconds(b.waited);
    if (b.hang)
        text += "; the watchdog ended the job";
    return text;
}

// Where a rank was when it last said anything: its newest span.
std::string lastSeen(const RankState& r) {
    if (r.spans.empty())
        return "no span received";
    const Span& s = r.spans.back();
    std::string text = std::string("last seen: ") + toString(s.kind);
    if (!s.collective.empty())
        text += " " + s.collective + (s.axis.empty() ? "" : " on " + s.axis);
    text += " of step " + std::to_string(s.step);
    if (s.microbatch >= 0)
        text += ", microbatch " + std::to_string(s.microbatch);
    return text;
}

std::string rankList(const std::vector<int>& ranks) {
    std::string text;
    for (std::size_t i = 0; i < ranks.size(); ++i)
        text += (i ? ", " : "") + std::to_string(ranks[i]);
    return text;
}

// Seconds of a step the rank spent computing: its compute spans less the in-layer waits on its
// tensor- and context-parallel peers, so a slow rank does not make its group look slow.
double ownCompute(const StepActivity& a) {
    double waits = 0;
    for (const char* axis : {"tp", "cp"})
        if (const auto it = a.exposed.find(axis); it != a.exposed.end())
            waits += it->second;
    return std::max(0.0, a.compute - waits);
}

const StepActivity* activityAt(const RankState& r, std::int64_t step) {
    for (auto it = r.activity.rbegin(); it != r.activity.rend(); ++it)
        if (it->step == step)
            return &*it;
    return nullptr;
}

// A rank found gone after a watchdog's hang summary named it was ended by the launcher (a
// stopped rank woken to be killed): the summary, written first, says what went wrong.
bool foundWhileEnding(const RunState& run, int lostRank, double at) {
    const auto& hang = run.hangSummary();
    return hang && at > hang->at &&
           std::count(hang->missing.begin(), hang->missing.end(), lostRank) > 0;
}

// Whether every error of the rank is a loss it found while the job was being ended: it did not
// fail, it was waiting when the launcher took its peers.
bool onlyFoundTheEnding(const RunState& run, const RankState& r) {
    if (r.errors.empty() || r.errors.size() != r.lossesFound.size())
        return false;
    return std::all_of(r.lossesFound.begin(), r.lossesFound.end(), [&](const auto& found) {
        return foundWhileEnding(run, found.first, found.second);
    });
}

} // namespace

const char* toString(RankStatus s) {
    switch (s) {
    case RankStatus::Waiting:
        return "waiting";
    case RankStatus::Running:
        return "running";
    case RankStatus::Stalled:
        return "stalled";
    case RankStatus::Hung:
        return "hung";
    case RankStatus::Silent:
        return "silent";
    case RankStatus::Dead:
        return "dead";
    case RankStatus::Finished:
        return "finished";
    case RankStatus::Failed:
        return "failed";
    }
    return "?";
}

std::vector<RankHealth> rankHealth(const RunState& run, const HealthOptions& options) {
    int count = run.info().worldSize;
    if (!run.ranks().empty())
        count = std::max(count, run.ranks().rbegin()->first + 1);
    std::vector<RankHealth> out;
    const bool live = options.now >= 0;
    const auto& ranks = run.ranks();
    for (int id = 0; id < count;) {
        RankHealth h;
        h.rank = id;
        h.lastRank = id;
        const RankState* r = run.rank(id);
        if (!r || !r->started) {
            // Up to the next rank that has started (or the end): what lies between never spoke.
            int last = count - 1;
            for (auto it = ranks.upper_bound(id); it != ranks.end(); ++it)
                if (it->second.started) {
                    last = it->first - 1;
                    break;
                }
            h.lastRank = last;
            h.status = RankStatus::Waiting;
            h.detail = "no start event yet";
            out.push_back(h);
            id = last + 1;
            continue;
        }
        ++id;
        std::vector<double> times;
        for (std::size_t i = r->steps.size() > 8 ? r->steps.size() - 8 : 0; i < r->steps.size();
             ++i)
            times.push_back(r->steps[i].stepTime);
        const double threshold = std::max(options.silenceSeconds, 3 * median(times));
        h.silentFor = live ? options.now - r->lastReceived : run.latestT() - r->lastT;
        if (r->endStatus) {
            const bool failed = *r->endStatus == "failed";
            h.status = failed ? RankStatus::Failed : RankStatus::Finished;
            h.detail = *r->endStatus + " after step " + std::to_string(r->lastStep());
            if (failed && !r->errors.empty())
                h.detail += ": " + r->errors.back();
        } else if (!r->errors.empty() && !onlyFoundTheEnding(run, *r)) {
            h.status = RankStatus::Failed;
            h.detail = r->errors.back();
        } else if (const auto lost = run.lostRanks().find(h.rank);
                   lost != run.lostRanks().end() &&
                   !foundWhileEnding(run, h.rank, lost->second.at)) {
            h.status = RankStatus::Dead;
            h.detail = "its process ended without a message (killed, or crashed), found by rank " +
                       std::to_string(lost->second.reporter) + "'s watchdog; " + lastSeen(*r);
        } else if (const auto said = run.launcherNotices().find(h.rank);
                   said != run.launcherNotices().end()) {
            // Another host's rank: only the launcher saw it go.
            h.status = RankStatus::Dead;
            h.detail = "its process ended without a message (" + said->second.how + " on " +
                       said->second.host + ", " + said->second.launcher + " reports); " +
                       lastSeen(*r);
        } else if (const auto& hang = run.hangSummary();
                   hang && std::count(hang->missing.begin(), hang->missing.end(), h.rank)) {
            // A rank the watchdog's summary names never told it where it waited. A report it
            // wrote before the summary is still its position (a checkpoint's longer allowance);
            // one written after came only when the job was being ended (a stopped rank woken
            // by the launcher to be killed).
            if (r->blocked && r->blocked->at <= hang->at && !r->blocked->hang) {
                h.status = RankStatus::Stalled;
                h.detail = blockedText(*r->blocked) +
                           "; it had not reported to the watchdog when the job was ended";
            } else {
                h.status = RankStatus::Silent;
                h.detail = "the watchdog found it never reported (stopped, dead, or hung outside "
                           "a collective); " +
                           lastSeen(*r);
                if (r->blocked)
                    h.detail +=
                        "; when the job was being ended it said: " + blockedText(*r->blocked);
                if (const auto late = run.lostRanks().find(h.rank); late != run.lostRanks().end())
                    h.detail += "; after that, rank " + std::to_string(late->second.reporter) +
                                "'s watchdog found its process gone (the job being ended)";
            }
        } else if (r->blocked && r->blocked->hang) {
            h.status = RankStatus::Hung;
            h.detail = blockedText(*r->blocked);
        } else if (r->disconnected) {
            h.status = RankStatus::Dead;
            h.detail = "its stream closed without an end event (the process ended or was "
                       "killed); " +
                       lastSeen(*r);
        } else if (r->blocked) {
            h.status = RankStatus::Stalled;
            h.detail = blockedText(*r->blocked);
        } else if (h.silentFor > threshold) {
            h.status = RankStatus::Silent;
            h.detail = "no event for " + seconds(h.silentFor) +
                       " (stopped, swapping, or hung outside a collective); " + lastSeen(*r);
        } else {
            h.status = RankStatus::Running;
            h.detail = "step " + std::to_string(r->lastStep());
        }
        out.push_back(h);
    }
    return out;
}

std::string rankLabel(const RankHealth& h) {
    return h.lastRank > h.rank ? std::to_string(h.rank) + "-" + std::to_string(h.lastRank)
                               : std::to_string(h.rank);
}

std::string hangDiagnosis(const RunState& run, const std::vector<RankHealth>& health) {
    std::vector<int> dead, silent, hung;
    std::vector<std::string> blocked;
    for (const RankHealth& h : health) {
        switch (h.status) {
        case RankStatus::Dead:
            dead.push_back(h.rank);
            break;
        case RankStatus::Silent:
            silent.push_back(h.rank);
            break;
        case RankStatus::Stalled:
        case RankStatus::Hung:
            hung.push_back(h.rank);
            blocked.push_back("rank " + std::to_string(h.rank) + " " + h.detail);
            break;
        default:
            break;
        }
    }
    std::string text;
    auto sentence = [&](const std::string& s) { text += (text.empty() ? "" : " ") + s; };
    if (!dead.empty()) {
        // The first stream to close is the rank that died; the launcher ends the others.
        int first = dead.front();
        for (int r : dead)
            if (run.rank(r)->lastReceived < run.rank(first)->lastReceived)
                first = r;
        sentence((dead.size() == 1 ? "Rank " : "Ranks ") + rankList(dead) + " ended without an " +
                 "end event; rank " + std::to_string(first) + " first.");
    }
    const auto noticed = std::find_if( // the watchdog that noticed says who and where it waited
        run.lostRanks().begin(), run.lostRanks().end(),
        [&](const auto& lost) { return !foundWhileEnding(run, lost.first, lost.second.at); });
    if (noticed != run.lostRanks().end())
        sentence("Watchdog of " + noticed->second.message + ".");
    else if (!run.launcherNotices().empty()) // a rank on another host: the launcher saw it go
        sentence(run.launcherNotices().begin()->second.message + ".");
    if (!silent.empty())
        sentence((silent.size() == 1 ? "Rank " : "Ranks ") + rankList(silent) +
                 (silent.size() == 1 ? " is" : " are") + " silent.");
    if (!hung.empty()) {
        std::string list;
        for (std::size_t i = 0; i < blocked.size(); ++i)
            list += (i ? "; " : "") + blocked[i];
        sentence((hung.size() == 1 ? "Rank " : "Ranks ") + rankList(hung) +
                 (hung.size() == 1 ? " is" : " are") + " blocked" +
                 (silent.empty() ? std::string() : " waiting for the silent ranks") + ": " + list +
                 ".");
    }
    if (const auto& hang = run.hangSummary(); hang && !hang->message.empty())
        sentence(hang->message);
    return text;
}

std::vector<Straggler> findStragglers(const RunState& run, const StragglerOptions& options) {
    std::vector<Straggler> out;
    const int want = std::max(1, options.steps);
    std::map<int, std::vector<const RankState*>> byStage;
    for (const auto& [id, r] : run.ranks())
        if (r.started && !r.activity.empty())
            byStage[r.coord.pp].push_back(&r);
    for (const auto& [stage, peers] : byStage) {
        if (peers.size() < 2)
            continue;
        // The newest steps every peer has reported (the first step pays for allocations),
        // found from the back: per-step activity is kept in step order.
        std::vector<std::int64_t> steps;
        const auto& first = peers.front()->activity;
        for (auto it = first.rbegin(); it != first.rend() && int(steps.size()) < want; ++it) {
            if (it->step <= 1)
                break;
            if (std::all_of(peers.begin(), peers.end(),
                            [&](const RankState* r) { return activityAt(*r, it->step); }))
                steps.push_back(it->step);
        }
        if (int(steps.size()) < want)
            continue;
        std::reverse(steps.begin(), steps.end());
        std::map<const RankState*, std::vector<double>> ratio, excess, stepTime;
        std::map<const RankState*, bool> slow;
        for (const RankState* r : peers)
            slow[r] = true;
        for (std::int64_t step : steps) {
            std::vector<double> compute;
            for (const RankState* r : peers)
                compute.push_back(ownCompute(*activityAt(*r, step)));
            const double mid = median(compute);
            for (std::size_t i = 0; i < peers.size(); ++i) {
                const RankState* r = peers[i];
                const double x = mid > 0 ? compute[i] / mid - 1 : 0;
                ratio[r].push_back(x);
                excess[r].push_back(compute[i] - mid);
                stepTime[r].push_back(activityAt(*r, step)->stepTime);
                if (!(x > options.margin))
                    slow[r] = false;
            }
        }
        for (const RankState* r : peers) {
            if (!slow[r])
                continue;
            Straggler s;
            s.rank = r->rank;
            s.host = r->host;
            s.stage = stage;
            s.peers = int(peers.size());
            s.slowdown = median(ratio[r]);
            s.excess = median(excess[r]);
            s.stepTime = median(stepTime[r]);
            std::vector<double> tps;
            for (const StepSample& sample : r->steps)
                if (std::count(steps.begin(), steps.end(), sample.step))
                    tps.push_back(sample.tokensPerSecond);
            s.tokensPerSecond = median(tps);
            const double tokens = s.tokensPerSecond * s.stepTime;
            if (s.stepTime > s.excess && s.excess > 0)
                s.throughputCost = tokens / (s.stepTime - s.excess) - s.tokensPerSecond;
            s.steps = steps;
            out.push_back(std::move(s));
        }
    }
    return out;
}

} // namespace shardscope::watch
