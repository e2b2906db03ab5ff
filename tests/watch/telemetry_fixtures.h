// Telemetry events as the engine writes them (docs/telemetry.md), for runs whose every op time is
// chosen by the test: a pipeline step's spans cut from a timeline, step events, start events.
#pragma once

#include "core/json_io.h"
#include "core/presets.h"
#include "sched/pipeline_program.h"
#include "sched/pipeline_simulator.h"
#include "watch/run_state.h"

#include <nlohmann/json.hpp>
#include <string>

namespace shardscope::testing {

using nlohmann::json;

inline ParallelConfig pipelineLayout(PipelineSchedule schedule, int pp, int m, int dp = 1,
                                     int vpp = 1) {
    ParallelConfig p;
    p.schedule = schedule;
    p.pp = pp;
    p.dp = dp;
    p.vpp = vpp;
    p.microBatch = 1;
    p.globalBatch = m * dp;
    return p;
}

inline json startEvent(int rank, const watch::Coordinate& c, const ParallelConfig& layout,
                       double t = 0.0) {
    ModelSpec model = findModelPreset("gpt2-124m");
    TrainConfig train;
    train.steps = 100;
    return {{"type", "event"},
            {"event", "start"},
            {"rank", rank},
            {"t", t},
            {"seq", 1},
            {"pid", 1000 + rank},
            {"host", "host" + std::to_string(rank / 4)},
            {"coord", {{"dp", c.dp}, {"tp", c.tp}, {"pp", c.pp}, {"cp", c.cp}}},
            {"world_size", layout.worldSize()},
            {"config", {{"model", model}, {"parallel", layout}, {"train", train}}},
            {"memory_predicted",
             {{"parameters", 1000.0},
              {"gradients", 1000.0},
              {"optimizer", 2000.0},
              {"activations", 500.0},
              {"stage", c.pp}}}};
}

inline json span(int rank, const char* kind, std::int64_t step, int mb, int chunk, double start,
                 double end) {
    return {{"type", "span"}, {"rank", rank},   {"kind", kind}, {"step", step}, {"mb", mb},
            {"chunk", chunk}, {"start", start}, {"end", end},   {"t", end}};
}

// The spans the engine would write for one step of `timeline` on pipeline rank `pp` (global rank
// `rank`): every op as `blocks` consecutive block spans, shifted by `offset` seconds.
inline void addOpSpans(watch::RunState& run, const PipelineTimeline& timeline, int pp, int rank,
                       std::int64_t step, double offset, int blocks = 3) {
    for (const TimedOp& op : timeline.ranks[std::size_t(pp)]) {
        const double width = (op.end - op.start) / blocks;
        for (int b = 0; b < blocks; ++b) {
            json s = span(rank, spanKindName(op.op.kind), step, op.op.microbatch, op.op.chunk,
                          offset + op.start + b * width, offset + op.start + (b + 1) * width);
            s["block"] = "layer";
            s["layer"] = b;
            run.add(s);
        }
    }
}

inline json stepEvent(int rank, std::int64_t step, double t, double stepTime,
                      double tokensPerSecond = 1000) {
    return {{"type", "step"},
            {"rank", rank},
            {"step", step},
            {"t", t},
            {"loss", 3.0},
            {"grad_norm", 1.0},
            {"lr", 1e-3},
            {"tokens", tokensPerSecond * stepTime},
            {"step_time", stepTime},
            {"tokens_per_s", tokensPerSecond},
            {"mfu", 0.1},
            {"memory", {{"parameters", 1000.0}, {"activations", 10.0}}},
            {"memory_peak",
             {{"parameters", 1000.0},
              {"gradients", 1000.0},
              {"optimizer", 2000.0},
              {"activations", 550.0}}}};
}

} // namespace shardscope::testing
