/* The conv autotuner: decisions round-trip as text and bad text is refused
 * with its source named (changing nothing); every candidate oneDNN offers
 * gives the reference's numbers up to fp32 rounding in all three directions;
 * a warm cache (the process's, or the disk's alone) times no candidate; a
 * corrupt cache is ignored with a warning naming it and rewritten; another
 * machine's decisions are kept but not used; the time budget cuts tuning
 * short; a remembered implementation that does not exist here is chosen
 * again; and a resumed run uses its checkpoint's implementations even when
 * the disk cache says otherwise, so resume is exact with autotune on. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "backends/cpu/internal/cpu.h"
#include "kernels/dnnl/internal/dnnl_util.h"
#include "kernels/internal/dnnl_ops.h"
#include "kiln/alloc.h"
#include "kiln/graph.h"
#include "kiln/safetensors.h"
#include "kiln/train.h"
#include "testutil.h"

static char dir[256], cache[300];

static size_t read_text(const char *path, char *buf, size_t len) {
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, len - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    return n;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_text(void) {
    kiln_cpu_autotune_reset();
    const char *m = kiln_autotune_machine();
    CHECK_MSG(m[0] == 't' && strstr(m, ",onednn-"), "machine %s", m);
    char text[1024], dec[KILN_AUTOTUNE_DECISION_MAX];
    snprintf(text, sizeof text,
             "# a comment\n"
             "mb8ic32ih26iw26oc64kh3kw3sh1ph0 %s fwd winograd/any/jit_wino_4x3:avx512_core 12.5\n"
             "mb8ic32ih26iw26oc64kh3kw3sh1ph0 %s bwd_data direct/nhwc/jit:avx512_core 7\n"
             "mb8ic32ih26iw26oc64kh3kw3sh1ph0 t999,Other_CPU,onednn-0.0.0 bwd_weight direct/any/jit:sse41 3\n"
             "mb8ic32ih26iw26oc64kh3kw3sh1ph0 bwd_weight w\n",
             m, m);
    kiln_log_set_level(KILN_LOG_WARN); /* the older line is mentioned at info level */
    CHECK_OK(kiln_autotune_import(text, "t", 1));
    double us = 0;
    CHECK(kiln_autotune_lookup("mb8ic32ih26iw26oc64kh3kw3sh1ph0", "fwd", dec, sizeof dec, &us) &&
          !strcmp(dec, "winograd/any/jit_wino_4x3:avx512_core") && us == 12.5);
    CHECK(kiln_autotune_lookup("mb8ic32ih26iw26oc64kh3kw3sh1ph0", "bwd_data", dec, sizeof dec, &us) &&
          !strcmp(dec, "direct/nhwc/jit:avx512_core"));
    /* another machine's line and the older form are not used */
    CHECK(!kiln_autotune_lookup("mb8ic32ih26iw26oc64kh3kw3sh1ph0", "bwd_weight", dec, sizeof dec, &us));
    /* without replace, known decisions stay */
    snprintf(text, sizeof text, "mb8ic32ih26iw26oc64kh3kw3sh1ph0 %s fwd direct/any/jit:avx512_core 1\n", m);
    CHECK_OK(kiln_autotune_import(text, "t", 0));
    CHECK(kiln_autotune_lookup("mb8ic32ih26iw26oc64kh3kw3sh1ph0", "fwd", dec, sizeof dec, &us) && dec[0] == 'w');
    char buf[2048];
    kiln_autotune_export(buf, sizeof buf);
    CHECK_MSG(!strncmp(buf, "# kiln autotune v3", 18) && strstr(buf, " bwd_data direct/nhwc/jit:avx512_core 7.0\n") &&
                  strstr(buf, "t999,Other_CPU,onednn-0.0.0 bwd_weight"), "%s", buf);
    /* a decision timed under load serves the process and is never exported */
    kiln_autotune_store("mb3unsure", "fwd", "direct/any/jit:avx512_core", 5.0, 0);
    kiln_autotune_store("mb3kept", "fwd", "direct/any/jit:avx512_core", 6.0, 1);
    CHECK(kiln_autotune_lookup("mb3unsure", "fwd", dec, sizeof dec, &us) && us == 5.0);
    kiln_autotune_export(buf, sizeof buf);
    CHECK_MSG(!strstr(buf, "mb3unsure") && strstr(buf, "mb3kept "), "%s", buf);
    /* a bad line refuses the whole text, naming source and line */
    snprintf(text, sizeof text, "mb2 %s fwd direct/any/x 1\nmb2 %s fwd nonsense 1\n", m, m);
    CHECK(kiln_autotune_import(text, "cache.txt", 1) == KILN_ERR_FORMAT);
    CHECK_MSG(strstr(kiln_last_error(), "cache.txt") && strstr(kiln_last_error(), "line 2"), "%s", kiln_last_error());
    CHECK(!kiln_autotune_lookup("mb2", "fwd", dec, sizeof dec, &us));
    snprintf(text, sizeof text, "mb2 %s fwd direct/any/x -1\n", m);
    CHECK(kiln_autotune_import(text, "cache.txt", 1) == KILN_ERR_FORMAT);
    CHECK(kiln_autotune_import("mb2 fwd\n", "cache.txt", 1) == KILN_ERR_FORMAT);
    kiln_cpu_autotune_reset();
}

