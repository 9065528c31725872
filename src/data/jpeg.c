/* JPEG decoding through libjpeg's API (libjpeg-turbo 2.1: its TurboJPEG API
 * has no cropped decoding before 3.0). A decoder is kept per thread and
 * reused. Errors and warnings (corrupt data, a premature end) leave through a
 * setjmp error manager as kiln_fail naming the file; as TurboJPEG's
 * TJFLAG_LIMITSCANS, a progressive file of more than 500 scans is refused (a
 * few kilobytes of tiny scans can otherwise take minutes).
 *
 * A region is decoded by libjpeg-turbo's partial decoding: jpeg_crop_scanline
 * for the columns (the left edge moves down to an iMCU boundary: 8 or 16
 * pixels times the DCT scale), jpeg_skip_scanlines for the rows above (their
 * entropy data is read, not transformed), and the decode ends after the last
 * row needed. Its pixels equal a full decode's except at the crop's left and
 * right edges, where fancy upsampling of subsampled chroma sees no neighbour
 * (tests/test_image.c measures it): the region is widened by EDGE columns on
 * each side so those edges are never used. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
#include "data/internal/jpeg.h"

#define MAX_SCANS 500
#define EDGE 2

struct kiln_jpeg {
    struct jpeg_decompress_struct d;
    struct jpeg_error_mgr err;
    struct jpeg_progress_mgr progress;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX + 64];
};

static void on_error(j_common_ptr c) {
    kiln_jpeg *j = c->client_data;
    c->err->format_message(c, j->msg);
    longjmp(j->jump, 1);
}

/* level < 0: a warning (corrupt data, premature end): an error here; others are trace messages */
static void on_message(j_common_ptr c, int level) {
    if (level < 0) on_error(c);
}

static void on_progress(j_common_ptr c) {
    kiln_jpeg *j = c->client_data;
    if (j->d.input_scan_number <= MAX_SCANS) return;
    snprintf(j->msg, sizeof j->msg, "a progressive JPEG of more than %d scans", MAX_SCANS);
    longjmp(j->jump, 1);
}

/* 0, or -1 when libjpeg cannot allocate its state */
static int create(kiln_jpeg *j) {
    if (setjmp(j->jump)) return -1;
    jpeg_create_decompress(&j->d);
    return 0;
}

kiln_jpeg *kiln_jpeg_new(void) {
    kiln_jpeg *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->d.err = jpeg_std_error(&j->err);
    j->err.error_exit = on_error;
    j->err.emit_message = on_message;
    j->d.client_data = j;
    if (create(j) != 0) {
        free(j);
        return NULL;
    }
    j->progress.progress_monitor = on_progress;
    j->d.progress = &j->progress;
    return j;
}

void kiln_jpeg_free(kiln_jpeg *j) {
    if (!j) return;
    jpeg_destroy_decompress(&j->d);
    free(j);
}

kiln_status kiln_jpeg_info(kiln_jpeg *j, const uint8_t *data, size_t n, const char *name, int *w, int *h) {
    if (setjmp(j->jump)) {
        jpeg_abort_decompress(&j->d);
        return kiln_fail(KILN_ERR_FORMAT, "%s: corrupt JPEG: %s", name, j->msg);
    }
    jpeg_mem_src(&j->d, data, (unsigned long)n);
    jpeg_read_header(&j->d, TRUE);
    *w = (int)j->d.image_width;
    *h = (int)j->d.image_height;
    jpeg_abort_decompress(&j->d);
    return KILN_OK;
}

/* an end-of-image marker in what is left (entropy-coded data never holds FF D9) */
static int has_eoi(const uint8_t *p, size_t n) {
    for (const uint8_t *q = p; n >= 2 && (q = memchr(q, 0xff, n - 1 - (size_t)(q - p))) != NULL; q++)
        if (q[1] == 0xd9) return 1;
    return 0;
}

