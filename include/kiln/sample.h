/* kiln/sample.h — text from a trained GPT (`kiln sample`).
 *
 *     kiln_sample_config c = kiln_sample_defaults();
 *     c.load = "run.safetensors"; c.prompt = "The "; c.tokens = 200;
 *     if (kiln_sample(&c, emit, user) != KILN_OK) ... kiln_last_error()
 *
 * Byte-level tokens: the prompt's bytes are the context (an empty prompt
 * starts from a newline); each new token is drawn from the last position's
 * logits divided by the temperature, restricted to the top_k most likely
 * (0: all), with a counter-based draw keyed by (seed, position), so the same
 * seed gives the same text. The context is the last `block` tokens; an
 * inference plan of batch 1 runs the whole block (causal attention makes the
 * padding after the context irrelevant to the position read).
 */
#ifndef KILN_SAMPLE_H
#define KILN_SAMPLE_H

#include "kiln/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_sample_config {
    const char *model;          /* "gpt" */
    kiln_model_opts model_opts; /* gpt: layers, heads, dim, block, vocab as trained */
    const char *load;           /* the weights (a kiln checkpoint or HF GPT-2 names in safetensors) */
    const char *prompt;         /* bytes; NULL or "": a newline */
    int tokens;                 /* how many to generate */
    float temperature;          /* > 0 */
    int top_k;                  /* 0: every token */
    uint64_t seed;
    int threads;                /* 0: every core */
} kiln_sample_config;
kiln_sample_config kiln_sample_defaults(void); /* 200 tokens, temperature 0.8, top-k 40, seed 1 */

/* called with each generated token, in order; return non-zero to stop */
typedef int (*kiln_sample_fn)(int token, void *user);
kiln_status kiln_sample(const kiln_sample_config *c, kiln_sample_fn emit, void *user);

#ifdef __cplusplus
}
#endif
#endif
