/* conv2d on oneDNN: forward, backward-data and backward-weights primitives.
 * Each direction runs the implementation the tuner chose (conv_tune.c) in the
 * activation layout that implementation asked for; when that differs from the
 * plan's (NCHW, or nChw16c / nChw8c from the layout pass), data is reordered in and out
 * through the shared workspace, and the tuner counted those reorders in the
 * time it measured. Weights stay in PyTorch's OIHW in the plan. In bf16
 * (mixed precision) each direction's two inputs are bf16 in the primitive
 * (the same reorders convert them from the plan's f32) and its output f32;
 * emulated bf16 rounds them in the workspace for an fp32 primitive. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/dnnl/internal/conv2d.h"
#include "kiln/tensor.h"

const char *const kiln_conv_dir_names[KILN_CONV_NDIR] = {"fwd", "bwd_data", "bwd_weight"};
const char *const kiln_conv_fmt_names[KILN_CONV_NFMT] = {"any", "nchw", "nhwc", "nChw16c", "plan"};

const char *kiln_conv_dir_key(const kiln_dnnl_conv *c, int dir) {
    if (dir == KILN_CONV_FWD && !c->o.need_bwd_data && !c->o.need_bwd_weight) return "fwd_inf";
    return kiln_conv_dir_names[dir];
}

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

/* x's (or y's) descriptor in a requested layout and data type */
static void act_md(int fmt, const dnnl_memory_desc_t *plan, dnnl_data_type_t dt, dnnl_memory_desc_t *md) {
    static const dnnl_format_tag_t tags[KILN_CONV_NFMT] = {dnnl_format_tag_any, dnnl_nchw, dnnl_nhwc, dnnl_nChw16c};
    if (fmt == KILN_CONV_FMT_PLAN) {
        *md = *plan; /* strides count elements, so only the type changes */
        md->data_type = dt;
        return;
    }
    dnnl_dims_t d;
    for (int i = 0; i < 4; i++) d[i] = plan->dims[i];
    dnnl_memory_desc_init_by_tag(md, 4, d, dt, tags[fmt]);
}

dnnl_status_t kiln_conv_op_desc(const kiln_dnnl_conv *c, int dir, dnnl_alg_kind_t alg, int fmt,
                                dnnl_convolution_desc_t *desc, dnnl_primitive_attr_t *attr) {
    const kiln_conv_shape *cs = &c->cs;
    dnnl_dims_t wd, strides = {cs->stride, cs->stride}, pad = {cs->pad, cs->pad};
    dnnl_dims_t dil = {cs->dilation - 1, cs->dilation - 1}; /* oneDNN counts the gaps: 0 is dense */
    int wnd = weight_dims(cs, wd);
    /* padding_r so that the output size matches floor semantics */
    dnnl_dims_t pad_r = {(cs->oh - 1) * cs->stride + (cs->r - 1) * cs->dilation + 1 - cs->h - cs->pad,
                         (cs->ow - 1) * cs->stride + (cs->s - 1) * cs->dilation + 1 - cs->w - cs->pad};
    /* bf16: the direction's inputs (x and w forward, dy and w backward-data, x and dy backward-weights) */
    dnnl_data_type_t lo = c->o.bf16 == KILN_DN_BF16 ? dnnl_bf16 : dnnl_f32; /* emulated: rounded by the args */
    dnnl_memory_desc_t xa, wa, ya;
    act_md(fmt, &c->x_md, dir == KILN_CONV_BWD_DATA ? dnnl_f32 : lo, &xa);
    act_md(fmt, &c->y_md, dir == KILN_CONV_FWD ? dnnl_f32 : lo, &ya);
    dnnl_memory_desc_init_by_tag(&wa, wnd, wd, dir == KILN_CONV_BWD_WEIGHT ? dnnl_f32 : lo, dnnl_format_tag_any);
    const dnnl_memory_desc_t *ba = c->o.has_bias ? &c->b_md : NULL;
    *attr = NULL;
    if (dir == KILN_CONV_BWD_DATA) return dnnl_dilated_convolution_backward_data_desc_init(desc, alg, &xa, &wa, &ya, strides, dil, pad, pad_r);
    if (dir == KILN_CONV_BWD_WEIGHT)
        return dnnl_dilated_convolution_backward_weights_desc_init(desc, alg, &xa, &wa, ba, &ya, strides, dil, pad, pad_r);
    /* inference plans need no backward: oneDNN may then pick leaner kernels */
    dnnl_prop_kind_t prop = c->o.need_bwd_data || c->o.need_bwd_weight ? dnnl_forward_training : dnnl_forward_inference;
    dnnl_status_t s = dnnl_dilated_convolution_forward_desc_init(desc, prop, alg, &xa, &wa, ba, &ya, strides, dil, pad, pad_r);
    if (s == dnnl_success && (c->o.fuse_relu || c->o.residual)) {
        dnnl_post_ops_t po;
        dnnl_post_ops_create(&po);
        if (c->o.residual) dnnl_post_ops_append_sum(po, 1.0f); /* y = conv + y, then the relu */
        if (c->o.fuse_relu) dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
        dnnl_primitive_attr_create(attr);
        dnnl_primitive_attr_set_post_ops(*attr, po);
        dnnl_post_ops_destroy(po);
    }
    return s;
}

