// Measured against predicted: each figure the planner predicts for the run (in its start event)
// beside what the telemetry measured, with the error in percent and how both were obtained.
#pragma once

#include "run_state.h"

#include <string>
#include <vector>

namespace shardscope::watch {

enum class Unit { Bytes, Seconds, TokensPerSecond, Fraction };

struct ComparisonRow {
    std::string key;   // "memory.activations", "step_time", "exposed.dp", ...
    std::string label; // "Activations (rank 2, stage 1)"
    Unit unit = Unit::Seconds;
    bool hasPredicted = false, hasMeasured = false;
    double predicted = 0, measured = 0;
    std::string how; // what was measured over which steps, and where the prediction comes from
    // (measured - predicted) / predicted in percent; NaN without both or with predicted 0.
    double errorPercent() const;
};

// Memory by category (for the rank with the largest measured peak, against the planner's figure
// for that rank's pipeline stage), step time, tokens/s, MFU, pipeline bubble (against the
// planner's closed form and against the schedule simulated with the measured op costs), and the
// exposed communication of every axis either side has. Medians over the steps held, leaving out
// the run's first step (it pays for every allocation).
std::vector<ComparisonRow> predictedVsMeasured(const RunState& run);

// Per rank and axis: seconds per step with a transfer in flight, seconds blocked on it, and the
// hidden share 1 - exposed / busy (medians over the newest kExposureSteps steps: how the run
// communicates now).
inline constexpr std::size_t kExposureSteps = 128;
struct AxisExposure {
    int rank = 0;
    std::string axis;
    double busy = 0, exposed = 0;
    double hidden() const { return busy > 0 ? std::max(0.0, 1.0 - exposed / busy) : 0.0; }
};
std::vector<AxisExposure> exposureByRank(const RunState& run);

// Per rank: measured peak memory by category beside the planner's prediction for its stage.
struct RankMemory {
    int rank = 0, stage = 0;
    MemoryBytes measured, predicted;
};
std::vector<RankMemory> memoryByRank(const RunState& run);

// The same from the pieces, when the caller has them already (analyse()): memory per rank, the
// measured pipeline of the newest complete step, exposure per rank and axis.
struct MeasuredPipeline;
std::vector<ComparisonRow> predictedVsMeasured(const RunState& run,
                                               const std::vector<RankMemory>& memory,
                                               const MeasuredPipeline& pipeline,
                                               const std::vector<AxisExposure>& exposure);

// Text for a value of the unit: "12.3 MiB", "1.53 s", "6,948 tokens/s", "14.5 %".
std::string formatValue(double value, Unit unit);

} // namespace shardscope::watch
