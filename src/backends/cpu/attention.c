/* bmm (oneDNN matmul) and causal attention (kiln's FlashAttention kernel)
 * steps: operands may be strided views, read in place. Each bmm step makes
 * the matmul primitives of its own directions at compile; attention sizes
 * one scratch slot per compute thread in the plan's workspace. */
#include <omp.h>
#include <stdio.h>
#include "backends/cpu/internal/cpu.h"
#include "kernels/internal/dnnl_ops.h"

#define F(t) ((float *)(t).data)

/* forward steps make the forward primitive, backward steps the directions they have outputs for */
static kiln_status bmm_make(kiln_step *s, const kiln_prep *p, int bf16) {
    (void)p;
    int bwd = s->op == KILN_OP_BMM_BWD;
    int bwd_a = bwd && s->out[0].data != NULL, bwd_b = bwd && s->nout > 1 && s->out[1].data != NULL;
    kiln_status st = kiln_prepare_bmm(s, NULL);
    kiln_dnnl_bmm *o = NULL;
    if (st == KILN_OK) st = kiln_dnnl_bmm_new(&s->sz.bmm, !bwd, bwd_a, bwd_b, bf16, &o);
    if (st != KILN_OK) return st;
    s->kobj = o;
    s->owns_kobj = 1;
    return KILN_OK;
}

void kiln_cpu_bmm_release(kiln_step *s) { kiln_dnnl_bmm_free(s->kobj); }
static size_t bmm_ws(const kiln_step *s) { return kiln_dnnl_bmm_workspace(s->kobj); }

/* buf: a, b, -, y (dy), da, db */
static kiln_status bmm_call(const kiln_step *s, float *const *buf, void *ws) {
    if (s->op != KILN_OP_BMM_BWD) return kiln_dnnl_bmm_fwd(s->kobj, buf[0], buf[1], buf[3], ws);
    return kiln_dnnl_bmm_bwd(s->kobj, buf[0], buf[1], buf[3], s->out[0].data ? buf[4] : NULL,
                             s->nout > 1 && s->out[1].data ? buf[5] : NULL, 0, 0, ws);
}

static const kiln_cpu_prec_ops bmm_ops = {bmm_make, kiln_cpu_bmm_release, bmm_ws, bmm_call};
kiln_status kiln_cpu_bmm_prepare(kiln_step *s, kiln_prep *p) { return kiln_cpu_precision_prepare(s, p, &bmm_ops); }
kiln_status kiln_cpu_bmm_bwd_prepare(kiln_step *s, kiln_prep *p) { return kiln_cpu_precision_prepare(s, p, &bmm_ops); }

kiln_status kiln_cpu_bmm_fwd(const kiln_step *s, const kiln_run_ctx *rc) {
    return kiln_dnnl_bmm_fwd(s->kobj, F(s->in[0]), F(s->in[1]), F(s->out[0]), rc->workspace);
}

kiln_status kiln_cpu_bmm_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    return kiln_dnnl_bmm_bwd(s->kobj, F(s->in[0]), F(s->in[1]), F(s->in[2]), F(s->out[0]), F(s->out[1]),
                             kiln_step_acc(s, rc, 0), kiln_step_acc(s, rc, 1), rc->workspace);
}

int kiln_cpu_bmm_describe(const kiln_step *s, char *buf, size_t len, int *weights) {
    snprintf(buf, len, "onednn matmul %s%s", kiln_dnnl_bmm_impl(s->kobj), s->precision == KILN_PRECISION_BF16 ? " bf16" : "");
    *weights = 0;
    return 0;
}

kiln_status kiln_cpu_attention_prepare(kiln_step *s, kiln_prep *p) {
    kiln_prepare_attention(s, p);
    int slots = omp_get_max_threads();
    s->sz.attn.slots = slots > 0 ? slots : 1;
    size_t need = (size_t)s->sz.attn.slots * kiln_cpu_attention_scratch(&s->sz.attn.shape);
    if (need > p->workspace) p->workspace = need;
    return KILN_OK;
}

kiln_status kiln_cpu_attention_fwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cpu_causal_attention_fwd(&s->sz.attn.shape, F(s->in[0]), F(s->in[1]), F(s->in[2]), F(s->out[0]), F(s->out[1]),
                                  rc->workspace, s->sz.attn.slots);
    return KILN_OK;
}

/* in: q, k, v, y, lse, dy; out: dq?, dk?, dv?, or the one gradient of the value q, k, v are the thirds of */
kiln_status kiln_cpu_attention_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    void *d[3];
    int acc[3];
    kiln_attention_grads(s, rc, d, acc);
    kiln_cpu_causal_attention_bwd(&s->sz.attn.shape, F(s->in[0]), F(s->in[1]), F(s->in[2]), F(s->in[3]), F(s->in[4]),
                                  F(s->in[5]), d[0], d[1], d[2], acc[0], acc[1], acc[2], rc->workspace, s->sz.attn.slots);
    return KILN_OK;
}
