#include <stdio.h>
#include "kiln/status.h"

static kiln_log_level g_level = KILN_LOG_INFO;
static kiln_log_sink g_sink;
static void *g_user;

void kiln_log_set_level(kiln_log_level level) { g_level = level; }
kiln_log_level kiln_log_get_level(void) { return g_level; }

void kiln_log_set_sink(kiln_log_sink sink, void *user) {
    g_sink = sink;
    g_user = user;
}

void kiln_log(kiln_log_level level, const char *fmt, ...) {
    if (level < g_level || level >= KILN_LOG_OFF) return;
    char msg[16384]; /* a --profile report is one message */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_sink) {
        g_sink(level, msg, g_user);
        return;
    }
    static const char *names[] = {"debug", "info", "warning", "error"};
    if (level == KILN_LOG_INFO)
        fprintf(stderr, "kiln: %s\n", msg);
    else
        fprintf(stderr, "kiln: %s: %s\n", names[level], msg);
}
