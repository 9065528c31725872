/* The cpu backend (float, kiln's own kernels and oneDNN): what its files share. */
#ifndef KILN_BACKEND_CPU_H
#define KILN_BACKEND_CPU_H

#include "backends/internal/backend.h"

extern const kiln_backend kiln_backend_cpu;
extern const kiln_kernel kiln_cpu_kernels[KILN_OP_COUNT];

/* the cpu backend's layout tag: oneDNN's channel-blocked nChw<B>c, B floats to a
 * vector register (16 with AVX-512, else 8: oneDNN's AVX2 kernels block by 8);
 * a value's layout field holds B. force: tests run either block on any CPU (0: back to the CPU's) */
int kiln_cpu_layout_block(void);
void kiln_cpu_force_layout_block(int block);

/* fused.c: fused pointwise steps; prepare folds the program into vector passes (AVX-512 CPUs) */
kiln_status kiln_cpu_fused_prepare(kiln_step *s, kiln_prep *p);
void kiln_cpu_fused_release(kiln_step *s);
kiln_status kiln_cpu_fused_run(const kiln_step *s, const kiln_run_ctx *rc);
int kiln_cpu_fused_describe(const kiln_step *s, char *buf, size_t len, int *weights);

/* pass_in_place.c: lets relu's backward and linear's and matmul's backward-data write dx over a dying dy
 * of the same shape;
 * returns the number of nodes marked */
int kiln_cpu_pass_in_place(kiln_graph *g);

/* fold_scale.c: in inference plans, a batch norm fold before a convolution on kiln's own kernel writes only
 * its scales, which the kernel applies as it reads the weights (a list pass, after every step is prepared) */
kiln_status kiln_cpu_fold_scale_prepare(kiln_prep *p);
void kiln_cpu_fold_scale_off(int on); /* tests: every fold whole (0: as the pass finds) */

/* depth_first.c: inference plans' chains of convolutions on kiln's own kernel, run image slice by image slice:
 * the list pass that finds them (after every step is prepared) and the backend's run */
kiln_status kiln_cpu_depth_first_prepare(kiln_prep *p);
kiln_status kiln_cpu_run(const kiln_step *steps, int n, const kiln_run_ctx *rc);
void kiln_cpu_depth_first_untimed(int on); /* tests: keep every segment the rules allow, untimed (0: timed) */

/* autotune.c: the on-disk memory of conv algorithm decisions, loaded before the
 * first tuning of the process and written back when something new was decided */
void kiln_cpu_autotune_begin(void);
void kiln_cpu_autotune_end(void);
void kiln_cpu_autotune_reset(void); /* tests: forget every decision, read the disk cache again */

/* precision.c: a matmul-class step's object in its node's precision (the autocast pass); `auto` times it
 * made both ways on the real shape and keeps the faster (remembered by shape for the process) */
#define KILN_CPU_PREC_BUFS 6
typedef struct kiln_cpu_prec_ops {
    kiln_status (*make)(kiln_step *s, const kiln_prep *p, int bf16); /* sets s->kobj (owned) */
    void (*release)(kiln_step *s);
    size_t (*workspace)(const kiln_step *s);
    /* one call of every direction the object has, on scratch buffers each as large as the step's largest tensor */
    kiln_status (*call)(const kiln_step *s, float *const *buf, void *ws);
} kiln_cpu_prec_ops;
kiln_status kiln_cpu_precision_prepare(kiln_step *s, kiln_prep *p, const kiln_cpu_prec_ops *ops);

/* dnnl.c: conv2d and linear steps on oneDNN */
kiln_status kiln_cpu_conv_prepare(kiln_step *s, kiln_prep *p);
kiln_status kiln_cpu_conv_bwd_prepare(kiln_step *s, kiln_prep *p);
void kiln_cpu_conv_release(kiln_step *s);
kiln_status kiln_cpu_conv_fwd(const kiln_step *s, const kiln_run_ctx *rc);
kiln_status kiln_cpu_conv_add_fwd(const kiln_step *s, const kiln_run_ctx *rc);
kiln_status kiln_cpu_conv_bwd_data(const kiln_step *s, const kiln_run_ctx *rc);
kiln_status kiln_cpu_conv_bwd_weight(const kiln_step *s, const kiln_run_ctx *rc);
kiln_status kiln_cpu_linear_prepare(kiln_step *s, kiln_prep *p);
kiln_status kiln_cpu_matmul_prepare(kiln_step *s, kiln_prep *p); /* the linear steps run it: the weight is [I,O] */
kiln_status kiln_cpu_linear_bwd_prepare(kiln_step *s, kiln_prep *p);
void kiln_cpu_linear_release(kiln_step *s);
kiln_status kiln_cpu_linear_fwd(const kiln_step *s, const kiln_run_ctx *rc);
kiln_status kiln_cpu_linear_bwd_data(const kiln_step *s, const kiln_run_ctx *rc);
kiln_status kiln_cpu_linear_bwd_weight(const kiln_step *s, const kiln_run_ctx *rc);
/* the kernel table's describe entries (kiln inspect): each direction's implementation and its reorders */
int kiln_cpu_conv_describe_fwd(const kiln_step *s, char *buf, size_t len, int *weights);
int kiln_cpu_conv_describe_bwd_data(const kiln_step *s, char *buf, size_t len, int *weights);
int kiln_cpu_conv_describe_bwd_weight(const kiln_step *s, char *buf, size_t len, int *weights);
int kiln_cpu_linear_describe(const kiln_step *s, char *buf, size_t len, int *weights);

/* attention.c: bmm on oneDNN matmul, causal attention on kiln's FlashAttention kernel */
kiln_status kiln_cpu_bmm_prepare(kiln_step *s, kiln_prep *p);
kiln_status kiln_cpu_bmm_bwd_prepare(kiln_step *s, kiln_prep *p);
void kiln_cpu_bmm_release(kiln_step *s);
kiln_status kiln_cpu_bmm_fwd(const kiln_step *s, const kiln_run_ctx *rc);
kiln_status kiln_cpu_bmm_bwd(const kiln_step *s, const kiln_run_ctx *rc);
int kiln_cpu_bmm_describe(const kiln_step *s, char *buf, size_t len, int *weights);
kiln_status kiln_cpu_attention_prepare(kiln_step *s, kiln_prep *p);
kiln_status kiln_cpu_attention_fwd(const kiln_step *s, const kiln_run_ctx *rc);
kiln_status kiln_cpu_attention_bwd(const kiln_step *s, const kiln_run_ctx *rc);

#endif
