// The CUDA ring attention operators (one block of keys at a time, merged into a running softmax)
// against the CPU backend's, in every storage type: grouped-query heads (4 over 2), query and key
// positions that are not contiguous, blocks in which some queries see no key, two blocks merged
// in either order, the finish (lse aliasing the running maximum too), delta, the gradients, and
// copyRows. Label gpu: skips where there is no GPU.
#include "cuda_test_support.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/ring_attention.h"

#include <cmath>
#include <cstdint>
#include <gtest/gtest.h>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace shardscope {
namespace {

using kernels::DType;
using namespace testing;

constexpr float kSummed = 1e-4f, kNearZero = 1e-5f;
constexpr float kInfinity = std::numeric_limits<float>::infinity();

float* floats(Tensor& t, bool gpu) {
    return static_cast<float*>((gpu ? t.gpu() : t.cpu()).data);
}

// expectClose, where an infinity (the maximum or lse of a row no key reached) must be the same.
void expectMatch(const Tensor& t, const std::string& what, float relative = kSummed,
                 float absolute = kNearZero) {
    const std::vector<float> cpu = t.cpuValues(), gpu = t.gpuValues();
    const float r = t.type == DType::F32 ? relative : std::max(relative, 0x1.0p-7f);
    for (std::size_t i = 0; i < cpu.size(); ++i)
        if (std::isinf(cpu[i]))
            ASSERT_EQ(gpu[i], cpu[i]) << what << ", element " << i << " of " << cpu.size();
        else
            ASSERT_NEAR(gpu[i], cpu[i], r * std::fabs(cpu[i]) + absolute)
                << what << ", element " << i << " of " << cpu.size();
}

// Row positions, on the host for the CPU and on the GPU.
struct Positions {
    std::vector<std::int32_t> host;
    cuda::DeviceArray device;
    explicit Positions(std::vector<std::int32_t> p)
        : host(std::move(p)), device(host.size() * sizeof(std::int32_t)) {
        device.upload(host.data(), host.size() * sizeof(std::int32_t));
    }
    const std::int32_t* at(bool gpu) const {
        return gpu ? static_cast<const std::int32_t*>(device.data()) : host.data();
    }
};

// Batch 2, 4 query heads over 2 key and value heads, 4 rows a block. The queries sit at
// positions 0, 1, 6, 7 of their sequence; block "own" holds the keys at the same positions (the
// causal diagonal), block "middle" those at 2 to 5: queries 0 and 1 see none of them, queries 2
// and 3 all of them.
constexpr int B = 2, Tq = 4, Tk = 4, NH = 4, KV = 2;
const std::vector<std::int32_t> kQueryPositions{0, 1, 6, 7}, kOwnPositions{0, 1, 6, 7},
    kMiddlePositions{2, 3, 4, 5};
// A head size below a warp, two warps' worth, and more than one pass of a lane's registers.
const int kHeadSizes[] = {7, 64, 300};

// Fused rows [B, T, (NH + 2 KV) hd], queries first, then keys, then values (as a QKV projection
// writes them): the strided views the operators read.
struct Fused {
    int hd, stride;
    Tensor rows;
    Fused(DType type, int T, int headSize, unsigned seed)
        : hd(headSize), stride((NH + 2 * KV) * headSize),
          rows(type,
               randomValues(std::size_t(B) * std::size_t(T) * std::size_t(stride), seed, 1.0f)) {}
    kernels::ConstPtr queries(bool gpu) { return gpu ? rows.gpu() : rows.cpu(); }
    kernels::ConstPtr keys(bool gpu) { return queries(gpu) + std::size_t(NH) * std::size_t(hd); }
    kernels::ConstPtr values(bool gpu) {
        return queries(gpu) + std::size_t(NH + KV) * std::size_t(hd);
    }
};

// The running softmax of the queries: acc, rowMax, rowSum at their starting values.
struct Running {
    Tensor acc, max, sum;
    explicit Running(int hd)
        : acc(DType::F32, std::vector<float>(std::size_t(B) * Tq * NH * std::size_t(hd))),
          max(DType::F32, std::vector<float>(std::size_t(B) * NH * Tq, -kInfinity)),
          sum(DType::F32, std::vector<float>(std::size_t(B) * NH * Tq)) {}
};

void forwardBoth(kernels::Ops& cpu, Running& run, Fused& q, Fused& kv, const Positions& qPos,
                 const Positions& kPos) {
    cpu.attentionBlockForward(floats(run.acc, false), floats(run.max, false),
                              floats(run.sum, false), q.queries(false), q.stride, kv.keys(false),
                              kv.values(false), kv.stride, qPos.at(false), kPos.at(false), B, Tq,
                              Tk, NH, KV, q.hd);
    cuda::attentionBlockForward(floats(run.acc, true), floats(run.max, true), floats(run.sum, true),
                                q.queries(true), q.stride, kv.keys(true), kv.values(true),
                                kv.stride, qPos.at(true), kPos.at(true), B, Tq, Tk, NH, KV, q.hd,
                                nullptr);
}

void finishBoth(kernels::Ops& cpu, Tensor& out, Tensor& lse, Running& run, int hd) {
    cpu.attentionBlockFinish(out.cpu(), floats(lse, false), floats(run.acc, false),
                             floats(run.max, false), floats(run.sum, false), B, Tq, NH, hd);
    cuda::attentionBlockFinish(out.gpu(), floats(lse, true), floats(run.acc, true),
                               floats(run.max, true), floats(run.sum, true), B, Tq, NH, hd,
                               nullptr);
}

// Two blocks merged in either order, each compared after its merge, and the finish after each:
// after the middle block alone, queries 0 and 1 have seen no key (out 0, lse -infinity).
TEST(CudaRingAttention, ForwardBlocksMergeAndFinishAsTheCpu) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    const Positions qPos(kQueryPositions), own(kOwnPositions), middle(kMiddlePositions);
    for (int hd : kHeadSizes)
        for (DType type : kTypes)
            for (bool ownFirst : {true, false}) {
                const std::string what = "hd " + std::to_string(hd) + ", " +
                                         kernels::toString(type) +
                                         (ownFirst ? ", own block first" : ", middle block first");
                Fused q(type, Tq, hd, 1), ownKv(type, Tk, hd, 2), middleKv(type, Tk, hd, 3);
                Running run(hd);
                const std::size_t rows = std::size_t(B) * Tq * NH * std::size_t(hd);
                Tensor out(type, std::vector<float>(rows)),
                    lse(DType::F32, std::vector<float>(std::size_t(B) * NH * Tq));
                for (int step = 0; step < 2; ++step) {
                    const bool isOwn = (step == 0) == ownFirst;
                    const std::string block =
                        what + (isOwn ? ", own block" : ", middle block") + " merged";
                    forwardBoth(*cpu, run, q, isOwn ? ownKv : middleKv, qPos, isOwn ? own : middle);
                    expectMatch(run.acc, "acc, " + block, kSummed, kNearZero);
                    expectMatch(run.max, "rowMax, " + block, kSummed, kNearZero);
                    expectMatch(run.sum, "rowSum, " + block, kSummed, kNearZero);
                    finishBoth(*cpu, out, lse, run, hd);
                    expectMatch(out, "out, " + block, kSummed, kNearZero);
                    expectMatch(lse, "lse, " + block, kSummed, kNearZero);
                }
                // lse written over the running maximum it is computed from.
                cpu->attentionBlockFinish(out.cpu(), floats(run.max, false), floats(run.acc, false),
                                          floats(run.max, false), floats(run.sum, false), B, Tq, NH,
                                          hd);
                cuda::attentionBlockFinish(out.gpu(), floats(run.max, true), floats(run.acc, true),
                                           floats(run.max, true), floats(run.sum, true), B, Tq, NH,
                                           hd, nullptr);
                expectMatch(out, "out, lse aliasing rowMax, " + what, kSummed, kNearZero);
                expectMatch(run.max, "lse in rowMax, " + what, kSummed, kNearZero);
            }
}

