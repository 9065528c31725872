// kiln's own CUDA kernels for reductions: sums (double accumulators, a fixed
// order, so results are the same run after run), bias gradients, row-wise
// log-softmax and the losses (mean over rows, as PyTorch), and batch norm
// (per-channel statistics in double). Reference twins in src/kernels/ref/.
#include "backends/cuda/internal/cuda.h"
#include "backends/cuda/internal/block.h"
#include "backends/cuda/internal/half_out.h"

// Sums over a whole tensor (a loss's sum, clipping's sum of squares over the flat gradients: 124M floats for
// GPT-2) on every SM: block b of the first launch sums the b-th of `parts` chunks, a split fixed by n alone (not
// by the GPU), into the backend's partial sums (kiln_cuda_parts_dev); one block adds those in order. The same
// bits run after run and on any GPU; a tensor of one chunk gives a single block's bits, as before.
#define CHUNK_MIN (RT * 16)
#define SUM_PARTS 1024
static int64_t parts_for(int64_t n) {
    int64_t p = (n + CHUNK_MIN - 1) / CHUNK_MIN;
    return p < 1 ? 1 : p > SUM_PARTS ? SUM_PARTS : p;
}
__global__ void k_part_sums(int64_t n, int64_t chunk, int sq, const float *x, double *part) {
    int64_t lo = blockIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
    double s = 0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += RT) s += sq ? (double)x[i] * x[i] : (double)x[i];
    s = block_sum(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}
__device__ double parts_total(int64_t np, const double *part) {
    double s = 0;
    for (int64_t i = threadIdx.x; i < np; i += RT) s += part[i];
    return block_sum(s);
}
__global__ void k_sum(int64_t np, const double *part, float *y) {
    double s = parts_total(np, part);
    if (threadIdx.x == 0) y[0] = (float)s;
}
__global__ void k_sumsq(int64_t np, const double *part, double *acc, int add) {
    double s = parts_total(np, part);
    if (threadIdx.x == 0) acc[0] = add ? acc[0] + s : s;
}
// y[c] (+)= sum over rows of x[r, c] (internal/block.h's two stages): columns [c0, c0 + n) of rows ld apart
// x stored as kind xk, each element rounded to kind rk first (a bias gradient beside a 16-bit product: its dy as
// the product reads it)
__global__ void k_col_part(int64_t rows, int64_t ld, int64_t c0, int64_t n, int64_t chunk, const void *x, int xk, int rk,
                           double *part) {
    __shared__ double sh[CR][CT];
    int64_t j = blockIdx.x * CT + threadIdx.x, r0 = blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    double s = 0;
    if (j < n)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += CR) s += round_kind(get_kind(x, xk, r * ld + c0 + j), rk);
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y != 0 || j >= n) return;
    for (int k = 1; k < CR; k++) s += sh[k][threadIdx.x];
    part[blockIdx.y * n + j] = s;
}
__global__ void k_col_total(int64_t n, int64_t chunks, const double *part, float *y, int acc) {
    FOR_N {
        double s = 0;
        for (int64_t k = 0; k < chunks; k++) s += part[k * n + i];
        y[i] = acc ? y[i] + (float)s : (float)s;
    }
}
__global__ void k_to_double(const float *x, double *y) { y[0] = x[0]; }

