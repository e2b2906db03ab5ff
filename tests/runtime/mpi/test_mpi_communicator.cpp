// Run under mpirun with 4 ranks (CTest does): every collective and transfer of MpiCommunicator
// checked against the same arithmetic done locally, and the process mesh's groups against
// plan/layout's rank coordinates.
#include "kernels/bf16.h"
#include "mpi_test_main.h"
#include "runtime/mpi_communicator.h"
#include "runtime/process_mesh.h"

#include <gtest/gtest.h>
#include <numeric>

namespace shardscope {
namespace {

float valueOf(int rank, std::size_t i) {
    return float(rank * 1000) + float(i) * 0.5f;
}

TEST(MpiCommunicator, AllReduceSumsEveryRanksValues) {
    auto world = testing::mpiSession()->world();
    const std::size_t n = 1000;
    std::vector<float> data(n);
    for (std::size_t i = 0; i < n; ++i)
        data[i] = valueOf(world->rank(), i);
    world->allReduceSum(data.data(), n).wait();
    for (std::size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r = 0; r < world->size(); ++r)
            want += valueOf(r, i);
        ASSERT_EQ(data[i], want) << i;
    }
}

// bf16 travels as 16-bit words and sums in fp32, each partial sum rounded to bf16: small
// integers and halves are exact in bf16, and so are their sums here. A collective between
// buffers of different types is refused on every rank before anything is sent.
TEST(MpiCommunicator, Bf16CollectivesMoveAndSumBf16Values) {
    using kernels::bf16ToFloat;
    using kernels::floatToBf16;
    auto world = testing::mpiSession()->world();
    const int P = world->size(), r = world->rank();
    const std::size_t n = 64;
    std::vector<std::uint16_t> data(n);
    for (std::size_t i = 0; i < n; ++i)
        data[i] = floatToBf16(float(r + 1) * 0.5f + float(i % 4));
    world->allReduceSum(kernels::Ptr{data.data(), kernels::DType::BF16}, n).wait();
    for (std::size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int k = 0; k < P; ++k)
            want += float(k + 1) * 0.5f + float(i % 4);
        ASSERT_EQ(bf16ToFloat(data[i]), want) << i;
    }

    std::vector<std::uint16_t> all(n * std::size_t(P));
    world
        ->allGather(kernels::ConstPtr{data.data(), kernels::DType::BF16},
                    kernels::Ptr{all.data(), kernels::DType::BF16}, n)
        .wait();
    for (int k = 0; k < P; ++k)
        ASSERT_EQ(std::vector<std::uint16_t>(all.begin() + std::ptrdiff_t(std::size_t(k) * n),
                                             all.begin() + std::ptrdiff_t(std::size_t(k + 1) * n)),
                  data);
    std::vector<std::uint16_t> chunk(n);
    world
        ->reduceScatterSum(kernels::ConstPtr{all.data(), kernels::DType::BF16},
                           kernels::Ptr{chunk.data(), kernels::DType::BF16}, n)
        .wait();
    for (std::size_t i = 0; i < n; ++i)
        EXPECT_EQ(bf16ToFloat(chunk[i]), float(P) * bf16ToFloat(data[i])) << i;
    EXPECT_THROW(world->allGather(kernels::ConstPtr{data.data(), kernels::DType::BF16},
                                  std::vector<float>(n * std::size_t(P)).data(), n),
                 std::logic_error);
}

TEST(MpiCommunicator, AllGatherAndReduceScatterAreInverseHalves) {
    auto world = testing::mpiSession()->world();
    const int P = world->size();
    const std::size_t n = 7;
    std::vector<float> mine(n), all(n * std::size_t(P));
    for (std::size_t i = 0; i < n; ++i)
        mine[i] = valueOf(world->rank(), i);
    world->allGather(mine.data(), all.data(), n).wait();
    for (int r = 0; r < P; ++r)
        for (std::size_t i = 0; i < n; ++i)
            ASSERT_EQ(all[std::size_t(r) * n + i], valueOf(r, i));

    // Every rank contributes `all`; rank i keeps the sum of chunk i: P times its own values.
    std::vector<float> chunk(n);
    world->reduceScatterSum(all.data(), chunk.data(), n).wait();
    for (std::size_t i = 0; i < n; ++i)
        EXPECT_EQ(chunk[i], float(P) * valueOf(world->rank(), i));
}

// ZeRO's slices are uneven (and may be empty): rank i's part has counts[i] floats.
// In place, as ZeRO gathers its shards: each rank's part already lies at its place in the
// output, and the others' parts land around it.
TEST(MpiCommunicator, AllGatherInPlaceKeepsThisRanksPartAndFillsTheOthers) {
    auto world = testing::mpiSession()->world();
    const int P = world->size(), r = world->rank();
    const std::size_t n = 5;
    std::vector<float> all(n * std::size_t(P), -1.0f);
    for (std::size_t k = 0; k < n; ++k)
        all[std::size_t(r) * n + k] = valueOf(r, k);
    world->allGather(all.data() + std::size_t(r) * n, all.data(), n).wait();
    for (int q = 0; q < P; ++q)
        for (std::size_t k = 0; k < n; ++k)
            ASSERT_EQ(all[std::size_t(q) * n + k], valueOf(q, k)) << "part of rank " << q;
}

TEST(MpiCommunicator, NonBlockingTransfersAroundARing) {
    auto world = testing::mpiSession()->world();
    const int P = world->size(), r = world->rank();
    std::vector<float> out(64, float(r)), in(64, -1.0f);
    std::vector<Request> pending;
    pending.push_back(world->receive(in.data(), in.size(), (r + P - 1) % P));
    pending.push_back(world->send(out.data(), out.size(), (r + 1) % P));
    waitAll(pending);
    EXPECT_EQ(in.front(), float((r + P - 1) % P));
    EXPECT_EQ(in.back(), float((r + P - 1) % P));
}

