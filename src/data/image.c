/* JPEG and PNG decoding and encoding. The libraries do the codec work
 * (libjpeg's API for decoding, jpeg.c; TurboJPEG for encoding; libspng); kiln
 * adds the checks that make a hostile file harmless (size limits before any
 * allocation, warnings treated as errors so a truncated JPEG is not silently
 * grey at the bottom) and PIL's colour conversions. */
#include <errno.h>
#include <fcntl.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <unistd.h>
#include "base/internal/file.h"
#include "data/internal/image.h"
#include "data/internal/jpeg.h"

/* the first read of a file asks for this much (grown buffers ask for their size): most image files fit */
#define READ_FIRST ((size_t)1 << 16)

struct kiln_image_ctx {
    kiln_jpeg *dec;
    tjhandle enc;
    uint8_t *file;
    size_t file_cap;
    uint8_t *px;
    size_t px_cap;
    unsigned char *jpeg; /* tjAlloc'd, grown by tjCompress2 */
    unsigned long jpeg_len;
    void *png;           /* spng's encoded buffer (malloc) */
};

kiln_image_ctx *kiln_image_ctx_new(void) { return calloc(1, sizeof(kiln_image_ctx)); }

void kiln_image_ctx_free(kiln_image_ctx *x) {
    if (!x) return;
    kiln_jpeg_free(x->dec);
    if (x->enc) tjDestroy(x->enc);
    if (x->jpeg) tjFree(x->jpeg);
    free(x->png);
    free(x->file);
    free(x->px);
    free(x);
}

static kiln_status reserve(uint8_t **buf, size_t *cap, size_t need, const char *name) {
    if (need <= *cap) return KILN_OK;
    uint8_t *p = realloc(*buf, need);
    if (!p) return kiln_fail(KILN_ERR_NOMEM, "%s: cannot allocate %zu bytes", name, need);
    *buf = p;
    *cap = need;
    return KILN_OK;
}

/* the rest of a file the first read did not settle: fd checked (a FIFO, a device, a folder refused), its
 * size, the bytes after the `got` read already */
static kiln_status read_rest(kiln_image_ctx *x, int fd, const char *path, size_t got, size_t *n) {
    int64_t size = 0;
    if (kiln_fd_regular(fd, path, &size) < 0) return KILN_ERR_IO; /* closed it */
    kiln_status st = KILN_OK;
    if (size > KILN_IMAGE_MAX_FILE)
        st = kiln_fail(KILN_ERR_FORMAT, "%s: %lld bytes is too large for an image file", path, (long long)size);
    if (st == KILN_OK) st = reserve(&x->file, &x->file_cap, (size_t)size + 1, path);
    while (st == KILN_OK && got < (size_t)size) {
        ssize_t r = read(fd, x->file + got, (size_t)size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EAGAIN && kiln_fd_blocking(fd, path) == 0) continue; /* a file system that minds O_NONBLOCK */
        if (r < 0) st = kiln_fail(KILN_ERR_IO, "%s: read error: %s", path, strerror(errno));
        else if (r == 0) st = kiln_fail(KILN_ERR_IO, "%s: the file shrank while being read", path);
        else got += (size_t)r;
    }
    close(fd);
    *n = got;
    return st;
}

/* A file in one open, read and close (per file the kernel's work is most of the loader's
 * CPU after the decoding): a read into a buffer of READ_FIRST bytes or more that comes back
 * short has read a regular file to its end (POSIX: a regular file reads short only there),
 * so no fstat; nothing (a FIFO without a writer), an error (EAGAIN, EISDIR) or a full buffer
 * leave open what the file is and how long, and read_rest asks. */
kiln_status kiln_image_read_at(kiln_image_ctx *x, int dir, const char *rel, const char *path, const uint8_t **data,
                               size_t *n) {
    int fd = kiln_open_at_unchecked(dir, rel, path); /* sets the message */
    if (fd < 0) return KILN_ERR_IO;
    kiln_status st = reserve(&x->file, &x->file_cap, READ_FIRST, path);
    if (st != KILN_OK) {
        close(fd);
        return st;
    }
    ssize_t r;
    do r = read(fd, x->file, x->file_cap - 1); /* one byte spare, as read_rest keeps */
    while (r < 0 && errno == EINTR);
    *data = x->file;
    if (r > 0 && (size_t)r < x->file_cap - 1) {
        close(fd);
        *n = (size_t)r;
        return KILN_OK;
    }
    st = read_rest(x, fd, path, r > 0 ? (size_t)r : 0, n);
    *data = x->file; /* read_rest may have moved it */
    return st;
}

