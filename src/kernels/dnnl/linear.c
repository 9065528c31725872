/* linear and matmul on oneDNN matmul. Weights stay in their own layout,
 * [out, in] for linear (PyTorch's) and [in, out] for matmul (HF GPT-2's
 * Conv1D), and are read transposed through strides where needed, so no
 * reorder ever runs. For linear:
 *   forward      y[n,o]  = x[n,i] . w^T   (w seen as [i,o] with strides {1,i})
 *   bwd data     dx[n,i] = dy[n,o] . w[o,i]
 *   bwd weight   dw[o,i] = dy^T[o,n] . x[n,i]  (dy seen as [o,n] with strides {1,o})
 * and for matmul (w_kn):
 *   forward      y[n,o]  = x[n,i] . w[i,o]
 *   bwd data     dx[n,i] = dy[n,o] . w^T  (w seen as [o,i] with strides {1,o})
 *   bwd weight   dw[i,o] = x^T[i,n] . dy[n,o]  (x seen as [i,n] with strides {1,i})
 * Backward-weights reads one operand transposed (x^T or dy^T), which oneDNN's
 * gemm does at half speed for some shapes (Zen 3, AVX2: 7 ms for 1024x1024x256
 * against 3-4 ms untransposed), and every direction's weights operand is a
 * plan tensor whose rows may be a power of two of floats apart, which slows
 * the same gemm as much. So each direction comes in forms (linear.h): an
 * operand copied into the workspace first (a oneDNN reorder: dense, or with
 * padded rows), or not; linear_tune.c times them on the real shape and keeps
 * the fastest.
 * Accumulation (grad = None rule, later contributions) is a sum post-op. The
 * bias gradient is a column sum done by kiln's own kernel. In bf16 (mixed
 * precision) src and weights of every primitive are bf16 copies made by a
 * oneDNN reorder into the plan's workspace; bias, dst and accumulation stay f32,
 * and the bias gradient sums the same bf16-rounded dy the weight gradient reads.
 * Backward-data may be asked to write dx over dy (in == out, the cpu's
 * in-place pass): in bf16 (and emulated bf16) the primitive reads dy's copy, so dx goes
 * straight over it; in f32 dx is made in row blocks of at most 1 MiB in the
 * workspace, each copied over the dy rows it was computed from (a row of dx
 * reads only its own row of dy). */
#include <stdlib.h>
#include <string.h>
#include "kernels/dnnl/internal/linear.h"

static void md2(dnnl_memory_desc_t *md, int64_t r, int64_t c, int64_t sr, int64_t sc) {
    dnnl_dims_t d = {r, c}, s = {sr, sc};
    dnnl_memory_desc_init_by_strides(md, 2, d, dnnl_f32, s);
}

/* the primitive `which`; form bit 0: it reads src as a dense row-major copy, bit 1: weights as a copy with padded
 * rows (each made by a reorder into the workspace) */
