/* The pointwise fusion pass (src/graph/pass_fuse_pointwise.c), with and without it:
 *   - a property test: random DAGs of pointwise ops (relu, add, mul, affine,
 *     erf, tanh, gelu, dropout) over random shapes (tails of tiles included),
 *     several values returned, a loss over them; forward and backward
 *     compiled with fusion on and off on the cpu backend and on the reference
 *     backend: outputs the same bits fused and unfused (dropout's masks
 *     included), gradients equal within fp32 rounding, and both within the
 *     reference's tolerance. Fusion must actually happen in most DAGs;
 *   - the guide's GELU written as five nodes compiles to one step (five
 *     without the pass), forward and backward one fused kernel each, and the
 *     step's description names the group's members (kiln inspect). */
#include "graph/internal/plan.h"
#include "kiln/graph.h"
#include "testutil.h"

typedef struct {
    kiln_graph *g;
    kiln_value out[6], c[6];
    int nout;
} dag;

enum { N_OPS = 8 };

/* a random DAG of n pointwise nodes over parameters of shape [rows, cols] */
static void make_dag(dag *d, int64_t rows, int64_t cols, int n) {
    kiln_graph *g = d->g = kiln_graph_new();
    int64_t shape[2] = {rows, cols};
    kiln_value vals[64];
    int nv = 0, nparams = (int)tu_int(1, 3);
    for (int p = 0; p < nparams; p++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", p);
        vals[nv++] = kiln_param(g, name, 2, shape, 1);
    }
    for (int i = 0; i < n; i++) {
        kiln_value a = vals[tu_int(nv > 4 ? nv - 4 : 0, nv - 1)], b = vals[tu_int(0, nv - 1)], y = -1;
        switch (tu_int(0, N_OPS - 1)) { /* a test's choice of builder, not an op table */
        case 0: y = kiln_relu(g, a); break;
        case 1: y = kiln_add(g, a, b); break;
        case 2: y = kiln_mul(g, a, b); break;
        case 3: y = kiln_affine(g, a, (float)tu_uniform(-1.5, 1.5), (float)tu_uniform(-1, 1)); break;
        case 4: y = kiln_erf(g, a); break;
        case 5: y = kiln_tanh(g, a); break;
        case 6: y = kiln_gelu(g, a, (int)tu_int(0, 1)); break;
        default: y = kiln_dropout(g, a, 0.2f); break;
        }
        vals[nv++] = y;
    }
    d->nout = 0;
    d->out[d->nout++] = vals[nv - 1];
    for (int k = 0; k < 2; k++) { /* a couple of intermediates returned too: outputs of a group */
        kiln_value v = vals[tu_int(nparams, nv - 1)];
        int dup = 0;
        for (int j = 0; j < d->nout; j++) dup |= d->out[j] == v;
        if (!dup) d->out[d->nout++] = v;
    }
}

typedef struct {
    kiln_plan *pl;
    kiln_params *P;
    float **c;
} run;

/* loss = sum_k sum(out_k * c_k), the c_k inputs bound to data */
static kiln_value add_loss(dag *d) {
    kiln_value loss = -1;
    for (int k = 0; k < d->nout; k++) {
        char name[16];
        int64_t s[2];
        snprintf(name, sizeof name, "c%d", k);
        kiln_value_shape(d->g, d->out[k], s);
        d->c[k] = kiln_input(d->g, name, KILN_F32, 2, s);
        kiln_value t = kiln_sum(d->g, kiln_mul(d->g, d->out[k], d->c[k]));
        loss = loss < 0 ? t : kiln_add(d->g, loss, t);
    }
    return loss;
}

static int count_fused(const kiln_plan *pl) {
    int n = 0;
    for (int i = 0; i < kiln_plan_step_count(pl); i++) {
        kiln_step_info si;
        if (kiln_plan_step_info(pl, i, &si) == KILN_OK && !strcmp(si.op, "fused")) n++;
    }
    return n;
}

/* members the cpu backend folded into other members' vector passes ("3 passes for 7 members", kiln inspect) */
static int count_folded(const kiln_plan *pl) {
    int n = 0;
    for (int i = 0; i < kiln_plan_step_count(pl); i++) {
        kiln_step_info si;
        int passes, members;
        if (kiln_plan_step_info(pl, i, &si) == KILN_OK && !strncmp(si.op, "fused", 5) &&
            sscanf(si.kernel, "%d pass%*s for %d members", &passes, &members) == 2)
            n += members - passes;
    }
    return n;
}

/* the cpu backend folds programs into vector passes on AVX-512 and AVX2 CPUs */
static int has_vector_passes(void) {
#if defined(__GNUC__) && defined(__x86_64__)
    return __builtin_cpu_supports("avx512f") || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
#else
    return 0;
#endif
}