/* ---------- every candidate agrees with the reference ---------- */

/* nChw<B>c <-> NCHW (c % B == 0) */
static void reblock(float *dst, const float *src, const kiln_conv_shape *cs, int B, int64_t c, int64_t hw, int to_blocked) {
    for (int64_t n = 0; n < cs->n; n++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t p = 0; p < hw; p++) {
                int64_t plain = (n * c + ch) * hw + p, blocked = ((n * (c / B) + ch / B) * hw + p) * B + ch % B;
                if (to_blocked) dst[blocked] = src[plain];
                else dst[plain] = src[blocked];
            }
}

typedef struct {
    kiln_conv_shape cs;
    kiln_dnnl_conv_opts o;
    int64_t nx, nw, ny;
    float *x, *w, *b, *dy, *out, *plain;
    double *xd, *wd, *bd, *dyd, *ref, *ref_b;
} agree_case;

/* a plan-layout copy of a plain tensor (x-like or y-like) */
static float *plan_layout(agree_case *a, const float *plain, int is_y, float *buf) {
    int blocked = is_y ? a->o.y_blocked : a->o.x_blocked;
    if (!blocked) return (float *)plain;
    reblock(buf, plain, &a->cs, blocked, is_y ? a->cs.k : a->cs.c, is_y ? a->cs.oh * a->cs.ow : a->cs.h * a->cs.w, 1);
    return buf;
}

static const float *plain_of(agree_case *a, const float *out, int is_y) {
    int blocked = is_y ? a->o.y_blocked : a->o.x_blocked;
    if (!blocked) return out;
    reblock(a->plain, out, &a->cs, blocked, is_y ? a->cs.k : a->cs.c, is_y ? a->cs.oh * a->cs.ow : a->cs.h * a->cs.w, 0);
    return a->plain;
}

static double scale_of(const double *r, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fabs(r[i]) > m ? fabs(r[i]) : m;
    return m;
}

/* runs one direction of c and compares with the reference; returns the error (<= 1 is fp32 rounding) */
static double run_and_compare(agree_case *a, kiln_dnnl_conv *c, int d) {
    size_t wsb = kiln_dnnl_conv_workspace(c) + 64;
    void *ws = kiln_alloc(wsb);
    float *t1 = kiln_alloc((size_t)(a->nx > a->ny ? a->nx : a->ny) * sizeof(float));
    double e = 1e30;
    kiln_status st;
    if (d == 0) {
        if (a->o.residual) /* the sum post-op adds into y: dy's values stand for the residual */
            memcpy(a->out, plan_layout(a, a->dy, 1, t1), (size_t)a->ny * sizeof(float));
        st = kiln_dnnl_conv_fwd(c, plan_layout(a, a->x, 0, t1), a->w, a->o.has_bias ? a->b : NULL, a->out, ws);
        if (st == KILN_OK) e = tu_err(plain_of(a, a->out, 1), a->ref, a->ny, 2e-5 * scale_of(a->ref, a->ny), 1e-4);
    } else if (d == 1) {
        st = kiln_dnnl_conv_bwd_data(c, plan_layout(a, a->dy, 1, t1), a->w, a->out, 0, ws);
        if (st == KILN_OK) e = tu_err(plain_of(a, a->out, 0), a->ref, a->nx, 2e-5 * scale_of(a->ref, a->nx), 1e-4);
    } else {
        float *t2 = kiln_alloc((size_t)a->ny * sizeof(float)), db[64];
        st = kiln_dnnl_conv_bwd_weight(c, plan_layout(a, a->x, 0, t1), plan_layout(a, a->dy, 1, t2), a->out,
                                       a->o.has_bias ? db : NULL, 0, 0, ws);
        if (st == KILN_OK) e = tu_err(a->out, a->ref, a->nw, 2e-5 * scale_of(a->ref, a->nw), 1e-4);
        if (st == KILN_OK && a->o.has_bias) {
            double eb = tu_err(db, a->ref_b, a->cs.k, 2e-5 * scale_of(a->ref_b, a->cs.k), 1e-4);
            e = eb > e ? eb : e;
        }
        kiln_free(t2);
    }
    if (st != KILN_OK) fprintf(stderr, "run failed: %s\n", kiln_last_error());
    kiln_free(ws);
    kiln_free(t1);
    return e;
}

