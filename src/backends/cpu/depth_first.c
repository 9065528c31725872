/* Depth-first inference: a chain of convolutions run image slice by image
 * slice. Step by step, a ResNet stage's convolutions each stream the whole
 * batch's activations through memory (resnet20's first stage: 8 MiB a tensor
 * at batch 128, read and written six times); by slices, each thread takes a
 * few images through the whole chain while their tensors stay in its core's
 * L2. Every step of an inference plan outside batch norm's statistics works
 * image by image, so the results are the same bits.
 *
 * A segment is a run of consecutive forward convolutions on kiln's own
 * kernel (kernels/dnnl/conv_wino.c says how many images a slice needs), with
 * the steps between them that touch no batched tensor (batch norm folds:
 * they run first, once, and each convolution's weights are copied as they
 * stand at its turn). It is taken only where slicing cannot change what a
 * step reads: each batched tensor of the segment either shares no memory
 * with another or shares exactly its place and size (the planner's reuse),
 * so a slice only ever meets its own images. Compile then times it both ways
 * and keeps it only where the slices won. */
#include <omp.h>
#include <string.h>
#include "kiln/alloc.h"
#include "kiln/status.h"
#include "backends/cpu/internal/cpu.h"
#include "kernels/internal/dnnl_ops.h"

/* slices per thread a segment needs at least (the team stays busy as slices finish unevenly) */
#define SLICES_PER_THREAD 2

static int is_conv(const kiln_step *s) {
    return (s->run == kiln_cpu_conv_fwd || s->run == kiln_cpu_conv_add_fwd) && s->kobj &&
           kiln_dnnl_conv_slice_images(s->kobj) > 0;
}

static int unbatched(const kiln_step *s) {
    for (int k = 0; k < s->nin; k++)
        if (s->in[k].batched) return 0;
    for (int k = 0; k < s->nout; k++)
        if (s->out[k].batched) return 0;
    return s->nout > 0;
}

typedef struct {
    uintptr_t lo, hi;
} range;

static range range_of(const kiln_tdesc *t) {
    uintptr_t a = (uintptr_t)t->data;
    return (range){a, t->data ? a + (uintptr_t)kiln_tdesc_span(t) * kiln_dtype_size(t->dtype) : a};
}

static int overlap(range a, range b) { return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi; }

/* the batched tensors of convolution steps: each image outermost, all in one piece */
static int sliceable_tensor(const kiln_tdesc *t, int64_t batch) {
    return t->batched && t->contiguous && t->ndim >= 1 && t->shape[0] == batch;
}

/* every pair of the segment's batched tensors: apart, or the same place and size */
static int batched_apart(const kiln_step *seg, int n) {
    for (int i = 0; i < n; i++)
        for (int a = 0; a < seg[i].nin + seg[i].nout; a++) {
            const kiln_tdesc *x = a < seg[i].nin ? &seg[i].in[a] : &seg[i].out[a - seg[i].nin];
            if (!x->batched) continue;
            if (!sliceable_tensor(x, seg[i].batch)) return 0;
            for (int j = 0; j < n; j++)
                for (int b = 0; b < seg[j].nin + seg[j].nout; b++) {
                    const kiln_tdesc *y = b < seg[j].nin ? &seg[j].in[b] : &seg[j].out[b - seg[j].nin];
                    if (y == x || !overlap(range_of(x), range_of(y))) continue;
                    if (!y->batched || y->data != x->data || y->numel != x->numel) return 0;
                }
        }
    return 1;
}

/* a convolution's weights in the segment's copies, rounded up to whole cache lines (its bias follows); a
 * convolution whose fold left it scales (fold_scale.c) reads its weights where they are, the parameters no step
 * writes, and only its scales are copied */
static int64_t weight_numel(const kiln_step *s) { return s->w_scale ? s->in[1].shape[0] : s->in[1].numel; }
static size_t weight_floats(const kiln_step *s) { return ((size_t)weight_numel(s) + 15) & ~(size_t)15; }

static int has_bias(const kiln_step *s) { return s->nin > 2 && s->in[2].data; }

/* a convolution's weights and bias, each rounded up to whole cache lines: its part of the segment's copies */
static size_t params_floats(const kiln_step *s) {
    return weight_floats(s) + (has_bias(s) ? ((size_t)s->in[2].numel + 15) & ~(size_t)15 : 0);
}

