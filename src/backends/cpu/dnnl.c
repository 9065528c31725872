/* conv2d, linear and matmul steps on oneDNN (src/kernels/dnnl/): the forward step
 * makes the layer's kernel object for its batch size at compile (autotuned,
 * with the directions backward needs); the backward steps share it. */
#include <stdio.h>
#include <string.h>
#include "backends/cpu/internal/cpu.h"
#include "kernels/internal/dnnl_ops.h"

#define F(t) ((float *)(t).data)

static kiln_status conv_make(kiln_step *s, const kiln_prep *p, int bf16) {
    kiln_conv_shape *cs = &s->sz.conv;
    const kiln_tdesc *x = &s->in[0], *w = &s->in[1];
    *cs = (kiln_conv_shape){.n = x->shape[0], .c = x->shape[1], .h = x->shape[2], .w = x->shape[3], .k = w->shape[0],
                            .r = w->shape[2], .s = w->shape[3], .stride = s->attr.conv.stride, .pad = s->attr.conv.pad,
                                   .dilation = s->attr.conv.dilation, .groups = s->attr.conv.groups};
    kiln_conv_shape_infer(cs);
    kiln_dnnl_conv_opts co = {s->nin > 2, s->epilogue == KILN_EPI_RELU, kiln_step_has_bwd(s, KILN_OP_CONV2D_BWD_DATA),
                              kiln_step_has_bwd(s, KILN_OP_CONV2D_BWD_WEIGHT), p->o->autotune,
                              x->layout, s->out[0].layout, bf16,
                              s->op == KILN_OP_CONV2D_ADD};
    kiln_dnnl_conv *c;
    kiln_status st = kiln_dnnl_conv_new(cs, &co, &c);
    if (st != KILN_OK) return st;
    s->kobj = c;
    s->owns_kobj = 1;
    kiln_log(KILN_LOG_DEBUG, "%s: %s", s->name, kiln_dnnl_conv_describe(c));
    return KILN_OK;
}

void kiln_cpu_conv_release(kiln_step *s) { kiln_dnnl_conv_free(s->kobj); }
static size_t conv_ws(const kiln_step *s) { return kiln_dnnl_conv_workspace(s->kobj); }

/* buf: x, w, b (db), y (dy), dx, dw */
static kiln_status conv_call(const kiln_step *s, float *const *buf, void *ws) {
    kiln_dnnl_conv *c = s->kobj;
    kiln_status st = kiln_dnnl_conv_fwd(c, buf[0], buf[1], s->nin > 2 ? buf[2] : NULL, buf[3], ws);
    if (st == KILN_OK && kiln_step_has_bwd(s, KILN_OP_CONV2D_BWD_DATA)) st = kiln_dnnl_conv_bwd_data(c, buf[3], buf[1], buf[4], 0, ws);
    if (st == KILN_OK && kiln_step_has_bwd(s, KILN_OP_CONV2D_BWD_WEIGHT))
        st = kiln_dnnl_conv_bwd_weight(c, buf[0], buf[3], buf[5], s->nin > 2 ? buf[2] : NULL, 0, 0, ws);
    return st;
}

kiln_status kiln_cpu_conv_prepare(kiln_step *s, kiln_prep *p) {
    static const kiln_cpu_prec_ops ops = {conv_make, kiln_cpu_conv_release, conv_ws, conv_call};
    return kiln_cpu_precision_prepare(s, p, &ops);
}

/* backward steps use their forward step's object (made with their direction) */
static kiln_status share_fwd(kiln_step *s, kiln_prep *p) {
    if (s->fwd_step < 0 || !p->steps[s->fwd_step].kobj)
        return kiln_fail(KILN_ERR_INVALID_ARG, "no forward step to differentiate");
    s->kobj = p->steps[s->fwd_step].kobj;
    s->sz = p->steps[s->fwd_step].sz;
    s->precision = p->steps[s->fwd_step].precision; /* the object's, as auto settled it */
    s->owns_kobj = 0;
    return KILN_OK;
}

