// Plans, searches and presets as readable tables or as JSON (schema in docs/cli.md).
#pragma once

#include "plan/explain.h"
#include "plan/published_runs.h"
#include "plan/search.h"
#include "runtime/devices.h"

#include <nlohmann/json.hpp>
#include <ostream>

namespace shardscope::cli {

inline constexpr const char* kPlanSchema = "shardscope.plan/1";
inline constexpr const char* kSearchSchema = "shardscope.search/1";

nlohmann::json planJson(const PlanInputs& in, const Estimate& e);
void printPlan(std::ostream& out, const PlanInputs& in, const Estimate& e, bool explainAll);

nlohmann::json searchJson(const PlanInputs& in, const SearchResult& r);
void printSearch(std::ostream& out, const PlanInputs& in, const SearchResult& r);

void printExplanation(std::ostream& out, const Explanation& x);
nlohmann::json explanationJson(const Explanation& x);

void printModels(std::ostream& out);
void printGpus(std::ostream& out);
nlohmann::json devicesJson(const DeviceReport& r);
void printDevices(std::ostream& out, const DeviceReport& r);

nlohmann::json validationJson(const std::vector<PublishedRun>& runs,
                              const std::vector<RunComparison>& results);
void printValidation(std::ostream& out, const std::vector<PublishedRun>& runs,
                     const std::vector<RunComparison>& results, bool markdown);
// One published run: what was reported beside the planner's whole plan of it, so a user can
// see where the predicted time goes when a run is off.
nlohmann::json validationRunJson(const PublishedRun& run, const RunComparison& c,
                                 const PlanInputs& in);
void printValidationRun(std::ostream& out, const PublishedRun& run, const RunComparison& c,
                        const PlanInputs& in, bool explainAll);

} // namespace shardscope::cli
