#include "run_state.h"

#include "core/json_io.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace shardscope::watch {

using nlohmann::json;

namespace {

struct KindName {
    SpanKind kind;
    const char* name;
};
constexpr KindName kKindNames[] = {
    {SpanKind::Data, "data"},
    {SpanKind::Forward, "forward"},
    {SpanKind::Backward, "backward"},
    {SpanKind::BackwardInput, "backward_input"},
    {SpanKind::BackwardWeight, "backward_weight"},
    {SpanKind::Optimizer, "optimizer"},
    {SpanKind::GradNorm, "grad_norm"},
    {SpanKind::Eval, "eval"},
    {SpanKind::Checkpoint, "checkpoint"},
    {SpanKind::Communication, "communication"},
    {SpanKind::Wait, "wait"},
};

// A number from an untrusted event: absent, null or not a number gives `fallback`.
double number(const json& e, const char* key, double fallback = 0) {
    const auto it = e.find(key);
    return it != e.end() && it->is_number() ? it->get<double>() : fallback;
}

std::int64_t integer(const json& e, const char* key, std::int64_t fallback = 0) {
    const auto it = e.find(key);
    if (it == e.end() || !it->is_number())
        return fallback;
    const double v = it->get<double>();
    if (!std::isfinite(v) || std::fabs(v) > 9.0e15)
        return fallback;
    return static_cast<std::int64_t>(v);
}

int smallInt(const json& e, const char* key, int fallback) {
    const std::int64_t v = integer(e, key, fallback);
    return v < -1'000'000'000 || v > 1'000'000'000 ? fallback : static_cast<int>(v);
}

std::string text(const json& e, const char* key) {
    const auto it = e.find(key);
    return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
}

MemoryBytes memoryOf(const json& e, const char* key) {
    MemoryBytes m;
    const auto it = e.find(key);
    if (it == e.end() || !it->is_object())
        return m;
    m.parameters = number(*it, "parameters");
    m.gradients = number(*it, "gradients");
    m.optimizer = number(*it, "optimizer");
    m.activations = number(*it, "activations");
    m.workspace = number(*it, "workspace");
    return m;
}

} // namespace

SpanKind spanKindFromString(const std::string& s) {
    for (const KindName& k : kKindNames)
        if (s == k.name)
            return k.kind;
    return SpanKind::Other;
}

const char* toString(SpanKind kind) {
    for (const KindName& k : kKindNames)
        if (kind == k.kind)
            return k.name;
    return "other";
}

bool isCompute(SpanKind k) {
    switch (k) {
    case SpanKind::Data:
    case SpanKind::Forward:
    case SpanKind::Backward:
    case SpanKind::BackwardInput:
    case SpanKind::BackwardWeight:
    case SpanKind::Optimizer:
    case SpanKind::GradNorm:
        return true;
    default:
        return false;
    }
}

bool isPipelineOp(SpanKind k) {
    return k == SpanKind::Forward || k == SpanKind::Backward || k == SpanKind::BackwardInput ||
           k == SpanKind::BackwardWeight;
}

double unionSeconds(std::vector<std::pair<double, double>> intervals) {
    std::sort(intervals.begin(), intervals.end());
    double total = 0;
    double openStart = 0, openEnd = -std::numeric_limits<double>::infinity();
    for (const auto& [start, end] : intervals) {
        if (!(end > start))
            continue;
        if (start > openEnd) {
            if (openEnd > openStart)
                total += openEnd - openStart;
            openStart = start;
            openEnd = end;
        } else {
            openEnd = std::max(openEnd, end);
        }
    }
    if (openEnd > openStart)
        total += openEnd - openStart;
    return total;
}

const RankState* RunState::rank(int r) const {
    const auto it = ranks_.find(r);
    return it == ranks_.end() ? nullptr : &it->second;
}

std::int64_t RunState::latestStep() const {
    std::int64_t latest = 0;
    for (const auto& [r, state] : ranks_)
        latest = std::max(latest, state.lastStep());
    return latest;
}

void RunState::add(const json& event, double receivedAt) {
    if (!event.is_object() || !event.contains("rank") || !event["rank"].is_number_integer()) {
        ++ignored_;
        return;
    }
    const std::int64_t id = event["rank"].get<std::int64_t>();
    // A rank number far beyond any job is a corrupt event, not a reason to allocate.
    if (id < 0 || id > 1'000'000) {
        ++ignored_;
        return;
    }
    const std::string type = text(event, "type");
    if (type == "hello")
        return; // the receiver's business: token and session
    RankState& r = ranks_[int(id)];
    r.rank = int(id);
    const double t = number(event, "t", r.lastT);
    if (std::isfinite(t)) {
        r.lastT = t;
        if (r.segments >= newestSegment_)
            latestT_ = std::max(latestT_, t);
    }
    if (receivedAt >= 0) {
        r.lastReceived = receivedAt;
        r.disconnected = false; // it reconnected: whatever closed before, it is talking now
    }
    if (const auto c = event.find("coord"); c != event.end() && c->is_object())
        r.coord = {smallInt(*c, "dp", 0), smallInt(*c, "tp", 0), smallInt(*c, "pp", 0),
                   smallInt(*c, "cp", 0)};
    const bool start = type == "event" && text(event, "event") == "start";
    if (const std::int64_t seq = integer(event, "seq", 0); seq > 0 && !start) {
        if (r.lastSeq > 0 && seq > r.lastSeq + 1)
            r.missedSeq += seq - r.lastSeq - 1;
        r.lastSeq = std::max(r.lastSeq, seq);
    }
    try {
        if (type == "span")
            onSpan(r, event);
        else if (type == "step")
            onStep(r, event);
        else if (type == "event")
            onEvent(r, event);
        else
            ++ignored_;
    } catch (const nlohmann::json::exception&) { // a field of an unexpected type
        ++ignored_;
    }
}

