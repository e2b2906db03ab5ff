// One training run in this process: executes the pipeline program of engine/sched for its rank,
// op by op, writes telemetry, checkpoints and a summary into the run directory, and stops
// cleanly on a signal or a non-finite loss.
#pragma once

#include "communicator.h"
#include "kernels/ops.h"
#include "run_config.h"

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

namespace shardscope {

enum class RunStatus { Completed, Interrupted, Failed };
std::string toString(RunStatus s);

struct StepRecord {
    std::int64_t step = 0;
    double loss = 0;
    double gradNorm = 0;
    double learningRate = 0;
    double seconds = 0;
    double communication = 0;        // seconds data-parallel all-reduces were in flight
    double exposedCommunication = 0; // of which the step waited for them, after the backward
};

struct TrainResult {
    RunStatus status = RunStatus::Completed;
    std::string message; // why it stopped, when not completed
    std::filesystem::path runDir;
    std::int64_t firstStep = 0;      // 0, or the step resumed from
    std::int64_t stepsCompleted = 0; // in the whole run, including before a resume
    std::vector<StepRecord> steps;   // this invocation's steps
    double finalValLoss = 0;
    int exitCode() const { return status == RunStatus::Failed ? 3 : 0; }
};

// Throws InputError for a config the engine cannot run, bad data, an unusable run directory or
// checkpoint; CheckpointError for a checkpoint that fails verification on resume. `world` is the
// job's communicator when it has several ranks (every rank calls train with the same config);
// null for one process. `device`: the backend to run on (the caller keeps it); null for the CPU
// backend with config.engine.threads.
TrainResult train(const RunConfig& config, std::ostream& progress, Communicator* world = nullptr,
                  kernels::Ops* device = nullptr);

} // namespace shardscope
