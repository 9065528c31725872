/* Transforms, as torchvision applies them to PIL images: Resize(N) (shorter
 * side to N, the longer truncated as int(N * long / short)), CenterCrop(N)
 * (offsets rounded half to even, as Python's round), RandomResizedCrop (10
 * attempts, then the central fallback), RandomHorizontalFlip(0.5), ToTensor
 * and Normalize. The resampler is PIL's: bilinear weights over a support
 * widened by the scale when shrinking (antialiasing), a horizontal pass whose
 * rows are rounded to 8 bits, then a vertical pass; weights are computed once
 * per column and per row, not per pixel. Its last write computes ToTensor +
 * Normalize in float32, as torchvision does, straight into the sample's CHW slot. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/internal/rng.h"
#include "data/internal/transform.h"

kiln_data_config kiln_data_defaults(void) {
    kiln_data_config c;
    memset(&c, 0, sizeof c);
    c.scale[0] = 0.08f;
    c.scale[1] = 1.0f;
    for (int i = 0; i < 3; i++) c.std[i] = 1.0f;
    return c;
}

static int parse_floats(const char *s, float *v, int max, char sep_end) {
    int n = 0;
    while (n < max) {
        char *end;
        v[n] = strtof(s, &end);
        if (end == s || !isfinite(v[n])) return -1;
        n++;
        if (*end == ',') s = end + 1;
        else return *end == sep_end ? n : -1;
    }
    return -1;
}

kiln_status kiln_data_parse_rrc(const char *text, kiln_data_config *dc) {
    char *end;
    long n = strtol(text, &end, 10);
    float sc[2] = {0.08f, 1.0f};
    if (end == text || n < 1 || n > KILN_IMAGE_MAX_SIDE || (*end && (*end != ',' || parse_floats(end + 1, sc, 2, 0) != 2)))
        return kiln_fail(KILN_ERR_INVALID_ARG, "--random-resized-crop: '%s' is not N or N,scale_lo,scale_hi (e.g. 56 or 56,0.08,1)",
                         text);
    if (!(sc[0] > 0 && sc[0] <= sc[1] && sc[1] <= 1))
        return kiln_fail(KILN_ERR_INVALID_ARG, "--random-resized-crop %s: the scale range must satisfy 0 < lo <= hi <= 1", text);
    dc->random_resized_crop = (int)n;
    dc->scale[0] = sc[0];
    dc->scale[1] = sc[1];
    return KILN_OK;
}

kiln_status kiln_data_parse_normalize(const char *text, kiln_data_config *dc) {
    if (strcmp(text, "imagenet") == 0) { /* torchvision's reference values */
        const float m[3] = {0.485f, 0.456f, 0.406f}, s[3] = {0.229f, 0.224f, 0.225f};
        memcpy(dc->mean, m, sizeof m);
        memcpy(dc->std, s, sizeof s);
        dc->normalize = 3;
        return KILN_OK;
    }
    float m[3], s[3];
    int nm = parse_floats(text, m, 3, '/');
    const char *slash = strchr(text, '/');
    int ns = nm > 0 && slash ? parse_floats(slash + 1, s, 3, 0) : -1;
    if (nm < 1 || nm == 2 || ns != nm)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--normalize: '%s' is not m1,m2,m3/s1,s2,s3, m/s (one channel) or imagenet",
                         text);
    for (int i = 0; i < nm; i++)
        if (!(s[i] > 0)) return kiln_fail(KILN_ERR_INVALID_ARG, "--normalize %s: every std must be > 0", text);
    for (int i = 0; i < 3; i++) { /* one value serves every channel */
        dc->mean[i] = m[nm == 1 ? 0 : i];
        dc->std[i] = s[nm == 1 ? 0 : i];
    }
    dc->normalize = nm;
    return KILN_OK;
}

