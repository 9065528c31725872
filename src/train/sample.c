/* kiln sample: autoregressive text from a GPT (include/kiln/sample.h). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "base/internal/rng.h"
#include "kiln/alloc.h"
#include "kiln/sample.h"
#include "kiln/train.h"

kiln_sample_config kiln_sample_defaults(void) {
    return (kiln_sample_config){.model = "gpt", .tokens = 200, .temperature = 0.8f, .top_k = 40, .seed = 1};
}

static kiln_status check(const kiln_sample_config *c) {
    if (!c->load) return kiln_fail(KILN_ERR_INVALID_ARG, "sample needs --load FILE (the weights)");
    if (c->tokens < 0 || c->tokens > 1 << 24)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--tokens is %d; use 0..%d", c->tokens, 1 << 24);
    if (!(c->temperature > 0) || !isfinite(c->temperature))
        return kiln_fail(KILN_ERR_INVALID_ARG, "--temperature is %g; it must be > 0", (double)c->temperature);
    if (c->top_k < 0) return kiln_fail(KILN_ERR_INVALID_ARG, "--top-k is %d; use 0 (every token) or more", c->top_k);
    if (c->threads < 0 || c->threads > 1024)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--threads is %d; use 0..1024 (0: every core)", c->threads);
    return KILN_OK;
}

/* a token from logits [V]: softmax(logits / T) over the top k, drawn with u in [0, 1) */
static int draw(const float *logits, int V, float temperature, int top_k, float u, double *p) {
    float kth = -INFINITY;
    if (top_k > 0 && top_k < V) { /* the k-th largest logit: keep those >= it */
        float *tmp = (float *)p;  /* p has room for V doubles: 2V floats */
        memcpy(tmp, logits, (size_t)V * sizeof *tmp);
        for (int k = 0; k < top_k; k++) {
            int best = k;
            for (int i = k + 1; i < V; i++)
                if (tmp[i] > tmp[best]) best = i;
            float t = tmp[k];
            tmp[k] = tmp[best];
            tmp[best] = t;
        }
        kth = tmp[top_k - 1];
    }
    float top = -INFINITY;
    for (int i = 0; i < V; i++) top = logits[i] > top ? logits[i] : top;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += p[i] = logits[i] >= kth ? exp((double)(logits[i] - top) / temperature) : 0;
    double acc = 0, target = u * sum;
    for (int i = 0; i < V; i++)
        if ((acc += p[i]) > target && p[i] > 0) return i;
    for (int i = V - 1; i >= 0; i--) /* rounding left target at the very end */
        if (p[i] > 0) return i;
    return 0;
}

typedef struct {
    kiln_graph *g;
    kiln_model m;
    kiln_params *P;
    kiln_plan *plan;
    float *x, *logits;
    int32_t *y;
    double *p;
} sampler;

static kiln_status open_sampler(const kiln_sample_config *c, sampler *S) {
    S->g = kiln_graph_new();
    kiln_status st = kiln_model_build_ex(S->g, c->model ? c->model : "gpt", &c->model_opts, &S->m);
    if (st == KILN_OK && S->m.block < 1)
        st = kiln_fail(KILN_ERR_INVALID_ARG, "sample: model %s is not a language model (gpt)", c->model);
    if (st == KILN_OK) st = kiln_params_new_on(S->g, "cpu", &S->P);
    if (st == KILN_OK) st = kiln_checkpoint_load_params(S->P, c->load);
    if (st != KILN_OK) return st;
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 0;
    o.max_batch = 1;
    if ((st = kiln_compile(S->g, S->P, &S->m.out, 1, &o, &S->plan)) != KILN_OK) return st;
    int64_t T = S->m.block, V = S->m.num_classes;
    S->x = kiln_alloc((size_t)T * sizeof *S->x);
    S->y = kiln_alloc((size_t)T * sizeof *S->y);
    S->logits = kiln_alloc((size_t)(T * V) * sizeof *S->logits);
    S->p = malloc((size_t)V * sizeof *S->p);
    if (!S->x || !S->y || !S->logits || !S->p) return kiln_fail(KILN_ERR_NOMEM, "sample: out of memory");
    memset(S->y, 0, (size_t)T * sizeof *S->y); /* bound, never read: the loss is not computed */
    kiln_plan_bind(S->plan, S->m.x, S->x);
    return kiln_plan_bind(S->plan, S->m.y, S->y);
}

static void close_sampler(sampler *S) {
    kiln_plan_free(S->plan);
    kiln_params_free(S->P);
    kiln_graph_free(S->g);
    kiln_free(S->x), kiln_free(S->y), kiln_free(S->logits);
    free(S->p);
}

kiln_status kiln_sample(const kiln_sample_config *c, kiln_sample_fn emit, void *user) {
    kiln_status st = check(c);
    if (st != KILN_OK) return st;
    omp_set_num_threads(c->threads > 0 ? c->threads : kiln_cores_available());
    sampler S = {0};
    const char *prompt = c->prompt && c->prompt[0] ? c->prompt : "\n";
    int64_t np = (int64_t)strlen(prompt), n = np + c->tokens;
    int *ctx = malloc((size_t)n * sizeof *ctx);
    if (!ctx) return kiln_fail(KILN_ERR_NOMEM, "sample: out of memory");
    for (int64_t i = 0; i < np; i++) ctx[i] = (unsigned char)prompt[i];
    if ((st = open_sampler(c, &S)) == KILN_OK && S.m.num_classes < 256)
        st = kiln_fail(KILN_ERR_INVALID_ARG, "sample: --vocab %d cannot hold the prompt's bytes (256)", S.m.num_classes);
    int64_t T = S.m.block, V = S.m.num_classes;
    uint64_t key = kiln_rng_key(c->seed, 0x73616d70 /* "samp" */, 0);
    for (int64_t at = np; st == KILN_OK && at < n; at++) {
        int64_t from = at > T ? at - T : 0, len = at - from;
        for (int64_t i = 0; i < T; i++) S.x[i] = i < len ? (float)ctx[from + i] : 0.0f;
        if ((st = kiln_plan_run(S.plan, 1)) != KILN_OK) break;
        if ((st = kiln_plan_read(S.plan, S.m.out, S.logits, T * V)) != KILN_OK) break;
        float u = kiln_rng_uniform(key, 0, (uint64_t)at, 0.0f, 1.0f);
        ctx[at] = draw(S.logits + (len - 1) * V, (int)V, c->temperature, c->top_k, u, S.p);
        if (emit && emit(ctx[at], user)) break;
    }
    close_sampler(&S);
    free(ctx);
    return st;
}
