#include "column_sums.cuh"
#include "device_elements.cuh"
#include "elementwise.h"
#include "matmul.h"

#include <cstdint>
#include <cublasLt.h>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace shardscope::cuda {

namespace {

using namespace detail;
using kernels::ConstPtr;
using kernels::DType;
using kernels::Ptr;

// Hopper's kernels use up to 32 MiB (NVIDIA's recommendation for sm_90).
constexpr std::size_t kWorkspaceBytes = 32u << 20;

void checkBlas(cublasStatus_t s, const std::string& what) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw std::runtime_error("cuBLASLt " + what + ": " + cublasLtGetStatusString(s));
}

cudaDataType_t cudaTypeOf(DType t) {
    return t == DType::F32 ? CUDA_R_32F : CUDA_R_16BF;
}

// The largest power of two (up to 256) that divides the address: cuBLASLt picks only kernels
// whose loads this alignment allows.
std::uint32_t alignmentOf(const void* p) {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    std::uint32_t a = 256;
    while (a > 1 && address % a != 0)
        a /= 2;
    return a;
}

bool rowsAligned(const void* p, int ld, std::size_t elementSize) {
    return reinterpret_cast<std::uintptr_t>(p) % 16 == 0 && std::size_t(ld) * elementSize % 16 == 0;
}

// dst[r][c] = src[r][c] for the rows x cols of src, and zero for the rest of dst's dstRows x
// dstCols; each with its own row stride and type.
// A block per row at a time, no division per element; each thread loads kInFlight elements before
// it stores them, so enough reads are under way to keep the memory busy (one at a time ran at a
// third of its bandwidth on an H200).
constexpr int kInFlight = 8;
template <typename Out, typename In>
__global__ void copyRowsKernel(Out* dst, std::size_t dstLd, std::size_t dstRows,
                               std::size_t dstCols, const In* src, std::size_t srcLd,
                               std::size_t rows, std::size_t cols) {
    for (std::size_t r = blockIdx.x; r < dstRows; r += gridDim.x)
        for (std::size_t c0 = threadIdx.x; c0 < dstCols; c0 += kInFlight * kThreads) {
            float v[kInFlight];
#pragma unroll
            for (int u = 0; u < kInFlight; ++u) {
                const std::size_t c = c0 + std::size_t(u) * kThreads;
                v[u] = r < rows && c < cols ? load(src, r * srcLd + c) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < kInFlight; ++u) {
                const std::size_t c = c0 + std::size_t(u) * kThreads;
                if (c < dstCols)
                    store(dst, r * dstLd + c, v[u]);
            }
        }
}
void copyRows(Ptr dst, int dstLd, ConstPtr src, int srcLd, int rows, int cols, cudaStream_t s,
              int dstRows = 0, int dstCols = 0) {
    dstRows = std::max(dstRows, rows);
    dstCols = std::max(dstCols, cols);
    const std::size_t n = std::size_t(dstRows) * std::size_t(dstCols);
    if (n == 0)
        return;
    withElements(dst, [&](auto* d) {
        withElements(src, [&](const auto* x) {
            copyRowsKernel<<<unsigned(std::min(dstRows, 65535)), kThreads, 0, s>>>(
                d, std::size_t(dstLd), std::size_t(dstRows), std::size_t(dstCols), x,
                std::size_t(srcLd), std::size_t(rows), std::size_t(cols));
        });
    });
    checkLaunch("copy rows");
}

// Elements of `size` bytes in a row of `count` rounded up to 16 bytes.
int paddedTo16(int count, std::size_t size) {
    return int((std::size_t(count) * size + 15) / 16 * 16 / size);
}

// dbias[o] += sum over n of dout[n, o], summed down the columns (column_sums.cuh).
template <typename D> struct BiasGradientValues {
    static constexpr int kOutputs = 1;
    const D* dout;
    int OC;
    __device__ void operator()(int n, int o, float (&out)[1]) const {
        out[0] = load(dout, std::size_t(n) * std::size_t(OC) + std::size_t(o));
    }
};
template <typename G> struct AddToBiasGradient {
    static constexpr int kOutputs = 1;
    G* dbias;
    __device__ void operator()(int o, const float* sums) const {
        store(dbias, o, load(dbias, o) + sums[0]);
    }
};

template <typename Handle, typename Destroy> auto owned(Handle h, Destroy destroy) {
    return std::unique_ptr<std::remove_pointer_t<Handle>, Destroy>(h, destroy);
}

} // namespace