static kiln_status make(kiln_dnnl_linear *l, int which, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *wei,
                        const dnnl_memory_desc_t *bias, const dnnl_memory_desc_t *dst, int sum, int relu, int form) {
    dnnl_matmul_desc_t desc;
    dnnl_memory_desc_t src_p = *src, wei_p = *wei, dense, padded;
    md2(&dense, src->dims[0], src->dims[1], src->dims[1], 1);
    md2(&padded, wei->dims[0], wei->dims[1], wei->dims[1] + KILN_LINEAR_PAD, 1);
    kiln_dn_md_operand(form & 1 ? &dense : src, l->bf16, &src_p);
    kiln_dn_md_operand(form & 2 ? &padded : wei, l->bf16, &wei_p);
    DN_TRY(dnnl_matmul_desc_init(&desc, &src_p, &wei_p, bias, dst));
    dnnl_primitive_attr_t attr = NULL;
    if (sum || relu) {
        dnnl_post_ops_t po;
        DN_TRY(dnnl_post_ops_create(&po));
        if (sum) dnnl_post_ops_append_sum(po, 1.0f);
        if (relu) dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
        dnnl_primitive_attr_create(&attr);
        dnnl_primitive_attr_set_post_ops(attr, po);
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd;
    dnnl_status_t s = dnnl_primitive_desc_create(&pd, &desc, attr, kiln_dnnl_engine, NULL);
    if (attr) dnnl_primitive_attr_destroy(attr);
    DN_TRY(s);
    s = dnnl_primitive_create(&l->p[which], pd);
    dnnl_primitive_desc_destroy(pd);
    DN_TRY(s);
    size_t cur = 0; /* the primitives run one at a time: each starts the workspace afresh */
    kiln_status st = kiln_dn_arg_init(&l->op[which][0], src, &src_p, 1, &cur);
    if (st == KILN_OK) st = kiln_dn_arg_init(&l->op[which][1], wei, &wei_p, 1, &cur);
    for (int i = 0; i < 2 && st == KILN_OK && l->bf16 == KILN_DN_BF16_EMULATED; i++)
        st = kiln_dn_arg_round_bf16(&l->op[which][i], &cur);
    if (st != KILN_OK) return st;
    l->need[which] = cur;
    if (cur > l->ws) l->ws = cur;
    const dnnl_memory_desc_t *mds[2] = {bias, dst};
    for (int i = 0; i < 2; i++)
        if (mds[i]) DN_TRY(dnnl_memory_create(&l->m[which][i], mds[i], kiln_dnnl_engine, DNNL_MEMORY_NONE));
    return KILN_OK;
}

/* backward-data on blk rows (and on the n % blk left), for dx written over dy in f32 */
static kiln_status make_in_place(kiln_dnnl_linear *l) {
    int64_t blk = (1 << 18) / l->in, tail;
    blk = blk < 1 ? 1 : blk > l->n ? l->n : blk;
    tail = l->n % blk;
    dnnl_memory_desc_t dy, dx, w_oi;
    if (l->w_kn) md2(&w_oi, l->out, l->in, 1, l->out);
    else md2(&w_oi, l->out, l->in, l->in, 1);
    for (int k = 0; k < 2; k++) {
        int64_t rows = k ? tail : blk;
        if (!rows) continue;
        md2(&dy, rows, l->out, l->out, 1);
        md2(&dx, rows, l->in, l->in, 1);
        kiln_status st = make(l, k ? L_BD_TAIL : L_BD_BLK, &dy, &w_oi, NULL, &dx, 0, 0, 0);
        if (st != KILN_OK) return st;
    }
    l->blk = blk;
    l->blk_off = (l->ws + 63) & ~(size_t)63;
    l->ws = l->blk_off + (size_t)blk * (size_t)l->in * sizeof(float);
    return KILN_OK;
}

static void free_prim(kiln_dnnl_linear *l, int i) {
    if (l->p[i]) dnnl_primitive_destroy(l->p[i]);
    l->p[i] = NULL;
    for (int j = 0; j < 2; j++) {
        kiln_dn_arg_free(&l->op[i][j]);
        if (l->m[i][j]) dnnl_memory_destroy(l->m[i][j]);
        l->m[i][j] = NULL;
    }
    l->need[i] = 0;
}

/* the forms not chosen are freed, and the workspace sized for those kept (a padded copy of a wide dy is large) */
static void drop_unchosen(kiln_dnnl_linear *l) {
    l->ws = 0;
    for (int dir = 0; dir < L_NDIR; dir++)
        for (int f = 0; f < KILN_LINEAR_FORMS; f++)
            for (int acc = 0; acc < 2; acc++) {
                int i = L_PRIM(dir, f, acc);
                if (f != l->form[dir]) free_prim(l, i);
                else if (l->need[i] > l->ws) l->ws = l->need[i];
            }
}

kiln_status kiln_dnnl_linear_new(int64_t n, int64_t in, int64_t out, int w_kn, int has_bias, int fuse_relu,
                                 int need_bwd_data, int need_bwd_weight, int bf16, int autotune, kiln_dnnl_linear **res) {
    *res = NULL;
    kiln_status st = kiln_dnnl_init();
    if (st != KILN_OK) return st;
    kiln_dnnl_linear *l = calloc(1, sizeof *l);
    if (!l) return kiln_fail(KILN_ERR_NOMEM, "linear: out of memory");
    l->n = n;
    l->in = in;
    l->out = out;
    l->has_bias = has_bias;
    l->bf16 = bf16;
    dnnl_memory_desc_t x, b, y, w_io, w_oi, bw_src, bw_wei, bw_dst;
    md2(&x, n, in, in, 1);
    md2(&b, 1, out, out, 1);
    md2(&y, n, out, out, 1);
    if (w_kn) {
        md2(&w_io, in, out, out, 1);
        md2(&w_oi, out, in, 1, out);
        md2(&bw_src, in, n, 1, in); /* x^T */
        bw_wei = y;                 /* dy */
        bw_dst = w_io;
    } else {
        md2(&w_io, in, out, 1, in);
        md2(&w_oi, out, in, in, 1);
        md2(&bw_src, out, n, 1, out); /* dy^T */
        bw_wei = x;
        bw_dst = w_oi;
    }
    l->w_kn = w_kn;
    int forms = autotune ? KILN_LINEAR_FORMS : 1; /* untuned, form 0 alone */
    for (int f = 0; f < forms && st == KILN_OK; f += 2) {
        st = make(l, L_PRIM(L_DIR_FWD, f, 0), &x, &w_io, has_bias ? &b : NULL, &y, 0, fuse_relu, f);
        for (int acc = 0; acc < 2 && st == KILN_OK && need_bwd_data; acc++)
            st = make(l, L_PRIM(L_DIR_BD, f, acc), &y, &w_oi, NULL, &x, acc, 0, f);
    }
    for (int f = 0; f < forms && st == KILN_OK && need_bwd_weight; f++)
        for (int acc = 0; acc < 2 && st == KILN_OK; acc++)
            st = make(l, L_PRIM(L_DIR_BW, f, acc), &bw_src, &bw_wei, NULL, &bw_dst, acc, 0, f);
    if (st == KILN_OK && autotune != KILN_LINEAR_ALL_FORMS) st = kiln_dnnl_linear_choose(l, autotune);
    if (st == KILN_OK && autotune != KILN_LINEAR_ALL_FORMS) drop_unchosen(l);
    if (st == KILN_OK && need_bwd_data && in == out && !bf16) st = make_in_place(l); /* its block after the others' */
    if (st != KILN_OK) {
        kiln_dnnl_linear_free(l);
        return kiln_fail_context(st, "linear [%lld, %lld] -> %lld", (long long)n, (long long)in, (long long)out);
    }
    *res = l;
    return KILN_OK;
}

void kiln_dnnl_linear_free(kiln_dnnl_linear *l) {
    if (!l) return;
    for (int i = 0; i < L_N; i++) free_prim(l, i);
    free(l);
}

size_t kiln_dnnl_linear_workspace(const kiln_dnnl_linear *l) { return l->ws; }

static kiln_status exec(kiln_dnnl_linear *l, int which, const void *src, const void *wei, const void *bias, void *dst,
                        void *ws, const char *what) {
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, kiln_dn_arg_in(&l->op[which][0], src, ws)},
                               {DNNL_ARG_WEIGHTS, kiln_dn_arg_in(&l->op[which][1], wei, ws)}};
    int n = 2;
    static const int kinds[2] = {DNNL_ARG_BIAS, DNNL_ARG_DST};
    const void *ptrs[2] = {bias, dst};
    for (int i = 0; i < 2; i++) {
        if (!l->m[which][i]) continue;
        dnnl_memory_set_data_handle(l->m[which][i], (void *)ptrs[i]);
        args[n++] = (dnnl_exec_arg_t){kinds[i], l->m[which][i]};
    }
    return kiln_dn_execute(l->p[which], n, args, what);
}

