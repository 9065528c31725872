/* Chrome trace events (chrome://tracing, Perfetto): spans from any thread,
 * kept in per-thread buffers while the run goes on and written as one JSON
 * file at the end. Off unless kiln_trace_start was called: a span then costs
 * one load of a flag. */
#ifndef KILN_BASE_TRACE_H
#define KILN_BASE_TRACE_H

#include "kiln/status.h"

/* 1 while a trace is being recorded */
int kiln_trace_on(void);
/* seconds on the trace's clock (CLOCK_MONOTONIC) */
double kiln_trace_now(void);
/* a span [t0, t1) of the calling thread; name and cat must be string literals
 * (only the pointer is kept) */
void kiln_trace_span(const char *name, const char *cat, double t0, double t1);
/* names the calling thread in the trace ("train", "loader worker 2"); copied */
void kiln_trace_thread(const char *name);

#endif