void kiln_tf_init(kiln_tf *t, const kiln_data_config *dc, int random) {
    memset(t, 0, sizeof *t);
    t->random = random && dc->random_resized_crop > 0;
    t->resize = dc->resize;
    t->rrc = dc->random_resized_crop;
    /* the test split of a RandomResizedCrop run is cropped to the same size */
    t->crop = dc->center_crop ? dc->center_crop : dc->random_resized_crop;
    if (!t->resize && !dc->center_crop && t->rrc) t->resize = t->rrc;
    t->scale[0] = dc->scale[0];
    t->scale[1] = dc->scale[1];
    t->ratio[0] = 3.0 / 4.0;
    t->ratio[1] = 4.0 / 3.0;
    t->hflip = random && dc->hflip;
    t->channels = dc->channels ? dc->channels : 3;
    for (int c = 0; c < 3; c++) {
        t->mean[c] = dc->normalize ? dc->mean[c] : 0.0f;
        t->std[c] = dc->normalize ? dc->std[c] : 1.0f;
        for (int p = 0; p < 256; p++) t->lut[c][p] = ((float)p / 255.0f - t->mean[c]) / t->std[c];
    }
}

void kiln_rrc_box(int w, int h, const double scale[2], const double ratio[2], kiln_tf_draw draw, void *ctx, int box[4]) {
    double area = (double)w * h;
    /* torchvision takes the logs (and exp) in float32 */
    float lr0 = logf((float)ratio[0]), lr1 = logf((float)ratio[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * draw(ctx, 0, scale[0], scale[1]);
        double aspect = (double)expf((float)draw(ctx, 1, lr0, lr1));
        int cw = (int)rint(sqrt(target * aspect)), ch = (int)rint(sqrt(target / aspect)); /* Python's round: half to even */
        if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
            box[0] = (int)draw(ctx, 2, 0, h - ch + 1);
            box[1] = (int)draw(ctx, 2, 0, w - cw + 1);
            box[2] = ch;
            box[3] = cw;
            return;
        }
    }
    double in_ratio = (double)w / h;
    int cw = w, ch = h;
    if (in_ratio < ratio[0]) ch = (int)rint(cw / ratio[0]);
    else if (in_ratio > ratio[1]) cw = (int)rint(ch * ratio[1]);
    box[0] = (h - ch) / 2;
    box[1] = (w - cw) / 2;
    box[2] = ch;
    box[3] = cw;
}

/* kiln's draws: Philox keyed by the sample's key, one counter per draw */
typedef struct {
    uint64_t key, i;
} philox_draws;

static double philox_draw(void *ctx, int what, double lo, double hi) {
    philox_draws *d = ctx;
    kiln_philox_out o = kiln_philox4x32(d->key, 0x7466 /* "tf" */, d->i++);
    double u = (double)((uint64_t)o.v[0] << 21 ^ o.v[1] >> 11) * 0x1p-53; /* [0, 1), 53 bits */
    if (what == 2) return lo + floor(u * (hi - lo));
    return lo + (hi - lo) * u;
}

static void axis_set(kiln_tf_axis *a, double x0, double s, int off, int out, double lo, double hi) {
    *a = (kiln_tf_axis){x0, s, lo, hi, off, out};
}

/* Resize then CenterCrop: the crop's pixels of the resized image */
static kiln_status plan_fixed(const kiln_tf *t, int w, int h, const char *name, kiln_tf_box *b) {
    int rw = w, rh = h;
    if (t->resize && w <= h) rw = t->resize, rh = (int)((double)t->resize * h / w);
    else if (t->resize) rh = t->resize, rw = (int)((double)t->resize * w / h);
    if (rw < 1 || rh < 1)
        return kiln_fail(KILN_ERR_FORMAT, "%s: %dx%d resized to %d on its shorter side leaves nothing", name, w, h, t->resize);
    int cw = t->crop ? t->crop : rw, ch = t->crop ? t->crop : rh;
    if (cw > rw || ch > rh)
        return kiln_fail(KILN_ERR_FORMAT, "%s: the %dx%d crop is larger than the image (%dx%d%s); raise --resize", name, cw, ch, rw,
                         rh, t->resize ? " after --resize" : "");
    int top = (int)rint((rh - ch) / 2.0), left = (int)rint((rw - cw) / 2.0);
    axis_set(&b->x, 0, (double)w / rw, left, cw, 0, w);
    axis_set(&b->y, 0, (double)h / rh, top, ch, 0, h);
    return KILN_OK;
}