kiln_status kiln_image_read(kiln_image_ctx *x, const char *path, const uint8_t **data, size_t *n) {
    return kiln_image_read_at(x, AT_FDCWD, path, path, data, n);
}

static int is_jpeg(const uint8_t *d, size_t n) { return n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff; }
static int is_png(const uint8_t *d, size_t n) { return n >= 8 && memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0; }
static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static int be16(const uint8_t *p) { return p[0] << 8 | p[1]; }

/* SOF0..SOF15 but DHT (C4), JPG (C8) and DAC (CC) */
static int is_sof(uint8_t m) { return m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc; }

/* A JPEG's size from its first frame header, reached as libjpeg reaches it:
 * marker segments after SOI skipped by their lengths (fill bytes allowed);
 * 0 when anything else comes first (a scan, an end, stray bytes) or the
 * bytes end: libjpeg then says what is wrong. */
static int jpeg_frame_size(const uint8_t *d, size_t n, int *w, int *h) {
    size_t p = 2;
    while (p + 4 <= n && d[p] == 0xff) {
        uint8_t m = d[p + 1];
        if (m == 0xff) {
            p++;
            continue;
        }
        if (m == 0x01 || (m >= 0xd0 && m <= 0xda)) return 0; /* TEM, RSTn, SOI, EOI, SOS before a frame */
        size_t len = (size_t)be16(d + p + 2);
        if (is_sof(m)) {
            if (len < 8 || p + 9 > n) return 0;
            *h = be16(d + p + 5), *w = be16(d + p + 7);
            return 1;
        }
        if (len < 2) return 0;
        p += 2 + len;
    }
    return 0;
}

kiln_status kiln_image_check_dims(const char *name, const char *format, int64_t w, int64_t h) {
    if (w < 1 || h < 1 || w > KILN_IMAGE_MAX_SIDE || h > KILN_IMAGE_MAX_SIDE || w * h > KILN_IMAGE_MAX_PIXELS)
        return kiln_fail(KILN_ERR_FORMAT, "%s: implausible image size %lldx%lld in its %s header (at most %d per side and %lld "
                         "pixels): corrupt?", name, (long long)w, (long long)h, format, KILN_IMAGE_MAX_SIDE,
                         (long long)KILN_IMAGE_MAX_PIXELS);
    return KILN_OK;
}

kiln_status kiln_image_peek(kiln_image_ctx *x, const uint8_t *data, size_t n, const char *name, int *format, int *w, int *h) {
    if (!is_jpeg(data, n) || !jpeg_frame_size(data, n, w, h)) return kiln_image_info(x, data, n, name, format, w, h);
    *format = KILN_IMAGE_JPEG;
    return kiln_image_check_dims(name, "JPEG", *w, *h);
}

static kiln_status tj_ready(tjhandle *h, const char *name) {
    if (!*h) *h = tjInitCompress();
    if (!*h) return kiln_fail(KILN_ERR_NOMEM, "%s: cannot start libjpeg-turbo: %s", name, tjGetErrorStr2(NULL));
    return KILN_OK;
}

kiln_status kiln_image_info(kiln_image_ctx *x, const uint8_t *data, size_t n, const char *name, int *format, int *w, int *h) {
    if (is_png(data, n)) {
        *format = KILN_IMAGE_PNG;
        if (n < 33 || memcmp(data + 12, "IHDR", 4) != 0)
            return kiln_fail(KILN_ERR_FORMAT, "%s: truncated or corrupt PNG (no IHDR chunk first)", name);
        *w = (int)(be32(data + 16) > KILN_IMAGE_MAX_SIDE ? -1 : (int)be32(data + 16));
        *h = (int)(be32(data + 20) > KILN_IMAGE_MAX_SIDE ? -1 : (int)be32(data + 20));
        return kiln_image_check_dims(name, "PNG", *w, *h);
    }
    if (!is_jpeg(data, n)) return kiln_fail(KILN_ERR_FORMAT, "%s: not a JPEG or PNG file", name);
    *format = KILN_IMAGE_JPEG;
    if (!x->dec && !(x->dec = kiln_jpeg_new())) return kiln_fail(KILN_ERR_NOMEM, "%s: cannot start libjpeg", name);
    kiln_status st = kiln_jpeg_info(x->dec, data, n, name, w, h);
    return st == KILN_OK ? kiln_image_check_dims(name, "JPEG", *w, *h) : st;
}

