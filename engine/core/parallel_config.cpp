#include "parallel_config.h"

#include "error.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <utility>

namespace shardscope {

namespace {

double bytesOf(Precision p) {
    switch (p) {
    case Precision::Fp32:
    case Precision::Tf32:
        return 4;
    case Precision::Bf16:
    case Precision::Fp16:
        return 2;
    case Precision::Fp8:
        return 1;
    }
    return 4;
}

// Lower-case, with '_' read as '-', so "Zero_Bubble" and "zero-bubble" are the same spelling.
std::string canonicalSpelling(const std::string& s) {
    std::string out = s;
    for (char& c : out)
        c = c == '_' ? '-' : char(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

template <typename Enum, std::size_t N>
Enum fromString(const std::string& s, const Enum (&values)[N], const char* what) {
    const std::string wanted = canonicalSpelling(s);
    std::string known;
    for (Enum v : values) {
        if (wanted == toString(v))
            return v;
        known += (known.empty() ? "" : ", ") + toString(v);
    }
    throw InputError("unknown " + std::string(what) + " '" + s + "'; expected one of " + known);
}

} // namespace

// Weights are held in the compute dtype, except FP8: its weights stay BF16 and the FP8 copies
// are a transient cast buffer the planner accounts for separately, unless the policy keeps the
// weights themselves in FP8.
double PrecisionPolicy::weightBytes() const {
    if (compute == Precision::Fp8)
        return fp8Params ? 1 : 2;
    return autocastsWeights() ? 4 : bytesOf(compute);
}
double PrecisionPolicy::weightBytesOn(const GpuSpec& gpu) const {
    if (compute == Precision::Fp8)
        return fp8WeightsOn(gpu) ? 1 : 2;
    return weightBytes();
}
double PrecisionPolicy::gradBytes() const {
    return autocastsWeights() ? 4 : bytesOf(grads);
}
double PrecisionPolicy::gradReduceBytes() const {
    return bytesOf(grads);
}
double PrecisionPolicy::masterBytes() const {
    return fp32Master && !autocastsWeights() ? 4 : 0; // fp32 weights are their own master
}
// FP8 recipes keep activations for the backward pass in BF16.
double PrecisionPolicy::activationBytes() const {
    return compute == Precision::Fp8 ? 2 : bytesOf(compute);
}

std::string PrecisionPolicy::name() const {
    if (compute == Precision::Fp32 && grads == Precision::Fp32 && !fp32Master)
        return "fp32";
    if (autocastsWeights()) // the fp32 weights are the master: no master copy to speak of
        return std::string("bf16 autocast (fp32 weights and grads") +
               (grads != Precision::Fp32 ? ", " + toString(grads) + " reduce" : "") + ")";
    std::string s = toString(compute) + " mixed (" +
                    (fp8Params && compute == Precision::Fp8 ? "fp8 weights, " : "") +
                    toString(grads) + " grads";
    if (!fp32Master)
        s += ", no fp32 master";
    return s + ")";
}

const std::vector<NamedPrecisionPolicy>& namedPrecisionPolicies() {
    static const std::vector<NamedPrecisionPolicy> all = {
        {"fp32", "fp32", PrecisionPolicy::fp32()},
        {"bf16", "bf16, fp32 grads, fp32 master", PrecisionPolicy::bf16Mixed(true)},
        {"bf16-bf16grads", "bf16, bf16 grads, fp32 master", PrecisionPolicy::bf16Mixed(false)},
        {"bf16-fp32grads-nomaster",
         "bf16, fp32 grads, no master",
         {Precision::Bf16, Precision::Fp32, false}},
        {"bf16-nomaster", "bf16, bf16 grads, no master", {Precision::Bf16, Precision::Bf16, false}},
        {"amp", "bf16 autocast, fp32 weights and grads", PrecisionPolicy::autocast(true)},
        {"amp-bf16grads", "bf16 autocast, fp32 weights and grads, bf16 reduce",
         PrecisionPolicy::autocast(false)},
        {"fp8", "fp8 compute, fp32 grads, fp32 master", PrecisionPolicy::fp8Mixed()},
        {"fp8-bf16grads",
         "fp8 compute, bf16 grads, fp32 master",
         {Precision::Fp8, Precision::Bf16, true}},
        {"fp8-params", "fp8 compute and weights, fp32 grads, fp32 master",
         PrecisionPolicy::fp8Weights()},
        {"fp8-params-bf16grads",
         "fp8 compute and weights, bf16 grads, fp32 master",
         {Precision::Fp8, Precision::Bf16, true, true}},
    };
    return all;
}

std::string precisionPolicyNames() {
    std::string names;
    for (const NamedPrecisionPolicy& p : namedPrecisionPolicies())
        names += (names.empty() ? "" : ", ") + std::string(p.key);
    return names;
}

PrecisionPolicy precisionPolicyFromString(const std::string& s) {
    const std::string wanted = canonicalSpelling(s);
    for (const NamedPrecisionPolicy& p : namedPrecisionPolicies())
        if (wanted == p.key)
            return p.policy;
    throw InputError("unknown precision '" + s + "'; expected one of " + precisionPolicyNames());
}

std::string toString(PipelineSchedule s) {
    switch (s) {
    case PipelineSchedule::Naive:
        return "naive";
    case PipelineSchedule::GPipe:
        return "gpipe";
    case PipelineSchedule::OneFOneB:
        return "1f1b";
    case PipelineSchedule::Interleaved:
        return "interleaved";
    case PipelineSchedule::ZeroBubble:
        return "zero-bubble";
    case PipelineSchedule::ZeroBubble1p:
        return "zb-1p";
    case PipelineSchedule::ZeroBubble2p:
        return "zb-2p";
    }
    return "?";
}

std::string toString(Recompute r) {
    switch (r) {
    case Recompute::None:
        return "none";
    case Recompute::Selective:
        return "selective";
    case Recompute::Full:
        return "full";
    case Recompute::SelectiveOp:
        return "selective-op";
    }
    return "?";
}

std::string toString(Optimizer o) {
    return o == Optimizer::AdamW ? "adamw" : "sgd";
}

std::string toString(AttentionKernel k) {
    switch (k) {
    case AttentionKernel::Auto:
        return "auto";
    case AttentionKernel::Flash1:
        return "flash1";
    case AttentionKernel::Flash2:
        return "flash2";
    case AttentionKernel::Flash3:
        return "flash3";
    case AttentionKernel::Cudnn:
        return "cudnn";
    }
    return "?";
}

PipelineSchedule scheduleFromString(const std::string& s) {
    static constexpr PipelineSchedule all[] = {
        PipelineSchedule::Naive,       PipelineSchedule::GPipe,      PipelineSchedule::OneFOneB,
        PipelineSchedule::Interleaved, PipelineSchedule::ZeroBubble, PipelineSchedule::ZeroBubble1p,
        PipelineSchedule::ZeroBubble2p};
    return fromString(s, all, "pipeline schedule");
}

Recompute recomputeFromString(const std::string& s) {
    static constexpr Recompute all[] = {Recompute::None, Recompute::Selective,
                                        Recompute::SelectiveOp, Recompute::Full};
    return fromString(s, all, "recompute policy");
}

Optimizer optimizerFromString(const std::string& s) {
    static constexpr Optimizer all[] = {Optimizer::AdamW, Optimizer::SgdMomentum};
    return fromString(s, all, "optimizer");
}

AttentionKernel attentionKernelFromString(const std::string& s) {
    static constexpr AttentionKernel all[] = {AttentionKernel::Auto, AttentionKernel::Flash1,
                                              AttentionKernel::Flash2, AttentionKernel::Flash3,
                                              AttentionKernel::Cudnn};
    return fromString(s, all, "attention kernel");
}

std::string toString(BackwardPrefetch b) {
    switch (b) {
    case BackwardPrefetch::Pre:
        return "pre";
    case BackwardPrefetch::Post:
        return "post";
    case BackwardPrefetch::None:
        return "none";
    }
    return "?";
}

BackwardPrefetch backwardPrefetchFromString(const std::string& s) {
    static constexpr BackwardPrefetch all[] = {BackwardPrefetch::Pre, BackwardPrefetch::Post,
                                               BackwardPrefetch::None};
    return fromString(s, all, "backward prefetch");
}

// ---------------------------------------------------------------------------------------------
// Validation

namespace {

using std::to_string;

// 1.25, 16: a factor as a user would type it.
std::string decimal(double v) {
    std::ostringstream s;
    s << v;
    return s.str();
}

// Products of degrees, saturated: validate promises not to fail on any values, however absurd.
std::int64_t product(std::initializer_list<std::int64_t> factors) {
    constexpr std::int64_t cap = std::int64_t(1) << 62;
    std::int64_t p = 1;
    for (std::int64_t f : factors) {
        if (f > 0 && p > cap / f)
            return cap;
        p *= f;
    }
    return p;
}

// Divisors of n, ascending, for hints. Beyond 1e12 (no real model size) only 1 and n, so that
// the O(sqrt n) search stays quick whatever it is given.
std::vector<std::int64_t> divisors(std::int64_t n) {
    if (n > 1'000'000'000'000)
        return {1, n};
    std::vector<std::int64_t> low, high;
    for (std::int64_t d = 1; d * d <= n; ++d) {
        if (n % d != 0)
            continue;
        low.push_back(d);
        if (d != n / d)
            high.push_back(n / d);
    }
    low.insert(low.end(), high.rbegin(), high.rend());
    return low;
}

// "1, 2, 4, 5, 8, ..." for hints such as "divisors of 40 heads".
std::string divisorList(std::int64_t n, std::size_t maxShown = 12) {
    std::string out;
    const std::vector<std::int64_t> all = divisors(n);
    for (std::size_t i = 0; i < all.size() && i < maxShown; ++i)
        out += (i ? ", " : "") + to_string(all[i]);
    return all.size() > maxShown ? out + ", ..." : out;
}

// The largest divisor of n that is <= limit (at least 1): the nearest valid degree below a bad one.
std::int64_t largestDivisorUpTo(std::int64_t n, std::int64_t limit) {
    std::int64_t best = 1;
    for (std::int64_t d : divisors(n)) {
        if (d <= limit)
            best = d;
    }
    return best;
}

class Checker {
public:
    Checker(const ModelSpec& model, const ParallelConfig& config) : m_(model), c_(config) {}

    std::vector<Violation> run(const ClusterSpec* cluster) {
        const bool degreesOk = degrees();
        if (cluster) {
            worldSize(*cluster, degreesOk);
            if (cluster->gpusPerNode >= 1 && cluster->nodes >= 1)
                world_ = std::int64_t(cluster->gpusPerNode) * cluster->nodes;
        }
        if (!degreesOk)
            return std::move(out_); // every remaining rule divides by a degree
        batch();
        pipelineSchedule();
        if (m_.isBare()) {
            bareModel();
        } else {
            architecture();
            experts();
        }
        flags();
        return std::move(out_);
    }

private:
    void add(std::string rule, std::string message, std::string hint) {
        out_.push_back({std::move(rule), std::move(message), std::move(hint)});
    }

    // Whether tp*pp*cp divides the cluster's GPUs (dp then takes the rest), or there is no
    // cluster to fit: a hint that changes one degree must keep the layout on the cluster.
    bool fitsWorld(std::int64_t tp, std::int64_t pp, std::int64_t cp) const {
        return world_ <= 0 || world_ % product({tp, pp, cp}) == 0;
    }
    // The largest divisor of n, at most limit, that keeps the layout on the cluster when it
    // replaces one degree (fits(d)); 1 always does.
    template <typename Fits>
    static std::int64_t largestFittingDivisor(std::int64_t n, std::int64_t limit, Fits fits) {
        std::int64_t best = 1;
        for (std::int64_t d : divisors(n))
            if (d <= limit && fits(d))
                best = d;
        return best;
    }
    std::int64_t tpHint(std::int64_t n, std::int64_t limit) const {
        return largestFittingDivisor(n, limit,
                                     [&](std::int64_t tp) { return fitsWorld(tp, c_.pp, c_.cp); });
    }

    bool degrees() {
        bool ok = true;
        const std::pair<const char*, int> all[] = {{"dp", c_.dp},   {"tp", c_.tp}, {"pp", c_.pp},
                                                   {"vpp", c_.vpp}, {"cp", c_.cp}, {"ep", c_.ep}};
        for (const auto& [name, value] : all) {
            if (value >= 1)
                continue;
            ok = false;
            add("degree",
                std::string(name) + " is " + to_string(value) + "; every degree must be >= 1",
                std::string("set ") + name + " = 1 to leave that dimension unsplit");
        }
        if (ok && product({c_.dp, c_.tp, c_.pp, c_.cp}) > kMaxWorldSize) {
            ok = false;
            add("world-size",
                "dp*tp*pp*cp = " + to_string(product({c_.dp, c_.tp, c_.pp, c_.cp})) +
                    " GPUs, more than the " + to_string(kMaxWorldSize) + " a layout may span",
                "lower the degrees: their product is the number of GPUs the layout needs");
        }
        if (c_.etp < 0) {
            ok = false;
            add("degree", "etp is " + to_string(c_.etp) + "; it must be >= 1, or 0 to follow tp",
                "set etp = 0 to split the experts as tp splits the dense weights");
        }
        if (c_.zero < 0 || c_.zero > 3)
            add("zero-stage", "ZeRO stage is " + to_string(c_.zero) + "; stages are 0, 1, 2 and 3",
                "use zero = 1 (optimizer state), 2 (+ gradients) or 3 (+ weights), or 0 for none");
        if (c_.microBatch < 1 || c_.globalBatch < 1) {
            ok = false;
            add("batch-size",
                "micro batch " + to_string(c_.microBatch) + " and global batch " +
                    to_string(c_.globalBatch) + " must both be >= 1",
                "set micro_batch = 1 and global_batch to the sequences per optimizer step");
        }
        return ok;
    }

    void worldSize(const ClusterSpec& cluster, bool degreesOk) {
        const std::int64_t world = std::int64_t(cluster.gpusPerNode) * cluster.nodes;
        if (cluster.gpusPerNode < 1 || cluster.nodes < 1) {
            add("cluster-size",
                "the cluster has " + to_string(cluster.nodes) + " nodes of " +
                    to_string(cluster.gpusPerNode) + " GPUs",
                "give at least one node with at least one GPU");
            return;
        }
        if (!degreesOk)
            return;
        const std::int64_t model = product({c_.tp, c_.pp, c_.cp});
        const std::int64_t used = product({model, c_.dp});
        if (used == world)
            return;
        std::string hint;
        if (world % model == 0)
            hint = "set dp = " + to_string(world / model) + " (" + to_string(world) +
                   " / tp*pp*cp " + to_string(model) + ")";
        else
            hint = "tp*pp*cp = " + to_string(model) + " does not divide " + to_string(world) +
                   " GPUs; pick tp, pp and cp whose product divides it, or use " + to_string(used) +
                   " GPUs";
        add("world-size",
            "dp*tp*pp*cp = " + to_string(c_.dp) + "*" + to_string(c_.tp) + "*" + to_string(c_.pp) +
                "*" + to_string(c_.cp) + " = " + to_string(used) + " but the cluster has " +
                to_string(world) + " GPUs",
            hint);
    }

    void batch() {
        const std::int64_t perStep = std::int64_t(c_.microBatch) * c_.dp;
        const std::int64_t global = c_.globalBatch;
        if (global >= perStep && global % perStep == 0)
            return;
        const std::int64_t down = global / perStep * perStep;
        const std::int64_t up = down + perStep;
        std::string hint =
            "set global_batch to a multiple of micro_batch*dp = " + to_string(perStep) + ", e.g. " +
            (down > 0 ? to_string(down) + " or " : "") + to_string(up);
        if (global >= c_.dp && global % c_.dp == 0)
            hint += ", or micro_batch = " +
                    to_string(largestDivisorUpTo(global / c_.dp, c_.microBatch));
        add("global-batch",
            "global batch " + to_string(global) +
                " is not a positive multiple of micro_batch*dp = " + to_string(c_.microBatch) +
                "*" + to_string(c_.dp) + " = " + to_string(perStep),
            hint);
    }

    void pipelineSchedule() {
        const bool interleaved = c_.schedule == PipelineSchedule::Interleaved;
        if (c_.vpp > 1 && !interleaved)
            add("vpp-schedule",
                "vpp = " + to_string(c_.vpp) +
                    " virtual stages need the interleaved schedule, not " + toString(c_.schedule),
                "set schedule = interleaved, or vpp = 1");
        if (!interleaved)
            return;
        if (c_.vpp < 2)
            add("interleaved-vpp",
                "the interleaved schedule needs vpp >= 2 model chunks per rank; vpp is " +
                    to_string(c_.vpp),
                "set vpp = 2 (or more), or use schedule = 1f1b");
        if (c_.pp < 2) {
            add("interleaved-pp",
                "the interleaved schedule needs a pipeline (pp >= 2); pp is " + to_string(c_.pp),
                "set pp >= 2, or use schedule = 1f1b");
            return;
        }
        const std::int64_t microbatches = c_.globalBatch / (std::int64_t(c_.microBatch) * c_.dp);
        if (microbatches > 0 && microbatches % c_.pp != 0) {
            const std::int64_t next = (microbatches / c_.pp + 1) * c_.pp;
            add("interleaved-microbatches",
                "the interleaved schedule needs the microbatch count (" + to_string(microbatches) +
                    " = global_batch / (micro_batch*dp)) to be a multiple of pp = " +
                    to_string(c_.pp),
                "set global_batch = " + to_string(product({next, c_.microBatch, c_.dp})) + " (" +
                    to_string(next) + " microbatches)");
        }
    }

    void bareModel() {
        if (c_.tp == 1 && c_.pp == 1 && c_.cp == 1 && c_.ep == 1 && c_.expertTp() == 1)
            return;
        add("bare-model",
            "the model is given only as a parameter count, which cannot be split by tp = " +
                to_string(c_.tp) + ", pp = " + to_string(c_.pp) + ", cp = " + to_string(c_.cp) +
                (c_.ep > 1 ? ", ep = " + to_string(c_.ep) : std::string()) +
                (c_.expertTp() > 1 ? ", etp = " + to_string(c_.expertTp()) : std::string()),
            "give the architecture (a model preset or --hf-config), or use tp = pp = cp = ep = 1 "
            "and etp = 0");
    }

    // Expert parallelism (Megatron-Core's rules, MoE parallel folding): each stage's
    // tp x cp x dp ranks hold the experts as etp x ep x expert-dp; the routed experts split
    // evenly over ep; an EP or ETP group that differs from TP's needs sequence parallelism.
    void experts() {
        if (c_.expertCapacityFactor != 0 && !m_.moe.enabled())
            add("capacity-moe",
                "an expert capacity factor of " + decimal(c_.expertCapacityFactor) +
                    " sizes the experts' inputs, but the model has no experts",
                "set expert_capacity_factor = 0 (--capacity-factor 0) for a dense model");
        const double most = m_.moe.enabled() ? double(m_.moe.experts) / m_.moe.topK : 0.0;
        if (m_.moe.enabled() && !(c_.expertCapacityFactor >= 0 && c_.expertCapacityFactor <= most))
            add("capacity-factor",
                "an expert capacity factor of " + decimal(c_.expertCapacityFactor) +
                    " is outside 0 (dropless) to experts / top-k = " + decimal(most) +
                    " (every token to every expert)",
                "use 0 for dropless, or a factor such as 1.0 or 1.25");
        // Megatron-Core refuses an MoE layer under tp without sequence parallelism, whatever the
        // experts' own layout (MoELayer's check).
        if (m_.moe.enabled() && c_.tp > 1 && !c_.sequenceParallel)
            add("ep-sp",
                "a mixture of experts with tp = " + to_string(c_.tp) +
                    " needs sequence parallelism (Megatron-Core refuses it without)",
                "turn sequence_parallel on, or use tp = 1");
        const int etp = c_.expertTp();
        if (c_.ep == 1 && etp == c_.tp)
            return;
        if (!m_.moe.enabled()) {
            if (c_.ep > 1)
                add("ep-moe",
                    "ep = " + to_string(c_.ep) +
                        " splits a mixture-of-experts layer's experts, but the model has none",
                    "use ep = 1 for a dense model");
            else
                add("etp-moe",
                    "etp = " + to_string(etp) +
                        " splits a mixture-of-experts layer's experts, but the model has none",
                    "use etp = 0 (it then follows tp) for a dense model");
            return;
        }
        const std::int64_t ranks = product({c_.tp, c_.dp, c_.cp});
        const auto fits = [&](std::int64_t ep) {
            return m_.moe.experts % ep == 0 && ranks % (ep * etp) == 0;
        };
        const std::string hint =
            ranks % etp != 0
                ? "use etp = 1, or 0 to follow tp (etp x ep must divide tp*dp*cp = " +
                      to_string(ranks) + ")"
                : "use ep = " + to_string(largestFittingDivisor(m_.moe.experts, c_.ep, fits)) +
                      " (it must divide " + to_string(m_.moe.experts) +
                      " experts, and etp x ep must divide tp*dp*cp = " + to_string(ranks) + ")";
        if (m_.moe.experts % c_.ep != 0)
            add("ep-experts",
                "ep = " + to_string(c_.ep) + " does not divide " + to_string(m_.moe.experts) +
                    " routed experts",
                hint);
        if (ranks % (std::int64_t(c_.ep) * etp) != 0)
            add("ep-dp",
                "the experts are laid out on the tp*dp*cp = " + to_string(ranks) +
                    " ranks of a stage as etp x ep x expert copies, and etp x ep = " +
                    to_string(etp) + " x " + to_string(c_.ep) + " does not divide them",
                hint + ", or raise dp");
        if (m_.expertFfn() % etp != 0)
            add("etp-ffn",
                "etp = " + to_string(etp) + " does not divide the experts' FFN width of " +
                    to_string(m_.expertFfn()),
                "use an etp that divides " + to_string(m_.expertFfn()) + ", such as 1");
        if (c_.shardGroup > 0)
            add("ep-shard-group",
                "a ZeRO shard group with the experts on a mesh of their own (ep or etp) is not "
                "modelled (their states would shard over a sub-group of the expert data-parallel "
                "ranks)",
                "use shard_group = 0, or ep = 1 with etp following tp");
    }

    void architecture() {
        const int tp = c_.tp;
        if (m_.heads > 0 && m_.heads % tp != 0)
            add("tp-heads",
                "tp = " + to_string(tp) + " does not divide " + to_string(m_.heads) +
                    " attention heads",
                "use tp = " + to_string(tpHint(m_.heads, tp)) + " (divisors of " +
                    to_string(m_.heads) + ": " + divisorList(m_.heads) + ")");
        // A tp that is a multiple of the KV heads is fine too: each KV head is replicated.
        const int kv = m_.kvHeads > 0 ? m_.kvHeads : m_.heads;
        if (kv > 0 && kv % tp != 0 && tp % kv != 0)
            add("tp-kv-heads",
                "tp = " + to_string(tp) + " neither divides nor is a multiple of " + to_string(kv) +
                    " KV heads",
                "use tp = " + to_string(tpHint(kv, tp)) + " or a multiple of " + to_string(kv));
        if (m_.ffnHidden > 0 && m_.ffnHidden % tp != 0)
            add("tp-ffn",
                "tp = " + to_string(tp) + " does not divide the FFN width " +
                    to_string(m_.ffnHidden),
                "use tp = " + to_string(tpHint(m_.ffnHidden, tp)));
        // Routed experts split over etp where it is set apart (etp-ffn); shared experts over tp.
        const bool tpSplitsExperts = c_.expertTp() == tp || m_.moe.sharedExperts > 0;
        if (m_.moe.enabled() && tpSplitsExperts && m_.expertFfn() != m_.ffnHidden &&
            m_.expertFfn() % tp != 0)
            add("tp-expert-ffn",
                "tp = " + to_string(tp) + " does not divide the expert FFN width " +
                    to_string(m_.expertFfn()),
                "use tp = " + to_string(tpHint(m_.expertFfn(), tp)));

        const std::int64_t stages = std::int64_t(c_.pp) * c_.vpp;
        const int slots = c_.pipelineSlots(m_.layers);
        if (m_.layers > 0 && stages > slots)
            add("pp-layers",
                "pp*vpp = " + to_string(c_.pp) + "*" + to_string(c_.vpp) + " = " +
                    to_string(stages) + " model chunks but the model has only " +
                    to_string(m_.layers) + " layers" +
                    (slots > m_.layers ? " (" + to_string(slots) + " with the " +
                                             (c_.embeddingInPipelineSplit && c_.lossInPipelineSplit
                                                  ? "embedding and loss"
                                              : c_.embeddingInPipelineSplit ? "embedding"
                                                                            : "loss") +
                                             ")"
                                       : std::string()),
                "use pp*vpp <= " + to_string(slots) + ", e.g. pp = " + to_string(ppHint()));

        // Load-balanced causal attention splits the sequence into 2*cp chunks, two per rank.
        const std::int64_t chunks = 2 * std::int64_t(c_.cp);
        if (c_.cp > 1 && m_.seqLen > 0 && m_.seqLen % chunks != 0)
            add("cp-seq",
                "context parallelism splits the sequence into 2*cp = " + to_string(chunks) +
                    " chunks, which does not divide seq_len " + to_string(m_.seqLen),
                m_.seqLen % 2 != 0
                    ? "seq_len is odd, so only cp = 1 works; use an even seq_len for cp > 1"
                    : "use cp = " +
                          to_string(largestFittingDivisor(
                              m_.seqLen / 2, c_.cp,
                              [&](std::int64_t cp) { return fitsWorld(c_.tp, c_.pp, cp); })) +
                          " (2*cp must divide seq_len)");
    }

    // The most pipeline ranks the layers allow at this vpp that keep the layout on the cluster
    // (a divisor of GPUs / (tp cp), when there is a cluster).
    std::int64_t ppHint() const {
        const std::int64_t most = std::max<std::int64_t>(1, c_.pipelineSlots(m_.layers) / c_.vpp);
        if (world_ <= 0)
            return most;
        const std::int64_t rest = product({c_.tp, c_.cp});
        return world_ % rest == 0 ? largestDivisorUpTo(world_ / rest, most) : 1;
    }

    void flags() {
        if (c_.sequenceParallel && c_.tp == 1)
            add("sp-tp", "sequence parallelism splits activations across the TP group, but tp = 1",
                "turn sequence_parallel off, or use tp > 1");
        if (c_.offloadOptimizer && c_.zero < 1)
            add("offload-zero",
                "optimizer offload moves ZeRO-partitioned state, but zero is " + to_string(c_.zero),
                "set zero = 1 (or higher), or turn offload_optimizer off");
        // Transformer Engine splits each TP GEMM against the chunks of its sequence-parallel
        // all-gather and reduce-scatter; Megatron-LM refuses tp-comm-overlap without SP.
        if (c_.tpCommOverlap && c_.tp > 1 && !c_.sequenceParallel)
            add("tp-comm-overlap",
                "TP communication overlap pipelines the sequence-parallel all-gathers and "
                "reduce-scatters with the GEMMs, but sequence parallelism is off",
                "turn sequence_parallel on, or tp_comm_overlap off");
        // Megatron-Core's checks for its EP all-to-all overlap (TransformerConfig).
        if (c_.epCommOverlap) {
            if (c_.ep <= 1)
                add("ep-overlap",
                    "EP communication overlap hides the experts' all-to-alls, but ep = " +
                        to_string(c_.ep) + " has none",
                    "set ep > 1, or ep_comm_overlap off");
            if (c_.recompute == Recompute::Full)
                add("ep-overlap",
                    "EP communication overlap does not run under full recompute (Megatron-Core "
                    "refuses it)",
                    "use selective or no recompute, or ep_comm_overlap off");
            if (c_.pp > 1 && c_.vpp <= 1)
                add("ep-overlap",
                    "EP communication overlap with pp = " + to_string(c_.pp) +
                        " needs virtual pipeline stages (Megatron-Core's combined 1F1B pairs two "
                        "chunks' microbatches)",
                    "set vpp > 1 with the interleaved schedule, or ep_comm_overlap off");
        }
        // torchtitan's op-level policy is counted for dense layers whose projections it sees
        // one by one; routed experts run grouped GEMMs and MLA's projections differ.
        if (c_.recompute == Recompute::SelectiveOp &&
            (m_.isBare() || m_.moe.enabled() || m_.mla.enabled()))
            add("recompute-op",
                std::string("op-level selective recompute (torchtitan's) is modelled for dense "
                            "Llama- and GPT-style layers, but this model ") +
                    (m_.isBare()        ? "is a bare parameter count"
                     : m_.moe.enabled() ? "routes tokens to experts"
                                        : "uses multi-head latent attention"),
                "use recompute none, selective or full");
        recomputeLayers();
        shardGroup();
    }

    // Full recompute of some layers of each virtual stage (Megatron-LM's block method).
    void recomputeLayers() {
        const int n = c_.recomputeLayers;
        if (n == 0)
            return;
        if (n < 0) {
            add("recompute-layers", "recompute_layers is " + to_string(n),
                "use 0 to recompute every layer, or the layers of each virtual stage to recompute");
            return;
        }
        if (c_.recompute != Recompute::Full) {
            add("recompute-layers",
                "recompute_layers " + to_string(n) +
                    " picks the layers full recompute reruns, but recompute is " +
                    toString(c_.recompute),
                "set recompute full, or recompute_layers 0");
            return;
        }
        if (m_.isBare()) {
            add("recompute-layers",
                "recompute_layers " + to_string(n) +
                    " picks layers, but this model is a bare parameter count",
                "describe the model's layers, or set recompute_layers 0");
            return;
        }
        const int most = c_.mostSlotsOnChunk(m_.layers);
        if (most == 0)
            return; // pp-layers says so
        if (n > most)
            add("recompute-layers",
                "recompute_layers " + to_string(n) + " is more than the " + to_string(most) +
                    " layers a virtual pipeline stage holds",
                "use recompute_layers <= " + to_string(most) + ", or 0 to recompute every layer");
    }

    // Hybrid sharding: groups of shard_group of the dp x cp ranks, each a whole copy.
    void shardGroup() {
        if (c_.shardGroup == 0)
            return;
        const std::int64_t ranks = product({c_.dp, c_.cp});
        if (c_.shardGroup < 0) {
            add("shard-group", "shard group is " + to_string(c_.shardGroup),
                "use shard_group = 0 to shard over all dp*cp ranks, or a divisor of dp*cp");
            return;
        }
        if (c_.zero < 1)
            add("shard-group-zero",
                "a shard group of " + to_string(c_.shardGroup) +
                    " splits ZeRO's states, but zero is 0 (nothing is sharded)",
                "set zero = 1, 2 or 3 (3 with a shard group is FSDP's hybrid shard), or "
                "shard_group = 0");
        if (ranks % c_.shardGroup != 0)
            add("shard-group",
                "a shard group of " + to_string(c_.shardGroup) +
                    " does not divide dp*cp = " + to_string(ranks) + " ranks into whole copies",
                "use shard_group = " + to_string(largestDivisorUpTo(ranks, c_.shardGroup)) +
                    " (a divisor of dp*cp), or 0 to shard over all of them");
    }

    const ModelSpec& m_;
    const ParallelConfig& c_;
    std::int64_t world_ = 0; // the cluster's GPUs; 0 when validating without a cluster
    std::vector<Violation> out_;
};

} // namespace

std::vector<Violation> validate(const ModelSpec& model, const ClusterSpec& cluster,
                                const ParallelConfig& config) {
    try {
        return Checker(model, config).run(&cluster);
    } catch (const std::exception& e) { // only allocation can fail here; keep the promise anyway
        return {{"internal", e.what(), "report this as a bug"}};
    }
}

std::vector<Violation> validate(const ModelSpec& model, const ParallelConfig& config) {
    try {
        return Checker(model, config).run(nullptr);
    } catch (const std::exception& e) {
        return {{"internal", e.what(), "report this as a bug"}};
    }
}

int layersOnChunk(int layers, const ParallelConfig& p, int chunk) {
    const int chunks = std::max(1, p.pp) * std::max(1, p.vpp);
    const int slots = p.pipelineSlots(layers);
    int held = slots / chunks + (chunk < slots % chunks ? 1 : 0);
    if (chunk == 0 && p.embeddingInPipelineSplit)
        --held;
    if (chunk == chunks - 1 && p.lossInPipelineSplit)
        --held;
    return std::max(0, held);
}

int recomputedLayersOnChunk(int layers, const ParallelConfig& p, int chunk) {
    if (p.recompute != Recompute::Full)
        return 0;
    const int held = layersOnChunk(layers, p, chunk);
    return p.recomputeLayers > 0 ? std::min(held, p.recomputeLayers) : held;
}

std::string layoutSummary(const ParallelConfig& p) {
    std::ostringstream s;
    s << "dp" << p.dp << " tp" << p.tp << " pp" << p.pp;
    if (p.vpp > 1)
        s << "x" << p.vpp;
    s << " cp" << p.cp;
    if (p.ep > 1)
        s << " ep" << p.ep;
    if (p.expertTp() != p.tp)
        s << " etp" << p.expertTp();
    if (p.expertCapacityFactor > 0)
        s << " capacity" << decimal(p.expertCapacityFactor);
    s << " zero" << p.zero;
    if (p.hybridShard())
        s << " shard" << p.zeroShards();
    s << (p.sequenceParallel ? " sp" : "") << " mb" << p.microBatch << " " << toString(p.schedule)
      << " recompute-" << toString(p.recompute);
    if (p.recompute == Recompute::Full && p.recomputeLayers > 0)
        s << p.recomputeLayers;
    if (!p.overlapGradReduce && p.gradReduceMatters())
        s << " no-grad-overlap";
    if (!p.overlapParamGather && p.paramGatherMatters())
        s << " no-gather-overlap";
    else if (p.backwardGathersWait() && p.backwardPrefetchMatters())
        s << " backward-prefetch-" << toString(p.backwardPrefetch);
    if (p.tpCommOverlap && p.tpOverlapMatters())
        s << " tp-overlap";
    if (p.epCommOverlap)
        s << " ep-overlap";
    if (!p.fusedElementwise)
        s << " eager";
    if (!p.flashAttention)
        s << " unfused-attention";
    else if (p.attentionKernel != AttentionKernel::Auto)
        s << " attention-" << toString(p.attentionKernel);
    if (p.pp > 1 && p.embeddingInPipelineSplit)
        s << " pp-embedding";
    if (p.pp > 1 && p.lossInPipelineSplit)
        s << " pp-loss";
    return s.str();
}

} // namespace shardscope