kiln_status kiln_cpu_conv_bwd_prepare(kiln_step *s, kiln_prep *p) { return share_fwd(s, p); }

kiln_status kiln_cpu_conv_fwd(const kiln_step *s, const kiln_run_ctx *rc) {
    if (s->w_scale)
        return kiln_dnnl_conv_fwd_scaled(s->kobj, F(s->in[0]), F(s->in[1]), s->w_scale, s->nin > 2 ? F(s->in[2]) : NULL,
                                         F(s->out[0]), rc->workspace);
    return kiln_dnnl_conv_fwd(s->kobj, F(s->in[0]), F(s->in[1]), s->nin > 2 ? F(s->in[2]) : NULL, F(s->out[0]), rc->workspace);
}

/* conv2d_add: y starts as the residual (already there when y took its storage), the convolution adds into it */
kiln_status kiln_cpu_conv_add_fwd(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_tdesc *r = &s->in[3], *y = &s->out[0];
    if (!r->contiguous || r->layout != y->layout)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: the residual is not stored as the output is", s->name);
    if (r->data != y->data) memcpy(y->data, r->data, (size_t)y->numel * sizeof(float));
    return kiln_cpu_conv_fwd(s, rc);
}

kiln_status kiln_cpu_conv_bwd_data(const kiln_step *s, const kiln_run_ctx *rc) {
    return kiln_dnnl_conv_bwd_data(s->kobj, F(s->in[0]), F(s->in[1]), F(s->out[0]), kiln_step_acc(s, rc, 0), rc->workspace);
}

kiln_status kiln_cpu_conv_bwd_weight(const kiln_step *s, const kiln_run_ctx *rc) {
    int bias = s->nout > 1 && s->out[1].data;
    return kiln_dnnl_conv_bwd_weight(s->kobj, F(s->in[0]), F(s->in[1]), F(s->out[0]), bias ? F(s->out[1]) : NULL,
                                     kiln_step_acc(s, rc, 0), bias ? kiln_step_acc(s, rc, 1) : 0, rc->workspace);
}

/* linear (w [O,I]) and matmul (w [I,O]) over x [..., I]: rows are all leading dims */
static int w_kn_of(const kiln_step *s) { return s->op == KILN_OP_MATMUL; }

static kiln_status weighted_make(kiln_step *s, const kiln_prep *p, int bf16) {
    const kiln_tdesc *x = &s->in[0], *w = &s->in[1];
    int w_kn = w_kn_of(s);
    int64_t in = w->shape[w_kn ? 0 : 1], out = w->shape[w_kn ? 1 : 0];
    kiln_op bwd_data = w_kn ? KILN_OP_MATMUL_BWD_DATA : KILN_OP_LINEAR_BWD_DATA;
    kiln_op bwd_weight = w_kn ? KILN_OP_MATMUL_BWD_WEIGHT : KILN_OP_LINEAR_BWD_WEIGHT;
    kiln_dnnl_linear *l;
    kiln_status st = kiln_dnnl_linear_new(x->numel / in, in, out, w_kn, s->nin > 2, s->epilogue == KILN_EPI_RELU,
                                          kiln_step_has_bwd(s, bwd_data), kiln_step_has_bwd(s, bwd_weight), bf16,
                                          p->o->autotune, &l);
    if (st != KILN_OK) return st;
    s->kobj = l;
    s->owns_kobj = 1;
    return KILN_OK;
}

void kiln_cpu_linear_release(kiln_step *s) { kiln_dnnl_linear_free(s->kobj); }
static size_t weighted_ws(const kiln_step *s) { return kiln_dnnl_linear_workspace(s->kobj); }