void RunState::connectionClosed(int rank, double receivedAt) {
    const auto it = ranks_.find(rank);
    if (it == ranks_.end())
        return;
    if (!it->second.endStatus)
        it->second.disconnected = true;
    it->second.lastReceived = receivedAt;
}

void RunState::launcherNotice(const LauncherNotice& notice) {
    if (notice.rank >= 0 && notice.rank <= 1'000'000 && notices_.size() < 1024)
        notices_.try_emplace(notice.rank, notice);
}

void RunState::onStart(RankState& r, const json& e) {
    const long pid = static_cast<long>(integer(e, "pid", 0));
    // The copy of the start event a stream re-sends on reconnection: the segment goes on.
    if (e.value("resent", false) && r.started && pid == r.pid)
        return;
    r.started = true;
    if (++r.segments > newestSegment_) { // a resumed run: its clock starts again
        newestSegment_ = r.segments;
        latestT_ = r.lastT;
    }
    r.host = text(e, "host");
    r.pid = pid;
    r.predictedMemory = memoryOf(e, "memory_predicted");
    if (const auto m = e.find("memory_predicted"); m != e.end() && m->is_object())
        r.stage = smallInt(*m, "stage", r.coord.pp);
    r.spans.clear();
    r.blocked.reset();
    r.endStatus.reset();
    r.disconnected = false;
    r.lastSeq = integer(e, "seq", 0);

    if (info_.known && r.rank != 0)
        return; // rank 0's description of the run wins
    info_.known = true;
    info_.config = e.contains("config") ? e["config"] : json();
    info_.configProblem.clear();
    try {
        const json& c = info_.config;
        info_.model = c.at("model").get<ModelSpec>();
        info_.parallel = c.at("parallel").get<ParallelConfig>();
        info_.train = c.at("train").get<TrainConfig>();
        info_.totalSteps = info_.train.steps;
        if (info_.totalSteps <= 0 && info_.train.trainTokens > 0) {
            const double perStep = double(info_.parallel.globalBatch) * info_.model.seqLen;
            if (perStep > 0)
                info_.totalSteps = std::int64_t(std::ceil(info_.train.trainTokens / perStep));
        }
    } catch (const std::exception& ex) {
        info_.configProblem = ex.what();
    }
    info_.worldSize =
        smallInt(e, "world_size", info_.configProblem.empty() ? info_.parallel.worldSize() : 1);
    info_.peakFlops = number(e, "peak_flops");
    info_.peakSource = text(e, "peak_flops_source");
    if (const auto f = e.find("loss_floor"); f != e.end() && f->is_number())
        info_.lossFloor = f->get<double>();
    info_.data = text(e, "data");
    info_.backend = text(e, "backend");
    info_.wallClock = number(e, "wall_clock");
    info_.prediction = e.contains("prediction") ? e["prediction"] : json();
}

void RunState::onSpan(RankState& r, const json& e) {
    Span s;
    s.kind = spanKindFromString(text(e, "kind"));
    s.step = integer(e, "step");
    s.microbatch = smallInt(e, "mb", -1);
    s.chunk = smallInt(e, "chunk", 0);
    s.start = number(e, "start", NAN);
    s.end = number(e, "end", NAN);
    if (!std::isfinite(s.start) || !std::isfinite(s.end) || s.end < s.start) {
        ++ignored_;
        return;
    }
    if (s.kind == SpanKind::Communication || s.kind == SpanKind::Wait) {
        s.axis = text(e, "axis");
        s.collective = text(e, "collective");
        s.peer = smallInt(e, "peer", -1);
        s.bytes = number(e, "bytes");
    }
    if (r.blocked && s.end > r.blocked->at && !r.blocked->hang)
        r.blocked.reset();
    // Spans of the newest kSpanSteps steps stay; a span of a newer step pushes the oldest out.
    const std::int64_t newest = r.spans.empty() ? s.step : std::max(r.spans.back().step, s.step);
    const std::int64_t keepFrom = newest - std::int64_t(kSpanSteps) + 1;
    if (s.step < keepFrom)
        return;
    r.spans.push_back(std::move(s));
    while (!r.spans.empty() && (r.spans.front().step < keepFrom || r.spans.size() > kMaxSpans))
        r.spans.pop_front();
}

