/* JPEG decoding through libjpeg's API (libjpeg-turbo): DCT scaling, and
 * cropped decoding (columns by jpeg_crop_scanline, rows above skipped, the
 * decode stopped after the last row needed), libjpeg's errors and warnings
 * turned into kiln_fail naming the file. Private to src/data (image.c). */
#ifndef KILN_DATA_JPEG_H
#define KILN_DATA_JPEG_H

#include <stddef.h>
#include <stdint.h>
#include "data/internal/image.h"

typedef struct kiln_jpeg kiln_jpeg;
kiln_jpeg *kiln_jpeg_new(void);
void kiln_jpeg_free(kiln_jpeg *j);

/* width and height from the header */
kiln_status kiln_jpeg_info(kiln_jpeg *j, const uint8_t *data, size_t n, const char *name, int *w, int *h);
/* Decodes at scale num/8 (1..8) to `channels` (1: the file's luma, 3: RGB)
 * into *buf (grown as needed); size: {w, h} the header must say (corrupt
 * otherwise), or NULL. region: {x0, y0, x1, y1} of the scaled image
 * (NULL: all of it); out then holds a part of the scaled image that contains
 * the region, every pixel of it equal to a full decode's, and *ox, *oy say
 * where out's top-left lies in the scaled image. */
kiln_status kiln_jpeg_decode(kiln_jpeg *j, const uint8_t *data, size_t n, const char *name, int channels, const int *size, int num,
                             const int *region, uint8_t **buf, size_t *cap, kiln_image *out, int *ox, int *oy);

#endif