/* the columns and rows to decode: the region widened by EDGE columns, within the scaled image */
static void span(const struct jpeg_decompress_struct *d, const int *region, JDIMENSION *x0, JDIMENSION *w, JDIMENSION *y0,
                 JDIMENSION *y1) {
    int W = (int)d->output_width, H = (int)d->output_height;
    int a = region ? region[0] - EDGE : 0, b = region ? region[2] + EDGE : W;
    int top = region ? region[1] : 0, bottom = region ? region[3] : H;
    a = a < 0 ? 0 : (a > W - 1 ? W - 1 : a);
    b = b > W ? W : (b <= a ? a + 1 : b);
    top = top < 0 ? 0 : (top > H - 1 ? H - 1 : top);
    bottom = bottom > H ? H : (bottom <= top ? top + 1 : bottom);
    *x0 = (JDIMENSION)a, *w = (JDIMENSION)(b - a), *y0 = (JDIMENSION)top, *y1 = (JDIMENSION)bottom;
}

kiln_status kiln_jpeg_decode(kiln_jpeg *j, const uint8_t *data, size_t n, const char *name, int channels, const int *size,
                             int num, const int *region, uint8_t **buf, size_t *cap, kiln_image *out, int *ox, int *oy) {
    if (setjmp(j->jump)) {
        jpeg_abort_decompress(&j->d);
        return kiln_fail(KILN_ERR_FORMAT, "%s: corrupt or truncated JPEG: %s", name, j->msg);
    }
    struct jpeg_decompress_struct *d = &j->d;
    jpeg_mem_src(d, data, (unsigned long)n);
    jpeg_read_header(d, TRUE);
    if (kiln_image_check_dims(name, "JPEG", d->image_width, d->image_height) != KILN_OK) { /* before any allocation */
        jpeg_abort_decompress(d);
        return KILN_ERR_FORMAT;
    }
    if (size && (d->image_width != (JDIMENSION)size[0] || d->image_height != (JDIMENSION)size[1])) {
        jpeg_abort_decompress(d);
        return kiln_fail(KILN_ERR_FORMAT, "%s: corrupt JPEG: its header reads as %dx%d, then as %ux%u", name, size[0], size[1],
                         d->image_width, d->image_height);
    }
    d->scale_num = (unsigned)num;
    d->scale_denom = 8;
    d->out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB; /* grey: the stored luma, as TurboJPEG */
    jpeg_start_decompress(d);
    JDIMENSION x0, w, y0, y1;
    span(d, region, &x0, &w, &y0, &y1);
    if (x0 > 0 || w < d->output_width) jpeg_crop_scanline(d, &x0, &w); /* x0 moves down to an iMCU boundary */
    size_t row = (size_t)d->output_width * (size_t)channels, need = row * (y1 - y0);
    if (need > *cap) {
        uint8_t *p = realloc(*buf, need);
        if (!p) {
            jpeg_abort_decompress(d);
            return kiln_fail(KILN_ERR_NOMEM, "%s: cannot allocate %zu bytes", name, need);
        }
        *buf = p, *cap = need;
    }
    if (y0 > 0) jpeg_skip_scanlines(d, y0);
    while (d->output_scanline < y1) {
        JSAMPROW rows[16];
        JDIMENSION k = y1 - d->output_scanline < 16 ? y1 - d->output_scanline : 16;
        for (JDIMENSION i = 0; i < k; i++) rows[i] = *buf + (d->output_scanline - y0 + i) * row;
        jpeg_read_scanlines(d, rows, k);
    }
    *out = (kiln_image){*buf, (int)d->output_width, (int)(y1 - y0), channels};
    *ox = (int)x0, *oy = (int)y0;
    if (y1 == d->output_height) jpeg_finish_decompress(d); /* reads on to the end-of-image marker */
    else {
        /* stopped early: the rows not decoded are not checked, but a file cut short still fails */
        int cut = !jpeg_input_complete(d) && d->unread_marker != 0xd9 /* read ahead already */ &&
                  !has_eoi(d->src->next_input_byte, d->src->bytes_in_buffer);
        jpeg_abort_decompress(d);
        if (cut) return kiln_fail(KILN_ERR_FORMAT, "%s: truncated JPEG (no end-of-image marker after its data)", name);
    }
    return KILN_OK;
}
