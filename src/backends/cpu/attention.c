/* bmm (oneDNN matmul) and causal attention (kiln's FlashAttention kernel)
 * steps: operands may be strided views, read in place. Each bmm step makes
 * the matmul primitives of its own directions at compile; attention sizes
 * one scratch slot per compute thread in the plan's workspace. */
#include <omp.h>
#include <stdio.h>
#include "backends/cpu/internal/cpu.h"
#include "kernels/internal/dnnl_ops.h"

#define F(t) ((float *)(t).data)

static kiln_status bmm_make(kiln_step *s, int fwd, int bwd_a, int bwd_b) {
    kiln_status st = kiln_prepare_bmm(s, NULL);
    kiln_dnnl_bmm *o = NULL;
    if (st == KILN_OK) st = kiln_dnnl_bmm_new(&s->sz.bmm, fwd, bwd_a, bwd_b, &o);
    if (st != KILN_OK) return st;
    s->kobj = o;
    s->owns_kobj = 1;
    return KILN_OK;
}

kiln_status kiln_cpu_bmm_prepare(kiln_step *s, kiln_prep *p) {
    (void)p;
    return bmm_make(s, 1, 0, 0);
}

kiln_status kiln_cpu_bmm_bwd_prepare(kiln_step *s, kiln_prep *p) {
    (void)p;
    return bmm_make(s, 0, s->out[0].data != NULL, s->nout > 1 && s->out[1].data != NULL);
}

void kiln_cpu_bmm_release(kiln_step *s) { kiln_dnnl_bmm_free(s->kobj); }

kiln_status kiln_cpu_bmm_fwd(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    return kiln_dnnl_bmm_fwd(s->kobj, F(s->in[0]), F(s->in[1]), F(s->out[0]));
}

kiln_status kiln_cpu_bmm_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    return kiln_dnnl_bmm_bwd(s->kobj, F(s->in[0]), F(s->in[1]), F(s->in[2]), F(s->out[0]), F(s->out[1]),
                             kiln_step_acc(s, rc, 0), kiln_step_acc(s, rc, 1));
}

int kiln_cpu_bmm_describe(const kiln_step *s, char *buf, size_t len, int *weights) {
    snprintf(buf, len, "onednn matmul %s", kiln_dnnl_bmm_impl(s->kobj));
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
