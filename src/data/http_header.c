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

int kiln_http_status_retryable(long status) { return status >= 500 || status == 408 || status == 429; }