void kiln_tf_crop_box(const int box[4], int size, kiln_tf_box *b) {
    axis_set(&b->x, box[1], (double)box[3] / size, 0, size, box[1], box[1] + box[3]);
    axis_set(&b->y, box[0], (double)box[2] / size, 0, size, box[0], box[0] + box[2]);
}

kiln_status kiln_tf_plan(const kiln_tf *t, int w, int h, uint64_t key, const char *name, kiln_tf_box *b) {
    memset(b, 0, sizeof *b);
    philox_draws d = {key, 0};
    if (t->random) {
        int box[4];
        kiln_rrc_box(w, h, t->scale, t->ratio, philox_draw, &d, box);
        kiln_tf_crop_box(box, t->rrc, b);
    } else {
        kiln_status st = plan_fixed(t, w, h, name, b);
        if (st != KILN_OK) return st;
    }
    if (t->hflip) b->flip = philox_draw(&d, 3, 0, 1) < 0.5;
    return KILN_OK;
}

static void axis_rescale(kiln_tf_axis *a, double f) {
    a->x0 *= f;
    a->s *= f;
    a->lo *= f;
    a->hi *= f;
}

void kiln_tf_rescale(kiln_tf_box *b, int w, int h, int sw, int sh) {
    axis_rescale(&b->x, (double)sw / w);
    axis_rescale(&b->y, (double)sh / h);
}

