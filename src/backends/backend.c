/* The backend registry and what every backend shares: the supports check
 * (a kernel exists, layouts fit), preparing and releasing steps, and running a
 * list of steps with optional per-step timing. */
#include <omp.h>
#include <string.h>
#include <unistd.h>
#include "backends/internal/backend.h"
#include "backends/cpu/internal/cpu.h"
#include "backends/ref/internal/ref.h"
#ifdef KILN_HAVE_CUDA
#include "backends/cuda/internal/cuda.h"
#endif

/* 1 when every operand of an elementwise op shares one layout */
static int elementwise_all(const kiln_step *s) {
    if (!(kiln_op_get(s->op)->flags & KILN_OPF_ELEMENTWISE_LAYOUT)) return 0;
    int first = -1;
    for (int i = 0; i < s->nin + s->nout; i++) {
        const kiln_tdesc *t = i < s->nin ? &s->in[i] : &s->out[i - s->nin];
        if (!t->numel) continue; /* an absent optional output */
        if (first < 0) first = t->layout;
        if (t->layout != first) return 0;
    }
    return 1;
}

#define MAX_BACKENDS 8
/* the CUDA backend is registered whenever it was built; without a GPU it says so through available() */
#ifdef KILN_HAVE_CUDA
static const kiln_backend *all[MAX_BACKENDS] = {&kiln_backend_cpu, &kiln_backend_ref, &kiln_backend_cuda};
static int nall = 3;
#else
static const kiln_backend *all[MAX_BACKENDS] = {&kiln_backend_cpu, &kiln_backend_ref};
static int nall = 2;
#endif

kiln_status kiln_backend_register(const kiln_backend *b) {
    if (kiln_backend_get(b->name)) return kiln_fail(KILN_ERR_INVALID_ARG, "backend '%s' is registered already", b->name);
    if (nall == MAX_BACKENDS) return kiln_fail(KILN_ERR_INVALID_ARG, "too many backends");
    all[nall++] = b;
    return KILN_OK;
}

const kiln_backend *kiln_backend_get(const char *name) {
    if (!name || !name[0]) name = "cpu";
    for (int i = 0; i < nall; i++)
        if (strcmp(all[i]->name, name) == 0) return all[i];
    return NULL;
}

int kiln_backend_count(void) { return nall; }

kiln_status kiln_device_backend(const char *device, const char **backend) {
    char why[192];
    const kiln_backend *cuda = kiln_backend_get("cuda");
    *backend = "cpu";
    if (!device || !strcmp(device, "cpu")) return KILN_OK;
    if (!strcmp(device, "auto")) {
        if (cuda && kiln_backend_available(cuda, why, sizeof why)) *backend = "cuda";
        return KILN_OK;
    }
    if (strcmp(device, "cuda") != 0) {
        /* another registered backend by its name: ref (the f64 reference, a debugging aid), or a test's */
        const kiln_backend *b = kiln_backend_get(device);
        if (!b) return kiln_fail(KILN_ERR_INVALID_ARG, "--device: '%s' is not cpu, cuda, auto or ref", device);
        if (!kiln_backend_available(b, why, sizeof why)) return kiln_fail(KILN_ERR_INVALID_ARG, "--device %s: %s", device, why);
        *backend = b->name;
        return KILN_OK;
    }
    if (!cuda) return kiln_fail(KILN_ERR_INVALID_ARG, "--device cuda: this kiln was built without the CUDA backend (no nvcc or cuDNN at build time)");
    if (!kiln_backend_available(cuda, why, sizeof why)) return kiln_fail(KILN_ERR_INVALID_ARG, "--device cuda: %s", why);
    *backend = "cuda";
    return KILN_OK;
}

int kiln_backend_available(const kiln_backend *b, char *why, size_t len) {
    if (why && len) why[0] = 0;
    return !b->available || b->available(why, len);
}
const kiln_backend *kiln_backend_at(int i) { return i >= 0 && i < nall ? all[i] : NULL; }

