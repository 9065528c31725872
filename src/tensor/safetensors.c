/* safetensors.c — strict reader and atomic writer for Hugging Face's
 * safetensors layout: u64 little-endian header size N, N bytes of JSON, data.
 *
 * The reader validates everything before it allocates tensor storage: the
 * header must be UTF-8 JSON of exactly the expected shape (a hand-written
 * parser that accepts objects, arrays, strings and integers, nothing else),
 * every dtype known, every size consistent, and the data section covered
 * exactly once by the tensors' offsets (no overlap, no gap, no trailing
 * bytes), as the reference implementation requires. Each tensor's data is
 * read straight into its own 64-byte-aligned kiln_alloc block: the file's
 * offsets need not be aligned (the Python writer packs tensors back to back),
 * kernels expect KILN_ALIGN, and reading per tensor avoids holding the file
 * twice in memory.
 *
 * The writer keeps caller pointers until save, then writes PATH.tmp.<pid>,
 * fsyncs it, renames it over PATH and fsyncs the folder, so a crash leaves
 * either the old file or the new one. Data is written raw: kiln targets
 * little-endian hosts, as safetensors does. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/internal/file.h"
#include "kiln/safetensors.h"

#define ST_MAX_HEADER 100000000ull /* the reference implementation's limit */
#define ST_IO_CHUNK ((size_t)1 << 30) /* read/write at most this per call */

/* ---------------------------------------------------------------- reader */

typedef struct st_item {
    char *name;
    kiln_tensor t;
    uint64_t begin, end, nbytes;
} st_item;

struct kiln_st_file {
    char *path;
    int n, cap;
    st_item *items;     /* header order */
    st_item **by_name;  /* sorted by name, for bsearch */
    int nmeta, meta_cap;
    char **meta_key, **meta_val;
    kiln_status parse_status; /* FORMAT, or NOMEM when parsing ran out of memory */
};

typedef struct jp {
    kiln_st_file *f;
    const unsigned char *s;
    size_t len, pos;
} jp;

static int jerr(jp *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int jerr(jp *p, const char *fmt, ...) {
    char msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kiln_fail(KILN_ERR_FORMAT, "%s: bad JSON header at header byte %zu (file offset %zu): %s", p->f->path,
              p->pos, p->pos + 8, msg);
    return -1;
}

/* A semantic error that is not about JSON syntax: no byte position needed. */
static int ferr(kiln_st_file *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int ferr(kiln_st_file *f, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kiln_fail(KILN_ERR_FORMAT, "%s: %s", f->path, msg);
    return -1;
}

static int nomem(kiln_st_file *f) {
    f->parse_status = KILN_ERR_NOMEM;
    kiln_fail(KILN_ERR_NOMEM, "%s: out of memory while reading the header", f->path);
    return -1;
}

/* Index of the first byte that is not part of valid UTF-8 (overlongs,
 * surrogates and code points above U+10FFFF rejected), or n. */
static size_t utf8_invalid_at(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) k = 1;
        else if (c == 0xE0) { k = 2; lo = 0xA0; }
        else if (c >= 0xE1 && c <= 0xEC) k = 2;
        else if (c == 0xED) { k = 2; hi = 0x9F; }
        else if (c >= 0xEE && c <= 0xEF) k = 2;
        else if (c == 0xF0) { k = 3; lo = 0x90; }
        else if (c >= 0xF1 && c <= 0xF3) k = 3;
        else if (c == 0xF4) { k = 3; hi = 0x8F; }
        else return i;
        if (i + k >= n) return i; /* sequence runs past the end */
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t j = 2; j <= k; j++)
            if (s[i + j] < 0x80 || s[i + j] > 0xBF) return i;
        i += k + 1;
    }
    return n;
}

static int utf8_ok(const char *s) { size_t n = strlen(s); return utf8_invalid_at((const unsigned char *)s, n) == n; }

