/* Pointwise ops tile by tile, shared by the backends whose memory the host
 * can address (cpu, ref): an op alone runs its tile function over the whole
 * tensors; a fused step runs its program (src/graph/pass_fuse_pointwise.c)
 * over each tile, its intermediates in per-thread scratch tiles that stay in
 * the L1/L2 cache, so a group of pointwise nodes reads its inputs once and
 * writes its outputs once. Both cut the tensors into the same tiles, so a
 * fused kernel computes the same bits as its members one by one. */
#include <string.h>
#include "backends/internal/backend.h"

#define PAR_MIN 32768 /* elements: below, one thread (a team's start costs more) */

kiln_status kiln_pointwise_run(const kiln_step *s, const kiln_run_ctx *rc, kiln_tile_fn tile, int parallel) {
    kiln_pw_instr I;
    memset(&I, 0, sizeof I);
    I.op = s->op;
    I.attr = s->attr;
    I.key = s->key;
    I.acc = (uint8_t)kiln_step_acc(s, rc, 0);
    size_t elem = kiln_dtype_size(s->out[0].dtype);
    int64_t n = s->out[0].numel, T = KILN_TILE_BYTES / (int64_t)elem, ntiles = (n + T - 1) / T;
#pragma omp parallel for schedule(static) if (parallel && n >= PAR_MIN)
    for (int64_t t = 0; t < ntiles; t++) {
        int64_t start = t * T, m = n - start < T ? n - start : T;
        const void *src[KILN_OP_MAX_IN];
        for (int k = 0; k < s->nin; k++) src[k] = (const char *)s->in[k].data + (size_t)start * elem;
        tile(&I, start, m, (char *)s->out[0].data + (size_t)start * elem, src, rc);
    }
    return KILN_OK;
}

/* one tile of a fused step: inputs read in place, outputs written in place
 * unless they add (then into scratch and added at the end) */
static void fused_tile(const kiln_step *s, const kiln_run_ctx *rc, const kiln_kernel *table, kiln_round_tile_fn round,
                       size_t elem, int64_t start, int64_t m, const uint8_t *acc, unsigned char (*scratch)[KILN_TILE_BYTES]) {
    const kiln_fused_prog *P = s->attr.fused;
    void *reg[KILN_FUSED_MAX_REGS];
    size_t off = (size_t)start * elem;
    for (int r = 0; r < P->nregs; r++) reg[r] = scratch[r];
    for (int k = 0; k < P->nin; k++) reg[k] = (char *)s->in[k].data + off; /* never written */
    for (int k = 0; k < P->nout; k++)
        if (!acc[k]) reg[P->out_reg[k]] = (char *)s->out[k].data + off;
    for (int i = 0; i < P->ninstr; i++) {
        const kiln_pw_instr *I = &P->ins[i];
        const void *src[3] = {NULL, NULL, NULL};
        for (int j = 0; j < I->nsrc; j++) src[j] = reg[I->src[j]];
        table[I->op].tile(I, start, m, reg[I->dst], src, rc);
        /* a member that follows autocast, on a 16-bit step (a reference resets an `auto` step to fp32: backend.c) */
        if (I->round && round && (s->precision == KILN_PRECISION_BF16 || s->precision == KILN_PRECISION_FP16))
            round(I->round, reg[I->dst], m);
    }
    for (int k = 0; k < P->nout; k++)
        if (acc[k]) kiln_fused_add_tile(rc, table, start, m, (char *)s->out[k].data + off, reg[P->out_reg[k]]);
}

void kiln_fused_add_tile(const kiln_run_ctx *rc, const kiln_kernel *table, int64_t start, int64_t m, void *dst,
                         const void *src) {
    kiln_pw_instr add;
    memset(&add, 0, sizeof add);
    add.op = KILN_OP_GRAD_COPY;
    add.acc = 1;
    const void *from[1] = {src};
    table[KILN_OP_GRAD_COPY].tile(&add, start, m, dst, from, rc);
}

kiln_status kiln_fused_run(const kiln_step *s, const kiln_run_ctx *rc, const kiln_kernel *table, size_t elem, int parallel,
                           kiln_round_tile_fn round) {
    uint8_t acc[KILN_OP_MAX_OUT] = {0};
    for (int k = 0; k < s->nout; k++) acc[k] = (uint8_t)kiln_step_acc(s, rc, k);
    int64_t n = s->out[0].numel, T = KILN_TILE_BYTES / (int64_t)elem, ntiles = (n + T - 1) / T;
#pragma omp parallel if (parallel && n >= PAR_MIN)
    {
        _Alignas(64) unsigned char scratch[KILN_FUSED_MAX_REGS][KILN_TILE_BYTES];
#pragma omp for schedule(static)
        for (int64_t t = 0; t < ntiles; t++) {
            int64_t start = t * T;
            fused_tile(s, rc, table, round, elem, start, n - start < T ? n - start : T, acc, scratch);
        }
    }
    return KILN_OK;
}

/* an op may join a group when the backend has a fused kernel and the op a tile function (host backends) or
 * a place in the fused kernel (a device's: kiln_kernel.fusable) */
void kiln_backend_tileable(const kiln_backend *b, uint8_t *tileable) {
    const kiln_kernel *k = b->kernels;
    int fused = k[KILN_OP_FUSED].run && k[KILN_OP_FUSED_PLAIN].run && (k[KILN_OP_GRAD_COPY].tile || k[KILN_OP_GRAD_COPY].fusable);
    for (int op = 0; op < KILN_OP_COUNT; op++) tileable[op] = fused && (k[op].tile != NULL || k[op].fusable);
}
