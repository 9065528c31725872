/* Mixed precision on the reference backend: a step the autocast pass marked
 * bf16 runs its double kernel on copies of its bf16 operands (the op table's
 * bf16_in) rounded the way the cpu's oneDNN reorders round them: to float,
 * then to bf16's 8 significant bits, to nearest, ties to even. Accumulation
 * stays in double and outputs are not rounded, so a bf16 cpu step and this
 * one differ only by the cpu's float accumulation. The copies are made per
 * call: this is the test oracle, not a fast path. */
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

kiln_status kiln_ref_run_bf16(const kiln_step *s, const kiln_run_ctx *rc) {
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
        for (int64_t i = 0; i < n; i++) copy[k][i] = kiln_ref_round_bf16(src[i]);
        c.in[k].data = copy[k];
    }
    if (st == KILN_OK) st = kiln_ref_kernels[s->op].run(&c, rc);
    for (int k = 0; k < KILN_OP_MAX_IN; k++) free(copy[k]);
    return st;
}
