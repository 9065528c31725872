/* Image transforms with torchvision's semantics: where a sample comes from
 * (Resize + CenterCrop, or RandomResizedCrop's box) and one resampling pass
 * (PIL's bilinear filter, antialiased when shrinking) whose rows are flipped
 * and normalised as they are written, as float CHW, into the batch slot. */
#ifndef KILN_DATA_TRANSFORM_H
#define KILN_DATA_TRANSFORM_H

#include <stdint.h>
#include "data/internal/image.h"
#include "kiln/data.h"

typedef struct kiln_tf {
    int random;           /* training: RandomResizedCrop and flip; else Resize + CenterCrop */
    int resize, crop;     /* crop: the deterministic crop (CenterCrop, or the RandomResizedCrop size) */
    int rrc;
    double scale[2], ratio[2];
    int hflip, channels;
    float lut[3][256];    /* ToTensor + Normalize of each 8-bit value, per channel */
    float mean[3], std[3]; /* Normalize's (0 and 1 without it) */
} kiln_tf;

/* Where output pixel i (of `out`) samples the source: centre x0 + (i + off + 0.5) * s,
 * the filter clipped to [lo, hi) of the source (PIL's crop-then-resize keeps the
 * filter inside the crop; resize-then-crop sees the whole image). */
typedef struct kiln_tf_axis {
    double x0, s, lo, hi;
    int off, out;
} kiln_tf_axis;
typedef struct kiln_tf_box {
    kiln_tf_axis x, y;
    int flip;
} kiln_tf_box;

void kiln_tf_init(kiln_tf *t, const kiln_data_config *dc, int random);
/* The box of one sample of a w x h image; `key` draws the random parameters. */
kiln_status kiln_tf_plan(const kiln_tf *t, int w, int h, uint64_t key, const char *name, kiln_tf_box *b);
/* The box of a crop {top, left, height, width} resized to size x size (crop, then resize). */
void kiln_tf_crop_box(const int box[4], int size, kiln_tf_box *b);
/* The box for a source decoded at sw x sh instead of w x h (JPEG DCT scaling). */
void kiln_tf_rescale(kiln_tf_box *b, int w, int h, int sw, int sh);

/* The box moved by (dx, dy): onto pixels decoded from a part of the image. */
void kiln_tf_shift(kiln_tf_box *b, double dx, double dy);
/* Decodes what box b of a w x h image (`format`, from kiln_image_info)
 * needs: a JPEG at the smallest DCT scale that keeps a decoded pixel per
 * output pixel, and only the columns and rows the resampler reads (libjpeg's
 * cropped decoding); b is moved onto the decoded pixels. */
kiln_status kiln_tf_decode(kiln_image_ctx *x, const uint8_t *data, size_t n, const char *name, int channels, int format,
                           int w, int h, kiln_tf_box *b, kiln_image *out);

/* draws of RandomResizedCrop: what 0 the area fraction in [lo, hi), 1 the log
 * aspect ratio in [lo, hi), 2 an integer in [lo, hi) */
typedef double (*kiln_tf_draw)(void *ctx, int what, double lo, double hi);
/* torchvision's RandomResizedCrop.get_params: 10 attempts, then the central
 * fallback; box = {top, left, height, width}. */
void kiln_rrc_box(int w, int h, const double scale[2], const double ratio[2], kiln_tf_draw draw, void *ctx, int box[4]);

/* Scratch for the resampler, grown as needed; one per thread at a time. */
typedef struct kiln_tf_scratch {
    void *buf;
    size_t cap;
} kiln_tf_scratch;
void kiln_tf_scratch_free(kiln_tf_scratch *s);

/* Resamples im through box b into dst: float [c, out_h, out_w] through t's
 * lut (flipped when b->flip), or, when dst_u8 is given instead, u8 HWC. */
kiln_status kiln_tf_apply(const kiln_image *im, const kiln_tf_box *b, const kiln_tf *t, kiln_tf_scratch *s, float *dst,
                          uint8_t *dst_u8);

#endif
