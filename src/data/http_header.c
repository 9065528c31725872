/* Parsing an HTTP server's answer to a ranged GET (internal/http_header.h).
 * Everything here reads bytes a server chose, so it is bounded by the
 * lengths given, never by a terminating zero, and is fuzzed (fuzz_http). */
#include "data/internal/http_header.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define NUM_MAX ((int64_t)1 << 62)

static int blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

int kiln_http_header_value(const char *line, size_t n, const char *name, const char **value, size_t *vn) {
    size_t k = 0;
    while (name[k]) k++;
    if (n <= k || line[k] != ':' || strncasecmp(line, name, k) != 0) return 0;
    size_t a = k + 1, b = n;
    while (a < b && blank(line[a])) a++;
    while (b > a && blank(line[b - 1])) b--;
    *value = line + a;
    *vn = b - a;
    return 1;
}

int kiln_http_status_line(const char *line, size_t n, long *status, char *reason, size_t cap) {
    size_t i = 5;
    if (n < 12 || strncmp(line, "HTTP/", 5) != 0) return 0;
    while (i < n && line[i] != ' ') i++;
    if (i + 4 > n || line[i] != ' ') return 0;
    long s = 0;
    for (size_t k = i + 1; k < i + 4; k++) {
        if (line[k] < '0' || line[k] > '9') return 0;
        s = s * 10 + (line[k] - '0');
    }
    i += 4;
    if (i < n && !blank(line[i])) return 0;
    while (i < n && line[i] == ' ') i++;
    size_t w = 0;
    for (; i < n && w + 1 < cap && line[i] != '\r' && line[i] != '\n'; i++) reason[w++] = line[i] >= 32 && line[i] < 127 ? line[i] : '?';
    if (cap) reason[w] = 0;
    *status = s;
    return 1;
}

/* a decimal number at v[*i..n) below 2^62; advances *i; 0 when there is none */
static int number(const char *v, size_t n, size_t *i, int64_t *out) {
    size_t start = *i;
    int64_t x = 0;
    while (*i < n && v[*i] >= '0' && v[*i] <= '9') {
        if (x >= NUM_MAX / 10) return 0;
        x = x * 10 + (v[*i] - '0');
        (*i)++;
    }
    *out = x;
    return *i > start;
}

int kiln_http_parse_content_range(const char *v, size_t n, int64_t *first, int64_t *last, int64_t *total) {
    size_t i = 0;
    if (n < 6 || strncasecmp(v, "bytes", 5) != 0 || !blank(v[5])) return 0;
    i = 6;
    while (i < n && blank(v[i])) i++;
    if (i < n && v[i] == '*') {
        *first = *last = -1;
        i++;
    } else {
        if (!number(v, n, &i, first) || i >= n || v[i] != '-') return 0;
        i++;
        if (!number(v, n, &i, last) || *last < *first) return 0;
    }
    if (i >= n || v[i] != '/') return 0;
    i++;
    if (i < n && v[i] == '*') {
        if (*first < 0) return 0; /* a star for both says nothing */
        *total = -1;
        i++;
    } else if (!number(v, n, &i, total) || (*first >= 0 && *last >= *total)) {
        return 0;
    }
    while (i < n && blank(v[i])) i++;
    return i == n;
}

const char *kiln_http_check_range(const kiln_http_answer *a, int64_t off, int64_t len, int64_t size, char *buf,
                                  size_t cap) {
    if (a->status == 200) {
        snprintf(buf, cap, "the server answered 200 (the whole object) to a request for bytes %lld-%lld: it does "
                 "not honour Range requests", (long long)off, (long long)(off + len - 1));
        return buf;
    }
    if (a->status != 206) {
        snprintf(buf, cap, "HTTP status %ld for bytes %lld-%lld", a->status, (long long)off, (long long)(off + len - 1));
        return buf;
    }
    if (!a->have_range) {
        snprintf(buf, cap, "a 206 answer without a valid Content-Range header");
        return buf;
    }
    if (a->first != off || a->last != off + len - 1) {
        snprintf(buf, cap, "asked for bytes %lld-%lld, the server sent bytes %lld-%lld", (long long)off,
                 (long long)(off + len - 1), (long long)a->first, (long long)a->last);
        return buf;
    }
    if (size >= 0 && a->total >= 0 && a->total != size) {
        snprintf(buf, cap, "the object is now %lld bytes, not %lld as when it was opened (changed on the server?)",
                 (long long)a->total, (long long)size);
        return buf;
    }
    if (a->received != len) {
        snprintf(buf, cap, "%lld bytes received for a range of %lld", (long long)a->received, (long long)len);
        return buf;
    }
    return NULL;
}