/* buf: x, w, b (db), y (dy), dx, dw */
static kiln_status weighted_call(const kiln_step *s, float *const *buf, void *ws) {
    int w_kn = w_kn_of(s);
    kiln_status st = kiln_dnnl_linear_fwd(s->kobj, buf[0], buf[1], s->nin > 2 ? buf[2] : NULL, buf[3], ws);
    if (st == KILN_OK && kiln_step_has_bwd(s, w_kn ? KILN_OP_MATMUL_BWD_DATA : KILN_OP_LINEAR_BWD_DATA))
        st = kiln_dnnl_linear_bwd_data(s->kobj, buf[3], buf[1], buf[4], 0, ws);
    if (st == KILN_OK && kiln_step_has_bwd(s, w_kn ? KILN_OP_MATMUL_BWD_WEIGHT : KILN_OP_LINEAR_BWD_WEIGHT))
        st = kiln_dnnl_linear_bwd_weight(s->kobj, buf[0], buf[3], buf[5], s->nin > 2 ? buf[2] : NULL, 0, 0, ws);
    return st;
}

static const kiln_cpu_prec_ops weighted_ops = {weighted_make, kiln_cpu_linear_release, weighted_ws, weighted_call};
kiln_status kiln_cpu_linear_prepare(kiln_step *s, kiln_prep *p) { return kiln_cpu_precision_prepare(s, p, &weighted_ops); }
kiln_status kiln_cpu_matmul_prepare(kiln_step *s, kiln_prep *p) { return kiln_cpu_precision_prepare(s, p, &weighted_ops); }
kiln_status kiln_cpu_linear_bwd_prepare(kiln_step *s, kiln_prep *p) { return share_fwd(s, p); }

kiln_status kiln_cpu_linear_fwd(const kiln_step *s, const kiln_run_ctx *rc) {
    return kiln_dnnl_linear_fwd(s->kobj, F(s->in[0]), F(s->in[1]), s->nin > 2 ? F(s->in[2]) : NULL, F(s->out[0]),
                                rc->workspace);
}

kiln_status kiln_cpu_linear_bwd_data(const kiln_step *s, const kiln_run_ctx *rc) {
    return kiln_dnnl_linear_bwd_data(s->kobj, F(s->in[0]), F(s->in[1]), F(s->out[0]), kiln_step_acc(s, rc, 0), rc->workspace);
}

kiln_status kiln_cpu_linear_bwd_weight(const kiln_step *s, const kiln_run_ctx *rc) {
    int bias = s->nout > 1 && s->out[1].data;
    return kiln_dnnl_linear_bwd_weight(s->kobj, F(s->in[0]), F(s->in[1]), F(s->out[0]), bias ? F(s->out[1]) : NULL,
                                       kiln_step_acc(s, rc, 0), bias ? kiln_step_acc(s, rc, 1) : 0, rc->workspace);
}

/* a direction's decision and reorders, for kiln inspect */
static int conv_describe(const kiln_step *s, int dir, char *buf, size_t len, int *weights) {
    int acts = 0;
    *weights = 0;
    snprintf(buf, len, "%s", s->kobj ? kiln_dnnl_conv_dir_info(s->kobj, dir, &acts, weights) : "");
    return acts;
}

int kiln_cpu_conv_describe_fwd(const kiln_step *s, char *buf, size_t len, int *weights) {
    return conv_describe(s, 0, buf, len, weights);
}
int kiln_cpu_conv_describe_bwd_data(const kiln_step *s, char *buf, size_t len, int *weights) {
    return conv_describe(s, 1, buf, len, weights);
}
int kiln_cpu_conv_describe_bwd_weight(const kiln_step *s, char *buf, size_t len, int *weights) {
    return conv_describe(s, 2, buf, len, weights);
}

/* linear layers are oneDNN matmuls on kiln's row-major tensors (weights read transposed through strides): no reorder */
int kiln_cpu_linear_describe(const kiln_step *s, char *buf, size_t len, int *weights) {
    snprintf(buf, len, "onednn matmul%s", s->precision == KILN_PRECISION_BF16 ? " bf16" : "");
    *weights = 0;
    return 0;
}
