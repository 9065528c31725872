/* Tests against the PyTorch fixtures in tests/ref/fixtures (made by
 * tests/ref/make_fixtures.py; see tests/ref/README.md):
 *   - every op: the double reference kernels (to ~1e-10) and the fast float
 *     kernels, oneDNN's conv and linear included (to ~1e-5 of the largest value);
 *   - SGD, AdamW and Adadelta: ref and cpu kernels and the public kiln_optim API;
 *   - the golden mnist-cnn run: PyTorch's initial weights loaded from a file in
 *     PyTorch's own safetensors layout, 5 Adadelta steps with the fast plan
 *     (losses within 1e-4 relative) and with the double reference plan;
 *   - a checkpoint whose shapes do not match fails, naming the tensor, and
 *     leaves the parameters untouched.
 * Runs with the working directory tests/. */
#include <unistd.h>
#include "graph/internal/graph.h" /* kiln_params_has_grad_mut: the optimizer test has no plan */
#include "kernels/cpu/cpu_internal.h" /* kiln_cpu_attention_force */
#include "kernels/dnnl/internal/linear.h" /* the forms the linear autotuner chooses among */
#include "kernels/internal/dnnl_ops.h"
#include "kernels/internal/kernels.h"
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/safetensors.h"
#include "kiln/train.h"
#include "testutil.h"
#include "simt/simt_backend.h"

#define FX "ref/fixtures/"

#if defined(__SANITIZE_ADDRESS__)
#define KILN_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_SANITIZED 1
#endif
#endif
#ifndef KILN_SANITIZED
#define KILN_SANITIZED 0
#endif
#define TOL_D 1e-10 /* double kernels vs PyTorch float64 */
#define TOL_F 1e-5  /* float kernels vs PyTorch float64, relative to the largest magnitude */

/* ---------- fixture access ---------- */

static kiln_st_file *fx_open(const char *name) {
    char path[256];
    snprintf(path, sizeof path, FX "%s", name);
    kiln_st_file *f = NULL;
    kiln_status s = kiln_st_open(path, &f);
    CHECK_MSG(s == KILN_OK, "open %s: %s", path, kiln_last_error());
    return s == KILN_OK ? f : NULL;
}

static const kiln_tensor *fx_get(kiln_st_file *f, const char *name, kiln_dtype dt) {
    const kiln_tensor *t = kiln_st_find(f, name);
    CHECK_MSG(t && t->dtype == dt, "%s: tensor '%s' missing or not %s", kiln_st_path(f), name, kiln_dtype_name(dt));
    return t && t->dtype == dt ? t : NULL;
}

static const double *fx_d(kiln_st_file *f, const char *name) {
    const kiln_tensor *t = fx_get(f, name, KILN_F64);
    return t ? (const double *)t->data : NULL;
}

static int64_t fx_numel(kiln_st_file *f, const char *name) {
    const kiln_tensor *t = kiln_st_find(f, name);
    return t ? kiln_tensor_numel(t) : 0;
}

static double fx_meta(kiln_st_file *f, const char *key) {
    const char *v = kiln_st_meta(f, key);
    CHECK_MSG(v != NULL, "%s: metadata '%s' missing", kiln_st_path(f), key);
    return v ? strtod(v, NULL) : 0;
}

static double *dbuf(int64_t n) {
    double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    if (!p) abort();
    for (int64_t i = 0; i < n; i++) p[i] = 1e30; /* acc = 0 must overwrite */
    return p;
}
static float *fbuf(int64_t n) {
    float *p = kiln_alloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    if (!p) abort();
    for (int64_t i = 0; i < n; i++) p[i] = 1e30f;
    return p;
}
static float *fcopy(const double *d, int64_t n) {
    float *p = fbuf(n);
    for (int64_t i = 0; i < n; i++) p[i] = (float)d[i];
    return p;
}

/* max |got - ref| / max |ref| (absolute when ref is all zeros); NaN counts as huge */
static double err_d(const double *got, const double *ref, int64_t n) {
    double num = 0, den = 0;
    if (!ref) return INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - ref[i]);
        if (!(e <= num)) num = isnan(e) ? INFINITY : e;
        den = fmax(den, fabs(ref[i]));
    }
    return den > 0 ? num / den : num;
}
static double err_f(const float *got, const double *ref, int64_t n) {
    double num = 0, den = 0;
    if (!ref) return INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= num)) num = isnan(e) ? INFINITY : e;
        den = fmax(den, fabs(ref[i]));
    }
    return den > 0 ? num / den : num;
}

#define CMP_D(what, got, ref, n)                                                                   \
    do {                                                                                           \
        double e_ = err_d((got), (ref), (n));                                                     \
        CHECK_MSG(e_ <= TOL_D, "%s: ref %s off by %.3g (relative to max)", fxname, what, e_);      \
    } while (0)
#define CMP_F(what, got, ref, n)                                                                   \
    do {                                                                                           \
        double e_ = err_f((got), (ref), (n));                                                     \
        CHECK_MSG(e_ <= TOL_F, "%s: float %s off by %.3g (relative to max)", fxname, what, e_);    \
    } while (0)

/* ---------- ops ---------- */

/* the float backend checked beside ref: "cpu", then "simt" (the CUDA backend's kernels on the host,
 * tests/simt/backend.c) for the plan-based cases alone (simt_fixtures) */
static const char *fast = "cpu";
static int fast_only;

/* y = build(x) through the op table: the graph gets parameters x and dy and the
 * loss sum(y * dy), so dL/dx is PyTorch's dx; the ref plan (double) and the cpu
 * plan (float) against the fixture */
typedef kiln_value (*one_input_fn)(kiln_graph *g, kiln_value x, kiln_st_file *f);

static void run_plan(const char *fxname, kiln_st_file *f, kiln_graph *g, kiln_value loss, kiln_value y, const char *backend) {
    const kiln_tensor *tx = fx_get(f, "x", KILN_F64), *ty = fx_get(f, "y", KILN_F64), *tdy = fx_get(f, "dy", KILN_F64);
    const double *dx = fx_d(f, "dx");
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_params_new_on(g, backend, &P));
    if (!P || !tx || !ty || !tdy || !dx) goto out;
    int ref = !strcmp(backend, "ref");
    int64_t nx = kiln_tensor_numel(tx), ny = kiln_tensor_numel(ty), total = kiln_params_total(P);
    int ix = kiln_params_find(P, "x"), idy = kiln_params_find(P, "dy");
    double *pd = calloc((size_t)total + 1, sizeof *pd);
    memcpy(pd + kiln_params_offset(P, ix), tx->data, (size_t)nx * 8);
    memcpy(pd + kiln_params_offset(P, idy), tdy->data, (size_t)ny * 8);
    float *pf = fcopy(pd, total + 1);
    if (ref) memcpy(kiln_params_data(P), pd, (size_t)total * 8); /* exact double values */
    else CHECK_OK(kiln_params_write(P, pf));
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = tx->shape[0];
    o.backend = backend;
    o.autotune = 0;
    kiln_value outs[2] = {loss, y};
    CHECK_OK(kiln_compile(g, P, outs, 2, &o, &pl));
    if (!pl) goto done;
    CHECK_OK(kiln_plan_run(pl, tx->shape[0]));
    float *gy = fbuf(ny), *gg = fbuf(total + 1);
    CHECK_OK(kiln_plan_read(pl, y, gy, ny));
    CMP_F(ref ? "ref y" : "cpu y", gy, ty->data, ny);
    if (ref) {
        CMP_D("dx", (const double *)kiln_params_grad(P) + kiln_params_offset(P, ix), dx, nx);
    } else {
        CHECK_OK(kiln_params_grad_read(P, gg));
        CMP_F("dx", gg + kiln_params_offset(P, ix), dx, nx);
    }
    kiln_free(gy), kiln_free(gg);
done:
    free(pd);
    kiln_free(pf);
out:
    kiln_plan_free(pl);
    kiln_params_free(P);
}

static void test_one_input(const char *fxname, one_input_fn build) {
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    const kiln_tensor *tx = fx_get(f, "x", KILN_F64);
    if (!tx) goto out;
    for (int b = fast_only; b < 2; b++) {
        kiln_graph *g = kiln_graph_new();
        kiln_value x = kiln_param(g, "x", tx->ndim, tx->shape, 1);
        kiln_value y = build(g, x, f);
        int64_t ys[KILN_MAX_DIMS];
        int nd = kiln_value_shape(g, y, ys);
        kiln_value loss = kiln_sum(g, kiln_mul(g, y, kiln_param(g, "dy", nd < 0 ? 0 : nd, ys, 1)));
        CHECK_MSG(kiln_graph_status(g) == KILN_OK, "%s: %s", fxname, kiln_last_error());
        if (kiln_graph_status(g) == KILN_OK) run_plan(fxname, f, g, loss, y, b ? fast : "ref");
        kiln_graph_free(g);
    }
out:
    kiln_st_close(f);
}

static kiln_value build_avg_pool(kiln_graph *g, kiln_value x, kiln_st_file *f) {
    return kiln_avg_pool2d(g, x, (int64_t)fx_meta(f, "kernel"), (int64_t)fx_meta(f, "stride"), (int64_t)fx_meta(f, "pad"),
                           (int)fx_meta(f, "count_include_pad"));
}

static kiln_value build_max_pool(kiln_graph *g, kiln_value x, kiln_st_file *f) {
    return kiln_max_pool2d_ex(g, x, (int64_t)fx_meta(f, "kernel"), (int64_t)fx_meta(f, "stride"), (int64_t)fx_meta(f, "pad"));
}

static kiln_value build_adaptive(kiln_graph *g, kiln_value x, kiln_st_file *f) {
    return kiln_adaptive_avg_pool2d(g, x, (int64_t)fx_meta(f, "out_h"), (int64_t)fx_meta(f, "out_w"));
}

static kiln_value build_affine(kiln_graph *g, kiln_value x, kiln_st_file *f) {
    return kiln_affine(g, x, (float)fx_meta(f, "scale"), (float)fx_meta(f, "shift"));
}

static kiln_value build_erf(kiln_graph *g, kiln_value x, kiln_st_file *f) {
    return kiln_erf(g, kiln_scale(g, x, (float)fx_meta(f, "scale")));
}

static kiln_value build_tanh(kiln_graph *g, kiln_value x, kiln_st_file *f) {
    return kiln_tanh(g, kiln_scale(g, x, (float)fx_meta(f, "scale")));
}

/* the guide's five nodes: x * 0.5 * (1 + erf(x / 1.41421)); fused into one kernel on both backends */
static kiln_value build_gelu_chain(kiln_graph *g, kiln_value x, kiln_st_file *f) {
    kiln_value e = kiln_add_scalar(g, kiln_erf(g, kiln_scale(g, x, (float)fx_meta(f, "scale"))), 1.0f); /* 1 / 1.41421 */
    return kiln_mul(g, kiln_scale(g, x, 0.5f), e);
}

/* F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, pad // 2, pad - pad // 2)) */
static kiln_value build_shortcut(kiln_graph *g, kiln_value x, kiln_st_file *f) {
    int64_t s[4], pad = (int64_t)fx_meta(f, "pad");
    kiln_value_shape(g, x, s);
    kiln_value v = kiln_slice_step(g, kiln_slice_step(g, x, 2, 0, s[2], 2), 3, 0, s[3], 2);
    return kiln_pad(g, v, 1, pad / 2, pad - pad / 2);
}

/* the op itself (the shortcut pass makes it from the chain above), stride 3, channels padded 1 and 2 */
static kiln_value build_subsample_pad(kiln_graph *g, kiln_value x, kiln_st_file *f) {
    kiln_attrs a = {.subsample = {(int64_t)fx_meta(f, "stride"), (int64_t)fx_meta(f, "before"), (int64_t)fx_meta(f, "after")}};
    int n = kiln_graph_apply(g, KILN_OP_SUBSAMPLE_PAD, &x, 1, &a);
    return n < 0 ? -1 : g->nodes[n].out[0];
}

/* the same as the chain slice, slice, pad: what the pass rewrites in resnet20 */
static kiln_value build_subsample_chain(kiln_graph *g, kiln_value x, kiln_st_file *f) {
    int64_t s[4], st = (int64_t)fx_meta(f, "stride");
    kiln_value_shape(g, x, s);
    kiln_value v = kiln_slice_step(g, kiln_slice_step(g, x, 2, 0, s[2], st), 3, 0, s[3], st);
    return kiln_pad(g, v, 1, (int64_t)fx_meta(f, "before"), (int64_t)fx_meta(f, "after"));
}

