/* linear on cuBLASLt. Row-major [rows, in] · [out, in]^T is computed as the
 * column-major product that describes the same bytes, so nothing is
 * transposed in memory. The forward pass folds the bias and a following relu
 * into the matmul's epilogue (one kernel); the algorithm is cuBLASLt's
 * heuristic first choice for the shape, picked at compile. The compute type
 * follows --matmul-precision (PyTorch's set_float32_matmul_precision):
 * highest fp32, high TF32, medium bf16 tensor cores, always fp32 accumulation;
 * a step the autocast pass marked (--precision bf16 or auto) takes bf16, with --precision fp16 fp16 (fp32
 * operands rounded to half for the tensor cores: CUBLAS_COMPUTE_32F_FAST_16F). Such a forward writes its output
 * in those 16 bits, as PyTorch's autocast linear does (bias rounded too, relu before the rounding): on 16-bit
 * copies of its operands, into the output where the half-storage pass stores it so, else widened into it. */
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "backends/cuda/internal/cublaslt.h"
#include "backends/cuda/internal/cuda.h"

typedef struct {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    size_t ws;         /* cuBLASLt's workspace, at the step workspace's start */
    int half;          /* 0: fp32 operands; 1: bf16, 2: fp16: each fp32 operand copied so before each product
                          (KILN_CUDA_GEMM=half, or an operand the half-storage pass stores in 16 bits) */
    int64_t na, nb;    /* the operands' elements */
    uint8_t a16, b16;  /* an operand the half-storage pass stores in 16 bits: read as it is, no copy */
    size_t off_a, off_b; /* the 16-bit copies of the others in the step's workspace */
    uint32_t align;      /* the step's tensors' alignment in bytes (at most 256): what the algorithm may assume */
    /* an autocast forward (round_out): D written in `half`'s 16 bits, as PyTorch's autocast linear writes it; into the
     * output where the half-storage pass stores it so (d16), else into the workspace at off_d and widened into the
     * fp32 output. Its bias, nbias values, goes to cuBLASLt as a 16-bit copy at off_bias (the epilogue's bias has
     * D's type; PyTorch's autocast rounds the bias too) */
    int round, d16;
    int64_t nd, nbias;
    size_t off_d, off_bias;
} matmul;

/* the largest power of two up to 256 dividing every address the step's product reads or writes: cuBLASLt's
 * heuristic assumes 256 unless told, and the planner's arena aligns tensors to 64 */
static uint32_t step_align(const kiln_step *s) {
    uintptr_t bits = 256;
    for (int k = 0; k < s->nin && k < 2; k++) bits |= (uintptr_t)s->in[k].data;
    bits |= (uintptr_t)s->out[0].data;
    uint32_t a = 1;
    while (a < 256 && !(bits & a)) a *= 2;
    return a;
}

static cublasLtHandle_t lt;
static const kiln_cublaslt_api *LT; /* opened by the first matmul made */
#define MAX_WS ((size_t)32 << 20)

static int registered;
static void destroy_handle(void) {
    if (lt) LT->cublasLtDestroy(lt);
    lt = NULL;
}

static kiln_status blas(cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return KILN_OK;
    return kiln_fail(KILN_ERR_BACKEND, "cuBLASLt: %s: status %d", what, (int)s);
}

static void mm_free(matmul *m) {
    if (!m) return;
    if (m->desc) LT->cublasLtMatmulDescDestroy(m->desc);
    if (m->a) LT->cublasLtMatrixLayoutDestroy(m->a);
    if (m->b) LT->cublasLtMatrixLayoutDestroy(m->b);
    if (m->c) LT->cublasLtMatrixLayoutDestroy(m->c);
}

/* KILN_CUDA_GEMM=half: bf16 (fp16) math takes 16-bit copies of its operands, made by convert.cu before each
 * product, instead of fp32 operands that cuBLASLt rounds itself (CUBLAS_COMPUTE_32F_FAST_16BF). The same
 * numbers (both round to nearest even, both accumulate in fp32); which is faster is a GPU's to say: not the
 * default until one has (docs/backends.md) */