kiln_status kiln_dnnl_linear_call(kiln_dnnl_linear *l, int dir, int form, const float *a, const float *b,
                                  const float *bias, float *out, int acc, void *ws) {
    int which = L_PRIM(dir, form, acc != 0);
    if (dir == L_DIR_FWD) return exec(l, which, a, b, bias, out, ws, "linear forward");
    if (dir == L_DIR_BD) return exec(l, which, a, b, NULL, out, ws, "linear backward data");
    /* backward-weights: a = x, b = dy */
    return l->w_kn ? exec(l, which, a, b, NULL, out, ws, "matmul backward weights")
                   : exec(l, which, b, a, NULL, out, ws, "linear backward weights");
}

kiln_status kiln_dnnl_linear_fwd(kiln_dnnl_linear *l, const float *x, const float *w, const float *b, float *y, void *ws) {
    return kiln_dnnl_linear_call(l, L_DIR_FWD, l->form[L_DIR_FWD], x, w, b, y, 0, ws);
}

/* dx over dy, block by block through the workspace */
static kiln_status bwd_data_in_place(kiln_dnnl_linear *l, float *d, const float *w, void *ws) {
    float *tmp = (float *)((char *)ws + l->blk_off);
    kiln_status st = KILN_OK;
    for (int64_t r = 0; st == KILN_OK && r < l->n; r += l->blk) {
        int64_t rows = l->n - r < l->blk ? l->n - r : l->blk;
        float *rowp = d + r * l->in;
        st = exec(l, rows == l->blk ? L_BD_BLK : L_BD_TAIL, rowp, w, NULL, tmp, ws, "linear backward data (in place)");
        if (st == KILN_OK) memcpy(rowp, tmp, (size_t)rows * (size_t)l->in * sizeof(float));
    }
    return st;
}

kiln_status kiln_dnnl_linear_bwd_data(kiln_dnnl_linear *l, const float *dy, const float *w, float *dx, int acc, void *ws) {
    if (!l->p[L_PRIM(L_DIR_BD, l->form[L_DIR_BD], 0)]) return kiln_fail(KILN_ERR_INVALID_ARG, "linear: made without backward-data");
    if (dx == dy && !l->bf16) {
        if (acc || !l->blk) return kiln_fail(KILN_ERR_INVALID_ARG, "linear: backward-data over its own dy needs a new "
                                             "square output");
        return bwd_data_in_place(l, dx, w, ws);
    }
    return kiln_dnnl_linear_call(l, L_DIR_BD, l->form[L_DIR_BD], dy, w, NULL, dx, acc, ws);
}

kiln_status kiln_dnnl_linear_bwd_weight(kiln_dnnl_linear *l, const float *x, const float *dy, float *dw, float *db,
                                        int acc_w, int acc_b, void *ws) {
    if (!l->p[L_PRIM(L_DIR_BW, l->form[L_DIR_BW], 0)]) return kiln_fail(KILN_ERR_INVALID_ARG, "linear: made without backward-weights");
    kiln_status st = kiln_dnnl_linear_call(l, L_DIR_BW, l->form[L_DIR_BW], x, dy, NULL, dw, acc_w, ws);
    if (st == KILN_OK && db && l->bf16) kiln_cpu_bias_grad_rows_bf16(l->n, l->out, dy, db, acc_b);
    else if (st == KILN_OK && db) kiln_cpu_bias_grad_rows(l->n, l->out, dy, db, acc_b);
    return st;
}
