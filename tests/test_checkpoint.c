/* Activation checkpointing (src/graph/pass_checkpoint.c): training with and
 * without it gives bit-identical losses step after step (dropout on, so the
 * recomputed masks must be the original ones), the arena shrinks, the plan
 * shows its recomputation steps, and a bad choice is an error naming it. */
#include "kiln/graph.h"
#include "kiln/inspect.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "graph/internal/graph.h"
#include "testutil.h"

#define STEPS 20

typedef struct {
    kiln_graph *g;
    kiln_model m;
    int64_t nx, ny;       /* input elements per sample */
    int y_float;          /* targets are f32 values (mse), else class ids */
    int classes;          /* class ids in [0, classes) */
    int x_ids;            /* inputs are token ids in [0, classes) (gpt), else values */
} net;

/* `layers` linear+relu(+dropout) layers of `width`, blocks of `per_block` layers, cross-entropy over 10 classes */
static net deep_mlp(int layers, int64_t width, int per_block, float p) {
    net n = {.g = kiln_graph_new(), .nx = width, .ny = 1, .classes = 10};
    kiln_graph *g = n.g;
    n.m.x = kiln_input(g, "x", KILN_F32, 2, (int64_t[]){KILN_BATCH, width});
    n.m.y = kiln_input(g, "y", KILN_I32, 1, (int64_t[]){KILN_BATCH});
    kiln_value h = n.m.x;
    for (int l = 0; l < layers; l++) {
        char name[32];
        if (l % per_block == 0) {
            snprintf(name, sizeof name, "blocks.%d", l / per_block);
            kiln_graph_block_begin(g, name);
        }
        snprintf(name, sizeof name, "fc%d", l);
        h = kiln_relu(g, kiln_nn_linear(g, name, h, width, width, 1));
        if (p > 0) h = kiln_dropout(g, h, p);
        if (l % per_block == per_block - 1 || l == layers - 1) kiln_graph_block_end(g);
    }
    n.m.out = kiln_nn_linear(g, "head", h, width, 10, 1);
    n.m.loss = kiln_cross_entropy(g, n.m.out, n.m.y);
    return n;
}

static net zoo(const char *name, int64_t width) {
    net n = {.g = kiln_graph_new()};
    kiln_model_opts o = {.width = width, .gpt = {.layers = 2, .heads = 2, .dim = 32, .block = 16, .vocab = 64}};
    CHECK_OK(kiln_model_build_ex(n.g, name, &o, &n.m));
    int64_t s[8];
    int nd = kiln_value_shape(n.g, n.m.x, s);
    n.nx = 1;
    for (int d = 1; d < nd; d++) n.nx *= s[d];
    nd = kiln_value_shape(n.g, n.m.y, s);
    n.ny = 1;
    for (int d = 1; d < nd; d++) n.ny *= s[d];
    n.y_float = strcmp(name, "mlp-deep") == 0;
    n.x_ids = strcmp(name, "gpt") == 0;
    n.classes = n.m.num_classes;
    return n;
}

typedef struct {
    double loss[STEPS];
    size_t arena, arena_plain;
    int recomputed, recompute_steps;
    float w_after[16];
} run_result;

/* STEPS steps of SGD with momentum from the same weights and data; the plan compiled with `ckpt` */
static kiln_status train(net *n, const char *ckpt, int64_t batch, run_result *r) {
    memset(r, 0, sizeof *r);
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    kiln_optim *o = NULL;
    float *x = malloc((size_t)(batch * n->nx) * sizeof *x), *yf = malloc((size_t)(batch * n->ny) * sizeof *yf);
    int32_t *yi = malloc((size_t)(batch * n->ny) * sizeof *yi);
    kiln_status st = kiln_params_new(n->g, KILN_F32, &P);
    if (st != KILN_OK) goto out;
    kiln_params_init(P, 7);
    kiln_compile_opts co = kiln_compile_defaults();
    co.training = 1;
    co.max_batch = batch;
    co.seed = 11;
    co.checkpoint_activations = ckpt;
    if ((st = kiln_compile(n->g, P, &n->m.loss, 1, &co, &pl)) != KILN_OK) goto out;
    r->arena = kiln_plan_arena_bytes(pl);
    r->arena_plain = kiln_plan_arena_bytes_plain(pl);
    r->recomputed = kiln_plan_recomputed(pl);
    for (int i = 0; i < kiln_plan_step_count(pl); i++) {
        kiln_step_info si;
        if (kiln_plan_step_info(pl, i, &si) == KILN_OK && strcmp(si.phase, "recompute") == 0) r->recompute_steps++;
    }
    kiln_optim_config oc = kiln_optim_defaults(KILN_OPT_SGD);
    oc.lr = 0.05f;
    oc.momentum = 0.9f;
    if ((st = kiln_optim_new(&oc, P, &o)) != KILN_OK) goto out;
    tu_seed(3);
    for (int s = 0; s < STEPS && st == KILN_OK; s++) {
        tu_fill(x, batch * n->nx, -1, 1);
        for (int64_t i = 0; n->x_ids && i < batch * n->nx; i++) x[i] = (float)tu_int(0, n->classes - 1);
        tu_fill(yf, batch * n->ny, -1, 1);
        for (int64_t i = 0; i < batch * n->ny; i++) yi[i] = (int32_t)tu_int(0, n->classes - 1);
        if ((st = kiln_plan_bind(pl, n->m.x, x)) != KILN_OK) break;
        if ((st = kiln_plan_bind(pl, n->m.y, n->y_float ? (const void *)yf : (const void *)yi)) != KILN_OK) break;
        kiln_plan_set_step(pl, (uint64_t)s);
        if ((st = kiln_plan_run(pl, batch)) == KILN_OK) st = kiln_optim_step(o);
        r->loss[s] = kiln_plan_loss(pl);
    }
    memcpy(r->w_after, kiln_params_data(P), sizeof r->w_after);
out:
    kiln_optim_free(o);
    kiln_plan_free(pl);
    kiln_params_free(P);
    free(x);
    free(yf);
    free(yi);
    return st;
}