// ---- row-wise: one block per row ----
// log-sum-exp of a row in one pass over it: each thread's running max and sum of exponentials (the sum
// rescaled when the max grows), then the block's max and the sums rescaled to it. The exponentials in float
// (the double ones were a third of the GPT's cross-entropy time), sums in double, a fixed order: the same
// bits run after run. A row of -inf (or a thread without columns) adds 0; a NaN anywhere, or +inf, gives NaN,
// as the two-pass form did (test_simt).
// The row starts at element o of x, of kind xk (16 bits: a logit the half-storage pass stores so, read widened).
__device__ double row_lse(int64_t cols, const void *x, int xk, int64_t o) {
    float m = -INFINITY;
    double s = 0;
    for (int64_t j = threadIdx.x; j < cols; j += RT) {
        float v = get_kind(x, xk, o + j);
        if (v > m) {
            s = m == -INFINITY ? s : s * (double)expf(m - v); /* s is 0, or NaN after a NaN: kept */
            m = v;
        }
        s += m == -INFINITY && v == -INFINITY ? 0.0 : (double)expf(v - m); /* not exp(-inf + inf) */
    }
    float bm = block_max(m);
    if (m != -INFINITY) s *= (double)expf(m - bm); /* else 0, or NaN: kept */
    return bm + log(block_sum(s));
}
__global__ void k_log_softmax(int64_t cols, const float *x, float *y) {
    const float *xr = x + blockIdx.x * cols;
    double lse = row_lse(cols, x, 0, blockIdx.x * cols);
    for (int64_t j = threadIdx.x; j < cols; j += RT) y[blockIdx.x * cols + j] = (float)(xr[j] - lse);
}
__global__ void k_log_softmax_bwd(int64_t cols, const float *y, const float *dy, float *dx, int acc) {
    int64_t o = blockIdx.x * cols;
    double s = 0;
    for (int64_t j = threadIdx.x; j < cols; j += RT) s += dy[o + j];
    s = block_sum(s);
    for (int64_t j = threadIdx.x; j < cols; j += RT) {
        float g = (float)(dy[o + j] - exp((double)y[o + j]) * s);
        dx[o + j] = acc ? dx[o + j] + g : g;
    }
}
// a target outside [0, cols) is recorded (the host reports it at the next sync) and read as class 0
__device__ int32_t checked_target(const int32_t *t, int64_t r, int64_t cols, kiln_cuda_flags *f) {
    int32_t v = t[r];
    if (v >= 0 && v < cols) return v;
    if (f && atomicCAS(&f->bad_target, 0, (int)r + 1) == 0) {
        f->target_value = v;
        f->classes = (int)cols;
    }
    return 0;
}
// loss = mean over rows of -x[r, t[r]]: one block
__global__ void k_nll(int64_t rows, int64_t cols, const float *x, const int32_t *t, kiln_cuda_flags *f, float *loss) {
    double s = 0;
    for (int64_t r = threadIdx.x; r < rows; r += RT) s -= x[r * cols + checked_target(t, r, cols, f)];
    s = block_sum(s);
    if (threadIdx.x == 0) loss[0] = (float)(s / (double)rows);
}
__global__ void k_nll_bwd(int64_t n, int64_t rows, int64_t cols, const int32_t *t, const float *dloss, float *dx, int acc) {
    float g = (float)(-(double)dloss[0] / (double)rows);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, j = i % cols;
        int32_t tr = t[r] >= 0 && t[r] < cols ? t[r] : 0;
        float v = j == tr ? g : 0.f;
        dx[i] = acc ? dx[i] + v : v;
    }
}
// per-row terms lse - x[t], then their mean in one fixed-order block. With
// ignore, a target of -1 is padding: its term is 0 and it leaves the mean
// (0 when every row is padding)
__global__ void k_ce_rows(int64_t cols, const void *x, int xk, const int32_t *t, int ignore, kiln_cuda_flags *f, double *terms) {
    int64_t o = blockIdx.x * cols;
    double lse = row_lse(cols, x, xk, o);
    if (threadIdx.x != 0) return;
    terms[blockIdx.x] = ignore && t[blockIdx.x] == -1 ? 0.0 : lse - get_kind(x, xk, o + checked_target(t, blockIdx.x, cols, f));
}
// rows counted: every row, or with ignore those whose target is not -1
__device__ double counted(int64_t rows, const int32_t *t, int ignore) {
    if (!ignore) return (double)rows;
    double c = 0;
    for (int64_t r = threadIdx.x; r < rows; r += RT) c += t[r] != -1;
    return block_sum(c);
}
__global__ void k_mean(int64_t rows, const double *terms, const int32_t *t, int ignore, float *loss) {
    double s = 0;
    for (int64_t r = threadIdx.x; r < rows; r += RT) s += terms[r];
    s = block_sum(s);
    double c = counted(rows, t, ignore);
    if (threadIdx.x == 0) loss[0] = c > 0 ? (float)(s / c) : 0.f;
}
__global__ void k_count(int64_t rows, const int32_t *t, int ignore, double *c) {
    double v = counted(rows, t, ignore);
    if (threadIdx.x == 0) c[0] = v;
}
// dx in 16 bits where the half-storage pass stores it so (dxk: never accumulated then)
__global__ void k_ce_bwd(int64_t cols, const void *x, int xk, const int32_t *t, int ignore, const float *dloss, const double *count,
                         void *dx, int dxk, int acc) {
    int64_t o = blockIdx.x * cols;
    int pad = ignore && t[blockIdx.x] == -1;
    double g = count[0] > 0 ? (double)dloss[0] / count[0] : 0.0, lse = pad ? 0.0 : row_lse(cols, x, xk, o);
    int32_t tr = t[blockIdx.x] >= 0 && t[blockIdx.x] < cols ? t[blockIdx.x] : 0;
    for (int64_t j = threadIdx.x; j < cols; j += RT) {
        float v = pad ? 0.f : (float)(g * ((double)expf((float)((double)get_kind(x, xk, o + j) - lse)) - (j == tr ? 1.0 : 0.0)));
        put_or_add(dx, dxk, o + j, v, acc);
    }
}

