/* The cpu backend's fused pointwise kernel. The generic runner
 * (src/backends/pointwise.c) makes each member of a fused program one pass
 * over an L1-resident tile: a load and a store per 16 floats per member, so
 * a chain of cheap members (scales, adds, a multiply) costs as much as its
 * one expensive member. Here, at prepare, the program is folded into fewer
 * vector passes (src/kernels/cpu/pointwise_vec.h): a member whose op has a
 * vector form (kiln_kernel.vec) is a pass's core; an affine member folds into
 * the pass that wrote its source (a step after the core) or, deferred, into
 * the passes that read its result (their sources read x * s + b); an add or
 * a mul folds into the pass that wrote one of its sources, the other read in
 * that pass. Every fold is checked against the program's registers (reused
 * as values die): the folded value has no other reader and is no output, no
 * pass made so far between the two positions writes what the moved reads
 * read or touches the register the moved write writes, and no deferred read
 * still to come reads that register (a deferral checks the members ahead). Members without a vector form
 * (gelu, dropout) stay tile passes. The same tiles as the generic runner;
 * the same bits as the members one by one (tests/test_fuse.c). Without
 * AVX-512 or AVX2 the generic runner runs the program as it is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backends/cpu/internal/cpu.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/pointwise_vec.h"

#define PAR_MIN 32768 /* elements: below, one thread (as pointwise.c) */

typedef struct {
    kiln_vpass v;
    const kiln_vform *form; /* NULL: the member's tile function, unchanged */
    kiln_vpass_fn fn;       /* form's pass for this CPU's vectors */
    int pos;                /* the core member's index in the program */
    uint8_t dst, src[2], esrc[KILN_VPASS_MAX_EPI];
} cpass;

typedef struct {
    const kiln_fused_prog *P;
    int npass;
    cpass p[KILN_FUSED_MAX_INSTR];
} cprog;

/* what the folding needs to know of the program */
typedef struct {
    const kiln_fused_prog *P;
    const kiln_vform *form[KILN_FUSED_MAX_INSTR];
    uint8_t nread[KILN_FUSED_MAX_INSTR];  /* members reading the value member k writes */
    uint8_t last[KILN_FUSED_MAX_INSTR];   /* the last of them */
    uint8_t vecread[KILN_FUSED_MAX_INSTR]; /* all of them read it as a source of a vector form */
    uint8_t escapes[KILN_FUSED_MAX_INSTR]; /* member k writes an output register */
    int pass_of[KILN_FUSED_MAX_REGS];      /* the pass whose result the register holds now, -1 */
    int def[KILN_FUSED_MAX_REGS];          /* the member whose value the register holds now, -1 */
    /* deferred affines: the register's value is read as reg[src] * s + b until member `last` */
    struct { int on, last; uint8_t src; float s, b; } virt[KILN_FUSED_MAX_REGS];
} folder;

static int reads(const kiln_pw_instr *I, int r) {
    for (int j = 0; j < I->nsrc; j++)
        if (I->src[j] == r) return 1;
    return 0;
}

/* a member strictly between a and b writes r (members not folded yet: the program as written) */
static int written_between(const kiln_fused_prog *P, int a, int b, int r) {
    for (int k = a + 1; k < b; k++)
        if (P->ins[k].dst == r) return 1;
    return 0;
}

static void analyse(folder *F, const kiln_fused_prog *P) {
    F->P = P;
    for (int k = 0; k < P->ninstr; k++) {
        int d = P->ins[k].dst, n = 0, vec = 1, last = k;
        for (int m = k + 1; m < P->ninstr; m++) {
            const kiln_pw_instr *M = &P->ins[m];
            int r = reads(M, d);
            if (r || (M->dst == d && M->acc)) n++, last = m, vec &= F->form[m] != NULL && r && M->dst != d;
            if (M->dst == d) break;
        }
        F->nread[k] = (uint8_t)n, F->last[k] = (uint8_t)last, F->vecread[k] = (uint8_t)vec;
        F->escapes[k] = 0;
        for (int o = 0; o < P->nout; o++) F->escapes[k] |= P->out_reg[o] == d;
    }
    for (int r = 0; r < KILN_FUSED_MAX_REGS; r++) F->pass_of[r] = -1, F->def[r] = -1, F->virt[r].on = 0;
}

/* source r of member j, through a deferred affine */
static void resolve(const folder *F, int r, uint8_t *reg, uint8_t *pre, float *s, float *b) {
    *reg = (uint8_t)r, *pre = 0, *s = 1, *b = 0;
    if (F->virt[r].on) *reg = F->virt[r].src, *pre = 1, *s = F->virt[r].s, *b = F->virt[r].b;
}

