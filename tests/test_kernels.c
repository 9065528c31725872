/* Kernel tests: every fast float kernel against its double reference (random
 * shapes and inputs, acc = 0 and 1), every reference backward against central
 * finite differences of a random linear functional of its forward, dropout's
 * mask statistics, and optimizer steps cpu vs ref. */
#include <omp.h>
#include "base/internal/rng.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"
#include "kiln/tensor.h"
#include "testutil.h"

/* ---------- helpers ---------- */

static double *dalloc(int64_t n) { double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p); if (!p) abort(); return p; }
static float *falloc(int64_t n) { float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p); if (!p) abort(); return p; }
static void f2d(const float *f, double *d, int64_t n) { for (int64_t i = 0; i < n; i++) d[i] = f[i]; }
static float *frand(int64_t n, double lo, double hi) { float *p = falloc(n); tu_fill(p, n, lo, hi); return p; }
static double *drand_(int64_t n, double lo, double hi) { double *p = dalloc(n); tu_fill_d(p, n, lo, hi); return p; }
static double *dof(const float *f, int64_t n) { double *d = dalloc(n); f2d(f, d, n); return d; }
/* magnitudes in [lo, hi] with random sign: away from zero (relu's kink) */
static void fill_away(double *x, int64_t n, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) x[i] = (tu_u64() & 1 ? 1 : -1) * tu_uniform(lo, hi);
}
/* distinct values spaced >= 4/n apart in [-2, 2): no ties in max pooling */
static void fill_distinct(double *x, int64_t n) {
    int64_t *perm = malloc((size_t)n * sizeof *perm);
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) { int64_t j = tu_int(0, i), t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
    for (int64_t i = 0; i < n; i++) x[i] = -2.0 + 4.0 * (double)perm[i] / (double)n;
    free(perm);
}
static void fill_targets(int32_t *t, int64_t rows, int64_t cols) { for (int64_t i = 0; i < rows; i++) t[i] = (int32_t)tu_int(0, cols - 1); }

#define ATOL 1e-5
#define RTOL 1e-5
#define CLOSE(got, ref, n, atol, rtol, ...)                                          \
    do {                                                                             \
        /* the 1e-30 floor makes atol = 0 mean "exact" without 0/0 */              \
        double e_ = tu_err((got), (ref), (n), (atol) + 1e-30, (rtol));               \
        CHECK_MSG(e_ <= 1.0, __VA_ARGS__);                                           \
        if (!(e_ <= 1.0)) fprintf(stderr, "  (scaled error %g)\n", e_);              \
    } while (0)

/* Checks acc semantics of a float kernel: dst prefilled with `pre` (random),
 * acc=1 must give pre + ref. Builds ref_acc = pre + ref in double. */
static double *plus(const float *pre, const double *ref, int64_t n) {
    double *r = dalloc(n);
    for (int64_t i = 0; i < n; i++) r[i] = (double)pre[i] + ref[i];
    return r;
}

/* ---------- finite differences ---------- */

typedef void (*fwd_fn)(void *ctx, double *y); /* forward reading inputs from ctx */

/* dL/dparam of L = sum c*y by central differences vs `analytic`; returns scaled error (<= 1 is good) */
static double fd_err(void *ctx, fwd_fn f, double *param, int64_t np, int64_t ny, const double *c,
                     const double *analytic) {
    const double eps = 1e-6;
    double *y = dalloc(ny), worst = 0;
    for (int64_t j = 0; j < np; j++) {
        double save = param[j], lp = 0, lm = 0;
        param[j] = save + eps;
        f(ctx, y);
        for (int64_t i = 0; i < ny; i++) lp += c[i] * y[i];
        param[j] = save - eps;
        f(ctx, y);
        for (int64_t i = 0; i < ny; i++) lm += c[i] * y[i];
        param[j] = save;
        double num = (lp - lm) / (2 * eps);
        double e = fabs(num - analytic[j]) / (1e-6 + 1e-5 * fabs(analytic[j]));
        if (!(e <= worst)) worst = e;
    }
    free(y);
    return worst;
}

/* acc=1 on a prefilled buffer must equal prefill + acc=0 result */
static int acc_ok(const double *pre, const double *acc_result, const double *plain, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (fabs(acc_result[i] - (pre[i] + plain[i])) > 1e-12 * (1 + fabs(plain[i]))) return 0;
    return 1;
}

/* ---------- conv2d (reference only: the fast path is oneDNN) ---------- */

typedef struct { kiln_conv_shape cs; double *x, *w, *b; } conv_ctx;
static void conv_f(void *p, double *y) { conv_ctx *c = p; kiln_ref_conv2d_fwd(&c->cs, c->x, c->w, c->b, y); }

