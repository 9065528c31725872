// Causal attention on tensor cores with the tiles in registers, as
// FlashAttention-2 does: flash_tc.cu's algorithm (64-row tiles, running max
// and sum, backward from the saved log-sum-exp, dq by query tiles and dk, dv
// by key tiles: no atomics, the same bits run after run) on PTX's mma.sync
// m16n8k16 (internal/mma.h), whose fragment layout is specified. A warp owns
// 16 rows; its scores stay in the accumulators, the softmax's row max and sum
// are four lanes' shuffles, and the probabilities (or dS), packed to bf16
// (fp16 under --precision fp16), are the next product's A fragments as they
// lie. Only the tiles a block shares go through shared memory: k and v (dq: k,
// v and k transposed; dk, dv: q, dy and both transposed), staged from fp32 and
// rounded once (q, k and v read as they are where stored in 16 bits); the transposed copies make every B fragment two 32-bit loads,
// rows padded by 8 elements so a warp's loads hit 32 different banks.
// Everything accumulates in fp32. Taken for the heads flash_tc.cu takes when
// kiln_cuda_flash_mma_on() (KILN_CUDA_FLASH=mma); reference:
// src/kernels/ref/attention.c.
#include "backends/cuda/internal/cuda.h"
#include "backends/cuda/internal/attn_shape.h"
#include "backends/cuda/internal/mma.h"
#include "backends/cuda/internal/half_out.h"

#define MW 4       // warps a block
#define MT 64      // rows a tile: a block's queries (forward, dq) or keys (dk, dv), and a tile of the other side
#define LDT (MT + 8) // elements a row of a transposed tile
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

// ---- fragments and tiles ----

// x's row (batch stride s0, row stride s1) r of head h, column c: its index (IX), its address (AT)
#define IX(s0, s1, r, c) (b * (s0) + (r) * (s1) + h * a.d + (c))
#define AT(x, s0, s1, r, c) ((x) + IX(s0, s1, r, c))
// two consecutive elements of an input of kind xk (fp32, or 16 bits as stored), packed to E
#define PAIR(x, xk, i) pack2(E(), get_kind((x), (xk), (i)), get_kind((x), (xk), (i) + 1))

// the lane's A fragments of rows [r0, r0 + 16) of one head of x: rows r0 + g and r0 + g + 8, zeros past T
template <int ND, class E>
__device__ inline void rows_frag(uint32_t fa[ND][4], const void *x, int xk, int64_t s0, int64_t s1, const attn &a, int64_t b,
                                 int64_t h, int64_t r0, int g, int t) {
    KILN_UNROLL for (int kk = 0; kk < ND; kk++) KILN_UNROLL for (int e = 0; e < 4; e++) {
            int64_t r = r0 + g + 8 * (e & 1);
            fa[kk][e] = r < a.t ? PAIR(x, xk, IX(s0, s1, r, 16 * kk + 2 * t + 8 * (e >> 1))) : 0u;
        }
}

// rows [r0, r0 + MT) of one head of x into dst[MT][ld], rounded, zeros past T; a pair of columns a thread
template <int ND, class E>
__device__ inline void stage_rows(E *dst, int ld, const void *x, int xk, int64_t s0, int64_t s1, const attn &a, int64_t b,
                                  int64_t h, int64_t r0) {
    const int pairs = ND * 8;
    for (int e = threadIdx.x; e < MT * pairs; e += blockDim.x) {
        int r = e / pairs, c = 2 * (e % pairs);
        st32(dst + r * ld + c, r0 + r < a.t ? PAIR(x, xk, IX(s0, s1, r0 + r, c)) : 0u);
    }
}

// the same rows transposed into dst[d][LDT]; a pair of rows of one column a thread. A warp takes 8 columns of
// 4 row pairs: its 32 stores fall in 32 banks (column c's word c * LDT / 2 is 4c mod 32, plus the pair), and each
// row's 8 columns are one 32-byte read
template <int ND, class E>
__device__ inline void stage_cols(E *dst, const void *x, int xk, int64_t s0, int64_t s1, const attn &a, int64_t b, int64_t h,
                                  int64_t r0) {
    const int d = ND * 16;
    for (int e = threadIdx.x; e < MT / 2 * d; e += blockDim.x) {
        int c = e / 4 % d, r = 2 * (e % 4 + 4 * (e / (4 * d)));
        float lo = r0 + r < a.t ? get_kind(x, xk, IX(s0, s1, r0 + r, c)) : 0.f,
              hi = r0 + r + 1 < a.t ? get_kind(x, xk, IX(s0, s1, r0 + r + 1, c)) : 0.f;
        st32(dst + c * LDT + r, pack2(E(), lo, hi));
    }
}

