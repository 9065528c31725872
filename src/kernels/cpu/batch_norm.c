/* Batch normalisation, float, over x[n, c, hw] in plain NCHW (blocked = 0) or
 * oneDNN's nChw16c or nChw8c (blocked = 16 or 8: [n, c/B, hw, B]), so a conv
 * chain kept blocked by the layout pass needs no reorder around its norms.
 *
 * A group is what one set of 16 lanes covers: a block of 16 channels, a block
 * of 8 (two pixels side by side, lanes l and l + 8 one channel), or one
 * channel (plain, whose contiguous pixels are spread over 16 lanes); lanes of
 * one channel hold partial sums, folded in lane order at the end. The data of a group in one image is one
 * contiguous run. Statistics are summed in double in one pass over x: the sums
 * of x - k and (x - k)^2 with k the running mean (the variance from them loses
 * to cancellation only as (mean - k)^2 / var grows; doubles leave 29 bits of
 * room beyond float's), in an order fixed by the shape alone: with fewer than
 * 8 groups (ResNet-20's 16 channels are one) the images are cut into up to 8
 * chunks summed apart and added in chunk order, so both cores work and the
 * bits are the same for any thread count.
 *
 * Sync batch norm (a collective given) takes the two-phase route: every
 * group's sums first, packed per channel and summed over the processes (with
 * the count: one reduction, the running mean being every process's shift);
 * backward sums dy and dy * xhat the same way. Without a
 * collective to call, it is the same arithmetic as the plain kernel, bit for
 * bit. Its buffers (C may be large) live in the workspace. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

#define L 16
#define MAX_CHUNKS 8

typedef struct {
    int64_t n, c, hw, ngroups, nchunks;
    int blocked;
} bn_shape;

static bn_shape shape_of(int64_t n, int64_t c, int64_t hw, int blocked) {
    bn_shape S = {n, c, hw, blocked ? c / blocked : c, 1, blocked};
    if (S.ngroups < MAX_CHUNKS) S.nchunks = n < MAX_CHUNKS ? n : MAX_CHUNKS;
    return S;
}

/* group g's run in image i, and its length */
static int64_t run_at(const bn_shape *S, int64_t g, int64_t i, int64_t *len) {
    *len = S->blocked ? S->hw * S->blocked : S->hw;
    return i * S->c * S->hw + g * *len;
}

/* the channels a group holds (lanes 0 .. nch-1 hold them, lane l the same as l % nch) */
static int64_t nch_of(const bn_shape *S) { return S->blocked ? S->blocked : 1; }

/* the channel of lane l of group g */
static int64_t chan_of(const bn_shape *S, int64_t g, int l) { return S->blocked ? g * S->blocked + l % S->blocked : g; }

/* lanes from nch on copy the lanes of their channel */
static void spread(const bn_shape *S, float *a) {
    for (int64_t l = nch_of(S); l < L; l++) a[l] = a[l % nch_of(S)];
}

/* images [i0, i1) of chunk k */
static void chunk_images(const bn_shape *S, int64_t k, int64_t *i0, int64_t *i1) {
    *i0 = S->n * k / S->nchunks;
    *i1 = S->n * (k + 1) / S->nchunks;
}

/* the loops below are built for AVX-512 machines and for any x86-64, chosen when
 * the program starts (GCC's target_clones), as the resampler's are */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HOT
#endif

/* s1[l] += sum of (p[j] - k[l]), s2[l] += sum of (p[j] - k[l])^2 over j = l mod 16:
 * both statistics in one read; two interleaved sets of accumulators keep two add
 * chains in flight */
HOT static void add_run(const float *p, int64_t len, const double *k, double *s1, double *s2) {
    double a[L] = {0}, b[L] = {0}, a2[L] = {0}, b2[L] = {0};
    int64_t j = 0;
    for (; j + 2 * L <= len; j += 2 * L)
        for (int l = 0; l < L; l++) {
            double d = p[j + l] - k[l], e = p[j + L + l] - k[l];
            a[l] += d;
            a2[l] += d * d;
            b[l] += e;
            b2[l] += e * e;
        }
    for (int l = 0; j + l < len && l < 2 * L; l++) { /* the rest, lane by lane */
        int q = l % L;
        double d = p[j + l] - k[q];
        a[q] += d;
        a2[q] += d * d;
    }
    for (int l = 0; l < L; l++) s1[l] += a[l] + b[l], s2[l] += a2[l] + b2[l];
}