static int half_operands(int math) {
    const char *e = getenv("KILN_CUDA_GEMM");
    /* KILN_CUDA_STORE=half too: its 16-bit operands change no number only against this rounding (cuBLASLt's fast
     * compute types may read fp32 operands as bf16 or TF32, its choice), so every reduced step takes it */
    return math >= 2 && ((e && !strcmp(e, "half")) || kiln_cuda_store_half()) ? math - 1 : 0;
}
static size_t up256(size_t n) { return (n + 255) / 256 * 256; }

/* C[M, N] = op(A) op(B) (+ C), column-major; A is M×K (K×M when transposed), B is K×N (N×K when transposed) */
static kiln_status mm_make(matmul *m, int math, int ta, int tb, int64_t M, int64_t N, int64_t K, cublasLtEpilogue_t epi,
                           const void *bias, size_t *workspace) {
    /* an operand stored in 16 bits (its kind matches the step's math: the pass stores only what it rounds) */
    int kept = m->half;
    static const cublasComputeType_t compute[4] = {CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F_FAST_16BF,
                                                   CUBLAS_COMPUTE_32F_FAST_16F};
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    m->half = kept ? kept : m->round ? m->round : half_operands(math);
    m->na = M * K, m->nb = K * N, m->nd = M * N;
    cudaDataType_t in = m->half == 1 ? CUDA_R_16BF : m->half == 2 ? CUDA_R_16F : CUDA_R_32F, out = m->round ? in : CUDA_R_32F;
    const char *why = NULL;
    if (!LT && !(LT = kiln_cublaslt(&why))) return kiln_fail(KILN_ERR_BACKEND, "%s", why);
    kiln_status st = lt ? KILN_OK : blas(LT->cublasLtCreate(&lt), "create");
    if (st == KILN_OK && !registered) registered = !atexit(destroy_handle); /* runs before cuBLASLt's own teardown */
#define B(call, what) \
    if (st == KILN_OK) st = blas(call, what)
    B(LT->cublasLtMatmulDescCreate(&m->desc, m->half ? CUBLAS_COMPUTE_32F : compute[math & 3], CUDA_R_32F), "descriptor");
    B(LT->cublasLtMatmulDescSetAttribute(m->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), "transa");
    B(LT->cublasLtMatmulDescSetAttribute(m->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), "transb");
    B(LT->cublasLtMatmulDescSetAttribute(m->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "epilogue");
    if (bias) B(LT->cublasLtMatmulDescSetAttribute(m->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), "bias");
    B(LT->cublasLtMatrixLayoutCreate(&m->a, in, ta ? K : M, ta ? M : K, ta ? K : M), "layout");
    B(LT->cublasLtMatrixLayoutCreate(&m->b, in, tb ? N : K, tb ? K : N, tb ? N : K), "layout");
    B(LT->cublasLtMatrixLayoutCreate(&m->c, out, M, N, M), "layout");
    cublasLtMatmulPreference_t pref = NULL;
    size_t max_ws = MAX_WS;
    B(LT->cublasLtMatmulPreferenceCreate(&pref), "preference");
    B(LT->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws), "preference");
    static const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int k = 0; k < 4 && m->align; k++)
        B(LT->cublasLtMatmulPreferenceSetAttribute(pref, aligns[k], &m->align, sizeof m->align), "alignment");
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    B(LT->cublasLtMatmulAlgoGetHeuristic(lt, m->desc, m->a, m->b, m->c, m->c, pref, 1, &res, &found), "heuristic");
#undef B
    if (pref) LT->cublasLtMatmulPreferenceDestroy(pref);
    if (st == KILN_OK && !found) st = kiln_fail(KILN_ERR_BACKEND, "cuBLASLt has no algorithm for %lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
    if (st != KILN_OK) return st;
    m->algo = res.algo;
    m->ws = res.workspaceSize;
    size_t need = m->ws;
    if (m->half) { /* room for the copies of the operands not stored in 16 bits */
        m->off_a = up256(m->ws);
        m->off_b = m->off_a + (m->a16 ? 0 : up256((size_t)m->na * 2));
        need = m->off_b + (m->b16 ? 0 : up256((size_t)m->nb * 2));
    }
    if (m->round) { /* and for the bias's 16-bit copy and D, unless D is the output itself */
        m->off_bias = need;
        m->off_d = m->off_bias + up256((size_t)m->nbias * 2);
        need = m->off_d + (m->d16 ? 0 : (size_t)m->nd * 2);
    }
    if (need > *workspace) *workspace = need;
    return KILN_OK;
}

