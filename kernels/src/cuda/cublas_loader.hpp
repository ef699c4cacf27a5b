#pragma once
// cuBLAS, loaded on first use. Linking it would make every tutti process,
// CPU-only runs and each `tutti` command included, map ~600 MB of
// libcublas/libcublasLt at start (~0.4 s); loading it when a rank first
// runs a GEMM on a GPU costs that once, where it is needed.
//
// The backend calls cuBLAS only through cublas() below: the types and
// constants still come from cublas_v2.h.

#include <cublas_v2.h>

namespace tutti::kernels::cuda {

struct cublas_api {
  decltype(&::cublasCreate_v2) create;
  decltype(&::cublasSetMathMode) set_math_mode;
  decltype(&::cublasSetStream_v2) set_stream;
  // Spelled out: C++ sees a second, inline overload of cublasGemmEx.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t,
                            cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*,
                            cudaDataType, int, const void*, void*, cudaDataType,
                            int, cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&::cublasGetStatusName) status_name;
  decltype(&::cublasGetStatusString) status_string;
};

// The loaded library (libcublas.so.<major version built against>), or a
// device_error naming what could not be loaded.
const cublas_api& cublas();

} // namespace tutti::kernels::cuda
