/* Packed shards: one file per N samples, read through a kiln_source (a local
 * map or a URL). Layout, little-endian:
 *
 *   header   64 bytes: "KILNSHRD", u32 version, u32 kind (0 encoded files,
 *            1 decoded pixels), i64 count, i64 offsets of the labels, the
 *            index and the records, i64 file size, 8 zero bytes
 *   labels   int32[count]: the label column, alone, so a reader that needs
 *            only labels reads 64 + 4 * count bytes
 *   index    int64[count + 1]: record i is [index[i], index[i+1]); index[0]
 *            is the records' offset, index[count] the file size
 *   records  encoded: a JPEG or PNG file's bytes as they were; decoded: u32
 *            height, width, channels, then the pixels, u8 HWC
 *
 * Labels and index come before the records, so a remote reader gets each with
 * one small ranged read. Private to src/data. */
#ifndef KILN_DATA_SHARD_H
#define KILN_DATA_SHARD_H

#include <stdint.h>
#include "data/internal/image.h"
#include "data/internal/source.h"

#define KILN_SHARD_MAGIC "KILNSHRD"
#define KILN_SHARD_VERSION 1u
#define KILN_SHARD_HEADER 64
#define KILN_SHARD_PIXEL_HEADER 12
#define KILN_SHARD_MAX_COUNT ((int64_t)1 << 26) /* samples per shard */
enum { KILN_SHARD_ENCODED = 0, KILN_SHARD_DECODED = 1 };

typedef struct kiln_shard {
    kiln_source *src;      /* not owned */
    int kind;
    int64_t count;
    int64_t labels_off, index_off, records_off;
    int64_t *index;        /* [count + 1] after kiln_shard_read_index, else NULL */
} kiln_shard;

/* Reads and checks the header only (magic, version, kind, count, offsets, size). */
kiln_status kiln_shard_open(kiln_source *src, kiln_shard *sh);
/* The label column in one read, each checked to be in [0, num_classes). */
kiln_status kiln_shard_read_labels(const kiln_shard *sh, int num_classes, int32_t *labels);
/* The index in one read, checked: monotone, from the records' offset to the file's end. */
kiln_status kiln_shard_read_index(kiln_shard *sh);
void kiln_shard_close(kiln_shard *sh); /* frees the index; the source stays open */

/* A decoded record's pixels: its size header checked against its length and the image limits.
 * A record of size 0 x 0 x 0 is a sample that failed when a cache was made:
 * the bytes after the header are its message, returned as a FORMAT error. */
kiln_status kiln_shard_pixels(const uint8_t *rec, int64_t n, const char *name, kiln_image *im);
#define KILN_SHARD_MAX_MESSAGE 1024
/* 1 when rec is such a failed sample's record */
int kiln_shard_failed_record(const uint8_t *rec, int64_t n);

/* A decoded record's 12-byte size header for im. */
void kiln_shard_pixel_header(const kiln_image *im, uint8_t h[KILN_SHARD_PIXEL_HEADER]);

/* where the parts of a shard of `count` records start */
void kiln_shard_layout(int64_t count, int64_t *labels_off, int64_t *index_off, int64_t *records_off);
/* The header, labels and index at offset 0 of fd, for a writer that placed the
 * records itself (index[count]: the file's size); `name` for messages. */
kiln_status kiln_shard_write_head(int fd, const char *name, int kind, int64_t count, const int32_t *labels, const int64_t *index);
/* n bytes at off, or an error naming `name` */
kiln_status kiln_pwrite_all(int fd, const char *name, const void *data, int64_t n, int64_t off);

/* Writes a shard of `count` records into path.tmp.<pid>, renamed to path by
 * finish (fsync'd first): a failed or abandoned write leaves no `path`. */
typedef struct kiln_shard_writer kiln_shard_writer;
kiln_status kiln_shard_writer_new(const char *path, int kind, int64_t count, kiln_shard_writer **out);
kiln_status kiln_shard_writer_add(kiln_shard_writer *w, int32_t label, const void *data, int64_t n);
kiln_status kiln_shard_writer_add_pixels(kiln_shard_writer *w, int32_t label, const kiln_image *im);
/* every record added: header, labels and index written, then the rename; frees w */
kiln_status kiln_shard_writer_finish(kiln_shard_writer *w);
/* removes the temporary; frees w (NULL: nothing) */
void kiln_shard_writer_abort(kiln_shard_writer *w);

#endif
