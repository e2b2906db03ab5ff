#include "shard_layout.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace shardscope {

ShardLayout::ShardLayout(std::size_t total) : ShardLayout(total, {0}, 1, 0) {}

ShardLayout::ShardLayout(std::size_t total, const std::vector<std::size_t>& unitOffsets, int parts,
                         int rank)
    : total_(total), parts_(parts), rank_(rank) {
    if (parts < 1 || rank < 0 || rank >= parts)
        throw std::logic_error("rank " + std::to_string(rank) + " of " + std::to_string(parts) +
                               " parts");
    if (unitOffsets.empty() || unitOffsets.front() != 0)
        throw std::logic_error("shard units must start at offset 0");
    for (std::size_t i = 0; i < unitOffsets.size(); ++i) {
        const std::size_t end = i + 1 < unitOffsets.size() ? unitOffsets[i + 1] : total;
        if (end <= unitOffsets[i] && total > 0)
            throw std::logic_error("shard units must be ascending and inside the buffer");
        Unit u;
        u.offset = unitOffsets[i];
        u.count = end - u.offset;
        u.shard = (u.count + std::size_t(parts) - 1) / std::size_t(parts);
        u.stored = stored_;
        stored_ += u.shard;
        units_.push_back(u);
    }
}

std::size_t ShardLayout::unitIndexAt(std::size_t flat) const {
    const auto after = std::upper_bound(units_.begin(), units_.end(), flat,
                                        [](std::size_t f, const Unit& u) { return f < u.offset; });
    return std::size_t(after - units_.begin()) - 1;
}

const ShardLayout::Unit& ShardLayout::unitOf(std::size_t offset, std::size_t count) const {
    const Unit& u = units_[unitIndexAt(offset)];
    if (u.offset != offset || u.count != count)
        throw std::logic_error("[" + std::to_string(offset) + ", " +
                               std::to_string(offset + count) + ") is not one shard unit");
    return u;
}

ShardLayout::Piece ShardLayout::pieceOf(const Unit& u, int part) const {
    const std::size_t begin = std::min(u.count, u.shard * std::size_t(part));
    const std::size_t end = std::min(u.count, begin + u.shard);
    return {u.offset + begin, end - begin, u.stored};
}

std::vector<ShardLayout::Piece> ShardLayout::owned(std::size_t begin, std::size_t end) const {
    std::vector<Piece> pieces;
    if (begin >= end)
        return pieces;
    for (std::size_t i = unitIndexAt(begin); i < units_.size() && units_[i].offset < end; ++i) {
        const Piece p = pieceOf(units_[i], rank_);
        const std::size_t a = std::max(begin, p.flat), b = std::min(end, p.flat + p.count);
        if (a < b)
            pieces.push_back({a, b - a, p.stored + (a - p.flat)});
    }
    return pieces;
}

std::size_t ShardLayout::storedIndex(std::size_t flat) const {
    const Piece p = pieceOf(units_[unitIndexAt(flat)], rank_);
    if (flat < p.flat || flat >= p.flat + p.count)
        throw std::logic_error("flat element " + std::to_string(flat) + " is not owned by rank " +
                               std::to_string(rank_));
    return p.stored + (flat - p.flat);
}

std::vector<float> ShardLayout::pack(const float* whole) const {
    std::vector<float> stored(stored_, 0.0f);
    for (const Piece& p : owned())
        std::copy(whole + p.flat, whole + p.flat + p.count,
                  stored.begin() + std::ptrdiff_t(p.stored));
    return stored;
}

void forEachChunk(const std::vector<ShardLayout::Piece>& pieces,
                  const std::function<void(std::size_t flat, std::size_t n, float* host)>& fn,
                  std::size_t maxElements) {
    std::size_t largest = 0;
    for (const ShardLayout::Piece& p : pieces)
        largest = std::max(largest, p.count);
    std::vector<float> host(std::min(largest, maxElements));
    for (const ShardLayout::Piece& p : pieces)
        for (std::size_t done = 0; done < p.count; done += maxElements)
            fn(p.flat + done, std::min(maxElements, p.count - done), host.data());
}

} // namespace shardscope
