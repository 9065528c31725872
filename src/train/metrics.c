/* The metrics file: JSON lines written with jansson (so names and numbers are
 * always valid JSON: a NaN loss becomes null) and flushed after each line. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/internal/file.h"
#include "train/internal/metrics.h"

struct kiln_metrics {
    FILE *f;
    char path[1024];
};

kiln_status kiln_metrics_open(const char *path, int append, kiln_metrics **out) {
    *out = NULL;
    kiln_metrics *m = calloc(1, sizeof *m);
    if (!m) return kiln_fail(KILN_ERR_NOMEM, "--metrics: out of memory");
    snprintf(m->path, sizeof m->path, "%s", path);
    int fd = kiln_open_write(path, append); /* a FIFO in its place is refused, not waited on */
    if (fd < 0 || !(m->f = fdopen(fd, append ? "a" : "w"))) {
        if (fd >= 0) close(fd);
        free(m);
        return kiln_fail_context(KILN_ERR_IO, "--metrics");
    }
    *out = m;
    return KILN_OK;
}

void kiln_metrics_close(kiln_metrics *m) {
    if (!m) return;
    fclose(m->f);
    free(m);
}

static json_t *number(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static kiln_status write_line(kiln_metrics *m, json_t *o) {
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
    json_object_set_new(o, "loss", number(w->steps ? w->loss_sum / (double)w->steps : NAN));
    json_object_set_new(o, "lr", number(lr));
    json_object_set_new(o, "images_per_s", number(dt > 0 ? (double)w->samples / dt : NAN));
    json_object_set_new(o, "data_wait", number(dt > 0 ? (wait - w->wait0) / dt : NAN));
    json_object_set_new(o, "time_s", number(t));
    *w = (kiln_metrics_window){.t0 = t, .wait0 = wait};
    return write_line(m, o);
}

kiln_status kiln_metrics_epoch(kiln_metrics *m, const kiln_metrics_epoch_line *e) {
    json_t *o = json_object();
    json_object_set_new(o, "kind", json_string("epoch"));
    json_object_set_new(o, "epoch", json_integer(e->epoch));
    json_object_set_new(o, "step", json_integer(e->step));
    json_object_set_new(o, "train_loss", number(e->train_loss));
    json_object_set_new(o, "lr", number(e->lr));
    json_object_set_new(o, "images_per_s", number(e->images_per_s));
    json_object_set_new(o, "data_wait", number(e->data_wait));
    json_object_set_new(o, "time_s", number(e->time_s));
    if (e->evaluated) {
        json_object_set_new(o, "test_loss", number(e->test_loss));
        json_object_set_new(o, "test_accuracy", number(e->test_accuracy));
    }
    return write_line(m, o);
}
