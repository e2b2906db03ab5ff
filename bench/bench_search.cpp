// Full strategy search for Llama 3 405B on 16,384 H100s (target: under 1 s on one core), and a
// single estimate. Results and the command are in docs/benchmarks.md.
#include "core/presets.h"
#include "plan/search.h"

#include <benchmark/benchmark.h>

namespace {

using namespace shardscope;

PlanInputs llama405bInputs() {
    PlanInputs in;
    in.model = findModelPreset("llama3-405b");
    in.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 2048);
    in.parallel.globalBatch = 2048; // 16M tokens of 8192, as in Llama 3's Table 4
    in.parallel.tp = 8;
    in.parallel.pp = 16;
    in.parallel.dp = 128;
    in.parallel.zero = 1;
    in.parallel.sequenceParallel = true;
    in.train.trainTokens = 15.6e12;
    return in;
}

// Runs the search once per iteration and reports how many layouts it covered.
void searchEachIteration(benchmark::State& state, const PlanInputs& in, const SearchSpace& space) {
    long long evaluated = 0, considered = 0;
    for (auto _ : state) {
        const SearchResult r = searchLayouts(in.model, in.cluster, in.parallel, in.train, in.assume,
                                             space, SearchOptions{});
        evaluated = r.evaluated;
        considered = r.considered;
        benchmark::DoNotOptimize(r.top.data());
    }
    state.counters["layouts_evaluated"] = double(evaluated);
    state.counters["layouts_considered"] = double(considered);
}

// Argument 1: the whole space; 0: without hybrid sharding (the space before it), side by side.
void BM_FullSearchLlama405B(benchmark::State& state) {
    SearchSpace space;
    space.tryHybridShard = state.range(0) != 0;
    searchEachIteration(state, llama405bInputs(), space);
}
BENCHMARK(BM_FullSearchLlama405B)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

// A mixture of experts, where the search also tries expert parallelism: Mixtral 8x7B on 128
// nodes of 8 H100s (Argument 1: every ep dividing the 8 experts and dp x cp; 0: ep 1 only).
void BM_FullSearchMixtral(benchmark::State& state) {
    PlanInputs in;
    in.model.name = "Mixtral 8x7B";
    in.model.layers = 32;
    in.model.hidden = 4096;
    in.model.heads = 32;
    in.model.kvHeads = 8;
    in.model.ffnHidden = 14336;
    in.model.vocab = 32000;
    in.model.seqLen = in.model.maxPositions = 4096;
    in.model.activation = Activation::SwiGlu;
    in.model.moe.experts = 8;
    in.model.moe.topK = 2;
    in.cluster = makeCluster(findGpuPreset("h100-sxm"), 8, 128);
    in.parallel.globalBatch = 1024;
    SearchSpace space;
    space.tryExpertParallel = state.range(0) != 0;
    searchEachIteration(state, in, space);
}
BENCHMARK(BM_FullSearchMixtral)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

void BM_EstimateLlama405B(benchmark::State& state) {
    const PlanInputs in = llama405bInputs();
    for (auto _ : state) {
        const Estimate e = evaluate(in);
        benchmark::DoNotOptimize(e.stepTime);
    }
}
BENCHMARK(BM_EstimateLlama405B)->Unit(benchmark::kMicrosecond);

} // namespace

BENCHMARK_MAIN();