void RunState::onStep(RankState& r, const json& e) {
    StepSample s;
    s.step = integer(e, "step");
    s.t = number(e, "t");
    s.loss = number(e, "loss", NAN);
    s.gradNorm = number(e, "grad_norm", NAN);
    s.learningRate = number(e, "lr");
    s.tokens = number(e, "tokens");
    s.stepTime = number(e, "step_time");
    s.tokensPerSecond = number(e, "tokens_per_s");
    s.flopsPerSecond = number(e, "flops_per_s");
    s.mfu = number(e, "mfu");
    if (const auto v = e.find("val_loss"); v != e.end() && v->is_number())
        s.valLoss = v->get<double>();
    s.memory = memoryOf(e, "memory");
    s.memoryPeak = memoryOf(e, "memory_peak");
    s.dpCommunication = number(e, "dp_communication");
    s.dpExposed = number(e, "dp_exposed_communication");
    s.dpHidden = number(e, "dp_hidden_fraction");

    // A resumed run reports the steps after its checkpoint again: the new ones replace them.
    r.steps.dropBackWhile([&](const StepSample& old) { return old.step >= s.step; });
    while (!r.activity.empty() && r.activity.back().step >= s.step)
        r.activity.pop_back();

    StepActivity a;
    a.step = s.step;
    a.stepTime = s.stepTime;
    std::map<std::string, std::vector<std::pair<double, double>>> busy, exposed;
    a.pipelineStart = std::numeric_limits<double>::infinity();
    a.pipelineEnd = -std::numeric_limits<double>::infinity();
    for (const Span& span : r.spans) {
        if (span.step != s.step)
            continue;
        if (isCompute(span.kind))
            a.compute += span.seconds();
        if (isPipelineOp(span.kind)) {
            a.pipelineStart = std::min(a.pipelineStart, span.start);
            a.pipelineEnd = std::max(a.pipelineEnd, span.end);
        }
        if (span.kind == SpanKind::Communication)
            busy[span.axis].emplace_back(span.start, span.end);
        else if (span.kind == SpanKind::Wait)
            exposed[span.axis].emplace_back(span.start, span.end);
    }
    if (!(a.pipelineEnd > a.pipelineStart))
        a.pipelineStart = a.pipelineEnd = 0;
    for (auto& [axis, intervals] : busy)
        a.busy[axis] = unionSeconds(std::move(intervals));
    for (auto& [axis, intervals] : exposed)
        a.exposed[axis] = unionSeconds(std::move(intervals));
    r.activity.push_back(std::move(a));
    while (r.activity.size() > kActivitySteps)
        r.activity.pop_front();

    if (r.blocked && !r.blocked->hang)
        r.blocked.reset();
    r.steps.push_back(std::move(s));
}

void RunState::onEvent(RankState& r, const json& e) {
    const std::string kind = text(e, "event");
    if (kind == "start") {
        onStart(r, e);
    } else if (kind == "error") {
        if (r.errors.size() < 16) // a flood of errors says nothing the first ones do not
            r.errors.push_back(text(e, "message"));
    } else if (kind == "end") {
        r.endStatus = text(e, "status");
        if (const auto t = e.find("telemetry"); t != e.end() && t->is_object())
            r.droppedEvents = number(*t, "dropped");
        if (!r.blocked || !r.blocked->hang)
            r.blocked.reset();
    } else if (kind == "stall" || kind == "hang") {
        BlockedIn b;
        b.step = integer(e, "step");
        b.microbatch = smallInt(e, "microbatch", -1);
        b.op = text(e, "op");
        b.collective = text(e, "collective");
        b.axis = text(e, "axis");
        b.sequence = static_cast<std::uint64_t>(std::max<std::int64_t>(0, integer(e, "sequence")));
        b.waited = number(e, "waited_s");
        b.at = r.lastT;
        b.hang = kind == "hang";
        r.blocked = b;
    } else if (kind == "rank_lost") {
        // The reporter ends the job over it: its own failure, with the sentence.
        const std::string message = text(e, "message");
        const std::int64_t lost = integer(e, "lost_rank");
        if (r.errors.size() < 16) { // each kept error that is a loss is also kept as one
            r.errors.push_back(message);
            r.lossesFound.emplace_back(int(std::clamp<std::int64_t>(lost, -1, 1'000'000)), r.lastT);
        }
        if (lost >= 0 && lost < 1'000'000 && lost != r.rank && lost_.size() < 1024)
            lost_.try_emplace(int(lost), LostRank{r.rank, message, r.lastT});
    } else if (kind == "hang_summary") {
        HangSummary h;
        h.message = text(e, "message");
        h.reporter = r.rank;
        h.at = r.lastT;
        if (const auto m = e.find("missing"); m != e.end() && m->is_array())
            for (const json& v : *m)
                if (v.is_number_integer() && h.missing.size() < 100'000)
                    h.missing.push_back(v.get<int>());
        hang_ = std::move(h);
    }
}

} // namespace shardscope::watch