static void test_conv(void) {
    /* shape inference */
    kiln_conv_shape s0 = {.n = 64, .c = 1, .h = 28, .w = 28, .k = 32, .r = 3, .s = 3, .stride = 1, .pad = 0};
    CHECK(kiln_conv_shape_infer(&s0) == 0 && s0.oh == 26 && s0.ow == 26);
    kiln_conv_shape s1 = {.n = 1, .c = 1, .h = 5, .w = 6, .k = 1, .r = 3, .s = 3, .stride = 2, .pad = 1};
    CHECK(kiln_conv_shape_infer(&s1) == 0 && s1.oh == 3 && s1.ow == 3);
    kiln_conv_shape s2 = {.n = 1, .c = 1, .h = 2, .w = 2, .k = 1, .r = 3, .s = 3, .stride = 1, .pad = 0};
    CHECK(kiln_conv_shape_infer(&s2) == -1);

    /* a hand-computed case: 1x1x3x3 input, 2x2 kernel of ones, bias 0.5 */
    kiln_conv_shape hs = {.n = 1, .c = 1, .h = 3, .w = 3, .k = 1, .r = 2, .s = 2, .stride = 1, .pad = 0};
    kiln_conv_shape_infer(&hs);
    double hx[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, hw[4] = {1, 1, 1, 1}, hb = 0.5, hy[4];
    kiln_ref_conv2d_fwd(&hs, hx, hw, &hb, hy);
    CHECK(hy[0] == 12.5 && hy[1] == 16.5 && hy[2] == 24.5 && hy[3] == 28.5);

    for (int draw = 0; draw < 8; draw++) {
        conv_ctx C = {0};
        kiln_conv_shape *cs = &C.cs;
        cs->n = tu_int(1, 2); cs->c = tu_int(1, 3); cs->h = tu_int(4, 7); cs->w = tu_int(4, 7);
        cs->k = tu_int(1, 3); cs->r = tu_int(1, 3); cs->s = tu_int(1, 3);
        cs->stride = 1 + (draw & 1); cs->pad = (draw >> 1) & 1;
        int bias = draw < 4 ? 1 : (draw & 2) == 0;
        CHECK(kiln_conv_shape_infer(cs) == 0);
        int64_t nx = cs->n * cs->c * cs->h * cs->w, nw = cs->k * cs->c * cs->r * cs->s, ny = cs->n * cs->k * cs->oh * cs->ow;
        C.x = drand_(nx, -2, 2); C.w = drand_(nw, -2, 2); C.b = bias ? drand_(cs->k, -2, 2) : NULL;
        double *c = drand_(ny, -2, 2), *dx = dalloc(nx), *dw = dalloc(nw), *db = dalloc(cs->k);
        kiln_ref_conv2d_bwd_data(cs, c, C.w, dx, 0);
        kiln_ref_conv2d_bwd_weight(cs, C.x, c, dw, bias ? db : NULL, 0);
        double e;
        e = fd_err(&C, conv_f, C.x, nx, ny, c, dx);
        CHECK_MSG(e <= 1, "conv dx draw %d err %g", draw, e);
        e = fd_err(&C, conv_f, C.w, nw, ny, c, dw);
        CHECK_MSG(e <= 1, "conv dw draw %d err %g", draw, e);
        if (bias) {
            e = fd_err(&C, conv_f, C.b, cs->k, ny, c, db);
            CHECK_MSG(e <= 1, "conv db draw %d err %g", draw, e);
        }
        /* acc = 1 adds */
        double *pre = drand_(nx + nw + cs->k, -2, 2), *a = dalloc(nx + nw + cs->k);
        memcpy(a, pre, (size_t)(nx + nw + cs->k) * sizeof *a);
        kiln_ref_conv2d_bwd_data(cs, c, C.w, a, 1);
        kiln_ref_conv2d_bwd_weight(cs, C.x, c, a + nx, bias ? a + nx + nw : NULL, 1);
        CHECK(acc_ok(pre, a, dx, nx));
        CHECK(acc_ok(pre + nx, a + nx, dw, nw));
        if (bias) CHECK(acc_ok(pre + nx + nw, a + nx + nw, db, cs->k));
        free(pre); free(a); free(C.x); free(C.w); free(C.b); free(c); free(dx); free(dw); free(db);
    }
}

/* ---------- linear ---------- */

typedef struct { int64_t n, in, out; double *x, *w, *b; } lin_ctx;
static void lin_f(void *p, double *y) { lin_ctx *c = p; kiln_ref_linear_fwd(c->n, c->in, c->out, c->x, c->w, c->b, y); }

static void test_linear(void) {
    for (int draw = 0; draw < 6; draw++) {
        lin_ctx L = {tu_int(1, 5), tu_int(1, 7), tu_int(1, 6), NULL, NULL, NULL};
        int bias = draw % 3 != 2;
        int64_t nx = L.n * L.in, nw = L.out * L.in, ny = L.n * L.out;
        L.x = drand_(nx, -2, 2); L.w = drand_(nw, -2, 2); L.b = bias ? drand_(L.out, -2, 2) : NULL;
        double *c = drand_(ny, -2, 2), *dx = dalloc(nx), *dw = dalloc(nw), *db = dalloc(L.out);
        kiln_ref_linear_bwd_data(L.n, L.in, L.out, c, L.w, dx, 0);
        kiln_ref_linear_bwd_weight(L.n, L.in, L.out, L.x, c, dw, bias ? db : NULL, 0);
        double e = fd_err(&L, lin_f, L.x, nx, ny, c, dx);
        CHECK_MSG(e <= 1, "linear dx err %g", e);
        e = fd_err(&L, lin_f, L.w, nw, ny, c, dw);
        CHECK_MSG(e <= 1, "linear dw err %g", e);
        if (bias) {
            e = fd_err(&L, lin_f, L.b, L.out, ny, c, db);
            CHECK_MSG(e <= 1, "linear db err %g", e);
        }
        double *pre = drand_(nx + nw + L.out, -2, 2), *a = dalloc(nx + nw + L.out);
        memcpy(a, pre, (size_t)(nx + nw + L.out) * sizeof *a);
        kiln_ref_linear_bwd_data(L.n, L.in, L.out, c, L.w, a, 1);
        kiln_ref_linear_bwd_weight(L.n, L.in, L.out, L.x, c, a + nx, bias ? a + nx + nw : NULL, 1);
        CHECK(acc_ok(pre, a, dx, nx));
        CHECK(acc_ok(pre + nx, a + nx, dw, nw));
        if (bias) CHECK(acc_ok(pre + nx + nw, a + nx + nw, db, L.out));
        free(pre); free(a); free(L.x); free(L.w); free(L.b); free(c); free(dx); free(dw); free(db);
    }
}

/* ---------- relu ---------- */

typedef struct { int64_t n; double *x; } un_ctx;
static void relu_f(void *p, double *y) { un_ctx *c = p; kiln_ref_relu_fwd(c->n, c->x, y); }

static void test_relu(void) {
    for (int draw = 0; draw < 4; draw++) {
        un_ctx U = {tu_int(1, 50), NULL};
        U.x = dalloc(U.n);
        fill_away(U.x, U.n, 0.1, 2);
        double *y = dalloc(U.n), *c = drand_(U.n, -2, 2), *dx = dalloc(U.n);
        kiln_ref_relu_fwd(U.n, U.x, y);
        kiln_ref_relu_bwd(U.n, y, c, dx, 0);
        double e = fd_err(&U, relu_f, U.x, U.n, U.n, c, dx);
        CHECK_MSG(e <= 1, "relu fd err %g", e);
        free(U.x); free(y); free(c); free(dx);
    }
    for (int draw = 0; draw < 5; draw++) {
        int64_t n = draw == 0 ? 100003 : tu_int(1, 5000);
        float *x = frand(n, -2, 2), *y = falloc(n), *dy = frand(n, -2, 2), *dx = frand(n, -2, 2), *pre = falloc(n);
        memcpy(pre, dx, (size_t)n * sizeof *pre);
        double *xd = dof(x, n), *yd = dalloc(n), *dyd = dof(dy, n), *dxd = dalloc(n);
        kiln_cpu_relu_fwd(n, x, y);
        kiln_ref_relu_fwd(n, xd, yd);
        CLOSE(y, yd, n, 0, 0, "relu fwd n=%lld", (long long)n);
        double *yfd = dof(y, n);
        kiln_ref_relu_bwd(n, yfd, dyd, dxd, 0);
        kiln_cpu_relu_bwd(n, y, dy, dx, 1);
        double *r = plus(pre, dxd, n);
        CLOSE(dx, r, n, ATOL, RTOL, "relu bwd acc=1");
        kiln_cpu_relu_bwd(n, y, dy, dx, 0);
        CLOSE(dx, dxd, n, 0, 0, "relu bwd acc=0");
        free(x); free(y); free(dy); free(dx); free(pre); free(xd); free(yd); free(dyd); free(dxd); free(yfd); free(r);
    }
}

/* ---------- max pool ---------- */

typedef struct { kiln_pool_shape ps; double *x; } pool_ctx;
static void pool_f(void *p, double *y) { pool_ctx *c = p; kiln_ref_max_pool2d_fwd(&c->ps, c->x, y); }

static void test_pool(void) {
    kiln_pool_shape s = {.n = 64, .c = 64, .h = 24, .w = 24, .k = 2, .stride = 2};
    CHECK(kiln_pool_shape_infer(&s) == 0 && s.oh == 12 && s.ow == 12);
    kiln_pool_shape s3 = {.n = 1, .c = 1, .h = 7, .w = 6, .k = 3, .stride = 2};
    CHECK(kiln_pool_shape_infer(&s3) == 0 && s3.oh == 3 && s3.ow == 2);
    kiln_pool_shape sb = {.n = 1, .c = 1, .h = 1, .w = 6, .k = 2, .stride = 2};
    CHECK(kiln_pool_shape_infer(&sb) == -1);

    /* ties: the first max in row-major window order takes the gradient */
    {
        kiln_pool_shape t = {.n = 1, .c = 1, .h = 2, .w = 2, .k = 2, .stride = 2};
        kiln_pool_shape_infer(&t);
        double x[4] = {1, 3, 3, 3}, dy = 1, dx[4];
        kiln_ref_max_pool2d_bwd(&t, x, &dy, dx, 0);
        CHECK(dx[0] == 0 && dx[1] == 1 && dx[2] == 0 && dx[3] == 0);
        float xf[4] = {1, 3, 3, 3}, dyf = 1, dxf[4];
        kiln_cpu_max_pool2d_bwd(&t, xf, &dyf, dxf, 0);
        CHECK(dxf[0] == 0 && dxf[1] == 1 && dxf[2] == 0 && dxf[3] == 0);
        kiln_pool_shape t3 = {.n = 1, .c = 1, .h = 3, .w = 3, .k = 3, .stride = 1};
        kiln_pool_shape_infer(&t3);
        float x3[9] = {0, 1, 0, 5, 2, 5, 5, 0, 0}, d3[9];
        kiln_cpu_max_pool2d_bwd(&t3, x3, &dyf, d3, 0);
        CHECK(d3[3] == 1 && d3[5] == 0 && d3[6] == 0);
    }

    for (int draw = 0; draw < 6; draw++) {
        pool_ctx P = {0};
        P.ps.n = tu_int(1, 2); P.ps.c = tu_int(1, 3); P.ps.h = tu_int(3, 7); P.ps.w = tu_int(3, 7);
        P.ps.k = tu_int(1, 3); P.ps.stride = tu_int(1, 3);
        if (draw < 2) P.ps.k = P.ps.stride = 2;
        CHECK(kiln_pool_shape_infer(&P.ps) == 0);
        int64_t nx = P.ps.n * P.ps.c * P.ps.h * P.ps.w, ny = P.ps.n * P.ps.c * P.ps.oh * P.ps.ow;
        P.x = dalloc(nx);
        fill_distinct(P.x, nx);
        double *c = drand_(ny, -2, 2), *dx = dalloc(nx);
        kiln_ref_max_pool2d_bwd(&P.ps, P.x, c, dx, 0);
        double e = fd_err(&P, pool_f, P.x, nx, ny, c, dx);
        CHECK_MSG(e <= 1, "pool fd k=%lld s=%lld err %g", (long long)P.ps.k, (long long)P.ps.stride, e);
        free(P.x); free(c); free(dx);
    }

    /* cpu vs ref: the main model's shape, odd sizes, general windows */
    for (int draw = 0; draw < 8; draw++) {
        kiln_pool_shape ps = {0};
        if (draw == 0) ps = (kiln_pool_shape){.n = 64, .c = 64, .h = 24, .w = 24, .k = 2, .stride = 2};
        else {
            ps.n = tu_int(1, 4); ps.c = tu_int(1, 40); ps.h = tu_int(2, 33); ps.w = tu_int(2, 33);
            ps.k = draw < 4 ? 2 : tu_int(1, 2); ps.stride = draw < 4 ? 2 : tu_int(1, 3);
        }
        CHECK(kiln_pool_shape_infer(&ps) == 0);
        int64_t nx = ps.n * ps.c * ps.h * ps.w, ny = ps.n * ps.c * ps.oh * ps.ow;
        /* coarse values so that ties occur and the tie rule is exercised */
        float *x = falloc(nx);
        for (int64_t i = 0; i < nx; i++) x[i] = (float)tu_int(-4, 4) * 0.5f;
        float *y = falloc(ny), *dy = frand(ny, -2, 2), *dx = frand(nx, -2, 2), *pre = falloc(nx);
        memcpy(pre, dx, (size_t)nx * sizeof *pre);
        double *xd = dof(x, nx), *yd = dalloc(ny), *dyd = dof(dy, ny), *dxd = dalloc(nx);
        kiln_cpu_max_pool2d_fwd(&ps, x, y);
        kiln_ref_max_pool2d_fwd(&ps, xd, yd);
        CLOSE(y, yd, ny, 0, 0, "pool fwd draw %d", draw);
        kiln_ref_max_pool2d_bwd(&ps, xd, dyd, dxd, 0);
        kiln_cpu_max_pool2d_bwd(&ps, x, dy, dx, 1);
        double *r = plus(pre, dxd, nx);
        CLOSE(dx, r, nx, ATOL, RTOL, "pool bwd acc=1 draw %d", draw);
        kiln_cpu_max_pool2d_bwd(&ps, x, dy, dx, 0);
        CLOSE(dx, dxd, nx, ATOL, RTOL, "pool bwd acc=0 draw %d", draw);
        free(x); free(y); free(dy); free(dx); free(pre); free(xd); free(yd); free(dyd); free(dxd); free(r);
    }
}

/* ---------- dropout ---------- */

typedef struct { int64_t n; float p; uint64_t key, ctr; double *x; } drop_ctx;
static void drop_f(void *v, double *y) { drop_ctx *c = v; kiln_ref_dropout_fwd(c->n, c->p, c->key, c->ctr, c->x, y); }

static void test_dropout(void) {
    for (int draw = 0; draw < 3; draw++) {
        drop_ctx D = {tu_int(1, 40), 0.5f, tu_u64(), tu_u64(), NULL};
        D.x = drand_(D.n, -2, 2);
        double *c = drand_(D.n, -2, 2), *dx = dalloc(D.n);
        kiln_ref_dropout_bwd(D.n, D.p, D.key, D.ctr, c, dx, 0);
        double e = fd_err(&D, drop_f, D.x, D.n, D.n, c, dx);
        CHECK_MSG(e <= 1, "dropout fd err %g", e);
        free(D.x); free(c); free(dx);
    }

    /* statistics, fwd/bwd agreement and counter dependence on a large tensor */
    const int64_t n = 1 << 20;
    const float ps_[3] = {0.1f, 0.5f, 0.75f};
    float *ones = falloc(n), *y = falloc(n), *g = falloc(n), *y2 = falloc(n);
    for (int64_t i = 0; i < n; i++) ones[i] = 1.0f;
    for (int k = 0; k < 3; k++) {
        float p = ps_[k];
        uint64_t key = kiln_rng_key(7, 1, 2);
        kiln_cpu_dropout_fwd(n, p, key, 42, ones, y);
        kiln_cpu_dropout_bwd(n, p, key, 42, ones, g, 0);
        int64_t kept = 0, same = 1, scaled = 1;
        for (int64_t i = 0; i < n; i++) {
            kept += y[i] != 0;
            same &= (y[i] != 0) == (g[i] != 0);
            scaled &= y[i] == 0 || fabsf(y[i] - 1.0f / (1.0f - p)) < 1e-6f;
        }
        double frac = (double)kept / (double)n;
        CHECK_MSG(fabs(frac - (1 - p)) < 0.005, "dropout p=%g keep fraction %g", p, frac);
        CHECK(same);
        CHECK(scaled);
        kiln_cpu_dropout_fwd(n, p, key, 43, ones, y2);
        int64_t differ = 0;
        for (int64_t i = 0; i < n; i++) differ += (y[i] != 0) != (y2[i] != 0);
        /* independent masks disagree on a fraction 2p(1-p) */
        CHECK_MSG(fabs((double)differ / n - 2 * p * (1 - p)) < 0.01, "dropout counters differ %g", (double)differ / n);
    }
    /* p == 0 copies, p == 1 zeros */
    float *x = frand(1001, -2, 2);
    kiln_cpu_dropout_fwd(1001, 0.0f, 1, 1, x, y);
    CHECK(memcmp(x, y, 1001 * sizeof *x) == 0);
    kiln_cpu_dropout_fwd(1001, 1.0f, 1, 1, x, y);
    int zeros = 1;
    for (int i = 0; i < 1001; i++) zeros &= y[i] == 0.0f;
    CHECK(zeros);
    double xd1[5] = {1, 2, 3, 4, 5}, yd1[5];
    kiln_ref_dropout_fwd(5, 1.0f, 1, 1, xd1, yd1);
    CHECK(yd1[0] == 0 && yd1[4] == 0);
    kiln_ref_dropout_fwd(5, 0.0f, 1, 1, xd1, yd1);
    CHECK(yd1[0] == 1 && yd1[4] == 5);
    free(x);

    /* the threshold boundary is exact: a word that float represents exactly
     * (low 8 bits zero, so p = w / 2^32 exactly and threshold == w) is kept */
    {
        uint64_t key = kiln_rng_key(3, 4, 5), ctr = 9;
        int found = 0;
        for (int64_t i = 0; i < 40000 && found < 4; i++) {
            uint32_t w = kiln_philox4x32(key, ctr, (uint64_t)i / 4).v[i % 4];
            if ((w & 0xff) != 0 || w < (1u << 24)) continue;
            float p = (float)((double)w / 4294967296.0);
            CHECK(kiln_dropout_threshold(p) == w);
            int64_t m = i + 1;
            float *xs = falloc(m), *ys = falloc(m);
            for (int64_t j = 0; j < m; j++) xs[j] = 1.0f;
            kiln_cpu_dropout_fwd(m, p, key, ctr, xs, ys);
            CHECK_MSG(ys[i] != 0.0f, "dropout boundary word kept (cpu)");
            double *xd = dalloc(m), *yd = dalloc(m);
            for (int64_t j = 0; j < m; j++) xd[j] = 1.0;
            kiln_ref_dropout_fwd(m, p, key, ctr, xd, yd);
            CHECK_MSG(yd[i] != 0.0, "dropout boundary word kept (ref)");
            free(xs); free(ys); free(xd); free(yd);
            found++;
        }
        CHECK(found == 4);
    }

    /* cpu vs ref, including lengths that are not a multiple of 4 */
    for (int draw = 0; draw < 6; draw++) {
        int64_t m = draw == 0 ? 300001 : tu_int(1, 3000);
        float p = draw == 5 ? 0.0f : (float)tu_uniform(0.05, 0.95);
        uint64_t key = tu_u64(), ctr = tu_u64();
        float *xs = frand(m, -2, 2), *dx = frand(m, -2, 2), *pre = falloc(m);
        memcpy(pre, dx, (size_t)m * sizeof *pre);
        double *xd = dof(xs, m), *yd = dalloc(m);
        kiln_ref_dropout_fwd(m, p, key, ctr, xd, yd);
        kiln_cpu_dropout_fwd(m, p, key, ctr, xs, y);
        CLOSE(y, yd, m, 0, 1e-6, "dropout fwd m=%lld p=%g", (long long)m, p);
        kiln_cpu_dropout_bwd(m, p, key, ctr, xs, dx, 1);
        double *r = plus(pre, yd, m);
        CLOSE(dx, r, m, ATOL, RTOL, "dropout bwd acc=1");
        kiln_cpu_dropout_bwd(m, p, key, ctr, xs, dx, 0);
        CLOSE(dx, yd, m, 0, 1e-6, "dropout bwd acc=0");
        kiln_ref_dropout_bwd(m, p, key, ctr, xd, yd, 0);
        CLOSE(dx, yd, m, 0, 1e-6, "dropout ref bwd");
        free(xs); free(dx); free(pre); free(xd); free(yd); free(r);
    }
    free(ones); free(y); free(g); free(y2);
}

/* ---------- log_softmax and losses ---------- */

typedef struct { int64_t rows, cols; double *x; int32_t *t; } row_ctx;
static void lsm_f(void *p, double *y) { row_ctx *c = p; kiln_ref_log_softmax_fwd(c->rows, c->cols, c->x, y); }
static void nll_f(void *p, double *y) { row_ctx *c = p; kiln_ref_nll_loss_fwd(c->rows, c->cols, c->x, c->t, y); }
static void ce_f(void *p, double *y) { row_ctx *c = p; kiln_ref_cross_entropy_fwd(c->rows, c->cols, c->x, c->t, y); }

static void test_softmax_losses(void) {
    for (int draw = 0; draw < 4; draw++) {
        row_ctx R = {tu_int(1, 6), tu_int(1, 9), NULL, NULL};
        int64_t n = R.rows * R.cols;
        R.x = drand_(n, -3, 3);
        R.t = malloc((size_t)R.rows * sizeof *R.t);
        fill_targets(R.t, R.rows, R.cols);
        double *y = dalloc(n), *c = drand_(n, -2, 2), *dx = dalloc(n), dl = tu_uniform(0.5, 2), e;
        kiln_ref_log_softmax_fwd(R.rows, R.cols, R.x, y);
        kiln_ref_log_softmax_bwd(R.rows, R.cols, y, c, dx, 0);
        e = fd_err(&R, lsm_f, R.x, n, n, c, dx);
        CHECK_MSG(e <= 1, "log_softmax fd err %g", e);
        kiln_ref_nll_loss_bwd(R.rows, R.cols, R.t, &dl, dx, 0);
        e = fd_err(&R, nll_f, R.x, n, 1, &dl, dx);
        CHECK_MSG(e <= 1, "nll fd err %g", e);
        kiln_ref_cross_entropy_bwd(R.rows, R.cols, R.x, R.t, &dl, dx, 0);
        e = fd_err(&R, ce_f, R.x, n, 1, &dl, dx);
        CHECK_MSG(e <= 1, "cross entropy fd err %g", e);
        /* cross entropy == nll(log_softmax) */
        double l1, l2;
        kiln_ref_cross_entropy_fwd(R.rows, R.cols, R.x, R.t, &l1);
        kiln_ref_nll_loss_fwd(R.rows, R.cols, y, R.t, &l2);
        CHECK(fabs(l1 - l2) < 1e-12 * (1 + fabs(l1)));
        free(R.x); free(R.t); free(y); free(c); free(dx);
    }
    for (int draw = 0; draw < 6; draw++) {
        int64_t rows = draw == 0 ? 4096 : tu_int(1, 70), cols = draw == 0 ? 10 : tu_int(1, 40), n = rows * cols;
        float *x = frand(n, -5, 5), *y = falloc(n), *dy = frand(n, -2, 2), *dx = frand(n, -2, 2), *pre = falloc(n);
        int32_t *t = malloc((size_t)rows * sizeof *t);
        fill_targets(t, rows, cols);
        memcpy(pre, dx, (size_t)n * sizeof *pre);
        double *xd = dof(x, n), *yd = dalloc(n), *dyd = dof(dy, n), *dxd = dalloc(n), *r;
        kiln_cpu_log_softmax_fwd(rows, cols, x, y);
        kiln_ref_log_softmax_fwd(rows, cols, xd, yd);
        CLOSE(y, yd, n, 1e-5, 1e-5, "log_softmax fwd");
        double *yfd = dof(y, n);
        kiln_ref_log_softmax_bwd(rows, cols, yfd, dyd, dxd, 0);
        kiln_cpu_log_softmax_bwd(rows, cols, y, dy, dx, 1);
        r = plus(pre, dxd, n);
        CLOSE(dx, r, n, 1e-5, 1e-5, "log_softmax bwd acc=1");
        free(r);
        kiln_cpu_log_softmax_bwd(rows, cols, y, dy, dx, 0);
        CLOSE(dx, dxd, n, 1e-5, 1e-5, "log_softmax bwd acc=0");

        float lf, dlf = (float)tu_uniform(0.5, 2);
        double ld, dld = dlf;
        kiln_cpu_nll_loss_fwd(rows, cols, y, t, &lf);
        kiln_ref_nll_loss_fwd(rows, cols, yfd, t, &ld);
        CLOSE(&lf, &ld, 1, 1e-6, 1e-6, "nll fwd");
        memcpy(dx, pre, (size_t)n * sizeof *dx);
        kiln_ref_nll_loss_bwd(rows, cols, t, &dld, dxd, 0);
        kiln_cpu_nll_loss_bwd(rows, cols, t, &dlf, dx, 1);
        r = plus(pre, dxd, n);
        CLOSE(dx, r, n, 1e-6, 1e-6, "nll bwd acc=1");
        free(r);
        kiln_cpu_nll_loss_bwd(rows, cols, t, &dlf, dx, 0);
        CLOSE(dx, dxd, n, 1e-7, 1e-6, "nll bwd acc=0");

        kiln_cpu_cross_entropy_fwd(rows, cols, x, t, &lf);
        kiln_ref_cross_entropy_fwd(rows, cols, xd, t, &ld);
        CLOSE(&lf, &ld, 1, 1e-6, 1e-5, "cross entropy fwd rows=%lld", (long long)rows);
        memcpy(dx, pre, (size_t)n * sizeof *dx);
        kiln_ref_cross_entropy_bwd(rows, cols, xd, t, &dld, dxd, 0);
        kiln_cpu_cross_entropy_bwd(rows, cols, x, t, &dlf, dx, 1);
        r = plus(pre, dxd, n);
        CLOSE(dx, r, n, 1e-6, 1e-5, "cross entropy bwd acc=1");
        free(r);
        kiln_cpu_cross_entropy_bwd(rows, cols, x, t, &dlf, dx, 0);
        CLOSE(dx, dxd, n, 1e-7, 1e-5, "cross entropy bwd acc=0");
        free(x); free(y); free(dy); free(dx); free(pre); free(t); free(xd); free(yd); free(dyd); free(dxd); free(yfd);
    }
}

/* ---------- pointwise ---------- */

typedef struct { int64_t n; double *a, *b; } bin_ctx;
static void add_f(void *p, double *y) { bin_ctx *c = p; kiln_ref_add_fwd(c->n, c->a, c->b, y); }
static void mul_f(void *p, double *y) { bin_ctx *c = p; kiln_ref_mul_fwd(c->n, c->a, c->b, y); }

/* erf's piecewise polynomial (src/kernels/cpu/pointwise_math.h; on AVX2 CPUs
 * without AVX-512 its 4-piece form) keeps the bound its header states: within
 * 7e-8 of libm's erf on a dense grid over [-5, 5] (every piece, the joins
 * between pieces, at 0.5, 1.5 and 2.5 on AVX2, and the clamps at 3.9375 and 4),
 * odd, relative accuracy near 0 kept, and +-1 beyond the clamp. The GELU
 * chain's tests allow 1e-5, which a far worse erf would pass. */
static void test_erf_bound(void) {
    int64_t n = 1 << 20;
    float *x = falloc(n + 8), *y = falloc(n + 8);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(-5.0 + 10.0 * (double)i / (double)n);
    const float special[8] = {0.0f, 1e-30f, -3e-6f, 0.0625f, 3.9375f, -3.9374998f, 1e30f, -INFINITY};
    memcpy(x + n, special, sizeof special);
    kiln_cpu_erf(n + 8, x, y);
    double e = 0, rel = 0;
    for (int64_t i = 0; i < n + 8; i++) {
        e = fmax(e, fabs(y[i] - erf(x[i])));
        if (x[i] != 0 && fabs(x[i]) < 1e-3) rel = fmax(rel, fabs(y[i] / erf(x[i]) - 1));
    }
    CHECK_MSG(e <= 7e-8, "erf off by %.3g (bound 7e-8)", e);
    CHECK_MSG(rel <= 1e-6, "erf near 0 off by %.3g relative", rel);
    CHECK_MSG(y[n] == 0.0f && y[n + 1] > 0.0f && y[n + 2] < 0.0f && y[n + 6] == 1.0f && y[n + 7] == -1.0f,
              "erf(0) %a erf(1e-30) %a erf(-3e-6) %a erf(1e30) %a erf(-inf) %a", y[n], y[n + 1], y[n + 2], y[n + 6],
              y[n + 7]);
    free(x), free(y);
}

/* tanh (pointwise_math.h: a Taylor polynomial below 0.55, 1 - 2 / (exp(2|x|) + 1) above) within 1.2e-7 of
 * libm's on a dense grid over [-12, 12], both branches and the clamp at 9, relative accuracy near 0 kept */
static void test_tanh_bound(void) {
    int64_t n = 1 << 21;
    float *x = falloc(n), *y = falloc(n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(-12.0 + 24.0 * (double)i / (double)n);
    kiln_cpu_tanh(n, x, y);
    double e = 0, rel = 0;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs(y[i] - tanh(x[i])));
        if (x[i] != 0 && fabs(x[i]) < 0.5) rel = fmax(rel, fabs(y[i] / tanh(x[i]) - 1));
    }
    CHECK_MSG(e <= 1.2e-7, "tanh off by %.3g (bound 1.2e-7)", e);
    CHECK_MSG(rel <= 2e-7, "tanh near 0 off by %.3g relative", rel);
    free(x), free(y);
}