/* the first registered: cpu for f32, ref for f64 */
const kiln_backend *kiln_backend_for_dtype(kiln_dtype dtype) {
    for (int i = 0; i < nall; i++)
        if (all[i]->float_dtype == dtype) return all[i];
    return NULL;
}

/* a non-plain layout is fine at a slot the kernel takes it, where tied slots
 * agree; an elementwise op takes any layout its operands all share */
static int layout_ok(const kiln_kernel *k, const kiln_step *s) {
    if (elementwise_all(s)) return 1;
    int tied = -1;
    for (int i = 0; i < s->nin + s->nout; i++) {
        int out = i >= s->nin, slot = out ? i - s->nin : i;
        const kiln_tdesc *t = out ? &s->out[slot] : &s->in[i];
        if (!t->numel) continue; /* an absent optional output */
        if (t->layout && !((out ? k->blocked_out : k->blocked_in) & (1u << slot))) return 0;
        if (k->tied & (out ? KILN_TIE_OUT(slot) : 1u << slot)) {
            if (tied >= 0 && tied != t->layout) return 0;
            tied = t->layout;
        }
    }
    return 1;
}

int kiln_backend_supports(const kiln_backend *b, const kiln_step *s) {
    const kiln_kernel *k = &b->kernels[s->op];
    return k->run != NULL && layout_ok(k, s);
}

kiln_status kiln_backend_prepare(const kiln_backend *b, kiln_step *s, kiln_prep *p) {
    if (!b->kernels[s->op].run)
        return kiln_fail(KILN_ERR_BACKEND, "%s: the %s backend has no kernel for op %s%s", s->name, b->name,
                         kiln_op_name(s->op), kiln_cpu_kernels[s->op].run ? " (the cpu backend has one: --device cpu)" : "");
    if (!kiln_backend_supports(b, s))
        return kiln_fail(KILN_ERR_BACKEND, "%s: the %s backend has no kernel for op %s with these layouts", s->name, b->name,
                         kiln_op_name(s->op));
    const kiln_kernel *k = &b->kernels[s->op];
    s->run = k->run;
    if (b->run_reduced && s->precision == KILN_PRECISION_AUTO) s->precision = KILN_PRECISION_FP32, s->round_out = 0; /* nothing to time */
    if (b->run_reduced && (s->precision == KILN_PRECISION_BF16 || s->precision == KILN_PRECISION_FP16)) s->run = b->run_reduced;
    if (!k->prepare) return KILN_OK;
    kiln_status st = k->prepare(s, p);
    return st == KILN_OK ? st : kiln_fail_context(st, "%s", s->name);
}

void kiln_backend_release(const kiln_backend *b, kiln_step *s) {
    const kiln_kernel *k = &b->kernels[s->op];
    if (b->step_freed) b->step_freed(s);
    if (k->release && s->owns_kobj) k->release(s);
    s->kobj = NULL;
    s->owns_kobj = 0;
}

int64_t kiln_tdesc_span(const kiln_tdesc *t) {
    if (t->contiguous || !t->numel) return t->numel;
    int64_t last = 0;
    for (int d = 0; d < t->ndim; d++) last += (t->shape[d] - 1) * t->stride[d];
    return last + 1;
}

kiln_status kiln_backend_run(const kiln_backend *b, const kiln_step *steps, int n, const kiln_run_ctx *rc, double *time) {
    if (!time && b->run) return b->run(steps, n, rc);
    for (int i = 0; i < n; i++) {
        double t0 = time ? b->now() : 0;
        kiln_status st = steps[i].run(&steps[i], rc);
        if (st != KILN_OK) return kiln_fail_context(st, "%s", steps[i].name);
        if (time) time[i] += b->now() - t0;
    }
    return KILN_OK;
}

/* ---- sizes the kernels of every backend work out alike at prepare ---- */