static void test_conv2d(const char *fxname) {
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    const kiln_tensor *tx = fx_get(f, "x", KILN_F64), *tw = fx_get(f, "w", KILN_F64), *ty = fx_get(f, "y", KILN_F64);
    int has_bias = (int)fx_meta(f, "has_bias");
    if (!tx || !tw || !ty) goto out;
    kiln_conv_shape cs = {.n = tx->shape[0], .c = tx->shape[1], .h = tx->shape[2], .w = tx->shape[3],
                          .k = tw->shape[0], .r = tw->shape[2], .s = tw->shape[3],
                          .stride = (int64_t)fx_meta(f, "stride"), .pad = (int64_t)fx_meta(f, "pad"),
                          .dilation = (int64_t)fx_meta(f, "dilation"), .groups = (int64_t)fx_meta(f, "groups")};
    CHECK(kiln_conv_shape_infer(&cs) == 0);
    CHECK_MSG(cs.oh == ty->shape[2] && cs.ow == ty->shape[3], "%s: output %lldx%lld, PyTorch %lldx%lld", fxname,
              (long long)cs.oh, (long long)cs.ow, (long long)ty->shape[2], (long long)ty->shape[3]);
    if (cs.oh != ty->shape[2] || cs.ow != ty->shape[3]) goto out;
    const double *x = tx->data, *w = tw->data, *b = has_bias ? fx_d(f, "b") : NULL, *y = ty->data;
    const double *dy = fx_d(f, "dy"), *dx = fx_d(f, "dx"), *dw = fx_d(f, "dw"), *db = has_bias ? fx_d(f, "db") : NULL;
    if (!dy || !dx || !dw || (has_bias && (!b || !db))) goto out;
    int64_t nx = kiln_tensor_numel(tx), nw = kiln_tensor_numel(tw), ny = kiln_tensor_numel(ty), nb = cs.k;

    double *ry = dbuf(ny), *rdx = dbuf(nx), *rdw = dbuf(nw), *rdb = dbuf(nb);
    kiln_ref_conv2d_fwd(&cs, x, w, b, ry);
    kiln_ref_conv2d_bwd_data(&cs, dy, w, rdx, 0);
    kiln_ref_conv2d_bwd_weight(&cs, x, dy, rdw, has_bias ? rdb : NULL, 0);
    CMP_D("y", ry, y, ny);
    CMP_D("dx", rdx, dx, nx);
    CMP_D("dw", rdw, dw, nw);
    if (has_bias) CMP_D("db", rdb, db, nb);
    free(ry), free(rdx), free(rdw), free(rdb);

    /* the fast path: oneDNN */
    float *fx = fcopy(x, nx), *fw = fcopy(w, nw), *fb = has_bias ? fcopy(b, nb) : NULL, *fdy = fcopy(dy, ny);
    float *gy = fbuf(ny), *gdx = fbuf(nx), *gdw = fbuf(nw), *gdb = fbuf(nb);
    kiln_dnnl_conv_opts o = {.has_bias = has_bias, .fuse_relu = 0, .need_bwd_data = 1, .need_bwd_weight = 1, .autotune = 0};
    kiln_dnnl_conv *c = NULL;
    CHECK_OK(kiln_dnnl_conv_new(&cs, &o, &c));
    if (c) {
        size_t wsb = kiln_dnnl_conv_workspace(c);
        void *ws = kiln_alloc(wsb ? wsb : 64);
        CHECK_OK(kiln_dnnl_conv_fwd(c, fx, fw, fb, gy, ws));
        CHECK_OK(kiln_dnnl_conv_bwd_data(c, fdy, fw, gdx, 0, ws));
        CHECK_OK(kiln_dnnl_conv_bwd_weight(c, fx, fdy, gdw, has_bias ? gdb : NULL, 0, 0, ws));
        CMP_F("y", gy, y, ny);
        CMP_F("dx", gdx, dx, nx);
        CMP_F("dw", gdw, dw, nw);
        if (has_bias) CMP_F("db", gdb, db, nb);
        kiln_free(ws);
        kiln_dnnl_conv_free(c);
    }
    kiln_free(fx), kiln_free(fw), kiln_free(fb), kiln_free(fdy);
    kiln_free(gy), kiln_free(gdx), kiln_free(gdw), kiln_free(gdb);
out:
    kiln_st_close(f);
}

/* every form of every direction (linear.h: operands copied dense or with padded rows, the autotuner's candidates)
 * gives PyTorch's values, writing and adding: fwd and bwd_data take 2 forms, bwd_weight 4 */
static void linear_forms(const char *fxname, int64_t n, int64_t in, int64_t outn, int w_kn, float *const f[4],
                         const double *const want[3]) {
    kiln_dnnl_linear *l = NULL;
    CHECK_OK(kiln_dnnl_linear_new(n, in, outn, w_kn, 1, 0, 1, 1, 0, KILN_LINEAR_ALL_FORMS, &l));
    if (!l) return;
    const float *fx = f[0], *fw = f[1], *fb = f[2], *fdy = f[3];
    int64_t size[3] = {n * outn, n * in, outn * in}, made = 0;
    void *ws = kiln_alloc(kiln_dnnl_linear_workspace(l) + 64);
    float *g = fbuf(n * (in > outn ? in : outn) + in * outn);
    double *twice = dbuf(n * (in > outn ? in : outn) + in * outn);
    for (int dir = 0; dir < L_NDIR; dir++)
        for (int form = 0; form < KILN_LINEAR_FORMS; form++) {
            if (!l->p[L_PRIM(dir, form, 0)]) continue;
            made++;
            const float *a = dir == L_DIR_BD ? fdy : fx, *b = dir == L_DIR_FWD ? fw : dir == L_DIR_BD ? fw : fdy;
            char what[48];
            snprintf(what, sizeof what, "dir %d form %d", dir, form);
            CHECK_OK(kiln_dnnl_linear_call(l, dir, form, a, b, dir == L_DIR_FWD ? fb : NULL, g, 0, ws));
            CMP_F(what, g, want[dir], size[dir]);
            if (dir == L_DIR_FWD) continue; /* forward never adds */
            CHECK_OK(kiln_dnnl_linear_call(l, dir, form, a, b, NULL, g, 1, ws));
            for (int64_t i = 0; i < size[dir]; i++) twice[i] = 2 * want[dir][i];
            snprintf(what, sizeof what, "dir %d form %d, added", dir, form);
            CMP_F(what, g, twice, size[dir]);
        }
    CHECK_MSG(made == 8, "%s: %lld forms made, expected 2 + 2 + 4", fxname, (long long)made);
    kiln_free(ws), free(twice);
    kiln_dnnl_linear_free(l);
    /* a remembered form other than plain (as a cache from another run holds): chosen, the others freed, right values */
    char problem[KILN_AUTOTUNE_PROBLEM_MAX];
    snprintf(problem, sizeof problem, "linear:n%lldi%lldo%lld%s", (long long)n, (long long)in, (long long)outn, w_kn ? "kn" : "nk");
    kiln_autotune_store(problem, "fwd", "matmul/padded/onednn", 1, 0);
    kiln_autotune_store(problem, "bwd_data", "matmul/padded/onednn", 1, 0);
    kiln_autotune_store(problem, "bwd_weight", "matmul/transposed+padded/onednn", 1, 0);
    CHECK_OK(kiln_dnnl_linear_new(n, in, outn, w_kn, 1, 0, 1, 1, 0, 1, &l));
    if (l) {
        CHECK_MSG(l->form[L_DIR_FWD] == 2 && l->form[L_DIR_BD] == 2 && l->form[L_DIR_BW] == 3, "%s: forms %d %d %d",
                  fxname, l->form[0], l->form[1], l->form[2]);
        ws = kiln_alloc(kiln_dnnl_linear_workspace(l) + 64);
        float *gb = fbuf(outn);
        CHECK_OK(kiln_dnnl_linear_fwd(l, fx, fw, fb, g, ws));
        CMP_F("remembered padded forward", g, want[0], size[0]);
        CHECK_OK(kiln_dnnl_linear_bwd_data(l, fdy, fw, g, 0, ws));
        CMP_F("remembered padded backward-data", g, want[1], size[1]);
        CHECK_OK(kiln_dnnl_linear_bwd_weight(l, fx, fdy, g, gb, 0, 0, ws));
        CMP_F("remembered transposed+padded backward-weights", g, want[2], size[2]);
        kiln_free(ws), kiln_free(gb);
        kiln_dnnl_linear_free(l);
    }
    kiln_autotune_forget();
    /* tuned, only each direction's chosen form is kept; untuned, form 0 alone is made */
    for (int tune = 0; tune < 2; tune++) {
        CHECK_OK(kiln_dnnl_linear_new(n, in, outn, w_kn, 1, 0, 1, 1, 0, tune, &l));
        int kept = 0;
        for (int i = 0; l && i < L_PRIM(L_NDIR, 0, 0); i++) kept += l->p[i] != NULL;
        CHECK_MSG(kept == 5 && (tune || kiln_dnnl_linear_workspace(l) == 0), "%s, autotune %d: %d primitives kept, %zu "
                  "bytes of workspace", fxname, tune, kept, l ? kiln_dnnl_linear_workspace(l) : 0);
        kiln_dnnl_linear_free(l);
    }
    kiln_free(g);
}

/* linear (w [O,I]) or matmul (w [I,O], HF Conv1D) over x [..., I] */
static void test_linear(const char *fxname, int w_kn) {
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    const kiln_tensor *tx = fx_get(f, "x", KILN_F64), *tw = fx_get(f, "w", KILN_F64);
    const double *b = fx_d(f, "b"), *y = fx_d(f, "y"), *dy = fx_d(f, "dy"), *dx = fx_d(f, "dx"), *dw = fx_d(f, "dw"),
                 *db = fx_d(f, "db");
    if (!tx || !tw || !b || !y || !dy || !dx || !dw || !db) goto out;
    int64_t in = tx->shape[tx->ndim - 1], n = kiln_tensor_numel(tx) / in, outn = tw->shape[w_kn ? 1 : 0];
    const double *x = tx->data, *w = tw->data;
    double *ry = dbuf(n * outn), *rdx = dbuf(n * in), *rdw = dbuf(outn * in), *rdb = dbuf(outn);
    if (w_kn) {
        kiln_ref_matmul_fwd(n, in, outn, x, w, b, ry);
        kiln_ref_matmul_bwd_data(n, in, outn, dy, w, rdx, 0);
        kiln_ref_matmul_bwd_weight(n, in, outn, x, dy, rdw, 0);
        for (int64_t o = 0; o < outn; o++) { /* the bias gradient: dy's column sums */
            rdb[o] = 0;
            for (int64_t i = 0; i < n; i++) rdb[o] += dy[i * outn + o];
        }
    } else {
        kiln_ref_linear_fwd(n, in, outn, x, w, b, ry);
        kiln_ref_linear_bwd_data(n, in, outn, dy, w, rdx, 0);
        kiln_ref_linear_bwd_weight(n, in, outn, x, dy, rdw, rdb, 0);
    }
    CMP_D("y", ry, y, n * outn);
    CMP_D("dx", rdx, dx, n * in);
    CMP_D("dw", rdw, dw, outn * in);
    CMP_D("db", rdb, db, outn);
    free(ry), free(rdx), free(rdw), free(rdb);

    float *fx = fcopy(x, n * in), *fw = fcopy(w, outn * in), *fb = fcopy(b, outn), *fdy = fcopy(dy, n * outn);
    float *gy = fbuf(n * outn), *gdx = fbuf(n * in), *gdw = fbuf(outn * in), *gdb = fbuf(outn);
    kiln_dnnl_linear *l = NULL;
    CHECK_OK(kiln_dnnl_linear_new(n, in, outn, w_kn, 1, 0, 1, 1, 0, 0, &l));
    if (l) {
        CHECK_OK(kiln_dnnl_linear_fwd(l, fx, fw, fb, gy, NULL));
        CHECK_OK(kiln_dnnl_linear_bwd_data(l, fdy, fw, gdx, 0, NULL));
        CHECK_OK(kiln_dnnl_linear_bwd_weight(l, fx, fdy, gdw, gdb, 0, 0, NULL));
        CMP_F("y", gy, y, n * outn);
        CMP_F("dx", gdx, dx, n * in);
        CMP_F("dw", gdw, dw, outn * in);
        CMP_F("db", gdb, db, outn);
        kiln_dnnl_linear_free(l);
    }
    float *const ops[4] = {fx, fw, fb, fdy};
    const double *const want[3] = {y, dx, dw};
    linear_forms(fxname, n, in, outn, w_kn, ops, want);
    kiln_free(fx), kiln_free(fw), kiln_free(fb), kiln_free(fdy);
    kiln_free(gy), kiln_free(gdx), kiln_free(gdw), kiln_free(gdb);
out:
    kiln_st_close(f);
}

/* a @ b over two leading dims with b a transposed view of bt: ref and oneDNN read it through strides */
static void test_bmm(void) {
    const char *fxname = "op_bmm.safetensors";
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    const kiln_tensor *ta = fx_get(f, "a", KILN_F64), *tbt = fx_get(f, "bt", KILN_F64);
    const double *y = fx_d(f, "y"), *dy = fx_d(f, "dy"), *da = fx_d(f, "da"), *dbt = fx_d(f, "dbt");
    if (!ta || !tbt || !y || !dy || !da || !dbt) goto out;
    int64_t m = ta->shape[2], k = ta->shape[3], n = tbt->shape[2], na = kiln_tensor_numel(ta), nb = kiln_tensor_numel(tbt);
    int64_t ny = na / k * n;
    kiln_bmm_shape s = {.nbatch = 2, .batch = {ta->shape[0], ta->shape[1]}, .m = m, .k = k, .n = n,
                        .a_stride = {ta->shape[1] * m * k, m * k, k, 1}, .b_stride = {tbt->shape[1] * n * k, n * k, 1, k}};
    double *ry = dbuf(ny), *rda = dbuf(na), *rdb = dbuf(nb);
    kiln_ref_bmm_fwd(&s, ta->data, tbt->data, ry);
    kiln_ref_bmm_bwd(&s, ta->data, tbt->data, dy, rda, rdb, 0, 0); /* db lands in bt's layout: b's strides say so */
    CMP_D("y", ry, y, ny);
    CMP_D("da", rda, da, na);
    free(ry), free(rda);
    /* the reference writes db [.., k, n] contiguous: read it back as bt [.., n, k] */
    double *rdbt = dbuf(nb);
    for (int64_t mat = 0; mat < nb / (k * n); mat++)
        for (int64_t p = 0; p < k; p++)
            for (int64_t j = 0; j < n; j++) rdbt[mat * n * k + j * k + p] = rdb[mat * k * n + p * n + j];
    CMP_D("dbt", rdbt, dbt, nb);
    free(rdb), free(rdbt);
    float *fa = fcopy(ta->data, na), *fbt = fcopy(tbt->data, nb), *fdy = fcopy(dy, ny);
    float *gy = fbuf(ny), *gda = fbuf(na), *gdb = fbuf(nb), *gdbt = fbuf(nb);
    kiln_dnnl_bmm *o = NULL;
    CHECK_OK(kiln_dnnl_bmm_new(&s, 1, 1, 1, 0, &o));
    if (o) {
        CHECK_OK(kiln_dnnl_bmm_fwd(o, fa, fbt, gy, NULL));
        CHECK_OK(kiln_dnnl_bmm_bwd(o, fa, fbt, fdy, gda, gdb, 0, 0, NULL));
        for (int64_t mat = 0; mat < nb / (k * n); mat++)
            for (int64_t p = 0; p < k; p++)
                for (int64_t j = 0; j < n; j++) gdbt[mat * n * k + j * k + p] = gdb[mat * k * n + p * n + j];
        CMP_F("y", gy, y, ny);
        CMP_F("da", gda, da, na);
        CMP_F("dbt", gdbt, dbt, nb);
        kiln_dnnl_bmm_free(o);
    }
    kiln_free(fa), kiln_free(fbt), kiln_free(fdy), kiln_free(gy), kiln_free(gda), kiln_free(gdb), kiln_free(gdbt);
out:
    kiln_st_close(f);
}

