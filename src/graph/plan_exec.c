/* Running a plan: a flat loop over the compiled kernel calls. Reference plans
 * call the naive double kernels; fast plans the float ones and oneDNN. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include "base/internal/rng.h"
#include "graph/internal/plan.h"
#include "kernels/internal/dnnl_ops.h"

#define F(v) ((float *)kiln_plan_ptr(pl, (v)))
#define D(v) ((double *)kiln_plan_ptr(pl, (v)))
#define I(v) ((const int32_t *)kiln_plan_ptr(pl, (v)))

/* grad = None rule at run time: an output that already holds a contribution is
 * added to; while accumulating micro-batches, parameter gradients always are */
static inline int acc_of(const kiln_plan *pl, const kiln_node *n, int k) {
    return n->acc[k] || (pl->accumulate && pl->g->vals[n->out[k]].kind == KILN_VAL_PARAM_GRAD);
}
#define ACC(k) acc_of(pl, n, (k))

static uint64_t dropout_key(const kiln_plan *pl, int fwd_node) { return kiln_rng_key(pl->o.seed, 0xd509, (uint64_t)fwd_node); }

/* [rows, cols] of a value read row-wise (softmax, losses): cols is the last dim */
static void row_dims(const kiln_plan *pl, kiln_value v, int64_t B, int64_t *rows, int64_t *cols) {
    const kiln_val *V = &pl->g->vals[v];
    *cols = V->shape[V->ndim - 1];
    *rows = kiln_val_numel(V, B) / *cols;
}

static kiln_status check_targets(const kiln_plan *pl, const kiln_node *n, int64_t rows, int64_t cols) {
    const int32_t *t = I(n->in[1]);
    for (int64_t i = 0; i < rows; i++)
        if (t[i] < 0 || t[i] >= cols)
            return kiln_fail(KILN_ERR_INVALID_ARG, "%s: target %lld is %d, outside [0, %lld)", n->name, (long long)i, t[i],
                             (long long)cols);
    return KILN_OK;
}