// ---- batch norm over x[n, c, hw] ----
// Each channel's m = n * hw elements in `chunks` chunks, a block each, so every pass runs on every SM (one block
// a channel left most of the GPU idle: 64 blocks for resnet50's first stage, 3.2 MB each). Statistics in three
// launches: the chunks' double sums into the backend's partial sums (kiln_cuda_parts_dev), a thread a channel
// adding its chunks in order (the running statistics, and the per-channel coefficients after the partial sums),
// then the elementwise pass. The split depends on the shape alone: the same bits run after run, on any GPU.
#define AT(a, i, ch, j) (a)[((i) * c + (ch)) * hw + (j)]
/* an input the half-storage pass may store in 16 bits (kind k: kiln_cuda_half_kind), read widened */
#define GET(a, k, i, ch, j) get_kind((a), (k), ((i) * c + (ch)) * hw + (j))
#define BN_BLOCKS 2048 /* blocks a pass aims at */
typedef struct {
    int64_t chunks, chunk, width; /* chunks a channel, elements a chunk, channels a slice (the partial sums' room) */
} bn_split;
static bn_split bn_split_of(int64_t c, int64_t m) {
    bn_split sp;
    int64_t most = (m + CHUNK_MIN - 1) / CHUNK_MIN;
    sp.chunks = (BN_BLOCKS + c - 1) / c;
    if (sp.chunks > most) sp.chunks = most;
    if (sp.chunks > 256) sp.chunks = 256;
    if (sp.chunks < 1) sp.chunks = 1;
    sp.chunk = (m + sp.chunks - 1) / sp.chunks;
    sp.width = KILN_CUDA_PARTS / (2 * sp.chunks + 3); /* two sums a chunk, three coefficients a channel */
    if (sp.width > c) sp.width = c;
    return sp;
}
// the block's chunk of channel c0 + blockIdx.x / chunks: elements e of [e0, e1) as (image img, position j), the
// thread's first found by one division, then stepped by RT without one (RT = q hw + r)
#define BN_BLOCK                                                                                         \
    int64_t ch = c0 + blockIdx.x / chunks, k_ = blockIdx.x % chunks, e0 = k_ * chunk,                   \
            e1 = e0 + chunk < n * hw ? e0 + chunk : n * hw
#define FOR_CHUNK                                                                                        \
    for (int64_t e = e0 + threadIdx.x, img = e / hw, j = e % hw, q_ = RT / hw, r_ = RT % hw; e < e1;     \
         e += RT, img += q_ + (j + r_ >= hw), j = j + r_ >= hw ? j + r_ - hw : j + r_)