// s[n] = the warp's rows (A fragments fa, ND k-steps) times rows [8n, 8n + 8) of tile[MT][ld], transposed
template <int ND, class E> __device__ inline void dot_rows(float s[MT / 8][4], const uint32_t fa[ND][4], const E *tile, int ld, int g, int t) {
    KILN_UNROLL for (int n = 0; n < MT / 8; n++) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
        KILN_UNROLL for (int kk = 0; kk < ND; kk++) {
            const E *p = tile + (8 * n + g) * ld + 16 * kk + 2 * t;
            uint32_t fb[2] = {ld32(p), ld32(p + 8)};
            mma16816<E>(s[n], fa[kk], fb);
        }
    }
}

// acc[f] += p times the tile whose transpose is tt[d][LDT]: p's accumulators (16 rows x MT), packed, are the A
// fragments, two 8-column tiles to a 16-column k-step
template <int ND, class E> __device__ inline void times_cols(float acc[2 * ND][4], const float p[MT / 8][4], const E *tt, int g, int t) {
    KILN_UNROLL for (int kk = 0; kk < MT / 16; kk++) {
        const float *lo = p[2 * kk], *hi = p[2 * kk + 1];
        uint32_t fa[4] = {pack2(E(), lo[0], lo[1]), pack2(E(), lo[2], lo[3]), pack2(E(), hi[0], hi[1]), pack2(E(), hi[2], hi[3])};
        KILN_UNROLL for (int f = 0; f < 2 * ND; f++) {
            const E *q = tt + (8 * f + g) * LDT + 16 * kk + 2 * t;
            uint32_t fb[2] = {ld32(q), ld32(q + 8)};
            mma16816<E>(acc[f], fa, fb);
        }
    }
}

// the warp's 16 x d accumulators, times scale, into rows i[0], i[1] of x (added to when add); none past T
template <int ND>
__device__ inline void put_rows(float *x, int64_t s0, int64_t s1, const attn &a, int64_t b, int64_t h, const int64_t i[2],
                                const float acc[2 * ND][4], float scale, int add, int t) {
    if (!x) return;
    KILN_UNROLL for (int f = 0; f < 2 * ND; f++) KILN_UNROLL for (int e = 0; e < 4; e++) {
            if (i[e >> 1] >= a.t) continue;
            float *p = AT(x, s0, s1, i[e >> 1], 8 * f + 2 * t + (e & 1)), v = scale * acc[f][e];
            *p = add ? *p + v : v;
        }
}

// the row's max or sum over its quad's four lanes
__device__ inline float quad_max(float v) {
    v = fmaxf(v, shfl_xor(v, 1));
    return fmaxf(v, shfl_xor(v, 2));
}
__device__ inline float quad_sum(float v) {
    v += shfl_xor(v, 1);
    return v + shfl_xor(v, 2);
}

// ---- forward ----

// one key tile's scores s (log2 units after scaling, the causal mask applied) into probabilities against the
// rows' grown max m; l (the lane's part of each row's sum) and the output o rescaled to it
template <int ND>
__device__ inline void online_softmax(float s[MT / 8][4], float m[2], float l[2], float o[2 * ND][4], const attn &a,
                                      const int64_t i[2], int64_t j0, int t) {
    float sl2 = a.scale * LOG2E, mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.f, 0.f}, keep[2];
    KILN_UNROLL for (int n = 0; n < MT / 8; n++) KILN_UNROLL for (int e = 0; e < 4; e++) {
            int64_t r = i[e >> 1], j = j0 + 8 * n + 2 * t + (e & 1);
            s[n][e] = r < a.t && j <= r ? s[n][e] * sl2 : -INFINITY;
            mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
        }
    KILN_UNROLL for (int r = 0; r < 2; r++) {
        float grown = fmaxf(m[r], quad_max(mx[r]));
        keep[r] = m[r] == -INFINITY ? 0.f : exp2f(m[r] - grown);
        m[r] = grown;
    }
    KILN_UNROLL for (int n = 0; n < MT / 8; n++) KILN_UNROLL for (int e = 0; e < 4; e++) {
            s[n][e] = s[n][e] == -INFINITY ? 0.f : exp2f(s[n][e] - m[e >> 1]);
            sum[e >> 1] += s[n][e];
        }
    KILN_UNROLL for (int r = 0; r < 2; r++) l[r] = l[r] * keep[r] + sum[r];
    KILN_UNROLL for (int f = 0; f < 2 * ND; f++) KILN_UNROLL for (int e = 0; e < 4; e++) o[f][e] *= keep[e >> 1];
}