static kiln_status run_ref(kiln_plan *pl, const kiln_node *n, int64_t B) {
    const kiln_graph *g = pl->g;
    const kiln_val *O = &g->vals[n->out[0]];
    int64_t numel = kiln_val_numel(O, B);
    switch (n->op) {
    case KILN_OP_CONV2D:
    case KILN_OP_CONV2D_BWD_DATA:
    case KILN_OP_CONV2D_BWD_WEIGHT: {
        kiln_conv_shape cs;
        kiln_plan_conv_shape(pl, &g->nodes[n->op == KILN_OP_CONV2D ? (int)(n - g->nodes) : n->fwd], B, &cs);
        if (n->op == KILN_OP_CONV2D) kiln_ref_conv2d_fwd(&cs, D(n->in[0]), D(n->in[1]), n->nin > 2 ? D(n->in[2]) : NULL, D(n->out[0]));
        else if (n->op == KILN_OP_CONV2D_BWD_DATA) kiln_ref_conv2d_bwd_data(&cs, D(n->in[0]), D(n->in[1]), D(n->out[0]), ACC(0));
        else {
            /* one kernel call computes both; when only one output accumulates, stage the bias */
            double *db = n->nout > 1 ? D(n->out[1]) : NULL;
            if (db && ACC(1) != ACC(0)) {
                double tmp[4096];
                if (cs.k > 4096) return kiln_fail(KILN_ERR_INVALID_ARG, "%s: too many channels", n->name);
                kiln_ref_conv2d_bwd_weight(&cs, D(n->in[0]), D(n->in[1]), D(n->out[0]), tmp, ACC(0));
                for (int64_t i = 0; i < cs.k; i++) db[i] = ACC(1) ? db[i] + tmp[i] : tmp[i];
            } else {
                kiln_ref_conv2d_bwd_weight(&cs, D(n->in[0]), D(n->in[1]), D(n->out[0]), db, ACC(0));
            }
        }
        return KILN_OK;
    }
    case KILN_OP_LINEAR:
    case KILN_OP_LINEAR_BWD_DATA:
    case KILN_OP_LINEAR_BWD_WEIGHT: {
        const kiln_node *f = n->op == KILN_OP_LINEAR ? n : &g->nodes[n->fwd];
        const kiln_val *X = &g->vals[f->in[0]], *W = &g->vals[f->in[1]];
        int64_t rows = X->batched ? B : X->shape[0], in = W->shape[1], outd = W->shape[0];
        if (n->op == KILN_OP_LINEAR) kiln_ref_linear_fwd(rows, in, outd, D(n->in[0]), D(n->in[1]), n->nin > 2 ? D(n->in[2]) : NULL, D(n->out[0]));
        else if (n->op == KILN_OP_LINEAR_BWD_DATA) kiln_ref_linear_bwd_data(rows, in, outd, D(n->in[0]), D(n->in[1]), D(n->out[0]), ACC(0));
        else {
            double *db = n->nout > 1 ? D(n->out[1]) : NULL;
            kiln_ref_linear_bwd_weight(rows, in, outd, D(n->in[0]), D(n->in[1]), D(n->out[0]), NULL, ACC(0));
            if (db) { /* column sums of dy */
                const double *dy = D(n->in[1]);
                for (int64_t o2 = 0; o2 < outd; o2++) {
                    double s = 0;
                    for (int64_t r = 0; r < rows; r++) s += dy[r * outd + o2];
                    db[o2] = ACC(1) ? db[o2] + s : s;
                }
            }
        }
        return KILN_OK;
    }
    case KILN_OP_RELU: kiln_ref_relu_fwd(numel, D(n->in[0]), D(n->out[0])); return KILN_OK;
    case KILN_OP_RELU_BWD: kiln_ref_relu_bwd(numel, D(n->in[0]), D(n->in[1]), D(n->out[0]), ACC(0)); return KILN_OK;
    case KILN_OP_MAX_POOL2D: {
        kiln_pool_shape ps;
        kiln_plan_pool_shape(pl, n, n->in[0], B, &ps);
        kiln_ref_max_pool2d_fwd(&ps, D(n->in[0]), D(n->out[0]));
        return KILN_OK;
    }
    case KILN_OP_MAX_POOL2D_BWD: {
        kiln_pool_shape ps;
        kiln_plan_pool_shape(pl, n, n->in[0], B, &ps);
        if (n->relu_mask) kiln_ref_max_pool2d_relu_bwd(&ps, D(n->in[0]), D(n->in[1]), D(n->out[0]), ACC(0));
        else kiln_ref_max_pool2d_bwd(&ps, D(n->in[0]), D(n->in[1]), D(n->out[0]), ACC(0));
        return KILN_OK;
    }
    case KILN_OP_DROPOUT:
        kiln_ref_dropout_fwd(numel, n->fattr[0], dropout_key(pl, (int)(n - g->nodes)), pl->step, D(n->in[0]), D(n->out[0]));
        return KILN_OK;
    case KILN_OP_DROPOUT_BWD:
        kiln_ref_dropout_bwd(numel, n->fattr[0], dropout_key(pl, n->fwd), pl->step, D(n->in[0]), D(n->out[0]), ACC(0));
        return KILN_OK;
    case KILN_OP_LOG_SOFTMAX:
    case KILN_OP_LOG_SOFTMAX_BWD: {
        int64_t rows, cols;
        row_dims(pl, n->out[0], B, &rows, &cols);
        if (n->op == KILN_OP_LOG_SOFTMAX) kiln_ref_log_softmax_fwd(rows, cols, D(n->in[0]), D(n->out[0]));
        else kiln_ref_log_softmax_bwd(rows, cols, D(n->in[0]), D(n->in[1]), D(n->out[0]), ACC(0));
        return KILN_OK;
    }
    case KILN_OP_NLL_LOSS:
    case KILN_OP_CROSS_ENTROPY: {
        int64_t rows, cols;
        row_dims(pl, n->in[0], B, &rows, &cols);
        kiln_status st = check_targets(pl, n, rows, cols);
        if (st != KILN_OK) return st;
        if (n->op == KILN_OP_NLL_LOSS) kiln_ref_nll_loss_fwd(rows, cols, D(n->in[0]), I(n->in[1]), D(n->out[0]));
        else kiln_ref_cross_entropy_fwd(rows, cols, D(n->in[0]), I(n->in[1]), D(n->out[0]));
        return KILN_OK;
    }
    case KILN_OP_NLL_LOSS_BWD: {
        int64_t rows, cols;
        row_dims(pl, n->out[0], B, &rows, &cols);
        kiln_ref_nll_loss_bwd(rows, cols, I(n->in[0]), D(n->in[1]), D(n->out[0]), ACC(0));
        return KILN_OK;
    }
    case KILN_OP_CROSS_ENTROPY_BWD: {
        int64_t rows, cols;
        row_dims(pl, n->out[0], B, &rows, &cols);
        kiln_ref_cross_entropy_bwd(rows, cols, D(n->in[0]), I(n->in[1]), D(n->in[2]), D(n->out[0]), ACC(0));
        return KILN_OK;
    }
    case KILN_OP_ADD: kiln_ref_add_fwd(numel, D(n->in[0]), D(n->in[1]), D(n->out[0])); return KILN_OK;
    case KILN_OP_MUL: kiln_ref_mul_fwd(numel, D(n->in[0]), D(n->in[1]), D(n->out[0])); return KILN_OK;
    case KILN_OP_ONES: D(n->out[0])[0] = pl->loss_scale; return KILN_OK;
    case KILN_OP_GRAD_COPY: kiln_ref_grad_copy(numel, D(n->in[0]), D(n->out[0]), ACC(0)); return KILN_OK;
    case KILN_OP_MUL_BWD: kiln_ref_mul_bwd(numel, D(n->in[0]), D(n->in[1]), D(n->out[0]), ACC(0)); return KILN_OK;
    default: break;
    }
    return kiln_fail(KILN_ERR_INVALID_ARG, "%s: no reference kernel", n->name);
}

