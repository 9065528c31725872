/* The cpu backend's inference list passes, each with and without it, on
 * resnet20's inference plan at batch 64 (two threads), in nChw8c with kiln's
 * Winograd taking every 3x3 stride-1 convolution, random weights and running
 * statistics:
 *   - batch norm folds that leave only their scales, which the Winograd
 *     kernel applies as it reads the weights (src/backends/cpu/fold_scale.c):
 *     16 convolutions take them; the logits are the same bits as with whole
 *     folds;
 *   - depth-first inference (src/backends/cpu/depth_first.c): the first
 *     stage's six convolutions and the second's five run image slice by image
 *     slice; the logits are the same bits as step by step, also after the
 *     weights change between runs (each run folds and copies them again), and
 *     as a profiled run's (steps one at a time). Without it (or in a training
 *     plan) no segment is made. */
#include <omp.h>
#include <string.h>
#include "backends/cpu/internal/cpu.h"
#include "graph/internal/plan.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/dnnl/internal/conv2d.h"
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "testutil.h"

#define B 64
#define CLASSES 10

static void randomize(kiln_params *P, uint64_t seed) {
    tu_seed(seed);
    float *p = kiln_params_data(P);
    for (int64_t i = 0; i < kiln_params_total(P); i++) p[i] = (float)tu_uniform(-0.3, 0.3);
    for (int i = 0; i < kiln_params_buffer_count(P); i++) {
        if (kiln_params_buffer_dtype(P, i) != KILN_F32) continue;
        int var = strstr(kiln_params_buffer_name(P, i), "running_var") != NULL;
        float *b = kiln_params_buffer_data(P, i);
        for (int64_t j = 0; j < kiln_params_buffer_numel(P, i); j++) b[j] = (float)(var ? tu_uniform(0.5, 2) : tu_uniform(-0.5, 0.5));
    }
}

/* the convolutions in depth-first segments of the plan's list, and the segments */
static int segment_convs(const kiln_plan *pl, int *segments) {
    const kiln_steplist *L = &pl->lists[0];
    int convs = 0;
    *segments = 0;
    for (int i = 0; i < L->nsteps; i++) {
        int n = L->steps[i].depth_first.steps;
        if (n < 2) continue;
        (*segments)++;
        for (int k = i; k < i + n; k++) convs += L->steps[k].kobj != NULL;
        i += n - 1;
    }
    return convs;
}

/* the convolutions that read their weights times a fold's scales (src/backends/cpu/fold_scale.c) */
static int scaled_convs(const kiln_plan *pl) {
    const kiln_steplist *L = &pl->lists[0];
    int n = 0;
    for (int i = 0; pl && i < L->nsteps; i++) n += L->steps[i].w_scale != NULL;
    return n;
}

static kiln_plan *compile(kiln_graph *g, kiln_params *P, kiln_value out, int depth_first, int profile) {
    kiln_compile_opts o = kiln_compile_defaults();
    o.max_batch = B;
    o.depth_first = depth_first;
    o.profile = profile;
    kiln_plan *pl = NULL;
    kiln_cpu_force_layout_block(8);
    kiln_conv_prefer_own(1);
    CHECK_OK(kiln_compile(g, P, &out, 1, &o, &pl));
    kiln_conv_prefer_own(0);
    kiln_cpu_force_layout_block(0);
    return pl;
}

static int32_t labels[B];

static void run(kiln_plan *pl, const kiln_model *m, const float *x, float *logits) {
    if (!pl) return;
    CHECK_OK(kiln_plan_bind(pl, m->x, x));
    CHECK_OK(kiln_plan_bind(pl, m->y, labels)); /* the graph's input, though the plan computes no loss */
    CHECK_OK(kiln_plan_run(pl, B));
    CHECK_OK(kiln_plan_read(pl, m->out, logits, B * CLASSES));
}

static int same_bits(const float *a, const float *b, int64_t n) { return memcmp(a, b, (size_t)n * sizeof(float)) == 0; }

/* resnet20's graph and random parameters (NULL when either failed: the checks say so) */
static kiln_graph *resnet20(kiln_model *m, kiln_params **P, uint64_t seed) {
    kiln_graph *g = kiln_graph_new();
    *P = NULL;
    CHECK_OK(kiln_model_build(g, "resnet20", m));
    CHECK_OK(kiln_params_new_on(g, "cpu", P));
    if (*P) randomize(*P, seed);
    return g;
}

