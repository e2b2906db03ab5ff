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
// A single row; odd sizes; a GPT-2 projection's shape; rows over three of the bias gradient's
// chunks of 512.
const Shape kShapes[] = {{1, 8, 3}, {37, 29, 61}, {256, 768, 2304}, {1100, 16, 33}};

// Both sum in fp32 in other orders; fp32 GEMMs over up to 768 terms.
constexpr float kRelative = 1e-4f, kNearZero = 1e-4f;

// A GEMM's result with an addend (the bias, or the gradient it accumulates into) against the
// CPU's: cuBLASLt's kernels may round the product to the output's type before adding the addend
// (seen on an H200: one bf16 unit of a product near 1 in a result near 0.24), so the backends agree
// to a unit of the product and of the addend, which the sum may cancel, as well as of the result.
// `product` and `addend` hold the CPU's values, element for element with t.
void expectCloseToSum(const Tensor& t, const std::vector<float>& product,
                      const std::vector<float>& addend, const std::string& what) {
    const std::vector<float> cpu = t.cpuValues(), gpu = t.gpuValues();
    const float unit = t.type == DType::F32 ? kRelative : 0x1.0p-7f;
    for (std::size_t i = 0; i < cpu.size(); ++i) {
        const float terms = std::fabs(cpu[i]) + std::fabs(product[i]) + std::fabs(addend[i]);
        ASSERT_NEAR(gpu[i], cpu[i], unit * terms + kNearZero)
            << what << ", element " << i << " of " << cpu.size() << " (product " << product[i]
            << ", addend " << addend[i] << ")";
    }
}

// A tensor one element past an aligned start: every operand of the misaligned runs.
kernels::Ptr shifted(Tensor& t, bool gpu) {
    return (gpu ? t.gpu() : t.cpu()) + 1;
}

TEST(CudaMatmul, ForwardAndBothGradientsMatchTheCpuInEveryTypeMix) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    // Outputs whose rows are not aligned go through bands of rows: whole (one band) and in bands
    // of 8 rows, so every shape of more than 8 rows also runs as several bands.
    cuda::Blas wide, banded(1);
    for (cuda::Blas* each : {&wide, &banded})
        for (const Shape& s : kShapes)
            for (DType in : kTypes)
                for (DType w : kTypes)
                    for (DType out : kTypes)
                        for (bool misaligned : {false, true}) {
                            const std::string what =
                                std::to_string(s.N) + " x " + std::to_string(s.C) + " x " +
                                std::to_string(s.OC) + ", input " + kernels::toString(in) +
                                ", weight " + kernels::toString(w) + ", output " +
                                kernels::toString(out) + (misaligned ? ", misaligned" : "") +
                                (each == &banded ? ", bands of 8 rows" : "");
                            cuda::Blas& blas = *each;
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
                            Tensor product(DType::F32, std::vector<float>(NO + shift));
                            cpu->matmulForward(at(product, false), at(inp, false),
                                               at(weight, false), nullptr, s.N, s.C, s.OC);
                            std::vector<float> biasPerElement(NO + shift);
                            const std::vector<float> biasValues = bias.cpuValues();
                            for (std::size_t i = shift; i < NO + shift; ++i)
                                biasPerElement[i] =
                                    biasValues[shift + (i - shift) % std::size_t(s.OC)];
                            expectCloseToSum(result, product.cpuValues(), biasPerElement,
                                             "forward, " + what);

                            Tensor dout(out, randomValues(NO + shift, 4, 1.0f));
                            Tensor dinp(in, randomValues(NC + shift, 5, 1.0f));
                            for (bool accumulate : {false, true}) {
                                const std::vector<float> before =
                                    accumulate ? dinp.cpuValues() : std::vector<float>(NC + shift);
                                Tensor inputProduct(DType::F32, std::vector<float>(NC + shift));
                                cpu->matmulBackwardInput(at(inputProduct, false), at(dout, false),
                                                         at(weight, false), s.N, s.C, s.OC, false);
                                cpu->matmulBackwardInput(at(dinp, false), at(dout, false),
                                                         at(weight, false), s.N, s.C, s.OC,
                                                         accumulate);
                                blas.matmulBackwardInput(at(dinp, true), at(dout, true),
                                                         at(weight, true), s.N, s.C, s.OC,
                                                         accumulate, nullptr);
                                expectCloseToSum(dinp, inputProduct.cpuValues(), before,
                                                 std::string("input gradient") +
                                                     (accumulate ? " accumulated, " : ", ") + what);
                            }

                            Tensor dweight(w, randomValues(OC_C + shift, 6, 1.0f));
                            Tensor dbias(w, randomValues(std::size_t(s.OC) + shift, 7, 1.0f));
                            const std::vector<float> weightBefore = dweight.cpuValues();
                            Tensor weightProduct(DType::F32, std::vector<float>(OC_C + shift));
                            cpu->matmulBackwardWeightAccumulate(at(weightProduct, false), nullptr,
                                                                at(dout, false), at(inp, false),
                                                                s.N, s.C, s.OC);
                            cpu->matmulBackwardWeightAccumulate(at(dweight, false),
                                                                at(dbias, false), at(dout, false),
                                                                at(inp, false), s.N, s.C, s.OC);
                            blas.matmulBackwardWeightAccumulate(at(dweight, true), at(dbias, true),
                                                                at(dout, true), at(inp, true), s.N,
                                                                s.C, s.OC, nullptr);
                            expectCloseToSum(dweight, weightProduct.cpuValues(), weightBefore,
                                             "weight gradient, " + what);
                            expectClose(dbias, "bias gradient, " + what, kRelative, kNearZero);
                        }
}

TEST(CudaMatmul, NamesItsLibrary) {
    SKIP_WITHOUT_GPU();
    EXPECT_EQ(cuda::Blas().name().rfind("cuBLASLt 1", 0), 0u) << cuda::Blas().name();
}

} // namespace
} // namespace shardscope
