/* bmm on oneDNN's matmul primitive, batch dims and all. Every operand is
 * described by its strides, so strided views (a transposed k) and the
 * transposes backward needs are read in place, never reordered:
 *   forward      y[.., m, n]  = a[.., m, k] . b[.., k, n]
 *   bwd a        da[.., m, k] = dy[.., m, n] . b^T  (b seen as [.., n, k], its last two strides swapped)
 *   bwd b        db[.., k, n] = a^T . dy            (a seen as [.., k, m])
 * Each backward direction has a second primitive with a sum post-op for
 * accumulating outputs (the grad = None rule). In bf16 (mixed precision) the
 * two operands of each primitive are converted by a oneDNN reorder into the
 * plan's workspace (a gapped view to a dense copy); dst stays f32. */
#include <stdio.h>
#include <stdlib.h>
#include "kernels/dnnl/internal/dnnl_util.h"
#include "kernels/internal/dnnl_ops.h"

enum { B_FWD, B_DA, B_DA_ACC, B_DB, B_DB_ACC, B_N };

struct kiln_dnnl_bmm {
    int bf16;
    dnnl_primitive_t p[B_N];
    kiln_dn_arg op[B_N][2]; /* src, weights */
    dnnl_memory_t dst[B_N];
    size_t ws;
    char impl[B_N][48];
};

/* an operand [batch..., r, c] with its batch strides and the given row/column strides */
static void md(const kiln_bmm_shape *s, const int64_t *stride, int64_t r, int64_t c, int64_t sr, int64_t sc,
               dnnl_memory_desc_t *out) {
    dnnl_dims_t d, st;
    int nb = s->nbatch;
    for (int i = 0; i < nb; i++) d[i] = s->batch[i];
    d[nb] = r;
    d[nb + 1] = c;
    if (stride) {
        for (int i = 0; i < nb; i++) st[i] = stride[i];
        st[nb] = sr;
        st[nb + 1] = sc;
        dnnl_memory_desc_init_by_strides(out, nb + 2, d, dnnl_f32, st);
    } else {
        kiln_dn_md_plain(out, nb + 2, d);
    }
}

static kiln_status make(kiln_dnnl_bmm *o, int which, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *wei,
                        const dnnl_memory_desc_t *dst, int sum) {
    dnnl_matmul_desc_t desc;
    dnnl_memory_desc_t src_p = *src, wei_p = *wei;
    kiln_dn_md_operand(src, o->bf16, &src_p);
    kiln_dn_md_operand(wei, o->bf16, &wei_p);
    DN_TRY(dnnl_matmul_desc_init(&desc, &src_p, &wei_p, NULL, dst));
    dnnl_primitive_attr_t attr = NULL;
    if (sum) {
        dnnl_post_ops_t po;
        DN_TRY(dnnl_post_ops_create(&po));
        dnnl_post_ops_append_sum(po, 1.0f);
        dnnl_primitive_attr_create(&attr);
        dnnl_primitive_attr_set_post_ops(attr, po);
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, kiln_dnnl_engine, NULL);
    if (attr) dnnl_primitive_attr_destroy(attr);
    DN_TRY(st);
    snprintf(o->impl[which], sizeof o->impl[which], "%s", kiln_dn_impl_name(pd));
    st = dnnl_primitive_create(&o->p[which], pd);
    dnnl_primitive_desc_destroy(pd);
    DN_TRY(st);
    size_t cur = 0; /* one primitive runs at a time */
    kiln_status ks = kiln_dn_arg_init(&o->op[which][0], src, &src_p, 1, &cur);
    if (ks == KILN_OK) ks = kiln_dn_arg_init(&o->op[which][1], wei, &wei_p, 1, &cur);
    for (int i = 0; i < 2 && ks == KILN_OK && o->bf16 == KILN_DN_BF16_EMULATED; i++)
        ks = kiln_dn_arg_round_bf16(&o->op[which][i], &cur);
    if (ks != KILN_OK) return ks;
    if (cur > o->ws) o->ws = cur;
    DN_TRY(dnnl_memory_create(&o->dst[which], dst, kiln_dnnl_engine, DNNL_MEMORY_NONE));
    return KILN_OK;
}