static void test_pointwise(void) {
    for (int draw = 0; draw < 3; draw++) {
        bin_ctx B = {tu_int(1, 30), NULL, NULL};
        B.a = drand_(B.n, -2, 2); B.b = drand_(B.n, -2, 2);
        double *c = drand_(B.n, -2, 2), *d = dalloc(B.n), e;
        kiln_ref_grad_copy(B.n, c, d, 0); /* add's backward, both inputs */
        e = fd_err(&B, add_f, B.a, B.n, B.n, c, d);
        CHECK_MSG(e <= 1, "add da err %g", e);
        e = fd_err(&B, add_f, B.b, B.n, B.n, c, d);
        CHECK_MSG(e <= 1, "add db err %g", e);
        kiln_ref_mul_bwd(B.n, c, B.b, d, 0);
        e = fd_err(&B, mul_f, B.a, B.n, B.n, c, d);
        CHECK_MSG(e <= 1, "mul da err %g", e);
        kiln_ref_mul_bwd(B.n, c, B.a, d, 0);
        e = fd_err(&B, mul_f, B.b, B.n, B.n, c, d);
        CHECK_MSG(e <= 1, "mul db err %g", e);
        double *pre = drand_(B.n, -2, 2), *a = dalloc(B.n);
        memcpy(a, pre, (size_t)B.n * sizeof *a);
        kiln_ref_mul_bwd(B.n, c, B.a, a, 1);
        CHECK(acc_ok(pre, a, d, B.n));
        memcpy(a, pre, (size_t)B.n * sizeof *a);
        kiln_ref_grad_copy(B.n, c, a, 1);
        CHECK(acc_ok(pre, a, c, B.n));
        free(B.a); free(B.b); free(c); free(d); free(pre); free(a);
    }
    for (int draw = 0; draw < 4; draw++) {
        int64_t n = draw == 0 ? 100001 : tu_int(1, 5000);
        float *a = frand(n, -2, 2), *b = frand(n, -2, 2), *y = falloc(n), *d = frand(n, -2, 2), *pre = falloc(n);
        memcpy(pre, d, (size_t)n * sizeof *pre);
        double *ad = dof(a, n), *bd = dof(b, n), *yd = dalloc(n), *r;
        kiln_cpu_add_fwd(n, a, b, y);
        kiln_ref_add_fwd(n, ad, bd, yd);
        CLOSE(y, yd, n, 0, 1e-7, "add fwd");
        kiln_cpu_mul_fwd(n, a, b, y);
        kiln_ref_mul_fwd(n, ad, bd, yd);
        CLOSE(y, yd, n, 0, 1e-7, "mul fwd");
        kiln_ref_mul_bwd(n, ad, bd, yd, 0);
        kiln_cpu_mul_bwd(n, a, b, d, 1);
        r = plus(pre, yd, n);
        CLOSE(d, r, n, 1e-6, 1e-6, "mul bwd acc=1");
        free(r);
        kiln_cpu_mul_bwd(n, a, b, d, 0);
        CLOSE(d, yd, n, 0, 1e-7, "mul bwd acc=0");
        memcpy(d, pre, (size_t)n * sizeof *d);
        kiln_ref_grad_copy(n, ad, yd, 0);
        kiln_cpu_grad_copy(n, a, d, 1);
        r = plus(pre, yd, n);
        CLOSE(d, r, n, 1e-6, 1e-6, "grad_copy acc=1");
        free(r);
        kiln_cpu_grad_copy(n, a, d, 0);
        CLOSE(d, yd, n, 0, 0, "grad_copy acc=0");
        free(a); free(b); free(y); free(d); free(pre); free(ad); free(bd); free(yd);
    }
}

