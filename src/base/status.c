#include <stdio.h>
#include <string.h>
#include "kiln/status.h"

static _Thread_local char last_error[1024];

const char *kiln_last_error(void) { return last_error; }

void kiln_clear_error(void) { last_error[0] = 0; }

const char *kiln_status_name(kiln_status s) {
    switch (s) {
    case KILN_OK: return "ok";
    case KILN_ERR_INVALID_ARG: return "invalid argument";
    case KILN_ERR_IO: return "i/o error";
    case KILN_ERR_FORMAT: return "bad format";
    case KILN_ERR_SHAPE: return "shape mismatch";
    case KILN_ERR_NOMEM: return "out of memory";
    case KILN_ERR_BACKEND: return "backend error";
    case KILN_ERR_NUMERIC: return "numeric error";
    }
    return "unknown status";
}

kiln_status kiln_fail(kiln_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

kiln_status kiln_fail_context(kiln_status s, const char *fmt, ...) {
    char prefix[512], old[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    size_t n = strlen(prefix);
    if (n > sizeof last_error - 3) n = sizeof last_error - 3;
    memcpy(last_error, prefix, n);
    memcpy(last_error + n, ": ", 2);
    size_t rest = sizeof last_error - n - 3, m = strlen(old);
    if (m > rest) m = rest;
    memcpy(last_error + n + 2, old, m);
    last_error[n + 2 + m] = 0;
    return s;
}
