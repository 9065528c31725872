/* conv2d on cuDNN. At compile every algorithm cuDNN offers for the step's
 * real shape is timed (cudnnFind*AlgorithmEx, the guide's cudnn.benchmark) and
 * the fastest deterministic one kept, for the forward pass, backward-data and
 * backward-weights alike; the workspace it needs raises the plan's. Decisions
 * are remembered per problem, GPU and cuDNN version: for the process, on disk
 * (cuda-autotune-v1.txt beside the cpu's cache) and in checkpoints, so a
 * resumed run keeps its algorithms.
 * --matmul-precision highest keeps convolutions in fp32 FMA math; high and
 * medium let cuDNN use TF32 tensor cores (PyTorch's cudnn.allow_tf32).
 * A step the autocast pass marked (--precision bf16, auto, fp16) runs on
 * 16-bit channels-last copies instead (PyTorch's autocast with
 * channels_last): convert.cu rounds the step's fp32 NCHW inputs to bf16
 * (fp16) NHWC, KRSC for the filter, in the step's workspace; cuDNN takes
 * them in tensor-core math, fp32 accumulation; its output is 16-bit (cuDNN's
 * 16-bit convolutions write their output's type, as PyTorch's autocast
 * convolutions' outputs are bf16) and is widened into the plan's fp32 NCHW
 * tensor, added to it where the step accumulates. So beside the operands'
 * rounding that the reference makes too, a 16-bit convolution's output
 * carries one rounding more than the reference's (docs/mixed-precision.md). */
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
    int half; /* 0 fp32 NCHW; 1 bf16, 2 fp16: the 16-bit channels-last copies of the autocast steps */
    const kiln_step *dy_kept; /* the backward-weight step finding dy's copy where backward-data, just before it, left it */
} conv_obj;

/* the three tensors of a convolution: the image x, the filter w, the image y (the roles of a direction's inputs
 * and output: forward x, w -> y; backward-data dy, w -> dx; backward-filter x, dy -> dw) */
enum { TX, TW, TY };
static const int roles[3][3] = {{TX, TW, TY}, {TY, TW, TX}, {TX, TY, TW}};

/* a tensor's shape as convert.cu's [imgs, ch, hw] */
static void role_dims(const kiln_conv_shape *cs, int r, int64_t d[3]) {
    if (r == TX) d[0] = cs->n, d[1] = cs->c, d[2] = cs->h * cs->w;
    else if (r == TW) d[0] = cs->k, d[1] = cs->c, d[2] = cs->r * cs->s;
    else d[0] = cs->n, d[1] = cs->k, d[2] = cs->oh * cs->ow;
}

static size_t up256(size_t n) { return (n + 255) / 256 * 256; }

/* a role's 16-bit copy, 256-aligned */
static size_t role_bytes(const kiln_conv_shape *cs, int r) {
    int64_t d[3];
    role_dims(cs, r, d);
    return up256((size_t)(d[0] * d[1] * d[2]) * 2);
}

/* the 16-bit copies' bytes before cuDNN's own workspace: x, w and y (every direction has all three) */
static size_t copies_bytes(const kiln_conv_shape *cs) { return role_bytes(cs, TX) + role_bytes(cs, TW) + role_bytes(cs, TY); }

/* a 16-bit step's tensor cuDNN takes as it is: channels last (the layout pass's) in the copies' kind */
static int as_is(const kiln_tdesc *t, const conv_obj *c) { return c->half && KILN_NHWC(*t) && kiln_cuda_half_kind(t) == c->half; }

/* the output cuDNN writes in place: as it is, and nothing to add to it or apply after (acc, a relu on the way) */
static int out_in_place(const kiln_step *s, const conv_obj *c, int acc, int relu) { return as_is(&s->out[0], c) && !acc && !relu; }

/* where each role's tensor is for cuDNN: the step's own (fp32; or a 16-bit step's channels-last tensor of its kind,
 * and its output when written in place), or its 16-bit copy at base, the step's inputs converted into theirs
 * (transposed from NCHW, fp32 or the half-storage pass's 16 bits; rounded element by element from channels-last
 * fp32), but a dy the step before left there (dy_kept); the output's copy is widened afterwards (widen_output) */
