/* URL sources (internal/source.h) over libcurl: one ranged GET per read, a
 * pool of easy handles that each keep their connection alive, and a small
 * read-ahead: will_need queues ranges that a background thread (the pump)
 * fetches with curl_multi (MAX_FLIGHT requests at once, each asking for up to
 * MAX_PARTS ranges of one object: a multipart/byteranges answer) into a
 * bounded cache that reads take from (each range points into its answer,
 * a refcounted block; no copy per range). Requests go out in the order the
 * ranges were hinted: each starts at the earliest queued range and takes the
 * queued ranges of the same object after it.
 *
 * Connections: libcurl documents a shared connection cache (CURLSH with
 * CURL_LOCK_DATA_CONNECT) as unsupported between concurrent threads, so each
 * pooled easy handle keeps its own connection (reused by its next request)
 * and the read-ahead's multi handle keeps its own; DNS and TLS sessions are
 * shared, with locks. Failed requests (no connection, 5xx, 408, 429, a
 * timeout, a cut transfer) are tried again after 100, 200 and 400 ms; other
 * statuses (404, 403, ...) fail at once. Every error names the URL. */
#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "data/internal/http_header.h"
#include "data/internal/source.h"
#include "kiln/status.h"

#define MAX_FLIGHT 16                      /* read-ahead requests in flight */
#define MAX_PARTS 64                       /* ranges of one source in one read-ahead request */
#define GROUP_BYTES ((int64_t)4 << 20)     /* and their bytes */
#define CACHE_ENTRIES 8192                 /* ranges queued, in flight or fetched and not yet read */
#define CACHE_BYTES ((int64_t)64 << 20)
#define BUCKETS 16384                      /* the cache's hash of (source, offset): 2 x CACHE_ENTRIES */
#define PACE_US 500                        /* the pump's pause between polls while transfers run (see pace) */
#define TRIES 4                            /* one request and three retries */

typedef struct http_config {
    long connect_s, low_speed_s, low_speed_bytes;
    int64_t whole_max;                     /* largest object read whole from a server that ignores ranges */
    char *ca_file;                         /* certificates to trust for https (NULL: the system's) */
} http_config;

typedef struct http_source http_source;

/* a read-ahead request's answer; the ranges it brought point into it, and
 * it is kept for a later request when the last of them is dropped (no copy
 * per range, and no fresh pages of a large malloc per request) */
typedef struct block {
    struct block *next;                    /* among the spares */
    int refs;                              /* its request while in flight, and each range that points into it */
    int64_t cap;
    uint8_t data[];
} block;
#define SPARE_BLOCKS 32

/* one read-ahead range, in the client's list in the order hinted */
typedef enum { E_QUEUED, E_FLIGHT, E_DONE, E_FAILED } entry_state;
typedef struct entry {
    struct entry *prev, *next;
    struct entry *hnext;                   /* in its hash bucket */
    struct entry *qprev, *qnext;           /* queued: in the client's queue, in the order hinted */
    struct entry *sprev, *snext;           /* queued: in its source's queue, in the order hinted */
    http_source *src;                      /* NULL: its source was closed (freed when its transfer ends) */
    const void *key;                       /* the source it was hinted for, for the hash (never dereferenced) */
    int64_t off, len, size;
    block *blk;                            /* done: its bytes are data[0..len), in blk */
    const uint8_t *data;
    entry_state state;
    int readers;                           /* reads waiting for it or copying from it */
    int consumed;                          /* its last byte was read: dropped once no reader holds it */
    int slot;                              /* its pump request while in flight */
} entry;

/* a transfer's state, written by libcurl's callbacks */
typedef struct xfer {
    CURL *easy;
    uint8_t *dst;                          /* the range asked for goes here, cap bytes */
    int64_t cap, got;
    int accept_whole;                      /* the probe: a 200 (ranges ignored) is kept whole in `whole` */
    uint8_t *whole;
    int64_t whole_cap, whole_max;
    int overflow;                          /* more bytes came than asked for (or than whole_max) */
    int multipart;                         /* the answer is multipart/byteranges, with this boundary */
    char boundary[72];
    kiln_http_answer ans;
    char reason[64];
    char err[CURL_ERROR_SIZE];
} xfer;