// stage one: a chunk's sums of a and b (forward: x and x^2; backward: dy and dy x-hat)
__global__ void k_bn_part(int64_t n, int64_t c, int64_t hw, int64_t c0, int64_t chunks, int64_t chunk, const void *x, int xk,
                          const void *dy, int dyk, const float *mean, const float *invstd, double *part) {
    BN_BLOCK;
    double sa = 0, sb = 0;
    if (!dy) {
        FOR_CHUNK {
            double v = GET(x, xk, img, ch, j);
            sa += v;
            sb += v * v;
        }
    } else {
        double mu = mean[ch], is = invstd[ch];
        FOR_CHUNK {
            double g = GET(dy, dyk, img, ch, j);
            sa += g;
            sb += g * (GET(x, xk, img, ch, j) - mu) * is;
        }
    }
    sa = block_sum(sa);
    sb = block_sum(sb);
    if (threadIdx.x == 0) part[blockIdx.x * 2] = sa, part[blockIdx.x * 2 + 1] = sb;
}
// channel c0 + i's chunks added in order
__device__ inline void bn_totals(int64_t i, int64_t chunks, const double *part, double *a, double *b) {
    double sa = 0, sb = 0;
    for (int64_t k = 0; k < chunks; k++) sa += part[(i * chunks + k) * 2], sb += part[(i * chunks + k) * 2 + 1];
    *a = sa, *b = sb;
}
// forward stage two: mean and variance (training: E[x^2] - mean^2 in double; else the running ones), the
// running statistics, the saved mean and inverse deviation, y = (x - mean) * k + b's coefficients
__global__ void k_bn_stats(int64_t n, int64_t hw, int64_t c0, int64_t width, int64_t chunks, const double *part,
                           double *coef, const float *w, const float *b, float *rmean, float *rvar, float momentum,
                           float eps, int training, float *smean, float *sinvstd, int64_t *tracked) {
    int64_t m = n * hw;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < width; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ch = c0 + i;
        double mean, var;
        if (training) {
            double s, q;
            bn_totals(i, chunks, part, &s, &q);
            mean = s / (double)m;
            var = q / (double)m - mean * mean;
            var = var > 0 ? var : 0;
            rmean[ch] = (float)((1.0 - momentum) * rmean[ch] + momentum * mean);
            rvar[ch] = (float)((1.0 - momentum) * rvar[ch] + momentum * var * (double)m / (double)(m - 1));
            if (ch == 0) tracked[0]++;
        } else {
            mean = rmean[ch];
            var = rvar[ch];
        }
        double invstd = 1.0 / sqrt(var + eps);
        if (smean) smean[ch] = (float)mean;
        if (sinvstd) sinvstd[ch] = (float)invstd;
        double *k = coef + i * 3;
        k[0] = (float)mean, k[1] = (float)invstd * w[ch], k[2] = b[ch];
    }
}
// relu: the fused relu (the batch norm's epilogue) on the way out, as relu's own kernel computes it
__global__ void k_bn_apply(int64_t n, int64_t c, int64_t hw, int64_t c0, int64_t chunks, int64_t chunk, const double *coef,
                           const void *x, int xk, void *y, int yk, int rk, int relu) {
    BN_BLOCK;
    const double *k = coef + (ch - c0) * 3;
    float fm = (float)k[0], kk = (float)k[1], bb = (float)k[2];
    FOR_CHUNK {
        float v = (GET(x, xk, img, ch, j) - fm) * kk + bb;
        put_kind(y, yk, (img * c + ch) * hw + j, round_kind(relu && !(v > 0.f) ? 0.f : v, rk));
    }
}
// backward stage two: the weight and bias gradients; the sums kept for dx
__global__ void k_bn_bwd_stats(int64_t c0, int64_t width, int64_t chunks, const double *part, double *coef, float *dw,
                               float *db, int acc_dw, int acc_db) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < width; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ch = c0 + i;
        double sdy, sdyx;
        bn_totals(i, chunks, part, &sdy, &sdyx);
        if (dw) dw[ch] = acc_dw ? dw[ch] + (float)sdyx : (float)sdyx;
        if (db) db[ch] = acc_db ? db[ch] + (float)sdy : (float)sdy;
        coef[i * 3] = sdy, coef[i * 3 + 1] = sdyx;
    }
}
__global__ void k_bn_bwd_apply(int64_t n, int64_t c, int64_t hw, int64_t c0, int64_t chunks, int64_t chunk, const double *coef,
                               const void *x, int xk, const void *dy, int dyk, const float *w, const float *mean,
                               const float *invstd, void *dx, int dxk, int acc) {
    BN_BLOCK;
    double m = (double)(n * hw), mu = mean[ch], is = invstd[ch], sdy = coef[(ch - c0) * 3], sdyx = coef[(ch - c0) * 3 + 1];
    double k = w[ch] * is / m;
    FOR_CHUNK {
        double xh = (GET(x, xk, img, ch, j) - mu) * is;
        float g = (float)(k * (m * GET(dy, dyk, img, ch, j) - sdy - xh * sdyx));
        put_or_add(dx, dxk, (img * c + ch) * hw + j, g, acc);
    }
}

