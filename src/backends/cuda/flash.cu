// Causal attention in tiles (FlashAttention's scheme, plain FMA): a block per
// (batch x head, tile of BQ query rows) stages the rows' q, then each tile of
// BK keys and values in shared memory, computes the tile's scores, and keeps
// each row's running max and sum, rescaling its output as the max grows; the
// T x T scores never exist. The log-sum-exp of each row is saved. Backward
// recomputes every score from q, k and that log-sum-exp: dq by query tiles
// over their keys, dk and dv by key tiles over their queries (no atomics, so
// the same bits run after run), after D_i = dy_i . y_i. Heads up to DMAX;
// transformer.cu's thread-per-row kernels take wider ones. Each row of a
// tile belongs to TPR threads, each holding every TPR-th column of its
// output. Reference: src/kernels/ref/attention.c.
#include "backends/cuda/internal/cuda.h"
#include "backends/cuda/internal/block.h"
#include "backends/cuda/internal/attn_shape.h"

#define BQ 16
#define BK 16
#define TPR 8 // threads per row: blocks of BQ * TPR = 128
#define DMAX 128


__device__ inline const float *frow(const float *x, const int64_t *s, const attn &a, int64_t b, int64_t h, int64_t i) {
    return x + b * s[0] + i * s[1] + h * a.d;
}
// rows [r0, r0 + n) of one head into tile[n][DMAX] (zeros past T), by all threads
__device__ inline void stage(float (*tile)[DMAX], const float *x, const int64_t *s, const attn &a, int64_t b, int64_t h,
                             int64_t r0, int n) {
    for (int e = threadIdx.x; e < n * a.d; e += blockDim.x) {
        int r = e / (int)a.d, c = e % (int)a.d;
        tile[r][c] = r0 + r < a.t ? frow(x, s, a, b, h, r0 + r)[c] : 0.f;
    }
}
// the same from a contiguous [B, T, C] tensor (y, dy)
__device__ inline void stage_c(float (*tile)[DMAX], const float *x, const attn &a, int64_t b, int64_t h, int64_t r0, int n) {
    for (int e = threadIdx.x; e < n * a.d; e += blockDim.x) {
        int r = e / (int)a.d, c = e % (int)a.d;
        tile[r][c] = r0 + r < a.t ? x[(b * a.t + r0 + r) * a.c + h * a.d + c] : 0.f;
    }
}
__device__ inline float dot_tile(const float *p, const float *q, int64_t d) {
    float s = 0.f;
    for (int64_t c = 0; c < d; c++) s += p[c] * q[c];
    return s;
}

__global__ void k_flash_fwd(attn a, const float *q, const float *k, const float *v, float *y, float *lse) {
    __shared__ float Qs[BQ][DMAX], Ks[BK][DMAX], Vs[BK][DMAX], S[BQ][BK], mrow[BQ], lrow[BQ], keep[BQ];
    // the last query tiles, which cross the most key tiles under the mask, launch first: short ones fill the tail
    int64_t bh = blockIdx.x, b = bh / a.heads, h = bh % a.heads, q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * BQ;
    int r = threadIdx.x / TPR, l = threadIdx.x % TPR;
    int64_t i = q0 + r;
    float o[DMAX / TPR];
    for (int u = 0; u < DMAX / TPR; u++) o[u] = 0.f;
    stage(Qs, q, a.qs, a, b, h, q0, BQ);
    if (l == 0) mrow[r] = -INFINITY, lrow[r] = 0.f;
    int64_t last = q0 + BQ - 1 < a.t - 1 ? q0 + BQ - 1 : a.t - 1;
    for (int64_t j0 = 0; j0 <= last; j0 += BK) {
        __syncthreads(); // the previous tile's values are used
        stage(Ks, k, a.ks, a, b, h, j0, BK);
        stage(Vs, v, a.vs, a, b, h, j0, BK);
        __syncthreads();
        for (int c = l; c < BK; c += TPR)
            S[r][c] = i < a.t && j0 + c <= i ? dot_tile(Qs[r], Ks[c], a.d) * a.scale : -INFINITY;
        __syncthreads();
        if (l == 0 && i < a.t) { // the row's running max and sum; the tile's probabilities in place
            float m = mrow[r];
            for (int c = 0; c < BK; c++) m = fmaxf(m, S[r][c]);
            float kp = expf(mrow[r] - m), sum = 0.f;
            for (int c = 0; c < BK; c++) {
                float p = S[r][c] == -INFINITY ? 0.f : expf(S[r][c] - m);
                S[r][c] = p;
                sum += p;
            }
            mrow[r] = m, lrow[r] = lrow[r] * kp + sum, keep[r] = kp;
        }
        __syncthreads();
        if (i < a.t)
            for (int u = 0, cc = l; cc < a.d; u++, cc += TPR) {
                float acc = o[u] * keep[r];
                for (int c = 0; c < BK; c++) acc += S[r][c] * Vs[c][cc];
                o[u] = acc;
            }
    }
    if (i >= a.t) return;
    float *yi = y + (b * a.t + i) * a.c + h * a.d;
    for (int u = 0, cc = l; cc < a.d; u++, cc += TPR) yi[cc] = o[u] / lrow[r];
    if (l == 0) lse[bh * a.t + i] = mrow[r] + logf(lrow[r]);
}