static void test_resnet20(void) {
    kiln_model m;
    kiln_params *P;
    kiln_graph *g = resnet20(&m, &P, 3);
    if (!P) {
        kiln_graph_free(g);
        return;
    }
    float *x = malloc(sizeof(float) * B * 3 * 32 * 32);
    tu_fill(x, B * 3 * 32 * 32, -1.5, 1.5);
    for (int i = 0; i < B; i++) labels[i] = (int32_t)(tu_u64() % CLASSES);
    kiln_plan *on = compile(g, P, m.out, 1, 0), *off = compile(g, P, m.out, 0, 0), *prof = compile(g, P, m.out, 1, 1);
    kiln_cpu_fold_scale_off(1);
    kiln_plan *whole = compile(g, P, m.out, 1, 0);
    kiln_cpu_fold_scale_off(0);
    /* the 16 Winograd convolutions each read their fold's scales (not the stem: 3 channels; not the two strided) */
    CHECK_MSG(scaled_convs(on) == 16 && scaled_convs(off) == 16 && whole && scaled_convs(whole) == 0,
              "%d, %d and %d convolutions scaled as read (want 16, 16, 0)", scaled_convs(on), scaled_convs(off),
              whole ? scaled_convs(whole) : -1);
    int segs = 0, convs = on ? segment_convs(on, &segs) : 0, segs_off = 0;
    /* batch 64 on two threads: the 16-channel stage by 2 images, the 32-channel by 8; the 64-channel stage
     * would take 32 a slice, too few slices to share */
    CHECK_MSG(segs == 2 && convs == 11, "%d convolutions in %d depth-first segments (want 11 in 2)", convs, segs);
    CHECK(off && segment_convs(off, &segs_off) == 0 && segs_off == 0);
    float a[B * CLASSES], b[B * CLASSES], c[B * CLASSES], d[B * CLASSES];
    for (int round = 0; round < 2 && on && off && prof && whole; round++) {
        run(on, &m, x, a);
        run(off, &m, x, b);
        run(prof, &m, x, c);
        run(whole, &m, x, d);
        CHECK_MSG(same_bits(a, d, B * CLASSES), "round %d: logits with the folds' scales as read differ from whole folds'",
                  round);
        CHECK_MSG(same_bits(a, b, B * CLASSES), "round %d: depth-first logits differ from step by step (%g, %g)",
                  round, a[0], b[0]);
        CHECK_MSG(same_bits(a, c, B * CLASSES), "round %d: depth-first logits differ from a profiled run's", round);
        float *p = kiln_params_data(P); /* new weights: each run folds and copies them again */
        for (int64_t i = 0; i < kiln_params_total(P); i++) p[i] *= 0.9f;
    }
    int nz = 0;
    for (int i = 0; i < B * CLASSES; i++) nz += a[i] != 0 && isfinite(a[i]);
    CHECK_MSG(nz == B * CLASSES, "%d of %d logits finite and nonzero", nz, B * CLASSES);
    kiln_plan_free(on);
    kiln_plan_free(off);
    kiln_plan_free(prof);
    kiln_plan_free(whole);
    /* training plans keep every step whole (the forward's batch norms need the batch anyway) */
    kiln_compile_opts o = kiln_compile_defaults();
    o.max_batch = B;
    o.training = 1;
    kiln_plan *tr = NULL;
    kiln_cpu_force_layout_block(8);
    kiln_conv_prefer_own(1);
    kiln_value outs[2] = {m.loss, m.out};
    CHECK_OK(kiln_compile(g, P, outs, 2, &o, &tr));
    kiln_conv_prefer_own(0);
    kiln_cpu_force_layout_block(0);
    CHECK(tr && segment_convs(tr, &segs) == 0);
    kiln_plan_free(tr);
    free(x);
    kiln_params_free(P);
    kiln_graph_free(g);
}

/* timed: each segment is kept or dropped as measured, and the log says which with both times */
static char logged[8192];
static void keep_log(kiln_log_level level, const char *msg, void *user) {
    (void)level;
    (void)user;
    if (strlen(logged) + strlen(msg) + 2 < sizeof logged) strcat(strcat(logged, msg), "\n");
}

static void test_timed(void) {
    kiln_model m;
    kiln_params *P;
    kiln_graph *g = resnet20(&m, &P, 5);
    if (!P) {
        kiln_graph_free(g);
        return;
    }
    kiln_log_set_level(KILN_LOG_INFO);
    kiln_log_set_sink(keep_log, NULL);
    kiln_plan *pl = compile(g, P, m.out, 1, 0);
    kiln_log_set_sink(NULL, NULL);
    int segs = 0;
    if (pl) segment_convs(pl, &segs);
    /* each candidate segment's line ends with the choice */
    const char *first[2] = {"depth-first layers.0.conv1 .. layers.2.conv2 (2 images a slice): ",
                            "depth-first layers.3.conv2 .. layers.5.conv2 (8 images a slice): "};
    int kept = 0, lines = 0;
    for (int k = 0; k < 2; k++) {
        const char *at = strstr(logged, first[k]), *end = at ? strchr(at, '\n') : NULL;
        if (!end) continue;
        lines++;
        kept += end - at > 10 && !strncmp(end - 10, " by slices", 10);
        CHECK_MSG(strstr(at, " ms against ") < end, "%.*s", (int)(end - at), at);
    }
    CHECK_MSG(lines == 2 && segs == kept, "%d segments made, %d kept by the log of %d lines: %s", segs, kept, lines, logged);
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
}

int main(void) {
    if (!kiln_cpu_has_avx2()) {
        printf("test_depth_first: skipped: kiln's Winograd kernel needs AVX2\n");
        return tu_finish("test_depth_first");
    }
    omp_set_num_threads(2); /* the segments' rule counts slices per thread */
    kiln_cpu_depth_first_untimed(1); /* each segment kept (timed, a busy machine could keep it step by step) */
    test_resnet20();
    kiln_cpu_depth_first_untimed(0);
    test_timed();
    return tu_finish("test_depth_first");
}