void kiln_conv_dir_free(kiln_conv_dir *d) {
    for (int i = 0; i < 3; i++) kiln_dn_arg_free(&d->a[i]);
    if (d->prim) dnnl_primitive_destroy(d->prim);
    if (d->pd) dnnl_primitive_desc_destroy(d->pd);
    if (d->hint) dnnl_primitive_desc_destroy(d->hint);
    memset(d, 0, sizeof *d);
}

/* binds the three reorderable arguments of a direction and makes its primitive */
kiln_status kiln_conv_dir_make(kiln_dnnl_conv *c, int dir, dnnl_primitive_desc_t pd, dnnl_primitive_desc_t hint) {
    kiln_conv_dir *d = &c->d[dir];
    memset(d, 0, sizeof *d);
    d->pd = pd;
    d->hint = hint;
    size_t cur = 0;
    const dnnl_memory_desc_t *q;
    kiln_status st;
#define ARG(i, user, query, in)                                                \
    q = dnnl_primitive_desc_query_md(d->pd, query, 0);                         \
    if ((st = kiln_dn_arg_init(&d->a[i], user, q, in, &cur)) != KILN_OK) goto fail;
    if (dir == KILN_CONV_FWD) {
        ARG(0, &c->x_md, dnnl_query_src_md, 1);
        ARG(1, &c->w_md, dnnl_query_weights_md, 1);
        ARG(2, &c->y_md, dnnl_query_dst_md, c->o.residual ? KILN_DN_OUT_ACC : 0);
    } else if (dir == KILN_CONV_BWD_DATA) {
        ARG(0, &c->y_md, dnnl_query_diff_dst_md, 1);
        ARG(1, &c->w_md, dnnl_query_weights_md, 1);
        ARG(2, &c->x_md, dnnl_query_diff_src_md, 0);
    } else {
        ARG(0, &c->x_md, dnnl_query_src_md, 1);
        ARG(1, &c->y_md, dnnl_query_diff_dst_md, 1);
        ARG(2, &c->w_md, dnnl_query_diff_weights_md, 0);
    }
#undef ARG
    /* emulated bf16: the direction's two inputs, rounded on their way in */
    for (int i = 0; i < 2 && c->o.bf16 == KILN_DN_BF16_EMULATED; i++)
        if ((st = kiln_dn_arg_round_bf16(&d->a[i], &cur)) != KILN_OK) goto fail;
    /* staging for an accumulated output (grad = None rule, later contributions) */
    d->acc_off = cur;
    const dnnl_memory_desc_t *out = dir == KILN_CONV_FWD ? &c->y_md : dir == KILN_CONV_BWD_DATA ? &c->x_md : &c->w_md;
    size_t out_bytes = dnnl_memory_desc_get_size(out);
    if (dir == KILN_CONV_BWD_WEIGHT) out_bytes += (size_t)c->cs.k * sizeof(float) + 64;
    cur += (out_bytes + 63) & ~(size_t)63;
    d->ws = cur;
    if ((st = kiln_dnnl_check(dnnl_primitive_create(&d->prim, d->pd), kiln_conv_dir_names[dir])) == KILN_OK) return KILN_OK;
fail:
    kiln_conv_dir_free(d);
    return st;
}

static dnnl_format_tag_t blocked_tag(int block) { return block == 8 ? dnnl_nChw8c : dnnl_nChw16c; }

/* the problem's layout suffix: "/xb" for nChw16c (as before nChw8c existed), "/xb8" for nChw8c */
static const char *blocked_key(int block, char side) {
    if (!block) return "";
    if (side == 'x') return block == 8 ? "/xb8" : "/xb";
    return block == 8 ? "/yb8" : "/yb";
}

