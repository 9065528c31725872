/* Chrome trace events (chrome://tracing, Perfetto): spans from any thread,
 * kept in per-thread buffers while the run goes on and written as one JSON
 * file at the end. Off unless kiln_trace_start was called: a span then costs
 * one load of a flag. */
#ifndef KILN_BASE_TRACE_H
#define KILN_BASE_TRACE_H

#include <stdint.h>
#include "kiln/status.h"

/* 1 while a trace is being recorded */
int kiln_trace_on(void);
/* seconds on the trace's clock (CLOCK_MONOTONIC) */
double kiln_trace_now(void);
/* a span [t0, t1) of the calling thread; name and cat must be string literals
 * (only the pointer is kept) */
void kiln_trace_span(const char *name, const char *cat, double t0, double t1);
/* the same for a name that may not outlive the trace (copied, once per thread and name) */
void kiln_trace_span_copy(const char *name, const char *cat, double t0, double t1);
/* a flow arrow from a batch's loading (begin = 1, inside a loader span) to the step that uses it (begin = 0) */
void kiln_trace_flow(int begin, uint64_t id, double t);
/* paused: spans are not recorded (a --trace-steps window), kiln_trace_on() says 0 */
void kiln_trace_pause(int paused);
/* the calling thread's own pause, on top of the global one */
void kiln_trace_pause_self(int paused);
/* names the calling thread in the trace ("train", "loader worker 2"); copied */
void kiln_trace_thread(const char *name);

#endif
