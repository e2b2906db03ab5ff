// The CUDA backend's linear layers through cuBLASLt, PyTorch's layout (ops.h): weight[OC,C],
// out[N,OC] = inp weight^T + bias. With a bf16 operand the product is a bf16 GEMM with fp32
// accumulation (an fp32 operand is rounded to bf16 first, as autocast casts it); two fp32
// operands make an fp32 GEMM (no TF32, so fp32 runs match the CPU's). The bias is added by
// cuBLASLt's epilogue; the input-gradient and weight-gradient GEMMs are separate calls, as zero
// bubble schedules need them apart. Each call enqueues its work on `stream` (a cudaStream_t);
// errors throw std::runtime_error naming the call, its shape and types.
#pragma once

#include "ops.h"

#include <cstddef>
#include <string>

namespace shardscope::cuda {

class Blas {
public:
    // A cuBLASLt handle and its workspace on the current device. An output whose rows do not start
    // on 16 bytes is computed in bands of rows into an aligned buffer of at most outputBandBytes
    // (at least 8 rows) and copied into place.
    explicit Blas(std::size_t outputBandBytes = std::size_t(256) << 20);
    ~Blas();
    Blas(const Blas&) = delete;
    Blas& operator=(const Blas&) = delete;

    std::string name() const; // "cuBLASLt 13.0.0"

    void matmulForward(kernels::Ptr out, kernels::ConstPtr inp, kernels::ConstPtr weight,
                       kernels::ConstPtr bias, int N, int C, int OC, void* stream);
    // dinp[N,C] = dout[N,OC] weight[OC,C]; accumulate adds instead of overwriting.
    void matmulBackwardInput(kernels::Ptr dinp, kernels::ConstPtr dout, kernels::ConstPtr weight,
                             int N, int C, int OC, bool accumulate, void* stream);
    // dweight[OC,C] += dout^T inp; dbias[OC] (may be null) += column sums of dout, rows in order.
    void matmulBackwardWeightAccumulate(kernels::Ptr dweight, kernels::Ptr dbias,
                                        kernels::ConstPtr dout, kernels::ConstPtr inp, int N, int C,
                                        int OC, void* stream);

private:
    struct Gemm;
    void run(const Gemm& g, void* stream);
    void runAligned(const Gemm& g, void* stream);

    void* handle_ = nullptr;    // cublasLtHandle_t
    void* workspace_ = nullptr; // device memory cuBLASLt may use
    std::size_t workspaceBytes_ = 0;
    std::size_t outputBandBytes_ = 0;
};

} // namespace shardscope::cuda
