/* conv2d on cuDNN. At compile every algorithm cuDNN offers for the step's
 * real shape is timed (cudnnFind*AlgorithmEx, the guide's cudnn.benchmark) and
 * the fastest deterministic one kept, for the forward pass, backward-data and
 * backward-weights alike; the workspace it needs raises the plan's. Decisions
 * are remembered per problem, GPU and cuDNN version: for the process, on disk
 * (cuda-autotune-v1.txt beside the cpu's cache) and in checkpoints, so a
 * resumed run keeps its algorithms.
 * --matmul-precision highest keeps convolutions in fp32 FMA math; high and
 * medium let cuDNN use TF32 tensor cores (PyTorch's cudnn.allow_tf32). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include "backends/cuda/internal/cuda.h"

typedef struct {
    cudnnTensorDescriptor_t x, y, b;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    cudnnMathType_t math[3];
    size_t ws[3];
} conv_obj;

static cudnnHandle_t handle;

static kiln_status dnn(cudnnStatus_t s, const char *what) {
    if (s == CUDNN_STATUS_SUCCESS) return KILN_OK;
    return kiln_fail(KILN_ERR_BACKEND, "cuDNN: %s: %s", what, cudnnGetErrorString(s));
}

static void destroy_handle(void) {
    if (handle) cudnnDestroy(handle);
    handle = NULL;
}

static kiln_status get_handle(void) {
    if (handle) return cudnnSetStream(handle, (cudaStream_t)kiln_cuda_stream()) == CUDNN_STATUS_SUCCESS ? KILN_OK
                                                                                                          : kiln_fail(KILN_ERR_BACKEND, "cuDNN: set stream");
    kiln_status st = dnn(cudnnCreate(&handle), "create");
    if (st != KILN_OK) return st;
    atexit(destroy_handle); /* registered after cuDNN's own teardown, so it runs before it */
    return get_handle();
}

/* ---- remembered decisions: "<pass> <n>x<c>x<h>x<w> k<k> r<r>x<s> s<stride> p<pad> m<prec> <gpu> cudnn<ver>" = algo/math ---- */
#define MAX_DECISIONS 256
static struct { char key[192]; int algo, math; } decided[MAX_DECISIONS];
static int ndecided;

static void problem_key(const kiln_conv_shape *cs, const char *pass, char *key, size_t len) {
    static char gpu[64];
    if (!gpu[0]) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, 0) == cudaSuccess) snprintf(gpu, sizeof gpu, "%.63s", p.name);
        for (char *c = gpu; *c; c++)
            if (*c == ' ') *c = '_';
    }
    snprintf(key, len, "%s %lldx%lldx%lldx%lld k%lld r%lldx%lld s%lld p%lld m%d %s cudnn%zu", pass, (long long)cs->n,
             (long long)cs->c, (long long)cs->h, (long long)cs->w, (long long)cs->k, (long long)cs->r, (long long)cs->s,
             (long long)cs->stride, (long long)cs->pad, kiln_cuda_precision(), gpu, cudnnGetVersion());
}

static int recall(const char *key, int *math) {
    for (int i = 0; i < ndecided; i++)
        if (!strcmp(decided[i].key, key)) {
            *math = decided[i].math;
            return decided[i].algo;
        }
    return -1;
}

static void remember(const char *key, int algo, int math, int overwrite) {
    for (int i = 0; i < ndecided; i++)
        if (!strcmp(decided[i].key, key)) {
            if (overwrite) decided[i].algo = algo, decided[i].math = math;
            return;
        }
    if (ndecided == MAX_DECISIONS) return;
    snprintf(decided[ndecided].key, sizeof decided[ndecided].key, "%s", key);
    decided[ndecided].algo = algo;
    decided[ndecided++].math = math;
}

size_t kiln_cuda_conv_export(char *buf, size_t len) {
    size_t o = 0;
    for (int i = 0; i < ndecided; i++) {
        int n = snprintf(buf && o < len ? buf + o : NULL, buf && o < len ? len - o : 0, "%s = %d/%d\n", decided[i].key,
                         decided[i].algo, decided[i].math);
        o += (size_t)n;
    }
    if (buf && len) buf[o < len ? o : len - 1] = 0;
    return o;
}