/* ---------- bias gradients ---------- */

static void test_bias_grad(void) {
    for (int draw = 0; draw < 5; draw++) {
        /* rows: linear's bias grad is the reference linear db (x is a dummy with in = 1) */
        int64_t rows = draw == 0 ? 700 : tu_int(1, 100), cols = draw == 0 ? 130 : tu_int(1, 200);
        float *dy = frand(rows * cols, -2, 2), *db = frand(cols, -2, 2), *pre = falloc(cols);
        memcpy(pre, db, (size_t)cols * sizeof *pre);
        double *dyd = dof(dy, rows * cols), *x = drand_(rows, -1, 1), *dw = dalloc(cols), *dbd = dalloc(cols), *r;
        kiln_ref_linear_bwd_weight(rows, 1, cols, x, dyd, dw, dbd, 0);
        kiln_cpu_bias_grad_rows(rows, cols, dy, db, 1);
        r = plus(pre, dbd, cols);
        CLOSE(db, r, cols, 1e-5, 1e-6, "bias_grad_rows acc=1");
        free(r);
        kiln_cpu_bias_grad_rows(rows, cols, dy, db, 0);
        CLOSE(db, dbd, cols, 1e-5, 1e-6, "bias_grad_rows acc=0");
        free(dy); free(db); free(pre); free(dyd); free(x); free(dw); free(dbd);

        /* nchw: conv's bias grad via a 1x1 conv with one input channel */
        kiln_conv_shape cs = {.n = tu_int(1, 6), .c = 1, .h = tu_int(1, 30), .w = tu_int(1, 30), .k = tu_int(1, 40),
                              .r = 1, .s = 1, .stride = 1, .pad = 0};
        if (draw == 0) { cs.n = 64; cs.k = 32; cs.h = cs.w = 26; }
        kiln_conv_shape_infer(&cs);
        int64_t hw = cs.h * cs.w, ny = cs.n * cs.k * hw;
        dy = frand(ny, -2, 2); db = frand(cs.k, -2, 2); pre = falloc(cs.k);
        memcpy(pre, db, (size_t)cs.k * sizeof *pre);
        dyd = dof(dy, ny); x = drand_(cs.n * hw, -1, 1); dw = dalloc(cs.k); dbd = dalloc(cs.k);
        kiln_ref_conv2d_bwd_weight(&cs, x, dyd, dw, dbd, 0);
        kiln_cpu_bias_grad_nchw(cs.n, cs.k, hw, dy, db, 1);
        r = plus(pre, dbd, cs.k);
        CLOSE(db, r, cs.k, 1e-4, 1e-6, "bias_grad_nchw acc=1");
        free(r);
        kiln_cpu_bias_grad_nchw(cs.n, cs.k, hw, dy, db, 0);
        CLOSE(db, dbd, cs.k, 1e-4, 1e-6, "bias_grad_nchw acc=0");
        free(dy); free(db); free(pre); free(dyd); free(x); free(dw); free(dbd);
    }
}

/* ---------- determinism across runs and thread counts ---------- */

static void test_determinism(void) {
    int64_t rows = 4096, cols = 130, n = rows * cols;
    float *x = frand(n, -3, 3), a[130], b[130], la, lb;
    int32_t *t = malloc((size_t)rows * sizeof *t);
    fill_targets(t, rows, cols);
    int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    kiln_cpu_bias_grad_rows(rows, cols, x, a, 0);
    kiln_cpu_cross_entropy_fwd(rows, cols, x, t, &la);
    for (int rep = 0; rep < 2; rep++) {
        omp_set_num_threads(rep + 1);
        kiln_cpu_bias_grad_rows(rows, cols, x, b, 0);
        kiln_cpu_cross_entropy_fwd(rows, cols, x, t, &lb);
        CHECK(memcmp(a, b, sizeof a) == 0);
        CHECK(memcmp(&la, &lb, sizeof la) == 0);
        kiln_cpu_bias_grad_nchw(64, 65, 64, x, b, 0);
        kiln_cpu_bias_grad_nchw(64, 65, 64, x, a + 65, 0);
        CHECK(memcmp(a + 65, b, 65 * sizeof *a) == 0);
        kiln_cpu_bias_grad_rows(rows, cols, x, a, 0);
    }
    omp_set_num_threads(saved);
    free(x); free(t);
}