int kiln_http_multipart_boundary(const char *v, size_t n, char *out, size_t cap) {
    static const char type[] = "multipart/byteranges";
    size_t k = sizeof type - 1, i;
    if (n < k || strncasecmp(v, type, k) != 0) return 0;
    for (i = k; i + 9 <= n; i++)
        if (strncasecmp(v + i, "boundary=", 9) == 0 && (v[i - 1] == ';' || blank(v[i - 1]))) break;
    if (i + 9 > n) return 0;
    i += 9;
    int quoted = i < n && v[i] == '"';
    size_t a = i + (size_t)quoted, b = a;
    while (b < n && (quoted ? v[b] != '"' : !blank(v[b]) && v[b] != ';')) b++;
    if (quoted && b >= n) return 0;
    if (b == a || b - a > 70 || b - a >= cap) return 0;
    for (size_t k = a; k < b; k++)
        if (v[k] < 32 || v[k] > 126) return 0; /* RFC 2046's characters are all printable */
    memcpy(out, v + a, b - a);
    out[b - a] = 0;
    return 1;
}

/* at body[*i]: a line (up to and including "\n"); its length without the end in *len */
static int next_line(const uint8_t *body, size_t n, size_t *i, size_t *start, size_t *len) {
    const uint8_t *nl = *i < n ? memchr(body + *i, '\n', n - *i) : NULL;
    if (!nl) return 0;
    *start = *i;
    *len = (size_t)(nl - (body + *i));
    if (*len && body[*i + *len - 1] == '\r') (*len)--;
    *i = (size_t)(nl - body) + 1;
    return 1;
}

int kiln_http_parse_multipart(const uint8_t *body, size_t n, const char *boundary, kiln_http_part *parts, int max) {
    char delim[80];
    size_t dn = (size_t)snprintf(delim, sizeof delim, "--%s", boundary);
    if (dn >= sizeof delim || dn < 3) return -1;
    const uint8_t *d = memmem(body, n, delim, dn); /* a preamble (nginx: an empty line) comes first */
    if (!d) return -1;
    size_t i = (size_t)(d - body);
    for (int count = 0;; count++) {
        /* at a delimiter: "--B--" ends the body, "--B" CRLF starts a part */
        if (n - i < dn || memcmp(body + i, delim, dn) != 0) return -1;
        i += dn;
        if (n - i >= 2 && body[i] == '-' && body[i + 1] == '-') return count;
        size_t start, len;
        if (!next_line(body, n, &i, &start, &len) || len != 0 || count == max) return -1;
        kiln_http_part p = {-1, -1, -1, NULL};
        int have = 0, ended = 0;
        while (!ended && next_line(body, n, &i, &start, &len)) {
            const char *v;
            size_t vn;
            ended = len == 0;
            if (!ended && kiln_http_header_value((const char *)body + start, len, "Content-Range", &v, &vn))
                have = kiln_http_parse_content_range(v, vn, &p.first, &p.last, &p.total) && p.first >= 0;
        }
        if (!have || !ended) return -1; /* no Content-Range, or the headers never ended */
        int64_t bytes = p.last - p.first + 1;
        if (bytes > (int64_t)(n - i)) return -1;
        p.data = body + i;
        parts[count] = p;
        i += (size_t)bytes;
        /* the part's bytes end with CRLF before the next delimiter */
        if (n - i >= 2 && body[i] == '\r' && body[i + 1] == '\n') i += 2;
        else if (n - i >= 1 && body[i] == '\n') i += 1;
        else return -1;
    }
}

int kiln_http_status_retryable(long status) { return status >= 500 || status == 408 || status == 429; }