static void agree_case_init(agree_case *a) {
    kiln_conv_shape *cs = &a->cs;
    kiln_conv_shape_infer(cs);
    a->nx = cs->n * cs->c * cs->h * cs->w;
    a->nw = cs->k * (cs->c / cs->groups) * cs->r * cs->s;
    a->ny = cs->n * cs->k * cs->oh * cs->ow;
    int64_t most = a->nx > a->ny ? a->nx : a->ny;
    most = most > a->nw ? most : a->nw;
    a->x = malloc((size_t)a->nx * 4);
    a->w = malloc((size_t)a->nw * 4);
    a->b = malloc((size_t)cs->k * 4);
    a->dy = malloc((size_t)a->ny * 4);
    a->out = malloc((size_t)most * 4);
    a->plain = malloc((size_t)most * 4);
    a->xd = malloc((size_t)a->nx * 8);
    a->wd = malloc((size_t)a->nw * 8);
    a->bd = malloc((size_t)cs->k * 8);
    a->dyd = malloc((size_t)a->ny * 8);
    a->ref = malloc((size_t)most * 8);
    a->ref_b = malloc((size_t)cs->k * 8);
    tu_fill(a->x, a->nx, -1, 1);
    tu_fill(a->w, a->nw, -1, 1);
    tu_fill(a->b, cs->k, -1, 1);
    tu_fill(a->dy, a->ny, -1, 1);
    for (int64_t i = 0; i < a->nx; i++) a->xd[i] = a->x[i];
    for (int64_t i = 0; i < a->nw; i++) a->wd[i] = a->w[i];
    for (int64_t i = 0; i < cs->k; i++) a->bd[i] = a->b[i];
    for (int64_t i = 0; i < a->ny; i++) a->dyd[i] = a->dy[i];
}

static void agree_case_free(agree_case *a) {
    void *p[] = {a->x, a->w, a->b, a->dy, a->out, a->plain, a->xd, a->wd, a->bd, a->dyd, a->ref, a->ref_b};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
}

/* the double reference of direction d into a->ref (and a->ref_b) */
static void reference(agree_case *a, int d) {
    if (d == 0) {
        kiln_ref_conv2d_fwd(&a->cs, a->xd, a->wd, a->o.has_bias ? a->bd : NULL, a->ref);
        for (int64_t i = 0; i < a->ny && a->o.residual; i++) a->ref[i] += a->dyd[i];
        if (a->o.fuse_relu)
            for (int64_t i = 0; i < a->ny; i++) a->ref[i] = a->ref[i] > 0 ? a->ref[i] : 0;
    } else if (d == 1) {
        kiln_ref_conv2d_bwd_data(&a->cs, a->dyd, a->wd, a->ref, 0);
    } else {
        kiln_ref_conv2d_bwd_weight(&a->cs, a->xd, a->dyd, a->ref, a->o.has_bias ? a->ref_b : NULL, 0);
    }
}

/* Each candidate of each direction, forced through a remembered decision (the cache-hit path), is
 * made exactly as named and matches the double reference within fp32 rounding. */
