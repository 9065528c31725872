/* conv2d on oneDNN: forward, backward-data and backward-weights primitives,
 * each created with format_any so oneDNN picks its fastest (blocked) layout;
 * kiln's NCHW tensors are reordered in and out through the shared workspace.
 * With autotune on, every algorithm oneDNN accepts for a direction (Winograd,
 * direct) is timed on the real shape and the fastest kept: the CPU analogue of
 * cudnn.benchmark. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/dnnl/internal/dnnl_util.h"
#include "kernels/internal/dnnl_ops.h"
#include "kiln/tensor.h"

enum { DIR_FWD, DIR_BWD_DATA, DIR_BWD_WEIGHT, NDIR };
static const char *dir_names[NDIR] = {"fwd", "bwd_data", "bwd_weight"};

typedef struct {
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    kiln_dn_arg a[3];
    dnnl_alg_kind_t alg;
    size_t ws;      /* workspace this direction needs */
    size_t acc_off; /* where an accumulated output is staged */
} conv_dir;

struct kiln_dnnl_conv {
    kiln_conv_shape cs;
    kiln_dnnl_conv_opts o;
    dnnl_memory_desc_t x_md, w_md, b_md, y_md;
    dnnl_memory_t bias_mem;
    dnnl_primitive_desc_t fwd_hint;
    conv_dir d[NDIR];
    size_t ws;
    char problem[160]; /* the autotune key */
    char desc[512];
};

static void dims4(dnnl_dims_t d, int64_t a, int64_t b, int64_t c, int64_t e) {
    d[0] = a; d[1] = b; d[2] = c; d[3] = e;
}

/* kiln's weight [K, C/g, R, S] is oneDNN's grouped [g, K/g, C/g, R, S] with the same bytes */
static int weight_dims(const kiln_conv_shape *cs, dnnl_dims_t wd) {
    if (cs->groups == 1) {
        dims4(wd, cs->k, cs->c, cs->r, cs->s);
        return 4;
    }
    wd[0] = cs->groups;
    wd[1] = cs->k / cs->groups;
    wd[2] = cs->c / cs->groups;
    wd[3] = cs->r;
    wd[4] = cs->s;
    return 5;
}

static dnnl_status_t make_pd(kiln_dnnl_conv *c, int dir, dnnl_alg_kind_t alg, dnnl_primitive_desc_t *pd) {
    const kiln_conv_shape *cs = &c->cs;
    dnnl_dims_t xd, wd, yd, strides = {cs->stride, cs->stride}, pad = {cs->pad, cs->pad};
    dnnl_dims_t dil = {cs->dilation - 1, cs->dilation - 1}; /* oneDNN counts the gaps: 0 is dense */
    dims4(xd, cs->n, cs->c, cs->h, cs->w);
    int wnd = weight_dims(cs, wd);
    dims4(yd, cs->n, cs->k, cs->oh, cs->ow);
    /* padding_r so that the output size matches floor semantics */
    dnnl_dims_t pad_r = {(cs->oh - 1) * cs->stride + (cs->r - 1) * cs->dilation + 1 - cs->h - cs->pad,
                         (cs->ow - 1) * cs->stride + (cs->s - 1) * cs->dilation + 1 - cs->w - cs->pad};
    dnnl_memory_desc_t xa, wa, ya, ba;
    dnnl_memory_desc_init_by_tag(&xa, 4, xd, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&wa, wnd, wd, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&ya, 4, yd, dnnl_f32, dnnl_format_tag_any);
    dnnl_dims_t bd = {cs->k};
    dnnl_memory_desc_init_by_tag(&ba, 1, bd, dnnl_f32, dnnl_a);
    dnnl_convolution_desc_t desc;
    dnnl_status_t s;
    dnnl_primitive_attr_t attr = NULL;
    if (dir == DIR_FWD) {
        /* inference plans need no backward: oneDNN may then pick leaner kernels */
        dnnl_prop_kind_t prop = c->o.need_bwd_data || c->o.need_bwd_weight ? dnnl_forward_training : dnnl_forward_inference;
        s = dnnl_dilated_convolution_forward_desc_init(&desc, prop, alg, &xa, &wa, c->o.has_bias ? &ba : NULL, &ya,
                                                       strides, dil, pad, pad_r);
        if (s == dnnl_success && c->o.fuse_relu) {
            dnnl_post_ops_t po;
            dnnl_post_ops_create(&po);
            dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
            dnnl_primitive_attr_create(&attr);
            dnnl_primitive_attr_set_post_ops(attr, po);
            dnnl_post_ops_destroy(po);
        }
    } else if (dir == DIR_BWD_DATA) {
        s = dnnl_dilated_convolution_backward_data_desc_init(&desc, alg, &xa, &wa, &ya, strides, dil, pad, pad_r);
    } else {
        s = dnnl_dilated_convolution_backward_weights_desc_init(&desc, alg, &xa, &wa, c->o.has_bias ? &ba : NULL, &ya,
                                                                strides, dil, pad, pad_r);
    }
    if (s == dnnl_success) s = dnnl_primitive_desc_create(pd, &desc, attr, kiln_dnnl_engine, dir == DIR_FWD ? NULL : c->fwd_hint);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return s;
}