/* the shifted sums of group g over images [i0, i1) */
static void group_sums(const bn_shape *S, const float *x, int64_t g, int64_t i0, int64_t i1, const double *k, double *s1,
                       double *s2) {
    for (int l = 0; l < L; l++) s1[l] = s2[l] = 0;
    for (int64_t i = i0; i < i1; i++) {
        int64_t len, o = run_at(S, g, i, &len);
        add_run(x + o, len, k, s1, s2);
    }
}

/* each channel's partial sums folded in lane order, the total in every lane of the channel */
static void fold(const bn_shape *S, double *s) {
    int64_t nch = nch_of(S);
    if (nch == L) return;
    double t[L] = {0};
    for (int l = 0; l < L; l++) t[l % nch] += s[l];
    for (int l = 0; l < L; l++) s[l] = t[l % nch];
}

/* every (group, chunk) of the shape, in parallel; body sees g, k (the chunk), i0, i1 */
#define FOR_WORK(S, ...)                                                                                              \
    do {                                                                                                               \
        int64_t nw_ = (S)->ngroups * (S)->nchunks;                                                                     \
        _Pragma("omp parallel for schedule(static)") for (int64_t w_ = 0; w_ < nw_; w_++) {                            \
            int64_t g = w_ / (S)->nchunks, k = w_ % (S)->nchunks, i0, i1;                                              \
            chunk_images((S), k, &i0, &i1);                                                                            \
            (void)k;                                                                                                   \
            __VA_ARGS__                                                                                                \
        }                                                                                                              \
    } while (0)

/* a group's 16 lanes of per-channel values */
static void lanes_of(const bn_shape *S, const float *v, int64_t g, float *out) {
    for (int l = 0; l < L; l++) out[l] = v[chan_of(S, g, l)];
}

/* y = x * scale + shift per lane over a run, + r (a residual, when given), then
 * relu: max(0, y) when asked; each step rounded as the unfused ops round. The
 * lanes are copied to locals, which y cannot alias, so the lane loop vectorizes */
static inline __attribute__((always_inline)) void affine_body(const float *restrict x, float *restrict y, int64_t len,
                                                              const float *sc, const float *sh, int relu,
                                                              const float *restrict r, int add) {
    int64_t j = 0;
    for (; j + L <= len; j += L)
        for (int l = 0; l < L; l++) {
            float v = x[j + l] * sc[l] + sh[l];
            if (add) v = v + r[j + l];
            y[j + l] = relu && !(v > 0.0f) ? 0.0f : v;
        }
    for (int l = 0; j + l < len; l++) {
        float v = x[j + l] * sc[l] + sh[l];
        if (add) v = v + r[j + l];
        y[j + l] = relu && !(v > 0.0f) ? 0.0f : v;
    }
}

HOT static void affine_run(const float *x, float *y, int64_t len, const float *scale, const float *shift, int relu,
                           const float *r) {
    float sc[L], sh[L];
    memcpy(sc, scale, sizeof sc);
    memcpy(sh, shift, sizeof sh);
    if (r) affine_body(x, y, len, sc, sh, relu, r, 1);
    else affine_body(x, y, len, sc, sh, relu, r, 0);
}

/* a channel's scale and shift, y = x * sc + sh, from the mean and invstd as saved
 * (float): backward's relu mask recomputes y's sign from x with these same bits */
static void scale_shift(float mean, float invstd, float w, float b, float *sc, float *sh) {
    *sc = (float)((double)invstd * w);
    *sh = (float)(b - (double)mean * invstd * w);
}

typedef struct {
    const float *w, *b;
    float *rmean, *rvar, *save_mean, *save_invstd;
    float momentum, eps;
    int training;
    double count;                     /* values per channel the statistics cover (every process's) */
} bn_fwd_args;

/* group g's scale and shift lanes from its mean and variance lanes (sums / m; evaluation: the
 * running statistics), the running statistics moved and mean and invstd saved for backward */