/* the smallest of libjpeg's DCT scale factors (1/8, 2/8, ... 1) that is >= min_scale, as its numerator */
static int pick_scale(double min_scale) {
    int num = 1;
    while (num < 8 && num < min_scale * 8) num++;
    return num;
}

void kiln_image_scaled_size(int format, int w, int h, double min_scale, int *sw, int *sh) {
    int num = format == KILN_IMAGE_JPEG ? pick_scale(min_scale) : 8;
    *sw = (int)(((int64_t)w * num + 7) / 8), *sh = (int)(((int64_t)h * num + 7) / 8); /* libjpeg rounds up */
}

static kiln_status decode_jpeg(kiln_image_ctx *x, const uint8_t *data, size_t n, const char *name, int channels,
                               const int *size, double min_scale, const int *region, kiln_image *out, int *ox, int *oy) {
    if (!x->dec && !(x->dec = kiln_jpeg_new())) return kiln_fail(KILN_ERR_NOMEM, "%s: cannot start libjpeg", name);
    return kiln_jpeg_decode(x->dec, data, n, name, channels, size, pick_scale(min_scale), region, &x->px, &x->px_cap, out,
                            ox, oy);
}

/* PIL's convert('L'): ITU-R 601-2 luma in 16-bit fixed point, rounded (dst may be src) */
static void rgb_to_gray(const uint8_t *src, uint8_t *dst, int64_t npix) {
    for (int64_t i = 0; i < npix; i++) {
        const uint8_t *p = src + 3 * i;
        dst[i] = (uint8_t)((p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);
    }
}

uint8_t *kiln_image_buffer(kiln_image_ctx *x, size_t need) {
    return reserve(&x->file, &x->file_cap, need ? need : 1, "read buffer") == KILN_OK ? x->file : NULL;
}

kiln_status kiln_image_convert(kiln_image_ctx *x, const kiln_image *in, int channels, const char *name, kiln_image *out) {
    if (in->c == channels) {
        *out = *in;
        return KILN_OK;
    }
    int64_t npix = (int64_t)in->w * in->h;
    kiln_status st = reserve(&x->px, &x->px_cap, (size_t)npix * (size_t)channels, name);
    if (st != KILN_OK) return st;
    if (channels == 1) rgb_to_gray(in->px, x->px, npix);
    else
        for (int64_t p = 0; p < npix; p++) x->px[3 * p] = x->px[3 * p + 1] = x->px[3 * p + 2] = in->px[p];
    *out = (kiln_image){x->px, in->w, in->h, channels};
    return KILN_OK;
}

static kiln_status decode_png(kiln_image_ctx *x, const uint8_t *data, size_t n, const char *name, int channels,
                              kiln_image *out) {
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx) return kiln_fail(KILN_ERR_NOMEM, "%s: cannot start libspng", name);
    struct spng_ihdr ihdr;
    size_t size = 0;
    kiln_status st = KILN_OK;
    spng_set_image_limits(ctx, KILN_IMAGE_MAX_SIDE, KILN_IMAGE_MAX_SIDE);
    spng_set_chunk_limits(ctx, 1u << 24, 1u << 26); /* text and metadata chunks cannot eat memory */
    int e = spng_set_png_buffer(ctx, data, n);
    if (!e) e = spng_get_ihdr(ctx, &ihdr);
    if (!e && (st = kiln_image_check_dims(name, "PNG", ihdr.width, ihdr.height)) != KILN_OK) goto done;
    /* grey stays grey for one channel; everything else (palette, alpha, 16 bits) becomes RGB8, alpha dropped as PIL does */
    int fmt = channels == 1 && !e && ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth <= 8 ? SPNG_FMT_G8
                                                                                                    : SPNG_FMT_RGB8;
    if (!e) e = spng_decoded_image_size(ctx, fmt, &size);
    if (!e && (st = reserve(&x->px, &x->px_cap, size, name)) != KILN_OK) goto done;
    if (!e) e = spng_decode_image(ctx, x->px, size, fmt, 0);
    if (e) {
        st = kiln_fail(KILN_ERR_FORMAT, "%s: corrupt or truncated PNG: %s", name, spng_strerror(e));
        goto done;
    }
    int64_t npix = (int64_t)ihdr.width * ihdr.height;
    if (fmt == SPNG_FMT_RGB8 && channels == 1) rgb_to_gray(x->px, x->px, npix);
    *out = (kiln_image){x->px, (int)ihdr.width, (int)ihdr.height, channels};
done:
    spng_ctx_free(ctx);
    return st;
}

