/* The GPT: GPT-2's layout (pre-norm blocks, learned positions, input and
 * output embeddings tied, GELU-tanh MLP 4x wide), nanoGPT's initialisation
 * (weights N(0, 0.02), the residual projections N(0, 0.02 / sqrt(2 layers)),
 * biases 0, layer norms 1 and 0), and Hugging Face GPT-2's parameter names
 * and shapes, so a model.safetensors of the same config loads:
 *   wte.weight [V,C], wpe.weight [T,C],
 *   h.N.ln_1.{weight,bias} [C], h.N.attn.c_attn.weight [C,3C] and .bias [3C],
 *   h.N.attn.c_proj.weight [C,C] and .bias, h.N.ln_2.*,
 *   h.N.mlp.c_fc.weight [C,4C] and .bias, h.N.mlp.c_proj.weight [4C,C] and .bias,
 *   ln_f.{weight,bias}.
 * The Conv1D weights are [in, out]: kiln_matmul reads them as they are. The
 * input is a window of `block` token ids (f32, as the token loader gives);
 * the positions are the whole block, so wpe is added as it is (with seq < block,
 * a graph for shorter sequences over the same parameters, its first seq rows). No dropout
 * (nanoGPT's default of 0 for training from scratch at this size). */
#include <math.h>
#include <stdio.h>
#include "graph/internal/graph.h"
#include "nn/internal/models.h"

kiln_gpt_config kiln_gpt_resolve(const kiln_gpt_config *c) {
    kiln_gpt_config r = *c;
    if (!r.layers) r.layers = 4;
    if (!r.heads) r.heads = 4;
    if (!r.dim) r.dim = 256;
    if (!r.block) r.block = 128;
    if (!r.vocab) r.vocab = 256;
    return r;
}

static kiln_value weight(kiln_graph *g, const char *name, int64_t rows, int64_t cols, float std) {
    return kiln_param_normal(g, name, 2, (int64_t[]){rows, cols}, std);
}

static kiln_value zeros(kiln_graph *g, const char *name, int64_t n) { return kiln_param_fill(g, name, 1, (int64_t[]){n}, 0); }

/* x @ w + b with w [in, out] named "<prefix>.weight" */
static kiln_value conv1d(kiln_graph *g, const char *prefix, kiln_value x, int64_t in, int64_t out, float std) {
    char wn[96], bn[96];
    snprintf(wn, sizeof wn, "%s.weight", prefix);
    snprintf(bn, sizeof bn, "%s.bias", prefix);
    return kiln_matmul(g, x, weight(g, wn, in, out, std), zeros(g, bn, out));
}

/* x + attn(ln_1(x)), then + mlp(ln_2(.)) */
static kiln_value block(kiln_graph *g, kiln_value x, int i, const kiln_gpt_config *c) {
    int64_t C = c->dim;
    float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)c->layers);
    char p[64], q[96];
    snprintf(p, sizeof p, "h.%d", i);
    kiln_graph_block_begin(g, p); /* --checkpoint-activations block recomputes it in backward */
    snprintf(q, sizeof q, "%s.ln_1", p);
    kiln_value a = kiln_nn_layer_norm(g, q, x, C);
    snprintf(q, sizeof q, "%s.attn.c_attn", p);
    kiln_value qkv = conv1d(g, q, a, C, 3 * C, std);
    kiln_value att = kiln_causal_attention(g, kiln_slice(g, qkv, 2, 0, C), kiln_slice(g, qkv, 2, C, 2 * C),
                                           kiln_slice(g, qkv, 2, 2 * C, 3 * C), c->heads);
    snprintf(q, sizeof q, "%s.attn.c_proj", p);
    x = kiln_add(g, x, conv1d(g, q, att, C, C, proj_std));
    snprintf(q, sizeof q, "%s.ln_2", p);
    kiln_value m = kiln_nn_layer_norm(g, q, x, C);
    snprintf(q, sizeof q, "%s.mlp.c_fc", p);
    m = kiln_gelu(g, conv1d(g, q, m, C, 4 * C, std), 1);
    snprintf(q, sizeof q, "%s.mlp.c_proj", p);
    x = kiln_add(g, x, conv1d(g, q, m, 4 * C, C, proj_std));
    kiln_graph_block_end(g);
    return x;
}

void kiln_zoo_gpt(kiln_graph *g, kiln_model *m, const kiln_model_opts *o) {
    kiln_gpt_config c = kiln_gpt_resolve(&o->gpt);
    int T = c.seq ? c.seq : c.block;
    if (c.layers < 1 || c.heads < 1 || c.dim < 1 || c.block < 1 || c.vocab < 1 || c.dim % c.heads || T < 1 || T > c.block) {
        kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "gpt: --layers %d --heads %d --dim %d --block %d --vocab %d, %d positions "
                        "(want positive sizes, --dim a multiple of --heads, positions up to the block)", c.layers, c.heads,
                        c.dim, c.block, c.vocab, T);
        return;
    }
    if (o->num_classes && o->num_classes != c.vocab) {
        kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "gpt: --num-classes %d; its outputs are the vocabulary (--vocab %d)",
                        o->num_classes, c.vocab);
        return;
    }
    m->x = kiln_input(g, "x", KILN_F32, 2, (int64_t[]){KILN_BATCH, T});
    m->y = kiln_input(g, "y", KILN_I32, 2, (int64_t[]){KILN_BATCH, T});
    m->num_classes = c.vocab;
    m->block = T;
    kiln_value wte = weight(g, "wte.weight", c.vocab, c.dim, 0.02f);
    kiln_value wpe = weight(g, "wpe.weight", c.block, c.dim, 0.02f);
    if (T < c.block) wpe = kiln_slice(g, wpe, 0, 0, T);
    kiln_value h = kiln_add(g, kiln_embedding(g, m->x, wte), wpe);
    for (int i = 0; i < c.layers; i++) h = block(g, h, i, &c);
    h = kiln_nn_layer_norm(g, "ln_f", h, c.dim);
    m->out = kiln_linear(g, h, wte, -1); /* tied: the logits are h . wte^T */
    m->loss = kiln_cross_entropy_masked(g, m->out, m->y); /* labels of -1 are padding (documents: --batch-tokens) */
}
