/* Mixed precision on the cpu: how a matmul-class step (conv2d, linear,
 * matmul, bmm) makes its oneDNN object in the precision the autocast pass
 * gave its node. fp32 and bf16 are made as asked; a bf16 object oneDNN cannot
 * make here (no bf16 kernels without AVX-512 in oneDNN 2.6) is emulated, with
 * a warning: its operands rounded to bf16 on fp32 kernels, so --precision bf16
 * gives the same numbers on every CPU. `auto` makes the object both
 * ways on the step's real shape, times every direction it will run (forward,
 * and the backward ones a training plan needs) on scratch data, and keeps
 * the faster: some CPUs run bf16 dot products at half the fp32 rate, others
 * at twice it, and the conversions cost the same everywhere, so only a
 * measurement can say. Decisions are remembered for the process by shape,
 * so the layers of a model that repeat a shape are timed once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backends/cpu/internal/cpu.h"
#include "kernels/internal/dnnl_ops.h"
#include "kiln/alloc.h"

#define MAX_REMEMBERED 512
#define BUDGET_S 30.0 /* the process's timing budget: after it, auto means fp32 */

typedef struct {
    char key[320];
    char first[48]; /* the node timed */
    int bf16;
    double us[2]; /* fp32, bf16 */
} remembered;

static remembered table[MAX_REMEMBERED];
static int nremembered;
static double spent_s;
static int emulated; /* steps whose bf16 is emulated, this process: the first one warns */

/* the step's shapes, strides, epilogue and backward directions: what its object depends on */
static void key_of(const kiln_step *s, char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len, "%s e%d", kiln_op_name(s->op), s->epilogue);
    for (int w = 0; w < KILN_BWD_WORDS && o < len; w++) o += (size_t)snprintf(buf + o, len - o, " %llx", (unsigned long long)s->bwd_ops[w]);
    for (int k = 0; k < s->nin + s->nout && o < len; k++) {
        const kiln_tdesc *t = k < s->nin ? &s->in[k] : &s->out[k - s->nin];
        o += (size_t)snprintf(buf + o, len - o, " %s%d:", t->data || k < s->nin ? "" : "-", t->layout);
        for (int d = 0; d < t->ndim && o < len; d++)
            o += (size_t)snprintf(buf + o, len - o, "%lldx%lld,", (long long)t->shape[d], (long long)t->stride[d]);
    }
}

static const remembered *lookup(const char *key) {
    for (int i = 0; i < nremembered; i++)
        if (!strcmp(table[i].key, key)) return &table[i];
    return NULL;
}

typedef struct {
    float *buf[KILN_CPU_PREC_BUFS];
    void *ws;
    size_t ws_bytes;
} scratch;

static void scratch_free(scratch *sc) {
    for (int i = 0; i < KILN_CPU_PREC_BUFS; i++) kiln_free(sc->buf[i]);
    kiln_free(sc->ws);
}

/* buffers as large as the step's largest tensor, random in [-1, 1) (never zeros: no shortcut is timed) */
static kiln_status scratch_make(const kiln_step *s, scratch *sc) {
    int64_t most = 1;
    for (int k = 0; k < s->nin + s->nout; k++) {
        int64_t n = kiln_tdesc_span(k < s->nin ? &s->in[k] : &s->out[k - s->nin]);
        if (n > most) most = n;
    }
    uint32_t r = 0x9e3779b9u;
    for (int i = 0; i < KILN_CPU_PREC_BUFS; i++) {
        if (!(sc->buf[i] = kiln_alloc((size_t)most * sizeof(float)))) return kiln_fail(KILN_ERR_NOMEM, "autocast: out of memory");
        for (int64_t j = 0; j < most; j++) {
            r = r * 1664525u + 1013904223u;
            sc->buf[i][j] = (float)(r >> 8) * (2.0f / 16777216.0f) - 1.0f;
        }
    }
    return KILN_OK;
}

static kiln_status scratch_ws(scratch *sc, size_t ws) {
    if (ws <= sc->ws_bytes) return KILN_OK;
    kiln_free(sc->ws);
    sc->ws_bytes = 0;
    if (!(sc->ws = kiln_alloc(ws))) return kiln_fail(KILN_ERR_NOMEM, "autocast: out of memory");
    memset(sc->ws, 0, ws);
    sc->ws_bytes = ws;
    return KILN_OK;
}

/* Makes the object both ways and times one call of all its directions in turn, fp32 then bf16, round
 * after round (the first a warm-up; up to 5 timed, fewer once 0.3 s are spent), so a machine busy for a
 * moment slows both alike; the best call of each, in microseconds (-1: that precision cannot be made or
 * run here). Keeps neither object. */