// Row-major C[M,N] = op(A)[M,K] op(B)[K,N] (+ beta C) (+ bias[N] on every row), as the CPU
// backend's gemm states it.
struct Blas::Gemm {
    const char* what;
    bool transA, transB;
    int M, N, K;
    ConstPtr A;
    int lda;
    ConstPtr B;
    int ldb;
    float beta;
    Ptr C;
    int ldc;
    ConstPtr bias; // length N, or null
};

Blas::Blas(std::size_t outputBandBytes)
    : workspaceBytes_(kWorkspaceBytes), outputBandBytes_(outputBandBytes) {
    cublasLtHandle_t h = nullptr;
    checkBlas(cublasLtCreate(&h), "create");
    handle_ = h;
    if (cudaMalloc(&workspace_, workspaceBytes_) != cudaSuccess) {
        cublasLtDestroy(h);
        throw std::runtime_error("cuBLASLt: no room on the GPU for its " +
                                 std::to_string(workspaceBytes_ >> 20) + " MiB workspace");
    }
}

Blas::~Blas() {
    cudaFree(workspace_);
    cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

std::string Blas::name() const {
    const std::size_t v = cublasLtGetVersion(); // major * 10000 + minor * 100 + patch
    return "cuBLASLt " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
           std::to_string(v % 100);
}

void Blas::matmulForward(Ptr out, ConstPtr inp, ConstPtr weight, ConstPtr bias, int N, int C,
                         int OC, void* stream) {
    run({"matmulForward", false, true, N, OC, C, inp, C, weight, C, 0.0f, out, OC, bias}, stream);
}

void Blas::matmulBackwardInput(Ptr dinp, ConstPtr dout, ConstPtr weight, int N, int C, int OC,
                               bool accumulate, void* stream) {
    run({"matmulBackwardInput", false, false, N, C, OC, dout, OC, weight, C,
         accumulate ? 1.0f : 0.0f, dinp, C, nullptr},
        stream);
}

void Blas::matmulBackwardWeightAccumulate(Ptr dweight, Ptr dbias, ConstPtr dout, ConstPtr inp,
                                          int N, int C, int OC, void* stream) {
    run({"matmulBackwardWeight", true, false, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C,
         nullptr},
        stream);
    if (!dbias || OC <= 0 || N <= 0)
        return;
    withElements(dbias, [&](auto* db) {
        withElements(dout, [&](const auto* d) {
            using D = std::remove_cv_t<std::remove_pointer_t<decltype(d)>>;
            using G = std::remove_pointer_t<decltype(db)>;
            sumColumns(BiasGradientValues<D>{d, OC}, AddToBiasGradient<G>{db}, N, OC,
                       streamOf(stream));
        });
    });
    checkLaunch("bias gradient");
}

// An output whose rows do not start on 16 bytes, or whose rows are not a whole number of 16 bytes
// (GPT-2's fp32 logits, rows of 50257), would put cuBLASLt on its kernels for unaligned rows (13 ms
// of the 16 x 1024-token head forward on an H200): such a product is computed with its rows padded
// to 8 columns (the weights' extra rows and the bias's extra entries zeros) a band of rows at a
// time into an aligned buffer, and its own columns copied out.
void Blas::run(const Gemm& g, void* stream) {
    if (g.M <= 0 || g.N <= 0)
        return;
    const std::size_t size = kernels::sizeOf(g.C.type);
    if ((rowsAligned(g.C.data, g.ldc, size) && std::size_t(g.N) * size % 16 == 0) || g.K <= 0) {
        runAligned(g, stream);
        return;
    }
    const cudaStream_t s = streamOf(stream);
    const int N = (g.N + 7) / 8 * 8; // a whole number of 16 bytes in either type
    Gemm padded = g;
    padded.N = N;
    std::unique_ptr<StreamBuffer> paddedB, paddedBias;
    if (N != g.N) {
        const std::size_t bSize = kernels::sizeOf(g.B.type);
        const int rows = g.transB ? g.N : g.K, cols = g.transB ? g.K : g.N;
        const int paddedRows = g.transB ? N : g.K, paddedCols = g.transB ? g.K : N;
        padded.ldb = paddedTo16(paddedCols, bSize);
        paddedB = std::make_unique<StreamBuffer>(
            std::size_t(paddedRows) * std::size_t(padded.ldb) * bSize, s);
        padded.B = {paddedB->data(), g.B.type};
        copyRows({paddedB->data(), g.B.type}, padded.ldb, g.B, g.ldb, rows, cols, s, paddedRows,
                 paddedCols);
        if (g.bias) {
            paddedBias =
                std::make_unique<StreamBuffer>(std::size_t(N) * kernels::sizeOf(g.bias.type), s);
            padded.bias = {paddedBias->data(), g.bias.type};
            copyRows({paddedBias->data(), g.bias.type}, N, g.bias, g.N, 1, g.N, s, 1, N);
        }
    }
    const std::size_t rowBytes = std::size_t(N) * size;
    const int band = int(std::min<std::size_t>(
        std::size_t(g.M), std::max<std::size_t>(8, outputBandBytes_ / rowBytes / 8 * 8)));
    StreamBuffer buffer(std::size_t(band) * rowBytes, s);
    const int ld = N;
    for (int m0 = 0; m0 < g.M; m0 += band) {
        Gemm part = padded;
        part.M = std::min(band, g.M - m0);
        // Rows m0.. of op(A): rows of A, or columns of a transposed A.
        part.A = g.A + (g.transA ? std::size_t(m0) : std::size_t(m0) * std::size_t(g.lda));
        part.C = {buffer.data(), g.C.type};
        part.ldc = ld;
        const Ptr rows = g.C + std::size_t(m0) * std::size_t(g.ldc);
        if (g.beta != 0.0f) // the padding columns as zeros: cuBLASLt reads them too
            copyRows(part.C, ld, rows, g.ldc, part.M, g.N, s, part.M, N);
        runAligned(part, stream);
        copyRows(rows, g.ldc, part.C, ld, part.M, g.N, s);
    }
}

// cuBLASLt is column-major: the row-major C[M,N] is the column-major C^T[N,M] = op(B)^T op(A)^T,
// so B comes first and each stored matrix is read as its own transpose.
void Blas::runAligned(const Gemm& g, void* stream) {
    const cudaStream_t s = streamOf(stream);
    const std::string shape = std::string(g.what) + " (" + std::to_string(g.M) + " x " +
                              std::to_string(g.N) + " x " + std::to_string(g.K) + ", " +
                              kernels::toString(g.A.type) + " x " + kernels::toString(g.B.type) +
                              " -> " + kernels::toString(g.C.type) + ")";
    if (g.K <= 0) { // an empty sum: C = beta C (+ bias), which cuBLASLt does not take
        throw std::logic_error("cuBLASLt " + shape + ": the inner dimension is empty");
    }

    // Operands in one type: bf16 when either is (the fp32 one rounded), fp32 when both are; and
    // rows that start on 16 bytes, as cuBLASLt's fast kernels want (GPT-2's logits gradient, rows
    // of 50257, otherwise ran on kernels for unaligned rows at a fifth of the speed on an H200).
    // An operand that is neither goes through a stream-ordered copy that is both. When one is
    // copied and the inner dimension is not a whole number of 16 bytes (the vocabulary, in the
    // head's input gradient), both copies pad it with zeros to one.
    const DType operands =
        g.A.type == DType::BF16 || g.B.type == DType::BF16 ? DType::BF16 : DType::F32;
    const std::size_t size = kernels::sizeOf(operands);
    auto ready = [&](ConstPtr p, int ld) {
        return p.type == operands && rowsAligned(p.data, ld, size);
    };
    const int K = ready(g.A, g.lda) && ready(g.B, g.ldb) ? g.K : paddedTo16(g.K, size);
    std::unique_ptr<StreamBuffer> copyA, copyB, wideC, castBias;
    // A stored rows x cols operand, as rows x cols (rows x K or K x cols where one is the inner
    // dimension) aligned rows of the operands' type.
    auto prepared = [&](ConstPtr p, int rows, int cols, int ld, bool innerInRows,
                        std::unique_ptr<StreamBuffer>& copy, int& copyLd) -> ConstPtr {
        copyLd = ld;
        if (K == g.K && ready(p, ld))
            return p;
        const int copyRowCount = innerInRows ? K : rows, copyCols = innerInRows ? cols : K;
        copyLd = paddedTo16(copyCols, size);
        copy = std::make_unique<StreamBuffer>(
            std::size_t(copyRowCount) * std::size_t(copyLd) * size, s);
        copyRows({copy->data(), operands}, copyLd, p, ld, rows, cols, s, copyRowCount, copyCols);
        return {copy->data(), operands};
    };
    int lda = g.lda, ldb = g.ldb;
    const ConstPtr A =
        prepared(g.A, g.transA ? g.K : g.M, g.transA ? g.M : g.K, g.lda, g.transA, copyA, lda);
    const ConstPtr B =
        prepared(g.B, g.transB ? g.N : g.K, g.transB ? g.K : g.N, g.ldb, !g.transB, copyB, ldb);
    // fp32 operands give an fp32 result only: a bf16 output goes through an fp32 copy.
    Ptr D = g.C;
    const std::size_t countC = std::size_t(g.M) * std::size_t(g.ldc);
    if (operands == DType::F32 && D.type == DType::BF16) {
        wideC = std::make_unique<StreamBuffer>(countC * 4, s);
        D = {wideC->data(), DType::F32};
        if (g.beta != 0.0f)
            convertCopy(D, g.C, countC, stream);
    }
    ConstPtr bias = g.bias;
    if (bias && bias.type != D.type) { // cuBLASLt adds a bias of the output's type
        castBias = std::make_unique<StreamBuffer>(std::size_t(g.N) * kernels::sizeOf(D.type), s);
        convertCopy({castBias->data(), D.type}, g.bias, std::size_t(g.N), stream);
        bias = {castBias->data(), D.type};
    }

    cublasLtMatmulDesc_t rawDesc = nullptr;
    checkBlas(cublasLtMatmulDescCreate(&rawDesc, CUBLAS_COMPUTE_32F, CUDA_R_32F), shape);
    const auto desc = owned(rawDesc, cublasLtMatmulDescDestroy);
    const cublasOperation_t opFirst = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opSecond = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    checkBlas(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &opFirst,
                                             sizeof opFirst),
              shape);
    checkBlas(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &opSecond,
                                             sizeof opSecond),
              shape);
    if (bias) {
        const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        const void* biasData = bias.data;
        const auto biasType = static_cast<std::int32_t>(cudaTypeOf(bias.type));
        checkBlas(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                 &epilogue, sizeof epilogue),
                  shape);
        checkBlas(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                 &biasData, sizeof biasData),
                  shape);
        checkBlas(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                 &biasType, sizeof biasType),
                  shape);
    }

    // Stored shapes, column-major: the first operand is B (N x K, or K x N when transposed).
    auto layout = [&](DType t, int rows, int cols, int ld) {
        cublasLtMatrixLayout_t l = nullptr;
        checkBlas(cublasLtMatrixLayoutCreate(&l, cudaTypeOf(t), std::uint64_t(rows),
                                             std::uint64_t(cols), std::int64_t(ld)),
                  shape);
        return owned(l, cublasLtMatrixLayoutDestroy);
    };
    const auto first = g.transB ? layout(operands, K, g.N, ldb) : layout(operands, g.N, K, ldb);
    const auto second = g.transA ? layout(operands, g.M, K, lda) : layout(operands, K, g.M, lda);
    const auto out = layout(D.type, g.N, g.M, g.ldc);

    cublasLtMatmulPreference_t rawPreference = nullptr;
    checkBlas(cublasLtMatmulPreferenceCreate(&rawPreference), shape);
    const auto preference = owned(rawPreference, cublasLtMatmulPreferenceDestroy);
    checkBlas(cublasLtMatmulPreferenceSetAttribute(preference.get(),
                                                   CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &workspaceBytes_, sizeof workspaceBytes_),
              shape);
    // Split-K may sum its partial products in place in the output (a bf16 output rounds every
    // partial: several bf16 ulps off, seen on an H200) or in the output's type; only the fp32
    // workspace keeps one rounding per result, and its reduction order is fixed (same bits).
    const std::uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    checkBlas(cublasLtMatmulPreferenceSetAttribute(preference.get(),
                                                   CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                   &reductions, sizeof reductions),
              shape);
    const std::uint32_t alignFirst = alignmentOf(B.data), alignSecond = alignmentOf(A.data),
                        alignOut = alignmentOf(D.data);
    const std::pair<cublasLtMatmulPreferenceAttributes_t, const std::uint32_t*> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alignFirst},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alignSecond},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alignOut},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alignOut}};
    for (const auto& [attribute, value] : alignments)
        checkBlas(
            cublasLtMatmulPreferenceSetAttribute(preference.get(), attribute, value, sizeof *value),
            shape);

    auto* handle = static_cast<cublasLtHandle_t>(handle_);
    cublasLtMatmulHeuristicResult_t best{};
    int found = 0;
    checkBlas(cublasLtMatmulAlgoGetHeuristic(handle, desc.get(), first.get(), second.get(),
                                             out.get(), out.get(), preference.get(), 1, &best,
                                             &found),
              shape);
    if (found == 0)
        throw std::runtime_error("cuBLASLt " + shape + ": no algorithm for this shape and types");
    const float alpha = 1.0f;
    checkBlas(cublasLtMatmul(handle, desc.get(), &alpha, B.data, first.get(), A.data, second.get(),
                             &g.beta, D.data, out.get(), D.data, out.get(), &best.algo, workspace_,
                             workspaceBytes_, s),
              shape);
    if (wideC)
        convertCopy(g.C, D, countC, stream);
}

} // namespace shardscope::cuda