/* ---------- gradient norm ---------- */

static void test_norm(void) {
    const int64_t sizes[4] = {1, 1000, 16385, 16384 * 300 + 17}; /* one chunk, many, more than one group */
    int saved = omp_get_max_threads();
    for (int t = 0; t < 4; t++) {
        int64_t n = sizes[t];
        float *x = frand(n, -2, 2);
        double *xd = dof(x, n);
        double ref = kiln_ref_sumsq(n, xd);
        omp_set_num_threads(2);
        double got2 = kiln_cpu_sumsq(n, x);
        omp_set_num_threads(1);
        double got1 = kiln_cpu_sumsq(n, x);
        CHECK_MSG(fabs(got2 - ref) <= 1e-12 * ref, "sumsq n=%lld: %.17g vs %.17g", (long long)n, got2, ref);
        CHECK_MSG(memcmp(&got1, &got2, sizeof got1) == 0, "sumsq n=%lld depends on the thread count", (long long)n);
        omp_set_num_threads(saved);
        kiln_cpu_scale(n, x, 0.375f);
        kiln_ref_scale(n, xd, 0.375);
        CHECK(tu_err(x, xd, n, 1e-7, 1e-7) <= 1);
        free(x);
        free(xd);
    }
}

/* ---------- optimizers ---------- */

static void test_optim(void) {
    /* first AdamW step is p*(1-lr*wd) - lr*g/(|g|+eps) (bias correction makes m^ = g, v^ = g^2) */
    {
        double p = 0.7, g = -0.3, m = 0, v = 0;
        kiln_ref_adamw(1, &p, &g, &m, &v, 0.01, 0.9, 0.999, 1e-8, 0.1, 1);
        double want = 0.7 * (1 - 0.01 * 0.1) - 0.01 * g / (fabs(g) + 1e-8);
        CHECK_MSG(fabs(p - want) < 1e-12, "adamw first step %.17g vs %.17g", p, want);
        /* first SGD momentum step: buffer = g (no dampening), p -= lr*g */
        double q = 1.0, gq = 0.5, buf = 123;
        kiln_ref_sgd(1, &q, &gq, &buf, 0.1, 0.9, 0.5, 0.0, 0, 1);
        CHECK(buf == 0.5 && fabs(q - 0.95) < 1e-15);
        kiln_ref_sgd(1, &q, &gq, &buf, 0.1, 0.9, 0.5, 0.0, 0, 0);
        CHECK(fabs(buf - (0.9 * 0.5 + 0.5 * 0.5)) < 1e-15 && fabs(q - (0.95 - 0.1 * 0.7)) < 1e-15);
        /* first Adadelta step: delta = sqrt(eps)/sqrt((1-rho)g^2+eps)*g */
        double r = 1.0, gr = 2.0, sa = 0, ad = 0;
        kiln_ref_adadelta(1, &r, &gr, &sa, &ad, 1.0, 0.9, 1e-6, 0.0);
        double delta = sqrt(1e-6) / sqrt(0.1 * 4 + 1e-6) * 2;
        CHECK(fabs(r - (1 - delta)) < 1e-15 && fabs(ad - 0.1 * delta * delta) < 1e-18);
    }

    for (int cfg = 0; cfg < 9; cfg++) {
        int64_t n = cfg == 0 ? 100003 : tu_int(1, 3000);
        float *p = frand(n, -1, 1), *s1 = falloc(n), *s2 = falloc(n), *g = falloc(n);
        double *pd = dof(p, n), *d1 = dalloc(n), *d2 = dalloc(n), *gd = dalloc(n);
        memset(s1, 0, (size_t)n * sizeof *s1); memset(s2, 0, (size_t)n * sizeof *s2);
        memset(d1, 0, (size_t)n * sizeof *d1); memset(d2, 0, (size_t)n * sizeof *d2);
        for (int step = 1; step <= 5; step++) {
            tu_fill(g, n, -1, 1);
            f2d(g, gd, n);
            switch (cfg) {
            case 0: case 1: /* AdamW */
                kiln_cpu_adamw(n, p, g, s1, s2, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step);
                kiln_ref_adamw(n, pd, gd, d1, d2, (double)1e-3f, (double)0.9f, (double)0.999f, (double)1e-8f,
                               (double)0.01f, step);
                break;
            case 2: case 3: /* Adadelta with and without weight decay */
                kiln_cpu_adadelta(n, p, g, s1, s2, 1.0f, 0.9f, 1e-6f, cfg == 3 ? 0.01f : 0.0f);
                kiln_ref_adadelta(n, pd, gd, d1, d2, 1.0, (double)0.9f, (double)1e-6f, cfg == 3 ? (double)0.01f : 0.0);
                break;
            default: { /* SGD: plain, momentum, dampening, nesterov, weight decay */
                float mom = cfg == 4 ? 0.0f : 0.9f, damp = cfg == 6 ? 0.25f : 0.0f, wd = cfg == 8 ? 0.05f : 0.0f;
                int nest = cfg == 7 || cfg == 8;
                kiln_cpu_sgd(n, p, g, mom == 0 ? NULL : s1, 0.1f, mom, damp, wd, nest, step == 1);
                kiln_ref_sgd(n, pd, gd, mom == 0 ? NULL : d1, (double)0.1f, mom, damp, wd, nest, step == 1);
            }
            }
        }
        CLOSE(p, pd, n, 1e-6, 1e-5, "optimizer cfg %d params", cfg);
        if (cfg != 4) CLOSE(s1, d1, n, 1e-6, 1e-5, "optimizer cfg %d state 1", cfg);
        if (cfg < 4) CLOSE(s2, d2, n, 1e-9, 1e-5, "optimizer cfg %d state 2", cfg);
        free(p); free(s1); free(s2); free(g); free(pd); free(d1); free(d2); free(gd);
    }
}

/* LAMB, LARS, NovoGrad over 3 tensors (many chunks, a 1-d one without decay):
 * float vs the double twin after 5 steps, and the same bits at 1, 2 and 3 threads */
static void layerwise_run(int kind, int threads, int64_t n, const int64_t *seg, const float *p0, const float *gs,
                          float *p, float *s1, float *s2, double *pd, double *d1, double *d2) {
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    memcpy(p, p0, (size_t)n * sizeof *p);
    memset(s1, 0, (size_t)n * sizeof *s1), memset(s2, 0, (size_t)n * sizeof *s2);
    if (pd) f2d(p0, pd, n), memset(d1, 0, (size_t)n * sizeof *d1), memset(d2, 0, (size_t)n * sizeof *d2);
    double fn[6], rn[6], *gd = dalloc(n);
    for (int step = 1; step <= 5; step++) {
        const float *g = gs + (step - 1) * n;
        kiln_layerwise_args a = {3, seg, kind == 1 ? 0.5 : 1e-2, 0.9, 0.99, 1e-6, 0.05, 0.9, 0.02, step, 0, 0, 0};
        f2d(g, gd, n);
        for (int phase = 0; phase < 2; phase++) {
            int rc = kind == 0 ? kiln_cpu_lamb(&a, phase, p, g, s1, s2, fn)
                   : kind == 1 ? kiln_cpu_lars(&a, phase, p, g, s1, fn)
                               : kiln_cpu_novograd(&a, phase, p, g, s1, s2, fn);
            CHECK(rc == 0);
            if (!pd) continue;
            if (kind == 0) kiln_ref_lamb(&a, phase, pd, gd, d1, d2, rn);
            else if (kind == 1) kiln_ref_lars(&a, phase, pd, gd, d1, rn);
            else kiln_ref_novograd(&a, phase, pd, gd, d1, d2, rn);
        }
    }
    free(gd);
    omp_set_num_threads(saved);
}

static void test_layerwise(void) {
    const int64_t seg[9] = {0, 70001, 1, 70016, 300, 0, 70400, 40000, 1}; /* offsets, numel, decays; padding between */
    const int64_t n = 110400;
    float *p0 = frand(n, -1, 1), *gs = frand(5 * n, -1, 1), *p[3], *s1[3], *s2[3];
    double *pd = dalloc(n), *d1 = dalloc(n), *d2 = dalloc(n);
    for (int t = 0; t < 3; t++) p[t] = falloc(n), s1[t] = falloc(n), s2[t] = falloc(n);
    for (int kind = 0; kind < 3; kind++) {
        const char *name = kind == 0 ? "lamb" : kind == 1 ? "lars" : "novograd";
        for (int t = 0; t < 3; t++)
            layerwise_run(kind, t + 1, n, seg, p0, gs, p[t], s1[t], s2[t], t ? NULL : pd, d1, d2);
        CLOSE(p[0], pd, n, 1e-6, 1e-5, "%s params", name);
        CLOSE(s1[0], d1, n, 1e-6, 1e-5, "%s state 1", name);
        CHECK_MSG(kind == 1 || fabs(s2[0][1] - d2[1]) <= 1e-5 * fabs(d2[1]), "%s state 2", name);
        CHECK_MSG(fabs(p[0][70001] - p0[70001]) == 0, "%s: padding between tensors changed", name);
        for (int t = 1; t < 3; t++)
            CHECK_MSG(memcmp(p[t], p[0], (size_t)n * sizeof *p[0]) == 0 && memcmp(s1[t], s1[0], (size_t)n * sizeof *s1[0]) == 0,
                      "%s: %d threads give other bits than 1", name, t + 1);
    }
    for (int t = 0; t < 3; t++) free(p[t]), free(s1[t]), free(s2[t]);
    free(p0), free(gs), free(pd), free(d1), free(d2);
}

/* nChw<B>c <-> NCHW for the layout-aware max-pool, written out plainly (the kernels' own reorder is under test too) */
static int64_t blk_at(int B, int64_t i, int64_t c, int64_t ch, int64_t hw, int64_t p) {
    return ((i * (c / B) + ch / B) * hw + p) * B + ch % B;
}

static void to_blocked(int B, const float *x, float *b, int64_t n, int64_t c, int64_t hw) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t p = 0; p < hw; p++) b[blk_at(B, i, c, ch, hw, p)] = x[(i * c + ch) * hw + p];
}

static void from_blocked(int B, const float *b, float *x, int64_t n, int64_t c, int64_t hw) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t p = 0; p < hw; p++) x[(i * c + ch) * hw + p] = b[blk_at(B, i, c, ch, hw, p)];
}

/* kiln's Winograd F(4x4, 3x3) (winograd_avx2.c) against the double reference: forward with bias, relu and
 * the residual sum (acc), and backward-data as the same kernel on flipped filters, written and accumulated;
 * sizes the 4x4 tiles do not divide, pad 0-2, channel counts with an odd number of 8-channel blocks (the
 * product's 8-wide tail), more tiles than one thread's block. Error relative to the output's scale, as
 * for fp32 Winograd (oneDNN's included) the transforms' constants cost a few bits */