/* a rounded forward's bias: its 16-bit copy, which the epilogue reads (its address set before each product: the
 * workspace's is known only at run) */
static kiln_status round_bias(const matmul *m, const float *bias, void *ws) {
    if (!m->round || !bias) return KILN_OK;
    void *b16 = (char *)ws + m->off_bias;
    kiln_cuda_to_half(kiln_cuda_stream(), m->half == 2, m->nbias, bias, b16);
    return blas(LT->cublasLtMatmulDescSetAttribute(m->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b16, sizeof b16), "bias");
}

/* A and B: the step's tensors (an fp32 one is copied to 16 bits first where the product takes 16-bit operands);
 * a rounded forward's D in 16 bits, widened into an fp32 output */
static kiln_status mm_run(const matmul *m, const kiln_tdesc *ta, const kiln_tdesc *tb, void *c, const float *bias, int acc, void *ws) {
    static const float one = 1.0f, zero = 0.0f;
    const void *a = ta->data, *b = tb->data;
    if (m->half && !kiln_cuda_half_kind(ta)) { /* the 16-bit copies, on the same stream just before the product */
        kiln_cuda_to_half(kiln_cuda_stream(), m->half == 2, m->na, a, (char *)ws + m->off_a);
        a = (char *)ws + m->off_a;
    }
    if (m->half && !kiln_cuda_half_kind(tb)) {
        kiln_cuda_to_half(kiln_cuda_stream(), m->half == 2, m->nb, b, (char *)ws + m->off_b);
        b = (char *)ws + m->off_b;
    }
    void *d = m->round && !m->d16 ? (char *)ws + m->off_d : c;
    kiln_status st = round_bias(m, bias, ws);
    if (st == KILN_OK)
        st = blas(LT->cublasLtMatmul(lt, m->desc, &one, a, m->a, b, m->b, acc ? &one : &zero, d, m->c, d, m->c, &m->algo, ws, m->ws,
                                     (cudaStream_t)kiln_cuda_stream()),
                  "matmul");
    if (st == KILN_OK && d != c) kiln_cuda_widen(kiln_cuda_stream(), m->half, m->nd, d, c);
    return st;
}

void kiln_cuda_linear_release(kiln_step *s) {
    mm_free(s->kobj);
    free(s->kobj);
}

/* the step's math: --matmul-precision's, or tensor cores where the autocast pass gave the step reduced operands:
 * fp16 (--precision fp16: 3), else bf16 (--precision bf16; auto too: on tensor cores bf16 is the faster) */
static int math_of(const kiln_step *s) {
    if (s->precision == KILN_PRECISION_FP16) return 3;
    return s->precision != KILN_PRECISION_FP32 ? 2 : kiln_cuda_precision();
}

/* A bias gradient beside a product with 16-bit operands (the autocast pass's steps) sums dy as the product reads
 * it, rounded to bf16 (fp16): as PyTorch's autocast (its dy is a bf16 tensor), the cpu backend and the reference
 * compute it. So the half-storage pass may store that dy in 16 bits without changing a number. */
static int bias_round(const kiln_step *s) {
    return s->precision == KILN_PRECISION_FP16 ? 2 : s->precision != KILN_PRECISION_FP32 ? 1 : 0;
}

/* rows, in, out of the step, by op: forward (x, w), backward-data (dy, w), backward-weight (x, dy) */
static void dims(const kiln_step *s, int64_t *rows, int64_t *in, int64_t *out) {
    const kiln_tdesc *a = &s->in[0];
    if (s->op == KILN_OP_LINEAR_BWD_WEIGHT) {
        *in = a->shape[a->ndim - 1];
        *out = s->in[1].shape[s->in[1].ndim - 1];
    } else {
        *in = s->in[1].shape[1];
        *out = s->in[1].shape[0];
    }
    *rows = a->numel / a->shape[a->ndim - 1]; /* x [..., I] or dy [..., O]: every leading dim */
}