kiln_status kiln_cuda_conv_import(const char *text, const char *source, int overwrite) {
    for (const char *l = text; l && *l;) {
        const char *e = strchr(l, '\n'), *eq = strstr(l, " = ");
        size_t n = e ? (size_t)(e - l) : strlen(l);
        int algo, math;
        if (!eq || eq > l + n || (size_t)(eq - l) >= sizeof decided[0].key || sscanf(eq + 3, "%d/%d", &algo, &math) != 2 ||
            algo < 0 || algo > 64 || math < 0 || math > 8)
            return kiln_fail(KILN_ERR_FORMAT, "%s: cuda autotune decision '%.*s' does not parse", source, (int)(n > 80 ? 80 : n), l);
        char key[192];
        snprintf(key, sizeof key, "%.*s", (int)(eq - l), l);
        remember(key, algo, math, overwrite);
        l = e ? e + 1 : NULL;
    }
    return KILN_OK;
}

/* ---- descriptors ---- */

static void release(conv_obj *c) {
    if (!c) return;
    if (c->x) cudnnDestroyTensorDescriptor(c->x);
    if (c->y) cudnnDestroyTensorDescriptor(c->y);
    if (c->b) cudnnDestroyTensorDescriptor(c->b);
    if (c->w) cudnnDestroyFilterDescriptor(c->w);
    if (c->conv) cudnnDestroyConvolutionDescriptor(c->conv);
    free(c);
}

void kiln_cuda_conv_release(kiln_step *s) {
    release(s->kobj);
}

static kiln_status describe(const kiln_conv_shape *cs, conv_obj *c) {
    kiln_status st = KILN_OK;
#define D(call, what) \
    if (st == KILN_OK) st = dnn(call, what)
    D(cudnnCreateTensorDescriptor(&c->x), "descriptor");
    D(cudnnCreateTensorDescriptor(&c->y), "descriptor");
    D(cudnnCreateTensorDescriptor(&c->b), "descriptor");
    D(cudnnCreateFilterDescriptor(&c->w), "descriptor");
    D(cudnnCreateConvolutionDescriptor(&c->conv), "descriptor");
    D(cudnnSetTensor4dDescriptor(c->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)cs->n, (int)cs->c, (int)cs->h, (int)cs->w), "x");
    D(cudnnSetTensor4dDescriptor(c->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)cs->n, (int)cs->k, (int)cs->oh, (int)cs->ow), "y");
    D(cudnnSetTensor4dDescriptor(c->b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, (int)cs->k, 1, 1), "bias");
    D(cudnnSetFilter4dDescriptor(c->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)cs->k, (int)cs->c, (int)cs->r, (int)cs->s), "w");
    D(cudnnSetConvolution2dDescriptor(c->conv, (int)cs->pad, (int)cs->pad, (int)cs->stride, (int)cs->stride, 1, 1,
                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT), "convolution");
    D(cudnnSetConvolutionMathType(c->conv, kiln_cuda_precision() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH), "math type");
#undef D
    return st;
}

/* the fastest successful result, deterministic ones first; fp32 FMA math only at the highest precision */
#define PICK(perf, n, out_algo, out_math, out_ws)                                                                   \
    do {                                                                                                            \
        int best = -1;                                                                                              \
        for (int pass = 0; pass < 2 && best < 0; pass++)                                                            \
            for (int i = 0; i < (n) && best < 0; i++) {                                                             \
                if ((perf)[i].status != CUDNN_STATUS_SUCCESS) continue;                                             \
                if (pass == 0 && (perf)[i].determinism != CUDNN_DETERMINISTIC) continue;                            \
                if (!kiln_cuda_precision() && (perf)[i].mathType != CUDNN_FMA_MATH) continue;                       \
                best = i;                                                                                           \
            }                                                                                                       \
        if (best < 0) return kiln_fail(KILN_ERR_BACKEND, "cuDNN offers no usable algorithm for %s", key);          \
        out_algo = (perf)[best].algo;                                                                               \
        out_math = (perf)[best].mathType;                                                                           \
        out_ws = (perf)[best].memory;                                                                               \
    } while (0)

/* scratch for timing: the plan's workspace does not exist yet */
#define FIND_WS ((size_t)256 << 20)