struct kiln_http_client {
    http_config cfg;
    CURLSH *share;
    pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];
    pthread_mutex_t mu;                    /* the pool, the cache and the pump's state */
    pthread_cond_t done;                   /* a read-ahead transfer ended */
    pthread_cond_t paced;                  /* a reader waits: the pump's pause ends (CLOCK_MONOTONIC) */
    int waiting;                           /* readers waiting for a range in flight */
    block *spare;                          /* answers no range points into any more, for later requests */
    int n_spare;
    CURL **idle;                           /* easy handles for reads, each with its kept-alive connection */
    int n_idle, cap_idle;
    entry *head, *tail;
    entry *qhead, *qtail;                  /* the queued ranges, in the order hinted: the next request starts at qhead */
    entry *bucket[BUCKETS];
    int n_entries;
    int64_t cached_bytes;
    CURLM *multi;                          /* the pump's (its own connections) */
    CURL *pump_easy[MAX_FLIGHT];
    struct request {                       /* a pump transfer: one range, or several (one multipart answer) */
        entry *e[MAX_PARTS];
        int n;
        block *blk;                        /* the answer: one range, or a multipart body */
        xfer x;
    } req[MAX_FLIGHT];
    int pump_free[MAX_FLIGHT], n_pump_free;
    pthread_t pump;
    int pump_on, stop;
    int warned_whole;
};

struct http_source {
    kiln_source base;
    kiln_http_client *c;
    char *url;
    uint8_t *whole;                        /* the object, when the server ignores ranges */
    int single;                            /* read-ahead asks one range per request (several failed once) */
    entry *qhead, *qtail;                  /* its queued ranges, in the order hinted: a request's parts */
};

/* ---------- one request ---------- */

static void xfer_reset(xfer *x) {
    x->got = 0;
    x->overflow = x->multipart = 0;
    memset(&x->ans, 0, sizeof x->ans);
    x->reason[0] = x->err[0] = 0;
}

static size_t on_header(char *line, size_t size, size_t n, void *user) {
    xfer *x = user;
    size_t len = size * n;
    const char *v;
    size_t vn;
    long status;
    if (kiln_http_status_line(line, len, &status, x->reason, sizeof x->reason)) {
        x->ans.have_range = x->multipart = 0; /* a new answer (after a redirect or a 100) */
    } else if (kiln_http_header_value(line, len, "Content-Range", &v, &vn)) {
        x->ans.have_range = kiln_http_parse_content_range(v, vn, &x->ans.first, &x->ans.last, &x->ans.total);
    } else if (kiln_http_header_value(line, len, "Content-Type", &v, &vn)) {
        x->multipart = kiln_http_multipart_boundary(v, vn, x->boundary, sizeof x->boundary);
    }
    return len;
}

/* the whole object (a server that ignores ranges) into x->whole, up to whole_max */
static int keep_whole(xfer *x, const char *data, size_t len) {
    if (x->got == 0) {
        curl_off_t cl = -1;
        curl_easy_getinfo(x->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        if (cl > x->whole_max) return x->overflow = 1, 0;
    }
    if (x->got + (int64_t)len > x->whole_max) return x->overflow = 1, 0;
    if (x->got + (int64_t)len > x->whole_cap) {
        int64_t want = 2 * (x->got + (int64_t)len);
        if (want > x->whole_max) want = x->whole_max;
        uint8_t *p = realloc(x->whole, (size_t)want);
        if (!p) return 0;
        x->whole = p;
        x->whole_cap = want;
    }
    memcpy(x->whole + x->got, data, len);
    x->got += (int64_t)len;
    return 1;
}

static size_t on_body(char *data, size_t size, size_t n, void *user) {
    xfer *x = user;
    size_t len = size * n;
    long st = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &st);
    if (st == 200 && x->accept_whole) return keep_whole(x, data, len) ? len : 0;
    if (st != 206) return 0; /* the status says what went wrong; its body is not kept */
    if (x->got + (int64_t)len > x->cap) return x->overflow = 1, 0;
    memcpy(x->dst + x->got, data, len);
    x->got += (int64_t)len;
    return len;
}

static void setup(CURL *e, kiln_http_client *c, const char *url, const char *range, xfer *x) {
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_RANGE, range);
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->err);
    curl_easy_setopt(e, CURLOPT_SHARE, c->share);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, c->cfg.connect_s);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, c->cfg.low_speed_s);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, c->cfg.low_speed_bytes);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "kiln");
    if (c->cfg.ca_file) curl_easy_setopt(e, CURLOPT_CAINFO, c->cfg.ca_file);
    x->easy = e;
}

static int curl_retryable(CURLcode rc) {
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return 1;
    default:
        return 0;
    }
}

