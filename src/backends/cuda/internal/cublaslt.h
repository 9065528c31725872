/* cuBLASLt's functions that the CUDA backend calls, through a table filled by
 * dlopen at first use (cublaslt.c says why it is not linked). */
#ifndef KILN_BACKEND_CUDA_CUBLASLT_H
#define KILN_BACKEND_CUDA_CUBLASLT_H

#include <cublasLt.h>

#define KILN_CUBLASLT_FUNCTIONS(X)                                                                                     \
    X(cublasLtCreate)                                                                                                  \
    X(cublasLtDestroy)                                                                                                 \
    X(cublasLtMatmul)                                                                                                  \
    X(cublasLtMatmulAlgoGetHeuristic)                                                                                  \
    X(cublasLtMatmulDescCreate)                                                                                        \
    X(cublasLtMatmulDescDestroy)                                                                                       \
    X(cublasLtMatmulDescSetAttribute)                                                                                  \
    X(cublasLtMatmulPreferenceCreate)                                                                                  \
    X(cublasLtMatmulPreferenceDestroy)                                                                                 \
    X(cublasLtMatmulPreferenceSetAttribute)                                                                            \
    X(cublasLtMatrixLayoutCreate)                                                                                      \
    X(cublasLtMatrixLayoutDestroy)

typedef struct kiln_cublaslt_api {
#define KILN_LT_MEMBER(f) __typeof__(f) *f;
    KILN_CUBLASLT_FUNCTIONS(KILN_LT_MEMBER)
#undef KILN_LT_MEMBER
    int loaded;
} kiln_cublaslt_api;

/* the table, loaded once (thread-safe); NULL with why set when the library or
 * one of its functions is missing */
const kiln_cublaslt_api *kiln_cublaslt(const char **why);

#endif