/* the column thirds of x [B, T, 3C]: q, k, v */
static kiln_value build_attention(kiln_graph *g, kiln_value x, kiln_st_file *f) {
    int64_t s[3];
    kiln_value_shape(g, x, s);
    int64_t c = s[2] / 3;
    return kiln_causal_attention(g, kiln_slice(g, x, 2, 0, c), kiln_slice(g, x, 2, c, 2 * c), kiln_slice(g, x, 2, 2 * c, 3 * c),
                                 (int)fx_meta(f, "heads"));
}

/* dq, dk, dv [B, T, C] side by side as PyTorch's dx [B, T, 3C] */
static void join_thirds(int64_t rows, int64_t c, const double *dq, const double *dk, const double *dv, double *dx) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < c; j++) {
            dx[r * 3 * c + j] = dq[r * c + j];
            dx[r * 3 * c + c + j] = dk[r * c + j];
            dx[r * 3 * c + 2 * c + j] = dv[r * c + j];
        }
}

/* the fast kernel on the strided thirds of x, in the tiles `tiles` picks (KILN_ATTN_TILES_*: the best this cpu has,
 * the portable loops, the AVX2 tiles); slots = 1 and 2 must give the same bits */
static void attention_cpu(const char *fxname, const kiln_attn_shape *s, const double *x, const double *y,
                          const double *lse, const double *dy, const double *dx, int tiles) {
    int64_t rows = s->b * s->t, c = s->c, nl = s->b * s->heads * s->t;
    size_t ws = 2 * kiln_cpu_attention_scratch(s);
    void *scratch = kiln_alloc(ws);
    float *fx = fcopy(x, rows * 3 * c), *fdy = fcopy(dy, rows * c), *gy[2], *gl[2], *gd[2][3];
    kiln_cpu_attention_force(tiles);
    for (int t = 0; t < 2; t++) {
        gy[t] = fbuf(rows * c), gl[t] = fbuf(nl);
        for (int i = 0; i < 3; i++) gd[t][i] = fbuf(rows * c);
        kiln_cpu_causal_attention_fwd(s, fx, fx + c, fx + 2 * c, gy[t], gl[t], scratch, t + 1);
        kiln_cpu_causal_attention_bwd(s, fx, fx + c, fx + 2 * c, gy[t], gl[t], fdy, gd[t][0], gd[t][1], gd[t][2], 0, 0, 0,
                                      scratch, t + 1);
    }
    kiln_cpu_attention_force(KILN_ATTN_TILES_BEST);
    const char *what = tiles == KILN_ATTN_TILES_PORTABLE ? "portable" : tiles == KILN_ATTN_TILES_AVX2 ? "avx2" : "cpu";
    CHECK_MSG(!memcmp(gy[0], gy[1], (size_t)(rows * c) * 4) && !memcmp(gl[0], gl[1], (size_t)nl * 4), "%s: %s forward differs on 2 threads", fxname, what);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(!memcmp(gd[0][i], gd[1][i], (size_t)(rows * c) * 4), "%s: %s gradient %d differs on 2 threads", fxname, what, i);
    double *got = dbuf(rows * 3 * c), *d[3];
    for (int i = 0; i < 3; i++) {
        d[i] = dbuf(rows * c);
        for (int64_t j = 0; j < rows * c; j++) d[i][j] = gd[1][i][j];
    }
    join_thirds(rows, c, d[0], d[1], d[2], got);
    char name[32];
    snprintf(name, sizeof name, "%s y", what);
    CMP_F(name, gy[1], y, rows * c);
    snprintf(name, sizeof name, "%s lse", what);
    CMP_F(name, gl[1], lse, nl);
    CHECK_MSG(err_d(got, dx, rows * 3 * c) <= TOL_F, "%s: %s dq, dk, dv off by %.3g", fxname, what, err_d(got, dx, rows * 3 * c));
    for (int t = 0; t < 2; t++) {
        kiln_free(gy[t]), kiln_free(gl[t]);
        for (int i = 0; i < 3; i++) kiln_free(gd[t][i]);
    }
    for (int i = 0; i < 3; i++) free(d[i]);
    free(got);
    kiln_free(fx), kiln_free(fdy), kiln_free(scratch);
}

/* GPT's situation: q, k, v the thirds of a batched activation (x_in + p, p [T, 3C] a parameter, x_in = x - p
 * bound as the batch), so the slices' strides span the symbolic batch; y and dL/dp = sum over the batch of dx */
static void attention_batched(const char *fxname, kiln_st_file *f, const char *backend) {
    const kiln_tensor *tx = fx_get(f, "x", KILN_F64);
    const double *y = fx_d(f, "y"), *dy = fx_d(f, "dy"), *dx = fx_d(f, "dx");
    if (!tx || !y || !dy || !dx) return;
    int64_t b = tx->shape[0], t = tx->shape[1], c3 = tx->shape[2], c = c3 / 3, per = t * c3;
    kiln_graph *g = kiln_graph_new();
    kiln_value xin = kiln_input(g, "x", KILN_F32, 3, (int64_t[]){KILN_BATCH, t, c3});
    kiln_value dyin = kiln_input(g, "dy", KILN_F32, 3, (int64_t[]){KILN_BATCH, t, c});
    kiln_value p = kiln_param(g, "p", 2, (int64_t[]){t, c3}, 1);
    kiln_value out = build_attention(g, kiln_add(g, xin, p), f);
    kiln_value loss = kiln_sum(g, kiln_mul(g, out, dyin));
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_graph_status(g));
    CHECK_OK(kiln_params_new_on(g, backend, &P));
    float *pv = fbuf(per), *xv = fbuf(b * per), *dyv = fcopy(dy, b * t * c), *gy = fbuf(b * t * c);
    int f64 = P && kiln_params_dtype(P) == KILN_F64;
    float *grad = fbuf(P ? 2 * kiln_params_total(P) : 1); /* f32 or f64 values */
    double *want = calloc((size_t)per, sizeof *want), *gp = dbuf(per);
    for (int64_t i = 0; i < per; i++) pv[i] = (float)tu_uniform(-1, 1);
    for (int64_t i = 0; i < b * per; i++) {
        xv[i] = (float)(((const double *)tx->data)[i] - pv[i % per]);
        want[i % per] += dx[i];
    }
    if (!P) goto out;
    double *pd = (double *)grad; /* the flat buffer in the parameters' dtype (one parameter) */
    memset(grad, 0, (size_t)kiln_params_total(P) * (f64 ? 8 : 4));
    for (int64_t i = 0; i < per; i++) {
        if (f64) pd[kiln_params_offset(P, 0) + i] = pv[i];
        else grad[kiln_params_offset(P, 0) + i] = pv[i];
    }
    CHECK_OK(kiln_params_write(P, grad));
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = b;
    o.backend = backend;
    o.autotune = 0;
    kiln_value outs[2] = {loss, out};
    CHECK_OK(kiln_compile(g, P, outs, 2, &o, &pl));
    if (!pl) goto out;
    CHECK_OK(kiln_plan_bind(pl, xin, xv));
    CHECK_OK(kiln_plan_bind(pl, dyin, dyv));
    CHECK_OK(kiln_plan_run(pl, b));
    CHECK_OK(kiln_plan_read(pl, out, gy, b * t * c));
    CHECK_OK(kiln_params_grad_read(P, grad));
    int slice_bwd = 0, att_bwd = 0; /* backward writes dL/d(x + p) whole: no slice gathers dq, dk, dv into it */
    for (int i = 0; i < kiln_plan_step_count(pl); i++) {
        kiln_step_info si;
        CHECK_OK(kiln_plan_step_info(pl, i, &si));
        slice_bwd += !strcmp(si.op, "slice_bwd");
        att_bwd += !strcmp(si.op, "causal_attention_bwd") && si.nout == 1 && si.out[0].shape[2] == c3;
    }
    CHECK_MSG(slice_bwd == 0 && att_bwd == 1, "%s: %d slice_bwd steps, %d attention backward steps writing dx whole", fxname,
              slice_bwd, att_bwd);
    for (int64_t i = 0; i < per; i++) gp[i] = f64 ? pd[kiln_params_offset(P, 0) + i] : grad[kiln_params_offset(P, 0) + i];
    char what[64];
    snprintf(what, sizeof what, "batched %s y", backend);
    CMP_F(what, gy, y, b * t * c);
    snprintf(what, sizeof what, "batched %s dL/dp", backend);
    CHECK_MSG(err_d(gp, want, per) <= TOL_F, "%s: %s off by %.3g", fxname, what, err_d(gp, want, per));
out:
    kiln_free(pv), kiln_free(xv), kiln_free(dyv), kiln_free(gy), kiln_free(grad);
    free(want), free(gp);
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
}

/* nanoGPT's plain attention (materialised, float64) against the reference and the fast kernels */
static void test_causal_attention(const char *fxname) {
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    const kiln_tensor *tx = fx_get(f, "x", KILN_F64);
    const double *y = fx_d(f, "y"), *lse = fx_d(f, "lse"), *dy = fx_d(f, "dy"), *dx = fx_d(f, "dx");
    if (!tx || !y || !lse || !dy || !dx) goto out;
    int64_t b = tx->shape[0], t = tx->shape[1], c = tx->shape[2] / 3, rows = b * t;
    kiln_attn_shape s = {.b = b, .t = t, .c = c, .heads = (int64_t)fx_meta(f, "heads"), .q_stride = {t * 3 * c, 3 * c},
                         .k_stride = {t * 3 * c, 3 * c}, .v_stride = {t * 3 * c, 3 * c}, .d_stride = {t * c, c}};
    const double *x = tx->data;
    double *ry = dbuf(rows * c), *rl = dbuf(b * s.heads * t), *d[3], *got = dbuf(rows * 3 * c);
    kiln_ref_causal_attention_fwd(&s, x, x + c, x + 2 * c, ry, rl);
    for (int i = 0; i < 3; i++) d[i] = dbuf(rows * c);
    kiln_ref_causal_attention_bwd(&s, x, x + c, x + 2 * c, rl, dy, d[0], d[1], d[2], 0, 0, 0);
    join_thirds(rows, c, d[0], d[1], d[2], got);
    CMP_D("y", ry, y, rows * c);
    CMP_D("lse", rl, lse, b * s.heads * t);
    CMP_D("dq, dk, dv", got, dx, rows * 3 * c);
    free(ry), free(rl), free(got);
    for (int i = 0; i < 3; i++) free(d[i]);
    attention_cpu(fxname, &s, x, y, lse, dy, dx, KILN_ATTN_TILES_BEST);
    attention_cpu(fxname, &s, x, y, lse, dy, dx, KILN_ATTN_TILES_PORTABLE);
    if (kiln_cpu_has_avx2()) attention_cpu(fxname, &s, x, y, lse, dy, dx, KILN_ATTN_TILES_AVX2);
    else printf("test_fixtures: %s: the AVX2 attention tiles skipped: this cpu has no AVX2\n", fxname);
    attention_batched(fxname, f, "ref");
    attention_batched(fxname, f, "cpu");
out:
    kiln_st_close(f);
    test_one_input(fxname, build_attention); /* through the graph: slices, autodiff, both backends */
}

/* relu, max_pool2d, log_softmax: x, y, dy, dx */
enum { OP_RELU, OP_POOL, OP_LOGSOFTMAX };
static void test_unary(const char *fxname, int op) {
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    const kiln_tensor *tx = fx_get(f, "x", KILN_F64), *ty = fx_get(f, "y", KILN_F64);
    const double *dy = fx_d(f, "dy"), *dx = fx_d(f, "dx");
    if (!tx || !ty || !dy || !dx) goto out;
    const double *x = tx->data, *y = ty->data;
    int64_t nx = kiln_tensor_numel(tx), ny = kiln_tensor_numel(ty);
    kiln_pool_shape ps = {0};
    if (op == OP_POOL) {
        ps = (kiln_pool_shape){.n = tx->shape[0], .c = tx->shape[1], .h = tx->shape[2], .w = tx->shape[3],
                               .k = (int64_t)fx_meta(f, "kernel"), .stride = (int64_t)fx_meta(f, "stride"),
                               .pad = (int64_t)fx_meta(f, "pad")};
        CHECK(kiln_pool_shape_infer(&ps) == 0);
        CHECK_MSG(ps.oh == ty->shape[2] && ps.ow == ty->shape[3], "%s: pool output %lldx%lld", fxname,
                  (long long)ps.oh, (long long)ps.ow);
        if (ps.oh != ty->shape[2] || ps.ow != ty->shape[3]) goto out;
    }
    int64_t rows = tx->ndim == 2 ? tx->shape[0] : 0, cols = tx->ndim == 2 ? tx->shape[1] : 0;
    double *ry = dbuf(ny), *rdx = dbuf(nx);
    float *fx = fcopy(x, nx), *fdy = fcopy(dy, ny), *gy = fbuf(ny), *gdx = fbuf(nx);
    float *fy = NULL;
    switch (op) {
    case OP_RELU:
        kiln_ref_relu_fwd(nx, x, ry);
        kiln_ref_relu_bwd(nx, y, dy, rdx, 0);
        kiln_cpu_relu_fwd(nx, fx, gy);
        fy = fcopy(y, ny);
        kiln_cpu_relu_bwd(nx, fy, fdy, gdx, 0);
        break;
    case OP_POOL:
        kiln_ref_max_pool2d_fwd(&ps, x, ry);
        kiln_ref_max_pool2d_bwd(&ps, x, dy, rdx, 0);
        kiln_cpu_max_pool2d_fwd(&ps, fx, gy);
        kiln_cpu_max_pool2d_bwd(&ps, fx, fdy, gdx, 0);
        break;
    case OP_LOGSOFTMAX:
        kiln_ref_log_softmax_fwd(rows, cols, x, ry);
        kiln_ref_log_softmax_bwd(rows, cols, y, dy, rdx, 0);
        kiln_cpu_log_softmax_fwd(rows, cols, fx, gy);
        fy = fcopy(y, ny);
        kiln_cpu_log_softmax_bwd(rows, cols, fy, fdy, gdx, 0);
        break;
    }
    CMP_D("y", ry, y, ny);
    CMP_D("dx", rdx, dx, nx);
    CMP_F("y", gy, y, ny);
    CMP_F("dx", gdx, dx, nx);
    free(ry), free(rdx);
    kiln_free(fx), kiln_free(fdy), kiln_free(gy), kiln_free(gdx), kiln_free(fy);
out:
    kiln_st_close(f);
}