kiln_status kiln_image_decode(kiln_image_ctx *x, const uint8_t *data, size_t n, const char *name, int channels,
                              double min_scale, kiln_image *out) {
    if (channels != 1 && channels != 3) return kiln_fail(KILN_ERR_INVALID_ARG, "%s: channels must be 1 or 3", name);
    if (is_png(data, n)) return decode_png(x, data, n, name, channels, out);
    int ox, oy;
    if (is_jpeg(data, n)) return decode_jpeg(x, data, n, name, channels, NULL, min_scale, NULL, out, &ox, &oy);
    return kiln_fail(KILN_ERR_FORMAT, "%s: not a JPEG or PNG file", name);
}

kiln_status kiln_image_decode_region(kiln_image_ctx *x, const uint8_t *data, size_t n, const char *name, int channels,
                                     int w, int h, double min_scale, const int region[4], kiln_image *out, int *ox, int *oy) {
    if (channels != 1 && channels != 3) return kiln_fail(KILN_ERR_INVALID_ARG, "%s: channels must be 1 or 3", name);
    *ox = *oy = 0;
    const int size[2] = {w, h};
    if (is_jpeg(data, n)) return decode_jpeg(x, data, n, name, channels, w || h ? size : NULL, min_scale, region, out, ox, oy);
    return kiln_image_decode(x, data, n, name, channels, min_scale, out);
}

static kiln_status encode_png(kiln_image_ctx *x, const kiln_image *im, const uint8_t **data, size_t *n) {
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    if (!ctx) return kiln_fail(KILN_ERR_NOMEM, "cannot start libspng's encoder");
    struct spng_ihdr ihdr = {(uint32_t)im->w, (uint32_t)im->h, 8,
                             im->c == 1 ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR, 0, 0, 0};
    int e = spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
    if (!e) e = spng_set_ihdr(ctx, &ihdr);
    if (!e) e = spng_encode_image(ctx, im->px, (size_t)im->w * im->h * im->c, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
    free(x->png);
    x->png = NULL;
    if (!e) x->png = spng_get_png_buffer(ctx, n, &e);
    spng_ctx_free(ctx);
    if (e) return kiln_fail(KILN_ERR_FORMAT, "PNG encoding failed: %s", spng_strerror(e));
    *data = x->png;
    return KILN_OK;
}

kiln_status kiln_image_encode(kiln_image_ctx *x, const kiln_image *im, int format, int quality, const uint8_t **data,
                              size_t *n) {
    if (format == KILN_IMAGE_PNG) return encode_png(x, im, data, n);
    kiln_status st = tj_ready(&x->enc, "JPEG encoder");
    if (st != KILN_OK) return st;
    if (tjCompress2(x->enc, im->px, im->w, 0, im->h, im->c == 1 ? TJPF_GRAY : TJPF_RGB, &x->jpeg, &x->jpeg_len,
                    im->c == 1 ? TJSAMP_GRAY : TJSAMP_420, quality, 0) != 0) /* 4:2:0: PIL's default */
        return kiln_fail(KILN_ERR_FORMAT, "JPEG encoding failed: %s", tjGetErrorStr2(x->enc));
    *data = x->jpeg;
    *n = x->jpeg_len;
    return KILN_OK;
}
