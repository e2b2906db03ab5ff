// `shardscope-cli report RUN_DIR`: what a training run did beside what the planner predicted, from
// its telemetry files (engine/watch does the arithmetic): as text, JSON, a self-contained HTML
// page with charts, a Chrome trace of every measured span, or its step events as CSV.
#pragma once

#include <ostream>
#include <string>

namespace shardscope::cli {

inline constexpr const char* kRunReportSchema = "shardscope.run-report/1";

struct RunReportOptions {
    bool json = false;
    std::string html;  // write the HTML report here
    std::string trace; // write the Chrome trace here
    std::string csv;   // write the step events here
};

// Exit codes: 0, or 2 when the directory is not a run directory or an output cannot be written.
int runReport(const std::string& dir, const RunReportOptions& options, std::ostream& out,
              std::ostream& err);

} // namespace shardscope::cli