// D_i = dy_i . y_i, a thread per row
__global__ void k_flash_d(int64_t n, attn a, const float *y, const float *dy, float *D) {
    FOR_N {
        int64_t row = i % a.t, h = i / a.t % a.heads, b = i / (a.t * a.heads), o = (b * a.t + row) * a.c + h * a.d;
        D[i] = dot_tile(dy + o, y + o, a.d);
    }
}

// dq_i = scale sum_j P_ij (dy_i . v_j - D_i) k_j, a query tile per block over its keys
__global__ void k_flash_dq(attn a, const float *q, const float *k, const float *v, const float *lse, const float *dy,
                           const float *D, float *dq, int acc) {
    __shared__ float Qs[BQ][DMAX], Gs[BQ][DMAX], Ks[BK][DMAX], Vs[BK][DMAX], S[BQ][BK];
    // the last query tiles, which cross the most key tiles under the mask, launch first: short ones fill the tail
    int64_t bh = blockIdx.x, b = bh / a.heads, h = bh % a.heads, q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * BQ;
    int r = threadIdx.x / TPR, l = threadIdx.x % TPR;
    int64_t i = q0 + r;
    float g[DMAX / TPR];
    for (int u = 0; u < DMAX / TPR; u++) g[u] = 0.f;
    stage(Qs, q, a.qs, a, b, h, q0, BQ);
    stage_c(Gs, dy, a, b, h, q0, BQ);
    float L = i < a.t ? lse[bh * a.t + i] : 0.f, Di = i < a.t ? D[bh * a.t + i] : 0.f;
    int64_t last = q0 + BQ - 1 < a.t - 1 ? q0 + BQ - 1 : a.t - 1;
    for (int64_t j0 = 0; j0 <= last; j0 += BK) {
        __syncthreads();
        stage(Ks, k, a.ks, a, b, h, j0, BK);
        stage(Vs, v, a.vs, a, b, h, j0, BK);
        __syncthreads();
        for (int c = l; c < BK; c += TPR) {
            float p = i < a.t && j0 + c <= i ? expf(dot_tile(Qs[r], Ks[c], a.d) * a.scale - L) : 0.f;
            S[r][c] = p * (dot_tile(Gs[r], Vs[c], a.d) - Di);
        }
        __syncthreads();
        for (int u = 0, cc = l; cc < a.d; u++, cc += TPR)
            for (int c = 0; c < BK; c++) g[u] += S[r][c] * Ks[c][cc];
    }
    if (i >= a.t || !dq) return;
    float *d = dq + b * a.ds[0] + i * a.ds[1] + h * a.d;
    for (int u = 0, cc = l; cc < a.d; u++, cc += TPR) PUT(d[cc], g[u] * a.scale);
}