/* steps [0, n) as one segment: its slice and each thread's workspace; 0 where it does not qualify */
static int plan_segment(kiln_step *seg, int n, int threads) {
    int64_t images = 1, batch = seg[0].batch;
    size_t ws = 0;
    int convs = 0;
    for (int i = 0; i < n; i++) {
        if (!is_conv(&seg[i])) continue;
        int64_t m = kiln_dnnl_conv_slice_images(seg[i].kobj);
        if (m > images) images = m;
        convs++;
    }
    if (convs < 2 || batch < (int64_t)SLICES_PER_THREAD * threads * images || !batched_apart(seg, n)) return 0;
    size_t copies = 0;
    for (int i = 0; i < n; i++) {
        if (!is_conv(&seg[i])) continue;
        if (!seg[i].in[1].contiguous) return 0;
        size_t w = (kiln_dnnl_conv_slice_workspace(seg[i].kobj, images) + 63) & ~(size_t)63;
        if (w > ws) ws = w;
        copies += params_floats(&seg[i]) * sizeof(float);
    }
    seg[0].depth_first.steps = n;
    seg[0].depth_first.threads = threads;
    seg[0].depth_first.images = images;
    seg[0].depth_first.ws = ws;
    seg[0].depth_first.params = copies;
    return 1;
}

/* a convolution step on images [i0, i0 + n) with its weights and bias at p: conv2d_add's output first takes
 * its slice of the residual */
static void conv_images(const kiln_step *s, const float *p, int64_t i0, int64_t n, void *ws) {
    float *y = s->out[0].data;
    if (s->run == kiln_cpu_conv_add_fwd && s->in[3].data != y) {
        int64_t per = s->out[0].numel / s->batch;
        memcpy(y + i0 * per, (const float *)s->in[3].data + i0 * per, (size_t)(n * per) * sizeof(float));
    }
    const float *b = has_bias(s) ? p + weight_floats(s) : NULL;
    const float *w = s->w_scale ? s->in[1].data : p, *scale = s->w_scale ? p : NULL;
    kiln_dnnl_conv_fwd_images(s->kobj, s->in[0].data, w, scale, b, y, i0, n, ws);
}

/* the steps between the convolutions (batch norm folds) run first, in order, and each convolution's weights and
 * bias are copied where it stands in that order: what it would have read, though a later fold may reuse the
 * memory; then each thread takes slices through all the convolutions */
static kiln_status run_segment(const kiln_step *seg, const kiln_run_ctx *rc) {
    int n = seg->depth_first.steps;
    int nt = seg->depth_first.threads;
    size_t ws_each = seg->depth_first.ws;
    float *copies = (float *)((char *)rc->workspace + (size_t)nt * ws_each), *p = copies;
    for (int i = 0; i < n; i++) {
        if (is_conv(&seg[i])) {
            memcpy(p, seg[i].w_scale ? seg[i].w_scale : seg[i].in[1].data, (size_t)weight_numel(&seg[i]) * sizeof(float));
            if (has_bias(&seg[i]))
                memcpy(p + weight_floats(&seg[i]), seg[i].in[2].data, (size_t)seg[i].in[2].numel * sizeof(float));
            p += params_floats(&seg[i]);
            continue;
        }
        kiln_status st = seg[i].run(&seg[i], rc);
        if (st != KILN_OK) return kiln_fail_context(st, "%s", seg[i].name);
    }
    int64_t batch = seg->batch, m = seg->depth_first.images, nslices = (batch + m - 1) / m;
#pragma omp parallel num_threads(nt)
    {
        char *ws = (char *)rc->workspace + (size_t)omp_get_thread_num() * ws_each;
#pragma omp for schedule(dynamic, 1)
        for (int64_t q = 0; q < nslices; q++) {
            int64_t i0 = q * m, k = batch - i0 < m ? batch - i0 : m;
            const float *w = copies;
            for (int i = 0; i < n; i++)
                if (is_conv(&seg[i])) {
                    conv_images(&seg[i], w, i0, k, ws);
                    w += params_floats(&seg[i]);
                }
        }
    }
    return KILN_OK;
}

/* every tensor the segment reads is in memory (a bound input is not yet, at compile) */
static int ready(const kiln_step *seg, int n) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < seg[i].nin; k++)
            if (!seg[i].in[k].data && seg[i].in[k].numel) return 0;
    return 1;
}

