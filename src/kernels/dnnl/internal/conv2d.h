/* What conv2d.c (the oneDNN convolution object and its execution) and
 * conv_tune.c (choosing each direction's implementation) share. */
#ifndef KILN_DNNL_CONV2D_H
#define KILN_DNNL_CONV2D_H

#include "kernels/dnnl/internal/dnnl_util.h"
#include "kernels/internal/dnnl_ops.h"

enum { KILN_CONV_FWD, KILN_CONV_BWD_DATA, KILN_CONV_BWD_WEIGHT, KILN_CONV_NDIR };

/* the activations' layout asked of oneDNN for x/dx and y/dy: "any" lets each
 * implementation pick its own; the others name one; "plan" is the plan's own
 * pair when x and y differ (a plain input feeding a blocked output) */
enum { KILN_CONV_FMT_ANY, KILN_CONV_FMT_NCHW, KILN_CONV_FMT_NHWC, KILN_CONV_FMT_BLOCKED, KILN_CONV_FMT_PLAN,
       KILN_CONV_NFMT };
extern const char *const kiln_conv_fmt_names[KILN_CONV_NFMT];

/* one direction as made: its primitive, the reorders between the plan's
 * layouts and the primitive's, and the decision that names it */
typedef struct kiln_conv_dir {
    dnnl_primitive_desc_t pd, hint; /* hint: the forward descriptor a backward one was made against */
    dnnl_primitive_t prim;
    kiln_dn_arg a[3];
    size_t ws;      /* workspace this direction needs */
    size_t acc_off; /* where an accumulated output is staged */
    char decision[KILN_AUTOTUNE_DECISION_MAX];
    double us;      /* its measured time per call (reorders included), 0 when not timed */
    int unsure;     /* timed while other work held the cores: not remembered on disk */
    int own;        /* > 0: kiln's own kernel (conv_wino.c) instead of a primitive, its workspace sized for a team
                       of `own` threads; no pd, prim or reorders */
} kiln_conv_dir;

/* a direction is made: a oneDNN primitive or kiln's own kernel */
static inline int kiln_conv_dir_made(const kiln_conv_dir *d) { return d->pd != NULL || d->own; }

struct kiln_dnnl_conv {
    kiln_conv_shape cs;
    kiln_dnnl_conv_opts o;
    dnnl_memory_desc_t x_md, w_md, b_md, y_md; /* the plan's layouts */
    dnnl_memory_t bias_mem;
    kiln_conv_dir d[KILN_CONV_NDIR];
    size_t ws;
    char problem[KILN_AUTOTUNE_PROBLEM_MAX]; /* the autotune key */
    char desc[640];
};

extern const char *const kiln_conv_dir_names[KILN_CONV_NDIR];
/* the direction's name in decisions: the forward of an inference plan is "fwd_inf" (another oneDNN propagation) */
const char *kiln_conv_dir_key(const kiln_dnnl_conv *c, int dir);

/* fills the shape, options, problem string and the plan's layouts (no primitive yet) */
void kiln_conv_setup(kiln_dnnl_conv *c, const kiln_conv_shape *cs, const kiln_dnnl_conv_opts *o);
/* the operation descriptor of a direction for an algorithm and an activation layout (and the relu post-op) */
dnnl_status_t kiln_conv_op_desc(const kiln_dnnl_conv *c, int dir, dnnl_alg_kind_t alg, int fmt,
                                dnnl_convolution_desc_t *desc, dnnl_primitive_attr_t *attr);
/* makes c->d[dir] from a primitive descriptor (taken, with its hint) and binds its reorders */
kiln_status kiln_conv_dir_make(kiln_dnnl_conv *c, int dir, dnnl_primitive_desc_t pd, dnnl_primitive_desc_t hint);
void kiln_conv_dir_free(kiln_conv_dir *d);
/* one call of a direction: (in0, in1, bias, out) in the plan's layouts, transient buffers in ws */
kiln_status kiln_conv_run_dir(kiln_dnnl_conv *c, int dir, float *in0, float *in1, float *bias, float *out, void *ws);

/* conv_wino.c: kiln's Winograd F(4x4, 3x3) (src/kernels/cpu/winograd_avx2.c) as a direction of the conv
 * object: every direction of a 3x3 stride-1 fp32 convolution whose x and y the plan keeps in nChw8c
 * (backward-weights without a bias), on AVX2 CPUs. The tuner's candidate "winograd/plan/kiln:wino_4x3_avx2" */
#define KILN_CONV_OWN_IMPL "kiln:wino_4x3_avx2"
int kiln_conv_own_fits(const kiln_dnnl_conv *c, int dir);
kiln_status kiln_conv_own_make(kiln_dnnl_conv *c, int dir);
/* acc: backward-data and backward-weights add into out (forward adds when the object has the residual sum) */
kiln_status kiln_conv_own_run(kiln_dnnl_conv *c, int dir, const float *in0, const float *w, const float *bias, float *out,
                              int acc, void *ws);
/* the same with the forward's filters multiplied per output channel by scale as they are read (NULL: none) */
kiln_status kiln_conv_own_run_scaled(kiln_dnnl_conv *c, int dir, const float *in0, const float *w, const float *scale,
                                     const float *bias, float *out, int acc, void *ws);
/* tests: every direction kiln's kernel fits takes it, untimed (0: the tuner as usual) */
void kiln_conv_prefer_own(int on);

/* autotune_cache.c: drops every decision (kiln_autotune_forget also clears the tuner's counters) */
void kiln_autotune_table_clear(void);

/* conv_tune.c: chooses every direction the object needs (timed, remembered or oneDNN's first) */
kiln_status kiln_conv_choose_all(kiln_dnnl_conv *c);

#endif