static kiln_status run_fast(kiln_plan *pl, batch_state *bs, const kiln_node *n, int64_t B) {
    const kiln_graph *g = pl->g;
    const kiln_val *O = &g->vals[n->out[0]];
    int64_t numel = kiln_val_numel(O, B);
    int id = (int)(n - g->nodes);
    switch (n->op) {
    case KILN_OP_CONV2D:
        return kiln_dnnl_conv_fwd(bs->kobj[id], F(n->in[0]), F(n->in[1]), n->nin > 2 ? F(n->in[2]) : NULL, F(n->out[0]), pl->ws);
    case KILN_OP_CONV2D_BWD_DATA:
        return kiln_dnnl_conv_bwd_data(bs->kobj[n->fwd], F(n->in[0]), F(n->in[1]), F(n->out[0]), ACC(0), pl->ws);
    case KILN_OP_CONV2D_BWD_WEIGHT:
        return kiln_dnnl_conv_bwd_weight(bs->kobj[n->fwd], F(n->in[0]), F(n->in[1]), F(n->out[0]),
                                         n->nout > 1 ? F(n->out[1]) : NULL, ACC(0), n->nout > 1 ? ACC(1) : 0, pl->ws);
    case KILN_OP_LINEAR:
        return kiln_dnnl_linear_fwd(bs->kobj[id], F(n->in[0]), F(n->in[1]), n->nin > 2 ? F(n->in[2]) : NULL, F(n->out[0]));
    case KILN_OP_LINEAR_BWD_DATA:
        return kiln_dnnl_linear_bwd_data(bs->kobj[n->fwd], F(n->in[0]), F(n->in[1]), F(n->out[0]), ACC(0));
    case KILN_OP_LINEAR_BWD_WEIGHT:
        return kiln_dnnl_linear_bwd_weight(bs->kobj[n->fwd], F(n->in[0]), F(n->in[1]), F(n->out[0]),
                                           n->nout > 1 ? F(n->out[1]) : NULL, ACC(0), n->nout > 1 ? ACC(1) : 0);
    case KILN_OP_RELU: kiln_cpu_relu_fwd(numel, F(n->in[0]), F(n->out[0])); return KILN_OK;
    case KILN_OP_RELU_BWD: kiln_cpu_relu_bwd(numel, F(n->in[0]), F(n->in[1]), F(n->out[0]), ACC(0)); return KILN_OK;
    case KILN_OP_MAX_POOL2D: {
        kiln_pool_shape ps;
        kiln_plan_pool_shape(pl, n, n->in[0], B, &ps);
        kiln_cpu_max_pool2d_fwd_layout(&ps, g->vals[n->in[0]].layout, F(n->in[0]), F(n->out[0]));
        return KILN_OK;
    }
    case KILN_OP_MAX_POOL2D_BWD: {
        kiln_pool_shape ps;
        kiln_plan_pool_shape(pl, n, n->in[0], B, &ps);
        kiln_cpu_max_pool2d_bwd_layout(&ps, g->vals[n->in[0]].layout, n->relu_mask, F(n->in[0]), F(n->in[1]), F(n->out[0]), ACC(0));
        return KILN_OK;
    }
    case KILN_OP_DROPOUT:
        kiln_cpu_dropout_fwd(numel, n->fattr[0], dropout_key(pl, id), pl->step, F(n->in[0]), F(n->out[0]));
        return KILN_OK;
    case KILN_OP_DROPOUT_BWD:
        kiln_cpu_dropout_bwd(numel, n->fattr[0], dropout_key(pl, n->fwd), pl->step, F(n->in[0]), F(n->out[0]), ACC(0));
        return KILN_OK;
    case KILN_OP_LOG_SOFTMAX:
    case KILN_OP_LOG_SOFTMAX_BWD: {
        int64_t rows, cols;
        row_dims(pl, n->out[0], B, &rows, &cols);
        if (n->op == KILN_OP_LOG_SOFTMAX) kiln_cpu_log_softmax_fwd(rows, cols, F(n->in[0]), F(n->out[0]));
        else kiln_cpu_log_softmax_bwd(rows, cols, F(n->in[0]), F(n->in[1]), F(n->out[0]), ACC(0));
        return KILN_OK;
    }
    case KILN_OP_NLL_LOSS:
    case KILN_OP_CROSS_ENTROPY: {
        int64_t rows, cols;
        row_dims(pl, n->in[0], B, &rows, &cols);
        kiln_status st = check_targets(pl, n, rows, cols);
        if (st != KILN_OK) return st;
        if (n->op == KILN_OP_NLL_LOSS) kiln_cpu_nll_loss_fwd(rows, cols, F(n->in[0]), I(n->in[1]), F(n->out[0]));
        else kiln_cpu_cross_entropy_fwd(rows, cols, F(n->in[0]), I(n->in[1]), F(n->out[0]));
        return KILN_OK;
    }
    case KILN_OP_NLL_LOSS_BWD: {
        int64_t rows, cols;
        row_dims(pl, n->out[0], B, &rows, &cols);
        kiln_cpu_nll_loss_bwd(rows, cols, I(n->in[0]), F(n->in[1]), F(n->out[0]), ACC(0));
        return KILN_OK;
    }
    case KILN_OP_CROSS_ENTROPY_BWD: {
        int64_t rows, cols;
        row_dims(pl, n->out[0], B, &rows, &cols);
        kiln_cpu_cross_entropy_bwd(rows, cols, F(n->in[0]), I(n->in[1]), F(n->in[2]), F(n->out[0]), ACC(0));
        return KILN_OK;
    }
    case KILN_OP_ADD: kiln_cpu_add_fwd(numel, F(n->in[0]), F(n->in[1]), F(n->out[0])); return KILN_OK;
    case KILN_OP_MUL: kiln_cpu_mul_fwd(numel, F(n->in[0]), F(n->in[1]), F(n->out[0])); return KILN_OK;
    case KILN_OP_ONES: F(n->out[0])[0] = (float)pl->loss_scale; return KILN_OK;
    case KILN_OP_GRAD_COPY: kiln_cpu_grad_copy(numel, F(n->in[0]), F(n->out[0]), ACC(0)); return KILN_OK;
    case KILN_OP_MUL_BWD: kiln_cpu_mul_bwd(numel, F(n->in[0]), F(n->in[1]), F(n->out[0]), ACC(0)); return KILN_OK;
    default: break;
    }
    return kiln_fail(KILN_ERR_INVALID_ARG, "%s: no kernel", n->name);
}