// a key tile per block over its queries: dv_j = sum_i P_ij dy_i, dk_j = scale sum_i dS_ij q_i
__global__ void k_flash_dkv(attn a, const float *q, const float *k, const float *v, const float *lse, const float *dy,
                            const float *D, float *dk, float *dv, int acc_k, int acc_v) {
    __shared__ float Ks[BK][DMAX], Vs[BK][DMAX], Qs[BQ][DMAX], Gs[BQ][DMAX], P[BQ][BK], dS[BQ][BK];
    int64_t bh = blockIdx.x, b = bh / a.heads, h = bh % a.heads, j0 = (int64_t)blockIdx.y * BK;
    int t = threadIdx.x / TPR, l = threadIdx.x % TPR; // t: a query row of the tile when scoring, a key row after
    int64_t j = j0 + t;
    float gk[DMAX / TPR], gv[DMAX / TPR];
    for (int u = 0; u < DMAX / TPR; u++) gk[u] = gv[u] = 0.f;
    stage(Ks, k, a.ks, a, b, h, j0, BK);
    stage(Vs, v, a.vs, a, b, h, j0, BK);
    for (int64_t q0 = j0 / BQ * BQ; q0 < a.t; q0 += BQ) {
        __syncthreads();
        stage(Qs, q, a.qs, a, b, h, q0, BQ);
        stage_c(Gs, dy, a, b, h, q0, BQ);
        __syncthreads();
        int64_t i = q0 + t;
        float L = i < a.t ? lse[bh * a.t + i] : 0.f, Di = i < a.t ? D[bh * a.t + i] : 0.f;
        for (int c = l; c < BK; c += TPR) {
            int on = i < a.t && j0 + c < a.t && j0 + c <= i;
            float p = on ? expf(dot_tile(Qs[t], Ks[c], a.d) * a.scale - L) : 0.f;
            P[t][c] = p;
            dS[t][c] = on ? p * (dot_tile(Gs[t], Vs[c], a.d) - Di) : 0.f;
        }
        __syncthreads();
        for (int u = 0, cc = l; cc < a.d; u++, cc += TPR)
            for (int rr = 0; rr < BQ; rr++) {
                gv[u] += P[rr][t] * Gs[rr][cc];
                gk[u] += dS[rr][t] * Qs[rr][cc];
            }
    }
    if (j >= a.t) return;
    float *pk = dk ? dk + b * a.ds[0] + j * a.ds[1] + h * a.d : NULL, *pv = dv ? dv + b * a.ds[0] + j * a.ds[1] + h * a.d : NULL;
    for (int u = 0, cc = l; pk && cc < a.d; u++, cc += TPR) pk[cc] = acc_k ? pk[cc] + gk[u] * a.scale : gk[u] * a.scale;
    for (int u = 0, cc = l; pv && cc < a.d; u++, cc += TPR) pv[cc] = acc_v ? pv[cc] + gv[u] : gv[u];
}


extern "C" {
int kiln_cuda_flash_max_head(void) { return DMAX; }
void kiln_cuda_flash(kcs st, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides, const float *q,
                     const float *k, const float *v, float *y, float *lse) {
    attn a = attn_of(b, t, c, heads, strides);
    dim3 grid((unsigned)(b * heads), (unsigned)((t + BQ - 1) / BQ)); /* batch x heads on x: up to 2^31 - 1 */
    KLAUNCH(k_flash_fwd, grid, BQ * TPR, 0, st)(a, q, k, v, y, lse);
}
void kiln_cuda_flash_rowdot(kcs st, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides, const float *y,
                            const float *dy, float *D) {
    attn a = attn_of(b, t, c, heads, strides);
    int64_t n = b * heads * t;
    KLAUNCH(k_flash_d, GO(n))(n, a, y, dy, D);
}
void kiln_cuda_flash_bwd(kcs st, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides, const float *q,
                         const float *k, const float *v, const float *y, const float *lse, const float *dy, float *D,
                         float *dq, float *dk, float *dv, int acc_q, int acc_k, int acc_v) {
    attn a = attn_of(b, t, c, heads, strides);
    kiln_cuda_flash_rowdot(st, b, t, c, heads, strides, y, dy, D);
    dim3 gq((unsigned)(b * heads), (unsigned)((t + BQ - 1) / BQ)), gk((unsigned)(b * heads), (unsigned)((t + BK - 1) / BK));
    if (dq) KLAUNCH(k_flash_dq, gq, BQ * TPR, 0, st)(a, q, k, v, lse, dy, D, dq, acc_q);
    if (dk || dv) KLAUNCH(k_flash_dkv, gk, BK * TPR, 0, st)(a, q, k, v, lse, dy, D, dk, dv, acc_k, acc_v);
}
}
