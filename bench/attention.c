/* Causal attention, forward and backward: kiln's FlashAttention kernel
 * against a plain materialising implementation of the same float math, as
 * PyTorch's eager nanoGPT runs it: oneDNN batched matmuls for q k^T, p v and
 * the backward products, the whole [B, heads, T, T] score tensor in memory,
 * a masked softmax and its backward as row loops, the head transposes as
 * copies. q, k, v are the column thirds of one [B, T, 3C] tensor.
 *
 *     build/bench_attention [B T C heads [runs]]     (default 8 128 256 4 50: the GPT step's)
 *
 * Prints the median ms of each direction and the ratio, after checking that
 * both compute the same y and gradients. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/internal/dnnl_ops.h"
#include "kernels/internal/kernels.h"
#include "kiln/alloc.h"

static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    int64_t b, t, c, h, d;
    float *qkv, *dy;
} problem;

/* ---- the plain implementation ---- */

typedef struct {
    kiln_dnnl_bmm *qk, *pv;      /* S = q k^T, y_h = P v (forward and backward) */
    float *s, *yh, *dyh, *ds, *dvh, *dqh, *dkt;
} plain;

static kiln_bmm_shape heads_shape(const problem *p, int64_t m, int64_t k, int64_t n, const int64_t *sa, const int64_t *sb) {
    kiln_bmm_shape s = {.nbatch = 2, .batch = {p->b, p->h}, .m = m, .k = k, .n = n};
    memcpy(s.a_stride, sa, 4 * sizeof *sa);
    memcpy(s.b_stride, sb, 4 * sizeof *sb);
    return s;
}

static int plain_new(const problem *p, plain *o) {
    int64_t t = p->t, d = p->d, row = 3 * p->c;
    int64_t qv[4] = {t * row, d, row, 1}, kt[4] = {t * row, d, 1, row}, pm[4] = {p->h * t * t, t * t, t, 1};
    kiln_bmm_shape qk = heads_shape(p, t, d, t, qv, kt), pv = heads_shape(p, t, t, d, pm, qv);
    int64_t ns = p->b * p->h * t * t, nh = p->b * p->h * t * d;
    o->s = kiln_alloc(ns * 4), o->ds = kiln_alloc(ns * 4);
    o->yh = kiln_alloc(nh * 4), o->dyh = kiln_alloc(nh * 4), o->dvh = kiln_alloc(nh * 4), o->dqh = kiln_alloc(nh * 4);
    o->dkt = kiln_alloc(nh * 4);
    return kiln_dnnl_bmm_new(&qk, 1, 1, 1, 0, &o->qk) != KILN_OK || kiln_dnnl_bmm_new(&pv, 1, 1, 1, 0, &o->pv) != KILN_OK;
}

/* [B, H, T, D] <-> the head's columns of [B, T, C] */
static void heads_to_rows(const problem *p, const float *src, float *dst, int64_t ld, int to_rows) {
#pragma omp parallel for collapse(2)
    for (int64_t b = 0; b < p->b; b++)
        for (int64_t h = 0; h < p->h; h++)
            for (int64_t i = 0; i < p->t; i++) {
                const float *hs = src + ((b * p->h + h) * p->t + i) * p->d;
                float *hd = dst + ((b * p->h + h) * p->t + i) * p->d;
                float *r = (float *)(to_rows ? dst : src) + (b * p->t + i) * ld + h * p->d;
                if (to_rows) memcpy(r, hs, p->d * 4);
                else memcpy(hd, r, p->d * 4);
            }
}

static void plain_fwd(const problem *p, plain *o, float *y) {
    int64_t t = p->t, rows = p->b * p->h * t, c = p->c;
    float scale = 1.0f / sqrtf((float)p->d);
    kiln_dnnl_bmm_fwd(o->qk, p->qkv, p->qkv + c, o->s, NULL);
#pragma omp parallel for
    for (int64_t r = 0; r < rows; r++) { /* scale, mask, softmax */
        float *s = o->s + r * t, m = -INFINITY, sum = 0;
        int64_t i = r % t;
        for (int64_t j = 0; j <= i; j++) m = fmaxf(m, s[j] * scale);
        for (int64_t j = 0; j < t; j++) sum += s[j] = j <= i ? expf(s[j] * scale - m) : 0.0f;
        for (int64_t j = 0; j <= i; j++) s[j] /= sum;
    }
    kiln_dnnl_bmm_fwd(o->pv, o->s, p->qkv + 2 * c, o->yh, NULL);
    heads_to_rows(p, o->yh, y, c, 1);
}

