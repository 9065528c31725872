/* Fuzz target: what kiln parses from a web server (src/data/http_header.c):
 * the header lines of an answer to a ranged GET, as libcurl hands them to
 * http.c one by one (status lines, Content-Range, Content-Type's multipart
 * boundary), the check that the answer is exactly the range asked for, and
 * the body of an answer to several ranges (multipart/byteranges).
 *
 * The input: 4 bytes little-endian `off`, 2 bytes `len - 1`, 4 bytes `size`
 * of the object as known at open (0xffffffff: unknown), 4 bytes `received`,
 * then the header block (lines ending in "\n", up to an empty line), then
 * the body. Whatever the server sent, a range the check accepts must be
 * exactly [off, off + len) with all its bytes, every parsed Content-Range
 * must be consistent, and every part of a multipart body must lie inside it
 * and hold exactly its range's bytes. */
#include <stdlib.h>
#include <string.h>
#include "data/internal/http_header.h"
#include "fuzz_util.h"

static uint32_t u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* a line exactly n bytes long in its own allocation, so ASan sees any read past it */
static void one_line(const uint8_t *p, size_t n, kiln_http_answer *a, char *boundary) {
    char *line = malloc(n ? n : 1);
    if (!line) abort();
    memcpy(line, p, n);
    char reason[64];
    const char *v;
    size_t vn;
    long st;
    if (kiln_http_status_line(line, n, &st, reason, sizeof reason)) {
        if (st < 0 || st > 999 || strlen(reason) >= sizeof reason) abort();
        for (const char *r = reason; *r; r++)
            if (*r < 32 || *r > 126) abort();
        a->status = st;
        a->have_range = 0;
    } else if (kiln_http_header_value(line, n, "Content-Type", &v, &vn)) {
        if (kiln_http_multipart_boundary(v, vn, boundary, 72) && (strlen(boundary) < 1 || strlen(boundary) > 70)) abort();
    } else if (kiln_http_header_value(line, n, "Content-Range", &v, &vn)) {
        if (v < line || v + vn > line + n) abort();
        int64_t f = 0, l = 0, t = 0;
        a->have_range = kiln_http_parse_content_range(v, vn, &f, &l, &t);
        if (a->have_range) {
            int star = f == -1 && l == -1 && t >= 0;
            int range = f >= 0 && f <= l && (t == -1 || l < t);
            if (!star && !range) abort();
            a->first = f;
            a->last = l;
            a->total = t;
        }
    }
    free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 14) return 0;
    int64_t off = u32(data), len = 1 + ((int64_t)data[4] | (int64_t)data[5] << 8);
    uint32_t sz = u32(data + 6);
    int64_t known = sz == 0xffffffffu ? -1 : (int64_t)sz;
    kiln_http_answer a = {0};
    a.received = u32(data + 10);
    data += 14;
    size -= 14;
    char boundary[72] = "";
    while (size > 0) {
        const uint8_t *nl = memchr(data, '\n', size);
        size_t n = nl ? (size_t)(nl - data) + 1 : size;
        int empty = n <= 2 && (n == 1 || data[0] == '\r') && nl;
        if (!empty) one_line(data, n, &a, boundary);
        data += n;
        size -= n;
        if (empty) break;
    }
    if (boundary[0]) { /* the body, in its own allocation */
        uint8_t *body = malloc(size ? size : 1);
        if (!body) abort();
        memcpy(body, data, size);
        kiln_http_part parts[16];
        int np = kiln_http_parse_multipart(body, size, boundary, parts, 16);
        if (np < -1 || np > 16) abort();
        for (int k = 0; k < np; k++) {
            const kiln_http_part *p = &parts[k];
            if (p->first < 0 || p->last < p->first || p->data < body || p->data + (p->last - p->first + 1) > body + size)
                abort();
            volatile uint8_t sink = p->data[p->last - p->first];
            (void)sink;
        }
        free(body);
    }
    char msg[320];
    const char *bad = kiln_http_check_range(&a, off, len, known, msg, sizeof msg);
    if (bad && (bad != msg || !msg[0] || strlen(msg) >= sizeof msg)) abort();
    if (!bad && (a.status != 206 || !a.have_range || a.first != off || a.last != off + len - 1 || a.received != len ||
                 (known >= 0 && a.total >= 0 && a.total != known)))
        abort();
    (void)kiln_http_status_retryable(a.status);
    return 0;
}
