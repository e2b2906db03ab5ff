// The CUDA loss against the CPU backend's (checked against PyTorch): the fused whole-vocabulary
// softmax cross-entropy and the vocabulary-parallel pieces, on vocabularies that fill no block
// evenly, with the loss repeated bit for bit. Label gpu: skips where there is no GPU.
#include "cuda_test_support.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cross_entropy.h"

#include <cstdint>
#include <cstring>
#include <gtest/gtest.h>
#include <string>
#include <utility>
#include <vector>

namespace shardscope {
namespace {

using kernels::DType;
using namespace testing;

// Rows x vocabulary: one class, fewer classes than threads, GPT-2's vocabulary.
const std::pair<int, int> kShapes[] = {{1, 1}, {7, 300}, {33, 50257}};

// Targets uploaded once, read by both backends.
struct Targets {
    std::vector<std::int32_t> host;
    cuda::DeviceArray device;
    Targets(int N, int V, int vocabStart = 0)
        : host(std::size_t(N)), device(std::size_t(N) * sizeof(std::int32_t)) {
        for (int n = 0; n < N; ++n) // spread over the whole vocabulary and past a shard's ends
            host[std::size_t(n)] = vocabStart + (n * 7919) % V;
        device.upload(host.data(), device.bytes());
    }
    const std::int32_t* gpu() const { return static_cast<const std::int32_t*>(device.data()); }
};

double deviceDouble(const cuda::DeviceArray& a) {
    double x;
    a.download(&x, sizeof x);
    return x;
}

float* floats(Tensor& t, bool gpu) {
    return static_cast<float*>((gpu ? t.gpu() : t.cpu()).data);
}

TEST(CudaCrossEntropy, FusedLossAndGradientMatchTheCpuAndRepeatTheirBits) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    for (const auto& [N, V] : kShapes) {
        const std::string what = "N " + std::to_string(N) + " V " + std::to_string(V);
        const std::vector<float> values = randomValues(std::size_t(N) * std::size_t(V), 1, 3.0f);
        const Targets targets(N, V);
        const float gradScale = 1.0f / float(N);
        Tensor logits(DType::F32, values);
        double expected = 0.25; // added to, not overwritten
        cpu->crossEntropyForwardBackward(floats(logits, false), targets.host.data(), N, V,
                                         gradScale, &expected);
        // Twice on the GPU from the same logits: the first run's gradient is compared.
        Tensor repeat(DType::F32, values);
        double losses[2];
        for (Tensor* run : {&logits, &repeat}) {
            cuda::DeviceArray sum(sizeof(double)), rowLoss(sizeof(double) * std::size_t(N));
            const double start = 0.25;
            sum.upload(&start, sizeof start);
            cuda::crossEntropyForwardBackward(floats(*run, true), targets.gpu(), N, V, gradScale,
                                              static_cast<double*>(sum.data()),
                                              static_cast<double*>(rowLoss.data()), nullptr);
            losses[run == &logits ? 0 : 1] = deviceDouble(sum);
        }
        // exp and log differ in their last bits between the CPU's approximations and CUDA's.
        EXPECT_NEAR(losses[0], expected, 1e-5 * std::abs(expected)) << what;
        EXPECT_EQ(std::memcmp(&losses[0], &losses[1], sizeof(double)), 0) << what;
        expectClose(logits, "gradient, " + what, 1e-4f, 1e-8f);
    }
}

// Two shards of the vocabulary, each with the other's target rows out of its range.
TEST(CudaCrossEntropy, VocabularyShardPiecesMatchTheCpu) {
    SKIP_WITHOUT_GPU();
    auto cpu = kernels::makeCpuOps(1);
    for (const auto& [N, V] : kShapes)
        for (int vocabStart : {0, V / 2 + 1}) {
            const std::string what = "N " + std::to_string(N) + " V " + std::to_string(V) +
                                     " from " + std::to_string(vocabStart);
            const Targets targets(N, 2 * V); // half of them outside [vocabStart, vocabStart + V)
            Tensor logits(DType::F32, randomValues(std::size_t(N) * std::size_t(V), 2, 3.0f));
            Tensor max(DType::F32, std::vector<float>(std::size_t(N)));
            cpu->rowMax(floats(logits, false), N, V, floats(max, false));
            cuda::rowMax(floats(logits, true), N, V, floats(max, true), nullptr);
            expectClose(max, "row max, " + what, 0.0f, 0.0f);

            Tensor sumExp(DType::F32, std::vector<float>(std::size_t(N)));
            Tensor targetLogit(DType::F32, std::vector<float>(std::size_t(N), 5.0f));
            cpu->softmaxShardSums(floats(logits, false), floats(max, false), targets.host.data(), N,
                                  V, vocabStart, floats(sumExp, false), floats(targetLogit, false));
            cuda::softmaxShardSums(floats(logits, true), floats(max, true), targets.gpu(), N, V,
                                   vocabStart, floats(sumExp, true), floats(targetLogit, true),
                                   nullptr);
            expectClose(sumExp, "sum of exponentials, " + what, 3e-5f, 1e-7f);
            expectClose(targetLogit, "target logit, " + what, 0.0f, 0.0f);

            double expected = 0.0;
            cpu->crossEntropyShardLoss(floats(max, false), floats(sumExp, false),
                                       floats(targetLogit, false), N, &expected);
            cuda::DeviceArray sum(sizeof(double));
            const double zero = 0.0;
            sum.upload(&zero, sizeof zero);
            cuda::crossEntropyShardLoss(floats(max, true), floats(sumExp, true),
                                        floats(targetLogit, true), N,
                                        static_cast<double*>(sum.data()), nullptr);
            EXPECT_NEAR(deviceDouble(sum), expected, 1e-5 * std::abs(expected) + 1e-9) << what;

            const float gradScale = 0.5f;
            cpu->crossEntropyShardBackward(floats(logits, false), floats(max, false),
                                           floats(sumExp, false), targets.host.data(), N, V,
                                           vocabStart, gradScale);
            cuda::crossEntropyShardBackward(floats(logits, true), floats(max, true),
                                            floats(sumExp, true), targets.gpu(), N, V, vocabStart,
                                            gradScale, nullptr);
            expectClose(logits, "shard gradient, " + what, 1e-4f, 1e-8f);
        }
}

} // namespace
} // namespace shardscope
