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

/* The precision of a matmul-class object's operands (its `bf16` argument): fp32; bf16 on oneDNN's bf16
 * kernels; or emulated, where oneDNN has no bf16 kernel for the shape on this CPU (oneDNN 2.6 has none
 * without AVX-512): each operand rounded to bf16 values in f32 and run on the fp32 kernels. Emulated
 * gives bf16's numbers (fp32 accumulation of bf16 products, as the ref twin) at fp32's speed or less. */
enum { KILN_DN_FP32 = 0, KILN_DN_BF16 = 1, KILN_DN_BF16_EMULATED = 2 };

/* the one engine and stream, made on first use */
kiln_status kiln_dnnl_init(void);
/* 1 when oneDNN has bf16 matmul kernels on this CPU (else --precision bf16 is emulated and auto means fp32) */
int kiln_dnnl_has_bf16(void);

typedef struct kiln_dnnl_conv kiln_dnnl_conv;
typedef struct kiln_dnnl_conv_opts {
    int has_bias;
    int fuse_relu;      /* y = relu(conv(x)) in one pass */
    int need_bwd_data;
    int need_bwd_weight;
    int autotune;       /* time every implementation oneDNN offers on the real shape and keep the fastest */
    int x_blocked;      /* x and dx are in nChw16c or nChw8c (16 or 8: the layout pass's block), 0: NCHW */
    int y_blocked;      /* y and dy likewise */
    int bf16;           /* KILN_DN_*: bf16 x, w and dy (reordered in through the workspace), fp32 outputs */
    int residual;       /* forward only: y += conv(x) (oneDNN's sum post-op, before the relu): y holds the
                           residual when called; only implementations writing y in the plan's layout qualify */
} kiln_dnnl_conv_opts;
kiln_status kiln_dnnl_conv_new(const kiln_conv_shape *cs, const kiln_dnnl_conv_opts *o, kiln_dnnl_conv **out);
void kiln_dnnl_conv_free(kiln_dnnl_conv *c);
size_t kiln_dnnl_conv_workspace(const kiln_dnnl_conv *c);
kiln_status kiln_dnnl_conv_fwd(kiln_dnnl_conv *c, const float *x, const float *w, const float *b, float *y, void *ws);
/* the forward with output channel o's filters times scale[o], as kiln_cpu_bn_fold would have made them (the same
 * bits): only where the forward runs kiln's own kernel (kiln_dnnl_conv_own_fwd) */
int kiln_dnnl_conv_own_fwd(const kiln_dnnl_conv *c);
kiln_status kiln_dnnl_conv_fwd_scaled(kiln_dnnl_conv *c, const float *x, const float *w, const float *scale, const float *b,
                                      float *y, void *ws);
kiln_status kiln_dnnl_conv_bwd_data(kiln_dnnl_conv *c, const float *dy, const float *w, float *dx, int acc, void *ws);
/* db may be NULL when the layer has no bias */
kiln_status kiln_dnnl_conv_bwd_weight(kiln_dnnl_conv *c, const float *x, const float *dy, float *dw, float *db,
                                      int acc_w, int acc_b, void *ws);
/* the problem and each direction's decision, for logs */
const char *kiln_dnnl_conv_describe(const kiln_dnnl_conv *c);
/* depth-first runs (src/backends/cpu/depth_first.c): the forward of images [i0, i0 + n) by the calling thread
 * alone, in ws of kiln_dnnl_conv_slice_workspace(c, n) bytes; x and y are the whole batch's. Only where the forward
 * runs kiln's own kernel: slice_images gives the images a slice needs to keep that kernel's tile blocks full, 0
 * where the forward cannot run by slices. scale: as kiln_dnnl_conv_fwd_scaled's (NULL: none) */
int64_t kiln_dnnl_conv_slice_images(const kiln_dnnl_conv *c);
size_t kiln_dnnl_conv_slice_workspace(const kiln_dnnl_conv *c, int64_t n);
void kiln_dnnl_conv_fwd_images(kiln_dnnl_conv *c, const float *x, const float *w, const float *scale, const float *b,
                               float *y, int64_t i0, int64_t n, void *ws);


