/* simt's cuBLASLt: the functions src/backends/cuda/linear.c calls, on the
 * host, so that linear.c itself (its column-major reading of row-major
 * tensors, transposes, epilogues, compute types, the 16-bit operand copies
 * and the half-storage pass's 16-bit operands) runs in `make test` on simt
 * instead of the cpu's kernels standing in for it. Written from cuBLASLt's
 * documented semantics, not from its code:
 *   D = alpha op(A) op(B) + beta C, column-major, op(X) = X or X^T by
 *   TRANSA/TRANSB; the epilogue adds BIAS (one value a row of D, of D's
 *   type: BIAS_DATA_TYPE's default) and/or applies RELU, then D is written
 *   in its type (rounded to nearest even); A and B are fp32, bf16 or fp16
 *   (both alike), C and D fp32, or (compute 32F) of A's 16-bit type;
 *   CUBLAS_COMPUTE_32F_FAST_TF32 / _16BF / _16F may round fp32 operands
 *   (cuBLASLt documents "allows down-converting", its choice, TF32 among
 *   them); here they round to that format, nearest even: a model, which is
 *   why the half-storage checks compare against linear.c's explicit 16-bit
 *   copies (KILN_CUDA_GEMM=half), not against these; 32F takes operands as
 *   they are.
 * Each product sums in double. What a GPU would refuse is refused here too,
 * so a slip fails on simt: a mixed A/B type, a fast compute type on 16-bit
 * operands, dimensions that do not chain, an attribute linear.c does not
 * set, a pointer less aligned than the heuristic was told, a workspace
 * smaller than the algorithm asked for. The workspace is filled with NaN
 * before each product: a 16-bit operand copy placed over cuBLASLt's own
 * scratch shows. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backends/cuda/internal/cublaslt.h"
#include "backends/ref/internal/ref.h"
#include "half_bits.h"

typedef struct {
    cublasComputeType_t compute;
    cublasOperation_t ta, tb;
    cublasLtEpilogue_t epi;
    const void *bias;
} desc;
typedef struct {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
} layout;
typedef struct {
    uint32_t align;   /* the smallest alignment of A, B, C and D the caller promised (256 when not told) */
    size_t max_ws;
} pref;
#define WS_ASKED 4096 /* the workspace every algorithm here asks for */