static void fwd_coef(const bn_shape *S, const bn_fwd_args *A, int64_t g, const double *mean, const double *var, float *sc,
                     float *sh) {
    int64_t nch = nch_of(S);
    double m = A->count;
    for (int l = 0; l < nch; l++) {
        int64_t ch = chan_of(S, g, l);
        double mu = A->training ? mean[l] : A->rmean[ch], v = A->training ? var[l] : A->rvar[ch];
        if (A->training) {
            A->rmean[ch] = (float)((1.0 - A->momentum) * A->rmean[ch] + A->momentum * mu);
            A->rvar[ch] = (float)((1.0 - A->momentum) * A->rvar[ch] + A->momentum * v * m / (m - 1));
        }
        float mean_f = (float)mu, invstd_f = (float)(1.0 / sqrt(v + A->eps));
        if (A->save_mean) A->save_mean[ch] = mean_f;
        if (A->save_invstd) A->save_invstd[ch] = invstd_f;
        scale_shift(mean_f, invstd_f, A->w[ch], A->b[ch], &sc[l], &sh[l]);
    }
    spread(S, sc);
    spread(S, sh);
}

/* the shift of group g's sums: the running mean, which every process of a sync norm
 * holds alike and which lies near the batch's mean once training is under way, so
 * the one-pass variance loses next to nothing to cancellation */
static void shift_lanes(const bn_shape *S, const float *rmean, int64_t g, double *k) {
    for (int l = 0; l < L; l++) k[l] = rmean[chan_of(S, g, l)];
}

/* the chunks' shifted sums of each group into s1, s2, added in chunk order and folded */
static void chunk_stats(const bn_shape *S, const float *x, const float *rmean, double *part, double *s1, double *s2) {
    FOR_WORK(S, {
        double k_[L];
        shift_lanes(S, rmean, g, k_);
        group_sums(S, x, g, i0, i1, k_, part + w_ * 2 * L, part + w_ * 2 * L + L);
    });
    for (int64_t g = 0; g < S->ngroups; g++) {
        double *a = s1 + g * L, *b = s2 + g * L;
        for (int l = 0; l < L; l++) a[l] = b[l] = 0;
        for (int64_t k = 0; k < S->nchunks; k++)
            for (int l = 0; l < L; l++) {
                a[l] += part[(g * S->nchunks + k) * 2 * L + l];
                b[l] += part[(g * S->nchunks + k) * 2 * L + L + l];
            }
        fold(S, a);
        fold(S, b);
    }
}

/* a group's mean and biased variance lanes from its shifted sums over m values */
static void moments(const bn_shape *S, const float *rmean, int64_t g, double m, double *s1, double *s2) {
    double k[L];
    shift_lanes(S, rmean, g, k);
    for (int l = 0; l < L; l++) {
        double d = s1[l] / m, v = s2[l] / m - d * d;
        s1[l] = k[l] + d;
        s2[l] = v > 0 ? v : 0;
    }
}

/* the two-phase route's buffers: per-(group, chunk) partial sums, two sets of group
 * lanes, per-channel values for the collective, three sets of float lanes */
typedef struct {
    double *part, *s1, *s2, *chan;
    float *f1, *f2, *f3;
} bn_scratch;

static size_t scratch_doubles(const bn_shape *S) {
    int64_t lanes = S->ngroups * L;
    return (size_t)(S->ngroups * S->nchunks * 2 * L + 2 * lanes + 2 * S->c + 1 + (3 * lanes + 1) / 2);
}

size_t kiln_cpu_batch_norm_scratch(int64_t n, int64_t c, int blocked) {
    bn_shape S = shape_of(n, c, 1, blocked);
    return scratch_doubles(&S) * sizeof(double);
}

static bn_scratch carve(const bn_shape *S, double *d) {
    int64_t lanes = S->ngroups * L;
    bn_scratch W = {.part = d};
    W.s1 = W.part + S->ngroups * S->nchunks * 2 * L;
    W.s2 = W.s1 + lanes;
    W.chan = W.s2 + lanes;
    W.f1 = (float *)(W.chan + 2 * S->c + 1);
    W.f2 = W.f1 + lanes;
    W.f3 = W.f2 + lanes;
    return W;
}

/* fewer than 8 groups (the plain route's chunked case): at most 7 * 8 * 32 partial
 * sums, 112 lanes and 112 channels, well inside this */
#define SMALL_SCRATCH 2560