static void dir_free(conv_dir *d) {
    for (int i = 0; i < 3; i++) kiln_dn_arg_free(&d->a[i]);
    if (d->prim) dnnl_primitive_destroy(d->prim);
    if (d->pd) dnnl_primitive_desc_destroy(d->pd);
    memset(d, 0, sizeof *d);
}

/* binds the three reorderable arguments of a direction */
static kiln_status dir_setup(kiln_dnnl_conv *c, int dir) {
    conv_dir *d = &c->d[dir];
    size_t cur = 0;
    const dnnl_memory_desc_t *q;
    kiln_status st;
#define ARG(i, user, query, in)                                                \
    q = dnnl_primitive_desc_query_md(d->pd, query, 0);                         \
    if ((st = kiln_dn_arg_init(&d->a[i], user, q, in, &cur)) != KILN_OK) return st;
    if (dir == DIR_FWD) {
        ARG(0, &c->x_md, dnnl_query_src_md, 1);
        ARG(1, &c->w_md, dnnl_query_weights_md, 1);
        ARG(2, &c->y_md, dnnl_query_dst_md, 0);
    } else if (dir == DIR_BWD_DATA) {
        ARG(0, &c->y_md, dnnl_query_diff_dst_md, 1);
        ARG(1, &c->w_md, dnnl_query_weights_md, 1);
        ARG(2, &c->x_md, dnnl_query_diff_src_md, 0);
    } else {
        ARG(0, &c->x_md, dnnl_query_src_md, 1);
        ARG(1, &c->y_md, dnnl_query_diff_dst_md, 1);
        ARG(2, &c->w_md, dnnl_query_diff_weights_md, 0);
    }
#undef ARG
    /* staging for an accumulated output (grad = None rule, later contributions) */
    d->acc_off = cur;
    size_t out_bytes = dnnl_memory_desc_get_size(dir == DIR_FWD ? &c->y_md : dir == DIR_BWD_DATA ? &c->x_md : &c->w_md);
    if (dir == DIR_BWD_WEIGHT) out_bytes += (size_t)c->cs.k * sizeof(float) + 64;
    cur += (out_bytes + 63) & ~(size_t)63;
    d->ws = cur;
    return kiln_dnnl_check(dnnl_primitive_create(&d->prim, d->pd), dir_names[dir]);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static kiln_status run_dir(kiln_dnnl_conv *c, int dir, float *x, float *w, float *b, float *y, void *ws);

/* Chooses the algorithm of one direction: the only one that exists, or the fastest one measured. */
static kiln_status choose(kiln_dnnl_conv *c, int dir, float *bufs[4], void *ws_probe, size_t ws_probe_bytes) {
    /* autotune times the real candidates; otherwise direct (oneDNN's "auto" picks a 5x slower kernel for 1-channel input) */
    static const dnnl_alg_kind_t tuned[2] = {dnnl_convolution_winograd, dnnl_convolution_direct};
    static const dnnl_alg_kind_t untuned[2] = {dnnl_convolution_direct, dnnl_convolution_auto};
    const dnnl_alg_kind_t *algs = c->o.autotune ? tuned : untuned;
    dnnl_alg_kind_t decided[1];
    char known;
    int ncand = 2;
    /* a decision made before (this process, the on-disk cache, a checkpoint) is kept: no timing */
    if (c->o.autotune && kiln_autotune_lookup(c->problem, dir_names[dir], &known)) {
        decided[0] = known == 'w' ? dnnl_convolution_winograd : dnnl_convolution_direct;
        algs = decided;
        ncand = 1;
    }
    double best = 1e30;
    conv_dir keep = {0};
retry:
    for (int i = 0; i < ncand; i++) {
        dnnl_primitive_desc_t pd;
        if (make_pd(c, dir, algs[i], &pd) != dnnl_success) continue;
        conv_dir *d = &c->d[dir];
        memset(d, 0, sizeof *d);
        d->pd = pd;
        d->alg = algs[i];
        kiln_status st = dir_setup(c, dir);
        if (st != KILN_OK) {
            dir_free(d);
            continue;
        }
        double t = 0;
        if (c->o.autotune && ncand > 1 && bufs && d->ws <= ws_probe_bytes) {
            /* one warm-up, then the best of three */
            t = 1e30;
            for (int r = 0; r < 4; r++) {
                double t0 = now_s();
                if (run_dir(c, dir, bufs[0], bufs[1], bufs[2], bufs[3], ws_probe) != KILN_OK) break;
                double dt = now_s() - t0;
                if (r > 0 && dt < t) t = dt;
            }
        }
        if (t < best) {
            if (keep.pd) dir_free(&keep);
            keep = *d;
            best = t;
        } else {
            dir_free(d);
        }
        if (!c->o.autotune) break; /* the first that exists */
    }
    if (!keep.pd && algs == decided) {
        /* a remembered algorithm this machine's oneDNN cannot make (a cache or checkpoint from another CPU) */
        kiln_log(KILN_LOG_WARN, "conv %s %s: the remembered algorithm is not available here; choosing again", c->problem,
                 dir_names[dir]);
        algs = tuned;
        ncand = 2;
        goto retry;
    }
    c->d[dir] = keep;
    if (!keep.pd) return kiln_fail(KILN_ERR_BACKEND, "oneDNN has no %s convolution for this shape", dir_names[dir]);
    if (c->o.autotune) kiln_autotune_store(c->problem, dir_names[dir], keep.alg == dnnl_convolution_winograd ? 'w' : 'd');
    return KILN_OK;
}

kiln_status kiln_dnnl_conv_new(const kiln_conv_shape *cs, const kiln_dnnl_conv_opts *o, kiln_dnnl_conv **out) {
    *out = NULL;
    kiln_status st = kiln_dnnl_init();
    if (st != KILN_OK) return st;
    kiln_dnnl_conv *c = calloc(1, sizeof *c);
    if (!c) return kiln_fail(KILN_ERR_NOMEM, "conv2d: out of memory");
    c->cs = *cs;
    if (c->cs.groups < 1) c->cs.groups = 1;
    if (c->cs.dilation < 1) c->cs.dilation = 1;
    cs = &c->cs;
    c->o = *o;
    /* benchdnn's spelling: groups and dilation only when not 1 (dd counts gaps, as benchdnn) */
    char gd[48] = "";
    if (cs->groups != 1 || cs->dilation != 1)
        snprintf(gd, sizeof gd, "%s%ld%s%ld", cs->groups != 1 ? "g" : "", cs->groups != 1 ? (long)cs->groups : 0L,
                 cs->dilation != 1 ? "dh" : "", cs->dilation != 1 ? (long)cs->dilation - 1 : 0L);
    snprintf(c->problem, sizeof c->problem, "%smb%ldic%ldih%ldiw%ldoc%ldkh%ldkw%ldsh%ldph%ld%s%s%s", gd, (long)cs->n,
             (long)cs->c, (long)cs->h, (long)cs->w, (long)cs->k, (long)cs->r, (long)cs->s, (long)cs->stride,
             (long)cs->pad, o->fuse_relu ? "+relu" : "", o->x_blocked ? "/xb" : "", o->y_blocked ? "/yb" : "");
    int64_t xd[4] = {cs->n, cs->c, cs->h, cs->w}, yd[4] = {cs->n, cs->k, cs->oh, cs->ow};
    int64_t bd[1] = {cs->k};
    dnnl_dims_t wdd;
    int wnd = weight_dims(cs, wdd);
    int64_t wd[5] = {wdd[0], wdd[1], wdd[2], wdd[3], wnd == 5 ? wdd[4] : 0};
    kiln_dn_md_plain(&c->x_md, 4, xd);
    kiln_dn_md_plain(&c->w_md, wnd, wd);
    kiln_dn_md_plain(&c->y_md, 4, yd);
    dnnl_dims_t dx = {xd[0], xd[1], xd[2], xd[3]}, dy = {yd[0], yd[1], yd[2], yd[3]};
    if (o->x_blocked) dnnl_memory_desc_init_by_tag(&c->x_md, 4, dx, dnnl_f32, dnnl_nChw16c);
    if (o->y_blocked) dnnl_memory_desc_init_by_tag(&c->y_md, 4, dy, dnnl_f32, dnnl_nChw16c);
    kiln_dn_md_plain(&c->b_md, 1, bd);
    if ((st = kiln_dnnl_check(dnnl_memory_create(&c->bias_mem, &c->b_md, kiln_dnnl_engine, DNNL_MEMORY_NONE), "bias")) != KILN_OK)
        goto fail;
    /* the forward descriptor is the hint for both backward ones */
    if ((st = kiln_dnnl_check(make_pd(c, DIR_FWD, dnnl_convolution_direct, &c->fwd_hint), "conv2d forward")) != KILN_OK)
        goto fail;

    float *bufs[4] = {0};
    void *probe = NULL;
    size_t probe_bytes = 0;
    int undecided = 0;
    for (int dir = 0; dir < NDIR; dir++) {
        char a;
        undecided |= !kiln_autotune_lookup(c->problem, dir_names[dir], &a);
    }
    if (o->autotune && undecided) {
        size_t nx = (size_t)(cs->n * cs->c * cs->h * cs->w), nw = (size_t)(cs->k * (cs->c / cs->groups) * cs->r * cs->s);
        size_t ny = (size_t)(cs->n * cs->k * cs->oh * cs->ow);
        /* each direction passes its own tensors through these four slots (x or dy, w or dy, bias, y or dx
         * or dw): every slot holds the largest of them */
        size_t most = nx > ny ? nx : ny;
        if (nw > most) most = nw;
        for (int i = 0; i < 4; i++) {
            bufs[i] = kiln_alloc(most * sizeof(float));
            if (bufs[i])
                for (size_t j = 0; j < most; j++) bufs[i][j] = (float)((j * 2654435761u) % 1000) * 1e-3f - 0.5f;
        }
        probe_bytes = 4 * (nx + nw + ny) * sizeof(float) + (1 << 20);
        probe = kiln_alloc(probe_bytes);
        if (!probe || !bufs[0] || !bufs[1] || !bufs[2] || !bufs[3]) {
            st = kiln_fail(KILN_ERR_NOMEM, "conv2d autotune: out of memory");
            goto probe_done;
        }
    }
    for (int dir = 0; dir < NDIR; dir++) {
        if (dir == DIR_BWD_DATA && !o->need_bwd_data) continue;
        if (dir == DIR_BWD_WEIGHT && !o->need_bwd_weight) continue;
        if ((st = choose(c, dir, probe ? bufs : NULL, probe, probe_bytes)) != KILN_OK) break;
        if (c->d[dir].ws > c->ws) c->ws = c->d[dir].ws;
    }
probe_done:
    for (int i = 0; i < 4; i++) kiln_free(bufs[i]);
    kiln_free(probe);
    if (st != KILN_OK) goto fail;
    size_t o2 = 0;
    o2 += (size_t)snprintf(c->desc + o2, sizeof c->desc - o2, "%s", c->problem);
    for (int dir = 0; dir < NDIR && o2 < sizeof c->desc; dir++)
        if (c->d[dir].pd)
            o2 += (size_t)snprintf(c->desc + o2, sizeof c->desc - o2, " %s:%s(%s)", dir_names[dir],
                                   c->d[dir].alg == dnnl_convolution_winograd ? "winograd"
                                   : c->d[dir].alg == dnnl_convolution_auto   ? "auto"
                                                                              : "direct",
                                   kiln_dn_impl_name(c->d[dir].pd));
    *out = c;
    return KILN_OK;
fail:
    kiln_dnnl_conv_free(c);
    return kiln_fail_context(st, "conv2d %s", "");
}

void kiln_dnnl_conv_free(kiln_dnnl_conv *c) {
    if (!c) return;
    for (int i = 0; i < NDIR; i++) dir_free(&c->d[i]);
    if (c->fwd_hint) dnnl_primitive_desc_destroy(c->fwd_hint);
    if (c->bias_mem) dnnl_memory_destroy(c->bias_mem);
    free(c);
}

size_t kiln_dnnl_conv_workspace(const kiln_dnnl_conv *c) { return c->ws; }
const char *kiln_dnnl_conv_describe(const kiln_dnnl_conv *c) { return c->desc; }

static void add_into(float *dst, const float *src, int64_t n) { kiln_cpu_grad_copy(n, src, dst, 1); }

/* x, w, b, y are the direction's (in0, in1, bias, out) in kiln layout */
static kiln_status run_dir(kiln_dnnl_conv *c, int dir, float *in0, float *in1, float *bias, float *out, void *ws) {
    conv_dir *d = &c->d[dir];
    dnnl_memory_t m0 = kiln_dn_arg_in(&d->a[0], in0, ws);
    dnnl_memory_t m1 = kiln_dn_arg_in(&d->a[1], in1, ws);
    dnnl_memory_t m2 = kiln_dn_arg_out(&d->a[2], out, ws);
    dnnl_exec_arg_t args[4];
    int n = 0;
    if (dir == DIR_FWD) {
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, m0};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, m1};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, m2};
    } else if (dir == DIR_BWD_DATA) {
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, m0};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, m1};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, m2};
    } else {
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, m0};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, m1};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, m2};
    }
    if (bias && c->o.has_bias) {
        dnnl_memory_set_data_handle(c->bias_mem, bias);
        args[n++] = (dnnl_exec_arg_t){dir == DIR_FWD ? DNNL_ARG_BIAS : DNNL_ARG_DIFF_BIAS, c->bias_mem};
    }
    kiln_status st = kiln_dn_execute(d->prim, n, args, dir_names[dir]);
    kiln_dn_arg_out_done(&d->a[2]);
    return st;
}

