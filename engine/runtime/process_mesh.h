// The ranks of a job arranged as dp x cp x tp x pp from a ParallelConfig, in Megatron's order
// (tp fastest, then cp, dp, pp: plan/layout's rankCoordinate), with one communicator per axis.
#pragma once

#include "communicator.h"
#include "core/parallel_config.h"
#include "plan/estimate.h"
#include "plan/layout.h"

#include <array>
#include <memory>
#include <vector>

namespace shardscope {

// The axes the engine runs, in Axis order (the engine has no experts, so no EP group).
inline constexpr std::array<Axis, 4> kMeshAxes = {Axis::DP, Axis::TP, Axis::PP, Axis::CP};

// The world ranks of `rank`'s group along `axis`, ascending (its own included).
std::vector<int> groupRanks(const ParallelConfig& p, int rank, Axis axis);

class ProcessMesh {
public:
    // Collective over `world`: every rank constructs its mesh at the same point. Throws
    // InputError when the world size is not dp * tp * pp * cp.
    ProcessMesh(const ParallelConfig& p, Communicator& world);

    const RankCoordinate& coordinate() const { return coordinate_; }
    Communicator& world() const { return world_; }
    Communicator& group(Axis axis) const { return *groups_[static_cast<std::size_t>(axis)]; }
    // The ranks that hold the same weights: dp x cp (Megatron-LM's data-parallel group with
    // context parallelism), cp fastest; gradients are summed and ZeRO shards over it. The dp
    // group itself where cp is 1.
    Communicator& replicas() const { return replicas_ ? *replicas_ : group(Axis::DP); }
    int replicaIndex() const { return coordinate_.cp + cp_ * coordinate_.dp; }

private:
    Communicator& world_;
    RankCoordinate coordinate_;
    std::vector<std::unique_ptr<Communicator>> groups_; // indexed by Axis
    std::unique_ptr<Communicator> replicas_;            // dp x cp, when cp > 1
    int cp_ = 1;
};

} // namespace shardscope