template <int K>
__global__ void __launch_bounds__(MW * 32) k_mma_fwd(attn a, const void *q, const void *k, const void *v, float *y, float *lse) {
    typedef ELEM(K) E;
    const int ND = K % 16, ld = ND * 16 + 8;
    KILN_DYN_SHARED(unsigned char, sm);
    E *ks = (E *)sm, *vt = ks + MT * ld;
    // the last query tiles, which cross the most key tiles under the mask, launch first: short ones fill the tail
    int64_t bh = blockIdx.x, b = bh / a.heads, h = bh % a.heads, q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * MT;
    int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    int64_t r0 = q0 + 16 * w, i[2] = {r0 + g, r0 + g + 8}, last = (q0 + MT < a.t ? q0 + MT : a.t) - 1;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, o[2 * (K % 16)][4] = {};
    uint32_t qa[K % 16][4];
    rows_frag<K % 16, E>(qa, q, a.qk, a.qs[0], a.qs[1], a, b, h, r0, g, t);
    for (int64_t j0 = 0; j0 <= last; j0 += MT) {
        __syncthreads(); // every warp is done with the previous tile
        stage_rows<K % 16>(ks, ld, k, a.kk, a.ks[0], a.ks[1], a, b, h, j0);
        stage_cols<K % 16>(vt, v, a.vk, a.vs[0], a.vs[1], a, b, h, j0);
        __syncthreads();
        float s[MT / 8][4];
        dot_rows<K % 16>(s, qa, ks, ld, g, t);
        online_softmax<K % 16>(s, m, l, o, a, i, j0, t);
        times_cols<K % 16>(o, s, vt, g, t);
    }
    float inv[2];
    KILN_UNROLL for (int r = 0; r < 2; r++) {
        l[r] = quad_sum(l[r]);
        inv[r] = 1.f / l[r];
        if (t == 0 && i[r] < a.t) lse[bh * a.t + i[r]] = m[r] * LN2 + logf(l[r]);
    }
    KILN_UNROLL for (int f = 0; f < 2 * ND; f++) KILN_UNROLL for (int e = 0; e < 4; e++) o[f][e] *= inv[e >> 1];
    put_rows<K % 16>(y, a.t * a.c, a.c, a, b, h, i, o, 1.f, 0, t);
}

// ---- backward ----

// p = P (from the scores s and the rows' lse in log2 units) and ds = P (dP - D), in place of s and dp; rows i,
// columns j0 + ..., or (keys) the transposes: rows the keys, columns the queries, lse and D per column
template <int T_>
__device__ inline void grad_scores(float s[MT / 8][4], float dp[MT / 8][4], const attn &a, const int64_t i[2], int64_t j0,
                                   const float *lse2, const float *D, int t) {
    float sl2 = a.scale * LOG2E;
    KILN_UNROLL for (int n = 0; n < MT / 8; n++) KILN_UNROLL for (int e = 0; e < 4; e++) {
            int c = 8 * n + 2 * t + (e & 1);
            int64_t row = i[e >> 1], col = j0 + c;
            int64_t qi = T_ ? col : row, kj = T_ ? row : col; // the query and the key of this score
            int on = qi < a.t && kj <= qi;
            float L = T_ ? lse2[c] : lse2[e >> 1], Dv = T_ ? D[c] : D[e >> 1];
            float p = on ? exp2f(s[n][e] * sl2 - L) : 0.f;
            s[n][e] = p;
            dp[n][e] = p * (dp[n][e] - Dv);
        }
}

