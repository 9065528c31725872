/* TensorBoard event files, written by hand rather than with protobuf-c: kiln
 * writes two messages (Event with wall_time, step, file_version or summary;
 * Summary.Value with tag and simple_value), five fields in all, and never
 * reads them. protobuf-c would need TensorFlow's .proto files copied in, the
 * protoc-c generator (C++ protobuf) at build time and generated code in the
 * tree, for what is a varint, a few fixed-width numbers and two nested
 * lengths computed up front below.
 *
 * The file is TFRecord framing around each serialized Event:
 *   uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
 * all little-endian. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "train/internal/tensorboard.h"

struct kiln_tb {
    FILE *f;
    char path[1200];
};

/* CRC-32C, bit by bit: events are a few hundred bytes, written once per log line */
static uint32_t crc32c(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    }
    return ~c;
}

uint32_t kiln_crc32c_masked(const uint8_t *p, size_t n) {
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- the protobuf wire format: just what Event and Summary need ---- */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static size_t varint_len(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) v >>= 7, n++;
    return n;
}

/* room was reserved by the caller (sizes are computed before writing) */
static void put_varint(buf *b, uint64_t v) {
    while (v >= 0x80) b->p[b->n++] = (uint8_t)(v | 0x80), v >>= 7;
    b->p[b->n++] = (uint8_t)v;
}

static void put_le(buf *b, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) b->p[b->n++] = (uint8_t)(v >> (8 * i));
}

static void put_bytes(buf *b, int field, const void *s, size_t len) {
    put_varint(b, (uint64_t)field << 3 | 2); /* wire type 2: length-delimited */
    put_varint(b, len);
    memcpy(b->p + b->n, s, len);
    b->n += len;
}

static size_t value_len(const kiln_tb_scalar *s) {
    size_t t = strlen(s->tag);
    return 1 + varint_len(t) + t + 1 + 4; /* tag = 1 (string), simple_value = 2 (float) */
}

static int finite_scalar(const kiln_tb_scalar *s) { return isfinite(s->value) && isfinite((float)s->value); }

/* Event { wall_time = 1 (double); step = 2 (int64); file_version = 3 | summary = 5 { value = 1 {...} } } */
static kiln_status encode_event(buf *b, int64_t step, const char *version, const kiln_tb_scalar *s, int n) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wall = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    size_t summary = 0;
    for (int i = 0; i < n; i++)
        if (finite_scalar(&s[i])) summary += 1 + varint_len(value_len(&s[i])) + value_len(&s[i]);
    size_t need = 9 + 1 + 10 + (version ? 2 + strlen(version) : 1 + varint_len(summary) + summary);
    b->n = 0;
    if (need > b->cap) {
        uint8_t *p = realloc(b->p, need);
        if (!p) return kiln_fail(KILN_ERR_NOMEM, "--tensorboard: out of memory");
        b->p = p, b->cap = need;
    }
    uint64_t bits;
    memcpy(&bits, &wall, 8);
    put_varint(b, 1 << 3 | 1); /* wire type 1: 64-bit */
    put_le(b, bits, 8);
    put_varint(b, 2 << 3 | 0); /* wire type 0: varint (a negative int64 as its two's complement) */
    put_varint(b, (uint64_t)step);
    if (version) {
        put_bytes(b, 3, version, strlen(version));
        return KILN_OK;
    }
    put_varint(b, 5 << 3 | 2);
    put_varint(b, summary);
    for (int i = 0; i < n; i++) {
        if (!finite_scalar(&s[i])) continue;
        float v = (float)s[i].value;
        uint32_t vb;
        memcpy(&vb, &v, 4);
        put_varint(b, 1 << 3 | 2);
        put_varint(b, value_len(&s[i]));
        put_bytes(b, 1, s[i].tag, strlen(s[i].tag));
        put_varint(b, 2 << 3 | 5); /* wire type 5: 32-bit */
        put_le(b, vb, 4);
    }
    return KILN_OK;
}

static kiln_status write_record(kiln_tb *tb, const buf *b) {
    uint8_t head[12];
    for (int i = 0; i < 8; i++) head[i] = (uint8_t)((uint64_t)b->n >> (8 * i));
    uint32_t hc = kiln_crc32c_masked(head, 8), dc = kiln_crc32c_masked(b->p, b->n);
    for (int i = 0; i < 4; i++) head[8 + i] = (uint8_t)(hc >> (8 * i));
    uint8_t tail[4] = {(uint8_t)dc, (uint8_t)(dc >> 8), (uint8_t)(dc >> 16), (uint8_t)(dc >> 24)};
    int ok = fwrite(head, 1, 12, tb->f) == 12 && fwrite(b->p, 1, b->n, tb->f) == b->n && fwrite(tail, 1, 4, tb->f) == 4 &&
             fflush(tb->f) == 0;
    return ok ? KILN_OK : kiln_fail(KILN_ERR_IO, "--tensorboard %s: cannot write: %s", tb->path, strerror(errno));
}

static kiln_status write_event(kiln_tb *tb, int64_t step, const char *version, const kiln_tb_scalar *s, int n) {
    buf b = {0};
    kiln_status st = encode_event(&b, step, version, s, n);
    if (st == KILN_OK) st = write_record(tb, &b);
    free(b.p);
    return st;
}

/* DIR/events.out.tfevents.<seconds>.<host>, or .1, .2, ... after it when that exists */
static int create_file(const char *dir, char *path, size_t cap) {
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    for (char *h = host; *h; h++)
        if (*h == '/') *h = '_';
    long long now = (long long)time(NULL);
    for (int k = 0; k < 100; k++) {
        int w = k ? snprintf(path, cap, "%s/events.out.tfevents.%010lld.%s.%d", dir, now, host, k)
                  : snprintf(path, cap, "%s/events.out.tfevents.%010lld.%s", dir, now, host);
        if (w < 0 || (size_t)w >= cap) return errno = ENAMETOOLONG, -1;
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    return -1;
}

kiln_status kiln_tb_open(const char *dir, kiln_tb **out) {
    *out = NULL;
    struct stat sb;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return kiln_fail(KILN_ERR_IO, "--tensorboard %s: cannot create the folder: %s", dir, strerror(errno));
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return kiln_fail(KILN_ERR_IO, "--tensorboard %s: not a folder", dir);
    kiln_tb *tb = calloc(1, sizeof *tb);
    if (!tb) return kiln_fail(KILN_ERR_NOMEM, "--tensorboard: out of memory");
    int fd = create_file(dir, tb->path, sizeof tb->path);
    if (fd < 0 || !(tb->f = fdopen(fd, "wb"))) {
        kiln_status st = kiln_fail(KILN_ERR_IO, "--tensorboard %s: cannot create an event file: %s", dir, strerror(errno));
        if (fd >= 0) close(fd);
        free(tb);
        return st;
    }
    kiln_status st = write_event(tb, 0, "brain.Event:2", NULL, 0);
    if (st != KILN_OK) {
        kiln_tb_close(tb);
        return st;
    }
    *out = tb;
    return KILN_OK;
}

kiln_status kiln_tb_scalars(kiln_tb *tb, int64_t step, const kiln_tb_scalar *s, int n) {
    return write_event(tb, step, NULL, s, n);
}

void kiln_tb_close(kiln_tb *tb) {
    if (!tb) return;
    fclose(tb->f);
    free(tb);
}

const char *kiln_tb_path(const kiln_tb *tb) { return tb->path; }