// Transfers carry no tags: the k-th receive from a peer takes the k-th send to it, even with
// many in flight at once and the receives posted in the same order later (as a pipeline stage
// posts them, one op at a time). 40,000 transfers pass MPI's smallest tag limit (32,767), which
// tags derived from (stage, microbatch) used to wrap at.
TEST(MpiCommunicator, TransfersAreMatchedInPostingOrder) {
    auto world = testing::mpiSession()->world();
    const int P = world->size(), r = world->rank();
    const int next = (r + 1) % P, previous = (r + P - 1) % P;
    constexpr int kTransfers = 40000, kInFlight = 64;
    std::vector<float> sent(kTransfers), got(kInFlight);
    std::vector<Request> sends;
    for (int k = 0; k < kTransfers; ++k) {
        sent[std::size_t(k)] = float(k);
        sends.push_back(world->send(&sent[std::size_t(k)], 1, next));
        if (k % kInFlight == kInFlight - 1) { // receive this batch in order, then go on
            for (int j = 0; j < kInFlight; ++j)
                world->receive(&got[std::size_t(j)], 1, previous).wait();
            for (int j = 0; j < kInFlight; ++j)
                ASSERT_EQ(got[std::size_t(j)], float(k - kInFlight + 1 + j)) << k;
            waitAll(sends);
            sends.clear();
        }
    }
}

// Control values are doubles (a float would lose the 1e-9 below) and travel apart from the data:
// a data receive posted first is not satisfied by a control message from the same peer.
TEST(ControlChannel, SumsDoublesAndKeepsApartFromTheData) {
    auto world = testing::mpiSession()->world();
    auto control = world->controlChannel();
    const int P = world->size(), r = world->rank();
    ASSERT_EQ(control->size(), P);
    ASSERT_EQ(control->rank(), r);
    double values[2] = {1.0 + 1e-9 * r, double(r)};
    control->sum(values, 2);
    EXPECT_DOUBLE_EQ(values[0], P + 1e-9 * P * (P - 1) / 2);
    EXPECT_EQ(values[1], P * (P - 1) / 2);
    EXPECT_TRUE(control->any(r == P - 1));
    EXPECT_FALSE(control->any(false));

    const int next = (r + 1) % P, previous = (r + P - 1) % P;
    float data = -1.0f;
    Request dataIn = world->receive(&data, 1, previous);
    double message = 1e10 + r, received = 0;
    if (r % 2 == 0) { // blocking sends and receives, paired so that the ring cannot deadlock
        control->send(&message, 1, next);
        control->receive(&received, 1, previous);
    } else {
        control->receive(&received, 1, previous);
        control->send(&message, 1, next);
    }
    EXPECT_EQ(received, 1e10 + previous);
    EXPECT_FALSE(dataIn.done()) << "a control message reached a data receive";
    control->total(0.0); // no rank posts its data send before every rank has looked
    const float sent = float(r);
    world->send(&sent, 1, next).wait();
    dataIn.wait();
    EXPECT_EQ(data, float(previous));
}

TEST(ProcessMesh, GroupsFollowMegatronsRankOrder) {
    auto world = testing::mpiSession()->world();
    ASSERT_EQ(world->size(), 4) << "run with mpirun -n 4";
    ParallelConfig p;
    p.dp = 2;
    p.tp = 2;
    p.globalBatch = 2;
    ProcessMesh mesh(p, *world);
    const int r = world->rank();
    EXPECT_EQ(mesh.coordinate().tp, r % 2);
    EXPECT_EQ(mesh.coordinate().dp, r / 2);
    EXPECT_EQ(mesh.group(Axis::TP).size(), 2);
    EXPECT_EQ(mesh.group(Axis::DP).size(), 2);
    EXPECT_EQ(mesh.group(Axis::PP).size(), 1);
    EXPECT_EQ(mesh.group(Axis::TP).rank(), r % 2);
    EXPECT_EQ(mesh.group(Axis::DP).rank(), r / 2);
    // A sum over the TP group adds the two ranks that share a dp index, and nothing else.
    float x = float(r);
    mesh.group(Axis::TP).allReduceSum(&x, 1).wait();
    EXPECT_EQ(x, float(2 * (r / 2) * 2 + 1));
    float y = float(r);
    mesh.group(Axis::DP).allReduceSum(&y, 1).wait();
    EXPECT_EQ(y, float(2 * (r % 2) + 2));
}

TEST(ProcessMesh, AWrongWorldSizeSaysHowToLaunch) {
    auto world = testing::mpiSession()->world();
    ParallelConfig p;
    p.dp = 3;
    try {
        ProcessMesh mesh(p, *world);
        FAIL();
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("--ranks 3"), std::string::npos) << e.what();
    }
}

TEST(GroupRanks, AreStridedByTheFasterAxes) {
    ParallelConfig p;
    p.tp = 2;
    p.cp = 2;
    p.dp = 2;
    p.pp = 2;
    EXPECT_EQ(groupRanks(p, 5, Axis::TP), (std::vector<int>{4, 5}));
    EXPECT_EQ(groupRanks(p, 5, Axis::CP), (std::vector<int>{5, 7}));
    EXPECT_EQ(groupRanks(p, 5, Axis::DP), (std::vector<int>{1, 5}));
    EXPECT_EQ(groupRanks(p, 5, Axis::PP), (std::vector<int>{5, 13}));
}

} // namespace
} // namespace shardscope

int main(int argc, char** argv) {
    return shardscope::testing::runMpiTests(argc, argv);
}