// dq_i = scale sum_j P_ij (dP_ij - D_i) k_j: a query tile a block over its keys
template <int K>
__global__ void __launch_bounds__(MW * 32) k_mma_dq(attn a, const void *q, const void *k, const void *v, const float *lse,
                                                   const float *dy, const float *D, float *dq, int acc) {
    typedef ELEM(K) E;
    const int ND = K % 16, ld = ND * 16 + 8;
    KILN_DYN_SHARED(unsigned char, sm);
    E *ks = (E *)sm, *vs = ks + MT * ld, *kt = vs + MT * ld;
    // the last query tiles, which cross the most key tiles under the mask, launch first: short ones fill the tail
    int64_t bh = blockIdx.x, b = bh / a.heads, h = bh % a.heads, q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * MT;
    int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    int64_t r0 = q0 + 16 * w, i[2] = {r0 + g, r0 + g + 8}, last = (q0 + MT < a.t ? q0 + MT : a.t) - 1;
    uint32_t qa[K % 16][4], da[K % 16][4];
    rows_frag<K % 16, E>(qa, q, a.qk, a.qs[0], a.qs[1], a, b, h, r0, g, t);
    rows_frag<K % 16, E>(da, dy, 0, a.t * a.c, a.c, a, b, h, r0, g, t);
    float lse2[2], Dr[2], gq[2 * (K % 16)][4] = {};
    KILN_UNROLL for (int r = 0; r < 2; r++) {
        lse2[r] = i[r] < a.t ? lse[bh * a.t + i[r]] * LOG2E : 0.f;
        Dr[r] = i[r] < a.t ? D[bh * a.t + i[r]] : 0.f;
    }
    for (int64_t j0 = 0; j0 <= last; j0 += MT) {
        __syncthreads();
        stage_rows<K % 16>(ks, ld, k, a.kk, a.ks[0], a.ks[1], a, b, h, j0);
        stage_rows<K % 16>(vs, ld, v, a.vk, a.vs[0], a.vs[1], a, b, h, j0);
        stage_cols<K % 16>(kt, k, a.kk, a.ks[0], a.ks[1], a, b, h, j0);
        __syncthreads();
        float s[MT / 8][4], dp[MT / 8][4];
        dot_rows<K % 16>(s, qa, ks, ld, g, t);
        dot_rows<K % 16>(dp, da, vs, ld, g, t);
        grad_scores<0>(s, dp, a, i, j0, lse2, Dr, t);
        times_cols<K % 16>(gq, dp, kt, g, t);
    }
    put_rows<K % 16>(dq, a.ds[0], a.ds[1], a, b, h, i, gq, a.scale, acc, t);
}

// a key tile a block over its queries: dv_j = sum_i P_ij dy_i, dk_j = scale sum_i dS_ij q_i, from the
// transposed scores (the warp's keys as rows)
template <int K>
__global__ void __launch_bounds__(MW * 32) k_mma_dkv(attn a, const void *q, const void *k, const void *v, const float *lse,
                                                    const float *dy, const float *D, float *dk, float *dv, int acc_k, int acc_v) {
    typedef ELEM(K) E;
    const int ND = K % 16, d = ND * 16, ld = d + 8;
    KILN_DYN_SHARED(unsigned char, sm);
    E *qs = (E *)sm, *ds = qs + MT * ld, *qt = ds + MT * ld, *dyt = qt + d * LDT;
    float *lse2 = (float *)(dyt + d * LDT), *Dc = lse2 + MT;
    int64_t bh = blockIdx.x, b = bh / a.heads, h = bh % a.heads, j0 = (int64_t)blockIdx.y * MT;
    int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    int64_t r0 = j0 + 16 * w, j[2] = {r0 + g, r0 + g + 8};
    uint32_t ka[K % 16][4], va[K % 16][4];
    rows_frag<K % 16, E>(ka, k, a.kk, a.ks[0], a.ks[1], a, b, h, r0, g, t);
    rows_frag<K % 16, E>(va, v, a.vk, a.vs[0], a.vs[1], a, b, h, r0, g, t);
    float gk[2 * (K % 16)][4] = {}, gv[2 * (K % 16)][4] = {};
    for (int64_t q0 = j0; q0 < a.t; q0 += MT) { // the first query tile is the diagonal's
        __syncthreads();
        stage_rows<K % 16>(qs, ld, q, a.qk, a.qs[0], a.qs[1], a, b, h, q0);
        stage_rows<K % 16>(ds, ld, dy, 0, a.t * a.c, a.c, a, b, h, q0);
        stage_cols<K % 16>(qt, q, a.qk, a.qs[0], a.qs[1], a, b, h, q0);
        stage_cols<K % 16>(dyt, dy, 0, a.t * a.c, a.c, a, b, h, q0);
        if (threadIdx.x < MT) {
            int64_t qi = q0 + threadIdx.x;
            lse2[threadIdx.x] = qi < a.t ? lse[bh * a.t + qi] * LOG2E : 0.f;
            Dc[threadIdx.x] = qi < a.t ? D[bh * a.t + qi] : 0.f;
        }
        __syncthreads();
        float s[MT / 8][4], dp[MT / 8][4];
        dot_rows<K % 16>(s, ka, qs, ld, g, t);  // S^T: the warp's keys against the tile's queries
        dot_rows<K % 16>(dp, va, ds, ld, g, t); // dP^T
        grad_scores<1>(s, dp, a, j, q0, lse2, Dc, t);
        times_cols<K % 16>(gv, s, dyt, g, t);
        times_cols<K % 16>(gk, dp, qt, g, t);
    }
    put_rows<K % 16>(dk, a.ds[0], a.ds[1], a, b, h, j, gk, a.scale, acc_k, t);
    put_rows<K % 16>(dv, a.ds[0], a.ds[1], a, b, h, j, gv, 1.f, acc_v, t);
}

