// The CUDA RMSNorm, rotary embedding and SwiGLU against the CPU backend's (checked against their
// definitions and finite differences in test_cpu_ops), forward and backward, in every storage
// type. Label gpu: skips where there is no GPU.
#include "cuda_test_support.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/llama_ops.h"
#include "runtime/rotary.h"

#include <gtest/gtest.h>
#include <string>
#include <utility>

namespace shardscope {
namespace {

using kernels::DType;
using namespace testing;

constexpr float kSummed = 1e-4f, kNearZero = 1e-5f;

float* floats(Tensor& t, bool gpu) {
    return static_cast<float*>((gpu ? t.gpu() : t.cpu()).data);
}

// Rows x channels: one channel, channels that fill no block evenly, Llama 3 8B's 4096, and
// more rows than one weight-gradient chunk.
TEST(CudaLlamaOps, RmsNormMatchesTheCpu) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    for (const auto& [N, C] : {std::pair{1, 1}, {5, 33}, {8, 4096}, {1100, 40}})
        for (DType act : kTypes)
            for (DType weights : kTypes) {
                const std::string what = "N " + std::to_string(N) + " C " + std::to_string(C) +
                                         ", " + kernels::toString(act) + " / " +
                                         kernels::toString(weights);
                const std::size_t NC = std::size_t(N) * std::size_t(C);
                Tensor inp(act, randomValues(NC, 1)), dout(act, randomValues(NC, 2));
                Tensor weight(weights, randomValues(std::size_t(C), 3, 0.5f));
                Tensor out(act, std::vector<float>(NC)), rstd(DType::F32, std::vector<float>(N));
                cpu->rmsNormForward(out.cpu(), floats(rstd, false), inp.cpu(), weight.cpu(), N, C,
                                    1e-5f);
                cuda::rmsNormForward(out.gpu(), floats(rstd, true), inp.gpu(), weight.gpu(), N, C,
                                     1e-5f, nullptr);
                expectClose(out, "forward, " + what, kSummed, kNearZero);
                expectClose(rstd, "rstd, " + what, kSummed, kNearZero);
                Tensor dinp(act, randomValues(NC, 5)),
                    dweight(weights, randomValues(std::size_t(C), 6));
                cpu->rmsNormBackwardAccumulate(dinp.cpu(), dweight.cpu(), dout.cpu(), inp.cpu(),
                                               weight.cpu(), floats(rstd, false), N, C);
                cuda::rmsNormBackwardAccumulate(dinp.gpu(), dweight.gpu(), dout.gpu(), inp.gpu(),
                                                weight.gpu(), floats(rstd, true), N, C, nullptr);
                expectClose(dinp, "input gradient, " + what, kSummed, kNearZero);
                expectClose(dweight, "weight gradient, " + what, kSummed, kNearZero);
            }
}

// Llama 3 8B's query heads in a fused QKV row (32 + 2 x 8 heads of 128) turned in place, and
// turned back.
TEST(CudaLlamaOps, RotaryEmbeddingMatchesTheCpu) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    const int B = 2, T = 33, heads = 40, d = 128, stride = 48 * d;
    const RotaryTables tables = rotaryTables(500000, d, T, RopeScaling{"llama3", 8, 1, 4, 8192});
    Tensor cos(DType::F32, tables.cos), sin(DType::F32, tables.sin);
    for (DType type : kTypes)
        for (bool inverse : {false, true}) {
            Tensor x(type, randomValues(std::size_t(B) * T * stride, 7));
            cpu->rotaryEmbedding(x.cpu(), floats(cos, false), floats(sin, false), B, T, heads, d,
                                 stride, inverse);
            cuda::rotaryEmbedding(x.gpu(), floats(cos, true), floats(sin, true), B, T, heads, d,
                                  stride, inverse, nullptr);
            expectClose(x, kernels::toString(type) + (inverse ? ", inverse" : ", forward"));
        }
}

TEST(CudaLlamaOps, SwigluMatchesTheCpu) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    for (const auto& [N, F] : {std::pair{1, 1}, {7, 257}, {64, 14336}})
        for (DType type : kTypes) {
            const std::string what = "N " + std::to_string(N) + " F " + std::to_string(F) + ", " +
                                     kernels::toString(type);
            const std::size_t NF = std::size_t(N) * std::size_t(F);
            Tensor gateUp(type, randomValues(2 * NF, 8)), dout(type, randomValues(NF, 9));
            Tensor out(type, std::vector<float>(NF)), dgateUp(type, std::vector<float>(2 * NF));
            cpu->swigluForward(out.cpu(), gateUp.cpu(), N, F);
            cuda::swigluForward(out.gpu(), gateUp.gpu(), N, F, nullptr);
            expectClose(out, "forward, " + what, 1e-5f, kNearZero);
            cpu->swigluBackward(dgateUp.cpu(), gateUp.cpu(), dout.cpu(), N, F);
            cuda::swigluBackward(dgateUp.gpu(), gateUp.gpu(), dout.gpu(), N, F, nullptr);
            expectClose(dgateUp, "backward, " + what, 1e-5f, kNearZero);
        }
}

// Grouped-query attention's kv heads expanded and their gradients summed back: Llama 3 8B's 32
// heads over 8 kv heads of 128, heads that group by 3, and one of everything.
TEST(CudaLlamaOps, KvHeadExpansionAndGradientSumsMatchTheCpu) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    struct Shape {
        int N, H, KV, d;
    };
    for (const Shape& s : {Shape{1, 1, 1, 1}, Shape{5, 6, 2, 5}, Shape{7, 32, 8, 128}})
        for (DType type : kTypes) {
            const std::string what = "N " + std::to_string(s.N) + " heads " + std::to_string(s.H) +
                                     "/" + std::to_string(s.KV) + ", " + kernels::toString(type);
            const std::size_t compact = std::size_t(s.N) * (s.H + 2 * s.KV) * s.d,
                              wide = std::size_t(s.N) * 3 * s.H * s.d;
            Tensor qkv(type, randomValues(compact, 10)), expanded(type, std::vector<float>(wide));
            cpu->expandKvHeads(expanded.cpu(), qkv.cpu(), s.N, s.H, s.KV, s.d);
            cuda::expandKvHeads(expanded.gpu(), qkv.gpu(), s.N, s.H, s.KV, s.d, nullptr);
            expectClose(expanded, "expanded, " + what, 0.0f, 0.0f);
            Tensor dexpanded(type, randomValues(wide, 11)), dqkv(type, std::vector<float>(compact));
            cpu->sumKvHeadGradients(dqkv.cpu(), dexpanded.cpu(), s.N, s.H, s.KV, s.d);
            cuda::sumKvHeadGradients(dqkv.gpu(), dexpanded.gpu(), s.N, s.H, s.KV, s.d, nullptr);
            expectClose(dqkv, "gradient sums, " + what);
        }
}

} // namespace
} // namespace shardscope