/* nll_loss (dloss 1 or given) and cross_entropy (dloss 1) */
static void test_loss(const char *fxname, int cross_entropy) {
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    const kiln_tensor *tin = fx_get(f, cross_entropy ? "logits" : "logp", KILN_F64);
    const kiln_tensor *tt = fx_get(f, "target", KILN_I32);
    const double *loss = fx_d(f, "loss"), *dref = fx_d(f, cross_entropy ? "dlogits" : "dlogp");
    const double one = 1.0, *dloss = kiln_st_find(f, "dloss") ? fx_d(f, "dloss") : &one;
    if (!tin || !tt || !loss || !dref || !dloss) goto out;
    CHECK_MSG(fx_numel(f, "loss") == 1, "%s: loss is not a scalar", fxname);
    int64_t rows = tin->shape[0], cols = tin->shape[1], n = rows * cols;
    const double *in = tin->data;
    const int32_t *t = tt->data;
    double rl = 1e30, *rd = dbuf(n);
    float *fin = fcopy(in, n), fdl = (float)*dloss, gl = 1e30f, *gd = fbuf(n);
    if (cross_entropy) {
        kiln_ref_cross_entropy_fwd(rows, cols, in, t, &rl);
        kiln_ref_cross_entropy_bwd(rows, cols, in, t, dloss, rd, 0);
        kiln_cpu_cross_entropy_fwd(rows, cols, fin, t, &gl);
        kiln_cpu_cross_entropy_bwd(rows, cols, fin, t, &fdl, gd, 0);
    } else {
        kiln_ref_nll_loss_fwd(rows, cols, in, t, &rl);
        kiln_ref_nll_loss_bwd(rows, cols, t, dloss, rd, 0);
        kiln_cpu_nll_loss_fwd(rows, cols, fin, t, &gl);
        kiln_cpu_nll_loss_bwd(rows, cols, t, &fdl, gd, 0);
    }
    CMP_D("loss", &rl, loss, 1);
    CMP_D("grad", rd, dref, n);
    CMP_F("loss", &gl, loss, 1);
    CMP_F("grad", gd, dref, n);
    free(rd);
    kiln_free(fin), kiln_free(gd);
out:
    kiln_st_close(f);
}

/* mse_loss: the loss, and d/dx and d/dtarget (the backward kernel with x and target swapped) */
static void test_mse_loss(void) {
    const char *fxname = "op_mse_loss.safetensors";
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    const double *x = fx_d(f, "x"), *t = fx_d(f, "target"), *loss = fx_d(f, "loss"), *dl = fx_d(f, "dloss"),
                 *dx = fx_d(f, "dx"), *dt = fx_d(f, "dtarget");
    int64_t n = fx_numel(f, "x");
    CHECK(n > 1 && fx_numel(f, "target") == n && fx_numel(f, "loss") == 1 && fx_numel(f, "dx") == n);
    if (!x || !t || !loss || !dl || !dx || !dt || n <= 1) goto out;
    double rl = 1e30, *rdx = dbuf(n), *rdt = dbuf(n);
    float *fx = fcopy(x, n), *ft = fcopy(t, n), fdl = (float)*dl, gl = 1e30f, *gdx = fbuf(n), *gdt = fbuf(n);
    kiln_ref_mse_loss_fwd(n, x, t, &rl);
    kiln_ref_mse_loss_bwd(n, x, t, dl, rdx, 0, 0);
    kiln_ref_mse_loss_bwd(n, t, x, dl, rdt, 0, 0);
    kiln_cpu_mse_loss_fwd(n, fx, ft, &gl);
    kiln_cpu_mse_loss_bwd(n, fx, ft, &fdl, gdx, 0, 0);
    kiln_cpu_mse_loss_bwd(n, ft, fx, &fdl, gdt, 0, 0);
    CMP_D("loss", &rl, loss, 1);
    CMP_D("dx", rdx, dx, n);
    CMP_D("dtarget", rdt, dt, n);
    CMP_F("loss", &gl, loss, 1);
    CMP_F("dx", gdx, dx, n);
    CMP_F("dtarget", gdt, dt, n);
    free(rdx), free(rdt);
    kiln_free(fx), kiln_free(ft), kiln_free(gdx), kiln_free(gdt);
out:
    kiln_st_close(f);
}

static void test_binary(const char *fxname, int mul) {
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    const double *a = fx_d(f, "a"), *b = fx_d(f, "b"), *y = fx_d(f, "y"), *dy = fx_d(f, "dy"), *da = fx_d(f, "da"),
                 *db = fx_d(f, "db");
    int64_t n = fx_numel(f, "a");
    CHECK(n > 0 && fx_numel(f, "b") == n && fx_numel(f, "y") == n && fx_numel(f, "da") == n);
    if (!a || !b || !y || !dy || !da || !db || n <= 0) goto out;
    double *ry = dbuf(n), *rda = dbuf(n), *rdb = dbuf(n);
    float *fa = fcopy(a, n), *fb = fcopy(b, n), *fdy = fcopy(dy, n), *gy = fbuf(n), *gda = fbuf(n), *gdb = fbuf(n);
    if (mul) {
        kiln_ref_mul_fwd(n, a, b, ry);
        kiln_ref_mul_bwd(n, dy, b, rda, 0);
        kiln_ref_mul_bwd(n, dy, a, rdb, 0);
        kiln_cpu_mul_fwd(n, fa, fb, gy);
        kiln_cpu_mul_bwd(n, fdy, fb, gda, 0);
        kiln_cpu_mul_bwd(n, fdy, fa, gdb, 0);
    } else {
        kiln_ref_add_fwd(n, a, b, ry);
        kiln_ref_grad_copy(n, dy, rda, 0);
        kiln_ref_grad_copy(n, dy, rdb, 0);
        kiln_cpu_add_fwd(n, fa, fb, gy);
        kiln_cpu_grad_copy(n, fdy, gda, 0);
        kiln_cpu_grad_copy(n, fdy, gdb, 0);
    }
    CMP_D("y", ry, y, n);
    CMP_D("da", rda, da, n);
    CMP_D("db", rdb, db, n);
    CMP_F("y", gy, y, n);
    CMP_F("da", gda, da, n);
    CMP_F("db", gdb, db, n);
    free(ry), free(rda), free(rdb);
    kiln_free(fa), kiln_free(fb), kiln_free(fdy), kiln_free(gy), kiln_free(gda), kiln_free(gdb);
out:
    kiln_st_close(f);
}

/* ---------- optimizers ---------- */

typedef struct {
    kiln_optim_kind kind;
    double lr, wd, momentum, dampening, beta1, beta2, eps, rho, trust;
    int nesterov;
} hyper;

static hyper read_hyper(kiln_st_file *f, kiln_optim_kind kind) {
    hyper h = {.kind = kind, .lr = fx_meta(f, "lr"), .wd = fx_meta(f, "weight_decay")};
    if (kind == KILN_OPT_SGD) {
        h.momentum = fx_meta(f, "momentum");
        h.dampening = fx_meta(f, "dampening");
        h.nesterov = (int)fx_meta(f, "nesterov");
    } else if (kind == KILN_OPT_ADAMW) {
        h.beta1 = fx_meta(f, "beta1");
        h.beta2 = fx_meta(f, "beta2");
        h.eps = fx_meta(f, "eps");
        CHECK(fx_meta(f, "amsgrad") == 0);
    } else {
        h.rho = fx_meta(f, "rho");
        h.eps = fx_meta(f, "eps");
    }
    return h;
}

/* step i of the ref (p) and cpu (fp) kernels against the fixture's parameters */
static void check_kernel_step(const char *fxname, int64_t i, const double *p, const float *fp, const double *ref, int64_t n) {
    double e = err_d(p, ref, n), ef = err_f(fp, ref, n);
    CHECK_MSG(e <= 1e-12, "%s: ref step %lld off by %.3g", fxname, (long long)i + 1, e);
    CHECK_MSG(ef <= TOL_F, "%s: cpu step %lld off by %.3g", fxname, (long long)i + 1, ef);
}

static void test_optimizer(const char *fxname, kiln_optim_kind kind) {
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    const kiln_tensor *tp0 = fx_get(f, "p0", KILN_F64), *tg = fx_get(f, "g", KILN_F64), *tp = fx_get(f, "p", KILN_F64);
    if (!tp0 || !tg || !tp) goto out;
    int64_t n = tp0->shape[0], steps = tg->shape[0];
    CHECK(tg->ndim == 2 && tg->shape[1] == n && tp->shape[0] == steps && tp->shape[1] == n);
    const double *p0 = tp0->data, *g = tg->data, *pref = tp->data;
    hyper h = read_hyper(f, kind);

    /* ref (double) and cpu (float) kernels */
    double *p = dbuf(n), *s0 = calloc((size_t)n, 8), *s1 = calloc((size_t)n, 8);
    float *fp = fcopy(p0, n), *fs0 = kiln_calloc((size_t)n * 4), *fs1 = kiln_calloc((size_t)n * 4);
    memcpy(p, p0, (size_t)n * 8);
    for (int64_t i = 0; i < steps; i++) {
        const double *gi = g + i * n;
        float *fg = fcopy(gi, n);
        switch (kind) {
        case KILN_OPT_SGD:
            kiln_ref_sgd(n, p, gi, s0, h.lr, h.momentum, h.dampening, h.wd, h.nesterov, i == 0);
            kiln_cpu_sgd(n, fp, fg, fs0, (float)h.lr, (float)h.momentum, (float)h.dampening, (float)h.wd, h.nesterov, i == 0);
            break;
        case KILN_OPT_ADAMW:
            kiln_ref_adamw(n, p, gi, s0, s1, h.lr, h.beta1, h.beta2, h.eps, h.wd, i + 1);
            kiln_cpu_adamw(n, fp, fg, fs0, fs1, (float)h.lr, (float)h.beta1, (float)h.beta2, (float)h.eps, (float)h.wd, i + 1);
            break;
        case KILN_OPT_ADADELTA:
            kiln_ref_adadelta(n, p, gi, s0, s1, h.lr, h.rho, h.eps, h.wd);
            kiln_cpu_adadelta(n, fp, fg, fs0, fs1, (float)h.lr, (float)h.rho, (float)h.eps, (float)h.wd);
            break;
        default: break; /* the layer-wise ones: test_optimizer_multi */
        }
        kiln_free(fg);
        check_kernel_step(fxname, i, p, fp, pref + i * n, n);
    }
    free(p), free(s0), free(s1);
    kiln_free(fp), kiln_free(fs0), kiln_free(fs1);

    /* the public API, over a one-parameter graph, in f32 and f64. The config is
     * float, so f64 sees float-rounded hyperparameters: compare to 1e-6. */
    kiln_graph *gr = kiln_graph_new();
    kiln_param(gr, "p", 1, (int64_t[]){n}, n);
    CHECK_OK(kiln_graph_status(gr));
    kiln_optim_config oc = kiln_optim_defaults(kind);
    oc.decay_all = 1; /* torch.optim with one group: the one 1-d parameter decays too */
    oc.lr = (float)h.lr;
    oc.weight_decay = (float)h.wd;
    oc.momentum = (float)h.momentum;
    oc.dampening = (float)h.dampening;
    oc.nesterov = h.nesterov;
    if (kind == KILN_OPT_ADAMW) oc.beta1 = (float)h.beta1, oc.beta2 = (float)h.beta2;
    if (kind != KILN_OPT_SGD) oc.eps = (float)h.eps;
    if (kind == KILN_OPT_ADADELTA) oc.rho = (float)h.rho;
    for (int f64 = 0; f64 < 2; f64++) {
        kiln_params *P = NULL;
        kiln_optim *o = NULL;
        CHECK_OK(kiln_params_new(gr, f64 ? KILN_F64 : KILN_F32, &P));
        if (!P) break;
        CHECK(kiln_params_count(P) == 1 && kiln_params_numel(P, 0) == n);
        CHECK_OK(kiln_optim_new(&oc, P, &o));
        if (!o) {
            kiln_params_free(P);
            break;
        }
        kiln_params_has_grad_mut(P)[0] = 1; /* as a training step would set it */
        for (int64_t i = 0; i < n; i++) {
            if (f64) ((double *)kiln_params_data(P))[i] = p0[i];
            else ((float *)kiln_params_data(P))[i] = (float)p0[i];
        }
        for (int64_t s = 0; s < steps; s++) {
            for (int64_t i = 0; i < n; i++) {
                if (f64) ((double *)kiln_params_grad(P))[i] = g[s * n + i];
                else ((float *)kiln_params_grad(P))[i] = (float)g[s * n + i];
            }
            CHECK_OK(kiln_optim_step(o));
            double e = f64 ? err_d(kiln_params_data(P), pref + s * n, n) : err_f(kiln_params_data(P), pref + s * n, n);
            double tol = f64 ? 1e-6 : TOL_F;
            CHECK_MSG(e <= tol, "%s: kiln_optim (%s) step %lld off by %.3g", fxname, f64 ? "f64" : "f32",
                      (long long)s + 1, e);
        }
        CHECK(kiln_optim_steps(o) == steps);
        kiln_optim_free(o);
        kiln_params_free(P);
    }
    kiln_graph_free(gr);
out:
    kiln_st_close(f);
}

/* ---------- optimizers over several tensors: the decay filter, LAMB, LARS, NovoGrad ---------- */

#define MULTI_MAX 8

typedef struct {
    int n;
    char name[MULTI_MAX][16];
    int ndim[MULTI_MAX];
    int64_t shape[MULTI_MAX][KILN_MAX_DIMS], numel[MULTI_MAX], at[MULTI_MAX]; /* at: into the fixture's concatenation */
    int decays[MULTI_MAX];
} multi_shapes;