/* group lanes -> per-channel values at chan (plain: lane 0, all lanes hold the channel) */
static void pack(const bn_shape *S, const double *lanes, double *chan) {
    for (int64_t g = 0; g < S->ngroups; g++)
        for (int l = 0; l < nch_of(S); l++) chan[chan_of(S, g, l)] = lanes[g * L + l];
}

static void unpack(const bn_shape *S, const double *chan, double *lanes) {
    for (int64_t g = 0; g < S->ngroups; g++)
        for (int l = 0; l < L; l++) lanes[g * L + l] = chan[chan_of(S, g, l)];
}

/* training's statistics of every group into W->s1 (mean) and W->s2 (biased variance),
 * over every process's batch when co is given (the shifted sums and the count in one
 * reduction); the count they cover into A->count */
static int fwd_stats(const bn_shape *S, const float *x, const kiln_collective *co, bn_scratch *W, bn_fwd_args *A) {
    double m = (double)(S->n * S->hw);
    chunk_stats(S, x, A->rmean, W->part, W->s1, W->s2);
    if (co) {
        pack(S, W->s1, W->chan);
        pack(S, W->s2, W->chan + S->c);
        W->chan[2 * S->c] = m; /* the count rides with the sums */
        if (kiln_collective_sum(co, W->chan, 2 * S->c + 1)) return -2;
        unpack(S, W->chan, W->s1);
        unpack(S, W->chan + S->c, W->s2);
        m = W->chan[2 * S->c];
    }
    for (int64_t g = 0; g < S->ngroups; g++) moments(S, A->rmean, g, m, W->s1 + g * L, W->s2 + g * L);
    A->count = m;
    return 0;
}

int kiln_cpu_batch_norm_fwd(int64_t n, int64_t c, int64_t hw, int blocked, const float *x, const float *w, const float *b,
                            float *rmean, float *rvar, float momentum, float eps, int training, int relu, float *y,
                            float *save_mean, float *save_invstd, const kiln_collective *co, void *scratch) {
    return kiln_cpu_batch_norm_add_fwd(n, c, hw, blocked, x, w, b, rmean, rvar, momentum, eps, training, NULL, relu, y,
                                       save_mean, save_invstd, co, scratch);
}

int kiln_cpu_batch_norm_add_fwd(int64_t n, int64_t c, int64_t hw, int blocked, const float *x, const float *w,
                                const float *b, float *rmean, float *rvar, float momentum, float eps, int training,
                                const float *res, int relu, float *y, float *save_mean, float *save_invstd,
                                const kiln_collective *co, void *scratch) {
    bn_shape S = shape_of(n, c, hw, blocked);
    if (training && n * hw < 2) return -1;
    double m = (double)(n * hw);
    bn_fwd_args A = {w, b, rmean, rvar, save_mean, save_invstd, momentum, eps, training, m};
    if (S.nchunks == 1 && !co) { /* enough groups: each group whole on one thread */
#pragma omp parallel for schedule(static)
        for (int64_t g = 0; g < S.ngroups; g++) {
            double mean[L], var[L];
            float sc[L], sh[L];
            if (training) {
                double k[L];
                shift_lanes(&S, rmean, g, k);
                group_sums(&S, x, g, 0, n, k, mean, var);
                fold(&S, mean);
                fold(&S, var);
                moments(&S, rmean, g, m, mean, var);
            }
            fwd_coef(&S, &A, g, mean, var, sc, sh);
            for (int64_t i = 0; i < n; i++) {
                int64_t len, o = run_at(&S, g, i, &len);
                affine_run(x + o, y + o, len, sc, sh, relu, res ? res + o : NULL);
            }
        }
        return 0;
    }
    double small[SMALL_SCRATCH];
    bn_scratch W = carve(&S, co ? (double *)scratch : small);
    if (training && fwd_stats(&S, x, co, &W, &A)) return -2;
    for (int64_t g = 0; g < S.ngroups; g++) fwd_coef(&S, &A, g, W.s1 + g * L, W.s2 + g * L, W.f1 + g * L, W.f2 + g * L);
    FOR_WORK(&S, {
        for (int64_t i = i0; i < i1; i++) {
            int64_t len, o = run_at(&S, g, i, &len);
            affine_run(x + o, y + o, len, W.f1 + g * L, W.f2 + g * L, relu, res ? res + o : NULL);
        }
    });
    return 0;
}

