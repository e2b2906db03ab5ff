// The cuBLASLt linear layers against the CPU backend's (checked against PyTorch): forward with
// the bias epilogue, the input gradient overwritten or accumulated, the weight and bias gradients
// accumulated, for every mix of fp32 and bf16 operands and outputs, on shapes no tile divides and
// on operands that start off the 16-byte alignment cuBLASLt prefers. Label gpu.
#include "cuda_test_support.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/matmul.h"

#include <gtest/gtest.h>
#include <string>
#include <vector>

namespace shardscope {
namespace {

using kernels::DType;
using namespace testing;

struct Shape {
    int N, C, OC;
};
// A single row; odd sizes; a GPT-2 projection's shape.
const Shape kShapes[] = {{1, 8, 3}, {37, 29, 61}, {256, 768, 2304}};

// Both sum in fp32 in other orders; fp32 GEMMs over up to 768 terms.
constexpr float kRelative = 1e-4f, kNearZero = 1e-4f;

// A tensor one element past an aligned start: every operand of the misaligned runs.
kernels::Ptr shifted(Tensor& t, bool gpu) {
    return (gpu ? t.gpu() : t.cpu()) + 1;
}

TEST(CudaMatmul, ForwardAndBothGradientsMatchTheCpuInEveryTypeMix) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    cuda::Blas blas;
    for (const Shape& s : kShapes)
        for (DType in : kTypes)
            for (DType w : kTypes)
                for (DType out : kTypes)
                    for (bool misaligned : {false, true}) {
                        const std::string what =
                            std::to_string(s.N) + " x " + std::to_string(s.C) + " x " +
                            std::to_string(s.OC) + ", input " + kernels::toString(in) +
                            ", weight " + kernels::toString(w) + ", output " +
                            kernels::toString(out) + (misaligned ? ", misaligned" : "");
                        const std::size_t shift = misaligned ? 1 : 0;
                        const std::size_t NC = std::size_t(s.N) * std::size_t(s.C),
                                          NO = std::size_t(s.N) * std::size_t(s.OC),
                                          OC_C = std::size_t(s.OC) * std::size_t(s.C);
                        Tensor inp(in, randomValues(NC + shift, 1, 1.0f));
                        Tensor weight(w, randomValues(OC_C + shift, 2, 0.1f));
                        Tensor bias(w, randomValues(std::size_t(s.OC) + shift, 3, 0.1f));
                        auto at = [&](Tensor& t, bool gpu) {
                            return misaligned ? shifted(t, gpu) : (gpu ? t.gpu() : t.cpu());
                        };
                        Tensor result(out, std::vector<float>(NO + shift));
                        cpu->matmulForward(at(result, false), at(inp, false), at(weight, false),
                                           at(bias, false), s.N, s.C, s.OC);
                        blas.matmulForward(at(result, true), at(inp, true), at(weight, true),
                                           at(bias, true), s.N, s.C, s.OC, nullptr);
                        expectClose(result, "forward, " + what, kRelative, kNearZero);

                        Tensor dout(out, randomValues(NO + shift, 4, 1.0f));
                        Tensor dinp(in, randomValues(NC + shift, 5, 1.0f));
                        for (bool accumulate : {false, true}) {
                            cpu->matmulBackwardInput(at(dinp, false), at(dout, false),
                                                     at(weight, false), s.N, s.C, s.OC, accumulate);
                            blas.matmulBackwardInput(at(dinp, true), at(dout, true),
                                                     at(weight, true), s.N, s.C, s.OC, accumulate,
                                                     nullptr);
                            expectClose(dinp,
                                        std::string("input gradient") +
                                            (accumulate ? " accumulated, " : ", ") + what,
                                        kRelative, kNearZero);
                        }

                        Tensor dweight(w, randomValues(OC_C + shift, 6, 1.0f));
                        Tensor dbias(w, randomValues(std::size_t(s.OC) + shift, 7, 1.0f));
                        cpu->matmulBackwardWeightAccumulate(at(dweight, false), at(dbias, false),
                                                            at(dout, false), at(inp, false), s.N,
                                                            s.C, s.OC);
                        blas.matmulBackwardWeightAccumulate(at(dweight, true), at(dbias, true),
                                                            at(dout, true), at(inp, true), s.N, s.C,
                                                            s.OC, nullptr);
                        expectClose(dweight, "weight gradient, " + what, kRelative, kNearZero);
                        expectClose(dbias, "bias gradient, " + what, kRelative, kNearZero);
                    }
}

TEST(CudaMatmul, NamesItsLibrary) {
    SKIP_WITHOUT_GPU();
    EXPECT_EQ(cuda::Blas().name().rfind("cuBLASLt 1", 0), 0u) << cuda::Blas().name();
}

} // namespace
} // namespace shardscope