typedef struct kiln_dnnl_linear kiln_dnnl_linear;
/* w_kn: the weight is [in, out] (matmul) rather than [out, in] (linear); autotune: time backward-weights two ways
 * (linear_tune.c); bf16 (KILN_DN_*): bf16 operands (converted
 * on every call into ws, kiln_dnnl_linear_workspace bytes), fp32 accumulation and outputs */
kiln_status kiln_dnnl_linear_new(int64_t n, int64_t in, int64_t out, int w_kn, int has_bias, int fuse_relu,
                                 int need_bwd_data, int need_bwd_weight, int bf16, int autotune, kiln_dnnl_linear **res);
void kiln_dnnl_linear_free(kiln_dnnl_linear *l);
size_t kiln_dnnl_linear_workspace(const kiln_dnnl_linear *l);
kiln_status kiln_dnnl_linear_fwd(kiln_dnnl_linear *l, const float *x, const float *w, const float *b, float *y, void *ws);
kiln_status kiln_dnnl_linear_bwd_data(kiln_dnnl_linear *l, const float *dy, const float *w, float *dx, int acc, void *ws);
kiln_status kiln_dnnl_linear_bwd_weight(kiln_dnnl_linear *l, const float *x, const float *dy, float *dw, float *db,
                                        int acc_w, int acc_b, void *ws);

/* bmm on oneDNN matmul (kernels/dnnl/bmm.c): the directions asked for, each
 * reading a and b through their strides; backward's outputs write or add (acc) */
typedef struct kiln_dnnl_bmm kiln_dnnl_bmm;
/* bf16 (KILN_DN_*): bf16 operands converted on every call into ws (kiln_dnnl_bmm_workspace bytes), fp32 accumulation */
kiln_status kiln_dnnl_bmm_new(const kiln_bmm_shape *s, int fwd, int bwd_a, int bwd_b, int bf16, kiln_dnnl_bmm **res);
void kiln_dnnl_bmm_free(kiln_dnnl_bmm *o);
size_t kiln_dnnl_bmm_workspace(const kiln_dnnl_bmm *o);
kiln_status kiln_dnnl_bmm_fwd(kiln_dnnl_bmm *o, const float *a, const float *b, float *y, void *ws);
/* da = dy b^T and db = a^T dy; either may be NULL */
kiln_status kiln_dnnl_bmm_bwd(kiln_dnnl_bmm *o, const float *a, const float *b, const float *dy, float *da, float *db,
                              int acc_a, int acc_b, void *ws);
const char *kiln_dnnl_bmm_impl(const kiln_dnnl_bmm *o); /* the first primitive's implementation ("brg:avx512_core") */

/* Autotune decisions (autotune_cache.c): which implementation each
 * convolution problem uses in each direction ("fwd", "fwd_inf" for an
 * inference plan's forward, "bwd_data", "bwd_weight"), keyed by a
 * benchdnn-like problem string ("mb64ic32ih26iw26oc64kh3kw3sh1ph0+relu/xb/yb")
 * and the machine (kiln_autotune_machine: threads, CPU model, oneDNN
 * version), so a decision from another machine or library is never used.
 * A decision is "algorithm/layout/implementation", e.g.
 * "direct/nhwc/brgconv:avx512_core", with the time it measured. Decisions are
 * kept for the process, in an on-disk cache and in checkpoints, so runs on one
 * machine (and a resumed run) use the same implementations: the same numbers,
 * bit for bit. */