/* "w:6x5,b:5,..." and "1,0,..." */
static int parse_multi(const char *text, const char *decays, multi_shapes *m) {
    memset(m, 0, sizeof *m);
    int64_t at = 0;
    for (const char *p = text; p && *p && m->n < MULTI_MAX; m->n++) {
        int k = m->n, len = (int)strcspn(p, ":");
        snprintf(m->name[k], sizeof m->name[k], "%.*s", len, p);
        p += len + 1;
        m->numel[k] = 1;
        while (*p && *p != ',') {
            m->shape[k][m->ndim[k]] = strtoll(p, (char **)&p, 10);
            m->numel[k] *= m->shape[k][m->ndim[k]++];
            if (*p == 'x') p++;
        }
        m->at[k] = at;
        at += m->numel[k];
        m->decays[k] = decays && decays[2 * k] == '1';
        if (*p == ',') p++;
    }
    return (int)at;
}

static hyper read_hyper_multi(kiln_st_file *f, kiln_optim_kind kind) {
    hyper h = {.kind = kind, .lr = fx_meta(f, "lr"), .wd = fx_meta(f, "weight_decay")};
    if (kind == KILN_OPT_SGD || kind == KILN_OPT_LARS) h.momentum = fx_meta(f, "momentum");
    if (kind == KILN_OPT_LARS) h.trust = fx_meta(f, "trust");
    if (kind == KILN_OPT_ADAMW || kind == KILN_OPT_LAMB || kind == KILN_OPT_NOVOGRAD) {
        h.beta1 = fx_meta(f, "beta1");
        h.beta2 = fx_meta(f, "beta2");
        h.eps = fx_meta(f, "eps");
    }
    return h;
}

/* the ref (double) and cpu (float) layer-wise kernels over the fixture's own
 * concatenation: both phases per step, state as the optimizer keeps it */
static void layerwise_kernels(const char *fxname, const hyper *h, const multi_shapes *m, int64_t n, int64_t steps,
                              const double *p0, const double *g, const double *pref) {
    int64_t seg[3 * MULTI_MAX];
    for (int k = 0; k < m->n; k++) seg[3 * k] = m->at[k], seg[3 * k + 1] = m->numel[k], seg[3 * k + 2] = m->decays[k];
    double *p = dbuf(n), *s0 = calloc((size_t)n, 8), *s1 = calloc((size_t)n, 8), rn[2 * MULTI_MAX], fn[2 * MULTI_MAX];
    float *fp = fcopy(p0, n), *fs0 = kiln_calloc((size_t)n * 4), *fs1 = kiln_calloc((size_t)n * 4);
    memcpy(p, p0, (size_t)n * 8);
    for (int64_t i = 0; i < steps; i++) {
        kiln_layerwise_args a = {m->n, seg, h->lr, h->beta1, h->beta2, h->eps, h->wd, h->momentum, h->trust, i + 1, 0, 0, 0};
        const double *gi = g + i * n;
        float *fg = fcopy(gi, n);
        for (int phase = 0; phase < 2; phase++) {
            if (h->kind == KILN_OPT_LAMB) {
                kiln_ref_lamb(&a, phase, p, gi, s0, s1, rn);
                CHECK(kiln_cpu_lamb(&a, phase, fp, fg, fs0, fs1, fn) == 0);
            } else if (h->kind == KILN_OPT_LARS) {
                kiln_ref_lars(&a, phase, p, gi, s0, rn);
                CHECK(kiln_cpu_lars(&a, phase, fp, fg, fs0, fn) == 0);
            } else {
                kiln_ref_novograd(&a, phase, p, gi, s0, s1, rn);
                CHECK(kiln_cpu_novograd(&a, phase, fp, fg, fs0, fs1, fn) == 0);
            }
        }
        kiln_free(fg);
        check_kernel_step(fxname, i, p, fp, pref + i * n, n);
    }
    free(p), free(s0), free(s1);
    kiln_free(fp), kiln_free(fs0), kiln_free(fs1);
}

/* the public API over a graph of the fixture's tensors (kiln's flat buffer pads
 * each to a 64-byte line), f32 and f64; decay_all 1 must change the result */
static void multi_api(const char *fxname, const hyper *h, const multi_shapes *m, int64_t n, int64_t steps,
                      const double *p0, const double *g, const double *pref) {
    kiln_graph *gr = kiln_graph_new();
    for (int k = 0; k < m->n; k++) kiln_param(gr, m->name[k], m->ndim[k], m->shape[k], m->numel[k]);
    CHECK_OK(kiln_graph_status(gr));
    kiln_optim_config oc = kiln_optim_defaults(h->kind);
    oc.lr = (float)h->lr, oc.weight_decay = (float)h->wd, oc.momentum = (float)h->momentum;
    oc.beta1 = (float)h->beta1, oc.beta2 = (float)h->beta2, oc.eps = (float)h->eps, oc.trust = (float)h->trust;
    double *got = dbuf(n);
    for (int run = 0; run < (fast_only ? 1 : 3); run++) { /* f32, f64, f64 with decay_all; simt: f32 (its memory is
                                                                 * the host's, so the buffers below are written in place) */
        int f64 = run > 0;
        oc.decay_all = run == 2;
        kiln_params *P = NULL;
        kiln_optim *o = NULL;
        if (fast_only) CHECK_OK(kiln_params_new_on(gr, fast, &P));
        else CHECK_OK(kiln_params_new(gr, f64 ? KILN_F64 : KILN_F32, &P));
        if (P) CHECK_OK(kiln_optim_new(&oc, P, &o));
        if (!o) {
            kiln_params_free(P);
            break;
        }
        for (int k = 0; k < m->n; k++) {
            kiln_params_has_grad_mut(P)[k] = 1;
            CHECK(kiln_optim_decays(o, k) == (run == 2 || m->decays[k]));
        }
#define PUT(buf, src)                                                                         \
    for (int k = 0; k < m->n; k++)                                                            \
        for (int64_t j = 0; j < m->numel[k]; j++) {                                           \
            int64_t d = kiln_params_offset(P, k) + j;                                         \
            if (f64) ((double *)(buf))[d] = (src)[m->at[k] + j];                              \
            else ((float *)(buf))[d] = (float)(src)[m->at[k] + j];                            \
        }
        PUT(kiln_params_data(P), p0);
        double worst = 0;
        for (int64_t s = 0; s < steps; s++) {
            PUT(kiln_params_grad(P), g + s * n);
            CHECK_OK(kiln_optim_step(o));
            for (int k = 0; k < m->n; k++)
                for (int64_t j = 0; j < m->numel[k]; j++) {
                    int64_t d = kiln_params_offset(P, k) + j;
                    got[m->at[k] + j] = f64 ? ((double *)kiln_params_data(P))[d] : ((float *)kiln_params_data(P))[d];
                }
            double e = err_d(got, pref + s * n, n);
            worst = e > worst ? e : worst;
            if (run < 2)
                CHECK_MSG(e <= (f64 ? 1e-6 : TOL_F), "%s: kiln_optim (%s) step %lld off by %.3g", fxname,
                          f64 ? "f64" : "f32", (long long)s + 1, e);
        }
#undef PUT
        if (run == 2) CHECK_MSG(worst > 1e-4, "%s: decay_all changed nothing (%.3g)", fxname, worst);
        kiln_optim_free(o);
        kiln_params_free(P);
    }
    free(got);
    kiln_graph_free(gr);
}

static void test_optimizer_multi(const char *fxname, kiln_optim_kind kind) {
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    const kiln_tensor *tp0 = fx_get(f, "p0", KILN_F64), *tg = fx_get(f, "g", KILN_F64), *tp = fx_get(f, "p", KILN_F64);
    multi_shapes m;
    int64_t n = parse_multi(kiln_st_meta(f, "shapes"), kiln_st_meta(f, "decays"), &m);
    if (!tp0 || !tg || !tp || !n) goto out;
    int64_t steps = tg->shape[0];
    CHECK(tp0->shape[0] == n && tg->shape[1] == n && tp->shape[0] == steps && steps == 10);
    hyper h = read_hyper_multi(f, kind);
    if (!fast_only && (kind == KILN_OPT_LAMB || kind == KILN_OPT_LARS || kind == KILN_OPT_NOVOGRAD))
        layerwise_kernels(fxname, &h, &m, n, steps, tp0->data, tg->data, tp->data);
    multi_api(fxname, &h, &m, n, steps, tp0->data, tg->data, tp->data);
out:
    kiln_st_close(f);
}

/* kiln_lr_at against the Python transcription (nanoGPT's get_lr, StepLR) */
static void test_lr_schedule(void) {
    kiln_st_file *f = fx_open("lr_schedule.safetensors");
    if (!f) return;
    const char *cases = kiln_st_meta(f, "cases");
    CHECK(cases != NULL);
    for (const char *c = cases; c && *c;) {
        char decay[16] = "";
        double lr, min_lr, gamma;
        long long warmup, total, step_size, per_epoch;
        int used = 0;
        if (sscanf(c, "%15[a-z],%lf,%lf,%lld,%lld,%lf,%lld,%lld%n", decay, &lr, &min_lr, &warmup, &total, &gamma, &step_size,
                   &per_epoch, &used) != 8) {
            CHECK_MSG(0, "lr_schedule: cannot read case '%s'", c);
            break;
        }
        kiln_lr_schedule s = {.lr = (float)lr, .min_lr = (float)min_lr, .warmup = warmup, .total = total,
                              .gamma = (float)gamma, .step_size = step_size};
        CHECK(kiln_lr_decay_parse(decay, &s.decay) == 0);
        char name[32];
        snprintf(name, sizeof name, "lr.%s", decay);
        const kiln_tensor *t = fx_get(f, name, KILN_F64);
        for (int64_t i = 0; t && i < total; i++) {
            /* the config is float: relative 1e-6 */
            double want = ((const double *)t->data)[i], got = kiln_lr_at(&s, i, i / per_epoch);
            CHECK_MSG(fabs(got - want) <= 1e-6 * fabs(want) + 1e-12, "lr_schedule %s: step %lld gives %.9g, want %.9g",
                      decay, (long long)i, got, want);
        }
        c += used;
        while (*c == ' ') c++;
    }
    kiln_st_close(f);
}

/* ---------- the golden mnist-cnn run ---------- */

#define GOLDEN_STEPS 5

/* 5 Adadelta steps on PyTorch's batch; fills losses[] and (fast plan) checks logp0 */
/* steps == 0: one forward only (an inference plan): losses[0] and logp0 */
static int golden_run(kiln_graph *g, const kiln_model *m, kiln_params *P, int reference, int steps,
                      const float *x, const int32_t *y, const float *logp0, double *losses, double *logp0_err) {
    int training = steps > 0;
    if (!training) steps = 1;
    kiln_compile_opts co = kiln_compile_defaults();
    co.training = training;
    co.max_batch = 64;
    co.dropout_off = 1;
    co.autotune = 0;
    co.backend = reference ? "ref" : "cpu";
    kiln_value outs[2] = {m->loss, m->out};
    kiln_plan *plan = NULL;
    CHECK_OK(kiln_compile(g, P, outs, 2, &co, &plan));
    if (!plan) return -1;
    CHECK_OK(kiln_plan_bind(plan, m->x, x));
    CHECK_OK(kiln_plan_bind(plan, m->y, y));
    kiln_optim_config oc = kiln_optim_defaults(KILN_OPT_ADADELTA);
    oc.lr = 1.0f;
    kiln_optim *o = NULL;
    CHECK_OK(kiln_optim_new(&oc, P, &o));
    if (!o) {
        kiln_plan_free(plan);
        return -1;
    }
    for (int s = 0; s < steps; s++) {
        kiln_plan_set_step(plan, (uint64_t)s);
        CHECK_OK(kiln_plan_run(plan, 64));
        losses[s] = kiln_plan_loss(plan); /* before the update, as PyTorch's loss.item() */
        if (s == 0) {
            const void *out = kiln_plan_value(plan, m->out);
            double worst = 0;
            for (int i = 0; i < 64 * 10; i++) {
                double v = reference ? ((const double *)out)[i] : ((const float *)out)[i];
                worst = fmax(worst, fabs(v - logp0[i]) / (fabs((double)logp0[i]) + 1e-3));
            }
            *logp0_err = worst;
        }
        if (training) CHECK_OK(kiln_optim_step(o));
    }
    kiln_optim_free(o);
    kiln_plan_free(plan);
    return 0;
}