static int pass_reads(const cpass *T, int r) {
    for (int k = 0; k < T->v.I->nsrc; k++)
        if ((T->form ? T->src[k] : T->v.I->src[k]) == r) return 1;
    for (int e = 0; e < T->v.nepi; e++)
        if ((T->v.epi[e].kind == KILN_VFOLD_ADD || T->v.epi[e].kind == KILN_VFOLD_MUL) && T->esrc[e] == r) return 1;
    return T->v.acc && T->dst == r;
}

/* a pass made so far strictly between positions a and b writes r (touch: or reads it): what the folded
 * program does there, not the members (a member folded into an earlier pass reads and writes there) */
static int passes_between(const cprog *C, int a, int b, int r, int touch) {
    for (int i = 0; i < C->npass; i++) {
        const cpass *T = &C->p[i];
        if (T->pos > a && T->pos < b && (T->dst == r || (touch && pass_reads(T, r)))) return 1;
    }
    return 0;
}

/* the pass that member j (reading r, writing d) may join as a step after its core, or NULL */
static cpass *fold_target(folder *F, cprog *C, int j, int r, int d) {
    int p = F->pass_of[r], k = F->def[r];
    if (p < 0 || k < 0 || F->nread[k] != 1 || F->escapes[k]) return NULL;
    cpass *T = &C->p[p];
    if (T->v.nepi >= KILN_VPASS_MAX_EPI || T->v.acc || passes_between(C, T->pos, j, d, 1)) return NULL;
    for (int q = 0; q < KILN_FUSED_MAX_REGS; q++) /* a deferred read of d still to come, after the moved write */
        if (F->virt[q].on && F->virt[q].src == d && F->virt[q].last > T->pos) return NULL;
    return T;
}

static void wrote(folder *F, int d, int pass, int j) {
    for (int r = 0; r < KILN_FUSED_MAX_REGS; r++)
        if (F->pass_of[r] == pass) F->pass_of[r] = -1;
    F->pass_of[d] = pass, F->def[d] = j, F->virt[d].on = 0;
}

/* member j as a step of an earlier pass (its acc then the pass's); 1 when it folded */
static int fold_into_pass(folder *F, cprog *C, int j) {
    const kiln_pw_instr *I = &F->P->ins[j];
    int kind = F->form[j]->fold;
    if (kind == KILN_VFOLD_NONE) return 0;
    for (int side = 0; side < I->nsrc; side++) {
        int r = I->src[side];
        if (I->nsrc > 1 && I->src[0] == I->src[1]) return 0;
        cpass *T = fold_target(F, C, j, r, I->dst);
        if (!T || (I->acc && I->dst == r)) continue; /* adding into the value the pass no longer writes */
        kiln_vepi E = {.kind = (uint8_t)kind, .s = 1, .b = 0};
        uint8_t o = 0;
        if (kind == KILN_VFOLD_AFFINE || kind == KILN_VFOLD_SCALE) {
            E.s = I->attr.affine.scale, E.b = I->attr.affine.shift;
        } else if (kind == KILN_VFOLD_ADD || kind == KILN_VFOLD_MUL) {
            resolve(F, I->src[1 - side], &o, &E.pre, &E.s, &E.b);
            if (passes_between(C, T->pos, j, o, 0) || o == T->dst) continue;
        }
        if (kind != KILN_VFOLD_COPY) {
            T->esrc[T->v.nepi] = o;
            T->v.epi[T->v.nepi++] = E;
        }
        T->dst = I->dst;
        T->v.acc = I->acc;
        wrote(F, I->dst, (int)(T - C->p), j);
        return 1;
    }
    return 0;
}

/* an affine member whose readers will read its source through it; 1 when deferred */
static int defer_affine(folder *F, int j) {
    const kiln_pw_instr *I = &F->P->ins[j];
    int r = I->src[0], d = I->dst;
    if (F->form[j]->fold != KILN_VFOLD_AFFINE || I->acc || F->escapes[j] || !F->vecread[j] || F->nread[j] == 0 ||
        F->virt[r].on || written_between(F->P, j, F->last[j], r))
        return 0;
    F->virt[d].on = 1, F->virt[d].src = (uint8_t)r, F->virt[d].last = F->last[j];
    F->virt[d].s = I->attr.affine.scale, F->virt[d].b = I->attr.affine.shift;
    F->pass_of[d] = -1, F->def[d] = j;
    return 1;
}

static void emit(folder *F, cprog *C, int j) {
    const kiln_pw_instr *I = &F->P->ins[j];
    cpass *T = &C->p[C->npass];
    memset(T, 0, sizeof *T);
    T->v.I = I, T->v.acc = I->acc, T->form = F->form[j], T->pos = j, T->dst = I->dst;
    T->fn = T->form ? (kiln_cpu_has_avx512() ? T->form->fn : T->form->fn_avx2) : NULL;
    for (int k = 0; k < I->nsrc && k < 2; k++) {
        if (T->form) resolve(F, I->src[k], &T->src[k], &T->v.pre[k], &T->v.pre_s[k], &T->v.pre_b[k]);
        else T->src[k] = I->src[k]; /* never a deferred value: those are read by vector forms only */
    }
    wrote(F, I->dst, C->npass, j);
    if (!T->form || I->acc) F->pass_of[I->dst] = -1;
    C->npass++;
}

