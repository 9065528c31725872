// kiln's own CUDA kernels for the transformer ops: embedding (backward
// gathered per vocabulary row from the tokens bucketed by id, in order:
// deterministic, no float atomics),
// layer norm and softmax (a block per row, statistics in double), GELU in
// both forms, affine / erf / tanh, the broadcast add, MSE, and causal
// attention that never holds the T x T scores: a thread per query row keeps
// the running max and sum (FlashAttention's online softmax) and saves the
// row's log-sum-exp; backward recomputes each score from q, k and that
// log-sum-exp, dq a query row per thread, dk and dv a key row per thread.
// Reference twins in src/kernels/ref/; checked by the op harness on the host
// (test_simt) and on a GPU (test_ops).
#include "backends/cuda/internal/cuda.h"
#include "backends/cuda/internal/block.h"
#include "backends/cuda/internal/pointwise_math.h"
#include "backends/cuda/internal/attn_shape.h"
#include "backends/cuda/internal/half_out.h"

#define MAX_HEAD 256 // attention's head size: its rows live in each thread's registers (local memory)

// ---- pointwise ----
// x of kind xk: a rounded linear output the half-storage pass stores in 16 bits, read widened
__global__ void k_gelu(int64_t n, int tf, const void *x, int xk, void *y, int yk) {
    FOR_N put_kind(y, yk, i, gelu_f(get_kind(x, xk, i), tf));
}
__global__ void k_gelu_bwd(int64_t n, int tf, const void *x, int xk, const float *dy, void *dx, int dxk, int acc) {
    FOR_N {
        float v = dy[i] * gelu_grad(get_kind(x, xk, i), tf);
        put_or_add(dx, dxk, i, v, acc);
    }
}
__global__ void k_affine(int64_t n, float s, float b, const float *x, float *y) { FOR_N y[i] = fmaf(x[i], s, b); }
__global__ void k_scale(int64_t n, float s, const float *dy, float *dx, int acc) { FOR_N PUT(dx[i], s * dy[i]); }
__global__ void k_erf(int64_t n, const float *x, float *y) { FOR_N y[i] = erff(x[i]); }
__global__ void k_erf_bwd(int64_t n, const float *x, const float *dy, float *dx, int acc) {
    FOR_N PUT(dx[i], dy[i] * (1.1283791671f * expf(-x[i] * x[i])));
}
__global__ void k_tanh(int64_t n, const float *x, float *y) { FOR_N y[i] = tanhf(x[i]); }
__global__ void k_tanh_bwd(int64_t n, const float *y, const float *dy, float *dx, int acc) {
    FOR_N PUT(dx[i], dy[i] * (1.f - y[i] * y[i]));
}
__global__ void k_add_bcast(int64_t n, int64_t inner, const float *a, const float *b, float *y) { FOR_N y[i] = a[i] + b[i % inner]; }

// ---- mse: one block sums, in double ----
__global__ void k_mse(int64_t n, const float *x, const float *t, float *loss) {
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += RT) {
        double d = (double)x[i] - t[i];
        s += d * d;
    }
    s = block_sum(s);
    if (threadIdx.x == 0) loss[0] = (float)(s / (double)n);
}
__global__ void k_mse_bwd(int64_t n, const float *x, const float *t, const float *dloss, int relu_mask, float *dx, int acc) {
    float g = (float)(2.0 * dloss[0] / (double)n);
    FOR_N PUT(dx[i], relu_mask && !(x[i] > 0.f) ? 0.f : (x[i] - t[i]) * g);
}