static void plain_bwd(const problem *p, plain *o, float *dq, float *dk, float *dv) {
    int64_t t = p->t, rows = p->b * p->h * t, c = p->c;
    float scale = 1.0f / sqrtf((float)p->d);
    heads_to_rows(p, p->dy, o->dyh, c, 0);
    kiln_dnnl_bmm_bwd(o->pv, o->s, p->qkv + 2 * c, o->dyh, o->ds, o->dvh, 0, 0, NULL); /* dP, dV */
#pragma omp parallel for
    for (int64_t r = 0; r < rows; r++) { /* softmax backward, scaled */
        float *pr = o->s + r * t, *dp = o->ds + r * t, dot = 0;
        for (int64_t j = 0; j < t; j++) dot += pr[j] * dp[j];
        for (int64_t j = 0; j < t; j++) dp[j] = pr[j] * (dp[j] - dot) * scale;
    }
    kiln_dnnl_bmm_bwd(o->qk, p->qkv, p->qkv + c, o->ds, o->dqh, o->dkt, 0, 0, NULL); /* dq, dk^T */
    heads_to_rows(p, o->dqh, dq, c, 1);
    heads_to_rows(p, o->dvh, dv, c, 1);
#pragma omp parallel for collapse(2)
    for (int64_t b = 0; b < p->b; b++) /* dk^T [B, H, D, T] back to rows */
        for (int64_t h = 0; h < p->h; h++)
            for (int64_t x = 0; x < p->d; x++)
                for (int64_t i = 0; i < t; i++)
                    dk[(b * t + i) * c + h * p->d + x] = o->dkt[((b * p->h + h) * p->d + x) * t + i];
}

/* ---- timing ---- */

typedef struct {
    const problem *p;
    plain *pl;
    kiln_attn_shape s;
    void *scratch;
    int slots;
    float *y, *lse, *g[3];
} ctx;

static void flash_fwd(ctx *x) {
    const problem *p = x->p;
    kiln_cpu_causal_attention_fwd(&x->s, p->qkv, p->qkv + p->c, p->qkv + 2 * p->c, x->y, x->lse, x->scratch, x->slots);
}
static void flash_bwd(ctx *x) {
    const problem *p = x->p;
    kiln_cpu_causal_attention_bwd(&x->s, p->qkv, p->qkv + p->c, p->qkv + 2 * p->c, x->y, x->lse, p->dy, x->g[0], x->g[1],
                                  x->g[2], 0, 0, 0, x->scratch, x->slots);
}
static void plain_f(ctx *x) { plain_fwd(x->p, x->pl, x->y); }
static void plain_b(ctx *x) { plain_bwd(x->p, x->pl, x->g[0], x->g[1], x->g[2]); }

/* median and best wall ms of `runs` calls, and the median of the process's cpu ms (on one thread: the
 * time it ran, which a busy machine's other processes do not inflate; on more, spinning threads count) */
static double time_ms(void (*fn)(ctx *), ctx *x, int runs, double *best, double *cpu) {
    double *t = malloc(runs * sizeof *t), *c = malloc(runs * sizeof *c);
    fn(x); /* warm-up: pages, caches */
    for (int r = 0; r < runs; r++) {
        double t0 = now(), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        fn(x);
        t[r] = (now() - t0) * 1e3;
        c[r] = (clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) * 1e3;
    }
    qsort(t, runs, sizeof *t, cmp);
    qsort(c, runs, sizeof *c, cmp);
    double m = t[runs / 2];
    *best = t[0];
    *cpu = c[runs / 2];
    free(t);
    free(c);
    return m;
}

