/* Image files: JPEG (libjpeg-turbo: libjpeg's API to decode, jpeg.c;
 * TurboJPEG to encode) and PNG (libspng) to 8-bit pixels, and back (for
 * kiln pack). Private to src/data. */
#ifndef KILN_DATA_IMAGE_H
#define KILN_DATA_IMAGE_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/status.h"

/* a hostile header must not make a worker allocate gigabytes: 2^25 pixels
 * (96 MB as RGB) and 32768 per side cover any training image */
#define KILN_IMAGE_MAX_SIDE 32768
#define KILN_IMAGE_MAX_PIXELS ((int64_t)1 << 25)
/* larger files are refused before they are read */
#define KILN_IMAGE_MAX_FILE ((int64_t)1 << 28)

enum { KILN_IMAGE_JPEG = 1, KILN_IMAGE_PNG = 2 };

typedef struct kiln_image {
    uint8_t *px; /* [h, w, c] */
    int w, h, c;
} kiln_image;

/* A decoder's reusable state (codec handles, file and pixel buffers): one
 * thread uses one at a time. */
typedef struct kiln_image_ctx kiln_image_ctx;
kiln_image_ctx *kiln_image_ctx_new(void);
void kiln_image_ctx_free(kiln_image_ctx *x);

/* FORMAT naming the file when w x h is beyond the limits above */
kiln_status kiln_image_check_dims(const char *name, const char *format, int64_t w, int64_t h);
/* The whole file into the context's buffer (valid until the next read). */
kiln_status kiln_image_read(kiln_image_ctx *x, const char *path, const uint8_t **data, size_t *n);
/* The same for `rel` relative to the folder descriptor `dir` (AT_FDCWD: the
 * working folder), `path` naming it in messages: one name to look up, not a
 * whole path's. */
kiln_status kiln_image_read_at(kiln_image_ctx *x, int dir, const char *rel, const char *path, const uint8_t **data,
                               size_t *n);
/* The format (by magic bytes, not the name), width and height, within the limits above. */
kiln_status kiln_image_info(kiln_image_ctx *x, const uint8_t *data, size_t n, const char *name, int *format, int *w, int *h);
/* The same, for a decode that follows at once: a JPEG's size is read from its
 * frame header without starting libjpeg (the decode reads the header anyway
 * and checks the size against it, kiln_image_decode_region's w and h), unless
 * the bytes do not plainly hold one; then as kiln_image_info. */
kiln_status kiln_image_peek(kiln_image_ctx *x, const uint8_t *data, size_t n, const char *name, int *format, int *w, int *h);
/* Decodes to `channels` (1: PIL's convert('L'), 3: convert('RGB')). A JPEG is
 * decoded at the smallest DCT scale factor >= min_scale (1: full size); a PNG
 * always at full size. The pixels live in the context until the next decode. */
kiln_status kiln_image_decode(kiln_image_ctx *x, const uint8_t *data, size_t n, const char *name, int channels,
                              double min_scale, kiln_image *out);
/* The size kiln_image_decode gives a w x h image of `format` for min_scale
 * (JPEG: DCT-scaled, rounded up as libjpeg; PNG: w x h). */
void kiln_image_scaled_size(int format, int w, int h, double min_scale, int *sw, int *sh);
/* Only what covers region {x0, y0, x1, y1} of that scaled image: a JPEG by
 * libjpeg's cropped decoding (little more than the region; its pixels equal
 * a full decode's), a PNG whole. (*ox, *oy): out's top-left in the scaled image.
 * w, h: the size kiln_image_info or kiln_image_peek gave (the region was
 * planned on it): a JPEG whose header libjpeg reads otherwise is corrupt
 * (0, 0: not checked). */
kiln_status kiln_image_decode_region(kiln_image_ctx *x, const uint8_t *data, size_t n, const char *name, int channels,
                                     int w, int h, double min_scale, const int region[4], kiln_image *out, int *ox, int *oy);
/* A buffer of at least `need` bytes owned by the context (the one
 * kiln_image_read fills), for bytes read from elsewhere (a shard over HTTP). */
uint8_t *kiln_image_buffer(kiln_image_ctx *x, size_t need);
/* `in` with `channels` channels (1: PIL's convert('L'), 3: grey copied to RGB);
 * when it has them already, `in` itself, else pixels in the context until the next decode. */
kiln_status kiln_image_convert(kiln_image_ctx *x, const kiln_image *in, int channels, const char *name, kiln_image *out);
/* Encodes as JPEG (quality 1..100) or PNG into a buffer owned by the context. */
kiln_status kiln_image_encode(kiln_image_ctx *x, const kiln_image *im, int format, int quality, const uint8_t **data,
                              size_t *n);

#endif