// ---- row-wise: a block per row ----
__global__ void k_softmax(int64_t cols, const float *x, float *y) {
    const float *xr = x + blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += RT) m = fmaxf(m, xr[j]);
    m = block_max(m);
    double s = 0;
    for (int64_t j = threadIdx.x; j < cols; j += RT) s += exp((double)xr[j] - m);
    s = block_sum(s);
    for (int64_t j = threadIdx.x; j < cols; j += RT) y[blockIdx.x * cols + j] = (float)(exp((double)xr[j] - m) / s);
}
__global__ void k_softmax_bwd(int64_t cols, const float *y, const float *dy, float *dx, int acc) {
    int64_t o = blockIdx.x * cols;
    double s = 0;
    for (int64_t j = threadIdx.x; j < cols; j += RT) s += (double)dy[o + j] * y[o + j];
    s = block_sum(s);
    for (int64_t j = threadIdx.x; j < cols; j += RT) PUT(dx[o + j], (float)(y[o + j] * (dy[o + j] - s)));
}
__global__ void k_layer_norm(int64_t C, const float *x, const float *w, const float *b, float eps, void *y, int yk, float *mean,
                             float *rstd) {
    int64_t o = blockIdx.x * C;
    double s = 0, q = 0;
    for (int64_t c = threadIdx.x; c < C; c += RT) s += x[o + c];
    double m = block_sum(s) / (double)C;
    for (int64_t c = threadIdx.x; c < C; c += RT) q += (x[o + c] - m) * (x[o + c] - m);
    double rs = 1.0 / sqrt(block_sum(q) / (double)C + eps);
    for (int64_t c = threadIdx.x; c < C; c += RT) put_kind(y, yk, o + c, (float)((x[o + c] - m) * rs * w[c] + b[c]));
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = (float)m;
        rstd[blockIdx.x] = (float)rs;
    }
}
// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w
__global__ void k_layer_norm_dx(int64_t C, const float *x, const float *dy, const float *w, const float *mean, const float *rstd,
                                float *dx, int acc) {
    int64_t r = blockIdx.x, o = r * C;
    double m = mean[r], rs = rstd[r], sg = 0, sgx = 0;
    for (int64_t c = threadIdx.x; c < C; c += RT) {
        double g = (double)dy[o + c] * w[c];
        sg += g;
        sgx += g * (x[o + c] - m) * rs;
    }
    sg = block_sum(sg) / (double)C;
    sgx = block_sum(sgx) / (double)C;
    for (int64_t c = threadIdx.x; c < C; c += RT) {
        double xh = (x[o + c] - m) * rs;
        PUT(dx[o + c], (float)(rs * ((double)dy[o + c] * w[c] - sg - xh * sgx)));
    }
}
// dw = sum over rows of dy xhat, db = sum of dy (internal/block.h's two stages): columns [c0, c0 + n)
__global__ void k_layer_norm_part(int64_t rows, int64_t C, int64_t c0, int64_t n, int64_t chunk, const float *x, const float *dy,
                                  const float *mean, const float *rstd, double *part) {
    __shared__ double sh[2][CR][CT];
    int64_t j = blockIdx.x * CT + threadIdx.x, c = c0 + j, r0 = blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    double sw = 0, sb = 0;
    if (j < n)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += CR) {
            double g = dy[r * C + c];
            sw += g * ((x[r * C + c] - (double)mean[r]) * rstd[r]);
            sb += g;
        }
    sh[0][threadIdx.y][threadIdx.x] = sw, sh[1][threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y != 0 || j >= n) return;
    for (int k = 1; k < CR; k++) sw += sh[0][k][threadIdx.x], sb += sh[1][k][threadIdx.x];
    part[2 * (blockIdx.y * n + j)] = sw, part[2 * (blockIdx.y * n + j) + 1] = sb;
}
__global__ void k_layer_norm_total(int64_t n, int64_t chunks, const double *part, float *dw, float *db, int acc_w, int acc_b) {
    FOR_N {
        double sw = 0, sb = 0;
        for (int64_t k = 0; k < chunks; k++) sw += part[2 * (k * n + i)], sb += part[2 * (k * n + i) + 1];
        if (dw) dw[i] = acc_w ? dw[i] + (float)sw : (float)sw;
        if (db) db[i] = acc_b ? db[i] + (float)sb : (float)sb;
    }
}