static void j_ws(jp *p) {
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int j_peek(jp *p) { return p->pos < p->len ? p->s[p->pos] : -1; }

static int j_expect(jp *p, char c, const char *where) {
    if (j_peek(p) != (unsigned char)c) {
        if (p->pos >= p->len) return jerr(p, "unexpected end of header, expected '%c' %s", c, where);
        return jerr(p, "expected '%c' %s", c, where);
    }
    p->pos++;
    return 0;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* four hex digits at p->pos + 2 (just after "\u"), before `end` */
static int j_hex4(jp *p, size_t end, uint32_t *cp) {
    if (p->pos + 6 > end) return jerr(p, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p->s[p->pos + 2 + (size_t)i]);
        if (h < 0) return jerr(p, "bad hex digit in \\u escape");
        v = v * 16 + (uint32_t)h;
    }
    *cp = v;
    return 0;
}

/* A JSON string into a malloc'd C string. NUL (\u0000) is rejected: names and
 * metadata are C strings, and a silent truncation could alias two names. */
static int j_string(jp *p, char **out) {
    *out = NULL;
    if (j_peek(p) != '"') return jerr(p, p->pos >= p->len ? "unexpected end of header, expected a string" : "expected a string");
    size_t open = p->pos, end = p->pos + 1;
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len) return jerr(p, "unterminated string");
    /* escapes only shrink, so the raw span bounds the decoded length */
    char *o = malloc(end - open);
    if (!o) return nomem(p->f);
    size_t k = 0;
    p->pos = open + 1;
    while (p->pos < end) {
        unsigned c = p->s[p->pos];
        if (c < 0x20) { free(o); return jerr(p, "control character 0x%02x in string (must be escaped)", c); }
        if (c != '\\') { o[k++] = (char)c; p->pos++; continue; }
        /* the scan above never stops right after a backslash, so pos + 1 < end */
        int e = p->s[p->pos + 1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            o[k++] = map[simple - "\"\\/bfnrt"];
            p->pos += 2;
            continue;
        }
        if (e != 'u') { free(o); return jerr(p, "invalid escape '\\%c' in string", e >= 0x20 && e < 0x7f ? e : '?'); }
        uint32_t cp, lo;
        if (j_hex4(p, end, &cp)) { free(o); return -1; }
        if (cp >= 0xDC00 && cp <= 0xDFFF) { free(o); return jerr(p, "lone low surrogate \\u%04X in string", cp); }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            p->pos += 6;
            if (p->pos + 1 >= end || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                free(o);
                return jerr(p, "high surrogate \\u%04X not followed by a low surrogate", cp);
            }
            if (j_hex4(p, end, &lo)) { free(o); return -1; }
            if (lo < 0xDC00 || lo > 0xDFFF) { free(o); return jerr(p, "high surrogate \\u%04X not followed by a low surrogate", cp); }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp == 0) { free(o); return jerr(p, "\\u0000 is not allowed in strings"); }
        p->pos += 6;
        if (cp < 0x80) o[k++] = (char)cp;
        else if (cp < 0x800) {
            o[k++] = (char)(0xC0 | (cp >> 6));
            o[k++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            o[k++] = (char)(0xE0 | (cp >> 12));
            o[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            o[k++] = (char)(0x80 | (cp & 0x3F));
        } else {
            o[k++] = (char)(0xF0 | (cp >> 18));
            o[k++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            o[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            o[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    o[k] = 0;
    p->pos = end + 1;
    *out = o;
    return 0;
}

/* JSON integer: -?(0|[1-9][0-9]*), fitting int64; fractions and exponents rejected */
static int j_int(jp *p, int64_t *out) {
    size_t start = p->pos;
    int neg = 0;
    if (j_peek(p) == '-') { neg = 1; p->pos++; }
    int c = j_peek(p);
    if (c < '0' || c > '9') { p->pos = start; return jerr(p, "expected an integer"); }
    if (c == '0' && p->pos + 1 < p->len && p->s[p->pos + 1] >= '0' && p->s[p->pos + 1] <= '9') {
        p->pos = start;
        return jerr(p, "integer with a leading zero");
    }
    uint64_t v = 0;
    while ((c = j_peek(p)) >= '0' && c <= '9') {
        unsigned d = (unsigned)(c - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10) { p->pos = start; return jerr(p, "integer too large"); }
        v = v * 10 + d;
        p->pos++;
    }
    if (c == '.' || c == 'e' || c == 'E') { p->pos = start; return jerr(p, "expected an integer, found a fraction or exponent"); }
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

/* [int, ...] of non-negative integers, at most `max` of them */
static int j_uint_array(jp *p, int64_t *v, int max, int *n, const char *what, const char *name) {
    *n = 0;
    if (j_peek(p) != '[') return jerr(p, "expected '[' for %s of tensor '%s'", what, name);
    p->pos++;
    j_ws(p);
    if (j_peek(p) == ']') { p->pos++; return 0; }
    for (;;) {
        if (*n == max) return jerr(p, "%s of tensor '%s' has more than %d entries", what, name, max);
        size_t at = p->pos;
        if (j_int(p, &v[*n])) return -1;
        if (v[*n] < 0) { p->pos = at; return jerr(p, "negative value in %s of tensor '%s'", what, name); }
        (*n)++;
        j_ws(p);
        if (j_peek(p) == ',') { p->pos++; j_ws(p); continue; }
        if (j_peek(p) == ']') { p->pos++; return 0; }
        return jerr(p, "expected ',' or ']' in %s of tensor '%s'", what, name);
    }
}

static int j_tensor(jp *p, st_item *it) {
    const char *name = it->name;
    int seen_dtype = 0, seen_shape = 0, seen_off = 0;
    if (j_peek(p) != '{') return jerr(p, "expected '{' for tensor '%s'", name);
    p->pos++;
    j_ws(p);
    if (j_peek(p) == '}') p->pos++;
    else
        for (;;) {
            char *key;
            size_t keypos = p->pos;
            if (j_string(p, &key)) return -1;
            j_ws(p);
            if (j_expect(p, ':', "after a key")) { free(key); return -1; }
            j_ws(p);
            int *seen = !strcmp(key, "dtype") ? &seen_dtype : !strcmp(key, "shape") ? &seen_shape
                      : !strcmp(key, "data_offsets") ? &seen_off : NULL;
            if (!seen || *seen) {
                p->pos = keypos;
                jerr(p, "%s key \"%s\" in tensor '%s'", seen ? "duplicate" : "unknown", key, name);
                free(key);
                return -1;
            }
            *seen = 1;
            int rc = 0;
            if (seen == &seen_dtype) {
                char *dt;
                if (j_string(p, &dt)) rc = -1;
                else {
                    if (kiln_dtype_from_safetensors(dt, &it->t.dtype))
                        rc = ferr(p->f, "tensor '%s': unknown dtype \"%s\" (kiln reads F32, F64, BF16, F16, I32, I64, U8)",
                                  name, dt);
                    free(dt);
                }
            } else if (seen == &seen_shape) {
                rc = j_uint_array(p, it->t.shape, KILN_MAX_DIMS, &it->t.ndim, "shape", name);
            } else {
                int64_t off[2];
                int n;
                size_t at = p->pos;
                rc = j_uint_array(p, off, 2, &n, "data_offsets", name);
                if (!rc && n != 2) { p->pos = at; rc = jerr(p, "data_offsets of tensor '%s' must have 2 entries, has %d", name, n); }
                if (!rc) { it->begin = (uint64_t)off[0]; it->end = (uint64_t)off[1]; }
            }
            free(key);
            if (rc) return -1;
            j_ws(p);
            if (j_peek(p) == ',') { p->pos++; j_ws(p); continue; }
            if (j_peek(p) == '}') { p->pos++; break; }
            return jerr(p, "expected ',' or '}' in tensor '%s'", name);
        }
    if (!seen_dtype) return ferr(p->f, "tensor '%s': missing \"dtype\"", name);
    if (!seen_shape) return ferr(p->f, "tensor '%s': missing \"shape\"", name);
    if (!seen_off) return ferr(p->f, "tensor '%s': missing \"data_offsets\"", name);
    return 0;
}

static int j_metadata(jp *p) {
    kiln_st_file *f = p->f;
    if (j_peek(p) != '{') return jerr(p, "expected '{' for __metadata__");
    p->pos++;
    j_ws(p);
    if (j_peek(p) == '}') { p->pos++; return 0; }
    for (;;) {
        char *key, *val;
        size_t keypos = p->pos;
        if (j_string(p, &key)) return -1;
        for (int i = 0; i < f->nmeta; i++)
            if (!strcmp(f->meta_key[i], key)) {
                p->pos = keypos;
                jerr(p, "duplicate __metadata__ key \"%s\"", key);
                free(key);
                return -1;
            }
        j_ws(p);
        if (j_expect(p, ':', "after a key")) { free(key); return -1; }
        j_ws(p);
        if (j_peek(p) != '"') {
            jerr(p, "__metadata__ value of \"%s\" must be a string", key);
            free(key);
            return -1;
        }
        if (j_string(p, &val)) { free(key); return -1; }
        if (f->nmeta == f->meta_cap) {
            int cap = f->meta_cap ? 2 * f->meta_cap : 8;
            char **k2 = realloc(f->meta_key, (size_t)cap * sizeof *k2);
            if (k2) f->meta_key = k2;
            char **v2 = k2 ? realloc(f->meta_val, (size_t)cap * sizeof *v2) : NULL;
            if (v2) f->meta_val = v2;
            if (!k2 || !v2) { free(key); free(val); return nomem(f); }
            f->meta_cap = cap;
        }
        f->meta_key[f->nmeta] = key;
        f->meta_val[f->nmeta] = val;
        f->nmeta++;
        j_ws(p);
        if (j_peek(p) == ',') { p->pos++; j_ws(p); continue; }
        if (j_peek(p) == '}') { p->pos++; return 0; }
        return jerr(p, "expected ',' or '}' in __metadata__");
    }
}

static int j_header(jp *p) {
    kiln_st_file *f = p->f;
    int seen_meta = 0;
    size_t bad = utf8_invalid_at(p->s, p->len);
    if (bad < p->len) { p->pos = bad; return jerr(p, "invalid UTF-8"); }
    /* the reference reader also insists on '{' first */
    if (j_peek(p) != '{') return jerr(p, p->len ? "header does not start with '{'" : "empty header");
    p->pos++;
    j_ws(p);
    if (j_peek(p) == '}') p->pos++;
    else
        for (;;) {
            char *key;
            size_t keypos = p->pos;
            if (j_string(p, &key)) return -1;
            j_ws(p);
            if (j_expect(p, ':', "after a key")) { free(key); return -1; }
            j_ws(p);
            if (!strcmp(key, "__metadata__")) {
                free(key);
                if (seen_meta) { p->pos = keypos; return jerr(p, "duplicate \"__metadata__\""); }
                seen_meta = 1;
                if (j_metadata(p)) return -1;
            } else {
                if (!key[0]) { free(key); p->pos = keypos; return jerr(p, "empty tensor name"); }
                if (f->n == f->cap) {
                    int cap = f->cap ? 2 * f->cap : 16;
                    st_item *n2 = realloc(f->items, (size_t)cap * sizeof *n2);
                    if (!n2) { free(key); return nomem(f); }
                    f->items = n2;
                    f->cap = cap;
                }
                st_item *it = &f->items[f->n++];
                memset(it, 0, sizeof *it);
                it->name = key; /* owned by f from here, freed by close */
                if (j_tensor(p, it)) return -1;
            }
            j_ws(p);
            if (j_peek(p) == ',') { p->pos++; j_ws(p); continue; }
            if (j_peek(p) == '}') { p->pos++; break; }
            return jerr(p, p->pos >= p->len ? "unexpected end of header, expected ',' or '}'" : "expected ',' or '}'");
        }
    j_ws(p); /* the padding writers add */
    if (p->pos != p->len) return jerr(p, "unexpected characters after the JSON object");
    return 0;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(st_item *const *)a)->name, (*(st_item *const *)b)->name);
}

static int cmp_key_name(const void *key, const void *b) { return strcmp(key, (*(st_item *const *)b)->name); }

static int cmp_offset(const void *a, const void *b) {
    const st_item *x = *(st_item *const *)a, *y = *(st_item *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Sizes, ranges, names and exact coverage of the data section. */
static int st_validate(kiln_st_file *f, uint64_t data_len) {
    char sbuf[128];
    for (int i = 0; i < f->n; i++) {
        st_item *it = &f->items[i];
        uint64_t nb = kiln_dtype_size(it->t.dtype);
        for (int d = 0; d < it->t.ndim; d++)
            if (__builtin_mul_overflow(nb, (uint64_t)it->t.shape[d], &nb))
                return ferr(f, "tensor '%s': shape %s is too large", it->name,
                            kiln_shape_str(it->t.ndim, it->t.shape, sbuf, sizeof sbuf));
        it->nbytes = nb;
        if (it->end < it->begin)
            return ferr(f, "tensor '%s': data_offsets [%llu, %llu] end before they begin", it->name,
                        (unsigned long long)it->begin, (unsigned long long)it->end);
        if (it->end - it->begin != nb)
            return ferr(f, "tensor '%s': size mismatch: data_offsets [%llu, %llu] span %llu bytes but %s %s needs %llu",
                        it->name, (unsigned long long)it->begin, (unsigned long long)it->end,
                        (unsigned long long)(it->end - it->begin), kiln_dtype_safetensors(it->t.dtype),
                        kiln_shape_str(it->t.ndim, it->t.shape, sbuf, sizeof sbuf), (unsigned long long)nb);
        if (it->end > data_len)
            return ferr(f, "tensor '%s': data_offsets [%llu, %llu] out of range: the data section has %llu bytes (file truncated?)",
                        it->name, (unsigned long long)it->begin, (unsigned long long)it->end,
                        (unsigned long long)data_len);
    }
    st_item **order = malloc((size_t)(f->n ? f->n : 1) * sizeof *order);
    f->by_name = malloc((size_t)(f->n ? f->n : 1) * sizeof *f->by_name);
    if (!order || !f->by_name) { free(order); return nomem(f); }
    for (int i = 0; i < f->n; i++) order[i] = f->by_name[i] = &f->items[i];
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name);
    for (int i = 1; i < f->n; i++)
        if (!strcmp(f->by_name[i - 1]->name, f->by_name[i]->name)) {
            free(order);
            return ferr(f, "duplicate tensor name '%s'", f->by_name[i]->name);
        }
    qsort(order, (size_t)f->n, sizeof *order, cmp_offset);
    uint64_t at = 0;
    const char *prev = NULL;
    for (int i = 0; i < f->n; i++) {
        st_item *it = order[i];
        if (it->begin < at) {
            int rc = ferr(f, "tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s'", it->name,
                          (unsigned long long)it->begin, (unsigned long long)it->end, prev);
            free(order);
            return rc;
        }
        if (it->begin > at) {
            int rc = ferr(f, "tensor '%s': gap of %llu unused bytes before its data_offsets [%llu, %llu]", it->name,
                          (unsigned long long)(it->begin - at), (unsigned long long)it->begin,
                          (unsigned long long)it->end);
            free(order);
            return rc;
        }
        at = it->end;
        prev = it->name;
    }
    free(order);
    if (at != data_len)
        return ferr(f, "%llu unused bytes after the last tensor's data (the data section has %llu bytes)",
                    (unsigned long long)(data_len - at), (unsigned long long)data_len);
    return 0;
}

/* 0: read n bytes; 1: end of file first; -1: error (errno set) */
static int read_at(int fd, void *buf, uint64_t n, uint64_t off) {
    char *p = buf;
    while (n) {
        size_t chunk = n < ST_IO_CHUNK ? (size_t)n : ST_IO_CHUNK;
        ssize_t r = pread(fd, p, chunk, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) return 1;
        p += r;
        n -= (uint64_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static kiln_status st_read_failed(kiln_st_file *f, int rc, const char *what) {
    if (rc < 0) return kiln_fail(KILN_ERR_IO, "%s: cannot read %s: %s", f->path, what, strerror(errno));
    return kiln_fail(KILN_ERR_FORMAT, "%s: unexpected end of file reading %s (file truncated while reading?)", f->path, what);
}

kiln_status kiln_st_open(const char *path, kiln_st_file **out) {
    if (!out) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_st_open: out is NULL");
    *out = NULL;
    if (!path) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_st_open: path is NULL");
    int64_t size = 0;
    int fd = kiln_open_read(path, &size); /* never waits on a FIFO; a regular file only */
    if (fd < 0) return KILN_ERR_IO;
    kiln_status s = KILN_OK;
    unsigned char *hdr = NULL;
    kiln_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        s = kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    uint64_t fsize = (uint64_t)size; /* the size checks below rely on it */
    if (fsize < 8) {
        s = kiln_fail(KILN_ERR_FORMAT, "%s: file is %llu bytes, too short for a safetensors file (the header size alone takes 8)",
                      path, (unsigned long long)fsize);
        goto done;
    }
    unsigned char le[8];
    int rc = read_at(fd, le, 8, 0);
    if (rc) { s = st_read_failed(f, rc, "the header size"); goto done; }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | le[i];
    if (hlen > ST_MAX_HEADER) {
        s = kiln_fail(KILN_ERR_FORMAT, "%s: header size %llu is absurd (limit %llu bytes): not a safetensors file?", path,
                      (unsigned long long)hlen, ST_MAX_HEADER);
        goto done;
    }
    if (hlen > fsize - 8) {
        s = kiln_fail(KILN_ERR_FORMAT, "%s: header size %llu is beyond the end of the file (%llu bytes after the size field): truncated?",
                      path, (unsigned long long)hlen, (unsigned long long)(fsize - 8));
        goto done;
    }
    hdr = malloc(hlen ? (size_t)hlen : 1);
    if (!hdr) { s = kiln_fail(KILN_ERR_NOMEM, "%s: out of memory for a %llu-byte header", path, (unsigned long long)hlen); goto done; }
    rc = read_at(fd, hdr, hlen, 8);
    if (rc) { s = st_read_failed(f, rc, "the header"); goto done; }
    f->parse_status = KILN_ERR_FORMAT;
    jp p = {f, hdr, (size_t)hlen, 0};
    if (j_header(&p) || st_validate(f, fsize - 8 - hlen)) {
        s = f->parse_status;
        goto done;
    }
    free(hdr);
    hdr = NULL;
    for (int i = 0; i < f->n; i++) {
        st_item *it = &f->items[i];
        /* own aligned block per tensor; 1 byte minimum so empty tensors get a real pointer */
        it->t.data = kiln_alloc(it->nbytes ? (size_t)it->nbytes : 1);
        it->t.owns_data = 0; /* the file owns it: kiln_st_close frees it */
        if (!it->t.data || it->nbytes > SIZE_MAX) {
            s = kiln_fail(KILN_ERR_NOMEM, "%s: out of memory for tensor '%s' (%llu bytes)", path, it->name,
                          (unsigned long long)it->nbytes);
            goto done;
        }
        rc = read_at(fd, it->t.data, it->nbytes, 8 + hlen + it->begin);
        if (rc) {
            char what[300];
            snprintf(what, sizeof what, "tensor '%.256s'", it->name);
            s = st_read_failed(f, rc, what);
            goto done;
        }
    }
done:
    close(fd);
    free(hdr);
    if (s != KILN_OK) {
        kiln_st_close(f);
        return s;
    }
    *out = f;
    return KILN_OK;
}

void kiln_st_close(kiln_st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) {
        free(f->items[i].name);
        kiln_free(f->items[i].t.data);
    }
    for (int i = 0; i < f->nmeta; i++) {
        free(f->meta_key[i]);
        free(f->meta_val[i]);
    }
    free(f->items);
    free(f->by_name);
    free(f->meta_key);
    free(f->meta_val);
    free(f->path);
    free(f);
}

int kiln_st_count(const kiln_st_file *f) { return f ? f->n : 0; }

const kiln_tensor *kiln_st_at(const kiln_st_file *f, int i) {
    return f && i >= 0 && i < f->n ? &f->items[i].t : NULL;
}

const char *kiln_st_name(const kiln_st_file *f, int i) {
    return f && i >= 0 && i < f->n ? f->items[i].name : NULL;
}

const kiln_tensor *kiln_st_find(const kiln_st_file *f, const char *name) {
    if (!f || !name || !f->n) return NULL;
    st_item **hit = bsearch(name, f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_key_name);
    return hit ? &(*hit)->t : NULL;
}

const char *kiln_st_meta(const kiln_st_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (int i = 0; i < f->nmeta; i++)
        if (!strcmp(f->meta_key[i], key)) return f->meta_val[i];
    return NULL;
}

const char *kiln_st_path(const kiln_st_file *f) { return f ? f->path : NULL; }

/* ---------------------------------------------------------------- writer */

typedef struct st_wentry {
    char *name;
    kiln_dtype dtype;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    const void *data;
    uint64_t nbytes;
} st_wentry;

struct kiln_st_writer {
    st_wentry *e;
    int n, cap;
    int *slots;      /* open-addressing hash of names -> index + 1, so adds stay O(1) */
    size_t nslots;
    char **meta_key, **meta_val;
    int nmeta, meta_cap;
};

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* slot holding `name`, or the empty slot where it would go */
static size_t w_slot(const kiln_st_writer *w, const char *name) {
    size_t i = (size_t)fnv1a(name) & (w->nslots - 1);
    while (w->slots[i] && strcmp(w->e[w->slots[i] - 1].name, name)) i = (i + 1) & (w->nslots - 1);
    return i;
}

static int w_rehash(kiln_st_writer *w, size_t nslots) {
    int *old = w->slots;
    int *slots = calloc(nslots, sizeof *slots);
    if (!slots) return -1;
    w->slots = slots;
    w->nslots = nslots;
    for (int i = 0; i < w->n; i++) w->slots[w_slot(w, w->e[i].name)] = i + 1;
    free(old);
    return 0;
}

kiln_st_writer *kiln_st_writer_new(void) {
    kiln_st_writer *w = calloc(1, sizeof *w);
    if (w && w_rehash(w, 64)) { free(w); return NULL; }
    return w;
}

void kiln_st_writer_free(kiln_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->e[i].name);
    for (int i = 0; i < w->nmeta; i++) {
        free(w->meta_key[i]);
        free(w->meta_val[i]);
    }
    free(w->e);
    free(w->slots);
    free(w->meta_key);
    free(w->meta_val);
    free(w);
}

kiln_status kiln_st_writer_add(kiln_st_writer *w, const char *name, kiln_dtype dtype, int ndim,
                               const int64_t *shape, const void *data) {
    if (!w || !name) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_st_writer_add: %s is NULL", w ? "name" : "writer");
    if (!name[0]) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_st_writer_add: empty tensor name");
    if (!strcmp(name, "__metadata__"))
        return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_st_writer_add: '__metadata__' is reserved, not a tensor name");
    if (!utf8_ok(name)) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_st_writer_add: tensor name '%s' is not valid UTF-8", name);
    if (kiln_dtype_size(dtype) == 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_st_writer_add: tensor '%s': invalid dtype %d", name, (int)dtype);
    if (ndim < 0 || ndim > KILN_MAX_DIMS || (ndim > 0 && !shape))
        return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_st_writer_add: tensor '%s': bad ndim %d (0..%d with a shape)", name,
                         ndim, KILN_MAX_DIMS);
    uint64_t nb = kiln_dtype_size(dtype);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_st_writer_add: tensor '%s': negative dimension %lld", name,
                             (long long)shape[d]);
        if (__builtin_mul_overflow(nb, (uint64_t)shape[d], &nb))
            return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_st_writer_add: tensor '%s': shape too large", name);
    }
    if (nb && !data) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_st_writer_add: tensor '%s': data is NULL", name);
    if (w->slots[w_slot(w, name)]) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_st_writer_add: duplicate tensor name '%s'", name);
    /* keep the table at most half full */
    if ((size_t)(w->n + 1) * 2 > w->nslots && w_rehash(w, w->nslots * 2))
        return kiln_fail(KILN_ERR_NOMEM, "kiln_st_writer_add: out of memory");
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        st_wentry *e = realloc(w->e, (size_t)cap * sizeof *e);
        if (!e) return kiln_fail(KILN_ERR_NOMEM, "kiln_st_writer_add: out of memory");
        w->e = e;
        w->cap = cap;
    }
    st_wentry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    if (!(e->name = strdup(name))) return kiln_fail(KILN_ERR_NOMEM, "kiln_st_writer_add: out of memory");
    e->dtype = dtype;
    e->ndim = ndim;
    for (int d = 0; d < ndim; d++) e->shape[d] = shape[d];
    e->data = data;
    e->nbytes = nb;
    w->slots[w_slot(w, name)] = ++w->n;
    return KILN_OK;
}

/* Setting a key twice keeps the last value, like assigning a dict entry. */
kiln_status kiln_st_writer_meta(kiln_st_writer *w, const char *key, const char *value) {
    if (!w || !key || !value) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_st_writer_meta: NULL argument");
    if (!utf8_ok(key) || !utf8_ok(value))
        return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_st_writer_meta: key or value of '%s' is not valid UTF-8", key);
    char *v = strdup(value);
    if (!v) return kiln_fail(KILN_ERR_NOMEM, "kiln_st_writer_meta: out of memory");
    for (int i = 0; i < w->nmeta; i++)
        if (!strcmp(w->meta_key[i], key)) {
            free(w->meta_val[i]);
            w->meta_val[i] = v;
            return KILN_OK;
        }
    if (w->nmeta == w->meta_cap) {
        int cap = w->meta_cap ? 2 * w->meta_cap : 8;
        char **k2 = realloc(w->meta_key, (size_t)cap * sizeof *k2);
        if (k2) w->meta_key = k2;
        char **v2 = k2 ? realloc(w->meta_val, (size_t)cap * sizeof *v2) : NULL;
        if (v2) w->meta_val = v2;
        if (!k2 || !v2) { free(v); return kiln_fail(KILN_ERR_NOMEM, "kiln_st_writer_meta: out of memory"); }
        w->meta_cap = cap;
    }
    char *k = strdup(key);
    if (!k) { free(v); return kiln_fail(KILN_ERR_NOMEM, "kiln_st_writer_meta: out of memory"); }
    w->meta_key[w->nmeta] = k;
    w->meta_val[w->nmeta] = v;
    w->nmeta++;
    return KILN_OK;
}

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(sbuf *b, uint64_t v) {
    char t[24];
    sb_put(b, t, (size_t)snprintf(t, sizeof t, "%llu", (unsigned long long)v));
}

/* JSON string literal; UTF-8 passes through raw, as the reference writer does */
static void sb_json(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char t[8];
        switch (c) {
        case '"': sb_put(b, "\\\"", 2); break;
        case '\\': sb_put(b, "\\\\", 2); break;
        case '\b': sb_put(b, "\\b", 2); break;
        case '\f': sb_put(b, "\\f", 2); break;
        case '\n': sb_put(b, "\\n", 2); break;
        case '\r': sb_put(b, "\\r", 2); break;
        case '\t': sb_put(b, "\\t", 2); break;
        default:
            if (c < 0x20) sb_put(b, t, (size_t)snprintf(t, sizeof t, "\\u%04x", c));
            else sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int write_all(int fd, const void *buf, uint64_t n) {
    const char *p = buf;
    while (n) {
        size_t chunk = n < ST_IO_CHUNK ? (size_t)n : ST_IO_CHUNK;
        ssize_t r = write(fd, p, chunk);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += r;
        n -= (uint64_t)r;
    }
    return 0;
}

/* fsync the folder holding `path`, so the rename itself is durable */
static int fsync_parent(const char *path) {
    char *dir = strdup(path);
    if (!dir) { errno = ENOMEM; return -1; }
    char *slash = strrchr(dir, '/');
    const char *d = dir;
    if (!slash) d = ".";
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = 0;
    if (fd < 0) rc = -1;
    else {
        /* some file systems cannot sync folders: nothing more to do there */
        if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP) rc = -1;
        int e = errno;
        close(fd);
        errno = e;
    }
    int e = errno;
    free(dir);
    errno = e;
    return rc;
}

/* Removes PATH.tmp.<pid> files that processes no longer running left behind (a
 * save killed with SIGKILL): they are never renamed into place and would only
 * take disk space. A pid still alive (or that we may not signal) keeps its file. */
static void remove_stale_temps(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : path;
    if (slash == dir) dir[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    size_t blen = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        const char *n = e->d_name;
        if (strncmp(n, base, blen) != 0 || strncmp(n + blen, ".tmp.", 5) != 0) continue;
        const char *digits = n + blen + 5;
        char *end;
        long pid = strtol(digits, &end, 10);
        if (end == digits || *end || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char full[8192];
        snprintf(full, sizeof full, "%s/%s", dir, n);
        if (unlink(full) == 0) kiln_log(KILN_LOG_DEBUG, "removed %s, left by an interrupted save", full);
    }
    closedir(d);
}

kiln_status kiln_st_writer_save(kiln_st_writer *w, const char *path) {
    if (!w || !path || !path[0]) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_st_writer_save: %s", w ? "empty path" : "writer is NULL");
    /* reference layout: "__metadata__" first, then tensors; data in the same order */
    sbuf h = {0};
    sb_put(&h, "{", 1);
    int first = 1;
    if (w->nmeta) {
        sb_str(&h, "\"__metadata__\":{");
        for (int i = 0; i < w->nmeta; i++) {
            if (i) sb_put(&h, ",", 1);
            sb_json(&h, w->meta_key[i]);
            sb_put(&h, ":", 1);
            sb_json(&h, w->meta_val[i]);
        }
        sb_put(&h, "}", 1);
        first = 0;
    }
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        const st_wentry *e = &w->e[i];
        if (!first) sb_put(&h, ",", 1);
        first = 0;
        sb_json(&h, e->name);
        sb_str(&h, ":{\"dtype\":");
        sb_json(&h, kiln_dtype_safetensors(e->dtype));
        sb_str(&h, ",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) {
            if (d) sb_put(&h, ",", 1);
            sb_u64(&h, (uint64_t)e->shape[d]);
        }
        sb_str(&h, "],\"data_offsets\":[");
        sb_u64(&h, off);
        sb_put(&h, ",", 1);
        off += e->nbytes;
        sb_u64(&h, off);
        sb_str(&h, "]}");
    }
    sb_put(&h, "}", 1);
    while (!h.oom && h.len % 8) sb_put(&h, " ", 1); /* keeps the data 8-byte aligned in the file */
    if (h.oom) {
        free(h.p);
        return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory building the header", path);
    }

    remove_stale_temps(path);
    size_t tlen = strlen(path) + 32;
    char *tmp = malloc(tlen);
    if (!tmp) { free(h.p); return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", path); }
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
    /* O_TRUNC rather than O_EXCL: a stale temp of this name is ours (a crashed
     * run with a reused pid, common in containers) and must not block saves */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        kiln_status s = kiln_fail(KILN_ERR_IO, "%s: cannot create temporary file %s: %s", path, tmp, strerror(errno));
        free(tmp);
        free(h.p);
        return s;
    }
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    const char *step = "write";
    int ok = write_all(fd, le, 8) == 0 && write_all(fd, h.p, h.len) == 0;
    for (int i = 0; ok && i < w->n; i++)
        if (w->e[i].nbytes && write_all(fd, w->e[i].data, w->e[i].nbytes)) ok = 0;
    if (ok && fsync(fd) != 0) { ok = 0; step = "fsync"; }
    int e = errno;
    if (close(fd) != 0 && ok) { ok = 0; step = "close"; e = errno; }
    if (ok && rename(tmp, path) != 0) { ok = 0; step = "rename"; e = errno; }
    free(h.p);
    if (!ok) {
        unlink(tmp);
        kiln_status s = kiln_fail(KILN_ERR_IO, "%s: cannot save (%s of %s failed): %s%s", path, step, tmp, strerror(e),
                                  e == EFBIG ? " (a file-size limit: ulimit -f)" : e == ENOSPC ? " (the disk is full)" : "");
        free(tmp);
        return s;
    }
    free(tmp);
    /* the new file is in place; only its durability across a crash is in doubt */
    if (fsync_parent(path) != 0)
        return kiln_fail(KILN_ERR_IO, "%s: saved, but cannot fsync its folder: %s", path, strerror(errno));
    return KILN_OK;
}
