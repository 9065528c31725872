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

void kiln_ref_bmm_fwd(const kiln_bmm_shape *s, const double *a, const double *b, double *y) {
    const int64_t *sa = s->a_stride + s->nbatch, *sb = s->b_stride + s->nbatch; /* row, column strides */
    for (int64_t mat = 0; mat < count(s); mat++) {
        const double *A = a + base(s, s->a_stride, mat), *B = b + base(s, s->b_stride, mat);
        double *Y = y + mat * s->m * s->n;
        for (int64_t i = 0; i < s->m; i++)
            for (int64_t j = 0; j < s->n; j++) {
                double sum = 0;
                for (int64_t p = 0; p < s->k; p++) sum += A[i * sa[0] + p * sa[1]] * B[p * sb[0] + j * sb[1]];
                Y[i * s->n + j] = sum;
            }
    }
}

void kiln_ref_bmm_bwd(const kiln_bmm_shape *s, const double *a, const double *b, const double *dy, double *da, double *db,
                      int acc_a, int acc_b) {
    const int64_t *sa = s->a_stride + s->nbatch, *sb = s->b_stride + s->nbatch;
    for (int64_t mat = 0; da && mat < count(s); mat++) { /* da[i, p] = sum_j dy[i, j] b[p, j] */
        const double *B = b + base(s, s->b_stride, mat), *DY = dy + mat * s->m * s->n;
        double *DA = da + mat * s->m * s->k;
        for (int64_t i = 0; i < s->m; i++)
            for (int64_t p = 0; p < s->k; p++) {
                double sum = 0;
                for (int64_t j = 0; j < s->n; j++) sum += DY[i * s->n + j] * B[p * sb[0] + j * sb[1]];
                DA[i * s->k + p] = acc_a ? DA[i * s->k + p] + sum : sum;
            }
    }
    for (int64_t mat = 0; db && mat < count(s); mat++) { /* db[p, j] = sum_i a[i, p] dy[i, j] */
        const double *A = a + base(s, s->a_stride, mat), *DY = dy + mat * s->m * s->n;
        double *DB = db + mat * s->k * s->n;
        for (int64_t p = 0; p < s->k; p++)
            for (int64_t j = 0; j < s->n; j++) {
                double sum = 0;
                for (int64_t i = 0; i < s->m; i++) sum += A[i * sa[0] + p * sa[1]] * DY[i * s->n + j];
                DB[p * s->n + j] = acc_b ? DB[p * s->n + j] + sum : sum;
            }
    }
}