// ---- embedding ----
__device__ int64_t token(const float *idf, const int32_t *idi, int64_t i) { return idf ? (int64_t)idf[i] : (int64_t)idi[i]; }
__device__ int bad_token(const float *idf, const int32_t *idi, int64_t i, int64_t V) {
    if (idf) return !(idf[i] >= 0.f && idf[i] < (float)V && idf[i] == floorf(idf[i]));
    return idi[i] < 0 || idi[i] >= V;
}
// one block: the first id outside [0, V) (or no integer) is recorded with the node's name
__global__ void k_embedding_check(int64_t n, int64_t V, const float *idf, const int32_t *idi, const char *node,
                                  kiln_cuda_flags *f) {
    float first = (float)n; // positions below 2^24 are exact in float
    for (int64_t i = threadIdx.x; i < n; i += RT)
        if (bad_token(idf, idi, i, V)) {
            first = fminf(first, (float)i);
            break;
        }
    first = -block_max(-first);
    if (threadIdx.x == 0 && first < (float)n && f->bad_token == 0) {
        int64_t i = (int64_t)first;
        f->bad_token = (int)i + 1;
        f->token_value = idf ? (double)idf[i] : (double)idi[i];
        f->vocab = (int)V;
        f->node = node;
    }
}
// a bad id reads row 0 (the step fails at the read-out)
__global__ void k_embedding(int64_t n, int64_t C, int64_t V, const float *idf, const int32_t *idi, const float *w, float *y) {
    FOR_N {
        int64_t t = i / C;
        int64_t id = bad_token(idf, idi, t, V) ? 0 : token(idf, idi, t);
        y[i] = w[id * C + i % C];
    }
}
// backward: the tokens bucketed by id (counted, the counts scanned into each id's start, each token placed
// after the earlier tokens of its id: positions stay in order), then a block per vocabulary row sums its
// tokens' rows of dy in position order: every vocabulary row's sum in the same order run after run (no
// float atomics), and work in proportion to tokens x columns, not vocabulary x tokens
__global__ void k_emb_zero(int64_t n, int *x) { FOR_N x[i] = 0; }
__global__ void k_emb_count(int64_t n, int64_t V, const float *idf, const int32_t *idi, int *count) {
    FOR_N if (!bad_token(idf, idi, i, V)) atomicAdd(&count[token(idf, idi, i)], 1); // integer adds: any order, one sum
}
// one block of RT threads, each over a contiguous run of ids: start[v] = count[0] + ... + count[v - 1]
__global__ void k_emb_scan(int64_t V, const int *count, int *start) {
    __shared__ int part[RT];
    int64_t per = (V + RT - 1) / RT, lo = threadIdx.x * per, hi = lo + per < V ? lo + per : V;
    int s = 0;
    for (int64_t v = lo; v < hi; v++) s += count[v];
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int k = 0, run = 0; k < RT; k++) {
            int c = part[k];
            part[k] = run, run += c;
        }
    __syncthreads();
    s = part[threadIdx.x];
    for (int64_t v = lo; v < hi; v++) start[v] = s, s += count[v];
}
// a token per thread: its rank among the earlier tokens of its id, the ids read a tile of RT at a time
__global__ void k_emb_place(int64_t n, int64_t V, const float *idf, const int32_t *idi, const int *start, int *pos) {
    __shared__ int64_t tile[RT];
    int64_t i = (int64_t)blockIdx.x * RT + threadIdx.x, end = (int64_t)blockIdx.x * RT;
    int64_t id = i < n && !bad_token(idf, idi, i, V) ? token(idf, idi, i) : -1;
    int r = 0;
    for (int64_t u0 = 0; u0 <= end; u0 += RT) {
        __syncthreads();
        int64_t u = u0 + threadIdx.x;
        tile[threadIdx.x] = u < n && !bad_token(idf, idi, u, V) ? token(idf, idi, u) : -2;
        __syncthreads();
        for (int k = 0; k < RT && u0 + k < i; k++) r += tile[k] == id;
    }
    if (id >= 0) pos[start[id] + r] = (int)i;
}
__global__ void k_emb_sum(int64_t C, const int *count, const int *start, const int *pos, const float *dy, float *dw, int acc) {
    int64_t v = blockIdx.x;
    int b0 = start[v], nb = count[v];
    for (int64_t c = threadIdx.x; c < C; c += RT) {
        float s = 0.f;
        for (int k = 0; k < nb; k++) s += dy[(int64_t)pos[b0 + k] * C + c];
        PUT(dw[v * C + c], s);
    }
}

