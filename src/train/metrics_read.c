/* Reading a metrics file back (kiln plot). The file may come from anywhere:
 * each line is parsed on its own with jansson and checked field by field, and
 * the first bad one stops the read with its file and line number. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/internal/file.h"
#include "train/internal/metrics_read.h"

#define LINE_MAX_BYTES (1 << 20) /* kiln's lines are ~200 bytes */

typedef struct {
    const char *path;
    int64_t line;
} where;

static kiln_status bad(const where *w, const char *what) {
    return kiln_fail(KILN_ERR_FORMAT, "%s:%lld: %s", w->path, (long long)w->line, what);
}

/* field `key` as a number: NAN when absent or null, FORMAT when another type */
static kiln_status number(const where *w, json_t *o, const char *key, double *out) {
    json_t *v = json_object_get(o, key);
    *out = NAN;
    if (!v || json_is_null(v)) return KILN_OK;
    if (!json_is_number(v)) return kiln_fail(KILN_ERR_FORMAT, "%s:%lld: \"%s\" is not a number", w->path, (long long)w->line, key);
    *out = json_number_value(v);
    return KILN_OK;
}

/* field `key` as a count >= 0; absent: 0 when optional */
static kiln_status count(const where *w, json_t *o, const char *key, int required, int64_t *out) {
    json_t *v = json_object_get(o, key);
    *out = 0;
    if (!v && !required) return KILN_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return kiln_fail(KILN_ERR_FORMAT, "%s:%lld: \"%s\" is %s, not a whole number >= 0", w->path, (long long)w->line, key,
                         v ? "another value" : "missing");
    *out = (int64_t)json_integer_value(v);
    return KILN_OK;
}

static kiln_status row_of(const where *w, json_t *o, int epoch_line, kiln_metrics_row *r) {
    kiln_status st;
    if ((st = count(w, o, "step", 1, &r->step)) != KILN_OK || (st = count(w, o, "epoch", 0, &r->epoch)) != KILN_OK ||
        (st = number(w, o, epoch_line ? "train_loss" : "loss", &r->loss)) != KILN_OK ||
        (st = number(w, o, "lr", &r->lr)) != KILN_OK || (st = number(w, o, "images_per_s", &r->images_per_s)) != KILN_OK ||
        (st = number(w, o, "data_wait", &r->data_wait)) != KILN_OK || (st = number(w, o, "time_s", &r->time_s)) != KILN_OK ||
        (st = number(w, o, "test_loss", &r->test_loss)) != KILN_OK ||
        (st = number(w, o, "test_accuracy", &r->test_accuracy)) != KILN_OK)
        return st;
    return KILN_OK;
}

static kiln_status push(kiln_metrics_row **rows, int64_t *n, int64_t *cap, const kiln_metrics_row *r) {
    if (*n == *cap) {
        int64_t c = *cap ? 2 * *cap : 64;
        kiln_metrics_row *p = realloc(*rows, (size_t)c * sizeof *p);
        if (!p) return kiln_fail(KILN_ERR_NOMEM, "metrics: out of memory");
        *rows = p, *cap = c;
    }
    (*rows)[(*n)++] = *r;
    return KILN_OK;
}

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return 0;
    return 1;
}

/* one line into the log (or skipped: blank, or a kind this reader does not know) */
static kiln_status read_line(const where *w, const char *s, size_t n, kiln_metrics_log *log, int64_t caps[2]) {
    if (blank(s, n)) return KILN_OK;
    if (n > LINE_MAX_BYTES) return bad(w, "line longer than 1 MiB: not a metrics file");
    json_error_t err;
    json_t *o = json_loadb(s, n, JSON_REJECT_DUPLICATES, &err);
    if (!o) return kiln_fail(KILN_ERR_FORMAT, "%s:%lld: not JSON (%s at column %d)%s", w->path, (long long)w->line, err.text,
                             err.column, s[n - 1] != '\n' ? "; the last line is cut short" : "");
    kiln_status st = KILN_OK;
    const char *kind = json_string_value(json_object_get(o, "kind"));
    kiln_metrics_row r;
    if (!json_is_object(o)) st = bad(w, "not a JSON object");
    else if (!kind) st = bad(w, "no \"kind\" (a metrics line has \"kind\":\"step\" or \"epoch\")");
    else if (!strcmp(kind, "step") || !strcmp(kind, "epoch")) {
        int e = kind[0] == 'e';
        if ((st = row_of(w, o, e, &r)) == KILN_OK)
            st = e ? push(&log->epochs, &log->nepochs, &caps[1], &r) : push(&log->steps, &log->nsteps, &caps[0], &r);
    }
    json_decref(o);
    return st;
}

kiln_status kiln_metrics_read(const char *path, kiln_metrics_log *out) {
    *out = (kiln_metrics_log){0};
    int64_t size;
    int fd = kiln_open_read(path, &size); /* a FIFO or folder is refused, not waited on */
    if (fd < 0) return KILN_ERR_IO;
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return kiln_fail(KILN_ERR_IO, "%s: %s", path, strerror(errno));
    }
    where w = {path, 0};
    char *s = NULL;
    size_t cap = 0;
    int64_t caps[2] = {0, 0};
    ssize_t n;
    kiln_status st = KILN_OK;
    while (st == KILN_OK && (errno = 0, n = getline(&s, &cap, f)) > 0) {
        w.line++;
        st = read_line(&w, s, (size_t)n, out, caps);
    }
    if (st == KILN_OK && ferror(f)) st = kiln_fail(KILN_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    if (st == KILN_OK && out->nsteps + out->nepochs == 0)
        st = kiln_fail(KILN_ERR_FORMAT, "%s: no step or epoch lines (is it a file kiln train --metrics wrote?)", path);
    free(s);
    fclose(f);
    if (st != KILN_OK) kiln_metrics_log_free(out);
    return st;
}

void kiln_metrics_log_free(kiln_metrics_log *log) {
    free(log->steps);
    free(log->epochs);
    *log = (kiln_metrics_log){0};
}