static kiln_status run_each(const kiln_step *seg, int n, const kiln_run_ctx *rc) {
    kiln_status st = KILN_OK;
    for (int i = 0; i < n && st == KILN_OK; i++) st = seg[i].run(&seg[i], rc);
    return st;
}

/* the segment timed both ways on the plan's memory as it stands at compile (zeros, or what a step left),
 * alternating, after a round that warms pages and caches: the best of TIMING_ROUNDS each, into t */
#define TIMING_ROUNDS 3
static kiln_status time_both(const kiln_step *seg, size_t ws_bytes, double t[2]) {
    void *ws = kiln_alloc(ws_bytes);
    if (!ws) return kiln_fail(KILN_ERR_NOMEM, "depth-first: out of memory timing %s", seg->name);
    kiln_run_ctx rc = {.workspace = ws};
    kiln_status st = KILN_OK;
    t[0] = t[1] = 1e30;
    for (int r = 0; r <= TIMING_ROUNDS && st == KILN_OK; r++)
        for (int way = 0; way < 2 && st == KILN_OK; way++) {
            double t0 = omp_get_wtime();
            st = way ? run_segment(seg, &rc) : run_each(seg, seg->depth_first.steps, &rc);
            double dt = omp_get_wtime() - t0;
            if (r && dt < t[way]) t[way] = dt;
        }
    kiln_free(ws);
    return st;
}

/* a segment stays only where its slices ran faster than its steps, timed now (where its memory is ready):
 * whether the slices' tensors stay in cache depends on the CPU's caches and the shapes, so it is measured,
 * not guessed; the log says what was measured */
static int untimed; /* tests: every segment kept, nothing timed */
void kiln_cpu_depth_first_untimed(int on) { untimed = on; }

static kiln_status keep_if_faster(kiln_step *seg, size_t ws_bytes) {
    int n = seg->depth_first.steps;
    if (untimed || !ready(seg, n)) return KILN_OK;
    double t[2];
    kiln_status st = time_both(seg, ws_bytes, t);
    if (st != KILN_OK) return st;
    int keep = t[1] < t[0];
    kiln_log(KILN_LOG_INFO, "depth-first %s .. %s (%lld images a slice): %.2f ms against %.2f step by step: %s",
             seg[0].name, seg[n - 1].name, (long long)seg->depth_first.images, t[1] * 1e3, t[0] * 1e3,
             keep ? "by slices" : "step by step");
    if (!keep) memset(&seg->depth_first, 0, sizeof seg->depth_first);
    return KILN_OK;
}

kiln_status kiln_cpu_depth_first_prepare(kiln_prep *p) {
    if (!p->o->depth_first || p->o->training) return KILN_OK;
    int threads = omp_get_max_threads();
    for (int i = 0; i < p->nsteps;) {
        if (!is_conv(&p->steps[i])) {
            i++;
            continue;
        }
        int end = i + 1, last = i; /* the run of convolutions and unbatched steps, ending at a convolution */
        for (; end < p->nsteps && (is_conv(&p->steps[end]) || unbatched(&p->steps[end])); end++)
            if (is_conv(&p->steps[end])) last = end;
        kiln_step *seg = &p->steps[i];
        i = last + 1;
        if (!plan_segment(seg, i - (int)(seg - p->steps), threads)) continue;
        size_t need = seg->depth_first.ws * (size_t)threads + seg->depth_first.params;
        kiln_status st = keep_if_faster(seg, need > p->workspace ? need : p->workspace);
        if (st != KILN_OK) return st;
        if (seg->depth_first.steps && need > p->workspace) p->workspace = need;
    }
    return KILN_OK;
}

/* the backend's run: the steps one by one, but each segment whole where the list holds it whole (a list cut
 * into single steps, for a profile or a trace, runs them step by step) */
kiln_status kiln_cpu_run(const kiln_step *steps, int n, const kiln_run_ctx *rc) {
    for (int i = 0; i < n;) {
        const kiln_step *s = &steps[i];
        int df = s->depth_first.steps;
        kiln_status st;
        if (df > 1 && i + df <= n) {
            st = run_segment(s, rc);
            i += df;
        } else {
            st = s->run(s, rc);
            if (st != KILN_OK) st = kiln_fail_context(st, "%s", s->name);
            i++;
        }
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}
