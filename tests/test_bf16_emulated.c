/* bf16 on the oneDNN kernels, native and emulated (src/kernels/dnnl/engine.c,
 * KILN_DN_BF16_EMULATED: operands rounded to bf16 values on fp32 kernels,
 * where oneDNN has no bf16 kernel, as on CPUs without AVX-512). Each kernel
 * (linear, matmul, conv2d, bmm through a strided view) runs forward and both
 * backward directions in every mode it can be made in here and is checked
 * against the double reference fed the same bf16-rounded operands; the
 * emulated mode must be made on every CPU, and must differ from fp32 by the
 * rounding (so a rounding that did nothing fails). */
#include <math.h>
#include <stdlib.h>
#include "kernels/internal/dnnl_ops.h"
#include "kernels/internal/kernels.h"
#include "kiln/alloc.h"
#include "kiln/tensor.h"
#include "testutil.h"

static const char *const mode_names[3] = {"fp32", "bf16", "emulated bf16"};

static float *fdraw(int64_t n) {
    float *x = kiln_alloc((size_t)n * sizeof(float));
    tu_fill(x, n, -1, 1);
    return x;
}

static float *fzero(int64_t n) { return kiln_calloc((size_t)n * sizeof(float)); }

/* double copies of x, rounded to bf16 or not */
static double *dcopy(const float *x, int64_t n, int round) {
    double *d = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) d[i] = round ? kiln_bf16_to_f32(kiln_f32_to_bf16(x[i])) : x[i];
    return d;
}

/* one output against the reference on rounded operands (tight) and on unrounded ones (must be off by the rounding) */
static void expect(const char *what, int mode, const float *got, const double *ref_lo, const double *ref_hi, int64_t n) {
    double e = tu_err(got, ref_lo, n, 1e-5, 1e-5);
    CHECK_MSG(e <= 1, "%s (%s): off the rounded-operand reference by %.3g of its tolerance", what, mode_names[mode], e);
    double d = tu_err(got, ref_hi, n, 1e-5, 1e-5);
    if (mode == KILN_DN_FP32) CHECK_MSG(d <= 1, "%s (fp32): off the fp32 reference by %.3g", what, d);
    else CHECK_MSG(d > 20, "%s (%s): within %.3g of fp32's reference: its operands were not rounded", what, mode_names[mode], d);
}

static void test_linear(int w_kn) {
    const int64_t n = 37, in = 70, out = 53;
    float *x = fdraw(n * in), *w = fdraw(in * out), *b = fdraw(out), *dy = fdraw(n * out);
    float *y = fzero(n * out), *dx = fzero(n * in), *dw = fzero(in * out), *db = fzero(out);
    for (int mode = 0; mode < 3; mode++) {
        int lo = mode != KILN_DN_FP32;
        double *X = dcopy(x, n * in, lo), *W = dcopy(w, in * out, lo), *B = dcopy(b, out, 0), *DY = dcopy(dy, n * out, lo);
        double *Xh = dcopy(x, n * in, 0), *Wh = dcopy(w, in * out, 0), *DYh = dcopy(dy, n * out, 0);
        double *ry[2], *rdx[2], *rdw[2], *rdb[2];
        for (int k = 0; k < 2; k++) {
            const double *xx = k ? Xh : X, *ww = k ? Wh : W, *dd = k ? DYh : DY;
            ry[k] = malloc((size_t)(n * out) * 8), rdx[k] = malloc((size_t)(n * in) * 8);
            rdw[k] = malloc((size_t)(in * out) * 8), rdb[k] = calloc((size_t)out, 8);
            if (w_kn) {
                kiln_ref_matmul_fwd(n, in, out, xx, ww, B, ry[k]);
                kiln_ref_matmul_bwd_data(n, in, out, dd, ww, rdx[k], 0);
                kiln_ref_matmul_bwd_weight(n, in, out, xx, dd, rdw[k], 0);
                for (int64_t i = 0; i < n * out; i++) rdb[k][i % out] += dd[i];
            } else {
                kiln_ref_linear_fwd(n, in, out, xx, ww, B, ry[k]);
                kiln_ref_linear_bwd_data(n, in, out, dd, ww, rdx[k], 0);
                kiln_ref_linear_bwd_weight(n, in, out, xx, dd, rdw[k], rdb[k], 0);
            }
        }
        kiln_dnnl_linear *l = NULL;
        kiln_status st = kiln_dnnl_linear_new(n, in, out, w_kn, 1, 0, 1, 1, mode, 0, &l);
        if (mode == KILN_DN_BF16 && st != KILN_OK) {
            printf("%s: no native bf16 kernel on this CPU (%s): only emulated bf16 checked\n", w_kn ? "matmul" : "linear",
                   kiln_last_error());
        } else {
            CHECK_OK(st);
        }
        if (l) {
            size_t wsb = kiln_dnnl_linear_workspace(l);
            void *ws = kiln_alloc(wsb ? wsb : 64);
            CHECK_OK(kiln_dnnl_linear_fwd(l, x, w, b, y, ws));
            CHECK_OK(kiln_dnnl_linear_bwd_data(l, dy, w, dx, 0, ws));
            CHECK_OK(kiln_dnnl_linear_bwd_weight(l, x, dy, dw, db, 0, 0, ws));
            expect(w_kn ? "matmul y" : "linear y", mode, y, ry[0], ry[1], n * out);
            expect(w_kn ? "matmul dx" : "linear dx", mode, dx, rdx[0], rdx[1], n * in);
            expect(w_kn ? "matmul dw" : "linear dw", mode, dw, rdw[0], rdw[1], in * out);
            expect(w_kn ? "matmul db" : "linear db", mode, db, rdb[0], rdb[1], out);
            kiln_free(ws);
            kiln_dnnl_linear_free(l);
        }
        for (int k = 0; k < 2; k++) free(ry[k]), free(rdx[k]), free(rdw[k]), free(rdb[k]);
        free(X), free(W), free(B), free(DY), free(Xh), free(Wh), free(DYh);
    }
    kiln_free(x), kiln_free(w), kiln_free(b), kiln_free(dy);
    kiln_free(y), kiln_free(dx), kiln_free(dw), kiln_free(db);
}

