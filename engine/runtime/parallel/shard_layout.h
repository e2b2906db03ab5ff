// Which part of a flat parameter or gradient buffer each data-parallel rank owns under ZeRO,
// cut the way FSDP and Megatron-LM's distributed optimizer cut it so that every collective moves
// parts of one size (what NCCL's all-gather and reduce-scatter take): the buffer is split into
// units, the ranges gathered or reduced as one (the embeddings, each layer, the final norm, the
// head); each unit is padded to a multiple of the group's size and every rank owns the same-size
// shard of every unit. A rank stores its shards one after another, padding included, so it holds
// at most one element per unit more than an even split of the whole buffer would give it.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace shardscope {

class ShardLayout {
public:
    struct Unit {
        std::size_t offset = 0, count = 0; // the unit's flat range
        std::size_t shard = 0;             // ceil(count / parts): each rank's part, padded
        std::size_t stored = 0;            // where this unit's shard starts in a rank's storage
        std::size_t padded(int parts) const { return shard * std::size_t(parts); }
    };
    // A run of flat elements one rank owns, and where that rank stores it.
    struct Piece {
        std::size_t flat = 0, count = 0, stored = 0;
    };

    // One rank owning a buffer of `total` elements whole, as one unit.
    explicit ShardLayout(std::size_t total = 0);
    // unitOffsets: ascending, the first 0, each below total; a unit ends where the next begins.
    ShardLayout(std::size_t total, const std::vector<std::size_t>& unitOffsets, int parts,
                int rank);

    int parts() const { return parts_; }
    int rank() const { return rank_; }
    std::size_t total() const { return total_; }
    bool sharded() const { return parts_ > 1; }
    const std::vector<Unit>& units() const { return units_; }
    // The elements each rank stores: the sum of its shards.
    std::size_t stored() const { return stored_; }
    // The unit that is exactly [offset, offset + count); a logic_error for any other range.
    const Unit& unitOf(std::size_t offset, std::size_t count) const;
    // What rank `part` owns of `unit` (nothing past the unit's end: the rest is padding).
    Piece pieceOf(const Unit& unit, int part) const;
    // This rank's pieces that overlap [begin, end), clipped to it, in flat order.
    std::vector<Piece> owned(std::size_t begin, std::size_t end) const;
    std::vector<Piece> owned() const { return owned(0, total_); }
    // Where this rank stores flat element `flat`, which it must own.
    std::size_t storedIndex(std::size_t flat) const;
    // This rank's stored values, padding zero, from the whole buffer's.
    std::vector<float> pack(const float* whole) const;

private:
    std::size_t unitIndexAt(std::size_t flat) const;

    std::size_t total_ = 0, stored_ = 0;
    int parts_ = 1, rank_ = 0;
    std::vector<Unit> units_;
};

// Calls fn(flat, n, host) over `pieces` in runs of at most maxElements, host a buffer of n
// floats it reuses: how values computed on the host reach a device a bounded range at a time.
void forEachChunk(const std::vector<ShardLayout::Piece>& pieces,
                  const std::function<void(std::size_t flat, std::size_t n, float* host)>& fn,
                  std::size_t maxElements = std::size_t(1) << 20);

} // namespace shardscope