static void compile_run(dag *d, kiln_value loss, const char *backend, int fuse, const float *p0, float **cdata, run *r) {
    CHECK_OK(kiln_params_new_on(d->g, backend, &r->P));
    kiln_params_init(r->P, 1);
    if (!strcmp(backend, "ref")) {
        double *pd = kiln_params_data(r->P);
        for (int k = 0; k < kiln_params_count(r->P); k++)
            for (int64_t i = 0; i < kiln_params_numel(r->P, k); i++) pd[kiln_params_offset(r->P, k) + i] = p0[k * 100000 + i];
    } else {
        float *pf = kiln_params_data(r->P);
        for (int k = 0; k < kiln_params_count(r->P); k++)
            for (int64_t i = 0; i < kiln_params_numel(r->P, k); i++) pf[kiln_params_offset(r->P, k) + i] = p0[k * 100000 + i];
    }
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = 1;
    o.backend = backend;
    o.fuse = fuse;
    o.autotune = 0;
    kiln_value outs[7] = {loss};
    for (int k = 0; k < d->nout; k++) outs[1 + k] = d->out[k];
    CHECK_OK(kiln_compile(d->g, r->P, outs, 1 + d->nout, &o, &r->pl));
    if (!r->pl) return;
    for (int k = 0; k < d->nout; k++) kiln_plan_bind(r->pl, d->c[k], cdata[k]);
    kiln_plan_set_step(r->pl, 7);
    CHECK_OK(kiln_plan_run(r->pl, 1));
}

/* max |a - b| / max(|b|, 1e-3) */
static double rel(const float *a, const double *b, int64_t n) {
    double e = 0, m = 1e-3;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs(b[i]));
    }
    return e / m;
}

static void compare(const char *what, dag *d, run *fused, run *plain, run *ref) {
    for (int k = 0; k < d->nout; k++) {
        int64_t n = kiln_val_numel(&d->g->vals[d->out[k]], 1);
        float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4), *c = malloc((size_t)n * 4);
        double *cd = malloc((size_t)n * 8);
        CHECK_OK(kiln_plan_read(fused->pl, d->out[k], a, n));
        CHECK_OK(kiln_plan_read(plain->pl, d->out[k], b, n));
        CHECK_OK(kiln_plan_read(ref->pl, d->out[k], c, n));
        CHECK_MSG(!memcmp(a, b, (size_t)n * 4), "%s: output %d differs fused and unfused", what, k);
        for (int64_t i = 0; i < n; i++) cd[i] = c[i];
        CHECK_MSG(rel(a, cd, n) <= 2e-4, "%s: output %d off the reference by %.3g", what, k, rel(a, cd, n));
        free(a), free(b), free(c), free(cd);
    }
    int64_t total = kiln_params_total(fused->P);
    const float *ga = kiln_params_grad(fused->P), *gb = kiln_params_grad(plain->P);
    const double *gr = kiln_params_grad(ref->P);
    for (int p = 0; p < kiln_params_count(fused->P); p++) {
        int64_t n = kiln_params_numel(fused->P, p), oa = kiln_params_offset(fused->P, p), orf = kiln_params_offset(ref->P, p);
        double *bd = malloc((size_t)n * 8);
        for (int64_t i = 0; i < n; i++) bd[i] = gb[oa + i];
        CHECK_MSG(rel(ga + oa, bd, n) <= 1e-5, "%s: gradient of p%d differs fused and unfused by %.3g", what, p,
                  rel(ga + oa, bd, n));
        CHECK_MSG(rel(ga + oa, gr + orf, n) <= 5e-4, "%s: gradient of p%d off the reference by %.3g", what, p,
                  rel(ga + oa, gr + orf, n));
        free(bd);
    }
    (void)total;
}

static void free_run(run *r) {
    kiln_plan_free(r->pl);
    kiln_params_free(r->P);
}

static void test_random_dags(void) {
    int fused_dags = 0, folded = 0, ndags = 100;
    for (int t = 0; t < ndags; t++) {
        dag d = {0};
        int64_t rows = tu_int(1, 3), cols = t % 4 == 0 ? tu_int(1, 40) : tu_int(900, 2600); /* short, and across tiles */
        make_dag(&d, rows, cols, (int)tu_int(2, 14));
        kiln_value loss = add_loss(&d);
        CHECK_OK(kiln_graph_status(d.g));
        int64_t n = rows * cols;
        float *p0 = malloc(3 * 100000 * sizeof *p0), *cdata[6];
        tu_fill(p0, 3 * 100000, -2, 2);
        for (int k = 0; k < d.nout; k++) {
            cdata[k] = kiln_alloc((size_t)n * 4);
            tu_fill(cdata[k], n, -1, 1);
        }
        run fz = {0}, pl = {0}, rf = {0};
        compile_run(&d, loss, "cpu", 1, p0, cdata, &fz);
        compile_run(&d, loss, "cpu", 0, p0, cdata, &pl);
        compile_run(&d, loss, "ref", 1, p0, cdata, &rf);
        char what[64];
        snprintf(what, sizeof what, "dag %d (%lldx%lld)", t, (long long)rows, (long long)cols);
        if (fz.pl && pl.pl && rf.pl) {
            compare(what, &d, &fz, &pl, &rf);
            CHECK_MSG(count_fused(pl.pl) == 0, "%s: fusion off, yet fused steps", what);
            CHECK(kiln_plan_step_count(fz.pl) <= kiln_plan_step_count(pl.pl));
            fused_dags += count_fused(fz.pl) > 0;
            folded += count_folded(fz.pl);
        }
        free_run(&fz), free_run(&pl), free_run(&rf);
        for (int k = 0; k < d.nout; k++) kiln_free(cdata[k]);
        free(p0);
        kiln_graph_free(d.g);
    }
    CHECK_MSG(fused_dags >= ndags / 2, "only %d of %d random DAGs had a fused group", fused_dags, ndags);
    /* the vector passes' folds were exercised (bits checked above) */
    CHECK_MSG(!has_vector_passes() || folded >= ndags / 4, "only %d members folded into vector passes", folded);
}