typedef enum { R_OK, R_RETRY, R_FAIL } outcome;

/* What a finished transfer gave: R_OK when it is the range [off, off + len)
 * (or, for the probe, a whole object or an empty one), else why not in msg. */
static outcome judge(xfer *x, CURLcode rc, int64_t off, int64_t len, int64_t size, char *msg, size_t cap) {
    long st = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &st);
    x->ans.status = st;
    x->ans.received = x->got;
    if (x->accept_whole && st == 416 && x->ans.have_range && x->ans.first < 0 && x->ans.total == 0) return R_OK;
    if (st >= 300 || (st > 0 && st < 200)) {
        snprintf(msg, cap, "HTTP status %ld%s%s", st, x->reason[0] ? " " : "", x->reason);
        return kiln_http_status_retryable(st) ? R_RETRY : R_FAIL;
    }
    if (x->overflow) {
        if (st == 200 && x->accept_whole)
            snprintf(msg, cap, "the server ignores Range requests and the object is larger than %lld MiB, the most "
                     "kiln reads whole (KILN_HTTP_WHOLE_MAX_MB); serve it from a server that honours ranges",
                     (long long)(x->whole_max >> 20));
        else
            snprintf(msg, cap, "the server sent more than the %lld bytes asked for", (long long)len);
        return R_FAIL;
    }
    if (rc != CURLE_OK) {
        snprintf(msg, cap, "%s (curl error %d)", x->err[0] ? x->err : curl_easy_strerror(rc), (int)rc);
        return curl_retryable(rc) ? R_RETRY : R_FAIL;
    }
    if (st == 200 && x->accept_whole) return R_OK;
    return kiln_http_check_range(&x->ans, off, len, size, msg, cap) ? R_FAIL : R_OK;
}

static CURL *take_easy(kiln_http_client *c) {
    pthread_mutex_lock(&c->mu);
    CURL *e = c->n_idle ? c->idle[--c->n_idle] : NULL;
    pthread_mutex_unlock(&c->mu);
    return e ? e : curl_easy_init();
}

static void give_easy(kiln_http_client *c, CURL *e) {
    pthread_mutex_lock(&c->mu);
    if (c->n_idle == c->cap_idle) {
        int cap = c->cap_idle ? 2 * c->cap_idle : 8;
        CURL **p = realloc(c->idle, (size_t)cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&c->mu);
            curl_easy_cleanup(e);
            return;
        }
        c->idle = p;
        c->cap_idle = cap;
    }
    c->idle[c->n_idle++] = e;
    pthread_mutex_unlock(&c->mu);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* bytes [off, off + len) of the URL into x (the probe: len 1, accept_whole),
 * tried again after 100, 200, 400 ms when the failure may pass */
static kiln_status transfer(kiln_http_client *c, const char *url, int64_t off, int64_t len, int64_t size, xfer *x) {
    char range[48], msg[320];
    snprintf(range, sizeof range, "%lld-%lld", (long long)off, (long long)(off + len - 1));
    CURL *e = take_easy(c);
    if (!e) return kiln_fail(KILN_ERR_NOMEM, "%s: no memory for a libcurl handle", url);
    outcome o = R_FAIL;
    int t;
    for (t = 1; t <= TRIES; t++) {
        xfer_reset(x);
        setup(e, c, url, range, x);
        CURLcode rc = curl_easy_perform(e);
        o = judge(x, rc, off, len, size, msg, sizeof msg);
        if (o != R_RETRY || t == TRIES) break;
        sleep_ms(100L << (t - 1));
    }
    give_easy(c, e);
    if (o == R_OK) return KILN_OK;
    char tries[32] = "";
    if (t > 1) snprintf(tries, sizeof tries, " (%d tries)", t);
    if (size < 0) return kiln_fail(KILN_ERR_IO, "%s: %s%s", url, msg, tries); /* the probe at open */
    return kiln_fail(KILN_ERR_IO, "%s: reading bytes %s: %s%s", url, range, msg, tries);
}

/* ---------- the read-ahead: a cache of hinted ranges, fetched by the pump ---------- */

static unsigned bucket_of(const void *key, int64_t off) {
    uint64_t h = ((uint64_t)(uintptr_t)key ^ (uint64_t)off) * 0x9E3779B97F4A7C15ull;
    return (unsigned)(h >> 40) & (BUCKETS - 1);
}

/* the entry of `hs` hinted at `off` that holds [off, off + len), any state;
 * under c->mu (a read starting inside a hinted range is not looked for:
 * the shard reader reads whole records) */
