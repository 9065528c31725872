/* Mixed precision on the reference backend: a step the autocast pass marked
 * bf16 runs its double kernel on copies of its bf16 operands (the op table's
 * bf16_in) rounded the way the cpu's oneDNN reorders round them: to float,
 * then to bf16's 8 significant bits, to nearest, ties to even. An fp16 step
 * rounds them as a GPU converts float to half for its tensor cores: 11
 * significant bits to nearest even, subnormals below 2^-14 (steps of 2^-24,
 * so smaller values flush to zero) and inf from 65520 up: the underflow that
 * dynamic loss scaling exists for. Accumulation
 * stays in double and outputs are not rounded, so a bf16 cpu step and this
 * one differ only by the cpu's float accumulation. The copies are made per
 * call: this is the test oracle, not a fast path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backends/ref/internal/ref.h"

double kiln_ref_round_bf16(double v) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) != 0x7f800000u) u += 0x7fffu + ((u >> 16) & 1u); /* not inf or NaN: round to nearest even */
    u &= 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return (double)f;
}

double kiln_ref_round_fp16(double v) {
    float f = (float)v, a = fabsf(f);
    if (!isfinite(f) || a == 0) return f;
    if (a >= 65520.0f) return copysign(INFINITY, f);
    int e;
    frexpf(a, &e); /* a = m 2^e, m in [0.5, 1): the leading bit is 2^(e-1), the last of 11 is 2^(e-11) */
    double step = ldexp(1.0, e - 11 < -24 ? -24 : e - 11);
    return copysign(nearbyint((double)a / step) * step, (double)f); /* ties to even: the default rounding */
}

void kiln_ref_round_reduced(const kiln_step *s, double *v, int64_t n) { kiln_ref_round_tile(s->precision, v, n); }

void kiln_ref_round_tile(int precision, void *tile, int64_t m) {
    double (*round)(double) = precision == KILN_PRECISION_FP16 ? kiln_ref_round_fp16 : kiln_ref_round_bf16;
    double *v = tile;
    for (int64_t i = 0; i < m; i++) v[i] = round(v[i]);
}

kiln_status kiln_ref_run_reduced(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_step c = *s;
    double *copy[KILN_OP_MAX_IN] = {0};
    unsigned mask = kiln_op_get(s->op)->bf16_in;
    kiln_status st = KILN_OK;
    for (int k = 0; k < s->nin && st == KILN_OK; k++) {
        if (!(mask >> k & 1) || !s->in[k].data) continue;
        int64_t n = kiln_tdesc_span(&s->in[k]);
        if (!(copy[k] = malloc((size_t)(n ? n : 1) * sizeof(double)))) {
            st = kiln_fail(KILN_ERR_NOMEM, "bf16 operands: out of memory");
            break;
        }
        const double *src = s->in[k].data;
        double (*round)(double) = s->precision == KILN_PRECISION_FP16 ? kiln_ref_round_fp16 : kiln_ref_round_bf16;
        for (int64_t i = 0; i < n; i++) copy[k][i] = round(src[i]);
        c.in[k].data = copy[k];
    }
    if (st == KILN_OK) st = kiln_ref_kernels[s->op].run(&c, rc);
    for (int k = 0; k < KILN_OP_MAX_IN; k++) free(copy[k]);
    return st;
}
