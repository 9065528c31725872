/* kiln/status.h — status codes and the last error message.
 *
 * Every library call that can fail returns a kiln_status (or NULL) and sets a
 * thread-local message naming the file, argument or node at fault:
 *
 *     kiln_status s = kiln_compile(g, loss, &opts, &plan);
 *     if (s != KILN_OK) fprintf(stderr, "kiln: %s\n", kiln_last_error());
 *
 * The library never exits and never prints except through the logger.
 */
#ifndef KILN_STATUS_H
#define KILN_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_status {
    KILN_OK = 0,
    KILN_ERR_INVALID_ARG, /* bad argument or usage: the CLI exits 2 */
    KILN_ERR_IO,          /* a file could not be opened, read or written */
    KILN_ERR_FORMAT,      /* a file is truncated or corrupt */
    KILN_ERR_SHAPE,       /* shapes do not match (graph, checkpoint) */
    KILN_ERR_NOMEM,       /* out of memory or over a memory budget */
    KILN_ERR_BACKEND,     /* oneDNN or MPI refused */
    KILN_ERR_NUMERIC,     /* NaN or Inf where a number was needed */
} kiln_status;

/* The message of the last failure on this thread ("" when none). */
const char *kiln_last_error(void);
const char *kiln_status_name(kiln_status s);
/* Sets the message (printf-style) and returns s, so callers can write
 * `return kiln_fail(KILN_ERR_IO, "%s: %s", path, strerror(errno));`. */
kiln_status kiln_fail(kiln_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current message: "while loading X: <old message>". */
kiln_status kiln_fail_context(kiln_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kiln_clear_error(void);

/* Logger: the only way the library prints. Default sink is stderr, level INFO. */
typedef enum { KILN_LOG_DEBUG, KILN_LOG_INFO, KILN_LOG_WARN, KILN_LOG_ERROR, KILN_LOG_OFF } kiln_log_level;
typedef void (*kiln_log_sink)(kiln_log_level level, const char *msg, void *user);
void kiln_log_set_level(kiln_log_level level);
kiln_log_level kiln_log_get_level(void);
void kiln_log_set_sink(kiln_log_sink sink, void *user);
void kiln_log(kiln_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