// ---- batch norm over x[m, c] (m = n * hw rows: channels last, the layout pass's NHWC) ----
// Stage one: a block a (chunk of rows, tile of BT channels), BT x BR threads: a thread a channel and every BR-th row
// of the chunk, so a warp reads BT consecutive channels of a row; each channel's BR sums added in shared memory in a
// fixed order, into the NCHW kernels' partial-sum layout (k_bn_stats and k_bn_bwd_stats read it as theirs).
#define BT 32
#define BR 8
static bn_split bn_split_nhwc(int64_t c, int64_t m) {
    bn_split sp;
    int64_t tiles = (c + BT - 1) / BT, most = (m + CHUNK_MIN - 1) / CHUNK_MIN;
    sp.chunks = (BN_BLOCKS + tiles - 1) / tiles;
    if (sp.chunks > most) sp.chunks = most;
    if (sp.chunks > 256) sp.chunks = 256;
    if (sp.chunks < 1) sp.chunks = 1;
    sp.chunk = (m + sp.chunks - 1) / sp.chunks;
    sp.width = KILN_CUDA_PARTS / (2 * sp.chunks + 3);
    if (sp.width > c) sp.width = c;
    return sp;
}
__global__ void k_bn_part_nhwc(int64_t m, int64_t c, int64_t c0, int64_t width, int64_t chunks, int64_t chunk, const void *x,
                               int xk, const void *dy, int dyk, const float *mean, const float *invstd, double *part) {
    __shared__ double sa[BR][BT], sb[BR][BT];
    int64_t i = (int64_t)blockIdx.y * BT + threadIdx.x, k = blockIdx.x, ch = c0 + i, r0 = k * chunk;
    int64_t r1 = r0 + chunk < m ? r0 + chunk : m;
    double a = 0, b = 0;
    if (i < width && !dy) {
        for (int64_t r = r0 + threadIdx.y; r < r1; r += BR) {
            double v = get_kind(x, xk, r * c + ch);
            a += v;
            b += v * v;
        }
    } else if (i < width) {
        double mu = mean[ch], is = invstd[ch];
        for (int64_t r = r0 + threadIdx.y; r < r1; r += BR) {
            double g = get_kind(dy, dyk, r * c + ch);
            a += g;
            b += g * (get_kind(x, xk, r * c + ch) - mu) * is;
        }
    }
    sa[threadIdx.y][threadIdx.x] = a, sb[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y != 0 || i >= width) return;
    for (int t = 1; t < BR; t++) a += sa[t][threadIdx.x], b += sb[t][threadIdx.x];
    part[(i * chunks + k) * 2] = a, part[(i * chunks + k) * 2 + 1] = b;
}
// the slice's m x width elements, a row's channels consecutive (a thread a channel of a BT-channel tile, BR rows of
// threads stepping down the rows: no division per element): the NCHW apply's arithmetic
#define BN_ROWS                                                                                                     \
    int64_t j = (int64_t)blockIdx.y * BT + threadIdx.x, ch = c0 + j;                                              \
    if (j >= width) return;                                                                                       \
    for (int64_t r = (int64_t)blockIdx.x * BR + threadIdx.y, e = r * c + ch; r < m;                               \
         r += (int64_t)gridDim.x * BR, e = r * c + ch)