kiln_status kiln_prepare_avg_pool(kiln_step *s, kiln_prep *p) {
    (void)p;
    const kiln_avg_pool_attrs *a = &s->attr.avg_pool;
    int bwd = s->op == KILN_OP_AVG_POOL2D_BWD;
    const kiln_tdesc *x = bwd ? &s->out[0] : &s->in[0], *y = bwd ? &s->in[0] : &s->out[0];
    s->sz.avg_pool = (kiln_avg_pool_shape){.n = x->shape[0], .c = x->shape[1], .h = x->shape[2], .w = x->shape[3],
                                           .k = a->kernel, .stride = a->stride, .pad = a->pad,
                                           .include_pad = a->count_include_pad, .adaptive = a->adaptive,
                                           .oh = y->shape[2], .ow = y->shape[3]};
    if (kiln_avg_pool_shape_infer(&s->sz.avg_pool) || s->sz.avg_pool.oh != y->shape[2] || s->sz.avg_pool.ow != y->shape[3])
        return kiln_fail(KILN_ERR_SHAPE, "%s: average pooling of %lldx%lld to %lldx%lld does not fit", s->name,
                         (long long)x->shape[2], (long long)x->shape[3], (long long)y->shape[2], (long long)y->shape[3]);
    return KILN_OK;
}

kiln_status kiln_prepare_pad(kiln_step *s, kiln_prep *p) {
    (void)p;
    const kiln_tdesc *y = &s->out[0];
    int d = s->attr.pad.dim;
    s->sz.slice.outer = 1;
    s->sz.slice.inner = 1;
    for (int i = 0; i < d; i++) s->sz.slice.outer *= y->shape[i];
    for (int i = d + 1; i < y->ndim; i++) s->sz.slice.inner *= y->shape[i];
    s->sz.slice.dim = y->shape[d];
    return KILN_OK;
}

kiln_status kiln_prepare_pool(kiln_step *s, kiln_prep *p) {
    (void)p;
    const kiln_tdesc *x = &s->in[0];
    s->sz.pool = (kiln_pool_shape){.n = x->shape[0], .c = x->shape[1], .h = x->shape[2], .w = x->shape[3],
                                   .k = s->attr.pool.kernel, .stride = s->attr.pool.stride, .pad = s->attr.pool.pad};
    kiln_pool_shape_infer(&s->sz.pool);
    return KILN_OK;
}

static void set_rows(kiln_step *s, const kiln_tdesc *t) {
    s->sz.rc.cols = t->ndim ? t->shape[t->ndim - 1] : 1;
    s->sz.rc.rows = s->sz.rc.cols ? t->numel / s->sz.rc.cols : 0;
}
kiln_status kiln_prepare_rows_of_out(kiln_step *s, kiln_prep *p) {
    (void)p;
    set_rows(s, &s->out[0]);
    return KILN_OK;
}
kiln_status kiln_prepare_rows_of_in(kiln_step *s, kiln_prep *p) {
    (void)p;
    set_rows(s, &s->in[0]);
    return KILN_OK;
}

kiln_status kiln_prepare_slice(kiln_step *s, kiln_prep *p) {
    (void)p;
    const kiln_tdesc *x = &s->out[0];
    int d = s->attr.slice.dim;
    s->sz.slice.outer = 1;
    s->sz.slice.inner = 1;
    for (int i = 0; i < d; i++) s->sz.slice.outer *= x->shape[i];
    for (int i = d + 1; i < x->ndim; i++) s->sz.slice.inner *= x->shape[i];
    s->sz.slice.dim = x->shape[d];
    return KILN_OK;
}

kiln_status kiln_prepare_nchw(kiln_step *s, kiln_prep *p) {
    (void)p;
    const kiln_tdesc *x = &s->in[0];
    s->sz.nchw.n = x->shape[0];
    s->sz.nchw.c = x->shape[1];
    s->sz.nchw.hw = x->shape[2] * x->shape[3];
    return KILN_OK;
}