static double max_diff(const float *a, const float *b, int64_t n) {
    double e = 0, big = 1e-6;
    for (int64_t i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - b[i])), big = fmax(big, fabs((double)b[i]));
    return e / big;
}

int main(int argc, char **argv) {
    problem p = {8, 128, 256, 4, 0, NULL, NULL};
    int runs = 50;
    if (argc >= 5) p.b = atoll(argv[1]), p.t = atoll(argv[2]), p.c = atoll(argv[3]), p.h = atoll(argv[4]);
    if (argc >= 6) runs = atoi(argv[5]);
    if (p.b < 1 || p.t < 1 || p.h < 1 || p.c % p.h || runs < 1) {
        fprintf(stderr, "usage: bench_attention [B T C heads [runs]]\n");
        return 2;
    }
    p.d = p.c / p.h;
    int64_t n = p.b * p.t * p.c;
    p.qkv = kiln_alloc(3 * n * 4), p.dy = kiln_alloc(n * 4);
    srand(1);
    for (int64_t i = 0; i < 3 * n; i++) p.qkv[i] = (float)rand() / RAND_MAX * 2 - 1;
    for (int64_t i = 0; i < n; i++) p.dy[i] = (float)rand() / RAND_MAX * 2 - 1;
    plain pl;
    if (plain_new(&p, &pl)) {
        fprintf(stderr, "bench_attention: %s\n", kiln_last_error());
        return 1;
    }
    int64_t row = 3 * p.c;
    ctx x[2] = {{.p = &p, .pl = &pl,
                 .s = {p.b, p.t, p.c, p.h, {p.t * row, row}, {p.t * row, row}, {p.t * row, row}, {p.t * p.c, p.c}}}};
    x[0].slots = omp_get_max_threads();
    x[0].scratch = kiln_alloc(x[0].slots * kiln_cpu_attention_scratch(&x[0].s));
    x[1] = x[0];
    for (int k = 0; k < 2; k++) {
        x[k].y = kiln_alloc(n * 4), x[k].lse = kiln_alloc(p.b * p.h * p.t * 4);
        for (int i = 0; i < 3; i++) x[k].g[i] = kiln_alloc(n * 4);
    }
    flash_fwd(&x[0]), flash_bwd(&x[0]), plain_f(&x[1]), plain_b(&x[1]);
    double e = max_diff(x[0].y, x[1].y, n);
    for (int i = 0; i < 3; i++) e = fmax(e, max_diff(x[0].g[i], x[1].g[i], n));
    double bff, bfb, bpf, bpb, cff, cfb, cpf, cpb;
    double ff = time_ms(flash_fwd, &x[0], runs, &bff, &cff), fb = time_ms(flash_bwd, &x[0], runs, &bfb, &cfb);
    double pf = time_ms(plain_f, &x[1], runs, &bpf, &cpf), pb = time_ms(plain_b, &x[1], runs, &bpb, &cpb);
    double macs = (double)p.b * p.t * (p.t + 1) / 2 * p.c; /* per product, over the causal half */
    printf("causal attention B=%lld T=%lld C=%lld heads=%lld, %d threads, %d runs: median wall ms (best) [median cpu "
           "ms]; max relative difference %.1e\n", (long long)p.b, (long long)p.t, (long long)p.c, (long long)p.h,
           omp_get_max_threads(), runs, e);
    printf("  forward   flash %7.3f (%7.3f) [%7.3f] %5.1f GFLOP/s   plain %7.3f (%7.3f) [%7.3f]   plain/flash %.2f\n", ff,
           bff, cff, 4 * macs / ff * 1e-6, pf, bpf, cpf, pf / ff);
    printf("  backward  flash %7.3f (%7.3f) [%7.3f] %5.1f GFLOP/s   plain %7.3f (%7.3f) [%7.3f]   plain/flash %.2f\n", fb,
           bfb, cfb, 10 * macs / fb * 1e-6, pb, bpb, cpb, pb / fb);
    printf("  scores held: flash %zu bytes per thread (tiles), plain %lld bytes (S and dS)\n",
           kiln_cpu_attention_scratch(&x[0].s), (long long)(2 * p.b * p.h * p.t * p.t * 4));
    return e > 1e-3;
}