// ---- causal attention: a thread per (batch, head, row) ----
__device__ const float *arow(const float *x, const int64_t *s, const attn &a, int64_t b, int64_t h, int64_t i) {
    return x + b * s[0] + i * s[1] + h * a.d;
}
__device__ float dotf(const float *p, const float *q, int64_t d) {
    float s = 0.f;
    for (int64_t c = 0; c < d; c++) s += p[c] * q[c];
    return s;
}
#define HEAD_OF(i) int64_t row = (i) % a.t, h = (i) / a.t % a.heads, b = (i) / (a.t * a.heads)
__global__ void k_attention(int64_t n, attn a, const float *q, const float *k, const float *v, float *y, float *lse) {
    FOR_N {
        HEAD_OF(i);
        const float *qi = arow(q, a.qs, a, b, h, row);
        float o[MAX_HEAD], m = -INFINITY, l = 0.f;
        for (int64_t c = 0; c < a.d; c++) o[c] = 0.f;
        for (int64_t j = 0; j <= row; j++) {
            const float *vj = arow(v, a.vs, a, b, h, j);
            float s = dotf(qi, arow(k, a.ks, a, b, h, j), a.d) * a.scale, mn = fmaxf(m, s);
            float keep = expf(m - mn), p = expf(s - mn);
            l = l * keep + p;
            for (int64_t c = 0; c < a.d; c++) o[c] = o[c] * keep + p * vj[c];
            m = mn;
        }
        float *yi = y + (b * a.t + row) * a.c + h * a.d;
        for (int64_t c = 0; c < a.d; c++) yi[c] = o[c] / l;
        lse[i] = m + logf(l);
    }
}
// D_i = dy_i . y_i (= sum_j P_ij dP_ij) into D; dq_i = scale sum_j P_ij (dy_i . v_j - D_i) k_j
__global__ void k_attention_dq(int64_t n, attn a, const float *q, const float *k, const float *v, const float *y,
                               const float *lse, const float *dy, float *D, float *dq, int acc) {
    FOR_N {
        HEAD_OF(i);
        const float *qi = arow(q, a.qs, a, b, h, row), *dyi = dy + (b * a.t + row) * a.c + h * a.d;
        float Di = dotf(dyi, y + (b * a.t + row) * a.c + h * a.d, a.d), g[MAX_HEAD];
        D[i] = Di;
        if (!dq) continue;
        for (int64_t c = 0; c < a.d; c++) g[c] = 0.f;
        for (int64_t j = 0; j <= row; j++) {
            const float *kj = arow(k, a.ks, a, b, h, j);
            float p = expf(dotf(qi, kj, a.d) * a.scale - lse[i]);
            float ds = p * (dotf(dyi, arow(v, a.vs, a, b, h, j), a.d) - Di);
            for (int64_t c = 0; c < a.d; c++) g[c] += ds * kj[c];
        }
        float *d = dq + b * a.ds[0] + row * a.ds[1] + h * a.d;
        for (int64_t c = 0; c < a.d; c++) PUT(d[c], g[c] * a.scale);
    }
}
// key row j: dk_j = scale sum_{i >= j} P_ij (dy_i . v_j - D_i) q_i, dv_j = sum_{i >= j} P_ij dy_i
__global__ void k_attention_dkv(int64_t n, attn a, const float *q, const float *k, const float *v, const float *lse,
                                const float *dy, const float *D, float *dk, float *dv, int acc_k, int acc_v) {
    FOR_N {
        HEAD_OF(i);
        const float *kj = arow(k, a.ks, a, b, h, row), *vj = arow(v, a.vs, a, b, h, row);
        float gk[MAX_HEAD], gv[MAX_HEAD];
        for (int64_t c = 0; c < a.d; c++) gk[c] = gv[c] = 0.f;
        for (int64_t r = row; r < a.t; r++) {
            int64_t at = i - row + r; // (b, h, r)'s lse and D
            const float *qr = arow(q, a.qs, a, b, h, r), *dyr = dy + (b * a.t + r) * a.c + h * a.d;
            float p = expf(dotf(qr, kj, a.d) * a.scale - lse[at]);
            float ds = p * (dotf(dyr, vj, a.d) - D[at]);
            for (int64_t c = 0; c < a.d; c++) {
                gk[c] += ds * qr[c];
                gv[c] += p * dyr[c];
            }
        }
        float *pk = dk ? dk + b * a.ds[0] + row * a.ds[1] + h * a.d : NULL;
        float *pv = dv ? dv + b * a.ds[0] + row * a.ds[1] + h * a.d : NULL;
        for (int64_t c = 0; pk && c < a.d; c++) pk[c] = acc_k ? pk[c] + gk[c] * a.scale : gk[c] * a.scale;
        for (int64_t c = 0; pv && c < a.d; c++) pv[c] = acc_v ? pv[c] + gv[c] : gv[c];
    }
}