static entry *find(kiln_http_client *c, const http_source *hs, int64_t off, int64_t len) {
    for (entry *e = c->bucket[bucket_of(hs, off)]; e; e = e->hnext)
        if (e->src == hs && e->off == off && len <= e->len) return e;
    return NULL;
}

/* a block of at least cap bytes, held once; NULL when out of memory. Under c->mu. */
static block *block_take(kiln_http_client *c, int64_t cap) {
    block **p = &c->spare;
    while (*p && (*p)->cap < cap) p = &(*p)->next;
    if (!*p) p = &c->spare; /* none large enough: the first spare grows */
    block *b = *p;
    if (b) {
        *p = b->next;
        c->n_spare--;
    }
    if (!b || b->cap < cap) {
        block *g = realloc(b, sizeof *g + (size_t)cap);
        if (!g) {
            free(b);
            return NULL;
        }
        b = g;
        b->cap = cap;
    }
    b->refs = 1;
    return b;
}

static void block_drop(kiln_http_client *c, block *b) {
    if (!b || --b->refs > 0) return;
    if (c->n_spare < SPARE_BLOCKS) {
        b->next = c->spare;
        c->spare = b;
        c->n_spare++;
    } else {
        free(b);
    }
}

/* a queued range joins the client's queue and its source's, at their ends */
static void enqueue(kiln_http_client *c, entry *e) {
    http_source *hs = e->src;
    e->qprev = c->qtail, e->qnext = NULL;
    if (c->qtail) c->qtail->qnext = e;
    else c->qhead = e;
    c->qtail = e;
    e->sprev = hs->qtail, e->snext = NULL;
    if (hs->qtail) hs->qtail->snext = e;
    else hs->qhead = e;
    hs->qtail = e;
}

/* a queued range leaves both queues (it goes in flight, fails or is dropped) */
static void dequeue(kiln_http_client *c, entry *e) {
    http_source *hs = e->src;
    if (e->qprev) e->qprev->qnext = e->qnext;
    else c->qhead = e->qnext;
    if (e->qnext) e->qnext->qprev = e->qprev;
    else c->qtail = e->qprev;
    if (e->sprev) e->sprev->snext = e->snext;
    else hs->qhead = e->snext;
    if (e->snext) e->snext->sprev = e->sprev;
    else hs->qtail = e->sprev;
}

static void unlink_free(kiln_http_client *c, entry *e) {
    if (e->state == E_QUEUED) dequeue(c, e);
    entry **p = &c->bucket[bucket_of(e->key, e->off)];
    while (*p != e) p = &(*p)->hnext;
    *p = e->hnext;
    if (e->prev) e->prev->next = e->next;
    else c->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else c->tail = e->prev;
    c->n_entries--;
    c->cached_bytes -= e->len;
    block_drop(c, e->blk);
    free(e);
}

/* room for one more range of len bytes: the oldest fetched ranges nobody
 * reads are dropped; 0 when the rest are all queued or in flight */
static int make_room(kiln_http_client *c, int64_t len) {
    entry *e = c->head;
    while (e && (c->n_entries >= CACHE_ENTRIES || c->cached_bytes + len > CACHE_BYTES)) {
        entry *next = e->next;
        if ((e->state == E_DONE || e->state == E_FAILED) && e->readers == 0) unlink_free(c, e);
        e = next;
    }
    return c->n_entries < CACHE_ENTRIES && c->cached_bytes + len <= CACHE_BYTES;
}

/* e and the queued ranges of its source after it (up to MAX_PARTS and
 * GROUP_BYTES) into request r, marked in flight: "Range: bytes=a-b,c-d" is
 * answered with a multipart/byteranges body. 0 when out of memory (e is
 * then FAILED: its reader fetches it alone). Under c->mu. */