static void operands(const kiln_step *s, const conv_obj *c, int dir, char *base, int in_place, void *t[3]) {
    const int *role = roles[dir];
    if (!c->half) {
        t[role[0]] = s->in[0].data, t[role[1]] = s->in[1].data, t[role[2]] = s->out[0].data;
        return;
    }
    for (int r = TX; r <= TY; r++) t[r] = base, base += role_bytes(&s->sz.conv, r);
    if (in_place) t[role[2]] = s->out[0].data;
    for (int k = 0; k < 2; k++) {
        const kiln_tdesc *x = &s->in[k];
        int64_t d[3];
        role_dims(&s->sz.conv, role[k], d);
        if (!x->data) continue;
        if (as_is(x, c)) t[role[k]] = x->data;
        else if (role[k] == TY && c->dy_kept == s) continue;
        else if (KILN_NHWC(*x)) kiln_cuda_to_half(kiln_cuda_stream(), c->half == 2, x->numel, x->data, t[role[k]]);
        else kiln_cuda_to_nhwc(kiln_cuda_stream(), c->half, d[0], d[1], d[2], x->data, kiln_cuda_half_kind(x), t[role[k]]);
    }
}

/* a 16-bit step's output copy into the step's output, added to it when acc, through a relu when relu: widened to
 * fp32, or as it is where the half-storage pass stores the output in 16 bits (it holds what cuDNN rounded) */
static void widen_output(const kiln_step *s, const conv_obj *c, int dir, void *const t[3], int acc, int relu) {
    int64_t d[3];
    role_dims(&s->sz.conv, roles[dir][2], d);
    if (out_in_place(s, c, acc, relu)) return; /* cuDNN wrote it */
    if (KILN_NHWC(s->out[0])) d[0] *= d[1] * d[2], d[1] = d[2] = 1; /* channels last both sides: element by element */
    kiln_cuda_from_nhwc(kiln_cuda_stream(), c->half, d[0], d[1], d[2], t[roles[dir][2]], s->out[0].data,
                        kiln_cuda_half_kind(&s->out[0]), acc, relu);
}

/* the autocast pass's mark as the copies' kind: fp16 for --precision fp16, bf16 for bf16 and auto (on tensor
 * cores bf16 is the faster) */
static int half_of(const kiln_step *s) {
    return s->precision == KILN_PRECISION_FP16 ? 2 : s->precision != KILN_PRECISION_FP32 ? 1 : 0;
}

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

