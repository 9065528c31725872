/* Layer constructors: parameters named as PyTorch's modules name them, with
 * PyTorch's default initialisation bound (1/sqrt(fan_in)). */
#include <stdio.h>
#include "kiln/nn.h"

kiln_value kiln_nn_conv2d(kiln_graph *g, const char *name, kiln_value x, int64_t in_ch, int64_t out_ch, int64_t kernel,
                          int64_t stride, int64_t pad, int bias) {
    char wn[96], bn[96];
    snprintf(wn, sizeof wn, "%s.weight", name);
    snprintf(bn, sizeof bn, "%s.bias", name);
    int64_t fan_in = in_ch * kernel * kernel;
    int64_t ws[4] = {out_ch, in_ch, kernel, kernel}, bs[1] = {out_ch};
    kiln_value w = kiln_param(g, wn, 4, ws, fan_in);
    kiln_value b = bias ? kiln_param(g, bn, 1, bs, fan_in) : -1;
    return kiln_conv2d(g, x, w, b, stride, pad);
}

kiln_value kiln_nn_linear(kiln_graph *g, const char *name, kiln_value x, int64_t in, int64_t out, int bias) {
    char wn[96], bn[96];
    snprintf(wn, sizeof wn, "%s.weight", name);
    snprintf(bn, sizeof bn, "%s.bias", name);
    int64_t ws[2] = {out, in}, bs[1] = {out};
    kiln_value w = kiln_param(g, wn, 2, ws, in);
    kiln_value b = bias ? kiln_param(g, bn, 1, bs, in) : -1;
    return kiln_linear(g, x, w, b);
}

kiln_value kiln_nn_batch_norm2d(kiln_graph *g, const char *name, kiln_value x, int64_t channels) {
    char n[5][96];
    static const char *suffix[5] = {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"};
    for (int i = 0; i < 5; i++) snprintf(n[i], sizeof n[i], "%s.%s", name, suffix[i]);
    int64_t cs[1] = {channels};
    kiln_value w = kiln_param_fill(g, n[0], 1, cs, 1.0f), b = kiln_param_fill(g, n[1], 1, cs, 0.0f);
    kiln_value rm = kiln_buffer(g, n[2], KILN_F32, 1, cs, 0.0), rv = kiln_buffer(g, n[3], KILN_F32, 1, cs, 1.0);
    kiln_value nb = kiln_buffer(g, n[4], KILN_I64, 0, NULL, 0.0);
    return kiln_batch_norm2d(g, x, w, b, rm, rv, nb, 0.1f, 1e-5f);
}

kiln_value kiln_nn_layer_norm(kiln_graph *g, const char *name, kiln_value x, int64_t dim) {
    char wn[96], bn[96];
    snprintf(wn, sizeof wn, "%s.weight", name);
    snprintf(bn, sizeof bn, "%s.bias", name);
    int64_t cs[1] = {dim};
    return kiln_layer_norm(g, x, kiln_param_fill(g, wn, 1, cs, 1.0f), kiln_param_fill(g, bn, 1, cs, 0.0f), 1e-5f);
}
