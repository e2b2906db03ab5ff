// A .shardscope session file as the app opens it (File > Open, a dropped file, the command line):
// read, then everything the pages compute from it on opening: the layout's plan, the Pipeline
// page's lesson timeline and the Collectives page's algorithm.
#include "core/error.h"
#include "core/json_io.h"
#include "fuzz_target.h"
#include "session.h"

#include <nlohmann/json.hpp>

using namespace shardscope;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    Session session;
    try {
        session = sessionFromJson(parseJson(std::string(fuzz::text(data, size)), "session"));
    } catch (const InputError&) {
        return 0;
    }
    // Saving what was opened and opening it again gives the same session.
    const nlohmann::json saved = sessionToJson(session);
    try {
        if (sessionToJson(sessionFromJson(saved)) != saved)
            fuzz::broken("a session saves and reopens unchanged");
    } catch (const InputError& e) {
        fuzz::broken(std::string("a saved session reopens, but: ") + e.what());
    }

    try {
        if (validate(session.model, session.cluster, session.parallel).empty())
            (void)estimate(session.planInputs());
        const PipelineLesson& lesson = session.pipeline;
        for (auto kind : {std::optional(lesson.schedule), lesson.compare})
            if (kind)
                (void)simulate(buildPipelineProgram(lesson.spec(*kind)),
                               lesson.pipelineCosts(*kind));
        const CollectivesLesson& c = session.collectives;
        (void)timeCollective(buildCollective({c.algorithm, c.ranks, c.links.gpusPerNode}),
                             c.sizeGB * 1e9, c.links);
    } catch (const InputError&) {
    }
    return 0;
}