static void test_golden(void) {
    const char *fxname = "mnist_golden.safetensors";
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    const kiln_tensor *tx = fx_get(f, "x", KILN_F32), *ty = fx_get(f, "y", KILN_I32), *tl = fx_get(f, "logp0", KILN_F32);
    const double *ref_losses = fx_d(f, "losses");
    CHECK(fx_numel(f, "losses") == GOLDEN_STEPS);
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL, *P64 = NULL;
    kiln_st_file *sd = NULL;
    if (!tx || !ty || !tl || !ref_losses || fx_numel(f, "losses") != GOLDEN_STEPS) goto out;
    CHECK(tx->shape[0] == 64 && ty->shape[0] == 64 && kiln_tensor_numel(tl) == 640);
    CHECK_OK(kiln_model_build(g, "mnist-cnn", &m));
    CHECK_OK(kiln_params_new(g, KILN_F32, &P));
    if (!P) goto out;
    kiln_params_init(P, 99);
    /* PyTorch's initial weights, from a file in the safetensors library's torch layout */
    CHECK_OK(kiln_checkpoint_load_params(P, FX "state_dict_pt.safetensors"));
    sd = fx_open("state_dict_pt.safetensors");
    if (!sd) goto out;
    for (int i = 0; i < kiln_params_count(P); i++) {
        const kiln_tensor *t = fx_get(sd, kiln_params_name(P, i), KILN_F32);
        CHECK_MSG(t && kiln_tensor_numel(t) == kiln_params_numel(P, i) &&
                      memcmp(t->data, (float *)kiln_params_data(P) + kiln_params_offset(P, i), kiln_tensor_nbytes(t)) == 0,
                  "%s not loaded exactly", kiln_params_name(P, i));
    }
    /* the reference plan starts from the same weights, in double */
    CHECK_OK(kiln_params_new(g, KILN_F64, &P64));
    if (!P64) goto out;
    for (int64_t i = 0; i < kiln_params_total(P); i++)
        ((double *)kiln_params_data(P64))[i] = ((const float *)kiln_params_data(P))[i];

    double losses[GOLDEN_STEPS] = {0}, logp0_err = INFINITY;
    if (golden_run(g, &m, P, 0, GOLDEN_STEPS, tx->data, ty->data, tl->data, losses, &logp0_err) == 0) {
        for (int s = 0; s < GOLDEN_STEPS; s++) {
            double e = fabs(losses[s] - ref_losses[s]) / fabs(ref_losses[s]);
            CHECK_MSG(e <= 1e-4, "golden: step %d loss %.8f, PyTorch %.8f (relative error %.3g)", s + 1, losses[s],
                      ref_losses[s], e);
            printf("golden fast step %d: loss %.8f PyTorch %.8f relative error %.2e\n", s + 1, losses[s], ref_losses[s], e);
        }
        CHECK_MSG(logp0_err <= 1e-4, "golden: logp0 off by %.3g", logp0_err);
        printf("golden fast logp0: max relative error %.2e\n", logp0_err);
        /* final weights: float differences compound over 5 steps, so compare loosely */
        static const char *small[] = {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                      "fc1.bias", "fc2.weight", "fc2.bias"};
        for (size_t k = 0; k < sizeof small / sizeof *small; k++) {
            char name[64];
            snprintf(name, sizeof name, "final.%s", small[k]);
            const kiln_tensor *t = fx_get(f, name, KILN_F32);
            int i = kiln_params_find(P, small[k]);
            CHECK(i >= 0);
            if (!t || i < 0 || kiln_tensor_numel(t) != kiln_params_numel(P, i)) continue;
            const float *w = (const float *)kiln_params_data(P) + kiln_params_offset(P, i), *r = t->data;
            double num = 0, den = 0;
            for (int64_t j = 0; j < kiln_tensor_numel(t); j++) {
                num = fmax(num, fabs((double)w[j] - r[j]));
                den = fmax(den, fabs((double)r[j]));
            }
            CHECK_MSG(num <= 1e-3 * den, "golden: final %s off by %.3g of its max %.3g", small[k], num / den, den);
            printf("golden fast final %-13s max error %.2e (relative to max)\n", small[k], num / den);
        }
        int i = kiln_params_find(P, "fc1.weight");
        const double *rsum = fx_d(f, "final_fc1_sum"), *rabs = fx_d(f, "final_fc1_abs_sum");
        const kiln_tensor *rows = fx_get(f, "final.fc1.weight.rows01", KILN_F32);
        if (i >= 0 && rsum && rabs && rows && kiln_tensor_numel(rows) == 2 * 9216) {
            const float *w = (const float *)kiln_params_data(P) + kiln_params_offset(P, i);
            double sum = 0, abs_sum = 0, num = 0, den = 0;
            for (int64_t j = 0; j < kiln_params_numel(P, i); j++) sum += w[j], abs_sum += fabs((double)w[j]);
            for (int64_t j = 0; j < 2 * 9216; j++) {
                num = fmax(num, fabs((double)w[j] - ((const float *)rows->data)[j]));
                den = fmax(den, fabs((double)((const float *)rows->data)[j]));
            }
            /* the sum is a difference of large terms: measure it against the absolute sum */
            double es = fabs(sum - *rsum) / *rabs, ea = fabs(abs_sum - *rabs) / *rabs;
            CHECK_MSG(es <= 1e-4, "golden: final fc1.weight sum %.6f, PyTorch %.6f", sum, *rsum);
            CHECK_MSG(ea <= 1e-4, "golden: final fc1.weight abs sum %.6f, PyTorch %.6f", abs_sum, *rabs);
            CHECK_MSG(num <= 1e-3 * den, "golden: final fc1.weight[:2] off by %.3g of its max", num / den);
            printf("golden fast final fc1.weight: sum %.6f (PyTorch %.6f), abs sum error %.2e, rows 0-1 error %.2e\n",
                   sum, *rsum, ea, num / den);
        }
    }

    /* The double reference plan against PyTorch: the whole golden run (5 steps,
     * ~20 s of naive double kernels). Under sanitizers a forward alone takes a
     * minute, so it is skipped there. KILN_GOLDEN_REF_STEPS=N overrides: -1
     * skips, 0 is the first forward only, 1..5 training steps. */
    int ref_steps = KILN_SANITIZED ? -1 : GOLDEN_STEPS;
    const char *env = getenv("KILN_GOLDEN_REF_STEPS");
    if (env && *env) ref_steps = atoi(env);
    if (ref_steps > GOLDEN_STEPS) ref_steps = GOLDEN_STEPS;
    double rl[GOLDEN_STEPS] = {0}, rerr = INFINITY;
    if (ref_steps < 0) printf("golden reference plan skipped (KILN_GOLDEN_REF_STEPS=0..5 runs it)\n");
    else if (golden_run(g, &m, P64, 1, ref_steps, tx->data, ty->data, tl->data, rl, &rerr) == 0) {
        for (int s = 0; s < (ref_steps ? ref_steps : 1); s++) {
            double e = fabs(rl[s] - ref_losses[s]) / fabs(ref_losses[s]);
            CHECK_MSG(e <= 1e-4, "golden reference: step %d loss %.8f, PyTorch %.8f (relative error %.3g)", s + 1,
                      rl[s], ref_losses[s], e);
            printf("golden reference step %d: loss %.10f PyTorch %.10f relative error %.2e\n", s + 1, rl[s],
                   ref_losses[s], e);
        }
        CHECK_MSG(rerr <= 1e-4, "golden reference: logp0 off by %.3g", rerr);
        printf("golden reference logp0: max relative error %.2e\n", rerr);
    }
out:
    kiln_params_free(P);
    kiln_params_free(P64);
    kiln_graph_free(g);
    kiln_st_close(sd);
    kiln_st_close(f);
}

/* ---------- checkpoints that do not fit ---------- */

static void test_mismatched_checkpoint(void) {
    kiln_st_file *sd = fx_open("state_dict_pt.safetensors");
    if (!sd) return;
    char path[128];
    snprintf(path, sizeof path, "/tmp/kiln_test_fixtures_%d.safetensors", (int)getpid());
    /* a copy of PyTorch's state dict with conv2.weight 5x5 instead of 3x3 */
    int64_t bad_shape[4] = {64, 32, 5, 5};
    float *bad = kiln_calloc((size_t)kiln_shape_numel(4, bad_shape) * 4);
    kiln_st_writer *w = kiln_st_writer_new();
    for (int i = 0; i < kiln_st_count(sd); i++) {
        const kiln_tensor *t = kiln_st_at(sd, i);
        if (strcmp(kiln_st_name(sd, i), "conv2.weight") == 0) CHECK_OK(kiln_st_writer_add(w, "conv2.weight", KILN_F32, 4, bad_shape, bad));
        else CHECK_OK(kiln_st_writer_add(w, kiln_st_name(sd, i), t->dtype, t->ndim, t->shape, t->data));
    }
    CHECK_OK(kiln_st_writer_meta(w, "format", "pt"));
    CHECK_OK(kiln_st_writer_save(w, path));
    kiln_st_writer_free(w);
    kiln_free(bad);

    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    CHECK_OK(kiln_model_build(g, "mnist-cnn", &m));
    CHECK_OK(kiln_params_new(g, KILN_F32, &P));
    if (P) {
        kiln_params_init(P, 5);
        size_t bytes = (size_t)kiln_params_total(P) * 4;
        float *before = malloc(bytes);
        memcpy(before, kiln_params_data(P), bytes);
        kiln_status s = kiln_checkpoint_load_params(P, path);
        const char *msg = kiln_last_error();
        CHECK_MSG(s == KILN_ERR_SHAPE, "load of a 5x5 conv2.weight gave %s: %s", kiln_status_name(s), msg);
        CHECK_MSG(strstr(msg, "conv2.weight") && strstr(msg, "[64, 32, 5, 5]") && strstr(msg, "[64, 32, 3, 3]"),
                  "message should name the tensor and both shapes: %s", msg);
        CHECK_MSG(memcmp(before, kiln_params_data(P), bytes) == 0, "a failed load changed the parameters");
        free(before);
    }
    kiln_params_free(P);
    kiln_graph_free(g);
    unlink(path);

    /* another model's weights: the mlp does not take mnist-cnn's fc1.weight */
    g = kiln_graph_new();
    P = NULL;
    CHECK_OK(kiln_model_build(g, "mlp", &m));
    CHECK_OK(kiln_params_new(g, KILN_F32, &P));
    if (P) {
        kiln_params_init(P, 6);
        size_t bytes = (size_t)kiln_params_total(P) * 4;
        float *before = malloc(bytes);
        memcpy(before, kiln_params_data(P), bytes);
        kiln_status s = kiln_checkpoint_load_params(P, FX "state_dict_pt.safetensors");
        const char *msg = kiln_last_error();
        CHECK_MSG(s == KILN_ERR_SHAPE, "mlp loading mnist-cnn weights gave %s: %s", kiln_status_name(s), msg);
        CHECK_MSG(strstr(msg, "fc1.weight") && strstr(msg, "[128, 9216]") && strstr(msg, "[256, 784]"),
                  "message should name the tensor and both shapes: %s", msg);
        CHECK_MSG(memcmp(before, kiln_params_data(P), bytes) == 0, "a failed load changed the parameters");
        free(before);
    }
    kiln_params_free(P);
    kiln_graph_free(g);
    kiln_st_close(sd);
}

/* clip_grad_norm_ over two parameters, through the public API in f64 and f32 */
static void test_clip(const char *fxname) {
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    const double *ga = fx_d(f, "ga"), *gb = fx_d(f, "gb"), *ca = fx_d(f, "ga_clipped"), *cb = fx_d(f, "gb_clipped");
    const double *total = fx_d(f, "total_norm");
    double max_norm = fx_meta(f, "max_norm");
    if (!ga || !gb || !ca || !cb || !total) {
        kiln_st_close(f);
        return;
    }
    kiln_graph *g = kiln_graph_new();
    kiln_param(g, "a", 1, (int64_t[]){30}, 1);
    kiln_param(g, "b", 2, (int64_t[]){4, 5}, 1);
    for (int f64 = 0; f64 <= 1; f64++) {
        kiln_params *P = NULL;
        CHECK_OK(kiln_params_new(g, f64 ? KILN_F64 : KILN_F32, &P));
        if (!P) break;
        int64_t oa = kiln_params_offset(P, 0), ob = kiln_params_offset(P, 1);
        for (int i = 0; i < 30; i++) {
            if (f64) ((double *)kiln_params_grad(P))[oa + i] = ga[i];
            else ((float *)kiln_params_grad(P))[oa + i] = (float)ga[i];
        }
        for (int i = 0; i < 20; i++) {
            if (f64) ((double *)kiln_params_grad(P))[ob + i] = gb[i];
            else ((float *)kiln_params_grad(P))[ob + i] = (float)gb[i];
        }
        kiln_params_has_grad_mut(P)[0] = kiln_params_has_grad_mut(P)[1] = 1;
        double norm = 0;
        CHECK_OK(kiln_clip_grad_norm(P, max_norm, &norm));
        CHECK_MSG(fabs(norm - *total) <= (f64 ? 1e-12 : 1e-6) * *total, "%s: norm %.12g vs PyTorch %.12g", fxname, norm, *total);
        if (f64) {
            CMP_D("clipped a", (const double *)kiln_params_grad(P) + oa, ca, 30);
            CMP_D("clipped b", (const double *)kiln_params_grad(P) + ob, cb, 20);
        } else {
            CMP_F("clipped a", (const float *)kiln_params_grad(P) + oa, ca, 30);
            CMP_F("clipped b", (const float *)kiln_params_grad(P) + ob, cb, 20);
        }
        kiln_params_free(P);
    }
    kiln_graph_free(g);
    kiln_st_close(f);
}

/* batch_norm2d: the double kernels, and the float kernels in plain NCHW and in
 * the blocked nChw16c layout, against PyTorch's BatchNorm2d (training step,
 * running statistics, gradients, then evaluation with the updated statistics) */
static void to_blocked(const float *x, float *xb, int64_t n, int64_t c, int64_t hw, int back) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t j = 0; j < hw; j++) {
                int64_t p = (i * c + ch) * hw + j, b = ((i * (c / 16) + ch / 16) * hw + j) * 16 + ch % 16;
                if (back) xb[p] = x[b];
                else xb[b] = x[p];
            }
}