/* d where v > 0, else +0 (relu's backward, bits as its kernel's), without a branch:
 * a select here kept GCC -O2 from vectorizing the loops around it */
static inline float keep_if_pos(float d, float v) {
    uint32_t bits;
    memcpy(&bits, &d, 4);
    bits &= -(uint32_t)(v > 0.0f);
    memcpy(&d, &bits, 4);
    return d;
}

/* dy where the forward's relu let y through, else 0: y's sign recomputed from x
 * exactly as the forward computed y (relu 0: dy) */
#define MASKED(relu, d, xv, sc, sh) ((relu) ? keep_if_pos((d), (xv) * (sc) + (sh)) : (d))

/* backward's two sums per lane over images [i0, i1): dy and dy * xhat (two sets of
 * accumulators, as add_run); relu: dy masked by relu's backward (sc, sh: the forward's) */
static inline __attribute__((always_inline)) void bwd_sums_body(const bn_shape *S, const float *x, const float *dy,
                                                                int64_t g, int64_t i0, int64_t i1, const float *mu,
                                                                const float *is, const float *sc, const float *sh,
                                                                int relu, double *sdy, double *sdyx) {
    double a[L] = {0}, b[L] = {0}, a2[L] = {0}, b2[L] = {0};
    for (int64_t i = i0; i < i1; i++) {
        int64_t len, o = run_at(S, g, i, &len), j = 0;
        const float *px = x + o, *pd = dy + o;
        for (; j + 2 * L <= len; j += 2 * L)
            for (int l = 0; l < L; l++) {
                double d = MASKED(relu, pd[j + l], px[j + l], sc[l], sh[l]);
                double e = MASKED(relu, pd[j + L + l], px[j + L + l], sc[l], sh[l]);
                a[l] += d;
                b[l] += d * ((px[j + l] - mu[l]) * is[l]);
                a2[l] += e;
                b2[l] += e * ((px[j + L + l] - mu[l]) * is[l]);
            }
        for (int l = 0; j + l < len && l < 2 * L; l++) { /* the rest, lane by lane */
            int k = l % L;
            double d = MASKED(relu, pd[j + l], px[j + l], sc[k], sh[k]);
            a[k] += d;
            b[k] += d * ((px[j + l] - mu[k]) * is[k]);
        }
    }
    for (int l = 0; l < L; l++) sdy[l] = a[l] + a2[l], sdyx[l] = b[l] + b2[l];
}

HOT static void bwd_sums(const bn_shape *S, const float *x, const float *dy, int64_t g, int64_t i0, int64_t i1,
                         const float *mu, const float *is, const float *sc, const float *sh, double *sdy, double *sdyx) {
    if (sc) bwd_sums_body(S, x, dy, g, i0, i1, mu, is, sc, sh, 1, sdy, sdyx);
    else bwd_sums_body(S, x, dy, g, i0, i1, mu, is, sc, sh, 0, sdy, sdyx);
}

typedef struct {
    const float *x, *dy, *w, *mean, *invstd;
    const float *b; /* the bias: relu's backward mask recomputed from x (NULL: none) */
    float *dx, *dw, *db;
    int acc_dx, acc_dw, acc_db;
} bn_bwd_args;

/* group g's parameter gradients from its (folded) sums: this process's alone */
static void bwd_params(const bn_shape *S, const bn_bwd_args *A, int64_t g, const double *sdy, const double *sdyx) {
    for (int l = 0; l < nch_of(S); l++) {
        int64_t ch = chan_of(S, g, l);
        if (A->dw) A->dw[ch] = A->acc_dw ? A->dw[ch] + (float)sdyx[l] : (float)sdyx[l];
        if (A->db) A->db[ch] = A->acc_db ? A->db[ch] + (float)sdy[l] : (float)sdy[l];
    }
}

/* dx's coefficients of group g from the sums over the m values they cover:
 * dx = k (m dy - sum dy - xhat sum dy xhat), k = w invstd / m, as a dy + bx x + cc */
