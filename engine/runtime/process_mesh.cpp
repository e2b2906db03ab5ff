#include "process_mesh.h"

#include "core/error.h"

namespace shardscope {

namespace {

// Rank distance between neighbours of an axis, and the axis size, in Megatron's order.
std::pair<int, int> strideAndSize(const ParallelConfig& p, Axis axis) {
    switch (axis) {
    case Axis::TP:
        return {1, p.tp};
    case Axis::CP:
        return {p.tp, p.cp};
    case Axis::DP:
        return {p.tp * p.cp, p.dp};
    case Axis::PP:
        return {p.tp * p.cp * p.dp, p.pp};
    case Axis::EP: // the engine has no experts (run_config refuses ep > 1)
        return {p.tp, 1};
    }
    return {1, 1};
}

int indexOn(const RankCoordinate& c, Axis axis) {
    switch (axis) {
    case Axis::TP:
        return c.tp;
    case Axis::CP:
        return c.cp;
    case Axis::DP:
        return c.dp;
    case Axis::PP:
        return c.pp;
    case Axis::EP:
        return 0;
    }
    return 0;
}

} // namespace

std::vector<int> groupRanks(const ParallelConfig& p, int rank, Axis axis) {
    const auto [stride, size] = strideAndSize(p, axis);
    const int first = rank - indexOn(rankCoordinate(p, rank, 1), axis) * stride;
    std::vector<int> ranks;
    for (int k = 0; k < size; ++k)
        ranks.push_back(first + k * stride);
    return ranks;
}

ProcessMesh::ProcessMesh(const ParallelConfig& p, Communicator& world)
    : world_(world), coordinate_(rankCoordinate(p, world.rank(), 1)) {
    if (world.size() != p.worldSize())
        throw InputError("the layout " + layoutSummary(p) + " needs " +
                         std::to_string(p.worldSize()) + " ranks, and this job has " +
                         std::to_string(world.size()) + ": launch it with --ranks " +
                         std::to_string(p.worldSize()));
    for (Axis axis : kMeshAxes)
        groups_.push_back(world.subgroup(groupRanks(p, world.rank(), axis), toString(axis)));
    cp_ = p.cp;
    if (p.cp > 1) { // same tp and pp rank: every tp-th rank of the stage's dp x cp x tp block
        const int first = world.rank() - replicaIndex() * p.tp;
        std::vector<int> ranks;
        for (int k = 0; k < p.dp * p.cp; ++k)
            ranks.push_back(first + k * p.tp);
        replicas_ = world.subgroup(ranks, "dp-cp");
    }
}

} // namespace shardscope
