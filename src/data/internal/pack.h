/* What kiln pack's writers share (pack.c: image folders, pack_shard.c:
 * shards): an IDX dataset's images made ready to write, and the resize to
 * size x size. Private to src/data. */
#ifndef KILN_DATA_PACK_H
#define KILN_DATA_PACK_H

#include <stdint.h>
#include "data/internal/transform.h"

typedef struct kiln_idx_images {
    kiln_tf tf; /* only its resampling: 8-bit output */
    const uint8_t *pixels, *labels;
    int rows, cols, size, channels;
} kiln_idx_images;

/* an error (naming `from`) when ds is not IDX data */
kiln_status kiln_idx_images_init(kiln_idx_images *s, const kiln_dataset *ds, const char *from, int size, int channels);
/* the largest side an image can have, for buffers of side * side * 4 bytes */
int kiln_idx_images_side(const kiln_idx_images *s);
/* image i, resized to size x size when size > 0 and copied to RGB for 3
 * channels (every channel the grey value, as PIL's convert('RGB')), in buf */
kiln_status kiln_idx_image(const kiln_idx_images *s, int64_t i, kiln_tf_scratch *scratch, uint8_t *buf, kiln_image *out);
/* src resized to size x size (bilinear, antialiased, as Resize((size, size))) into buf */
kiln_status kiln_pack_resize(const kiln_image *src, int size, const kiln_tf *tf, kiln_tf_scratch *s, uint8_t *buf, kiln_image *out);

#endif