/* plain against checkpointed: the same bits every step */
static void same_training(net *n, const char *ckpt, int64_t batch, const char *what) {
    run_result a, b;
    CHECK_OK(train(n, NULL, batch, &a));
    CHECK_OK(train(n, ckpt, batch, &b));
    int same = 1;
    for (int s = 0; s < STEPS; s++) same &= memcmp(&a.loss[s], &b.loss[s], sizeof(double)) == 0 && isfinite(a.loss[s]);
    CHECK_MSG(same, "%s: losses differ (step 0: %.9g vs %.9g, step %d: %.9g vs %.9g)", what, a.loss[0], b.loss[0],
              STEPS - 1, a.loss[STEPS - 1], b.loss[STEPS - 1]);
    CHECK_MSG(a.loss[STEPS - 1] != a.loss[0], "%s: the loss never changed", what);
    CHECK_MSG(memcmp(a.w_after, b.w_after, sizeof a.w_after) == 0, "%s: weights differ after %d steps", what, STEPS);
    CHECK_MSG(b.recomputed > 0 && b.recompute_steps > 0, "%s: %d nodes recomputed, %d recompute steps", what,
              b.recomputed, b.recompute_steps);
    CHECK_MSG(b.arena < a.arena && b.arena_plain == a.arena, "%s: arena %zu with, %zu without (plain figure %zu)", what,
              b.arena, a.arena, b.arena_plain);
    CHECK(a.recomputed == 0 && a.arena_plain == a.arena);
    printf("%s: arena %.2f -> %.2f MiB, %d nodes recomputed, %d steps' losses identical\n", what, a.arena / 1048576.0,
           b.arena / 1048576.0, b.recomputed, STEPS);
}

/* a run where dropout is on: a recomputed mask drawn with another key changes every loss */
static void dropout_matters(void) {
    net n = deep_mlp(8, 48, 2, 0.3f);
    same_training(&n, "block", 16, "mlp 8x48 dropout 0.3, block");
    same_training(&n, "dropout", 16, "mlp 8x48 dropout 0.3, dropout");
    same_training(&n, "block,dropout", 16, "mlp 8x48 dropout 0.3, block,dropout");
    kiln_graph_free(n.g);
    /* a block per layer: segments recomputed within recomputations, each mask drawn with its original's key */
    n = deep_mlp(12, 48, 1, 0.3f);
    same_training(&n, "block", 16, "mlp 12x48 dropout 0.3, a block per layer, block");
    kiln_graph_free(n.g);
}

/* the binomial schedule (checkpoint_schedule.c): unit forwards recomputed for 16 units, as
 * Griewank's revolve counts them (the forward's own sweep free) */
static void schedule(void) {
    kiln_ckpt_sched *k = kiln_ckpt_sched_new(16);
    CHECK(k);
    CHECK(kiln_ckpt_sched_cost(k, 1, 16, 15) == 0 && kiln_ckpt_sched_cost(k, 1, 16, 16) == 0);
    CHECK(kiln_ckpt_sched_cost(k, 1, 16, 5) == 10 && kiln_ckpt_sched_cost(k, 1, 16, 4) == 12);
    CHECK(kiln_ckpt_sched_cost(k, 1, 16, 3) == 18 && kiln_ckpt_sched_cost(k, 1, 16, 2) == 43);
    CHECK(kiln_ckpt_sched_cost(k, 1, 16, 0) == -1 && kiln_ckpt_sched_cost(k, 0, 3, 1) == -1);
    CHECK(kiln_ckpt_sched_cost(k, 0, 1, 0) == 0 && kiln_ckpt_sched_cost(k, 0, 2, 1) == 1);
    /* 4 slots: checkpoints after units 5, 9, 13, 15; the first segment 5 long */
    CHECK(kiln_ckpt_sched_split(k, 1, 16, 4) == 5 && kiln_ckpt_sched_split(k, 1, 11, 3) == 4);
    kiln_ckpt_sched_free(k);
}