static void test_candidates_agree(kiln_conv_shape cs, kiln_dnnl_conv_opts o) {
    static const char *dirs[3] = {"fwd", "bwd_data", "bwd_weight"};
    agree_case a = {.cs = cs, .o = o};
    a.o.need_bwd_data = a.o.need_bwd_weight = a.o.autotune = 1;
    agree_case_init(&a);
    kiln_dnnl_conv *probe;
    kiln_dnnl_conv_opts untuned = a.o;
    untuned.autotune = 0;
    CHECK_OK(kiln_dnnl_conv_new(&a.cs, &untuned, &probe));
    char problem[KILN_AUTOTUNE_PROBLEM_MAX];
    snprintf(problem, sizeof problem, "%s", probe ? kiln_dnnl_conv_describe(probe) : "");
    *strchr(problem, ' ') = 0;
    kiln_dnnl_conv_free(probe);
    for (int d = 0; d < 3; d++) {
        reference(&a, d);
        char cand[64][KILN_AUTOTUNE_DECISION_MAX];
        int n = kiln_dnnl_conv_candidates(&a.cs, &a.o, dirs[d], cand, 64);
        CHECK_MSG(n >= 2, "%s %s: %d candidates", problem, dirs[d], n);
        for (int i = 0; i < n && i < 64; i++) {
            kiln_autotune_forget();
            kiln_autotune_store(problem, dirs[d], cand[i], 1.0, 1);
            kiln_autotune_stats s;
            kiln_dnnl_conv *c = NULL;
            kiln_autotune_set_budget(1e-9, 0); /* the other directions: one candidate each, quickly */
            CHECK_OK(kiln_dnnl_conv_new(&a.cs, &a.o, &c));
            kiln_autotune_set_budget(0, 0);
            if (!c) continue;
            kiln_autotune_stats_get(&s);
            CHECK_MSG(!strcmp(kiln_dnnl_conv_decision(c, dirs[d]), cand[i]), "%s %s: asked for %s, made %s", problem, dirs[d],
                      cand[i], kiln_dnnl_conv_decision(c, dirs[d]));
            double e = run_and_compare(&a, c, d);
            CHECK_MSG(e <= 1, "%s %s %s: error %g (1 is fp32 rounding)", problem, dirs[d], cand[i], e);
            kiln_dnnl_conv_free(c);
        }
    }
    kiln_autotune_forget();
    agree_case_free(&a);
}

static void test_all_candidates(void) {
    tu_seed(7);
    /* a plain input feeding a blocked output, bias and relu fused */
    test_candidates_agree((kiln_conv_shape){.n = 2, .c = 16, .h = 10, .w = 10, .k = 32, .r = 3, .s = 3, .stride = 1, .pad = 1},
                          (kiln_dnnl_conv_opts){.has_bias = 1, .fuse_relu = 1, .y_blocked = 16});
    /* a first layer: 3 channels, stride 2, no bias, plain */
    test_candidates_agree((kiln_conv_shape){.n = 3, .c = 3, .h = 9, .w = 9, .k = 16, .r = 3, .s = 3, .stride = 2, .pad = 1},
                          (kiln_dnnl_conv_opts){0});
    /* inside a blocked chain (Winograd's shape), by 16 and by 8 (AVX2's block) */
    test_candidates_agree((kiln_conv_shape){.n = 2, .c = 32, .h = 8, .w = 8, .k = 32, .r = 3, .s = 3, .stride = 1, .pad = 1},
                          (kiln_dnnl_conv_opts){.has_bias = 1, .x_blocked = 16, .y_blocked = 16});
    test_candidates_agree((kiln_conv_shape){.n = 2, .c = 32, .h = 8, .w = 8, .k = 32, .r = 3, .s = 3, .stride = 1, .pad = 1},
                          (kiln_dnnl_conv_opts){.has_bias = 1, .x_blocked = 8, .y_blocked = 8});
    /* ResNet-20's first stage: 16 channels, where nChw16c and nhwc are the same bytes
     * (an nhwc candidate reads and writes the plan's blocked tensors in place) */
    test_candidates_agree((kiln_conv_shape){.n = 2, .c = 16, .h = 9, .w = 7, .k = 16, .r = 3, .s = 3, .stride = 1, .pad = 1},
                          (kiln_dnnl_conv_opts){.x_blocked = 16, .y_blocked = 16});
    /* depthwise, blocked; and a stride-2 conv from 8 blocked channels into 16, plain out */
    test_candidates_agree((kiln_conv_shape){.n = 2, .c = 16, .h = 8, .w = 8, .k = 16, .r = 3, .s = 3, .stride = 1, .pad = 1,
                                            .groups = 16},
                          (kiln_dnnl_conv_opts){.x_blocked = 16, .y_blocked = 16});
    test_candidates_agree((kiln_conv_shape){.n = 2, .c = 8, .h = 9, .w = 9, .k = 16, .r = 3, .s = 3, .stride = 2, .pad = 1},
                          (kiln_dnnl_conv_opts){.has_bias = 1, .x_blocked = 8});
    /* a ResNet conv before batch norm in nChw8c, no bias: kiln's Winograd in all three directions */
    test_candidates_agree((kiln_conv_shape){.n = 3, .c = 16, .h = 9, .w = 7, .k = 8, .r = 3, .s = 3, .stride = 1, .pad = 1},
                          (kiln_dnnl_conv_opts){.x_blocked = 8, .y_blocked = 8});
    /* a folded ResNet block's second conv in nChw8c: bias, the residual sum, relu (kiln's Winograd among them) */
    test_candidates_agree((kiln_conv_shape){.n = 2, .c = 16, .h = 9, .w = 10, .k = 24, .r = 3, .s = 3, .stride = 1, .pad = 1},
                          (kiln_dnnl_conv_opts){.has_bias = 1, .fuse_relu = 1, .residual = 1, .x_blocked = 8, .y_blocked = 8});
}