#define KILN_AUTOTUNE_PROBLEM_MAX 160
#define KILN_AUTOTUNE_DECISION_MAX 96
/* "t2,AMD_EPYC,onednn-2.6.3": the compute threads now, the CPU's model name and oneDNN's version */
const char *kiln_autotune_machine(void);
/* this machine's decision for (problem, dir): 1 and decision (len bytes) and its microseconds, or 0 */
int kiln_autotune_lookup(const char *problem, const char *dir, char *decision, size_t len, double *us);
/* remember 0: the decision serves this process but is never exported (timed under load) */
void kiln_autotune_store(const char *problem, const char *dir, const char *decision, double us, int remember);
/* "problem machine dir decision us" lines after a header comment; returns the full length (excluding NUL),
 * writing at most len bytes (buf may be NULL) */
size_t kiln_autotune_export(char *buf, size_t len);
/* adds the decisions in text (replacing known ones when `replace`); a malformed line is an error naming
 * `source` and its line, and then nothing is added; lines of the older "problem dir w|d" form are skipped */
kiln_status kiln_autotune_import(const char *text, const char *source, int replace);
/* 1: decisions from files and checkpoints are timed again (kiln tune --retune: a cache
 * tuned while the machine was busy); what is timed replaces them, and is saved */
void kiln_autotune_set_retune(int on);
void kiln_autotune_forget(void); /* tests: drop every decision, the choices and the counters */

/* What the tuner did (conv_tune.c), for tests, logs and `kiln bench conv`. */
typedef struct kiln_autotune_stats {
    int64_t candidates;  /* implementations timed (each at least one call) */
    int64_t runs;        /* timed calls */
    int64_t tuned;       /* directions decided by timing now */
    int64_t remembered;  /* directions made from a remembered decision (no timing) */
    int64_t over_budget; /* directions left untimed or cut short by the time budget */
    int64_t unsure;      /* of the tuned, those timed while other work held the cores (not remembered on disk) */
    double seconds;      /* wall time spent choosing */
} kiln_autotune_stats;
void kiln_autotune_stats_get(kiln_autotune_stats *s);
void kiln_autotune_stats_reset(void); /* the counters and the list of choices */
/* Each (problem, direction) decided since the last reset, once, in order. */
typedef struct kiln_autotune_choice {
    char problem[KILN_AUTOTUNE_PROBLEM_MAX];
    char dir[16];
    char decision[KILN_AUTOTUNE_DECISION_MAX];
    double us;      /* the best measured time per call (reorders included); 0 when not timed */
    int remembered; /* 1: from a decision made before (this process, the cache, a checkpoint) */
    int candidates; /* implementations timed for it now */
    int unsure;     /* timed now while other work held the cores: not remembered on disk */
} kiln_autotune_choice;
int kiln_autotune_choices(kiln_autotune_choice *out, int max); /* returns how many there are */
/* the tuning budget in seconds: per direction of one conv, and for the whole process (0: the defaults) */
/* the share of a timed call's time its threads may wait for a CPU before the call counts as disturbed
 * (0: the default, 0.1; < 0: never: tests of the cache's mechanics on a machine that may be busy) */
void kiln_autotune_set_wait_share(double share);
void kiln_autotune_set_budget(double per_direction_s, double process_s);
/* the process's budget, which the linear layers' tuning (linear_tune.c) draws on too: spent, and spending */
int kiln_autotune_budget_spent(void);
void kiln_autotune_spend(double seconds);
void kiln_autotune_get_budget(double *per_direction_s, double *process_s);
/* every candidate a direction of this conv could use, as decisions (tests); returns how many */
int kiln_dnnl_conv_candidates(const kiln_conv_shape *cs, const kiln_dnnl_conv_opts *o, const char *dir,
                              char (*out)[KILN_AUTOTUNE_DECISION_MAX], int max);
/* the decision a direction of this object runs ("" when it lacks the direction) */
const char *kiln_dnnl_conv_decision(const kiln_dnnl_conv *c, const char *dir);
/* direction dir (0 forward, 1 backward-data, 2 backward-weights): its decision ("" when the object lacks it),
 * and how many activations and weights it reorders on every call (conv_info.c) */
const char *kiln_dnnl_conv_dir_info(const kiln_dnnl_conv *c, int dir, int *acts, int *weights);

#endif
