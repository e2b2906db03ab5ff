// The CUDA embeddings against the CPU backend's (checked against PyTorch), whole and
// vocabulary-parallel, forward and backward, in every storage type. Label gpu: skips where there
// is no GPU.
#include "cuda_test_support.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/embedding.h"

#include <climits>
#include <cstdint>
#include <gtest/gtest.h>
#include <random>
#include <string>

namespace shardscope {
namespace {

using kernels::DType;
using namespace testing;

// A table over five of the token gradient's blocks of 64 rows, the last partly filled; tokens
// over three of its rounds of 256, the last partly filled.
constexpr int B = 3, T = 200, C = 33, V = 300;

TEST(CudaEmbedding, WholeAndVocabularyShardsMatchTheCpu) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    std::vector<std::int32_t> tokens(B * T);
    std::mt19937 gen(9);
    for (std::int32_t& t : tokens) // repeats, so rows sharing a token are summed, in every block
        t = std::int32_t((gen() % 5) * 67);
    cuda::DeviceArray deviceTokens(tokens.size() * sizeof(std::int32_t));
    deviceTokens.upload(tokens.data(), tokens.size() * sizeof(std::int32_t));
    const auto* onGpu = static_cast<const std::int32_t*>(deviceTokens.data());
    const std::size_t N = std::size_t(B) * T;

    for (DType act : kTypes)
        for (DType table : kTypes) {
            const std::string what =
                "activations " + kernels::toString(act) + ", table " + kernels::toString(table);
            Tensor wte(table, randomValues(std::size_t(V) * C, 1)),
                wpe(act, randomValues(std::size_t(T) * C, 2));
            Tensor out(act, std::vector<float>(N * C));
            cpu->embeddingForward(out.cpu(), tokens.data(), wte.cpu(), wpe.cpu(), B, T, C);
            cuda::embeddingForward(out.gpu(), onGpu, wte.gpu(), 0, V, wpe.gpu(), B, T, C, nullptr);
            expectClose(out, "forward, " + what);

            Tensor dout(act, randomValues(N * C, 3));
            Tensor dwte(table, randomValues(std::size_t(V) * C, 4)),
                dwpe(act, randomValues(std::size_t(T) * C, 5));
            cpu->embeddingBackwardAccumulate(dwte.cpu(), dwpe.cpu(), dout.cpu(), tokens.data(), B,
                                             T, C);
            // The whole table as CudaOps passes it: a count it does not know, INT_MAX.
            cuda::embeddingBackwardAccumulate(dwte.gpu(), 0, INT_MAX, dwpe.gpu(), dout.gpu(), onGpu,
                                              B, T, C, nullptr);
            expectClose(dwte, "token gradient, " + what);
            expectClose(dwpe, "position gradient, " + what);

            // Rows 60-139 of the table on this rank (tokens 67 and 134, in two blocks): the
            // other tokens give zero rows and no gradient; one rank of the group adds the
            // positions.
            constexpr int start = 60, count = 80;
            Tensor shard(table, randomValues(std::size_t(count) * C, 6));
            for (const bool positions : {true, false}) {
                const kernels::ConstPtr cpuPositions =
                    positions ? kernels::ConstPtr(wpe.cpu()) : kernels::ConstPtr{};
                const kernels::ConstPtr gpuPositions =
                    positions ? kernels::ConstPtr(wpe.gpu()) : kernels::ConstPtr{};
                cpu->embeddingShardForward(out.cpu(), tokens.data(), shard.cpu(), start, count,
                                           cpuPositions, B, T, C);
                cuda::embeddingForward(out.gpu(), onGpu, shard.gpu(), start, count, gpuPositions, B,
                                       T, C, nullptr);
                expectClose(out, "shard forward, " + what);
            }
            Tensor dshard(table, randomValues(std::size_t(count) * C, 7));
            cpu->embeddingShardBackwardAccumulate(dshard.cpu(), start, count, dwpe.cpu(),
                                                  dout.cpu(), tokens.data(), B, T, C);
            cuda::embeddingBackwardAccumulate(dshard.gpu(), start, count, dwpe.gpu(), dout.gpu(),
                                              onGpu, B, T, C, nullptr);
            expectClose(dshard, "shard token gradient, " + what);
            expectClose(dwpe, "shard position gradient, " + what);
        }
}

} // namespace
} // namespace shardscope
