// A Hugging Face config.json, as `shardscope-cli plan --hf-config` and the app's File > Open read
// it: parsed, imported as a ModelSpec, then planned on one node of H100s the way the CLI plans it.
#include "core/error.h"
#include "core/json_io.h"
#include "core/presets.h"
#include "fuzz_target.h"
#include "plan/estimate.h"

#include <nlohmann/json.hpp>

using namespace shardscope;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    ModelSpec model;
    try {
        model = modelFromHuggingFace(parseJson(std::string(fuzz::text(data, size)), "config.json"),
                                     "config.json");
    } catch (const InputError&) {
        return 0;
    }
    // What an import yields is saved in sessions: it must read back as itself.
    const nlohmann::json saved = model;
    if (nlohmann::json(saved.get<ModelSpec>()) != saved)
        fuzz::broken("an imported model reads back from its JSON unchanged");

    PlanInputs in{model, makeCluster(findGpuPreset("h100-sxm"), 8, 1), {}, {}, {}};
    in.parallel.dp = 8;
    in.parallel.globalBatch = 64;
    if (validate(in.model, in.cluster, in.parallel).empty()) {
        try {
            (void)estimate(in);
        } catch (const InputError&) {
        }
    }
    return 0;
}