static void problem_key(const kiln_conv_shape *cs, int half, const char *pass, char *key, size_t len) {
    static char gpu[64];
    if (!gpu[0]) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, 0) == cudaSuccess) snprintf(gpu, sizeof gpu, "%.63s", p.name);
        for (char *c = gpu; *c; c++)
            if (*c == ' ') *c = '_';
    }
    snprintf(key, len, "%s%s %lldx%lldx%lldx%lld k%lld r%lldx%lld s%lld p%lld m%d %s cudnn%zu", pass,
             half == 2 ? "-fp16" : half ? "-bf16" : "", (long long)cs->n,
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

/* the math type cuDNN searches in (each direction's pick sets its own after): tensor cores for 16-bit data (as
 * PyTorch asks for them), TF32 allowed for fp32 above the highest precision, else fp32 FMA */
static cudnnMathType_t search_math(const conv_obj *c) {
    return c->half ? CUDNN_TENSOR_OP_MATH : kiln_cuda_precision() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

static kiln_status describe(const kiln_conv_shape *cs, conv_obj *c) {
    kiln_status st = KILN_OK;
    cudnnTensorFormat_t f = c->half ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    cudnnDataType_t t = c->half == 2 ? CUDNN_DATA_HALF : c->half ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
#define D(call, what) \
    if (st == KILN_OK) st = dnn(call, what)
    D(cudnnCreateTensorDescriptor(&c->x), "descriptor");
    D(cudnnCreateTensorDescriptor(&c->y), "descriptor");
    D(cudnnCreateTensorDescriptor(&c->b), "descriptor");
    D(cudnnCreateFilterDescriptor(&c->w), "descriptor");
    D(cudnnCreateConvolutionDescriptor(&c->conv), "descriptor");
    D(cudnnSetTensor4dDescriptor(c->x, f, t, (int)cs->n, (int)cs->c, (int)cs->h, (int)cs->w), "x");
    D(cudnnSetTensor4dDescriptor(c->y, f, t, (int)cs->n, (int)cs->k, (int)cs->oh, (int)cs->ow), "y");
    D(cudnnSetTensor4dDescriptor(c->b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, (int)cs->k, 1, 1), "bias");
    D(cudnnSetFilter4dDescriptor(c->w, t, f, (int)cs->k, (int)cs->c, (int)cs->r, (int)cs->s), "w");
    D(cudnnSetConvolution2dDescriptor(c->conv, (int)cs->pad, (int)cs->pad, (int)cs->stride, (int)cs->stride, 1, 1,
                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT), "convolution");
    D(cudnnSetConvolutionMathType(c->conv, search_math(c)), "math type");
#undef D
    return st;
}

/* the fastest successful result, deterministic ones first; fp32 FMA math only at the highest precision (of an
 * fp32 convolution: a 16-bit one is on tensor cores at any) */
#define PICK(perf, n, fma_only, out_algo, out_math, out_ws)                                                                 \
    do {                                                                                                            \
        int best = -1;                                                                                              \
        for (int pass = 0; pass < 2 && best < 0; pass++)                                                            \
            for (int i = 0; i < (n) && best < 0; i++) {                                                             \
                if ((perf)[i].status != CUDNN_STATUS_SUCCESS) continue;                                             \
                if (pass == 0 && (perf)[i].determinism != CUDNN_DETERMINISTIC) continue;                            \
                if ((fma_only) && (perf)[i].mathType != CUDNN_FMA_MATH) continue;                                   \
                best = i;                                                                                           \
            }                                                                                                       \
        if (best < 0) return kiln_fail(KILN_ERR_BACKEND, "cuDNN offers no usable algorithm for %s", key);          \
        out_algo = (perf)[best].algo;                                                                               \
        out_math = (perf)[best].mathType;                                                                           \
        out_ws = (perf)[best].memory;                                                                               \
    } while (0)

/* scratch for timing, the plan's workspace not existing yet: cuDNN's, then a 16-bit step's copies (the step's
 * real inputs converted into them); none without tuning */
#define FIND_WS ((size_t)256 << 20)
static kiln_status scratch(const kiln_step *s, const conv_obj *c, int tune, void **mem) {
    *mem = NULL;
    if (!tune) return KILN_OK;
    size_t bytes = FIND_WS + (c->half ? copies_bytes(&s->sz.conv) : 0);
    return cudaMalloc(mem, bytes) == cudaSuccess ? KILN_OK : kiln_fail(KILN_ERR_NOMEM, "CUDA: no memory to time algorithms");
}

/* the step's workspace: the 16-bit copies first, at the same places for the three directions (so backward-weight
 * finds the dy that backward-data copied just before it), then cuDNN's for direction dir */
static void *cudnn_ws(const kiln_step *s, const conv_obj *c, void *ws) {
    return c->half ? (char *)ws + copies_bytes(&s->sz.conv) : ws;
}
static void reserve(const kiln_step *s, const conv_obj *c, int dir, kiln_prep *p) {
    size_t need = c->half ? copies_bytes(&s->sz.conv) + c->ws[dir] : c->ws[dir];
    if (need > p->workspace) p->workspace = need;
}

static kiln_status find_fwd(const kiln_step *s, conv_obj *c, void *mem, const char *key) {
    int math, algo = recall(key, &math), n = 0;
    if (algo >= 0) {
        c->fwd = (cudnnConvolutionFwdAlgo_t)algo;
        c->math[0] = (cudnnMathType_t)math;
        cudnnSetConvolutionMathType(c->conv, c->math[0]);
        return dnn(cudnnGetConvolutionForwardWorkspaceSize(handle, c->x, c->w, c->conv, c->y, c->fwd, &c->ws[0]), "workspace size");
    }
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    void *t[3];
    if (mem) operands(s, c, 0, (char *)mem + FIND_WS, 0, t);
    kiln_status st = mem ? dnn(cudnnFindConvolutionForwardAlgorithmEx(handle, c->x, t[TX], c->w, t[TW], c->conv, c->y, t[TY],
                                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf, mem, FIND_WS),
                               "timing forward algorithms")
                         : dnn(cudnnGetConvolutionForwardAlgorithm_v7(handle, c->x, c->w, c->conv, c->y,
                                                                      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf), "heuristics");
    if (st != KILN_OK) return st;
    PICK(perf, n, !c->half && !kiln_cuda_precision(), c->fwd, c->math[0], c->ws[0]);
    /* the size cuDNN gives for the pick in its math, as the backward steps and a remembered pick ask: a heuristic's
     * entry (autotuning off) may name one the shape cannot run, refused here rather than at the first step */
    st = dnn(cudnnSetConvolutionMathType(c->conv, c->math[0]), "math type");
    if (st == KILN_OK)
        st = dnn(cudnnGetConvolutionForwardWorkspaceSize(handle, c->x, c->w, c->conv, c->y, c->fwd, &c->ws[0]), "workspace size");
    if (st == KILN_OK && mem) remember(key, c->fwd, c->math[0], 0);
    return st;
}

/* a tensor the half-storage pass stores in 16 bits is an operand cuDNN rounds, or an output it rounded: neither
 * when the convolution runs in fp32 */
static kiln_status stored_as_run(const kiln_step *s, const conv_obj *c) {
    int any = kiln_cuda_half_kind(&s->out[0]), last = KILN_NHWC(s->out[0]);
    for (int k = 0; k < s->nin; k++) any |= kiln_cuda_half_kind(&s->in[k]), last |= KILN_NHWC(s->in[k]);
    if (!c->half && last) /* channels last only where cuDNN takes 16 bits (the layout pass runs on 16-bit plans) */
        return kiln_fail(KILN_ERR_BACKEND, "%s: its tensors are channels last (KILN_CUDA_LAYOUT=nhwc) but cuDNN refused the "
                         "16-bit convolution: run without KILN_CUDA_LAYOUT=nhwc", s->name);
    if (c->half || !any) return KILN_OK;
    return kiln_fail(KILN_ERR_BACKEND, "%s: an operand or its output is stored in 16 bits (KILN_CUDA_STORE=half) but cuDNN "
                     "refused the 16-bit convolution: run without KILN_CUDA_STORE=half", s->name);
}

/* the forward's descriptors and algorithm for copies of kind half (0: fp32) into *out; NULL where cuDNN has none */
static kiln_status make_fwd(const kiln_step *s, kiln_prep *p, int half, conv_obj **out) {
    kiln_status st = get_handle();
    conv_obj *c = calloc(1, sizeof *c);
    if (!c) return kiln_fail(KILN_ERR_NOMEM, "out of memory");
    c->half = half;
    if (st == KILN_OK) st = describe(&s->sz.conv, c);
    char key[192];
    problem_key(&s->sz.conv, c->half, "fwd", key, sizeof key);
    void *mem = NULL;
    if (st == KILN_OK) st = scratch(s, c, p->o->autotune && s->in[0].data && s->in[1].data, &mem);
    if (st == KILN_OK) st = find_fwd(s, c, mem, key);
    if (mem) cudaFree(mem);
    if (st != KILN_OK) release(c);
    else *out = c;
    return st;
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
    conv_obj *c = NULL;
    kiln_status st = make_fwd(s, p, half_of(s), &c);
    if (st == KILN_ERR_BACKEND && half_of(s)) { /* cuDNN refused the 16-bit convolution: this one runs in fp32 */
        kiln_log(KILN_LOG_WARN, "%s: cuDNN has no %s convolution for this shape (%s): it runs in fp32", s->name,
                 kiln_precision_name(s->precision), kiln_last_error());
        s->round_out = 0;
        st = make_fwd(s, p, 0, &c);
    }
    if (st != KILN_OK) return st;
    s->kobj = c;
    s->owns_kobj = 1;
    reserve(s, c, 0, p);
    return stored_as_run(s, c);
}

static kiln_status find_bwd(kiln_step *s, conv_obj *c, void *mem) {
    char key[192];
    int data = s->op == KILN_OP_CONV2D_BWD_DATA, math, n = 0, fma_only = !c->half && !kiln_cuda_precision();
    problem_key(&s->sz.conv, c->half, data ? "bwd_data" : "bwd_weight", key, sizeof key);
    int algo = recall(key, &math);
    void *t[3];
    if (mem && algo < 0) operands(s, c, data ? 1 : 2, (char *)mem + FIND_WS, 0, t);
    cudnnSetConvolutionMathType(c->conv, search_math(c)); /* not the forward's pick: cuDNN searches in the descriptor's */
    kiln_status st = KILN_OK;
    if (data) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        if (algo >= 0) perf[0] = (cudnnConvolutionBwdDataAlgoPerf_t){.algo = algo, .mathType = math, .determinism = CUDNN_DETERMINISTIC}, n = 1;
        else if (mem) st = dnn(cudnnFindConvolutionBackwardDataAlgorithmEx(handle, c->w, t[TW], c->y, t[TY], c->conv, c->x, t[TX],
                                                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf, mem, FIND_WS), "timing backward-data algorithms");
        else st = dnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, c->w, c->y, c->conv, c->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf), "heuristics");
        if (st != KILN_OK) return st;
        PICK(perf, n, fma_only, c->bwd_data, c->math[1], c->ws[1]);
        cudnnSetConvolutionMathType(c->conv, c->math[1]);
        st = dnn(cudnnGetConvolutionBackwardDataWorkspaceSize(handle, c->w, c->y, c->conv, c->x, c->bwd_data, &c->ws[1]), "workspace size");
        if (mem && algo < 0) remember(key, c->bwd_data, c->math[1], 0);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        if (algo >= 0) perf[0] = (cudnnConvolutionBwdFilterAlgoPerf_t){.algo = algo, .mathType = math, .determinism = CUDNN_DETERMINISTIC}, n = 1;
        else if (mem) st = dnn(cudnnFindConvolutionBackwardFilterAlgorithmEx(handle, c->x, t[TX], c->y, t[TY], c->conv, c->w, t[TW],
                                                                              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf, mem, FIND_WS), "timing backward-weight algorithms");
        else st = dnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, c->x, c->y, c->conv, c->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf), "heuristics");
        if (st != KILN_OK) return st;
        PICK(perf, n, fma_only, c->bwd_filter, c->math[2], c->ws[2]);
        cudnnSetConvolutionMathType(c->conv, c->math[2]);
        st = dnn(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, c->x, c->y, c->conv, c->w, c->bwd_filter, &c->ws[2]), "workspace size");
        if (mem && algo < 0) remember(key, c->bwd_filter, c->math[2], 0);
    }
    return st;
}

