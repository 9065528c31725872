// Causal attention on tensor cores: flash.cu's scheme (tiles, running max and
// sum, the T x T scores never stored, backward from the saved log-sum-exp,
// dq by query tiles and dk, dv by key tiles: no atomics, the same bits run
// after run) with every product on the warp's matrix units (wmma 16 x 16 x
// 16): q, k, v, dy and the probabilities rounded to bf16 (fp16 under
// --precision fp16), everything accumulated and kept in fp32 (the row
// statistics, the output and the gradients). Taken for heads that are a
// multiple of 16 up to TC_DMAX wide when the plan's precision is bf16, fp16
// or auto (kernels.c), as PyTorch's autocast runs scaled_dot_product_attention
// in its lower precision.
//
// A block is NW warps, each owning 16 rows of the block's tile (queries in
// forward and dq, keys in dk and dv). A warp's products go through shared
// memory: wmma leaves unspecified which lane holds which element, so the
// softmax's row work (two lanes a row, one the even columns, one the odd) reads
// the scores there, and the forward's output rows are rescaled there before
// each tile's P v is added. Tiles live in dynamic shared memory (carve_*;
// kiln_cuda_flash_tc_setup raises the kernels' limit). Reference:
// src/kernels/ref/attention.c; flash.cu is the fp32 twin.
#include "backends/cuda/internal/cuda.h"
#include "backends/cuda/internal/attn_shape.h"
#include "backends/cuda/internal/tc_elem.h"
#include "backends/cuda/internal/half_out.h"

using namespace nvcuda;

#define NW 4            // warps a block
#define BQ (NW * 16)    // query rows a block (forward, dq)
#define BK 64           // keys a tile; dk and dv blocks hold BK keys, one warp's 16 each
#define LDS (BK + 4)    // floats a row of a score tile
#define LDP (BK + 8)    // bf16 a row of a probability tile
#define TC_DMAX 128
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

template <class E> using frag_a = wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major>;
template <class E> using frag_b = wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::row_major>;
template <class E> using frag_bt = wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::col_major>; // a matrix's rows as its transpose
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

// ---- shared memory: regions 128-byte aligned, the same carving on the host (sizes) and the device ----
__host__ __device__ inline void *take(unsigned char *base, size_t *off, size_t bytes) {
    void *p = (void *)((uintptr_t)base + *off); /* the host sizes the carving from base 0 */
    *off = (*off + bytes + 127) / 128 * 128;
    return p;
}
template <class E> struct tiles {
    E *a, *b, *c, *d;    // 16-bit row tiles [64][d + 8]: forward q, k, v; backward q, dy, k, v
    float *s;            // [64][LDS] scores; backward [2][64][LDS], scores then dP, reused for the outputs at the end
    E *p, *p2;           // [64][LDP]: probabilities (dS in dq; P^T and dS^T in dk, dv)
    float *o;            // forward: the output rows [64][d + 4]
    float *r1, *r2;      // per row: forward max and sum; backward lse (log2 units) and D
    float *red;          // forward: [NW][32] the lanes' partial max and sum
};
template <class E> __host__ __device__ inline size_t carve(unsigned char *base, int d, int fwd, tiles<E> *t) {
    size_t off = 0, row = (size_t)64 * (d + 8) * sizeof(E);
    t->a = (E *)take(base, &off, row), t->b = (E *)take(base, &off, row), t->c = (E *)take(base, &off, row);
    t->d = fwd ? 0 : (E *)take(base, &off, row);
    t->s = (float *)take(base, &off, (size_t)(fwd ? 1 : 2) * 64 * LDS * sizeof(float));
    t->p = (E *)take(base, &off, (size_t)64 * LDP * sizeof(E));
    t->p2 = fwd ? 0 : (E *)take(base, &off, (size_t)64 * LDP * sizeof(E));
    t->o = fwd ? (float *)take(base, &off, (size_t)64 * (d + 4) * sizeof(float)) : 0;
    t->r1 = (float *)take(base, &off, 64 * sizeof(float)), t->r2 = (float *)take(base, &off, 64 * sizeof(float));
    t->red = (float *)take(base, &off, (size_t)NW * 32 * sizeof(float));
    return off;
}

