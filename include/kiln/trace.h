/* kiln/trace.h — a Chrome trace of a run (chrome://tracing, ui.perfetto.dev):
 * the training thread's steps (forward, backward, optimizer, data-wait) and
 * each loader worker's spans (read, decode, augment), so the overlap of
 * loading and compute can be seen. */
#ifndef KILN_TRACE_H
#define KILN_TRACE_H

#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Starts recording; the file is written by kiln_trace_stop (atomically: a
 * temporary file renamed into place). One trace at a time. */
kiln_status kiln_trace_start(const char *path);
/* Stops recording and writes the file; *events (may be NULL) gets the count. */
kiln_status kiln_trace_stop(long long *events);

#ifdef __cplusplus
}
#endif
#endif