/* x * 0.5 * (1 + erf(x / 1.41421)) as five nodes */
static kiln_value gelu5(kiln_graph *g, kiln_value x) {
    kiln_value e = kiln_add_scalar(g, kiln_erf(g, kiln_scale(g, x, 1.0f / 1.41421f)), 1.0f);
    return kiln_mul(g, kiln_scale(g, x, 0.5f), e);
}

static void test_gelu_one_kernel(void) {
    for (int fuse = 0; fuse < 2; fuse++) {
        kiln_graph *g = kiln_graph_new();
        kiln_value x = kiln_input(g, "x", KILN_F32, 2, (int64_t[]){KILN_BATCH, 4096});
        kiln_value y = gelu5(g, x);
        kiln_params *P;
        CHECK_OK(kiln_params_new_on(g, "cpu", &P));
        kiln_compile_opts o = kiln_compile_defaults();
        o.max_batch = 4;
        o.fuse = fuse;
        kiln_plan *pl = NULL;
        CHECK_OK(kiln_compile(g, P, &y, 1, &o, &pl));
        CHECK_MSG(kiln_plan_step_count(pl) == (fuse ? 1 : 5), "GELU, fuse %d: %d steps", fuse, kiln_plan_step_count(pl));
        kiln_step_info si;
        CHECK_OK(kiln_plan_step_info(pl, 0, &si));
        if (fuse)
            CHECK_MSG(!strcmp(si.op, "fused") && strstr(si.attrs, "erf#") && strstr(si.attrs, "mul#") && strstr(si.attrs, "affine#"),
                      "the fused step does not name its members: %s %s", si.op, si.attrs);
        if (fuse && has_vector_passes()) /* the scales, the add and the mul folded into erf's pass: one load, one store */
            CHECK_MSG(!strcmp(si.kernel, "1 pass for 5 members (vector passes)"), "GELU fused as %s", si.kernel);
        /* the values match erf's GELU */
        float *xd = kiln_alloc(4 * 4096 * 4), *yd = malloc(4 * 4096 * 4);
        tu_fill(xd, 4 * 4096, -4, 4);
        kiln_plan_bind(pl, x, xd);
        CHECK_OK(kiln_plan_run(pl, 4));
        CHECK_OK(kiln_plan_read(pl, y, yd, 4 * 4096));
        double e = 0;
        for (int i = 0; i < 4 * 4096; i++) e = fmax(e, fabs(yd[i] - xd[i] * 0.5 * (1 + erf(xd[i] / 1.41421))));
        CHECK_MSG(e < 1e-5, "GELU off by %g", e);
        kiln_free(xd), free(yd);
        kiln_plan_free(pl);
        kiln_params_free(P);
        kiln_graph_free(g);
    }
    /* training: x a parameter; forward one kernel (plus the loss), backward one */
    kiln_graph *g = kiln_graph_new();
    kiln_value x = kiln_param(g, "x", 1, (int64_t[]){5000}, 1);
    kiln_value loss = kiln_sum(g, gelu5(g, x));
    kiln_params *P;
    CHECK_OK(kiln_params_new_on(g, "cpu", &P));
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = 1;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_compile(g, P, &loss, 1, &o, &pl));
    int fused = count_fused(pl), n = kiln_plan_step_count(pl);
    for (int i = 0; i < n && getenv("KILN_TEST_VERBOSE"); i++) {
        kiln_step_info si;
        if (kiln_plan_step_info(pl, i, &si) == KILN_OK) printf("  %s %s: %s [%s]\n", si.name, si.op, si.kernel, si.attrs);
    }
    /* fused forward, sum, ones, sum's backward (a fill), fused backward, read-out */
    CHECK_MSG(fused == 2 && n == 6, "GELU training plan: %d steps, %d fused", n, fused);
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
}

int main(void) {
    tu_seed(20261124);
    test_gelu_one_kernel();
    test_random_dags();
    return tu_finish("test_fuse");
}