static kiln_status make_all(kiln_dnnl_bmm *o, const kiln_bmm_shape *s, int fwd, int bwd_a, int bwd_b) {
    int nb = s->nbatch;
    const int64_t *sa = s->a_stride, *sb = s->b_stride;
    dnnl_memory_desc_t a, b, y, bt, da, at, db;
    md(s, sa, s->m, s->k, sa[nb], sa[nb + 1], &a);
    md(s, sb, s->k, s->n, sb[nb], sb[nb + 1], &b);
    md(s, NULL, s->m, s->n, 0, 0, &y);
    md(s, sb, s->n, s->k, sb[nb + 1], sb[nb], &bt);
    md(s, NULL, s->m, s->k, 0, 0, &da);
    md(s, sa, s->k, s->m, sa[nb + 1], sa[nb], &at);
    md(s, NULL, s->k, s->n, 0, 0, &db);
    kiln_status st = KILN_OK;
    if (fwd) st = make(o, B_FWD, &a, &b, &y, 0);
    for (int acc = 0; acc < 2 && st == KILN_OK && bwd_a; acc++) st = make(o, B_DA + acc, &y, &bt, &da, acc);
    for (int acc = 0; acc < 2 && st == KILN_OK && bwd_b; acc++) st = make(o, B_DB + acc, &at, &y, &db, acc);
    return st;
}

kiln_status kiln_dnnl_bmm_new(const kiln_bmm_shape *s, int fwd, int bwd_a, int bwd_b, int bf16, kiln_dnnl_bmm **res) {
    *res = NULL;
    kiln_status st = kiln_dnnl_init();
    if (st != KILN_OK) return st;
    kiln_dnnl_bmm *o = calloc(1, sizeof *o);
    if (!o) return kiln_fail(KILN_ERR_NOMEM, "bmm: out of memory");
    o->bf16 = bf16;
    st = make_all(o, s, fwd, bwd_a, bwd_b);
    if (st != KILN_OK) {
        kiln_dnnl_bmm_free(o);
        return kiln_fail_context(st, "bmm [%lld x %lld] @ [%lld x %lld]", (long long)s->m, (long long)s->k,
                                 (long long)s->k, (long long)s->n);
    }
    *res = o;
    return KILN_OK;
}

void kiln_dnnl_bmm_free(kiln_dnnl_bmm *o) {
    if (!o) return;
    for (int i = 0; i < B_N; i++) {
        if (o->p[i]) dnnl_primitive_destroy(o->p[i]);
        for (int j = 0; j < 2; j++) kiln_dn_arg_free(&o->op[i][j]);
        if (o->dst[i]) dnnl_memory_destroy(o->dst[i]);
    }
    free(o);
}

size_t kiln_dnnl_bmm_workspace(const kiln_dnnl_bmm *o) { return o->ws; }

static kiln_status exec(kiln_dnnl_bmm *o, int which, const void *src, const void *wei, void *dst, void *ws,
                        const char *what) {
    if (!o->p[which]) return kiln_fail(KILN_ERR_INVALID_ARG, "bmm: made without the %s direction", what);
    dnnl_memory_set_data_handle(o->dst[which], dst);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, kiln_dn_arg_in(&o->op[which][0], src, ws)},
                               {DNNL_ARG_WEIGHTS, kiln_dn_arg_in(&o->op[which][1], wei, ws)},
                               {DNNL_ARG_DST, o->dst[which]}};
    return kiln_dn_execute(o->p[which], 3, args, what);
}

kiln_status kiln_dnnl_bmm_fwd(kiln_dnnl_bmm *o, const float *a, const float *b, float *y, void *ws) {
    return exec(o, B_FWD, a, b, y, ws, "bmm forward");
}

kiln_status kiln_dnnl_bmm_bwd(kiln_dnnl_bmm *o, const float *a, const float *b, const float *dy, float *da, float *db,
                              int acc_a, int acc_b, void *ws) {
    kiln_status st = da ? exec(o, acc_a ? B_DA_ACC : B_DA, dy, b, da, ws, "bmm backward a") : KILN_OK;
    if (st == KILN_OK && db) st = exec(o, acc_b ? B_DB_ACC : B_DB, a, dy, db, ws, "bmm backward b");
    return st;
}

const char *kiln_dnnl_bmm_impl(const kiln_dnnl_bmm *o) {
    for (int i = 0; i < B_N; i++)
        if (o && o->p[i]) return o->impl[i];
    return "";
}