// ---- launchers ----

/* each kernel's shared memory for heads of d (16-bit elements, and dk, dv's lse and D) */
static size_t fwd_bytes(int64_t d) { return (size_t)(MT * (d + 8) + d * LDT) * 2; }
static size_t dq_bytes(int64_t d) { return (size_t)(2 * MT * (d + 8) + d * LDT) * 2; }
static size_t dkv_bytes(int64_t d) { return (size_t)(2 * MT * (d + 8) + 2 * d * LDT) * 2 + 2 * MT * sizeof(float); }

extern "C" {
int kiln_cuda_flash_mma_setup(int64_t d, int fp16) {
#if defined(KILN_SIMT)
    (void)d, (void)fp16;
    return 0;
#else
    int err = 0;
#define SETUP(K)                                                                                                    \
    err = (int)cudaFuncSetAttribute(k_mma_fwd<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fwd_bytes(d));   \
    if (!err) err = (int)cudaFuncSetAttribute(k_mma_dq<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dq_bytes(d)); \
    if (!err) err = (int)cudaFuncSetAttribute(k_mma_dkv<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dkv_bytes(d))
    K_SWITCH(d, fp16, SETUP)
#undef SETUP
    if (err) (void)cudaGetLastError(); /* not left for the next launch's check */
    return err;
#endif
}

void kiln_cuda_flash_mma(kcs st, int fp16, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides,
                         const int *kinds, const void *q, const void *k, const void *v, float *y, float *lse) {
    attn a = attn_of(b, t, c, heads, strides);
    a.qk = kinds[0], a.kk = kinds[1], a.vk = kinds[2];
    dim3 grid((unsigned)(b * heads), (unsigned)((t + MT - 1) / MT)); /* batch x heads on x: up to 2^31 - 1 */
#define FWD(K) KLAUNCH(k_mma_fwd<K>, grid, MW * 32, fwd_bytes(a.d), st)(a, q, k, v, y, lse)
    K_SWITCH(a.d, fp16, FWD)
#undef FWD
}

void kiln_cuda_flash_mma_bwd(kcs st, int fp16, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides,
                             const int *kinds, const void *q, const void *k, const void *v, const float *y, const float *lse,
                             const float *dy, float *D, float *dq, float *dk, float *dv, int acc_q, int acc_k, int acc_v) {
    attn a = attn_of(b, t, c, heads, strides);
    a.qk = kinds[0], a.kk = kinds[1], a.vk = kinds[2];
    kiln_cuda_flash_rowdot(st, b, t, c, heads, strides, y, dy, D);
    dim3 grid((unsigned)(b * heads), (unsigned)((t + MT - 1) / MT));
#define DQ(K) KLAUNCH(k_mma_dq<K>, grid, MW * 32, dq_bytes(a.d), st)(a, q, k, v, lse, dy, D, dq, acc_q)
#define DKV(K) KLAUNCH(k_mma_dkv<K>, grid, MW * 32, dkv_bytes(a.d), st)(a, q, k, v, lse, dy, D, dk, dv, acc_k, acc_v)
    if (dq) K_SWITCH(a.d, fp16, DQ)
    if (dk || dv) K_SWITCH(a.d, fp16, DKV)
#undef DQ
#undef DKV
}
}