static kiln_status measure(kiln_step *s, const kiln_prep *p, const kiln_cpu_prec_ops *ops, double us[2]) {
    scratch sc = {0};
    void *obj[2] = {NULL, NULL};
    double best[2] = {1e30, 1e30};
    kiln_status st = scratch_make(s, &sc);
    for (int b = 0; b < 2 && st == KILN_OK; b++) {
        if (ops->make(s, p, b ? KILN_DN_BF16 : KILN_DN_FP32) != KILN_OK) continue; /* no bf16 implementation here */
        obj[b] = s->kobj;
        st = scratch_ws(&sc, ops->workspace(s));
    }
    double start = kiln_host_now();
    for (int round = 0; round < 6 && st == KILN_OK; round++) {
        for (int b = 0; b < 2; b++) {
            if (!obj[b]) continue;
            s->kobj = obj[b];
            double t0 = kiln_host_now();
            if (ops->call(s, sc.buf, sc.ws) != KILN_OK) best[b] = -1e30; /* never chosen */
            double t = kiln_host_now() - t0;
            if (round > 0 && t < best[b]) best[b] = t;
        }
        if (round >= 1 && kiln_host_now() - start > 0.3) break; /* a large layer (or a busy machine): fewer rounds */
    }
    for (int b = 0; b < 2; b++) {
        us[b] = obj[b] && best[b] > 0 ? best[b] * 1e6 : -1;
        if (!obj[b]) continue;
        s->kobj = obj[b];
        ops->release(s);
    }
    s->kobj = NULL;
    s->owns_kobj = 0;
    scratch_free(&sc);
    if (st == KILN_OK && us[0] < 0) st = kiln_fail(KILN_ERR_BACKEND, "autocast: the fp32 kernel would not run");
    return st;
}

static kiln_status decide(kiln_step *s, const kiln_prep *p, const kiln_cpu_prec_ops *ops) {
    char key[320];
    key_of(s, key, sizeof key);
    const remembered *r = lookup(key);
    if (r) {
        s->precision = r->bf16 ? KILN_PRECISION_BF16 : KILN_PRECISION_FP32;
        kiln_log(KILN_LOG_INFO, "autocast: %s %s (as %s, of the same shape)", s->name, kiln_precision_name(s->precision),
                 r->first);
        return KILN_OK;
    }
    if (spent_s >= BUDGET_S) {
        s->precision = KILN_PRECISION_FP32;
        kiln_log(KILN_LOG_WARN, "autocast: %s fp32 untimed (the process's %.0f s timing budget is spent)", s->name, BUDGET_S);
        return KILN_OK;
    }
    double us[2], t0 = kiln_host_now();
    kiln_status st = measure(s, p, ops, us);
    spent_s += kiln_host_now() - t0;
    if (st != KILN_OK) return st;
    int bf16 = us[1] >= 0 && us[1] < us[0];
    s->precision = bf16 ? KILN_PRECISION_BF16 : KILN_PRECISION_FP32;
    if (us[1] < 0)
        kiln_log(KILN_LOG_INFO, "autocast: %s fp32: fp32 %.0f us per call of its directions, no bf16 kernel on this CPU",
                 s->name, us[0]);
    else
        kiln_log(KILN_LOG_INFO, "autocast: %s %s: fp32 %.0f us, bf16 %.0f us per call of its directions", s->name,
                 bf16 ? "bf16" : "fp32", us[0], us[1]);
    if (nremembered < MAX_REMEMBERED) {
        remembered *e = &table[nremembered++];
        snprintf(e->key, sizeof e->key, "%s", key);
        snprintf(e->first, sizeof e->first, "%s", s->name);
        e->bf16 = bf16;
        e->us[0] = us[0];
        e->us[1] = us[1];
    }
    return KILN_OK;
}

kiln_status kiln_cpu_precision_prepare(kiln_step *s, kiln_prep *p, const kiln_cpu_prec_ops *ops) {
    kiln_status st = KILN_OK;
    if (s->precision == KILN_PRECISION_FP16)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--precision fp16: the cpu has no fp16 kernels (fp16 is for a GPU's tensor "
                         "cores, --device cuda; bf16 or auto on the cpu)");
    if (s->precision == KILN_PRECISION_AUTO) st = decide(s, p, ops);
    if (st != KILN_OK) return st;
    int bf16 = s->precision == KILN_PRECISION_BF16;
    st = ops->make(s, p, bf16 ? KILN_DN_BF16 : KILN_DN_FP32);
    if (st != KILN_OK && bf16) {
        /* bf16 asked for by name: its numbers on fp32 kernels, not silently fp32's (auto never gets here:
         * it times bf16 only where oneDNN has the kernel) */
        kiln_log(emulated++ ? KILN_LOG_INFO : KILN_LOG_WARN,
                 "%s: oneDNN has no bf16 kernel for it on this CPU (%s); bf16 is emulated: operands rounded to bf16, "
                 "fp32 kernels (bf16's numbers, not its speed)", s->name, kiln_last_error());
        st = ops->make(s, p, KILN_DN_BF16_EMULATED);
    }
    if (st != KILN_OK) return st;
    size_t ws = ops->workspace(s);
    if (ws > p->workspace) p->workspace = ws;
    return KILN_OK;
}