static void bwd_coef(const bn_shape *S, const bn_bwd_args *A, int64_t g, const double *sdy, const double *sdyx, double m,
                     float *a, float *bx, float *cc) {
    for (int l = 0; l < nch_of(S); l++) {
        int64_t ch = chan_of(S, g, l);
        double k = A->w[ch] * (double)A->invstd[ch] / m, is = A->invstd[ch];
        a[l] = (float)(k * m);
        bx[l] = (float)(-k * sdyx[l] * is);
        cc[l] = (float)(k * (sdyx[l] * is * A->mean[ch] - sdy[l]));
    }
    spread(S, a);
    spread(S, bx);
    spread(S, cc);
}

/* dx over one run, a dy + bx x + cc per lane (dy masked when relu), written or added */
static inline __attribute__((always_inline)) void dx_run(const float *restrict pd, const float *restrict px,
                                                         float *restrict po, int64_t len, const float *a, const float *bx,
                                                         const float *cc, const float *sc, const float *sh, int relu,
                                                         int acc) {
    int64_t j = 0;
    if (acc)
        for (; j + L <= len; j += L)
            for (int l = 0; l < L; l++)
                po[j + l] += a[l] * MASKED(relu, pd[j + l], px[j + l], sc[l], sh[l]) + bx[l] * px[j + l] + cc[l];
    else
        for (; j + L <= len; j += L)
            for (int l = 0; l < L; l++)
                po[j + l] = a[l] * MASKED(relu, pd[j + l], px[j + l], sc[l], sh[l]) + bx[l] * px[j + l] + cc[l];
    for (int l = 0; j + l < len; l++) {
        float v = a[l] * MASKED(relu, pd[j + l], px[j + l], sc[l], sh[l]) + bx[l] * px[j + l] + cc[l];
        po[j + l] = acc ? po[j + l] + v : v;
    }
}

static inline __attribute__((always_inline)) void bwd_dx_body(const bn_shape *S, const bn_bwd_args *A, int64_t g,
                                                              int64_t i0, int64_t i1, const float *a_, const float *bx_,
                                                              const float *cc_, const float *sc_, const float *sh_,
                                                              int relu) {
    float a[L], bx[L], cc[L], sc[L] = {0}, sh[L] = {0}; /* locals dx cannot alias: the lane loops vectorize */
    memcpy(a, a_, sizeof a);
    memcpy(bx, bx_, sizeof bx);
    memcpy(cc, cc_, sizeof cc);
    if (relu) memcpy(sc, sc_, sizeof sc), memcpy(sh, sh_, sizeof sh);
    for (int64_t i = i0; i < i1; i++) {
        int64_t len, o = run_at(S, g, i, &len);
        dx_run(A->dy + o, A->x + o, A->dx + o, len, a, bx, cc, sc, sh, relu, A->acc_dx);
    }
}

HOT static void bwd_dx(const bn_shape *S, const bn_bwd_args *A, int64_t g, int64_t i0, int64_t i1, const float *a,
                       const float *bx, const float *cc, const float *sc, const float *sh) {
    if (sc) bwd_dx_body(S, A, g, i0, i1, a, bx, cc, sc, sh, 1);
    else bwd_dx_body(S, A, g, i0, i1, a, bx, cc, sc, sh, 0);
}

/* group g's forward scale and shift lanes (relu's mask), or NULL when there is no mask */
static const float *mask_lanes(const bn_shape *S, const bn_bwd_args *A, int64_t g, float *sc, float *sh) {
    if (!A->b) return NULL;
    for (int l = 0; l < nch_of(S); l++) {
        int64_t ch = chan_of(S, g, l);
        scale_shift(A->mean[ch], A->invstd[ch], A->w[ch], A->b[ch], &sc[l], &sh[l]);
    }
    spread(S, sc);
    spread(S, sh);
    return sc;
}

/* the chunks' sums of every group into W->s1 (dy) and W->s2 (dy * xhat), folded; the
 * parameter gradients from them; then (co) the sums over every process, and their count */