static kiln_status find_fwd(const kiln_step *s, conv_obj *c, int tune, void *ws, const char *key) {
    int math, algo = recall(key, &math), n = 0;
    if (algo >= 0) {
        c->fwd = (cudnnConvolutionFwdAlgo_t)algo;
        c->math[0] = (cudnnMathType_t)math;
        cudnnSetConvolutionMathType(c->conv, c->math[0]);
        return dnn(cudnnGetConvolutionForwardWorkspaceSize(handle, c->x, c->w, c->conv, c->y, c->fwd, &c->ws[0]), "workspace size");
    }
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    kiln_status st = tune ? dnn(cudnnFindConvolutionForwardAlgorithmEx(handle, c->x, s->in[0].data, c->w, s->in[1].data, c->conv,
                                                                        c->y, s->out[0].data, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                                        &n, perf, ws, FIND_WS), "timing forward algorithms")
                          : dnn(cudnnGetConvolutionForwardAlgorithm_v7(handle, c->x, c->w, c->conv, c->y,
                                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf), "heuristics");
    if (st != KILN_OK) return st;
    PICK(perf, n, c->fwd, c->math[0], c->ws[0]);
    if (tune) remember(key, c->fwd, c->math[0], 0);
    return dnn(cudnnSetConvolutionMathType(c->conv, c->math[0]), "math type");
}

kiln_status kiln_cuda_conv_prepare(kiln_step *s, kiln_prep *p) {
    const kiln_tdesc *x = &s->in[0], *w = &s->in[1];
    s->sz.conv = (kiln_conv_shape){.n = x->shape[0], .c = x->shape[1], .h = x->shape[2], .w = x->shape[3], .k = w->shape[0],
                                   .r = w->shape[2], .s = w->shape[3], .stride = s->attr.conv.stride, .pad = s->attr.conv.pad,
                                   .dilation = s->attr.conv.dilation, .groups = s->attr.conv.groups};
    kiln_conv_shape_infer(&s->sz.conv);
    /* cuDNN takes both, but kiln's CUDA path for them has never run on a GPU: refuse rather than guess */
    if (s->sz.conv.dilation != 1 || s->sz.conv.groups != 1)
        return kiln_fail(KILN_ERR_BACKEND, "%s: the cuda backend has no conv2d kernel for dilation %lld, groups %lld yet",
                         s->name, (long long)s->sz.conv.dilation, (long long)s->sz.conv.groups);
    kiln_status st = get_handle();
    conv_obj *c = calloc(1, sizeof *c);
    if (!c) return kiln_fail(KILN_ERR_NOMEM, "out of memory");
    if (st == KILN_OK) st = describe(&s->sz.conv, c);
    char key[192];
    problem_key(&s->sz.conv, "fwd", key, sizeof key);
    void *ws = NULL;
    int tune = p->o->autotune && s->in[0].data && s->in[1].data;
    if (st == KILN_OK && tune && cudaMalloc(&ws, FIND_WS) != cudaSuccess) st = kiln_fail(KILN_ERR_NOMEM, "CUDA: no memory to time algorithms");
    if (st == KILN_OK) st = find_fwd(s, c, tune, ws, key);
    if (ws) cudaFree(ws);
    if (st != KILN_OK) {
        release(c);
        return st;
    }
    s->kobj = c;
    s->owns_kobj = 1;
    if (c->ws[0] > p->workspace) p->workspace = c->ws[0];
    return KILN_OK;
}

static kiln_status find_bwd(kiln_step *s, conv_obj *c, int tune, void *ws) {
    char key[192];
    int data = s->op == KILN_OP_CONV2D_BWD_DATA, math, n = 0;
    problem_key(&s->sz.conv, data ? "bwd_data" : "bwd_weight", key, sizeof key);
    int algo = recall(key, &math);
    kiln_status st = KILN_OK;
    if (data) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        if (algo >= 0) perf[0] = (cudnnConvolutionBwdDataAlgoPerf_t){.algo = algo, .mathType = math, .determinism = CUDNN_DETERMINISTIC}, n = 1;
        else if (tune) st = dnn(cudnnFindConvolutionBackwardDataAlgorithmEx(handle, c->w, s->in[1].data, c->y, s->in[0].data, c->conv, c->x,
                                                                             s->out[0].data, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf, ws, FIND_WS), "timing backward-data algorithms");
        else st = dnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, c->w, c->y, c->conv, c->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf), "heuristics");
        if (st != KILN_OK) return st;
        PICK(perf, n, c->bwd_data, c->math[1], c->ws[1]);
        cudnnSetConvolutionMathType(c->conv, c->math[1]);
        st = dnn(cudnnGetConvolutionBackwardDataWorkspaceSize(handle, c->w, c->y, c->conv, c->x, c->bwd_data, &c->ws[1]), "workspace size");
        if (tune && algo < 0) remember(key, c->bwd_data, c->math[1], 0);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        if (algo >= 0) perf[0] = (cudnnConvolutionBwdFilterAlgoPerf_t){.algo = algo, .mathType = math, .determinism = CUDNN_DETERMINISTIC}, n = 1;
        else if (tune) st = dnn(cudnnFindConvolutionBackwardFilterAlgorithmEx(handle, c->x, s->in[0].data, c->y, s->in[1].data, c->conv, c->w,
                                                                               s->out[0].data, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf, ws, FIND_WS), "timing backward-weight algorithms");
        else st = dnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, c->x, c->y, c->conv, c->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf), "heuristics");
        if (st != KILN_OK) return st;
        PICK(perf, n, c->bwd_filter, c->math[2], c->ws[2]);
        cudnnSetConvolutionMathType(c->conv, c->math[2]);
        st = dnn(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, c->x, c->y, c->conv, c->w, c->bwd_filter, &c->ws[2]), "workspace size");
        if (tune && algo < 0) remember(key, c->bwd_filter, c->math[2], 0);
    }
    return st;
}

