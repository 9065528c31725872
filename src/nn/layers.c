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