/* a forward's bias and fused relu as cuBLASLt's epilogue */
static cublasLtEpilogue_t epilogue_of(const kiln_step *s) {
    int relu = s->epilogue == KILN_EPI_RELU, bias = s->nin > 2;
    return bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
}

/* the step's product operands A and B as cuBLASLt takes them (the column-major reading): forward and
 * backward-data w then x (dy), backward-weight x then dy, or dy then x for a matmul's transposed weight */
static int w_transposed(const kiln_tdesc *w) { return w->stride[1] != 1; }
static void operands(const kiln_step *s, const kiln_tdesc **a, const kiln_tdesc **b) {
    int first = 1; /* A is input 1 */
    if (s->op == KILN_OP_LINEAR_BWD_WEIGHT) first = 0;
    if (s->op == KILN_OP_MATMUL_BWD_WEIGHT) first = w_transposed(&s->out[0]) ? 0 : 1;
    *a = &s->in[first], *b = &s->in[1 - first];
}

/* the 16-bit kind of an operand the half-storage pass stored so (else 0), and which of A and B are */
static void stored(const kiln_step *s, matmul *m) {
    const kiln_tdesc *a, *b;
    operands(s, &a, &b);
    m->a16 = kiln_cuda_half_kind(a) != 0, m->b16 = kiln_cuda_half_kind(b) != 0;
    m->half = m->a16 ? kiln_cuda_half_kind(a) : kiln_cuda_half_kind(b);
}

/* the step keeps the matmul prepare made, or it is freed */
static kiln_status keep(kiln_step *s, matmul *m, kiln_status st) {
    if (st != KILN_OK) {
        mm_free(m);
        free(m);
        return st;
    }
    s->kobj = m;
    s->owns_kobj = 1;
    return KILN_OK;
}

/* an autocast forward writes its output rounded (kiln_step.round_out: PyTorch's autocast linear writes bf16): in
 * the output where it is stored in 16 bits; a bias of nbias values rounded with it */
static void rounding(const kiln_step *s, matmul *m, int64_t nbias) {
    if (!(s->round_out & 1) || (s->op != KILN_OP_LINEAR && s->op != KILN_OP_MATMUL)) return;
    m->round = s->precision == KILN_PRECISION_FP16 ? 2 : 1;
    m->d16 = kiln_cuda_half_kind(&s->out[0]) != 0;
    m->nbias = s->nin > 2 ? nbias : 0;
}

kiln_status kiln_cuda_linear_prepare(kiln_step *s, kiln_prep *p) {
    int64_t rows, in, out;
    dims(s, &rows, &in, &out);
    matmul *m = calloc(1, sizeof *m);
    if (!m) return kiln_fail(KILN_ERR_NOMEM, "out of memory");
    m->align = step_align(s);
    stored(s, m);
    rounding(s, m, out);
    kiln_status st;
    if (s->op == KILN_OP_LINEAR) {
        int bias = s->nin > 2;
        cublasLtEpilogue_t e = epilogue_of(s);
        st = mm_make(m, math_of(s), 1, 0, out, rows, in, e, bias ? s->in[2].data : NULL, &p->workspace);
    } else if (s->op == KILN_OP_LINEAR_BWD_DATA) {
        st = mm_make(m, math_of(s), 0, 0, in, rows, out, CUBLASLT_EPILOGUE_DEFAULT, NULL, &p->workspace);
    } else {
        st = mm_make(m, math_of(s), 0, 1, in, out, rows, CUBLASLT_EPILOGUE_DEFAULT, NULL, &p->workspace);
    }
    return keep(s, m, st);
}

/* the step's product: its operands as operands() reads them, into output 0 (added to where it accumulates) */
static kiln_status product(const kiln_step *s, const kiln_run_ctx *rc, int acc) {
    const kiln_tdesc *a, *b;
    operands(s, &a, &b);
    const float *bias = s->op == KILN_OP_LINEAR || s->op == KILN_OP_MATMUL ? (s->nin > 2 ? s->in[2].data : NULL) : NULL;
    return mm_run(s->kobj, a, b, s->out[0].data, bias, acc, rc->workspace);
}