static void test_conv(void) {
    kiln_conv_shape cs = {.n = 2, .c = 5, .h = 7, .w = 6, .k = 4, .r = 3, .s = 3, .stride = 1, .pad = 1, .dilation = 1, .groups = 1};
    kiln_conv_shape_infer(&cs);
    int64_t nx = cs.n * cs.c * cs.h * cs.w, nw = cs.k * cs.c * cs.r * cs.s, ny = cs.n * cs.k * cs.oh * cs.ow;
    float *x = fdraw(nx), *w = fdraw(nw), *b = fdraw(cs.k), *dy = fdraw(ny);
    float *y = fzero(ny), *dx = fzero(nx), *dw = fzero(nw), *db = fzero(cs.k);
    for (int mode = 0; mode < 3; mode++) {
        int lo = mode != KILN_DN_FP32;
        double *X[2] = {dcopy(x, nx, lo), dcopy(x, nx, 0)}, *W[2] = {dcopy(w, nw, lo), dcopy(w, nw, 0)};
        double *DY[2] = {dcopy(dy, ny, lo), dcopy(dy, ny, 0)}, *B = dcopy(b, cs.k, 0);
        double *ry[2], *rdx[2], *rdw[2], *rdb[2];
        for (int k = 0; k < 2; k++) {
            ry[k] = malloc((size_t)ny * 8), rdx[k] = malloc((size_t)nx * 8), rdw[k] = malloc((size_t)nw * 8);
            rdb[k] = malloc((size_t)cs.k * 8);
            kiln_ref_conv2d_fwd(&cs, X[k], W[k], B, ry[k]);
            kiln_ref_conv2d_bwd_data(&cs, DY[k], W[k], rdx[k], 0);
            kiln_ref_conv2d_bwd_weight(&cs, X[k], DY[k], rdw[k], rdb[k], 0);
        }
        kiln_dnnl_conv_opts o = {.has_bias = 1, .need_bwd_data = 1, .need_bwd_weight = 1, .bf16 = mode};
        kiln_dnnl_conv *c = NULL;
        kiln_status st = kiln_dnnl_conv_new(&cs, &o, &c);
        if (mode == KILN_DN_BF16 && st != KILN_OK) printf("conv2d: no native bf16 kernel on this CPU (%s)\n", kiln_last_error());
        else CHECK_OK(st);
        if (c) {
            size_t wsb = kiln_dnnl_conv_workspace(c);
            void *ws = kiln_alloc(wsb ? wsb : 64);
            CHECK_OK(kiln_dnnl_conv_fwd(c, x, w, b, y, ws));
            CHECK_OK(kiln_dnnl_conv_bwd_data(c, dy, w, dx, 0, ws));
            CHECK_OK(kiln_dnnl_conv_bwd_weight(c, x, dy, dw, db, 0, 0, ws));
            expect("conv2d y", mode, y, ry[0], ry[1], ny);
            expect("conv2d dx", mode, dx, rdx[0], rdx[1], nx);
            expect("conv2d dw", mode, dw, rdw[0], rdw[1], nw);
            /* the bias gradient sums dy as the primitive holds it: rounded in bf16 */
            expect("conv2d db", mode, db, rdb[0], rdb[1], cs.k);
            kiln_free(ws);
            kiln_dnnl_conv_free(c);
        }
        for (int k = 0; k < 2; k++) {
            free(ry[k]), free(rdx[k]), free(rdw[k]), free(rdb[k]);
            free(X[k]), free(W[k]), free(DY[k]);
        }
        free(B);
    }
    kiln_free(x), kiln_free(w), kiln_free(b), kiln_free(dy);
    kiln_free(y), kiln_free(dx), kiln_free(dw), kiln_free(db);
}

