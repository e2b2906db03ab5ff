// The CUDA layer norm against the CPU backend's (checked against PyTorch), forward and backward,
// for activations and weights in every storage type. Label gpu: skips where there is no GPU.
#include "cuda_test_support.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/layernorm.h"

#include <gtest/gtest.h>
#include <string>
#include <utility>

namespace shardscope {
namespace {

using kernels::DType;
using namespace testing;

// Rows x channels: one channel (zero variance), channels that fill no block evenly, GPT-2's 768.
// The last spans three of the weight gradient's row chunks of 512, the third partly filled.
const std::pair<int, int> kShapes[] = {{1, 1}, {5, 33}, {64, 768}, {3, 2049}, {1100, 40}};

// Means and variances are summed in other orders by the two backends: 1e-4 of each value.
constexpr float kSummed = 1e-4f, kNearZero = 1e-5f;

TEST(CudaLayerNorm, ForwardAndBackwardMatchTheCpu) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    for (const auto& [N, C] : kShapes)
        for (DType act : kTypes)
            for (DType weights : kTypes) {
                const std::string what = "N " + std::to_string(N) + " C " + std::to_string(C) +
                                         ", activations " + kernels::toString(act) + ", weights " +
                                         kernels::toString(weights);
                const std::size_t NC = std::size_t(N) * std::size_t(C);
                Tensor inp(act, randomValues(NC, 1)), dout(act, randomValues(NC, 2));
                Tensor weight(weights, randomValues(std::size_t(C), 3, 0.5f)),
                    bias(weights, randomValues(std::size_t(C), 4, 0.5f));
                Tensor out(act, std::vector<float>(NC)), mean(DType::F32, std::vector<float>(N)),
                    rstd(DType::F32, std::vector<float>(N));
                auto f = [](Tensor& t, bool gpu) {
                    return static_cast<float*>((gpu ? t.gpu() : t.cpu()).data);
                };
                cpu->layerNormForward(out.cpu(), f(mean, false), f(rstd, false), inp.cpu(),
                                      weight.cpu(), bias.cpu(), N, C);
                cuda::layerNormForward(out.gpu(), f(mean, true), f(rstd, true), inp.gpu(),
                                       weight.gpu(), bias.gpu(), N, C, nullptr);
                expectClose(out, "forward, " + what, kSummed, kNearZero);
                expectClose(mean, "mean, " + what, kSummed, kNearZero);
                expectClose(rstd, "rstd, " + what, kSummed, kNearZero);

                // Accumulates onto what is there.
                Tensor dinp(act, randomValues(NC, 5)),
                    dweight(weights, randomValues(std::size_t(C), 6)),
                    dbias(weights, randomValues(std::size_t(C), 7));
                cpu->layerNormBackwardAccumulate(dinp.cpu(), dweight.cpu(), dbias.cpu(), dout.cpu(),
                                                 inp.cpu(), weight.cpu(), f(mean, false),
                                                 f(rstd, false), N, C);
                cuda::layerNormBackwardAccumulate(dinp.gpu(), dweight.gpu(), dbias.gpu(),
                                                  dout.gpu(), inp.gpu(), weight.gpu(),
                                                  f(mean, true), f(rstd, true), N, C, nullptr);
                expectClose(dinp, "input gradient, " + what, kSummed, kNearZero);
                expectClose(dweight, "weight gradient, " + what, kSummed, kNearZero);
                expectClose(dbias, "bias gradient, " + what, kSummed, kNearZero);
            }
}

} // namespace
} // namespace shardscope