/* the forward with each output channel's filters scaled as read (a batch norm folded in: fold_scale.c): the same
 * bits as the filters multiplied first, kiln_cpu_bn_fold's way */
static void wino_scaled(const kiln_wino_shape *s, const float *xb, const float *w, const float *b, int relu, void *wk,
                        const char *what) {
    int64_t per = s->c * 9, nw = s->k * per, ny = s->n * s->k * s->oh * s->ow;
    float *sc = falloc(s->k), *wsc = falloc(nw), *y1 = falloc(ny), *y2 = falloc(ny);
    /* scales in (-2, 2) off the shared stream, whose draws the cases after this one keep */
    for (int64_t o = 0; o < s->k; o++) sc[o] = (float)((o * 2654435761u) % 4001) / 1000.0f - 2.0005f;
    for (int64_t i = 0; i < nw; i++) wsc[i] = w[i] * sc[i / per];
    kiln_cpu_wino_conv(s, xb, wsc, 0, b, relu, 0, y1, wk);
    kiln_wino_shape scaled = *s;
    scaled.scale = sc;
    kiln_cpu_wino_conv(&scaled, xb, w, 0, b, relu, 0, y2, wk);
    CHECK_MSG(!memcmp(y1, y2, (size_t)ny * sizeof(float)), "%s: scaled filters differ from filters scaled first", what);
    free(sc), free(wsc), free(y1), free(y2);
}

static void wino_case(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t pad, int bias, int relu, int acc) {
    kiln_conv_shape cs = {.n = n, .c = c, .h = h, .w = w, .k = k, .r = 3, .s = 3, .stride = 1, .pad = pad};
    CHECK(kiln_conv_shape_infer(&cs) == 0);
    int64_t nx = n * c * h * w, ny = n * k * cs.oh * cs.ow, nw = k * c * 9;
    double *xd = drand_(nx, -1, 1), *wd = drand_(nw, -0.5, 0.5), *bd = drand_(k, -1, 1), *yd = dalloc(ny), *dyd = drand_(ny, -1, 1);
    double *dxd = dalloc(nx);
    float *x = falloc(nx), *wf = falloc(nw), *b = falloc(k), *xb = falloc(nx), *y = falloc(ny), *yb = falloc(ny), *pre = frand(ny, -1, 1);
    float *dy = falloc(ny), *dyb = falloc(ny), *dx = falloc(nx), *dxb = falloc(nx), *pre_x = frand(nx, -1, 1);
    for (int64_t i = 0; i < nx; i++) x[i] = (float)xd[i], xd[i] = x[i];
    for (int64_t i = 0; i < nw; i++) wf[i] = (float)wd[i], wd[i] = wf[i];
    for (int64_t i = 0; i < k; i++) b[i] = (float)bd[i], bd[i] = b[i];
    for (int64_t i = 0; i < ny; i++) dy[i] = (float)dyd[i], dyd[i] = dy[i];
    kiln_ref_conv2d_fwd(&cs, xd, wd, bias ? bd : NULL, yd);
    double scale = 0;
    for (int64_t i = 0; i < ny; i++) {
        if (acc) yd[i] += pre[i];
        if (relu && yd[i] < 0) yd[i] = 0;
        scale = fmax(scale, fabs(yd[i]));
    }
    kiln_wino_shape ws = {n, c, h, w, k, cs.oh, cs.ow, pad, 0, NULL, 0};
    CHECK(kiln_cpu_wino_supported(&ws));
    float *wk = kiln_alloc(kiln_cpu_wino_workspace(&ws));
    kiln_cpu_reorder_nchw(n, c, h * w, 8, 0, x, xb, 0);
    kiln_cpu_reorder_nchw(n, k, cs.oh * cs.ow, 8, 0, pre, yb, 0);
    kiln_cpu_wino_conv(&ws, xb, wf, 0, bias ? b : NULL, relu, acc, yb, wk);
    kiln_cpu_reorder_nchw(n, k, cs.oh * cs.ow, 8, 1, yb, y, 0);
    char what[128];
    snprintf(what, sizeof what, "winograd %lldx%lldx%lldx%lld -> %lld pad %lld bias %d relu %d acc %d", (long long)n, (long long)c,
             (long long)h, (long long)w, (long long)k, (long long)pad, bias, relu, acc);
    CLOSE(y, yd, ny, 1e-5 * scale, 0, "%s: forward", what);
    wino_scaled(&ws, xb, wf, bias ? b : NULL, relu, wk, what);
    if (!acc) { /* streaming stores (training plans): the same bits */
        kiln_wino_shape st = ws;
        st.stream = 1;
        float *ys = kiln_alloc((size_t)ny * sizeof(float)); /* aligned: streaming takes whole 32-byte vectors */
        kiln_cpu_wino_conv(&st, xb, wf, 0, bias ? b : NULL, relu, 0, ys, wk);
        CHECK_MSG(!memcmp(ys, yb, (size_t)ny * sizeof(float)), "%s: streamed stores differ", what);
        kiln_free(ys);
    }
    /* backward-data: dy through the flipped filters, the pad that undoes the forward's */
    kiln_ref_conv2d_bwd_data(&cs, dyd, wd, dxd, 0);
    double sx = 0;
    for (int64_t i = 0; i < nx; i++) sx = fmax(sx, fabs(dxd[i] += acc ? pre_x[i] : 0));
    kiln_wino_shape bs = {n, k, cs.oh, cs.ow, c, h, w, 2 - pad, 1, NULL, 0}; /* a team of one: the workspace for one thread */
    float *wk2 = kiln_alloc(kiln_cpu_wino_workspace(&bs));
    CHECK(kiln_cpu_wino_supported(&bs));
    kiln_cpu_reorder_nchw(n, k, cs.oh * cs.ow, 8, 0, dy, dyb, 0);
    kiln_cpu_reorder_nchw(n, c, h * w, 8, 0, pre_x, dxb, 0);
    kiln_cpu_wino_conv(&bs, dyb, wf, 1, NULL, 0, acc, dxb, wk2);
    kiln_cpu_reorder_nchw(n, c, h * w, 8, 1, dxb, dx, 0);
    CLOSE(dx, dxd, nx, 1e-5 * sx, 0, "%s: backward-data", what);
    /* backward-weights: written, then accumulated on top */
    double *dwd = dalloc(nw), sw = 0;
    kiln_ref_conv2d_bwd_weight(&cs, xd, dyd, dwd, NULL, 0);
    for (int64_t i = 0; i < nw; i++) sw = fmax(sw, fabs(dwd[i]));
    float *dw = frand(nw, -1, 1), *wk3 = kiln_alloc(kiln_cpu_wino_bwd_weight_workspace(&ws));
    kiln_cpu_wino_bwd_weight(&ws, xb, dyb, dw, 0, wk3);
    CLOSE(dw, dwd, nw, 1e-5 * sw, 0, "%s: backward-weights", what);
    if (c * k > 64 * 64) { /* past 64 x 64 one thread makes each sum, in tile order: the same bits on a team of one */
        kiln_wino_shape one = ws;
        one.threads = 1;
        float *dw1 = falloc(nw), *wk4 = kiln_alloc(kiln_cpu_wino_bwd_weight_workspace(&one));
        kiln_cpu_wino_bwd_weight(&one, xb, dyb, dw1, 0, wk4);
        CHECK(!memcmp(dw1, dw, (size_t)nw * sizeof(float)));
        free(dw1), kiln_free(wk4);
    }
    for (int64_t i = 0; i < nw; i++) dwd[i] *= 2;
    kiln_cpu_wino_bwd_weight(&ws, xb, dyb, dw, 1, wk3);
    CLOSE(dw, dwd, nw, 2e-5 * sw, 0, "%s: backward-weights accumulated", what);
    free(dwd), free(dw), kiln_free(wk3);
    free(xd), free(wd), free(bd), free(yd), free(dyd), free(dxd), free(x), free(wf), free(b), free(xb), free(y), free(yb);
    free(pre), free(dy), free(dyb), free(dx), free(dxb), free(pre_x);
    kiln_free(wk), kiln_free(wk2);
}

static void test_winograd(void) {
    kiln_wino_shape no = {1, 12, 8, 8, 8, 8, 8, 1, 0, NULL, 0}, stride2 = {1, 8, 8, 8, 8, 4, 4, 1, 0, NULL, 0};
    CHECK(!kiln_cpu_wino_supported(&no) && !kiln_cpu_wino_supported(&stride2)); /* 12 channels; not stride 1 */
    if (!kiln_cpu_has_avx2()) {
        printf("test_kernels: winograd skipped: the CPU has no AVX2\n");
        return;
    }
    wino_case(2, 16, 9, 7, 16, 1, 1, 0, 0);   /* the 4x4 tiles do not divide 9x7 */
    wino_case(3, 8, 11, 13, 24, 1, 0, 1, 1);  /* three output blocks: the 8-wide product tail; relu(conv + y) */
    wino_case(1, 24, 6, 6, 8, 0, 1, 1, 0);    /* pad 0: one tile of 4x4 */
    wino_case(2, 8, 5, 5, 16, 2, 0, 0, 1);    /* pad 2: 7x7 out; backward-data at pad 0 */
    wino_case(8, 16, 32, 32, 16, 1, 1, 1, 0); /* resnet20's first stage: 512 tiles, blocks over both threads */
    wino_case(4, 64, 8, 8, 64, 1, 0, 0, 1);   /* its last stage */
    /* past 64 x 64 channels backward-weights takes the tiles in chunks, its blocks of sums over threads */
    wino_case(2, 96, 9, 7, 48, 1, 0, 1, 0);   /* blocks enough for the team: their sums straight into dw */
    wino_case(2, 256, 6, 6, 24, 0, 1, 0, 1);  /* the same with an 8-wide block of outputs */
    wino_case(1, 72, 5, 6, 64, 2, 0, 0, 1);   /* pad 2 */
    kiln_cpu_wino_force_bw_chunk(7); /* chunks of 7 tiles: 6 of the 36 xi a block, the sums kept in dU, the last chunk partial */
    wino_case(2, 96, 9, 7, 48, 1, 0, 0, 1);
    kiln_cpu_wino_force_bw_chunk(0);
    /* forward and backward-data outputs first (resnet18's last stages: all tiles' V, then 16 outputs at a
     * time): more than one block of a thread's tiles, an 8-wide last block of outputs, edges, pad 0 and 2 */
    kiln_cpu_wino_force_fwd_path(2);
    wino_case(5, 16, 15, 14, 24, 1, 1, 1, 1);
    wino_case(2, 24, 6, 6, 40, 0, 1, 0, 0);
    wino_case(2, 8, 5, 5, 16, 2, 0, 1, 1);
    kiln_cpu_wino_force_fwd_path(0);
    wino_case(1, 256, 4, 4, 128, 1, 1, 1, 0); /* outputs first by size: U would be 4.5 MiB */
    kiln_cpu_wino_force_fwd_path(1);          /* and tiles first there */
    wino_case(1, 256, 4, 4, 128, 1, 1, 0, 1);
    kiln_cpu_wino_force_fwd_path(0);
}

