#include "pipeline_program.h"

#include "core/error.h"
#include "zero_bubble_auto.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

namespace shardscope {

std::string toString(OpKind k) {
    switch (k) {
    case OpKind::Forward:
        return "F";
    case OpKind::Backward:
        return "B+W";
    case OpKind::BackwardInput:
        return "B";
    case OpKind::BackwardWeight:
        return "W";
    }
    return "?";
}

char letterOf(OpKind k) {
    return k == OpKind::Forward ? 'F' : k == OpKind::BackwardWeight ? 'W' : 'B';
}

const char* spanKindName(OpKind k) {
    switch (k) {
    case OpKind::Forward:
        return "forward";
    case OpKind::Backward:
        return "backward";
    case OpKind::BackwardInput:
        return "backward_input";
    case OpKind::BackwardWeight:
        return "backward_weight";
    }
    return "?";
}

std::string toString(TensorKind t) {
    return t == TensorKind::Activation ? "activation" : "gradient";
}

std::size_t PipelineProgram::opCount() const {
    std::size_t n = 0;
    for (const auto& ops : ranks)
        n += ops.size();
    return n;
}

namespace {

constexpr int kMaxStages = 1024;
constexpr int kMaxMicrobatches = 16384;
constexpr long long kMaxOps = 8'000'000;

void checkSpec(const ScheduleSpec& s) {
    const std::string name = toString(s.kind);
    if (s.stages < 1 || s.stages > kMaxStages)
        throw InputError("pipeline stages p = " + std::to_string(s.stages) + ": use 1 to " +
                         std::to_string(kMaxStages));
    if (s.microbatches < 1 || s.microbatches > kMaxMicrobatches)
        throw InputError("microbatches m = " + std::to_string(s.microbatches) + ": use 1 to " +
                         std::to_string(kMaxMicrobatches));
    if (s.virtualStages < 1 || s.virtualStages > 64)
        throw InputError("virtual stages v = " + std::to_string(s.virtualStages) + ": use 1 to 64");
    if (s.kind == PipelineSchedule::Interleaved) {
        if (s.virtualStages < 2)
            throw InputError("interleaved 1F1B needs v >= 2 model chunks per rank (v = 1 is "
                             "plain 1F1B)");
        if (s.stages < 2)
            throw InputError("interleaved 1F1B needs p >= 2 pipeline ranks");
        if (s.microbatches % s.stages != 0)
            throw InputError(
                "interleaved 1F1B needs m divisible by p: m = " + std::to_string(s.microbatches) +
                ", p = " + std::to_string(s.stages) +
                " (try m = " + std::to_string((s.microbatches / s.stages + 1) * s.stages) + ")");
    } else if (s.virtualStages != 1) {
        throw InputError(name + " runs one model chunk per rank: set v = 1 (only interleaved "
                                "1F1B uses virtual stages)");
    }
    const long long ops = 3LL * s.stages * s.virtualStages * s.microbatches;
    if (ops > kMaxOps)
        throw InputError("p x v x m = " + std::to_string(ops / 3) +
                         " operations is too many to "
                         "list (at most " +
                         std::to_string(kMaxOps / 3) + ")");
}

// Builds one rank's list, filling in the transfers each op implies.
class RankProgram {
public:
    RankProgram(const ScheduleSpec& s, int rank, std::vector<PipelineOp>& out)
        : p_(s.stages), v_(s.virtualStages), rank_(rank), out_(out) {}