static void compile(cprog *C, const kiln_fused_prog *P) {
    folder F;
    memset(&F, 0, sizeof F);
    for (int k = 0; k < P->ninstr; k++) {
        const kiln_vform *v = kiln_cpu_kernels[P->ins[k].op].vec;
        F.form[k] = v && v->nsrc == P->ins[k].nsrc ? v : NULL;
    }
    analyse(&F, P);
    C->P = P, C->npass = 0;
    for (int j = 0; j < P->ninstr; j++) {
        if (F.form[j] && (fold_into_pass(&F, C, j) || defer_affine(&F, j))) continue;
        emit(&F, C, j);
    }
}

kiln_status kiln_cpu_fused_prepare(kiln_step *s, kiln_prep *p) {
    (void)p;
    if (!kiln_cpu_has_avx512() && !kiln_cpu_has_avx2()) return KILN_OK; /* the generic runner */
    cprog *C = malloc(sizeof *C);
    if (!C) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", s->name);
    compile(C, s->attr.fused);
    s->kobj = C;
    s->owns_kobj = 1;
    return KILN_OK;
}

void kiln_cpu_fused_release(kiln_step *s) { free(s->kobj); }

/* kiln inspect: "3 passes for 7 members" (the generic runner: one pass per member) */
int kiln_cpu_fused_describe(const kiln_step *s, char *buf, size_t len, int *weights) {
    const cprog *C = s->kobj;
    const kiln_fused_prog *P = s->attr.fused;
    *weights = 0;
    snprintf(buf, len, "%d pass%s for %d members%s", C ? C->npass : P->ninstr, (C ? C->npass : P->ninstr) == 1 ? "" : "es",
             P->ninstr, C ? " (vector passes)" : " (tile by tile)");
    return 0;
}

static void run_tile(const kiln_step *s, const kiln_run_ctx *rc, const cprog *C, int64_t start, int64_t m,
                     const uint8_t *acc, float (*scratch)[KILN_TILE_BYTES / sizeof(float)]) {
    const kiln_fused_prog *P = C->P;
    float *reg[KILN_FUSED_MAX_REGS];
    for (int r = 0; r < P->nregs; r++) reg[r] = scratch[r];
    for (int k = 0; k < P->nin; k++) reg[k] = (float *)s->in[k].data + start; /* never written */
    for (int k = 0; k < P->nout; k++)
        if (!acc[k]) reg[P->out_reg[k]] = (float *)s->out[k].data + start;
    for (int i = 0; i < C->npass; i++) {
        const cpass *T = &C->p[i];
        const float *ptr[2 + KILN_VPASS_MAX_EPI] = {reg[T->src[0]], reg[T->src[1]]};
        if (!T->form) {
            const void *src[3] = {NULL, NULL, NULL};
            for (int j = 0; j < T->v.I->nsrc; j++) src[j] = reg[T->v.I->src[j]];
            kiln_cpu_kernels[T->v.I->op].tile(T->v.I, start, m, reg[T->dst], src, rc);
            continue;
        }
        for (int e = 0; e < T->v.nepi; e++) ptr[2 + e] = reg[T->esrc[e]];
        T->fn(&T->v, m, reg[T->dst], ptr);
    }
    for (int k = 0; k < P->nout; k++)
        if (acc[k])
            kiln_fused_add_tile(rc, kiln_cpu_kernels, start, m, (float *)s->out[k].data + start, reg[P->out_reg[k]]);
}

kiln_status kiln_cpu_fused_run(const kiln_step *s, const kiln_run_ctx *rc) {
    const cprog *C = s->kobj;
    if (!C) return kiln_fused_run(s, rc, kiln_cpu_kernels, sizeof(float), 1, NULL);
    uint8_t acc[KILN_OP_MAX_OUT] = {0};
    for (int k = 0; k < s->nout; k++) acc[k] = (uint8_t)kiln_step_acc(s, rc, k);
    int64_t n = s->out[0].numel, T = KILN_TILE_BYTES / (int64_t)sizeof(float), ntiles = (n + T - 1) / T;
#pragma omp parallel if (n >= PAR_MIN)
    {
        _Alignas(64) float scratch[KILN_FUSED_MAX_REGS][KILN_TILE_BYTES / sizeof(float)];
#pragma omp for schedule(static)
        for (int64_t t = 0; t < ntiles; t++) {
            int64_t start = t * T;
            run_tile(s, rc, C, start, n - start < T ? n - start : T, acc, scratch);
        }
    }
    return KILN_OK;
}