static cublasStatus_t create(cublasLtHandle_t *h) {
    static int handle;
    *h = (cublasLtHandle_t)(void *)&handle;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t destroy(cublasLtHandle_t h) { return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED; }

static cublasStatus_t desc_create(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale) {
    desc *m = calloc(1, sizeof *m);
    if (!m) return CUBLAS_STATUS_ALLOC_FAILED;
    if (scale != CUDA_R_32F) return free(m), CUBLAS_STATUS_NOT_SUPPORTED;
    m->compute = compute, m->ta = m->tb = CUBLAS_OP_N, m->epi = CUBLASLT_EPILOGUE_DEFAULT;
    *d = (cublasLtMatmulDesc_t)(void *)m;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t desc_destroy(cublasLtMatmulDesc_t d) {
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t desc_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void *buf, size_t n) {
    desc *m = (desc *)(void *)d;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return n == sizeof m->ta ? memcpy(&m->ta, buf, n), CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_DESC_TRANSB: return n == sizeof m->tb ? memcpy(&m->tb, buf, n), CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return n == sizeof m->epi ? memcpy(&m->epi, buf, n), CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return n == sizeof m->bias ? memcpy(&m->bias, buf, n), CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    default: return CUBLAS_STATUS_NOT_SUPPORTED; /* linear.c sets no other: one it starts to set is emulated first */
    }
}

static cublasStatus_t layout_create(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
    if (type != CUDA_R_32F && type != CUDA_R_16BF && type != CUDA_R_16F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (ld < (int64_t)rows || !rows || !cols) return CUBLAS_STATUS_INVALID_VALUE;
    layout *m = malloc(sizeof *m);
    if (!m) return CUBLAS_STATUS_ALLOC_FAILED;
    *m = (layout){type, rows, cols, ld};
    *l = (cublasLtMatrixLayout_t)(void *)m;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t layout_destroy(cublasLtMatrixLayout_t l) {
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t pref_create(cublasLtMatmulPreference_t *p) {
    pref *m = malloc(sizeof *m);
    if (!m) return CUBLAS_STATUS_ALLOC_FAILED;
    *m = (pref){256, 0};
    *p = (cublasLtMatmulPreference_t)(void *)m;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t pref_destroy(cublasLtMatmulPreference_t p) {
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t pref_set(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const void *buf, size_t n) {
    pref *m = (pref *)(void *)p;
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && n == sizeof m->max_ws) return memcpy(&m->max_ws, buf, n), CUBLAS_STATUS_SUCCESS;
    if ((attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES || attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES ||
         attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES || attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) &&
        n == sizeof(uint32_t)) {
        uint32_t a;
        memcpy(&a, buf, n);
        if (a < m->align) m->align = a;
        return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

/* op(A) is M x K, op(B) K x N, C and D M x N; the types a GPU takes */
static int shapes_chain(const desc *m, const layout *a, const layout *b, const layout *c, const layout *d) {
    uint64_t M = m->ta == CUBLAS_OP_N ? a->rows : a->cols, K = m->ta == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t Kb = m->tb == CUBLAS_OP_N ? b->rows : b->cols, N = m->tb == CUBLAS_OP_N ? b->cols : b->rows;
    int fast = m->compute != CUBLAS_COMPUTE_32F;
    return K == Kb && c->rows == M && c->cols == N && d->rows == M && d->cols == N && a->type == b->type &&
           c->type == d->type && (d->type == CUDA_R_32F || (d->type == a->type && !fast)) &&
           (!fast || a->type == CUDA_R_32F) && m->compute != CUBLAS_COMPUTE_32F_PEDANTIC;
}

static cublasStatus_t heuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t p, int requested,
                                cublasLtMatmulHeuristicResult_t *res, int *found) {
    const pref *pr = (const pref *)(void *)p;
    *found = 0;
    if (!h || requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    if (!shapes_chain((const desc *)(void *)op, (const layout *)(void *)a, (const layout *)(void *)b, (const layout *)(void *)c,
                      (const layout *)(void *)d))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(res, 0, sizeof *res);
    res->workspaceSize = pr->max_ws < WS_ASKED ? 0 : WS_ASKED;
    res->algo.data[0] = pr->align;
    res->algo.data[1] = res->workspaceSize;
    res->state = CUBLAS_STATUS_SUCCESS;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

static double rounded(double v, cublasComputeType_t compute) {
    if (compute == CUBLAS_COMPUTE_32F_FAST_16BF) return kiln_ref_round_bf16(v);
    if (compute == CUBLAS_COMPUTE_32F_FAST_16F) return kiln_ref_round_fp16(v);
    if (compute == CUBLAS_COMPUTE_32F_FAST_TF32) return simt_round_tf32(v);
    return v;
}
/* element (i, j) of a column-major matrix, read as its type */
static double at(const void *p, const layout *l, uint64_t i, uint64_t j) {
    size_t k = (size_t)(i + j * (uint64_t)l->ld);
    if (l->type == CUDA_R_32F) return ((const float *)p)[k];
    return simt_half_get(((const uint16_t *)p)[k], l->type == CUDA_R_16F);
}

/* a refusal says why on stderr (the status alone reaches kiln's message) */
static cublasStatus_t refuse(const char *why) {
    fprintf(stderr, "simt's cuBLASLt: %s\n", why);
    return CUBLAS_STATUS_INVALID_VALUE;
}

static int aligned(const void *p, uint32_t a) { return p == NULL || (uintptr_t)p % a == 0; }

static cublasStatus_t matmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *A, cublasLtMatrixLayout_t ad,
                             const void *B, cublasLtMatrixLayout_t bd, const void *beta, const void *C, cublasLtMatrixLayout_t cd,
                             void *D, cublasLtMatrixLayout_t dd, const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes,
                             cudaStream_t stream) {
    (void)stream;
    const desc *m = (const desc *)(void *)op;
    const layout *a = (const layout *)(void *)ad, *b = (const layout *)(void *)bd, *c = (const layout *)(void *)cd,
                 *d = (const layout *)(void *)dd;
    uint32_t al = algo ? (uint32_t)algo->data[0] : 256;
    if (!h || !algo || !shapes_chain(m, a, b, c, d)) return refuse("matmul: types or dimensions that do not chain");
    if (!aligned(A, al) || !aligned(B, al) || !aligned(C, al) || !aligned(D, al)) return refuse("matmul: a pointer less aligned than the heuristic was told");
    if (ws_bytes < algo->data[1] || (algo->data[1] && !ws)) return refuse("matmul: less workspace than the algorithm asked for");
    if (ws_bytes) memset(ws, 0xff, ws_bytes); /* cuBLASLt's scratch: what it held is gone */
    float fa, fb;
    memcpy(&fa, alpha, 4);
    memcpy(&fb, beta, 4);
    int relu = m->epi == CUBLASLT_EPILOGUE_RELU || m->epi == CUBLASLT_EPILOGUE_RELU_BIAS;
    int bias = m->epi == CUBLASLT_EPILOGUE_BIAS || m->epi == CUBLASLT_EPILOGUE_RELU_BIAS;
    if (m->epi != CUBLASLT_EPILOGUE_DEFAULT && !relu && !bias) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (bias && !m->bias) return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t M = d->rows, N = d->cols, K = m->ta == CUBLAS_OP_N ? a->cols : a->rows;
    /* op(A) as rows of K, op(B)^T as rows of K, each element as the compute type takes it */
    double *ra = malloc((size_t)(M * K) * sizeof *ra), *rb = malloc((size_t)(N * K) * sizeof *rb);
    if (!ra || !rb) return free(ra), free(rb), CUBLAS_STATUS_ALLOC_FAILED;
    for (uint64_t i = 0; i < M; i++)
        for (uint64_t k = 0; k < K; k++) ra[i * K + k] = rounded(m->ta == CUBLAS_OP_N ? at(A, a, i, k) : at(A, a, k, i), m->compute);
    for (uint64_t j = 0; j < N; j++)
        for (uint64_t k = 0; k < K; k++) rb[j * K + k] = rounded(m->tb == CUBLAS_OP_N ? at(B, b, k, j) : at(B, b, j, k), m->compute);
    for (uint64_t j = 0; j < N; j++)
        for (uint64_t i = 0; i < M; i++) {
            double s = 0;
            for (uint64_t k = 0; k < K; k++) s += ra[i * K + k] * rb[j * K + k];
            double v = fa * s + (fb != 0.f ? fb * at(C, c, i, j) : 0.0);
            if (bias) v += d->type == CUDA_R_32F ? ((const float *)m->bias)[i]
                                                 : simt_half_get(((const uint16_t *)m->bias)[i], d->type == CUDA_R_16F);
            if (relu && !(v > 0)) v = 0;
            size_t at_d = (size_t)(i + j * (uint64_t)d->ld);
            if (d->type == CUDA_R_32F) ((float *)D)[at_d] = (float)v;
            else ((uint16_t *)D)[at_d] = simt_half_put(v, d->type == CUDA_R_16F);
        }
    free(ra);
    free(rb);
    return CUBLAS_STATUS_SUCCESS;
}

static const kiln_cublaslt_api api = {
    .cublasLtCreate = create,
    .cublasLtDestroy = destroy,
    .cublasLtMatmul = matmul,
    .cublasLtMatmulAlgoGetHeuristic = heuristic,
    .cublasLtMatmulDescCreate = desc_create,
    .cublasLtMatmulDescDestroy = desc_destroy,
    .cublasLtMatmulDescSetAttribute = desc_set,
    .cublasLtMatmulPreferenceCreate = pref_create,
    .cublasLtMatmulPreferenceDestroy = pref_destroy,
    .cublasLtMatmulPreferenceSetAttribute = pref_set,
    .cublasLtMatrixLayoutCreate = layout_create,
    .cublasLtMatrixLayoutDestroy = layout_destroy,
    .loaded = 1,
};

/* renamed kiln_simt_cublaslt (cmake/simt.cmake): linear.c's table in the simt build */
const kiln_cublaslt_api *kiln_cublaslt(const char **why) {
    if (why) *why = NULL;
    return &api;
}