void kiln_tf_scratch_free(kiln_tf_scratch *s) {
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

/* output pixel i's taps: its centre, first source pixel and count (PIL's bilinear
 * support, widened by the scale when shrinking, clipped to the box and the image) */
static inline double taps(const kiln_tf_axis *a, int size, int k, int i, int *first, int *count) {
    double support = a->s < 1.0 ? 1.0 : a->s;
    int lo = (int)floor(a->lo), hi = (int)ceil(a->hi);
    if (lo < 0) lo = 0;
    if (hi > size) hi = size;
    double center = a->x0 + (i + a->off + 0.5) * a->s;
    int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
    if (xmin < lo) xmin = lo;
    if (xmax > hi) xmax = hi;
    int n = xmax - xmin > k ? k : xmax - xmin;
    if (n < 1) { /* a degenerate box: take the nearest pixel */
        xmin = center < lo ? lo : (center >= hi ? hi - 1 : (int)center);
        n = 1;
    }
    *first = xmin;
    *count = n;
    return center;
}

static int taps_max(const kiln_tf_axis *a) { return 2 * (int)ceil(a->s < 1 ? 1 : a->s) + 1; }

/* PIL's precompute_coeffs for the bilinear filter: for each output pixel the
 * first source pixel, the count, and `k` normalised weights */
static void axis_weights(const kiln_tf_axis *a, int size, int k, int *first, int *count, float *w) {
    double inv = 1.0 / (a->s < 1.0 ? 1.0 : a->s);
    for (int i = 0; i < a->out; i++) {
        int xmin, n;
        double center = taps(a, size, k, i, &xmin, &n), ww = 0, tmp[k];
        for (int j = 0; j < n; j++) {
            double x = fabs((j + xmin - center + 0.5) * inv);
            tmp[j] = x < 1.0 ? 1.0 - x : 0.0;
            ww += tmp[j];
        }
        for (int j = 0; j < k; j++) w[i * k + j] = j < n ? (float)(ww != 0 ? tmp[j] / ww : (j == 0)) : 0.0f;
        first[i] = xmin;
        count[i] = n;
    }
}

/* the source pixels [from, to) an axis reads (taps move monotonically with i), one more each side for rounding */
static void axis_span(const kiln_tf_axis *a, int size, int *from, int *to) {
    int k = taps_max(a), f0, n0, f1, n1;
    taps(a, size, k, 0, &f0, &n0);
    taps(a, size, k, a->out - 1, &f1, &n1);
    *from = f0 - 1 < 0 ? 0 : f0 - 1;
    *to = f1 + n1 + 1 > size ? size : f1 + n1 + 1;
}

void kiln_tf_shift(kiln_tf_box *b, double dx, double dy) {
    b->x.x0 += dx, b->x.lo += dx, b->x.hi += dx;
    b->y.x0 += dy, b->y.lo += dy, b->y.hi += dy;
}

kiln_status kiln_tf_decode(kiln_image_ctx *x, const uint8_t *data, size_t n, const char *name, int channels, int format,
                           int w, int h, kiln_tf_box *b, kiln_image *out) {
    double need = b->x.s > b->y.s ? 1.0 / b->y.s : 1.0 / b->x.s; /* decoded pixels per output pixel stay >= 1 */
    int sw, sh, region[4], ox, oy;
    kiln_image_scaled_size(format, w, h, need, &sw, &sh);
    if (sw != w || sh != h) kiln_tf_rescale(b, w, h, sw, sh);
    axis_span(&b->x, sw, &region[0], &region[2]);
    axis_span(&b->y, sh, &region[1], &region[3]);
    kiln_status st = kiln_image_decode_region(x, data, n, name, channels, w, h, need, region, out, &ox, &oy);
    if (st == KILN_OK && (ox || oy)) kiln_tf_shift(b, -ox, -oy);
    return st;
}

/* rounded half up and clamped in integers (the sums stay within [-256, 512]), so the
 * loops that use it vectorise to a convert and two integer clamps */
static inline uint8_t round_u8(float v) {
    int i = (int)(v + 0.5f);
    i = i < 0 ? 0 : i;
    return (uint8_t)(i > 255 ? 255 : i);
}

/* The horizontal pass works on blocks of 16 output columns: each block reads a
 * band of source columns, and every source pixel of the band is one multiply-add
 * into 16 lanes through a dense [band][16] weight matrix (zeros where an output
 * does not read that pixel). Per output pixel the taps are few and scattered, so
 * vectorising across outputs this way beats a gather per tap, or scalar taps,
 * several times; rows leave it channel-planar ([c][ow]), which the vertical pass
 * does not mind and the write to the CHW slot prefers. */
#define LANES 16
typedef float lanes_f32 __attribute__((vector_size(LANES * 4)));
/* Without AVX-512 a 16-float vector is not a register: GCC lowered the loop through
 * the stack (vpinsrq and spills, 66 % of a loader worker's time on a Zen 3), so those
 * CPUs take each block as two 8-float halves, which AVX2 holds in registers */
typedef float half_f32 __attribute__((vector_size(LANES * 2)));

static int n_blocks(int out) { return (out + LANES - 1) / LANES; }

/* each block's first source column and band width, and the widest band */
static int block_bands(int out, const int *first, const int *count, int *bx, int *bn) {
    int band = 1;
    for (int b = 0; b < n_blocks(out); b++) {
        int i1 = (b + 1) * LANES < out ? (b + 1) * LANES : out, lo = first[b * LANES], hi = lo;
        for (int i = b * LANES; i < i1; i++) {
            if (first[i] < lo) lo = first[i];
            if (first[i] + count[i] > hi) hi = first[i] + count[i];
        }
        bx[b] = lo;
        bn[b] = hi - lo;
        if (bn[b] > band) band = bn[b];
    }
    return band;
}

static void block_weights(int out, int k, const int *first, const int *count, const float *w, const int *bx, int band,
                          float *bw) {
    memset(bw, 0, (size_t)n_blocks(out) * band * LANES * sizeof *bw);
    for (int i = 0; i < out; i++) {
        int b = i / LANES;
        float *m = bw + (size_t)b * band * LANES + i % LANES; /* row x of the band: source column bx[b] + x */
        for (int j = 0; j < count[i]; j++) m[(size_t)(first[i] + j - bx[b]) * LANES] = w[i * k + j];
    }
}

/* one source row (u8, C interleaved) into a planar u8 row [C][out]; the row's
 * pixels [from, to) are made float once (srcf), so each tap is a broadcast load */
/* a block's band as 16-float vectors into v[C][16] */
__attribute__((always_inline)) static inline void block_sums16(const float *bw, const float *p, int nb, int C, float *v) {
    const lanes_f32 *m = (const lanes_f32 *)bw;
    lanes_f32 a0 = {0}, a1 = {0}, a2 = {0}; /* the channels' sums, in registers: independent chains of adds */
    if (C == 3)
        for (int x = 0; x < nb; x++) {
            a0 += m[x] * p[3 * x];
            a1 += m[x] * p[3 * x + 1];
            a2 += m[x] * p[3 * x + 2];
        }
    else
        for (int x = 0; x < nb; x++) a0 += m[x] * p[x];
    lanes_f32 acc[3] = {a0, a1, a2};
    memcpy(v, acc, (size_t)C * sizeof a0);
}

/* the same sums as two 8-float halves, the same values (each lane's adds in the same order) */
__attribute__((always_inline)) static inline void block_sums8x2(const float *bw, const float *p, int nb, int C, float *v) {
    const half_f32 *m = (const half_f32 *)bw;
    half_f32 a0 = {0}, b0 = {0}, a1 = {0}, b1 = {0}, a2 = {0}, b2 = {0};
    if (C == 3)
        for (int x = 0; x < nb; x++) {
            half_f32 lo = m[2 * x], hi = m[2 * x + 1];
            float p0 = p[3 * x], p1 = p[3 * x + 1], p2 = p[3 * x + 2];
            a0 += lo * p0;
            b0 += hi * p0;
            a1 += lo * p1;
            b1 += hi * p1;
            a2 += lo * p2;
            b2 += hi * p2;
        }
    else
        for (int x = 0; x < nb; x++) {
            a0 += m[2 * x] * p[x];
            b0 += m[2 * x + 1] * p[x];
        }
    half_f32 acc[6] = {a0, b0, a1, b1, a2, b2};
    memcpy(v, acc, (size_t)C * 2 * sizeof a0);
}

__attribute__((always_inline)) static inline void pass_row(const uint8_t *src, float *srcf, int from, int to, int out, int C, const int *bx, const int *bn,
                            const float *bw, int band, uint8_t *dst, int wide) {
    const uint8_t *s = src + (size_t)from * C;
    int n = (to - from) * C;
#pragma omp simd
    for (int i = 0; i < n; i++) srcf[i] = (float)s[i];
    for (int b = 0; b < n_blocks(out); b++) {
        const float *m = bw + (size_t)b * band * LANES;
        const float *p = srcf + (size_t)(bx[b] - from) * C;
        float sums[3][LANES];
        if (wide) block_sums16(m, p, bn[b], C, sums[0]);
        else block_sums8x2(m, p, bn[b], C, sums[0]);
        int n = out - b * LANES < LANES ? out - b * LANES : LANES;
        for (int c = 0; c < C; c++) {
            uint8_t u[LANES];
#pragma omp simd
            for (int l = 0; l < LANES; l++) u[l] = round_u8(sums[c][l]);
            memcpy(dst + (size_t)c * out + b * LANES, u, (size_t)n);
        }
    }
}

/* ToTensor + Normalize (and the flip) as the planar row is written into the CHW sample:
 * torchvision's float32 operations in its order (x / 255 - mean) / std, vectorised (a
 * table lookup per pixel cost more), so the values equal kiln_tf.lut's bit for bit. The
 * vector loop takes whole 16s and the table the rest: a 28- or 56-wide row left 12 or 8
 * pixels to two scalar divisions each. */
__attribute__((always_inline)) static inline void write_row(const uint8_t *row, int ow, int C, int flip, const kiln_tf *t, float *dst, size_t plane) {
    int n16 = ow & ~15;
    for (int c = 0; c < C; c++) {
        float m = t->mean[c], sd = t->std[c];
        const float *lut = t->lut[c];
        float *d = dst + (size_t)c * plane;
        const uint8_t *r = row + (size_t)c * ow;
        if (flip) {
#pragma omp simd
            for (int i = 0; i < n16; i++) d[ow - 1 - i] = ((float)r[i] / 255.0f - m) / sd;
            for (int i = n16; i < ow; i++) d[ow - 1 - i] = lut[r[i]];
        } else {
#pragma omp simd
            for (int i = 0; i < n16; i++) d[i] = ((float)r[i] / 255.0f - m) / sd;
            for (int i = n16; i < ow; i++) d[i] = lut[r[i]];
        }
    }
}

/* the first source pixel of an axis that copies pixels one for one (scale 1, pixel
 * centres on pixel centres, inside the image and the box), else -1 */
static int axis_copy(const kiln_tf_axis *a, int size) {
    double k = a->x0 + a->off;
    int first = (int)k;
    if (a->s != 1.0 || k != (double)first || first < 0 || first + a->out > size) return -1;
    return first >= a->lo && first + a->out <= a->hi ? first : -1;
}

/* each of h rows of w floats reversed in place (the values as computed, only moved) */
static void flip_rows(float *p, int w, int h) {
    for (int y = 0; y < h; y++)
        for (float *a = p + (size_t)y * w, *z = a + w - 1; a < z; a++, z--) {
            float v = *a;
            *a = *z, *z = v;
        }
}

/* kiln_tf_apply where both axes copy: a crop, no resampling (e.g. a cache's
 * first epoch keeping an image at its own size, or --resize N of N-pixel
 * images). Inlined into kiln_tf_apply's clones, so its divisions use their
 * widest vectors; one channel is planar already and needs no reordering. */
__attribute__((always_inline)) static inline void apply_copy(const kiln_image *im, const kiln_tf_box *b, const kiln_tf *t, int x0, int y0, uint8_t *row, float *dst,
                       uint8_t *dst_u8) {
    int C = im->c, ow = b->x.out, oh = b->y.out;
    if (dst && !dst_u8 && C == 1 && ow == im->w) { /* whole rows of one channel: one loop, no short tails */
        write_row(im->px + (size_t)y0 * ow, ow * oh, 1, 0, t, dst, 0);
        if (b->flip) flip_rows(dst, ow, oh);
        return;
    }
    for (int y = 0; y < oh; y++) {
        const uint8_t *src = im->px + ((size_t)(y0 + y) * im->w + x0) * C;
        if (dst_u8) memcpy(dst_u8 + (size_t)y * ow * C, src, (size_t)ow * C);
        if (!dst) continue;
        if (C == 1) {
            write_row(src, ow, 1, b->flip, t, dst + (size_t)y * ow, (size_t)ow * oh);
            continue;
        }
        for (int c = 0; c < C; c++)
            for (int i = 0; i < ow; i++) row[(size_t)c * ow + i] = src[(size_t)i * C + c];
        write_row(row, ow, C, b->flip, t, dst + (size_t)y * ow, (size_t)ow * oh);
    }
}

static int has_avx512f(void) {
#if defined(__GNUC__) && defined(__x86_64__)
    return __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

/* Built three times, for AVX-512, for AVX2 and for any x86-64, and chosen when
 * the program starts (GCC's target_clones): the resampler's loops are written
 * to vectorise, and at -O2 for plain x86-64 they get 4-wide SSE only. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
kiln_status kiln_tf_apply(const kiln_image *im, const kiln_tf_box *b, const kiln_tf *t, kiln_tf_scratch *s, float *dst,
                          uint8_t *dst_u8) {
    int C = im->c, ow = b->x.out, oh = b->y.out, nb = n_blocks(ow);
    int kx = taps_max(&b->x), ky = taps_max(&b->y);
    /* block weights (a band is at most the image's width), weights, a row of float sums, first pixels and counts,
     * the blocks' bands, the horizontally resampled rows, one output row */
    size_t bw_bytes = (size_t)nb * im->w * LANES * 4;
    size_t need = 64 + bw_bytes + (size_t)im->w * C * 4 + (size_t)ow * kx * 4 + (size_t)oh * ky * 4 + (size_t)ow * C * 4 +
                  (size_t)(ow + oh + nb) * 8 + (size_t)im->h * ow * C + (size_t)ow * C;
    if (need > s->cap) {
        void *p = realloc(s->buf, need);
        if (!p) return kiln_fail(KILN_ERR_NOMEM, "resampling: cannot allocate %zu bytes", need);
        s->buf = p;
        s->cap = need;
    }
    float *bw = (float *)(((uintptr_t)s->buf + 63) & ~(uintptr_t)63); /* 64-byte aligned: read as 16-lane vectors */
    int cx = axis_copy(&b->x, im->w), cy = axis_copy(&b->y, im->h);
    if (cx >= 0 && cy >= 0) {
        apply_copy(im, b, t, cx, cy, (uint8_t *)bw, dst, dst_u8);
        return KILN_OK;
    }
    float *srcf = bw + bw_bytes / 4, *wx = srcf + (size_t)im->w * C, *wy = wx + (size_t)ow * kx, *acc = wy + (size_t)oh * ky;
    int *fx = (int *)(acc + (size_t)ow * C), *nx = fx + ow, *fy = nx + ow, *ny = fy + oh, *bx = ny + oh, *bn = bx + nb;
    uint8_t *tmp = (uint8_t *)(bn + nb), *row = tmp + (size_t)im->h * ow * C;
    axis_weights(&b->x, im->w, kx, fx, nx, wx);
    axis_weights(&b->y, im->h, ky, fy, ny, wy);
    int band = block_bands(ow, fx, nx, bx, bn);
    block_weights(ow, kx, fx, nx, wx, bx, band, bw);
    int wide = has_avx512f();
    int x0 = bx[0], x1 = bx[nb - 1] + bn[nb - 1];   /* the source columns any output column needs */
    int y0 = fy[0], y1 = fy[oh - 1] + ny[oh - 1]; /* the source rows any output row needs */
    for (int y = y0; y < y1; y++) {
        const uint8_t *src = im->px + (size_t)y * im->w * C;
        uint8_t *d = tmp + (size_t)(y - y0) * ow * C;
        if (wide) {
            if (C == 1) pass_row(src, srcf, x0, x1, ow, 1, bx, bn, bw, band, d, 1);
            else pass_row(src, srcf, x0, x1, ow, 3, bx, bn, bw, band, d, 1);
        } else {
            if (C == 1) pass_row(src, srcf, x0, x1, ow, 1, bx, bn, bw, band, d, 0);
            else pass_row(src, srcf, x0, x1, ow, 3, bx, bn, bw, band, d, 0);
        }
    }
    size_t plane = (size_t)ow * oh, n = (size_t)ow * C;
    for (int y = 0; y < oh; y++) {
        const uint8_t *r = tmp + (size_t)(fy[y] - y0) * n;
        const float *wr = wy + (size_t)y * ky;
        uint8_t *out = row;
        /* the rows' weighted sum in simple loops over the row (omp simd: vectorised even at -O2) */
        for (size_t i = 0; i < n; i++) acc[i] = 0;
        for (int j = 0; j < ny[y]; j++) {
            const uint8_t *rj = r + (size_t)j * n;
            float wj = wr[j];
#pragma omp simd
            for (size_t i = 0; i < n; i++) acc[i] += wj * (float)rj[i];
        }
#pragma omp simd
        for (size_t i = 0; i < n; i++) out[i] = round_u8(acc[i]);
        if (dst) write_row(out, ow, C, b->flip, t, dst + (size_t)y * ow, plane);
        if (dst_u8) /* HWC, interleaved again */
            for (int c = 0; c < C; c++)
                for (int i = 0; i < ow; i++) dst_u8[(size_t)y * n + (size_t)i * C + c] = out[(size_t)c * ow + i];
    }
    return KILN_OK;
}
