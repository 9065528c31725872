/* simt's cuDNN: the legacy convolution calls src/backends/cuda/conv.c makes,
 * on the host, so that conv.c itself (its descriptors, the autotuner's pick
 * among timed algorithms, the remembered decisions, workspace sizes,
 * accumulation through beta, the bias and relu after the product, the bias
 * gradient) runs in `make test` on simt instead of the cpu's kernels
 * standing in. Written from cuDNN's documented semantics, not its code:
 * NCHW or NHWC tensors and KCRS or KRSC filters, all fp32 (FLOAT_CONFIG)
 * or all bf16 or all fp16 with fp32 compute (PSEUDO_BFLOAT16_CONFIG,
 * PSEUDO_HALF_CONFIG: a 16-bit output is written rounded to nearest even),
 * cross-correlation with symmetric padding and stride (no dilation, one
 * group: all conv.c asks for),
 *   forward        y  = alpha conv(x, w) + beta y
 *   backward-data  dx = alpha conv^T(dy, w) + beta dx
 *   backward-filter dw = alpha corr(x, dy) + beta dw
 *   backward-bias  db = alpha sum_{n,h,w} dy + beta db
 * summed in double. Three algorithms each way: 0 deterministic in tensor-op
 * math (TF32 on fp32 data: operands rounded to 10 fraction bits; 16-bit data
 * as it is), 1 nondeterministic and
 * "fastest", 2 deterministic FMA math (fp32 as it is), each with its own
 * workspace size; the workspace given is filled with NaN before each call, a
 * call with less than its algorithm asks or with descriptors that do not
 * chain is refused (stderr says why), and Find*Ex overwrites its output as
 * cuDNN's timing does. KILN_SIMT_CUDNN_FP32_ONLY=1 refuses 16-bit tensors,
 * KILN_SIMT_CUDNN_FP32_BWD=1 16-bit backward algorithms (conv.c's fallbacks
 * to fp32 are tested so). cudaMalloc, cudaFree and cudaGetDeviceProperties are
 * the host's here too. Renamed kiln_simt_* by cmake/simt.cmake. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include "half_bits.h"

struct cudnnContext {
    int stream_set;
};
struct cudnnTensorStruct {
    int set, n, c, h, w, nhwc;
    cudnnDataType_t type;
};
struct cudnnFilterStruct {
    int set, k, c, r, s, nhwc; /* nhwc: KRSC */
    cudnnDataType_t type;
};
struct cudnnConvolutionStruct {
    int set, pad, stride;
    cudnnMathType_t math;
};

static const size_t algo_ws[3] = {1024, 4096, 0};

static cudnnStatus_t refuse(const char *why) {
    fprintf(stderr, "simt's cuDNN: %s\n", why);
    return CUDNN_STATUS_BAD_PARAM;
}

