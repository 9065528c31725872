/* Chrome trace recording. Each thread appends complete ("X") events to its own
 * chunked buffer, so recording takes no lock after a thread's first span; the
 * buffers are registered once in a global list that kiln_trace_stop walks
 * after the threads that wrote them are done (the trainer stops the trace
 * after its loader is freed). Written with jansson, one event per line. */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "base/internal/file.h"
#include "base/internal/trace.h"
#include "kiln/trace.h"

#define CHUNK 4096
/* a bound on memory: ~96 MB of events; later spans are counted, not kept */
#define MAX_EVENTS (4 << 20)

typedef struct event {
    const char *name, *cat;
    double t0, t1;
} event;

typedef struct chunk {
    event ev[CHUNK];
    int n;
    struct chunk *next;
} chunk;

typedef struct tbuf {
    int tid;
    char name[48];
    chunk *head, *tail;
    struct tbuf *next;
} tbuf;

static atomic_int g_on;
static atomic_long g_count, g_dropped;
static atomic_uint g_gen; /* which trace a thread's buffer belongs to */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static tbuf *g_bufs;
static int g_next_tid;
static double g_t0;
static char *g_path;
static _Thread_local tbuf *t_buf;
static _Thread_local unsigned t_gen; /* t_buf is freed with its trace: compare the generation, never t_buf's */

int kiln_trace_on(void) { return atomic_load_explicit(&g_on, memory_order_relaxed); }

double kiln_trace_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the calling thread's buffer for the current trace, registered on first use */
static tbuf *my_buf(void) {
    unsigned gen = atomic_load(&g_gen);
    if (t_buf && t_gen == gen) return t_buf;
    tbuf *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    pthread_mutex_lock(&g_mu);
    b->tid = ++g_next_tid;
    snprintf(b->name, sizeof b->name, "thread %d", b->tid);
    b->next = g_bufs;
    g_bufs = b;
    pthread_mutex_unlock(&g_mu);
    t_buf = b;
    t_gen = gen;
    return b;
}

void kiln_trace_thread(const char *name) {
    if (!kiln_trace_on()) return;
    tbuf *b = my_buf();
    if (b) snprintf(b->name, sizeof b->name, "%s", name);
}

void kiln_trace_span(const char *name, const char *cat, double t0, double t1) {
    if (!kiln_trace_on()) return;
    if (atomic_fetch_add(&g_count, 1) >= MAX_EVENTS) {
        atomic_fetch_add(&g_dropped, 1);
        return;
    }
    tbuf *b = my_buf();
    if (!b) return;
    if (!b->tail || b->tail->n == CHUNK) {
        chunk *c = calloc(1, sizeof *c);
        if (!c) return;
        if (b->tail) b->tail->next = c;
        else b->head = c;
        b->tail = c;
    }
    b->tail->ev[b->tail->n++] = (event){name, cat, t0, t1};
}

kiln_status kiln_trace_start(const char *path) {
    if (!path || !*path) return kiln_fail(KILN_ERR_INVALID_ARG, "--trace: empty file name");
    if (g_path) return kiln_fail(KILN_ERR_INVALID_ARG, "--trace %s: a trace is already being recorded", path);
    /* fail now, not after the run: the file must be writable */
    int fd = kiln_open_write(path, 1);
    if (fd < 0) return kiln_fail_context(KILN_ERR_IO, "--trace");
    close(fd);
    g_path = strdup(path);
    if (!g_path) return kiln_fail(KILN_ERR_NOMEM, "--trace: out of memory");
    g_t0 = kiln_trace_now();
    atomic_store(&g_count, 0);
    atomic_store(&g_dropped, 0);
    atomic_fetch_add(&g_gen, 1);
    atomic_store(&g_on, 1);
    return KILN_OK;
}

static int put(FILE *f, json_t *o, int *first) {
    if (!o) return -1;
    int rc = fputs(*first ? "\n" : ",\n", f) < 0 || json_dumpf(o, f, JSON_COMPACT) != 0 ? -1 : 0;
    json_decref(o);
    *first = 0;
    return rc;
}

/* seconds to microseconds, to the nanosecond (the clock's resolution) */
static double us(double s) { return round(s * 1e9) / 1e3; }

/* the events of one thread: its name (a metadata event), then its spans in microseconds */
static int write_thread(FILE *f, const tbuf *b, int *first, long long *events) {
    if (put(f, json_pack("{s:s,s:s,s:i,s:i,s:{s:s}}", "name", "thread_name", "ph", "M", "pid", 1, "tid", b->tid, "args",
                         "name", b->name), first) != 0)
        return -1;
    for (const chunk *c = b->head; c; c = c->next)
        for (int i = 0; i < c->n; i++) {
            const event *e = &c->ev[i];
            json_t *o = json_pack("{s:s,s:s,s:s,s:i,s:i,s:f,s:f}", "name", e->name, "cat", e->cat, "ph", "X", "pid", 1,
                                  "tid", b->tid, "ts", us(e->t0 - g_t0), "dur", us(e->t1 - e->t0));
            if (put(f, o, first) != 0) return -1;
            ++*events;
        }
    return 0;
}

static void free_bufs(void) {
    for (tbuf *b = g_bufs, *nb; b; b = nb) {
        nb = b->next;
        for (chunk *c = b->head, *nc; c; c = nc) {
            nc = c->next;
            free(c);
        }
        free(b);
    }
    g_bufs = NULL;
    g_next_tid = 0;
}

kiln_status kiln_trace_stop(long long *events) {
    if (events) *events = 0;
    if (!g_path) return KILN_OK;
    atomic_store(&g_on, 0);
    size_t tl = strlen(g_path) + 32;
    char *tmp = malloc(tl);
    kiln_status st = KILN_OK;
    long long n = 0;
    FILE *f = NULL;
    if (tmp) snprintf(tmp, tl, "%s.tmp.%ld", g_path, (long)getpid());
    if (!tmp || !(f = fopen(tmp, "w"))) {
        st = kiln_fail(KILN_ERR_IO, "--trace %s: cannot write", g_path);
    } else {
        int first = 1, bad = fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [", f) < 0;
        pthread_mutex_lock(&g_mu);
        for (const tbuf *b = g_bufs; b && !bad; b = b->next) bad = write_thread(f, b, &first, &n) != 0;
        pthread_mutex_unlock(&g_mu);
        bad |= fputs("\n]}\n", f) < 0;
        bad |= fclose(f) != 0;
        if (bad || rename(tmp, g_path) != 0) {
            remove(tmp);
            st = kiln_fail(KILN_ERR_IO, "--trace %s: cannot write", g_path);
        }
    }
    long dropped = atomic_load(&g_dropped);
    if (st == KILN_OK && dropped > 0)
        kiln_log(KILN_LOG_WARN, "--trace %s: %ld spans beyond the first %d were not kept", g_path, dropped, MAX_EVENTS);
    free(tmp);
    pthread_mutex_lock(&g_mu);
    free_bufs();
    pthread_mutex_unlock(&g_mu);
    free(g_path);
    g_path = NULL;
    if (events) *events = n;
    return st;
}
