/* simt's cuDNN: the legacy convolution calls src/backends/cuda/conv.c makes,
 * on the host, so that conv.c itself (its descriptors, the autotuner's pick
 * among timed algorithms, the remembered decisions, workspace sizes,
 * accumulation through beta, the bias and relu after the product, the bias
 * gradient) runs in `make test` on simt instead of the cpu's kernels
 * standing in. Written from cuDNN's documented semantics, not its code:
 * NCHW fp32 tensors and KCRS filters, cross-correlation with symmetric
 * padding and stride (no dilation, one group: all conv.c asks for),
 *   forward        y  = alpha conv(x, w) + beta y
 *   backward-data  dx = alpha conv^T(dy, w) + beta dx
 *   backward-filter dw = alpha corr(x, dy) + beta dw
 *   backward-bias  db = alpha sum_{n,h,w} dy + beta db
 * summed in double. Three algorithms each way: 0 deterministic in tensor-op
 * math (TF32: operands rounded to 10 fraction bits), 1 nondeterministic and
 * "fastest", 2 deterministic FMA math (fp32 as it is), each with its own
 * workspace size; the workspace given is filled with NaN before each call, a
 * call with less than its algorithm asks or with descriptors that do not
 * chain is refused (stderr says why), and Find*Ex overwrites its output as
 * cuDNN's timing does. cudaMalloc, cudaFree and cudaGetDeviceProperties are
 * the host's here too. Renamed kiln_simt_* by cmake/simt.cmake. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cudnn.h>

struct cudnnContext {
    int stream_set;
};
struct cudnnTensorStruct {
    int set, n, c, h, w;
};
struct cudnnFilterStruct {
    int set, k, c, r, s;
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
    if (f != CUDNN_TENSOR_NCHW || t != CUDNN_DATA_FLOAT) return refuse("a tensor not NCHW fp32");
    if (n < 1 || c < 1 || h < 1 || w < 1) return refuse("a tensor dimension below 1");
    *d = (struct cudnnTensorStruct){1, n, c, h, w};
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
    if (f != CUDNN_TENSOR_NCHW || t != CUDNN_DATA_FLOAT) return refuse("a filter not KCRS fp32");
    if (k < 1 || c < 1 || r < 1 || s < 1) return refuse("a filter dimension below 1");
    *d = (struct cudnnFilterStruct){1, k, c, r, s};
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
        return refuse("a convolution other than conv.c's (square padding and stride, no dilation, fp32)");
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
    return f->c == x->c && y->n == x->n && y->c == f->k && y->h == p->oh && y->w == p->ow;
}

/* tensor-op math on fp32 data is TF32: 10 fraction bits, nearest even */
static double operand(float v, cudnnMathType_t math) {
    if (math == CUDNN_FMA_MATH) return v;
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    memcpy(&v, &u, 4);
    return v;
}

/* a tensor's elements as the math type takes them, in double: each rounded once, not at every product */
static double *widened(const float *v, size_t n, cudnnMathType_t m) {
    double *d = malloc((n ? n : 1) * sizeof *d);
    for (size_t i = 0; d && i < n; i++) d[i] = operand(v[i], m);
    return d;
}

#define X(b, ch, i, j) x[(((size_t)(b) * p->c + (ch)) * p->h + (i)) * p->w + (j)]
#define NX ((size_t)p->n * p->c * p->h * p->w)
#define NW ((size_t)p->k * p->c * p->r * p->s)
#define NY ((size_t)p->n * p->k * p->oh * p->ow)

/* out = alpha * sum + beta * out, beta 0 ignoring what out held (NaN included), as cuDNN does */
static void put(float *out, double sum, const void *alpha, const void *beta) {
    float a, b;
    memcpy(&a, alpha, 4);
    memcpy(&b, beta, 4);
    *out = (float)(a * sum + (b != 0.f ? b * (double)*out : 0.0));
}

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
static cudnnStatus_t forward(const problem *p, cudnnMathType_t m, const float *xf, const float *wf, float *y, const void *al,
                             const void *be) {
    size_t crs = (size_t)p->c * p->r * p->s, ohw = (size_t)p->oh * p->ow;
    double *x = widened(xf, NX, m), *w = widened(wf, NW, m), *col = malloc(crs * ohw * sizeof *col), *acc = malloc(ohw * sizeof *acc);
    cudnnStatus_t st = x && w && col && acc ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
    for (int b = 0; st == CUDNN_STATUS_SUCCESS && b < p->n; b++) {
        im2col(p, x, b, col);
        for (int o = 0; o < p->k; o++) {
            memset(acc, 0, ohw * sizeof *acc);
            for (size_t q = 0; q < crs; q++) {
                double wq = w[(size_t)o * crs + q];
                const double *row = col + q * ohw;
                for (size_t e = 0; e < ohw; e++) acc[e] += wq * row[e];
            }
            for (size_t e = 0; e < ohw; e++) put(&y[((size_t)b * p->k + o) * ohw + e], acc[e], al, be);
        }
    }
    free(x), free(w), free(col), free(acc);
    return st;
}