/* ---- handles and descriptors ---- */
cudnnStatus_t cudnnCreate(cudnnHandle_t *h) {
    return (*h = calloc(1, sizeof **h)) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
    free(h);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
    (void)s;
    h->stream_set = 1;
    return CUDNN_STATUS_SUCCESS;
}
const char *cudnnGetErrorString(cudnnStatus_t s) { return s == CUDNN_STATUS_SUCCESS ? "success" : "simt's cuDNN refused"; }
size_t cudnnGetVersion(void) { return 90000; }

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) {
    return (*d = calloc(1, sizeof **d)) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
    free(d);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t, int n, int c, int h,
                                         int w) {
    if ((f != CUDNN_TENSOR_NCHW && f != CUDNN_TENSOR_NHWC) || (t != CUDNN_DATA_FLOAT && t != CUDNN_DATA_BFLOAT16 && t != CUDNN_DATA_HALF))
        return refuse("a tensor not NCHW or NHWC, fp32, bf16 or fp16");
    if (n < 1 || c < 1 || h < 1 || w < 1) return refuse("a tensor dimension below 1");
    /* tests: a cuDNN without 16-bit convolutions (for a shape), which conv.c answers with fp32 */
    if (t != CUDNN_DATA_FLOAT && getenv("KILN_SIMT_CUDNN_FP32_ONLY")) return refuse("no 16-bit tensors (KILN_SIMT_CUDNN_FP32_ONLY)");
    *d = (struct cudnnTensorStruct){1, n, c, h, w, f == CUDNN_TENSOR_NHWC, t};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) {
    return (*d = calloc(1, sizeof **d)) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
    free(d);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f, int k, int c, int r,
                                         int s) {
    if ((f != CUDNN_TENSOR_NCHW && f != CUDNN_TENSOR_NHWC) || (t != CUDNN_DATA_FLOAT && t != CUDNN_DATA_BFLOAT16 && t != CUDNN_DATA_HALF))
        return refuse("a filter not KCRS or KRSC, fp32, bf16 or fp16");
    if (k < 1 || c < 1 || r < 1 || s < 1) return refuse("a filter dimension below 1");
    *d = (struct cudnnFilterStruct){1, k, c, r, s, f == CUDNN_TENSOR_NHWC, t};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) {
    return (*d = calloc(1, sizeof **d)) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
    free(d);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int u, int v, int dh, int dw,
                                              cudnnConvolutionMode_t mode, cudnnDataType_t t) {
    if (ph != pw || u != v || dh != 1 || dw != 1 || mode != CUDNN_CROSS_CORRELATION || t != CUDNN_DATA_FLOAT || ph < 0 || u < 1)
        return refuse("a convolution other than conv.c's (square padding and stride, no dilation, fp32 compute)");
    d->set = 1, d->pad = ph, d->stride = u;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) {
    d->math = m;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- the problem ---- */
typedef struct {
    int n, c, h, w, k, r, s, oh, ow, pad, stride;
} problem;

static int chain(const struct cudnnTensorStruct *x, const struct cudnnFilterStruct *f, const struct cudnnConvolutionStruct *cv,
                 const struct cudnnTensorStruct *y, problem *p) {
    if (!x->set || !f->set || !cv->set || !y->set) return 0;
    *p = (problem){x->n, x->c, x->h, x->w, f->k, f->r, f->s, 0, 0, cv->pad, cv->stride};
    p->oh = (x->h + 2 * cv->pad - f->r) / cv->stride + 1;
    p->ow = (x->w + 2 * cv->pad - f->s) / cv->stride + 1;
    /* one data type for x, w and y (the configurations with fp32 compute) */
    return f->c == x->c && y->n == x->n && y->c == f->k && y->h == p->oh && y->w == p->ow && x->type == f->type && y->type == x->type;
}

/* a tensor or filter as it lies in memory: NCHW or NHWC (a filter's k, c, r, s as n, c, h, w), its type */
typedef struct {
    int n, c, h, w, nhwc;
    cudnnDataType_t type;
} tview;
static tview of_tensor(const struct cudnnTensorStruct *t) { return (tview){t->n, t->c, t->h, t->w, t->nhwc, t->type}; }
static tview of_filter(const struct cudnnFilterStruct *f) { return (tview){f->k, f->c, f->r, f->s, f->nhwc, f->type}; }
static size_t elems(const tview *v) { return (size_t)v->n * v->c * v->h * v->w; }

/* where NCHW element e lies */
static size_t place(const tview *v, size_t e) {
    size_t j = e % v->w, i = e / v->w % v->h, ch = e / v->w / v->h % v->c, b = e / v->w / v->h / v->c;
    return v->nhwc ? ((b * v->h + i) * v->w + j) * v->c + ch : e;
}
static double get(const void *p, const tview *v, size_t k) {
    if (v->type == CUDNN_DATA_FLOAT) return ((const float *)p)[k];
    return simt_half_get(((const uint16_t *)p)[k], v->type == CUDNN_DATA_HALF);
}

/* tensor-op math on fp32 data is TF32: 10 fraction bits, nearest even (16-bit data has fewer: as it is) */
static double operand(double d, cudnnDataType_t t, cudnnMathType_t math) {
    return math == CUDNN_FMA_MATH || t != CUDNN_DATA_FLOAT ? d : simt_round_tf32(d);
}

/* a tensor's elements in NCHW order, as the math type takes them, in double: each rounded once */
static double *load(const void *p, tview v, cudnnMathType_t m) {
    size_t n = elems(&v);
    double *d = malloc((n ? n : 1) * sizeof *d);
    for (size_t e = 0; d && e < n; e++) d[e] = operand(get(p, &v, place(&v, e)), v.type, m);
    return d;
}

/* out = alpha * sum + beta * out for NCHW sums d, beta 0 ignoring what out held (NaN included), as cuDNN does;
 * a 16-bit output rounded to nearest even */
static void store(void *out, tview v, const double *d, const void *alpha, const void *beta) {
    float a, b;
    memcpy(&a, alpha, 4);
    memcpy(&b, beta, 4);
    for (size_t e = 0; e < elems(&v); e++) {
        size_t k = place(&v, e);
        double r = a * d[e] + (b != 0.f ? b * get(out, &v, k) : 0.0);
        if (v.type == CUDNN_DATA_FLOAT) ((float *)out)[k] = (float)r;
        else ((uint16_t *)out)[k] = simt_half_put(r, v.type == CUDNN_DATA_HALF);
    }
}

#define X(b, ch, i, j) x[(((size_t)(b) * p->c + (ch)) * p->h + (i)) * p->w + (j)]

/* image b's patches: col[(ch r + u) s + v][i ow + j] = x[b, ch, i stride - pad + u, j stride - pad + v], 0 outside */
static void im2col(const problem *p, const double *x, int b, double *col) {
    size_t ohw = (size_t)p->oh * p->ow;
    for (int ch = 0; ch < p->c; ch++)
        for (int u = 0; u < p->r; u++)
            for (int v = 0; v < p->s; v++) {
                double *row = col + ((size_t)(ch * p->r + u) * p->s + v) * ohw;
                for (int i = 0; i < p->oh; i++)
                    for (int j = 0; j < p->ow; j++) {
                        int ii = i * p->stride - p->pad + u, jj = j * p->stride - p->pad + v;
                        row[(size_t)i * p->ow + j] = ii >= 0 && ii < p->h && jj >= 0 && jj < p->w ? X(b, ch, ii, jj) : 0.0;
                    }
            }
}

/* y[b] = W [k, crs] . col [crs, ohw] */
static cudnnStatus_t forward(const problem *p, const double *x, const double *w, double *y) {
    size_t crs = (size_t)p->c * p->r * p->s, ohw = (size_t)p->oh * p->ow;
    double *col = malloc(crs * ohw * sizeof *col);
    if (!col) return CUDNN_STATUS_ALLOC_FAILED;
    for (int b = 0; b < p->n; b++) {
        im2col(p, x, b, col);
        for (int o = 0; o < p->k; o++) {
            double *acc = y + ((size_t)b * p->k + o) * ohw;
            for (size_t q = 0; q < crs; q++) {
                double wq = w[(size_t)o * crs + q];
                const double *row = col + q * ohw;
                for (size_t e = 0; e < ohw; e++) acc[e] += wq * row[e];
            }
        }
    }
    free(col);
    return CUDNN_STATUS_SUCCESS;
}

/* dcol [crs, ohw] = W^T . dy[b], then each patch element added back where it came from */
static cudnnStatus_t backward_data(const problem *p, const double *w, const double *y, double *dx) {
    size_t crs = (size_t)p->c * p->r * p->s, ohw = (size_t)p->oh * p->ow, hw = (size_t)p->h * p->w;
    double *col = malloc(crs * ohw * sizeof *col);
    if (!col) return CUDNN_STATUS_ALLOC_FAILED;
    for (int b = 0; b < p->n; b++) {
        memset(col, 0, crs * ohw * sizeof *col);
        for (int o = 0; o < p->k; o++) {
            const double *dy = y + ((size_t)b * p->k + o) * ohw;
            for (size_t q = 0; q < crs; q++) {
                double wq = w[(size_t)o * crs + q];
                double *row = col + q * ohw;
                for (size_t e = 0; e < ohw; e++) row[e] += wq * dy[e];
            }
        }
        double *img = dx + (size_t)b * p->c * hw;
        for (int ch = 0; ch < p->c; ch++)
            for (int u = 0; u < p->r; u++)
                for (int v = 0; v < p->s; v++) {
                    const double *row = col + ((size_t)(ch * p->r + u) * p->s + v) * ohw;
                    for (int i = 0; i < p->oh; i++)
                        for (int j = 0; j < p->ow; j++) {
                            int ii = i * p->stride - p->pad + u, jj = j * p->stride - p->pad + v;
                            if (ii >= 0 && ii < p->h && jj >= 0 && jj < p->w) img[(size_t)ch * hw + (size_t)ii * p->w + jj] += row[(size_t)i * p->ow + j];
                        }
                }
    }
    free(col);
    return CUDNN_STATUS_SUCCESS;
}

/* dW [k, crs] = sum over images of dy[b] [k, ohw] . col^T: each output position adds dy times its patch */
static cudnnStatus_t backward_filter(const problem *p, const double *x, const double *y, double *dw) {
    size_t crs = (size_t)p->c * p->r * p->s, ohw = (size_t)p->oh * p->ow;
    double *col = malloc(crs * ohw * sizeof *col), *patch = malloc(crs * ohw * sizeof *patch);
    cudnnStatus_t st = col && patch ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
    for (int b = 0; st == CUDNN_STATUS_SUCCESS && b < p->n; b++) {
        im2col(p, x, b, col);
        for (size_t q = 0; q < crs; q++) /* patch [ohw, crs]: each position's patch contiguous */
            for (size_t e = 0; e < ohw; e++) patch[e * crs + q] = col[q * ohw + e];
        for (int o = 0; o < p->k; o++) {
            const double *dy = y + ((size_t)b * p->k + o) * ohw;
            double *row = dw + (size_t)o * crs;
            for (size_t e = 0; e < ohw; e++) {
                double g = dy[e];
                const double *pe = patch + e * crs;
                for (size_t q = 0; q < crs; q++) row[q] += g * pe[q];
            }
        }
    }
    free(col), free(patch);
    return st;
}

/* a direction on tensors as they lie: its two inputs loaded as math m takes them, the sums stored into the output */
typedef cudnnStatus_t (*direction)(const problem *, const double *, const double *, double *);
static cudnnStatus_t run(direction f, const problem *p, cudnnMathType_t m, tview va, const void *a, tview vb, const void *b, tview vo,
                         void *o, const void *al, const void *be) {
    size_t n = elems(&vo);
    double *da = load(a, va, m), *db = load(b, vb, m), *r = calloc(n ? n : 1, sizeof *r);
    cudnnStatus_t st = da && db && r ? f(p, da, db, r) : CUDNN_STATUS_ALLOC_FAILED;
    if (st == CUDNN_STATUS_SUCCESS) store(o, vo, r, al, be);
    free(da), free(db), free(r);
    return st;
}

/* ---- algorithms ---- */
#define PERF(type, perf, n, count)                                                                                      \
    do {                                                                                                                \
        static const int order[3] = {1, 0, 2}; /* fastest first, as cuDNN sorts them */                                 \
        *(count) = (n) < 3 ? (n) : 3;                                                                                    \
        for (int i_ = 0; i_ < *(count); i_++)                                                                           \
            (perf)[i_] = (type){.algo = order[i_], .status = CUDNN_STATUS_SUCCESS, .time = (float)(i_ + 1), .memory = algo_ws[order[i_]], \
                                .determinism = order[i_] == 1 ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC,                \
                                .mathType = order[i_] == 2 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH};                          \
    } while (0)

static cudnnMathType_t algo_math(int algo) { return algo == 2 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH; }

/* tests: KILN_SIMT_CUDNN_FP32_BWD=1 offers no 16-bit backward algorithm (each listed, none successful), the case
 * of a shape whose forward cuDNN takes in 16 bits and a backward direction not: conv.c runs that one in fp32 */
#define NO_HALF_BWD(perf, count, xd)                                                                            \
    do {                                                                                                        \
        if ((xd)->type != CUDNN_DATA_FLOAT && getenv("KILN_SIMT_CUDNN_FP32_BWD"))                              \
            for (int i_ = 0; i_ < *(count); i_++) (perf)[i_].status = CUDNN_STATUS_NOT_SUPPORTED;               \
    } while (0)

/* the workspace an algorithm needs is there; what it held is gone */
static cudnnStatus_t take_ws(int algo, void *ws, size_t bytes) {
    if (algo < 0 || algo > 2) return refuse("an algorithm it never offered");
    if (bytes < algo_ws[algo] || (algo_ws[algo] && !ws)) return refuse("less workspace than the algorithm asks for");
    if (ws && bytes) memset(ws, 0xff, bytes);
    return CUDNN_STATUS_SUCCESS;
}

static const float one = 1.f, zero = 0.f;

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t cv, const cudnnTensorDescriptor_t y, const int n,
                                                     int *count, cudnnConvolutionFwdAlgoPerf_t *perf) {
    problem p;
    if (!h || !chain(x, w, cv, y, &p)) return refuse("forward: descriptors that do not chain");
    PERF(cudnnConvolutionFwdAlgoPerf_t, perf, n, count);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x,
                                                     const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t cv,
                                                     const cudnnTensorDescriptor_t yd, void *y, const int n, int *count,
                                                     cudnnConvolutionFwdAlgoPerf_t *perf, void *ws, size_t bytes) {
    problem p;
    if (!h || !chain(xd, wd, cv, yd, &p)) return refuse("forward: descriptors that do not chain");
    if (!x || !w || !y) return refuse("forward timing without its tensors");
    if (bytes < 4096 || !ws) return refuse("forward timing with less workspace than every algorithm asks for");
    cudnnStatus_t st = run(forward, &p, CUDNN_FMA_MATH, of_tensor(xd), x, of_filter(wd), w, of_tensor(yd), y, &one, &zero); /* timing writes y */
    PERF(cudnnConvolutionFwdAlgoPerf_t, perf, n, count);
    return st;
}
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t cv, const cudnnTensorDescriptor_t y,
                                                      cudnnConvolutionFwdAlgo_t algo, size_t *bytes) {
    problem p;
    if (!h || !chain(x, w, cv, y, &p) || (int)algo < 0 || (int)algo > 2) return refuse("forward workspace: a bad query");
    *bytes = algo_ws[algo];
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd, const void *x,
                                      const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t cv,
                                      cudnnConvolutionFwdAlgo_t algo, void *ws, size_t bytes, const void *beta,
                                      const cudnnTensorDescriptor_t yd, void *y) {
    problem p;
    if (!h || !chain(xd, wd, cv, yd, &p)) return refuse("forward: descriptors that do not chain");
    if (cv->math != algo_math(algo) && cv->math != CUDNN_DEFAULT_MATH) return refuse("forward: a math type its algorithm lacks");
    cudnnStatus_t st = take_ws(algo, ws, bytes);
    if (st == CUDNN_STATUS_SUCCESS) st = run(forward, &p, algo_math(algo), of_tensor(xd), x, of_filter(wd), w, of_tensor(yd), y, alpha, beta);
    return st;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t cv, const cudnnTensorDescriptor_t dx, const int n,
                                                          int *count, cudnnConvolutionBwdDataAlgoPerf_t *perf) {
    problem p;
    if (!h || !chain(dx, w, cv, dy, &p)) return refuse("backward data: descriptors that do not chain");
    PERF(cudnnConvolutionBwdDataAlgoPerf_t, perf, n, count);
    NO_HALF_BWD(perf, count, dx);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t h, const cudnnFilterDescriptor_t wd, const void *w,
                                                          const cudnnTensorDescriptor_t dyd, const void *dy,
                                                          const cudnnConvolutionDescriptor_t cv, const cudnnTensorDescriptor_t dxd, void *dx,
                                                          const int n, int *count, cudnnConvolutionBwdDataAlgoPerf_t *perf, void *ws,
                                                          size_t bytes) {
    problem p;
    if (!h || !chain(dxd, wd, cv, dyd, &p)) return refuse("backward data: descriptors that do not chain");
    if (!w || !dy || !dx || bytes < 4096 || !ws) return refuse("backward-data timing without its tensors or workspace");
    cudnnStatus_t st = run(backward_data, &p, CUDNN_FMA_MATH, of_filter(wd), w, of_tensor(dyd), dy, of_tensor(dxd), dx, &one, &zero);
    PERF(cudnnConvolutionBwdDataAlgoPerf_t, perf, n, count);
    NO_HALF_BWD(perf, count, dxd);
    return st;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t cv, const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t *bytes) {
    problem p;
    if (!h || !chain(dx, w, cv, dy, &p) || (int)algo < 0 || (int)algo > 2) return refuse("backward-data workspace: a bad query");
    *bytes = algo_ws[algo];
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, const cudnnFilterDescriptor_t wd, const void *w,
                                           const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cv,
                                           cudnnConvolutionBwdDataAlgo_t algo, void *ws, size_t bytes, const void *beta,
                                           const cudnnTensorDescriptor_t dxd, void *dx) {
    problem p;
    if (!h || !chain(dxd, wd, cv, dyd, &p)) return refuse("backward data: descriptors that do not chain");
    if (cv->math != algo_math(algo) && cv->math != CUDNN_DEFAULT_MATH) return refuse("backward data: a math type its algorithm lacks");
    cudnnStatus_t st = take_ws(algo, ws, bytes);
    if (st == CUDNN_STATUS_SUCCESS) st = run(backward_data, &p, algo_math(algo), of_filter(wd), w, of_tensor(dyd), dy, of_tensor(dxd), dx, alpha, beta);
    return st;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t cv, const cudnnFilterDescriptor_t dw, const int n,
                                                            int *count, cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
    problem p;
    if (!h || !chain(x, dw, cv, dy, &p)) return refuse("backward filter: descriptors that do not chain");
    PERF(cudnnConvolutionBwdFilterAlgoPerf_t, perf, n, count);
    NO_HALF_BWD(perf, count, x);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x,
                                                            const cudnnTensorDescriptor_t dyd, const void *dy,
                                                            const cudnnConvolutionDescriptor_t cv, const cudnnFilterDescriptor_t dwd, void *dw,
                                                            const int n, int *count, cudnnConvolutionBwdFilterAlgoPerf_t *perf, void *ws,
                                                            size_t bytes) {
    problem p;
    if (!h || !chain(xd, dwd, cv, dyd, &p)) return refuse("backward filter: descriptors that do not chain");
    if (!x || !dy || !dw || bytes < 4096 || !ws) return refuse("backward-filter timing without its tensors or workspace");
    cudnnStatus_t st = run(backward_filter, &p, CUDNN_FMA_MATH, of_tensor(xd), x, of_tensor(dyd), dy, of_filter(dwd), dw, &one, &zero);
    PERF(cudnnConvolutionBwdFilterAlgoPerf_t, perf, n, count);
    NO_HALF_BWD(perf, count, xd);
    return st;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
                                                             const cudnnConvolutionDescriptor_t cv, const cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t *bytes) {
    problem p;
    if (!h || !chain(x, dw, cv, dy, &p) || (int)algo < 0 || (int)algo > 2) return refuse("backward-filter workspace: a bad query");
    *bytes = algo_ws[algo];
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd, const void *x,
                                             const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *ws, size_t bytes, const void *beta,
                                             const cudnnFilterDescriptor_t dwd, void *dw) {
    problem p;
    if (!h || !chain(xd, dwd, cv, dyd, &p)) return refuse("backward filter: descriptors that do not chain");
    if (cv->math != algo_math(algo) && cv->math != CUDNN_DEFAULT_MATH) return refuse("backward filter: a math type its algorithm lacks");
    cudnnStatus_t st = take_ws(algo, ws, bytes);
    if (st == CUDNN_STATUS_SUCCESS) st = run(backward_filter, &p, algo_math(algo), of_tensor(xd), x, of_tensor(dyd), dy, of_filter(dwd), dw, alpha, beta);
    return st;
}

cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t dyd, const void *dy,
                                           const void *beta, const cudnnTensorDescriptor_t dbd, void *db) {
    if (!h || !dyd->set || !dbd->set || dbd->n != 1 || dbd->c != dyd->c || dbd->h != 1 || dbd->w != 1 || dbd->type != dyd->type)
        return refuse("backward bias: descriptors that do not chain");
    tview v = of_tensor(dyd);
    double *sum = calloc((size_t)dyd->c, sizeof *sum);
    if (!sum) return CUDNN_STATUS_ALLOC_FAILED;
    size_t hw = (size_t)dyd->h * dyd->w;
    for (size_t e = 0; e < elems(&v); e++) sum[e / hw % (size_t)dyd->c] += get(dy, &v, place(&v, e));
    store(db, of_tensor(dbd), sum, alpha, beta);
    free(sum);
    return CUDNN_STATUS_SUCCESS;
}

/* ---- the CUDA runtime calls conv.c makes ---- */
cudaError_t cudaMalloc(void **p, size_t bytes) {
    return posix_memalign(p, 256, bytes ? bytes : 1) == 0 ? cudaSuccess : cudaErrorMemoryAllocation; /* conv.c's timing scratch */
}
cudaError_t cudaFree(void *p) {
    free(p);
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "simt host");
    return cudaSuccess;
}