static void zoo_models(void) {
    net n = zoo("mlp", 0);
    same_training(&n, "dropout", 32, "zoo mlp, dropout");
    kiln_graph_free(n.g);
    n = zoo("mlp-deep", 64);
    same_training(&n, "block", 8, "mlp-deep 16x64, block");
    kiln_graph_free(n.g);
    n = zoo("gpt", 0); /* 2 layers, 2 heads, 32 wide, block 16, vocab 64 */
    same_training(&n, "block", 4, "gpt 2x32, block");
    same_training(&n, "gelu,layernorm", 4, "gpt 2x32, gelu,layernorm");
    same_training(&n, "block,gelu", 4, "gpt 2x32, block,gelu");
    kiln_graph_free(n.g);
}

static void bad_choices(void) {
    CHECK(kiln_checkpoint_check(NULL) == KILN_OK && kiln_checkpoint_check("none") == KILN_OK);
    CHECK(kiln_checkpoint_check("block") == KILN_OK && kiln_checkpoint_check("relu,dropout") == KILN_OK);
    CHECK(kiln_checkpoint_check("max_pool2d,maxpool2d") == KILN_OK);
    CHECK(kiln_checkpoint_check("linear") == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "'linear'"));
    CHECK(kiln_checkpoint_check("relu,,") == KILN_ERR_INVALID_ARG);
    net n = deep_mlp(2, 8, 1, 0);
    run_result r;
    CHECK(train(&n, "blocks", 4, &r) == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "checkpoint_activations") &&
          strstr(kiln_last_error(), "'blocks'"));
    kiln_graph_free(n.g);
    /* scopes do not nest, and an end needs a begin */
    kiln_graph *g = kiln_graph_new();
    kiln_graph_block_begin(g, "a");
    kiln_graph_block_begin(g, "b");
    CHECK(kiln_graph_status(g) == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "'b'"));
    kiln_graph_free(g);
    g = kiln_graph_new();
    kiln_graph_block_end(g);
    CHECK(kiln_graph_status(g) == KILN_ERR_INVALID_ARG);
    kiln_graph_free(g);
}

/* a chosen op whose recomputation would keep alive as much as it frees is left alone */
static void not_worth_it(void) {
    net n = deep_mlp(2, 16, 1, 0);
    run_result r;
    CHECK_OK(train(&n, "add", 4, &r)); /* the graph has no add: nothing to do, no error */
    CHECK(r.recomputed == 0 && r.arena == r.arena_plain);
    kiln_graph_free(n.g);
}

static size_t json_size(const char *json, const char *key) {
    const char *p = json ? strstr(json, key) : NULL;
    return p ? (size_t)strtoull(p + strlen(key), NULL, 10) : 0;
}

/* kiln inspect lists each recomputation as a step of phase "recompute", and both arenas; mlp-deep's
 * 16 single-layer blocks are checkpointed on the schedule whose arena is smallest within one
 * forward's recomputation: 4 slots, 12 layers recomputed (one twice), 5 tensors where the plain
 * plan holds 16 (the cpu writes each backward over its dying gradient, and the loss's backward,
 * relu's folded in, over the output: 16 outputs, then 15 and one gradient) */
static void inspect_shows_it(void) {
    kiln_inspect_config c = kiln_inspect_defaults();
    c.model = "mlp-deep";
    c.model_opts.width = 32;
    c.batch = 8;
    c.checkpoint_activations = "block";
    char *json = NULL;
    CHECK_OK(kiln_inspect(&c, &json));
    int steps = 0;
    for (const char *p = json; p && (p = strstr(p, "\"phase\": \"recompute\"")); p++) steps++;
    CHECK_MSG(steps == 12, "%d recompute steps", steps);
    CHECK(json && strstr(json, "\"recomputed\": 24"));
    /* layer 10 (\"18\") twice; 5's and 15's outputs (\"8\", \"28\") are checkpoints, 16's the output */
    CHECK(json && strstr(json, "\"name\": \"18:recompute:recompute\"") && strstr(json, "\"name\": \"6:recompute\""));
    CHECK(json && !strstr(json, "\"name\": \"8:recompute\"") && !strstr(json, "\"name\": \"28:recompute\"") &&
          !strstr(json, "\"name\": \"30:recompute\""));
    size_t tensor = 8 * 32 * 4, with = json_size(json, "\"arena_bytes\": "), plain = json_size(json, "\"arena_bytes_plain\": ");
    CHECK_MSG(with >= 5 * tensor && with < 6 * tensor && plain >= 16 * tensor && plain < 17 * tensor,
              "arena %zu with, %zu without (tensors of %zu)", with, plain, tensor);
    free(json);
}

int main(void) {
    schedule();
    bad_choices();
    not_worth_it();
    dropout_matters();
    zoo_models();
    inspect_shows_it();
    return tu_finish("test_checkpoint");
}
