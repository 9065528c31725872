/* The reference backend: every op in double with the naive kernels of
 * src/kernels/ref/. It is the oracle of the tests: the fast backends are
 * checked against it, and it against PyTorch's fixtures. */
#ifndef KILN_BACKEND_REF_H
#define KILN_BACKEND_REF_H

#include "backends/internal/backend.h"

extern const kiln_backend kiln_backend_ref;
extern const kiln_kernel kiln_ref_kernels[KILN_OP_COUNT];
/* reduced.c: a bf16 or fp16 step (mixed precision) on rounded copies of its reduced operands; the roundings */
kiln_status kiln_ref_run_reduced(const kiln_step *s, const kiln_run_ctx *rc);
double kiln_ref_round_bf16(double v);
double kiln_ref_round_fp16(double v);
/* n values rounded to the step's 16 bits (fp16 for precision fp16, else bf16) */
void kiln_ref_round_reduced(const kiln_step *s, double *v, int64_t n);
/* m doubles rounded to a 16-bit precision (kiln_precision), in place (a kiln_round_tile_fn) */
void kiln_ref_round_tile(int precision, void *tile, int64_t m);

#endif