extern "C" {
int kiln_cuda_attention_max_head(void) { return MAX_HEAD; }
void kiln_cuda_gelu(kcs st, int64_t n, int tanh_form, const void *x, int xk, void *y, int yk) {
    KLAUNCH(k_gelu, GO(n))(n, tanh_form, x, xk, y, yk);
}
void kiln_cuda_gelu_bwd(kcs st, int64_t n, int tanh_form, const void *x, int xk, const float *dy, void *dx, int dxk, int acc) {
    KLAUNCH(k_gelu_bwd, GO(n))(n, tanh_form, x, xk, dy, dx, dxk, acc);
}
void kiln_cuda_affine(kcs st, int64_t n, float scale, float shift, const float *x, float *y) {
    KLAUNCH(k_affine, GO(n))(n, scale, shift, x, y);
}
void kiln_cuda_scale(kcs st, int64_t n, float scale, const float *dy, float *dx, int acc) {
    KLAUNCH(k_scale, GO(n))(n, scale, dy, dx, acc);
}
void kiln_cuda_erf(kcs st, int64_t n, const float *x, float *y) { KLAUNCH(k_erf, GO(n))(n, x, y); }
void kiln_cuda_erf_bwd(kcs st, int64_t n, const float *x, const float *dy, float *dx, int acc) {
    KLAUNCH(k_erf_bwd, GO(n))(n, x, dy, dx, acc);
}
void kiln_cuda_tanh(kcs st, int64_t n, const float *x, float *y) { KLAUNCH(k_tanh, GO(n))(n, x, y); }
void kiln_cuda_tanh_bwd(kcs st, int64_t n, const float *y, const float *dy, float *dx, int acc) {
    KLAUNCH(k_tanh_bwd, GO(n))(n, y, dy, dx, acc);
}
void kiln_cuda_add_bcast(kcs st, int64_t n, int64_t inner, const float *a, const float *b, float *y) {
    KLAUNCH(k_add_bcast, GO(n))(n, inner, a, b, y);
}
void kiln_cuda_mse(kcs st, int64_t n, const float *x, const float *t, float *loss) { KLAUNCH(k_mse, 1, RT, 0, st)(n, x, t, loss); }
void kiln_cuda_mse_bwd(kcs st, int64_t n, const float *x, const float *t, const float *dloss, int relu_mask, float *dx, int acc) {
    KLAUNCH(k_mse_bwd, GO(n))(n, x, t, dloss, relu_mask, dx, acc);
}
void kiln_cuda_softmax(kcs st, int64_t rows, int64_t cols, const float *x, float *y) {
    KLAUNCH(k_softmax, (unsigned)rows, RT, 0, st)(cols, x, y);
}
void kiln_cuda_softmax_bwd(kcs st, int64_t rows, int64_t cols, const float *y, const float *dy, float *dx, int acc) {
    KLAUNCH(k_softmax_bwd, (unsigned)rows, RT, 0, st)(cols, y, dy, dx, acc);
}
void kiln_cuda_layer_norm(kcs st, int64_t rows, int64_t C, const float *x, const float *w, const float *b, float eps, void *y,
                          int yk, float *mean, float *rstd) {
    KLAUNCH(k_layer_norm, (unsigned)rows, RT, 0, st)(C, x, w, b, eps, y, yk, mean, rstd);
}
void kiln_cuda_layer_norm_bwd(kcs st, int64_t rows, int64_t C, const float *x, const float *dy, const float *w,
                              const float *mean, const float *rstd, float *dx, float *dw, float *db, int acc_dx, int acc_dw,
                              int acc_db) {
    if (dx) KLAUNCH(k_layer_norm_dx, (unsigned)rows, RT, 0, st)(C, x, dy, w, mean, rstd, dx, acc_dx);
    if (!dw && !db) return;
    col_split sp = col_split_of(rows, 2);
    for (int64_t c0 = 0; c0 < C; c0 += sp.width) {
        int64_t n = C - c0 < sp.width ? C - c0 : sp.width;
        dim3 grid((unsigned)((n + CT - 1) / CT), (unsigned)sp.chunks), block(CT, CR);
        KLAUNCH(k_layer_norm_part, grid, block, 0, st)(rows, C, c0, n, sp.chunk, x, dy, mean, rstd, kiln_cuda_parts_dev());
        KLAUNCH(k_layer_norm_total, GO(n))(n, sp.chunks, kiln_cuda_parts_dev(), dw ? dw + c0 : NULL, db ? db + c0 : NULL, acc_dw,
                                           acc_db);
    }
}
void kiln_cuda_embedding(kcs st, int64_t n, int64_t C, int64_t V, const float *idf, const int32_t *idi, const float *w, float *y,
                         const char *node, kiln_cuda_flags *f) {
    KLAUNCH(k_embedding_check, 1, RT, 0, st)(n, V, idf, idi, node, f);
    KLAUNCH(k_embedding, GO(n * C))(n * C, C, V, idf, idi, w, y);
}
size_t kiln_cuda_embedding_bwd_workspace(int64_t n, int64_t V) { return (size_t)(2 * V + n) * sizeof(int); }
void kiln_cuda_embedding_bwd(kcs st, int64_t n, int64_t C, int64_t V, const float *idf, const int32_t *idi, const float *dy,
                             float *dw, int acc, void *ws) {
    int *count = (int *)ws, *start = count + V, *pos = start + V;
    KLAUNCH(k_emb_zero, GO(V))(V, count);
    KLAUNCH(k_emb_count, GO(n))(n, V, idf, idi, count);
    KLAUNCH(k_emb_scan, 1, RT, 0, st)(V, count, start);
    KLAUNCH(k_emb_place, (unsigned)((n + RT - 1) / RT), RT, 0, st)(n, V, idf, idi, start, pos);
    KLAUNCH(k_emb_sum, (unsigned)V, RT, 0, st)(C, count, start, pos, dy, dw, acc);
}
void kiln_cuda_attention(kcs st, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides, const float *q,
                         const float *k, const float *v, float *y, float *lse) {
    attn a = attn_of(b, t, c, heads, strides);
    int64_t n = b * heads * t;
    KLAUNCH(k_attention, GO(n))(n, a, q, k, v, y, lse);
}
void kiln_cuda_attention_bwd(kcs st, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides, const float *q,
                             const float *k, const float *v, const float *y, const float *lse, const float *dy, float *D,
                             float *dq, float *dk, float *dv, int acc_q, int acc_k, int acc_v) {
    attn a = attn_of(b, t, c, heads, strides);
    int64_t n = b * heads * t;
    KLAUNCH(k_attention_dq, GO(n))(n, a, q, k, v, y, lse, dy, D, dq, acc_q);
    if (dk || dv) KLAUNCH(k_attention_dkv, GO(n))(n, a, q, k, v, lse, dy, D, dk, dv, acc_k, acc_v);
}
}