kiln_status kiln_cuda_conv_bwd_prepare(kiln_step *s, kiln_prep *p) {
    if (s->fwd_step < 0 || !p->steps[s->fwd_step].kobj) return kiln_fail(KILN_ERR_INVALID_ARG, "no forward step to differentiate");
    const kiln_step *f = &p->steps[s->fwd_step];
    conv_obj *c = f->kobj;
    s->sz = f->sz;
    s->kobj = c;
    s->owns_kobj = 0;
    kiln_status st = get_handle();
    void *ws = NULL;
    int tune = p->o->autotune && s->in[0].data && s->in[1].data && s->out[0].data;
    if (st == KILN_OK && tune && cudaMalloc(&ws, FIND_WS) != cudaSuccess) st = kiln_fail(KILN_ERR_NOMEM, "CUDA: no memory to time algorithms");
    if (st == KILN_OK) st = find_bwd(s, c, tune, ws);
    if (ws) cudaFree(ws);
    int k = s->op == KILN_OP_CONV2D_BWD_DATA ? 1 : 2;
    if (st == KILN_OK && c->ws[k] > p->workspace) p->workspace = c->ws[k];
    return st;
}

/* ---- running ---- */

static const float one = 1.0f, zero = 0.0f;

kiln_status kiln_cuda_conv_fwd(const kiln_step *s, const kiln_run_ctx *rc) {
    conv_obj *c = s->kobj;
    cudnnSetConvolutionMathType(c->conv, c->math[0]);
    kiln_status st = dnn(cudnnConvolutionForward(handle, &one, c->x, s->in[0].data, c->w, s->in[1].data, c->conv, c->fwd,
                                                 rc->workspace, c->ws[0], &zero, c->y, s->out[0].data), "forward");
    const kiln_conv_shape *cs = &s->sz.conv;
    if (st == KILN_OK && (s->nin > 2 || s->epilogue == KILN_EPI_RELU))
        kiln_cuda_bias_relu(kiln_cuda_stream(), cs->n, cs->k, cs->oh * cs->ow, s->nin > 2 ? s->in[2].data : NULL,
                            s->epilogue == KILN_EPI_RELU, s->out[0].data);
    return st;
}

kiln_status kiln_cuda_conv_bwd_data(const kiln_step *s, const kiln_run_ctx *rc) {
    conv_obj *c = s->kobj;
    cudnnSetConvolutionMathType(c->conv, c->math[1]);
    return dnn(cudnnConvolutionBackwardData(handle, &one, c->w, s->in[1].data, c->y, s->in[0].data, c->conv, c->bwd_data,
                                            rc->workspace, c->ws[1], kiln_step_acc(s, rc, 0) ? &one : &zero, c->x, s->out[0].data),
               "backward data");
}

kiln_status kiln_cuda_conv_bwd_weight(const kiln_step *s, const kiln_run_ctx *rc) {
    conv_obj *c = s->kobj;
    cudnnSetConvolutionMathType(c->conv, c->math[2]);
    kiln_status st = dnn(cudnnConvolutionBackwardFilter(handle, &one, c->x, s->in[0].data, c->y, s->in[1].data, c->conv, c->bwd_filter,
                                                        rc->workspace, c->ws[2], kiln_step_acc(s, rc, 0) ? &one : &zero, c->w,
                                                        s->out[0].data), "backward weight");
    if (st == KILN_OK && s->nout > 1 && s->out[1].data)
        st = dnn(cudnnConvolutionBackwardBias(handle, &one, c->y, s->in[1].data, kiln_step_acc(s, rc, 1) ? &one : &zero, c->b,
                                              s->out[1].data), "bias gradient");
    return st;
}
