// The CUDA causal attention against the CPU backend's (checked against PyTorch), forward and
// backward, with probabilities stored in either type or not stored at all; and the recomputing
// path giving the stored path's bits. Label gpu: skips where there is no GPU.
#include "cuda_test_support.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/attention.h"

#include <cstring>
#include <gtest/gtest.h>
#include <optional>
#include <string>
#include <vector>

namespace shardscope {
namespace {

using kernels::DType;
using namespace testing;

struct Shape {
    int B, T, C, NH;
};
// One token; a head size that is no power of two; rows longer than a block of threads; every
// tiling: heads of 64 channels or fewer, of 128 (Llama's), and of 200 (tiles of 32, channels
// padded to 208 for the tensor cores).
const Shape kShapes[] = {{1, 1, 4, 1},     {2, 37, 48, 3},   {1, 300, 128, 2},
                         {1, 1031, 64, 1}, {1, 130, 256, 2}, {1, 70, 200, 1}};

// The backends sum in other orders (the CPU in GEMMs) and the CPU's exp is an approximation.
constexpr float kRelative = 1e-4f, kNearZero = 1e-5f;

std::vector<unsigned char> bytesOf(const Tensor& t) {
    std::vector<unsigned char> b(t.host.size());
    t.device.download(b.data(), b.size());
    return b;
}

TEST(CudaAttention, ForwardAndBackwardMatchTheCpuWithProbabilitiesStoredOrNot) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    for (const Shape& s : kShapes)
        for (DType act : kTypes)
            for (std::optional<DType> probsType :
                 {std::optional<DType>(DType::F32), std::optional<DType>(DType::BF16),
                  std::optional<DType>()}) {
                const std::string what =
                    "B " + std::to_string(s.B) + " T " + std::to_string(s.T) + " C " +
                    std::to_string(s.C) + " NH " + std::to_string(s.NH) + ", " +
                    kernels::toString(act) + ", probs " +
                    (probsType ? kernels::toString(*probsType) : std::string("recomputed"));
                const std::size_t rows = std::size_t(s.B) * std::size_t(s.T);
                const std::size_t probsCount =
                    std::size_t(s.B) * std::size_t(s.NH) * std::size_t(s.T) * std::size_t(s.T);
                Tensor qkv(act, randomValues(rows * 3 * std::size_t(s.C), 1, 0.7f));
                Tensor out(act, std::vector<float>(rows * std::size_t(s.C)));
                std::optional<Tensor> probs;
                if (probsType)
                    probs.emplace(*probsType, std::vector<float>(probsCount, 9.0f));
                cpu->attentionForward(out.cpu(), probs ? probs->cpu() : nullptr, qkv.cpu(), s.B,
                                      s.T, s.C, s.NH);
                cuda::attentionForward(out.gpu(), probs ? probs->gpu() : nullptr, qkv.gpu(), s.B,
                                       s.T, s.C, s.NH, nullptr);
                expectClose(out, "forward, " + what, kRelative, kNearZero);
                if (probs)
                    expectClose(*probs, "probabilities, " + what, kRelative, kNearZero);

                // Each backward from the same stored probabilities: a probability near a bf16
                // rounding boundary may round either way in the two forwards (checked above to
                // one ulp), and that ulp would be the backward's error, not the kernel's.
                if (probs)
                    probs->device.upload(probs->host.data(), probs->host.size());
                Tensor dout(act, randomValues(rows * std::size_t(s.C), 2));
                Tensor dqkv(act, std::vector<float>(rows * 3 * std::size_t(s.C), 9.0f));
                cuda::DeviceArray workspace(sizeof(float) *
                                            cuda::attentionBackwardWorkspaceFloats(s.B, s.T, s.NH));
                cpu->attentionBackward(dqkv.cpu(), dout.cpu(), qkv.cpu(),
                                       probs ? probs->cpu() : nullptr, s.B, s.T, s.C, s.NH);
                cuda::attentionBackward(dqkv.gpu(), dout.gpu(), qkv.gpu(),
                                        probs ? probs->gpu() : nullptr, s.B, s.T, s.C, s.NH,
                                        static_cast<float*>(workspace.data()), nullptr);
                expectClose(dqkv, "backward, " + what, kRelative, kNearZero);
            }
}

// Activation recomputation must not change a run: the backward that recomputes P gives the bits
// of the one that read fp32 P, and the forward's output does not depend on storing P.
TEST(CudaAttention, RecomputedProbabilitiesGiveTheStoredPathsBits) {
    SKIP_WITHOUT_GPU();
    for (const Shape& s : kShapes)
        for (DType act : kTypes) {
            const std::string what = "T " + std::to_string(s.T) + ", " + kernels::toString(act);
            const std::size_t rows = std::size_t(s.B) * std::size_t(s.T);
            const std::size_t probsCount =
                std::size_t(s.B) * std::size_t(s.NH) * std::size_t(s.T) * std::size_t(s.T);
            Tensor qkv(act, randomValues(rows * 3 * std::size_t(s.C), 3, 0.7f));
            Tensor dout(act, randomValues(rows * std::size_t(s.C), 4));
            Tensor probs(DType::F32, std::vector<float>(probsCount));
            Tensor stored(act, std::vector<float>(rows * std::size_t(s.C))),
                recomputed(act, std::vector<float>(rows * std::size_t(s.C)));
            cuda::attentionForward(stored.gpu(), probs.gpu(), qkv.gpu(), s.B, s.T, s.C, s.NH,
                                   nullptr);
            cuda::attentionForward(recomputed.gpu(), nullptr, qkv.gpu(), s.B, s.T, s.C, s.NH,
                                   nullptr);
            EXPECT_EQ(bytesOf(stored), bytesOf(recomputed)) << "forward, " << what;

            cuda::DeviceArray workspace(sizeof(float) *
                                        cuda::attentionBackwardWorkspaceFloats(s.B, s.T, s.NH));
            Tensor fromStored(act, std::vector<float>(rows * 3 * std::size_t(s.C))),
                fromRecomputed(act, std::vector<float>(rows * 3 * std::size_t(s.C)));
            cuda::attentionBackward(fromStored.gpu(), dout.gpu(), qkv.gpu(), probs.gpu(), s.B, s.T,
                                    s.C, s.NH, static_cast<float*>(workspace.data()), nullptr);
            cuda::attentionBackward(fromRecomputed.gpu(), dout.gpu(), qkv.gpu(), nullptr, s.B, s.T,
                                    s.C, s.NH, static_cast<float*>(workspace.data()), nullptr);
            EXPECT_EQ(bytesOf(fromStored), bytesOf(fromRecomputed)) << "backward, " << what;
        }
}

} // namespace
} // namespace shardscope
