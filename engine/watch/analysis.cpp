#include "analysis.h"

namespace shardscope::watch {

RunAnalysis analyse(const RunState& run, const HealthOptions& health,
                    const StragglerOptions& stragglers) {
    RunAnalysis a;
    a.health = rankHealth(run, health);
    a.diagnosis = hangDiagnosis(run, a.health);
    a.stragglers = findStragglers(run, stragglers);
    if (const std::int64_t step = latestCompleteStep(run); step > 0)
        a.pipeline = measurePipeline(run, step);
    else
        a.pipeline.problem = "no step has finished on every pipeline rank yet";
    a.exposure = exposureByRank(run);
    a.memory = memoryByRank(run);
    a.comparison = predictedVsMeasured(run, a.memory, a.pipeline, a.exposure);
    return a;
}

} // namespace shardscope::watch