__global__ void k_bn_apply_nhwc(int64_t m, int64_t c, int64_t c0, int64_t width, const double *coef, const void *x, int xk,
                                void *y, int yk, int rk, int relu) {
    BN_ROWS {
        const double *k = coef + j * 3;
        float v = (get_kind(x, xk, e) - (float)k[0]) * (float)k[1] + (float)k[2];
        put_kind(y, yk, e, round_kind(relu && !(v > 0.f) ? 0.f : v, rk));
    }
}
__global__ void k_bn_bwd_apply_nhwc(int64_t m, int64_t c, int64_t c0, int64_t width, const double *coef, const void *x, int xk,
                                    const void *dy, int dyk, const float *w, const float *mean, const float *invstd, void *dx,
                                    int dxk, int acc) {
    BN_ROWS {
        double mm = (double)m, is = invstd[ch], sdy = coef[j * 3], sdyx = coef[j * 3 + 1], k = w[ch] * is / mm;
        double xh = (get_kind(x, xk, e) - mean[ch]) * is;
        put_or_add(dx, dxk, e, (float)(k * (mm * get_kind(dy, dyk, e) - sdy - xh * sdyx)), acc);
    }
}
/* the apply passes' grid: the slice's channel tiles along y, rows along x (at most 4096 blocks of BR rows) */
static dim3 rows_grid(int64_t m, int64_t width) {
    int64_t rb = (m + BR - 1) / BR;
    return dim3((unsigned)(rb < 4096 ? rb : 4096), (unsigned)((width + BT - 1) / BT));
}
static void bn_fwd_nhwc(kcs st, int64_t m, int64_t c, const void *x, int xk, const float *w, const float *b, float *rmean,
                        float *rvar, float momentum, float eps, int training, void *y, int yk, int rk, float *smean,
                        float *sinvstd, int64_t *tracked, int relu) {
    bn_split sp = bn_split_nhwc(c, m);
    double *part = kiln_cuda_parts_dev();
    for (int64_t c0 = 0; c0 < c; c0 += sp.width) {
        int64_t width = c - c0 < sp.width ? c - c0 : sp.width;
        double *coef = part + 2 * sp.chunks * width;
        dim3 grid((unsigned)sp.chunks, (unsigned)((width + BT - 1) / BT)), block(BT, BR);
        if (training)
            KLAUNCH(k_bn_part_nhwc, grid, block, 0, st)(m, c, c0, width, sp.chunks, sp.chunk, x, xk, nullptr, 0, nullptr,
                                                        nullptr, part);
        KLAUNCH(k_bn_stats, GO(width))(m, 1, c0, width, sp.chunks, part, coef, w, b, rmean, rvar, momentum, eps, training,
                                       smean, sinvstd, tracked);
        KLAUNCH(k_bn_apply_nhwc, rows_grid(m, width), block, 0, st)(m, c, c0, width, coef, x, xk, y, yk, rk, relu);
    }
}
static void bn_bwd_nhwc(kcs st, int64_t m, int64_t c, const void *x, int xk, const void *dy, int dyk, const float *w,
                        const float *mean, const float *invstd, void *dx, int dxk, float *dw, float *db, int acc_dx,
                        int acc_dw, int acc_db) {
    bn_split sp = bn_split_nhwc(c, m);
    double *part = kiln_cuda_parts_dev();
    for (int64_t c0 = 0; c0 < c; c0 += sp.width) {
        int64_t width = c - c0 < sp.width ? c - c0 : sp.width;
        double *coef = part + 2 * sp.chunks * width;
        dim3 grid((unsigned)sp.chunks, (unsigned)((width + BT - 1) / BT)), block(BT, BR);
        KLAUNCH(k_bn_part_nhwc, grid, block, 0, st)(m, c, c0, width, sp.chunks, sp.chunk, x, xk, dy, dyk, mean, invstd, part);
        KLAUNCH(k_bn_bwd_stats, GO(width))(c0, width, sp.chunks, part, coef, dw, db, acc_dw, acc_db);
        if (dx)
            KLAUNCH(k_bn_bwd_apply_nhwc, rows_grid(m, width), block, 0, st)(m, c, c0, width, coef, x, xk, dy, dyk, w, mean,
                                                                            invstd, dx, dxk, acc_dx);
    }
}