/* an argument whose plan layout and primitive layout are the same bytes under two
 * names (nChw16c and nhwc at 16 channels, nChw8c and nhwc at 8) needs no reorder;
 * at 32 channels, nChw8c at 16, or converting to bf16, it does */
static void test_same_bytes(void) {
    CHECK_OK(kiln_dnnl_init());
    static const struct { int64_t c; int block; dnnl_data_type_t prim_type; int reorder; } cases[] = {
        {16, 16, dnnl_f32, 0}, {32, 16, dnnl_f32, 1}, {16, 16, dnnl_bf16, 1}, {8, 8, dnnl_f32, 0}, {16, 8, dnnl_f32, 1}};
    for (int k = 0; k < 5; k++) {
        dnnl_dims_t d = {2, cases[k].c, 5, 7};
        dnnl_memory_desc_t blocked, nhwc;
        CHECK(dnnl_memory_desc_init_by_tag(&blocked, 4, d, dnnl_f32, cases[k].block == 8 ? dnnl_nChw8c : dnnl_nChw16c) ==
              dnnl_success);
        CHECK(dnnl_memory_desc_init_by_tag(&nhwc, 4, d, cases[k].prim_type, dnnl_nhwc) == dnnl_success);
        for (int in = 0; in <= 1; in++) {
            kiln_dn_arg a;
            size_t cursor = 0;
            CHECK_OK(kiln_dn_arg_init(&a, &blocked, &nhwc, in, &cursor));
            CHECK_MSG((a.reorder != NULL) == cases[k].reorder && (cursor > 0) == cases[k].reorder,
                      "c=%lld %s %s: reorder %d, workspace %zu", (long long)cases[k].c,
                      cases[k].prim_type == dnnl_bf16 ? "bf16" : "f32", in ? "input" : "output", a.reorder != NULL, cursor);
            kiln_dn_arg_free(&a);
        }
    }
}

/* ---------- caches ---------- */

typedef struct {
    kiln_graph *g;
    kiln_params *P;
    kiln_plan *pl;
} net;

/* x -> conv 3->16 (+relu) -> conv 16->16 stride 2 -> flatten -> linear: five conv directions to choose */
static kiln_status net_compile(net *n) {
    memset(n, 0, sizeof *n);
    n->g = kiln_graph_new();
    kiln_graph *g = n->g;
    int64_t xs[4] = {KILN_BATCH, 3, 10, 10}, ys[1] = {KILN_BATCH};
    kiln_value x = kiln_input(g, "x", KILN_F32, 4, xs), y = kiln_input(g, "y", KILN_I32, 1, ys);
    kiln_value w1 = kiln_param(g, "c1.weight", 4, (int64_t[]){16, 3, 3, 3}, 27);
    kiln_value b1 = kiln_param(g, "c1.bias", 1, (int64_t[]){16}, 27);
    kiln_value w2 = kiln_param(g, "c2.weight", 4, (int64_t[]){16, 16, 3, 3}, 144);
    kiln_value h = kiln_relu(g, kiln_conv2d(g, x, w1, b1, 1, 1));
    h = kiln_flatten(g, kiln_conv2d(g, h, w2, -1, 2, 1), 1);
    kiln_value fw = kiln_param(g, "fc.weight", 2, (int64_t[]){4, 400}, 400);
    kiln_value loss = kiln_cross_entropy(g, kiln_linear(g, h, fw, -1), y);
    kiln_status st = kiln_params_new(g, KILN_F32, &n->P);
    if (st != KILN_OK) return st;
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = 4;
    o.autotune = 1;
    return kiln_compile(g, n->P, &loss, 1, &o, &n->pl);
}

