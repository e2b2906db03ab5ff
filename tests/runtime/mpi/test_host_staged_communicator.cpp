// Run under mpirun with 4 ranks (CTest does). HostStagedCommunicator over MPI on a device whose
// memory the host cannot touch (tests/runtime/untouchable_device.h): every collective and
// transfer gives the values MPI gives on host memory, fp32 and bf16, in place and not, in the
// world and in subgroups. A staging that handed MPI a device pointer, or read or wrote one
// directly, would kill the rank.
#include "../untouchable_device.h"
#include "kernels/bf16.h"
#include "mpi_test_main.h"
#include "runtime/host_staged_communicator.h"

#include <gtest/gtest.h>
#include <vector>

namespace shardscope {
namespace {

using kernels::DType;
using testing::UntouchableDevice;

// Halves up to 8: exact in bf16, and so are their sums over four ranks.
float valueOf(int rank, std::size_t i) {
    return float(rank + 1) * 0.5f + float(i % 4);
}

// n values of `type` on the device.
kernels::Ptr upload(UntouchableDevice& device, const std::vector<float>& values, DType type) {
    void* p = device.allocate(values.size() * kernels::sizeOf(type));
    if (type == DType::F32) {
        device.copyToDevice(p, values.data(), values.size() * sizeof(float));
    } else {
        std::vector<std::uint16_t> words(values.size());
        for (std::size_t i = 0; i < values.size(); ++i)
            words[i] = kernels::floatToBf16(values[i]);
        device.copyToDevice(p, words.data(), words.size() * 2);
    }
    return {p, type};
}

std::vector<float> download(UntouchableDevice& device, kernels::ConstPtr p, std::size_t n) {
    std::vector<float> out(n);
    if (p.type == DType::F32) {
        device.copyToHost(out.data(), p.data, n * sizeof(float));
    } else {
        std::vector<std::uint16_t> words(n);
        device.copyToHost(words.data(), p.data, n * 2);
        for (std::size_t i = 0; i < n; ++i)
            out[i] = kernels::bf16ToFloat(words[i]);
    }
    return out;
}

std::vector<float> valuesOf(int rank, std::size_t n) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = valueOf(rank, i);
    return v;
}

TEST(HostStagedCommunicator, CollectivesOnUntouchableMemoryGiveMpisValues) {
    UntouchableDevice device;
    HostStagedCommunicator world(testing::mpiSession()->world(), device);
    const int P = world.size(), r = world.rank();
    const std::size_t n = 37;
    for (DType type : {DType::F32, DType::BF16}) {
        SCOPED_TRACE(kernels::toString(type));
        kernels::Ptr data = upload(device, valuesOf(r, n), type);
        world.allReduceSum(data, n).wait();
        const std::vector<float> sum = download(device, data, n);
        for (std::size_t i = 0; i < n; ++i) {
            float want = 0;
            for (int k = 0; k < P; ++k)
                want += valueOf(k, i);
            ASSERT_EQ(sum[i], want) << i;
        }

        // Out of place and in place (this rank's part already in its slot).
        const kernels::Ptr mine = upload(device, valuesOf(r, n), type);
        const kernels::Ptr all = upload(device, std::vector<float>(n * std::size_t(P), -1), type);
        world.allGather(mine, all, n).wait();
        const kernels::Ptr inPlace =
            upload(device, std::vector<float>(n * std::size_t(P), -1), type);
        device.copy(inPlace + std::size_t(r) * n, mine, n);
        world.allGather(inPlace + std::size_t(r) * n, inPlace, n).wait();
        for (const kernels::Ptr gathered : {all, inPlace}) {
            const std::vector<float> got = download(device, gathered, n * std::size_t(P));
            for (int k = 0; k < P; ++k)
                for (std::size_t i = 0; i < n; ++i)
                    ASSERT_EQ(got[std::size_t(k) * n + i], valueOf(k, i)) << k << " " << i;
        }

        // Rank k keeps the sum of every rank's chunk k.
        const kernels::Ptr whole = upload(device, valuesOf(r, n * std::size_t(P)), type);
        const kernels::Ptr part = upload(device, std::vector<float>(n, -1), type);
        world.reduceScatterSum(whole, part, n).wait();
        const std::vector<float> got = download(device, part, n);
        for (std::size_t i = 0; i < n; ++i) {
            float want = 0;
            for (int k = 0; k < P; ++k)
                want += valueOf(k, std::size_t(r) * n + i);
            ASSERT_EQ(got[i], want) << i;
        }
    }
    float* top = static_cast<float*>(upload(device, valuesOf(r, n), DType::F32).data);
    world.allReduceMax(top, n).wait();
    const std::vector<float> max = download(device, top, n);
    for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(max[i], valueOf(P - 1, i)) << i;
}

// A ring of sends, tested (not waited) to completion as the pipeline polls, two messages to the
// same peer matched in posting order; then a subgroup of the even and one of the odd ranks.
TEST(HostStagedCommunicator, TransfersAndSubgroupsOnUntouchableMemory) {
    UntouchableDevice device;
    HostStagedCommunicator world(testing::mpiSession()->world(), device);
    const int P = world.size(), r = world.rank();
    const int next = (r + 1) % P, previous = (r + P - 1) % P;
    const std::size_t n = 1000;
    const kernels::Ptr first = upload(device, valuesOf(r, n), DType::BF16);
    const kernels::Ptr second = upload(device, valuesOf(r + 4, n), DType::BF16);
    const kernels::Ptr got1 = upload(device, std::vector<float>(n, -1), DType::BF16);
    const kernels::Ptr got2 = upload(device, std::vector<float>(n, -1), DType::BF16);
    std::vector<Request> requests;
    requests.push_back(world.receive(got1, n, previous));
    requests.push_back(world.receive(got2, n, previous));
    requests.push_back(world.send(first, n, next));
    requests.push_back(world.send(second, n, next));
    for (bool all = false; !all;) {
        all = true;
        for (Request& q : requests)
            all = q.done() && all;
    }
    EXPECT_EQ(download(device, got1, n), valuesOf(previous, n));
    EXPECT_EQ(download(device, got2, n), valuesOf(previous + 4, n));

    std::vector<int> parity;
    for (int k = r % 2; k < P; k += 2)
        parity.push_back(k);
    const auto group = world.subgroup(parity, "dp");
    const kernels::Ptr data = upload(device, valuesOf(r, n), DType::F32);
    group->allReduceSum(data, n).wait();
    const std::vector<float> sum = download(device, data, n);
    for (std::size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int k : parity)
            want += valueOf(k, i);
        ASSERT_EQ(sum[i], want) << i;
    }
}

} // namespace
} // namespace shardscope

int main(int argc, char** argv) {
    return shardscope::testing::runMpiTests(argc, argv);
}
