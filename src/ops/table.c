/* The op table: one entry per op, gathered from the family files. The array
 * is indexed by kiln_op and its size is checked at compile time, so an op
 * cannot be half-registered. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "graph/internal/graph.h"

static const kiln_op_def *const table[] = {
    [KILN_OP_CONV2D] = &kiln_op_conv2d,
    [KILN_OP_LINEAR] = &kiln_op_linear,
    [KILN_OP_RELU] = &kiln_op_relu,
    [KILN_OP_MAX_POOL2D] = &kiln_op_max_pool2d,
    [KILN_OP_DROPOUT] = &kiln_op_dropout,
    [KILN_OP_RESHAPE] = &kiln_op_reshape,
    [KILN_OP_LOG_SOFTMAX] = &kiln_op_log_softmax,
    [KILN_OP_NLL_LOSS] = &kiln_op_nll_loss,
    [KILN_OP_CROSS_ENTROPY] = &kiln_op_cross_entropy,
    [KILN_OP_ADD] = &kiln_op_add,
    [KILN_OP_MUL] = &kiln_op_mul,
    [KILN_OP_TRANSPOSE] = &kiln_op_transpose,
    [KILN_OP_SLICE] = &kiln_op_slice,
    [KILN_OP_CONTIGUOUS] = &kiln_op_contiguous,
    [KILN_OP_SUM] = &kiln_op_sum,
    [KILN_OP_BATCH_NORM2D] = &kiln_op_batch_norm2d,
    [KILN_OP_AVG_POOL2D] = &kiln_op_avg_pool2d,
    [KILN_OP_ADAPTIVE_AVG_POOL2D] = &kiln_op_adaptive_avg_pool2d,
    [KILN_OP_PAD] = &kiln_op_pad,
    [KILN_OP_BMM] = &kiln_op_bmm,
    [KILN_OP_CAUSAL_ATTENTION] = &kiln_op_causal_attention,
    [KILN_OP_EMBEDDING] = &kiln_op_embedding,
    [KILN_OP_LAYER_NORM] = &kiln_op_layer_norm,
    [KILN_OP_GELU] = &kiln_op_gelu,
    [KILN_OP_SOFTMAX] = &kiln_op_softmax,
    [KILN_OP_ADD_BCAST] = &kiln_op_add_bcast,
    [KILN_OP_AFFINE] = &kiln_op_affine,
    [KILN_OP_ERF] = &kiln_op_erf,
    [KILN_OP_TANH] = &kiln_op_tanh,
    [KILN_OP_BN_FOLD] = &kiln_op_bn_fold,
    [KILN_OP_SUBSAMPLE_PAD] = &kiln_op_subsample_pad,
    [KILN_OP_CONV2D_ADD] = &kiln_op_conv2d_add,
    [KILN_OP_FUSED] = &kiln_op_fused,
    [KILN_OP_FUSED_PLAIN] = &kiln_op_fused_plain,
    [KILN_OP_ONES] = &kiln_op_ones,
    [KILN_OP_CONV2D_BWD_DATA] = &kiln_op_conv2d_bwd_data,
    [KILN_OP_CONV2D_BWD_WEIGHT] = &kiln_op_conv2d_bwd_weight,
    [KILN_OP_LINEAR_BWD_DATA] = &kiln_op_linear_bwd_data,
    [KILN_OP_LINEAR_BWD_WEIGHT] = &kiln_op_linear_bwd_weight,
    [KILN_OP_MATMUL] = &kiln_op_matmul,
    [KILN_OP_MATMUL_BWD_DATA] = &kiln_op_matmul_bwd_data,
    [KILN_OP_MATMUL_BWD_WEIGHT] = &kiln_op_matmul_bwd_weight,
    [KILN_OP_RELU_BWD] = &kiln_op_relu_bwd,
    [KILN_OP_MAX_POOL2D_BWD] = &kiln_op_max_pool2d_bwd,
    [KILN_OP_DROPOUT_BWD] = &kiln_op_dropout_bwd,
    [KILN_OP_LOG_SOFTMAX_BWD] = &kiln_op_log_softmax_bwd,
    [KILN_OP_NLL_LOSS_BWD] = &kiln_op_nll_loss_bwd,
    [KILN_OP_CROSS_ENTROPY_BWD] = &kiln_op_cross_entropy_bwd,
    [KILN_OP_MSE_LOSS] = &kiln_op_mse_loss,
    [KILN_OP_MSE_LOSS_BWD] = &kiln_op_mse_loss_bwd,
    [KILN_OP_GRAD_COPY] = &kiln_op_grad_copy,
    [KILN_OP_MUL_BWD] = &kiln_op_mul_bwd,
    [KILN_OP_SLICE_BWD] = &kiln_op_slice_bwd,
    [KILN_OP_SUM_BWD] = &kiln_op_sum_bwd,
    [KILN_OP_BATCH_NORM2D_BWD] = &kiln_op_batch_norm2d_bwd,
    [KILN_OP_AVG_POOL2D_BWD] = &kiln_op_avg_pool2d_bwd,
    [KILN_OP_BMM_BWD] = &kiln_op_bmm_bwd,
    [KILN_OP_CAUSAL_ATTENTION_BWD] = &kiln_op_causal_attention_bwd,
    [KILN_OP_EMBEDDING_BWD] = &kiln_op_embedding_bwd,
    [KILN_OP_LAYER_NORM_BWD] = &kiln_op_layer_norm_bwd,
    [KILN_OP_GELU_BWD] = &kiln_op_gelu_bwd,
    [KILN_OP_SOFTMAX_BWD] = &kiln_op_softmax_bwd,
    [KILN_OP_ADD_BCAST_BWD] = &kiln_op_add_bcast_bwd,
    [KILN_OP_AFFINE_BWD] = &kiln_op_affine_bwd,
    [KILN_OP_ERF_BWD] = &kiln_op_erf_bwd,
    [KILN_OP_TANH_BWD] = &kiln_op_tanh_bwd,
    [KILN_OP_SUBSAMPLE_PAD_BWD] = &kiln_op_subsample_pad_bwd,
    [KILN_OP_READOUT] = &kiln_op_readout,
    [KILN_OP_SUMSQ] = &kiln_op_sumsq,
    [KILN_OP_CLIP_SCALE] = &kiln_op_clip_scale,
    [KILN_OP_SGD_UPDATE] = &kiln_op_sgd_update,
    [KILN_OP_ADAMW_UPDATE] = &kiln_op_adamw_update,
    [KILN_OP_ADADELTA_UPDATE] = &kiln_op_adadelta_update,
    [KILN_OP_LAMB_UPDATE] = &kiln_op_lamb_update,
    [KILN_OP_LARS_UPDATE] = &kiln_op_lars_update,
    [KILN_OP_NOVOGRAD_UPDATE] = &kiln_op_novograd_update,
    [KILN_OP_AMP_UNSCALE] = &kiln_op_amp_unscale,
    [KILN_OP_AMP_UPDATE] = &kiln_op_amp_update,
};
_Static_assert(sizeof table / sizeof table[0] == KILN_OP_COUNT, "the op table needs one entry per kiln_op");

const kiln_op_def *kiln_op_get(kiln_op op) { return op >= 0 && op < KILN_OP_COUNT ? table[op] : NULL; }
const char *kiln_op_name(kiln_op op) { return op >= 0 && op < KILN_OP_COUNT && table[op] ? table[op]->name : "?"; }

void kiln_op_format_attrs(kiln_op op, const kiln_attrs *a, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    const kiln_op_def *d = kiln_op_get(op);
    for (const kiln_attr_spec *s = d && d->attrs ? d->attrs : NULL; s && s->name && o < len; s++) {
        const char *p = (const char *)a + s->offset;
        const char *sep = o ? " " : "";
        if (s->type == KILN_ATTR_I64) o += (size_t)snprintf(buf + o, len - o, "%s%s=%lld", sep, s->name, (long long)*(const int64_t *)p);
        else if (s->type == KILN_ATTR_INT) o += (size_t)snprintf(buf + o, len - o, "%s%s=%d", sep, s->name, *(const int *)p);
        else if (s->type == KILN_ATTR_FUSED) o += (size_t)snprintf(buf + o, len - o, "%s%s=%s", sep, s->name, (*(const kiln_fused_prog *const *)p)->holds);
        else if (s->type == KILN_ATTR_F32) o += (size_t)snprintf(buf + o, len - o, "%s%s=%g", sep, s->name, (double)*(const float *)p);
        else o += (size_t)snprintf(buf + o, len - o, "%s%s=%g", sep, s->name, *(const double *)p);
    }
}

int kiln_infer_fail(kiln_infer *ix, kiln_status s, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kiln_graph_fail(ix->g, s, "%s#%d: %s", kiln_op_name(ix->op), ix->node, msg);
}

const char *kiln_infer_shape(const kiln_val *v, char *buf) { return kiln_shape_str(v->ndim, v->shape, buf, 96); }