static int gather(kiln_http_client *c, entry *e, int slot, struct request *r, char *range, size_t room) {
    int64_t bytes = 0;
    r->n = 0;
    for (entry *f = e; f && r->n < (e->src->single ? 1 : MAX_PARTS); f = f->snext) {
        if (r->n && bytes + f->len > GROUP_BYTES) continue;
        r->e[r->n++] = f;
        bytes += f->len;
    }
    size_t at = 0;
    for (int k = 0; k < r->n; k++)
        at += (size_t)snprintf(range + at, room - at, "%s%lld-%lld", k ? "," : "", (long long)r->e[k]->off,
                               (long long)(r->e[k]->off + r->e[k]->len - 1));
    /* a part's headers are ~100 bytes (boundary, type, range) */
    int64_t cap = r->n == 1 ? e->len : bytes + 512 * (int64_t)r->n + 1024;
    if (!(r->blk = block_take(c, cap))) {
        dequeue(c, e);
        e->state = E_FAILED;
        return 0;
    }
    xfer_reset(&r->x);
    r->x.dst = r->blk->data;
    r->x.cap = cap;
    for (int k = 0; k < r->n; k++) {
        dequeue(c, r->e[k]);
        r->e[k]->slot = slot;
        r->e[k]->state = E_FLIGHT;
    }
    return 1;
}

/* e's group onto a free pump slot; under c->mu */
static void start(kiln_http_client *c, entry *e) {
    int slot = c->pump_free[--c->n_pump_free];
    struct request *r = &c->req[slot];
    char range[MAX_PARTS * 42];
    if (!gather(c, e, slot, r, range, sizeof range)) {
        c->pump_free[c->n_pump_free++] = slot;
        return;
    }
    setup(c->pump_easy[slot], c, e->src->url, range, &r->x);
    curl_easy_setopt(c->pump_easy[slot], CURLOPT_PRIVATE, (char *)r);
    curl_multi_add_handle(c->multi, c->pump_easy[slot]);
}

/* e's bytes in the parts of a multipart answer (a part may hold more than e) */
static const uint8_t *from_parts(const entry *e, const kiln_http_part *p, int np) {
    for (int k = 0; k < np; k++)
        if (p[k].first <= e->off && e->off + e->len - 1 <= p[k].last && (p[k].total < 0 || p[k].total == e->size))
            return p[k].data + (e->off - p[k].first);
    return NULL;
}

/* a request's transfer ended; under c->mu. A range it did not bring is left
 * to its reader, which fetches it alone with retries (and names the error). */
static void settle(kiln_http_client *c, struct request *r, CURLcode rc) {
    xfer *x = &r->x;
    char msg[320];
    kiln_http_part parts[MAX_PARTS];
    int np = -1;
    long st = 0;
    if (r->n == 1) {
        np = judge(x, rc, r->e[0]->off, r->e[0]->len, r->e[0]->size, msg, sizeof msg) == R_OK ? 0 : -1;
    } else if (curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &st) == CURLE_OK && st == 206 && rc == CURLE_OK) {
        if (x->multipart) np = kiln_http_parse_multipart(r->blk->data, (size_t)x->got, x->boundary, parts, MAX_PARTS);
        else if (x->ans.have_range && x->ans.last - x->ans.first + 1 == x->got)
            np = 1, parts[0] = (kiln_http_part){x->ans.first, x->ans.last, x->ans.total, r->blk->data};
    }
    for (int k = 0; k < r->n; k++) {
        entry *e = r->e[k];
        e->data = np == 0 ? r->blk->data : np > 0 ? from_parts(e, parts, np) : NULL;
        int ok = e->data != NULL;
        e->state = ok ? E_DONE : E_FAILED;
        if (ok) e->blk = r->blk, r->blk->refs++;
        /* a server that answers several ranges with fewer, or with the whole object (a transfer that failed
         * says nothing about that): one range per request from now on */
        if (!ok && e->src && ((st == 206 && rc == CURLE_OK) || st == 200)) e->src->single = 1;
    }
    for (int k = 0; k < r->n; k++)
        if (!r->e[k]->src) unlink_free(c, r->e[k]);
    block_drop(c, r->blk);
    r->blk = NULL;
    pthread_cond_broadcast(&c->done);
}

static void finish(kiln_http_client *c, struct request *r, CURLcode rc) {
    settle(c, r, rc);
    c->pump_free[c->n_pump_free++] = (int)(r - c->req);
}

/* A server such as nginx writes each part of a multipart answer as its own
 * TCP segment, and a poll wakes the pump for each: on loopback at 2 workers
 * that was about one wakeup per image, and the context switches cost more
 * CPU than the decoding they fed. While transfers run and no reader waits,
 * the pump pauses PACE_US between polls so each wakeup takes many parts; a
 * reader that must wait ends the pause at once. */
static void pace(kiln_http_client *c) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_nsec += PACE_US * 1000L;
    if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&c->mu);
    while (!c->stop && c->waiting == 0 && pthread_cond_timedwait(&c->paced, &c->mu, &t) == 0) {
    }
    pthread_mutex_unlock(&c->mu);
}