static void net_free(net *n) {
    kiln_plan_free(n->pl);
    kiln_params_free(n->P);
    kiln_graph_free(n->g);
}

static kiln_autotune_stats compile_stats(void) {
    net n;
    kiln_autotune_stats_reset();
    CHECK_OK(net_compile(&n));
    net_free(&n);
    kiln_autotune_stats s;
    kiln_autotune_stats_get(&s);
    return s;
}

static char warnings[8192];
static kiln_log_level kept_from = KILN_LOG_WARN;
static void keep_warnings(kiln_log_level level, const char *msg, void *user) {
    (void)user;
    size_t o = strlen(warnings);
    if (level >= kept_from && o + strlen(msg) + 2 < sizeof warnings) snprintf(warnings + o, sizeof warnings - o, "%s\n", msg);
}

static void test_warm_cache(void) {
    kiln_cpu_autotune_reset();
    unlink(cache);
    warnings[0] = 0;
    kept_from = KILN_LOG_INFO;
    kiln_log_set_level(KILN_LOG_INFO);
    kiln_log_set_sink(keep_warnings, NULL);
    kiln_autotune_stats s = compile_stats();
    kiln_log_set_sink(NULL, NULL);
    kiln_log_set_level(KILN_LOG_WARN);
    kept_from = KILN_LOG_WARN;
    CHECK_MSG(s.candidates > 5 && s.tuned == 5 && s.remembered == 0, "cold: %lld candidates, %lld tuned",
              (long long)s.candidates, (long long)s.tuned);
    kiln_autotune_choice ch[8];
    int nch = kiln_autotune_choices(ch, 8);
    CHECK_MSG(nch == 5, "%d choices", nch);
    for (int i = 0; i < nch && i < 8; i++) {
        CHECK_MSG(strchr(ch[i].decision, '/') && ch[i].us > 0 && ch[i].candidates >= 1 && !ch[i].remembered, "%s %s %s",
                  ch[i].problem, ch[i].dir, ch[i].decision);
        /* the log names each conv's choice per direction, and what tuning took */
        char named[256];
        snprintf(named, sizeof named, " %s %s (", ch[i].dir, ch[i].decision);
        CHECK_MSG(strstr(warnings, ch[i].problem) && strstr(warnings, named), "the log lacks %s%s: %s", ch[i].problem, named,
                  warnings);
    }
    CHECK_MSG(strstr(warnings, "candidates timed in") && strstr(warnings, "conv autotune: 5 directions tuned"), "%s", warnings);
    /* the process remembers: nothing timed */
    s = compile_stats();
    CHECK_MSG(s.candidates == 0 && s.runs == 0 && s.remembered == 5, "warm process: %lld candidates timed",
              (long long)s.candidates);
    /* a fresh process state with only the disk cache: nothing timed either */
    struct stat sb;
    CHECK_MSG(stat(cache, &sb) == 0 && sb.st_size > 0, "no autotune cache written at %s", cache);
    kiln_cpu_autotune_reset();
    s = compile_stats();
    CHECK_MSG(s.candidates == 0 && s.remembered == 5, "warm disk: %lld candidates timed", (long long)s.candidates);
    nch = kiln_autotune_choices(ch, 8);
    CHECK(nch == 5 && ch[0].remembered && ch[0].us > 0);

    /* a corrupt cache: a warning naming it, tuned afresh, the file rewritten whole */
    char text[1 << 14];
    read_text(cache, text, sizeof text);
    char *line2 = strchr(strchr(text, '\n') + 1, '\n') + 1;
    line2[10] = 0; /* a line cut short, as a crash mid-write of another tool could leave it */
    write_text(cache, text);
    kiln_cpu_autotune_reset();
    warnings[0] = 0;
    kiln_log_set_sink(keep_warnings, NULL);
    s = compile_stats();
    kiln_log_set_sink(NULL, NULL);
    CHECK_MSG(strstr(warnings, cache) && strstr(warnings, "ignoring"), "warnings: %s", warnings);
    CHECK_MSG(s.candidates > 5 && s.tuned == 5, "after a corrupt cache: %lld tuned", (long long)s.tuned);
    read_text(cache, text, sizeof text);
    kiln_cpu_autotune_reset();
    CHECK_MSG(kiln_autotune_import(text, cache, 1) == KILN_OK && !strncmp(text, "# kiln autotune v3", 18), "rewritten: %s",
              text);
    kiln_cpu_autotune_reset();

    /* another machine's cache: kept, never used */
    const char *m = kiln_autotune_machine();
    char other[1 << 14], *o = other;
    for (const char *p = text; *p;) {
        const char *at = strstr(p, m);
        if (!at) {
            o += sprintf(o, "%s", p);
            break;
        }
        o += sprintf(o, "%.*st999,Other_CPU,onednn-0.0.0", (int)(at - p), p);
        p = at + strlen(m);
    }
    write_text(cache, other);
    s = compile_stats();
    CHECK_MSG(s.tuned == 5 && s.remembered == 0, "another machine's decisions were used: %lld remembered",
              (long long)s.remembered);
    read_text(cache, text, sizeof text);
    CHECK_MSG(strstr(text, "t999,Other_CPU") && strstr(text, m), "both machines kept: %s", text);
    kiln_cpu_autotune_reset();
    unlink(cache);
}