static void test_batch_norm2d(void) {
    const char *fxname = "op_batch_norm2d.safetensors";
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    const kiln_tensor *tx = fx_get(f, "x", KILN_F64);
    const double *w = fx_d(f, "weight"), *b = fx_d(f, "bias"), *rm0 = fx_d(f, "running_mean0"), *rv0 = fx_d(f, "running_var0");
    const double *y = fx_d(f, "y"), *dy = fx_d(f, "dy"), *dx = fx_d(f, "dx"), *dw = fx_d(f, "dweight"), *db = fx_d(f, "dbias");
    const double *rm1 = fx_d(f, "running_mean1"), *rv1 = fx_d(f, "running_var1"), *ye = fx_d(f, "y_eval");
    double momentum = fx_meta(f, "momentum"), eps = fx_meta(f, "eps");
    if (!tx || !w || !b || !rm0 || !rv0 || !y || !dy || !dx || !dw || !db || !rm1 || !rv1 || !ye) goto out;
    int64_t n = tx->shape[0], c = tx->shape[1], hw = tx->shape[2] * tx->shape[3], nx = kiln_tensor_numel(tx);
    const double *x = tx->data;
    /* double */
    double *rm = dbuf(c), *rv = dbuf(c), *ry = dbuf(nx), *mean = dbuf(c), *invstd = dbuf(c);
    double *rdx = dbuf(nx), *rdw = dbuf(c), *rdb = dbuf(c);
    memcpy(rm, rm0, (size_t)c * 8);
    memcpy(rv, rv0, (size_t)c * 8);
    CHECK(kiln_ref_batch_norm_fwd(n, c, hw, x, w, b, rm, rv, momentum, eps, 1, ry, mean, invstd, NULL) == 0);
    CMP_D("y", ry, y, nx);
    CMP_D("running_mean", rm, rm1, c);
    CMP_D("running_var", rv, rv1, c);
    kiln_ref_batch_norm_bwd(n, c, hw, x, dy, w, mean, invstd, rdx, rdw, rdb, 0, 0, 0, NULL);
    CMP_D("dx", rdx, dx, nx);
    CMP_D("dweight", rdw, dw, c);
    CMP_D("dbias", rdb, db, c);
    CHECK(kiln_ref_batch_norm_fwd(n, c, hw, x, w, b, rm, rv, momentum, eps, 0, ry, NULL, NULL, NULL) == 0);
    CMP_D("y (eval)", ry, ye, nx);
    /* float, plain and blocked */
    float *fx_ = fcopy(x, nx), *fw = fcopy(w, c), *fb = fcopy(b, c), *fdy = fcopy(dy, nx), *xb = fbuf(nx), *dyb = fbuf(nx);
    to_blocked(fx_, xb, n, c, hw, 0);
    to_blocked(fdy, dyb, n, c, hw, 0);
    for (int blocked = 0; blocked <= 16; blocked += 16) {
        float *frm = fcopy(rm0, c), *frv = fcopy(rv0, c), *fy = fbuf(nx), *fm = fbuf(c), *fi = fbuf(c), *out = fbuf(nx);
        float *fdx = fbuf(nx), *fdw = fbuf(c), *fdb = fbuf(c);
        const float *in = blocked ? xb : fx_, *g = blocked ? dyb : fdy;
        CHECK(kiln_cpu_batch_norm_fwd(n, c, hw, blocked, in, fw, fb, frm, frv, (float)momentum, (float)eps, 1, 0, fy, fm, fi, NULL, NULL) == 0);
        if (blocked) to_blocked(fy, out, n, c, hw, 1);
        CMP_F(blocked ? "y (blocked)" : "y", blocked ? out : fy, y, nx);
        CMP_F("running_mean", frm, rm1, c);
        CMP_F("running_var", frv, rv1, c);
        kiln_cpu_batch_norm_bwd(n, c, hw, blocked, in, g, fw, fm, fi, fdx, fdw, fdb, 0, 0, 0, NULL, NULL);
        if (blocked) to_blocked(fdx, out, n, c, hw, 1);
        CMP_F(blocked ? "dx (blocked)" : "dx", blocked ? out : fdx, dx, nx);
        CMP_F("dweight", fdw, dw, c);
        CMP_F("dbias", fdb, db, c);
        CHECK(kiln_cpu_batch_norm_fwd(n, c, hw, blocked, in, fw, fb, frm, frv, (float)momentum, (float)eps, 0, 0, fy, NULL, NULL, NULL, NULL) == 0);
        if (blocked) to_blocked(fy, out, n, c, hw, 1);
        CMP_F(blocked ? "y eval (blocked)" : "y eval", blocked ? out : fy, ye, nx);
        kiln_free(frm), kiln_free(frv), kiln_free(fy), kiln_free(fm), kiln_free(fi), kiln_free(out);
        kiln_free(fdx), kiln_free(fdw), kiln_free(fdb);
    }
    kiln_free(fx_), kiln_free(fw), kiln_free(fb), kiln_free(fdy), kiln_free(xb), kiln_free(dyb);
    free(rm), free(rv), free(ry), free(mean), free(invstd), free(rdx), free(rdw), free(rdb);
out:
    kiln_st_close(f);
}

/* fixture tensors keys[i] into the parameter or buffer names[i] of P (doubles on ref, else floats) */
static void fx_fill(kiln_params *P, kiln_st_file *f, const char *const *names, const char *const *keys, int n, int ref) {
    for (int i = 0; P && i < n; i++) {
        int p = kiln_params_find(P, names[i]), bi = kiln_params_buffer_find(P, names[i]);
        const double *v = fx_d(f, keys[i]);
        int64_t m = p >= 0 ? kiln_params_numel(P, p) : bi >= 0 ? kiln_params_buffer_numel(P, bi) : 0;
        char *dst = p >= 0 ? (char *)kiln_params_data(P) + kiln_params_offset(P, p) * (ref ? 8 : 4)
                           : bi >= 0 ? kiln_params_buffer_data(P, bi) : NULL;
        for (int64_t j = 0; dst && v && j < m; j++) {
            if (ref) ((double *)dst)[j] = v[j];
            else ((float *)dst)[j] = (float)v[j];
        }
    }
}

/* bn_fold against PyTorch's fuse_conv_bn_weights: both kernels (with the
 * conv's bias and without), then conv -> batch norm in evaluation compiled
 * with the fold pass on ref and cpu plans against PyTorch's unfolded output */
static void fold_plan(kiln_st_file *f, const char *fxname, int bias, const char *backend) {
    const kiln_tensor *tx = fx_get(f, "x", KILN_F64), *tw = fx_get(f, "w", KILN_F64);
    const double *y = fx_d(f, bias ? "y" : "y_nobias");
    if (!tx || !tw || !y) return;
    int64_t k = tw->shape[0];
    kiln_graph *g = kiln_graph_new();
    kiln_value x = kiln_param(g, "x", 4, tx->shape, 1); /* a parameter: the ref plan gets it in double */
    kiln_value out = kiln_nn_batch_norm2d(g, "bn", kiln_nn_conv2d(g, "conv", x, tx->shape[1], k, 3, 1, 1, bias), k);
    kiln_params *P = NULL;
    CHECK_OK(kiln_params_new_on(g, backend, &P));
    if (!P) {
        kiln_graph_free(g);
        return;
    }
    static const char *names[7] = {"x", "conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"};
    static const char *keys[7] = {"x", "w", "b", "weight", "bias", "running_mean", "running_var"};
    int ref = strcmp(backend, "ref") == 0;
    fx_fill(P, f, names, keys, 7, ref);
    kiln_compile_opts o = kiln_compile_defaults();
    o.autotune = 0;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_compile(g, P, &out, 1, &o, &pl));
    int64_t n = fx_numel(f, bias ? "y" : "y_nobias");
    char desc[2048];
    if (pl) {
        kiln_plan_describe(pl, desc, sizeof desc);
        CHECK_MSG(strstr(desc, "bn_fold") && !strstr(desc, "batch_norm2d"), "%s: not folded:\n%s", fxname, desc);
        CHECK_OK(kiln_plan_run(pl, o.max_batch));
        const void *got = kiln_plan_value(pl, out);
        if (ref) CMP_D(bias ? "folded plan" : "folded plan (no conv bias)", (const double *)got, y, n);
        else CMP_F(bias ? "folded plan" : "folded plan (no conv bias)", (const float *)got, y, n);
    }
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
}

static void test_bn_fold(void) {
    const char *fxname = "op_bn_fold.safetensors";
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    const kiln_tensor *tw = fx_get(f, "w", KILN_F64);
    const double *w = fx_d(f, "w"), *b = fx_d(f, "b"), *gamma = fx_d(f, "weight"), *beta = fx_d(f, "bias");
    const double *mean = fx_d(f, "running_mean"), *var = fx_d(f, "running_var"), *wf = fx_d(f, "w_fold");
    const double *bf = fx_d(f, "b_fold"), *bf0 = fx_d(f, "b_fold_nobias");
    double eps = fx_meta(f, "eps");
    if (!tw || !w || !b || !gamma || !beta || !mean || !var || !wf || !bf || !bf0) goto out;
    int64_t k = tw->shape[0], nw = kiln_tensor_numel(tw), per = nw / k;
    for (int bias = 1; bias >= 0; bias--) {
        double *rw = dbuf(nw), *rb = dbuf(k);
        kiln_ref_bn_fold(k, per, w, bias ? b : NULL, gamma, beta, mean, var, eps, rw, rb);
        CMP_D("folded weight", rw, wf, nw);
        CMP_D(bias ? "folded bias" : "folded bias (no conv bias)", rb, bias ? bf : bf0, k);
        float *fw = fcopy(w, nw), *fb = fcopy(b, k), *fg = fcopy(gamma, k), *fbe = fcopy(beta, k), *fm = fcopy(mean, k);
        float *fv = fcopy(var, k), *ow = fbuf(nw), *ob = fbuf(k);
        kiln_cpu_bn_fold(k, per, fw, bias ? fb : NULL, fg, fbe, fm, fv, (float)eps, ow, ob);
        CMP_F("folded weight", ow, wf, nw);
        CMP_F(bias ? "folded bias" : "folded bias (no conv bias)", ob, bias ? bf : bf0, k);
        /* the scales alone (for kiln's Winograd, which multiplies as it reads): w * scale is the fold's bits */
        float *sc = fbuf(k), *sb = fbuf(k);
        kiln_cpu_bn_fold_scale(k, bias ? fb : NULL, fg, fbe, fm, fv, (float)eps, sc, sb);
        int same = !memcmp(sb, ob, (size_t)k * sizeof(float));
        for (int64_t i = 0; i < nw; i++) same &= fw[i] * sc[i / per] == ow[i];
        CHECK_MSG(same, "%s: bias %d: the fold's scales times w are not its folded weight", fxname, bias);
        kiln_free(sc), kiln_free(sb);
        free(rw), free(rb);
        kiln_free(fw), kiln_free(fb), kiln_free(fg), kiln_free(fbe), kiln_free(fm), kiln_free(fv), kiln_free(ow), kiln_free(ob);
        fold_plan(f, fxname, bias, "ref");
        fold_plan(f, fxname, bias, "cpu");
    }
out:
    kiln_st_close(f);
}

/* conv2d_add against PyTorch: relu(conv(x) + relu(r0)) (and without the last relu) compiled
 * as an inference plan, where the residual fusion pass makes one conv2d_add of the conv and
 * the add (the conv writing into relu(r0)'s storage), on the ref and the cpu backend */
static void conv_add_plan(kiln_st_file *f, int relu, const char *backend) {
    const char *fxname = "op_conv2d_add.safetensors";
    const kiln_tensor *tx = fx_get(f, "x", KILN_F64), *tw = fx_get(f, "w", KILN_F64), *tr = fx_get(f, "r0", KILN_F64);
    const double *y = fx_d(f, relu ? "y" : "y_norelu");
    if (!tx || !tw || !tr || !y) return;
    kiln_graph *g = kiln_graph_new();
    kiln_value x = kiln_param(g, "x", 4, tx->shape, 1), r0 = kiln_param(g, "r0", 4, tr->shape, 1);
    kiln_value z = kiln_add(g, kiln_nn_conv2d(g, "conv", x, tx->shape[1], tw->shape[0], 3, 1, 1, 1), kiln_relu(g, r0));
    kiln_value out = relu ? kiln_relu(g, z) : z;
    kiln_params *P = NULL;
    CHECK_OK(kiln_params_new_on(g, backend, &P));
    int ref = strcmp(backend, "ref") == 0;
    static const char *names[4] = {"x", "conv.weight", "conv.bias", "r0"}, *keys[4] = {"x", "w", "b", "r0"};
    fx_fill(P, f, names, keys, 4, ref);
    kiln_compile_opts o = kiln_compile_defaults();
    o.autotune = 0;
    o.max_batch = tx->shape[0];
    kiln_plan *pl = NULL;
    if (P) CHECK_OK(kiln_compile(g, P, &out, 1, &o, &pl));
    char desc[2048];
    if (pl) {
        kiln_plan_describe(pl, desc, sizeof desc);
        CHECK_MSG(strstr(desc, "conv2d_add") && !strstr(desc, " add"), "%s (%s): not fused:\n%s", fxname, backend, desc);
        CHECK_OK(kiln_plan_run(pl, o.max_batch));
        const void *got = kiln_plan_value(pl, out);
        int64_t n = fx_numel(f, relu ? "y" : "y_norelu");
        if (ref) CMP_D(relu ? "conv2d_add + relu" : "conv2d_add", (const double *)got, y, n);
        else CMP_F(relu ? "conv2d_add + relu" : "conv2d_add", (const float *)got, y, n);
    }
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
}

static void test_conv2d_add(void) {
    kiln_st_file *f = fx_open("op_conv2d_add.safetensors");
    if (!f) return;
    for (int relu = 0; relu < 2; relu++) {
        conv_add_plan(f, relu, "ref");
        conv_add_plan(f, relu, "cpu");
    }
    kiln_st_close(f);
}

/* ---------- transformer ops through graphs, both backends ---------- */

/* A graph whose parameters are filled from the fixture tensors of the same
 * names; "y" is the op's output, the loss sum(y * dy), and each parameter p
 * with a fixture tensor "d<p>" has its gradient checked. Token ids come from
 * the fixture's i32 "idx" (bound as i32, or as f32 holding integers). */
typedef struct {
    kiln_graph *g;
    kiln_st_file *f;
    kiln_value ids;
    int ids_f32;
    const char *extra[2]; /* further outputs checked against the fixture tensors of these names */
    kiln_value extra_val[2];
} fx_graph;

typedef kiln_value (*fx_build)(fx_graph *x);

static kiln_value fxg_param(fx_graph *x, const char *name) {
    const kiln_tensor *t = fx_get(x->f, name, KILN_F64);
    return t ? kiln_param(x->g, name, t->ndim, t->shape, 1) : -1;
}

static kiln_value fxg_ids(fx_graph *x) {
    const kiln_tensor *t = fx_get(x->f, "idx", KILN_I32);
    return x->ids = t ? kiln_input(x->g, "idx", x->ids_f32 ? KILN_F32 : KILN_I32, t->ndim, t->shape) : -1;
}

/* v's values after the run against the fixture tensor `name` */
static void fxg_check_value(const char *fxname, kiln_st_file *f, kiln_plan *pl, kiln_value v, const char *name, int ref) {
    int64_t n = fx_numel(f, name);
    const double *want = fx_d(f, name);
    if (!want) return;
    if (ref) {
        CMP_D(name, (const double *)kiln_plan_value(pl, v), want, n);
        return;
    }
    float *got = fbuf(n);
    CHECK_OK(kiln_plan_read(pl, v, got, n));
    CMP_F(name, got, want, n);
    kiln_free(got);
}

/* every parameter from its fixture tensor (the exact doubles on ref) */
static void fxg_fill(kiln_st_file *f, kiln_params *P, int ref) {
    int64_t total = kiln_params_total(P);
    double *pd = calloc((size_t)total + 1, sizeof *pd);
    for (int i = 0; i < kiln_params_count(P); i++) {
        const double *v = fx_d(f, kiln_params_name(P, i));
        if (v) memcpy(pd + kiln_params_offset(P, i), v, (size_t)kiln_params_numel(P, i) * 8);
    }
    float *pf = fcopy(pd, total + 1);
    if (ref) memcpy(kiln_params_data(P), pd, (size_t)total * 8);
    else CHECK_OK(kiln_params_write(P, pf));
    free(pd);
    kiln_free(pf);
}