static void *pump(void *arg) {
    kiln_http_client *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        while (c->qhead && c->n_pump_free > 0) start(c, c->qhead);
        pthread_mutex_unlock(&c->mu);
        int running = 0, left = 0;
        curl_multi_perform(c->multi, &running);
        CURLMsg *m;
        while ((m = curl_multi_info_read(c->multi, &left))) {
            if (m->msg != CURLMSG_DONE) continue;
            CURL *easy = m->easy_handle;
            CURLcode rc = m->data.result;
            char *r = NULL;
            curl_easy_getinfo(easy, CURLINFO_PRIVATE, &r);
            curl_multi_remove_handle(c->multi, easy);
            pthread_mutex_lock(&c->mu);
            finish(c, (struct request *)r, rc);
            pthread_mutex_unlock(&c->mu);
        }
        curl_multi_poll(c->multi, NULL, 0, 1000, NULL);
        if (running) pace(c);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < MAX_FLIGHT; i++) curl_multi_remove_handle(c->multi, c->pump_easy[i]);
    return NULL;
}

/* A reader met its range still queued (the pump's requests are all in
 * flight): it fetches it now, with the queued ranges of the same source
 * after it, in one request on its own handle. Under c->mu (released while
 * the transfer runs; e is held by the caller's readers count). */
static void fetch_group(kiln_http_client *c, entry *e) {
    struct request *r = calloc(1, sizeof *r); /* zeroed: no whole-object mode (that is the probe's) */
    char range[MAX_PARTS * 42];
    if (!r || !gather(c, e, -1, r, range, sizeof range)) {
        if (e->state == E_QUEUED) dequeue(c, e);
        e->state = E_FAILED;
        free(r);
        return;
    }
    const char *url = e->src->url; /* the source stays open while it is read */
    pthread_mutex_unlock(&c->mu);
    CURL *easy = take_easy(c);
    CURLcode rc = CURLE_OUT_OF_MEMORY;
    if (easy) {
        setup(easy, c, url, range, &r->x);
        rc = curl_easy_perform(easy);
    }
    pthread_mutex_lock(&c->mu);
    r->x.easy = easy;
    settle(c, r, rc);
    pthread_mutex_unlock(&c->mu);
    if (easy) give_easy(c, easy);
    pthread_mutex_lock(&c->mu);
    free(r);
}

/* [off, off + len) from the read-ahead: 1 when it was there (waiting while
 * it is in flight, fetching it with its neighbours while it is queued), 0
 * when the caller must fetch it alone */
static int take_cached(http_source *hs, int64_t off, int64_t len, void *dst) {
    kiln_http_client *c = hs->c;
    int got = 0;
    pthread_mutex_lock(&c->mu);
    entry *e = find(c, hs, off, len);
    if (e) {
        e->readers++;
        if (e->state == E_QUEUED) fetch_group(c, e);
        if (e->state == E_FLIGHT) {
            c->waiting++;
            pthread_cond_signal(&c->paced);
            while (e->state == E_FLIGHT) pthread_cond_wait(&c->done, &c->mu);
            c->waiting--;
        }
        if (e->state == E_DONE) { /* copied without the lock: the reader's hold keeps e and its block */
            pthread_mutex_unlock(&c->mu);
            memcpy(dst, e->data + (off - e->off), (size_t)len);
            pthread_mutex_lock(&c->mu);
            got = 1;
            if (off + len == e->off + e->len) e->consumed = 1;
        }
        e->readers--;
        if (e->readers == 0 && (e->consumed || e->state == E_FAILED)) unlink_free(c, e);
    }
    pthread_mutex_unlock(&c->mu);
    return got;
}

/* ---------- the source ---------- */

static kiln_status http_read(kiln_source *s, int64_t off, int64_t len, void *dst) {
    http_source *hs = (http_source *)s;
    if (off < 0 || len < 0 || off > s->size - len)
        return kiln_fail(KILN_ERR_FORMAT, "%s: bytes %lld..%lld are outside the object (%lld bytes)", hs->url,
                         (long long)off, (long long)(off + len), (long long)s->size);
    if (len == 0) return KILN_OK;
    if (hs->whole) {
        memcpy(dst, hs->whole + off, (size_t)len);
        return KILN_OK;
    }
    if (take_cached(hs, off, len, dst)) return KILN_OK;
    xfer x = {.dst = dst, .cap = len};
    return transfer(hs->c, hs->url, off, len, s->size, &x);
}

