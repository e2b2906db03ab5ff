#include "runtime/parallel/shard_layout.h"

#include <gtest/gtest.h>
#include <set>
#include <stdexcept>

namespace shardscope {
namespace {

// Units of 10, 7 and 6 elements over 4 ranks: none divides evenly.
const std::vector<std::size_t> kUnits = {0, 10, 17};
constexpr std::size_t kTotal = 23;

// Every element is owned by exactly one rank, each rank stores every unit's shard in the same
// place, and a unit's shard is the same size on every rank: what lets each collective move
// equal parts.
TEST(ShardLayout, EveryElementHasOneOwnerAndEveryRankStoresTheSameShards) {
    std::vector<int> owners(kTotal, 0);
    for (int rank = 0; rank < 4; ++rank) {
        const ShardLayout layout(kTotal, kUnits, 4, rank);
        EXPECT_EQ(layout.stored(), 3u + 2u + 2u); // ceil(10/4) + ceil(7/4) + ceil(6/4)
        std::set<std::size_t> places;
        for (const ShardLayout::Piece& p : layout.owned())
            for (std::size_t i = 0; i < p.count; ++i) {
                ++owners[p.flat + i];
                EXPECT_EQ(layout.storedIndex(p.flat + i), p.stored + i);
                EXPECT_LT(p.stored + i, layout.stored());
                EXPECT_TRUE(places.insert(p.stored + i).second) << "stored twice";
            }
        for (const ShardLayout::Unit& u : layout.units())
            EXPECT_EQ(u.padded(4) % 4, 0u);
    }
    for (std::size_t i = 0; i < kTotal; ++i)
        EXPECT_EQ(owners[i], 1) << "element " << i;
}

// Rank r owns the r-th quarter of each unit, padded: the last rank's shard is short or empty.
TEST(ShardLayout, ARankOwnsTheSameQuarterOfEachUnit) {
    const ShardLayout last(kTotal, kUnits, 4, 3);
    const std::vector<ShardLayout::Piece> pieces = last.owned();
    ASSERT_EQ(pieces.size(), 2u); // nothing of the last unit: 3 x 2 of its 6 elements go first
    EXPECT_EQ(pieces[0].flat, 9u);
    EXPECT_EQ(pieces[0].count, 1u);
    EXPECT_EQ(pieces[1].flat, 16u);
    EXPECT_EQ(pieces[1].stored, 3u);
    const ShardLayout second(kTotal, kUnits, 4, 1);
    EXPECT_EQ(second.storedIndex(3), 0u);
    EXPECT_EQ(second.storedIndex(19), 5u);                       // the last unit: [19, 21)
    EXPECT_THROW((void)second.storedIndex(0), std::logic_error); // rank 0's
}

TEST(ShardLayout, PacksARanksValuesWithZeroPadding) {
    std::vector<float> whole(kTotal);
    for (std::size_t i = 0; i < kTotal; ++i)
        whole[i] = float(i + 1);
    const std::vector<float> stored = ShardLayout(kTotal, kUnits, 4, 3).pack(whole.data());
    EXPECT_EQ(stored, (std::vector<float>{10, 0, 0, 17, 0, 0, 0}));
}

TEST(ShardLayout, OwnedPiecesAreClippedToTheAskedRange) {
    const ShardLayout layout(kTotal, kUnits, 2, 0); // shards 5, 4, 3
    const std::vector<ShardLayout::Piece> pieces = layout.owned(2, 19);
    ASSERT_EQ(pieces.size(), 3u);
    EXPECT_EQ(pieces[0].flat, 2u);
    EXPECT_EQ(pieces[0].count, 3u);
    EXPECT_EQ(pieces[0].stored, 2u);
    EXPECT_EQ(pieces[1].flat, 10u);
    EXPECT_EQ(pieces[1].count, 4u);
    EXPECT_EQ(pieces[2].flat, 17u);
    EXPECT_EQ(pieces[2].count, 2u);
}

TEST(ShardLayout, OnlyAWholeUnitIsOneUnit) {
    const ShardLayout layout(kTotal, kUnits, 4, 0);
    EXPECT_EQ(layout.unitOf(10, 7).shard, 2u);
    EXPECT_THROW((void)layout.unitOf(10, 6), std::logic_error);
    EXPECT_THROW((void)layout.unitOf(11, 6), std::logic_error);
    EXPECT_THROW(ShardLayout(kTotal, {0, 17, 10}, 4, 0), std::logic_error);
    EXPECT_THROW(ShardLayout(kTotal, kUnits, 4, 4), std::logic_error);
}

TEST(ShardLayout, OnePartOwnsEverythingWhereItLies) {
    const ShardLayout whole(kTotal);
    EXPECT_FALSE(whole.sharded());
    EXPECT_EQ(whole.stored(), kTotal);
    EXPECT_EQ(whole.storedIndex(22), 22u);
    ASSERT_EQ(whole.owned().size(), 1u);
    EXPECT_EQ(whole.owned()[0].count, kTotal);
}

} // namespace
} // namespace shardscope
