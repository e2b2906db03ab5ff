#include "layer_comm.h"

#include "formulas.h"
#include "layout.h"

#include <algorithm>

namespace shardscope {

double tpMessageBytes(const PlanInputs& in) {
    const ParallelConfig& p = in.parallel;
    return localTokens(in.model, p) * in.model.hidden * p.precision.activationBytes();
}

double cpHopBytes(const PlanInputs& in) {
    const ParallelConfig& p = in.parallel;
    const ModelSpec& m = in.model;
    const double t = std::max(1, p.tp);
    // K and V heads split over tp ranks; with fewer KV heads than ranks each rank keeps one.
    // MLA's keys and values are up-projected for every head before the ring passes them.
    const double kvPerRank = (m.mla.enabled() ? double(m.keyDim() + m.storedValueDim())
                                              : 2.0 * kvDimOverTpGroup(m, p.tp)) /
                             t;
    return localTokens(m, p) * kvPerRank * p.precision.activationBytes();
}

double epMessageBytes(const PlanInputs& in) {
    const ParallelConfig& p = in.parallel;
    const ModelSpec& m = in.model;
    if (!m.moe.enabled())
        return 0.0;
    const double sp = p.sequenceParallel ? std::max(1, p.tp) : 1.0;
    return localTokens(m, p) / sp * m.moe.topK * p.expertLoad() * m.hidden *
           p.precision.activationBytes();
}

ExpertTpTraffic expertTpTraffic(const PlanInputs& in) {
    const ParallelConfig& p = in.parallel;
    ExpertTpTraffic x;
    if (!in.model.moe.enabled() || in.model.isBare() || p.expertTp() <= 1)
        return x;
    x.group = p.expertTp();
    // Each rank's tokens are its own under SP, or where the attention is not split (tp 1).
    x.gather = p.sequenceParallel || p.tp <= 1;
    const double distinct = p.sequenceParallel ? std::max(1, p.tp) : 1.0;
    if (!x.gather)
        x.bytes = p.ep > 1 ? epMessageBytes(in) : tpMessageBytes(in);
    else if (p.ep > 1)
        x.bytes = epMessageBytes(in) * x.group;
    else
        x.bytes = tpMessageBytes(in) / distinct * x.group;
    return x;
}

namespace {

LayerOp compute(const std::string& name, bool backward = false) {
    LayerOp op;
    op.name = name;
    op.backward = backward;
    return op;
}

} // namespace

std::vector<LayerOp> layerOps(const PlanInputs& in) {
    const ParallelConfig& p = in.parallel;
    if (in.model.isBare())
        return {};
    const bool tp = p.tp > 1, sp = tp && p.sequenceParallel, cp = p.cp > 1;
    const bool ep = p.ep > 1 && in.model.moe.enabled();
    const double S = tpMessageBytes(in);
    // All-gather and reduce-scatter each send (tp-1)/tp of S; an all-reduce is the two.
    const double half = ringAllGatherBytesPerRank(S, p.tp);
    const double whole = ringAllReduceBytesPerRank(S, p.tp);
    const auto tpCollective = [&](const std::string& kind, const std::string& why, bool backward,
                                  bool recompute = false) {
        LayerOp op;
        op.name = kind + (sp ? " (SP)" : " (TP)");
        op.backward = backward;
        op.recompute = recompute;
        op.collective = true;
        op.axis = Axis::TP;
        op.collectiveKind = kind;
        op.bytes = S;
        op.sentPerRank = kind == "all-reduce" ? whole : half;
        op.why = why;
        return op;
    };
    // The routed experts' own tensor-parallel group (etp), where it has collectives.
    const ExpertTpTraffic xt = expertTpTraffic(in);
    const auto expertCollective = [&](const std::string& kind, const std::string& why,
                                      bool backward, bool recompute = false) {
        LayerOp op;
        op.name = kind + " (ETP)";
        op.backward = backward;
        op.recompute = recompute;
        op.collective = true;
        op.axis = Axis::TP;
        op.collectiveKind = kind;
        op.bytes = xt.bytes;
        op.sentPerRank = kind == "all-reduce" ? ringAllReduceBytesPerRank(xt.bytes, xt.group)
                                              : ringAllGatherBytesPerRank(xt.bytes, xt.group);
        op.why = why;
        return op;
    };
    const auto ringPass = [&](const std::string& what, bool backward) {
        LayerOp op;
        op.name = "ring pass of " + what + " (CP)";
        op.backward = backward;
        op.collective = true;
        op.axis = Axis::CP;
        op.collectiveKind = "ring pass";
        op.hops = p.cp - 1;
        op.bytes = cpHopBytes(in);
        op.sentPerRank = op.hops * op.bytes;
        op.why = "each rank's " + what + " visit the other " + std::to_string(p.cp - 1) +
                 " context ranks, so every query meets every key";
        return op;
    };

    const auto allToAll = [&](const std::string& what, const std::string& why, bool backward,
                              bool recompute) {
        LayerOp op;
        op.name = "all-to-all " + what + " (EP)";
        op.backward = backward;
        op.recompute = recompute;
        op.collective = true;
        op.axis = Axis::EP;
        op.collectiveKind = "all-to-all";
        op.bytes = epMessageBytes(in);
        op.sentPerRank = op.bytes * (p.ep - 1) / p.ep;
        op.why = why;
        return op;
    };
    const std::string experts = std::to_string(in.model.moe.experts / std::max(1, p.ep));

    // One forward pass of the layer; under full recompute it runs again in the backward.
    const auto forward = [&](bool recompute) {
        std::vector<LayerOp> ops;
        const auto add = [&](LayerOp op) {
            op.backward = recompute;
            op.recompute = recompute;
            ops.push_back(std::move(op));
        };
        // Attention and MLP alike: a norm, a column-parallel matmul (which needs the whole
        // sequence under SP), what runs between, and a row-parallel matmul whose tp partial
        // outputs are summed.
        const auto block = [&](const std::string& norm, const std::string& column,
                               const std::string& inner, const std::string& row, bool ring) {
            add(compute(norm));
            const bool moe = in.model.moe.enabled() && !ring; // the MLP block of an MoE layer
            if (moe)
                add(compute("router (top-" + std::to_string(in.model.moe.topK) + " of " +
                            std::to_string(in.model.moe.experts) + " experts)"));
            if (moe && ep)
                add(allToAll("dispatch",
                             "sends each token to the ranks holding its experts (" + experts +
                                 " a rank)",
                             recompute, recompute));
            if (moe) {
                if (xt.gather)
                    add(expertCollective("all-gather",
                                         "each of the etp ranks computes a slice of its experts "
                                         "for the tokens all of them received",
                                         recompute, recompute));
                const std::string split = " split over etp " + std::to_string(xt.group);
                add(compute(xt.group > 1 ? column + " (columns" + split + ")" : column));
                add(compute(inner));
                add(compute(xt.group > 1 ? row + " (rows" + split + ")" : row));
                if (xt.group > 1)
                    add(expertCollective(xt.gather ? "reduce-scatter" : "all-reduce",
                                         "sums the etp partial outputs of the experts" +
                                             std::string(xt.gather ? " and returns each rank's "
                                                                     "own tokens"
                                                                   : ""),
                                         recompute, recompute));
                // Shared experts: a dense MLP beside the routed ones, split over tp.
                if (in.model.moe.sharedExperts > 0 && tp) {
                    if (sp)
                        add(tpCollective("all-gather",
                                         "the shared experts' column-parallel up projection "
                                         "needs the whole sequence",
                                         recompute, recompute));
                    add(compute("shared experts (split over tp)"));
                    add(tpCollective(sp ? "reduce-scatter" : "all-reduce",
                                     "sums the tp partial outputs of the shared experts", recompute,
                                     recompute));
                }
            } else {
                if (sp)
                    add(tpCollective("all-gather",
                                     "the column-parallel " + column + " needs the whole sequence",
                                     recompute, recompute));
                add(compute(tp ? column + " (columns split over tp)" : column));
                add(compute(inner));
                if (ring && cp && !recompute)
                    add(ringPass("K and V", false));
                add(compute(tp ? row + " (rows split over tp)" : row));
                if (tp)
                    add(tpCollective(sp ? "reduce-scatter" : "all-reduce",
                                     "sums the tp partial outputs of the row-parallel " + row +
                                         (sp ? " and leaves each rank s/tp tokens" : ""),
                                     recompute, recompute));
            }
            if (moe && ep)
                add(allToAll("combine", "brings the experts' outputs back to the tokens' ranks",
                             recompute, recompute));
        };
        block(sp ? "input LayerNorm (on s/tp tokens)" : "input LayerNorm", "QKV projection",
              "attention", "output projection", true);
        block("residual add, post-attention LayerNorm", "MLP up", "activation", "MLP down", false);
        add(compute("residual add"));
        return ops;
    };

    std::vector<LayerOp> ops = forward(false);
    if (p.recompute == Recompute::Full) {
        std::vector<LayerOp> again = forward(true);
        if (p.recomputeLayers > 0) // Megatron's block method: only some layers run it
            for (LayerOp& op : again)
                op.why += (op.why.empty() ? "" : "; ") + std::string("only in the first ") +
                          std::to_string(p.recomputeLayers) +
                          " layers of each virtual stage (the others keep their activations)";
        ops.insert(ops.end(), again.begin(), again.end());
    }
    // Backward, in reverse: each forward collective's conjugate. An all-gather's gradient is a
    // reduce-scatter and a reduce-scatter's an all-gather; without SP the all-reduce after a
    // row-parallel layer passes its gradient through, and the identity before a column-parallel
    // one becomes an all-reduce of its input gradient (Megatron-LM's f and g).
    const auto backward = [&](const std::string& block, const std::string& inputs) {
        const bool expertBlock = in.model.moe.enabled() && block == "MLP";
        const bool moe = ep && expertBlock;
        if (moe)
            ops.push_back(allToAll("combine backward",
                                   "sends the output gradients back to the experts' ranks", true,
                                   false));
        if (expertBlock && xt.gather)
            ops.push_back(expertCollective("all-gather",
                                           "the experts' row-parallel backward needs the output "
                                           "gradients of the tokens all etp ranks received",
                                           true));
        else if (!expertBlock && sp)
            ops.push_back(tpCollective("all-gather",
                                       "the " + block +
                                           "'s row-parallel backward needs the "
                                           "whole sequence's output gradient",
                                       true));
        ops.push_back(compute(block + " backward", true));
        if (block == "attention" && cp) {
            ops.push_back(ringPass("K and V", true));
            ops.push_back(ringPass("dK and dV", true));
        }
        if (expertBlock && xt.group > 1)
            ops.push_back(expertCollective(xt.gather ? "reduce-scatter" : "all-reduce",
                                           "sums the etp partial input gradients of the experts",
                                           true));
        if (expertBlock && tp && in.model.moe.sharedExperts > 0) {
            if (sp)
                ops.push_back(tpCollective("all-gather",
                                           "the shared experts' backward needs the whole "
                                           "sequence's output gradient",
                                           true));
            ops.push_back(compute("shared experts backward", true));
            ops.push_back(tpCollective(sp ? "reduce-scatter" : "all-reduce",
                                       "sums the shared experts' tp partial input gradients",
                                       true));
        } else if (!expertBlock && tp)
            ops.push_back(tpCollective(sp ? "reduce-scatter" : "all-reduce",
                                       "sums the input gradients of the column-parallel " + inputs +
                                           (sp ? " and leaves each rank s/tp tokens" : ""),
                                       true));
        if (moe)
            ops.push_back(allToAll("dispatch backward",
                                   "returns the tokens' input gradients to their ranks", true,
                                   false));
    };
    backward("MLP", "MLP up");
    backward("attention", "QKV");
    return ops;
}

} // namespace shardscope