static void http_will_need(kiln_source *s, int n, const int64_t *off, const int64_t *len) {
    http_source *hs = (http_source *)s;
    kiln_http_client *c = hs->c;
    if (hs->whole) return;
    int added = 0;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < n; i++) {
        if (off[i] < 0 || len[i] <= 0 || off[i] > s->size - len[i] || find(c, hs, off[i], len[i])) continue;
        if (!make_room(c, len[i])) break;
        entry *e = calloc(1, sizeof *e);
        if (!e) break;
        *e = (entry){.prev = c->tail, .src = hs, .key = hs, .off = off[i], .len = len[i], .size = s->size,
                     .state = E_QUEUED};
        unsigned b = bucket_of(hs, off[i]);
        e->hnext = c->bucket[b];
        c->bucket[b] = e;
        if (c->tail) c->tail->next = e;
        else c->head = e;
        c->tail = e;
        enqueue(c, e);
        c->n_entries++;
        c->cached_bytes += len[i];
        added++;
    }
    if (added && !c->pump_on) {
        if (pthread_create(&c->pump, NULL, pump, c) == 0) c->pump_on = 1;
        else /* no read-ahead: the reads fetch for themselves */
            while (c->head) unlink_free(c, c->head);
    }
    pthread_mutex_unlock(&c->mu);
    if (added) curl_multi_wakeup(c->multi);
}

static void http_close(kiln_source *s) {
    http_source *hs = (http_source *)s;
    kiln_http_client *c = hs->c;
    pthread_mutex_lock(&c->mu);
    for (entry *e = c->head, *next; e; e = next) {
        next = e->next;
        if (e->src != hs) continue;
        if (e->state == E_FLIGHT) e->src = NULL; /* the pump frees it when its transfer ends */
        else unlink_free(c, e);
    }
    pthread_mutex_unlock(&c->mu);
    free(hs->whole);
    free(hs->url);
    free(hs);
}

static const kiln_source_ops http_ops = {http_read, http_will_need, http_close};

static int is_url(const char *name) {
    return name && (strncasecmp(name, "http://", 7) == 0 || strncasecmp(name, "https://", 8) == 0);
}

/* the size, and whether ranges are honoured, from a GET of byte 0 */
static kiln_status probe(http_source *hs) {
    kiln_http_client *c = hs->c;
    uint8_t byte;
    xfer x = {.dst = &byte, .cap = 1, .accept_whole = 1, .whole_max = c->cfg.whole_max};
    kiln_status st = transfer(c, hs->url, 0, 1, -1, &x);
    if (st != KILN_OK) {
        free(x.whole);
        return st;
    }
    if (x.ans.status == 200) {
        hs->whole = x.whole ? x.whole : malloc(1);
        if (!hs->whole) return kiln_fail(KILN_ERR_NOMEM, "%s: no memory", hs->url);
        hs->base.size = x.got;
        hs->base.map = hs->whole;
        pthread_mutex_lock(&c->mu);
        int warn = !c->warned_whole;
        c->warned_whole = 1;
        pthread_mutex_unlock(&c->mu);
        if (warn)
            kiln_log(KILN_LOG_WARN, "%s: the server ignores Range requests, so each object is read whole into memory "
                     "(%lld bytes here); a server that honours ranges reads only the records needed", hs->url,
                     (long long)x.got);
        return KILN_OK;
    }
    hs->base.size = x.ans.status == 416 ? 0 : x.ans.total;
    if (hs->base.size < 0)
        return kiln_fail(KILN_ERR_IO, "%s: the server did not say the object's size (Content-Range: bytes 0-0/*)",
                         hs->url);
    return KILN_OK;
}

kiln_status kiln_source_open_url(kiln_http_client *c, const char *url, kiln_source **out) {
    *out = NULL;
    if (!is_url(url)) return kiln_fail(KILN_ERR_INVALID_ARG, "%s: not an http:// or https:// URL", url);
    http_source *hs = calloc(1, sizeof *hs);
    if (!hs || !(hs->url = strdup(url))) {
        free(hs);
        return kiln_fail(KILN_ERR_NOMEM, "%s: no memory", url);
    }
    hs->c = c;
    hs->base.ops = &http_ops;
    hs->base.name = hs->url;
    kiln_status st = probe(hs);
    if (st != KILN_OK) {
        http_close(&hs->base);
        return st;
    }
    *out = &hs->base;
    return KILN_OK;
}

