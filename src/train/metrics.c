/* The metrics file: JSON lines written with jansson (so names and numbers are
 * always valid JSON: a NaN loss becomes null) and flushed after each line;
 * with --tensorboard the same scalars also go to an event file
 * (tensorboard.c), from the same table of (key, tag, value) below, so the two
 * cannot disagree. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/internal/file.h"
#include "train/internal/metrics.h"
#include "train/internal/tensorboard.h"

struct kiln_metrics {
    FILE *f;     /* NULL: no metrics file (--tensorboard alone) */
    kiln_tb *tb; /* NULL: no --tensorboard */
    char path[1024];
};

/* one number of a line: its JSON key and its TensorBoard tag */
typedef struct {
    const char *key, *tag;
    double v;
} scalar;

kiln_status kiln_metrics_open(const char *path, const char *tensorboard, int append, kiln_metrics **out) {
    *out = NULL;
    kiln_metrics *m = calloc(1, sizeof *m);
    if (!m) return kiln_fail(KILN_ERR_NOMEM, "--metrics: out of memory");
    if (path) {
        snprintf(m->path, sizeof m->path, "%s", path);
        int fd = kiln_open_write(path, append); /* a FIFO in its place is refused, not waited on */
        if (fd < 0 || !(m->f = fdopen(fd, append ? "a" : "w"))) {
            if (fd >= 0) close(fd);
            free(m);
            return kiln_fail_context(KILN_ERR_IO, "--metrics");
        }
    }
    kiln_status st = tensorboard ? kiln_tb_open(tensorboard, &m->tb) : KILN_OK;
    if (st != KILN_OK) {
        kiln_metrics_close(m);
        return st;
    }
    if (m->tb) kiln_log(KILN_LOG_INFO, "tensorboard: writing %s", kiln_tb_path(m->tb));
    *out = m;
    return KILN_OK;
}

void kiln_metrics_close(kiln_metrics *m) {
    if (!m) return;
    if (m->f) fclose(m->f);
    kiln_tb_close(m->tb);
    free(m);
}

static json_t *number(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* the line's numbers after its kind, step and epoch: into the JSON object, and as one event at `step` */
static kiln_status write_line(kiln_metrics *m, json_t *o, int64_t step, const scalar *sc, int n) {
    kiln_tb_scalar tb[16];
    for (int i = 0; i < n; i++) {
        json_object_set_new(o, sc[i].key, number(sc[i].v));
        tb[i] = (kiln_tb_scalar){sc[i].tag, sc[i].v};
    }
    kiln_status st = m->tb ? kiln_tb_scalars(m->tb, step, tb, n) : KILN_OK;
    if (st != KILN_OK || !m->f) {
        json_decref(o);
        return st;
    }
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(o);
    if (!s) return kiln_fail(KILN_ERR_NOMEM, "--metrics: out of memory");
    int ok = fputs(s, m->f) >= 0 && fputc('\n', m->f) != EOF && fflush(m->f) == 0;
    free(s);
    return ok ? KILN_OK : kiln_fail(KILN_ERR_IO, "--metrics %s: cannot write: %s", m->path, strerror(errno));
}

kiln_status kiln_metrics_step(kiln_metrics *m, kiln_metrics_window *w, int64_t step, int64_t epoch, double lr, double t,
                              double wait) {
    double dt = t - w->t0;
    json_t *o = json_object();
    json_object_set_new(o, "kind", json_string("step"));
    json_object_set_new(o, "step", json_integer(step));
    json_object_set_new(o, "epoch", json_integer(epoch));
    const scalar sc[] = {
        {"loss", "train/loss", w->steps ? w->loss_sum / (double)w->steps : NAN},
        {"lr", "train/lr", lr},
        {"images_per_s", "train/images_per_s", dt > 0 ? (double)w->samples / dt : NAN},
        {"data_wait", "train/data_wait", dt > 0 ? (wait - w->wait0) / dt : NAN},
        {"time_s", "train/time_s", t},
    };
    *w = (kiln_metrics_window){.t0 = t, .wait0 = wait};
    return write_line(m, o, step, sc, (int)(sizeof sc / sizeof sc[0]));
}

kiln_status kiln_metrics_epoch(kiln_metrics *m, const kiln_metrics_epoch_line *e) {
    json_t *o = json_object();
    json_object_set_new(o, "kind", json_string("epoch"));
    json_object_set_new(o, "epoch", json_integer(e->epoch));
    json_object_set_new(o, "step", json_integer(e->step));
    const scalar sc[] = {
        {"train_loss", "epoch/train_loss", e->train_loss},
        {"lr", "epoch/lr", e->lr},
        {"images_per_s", "epoch/images_per_s", e->images_per_s},
        {"data_wait", "epoch/data_wait", e->data_wait},
        {"time_s", "epoch/time_s", e->time_s},
        {"test_loss", "test/loss", e->test_loss},
        {"test_accuracy", "test/accuracy", e->test_accuracy},
    };
    return write_line(m, o, e->step, sc, (int)(sizeof sc / sizeof sc[0]) - (e->evaluated ? 0 : 2));
}
