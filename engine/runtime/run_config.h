// One training run as the engine reads it: the shared ModelSpec, ParallelConfig and TrainConfig,
// plus how this process runs (threads, run directory, telemetry, resume). Read from one JSON
// document ({"model", "parallel", "train", "engine"}), or the embedded default.
#pragma once

#include "core/model_spec.h"
#include "core/parallel_config.h"
#include "core/train_config.h"
#include "data.h"

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace shardscope {

// More threads than any CPU has (OpenMP runs out of memory making 100,000 and hangs).
inline constexpr int kMaxEngineThreads = 1024;

struct EngineOptions {
    std::string runDir;           // "" : runs/<date>-<time> under the working directory
    std::string device = "cpu";   // the backend each rank computes on: cpu or cuda (rank_device.h)
    int threads = 0;              // OpenBLAS and OpenMP threads; 0: one per core
    std::string telemetry;        // "", tcp://HOST:PORT or unix:PATH: stream events to a collector
    double peakFlops = 0;         // FLOP/s that MFU is measured against; 0: from the device
    bool resume = false;          // continue from a checkpoint
    std::string resumeFrom;       // a checkpoint directory; "" with resume: the run's latest
    std::int64_t stopAfter = 0;   // stop cleanly after this many steps of this invocation
    int logEvery = 1;             // progress line every N steps
    double bucketMiB = 25;        // data-parallel gradient bucket (PyTorch DDP's bucket_cap_mb)
    double watchdogSeconds = 300; // a rank blocked this long in one collective ends the job
    double stallSeconds = 5;      // a wait this long is reported as a stall event (0: never)
    bool quiet = false;           // no progress lines (events still go to telemetry)
    // Debugging: rank r's clock is shifted by r x this many seconds before the ranks' clocks are
    // aligned, as on hosts whose clocks disagree (--debug-clock-skew; never in a config file).
    double debugClockSkew = 0;
};

struct RunConfig {
    ModelSpec model;
    ParallelConfig parallel;
    TrainConfig train;
    EngineOptions engine;

    std::int64_t tokensPerStep() const { return std::int64_t(parallel.globalBatch) * model.seqLen; }
    std::int64_t totalSteps() const; // steps, or trainTokens / tokensPerStep rounded up
};

// A small GPT (4 layers, 128 channels, vocabulary 256) on the synthetic Markov source: trains
// in a couple of minutes on two cores and needs no file.
RunConfig defaultRunConfig();

// The sections present replace the default's; "model" may be a preset id or an object (a preset
// object with "preset": ID takes the preset and overrides the fields given). Unknown keys are
// errors (a typo should not silently train something else). Throws InputError listing problems.
RunConfig runConfigFromJson(const nlohmann::json& j);
nlohmann::json toJson(const RunConfig& c);

// runs/<date>-<time> under the working directory: where a run goes when --out is not given.
std::filesystem::path defaultRunDirectory();

// The data the run reads: train.data_path in train.data_format ("auto" with no path: the
// synthetic source). Throws InputError when a file format has no path.
DataSpec dataSpecOf(const RunConfig& c);

// Everything that stops this engine from running the config, with fixes: the core layout rules
// and what the CPU engine supports (fp32, AdamW, no offload, no context parallelism, ...).
std::vector<std::string> engineProblems(const RunConfig& c);
// Throws InputError listing every problem engineProblems finds.
void checkTrainable(const RunConfig& c);
// The engine overlaps as it is built, whatever a planner session asked for: gradients reduce
// bucket by bucket during the backward (ZeRO-0/1; ZeRO-2/3's reduce-scatters block), ZeRO-3
// gathers the next unit ahead, ZeRO-1/2 gather the updated parameters after the optimizer step,
// TP's collectives wait between GEMMs. Sets
// the layout's overlap flags to that (so its prediction models what runs) and says what
// changed, empty when nothing did.
std::string adoptEngineOverlap(ParallelConfig& p);

} // namespace shardscope