/* the gradient of every parameter p that has a fixture tensor "d<p>" */
static void fxg_check_grads(const char *fxname, kiln_st_file *f, kiln_params *P, int ref) {
    float *g = fbuf(kiln_params_total(P) + 1);
    if (!ref) CHECK_OK(kiln_params_grad_read(P, g));
    for (int i = 0; i < kiln_params_count(P); i++) {
        char dname[128];
        snprintf(dname, sizeof dname, "d%s", kiln_params_name(P, i));
        if (!kiln_st_find(f, dname)) continue;
        int64_t off = kiln_params_offset(P, i), n = kiln_params_numel(P, i);
        if (ref) CMP_D(dname, (const double *)kiln_params_grad(P) + off, fx_d(f, dname), n);
        else CMP_F(dname, g + off, fx_d(f, dname), n);
    }
    kiln_free(g);
}

static void fxg_run(const char *fxname, kiln_st_file *f, fx_build build, int ids_f32, const char *backend) {
    int ref = !strcmp(backend, "ref");
    fx_graph x = {.g = kiln_graph_new(), .f = f, .ids = -1, .ids_f32 = ids_f32};
    kiln_value y = build(&x), dy = fxg_param(&x, "dy");
    kiln_value outs[4] = {kiln_sum(x.g, kiln_mul(x.g, y, dy)), y, x.extra_val[0], x.extra_val[1]};
    int nout = 2 + (x.extra[0] != NULL) + (x.extra[1] != NULL);
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    CHECK_MSG(kiln_graph_status(x.g) == KILN_OK, "%s: %s", fxname, kiln_last_error());
    if (kiln_graph_status(x.g) == KILN_OK) CHECK_OK(kiln_params_new_on(x.g, backend, &P));
    if (P) {
        fxg_fill(f, P, ref);
        kiln_compile_opts o = kiln_compile_defaults();
        o.training = 1;
        o.max_batch = 1;
        o.backend = backend;
        o.autotune = 0;
        CHECK_OK(kiln_compile(x.g, P, outs, nout, &o, &pl));
    }
    const kiln_tensor *tid = x.ids >= 0 ? fx_get(f, "idx", KILN_I32) : NULL;
    float *fid = tid ? fbuf(kiln_tensor_numel(tid)) : NULL;
    for (int64_t i = 0; fid && i < kiln_tensor_numel(tid); i++) fid[i] = (float)((const int32_t *)tid->data)[i];
    if (pl && tid) CHECK_OK(kiln_plan_bind(pl, x.ids, ids_f32 ? (const void *)fid : tid->data));
    if (pl && kiln_plan_run(pl, 1) == KILN_OK) {
        fxg_check_value(fxname, f, pl, y, "y", ref);
        for (int k = 0; k < 2 && x.extra[k]; k++) fxg_check_value(fxname, f, pl, x.extra_val[k], x.extra[k], ref);
        fxg_check_grads(fxname, f, P, ref);
    } else if (pl) CHECK_MSG(0, "%s on %s: %s", fxname, backend, kiln_last_error());
    kiln_free(fid);
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(x.g);
}

/* both backends; with token ids, both dtypes */
static void test_graph_fixture(const char *fxname, fx_build build, int has_ids) {
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    for (int f32 = 0; f32 <= has_ids; f32++) {
        if (!fast_only) fxg_run(fxname, f, build, f32, "ref");
        fxg_run(fxname, f, build, f32, fast);
    }
    kiln_st_close(f);
}

static kiln_value build_embedding(fx_graph *x) { return kiln_embedding(x->g, fxg_ids(x), fxg_param(x, "wte.weight")); }

/* through kiln_nn_layer_norm, as the GPT calls it: its parameters carry PyTorch's names, the node its layer's */
static kiln_value build_layer_norm(fx_graph *x) {
    const kiln_tensor *tx = fx_get(x->f, "x", KILN_F64);
    kiln_value y = kiln_nn_layer_norm(x->g, "h.0.ln_1", fxg_param(x, "x"), tx ? tx->shape[tx->ndim - 1] : 1);
    int node = y >= 0 && x->g->nodes[x->g->nnodes - 1].out[0] == y ? x->g->nnodes - 1 : -1; /* the node just made */
    CHECK_MSG(node >= 0 && !strcmp(x->g->nodes[node].name, "h.0.ln_1"), "layer norm node named '%s'",
              node >= 0 ? x->g->nodes[node].name : "?");
    x->extra[0] = "mean", x->extra[1] = "rstd";
    x->extra_val[0] = node >= 0 ? x->g->nodes[node].out[1] : -1;
    x->extra_val[1] = node >= 0 ? x->g->nodes[node].out[2] : -1;
    return y;
}

static kiln_value build_gelu(fx_graph *x) { return kiln_gelu(x->g, fxg_param(x, "x"), (int)fx_meta(x->f, "tanh_form")); }
static kiln_value build_softmax(fx_graph *x) { return kiln_softmax(x->g, fxg_param(x, "x")); }
static kiln_value build_add_bcast(fx_graph *x) { return kiln_add(x->g, fxg_param(x, "a"), fxg_param(x, "b")); }

/* kiln_cross_entropy_masked through a plan on both backends: the -1 targets
 * pass the backend's target check and are left out of the mean and gradient */
static void test_masked_loss_graph(const char *fxname) {
    kiln_st_file *f = fx_open(fxname);
    if (!f) return;
    const kiln_tensor *tl = fx_get(f, "logits", KILN_F64), *tt = fx_get(f, "target", KILN_I32);
    const double *loss = fx_d(f, "loss"), *dref = fx_d(f, "dlogits");
    for (int ref = 0; ref < (fast_only ? 1 : 2) && tl && tt && loss && dref; ref++) {
        kiln_graph *g = kiln_graph_new();
        kiln_value x = kiln_param(g, "logits", 2, tl->shape, 1);
        kiln_value y = kiln_input(g, "y", KILN_I32, 2, (int64_t[]){1, tl->shape[0]});
        kiln_value l = kiln_cross_entropy_masked(g, kiln_reshape(g, x, 3, (int64_t[]){1, tl->shape[0], tl->shape[1]}), y);
        kiln_params *P = NULL;
        kiln_plan *pl = NULL;
        CHECK_OK(kiln_params_new_on(g, ref ? "ref" : fast, &P));
        if (P) fxg_fill(f, P, ref);
        kiln_compile_opts o = kiln_compile_defaults();
        o.training = 1;
        o.max_batch = 1;
        o.autotune = 0;
        if (P) CHECK_OK(kiln_compile(g, P, &l, 1, &o, &pl));
        if (pl && kiln_plan_bind(pl, y, tt->data) == KILN_OK && kiln_plan_run(pl, 1) == KILN_OK) {
            double got = kiln_plan_loss(pl);
            CHECK_MSG(fabs(got - *loss) <= (ref ? 1e-12 : 1e-5) * fabs(*loss), "%s on %s: loss %.9g, PyTorch %.9g", fxname,
                      ref ? "ref" : fast, got, *loss);
            int64_t n = kiln_tensor_numel(tl);
            if (ref) CMP_D("dlogits", (const double *)kiln_params_grad(P), dref, n);
            else {
                float *gd = fbuf(kiln_params_total(P));
                CHECK_OK(kiln_params_grad_read(P, gd));
                CMP_F("dlogits", gd, dref, n);
                kiln_free(gd);
            }
        } else CHECK_MSG(0, "%s: %s", fxname, kiln_last_error());
        /* a -2 target is no padding: refused naming the target */
        int32_t bad[64];
        memcpy(bad, tt->data, (size_t)tl->shape[0] * 4);
        bad[2] = -2;
        if (pl) {
            kiln_plan_bind(pl, y, bad);
            CHECK_MSG(kiln_plan_run(pl, 1) == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "-2"), "%s", kiln_last_error());
        }
        kiln_plan_free(pl);
        kiln_params_free(P);
        kiln_graph_free(g);
    }
    kiln_st_close(f);
}

/* the transformer ops' fixtures through plans (on ref and fast) */
static void transformer_fixtures(void) {
    test_graph_fixture("op_embedding.safetensors", build_embedding, 1);
    test_graph_fixture("op_layer_norm.safetensors", build_layer_norm, 0);
    test_graph_fixture("op_gelu.safetensors", build_gelu, 0);
    test_graph_fixture("op_gelu_tanh.safetensors", build_gelu, 0);
    test_graph_fixture("op_softmax.safetensors", build_softmax, 0);
    test_graph_fixture("op_add_bcast.safetensors", build_add_bcast, 0);
}

/* the optimizers over several tensors: the decay filter, LAMB, LARS, NovoGrad */
static void optimizer_multi_fixtures(void) {
    test_optimizer_multi("op_adamw_groups.safetensors", KILN_OPT_ADAMW);
    test_optimizer_multi("op_sgd_groups.safetensors", KILN_OPT_SGD);
    test_optimizer_multi("op_lamb.safetensors", KILN_OPT_LAMB);
    test_optimizer_multi("op_lars.safetensors", KILN_OPT_LARS);
    test_optimizer_multi("op_novograd.safetensors", KILN_OPT_NOVOGRAD);
}

/* PyTorch's fixtures through plans on simt (the CUDA backend's kernels on the host, tests/simt/) */
static void simt_fixtures(void) {
    CHECK_OK(kiln_test_simt_register());
    fast = "simt", fast_only = 1;
    static const struct { const char *fx; one_input_fn build; } one[] = {
        {"op_affine.safetensors", build_affine}, {"op_erf.safetensors", build_erf}, {"op_tanh.safetensors", build_tanh},
        {"op_gelu_chain.safetensors", build_gelu_chain}, {"op_avg_pool2d.safetensors", build_avg_pool},
        {"op_avg_pool2d_exclude_pad.safetensors", build_avg_pool}, {"op_adaptive_avg_pool2d.safetensors", build_adaptive},
        {"op_adaptive_avg_pool2d_global.safetensors", build_adaptive}, {"op_shortcut_a.safetensors", build_shortcut},
        {"op_subsample_pad.safetensors", build_subsample_pad}, {"op_subsample_pad.safetensors", build_subsample_chain},
        {"op_max_pool2d_k3s2p1.safetensors", build_max_pool}};
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) test_one_input(one[i].fx, one[i].build);
    test_masked_loss_graph("op_cross_entropy_masked.safetensors");
    static const char *attn[] = {"op_causal_attention.safetensors", "op_causal_attention_d64.safetensors",
                                 "op_causal_attention_d40.safetensors"};
    for (int i = 0; i < 3; i++) {
        kiln_st_file *f = fx_open(attn[i]);
        if (f) {
            attention_batched(attn[i], f, fast);
            kiln_st_close(f);
        }
        test_one_input(attn[i], build_attention);
    }
    transformer_fixtures();
    optimizer_multi_fixtures();
    fast = "cpu", fast_only = 0;
}

int main(void) {
    test_clip("op_clip_grad_norm.safetensors");
    test_clip("op_clip_grad_norm_noop.safetensors");
    test_conv2d("op_conv2d_a.safetensors");
    test_conv2d("op_conv2d_b.safetensors");
    test_conv2d("op_conv2d_c.safetensors");
    test_conv2d("op_conv2d_d.safetensors");
    test_conv2d("op_conv2d_grouped.safetensors");
    test_conv2d("op_conv2d_depthwise.safetensors");
    test_linear("op_linear.safetensors", 0);
    test_linear("op_matmul.safetensors", 1);
    test_one_input("op_affine.safetensors", build_affine);
    test_one_input("op_erf.safetensors", build_erf);
    test_one_input("op_tanh.safetensors", build_tanh);
    test_one_input("op_gelu_chain.safetensors", build_gelu_chain);
    test_one_input("op_avg_pool2d.safetensors", build_avg_pool);
    test_one_input("op_avg_pool2d_exclude_pad.safetensors", build_avg_pool);
    test_one_input("op_adaptive_avg_pool2d.safetensors", build_adaptive);
    test_one_input("op_adaptive_avg_pool2d_global.safetensors", build_adaptive);
    test_one_input("op_shortcut_a.safetensors", build_shortcut);
    test_one_input("op_subsample_pad.safetensors", build_subsample_pad);
    test_one_input("op_subsample_pad.safetensors", build_subsample_chain);
    test_bmm();
    test_causal_attention("op_causal_attention.safetensors");
    test_causal_attention("op_causal_attention_d64.safetensors");
    test_causal_attention("op_causal_attention_d40.safetensors");
    test_unary("op_relu.safetensors", OP_RELU);
    test_unary("op_max_pool2d.safetensors", OP_POOL);
    test_unary("op_max_pool2d_k3s2.safetensors", OP_POOL);
    test_unary("op_max_pool2d_k3s2p1.safetensors", OP_POOL);
    test_one_input("op_max_pool2d_k3s2p1.safetensors", build_max_pool);
    test_unary("op_log_softmax.safetensors", OP_LOGSOFTMAX);
    test_unary("op_log_softmax_wide.safetensors", OP_LOGSOFTMAX); /* 37 classes: the row loops' 16 lanes and their tail */
    test_loss("op_nll_loss.safetensors", 0);
    test_loss("op_nll_loss_dloss.safetensors", 0);
    test_loss("op_cross_entropy.safetensors", 1);
    test_loss("op_cross_entropy_wide.safetensors", 1); /* 41 classes: the row loops' 16 lanes and their tail */
    test_loss("op_cross_entropy_masked.safetensors", 1);
    test_masked_loss_graph("op_cross_entropy_masked.safetensors");
    test_mse_loss();
    test_binary("op_add.safetensors", 0);
    test_binary("op_mul.safetensors", 1);
    test_batch_norm2d();
    test_bn_fold();
    test_conv2d_add();
    transformer_fixtures();
    test_optimizer("op_sgd.safetensors", KILN_OPT_SGD);
    test_optimizer("op_adamw.safetensors", KILN_OPT_ADAMW);
    test_optimizer("op_adadelta.safetensors", KILN_OPT_ADADELTA);
    optimizer_multi_fixtures();
    test_lr_schedule();
    test_golden();
    test_mismatched_checkpoint();
    simt_fixtures();
    return tu_finish("test_fixtures");
}