kiln_status kiln_prepare_bmm(kiln_step *s, kiln_prep *p) {
    (void)p;
    const kiln_tdesc *a = &s->in[0], *b = &s->in[1];
    kiln_bmm_shape *z = &s->sz.bmm;
    z->nbatch = a->ndim - 2;
    for (int d = 0; d < a->ndim; d++) {
        if (d < z->nbatch) z->batch[d] = a->shape[d];
        z->a_stride[d] = a->stride[d];
        z->b_stride[d] = b->stride[d];
    }
    z->m = a->shape[a->ndim - 2];
    z->k = a->shape[a->ndim - 1];
    z->n = b->shape[b->ndim - 1];
    return KILN_OK;
}

kiln_status kiln_prepare_attention(kiln_step *s, kiln_prep *p) {
    (void)p;
    const kiln_tdesc *q = &s->in[0];
    kiln_attn_shape *z = &s->sz.attn.shape;
    *z = (kiln_attn_shape){.b = q->shape[0], .t = q->shape[1], .c = q->shape[2], .heads = s->attr.attn.heads};
    for (int i = 0; i < 2; i++) {
        z->q_stride[i] = s->in[0].stride[i];
        z->k_stride[i] = s->in[1].stride[i];
        z->v_stride[i] = s->in[2].stride[i];
    }
    for (int k = s->nout - 1; k >= 0; k--) /* y, or a gradient: dq, dk, dv, or the one [B,T,3C] of all three */
        if (s->out[k].numel) {
            z->d_stride[0] = s->out[k].stride[0];
            z->d_stride[1] = s->out[k].stride[1];
        }
    return KILN_OK;
}

void kiln_attention_grads(const kiln_step *s, const kiln_run_ctx *rc, void *out[3], int acc[3]) {
    size_t third = (size_t)s->sz.attn.shape.c * kiln_dtype_size(s->out[0].dtype);
    for (int k = 0; k < 3; k++) {
        int fused = s->nout == 1; /* q, k, v were the column thirds of one value: its gradient, whole */
        out[k] = fused ? (char *)s->out[0].data + k * third : s->out[k].data;
        acc[k] = kiln_step_acc(s, rc, fused ? 0 : k);
    }
}

kiln_tdesc kiln_tdesc_flat(void *data, kiln_dtype dtype, int64_t n) {
    kiln_tdesc t = {.data = data, .dtype = dtype, .ndim = 1, .numel = n, .contiguous = 1};
    t.shape[0] = n;
    t.stride[0] = 1;
    return t;
}

size_t kiln_backend_state_export(const char *backend, char *buf, size_t len) {
    const kiln_backend *b = kiln_backend_get(backend);
    if (!b || !b->export_state) {
        if (buf && len) buf[0] = 0;
        return 0;
    }
    return b->export_state(buf, len);
}

kiln_status kiln_backend_state_import(const char *backend, const char *text, const char *source) {
    const kiln_backend *b = kiln_backend_get(backend);
    if (!b) { /* saved where a backend ran that this build lacks (cuda): its decisions do not apply here */
        kiln_log(KILN_LOG_INFO, "%s: saved on the %.16s backend, which this kiln lacks; its autotune decisions are not used",
                 source, backend ? backend : "");
        return KILN_OK;
    }
    return b->import_state ? b->import_state(text, source) : KILN_OK;
}

/* ---- host memory, for the backends whose memory it is (cpu, ref) ---- */

void *kiln_host_alloc(size_t bytes) { return kiln_alloc(bytes); }
void kiln_host_free(void *p) { kiln_free(p); }

kiln_status kiln_host_copy(void *dst, const void *src, size_t bytes, int async) {
    (void)async;
    memcpy(dst, src, bytes);
    return KILN_OK;
}

size_t kiln_host_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

double kiln_host_now(void) { return omp_get_wtime(); }