/* aligned: 64-byte aligned nChw16c blocks take the AVX-512 path; misaligned ones (and nChw8c) the portable loops */
static void test_pool_layout(int aligned, int B) {
    /* 2x2/2 on even and odd sizes, a 3x3/2 window, and ResNet's stem pool (3x3/2 padded by 1); x and y
     * each plain or blocked; relu mask on and off */
    const int64_t cfg[4][4] = {{3, 32, 12, 12}, {2, 16, 9, 7}, {2, 32, 7, 7}, {2, 32, 10, 9}};
    for (int t = 0; t < 4; t++) {
        kiln_pool_shape ps = {cfg[t][0], cfg[t][1], cfg[t][2], cfg[t][3], t >= 2 ? 3 : 2, 2, 0, 0, t == 3};
        CHECK(kiln_pool_shape_infer(&ps) == 0);
        int64_t nx = ps.n * ps.c * ps.h * ps.w, ny = ps.n * ps.c * ps.oh * ps.ow, hw = ps.h * ps.w;
        double *xd = dalloc(nx), *dyd = drand_(ny, -1, 1), *yref = dalloc(ny), *dxref = dalloc(nx);
        fill_distinct(xd, nx);
        for (int64_t i = 0; i < nx; i++) xd[i] = xd[i] > 0 ? xd[i] : 0; /* a relu's output: many zero windows too */
        for (int64_t i = 0; i < nx; i += 7) xd[i] = xd[i] + 0.25; /* ... but not all */
        float *xb_mem = kiln_alloc((size_t)(nx + 16) * 4), *dx_mem = kiln_alloc((size_t)(nx + 16) * 4);
        float *xb = aligned ? xb_mem : xb_mem + 1, *dx = aligned ? dx_mem : dx_mem + 1;
        float *xf = falloc(nx), *dyf = falloc(ny), *y = falloc(ny), *dxp = falloc(nx);
        for (int64_t i = 0; i < nx; i++) xf[i] = (float)xd[i];
        for (int64_t i = 0; i < nx; i++) xd[i] = xf[i];
        for (int64_t i = 0; i < ny; i++) dyf[i] = (float)dyd[i];
        f2d(dyf, dyd, ny);
        to_blocked(B, xf, xb, ps.n, ps.c, hw);
        kiln_ref_max_pool2d_fwd(&ps, xd, yref);
        float *yb = falloc(ny), *dyb = falloc(ny);
        to_blocked(B, dyf, dyb, ps.n, ps.c, ps.oh * ps.ow);
        for (int lay = 0; lay < 4; lay++) {
            int blocked = lay % 2 ? B : 0, yblk = lay / 2 ? B : 0;
            kiln_cpu_max_pool2d_fwd_layout(&ps, blocked, yblk, blocked ? xb : xf, yblk ? yb : y);
            if (yblk) from_blocked(B, yb, y, ps.n, ps.c, ps.oh * ps.ow);
            CHECK_MSG(tu_err(y, yref, ny, 1e-30, 0) <= 0, "pool fwd layout x %d y %d cfg %d", blocked, yblk, t);
            for (int mask = 0; mask <= 1; mask++)
                for (int acc = 0; acc <= 1; acc++) {
                    if (mask) kiln_ref_max_pool2d_relu_bwd(&ps, xd, dyd, dxref, 0);
                    else kiln_ref_max_pool2d_bwd(&ps, xd, dyd, dxref, 0);
                    float *pre = frand(nx, -1, 1);
                    if (acc)
                        for (int64_t i = 0; i < nx; i++) dxref[i] += pre[i];
                    if (blocked) to_blocked(B, pre, dx, ps.n, ps.c, hw);
                    else memcpy(dx, pre, (size_t)nx * sizeof *dx);
                    kiln_cpu_max_pool2d_bwd_layout(&ps, blocked, yblk, mask, blocked ? xb : xf, yblk ? dyb : dyf, dx, acc);
                    if (blocked) from_blocked(B, dx, dxp, ps.n, ps.c, hw); /* back to NCHW to compare */
                    else memcpy(dxp, dx, (size_t)nx * sizeof *dxp);
                    CHECK_MSG(tu_err(dxp, dxref, nx, 1e-6, 1e-6) <= 1, "pool bwd layout x %d dy %d mask %d acc %d cfg %d", blocked,
                              yblk, mask, acc, t);
                    free(pre);
                }
        }
        free(xd); free(dyd); free(yref); free(dxref); free(xf); free(dyf); free(y); free(dxp); free(yb); free(dyb);
        kiln_free(xb_mem);
        kiln_free(dx_mem);
    }
}

/* ---------- transformer ops at the GPT's sizes: against the reference, and
 * the same bits on 1, 2 and 3 threads ---------- */

/* the float kernel's outputs at `threads`, into out[0..] (each n[k] floats) */
typedef void (*tf_run)(const void *ctx, float **out);

static void same_bits(const char *what, tf_run run, const void *ctx, int nout, const int64_t *n) {
    int saved = omp_get_max_threads();
    float *a[8], *b[8]; /* nout <= 8 */
    for (int k = 0; k < nout; k++) a[k] = falloc(n[k]), b[k] = falloc(n[k]);
    omp_set_num_threads(1);
    run(ctx, a);
    for (int t = 2; t <= 3; t++) {
        omp_set_num_threads(t);
        run(ctx, b);
        for (int k = 0; k < nout; k++)
            CHECK_MSG(!memcmp(a[k], b[k], (size_t)n[k] * 4), "%s: output %d differs on %d threads", what, k, t);
    }
    omp_set_num_threads(saved);
    for (int k = 0; k < nout; k++) free(a[k]), free(b[k]);
}

typedef struct {
    int64_t rows, C, V;
    const float *x, *dy, *w, *b, *mean, *rstd, *idf;
    const int32_t *idi;
    float *scratch;
} tf_ctx;

static void run_ln(const void *p, float **o) {
    const tf_ctx *c = p;
    kiln_cpu_layer_norm_fwd(c->rows, c->C, c->x, c->w, c->b, 1e-5f, o[0], o[1], o[2]);
    kiln_cpu_layer_norm_bwd(c->rows, c->C, c->x, c->dy, c->w, o[1], o[2], o[3], o[4], o[5], 0, 0, 0, c->scratch);
}

static void run_embedding(const void *p, float **o) {
    const tf_ctx *c = p;
    kiln_cpu_embedding_fwd(c->rows, c->C, c->idf, c->idi, c->w, o[0]);
    kiln_cpu_embedding_bwd(c->rows, c->V, c->C, c->idf, c->idi, c->dy, o[1], 0);
}

static void run_softmax_gelu(const void *p, float **o) {
    const tf_ctx *c = p;
    kiln_cpu_softmax_fwd(c->rows, c->C, c->x, o[0]);
    kiln_cpu_softmax_bwd(c->rows, c->C, o[0], c->dy, o[1], 0);
    kiln_cpu_gelu_fwd(c->rows * c->C, 1, c->x, o[2]);
    kiln_cpu_gelu_bwd(c->rows * c->C, 0, c->x, c->dy, o[3], 0);
}

static void test_layer_norm_gpt(void) {
    int64_t rows = 1024, C = 256, n = rows * C; /* [B=8, T=128, C=256] */
    float *x = frand(n, -2, 3), *dy = frand(n, -1, 1), *w = frand(C, 0.5, 1.5), *b = frand(C, -1, 1);
    float *o[6] = {falloc(n), falloc(rows), falloc(rows), falloc(n), falloc(C), falloc(C)};
    float *scratch = kiln_alloc(kiln_cpu_layer_norm_scratch(rows, C));
    tf_ctx c = {.rows = rows, .C = C, .x = x, .dy = dy, .w = w, .b = b, .scratch = scratch};
    run_ln(&c, o);
    double *xd = dof(x, n), *dyd = dof(dy, n), *wd = dof(w, C), *bd = dof(b, C);
    double *y = dalloc(n), *mean = dalloc(rows), *rstd = dalloc(rows), *dx = dalloc(n), *dw = dalloc(C), *db = dalloc(C);
    kiln_ref_layer_norm_fwd(rows, C, xd, wd, bd, 1e-5, y, mean, rstd);
    kiln_ref_layer_norm_bwd(rows, C, xd, dyd, wd, mean, rstd, dx, dw, db, 0, 0, 0);
    CLOSE(o[0], y, n, 1e-5, 1e-5, "layer_norm y");
    CLOSE(o[1], mean, rows, 1e-6, 1e-6, "layer_norm mean");
    CLOSE(o[2], rstd, rows, 1e-6, 1e-6, "layer_norm rstd");
    CLOSE(o[3], dx, n, 1e-5, 1e-5, "layer_norm dx");
    CLOSE(o[4], dw, C, 1e-4, 1e-5, "layer_norm dw");
    CLOSE(o[5], db, C, 1e-4, 1e-5, "layer_norm db");
    /* accumulating: dx, dw, db gain the same again */
    kiln_cpu_layer_norm_bwd(rows, C, x, dy, w, o[1], o[2], o[3], o[4], o[5], 1, 1, 1, scratch);
    for (int64_t i = 0; i < n; i++) dx[i] *= 2;
    for (int64_t i = 0; i < C; i++) dw[i] *= 2, db[i] *= 2;
    CLOSE(o[3], dx, n, 2e-5, 1e-5, "layer_norm dx acc");
    CLOSE(o[4], dw, C, 2e-4, 1e-5, "layer_norm dw acc");
    CLOSE(o[5], db, C, 2e-4, 1e-5, "layer_norm db acc");
    int64_t sizes[6] = {n, rows, rows, n, C, C};
    same_bits("layer_norm", run_ln, &c, 6, sizes);
    for (int k = 0; k < 6; k++) free(o[k]);
    free(x), free(dy), free(w), free(b), free(xd), free(dyd), free(wd), free(bd);
    free(y), free(mean), free(rstd), free(dx), free(dw), free(db);
    kiln_free(scratch);
}

