// The CUDA backend's elementwise operators against the CPU backend's (each checked against
// PyTorch), on random inputs of awkward sizes and every storage type. Label gpu: every test skips
// with the CUDA runtime's reason where there is no GPU.
#include "cuda_test_support.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/elementwise.h"

#include <cstring>
#include <gtest/gtest.h>
#include <string>

namespace shardscope {
namespace {

using kernels::DType;
using namespace testing;

TEST(CudaElementwise, ConvertAddAndGeluMatchTheCpuInEveryTypeMix) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    for (std::size_t n : kSizes)
        for (DType out : kTypes)
            for (DType in : kTypes) {
                const std::string mix = kernels::toString(in) + " -> " + kernels::toString(out) +
                                        ", n " + std::to_string(n);
                Tensor a(in, randomValues(n, 1)), b(in, randomValues(n, 2));
                Tensor converted(out, std::vector<float>(n));
                cpu->copy(converted.cpu(), a.cpu(), n);
                cuda::convertCopy(converted.gpu(), a.gpu(), n, nullptr);
                expectClose(converted, "convert " + mix);

                Tensor sum(out, std::vector<float>(n));
                cpu->add(sum.cpu(), a.cpu(), b.cpu(), n);
                cuda::add(sum.gpu(), a.gpu(), b.gpu(), n, nullptr);
                expectClose(sum, "add " + mix);
                cpu->addInPlace(sum.cpu(), b.cpu(), n);
                cuda::addInPlace(sum.gpu(), b.gpu(), n, nullptr);
                expectClose(sum, "addInPlace " + mix);

                Tensor gelu(out, std::vector<float>(n));
                cpu->geluForward(gelu.cpu(), a.cpu(), n);
                cuda::geluForward(gelu.gpu(), a.gpu(), n, nullptr);
                expectClose(gelu, "geluForward " + mix);
                Tensor dinp(out, std::vector<float>(n));
                cpu->geluBackward(dinp.cpu(), a.cpu(), b.cpu(), n);
                cuda::geluBackward(dinp.gpu(), a.gpu(), b.gpu(), n, nullptr);
                expectClose(dinp, "geluBackward " + mix);

                cpu->zero(gelu.cpu(), n);
                cuda::zeroFill(gelu.gpu(), n, nullptr);
                expectClose(gelu, "zero " + mix);
            }
}

// A norm read on every step: the GPU's sum in a fixed order, so the same bits every run.
TEST(CudaElementwise, SumOfSquaresMatchesTheCpuAndRepeatsItsBits) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    for (std::size_t n : kSizes)
        for (DType type : kTypes) {
            Tensor x(type, randomValues(n, 3));
            double expected = 0.5; // added to, not overwritten
            cpu->sumOfSquaresAccumulate(x.cpu(), n, &expected);
            double runs[2];
            for (double& run : runs) {
                const double start = 0.5;
                cuda::DeviceArray sum(sizeof(double));
                sum.upload(&start, sizeof start);
                cuda::sumOfSquaresAccumulate(x.gpu(), n, static_cast<double*>(sum.data()), nullptr);
                sum.download(&run, sizeof run);
            }
            // The two sum in different orders: each rounding costs at most 2^-53 of the sum.
            EXPECT_NEAR(runs[0], expected, 1e-10 * expected) << kernels::toString(type) << n;
            EXPECT_EQ(std::memcmp(&runs[0], &runs[1], sizeof(double)), 0) << "not repeatable";
        }
}

// Three AdamW steps on fp32 master weights from fp32 or bf16 gradients, the bf16 working copy
// rewritten each step, as mixed precision runs it.
TEST(CudaElementwise, AdamWMatchesTheCpuOnMasterWeightsAndTheWorkingCopy) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    for (std::size_t n : kSizes)
        for (DType gradType : kTypes) {
            Tensor param(DType::F32, randomValues(n, 4, 0.02f)), grad(gradType, randomValues(n, 5));
            Tensor m(DType::F32, std::vector<float>(n)), v(DType::F32, std::vector<float>(n));
            Tensor working(DType::BF16, std::vector<float>(n));
            for (int t = 1; t <= 3; ++t) {
                const cuda::AdamStep s{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t};
                cpu->adamwUpdate(static_cast<float*>(param.cpu().data), grad.cpu(),
                                 static_cast<float*>(m.cpu().data),
                                 static_cast<float*>(v.cpu().data), n, s.lr, s.beta1, s.beta2,
                                 s.eps, s.weightDecay, s.gradScale, t, working.cpu());
                cuda::adamwUpdate(static_cast<float*>(param.gpu().data), grad.gpu(),
                                  static_cast<float*>(m.gpu().data),
                                  static_cast<float*>(v.gpu().data), n, s, working.gpu(), nullptr);
            }
            const std::string what =
                kernels::toString(gradType) + " gradients, n " + std::to_string(n);
            expectClose(param, "master weights, " + what);
            expectClose(m, "first moment, " + what);
            expectClose(v, "second moment, " + what);
            expectClose(working, "bf16 working copy, " + what);
        }
}

} // namespace
} // namespace shardscope
