// Batched matrix product on kiln's own CUDA kernel: y[..., m, n] = a[..., m, k]
// @ b[..., k, n], a and b read through their strides (views: a transposed k,
// a head's columns), y, dy, da, db contiguous; backward da = dy b^T and
// db = a^T dy, the same kernel with an operand's row and column strides
// swapped. Tiles of 16 x 16 through shared memory, one output per thread, the
// sum over k in a fixed order. Plain FMA: for matmuls that cuBLASLt's strided
// batches cannot describe in one call; its reference is src/kernels/ref/bmm.c.
// An autocast step rounds each operand to bf16 (fp16) as it is staged, as the
// reference and the cpu's oneDNN do, and sums in fp32.
#include "backends/cuda/internal/cuda.h"
#include "backends/cuda/internal/block.h"
#include "backends/cuda/internal/half_out.h"

#define TILE 16
#define MAXB 8

struct bshape {
    int nb;
    int64_t batch[MAXB];
};
// an operand's matrices: each read through (row, col) strides from its start
struct operand {
    const float *p;
    int strided;        // 1: batch strides; 0: contiguous matrices of `size` elements
    int64_t bs[MAXB];
    int64_t size, row, col;
};

__device__ inline const float *mat_of(const bshape &s, const operand &o, int64_t z) {
    if (!o.strided) return o.p + z * o.size;
    int64_t off = 0;
    for (int d = s.nb - 1; d >= 0; d--) {
        off += (z % s.batch[d]) * o.bs[d];
        z /= s.batch[d];
    }
    return o.p + off;
}

// c[z][i, j] (=|+=) sum_p A(i, p) B(p, j); a block per 16 x 16 tile of one matrix
__global__ void k_bmm(int rk, bshape s, int64_t nmat, int64_t m, int64_t k, int64_t n, operand a, operand b, float *c, int acc) {
    __shared__ float As[TILE][TILE], Bs[TILE][TILE + 1];
    int ty = threadIdx.x / TILE, tx = threadIdx.x % TILE;
    int64_t i = (int64_t)blockIdx.y * TILE + ty, j = (int64_t)blockIdx.x * TILE + tx;
    for (int64_t z = blockIdx.z; z < nmat; z += gridDim.z) {
        const float *A = mat_of(s, a, z), *B = mat_of(s, b, z);
        float sum = 0.f;
        for (int64_t p0 = 0; p0 < k; p0 += TILE) {
            __syncthreads(); // the previous tile is used
            As[ty][tx] = i < m && p0 + tx < k ? round_kind(A[i * a.row + (p0 + tx) * a.col], rk) : 0.f;
            Bs[ty][tx] = p0 + ty < k && j < n ? round_kind(B[(p0 + ty) * b.row + j * b.col], rk) : 0.f;
            __syncthreads();
            for (int q = 0; q < TILE; q++) sum += As[ty][q] * Bs[q][tx];
        }
        if (i < m && j < n) {
            float *C = c + z * m * n + i * n + j;
            *C = acc ? *C + sum : sum;
        }
    }
}

static void product(kcs st, int rk, const bshape &s, int64_t nmat, int64_t m, int64_t k, int64_t n, const operand &a,
                    const operand &b, float *c, int acc) {
    dim3 grid((unsigned)((n + TILE - 1) / TILE), (unsigned)((m + TILE - 1) / TILE), (unsigned)(nmat < 65535 ? nmat : 65535));
    KLAUNCH(k_bmm, grid, TILE * TILE, 0, st)(rk, s, nmat, m, k, n, a, b, c, acc);
}

static operand strided(const float *p, int nb, const int64_t *stride, int swap) {
    operand o = {};
    o.p = p, o.strided = 1;
    for (int d = 0; d < nb; d++) o.bs[d] = stride[d];
    o.row = stride[nb + (swap ? 1 : 0)];
    o.col = stride[nb + (swap ? 0 : 1)];
    return o;
}

extern "C" {
int kiln_cuda_bmm_max_batch_dims(void) { return MAXB; }
// shape: nb batch dims, then m, k, n; a_stride, b_stride: nb + 2 each
void kiln_cuda_bmm(kcs st, int rk, int nb, const int64_t *batch, int64_t m, int64_t k, int64_t n, const int64_t *a_stride,
                   const int64_t *b_stride, const float *a, const float *b, float *y) {
    bshape s = {};
    s.nb = nb;
    int64_t nmat = 1;
    for (int d = 0; d < nb; d++) nmat *= s.batch[d] = batch[d];
    product(st, rk, s, nmat, m, k, n, strided(a, nb, a_stride, 0), strided(b, nb, b_stride, 0), y, 0);
}
void kiln_cuda_bmm_bwd(kcs st, int rk, int nb, const int64_t *batch, int64_t m, int64_t k, int64_t n, const int64_t *a_stride,
                       const int64_t *b_stride, const float *a, const float *b, const float *dy, float *da, float *db,
                       int acc_a, int acc_b) {
    bshape s = {};
    s.nb = nb;
    int64_t nmat = 1;
    for (int d = 0; d < nb; d++) nmat *= s.batch[d] = batch[d];
    operand DY = {};
    DY.p = dy, DY.size = m * n, DY.row = n, DY.col = 1;
    if (da) product(st, rk, s, nmat, m, n, k, DY, strided(b, nb, b_stride, 1), da, acc_a); // dy b^T
    operand DYc = DY;
    if (db) product(st, rk, s, nmat, k, m, n, strided(a, nb, a_stride, 1), DYc, db, acc_b); // a^T dy
}
}