TEST(CudaRingAttention, DeltaMatchesTheCpu) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    for (int hd : kHeadSizes)
        for (DType doutType : kTypes)
            for (DType outType : kTypes) {
                const std::string what = "hd " + std::to_string(hd) + ", dout " +
                                         kernels::toString(doutType) + ", out " +
                                         kernels::toString(outType);
                const std::size_t rows = std::size_t(B) * Tq * NH * std::size_t(hd);
                Tensor dout(doutType, randomValues(rows, 4)), out(outType, randomValues(rows, 5));
                Tensor delta(DType::F32, randomValues(std::size_t(B) * NH * Tq, 6));
                cpu->attentionBlockDelta(floats(delta, false), dout.cpu(), out.cpu(), B, Tq, NH,
                                         hd);
                cuda::attentionBlockDelta(floats(delta, true), dout.gpu(), out.gpu(), B, Tq, NH, hd,
                                          nullptr);
                expectMatch(delta, what, kSummed, kNearZero);
            }
}

// The gradients of both blocks, added to gradients already there: dq summed over the two blocks,
// dk and dv into rows of a fused [B, Tk, 2 KV hd] gradient (keys, then values). Both backends
// read the same lse and delta (the CPU's forward's), so each operator is compared alone.
TEST(CudaRingAttention, BackwardMatchesTheCpu) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    const Positions qPos(kQueryPositions), own(kOwnPositions), middle(kMiddlePositions);
    for (int hd : kHeadSizes)
        for (DType type : kTypes) {
            const std::string what = "hd " + std::to_string(hd) + ", " + kernels::toString(type);
            Fused q(type, Tq, hd, 7), ownKv(type, Tk, hd, 8), middleKv(type, Tk, hd, 9);
            const std::size_t rows = std::size_t(B) * Tq * NH * std::size_t(hd),
                              stats = std::size_t(B) * NH * Tq;
            // The whole softmax's lse and delta, from the CPU.
            Running run(hd);
            Tensor out(type, std::vector<float>(rows)), lse0(DType::F32, std::vector<float>(stats));
            Tensor dout(type, randomValues(rows, 10, 1.0f));
            cpu->attentionBlockForward(floats(run.acc, false), floats(run.max, false),
                                       floats(run.sum, false), q.queries(false), q.stride,
                                       ownKv.keys(false), ownKv.values(false), ownKv.stride,
                                       qPos.at(false), own.at(false), B, Tq, Tk, NH, KV, hd);
            cpu->attentionBlockForward(
                floats(run.acc, false), floats(run.max, false), floats(run.sum, false),
                q.queries(false), q.stride, middleKv.keys(false), middleKv.values(false),
                middleKv.stride, qPos.at(false), middle.at(false), B, Tq, Tk, NH, KV, hd);
            cpu->attentionBlockFinish(out.cpu(), floats(lse0, false), floats(run.acc, false),
                                      floats(run.max, false), floats(run.sum, false), B, Tq, NH,
                                      hd);
            std::vector<float> deltaValues(stats);
            cpu->attentionBlockDelta(deltaValues.data(), dout.cpu(), out.cpu(), B, Tq, NH, hd);
            Tensor lse(DType::F32, lse0.cpuValues()), delta(DType::F32, deltaValues);

            const int dkvStride = 2 * KV * hd;
            const std::size_t kvRows = std::size_t(B) * Tk * std::size_t(dkvStride);
            Tensor dq(DType::F32, randomValues(rows, 11, 0.5f));
            Tensor dOwn(DType::F32, randomValues(kvRows, 12, 0.5f)),
                dMiddle(DType::F32, randomValues(kvRows, 13, 0.5f));
            for (bool isOwn : {true, false}) {
                Fused& kv = isOwn ? ownKv : middleKv;
                Tensor& dkv = isOwn ? dOwn : dMiddle;
                const Positions& kPos = isOwn ? own : middle;
                const std::size_t valuesAt = std::size_t(KV) * std::size_t(hd);
                cpu->attentionBlockBackward(
                    floats(dq, false), floats(dkv, false), floats(dkv, false) + valuesAt, dkvStride,
                    dout.cpu(), floats(lse, false), floats(delta, false), q.queries(false),
                    q.stride, kv.keys(false), kv.values(false), kv.stride, qPos.at(false),
                    kPos.at(false), B, Tq, Tk, NH, KV, hd);
                cuda::attentionBlockBackward(
                    floats(dq, true), floats(dkv, true), floats(dkv, true) + valuesAt, dkvStride,
                    dout.gpu(), floats(lse, true), floats(delta, true), q.queries(true), q.stride,
                    kv.keys(true), kv.values(true), kv.stride, qPos.at(true), kPos.at(true), B, Tq,
                    Tk, NH, KV, hd, nullptr);
                const std::string block = what + (isOwn ? ", own block" : ", middle block");
                expectMatch(dq, "dq, " + block, kSummed, kNearZero);
                expectMatch(dkv, "dk and dv, " + block, kSummed, kNearZero);
            }
        }
}

// Rows of 37 elements between strides of 50 and 41, every pair of types: the copied elements
// exactly as the CPU's copy converts them, the gaps between rows untouched.
TEST(CudaRingAttention, CopyRowsMatchesTheCpu) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    const int rows = 5, cols = 37, srcStride = 50, dstStride = 41;
    for (DType from : kTypes)
        for (DType to : kTypes) {
            const std::string what = kernels::toString(from) + " to " + kernels::toString(to);
            Tensor src(from, randomValues(std::size_t(rows) * srcStride, 14));
            Tensor dst(to, randomValues(std::size_t(rows) * dstStride, 15));
            cpu->copyRows(dst.cpu(), dstStride, src.cpu(), srcStride, rows, cols);
            cuda::copyRows(dst.gpu(), dstStride, src.gpu(), srcStride, rows, cols, nullptr);
            EXPECT_EQ(dst.gpuValues(), dst.cpuValues()) << what;
        }
}

} // namespace
} // namespace shardscope