kiln_status kiln_cuda_linear_fwd(const kiln_step *s, const kiln_run_ctx *rc) { return product(s, rc, 0); }

kiln_status kiln_cuda_linear_bwd_data(const kiln_step *s, const kiln_run_ctx *rc) { return product(s, rc, kiln_step_acc(s, rc, 0)); }

kiln_status kiln_cuda_linear_bwd_weight(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_status st = product(s, rc, kiln_step_acc(s, rc, 0));
    int64_t rows, in, out;
    dims(s, &rows, &in, &out);
    if (st == KILN_OK && s->nout > 1 && s->out[1].data)
        kiln_cuda_col_sums(kiln_cuda_stream(), rows, out, s->in[1].data, kiln_cuda_half_kind(&s->in[1]), bias_round(s),
                           s->out[1].data, kiln_step_acc(s, rc, 1));
    return st;
}

/* matmul: x[..., K] @ w[K, N] (+ b), w row-major or a transposed view (the tied
 * output embedding, wte^T: strides (1, K)); the same column-major reading as
 * linear's, with w's transposition chosen by its strides */

kiln_status kiln_cuda_matmul_prepare(kiln_step *s, kiln_prep *p) {
    const kiln_tdesc *a = &s->in[0], *w = s->op == KILN_OP_MATMUL_BWD_WEIGHT ? &s->out[0] : &s->in[1];
    int64_t K = w->shape[0], N = w->shape[1];
    int64_t rows = a->numel / a->shape[a->ndim - 1];
    int contiguous = w->stride[1] == 1 && w->stride[0] == N, transposed = w->stride[0] == 1 && w->stride[1] == K;
    if (!contiguous && !transposed)
        return kiln_fail(KILN_ERR_BACKEND, "%s: the cuda backend has no matmul kernel for a weight of strides (%lld, %lld)",
                         s->name, (long long)w->stride[0], (long long)w->stride[1]);
    matmul *m = calloc(1, sizeof *m);
    if (!m) return kiln_fail(KILN_ERR_NOMEM, "out of memory");
    m->align = step_align(s);
    stored(s, m);
    rounding(s, m, N);
    kiln_status st;
    if (s->op == KILN_OP_MATMUL) {
        int bias = s->nin > 2;
        cublasLtEpilogue_t e = epilogue_of(s);
        st = mm_make(m, math_of(s), w_transposed(w), 0, N, rows, K, e, bias ? s->in[2].data : NULL, &p->workspace);
    } else if (s->op == KILN_OP_MATMUL_BWD_DATA) {
        st = mm_make(m, math_of(s), !w_transposed(w), 0, K, rows, N, CUBLASLT_EPILOGUE_DEFAULT, NULL, &p->workspace);
    } else if (!transposed) { /* column-major dw^T [N, K] = dy^T [N, rows] x [rows, K] */
        st = mm_make(m, math_of(s), 0, 1, N, K, rows, CUBLASLT_EPILOGUE_DEFAULT, NULL, &p->workspace);
    } else { /* dw stored as [N, K]: column-major dw [K, N] = x^T [K, rows] dy [rows, N] */
        st = mm_make(m, math_of(s), 0, 1, K, N, rows, CUBLASLT_EPILOGUE_DEFAULT, NULL, &p->workspace);
    }
    return keep(s, m, st);
}

kiln_status kiln_cuda_matmul_bwd_weight(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_status st = product(s, rc, kiln_step_acc(s, rc, 0));
    int64_t N = s->out[0].shape[1], rows = s->in[1].numel / N;
    if (st == KILN_OK && s->nout > 1 && s->out[1].data)
        kiln_cuda_col_sums(kiln_cuda_stream(), rows, N, s->in[1].data, kiln_cuda_half_kind(&s->in[1]), bias_round(s),
                           s->out[1].data, kiln_step_acc(s, rc, 1));
    return st;
}
