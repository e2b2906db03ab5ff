#include "collective_report.h"

#include "core/units.h"

#include <iomanip>

namespace shardscope::cli {

namespace {

std::string transferText(const ChunkTransfer& x) {
    return std::to_string(x.from) + "->" + std::to_string(x.to) + " c" + std::to_string(x.chunk) +
           (x.reduce ? "+" : "=");
}

std::size_t transferCount(const CollectivePlan& plan) {
    std::size_t n = 0;
    for (const CollectiveStep& s : plan.steps)
        n += s.transfers.size();
    return n;
}

} // namespace

void printCollective(std::ostream& out, const CollectivePlan& plan, const LinkModel& links,
                     const CollectiveTiming& t, bool steps) {
    const int n = plan.spec.ranks;
    out << toString(plan.spec.kind) << " on " << n << " ranks (" << links.gpusPerNode
        << " per node), " << formatBytes(t.bytes) << ", buffers in " << plan.chunks
        << " chunks\nlinks: in a node " << formatBytes(links.intraBandwidth) << "/s + "
        << formatSeconds(links.intraLatency) << ", across nodes "
        << formatBytes(links.interBandwidth) << "/s + " << formatSeconds(links.interLatency)
        << "\n\n";
    if (steps || transferCount(plan) <= 64) {
        out << "Steps (from->to chunk, + adds to the receiver's chunk, = replaces it):\n";
        for (std::size_t i = 0; i < plan.steps.size(); ++i) {
            out << "step " << std::setw(3) << i + 1 << " " << std::left << std::setw(28)
                << plan.steps[i].phase << std::right << std::setw(10)
                << formatSeconds(t.stepSeconds[i]) << " ";
            for (const ChunkTransfer& x : plan.steps[i].transfers)
                out << ' ' << transferText(x);
            out << '\n';
        }
        out << '\n';
    } else {
        out << plan.steps.size() << " steps, " << transferCount(plan)
            << " transfers (use --steps to list them)\n\n";
    }
    out << "time   " << formatSeconds(t.seconds) << " (sum over steps of the slowest link's "
        << "latency + the busiest rank's bytes / bandwidth)\n"
        << "algbw  " << formatBytes(t.algbw) << "/s = S / time\n"
        << "busbw  " << formatBytes(t.busbw) << "/s = algbw x " << std::setprecision(4)
        << busBandwidthFactor(plan.spec.kind, n)
        << " (nccl-tests: 2(n-1)/n for all-reduce, (n-1)/n for all-gather and reduce-scatter)\n"
        << "sent   " << formatBytes(t.busiestRank) << " by the busiest rank, "
        << formatBytes(t.busiestLink) << " over the busiest link\n";
}

nlohmann::json collectiveJson(const CollectivePlan& plan, const LinkModel& links,
                              const CollectiveTiming& t) {
    nlohmann::json steps = nlohmann::json::array();
    for (std::size_t i = 0; i < plan.steps.size(); ++i) {
        nlohmann::json transfers = nlohmann::json::array();
        for (const ChunkTransfer& x : plan.steps[i].transfers)
            transfers.push_back(
                {{"from", x.from}, {"to", x.to}, {"chunk", x.chunk}, {"reduce", x.reduce}});
        steps.push_back({{"phase", plan.steps[i].phase},
                         {"seconds", t.stepSeconds[i]},
                         {"transfers", transfers}});
    }
    return {{"algorithm", toString(plan.spec.kind)},
            {"ranks", plan.spec.ranks},
            {"gpus_per_node", links.gpusPerNode},
            {"chunks", plan.chunks},
            {"bytes", t.bytes},
            {"seconds", t.seconds},
            {"algbw", t.algbw},
            {"busbw", t.busbw},
            {"bus_factor", busBandwidthFactor(plan.spec.kind, plan.spec.ranks)},
            {"sent_per_rank", t.sentPerRank},
            {"steps", steps}};
}

} // namespace shardscope::cli
