/* What kiln parses from an HTTP server's answer, kept apart from libcurl so
 * tests and the fuzz target reach it directly: header lines, Content-Range,
 * and the check that a ranged GET returned exactly the bytes asked for.
 * Private to src/data (http.c). */
#ifndef KILN_DATA_HTTP_HEADER_H
#define KILN_DATA_HTTP_HEADER_H

#include <stddef.h>
#include <stdint.h>

/* 1 when the header line line[0..n) (as libcurl hands it, CRLF included) is
 * `name: value` (name matched without case); *value, *vn: the value with
 * surrounding blanks and the line end cut. */
int kiln_http_header_value(const char *line, size_t n, const char *name, const char **value, size_t *vn);

/* 1 when line[0..n) is a status line "HTTP/x[.y] NNN [reason]": *status and
 * the reason phrase (printable ASCII only, cut to cap - 1 bytes) */
int kiln_http_status_line(const char *line, size_t n, long *status, char *reason, size_t cap);

/* A Content-Range value: "bytes FIRST-LAST/TOTAL" (TOTAL may be "*": -1) or
 * "bytes * /TOTAL" (an unsatisfiable range: *first = *last = -1). 1 when it
 * is well formed (FIRST <= LAST < TOTAL when TOTAL is known, numbers below
 * 2^62), else 0. */
int kiln_http_parse_content_range(const char *v, size_t n, int64_t *first, int64_t *last, int64_t *total);

/* What a ranged GET of [off, off + len) of an object of `size` bytes
 * answered: the HTTP status, the Content-Range it sent (have_range 0: none),
 * and the body bytes received. NULL when it is exactly the range asked for,
 * else a message saying what is wrong ("answered 200 (the whole object)
 * instead of 206", ...), written into buf. size < 0: not known yet (the probe
 * of the first byte). */
typedef struct kiln_http_answer {
    long status;
    int have_range;
    int64_t first, last, total;
    int64_t received;
} kiln_http_answer;
const char *kiln_http_check_range(const kiln_http_answer *a, int64_t off, int64_t len, int64_t size, char *buf,
                                  size_t cap);

/* The boundary of a Content-Type value "multipart/byteranges; boundary=B"
 * (B quoted or not, 1 to 70 characters as RFC 2046 allows) into out
 * (zero-terminated, cap > 70): 1 when there is one, else 0. */
int kiln_http_multipart_boundary(const char *v, size_t n, char *out, size_t cap);

/* The parts of a multipart/byteranges body (the answer to a GET of several
 * ranges): each part's Content-Range and its bytes, which lie inside body.
 * Returns the number of parts (at most max), or -1 when the body is
 * malformed (a part without a Content-Range, cut short, more than max). */
typedef struct kiln_http_part {
    int64_t first, last, total;
    const uint8_t *data;                   /* last - first + 1 bytes */
} kiln_http_part;
int kiln_http_parse_multipart(const uint8_t *body, size_t n, const char *boundary, kiln_http_part *parts, int max);

/* 1 for the statuses worth another try (5xx, 408 Request Timeout, 429 Too Many Requests) */
int kiln_http_status_retryable(long status);

#endif