kiln_status kiln_plan_run(kiln_plan *pl, int64_t batch) {
    if (batch < 1 || batch > pl->o.max_batch)
        return kiln_fail(KILN_ERR_INVALID_ARG, "run: batch %lld outside [1, %lld] the plan was made for", (long long)batch,
                         (long long)pl->o.max_batch);
    if (!pl->arena) return kiln_fail(KILN_ERR_INVALID_ARG, "run: the plan was compiled with plan_only (sizes, no memory)");
    const kiln_graph *g = pl->g;
    for (int v = 0; v < g->nvals; v++) {
        if (g->vals[v].kind != KILN_VAL_INPUT) continue;
        if (!pl->bound[v]) return kiln_fail(KILN_ERR_INVALID_ARG, "run: input '%s' is not bound", g->vals[v].name);
        if (pl->ref_inputs && pl->ref_inputs[v]) {
            int64_t n = kiln_val_numel(&g->vals[v], batch);
            const float *src = pl->bound[v];
            for (int64_t i = 0; i < n; i++) pl->ref_inputs[v][i] = src[i];
        }
    }
    batch_state *bs = NULL;
    if (!pl->o.reference) {
        kiln_status st = kiln_plan_batch_state(pl, batch, &bs);
        if (st != KILN_OK) return st;
    }
    pl->batch = batch;
    for (int s = 0; s < pl->norder; s++) {
        const kiln_node *n = &g->nodes[pl->order[s]];
        double t0 = pl->node_time ? omp_get_wtime() : 0;
        kiln_status st = pl->o.reference ? run_ref(pl, n, batch) : run_fast(pl, bs, n, batch);
        if (st != KILN_OK) return st;
        if (pl->node_time) pl->node_time[s] += omp_get_wtime() - t0;
    }
    if (pl->node_time) pl->profiled_runs++;
    return KILN_OK;
}
