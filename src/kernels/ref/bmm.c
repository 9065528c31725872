/* Reference batched matrix product, double: a and b read through their
 * strides, y, dy, da, db contiguous. */
#include "kernels/internal/kernels.h"

/* where matrix `mat` (flat over the leading dims) of an operand starts */
static int64_t base(const kiln_bmm_shape *s, const int64_t *stride, int64_t mat) {
    int64_t off = 0;
    for (int d = s->nbatch - 1; d >= 0; d--) {
        off += (mat % s->batch[d]) * stride[d];
        mat /= s->batch[d];
    }
    return off;
}

static int64_t count(const kiln_bmm_shape *s) {
    int64_t n = 1;
    for (int d = 0; d < s->nbatch; d++) n *= s->batch[d];
    return n;
}

/* an operand's matrices: each read through (row, column) strides from its start */
typedef struct {
    const double *base;
    const int64_t *batch_stride; /* NULL: contiguous matrices of `size` elements */
    int64_t size, row, col;
} operand;

static const double *at(const kiln_bmm_shape *s, const operand *o, int64_t mat) {
    return o->base + (o->batch_stride ? base(s, o->batch_stride, mat) : mat * o->size);
}

/* c[i, j] (=|+=) sum_p A(i, p) B(p, j) for every matrix of the batch; c [m, n] contiguous */
static void product(const kiln_bmm_shape *s, int64_t m, int64_t k, int64_t n, const operand *a, const operand *b,
                    double *c, int acc) {
    for (int64_t mat = 0; mat < count(s); mat++) {
        const double *A = at(s, a, mat), *B = at(s, b, mat);
        double *C = c + mat * m * n;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double sum = 0;
                for (int64_t p = 0; p < k; p++) sum += A[i * a->row + p * a->col] * B[p * b->row + j * b->col];
                C[i * n + j] = acc ? C[i * n + j] + sum : sum;
            }
    }
}

void kiln_ref_bmm_fwd(const kiln_bmm_shape *s, const double *a, const double *b, double *y) {
    int nb = s->nbatch;
    operand A = {a, s->a_stride, 0, s->a_stride[nb], s->a_stride[nb + 1]};
    operand B = {b, s->b_stride, 0, s->b_stride[nb], s->b_stride[nb + 1]};
    product(s, s->m, s->k, s->n, &A, &B, y, 0);
}

/* da = dy b^T (b's strides swapped), db = a^T dy (a's swapped) */
void kiln_ref_bmm_bwd(const kiln_bmm_shape *s, const double *a, const double *b, const double *dy, double *da, double *db,
                      int acc_a, int acc_b) {
    int nb = s->nbatch;
    operand DY = {dy, NULL, s->m * s->n, s->n, 1};
    operand BT = {b, s->b_stride, 0, s->b_stride[nb + 1], s->b_stride[nb]};
    operand AT = {a, s->a_stride, 0, s->a_stride[nb + 1], s->a_stride[nb]};
    if (da) product(s, s->m, s->n, s->k, &DY, &BT, da, acc_a);
    if (db) product(s, s->k, s->m, s->n, &AT, &DY, db, acc_b);
}
