// The engine's run config (`shardscope-engine train --config FILE`, and the config.json a resumed
// run reads back): parsed, checked as `--check` checks it, and planned for this host as the
// engine does before it allocates anything.
#include "core/error.h"
#include "core/json_io.h"
#include "fuzz_target.h"
#include "runtime/prediction.h"
#include "runtime/run_config.h"

#include <nlohmann/json.hpp>

using namespace shardscope;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    RunConfig config;
    try {
        config = runConfigFromJson(parseJson(std::string(fuzz::text(data, size)), "config.json"));
    } catch (const InputError&) {
        return 0;
    }
    // A run writes its config into its directory and --resume reads it back: the same run.
    const nlohmann::json written = toJson(config);
    try {
        if (toJson(runConfigFromJson(written)) != written)
            fuzz::broken("a run config written by a run reads back unchanged");
    } catch (const InputError& e) {
        fuzz::broken(std::string("a run config written by a run reads back, but: ") + e.what());
    }

    try {
        (void)dataSpecOf(config);
        if (!engineProblems(config).empty())
            return 0;
        const int world = config.parallel.worldSize();
        const ClusterSpec host = clusterOfCpuHosts(1e11, world, world, 16e9, 1e10);
        for (int stage = 0; stage < config.parallel.pp; ++stage)
            (void)predictionJson(config, host, stage);
    } catch (const InputError&) {
    }
    return 0;
}
