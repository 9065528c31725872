/* oneDNN-backed convolution and linear layers (src/kernels/dnnl/): the CPU
 * counterpart of cuDNN. An object is made once per (shape, batch) at compile
 * time; each call only sets data pointers and executes, allocating nothing.
 * Transient buffers (reorders to oneDNN's blocked layouts) come from a
 * workspace the plan shares among all kernels: `workspace_bytes` says how much. */
#ifndef KILN_DNNL_OPS_H
#define KILN_DNNL_OPS_H

#include <stddef.h>
#include "kernels/internal/kernels.h"
#include "kiln/status.h"

/* the one engine and stream, made on first use */
kiln_status kiln_dnnl_init(void);

typedef struct kiln_dnnl_conv kiln_dnnl_conv;
typedef struct kiln_dnnl_conv_opts {
    int has_bias;
    int fuse_relu;      /* y = relu(conv(x)) in one pass */
    int need_bwd_data;
    int need_bwd_weight;
    int autotune;       /* time every algorithm (winograd, direct) on the real shape and keep the fastest */
    int x_blocked;      /* x and dx are in nChw16c (layout pass), else NCHW */
    int y_blocked;      /* y and dy likewise */
} kiln_dnnl_conv_opts;
kiln_status kiln_dnnl_conv_new(const kiln_conv_shape *cs, const kiln_dnnl_conv_opts *o, kiln_dnnl_conv **out);
void kiln_dnnl_conv_free(kiln_dnnl_conv *c);
size_t kiln_dnnl_conv_workspace(const kiln_dnnl_conv *c);
kiln_status kiln_dnnl_conv_fwd(kiln_dnnl_conv *c, const float *x, const float *w, const float *b, float *y, void *ws);
kiln_status kiln_dnnl_conv_bwd_data(kiln_dnnl_conv *c, const float *dy, const float *w, float *dx, int acc, void *ws);
/* db may be NULL when the layer has no bias */
kiln_status kiln_dnnl_conv_bwd_weight(kiln_dnnl_conv *c, const float *x, const float *dy, float *dw, float *db,
                                      int acc_w, int acc_b, void *ws);
/* "fwd:winograd bwd_data:direct ..." and implementation names, for logs */
const char *kiln_dnnl_conv_describe(const kiln_dnnl_conv *c);

typedef struct kiln_dnnl_linear kiln_dnnl_linear;
kiln_status kiln_dnnl_linear_new(int64_t n, int64_t in, int64_t out, int has_bias, int fuse_relu, int need_bwd_data,
                                 int need_bwd_weight, kiln_dnnl_linear **res);
void kiln_dnnl_linear_free(kiln_dnnl_linear *l);
kiln_status kiln_dnnl_linear_fwd(kiln_dnnl_linear *l, const float *x, const float *w, const float *b, float *y);
kiln_status kiln_dnnl_linear_bwd_data(kiln_dnnl_linear *l, const float *dy, const float *w, float *dx, int acc);
kiln_status kiln_dnnl_linear_bwd_weight(kiln_dnnl_linear *l, const float *x, const float *dy, float *dw, float *db,
                                        int acc_w, int acc_b);

/* Autotune decisions (autotune_cache.c): which algorithm each convolution
 * problem uses in each direction, keyed by a benchdnn-like problem string
 * ("mb64ic32ih26iw26oc64kh3kw3sh1ph0+relu/xb/yb"). Decisions are kept for the
 * process, written to an on-disk cache, and stored in checkpoints, so runs on
 * one machine (and a resumed run anywhere) use the same algorithms: the same
 * numbers, bit for bit. Algorithms are 'w' (Winograd) or 'd' (direct). */
int kiln_autotune_lookup(const char *problem, const char *dir, char *alg);
void kiln_autotune_store(const char *problem, const char *dir, char alg);
/* "problem dir alg\n" lines; returns the full length (excluding NUL), writing at most len bytes (buf may be NULL) */
size_t kiln_autotune_export(char *buf, size_t len);
/* adds the decisions in text (replacing known ones when `replace`); malformed lines are an error naming `source` */
kiln_status kiln_autotune_import(const char *text, const char *source, int replace);
/* the on-disk cache: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; "" disables */
void kiln_autotune_forget(void); /* tests: drop every decision */

#endif