/* ---------- the client ---------- */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;
static void global_init(void) { global_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static void share_lock(CURL *h, curl_lock_data d, curl_lock_access a, void *user) {
    (void)h, (void)a;
    pthread_mutex_lock(&((kiln_http_client *)user)->share_mu[d]);
}
static void share_unlock(CURL *h, curl_lock_data d, void *user) {
    (void)h;
    pthread_mutex_unlock(&((kiln_http_client *)user)->share_mu[d]);
}

/* an environment value in [lo, hi], else `def` (with a warning when it is set but wrong) */
static long env_long(const char *name, long def, long lo, long hi) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) {
        kiln_log(KILN_LOG_WARN, "%s=%s is not a whole number in %ld..%ld; using %ld", name, v, lo, hi, def);
        return def;
    }
    return x;
}

kiln_status kiln_http_client_new(kiln_http_client **out) {
    *out = NULL;
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return kiln_fail(KILN_ERR_IO, "libcurl could not start: %s", curl_easy_strerror(global_rc));
    kiln_http_client *c = calloc(1, sizeof *c);
    if (!c) return kiln_fail(KILN_ERR_NOMEM, "no memory for an HTTP client");
    long t = env_long("KILN_HTTP_TIMEOUT", 0, 1, 3600);
    c->cfg = (http_config){.connect_s = t ? t : 10, .low_speed_s = t ? t : 30, .low_speed_bytes = 1024,
                           .whole_max = (int64_t)env_long("KILN_HTTP_WHOLE_MAX_MB", 256, 0, 1 << 20) << 20};
    const char *ca = getenv("KILN_HTTP_CA_FILE"); /* a private CA or a self-signed server */
    if (ca && *ca && !(c->cfg.ca_file = strdup(ca))) {
        free(c);
        return kiln_fail(KILN_ERR_NOMEM, "no memory for an HTTP client");
    }
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++) pthread_mutex_init(&c->share_mu[i], NULL);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->done, NULL);
    pthread_condattr_t ca_mono;
    pthread_condattr_init(&ca_mono);
    pthread_condattr_setclock(&ca_mono, CLOCK_MONOTONIC);
    pthread_cond_init(&c->paced, &ca_mono);
    pthread_condattr_destroy(&ca_mono);
    c->share = curl_share_init();
    c->multi = curl_multi_init();
    int ok = c->share && c->multi;
    for (int i = 0; i < MAX_FLIGHT && ok; i++) {
        ok = (c->pump_easy[i] = curl_easy_init()) != NULL;
        c->pump_free[c->n_pump_free++] = i;
    }
    if (ok) {
        curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock);
        curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
        curl_share_setopt(c->share, CURLSHOPT_USERDATA, c);
        curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
        curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    }
    if (!ok) {
        kiln_http_client_free(c);
        return kiln_fail(KILN_ERR_NOMEM, "no memory for libcurl's handles");
    }
    /* The pump starts here, on the thread that opens the dataset (the
     * training thread), and so inherits its scheduling: above the loader's
     * workers (nice 10, or one real-time priority below), so a range arrives
     * while they decode instead of after. If it cannot start now, the first
     * will_need tries again. */
    if (pthread_create(&c->pump, NULL, pump, c) == 0) c->pump_on = 1;
    *out = c;
    return KILN_OK;
}

void kiln_http_client_free(kiln_http_client *c) {
    if (!c) return;
    if (c->pump_on) {
        pthread_mutex_lock(&c->mu);
        c->stop = 1;
        pthread_cond_signal(&c->paced);
        pthread_mutex_unlock(&c->mu);
        curl_multi_wakeup(c->multi);
        pthread_join(c->pump, NULL);
    }
    while (c->head) unlink_free(c, c->head);
    for (int i = 0; i < MAX_FLIGHT; i++) {
        block_drop(c, c->req[i].blk); /* a request still in flight when the pump stopped */
        if (c->pump_easy[i]) curl_easy_cleanup(c->pump_easy[i]);
    }
    while (c->spare) {
        block *b = c->spare;
        c->spare = b->next;
        free(b);
    }
    for (int i = 0; i < c->n_idle; i++) curl_easy_cleanup(c->idle[i]);
    free(c->idle);
    if (c->multi) curl_multi_cleanup(c->multi);
    if (c->share) curl_share_cleanup(c->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++) pthread_mutex_destroy(&c->share_mu[i]);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->done);
    pthread_cond_destroy(&c->paced);
    free(c->cfg.ca_file);
    free(c);
}