    void add(OpKind kind, int microbatch, int chunk = 0) {
        PipelineOp op;
        op.kind = kind;
        op.microbatch = microbatch;
        op.chunk = chunk;
        op.stage = chunk * p_ + rank_;
        const int last = p_ * v_ - 1;
        if (kind == OpKind::Forward) {
            if (op.stage > 0)
                op.recv = Transfer{(op.stage - 1) % p_, TensorKind::Activation};
            if (op.stage < last)
                op.send = Transfer{(op.stage + 1) % p_, TensorKind::Activation};
        } else if (kind != OpKind::BackwardWeight) {
            if (op.stage < last)
                op.recv = Transfer{(op.stage + 1) % p_, TensorKind::Gradient};
            if (op.stage > 0)
                op.send = Transfer{(op.stage - 1) % p_, TensorKind::Gradient};
        }
        // A one-rank pipeline talks to nobody.
        if (op.recv && op.recv->peer == rank_)
            op.recv.reset();
        if (op.send && op.send->peer == rank_)
            op.send.reset();
        out_.push_back(op);
    }

private:
    int p_, v_, rank_;
    std::vector<PipelineOp>& out_;
};

// No pipelining: each microbatch goes all the way forward and back before the next starts.
void buildNaive(const ScheduleSpec& s, int r, RankProgram& prog) {
    (void)r;
    for (int i = 0; i < s.microbatches; ++i) {
        prog.add(OpKind::Forward, i);
        prog.add(OpKind::Backward, i);
    }
}

// GPipe: all forwards, then all backwards.
void buildGPipe(const ScheduleSpec& s, int, RankProgram& prog) {
    for (int i = 0; i < s.microbatches; ++i)
        prog.add(OpKind::Forward, i);
    for (int i = 0; i < s.microbatches; ++i)
        prog.add(OpKind::Backward, i);
}

// 1F1B (PipeDream-flush): p - r - 1 warm-up forwards, then one forward and one backward in
// turn, then the remaining backwards. Rank r holds at most p - r microbatches.
void buildOneFOneB(const ScheduleSpec& s, int r, RankProgram& prog) {
    const int m = s.microbatches;
    const int warmup = std::min(s.stages - r - 1, m);
    for (int i = 0; i < warmup; ++i)
        prog.add(OpKind::Forward, i);
    for (int i = 0; i < m - warmup; ++i) {
        prog.add(OpKind::Forward, warmup + i);
        prog.add(OpKind::Backward, i);
    }
    for (int i = m - warmup; i < m; ++i)
        prog.add(OpKind::Backward, i);
}

// ZB-H1 (Qi et al. 2023, Figure 3 top): 1F1B's order of F and B with the backward split, and rank
// r runs W of microbatch j after B of microbatch j + r. B reaches the previous rank earlier and the
// late W passes fill the tail, so the bubble is (p-1)(F+B-W) instead of (p-1)(F+B+W), with the
// same p - r microbatches awaiting B as 1F1B.
void buildZeroBubbleH1(const ScheduleSpec& s, int r, RankProgram& prog) {
    const int m = s.microbatches;
    const int warmup = std::min(s.stages - r - 1, m);
    int nextW = 0;
    auto backward = [&](int i) {
        prog.add(OpKind::BackwardInput, i);
        if (i - r >= 0)
            prog.add(OpKind::BackwardWeight, nextW++);
    };
    for (int i = 0; i < warmup; ++i)
        prog.add(OpKind::Forward, i);
    for (int i = 0; i < m - warmup; ++i) {
        prog.add(OpKind::Forward, warmup + i);
        backward(i);
    }
    for (int i = m - warmup; i < m; ++i)
        backward(i);
    while (nextW < m)
        prog.add(OpKind::BackwardWeight, nextW++);
}

// ZB-1p and ZB-2p: the automatic schedule's order for each rank (zero_bubble_auto.h), found with
// F, B and W of equal time as the paper's analysis takes them, so one (p, m) gives one program.
// The heuristic takes up to a second on the largest shapes; the Pipeline page and the engine ask
// for the same few again and again, so the last few orders are kept.
ZeroBubbleOrder automaticOrder(const ScheduleSpec& s) {
    using Key = std::tuple<int, int, int>;
    static std::mutex mutex;
    static std::map<Key, ZeroBubbleOrder> kept;
    const int limit = zeroBubbleHeldLimit(s.kind, s.stages);
    const Key key{s.stages, s.microbatches, limit};
    {
        const std::lock_guard lock(mutex);
        if (const auto it = kept.find(key); it != kept.end())
            return it->second;
    }
    ZeroBubbleOrder order = zeroBubbleOrder(s.stages, s.microbatches, limit);
    const std::lock_guard lock(mutex);
    if (kept.size() >= 8)
        kept.clear();
    kept.emplace(key, order);
    return order;
}

// Interleaved 1F1B (Narayanan et al. 2021; Megatron-LM's schedule): rank r holds chunks c of
// stages c*p + r. Microbatches go through in groups of p; the k-th forward of a rank runs chunk
// (k / p) % v of microbatch (k / (p v)) p + k % p, backwards visit the chunks in reverse.
void buildInterleaved(const ScheduleSpec& s, int r, RankProgram& prog) {
    const int p = s.stages, v = s.virtualStages;
    const int total = s.microbatches * v;
    const auto chunkOf = [&](int k, bool forward) {
        const int c = (k % (p * v)) / p;
        return forward ? c : v - 1 - c;
    };
    const auto microbatchOf = [&](int k) { return (k / (p * v)) * p + k % p; };
    int warmup = s.microbatches == p ? total : (p - r - 1) * 2 + (v - 1) * p;
    warmup = std::min(warmup, total);
    for (int k = 0; k < warmup; ++k)
        prog.add(OpKind::Forward, microbatchOf(k), chunkOf(k, true));
    for (int i = 0; i < total - warmup; ++i) {
        const int f = warmup + i;
        prog.add(OpKind::Forward, microbatchOf(f), chunkOf(f, true));
        prog.add(OpKind::Backward, microbatchOf(i), chunkOf(i, false));
    }
    for (int k = total - warmup; k < total; ++k)
        prog.add(OpKind::Backward, microbatchOf(k), chunkOf(k, false));
}

} // namespace

PipelineProgram buildPipelineProgram(const ScheduleSpec& spec) {
    checkSpec(spec);
    PipelineProgram program;
    program.spec = spec;
    program.ranks.resize(std::size_t(spec.stages));
    const ZeroBubbleOrder order =
        isAutomaticZeroBubble(spec.kind) ? automaticOrder(spec) : ZeroBubbleOrder{};
    for (int r = 0; r < spec.stages; ++r) {
        auto& ops = program.ranks[std::size_t(r)];
        ops.reserve(std::size_t(3 * spec.microbatches * spec.virtualStages));
        RankProgram prog(spec, r, ops);
        switch (spec.kind) {
        case PipelineSchedule::Naive:
            buildNaive(spec, r, prog);
            break;
        case PipelineSchedule::GPipe:
            buildGPipe(spec, r, prog);
            break;
        case PipelineSchedule::OneFOneB:
            buildOneFOneB(spec, r, prog);
            break;
        case PipelineSchedule::Interleaved:
            buildInterleaved(spec, r, prog);
            break;
        case PipelineSchedule::ZeroBubble:
            buildZeroBubbleH1(spec, r, prog);
            break;
        case PipelineSchedule::ZeroBubble1p:
        case PipelineSchedule::ZeroBubble2p:
            for (const ScheduledPass& pass : order.ranks[std::size_t(r)])
                prog.add(pass.kind, pass.microbatch);
            break;
        }
    }
    return program;
}

namespace {

// The op another op waits for on another rank, if any: forward waits for the previous stage's
// forward, a backward (or B) for the next stage's backward (or B).
struct Key {
    OpKind kind; // Forward, or Backward standing for both fused B+W and B
    int microbatch;
    int stage;
    bool operator<(const Key& o) const {
        return std::tie(kind, microbatch, stage) < std::tie(o.kind, o.microbatch, o.stage);
    }
};

Key keyOf(const PipelineOp& op) {
    const OpKind k = op.kind == OpKind::Forward          ? OpKind::Forward
                     : op.kind == OpKind::BackwardWeight ? OpKind::BackwardWeight
                                                         : OpKind::Backward;
    return {k, op.microbatch, op.stage};
}

std::string describe(int rank, const PipelineOp& op) {
    return "rank " + std::to_string(rank) + " " + toString(op.kind) + " of microbatch " +
           std::to_string(op.microbatch) + " on stage " + std::to_string(op.stage);
}

} // namespace

std::vector<std::string> verifyProgram(const PipelineProgram& program) {
    std::vector<std::string> problems;
    const ScheduleSpec& s = program.spec;
    const int p = s.stages, stages = program.virtualStageCount(), m = s.microbatches;
    if (int(program.ranks.size()) != p) {
        problems.push_back("the program has " + std::to_string(program.ranks.size()) +
                           " ranks for p = " + std::to_string(p));
        return problems;
    }

    // Each (microbatch, stage) runs its forward and backward exactly once, on the stage's rank,
    // and a split backward has both halves.
    std::map<Key, int> count;
    for (int r = 0; r < p; ++r) {
        for (const PipelineOp& op : program.ranks[std::size_t(r)]) {
            if (op.stage % p != r || op.stage / p != op.chunk || op.microbatch < 0 ||
                op.microbatch >= m || op.stage >= stages)
                problems.push_back(describe(r, op) + " is on the wrong rank or out of range");
            ++count[keyOf(op)];
            if (op.kind == OpKind::Backward)
                ++count[{OpKind::BackwardWeight, op.microbatch, op.stage}];
        }
    }
    for (int i = 0; i < m; ++i) {
        for (int st = 0; st < stages; ++st) {
            for (OpKind k : {OpKind::Forward, OpKind::Backward, OpKind::BackwardWeight}) {
                const auto it = count.find({k, i, st});
                const int n = it == count.end() ? 0 : it->second;
                if (n != 1)
                    problems.push_back(toString(k == OpKind::Backward ? OpKind::BackwardInput : k) +
                                       " of microbatch " + std::to_string(i) + " on stage " +
                                       std::to_string(st) + " runs " + std::to_string(n) +
                                       " times, not once");
            }
        }
    }
    if (!problems.empty())
        return problems;

    // Every transfer pairs up: what an op receives is sent by the op it depends on.
    std::map<std::tuple<int, int, int, int, int>, int> inFlight; // from, to, tensor, mb, stage
    for (int r = 0; r < p; ++r) {
        for (const PipelineOp& op : program.ranks[std::size_t(r)]) {
            if (op.send)
                ++inFlight[{r, op.send->peer, int(op.send->tensor), op.microbatch,
                            op.send->tensor == TensorKind::Activation ? op.stage + 1
                                                                      : op.stage - 1}];
            if (op.recv)
                --inFlight[{op.recv->peer, r, int(op.recv->tensor), op.microbatch, op.stage}];
        }
    }
    for (const auto& [k, n] : inFlight) {
        if (n != 0)
            problems.push_back(
                "rank " + std::to_string(std::get<0>(k)) + " -> rank " +
                std::to_string(std::get<1>(k)) + ": " + toString(TensorKind(std::get<2>(k))) +
                " of microbatch " + std::to_string(std::get<3>(k)) +
                (n > 0 ? " is sent but never received" : " is received but never sent"));
    }
    if (!problems.empty())
        return problems;

    // Between each ordered pair of ranks, the receiver takes the transfers in the order the
    // sender posts them, so a communicator can match them by posting order alone (NCCL has no
    // tags; MPI keeps the messages of one sender to one receiver in order).
    using Posted = std::tuple<int, int, int>; // tensor, microbatch, receiving stage
    std::map<std::pair<int, int>, std::vector<Posted>> sent, received;
    for (int r = 0; r < p; ++r) {
        for (const PipelineOp& op : program.ranks[std::size_t(r)]) {
            if (op.send)
                sent[{r, op.send->peer}].emplace_back(
                    int(op.send->tensor), op.microbatch,
                    op.send->tensor == TensorKind::Activation ? op.stage + 1 : op.stage - 1);
            if (op.recv)
                received[{op.recv->peer, r}].emplace_back(int(op.recv->tensor), op.microbatch,
                                                          op.stage);
        }
    }
    const auto name = [](const Posted& t) {
        return toString(TensorKind(std::get<0>(t))) + " of microbatch " +
               std::to_string(std::get<1>(t)) + " for stage " + std::to_string(std::get<2>(t));
    };
    for (const auto& [pair, sends] : sent) {
        const std::vector<Posted>& receives = received[pair];
        for (std::size_t i = 0; i < std::min(sends.size(), receives.size()); ++i) {
            if (sends[i] == receives[i])
                continue;
            problems.push_back("rank " + std::to_string(pair.first) + " -> rank " +
                               std::to_string(pair.second) + ": transfer " + std::to_string(i + 1) +
                               " is sent as the " + name(sends[i]) + " but received as the " +
                               name(receives[i]) +
                               "; two ranks must take their transfers in the order they are "
                               "sent");
            break;
        }
    }

    // Run every rank's list in order (sends do not block): an op may run once the op it depends
    // on has run, on any rank. No progress with ops left means deadlock.
    std::map<Key, bool> done;
    std::vector<std::size_t> next(std::size_t(p), 0);
    std::size_t remaining = program.opCount();
    const auto ready = [&](const PipelineOp& op) {
        switch (op.kind) {
        case OpKind::Forward:
            return op.stage == 0 || done.count({OpKind::Forward, op.microbatch, op.stage - 1});
        case OpKind::Backward:
        case OpKind::BackwardInput:
            return done.count({OpKind::Forward, op.microbatch, op.stage}) &&
                   (op.stage == stages - 1 ||
                    done.count({OpKind::Backward, op.microbatch, op.stage + 1}));
        case OpKind::BackwardWeight:
            return done.count({OpKind::Backward, op.microbatch, op.stage}) > 0;
        }
        return false;
    };
    while (remaining > 0) {
        bool progress = false;
        for (int r = 0; r < p; ++r) {
            auto& ops = program.ranks[std::size_t(r)];
            std::size_t& i = next[std::size_t(r)];
            while (i < ops.size() && ready(ops[i])) {
                done[keyOf(ops[i])] = true;
                ++i;
                --remaining;
                progress = true;
            }
        }
        if (!progress) {
            for (int r = 0; r < p; ++r) {
                const std::size_t i = next[std::size_t(r)];
                if (i < program.ranks[std::size_t(r)].size())
                    problems.push_back(
                        "deadlock: " + describe(r, program.ranks[std::size_t(r)][i]) +
                        " waits for an op that never runs first");
            }
            break;
        }
    }
    return problems;
}

} // namespace shardscope