/* the budgets: per direction only the first candidate once it is spent; per process, the directions after it
 * take oneDNN's own choice and are not remembered */
static void test_budget(void) {
    kiln_cpu_autotune_reset();
    unlink(cache);
    kiln_autotune_set_budget(1e-9, 0);
    kiln_autotune_stats s = compile_stats();
    CHECK_MSG(s.candidates == 5 && s.tuned == 5 && s.over_budget == 5, "direction budget: %lld candidates, %lld over",
              (long long)s.candidates, (long long)s.over_budget);
    kiln_cpu_autotune_reset();
    unlink(cache);
    kiln_autotune_set_budget(0, 1e-9);
    kiln_log_set_level(KILN_LOG_ERROR); /* the process budget warns */
    s = compile_stats();
    kiln_log_set_level(KILN_LOG_WARN);
    CHECK_MSG(s.tuned == 1 && s.over_budget == 4, "process budget: %lld tuned, %lld over", (long long)s.tuned,
              (long long)s.over_budget);
    char buf[4096];
    kiln_autotune_export(buf, sizeof buf);
    int lines = 0;
    for (char *p = buf; (p = strchr(p, '\n')); p++) lines++;
    CHECK_MSG(lines == 2, "remembered past the budget: %s", buf);
    kiln_autotune_set_budget(0, 0);
    kiln_cpu_autotune_reset();
    unlink(cache);
}

/* a remembered implementation oneDNN cannot make here (as a checkpoint from another CPU could hold) is
 * chosen again instead of failing the compile */
static void test_unavailable_decision(void) {
    kiln_cpu_autotune_reset();
    compile_stats();
    kiln_autotune_choice ch[8];
    int nch = kiln_autotune_choices(ch, 8);
    kiln_cpu_autotune_reset();
    unlink(cache);
    for (int i = 0; i < nch && i < 8; i++) kiln_autotune_store(ch[i].problem, ch[i].dir, "direct/any/jit:no_such_isa", 1, 1);
    warnings[0] = 0;
    kiln_log_set_sink(keep_warnings, NULL);
    kiln_autotune_stats s = compile_stats();
    kiln_log_set_sink(NULL, NULL);
    CHECK_MSG(s.tuned == 5 && strstr(warnings, "no_such_isa") && strstr(warnings, "not available"), "%lld tuned; %s",
              (long long)s.tuned, warnings);
    char dec[KILN_AUTOTUNE_DECISION_MAX];
    CHECK(nch > 0 && kiln_autotune_lookup(ch[0].problem, ch[0].dir, dec, sizeof dec, NULL) && !strstr(dec, "no_such_isa"));
    kiln_cpu_autotune_reset();
    unlink(cache);
}

/* ---------- resume ---------- */

static kiln_train_config config(int64_t steps, const char *save, const char *resume) {
    kiln_train_config c = kiln_train_defaults();
    c.model = "mnist-cnn";
    c.batch_size = 16;
    c.max_steps = steps;
    c.test = 0;
    c.workers = 1;
    c.autotune = 1;
    c.save = save;
    c.resume = resume;
    return c;
}

