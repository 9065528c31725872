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
    uint64_t id; /* flows: the batch */
    char ph;     /* 'X' a span, 's' and 'f' a flow's start and end */
} event;

typedef struct chunk {
    event ev[CHUNK];
    int n;
    struct chunk *next;
} chunk;

/* names copied for spans whose name does not outlive the trace (a plan's step names):
 * by the caller's pointer, checked with strcmp (a later plan may reuse an address) */
#define NAMES 4096
typedef struct {
    const char *key;
    char *copy;
} name_slot;

typedef struct tbuf {
    int tid;
    char name[48];
    chunk *head, *tail;
    name_slot *names; /* NAMES slots, made on first use */
    struct tbuf *next;
} tbuf;

static atomic_int g_on, g_paused;
static atomic_long g_count, g_dropped;
static atomic_uint g_gen; /* which trace a thread's buffer belongs to */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static tbuf *g_bufs;
static int g_next_tid;
static double g_t0;
static char *g_path;
static _Thread_local tbuf *t_buf;
static _Thread_local unsigned t_gen; /* t_buf is freed with its trace: compare the generation, never t_buf's */

static _Thread_local int t_paused;

int kiln_trace_on(void) {
    return atomic_load_explicit(&g_on, memory_order_relaxed) && !atomic_load_explicit(&g_paused, memory_order_relaxed) &&
           !t_paused;
}

void kiln_trace_pause(int paused) { atomic_store(&g_paused, paused); }
void kiln_trace_pause_self(int paused) { t_paused = paused; }

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
    if (!atomic_load(&g_on)) return; /* named even while paused: its spans may come later */
    tbuf *b = my_buf();
    if (b) snprintf(b->name, sizeof b->name, "%s", name);
}

static event *next_event(tbuf **out) {
    if (!kiln_trace_on()) return NULL;
    if (atomic_fetch_add(&g_count, 1) >= MAX_EVENTS) {
        atomic_fetch_add(&g_dropped, 1);
        return NULL;
    }
    tbuf *b = my_buf();
    if (!b) return NULL;
    if (!b->tail || b->tail->n == CHUNK) {
        chunk *c = calloc(1, sizeof *c);
        if (!c) return NULL;
        if (b->tail) b->tail->next = c;
        else b->head = c;
        b->tail = c;
    }
    if (out) *out = b;
    return &b->tail->ev[b->tail->n++];
}

void kiln_trace_span(const char *name, const char *cat, double t0, double t1) {
    event *e = next_event(NULL);
    if (e) *e = (event){name, cat, t0, t1, 0, 'X'};
}

/* the thread's copy of name (NULL when out of memory or slots) */
static const char *copied(tbuf *b, const char *name) {
    if (!b->names && !(b->names = calloc(NAMES, sizeof *b->names))) return NULL;
    size_t h = ((uintptr_t)name >> 3) % NAMES;
    for (int probe = 0; probe < NAMES; probe++, h = (h + 1) % NAMES) {
        name_slot *n = &b->names[h];
        if (n->key == name && strcmp(n->copy, name) == 0) return n->copy;
        if (n->key && n->key != name) continue;
        char *c = strdup(name); /* a new name, or a reused address with another name */
        if (!c) return NULL;
        free(n->copy);
        *n = (name_slot){name, c};
        return c;
    }
    return NULL;
}

void kiln_trace_span_copy(const char *name, const char *cat, double t0, double t1) {
    tbuf *b = NULL;
    event *e = next_event(&b);
    if (!e) return;
    const char *c = copied(b, name);
    *e = (event){c ? c : "(span)", cat, t0, t1, 0, 'X'};
}

void kiln_trace_flow(int begin, uint64_t id, double t) {
    event *e = next_event(NULL);
    if (e) *e = (event){"batch", "flow", t, t, id, begin ? 's' : 'f'};
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
    atomic_store(&g_paused, 0);
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

/* a flow's end binds to the slice that encloses it (the step), its start to the loader's sample */
static json_t *flow_json(const event *e, int tid) {
    json_t *o = json_pack("{s:s,s:s,s:s,s:I,s:i,s:i,s:f}", "name", e->name, "cat", e->cat, "ph", e->ph == 's' ? "s" : "f",
                          "id", (json_int_t)e->id, "pid", 1, "tid", tid, "ts", us(e->t0 - g_t0));
    if (o && e->ph == 'f') json_object_set_new(o, "bp", json_string("e"));
    return o;
}

/* the events of one thread: its name (a metadata event), then its spans in microseconds */
static int write_thread(FILE *f, const tbuf *b, int *first, long long *events) {
    if (put(f, json_pack("{s:s,s:s,s:i,s:i,s:{s:s}}", "name", "thread_name", "ph", "M", "pid", 1, "tid", b->tid, "args",
                         "name", b->name), first) != 0)
        return -1;
    for (const chunk *c = b->head; c; c = c->next)
        for (int i = 0; i < c->n; i++) {
            const event *e = &c->ev[i];
            json_t *o = e->ph != 'X' ? flow_json(e, b->tid) : json_pack("{s:s,s:s,s:s,s:i,s:i,s:f,s:f}", "name", e->name, "cat", e->cat, "ph", "X", "pid", 1,
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
        for (int i = 0; b->names && i < NAMES; i++) free(b->names[i].copy);
        free(b->names);
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
        /* ts 0 on CLOCK_MONOTONIC: the ranks of one host (their own files, --trace with %r) line up on it */
        int first = 1, bad = fprintf(f, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"monotonic_s_at_ts0\": %.9f}, "
                                     "\"traceEvents\": [", g_t0) < 0;
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
