// `shardscope-cli report` on a real run: the engine trains dp 2 x pp 2 over MPI, then the report
// reads its directory. Measured parameters, gradients and optimizer bytes must equal the
// planner's exactly (the engine allocates what the planner counts), the pipeline of 2 stages with
// one microbatch must idle half the time, and every export must hold every event.
#include "cli_test_support.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using shardscope::testing::CliResult;

CliResult cli(std::vector<std::string> args) {
    return shardscope::testing::runCliWith(std::move(args));
}

class RunDirectory : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = fs::temp_directory_path() / ("shardscope-report-" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        const std::string cmd = std::string(SHARDSCOPE_ENGINE_EXE) +
                                " train -q --dp 2 --pp 2 --ranks 4 --steps 8 --warmup-steps 2 "
                                "--micro-batch 8 --global-batch 16 --out " +
                                (dir_ / "run").string() + " > " + (dir_ / "log").string() + " 2>&1";
        code_ = std::system(cmd.c_str());
    }
    static void TearDownTestSuite() { fs::remove_all(dir_); }
    void SetUp() override {
        ASSERT_EQ(code_, 0) << "the engine run failed; see " << (dir_ / "log").string();
    }
    static fs::path dir_;
    static int code_;
};
fs::path RunDirectory::dir_;
int RunDirectory::code_ = -1;

int countLines(const fs::path& file, const std::string& needle) {
    std::ifstream in(file);
    int n = 0;
    for (std::string line; std::getline(in, line);)
        n += line.find(needle) != std::string::npos;
    return n;
}

TEST_F(RunDirectory, ThePredictedAgainstMeasuredTableHoldsTheExactMemoryAndTheBubble) {
    const CliResult r = cli({"report", (dir_ / "run").string(), "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["schema"], "shardscope.run-report/1");
    ASSERT_EQ(j["ranks"].size(), 4u);
    for (const json& rank : j["ranks"]) {
        EXPECT_EQ(rank["status"], "finished") << rank;
        EXPECT_EQ(rank["steps"], 8);
    }
    std::map<std::string, json> rows;
    for (const json& row : j["comparison"])
        rows[row["key"]] = row;
    for (const char* exact : {"memory.parameters", "memory.gradients", "memory.optimizer"})
        EXPECT_EQ(rows.at(exact)["error_percent"], 0.0) << rows.at(exact);
    EXPECT_LT(std::abs(rows.at("memory.activations")["error_percent"].get<double>()), 10.0);
    // Two stages, one microbatch per replica: (p - 1) / (m + p - 1) = 1/2 is the planner's
    // closed form, and the measured pipeline must idle about that.
    EXPECT_DOUBLE_EQ(rows.at("bubble")["predicted"].get<double>(), 0.5);
    EXPECT_NEAR(rows.at("bubble")["measured"].get<double>(), 0.5, 0.15);
    for (const char* key : {"step_time", "tokens_per_s", "mfu"}) {
        EXPECT_GT(rows.at(key)["predicted"].get<double>(), 0) << key;
        EXPECT_GT(rows.at(key)["measured"].get<double>(), 0) << key;
    }
    EXPECT_TRUE(j["pipeline"]["problem"].get<std::string>().empty()) << j["pipeline"];
    EXPECT_TRUE(j["diagnosis"].get<std::string>().empty()) << j["diagnosis"];
}

TEST_F(RunDirectory, TheExportsHoldEveryStepAndEverySpan) {
    const fs::path csv = dir_ / "steps.csv", trace = dir_ / "trace.json", html = dir_ / "r.html";
    const CliResult r = cli({"report", (dir_ / "run").string(), "--csv", csv.string(), "--trace",
                             trace.string(), "--html", html.string()});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("Predicted against measured"), std::string::npos) << r.out;
    std::ifstream in(csv);
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line.rfind("rank,step,t,loss", 0), 0u);
    int rows = 0;
    while (std::getline(in, line))
        ++rows;
    EXPECT_EQ(rows, 4 * 8);
    int spans = 0;
    for (int rank = 0; rank < 4; ++rank)
        spans +=
            countLines(dir_ / "run" / "telemetry" / ("rank-" + std::to_string(rank) + ".jsonl"),
                       "\"type\":\"span\"");
    std::ifstream t(trace);
    const json chrome = json::parse(t);
    int events = 0;
    for (const json& e : chrome["traceEvents"])
        events += e["ph"] == "X" || e["ph"] == "b";
    EXPECT_EQ(events, spans);
    EXPECT_GE(countLines(html, "<svg"), 1);
    EXPECT_FALSE(fs::exists(html.string() + ".partial"));
}

TEST(RunReport, WhatIsNotARunOrCannotBeWrittenExitsTwoWithTheReason) {
    CliResult r = cli({"report", "/nonexistent/run"});
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("is not a directory"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty());
    r = cli({"report", fs::temp_directory_path().string()});
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("no telemetry/rank-<r>.jsonl files"), std::string::npos) << r.err;
}

} // namespace