kiln_status kiln_dnnl_conv_fwd(kiln_dnnl_conv *c, const float *x, const float *w, const float *b, float *y, void *ws) {
    return run_dir(c, DIR_FWD, (float *)x, (float *)w, (float *)b, y, ws);
}

kiln_status kiln_dnnl_conv_bwd_data(kiln_dnnl_conv *c, const float *dy, const float *w, float *dx, int acc, void *ws) {
    if (!c->d[DIR_BWD_DATA].prim) return kiln_fail(KILN_ERR_INVALID_ARG, "conv2d: made without backward-data");
    if (!acc) return run_dir(c, DIR_BWD_DATA, (float *)dy, (float *)w, NULL, dx, ws);
    float *tmp = (float *)((char *)ws + c->d[DIR_BWD_DATA].acc_off);
    kiln_status st = run_dir(c, DIR_BWD_DATA, (float *)dy, (float *)w, NULL, tmp, ws);
    if (st == KILN_OK) add_into(dx, tmp, c->cs.n * c->cs.c * c->cs.h * c->cs.w);
    return st;
}

kiln_status kiln_dnnl_conv_bwd_weight(kiln_dnnl_conv *c, const float *x, const float *dy, float *dw, float *db,
                                      int acc_w, int acc_b, void *ws) {
    if (!c->d[DIR_BWD_WEIGHT].prim) return kiln_fail(KILN_ERR_INVALID_ARG, "conv2d: made without backward-weights");
    int64_t nw = c->cs.k * (c->cs.c / c->cs.groups) * c->cs.r * c->cs.s;
    if (!acc_w && !acc_b) return run_dir(c, DIR_BWD_WEIGHT, (float *)x, (float *)dy, db, dw, ws);
    float *tw = (float *)((char *)ws + c->d[DIR_BWD_WEIGHT].acc_off);
    float *tb = tw + ((nw + 15) & ~(int64_t)15);
    kiln_status st = run_dir(c, DIR_BWD_WEIGHT, (float *)x, (float *)dy, db ? tb : NULL, tw, ws);
    if (st != KILN_OK) return st;
    if (acc_w) add_into(dw, tw, nw);
    else memcpy(dw, tw, (size_t)nw * sizeof(float));
    if (db) {
        if (acc_b) add_into(db, tb, c->cs.k);
        else memcpy(db, tb, (size_t)c->cs.k * sizeof(float));
    }
    return KILN_OK;
}