static int same_tensors(const char *a, const char *b) {
    kiln_st_file *fa, *fb;
    if (kiln_st_open(a, &fa) != KILN_OK) return 0;
    if (kiln_st_open(b, &fb) != KILN_OK) {
        kiln_st_close(fa);
        return 0;
    }
    int same = kiln_st_count(fa) == kiln_st_count(fb);
    for (int i = 0; same && i < kiln_st_count(fa); i++) {
        const kiln_tensor *t = kiln_st_at(fa, i), *u = kiln_st_find(fb, kiln_st_name(fa, i));
        same = u && kiln_tensor_nbytes(t) == kiln_tensor_nbytes(u) && memcmp(t->data, u->data, kiln_tensor_nbytes(t)) == 0;
    }
    kiln_st_close(fa);
    kiln_st_close(fb);
    return same;
}

/* every decision in a cache text replaced by another candidate that exists for it; returns how many changed */
static int swap_decisions(char *text) {
    int changed = 0;
    for (char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        char problem[KILN_AUTOTUNE_PROBLEM_MAX], machine[96], d[16], dec[KILN_AUTOTUNE_DECISION_MAX];
        if (line[0] == '#' || sscanf(line, "%159s %95s %15s %95s", problem, machine, d, dec) != 4) continue;
        /* the gemm implementation on plain NCHW exists for every direct convolution */
        const char *alt = strcmp(dec, "direct/nchw/x64:gemm:jit") ? "direct/nchw/x64:gemm:jit" : "direct/any/x64:gemm:jit";
        char *at = strstr(line, dec), rest[512];
        snprintf(rest, sizeof rest, "%s", at + strlen(dec));
        sprintf(at, "%s%s", alt, rest);
        changed++;
    }
    return changed;
}

static void test_resume_with_autotune(void) {
    int64_t n = getenv("KILN_SANITIZE") ? 4 : 20;
    char a[300], b[300], c[300];
    snprintf(a, sizeof a, "%s/a.safetensors", dir);
    snprintf(b, sizeof b, "%s/b.safetensors", dir);
    snprintf(c, sizeof c, "%s/c.safetensors", dir);
    kiln_train_result r;
    kiln_cpu_autotune_reset();
    kiln_train_config ca = config(n, a, NULL);
    CHECK_OK(kiln_train(&ca, &r));
    struct stat sb;
    CHECK_MSG(stat(cache, &sb) == 0 && sb.st_size > 0, "no autotune cache written at %s", cache);
    kiln_st_file *f;
    CHECK_OK(kiln_st_open(a, &f));
    if (f) {
        const char *t = kiln_st_meta(f, "kiln.autotune");
        CHECK_MSG(t && strstr(t, "mb16ic32ih26iw26oc64") && strstr(t, kiln_autotune_machine()),
                  "checkpoint lacks the conv decisions: %s", t ? t : "(none)");
        kiln_st_close(f);
    }
    /* a separate run on this machine reads the disk cache: same implementations, same numbers */
    kiln_cpu_autotune_reset();
    kiln_train_config cc = config(2 * n, c, NULL);
    CHECK_OK(kiln_train(&cc, &r));
    /* the disk cache now names other implementations; the resumed run must use its checkpoint's */
    char text[1 << 14];
    read_text(cache, text, sizeof text - 512);
    CHECK(swap_decisions(text) > 0);
    write_text(cache, text);
    kiln_cpu_autotune_reset();
    kiln_train_config cb = config(2 * n, b, a);
    CHECK_OK(kiln_train(&cb, &r));
    CHECK_MSG(same_tensors(b, c), "resume with autotune on is not exact");
    kiln_cpu_autotune_reset();
    unlink(a);
    unlink(b);
    unlink(c);
    unlink(cache);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/kiln-autotune-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    snprintf(cache, sizeof cache, "%s/autotune-v4.txt", dir);
    setenv("KILN_CACHE_DIR", dir, 1);
    kiln_log_set_level(KILN_LOG_WARN);
    /* these tests check what is remembered, not the load check (tests/test_tune.sh does): timings taken
     * while other work holds the cores count here as on a quiet machine */
    kiln_autotune_set_wait_share(-1);
    test_text();
    test_all_candidates();
    test_same_bytes();
    test_warm_cache();
    test_budget();
    test_unavailable_decision();
    test_resume_with_autotune();
    rmdir(dir);
    return tu_finish("test_autotune");
}