/* a backward direction's search on c, with its timing scratch */
static kiln_status bwd_search(kiln_step *s, const kiln_prep *p, conv_obj *c) {
    kiln_status st = get_handle();
    void *mem = NULL;
    if (st == KILN_OK) st = scratch(s, c, p->o->autotune && s->in[0].data && s->in[1].data && s->out[0].data, &mem);
    if (st == KILN_OK) st = find_bwd(s, c, mem);
    if (mem) cudaFree(mem);
    return st;
}

/* fp32 descriptors and the direction's search for a backward step cuDNN refuses in 16 bits (the step owns them) */
static kiln_status bwd_fp32(kiln_step *s, const kiln_prep *p, conv_obj **out) {
    conv_obj *c = calloc(1, sizeof *c);
    if (!c) return kiln_fail(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = describe(&s->sz.conv, c);
    if (st == KILN_OK) st = bwd_search(s, p, c);
    if (st != KILN_OK) release(c);
    else *out = c;
    return st;
}

/* backward-weight right after backward-data of the same convolution, both in 16 bits on its descriptors, reading one
 * dy: dy's copy is where backward-data left it (copies come first in the workspace, at places the three directions
 * share; nothing runs between two adjacent steps, in a CUDA graph's replay as in a step list's run) */
static void keep_dy(kiln_step *s, const kiln_prep *p, conv_obj *c) {
    int i = (int)(s - p->steps);
    if (s->op != KILN_OP_CONV2D_BWD_WEIGHT || s->kobj != c || !c->half || i <= 0 || i >= p->nsteps) return;
    const kiln_step *d = &p->steps[i - 1];
    if (d->op == KILN_OP_CONV2D_BWD_DATA && d->fwd_step == s->fwd_step && d->kobj == c && d->in[0].data &&
        d->in[0].data == s->in[1].data && d->in[0].dtype == s->in[1].dtype)
        c->dy_kept = s;
}

kiln_status kiln_cuda_conv_bwd_prepare(kiln_step *s, kiln_prep *p) {
    if (s->fwd_step < 0 || !p->steps[s->fwd_step].kobj) return kiln_fail(KILN_ERR_INVALID_ARG, "no forward step to differentiate");
    const kiln_step *f = &p->steps[s->fwd_step];
    conv_obj *c = f->kobj;
    /* the descriptors are the forward step's: one precision for the three directions (the autocast pass marks all) */
    if (half_of(s) != half_of(f))
        return kiln_fail(KILN_ERR_BACKEND, "%s: precision %s, its forward step %s's %s: the cuda backend runs a convolution's "
                         "directions in one", s->name, kiln_precision_name(s->precision), f->name, kiln_precision_name(f->precision));
    if (!c->half) s->round_out = 0; /* the forward found no 16-bit algorithm: fp32 */
    s->sz = f->sz;
    s->kobj = c;
    s->owns_kobj = 0;
    kiln_status st = bwd_search(s, p, c);
    if (st == KILN_ERR_BACKEND && c->half) { /* this direction alone in fp32, on descriptors of its own */
        kiln_log(KILN_LOG_WARN, "%s: cuDNN has no %s algorithm for it (%s): it runs in fp32", s->name,
                 kiln_precision_name(s->precision), kiln_last_error());
        conv_obj *own = NULL;
        if ((st = bwd_fp32(s, p, &own)) == KILN_OK) s->kobj = c = own, s->owns_kobj = 1, s->round_out = 0;
    }
    if (st == KILN_OK) reserve(s, c, s->op == KILN_OP_CONV2D_BWD_DATA ? 1 : 2, p);
    if (st == KILN_OK) keep_dy(s, p, c);
    return st == KILN_OK ? stored_as_run(s, c) : st;
}

/* kiln inspect: the direction's cuDNN algorithm and math, and what a 16-bit step converts on every run (its two
 * inputs and its output: two activations and a filter or its gradient; one activation less where dy is kept) */
int kiln_cuda_conv_describe(const kiln_step *s, char *buf, size_t len, int *weights) {
    const conv_obj *c = s->kobj;
    int dir = s->op == KILN_OP_CONV2D ? 0 : s->op == KILN_OP_CONV2D_BWD_DATA ? 1 : 2;
    int algo = dir == 0 ? (int)c->fwd : dir == 1 ? (int)c->bwd_data : (int)c->bwd_filter;
    static const char *const math[] = {"default", "tensor-op", "tensor-op+conversion", "fma"};
    int kept = c->dy_kept == s, copies = 0;
    for (int k = 0; k < 2; k++) /* activations: a copy of each not taken as it is (a filter is the weights' one) */
        copies += roles[dir][k] != TW && !as_is(&s->in[k], c) && !(roles[dir][k] == TY && kept);
    copies += roles[dir][2] != TW && !as_is(&s->out[0], c);
    snprintf(buf, len, "cuDNN algo %d, %s math%s%s", algo, (unsigned)c->math[dir] < 4 ? math[c->math[dir]] : "?",
             c->half == 2 ? ", fp16 NHWC copies" : c->half ? ", bf16 NHWC copies" : "", kept ? ", dy's kept" : "");
    *weights = c->half ? 1 : 0;
    return c->half ? copies : 0;
}

/* ---- running ---- */

static const float one = 1.0f, zero = 0.0f;

kiln_status kiln_cuda_conv_fwd(const kiln_step *s, const kiln_run_ctx *rc) {
    conv_obj *c = s->kobj;
    void *t[3];
    int relu = s->epilogue == KILN_EPI_RELU, bias = s->nin > 2;
    operands(s, c, 0, rc->workspace, out_in_place(s, c, 0, relu && !bias), t);
    cudnnSetConvolutionMathType(c->conv, c->math[0]);
    kiln_status st = dnn(cudnnConvolutionForward(handle, &one, c->x, t[TX], c->w, t[TW], c->conv, c->fwd,
                                                 cudnn_ws(s, c, rc->workspace), c->ws[0], &zero, c->y, t[TY]), "forward");
    if (st == KILN_OK && c->half) widen_output(s, c, 0, t, 0, relu && !bias); /* a relu without a bias on the way */
    const kiln_conv_shape *cs = &s->sz.conv;
    int64_t hw = cs->oh * cs->ow, last = KILN_NHWC(s->out[0]); /* channels last: n hw rows of k channels */
    if (st == KILN_OK && (bias || (relu && !c->half))) /* the output is fp32 here (only a bias-free one is 16-bit) */
        kiln_cuda_bias_relu(kiln_cuda_stream(), last ? cs->n * hw : cs->n, cs->k, last ? 1 : hw, bias ? s->in[2].data : NULL,
                            relu, s->out[0].data);
    return st == KILN_OK ? kiln_cuda_launched("convolution: its copies, bias and relu") : st;
}

/* cuDNN accumulates an fp32 output through beta; a 16-bit step's output is a fresh copy, added when widened */
static const float *beta_of(const conv_obj *c, int acc) { return acc && !c->half ? &one : &zero; }

kiln_status kiln_cuda_conv_bwd_data(const kiln_step *s, const kiln_run_ctx *rc) {
    conv_obj *c = s->kobj;
    void *t[3];
    int acc = kiln_step_acc(s, rc, 0);
    operands(s, c, 1, rc->workspace, out_in_place(s, c, acc, 0), t);
    cudnnSetConvolutionMathType(c->conv, c->math[1]);
    kiln_status st = dnn(cudnnConvolutionBackwardData(handle, &one, c->w, t[TW], c->y, t[TY], c->conv, c->bwd_data,
                                                      cudnn_ws(s, c, rc->workspace), c->ws[1], beta_of(c, acc), c->x, t[TX]),
                         "backward data");
    if (st == KILN_OK && c->half) widen_output(s, c, 1, t, acc, 0);
    return st == KILN_OK ? kiln_cuda_launched("convolution backward data: its copies") : st;
}

kiln_status kiln_cuda_conv_bwd_weight(const kiln_step *s, const kiln_run_ctx *rc) {
    conv_obj *c = s->kobj;
    void *t[3];
    int acc = kiln_step_acc(s, rc, 0);
    operands(s, c, 2, rc->workspace, 0, t);
    cudnnSetConvolutionMathType(c->conv, c->math[2]);
    kiln_status st = dnn(cudnnConvolutionBackwardFilter(handle, &one, c->x, t[TX], c->y, t[TY], c->conv, c->bwd_filter,
                                                        cudnn_ws(s, c, rc->workspace), c->ws[2], beta_of(c, acc), c->w, t[TW]),
                         "backward weight");
    if (st == KILN_OK && c->half) widen_output(s, c, 2, t, acc, 0);
    const kiln_conv_shape *cs = &s->sz.conv;
    int db = st == KILN_OK && s->nout > 1 && s->out[1].data != NULL, acc_db = kiln_step_acc(s, rc, 1);
    if (db && c->half) /* dy's 16-bit copy as rows of K channels: the bias gradient sums dy rounded, as the reference does */
        kiln_cuda_col_sums(kiln_cuda_stream(), cs->n * cs->oh * cs->ow, cs->k, t[TY], c->half, 0, s->out[1].data, acc_db);
    else if (db)
        st = dnn(cudnnConvolutionBackwardBias(handle, &one, c->y, s->in[1].data, acc_db ? &one : &zero, c->b, s->out[1].data),
                 "bias gradient");
    return st == KILN_OK ? kiln_cuda_launched("convolution backward weight: its copies and bias sums") : st;
}