// rows [r0, r0 + 64) of one head of x (batch stride s0, row stride s1; kind xk: fp32, or 16 bits as stored) into
// dst[64][ld], rounded, zeros past T
template <int ND, class E>
__device__ inline void stage(E *dst, int ld, const void *x, int xk, int64_t s0, int64_t s1, const attn &a, int64_t b, int64_t h,
                             int64_t r0) {
    const int d = ND * 16; /* a constant: the index arithmetic below is shifts */
    for (int e = threadIdx.x; e < 64 * d; e += blockDim.x) {
        int r = e / d, c = e % d;
        put(&dst[r * ld + c], r0 + r < a.t ? get_kind(x, xk, b * s0 + (r0 + r) * s1 + h * a.d + c) : 0.f);
    }
}

// out[16][LDS] = a[16][d] . m[64][d]^T: a warp's rows against a tile's 64 rows (scores, dP)
template <int ND, class E> __device__ inline void rows_dot(float *out, const E *a, const E *m, int ld) {
    frag_c acc[BK / 16];
    for (int n = 0; n < BK / 16; n++) wmma::fill_fragment(acc[n], 0.f);
    for (int kk = 0; kk < ND; kk++) {
        frag_a<E> fa;
        wmma::load_matrix_sync(fa, a + kk * 16, ld);
        for (int n = 0; n < BK / 16; n++) {
            frag_bt<E> fb;
            wmma::load_matrix_sync(fb, m + n * 16 * ld + kk * 16, ld);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
    for (int n = 0; n < BK / 16; n++) wmma::store_matrix_sync(out + n * 16, acc[n], LDS, wmma::mem_row_major);
}

// acc[f] += p[16][64] . m[64][d] column block f: the probabilities (or dS) times a tile's rows
template <int ND, class E> __device__ inline void prob_times(frag_c *acc, const E *p, const E *m, int ld) {
    for (int kk = 0; kk < BK / 16; kk++) {
        frag_a<E> fa;
        wmma::load_matrix_sync(fa, p + kk * 16, LDP);
        for (int f = 0; f < ND; f++) {
            frag_b<E> fb;
            wmma::load_matrix_sync(fb, m + kk * 16 * ld + f * 16, ld);
            wmma::mma_sync(acc[f], fa, fb, acc[f]);
        }
    }
}

// ---- forward ----

// the lane's columns of row rr (the even or the odd ones): the tile's scores into bf16 probabilities against
// the grown max, the output row rescaled, the row's max and sum updated (by its first lane); all in shared memory
template <class E>
__device__ inline void online_softmax(const tiles<E> &t, const attn &a, int64_t i, int64_t j0, int rr, int w, int lane, int d) {
    int half = lane % 2;
    float sl2 = a.scale * LOG2E, mx = -INFINITY, sum = 0.f, m_old = t.r1[rr];
    const float *srow = t.s + rr * LDS;
    E *prow = t.p + rr * LDP;
    for (int c = half; c < BK; c += 2)
        if (i < a.t && j0 + c <= i) mx = fmaxf(mx, srow[c] * sl2);
    t.red[w * 32 + lane] = mx;
    __syncwarp();
    float m_new = fmaxf(m_old, fmaxf(mx, t.red[w * 32 + (lane ^ 1)]));
    for (int c = half; c < BK; c += 2) {
        float p = i < a.t && j0 + c <= i ? exp2f(srow[c] * sl2 - m_new) : 0.f;
        put(&prow[c], p);
        sum += p;
    }
    __syncwarp(); // both lanes have read the maxima
    t.red[w * 32 + lane] = sum;
    __syncwarp();
    sum += t.red[w * 32 + (lane ^ 1)];
    float keep = m_old == -INFINITY ? 0.f : exp2f(m_old - m_new);
    float *orow = t.o + rr * (d + 4);
    for (int c = half; c < d; c += 2) orow[c] *= keep;
    if (!half) t.r1[rr] = m_new, t.r2[rr] = t.r2[rr] * keep + sum;
}

template <int K> __global__ void k_tc_fwd(attn a, const void *q, const void *k, const void *v, float *y, float *lse) {
    typedef ELEM(K) E;
    const int ND = K % 16, d = ND * 16, ld = d + 8, ldo = d + 4;
    KILN_DYN_SHARED(unsigned char, sm);
    tiles<E> t;
    carve(sm, d, 1, &t);
    // the last query tiles, which cross the most key tiles under the mask, launch first: short ones fill the tail
    int64_t bh = blockIdx.x, b = bh / a.heads, h = bh % a.heads, q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * BQ;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = w * 16, rr = r0 + lane / 2;
    int64_t i = q0 + rr, last = (q0 + BQ < a.t ? q0 + BQ : a.t) - 1;
    stage<K % 16>(t.a, ld, q, a.qk, a.qs[0], a.qs[1], a, b, h, q0);
    for (int e = threadIdx.x; e < BQ * ldo; e += blockDim.x) t.o[e] = 0.f;
    if (threadIdx.x < BQ) t.r1[threadIdx.x] = -INFINITY, t.r2[threadIdx.x] = 0.f;
    for (int64_t j0 = 0; j0 <= last; j0 += BK) {
        __syncthreads(); // every warp is done with the previous tile's k and v
        stage<K % 16>(t.b, ld, k, a.kk, a.ks[0], a.ks[1], a, b, h, j0);
        stage<K % 16>(t.c, ld, v, a.vk, a.vs[0], a.vs[1], a, b, h, j0);
        __syncthreads();
        rows_dot<K % 16>(t.s + r0 * LDS, t.a + r0 * ld, t.b, ld);
        __syncwarp();
        online_softmax(t, a, i, j0, rr, w, lane, d);
        __syncwarp();
        for (int f = 0; f < ND; f++) { // o += p v, column block by column block through shared memory
            frag_c acc[1];
            wmma::load_matrix_sync(acc[0], t.o + r0 * ldo + f * 16, ldo, wmma::mem_row_major);
            prob_times<1>(acc, t.p + r0 * LDP, t.c + f * 16, ld);
            wmma::store_matrix_sync(t.o + r0 * ldo + f * 16, acc[0], ldo, wmma::mem_row_major);
        }
    }
    __syncwarp();
    if (i >= a.t) return;
    float inv = 1.f / t.r2[rr], *yi = y + (b * a.t + i) * a.c + h * a.d;
    for (int c = lane % 2; c < d; c += 2) yi[c] = t.o[rr * ldo + c] * inv;
    if (lane % 2 == 0) lse[bh * a.t + i] = t.r1[rr] * LN2 + logf(t.r2[rr]);
}

// ---- backward ----

// a warp's 16 x d accumulators out through shared memory (o: [64][d + 4] over the score tiles) into rows
// [r0, r0 + 16) of x (batch stride s0, row stride s1), added when acc; two lanes a row (even, odd columns)
template <int ND> __device__ inline void put_rows(float *o, frag_c *g, float scale, float *x, int64_t s0, int64_t s1,
                                                  const attn &a, int64_t b, int64_t h, int64_t row0, int r0, int acc) {
    const int d = ND * 16, ldo = d + 4;
    for (int f = 0; f < ND; f++) {
        for (int e = 0; e < g[f].num_elements; e++) g[f].x[e] *= scale;
        wmma::store_matrix_sync(o + r0 * ldo + f * 16, g[f], ldo, wmma::mem_row_major);
    }
    __syncwarp();
    int lane = threadIdx.x % 32, rr = r0 + lane / 2;
    int64_t i = row0 + rr;
    if (x && i < a.t)
        for (int c = lane % 2; c < d; c += 2) {
            float *p = x + b * s0 + i * s1 + h * a.d + c;
            *p = acc ? *p + o[rr * ldo + c] : o[rr * ldo + c];
        }
    __syncwarp(); // o is reused
}

// the rows' lse (log2 units) and D into r1, r2 for rows [r0, r0 + 64)
template <class E> __device__ inline void row_stats(const tiles<E> &t, const attn &a, int64_t bh, int64_t r0, const float *lse, const float *D) {
    if (threadIdx.x >= 64) return;
    int64_t i = r0 + threadIdx.x;
    t.r1[threadIdx.x] = i < a.t ? lse[bh * a.t + i] * LOG2E : 0.f;
    t.r2[threadIdx.x] = i < a.t ? D[bh * a.t + i] : 0.f;
}

// dq_i = scale sum_j P_ij (dP_ij - D_i) k_j: a query tile per block over its keys
template <int K> __global__ void k_tc_dq(attn a, const void *q, const void *k, const void *v, const float *lse,
                                          const float *dy, const float *D, float *dq, int acc) {
    typedef ELEM(K) E;
    const int ND = K % 16, d = ND * 16, ld = d + 8;
    KILN_DYN_SHARED(unsigned char, sm);
    tiles<E> t;
    carve(sm, d, 0, &t);
    // the last query tiles, which cross the most key tiles under the mask, launch first: short ones fill the tail
    int64_t bh = blockIdx.x, b = bh / a.heads, h = bh % a.heads, q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * BQ;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = w * 16, rr = r0 + lane / 2, half = lane % 2;
    int64_t i = q0 + rr, last = (q0 + BQ < a.t ? q0 + BQ : a.t) - 1;
    float sl2 = a.scale * LOG2E, *dp = t.s + 64 * LDS;
    stage<K % 16>(t.a, ld, q, a.qk, a.qs[0], a.qs[1], a, b, h, q0);
    stage<K % 16>(t.b, ld, dy, 0, a.t * a.c, a.c, a, b, h, q0);
    row_stats(t, a, bh, q0, lse, D);
    frag_c g[K % 16];
    for (int f = 0; f < ND; f++) wmma::fill_fragment(g[f], 0.f);
    for (int64_t j0 = 0; j0 <= last; j0 += BK) {
        __syncthreads();
        stage<K % 16>(t.c, ld, k, a.kk, a.ks[0], a.ks[1], a, b, h, j0);
        stage<K % 16>(t.d, ld, v, a.vk, a.vs[0], a.vs[1], a, b, h, j0);
        __syncthreads();
        rows_dot<K % 16>(t.s + r0 * LDS, t.a + r0 * ld, t.c, ld);
        rows_dot<K % 16>(dp + r0 * LDS, t.b + r0 * ld, t.d, ld);
        __syncwarp();
        for (int c = half; c < BK; c += 2) {
            float p = i < a.t && j0 + c <= i ? exp2f(t.s[rr * LDS + c] * sl2 - t.r1[rr]) : 0.f;
            put(&t.p[rr * LDP + c], p * (dp[rr * LDS + c] - t.r2[rr]));
        }
        __syncwarp();
        prob_times<K % 16>(g, t.p + r0 * LDP, t.c, ld);
    }
    __syncthreads(); // the score tiles become the output rows
    put_rows<K % 16>(t.s, g, a.scale, dq, a.ds[0], a.ds[1], a, b, h, q0, r0, acc);
}

// a key tile per block over its queries: dv_j = sum_i P_ij dy_i, dk_j = scale sum_i dS_ij q_i
template <int K> __global__ void k_tc_dkv(attn a, const void *q, const void *k, const void *v, const float *lse,
                                           const float *dy, const float *D, float *dk, float *dv, int acc_k, int acc_v) {
    typedef ELEM(K) E;
    const int ND = K % 16, d = ND * 16, ld = d + 8;
    KILN_DYN_SHARED(unsigned char, sm);
    tiles<E> t;
    carve(sm, d, 0, &t);
    int64_t bh = blockIdx.x, b = bh / a.heads, h = bh % a.heads, j0 = (int64_t)blockIdx.y * BK;
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = w * 16, kr = r0 + lane / 2, half = lane % 2;
    int64_t j = j0 + kr;
    float sl2 = a.scale * LOG2E, *dp = t.s + 64 * LDS;
    stage<K % 16>(t.c, ld, k, a.kk, a.ks[0], a.ks[1], a, b, h, j0);
    stage<K % 16>(t.d, ld, v, a.vk, a.vs[0], a.vs[1], a, b, h, j0);
    frag_c gk[K % 16], gv[K % 16];
    for (int f = 0; f < ND; f++) wmma::fill_fragment(gk[f], 0.f), wmma::fill_fragment(gv[f], 0.f);
    for (int64_t q0 = j0; q0 < a.t; q0 += BQ) { // BQ == BK: the first query tile is the diagonal's
        __syncthreads();
        stage<K % 16>(t.a, ld, q, a.qk, a.qs[0], a.qs[1], a, b, h, q0);
        stage<K % 16>(t.b, ld, dy, 0, a.t * a.c, a.c, a, b, h, q0);
        row_stats(t, a, bh, q0, lse, D);
        __syncthreads();
        rows_dot<K % 16>(t.s + r0 * LDS, t.c + r0 * ld, t.a, ld); // S^T: the warp's keys against the queries
        rows_dot<K % 16>(dp + r0 * LDS, t.d + r0 * ld, t.b, ld);  // dP^T
        __syncwarp();
        for (int c = half; c < BK; c += 2) {
            int64_t i = q0 + c;
            int on = i < a.t && j < a.t && j <= i;
            float p = on ? exp2f(t.s[kr * LDS + c] * sl2 - t.r1[c]) : 0.f;
            put(&t.p[kr * LDP + c], p);
            put(&t.p2[kr * LDP + c], on ? p * (dp[kr * LDS + c] - t.r2[c]) : 0.f);
        }
        __syncwarp();
        prob_times<K % 16>(gv, t.p + r0 * LDP, t.b, ld);
        prob_times<K % 16>(gk, t.p2 + r0 * LDP, t.a, ld);
    }
    __syncthreads();
    put_rows<K % 16>(t.s, gk, a.scale, dk, a.ds[0], a.ds[1], a, b, h, j0, r0, acc_k);
    put_rows<K % 16>(t.s, gv, 1.f, dv, a.ds[0], a.ds[1], a, b, h, j0, r0, acc_v);
}

// ---- launchers ----

static size_t smem_bytes(int d, int fwd) {
    tiles<bf16> t; /* fp16's are as large */
    return carve(0, d, fwd, &t);
}
extern "C" {
int kiln_cuda_flash_tc_ok(int64_t d) { return d >= 16 && d <= TC_DMAX && d % 16 == 0; }

int kiln_cuda_flash_tc_setup(int64_t d, int fp16) {
#if defined(KILN_SIMT)
    (void)d, (void)fp16;
    return 0;
#else
    int fwd = (int)smem_bytes((int)d, 1), bwd = (int)smem_bytes((int)d, 0), err = 0;
#define SETUP(K)                                                                                                   \
    err = (int)cudaFuncSetAttribute(k_tc_fwd<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, fwd);                 \
    if (!err) err = (int)cudaFuncSetAttribute(k_tc_dq<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, bwd);        \
    if (!err) err = (int)cudaFuncSetAttribute(k_tc_dkv<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, bwd)
    K_SWITCH(d, fp16, SETUP)
#undef SETUP
    if (err) (void)cudaGetLastError(); /* not left for the next launch's check */
    return err;
#endif
}

void kiln_cuda_flash_tc(kcs st, int fp16, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides,
                        const int *kinds, const void *q, const void *k, const void *v, float *y, float *lse) {
    attn a = attn_of(b, t, c, heads, strides);
    a.qk = kinds[0], a.kk = kinds[1], a.vk = kinds[2];
    dim3 grid((unsigned)(b * heads), (unsigned)((t + BQ - 1) / BQ)); /* batch x heads on x: up to 2^31 - 1 */
    size_t sh = smem_bytes((int)a.d, 1);
#define FWD(K) KLAUNCH(k_tc_fwd<K>, grid, NW * 32, sh, st)(a, q, k, v, y, lse)
    K_SWITCH(a.d, fp16, FWD)
#undef FWD
}

void kiln_cuda_flash_tc_bwd(kcs st, int fp16, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides,
                            const int *kinds, const void *q, const void *k, const void *v, const float *y, const float *lse,
                            const float *dy, float *D, float *dq, float *dk, float *dv, int acc_q, int acc_k, int acc_v) {
    attn a = attn_of(b, t, c, heads, strides);
    a.qk = kinds[0], a.kk = kinds[1], a.vk = kinds[2];
    kiln_cuda_flash_rowdot(st, b, t, c, heads, strides, y, dy, D);
    dim3 gq((unsigned)(b * heads), (unsigned)((t + BQ - 1) / BQ)), gk((unsigned)(b * heads), (unsigned)((t + BK - 1) / BK));
    size_t sh = smem_bytes((int)a.d, 0);
#define DQ(K) KLAUNCH(k_tc_dq<K>, gq, NW * 32, sh, st)(a, q, k, v, lse, dy, D, dq, acc_q)
#define DKV(K) KLAUNCH(k_tc_dkv<K>, gk, NW * 32, sh, st)(a, q, k, v, lse, dy, D, dk, dv, acc_k, acc_v)
    if (dq) K_SWITCH(a.d, fp16, DQ)
    if (dk || dv) K_SWITCH(a.d, fp16, DKV)
#undef DQ
#undef DKV
}
}