extern "C" {
void kiln_cuda_sum(kcs st, int64_t n, const float *x, float *y) {
    int64_t np = parts_for(n);
    KLAUNCH(k_part_sums, (unsigned)np, RT, 0, st)(n, (n + np - 1) / np, 0, x, kiln_cuda_parts_dev());
    KLAUNCH(k_sum, 1, RT, 0, st)(np, kiln_cuda_parts_dev(), y);
}
void kiln_cuda_sumsq(kcs st, int64_t n, const float *x, double *acc, int add) {
    int64_t np = parts_for(n);
    KLAUNCH(k_part_sums, (unsigned)np, RT, 0, st)(n, (n + np - 1) / np, 1, x, kiln_cuda_parts_dev());
    KLAUNCH(k_sumsq, 1, RT, 0, st)(np, kiln_cuda_parts_dev(), acc, add);
}
void kiln_cuda_col_sums(kcs st, int64_t rows, int64_t cols, const void *x, int xk, int rk, float *y, int acc) {
    col_split sp = col_split_of(rows, 1);
    for (int64_t c0 = 0; c0 < cols; c0 += sp.width) {
        int64_t n = cols - c0 < sp.width ? cols - c0 : sp.width;
        dim3 grid((unsigned)((n + CT - 1) / CT), (unsigned)sp.chunks), block(CT, CR);
        KLAUNCH(k_col_part, grid, block, 0, st)(rows, cols, c0, n, sp.chunk, x, xk, rk, kiln_cuda_parts_dev());
        KLAUNCH(k_col_total, GO(n))(n, sp.chunks, kiln_cuda_parts_dev(), y + c0, acc);
    }
}
void kiln_cuda_to_double(kcs st, const float *x, double *y) { KLAUNCH(k_to_double, 1, 1, 0, st)(x, y); }
void kiln_cuda_log_softmax(kcs st, int64_t rows, int64_t cols, const float *x, float *y) {
    KLAUNCH(k_log_softmax, (unsigned)rows, RT, 0, st)(cols, x, y);
}
void kiln_cuda_log_softmax_bwd(kcs st, int64_t rows, int64_t cols, const float *y, const float *dy, float *dx, int acc) {
    KLAUNCH(k_log_softmax_bwd, (unsigned)rows, RT, 0, st)(cols, y, dy, dx, acc);
}
void kiln_cuda_nll(kcs st, int64_t rows, int64_t cols, const float *x, const int32_t *t, kiln_cuda_flags *f, float *loss) {
    KLAUNCH(k_nll, 1, RT, 0, st)(rows, cols, x, t, f, loss);
}
void kiln_cuda_nll_bwd(kcs st, int64_t rows, int64_t cols, const int32_t *t, const float *dloss, float *dx, int acc) {
    int64_t n = rows * cols, b = (n + RT - 1) / RT;
    KLAUNCH(k_nll_bwd, (unsigned)(b > 4096 ? 4096 : b), RT, 0, st)(n, rows, cols, t, dloss, dx, acc);
}
// terms: rows doubles of scratch (the plan's workspace)
void kiln_cuda_cross_entropy_rows(kcs st, int64_t rows, int64_t cols, const void *x, int xk, const int32_t *t, int ignore,
                                  kiln_cuda_flags *f, double *terms, float *loss) {
    KLAUNCH(k_ce_rows, (unsigned)rows, RT, 0, st)(cols, x, xk, t, ignore, f, terms);
    KLAUNCH(k_mean, 1, RT, 0, st)(rows, terms, t, ignore, loss);
}
void kiln_cuda_cross_entropy_bwd(kcs st, int64_t rows, int64_t cols, const void *x, int xk, const int32_t *t, int ignore,
                                 const float *dloss, double *count, void *dx, int dxk, int acc) {
    KLAUNCH(k_count, 1, RT, 0, st)(rows, t, ignore, count);
    KLAUNCH(k_ce_bwd, (unsigned)rows, RT, 0, st)(cols, x, xk, t, ignore, dloss, count, dx, dxk, acc);
}
void kiln_cuda_batch_norm(kcs st, int64_t n, int64_t c, int64_t hw, int nhwc, const void *x, int xk, const float *w,
                          const float *b, float *rmean, float *rvar, float momentum, float eps, int training, void *y,
                          int yk, int rk, float *smean, float *sinvstd, int64_t *tracked, int relu) {
    if (nhwc) {
        bn_fwd_nhwc(st, n * hw, c, x, xk, w, b, rmean, rvar, momentum, eps, training, y, yk, rk, smean, sinvstd, tracked,
                    relu);
        return;
    }
    bn_split sp = bn_split_of(c, n * hw);
    double *part = kiln_cuda_parts_dev();
    const float *none = nullptr;
    const void *no_dy = nullptr;
    for (int64_t c0 = 0; c0 < c; c0 += sp.width) {
        int64_t width = c - c0 < sp.width ? c - c0 : sp.width;
        double *coef = part + 2 * sp.chunks * width;
        unsigned blocks = (unsigned)(width * sp.chunks);
        if (training) KLAUNCH(k_bn_part, blocks, RT, 0, st)(n, c, hw, c0, sp.chunks, sp.chunk, x, xk, no_dy, 0, none, none, part);
        KLAUNCH(k_bn_stats, GO(width))(n, hw, c0, width, sp.chunks, part, coef, w, b, rmean, rvar, momentum, eps, training,
                                       smean, sinvstd, tracked);
        KLAUNCH(k_bn_apply, blocks, RT, 0, st)(n, c, hw, c0, sp.chunks, sp.chunk, coef, x, xk, y, yk, rk, relu);
    }
}
void kiln_cuda_batch_norm_bwd(kcs st, int64_t n, int64_t c, int64_t hw, int nhwc, const void *x, int xk, const void *dy, int dyk,
                              const float *w, const float *mean, const float *invstd, void *dx, int dxk, float *dw, float *db,
                              int acc_dx, int acc_dw, int acc_db) {
    if (nhwc) {
        bn_bwd_nhwc(st, n * hw, c, x, xk, dy, dyk, w, mean, invstd, dx, dxk, dw, db, acc_dx, acc_dw, acc_db);
        return;
    }
    bn_split sp = bn_split_of(c, n * hw);
    double *part = kiln_cuda_parts_dev();
    for (int64_t c0 = 0; c0 < c; c0 += sp.width) {
        int64_t width = c - c0 < sp.width ? c - c0 : sp.width;
        double *coef = part + 2 * sp.chunks * width;
        unsigned blocks = (unsigned)(width * sp.chunks);
        KLAUNCH(k_bn_part, blocks, RT, 0, st)(n, c, hw, c0, sp.chunks, sp.chunk, x, xk, dy, dyk, mean, invstd, part);
        KLAUNCH(k_bn_bwd_stats, GO(width))(c0, width, sp.chunks, part, coef, dw, db, acc_dw, acc_db);
        if (dx)
            KLAUNCH(k_bn_bwd_apply, blocks, RT, 0, st)(n, c, hw, c0, sp.chunks, sp.chunk, coef, x, xk, dy, dyk, w, mean, invstd,
                                                       dx, dxk, acc_dx);
    }
}
}