/* a [2, 3, m, k] read through a row stride with gaps (a slice of a wider tensor, as attention's q of qkv):
 * the rounding follows the reorder to a dense copy */
static void test_bmm(void) {
    const int64_t B0 = 2, B1 = 3, m = 5, k = 8, n = 6, lda = 3 * k;
    kiln_bmm_shape s = {.nbatch = 2, .batch = {B0, B1}, .m = m, .k = k, .n = n,
                        .a_stride = {B1 * m * lda, m * lda, lda, 1}, .b_stride = {B1 * k * n, k * n, n, 1}};
    int64_t na = B0 * B1 * m * lda, nb = B0 * B1 * k * n, ny = B0 * B1 * m * n;
    float *a = fdraw(na), *b = fdraw(nb), *dy = fdraw(ny), *y = fzero(ny), *da = fzero(na), *db = fzero(nb);
    for (int mode = 0; mode < 3; mode++) {
        int lo = mode != KILN_DN_FP32;
        double *A[2] = {dcopy(a, na, lo), dcopy(a, na, 0)}, *Bm[2] = {dcopy(b, nb, lo), dcopy(b, nb, 0)};
        double *DY[2] = {dcopy(dy, ny, lo), dcopy(dy, ny, 0)}, *ry[2], *rda[2], *rdb[2];
        for (int q = 0; q < 2; q++) {
            ry[q] = malloc((size_t)ny * 8), rda[q] = calloc((size_t)na, 8), rdb[q] = calloc((size_t)nb, 8);
            kiln_ref_bmm_fwd(&s, A[q], Bm[q], ry[q]);
            kiln_ref_bmm_bwd(&s, A[q], Bm[q], DY[q], rda[q], rdb[q], 0, 0);
        }
        kiln_dnnl_bmm *o = NULL;
        kiln_status st = kiln_dnnl_bmm_new(&s, 1, 1, 1, mode, &o);
        if (mode == KILN_DN_BF16 && st != KILN_OK) printf("bmm: no native bf16 kernel on this CPU (%s)\n", kiln_last_error());
        else CHECK_OK(st);
        if (o) {
            size_t wsb = kiln_dnnl_bmm_workspace(o);
            void *ws = kiln_alloc(wsb ? wsb : 64);
            CHECK_OK(kiln_dnnl_bmm_fwd(o, a, b, y, ws));
            CHECK_OK(kiln_dnnl_bmm_bwd(o, a, b, dy, da, db, 0, 0, ws));
            expect("bmm y", mode, y, ry[0], ry[1], ny);
            /* da is written only at a's elements (k of each row of lda): compare those */
            int64_t rows = B0 * B1 * m;
            float *got = fzero(rows * k);
            double *want[2] = {malloc((size_t)(rows * k) * 8), malloc((size_t)(rows * k) * 8)};
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < k; j++) {
                    got[r * k + j] = da[r * lda + j];
                    for (int q = 0; q < 2; q++) want[q][r * k + j] = rda[q][r * lda + j];
                }
            expect("bmm da", mode, got, want[0], want[1], rows * k);
            kiln_free(got), free(want[0]), free(want[1]);
            expect("bmm db", mode, db, rdb[0], rdb[1], nb);
            kiln_free(ws);
            kiln_dnnl_bmm_free(o);
        }
        for (int q = 0; q < 2; q++) free(A[q]), free(Bm[q]), free(DY[q]), free(ry[q]), free(rda[q]), free(rdb[q]);
    }
    kiln_free(a), kiln_free(b), kiln_free(dy), kiln_free(y), kiln_free(da), kiln_free(db);
}

int main(void) {
    tu_seed(20261128);
    test_linear(0);
    test_linear(1);
    test_conv();
    test_bmm();
    return tu_finish("test_bf16_emulated");
}