/* dcol [crs, ohw] = W^T . dy[b], then each patch element added back where it came from */
static cudnnStatus_t backward_data(const problem *p, cudnnMathType_t m, const float *wf, const float *yf, float *xo, const void *al,
                                   const void *be) {
    size_t crs = (size_t)p->c * p->r * p->s, ohw = (size_t)p->oh * p->ow, hw = (size_t)p->h * p->w;
    double *w = widened(wf, NW, m), *y = widened(yf, NY, m), *col = malloc(crs * ohw * sizeof *col), *img = malloc(p->c * hw * sizeof *img);
    cudnnStatus_t st = w && y && col && img ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
    for (int b = 0; st == CUDNN_STATUS_SUCCESS && b < p->n; b++) {
        memset(col, 0, crs * ohw * sizeof *col);
        for (int o = 0; o < p->k; o++) {
            const double *dy = y + ((size_t)b * p->k + o) * ohw;
            for (size_t q = 0; q < crs; q++) {
                double wq = w[(size_t)o * crs + q];
                double *row = col + q * ohw;
                for (size_t e = 0; e < ohw; e++) row[e] += wq * dy[e];
            }
        }
        memset(img, 0, p->c * hw * sizeof *img);
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
        for (size_t e = 0; e < p->c * hw; e++) put(&xo[(size_t)b * p->c * hw + e], img[e], al, be);
    }
    free(w), free(y), free(col), free(img);
    return st;
}

/* dW [k, crs] = sum over images of dy[b] [k, ohw] . col^T: each output position adds dy times its patch */
static cudnnStatus_t backward_filter(const problem *p, cudnnMathType_t m, const float *xf, const float *yf, float *wo, const void *al,
                                     const void *be) {
    size_t crs = (size_t)p->c * p->r * p->s, ohw = (size_t)p->oh * p->ow;
    double *x = widened(xf, NX, m), *y = widened(yf, NY, m), *col = malloc(crs * ohw * sizeof *col),
           *patch = malloc(crs * ohw * sizeof *patch), *dw = calloc((size_t)p->k * crs, sizeof *dw);
    cudnnStatus_t st = x && y && col && patch && dw ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
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
    for (size_t e = 0; st == CUDNN_STATUS_SUCCESS && e < (size_t)p->k * crs; e++) put(&wo[e], dw[e], al, be);
    free(x), free(y), free(col), free(patch), free(dw);
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
    cudnnStatus_t st = forward(&p, CUDNN_FMA_MATH, x, w, y, &one, &zero); /* timing writes y */
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
    if (st == CUDNN_STATUS_SUCCESS) st = forward(&p, algo_math(algo), x, w, y, alpha, beta);
    return st;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t cv, const cudnnTensorDescriptor_t dx, const int n,
                                                          int *count, cudnnConvolutionBwdDataAlgoPerf_t *perf) {
    problem p;
    if (!h || !chain(dx, w, cv, dy, &p)) return refuse("backward data: descriptors that do not chain");
    PERF(cudnnConvolutionBwdDataAlgoPerf_t, perf, n, count);
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
    cudnnStatus_t st = backward_data(&p, CUDNN_FMA_MATH, w, dy, dx, &one, &zero);
    PERF(cudnnConvolutionBwdDataAlgoPerf_t, perf, n, count);
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
    if (st == CUDNN_STATUS_SUCCESS) st = backward_data(&p, algo_math(algo), w, dy, dx, alpha, beta);
    return st;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t cv, const cudnnFilterDescriptor_t dw, const int n,
                                                            int *count, cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
    problem p;
    if (!h || !chain(x, dw, cv, dy, &p)) return refuse("backward filter: descriptors that do not chain");
    PERF(cudnnConvolutionBwdFilterAlgoPerf_t, perf, n, count);
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
    cudnnStatus_t st = backward_filter(&p, CUDNN_FMA_MATH, x, dy, dw, &one, &zero);
    PERF(cudnnConvolutionBwdFilterAlgoPerf_t, perf, n, count);
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
    if (st == CUDNN_STATUS_SUCCESS) st = backward_filter(&p, algo_math(algo), x, dy, dw, alpha, beta);
    return st;
}

cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t dyd, const void *dy,
                                           const void *beta, const cudnnTensorDescriptor_t dbd, void *db) {
    if (!h || !dyd->set || !dbd->set || dbd->n != 1 || dbd->c != dyd->c || dbd->h != 1 || dbd->w != 1)
        return refuse("backward bias: descriptors that do not chain");
    const float *y = dy;
    size_t hw = (size_t)dyd->h * dyd->w;
    for (int o = 0; o < dyd->c; o++) {
        double s = 0;
        for (int b = 0; b < dyd->n; b++)
            for (size_t i = 0; i < hw; i++) s += y[((size_t)b * dyd->c + o) * hw + i];
        put((float *)db + o, s, alpha, beta);
    }
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
