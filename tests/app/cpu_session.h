// A session the CPU engine can train in seconds on two shared cores: a 4-layer GPT, dp 2 x pp 2,
// fp32, 1F1B, the synthetic data source, its runs under `runs`.
#pragma once

#include "core/json_io.h"
#include "session.h"

#include <QString>
#include <nlohmann/json.hpp>

namespace shardscope::test {

inline Session cpuSession(const QString& runs, std::int64_t steps) {
    Session s = defaultSession();
    s.model = nlohmann::json::parse(R"({
      "name": "test GPT", "family": "gpt2", "layers": 4, "hidden": 32, "heads": 2,
      "kv_heads": 2, "ffn_hidden": 128, "vocab": 64, "seq_len": 16, "max_positions": 16,
      "tied_embeddings": true, "activation": "gelu", "norm": "layernorm",
      "positions": "learned", "attention_bias": true, "output_bias": true, "mlp_bias": true,
      "dropout": false})")
                  .get<ModelSpec>();
    s.modelSource = ModelSource::Custom;
    ParallelConfig& p = s.parallel;
    p = ParallelConfig{};
    p.dp = 2;
    p.pp = 2;
    p.tp = 1;
    p.microBatch = 1;
    p.globalBatch = 4;
    p.precision = PrecisionPolicy::fp32();
    p.recompute = Recompute::None;
    p.schedule = PipelineSchedule::OneFOneB;
    s.train = TrainConfig{};
    s.train.steps = steps;
    s.train.warmupSteps = 1;
    s.train.learningRate = 1e-3;
    s.train.checkpointEvery = 5;
    s.launch.runsDirectory = runs.toStdString();
    s.launch.stallSeconds = 1;
    s.launch.watchdogSeconds = 120;
    return s;
}

} // namespace shardscope::test
