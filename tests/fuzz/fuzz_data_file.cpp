// A training data file as `shardscope-engine train --data FILE` opens it: the first input byte
// chooses the format asked for (auto, nanogpt, llmc, text), the file's extension, the model's
// vocabulary and the sequence length; the rest is the file. An accepted file must give batches
// whose tokens are inside the vocabulary and whose targets are the inputs shifted by one.
#include "core/error.h"
#include "fuzz_target.h"
#include "fuzz_temp_dir.h"
#include "runtime/data.h"

#include <fstream>
#include <vector>

using namespace shardscope;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0)
        return 0;
    const std::uint8_t choice = data[0];
    static constexpr DataFormat kFormats[] = {DataFormat::Auto, DataFormat::NanoGpt,
                                              DataFormat::LlmC, DataFormat::Text};
    static constexpr const char* kExtensions[] = {".bin", ".txt", ".dat", ""};
    DataSpec spec;
    spec.format = kFormats[choice & 3];
    spec.path = (fuzz::tempDir() / ("data" + std::string(kExtensions[(choice >> 2) & 3]))).string();
    spec.vocab = (choice & 16) ? 50304 : 256;
    spec.seqLen = 1 << (choice >> 5); // 1 to 128
    std::ofstream(spec.path, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(data + 1), std::streamsize(size - 1));

    std::unique_ptr<Dataset> dataset;
    try {
        dataset = Dataset::open(spec);
    } catch (const InputError&) {
        return 0;
    }
    constexpr int kRows = 2;
    std::vector<std::int32_t> inputs(std::size_t(kRows) * spec.seqLen);
    std::vector<std::int32_t> targets(inputs.size());
    for (const Split split : {Split::Train, Split::Validation}) {
        if (dataset->tokens(split) == 0)
            continue;
        for (const std::int64_t step : {std::int64_t(0), std::int64_t(1) << 40}) {
            dataset->batch(split, step, 3, kRows, inputs.data(), targets.data());
            for (std::size_t i = 0; i < inputs.size(); ++i) {
                if (inputs[i] < 0 || inputs[i] >= dataset->vocab() || targets[i] < 0 ||
                    targets[i] >= dataset->vocab() || dataset->vocab() > spec.vocab)
                    fuzz::broken("every token of a batch is inside the model's vocabulary");
                if ((i + 1) % std::size_t(spec.seqLen) != 0 && targets[i] != inputs[i + 1])
                    fuzz::broken("a batch's targets are its inputs shifted by one");
            }
        }
    }
    return 0;
}