static int bwd_stats(const bn_shape *S, const bn_bwd_args *A, const kiln_collective *co, bn_scratch *W, double *m) {
    FOR_WORK(S, {
        float mu[L], is[L];
        lanes_of(S, A->mean, g, mu);
        lanes_of(S, A->invstd, g, is);
        float sc[L], sh[L];
        const float *msk = mask_lanes(S, A, g, sc, sh);
        bwd_sums(S, A->x, A->dy, g, i0, i1, mu, is, msk, sh, W->part + w_ * 2 * L, W->part + w_ * 2 * L + L);
    });
    for (int64_t g = 0; g < S->ngroups; g++) {
        double *sdy = W->s1 + g * L, *sdyx = W->s2 + g * L;
        for (int l = 0; l < L; l++) sdy[l] = sdyx[l] = 0;
        for (int64_t k = 0; k < S->nchunks; k++)
            for (int l = 0; l < L; l++) {
                sdy[l] += W->part[(g * S->nchunks + k) * 2 * L + l];
                sdyx[l] += W->part[(g * S->nchunks + k) * 2 * L + L + l];
            }
        fold(S, sdy);
        fold(S, sdyx);
        bwd_params(S, A, g, sdy, sdyx);
    }
    *m = (double)(S->n * S->hw);
    if (!co) return 0;
    pack(S, W->s1, W->chan);
    pack(S, W->s2, W->chan + S->c);
    W->chan[2 * S->c] = *m;
    if (kiln_collective_sum(co, W->chan, 2 * S->c + 1)) return -2;
    unpack(S, W->chan, W->s1);
    unpack(S, W->chan + S->c, W->s2);
    *m = W->chan[2 * S->c];
    return 0;
}

static int bwd_run(const bn_shape *S, const bn_bwd_args *A, const kiln_collective *co, void *scratch) {
    if (S->nchunks == 1 && !co) {
#pragma omp parallel for schedule(static)
        for (int64_t g = 0; g < S->ngroups; g++) {
            float mu[L], is[L], a[L], bx[L], cc[L], sc[L], sh[L];
            double sdy[L], sdyx[L];
            lanes_of(S, A->mean, g, mu);
            lanes_of(S, A->invstd, g, is);
            const float *msk = mask_lanes(S, A, g, sc, sh);
            bwd_sums(S, A->x, A->dy, g, 0, S->n, mu, is, msk, sh, sdy, sdyx);
            fold(S, sdy);
            fold(S, sdyx);
            bwd_params(S, A, g, sdy, sdyx);
            bwd_coef(S, A, g, sdy, sdyx, (double)(S->n * S->hw), a, bx, cc);
            if (A->dx) bwd_dx(S, A, g, 0, S->n, a, bx, cc, msk, sh);
        }
        return 0;
    }
    double small[SMALL_SCRATCH], m;
    bn_scratch W = carve(S, co ? (double *)scratch : small);
    if (bwd_stats(S, A, co, &W, &m)) return -2;
    for (int64_t g = 0; g < S->ngroups; g++)
        bwd_coef(S, A, g, W.s1 + g * L, W.s2 + g * L, m, W.f1 + g * L, W.f2 + g * L, W.f3 + g * L);
    if (A->dx) FOR_WORK(S, {
        float sc[L], sh[L];
        const float *msk = mask_lanes(S, A, g, sc, sh);
        bwd_dx(S, A, g, i0, i1, W.f1 + g * L, W.f2 + g * L, W.f3 + g * L, msk, sh);
    });
    return 0;
}

int kiln_cpu_batch_norm_bwd(int64_t n, int64_t c, int64_t hw, int blocked, const float *x, const float *dy,
                            const float *w, const float *mean, const float *invstd, float *dx, float *dw, float *db,
                            int acc_dx, int acc_dw, int acc_db, const kiln_collective *co, void *scratch) {
    return kiln_cpu_batch_norm_relu_bwd(n, c, hw, blocked, x, dy, w, NULL, mean, invstd, dx, dw, db, acc_dx, acc_dw,
                                        acc_db, co, scratch);
}

int kiln_cpu_batch_norm_relu_bwd(int64_t n, int64_t c, int64_t hw, int blocked, const float *x, const float *dy,
                                 const float *w, const float *b, const float *mean, const float *invstd, float *dx,
                                 float *dw, float *db, int acc_dx, int acc_dw, int acc_db, const kiln_collective *co,
                                 void *scratch) {
    bn_shape S = shape_of(n, c, hw, blocked);
    bn_bwd_args A = {x, dy, w, mean, invstd, b, dx, dw, db, acc_dx, acc_dw, acc_db};
    return bwd_run(&S, &A, co, scratch);
}
