/* Batch norm folded at no pass over the weights, in inference plans. The
 * graph's fold (src/graph/pass_fold_bn.c) writes w' = w * s channel by
 * channel on every run, since the parameters may change between runs, and the
 * convolution then reads w'. For resnet18's last stage that is 9.4 MB read
 * and 9.4 MB written per convolution per run: 0.8 ms each on a Zen 3, some
 * 4 % of the inference step over the whole network. Where the convolution's
 * forward runs kiln's own Winograd kernel, which loads every filter tap into
 * a register before transforming it, the multiply by s costs nothing there.
 * The fold then writes only s (into the first floats of w', which lives until
 * the convolution has read it) and the new bias, and the convolution reads
 * the parameters' w with the scales: the same float products, so the same
 * bits.
 *
 * Taken where the convolution alone reads w' (as pass_fold_bn makes it) and
 * its forward is kiln's kernel; every other fold stays whole (oneDNN's
 * kernels read the weights as given). Runs before depth_first.c's pass, so
 * that pass times what will run. */
#include "backends/cpu/internal/cpu.h"
#include "kernels/internal/dnnl_ops.h"

#define F(t) ((float *)(t).data)

static int off; /* tests: every fold whole */
void kiln_cpu_fold_scale_off(int on) { off = on; }

/* in w, gamma, beta, mean, var, b?; out: the scales in w''s first floats, and b' */
static kiln_status fold_scales(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cpu_bn_fold_scale(s->out[1].numel, s->nin > 5 ? F(s->in[5]) : NULL, F(s->in[1]), F(s->in[2]), F(s->in[3]),
                           F(s->in[4]), s->attr.bn.eps, F(s->out[0]), F(s->out[1]));
    return KILN_OK;
}

static int overlaps(const kiln_tdesc *a, const kiln_tdesc *b) {
    const char *a0 = a->data, *b0 = b->data;
    if (!a0 || !b0) return 0;
    const char *a1 = a0 + kiln_tdesc_span(a) * kiln_dtype_size(a->dtype), *b1 = b0 + kiln_tdesc_span(b) * kiln_dtype_size(b->dtype);
    return a0 < b1 && b0 < a1;
}

/* the one step after the fold at f that reads its w' before anything writes there again, or -1 */
static int only_reader(const kiln_prep *p, int f) {
    const kiln_tdesc *w = &p->steps[f].out[0];
    int reader = -1;
    for (int j = f + 1; j < p->nsteps; j++) {
        const kiln_step *s = &p->steps[j];
        for (int k = 0; k < s->nin; k++)
            if (overlaps(&s->in[k], w)) {
                if (reader >= 0 && reader != j) return -1;
                reader = j;
            }
        for (int k = 0; k < s->nout; k++)
            if (overlaps(&s->out[k], w)) return reader;
    }
    return reader;
}

/* step c reads the fold's w' as its weights and runs kiln's kernel forward, w' stored as the fold's w */
static int takes_scales(const kiln_step *c, const kiln_step *f) {
    const kiln_tdesc *w = &c->in[1], *wf = &f->out[0], *src = &f->in[0];
    return (c->run == kiln_cpu_conv_fwd || c->run == kiln_cpu_conv_add_fwd) && c->kobj && !c->w_scale &&
           kiln_dnnl_conv_own_fwd(c->kobj) && w->data == wf->data && w->numel == wf->numel && w->contiguous &&
           src->contiguous && src->layout == w->layout && src->dtype == KILN_F32;
}

kiln_status kiln_cpu_fold_scale_prepare(kiln_prep *p) {
    if (off || p->o->training) return KILN_OK;
    for (int i = 0; i < p->nsteps; i++) {
        kiln_step *f = &p->steps[i];
        if (f->op != KILN_OP_BN_FOLD || f->nout != 2 || !f->out[0].data) continue;
        int j = only_reader(p, i);
        if (j < 0 || !takes_scales(&p->steps[j], f)) continue;
        f->run = fold_scales;
        p->steps[j].in[1] = f->in[0];
        p->steps[j].w_scale = f->out[0].data;
    }
    return KILN_OK;
}