void kiln_conv_setup(kiln_dnnl_conv *c, const kiln_conv_shape *shape, const kiln_dnnl_conv_opts *o) {
    c->cs = *shape;
    if (c->cs.groups < 1) c->cs.groups = 1;
    if (c->cs.dilation < 1) c->cs.dilation = 1;
    const kiln_conv_shape *cs = &c->cs;
    c->o = *o;
    /* benchdnn's spelling: groups and dilation only when not 1 (dd counts gaps, as benchdnn) */
    char gd[48] = "";
    if (cs->groups != 1) snprintf(gd, sizeof gd, "g%ld", (long)cs->groups);
    if (cs->dilation != 1) snprintf(gd + strlen(gd), sizeof gd - strlen(gd), "dh%ld", (long)cs->dilation - 1);
    snprintf(c->problem, sizeof c->problem, "%smb%ldic%ldih%ldiw%ldoc%ldkh%ldkw%ldsh%ldph%ld%s%s%s%s%s%s", gd, (long)cs->n,
             (long)cs->c, (long)cs->h, (long)cs->w, (long)cs->k, (long)cs->r, (long)cs->s, (long)cs->stride,
             (long)cs->pad, o->residual ? "+sum" : "", o->fuse_relu ? "+relu" : "", o->has_bias ? "" : "/nb",
             blocked_key(o->x_blocked, 'x'), blocked_key(o->y_blocked, 'y'),
             o->bf16 == KILN_DN_BF16 ? "/bf16" : o->bf16 ? "/bf16e" : "");
    int64_t xd[4] = {cs->n, cs->c, cs->h, cs->w}, yd[4] = {cs->n, cs->k, cs->oh, cs->ow};
    int64_t bd[1] = {cs->k};
    dnnl_dims_t wdd;
    int wnd = weight_dims(cs, wdd);
    int64_t wd[5] = {wdd[0], wdd[1], wdd[2], wdd[3], wnd == 5 ? wdd[4] : 0};
    kiln_dn_md_plain(&c->x_md, 4, xd);
    kiln_dn_md_plain(&c->w_md, wnd, wd);
    kiln_dn_md_plain(&c->y_md, 4, yd);
    dnnl_dims_t dx = {xd[0], xd[1], xd[2], xd[3]}, dy = {yd[0], yd[1], yd[2], yd[3]};
    if (o->x_blocked) dnnl_memory_desc_init_by_tag(&c->x_md, 4, dx, dnnl_f32, blocked_tag(o->x_blocked));
    if (o->y_blocked) dnnl_memory_desc_init_by_tag(&c->y_md, 4, dy, dnnl_f32, blocked_tag(o->y_blocked));
    kiln_dn_md_plain(&c->b_md, 1, bd);
}

kiln_status kiln_dnnl_conv_new(const kiln_conv_shape *cs, const kiln_dnnl_conv_opts *o, kiln_dnnl_conv **out) {
    *out = NULL;
    kiln_status st = kiln_dnnl_init();
    if (st != KILN_OK) return st;
    kiln_dnnl_conv *c = calloc(1, sizeof *c);
    if (!c) return kiln_fail(KILN_ERR_NOMEM, "conv2d: out of memory");
    kiln_conv_setup(c, cs, o);
    if ((st = kiln_dnnl_check(dnnl_memory_create(&c->bias_mem, &c->b_md, kiln_dnnl_engine, DNNL_MEMORY_NONE), "bias")) == KILN_OK)
        st = kiln_conv_choose_all(c);
    if (st != KILN_OK) {
        st = kiln_fail_context(st, "conv2d %s", c->problem);
        kiln_dnnl_conv_free(c);
        return st;
    }
    size_t o2 = (size_t)snprintf(c->desc, sizeof c->desc, "%s", c->problem);
    for (int dir = 0; dir < KILN_CONV_NDIR; dir++) {
        if (c->d[dir].ws > c->ws) c->ws = c->d[dir].ws;
        if (kiln_conv_dir_made(&c->d[dir]) && o2 < sizeof c->desc)
            o2 += (size_t)snprintf(c->desc + o2, sizeof c->desc - o2, " %s:%s", kiln_conv_dir_key(c, dir), c->d[dir].decision);
    }
    *out = c;
    return KILN_OK;
}

void kiln_dnnl_conv_free(kiln_dnnl_conv *c) {
    if (!c) return;
    for (int i = 0; i < KILN_CONV_NDIR; i++) kiln_conv_dir_free(&c->d[i]);
    if (c->bias_mem) dnnl_memory_destroy(c->bias_mem);
    free(c);
}

size_t kiln_dnnl_conv_workspace(const kiln_dnnl_conv *c) { return c->ws; }
const char *kiln_dnnl_conv_describe(const kiln_dnnl_conv *c) { return c->desc; }

const char *kiln_dnnl_conv_decision(const kiln_dnnl_conv *c, const char *dir) {
    for (int d = 0; d < KILN_CONV_NDIR; d++)
        if (kiln_conv_dir_made(&c->d[d]) && !strcmp(dir, kiln_conv_dir_key(c, d))) return c->d[d].decision;
    return "";
}

static void add_into(float *dst, const float *src, int64_t n) { kiln_cpu_grad_copy(n, src, dst, 1); }

