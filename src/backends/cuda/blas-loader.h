// cuBLAS entry points loaded on first use (dlopen) instead of linked. Linked, libcublas and libcublasLt were mapped
// and initialised in every process of a CUDA-enabled build, CPU runs included: ~145 MB resident (libcublasLt's
// code, data and initialised storage), against a model file of a few hundred MB (docs/cpu-log-s3-s6.md, session 5).
#pragma once

#include <cublas_v2.h>

namespace memtile::cuda {

struct blas_api {
    decltype(&cublasCreate_v2) create = nullptr;
    decltype(&cublasDestroy_v2) destroy = nullptr;
    decltype(&cublasSetStream_v2) set_stream = nullptr;
    // The exported cublasGemmEx (cublasComputeType_t; the header adds a C++ overload taking cudaDataType).
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                              const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                              cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
};

// The entry points of libcublas.so.<major of the headers>, loaded once (thread-safe): first by the dynamic
// loader's search path, then from the CUDA toolkit's library directory of the build. Throws memtile::error
// naming the library and the loader's message when it or a symbol is missing.
const blas_api& blas();

// cuBLAS status -> memtile::error "[cuda] <what> failed: cuBLAS status N".
void check_blas(cublasStatus_t e, const char* what);

}  // namespace memtile::cuda