/* batch norm's one-pass statistics and relu's backward folded into the norm's:
 * plain and nChw16c, 16 channels (images summed in chunks) and 128 (each group
 * whole), a tail of 37 pixels; x centred at 0, and far from 0 (mean / std near
 * 600) with the running mean (the sums' shift) at 0 and near the batch's mean.
 * The fused backward must give the bits of relu's backward on the forward's y
 * followed by the plain backward, and both the reference's figures */
static void bn_case(int blocked, int64_t c, double off, float shift) {
    const int64_t n = 4, hw = 37, nx = n * c * hw;
    double *xd = drand_(nx, off - 1, off + 2), *dyd = drand_(nx, -1, 1), *wd = drand_(c, -1.5, 1.5), *bd = drand_(c, -1, 1);
    double *rmd = dalloc(c), *rvd = dalloc(c), *y = dalloc(nx), *mean = dalloc(c), *is = dalloc(c);
    double *dx = dalloc(nx), *dw = dalloc(c), *db = dalloc(c);
    float *x = falloc(nx), *dy = falloc(nx), *w = falloc(c), *b = falloc(c), *rm = falloc(c), *rv = falloc(c);
    float *xb = falloc(nx), *dyb = falloc(nx), *yb = falloc(nx), *fy = falloc(nx), *fm = falloc(c), *fi = falloc(c);
    float *g1 = falloc(nx), *g2 = falloc(nx), *dx1 = falloc(nx), *dx2 = falloc(nx), *dw1 = falloc(c), *dw2 = falloc(c),
          *db1 = falloc(c), *db2 = falloc(c);
    for (int64_t i = 0; i < nx; i++) x[i] = (float)xd[i], xd[i] = x[i], dy[i] = (float)dyd[i], dyd[i] = dy[i];
    for (int64_t i = 0; i < c; i++) {
        w[i] = (float)wd[i], wd[i] = w[i], b[i] = (float)bd[i], bd[i] = b[i];
        rm[i] = shift, rmd[i] = shift, rv[i] = 1, rvd[i] = 1;
    }
    int blk = blocked ? blocked : 16;
    kiln_cpu_reorder_nchw(n, c, hw, blk, 0, x, xb, 0); /* the kernels' layout (a copy when plain) */
    kiln_cpu_reorder_nchw(n, c, hw, blk, 0, dy, dyb, 0);
    if (!blocked) memcpy(xb, x, (size_t)nx * 4), memcpy(dyb, dy, (size_t)nx * 4);
    CHECK(kiln_cpu_batch_norm_fwd(n, c, hw, blocked, xb, w, b, rm, rv, 0.1f, 1e-5f, 1, 1, yb, fm, fi, NULL, NULL) == 0);
    CHECK(kiln_ref_batch_norm_fwd(n, c, hw, xd, wd, bd, rmd, rvd, 0.1, 1e-5, 1, y, mean, is, NULL) == 0);
    kiln_ref_relu_fwd(nx, y, y);
    if (blocked) kiln_cpu_reorder_nchw(n, c, hw, blk, 1, yb, fy, 0);
    else memcpy(fy, yb, (size_t)nx * 4);
    char what[96];
    snprintf(what, sizeof what, "batch norm %s c=%lld x near %g, shift %g", blocked == 16 ? "nChw16c" : blocked ? "nChw8c" : "plain", (long long)c, off,
             (double)shift);
    CLOSE(fm, mean, c, 1e-6, 1e-6, "%s: mean", what);
    CLOSE(fi, is, c, 1e-6, 2e-6, "%s: invstd", what);
    CLOSE(rv, rvd, c, 1e-6, 2e-6, "%s: running variance", what);
    /* y = x * scale + shift in float: far from 0 its rounding, not the statistics, sets the error */
    CLOSE(fy, y, nx, off > 1 ? 2e-4 : 2e-5, 2e-5, "%s: relu(y)", what);
    /* relu's backward on the forward's y, then the norm's; and the fused kernel from dy */
    for (int64_t i = 0; i < nx; i++) g1[i] = yb[i] > 0 ? dyb[i] : 0;
    kiln_cpu_batch_norm_bwd(n, c, hw, blocked, xb, g1, w, fm, fi, dx1, dw1, db1, 0, 0, 0, NULL, NULL);
    kiln_cpu_batch_norm_relu_bwd(n, c, hw, blocked, xb, dyb, w, b, fm, fi, dx2, dw2, db2, 0, 0, 0, NULL, NULL);
    CHECK_MSG(!memcmp(dx1, dx2, (size_t)nx * 4) && !memcmp(dw1, dw2, (size_t)c * 4) && !memcmp(db1, db2, (size_t)c * 4),
              "%s: relu backward folded into the norm's differs from the two kernels", what);
    kiln_ref_batch_norm_relu_bwd(n, c, hw, xd, dyd, wd, bd, mean, is, dx, dw, db, 0, 0, 0, NULL);
    if (blocked) kiln_cpu_reorder_nchw(n, c, hw, blk, 1, dx2, g2, 0);
    else memcpy(g2, dx2, (size_t)nx * 4);
    /* far from 0 the float x - mean keeps fewer bits: the reference sees the same floats, the kernels round */
    double tol = off > 1 ? 2e-3 : 1e-4;
    CLOSE(g2, dx, nx, tol, tol, "%s: fused dx", what);
    CLOSE(dw2, dw, c, tol, tol, "%s: fused dw", what);
    CLOSE(db2, db, c, 1e-4, 1e-4, "%s: fused db", what);
    /* accumulating: the same again on top */
    kiln_cpu_batch_norm_relu_bwd(n, c, hw, blocked, xb, dyb, w, b, fm, fi, dx2, dw2, db2, 1, 1, 1, NULL, NULL);
    for (int64_t i = 0; i < c; i++) CHECK_MSG(dw2[i] == 2 * dw1[i] && db2[i] == 2 * db1[i], "%s: acc dw, db", what);
    free(xd), free(dyd), free(wd), free(bd), free(rmd), free(rvd), free(y), free(mean), free(is), free(dx), free(dw), free(db);
    free(x), free(dy), free(w), free(b), free(rm), free(rv), free(xb), free(dyb), free(yb), free(fy), free(fm), free(fi);
    free(g1), free(g2), free(dx1), free(dx2), free(dw1), free(dw2), free(db1), free(db2);
}

static void test_batch_norm(void) {
    for (int blocked = 0; blocked <= 16; blocked += 8)
        for (int64_t c = 16; c <= 128; c *= 8) {
            bn_case(blocked, c, 0, 0);
            bn_case(blocked, c, 500, 0);
            bn_case(blocked, c, 500, 500.4f);
        }
}

/* 1024 positions, skewed ids (half of them 0..3: text repeats a few tokens), C = 40 (not whole blocks of 16) */
static void test_embedding_gpt(void) {
    int64_t n = 1024, V = 256, C = 40;
    int32_t *ids = malloc((size_t)n * 4);
    float *idf = falloc(n), *w = frand(V * C, -1, 1), *dy = frand(n * C, -1, 1);
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)(i % 2 ? tu_int(0, 3) : tu_int(0, V - 1)), idf[i] = (float)ids[i];
    float *o[2] = {falloc(n * C), falloc(V * C)};
    tf_ctx c = {.rows = n, .C = C, .V = V, .w = w, .dy = dy, .idi = ids};
    run_embedding(&c, o);
    double *wd = dof(w, V * C), *dyd = dof(dy, n * C), *y = dalloc(n * C), *dw = dalloc(V * C);
    kiln_ref_embedding_fwd(n, C, NULL, ids, wd, y);
    kiln_ref_embedding_bwd(n, V, C, NULL, ids, dyd, dw, 0);
    CLOSE(o[0], y, n * C, 0, 0, "embedding y");
    CLOSE(o[1], dw, V * C, 1e-5, 1e-5, "embedding dw");
    int64_t sizes[2] = {n * C, V * C};
    same_bits("embedding (i32 ids)", run_embedding, &c, 2, sizes);
    c.idi = NULL, c.idf = idf;
    same_bits("embedding (f32 ids)", run_embedding, &c, 2, sizes);
    ids[5] = (int32_t)V, idf[7] = 2.5f;
    CHECK(kiln_cpu_embedding_check(n, NULL, ids, V) == 5 && kiln_cpu_embedding_check(n, idf, NULL, V) == 7);
    CHECK(kiln_ref_embedding_check(n, NULL, ids, V) == 5);
    free(ids), free(idf), free(w), free(dy), free(o[0]), free(o[1]), free(wd), free(dyd), free(y), free(dw);
}

/* softmax rows of the vocabulary (256) and GELU over [B, T, 4C], tails included */
static void test_softmax_gelu_gpt(void) {
    int64_t rows = 256, C = 1031, n = rows * C;
    float *x = frand(n, -9, 9), *dy = frand(n, -1, 1);
    float *o[4] = {falloc(n), falloc(n), falloc(n), falloc(n)};
    tf_ctx c = {.rows = rows, .C = C, .x = x, .dy = dy};
    run_softmax_gelu(&c, o);
    double *xd = dof(x, n), *dyd = dof(dy, n), *r[4] = {dalloc(n), dalloc(n), dalloc(n), dalloc(n)}, *yd = dof(o[0], n);
    kiln_ref_softmax_fwd(rows, C, xd, r[0]);
    kiln_ref_softmax_bwd(rows, C, yd, dyd, r[1], 0);
    kiln_ref_gelu_fwd(n, 1, xd, r[2]);
    kiln_ref_gelu_bwd(n, 0, xd, dyd, r[3], 0);
    CLOSE(o[0], r[0], n, 1e-7, 1e-5, "softmax y");
    CLOSE(o[1], r[1], n, 1e-7, 1e-5, "softmax dx");
    CLOSE(o[2], r[2], n, 1e-6, 1e-5, "gelu tanh y");
    CLOSE(o[3], r[3], n, 1e-6, 1e-5, "gelu erf dx");
    int64_t sizes[4] = {n, n, n, n};
    same_bits("softmax, gelu", run_softmax_gelu, &c, 4, sizes);
    for (int k = 0; k < 4; k++) free(o[k]), free(r[k]);
    free(x), free(dy), free(xd), free(dyd), free(yd);
}

int main(void) {
    tu_seed(20240611);
    test_pool_layout(1, 16);
    test_pool_layout(1, 8);
    test_pool_layout(0, 16);
    test_conv();
    test_linear();
    test_relu();
    test_pool();
    test_dropout();
    test_softmax_losses();
    test_pointwise();
    test_erf_bound();
    test_tanh_bound();
    test_bias_grad();
    test_determinism();
    test_optim();
    test_layerwise();
    test_norm();
    test_layer_norm_gpt();
    test_batch_norm();
    test_embedding_gpt();
    test_softmax_gelu_gpt();
    test_winograd(); /* last: the cases above keep their draws */
    return tu_finish("test_kernels");
}