/* in0, in1, bias, out are the direction's (x, w, b, y), (dy, w, -, dx) or (x, dy, db, dw) in the plan's layouts */
kiln_status kiln_conv_run_dir(kiln_dnnl_conv *c, int dir, float *in0, float *in1, float *bias, float *out, void *ws) {
    kiln_conv_dir *d = &c->d[dir];
    if (d->own) return kiln_conv_own_run(c, dir, in0, in1, bias, out, 0, ws);
    dnnl_memory_t m0 = kiln_dn_arg_in(&d->a[0], in0, ws);
    dnnl_memory_t m1 = kiln_dn_arg_in(&d->a[1], in1, ws);
    dnnl_memory_t m2 = kiln_dn_arg_out(&d->a[2], out, ws);
    static const int slots[KILN_CONV_NDIR][3] = {{DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
                                                 {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
                                                 {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS}};
    dnnl_exec_arg_t args[4] = {{slots[dir][0], m0}, {slots[dir][1], m1}, {slots[dir][2], m2}};
    int n = 3;
    if (bias && c->o.has_bias && dir != KILN_CONV_BWD_DATA) {
        dnnl_memory_set_data_handle(c->bias_mem, bias);
        args[n++] = (dnnl_exec_arg_t){dir == KILN_CONV_FWD ? DNNL_ARG_BIAS : DNNL_ARG_DIFF_BIAS, c->bias_mem};
    }
    /* the sum post-op adds into y: an implementation writing another layout gets y's values reordered in first */
    kiln_status st = kiln_dn_execute(d->prim, n, args, kiln_conv_dir_names[dir]);
    kiln_dn_arg_out_done(&d->a[2]);
    return st;
}

kiln_status kiln_dnnl_conv_fwd(kiln_dnnl_conv *c, const float *x, const float *w, const float *b, float *y, void *ws) {
    return kiln_conv_run_dir(c, KILN_CONV_FWD, (float *)x, (float *)w, (float *)b, y, ws);
}

kiln_status kiln_dnnl_conv_bwd_data(kiln_dnnl_conv *c, const float *dy, const float *w, float *dx, int acc, void *ws) {
    if (!kiln_conv_dir_made(&c->d[KILN_CONV_BWD_DATA])) return kiln_fail(KILN_ERR_INVALID_ARG, "conv2d: made without backward-data");
    if (c->d[KILN_CONV_BWD_DATA].own) return kiln_conv_own_run(c, KILN_CONV_BWD_DATA, dy, w, NULL, dx, acc, ws);
    if (!acc) return kiln_conv_run_dir(c, KILN_CONV_BWD_DATA, (float *)dy, (float *)w, NULL, dx, ws);
    float *tmp = (float *)((char *)ws + c->d[KILN_CONV_BWD_DATA].acc_off);
    kiln_status st = kiln_conv_run_dir(c, KILN_CONV_BWD_DATA, (float *)dy, (float *)w, NULL, tmp, ws);
    if (st == KILN_OK) add_into(dx, tmp, c->cs.n * c->cs.c * c->cs.h * c->cs.w);
    return st;
}

kiln_status kiln_dnnl_conv_bwd_weight(kiln_dnnl_conv *c, const float *x, const float *dy, float *dw, float *db,
                                      int acc_w, int acc_b, void *ws) {
    if (!kiln_conv_dir_made(&c->d[KILN_CONV_BWD_WEIGHT])) return kiln_fail(KILN_ERR_INVALID_ARG, "conv2d: made without backward-weights");
    int64_t nw = c->cs.k * (c->cs.c / c->cs.groups) * c->cs.r * c->cs.s;
    if (c->d[KILN_CONV_BWD_WEIGHT].own) /* bias-free (conv_wino.c): the kernel adds into dw itself */
        return kiln_conv_own_run(c, KILN_CONV_BWD_WEIGHT, x, dy, NULL, dw, acc_w, ws);
    if (!acc_w && !acc_b) return kiln_conv_run_dir(c, KILN_CONV_BWD_WEIGHT, (float *)x, (float *)dy, db, dw, ws);
    float *tw = (float *)((char *)ws + c->d[KILN_CONV_BWD_WEIGHT].acc_off);
    float *tb = tw + ((nw + 15) & ~(int64_t)15);
    kiln_status st = kiln_conv_run_dir(c, KILN_CONV_BWD_WEIGHT, (float *)x, (float *)dy, db ? tb : NULL, tw, ws);
    if (st != KILN_OK) return st;
    if (acc_w) add_into(dw, tw, nw);
    else memcpy(dw, tw, (size_t)nw * sizeof(float));
    if (db) {
        if (acc_b) add_into(db, tb, c->cs.k);
        else memcpy(db, tb, (size_t)c->cs.k * sizeof(float));
    }
    return KILN_OK;
}
