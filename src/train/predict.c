/* kiln predict: a zoo model with loaded weights over every image of a folder,
 * written as JSON lines. The images are a dataset of their own
 * (kiln_dataset_open_files: the evaluation transforms, decoding on the
 * loader's workers, in sorted path order); the model is compiled for
 * inference (no backward, nothing kept for it) at the images' size, for the
 * full batch and the last, shorter one. Lines go to a temporary file renamed
 * over `out` only when every image succeeded, so a failure leaves no partial
 * predictions. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "base/internal/file.h"
#include "kiln/alloc.h"
#include "kiln/predict.h"
#include "kiln/train.h"
#include "train/internal/input_shape.h"

#define TOP 5

kiln_predict_config kiln_predict_defaults(void) {
    kiln_predict_config c = {.batch_size = 64, .workers = 1, .autotune = 1};
    c.data_config = kiln_data_defaults();
    return c;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static kiln_status check_config(const kiln_predict_config *c) {
    if (!c->model || !c->model[0]) return kiln_fail(KILN_ERR_INVALID_ARG, "predict needs --model NAME");
    if (!c->load) return kiln_fail(KILN_ERR_INVALID_ARG, "predict needs --load FILE (the weights)");
    if (!c->data) return kiln_fail(KILN_ERR_INVALID_ARG, "predict needs --data DIR (the images)");
    if (!c->out || !c->out[0]) return kiln_fail(KILN_ERR_INVALID_ARG, "predict needs --out FILE (the predictions)");
    if (c->batch_size < 1 || c->batch_size > KILN_MAX_BATCH)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--batch-size is %lld; use 1..%lld", (long long)c->batch_size,
                         (long long)KILN_MAX_BATCH);
    if (c->workers < 0 || c->workers > 64) return kiln_fail(KILN_ERR_INVALID_ARG, "--workers is %d; use 0..64", c->workers);
    if (c->threads < 0 || c->threads > 1024)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--threads is %d; use 0..1024 (0: every core)", c->threads);
    return KILN_OK;
}

/* the model at the images' size (the ResNets take any); its input must be what the transforms give */
static kiln_status build(kiln_graph *g, const kiln_predict_config *c, const kiln_dataset *ds, kiln_model *m) {
    kiln_model_opts mo = c->model_opts;
    if (!mo.height) mo.height = ds->sample_shape[1];
    if (!mo.width) mo.width = ds->sample_shape[2];
    kiln_status st = kiln_model_build_ex(g, c->model, &mo, m);
    return st == KILN_OK ? kiln_check_input_shape(g, m, ds, c->model, " (after the transforms: --resize, --center-crop, --channels)")
                         : st;
}

/* one line: the file, the best TOP classes (ties: the lower index first), every logit */
static kiln_status write_line(FILE *f, const char *file, const float *logits, int classes, const char *tmp) {
    int top[TOP], k = classes < TOP ? classes : TOP;
    for (int t = 0; t < k; t++) {
        int best = -1;
        for (int i = 0; i < classes; i++) {
            int used = 0;
            for (int u = 0; u < t; u++) used |= top[u] == i;
            if (!used && (best < 0 || logits[i] > logits[best] || (isnan(logits[best]) && !isnan(logits[i])))) best = i;
        }
        top[t] = best;
    }
    json_t *o = json_object(), *t5 = json_array(), *all = json_array();
    json_object_set_new(o, "file", json_string(file));
    for (int t = 0; t < k; t++) json_array_append_new(t5, json_integer(top[t]));
    for (int i = 0; i < classes; i++) json_array_append_new(all, isfinite(logits[i]) ? json_real(logits[i]) : json_null());
    json_object_set_new(o, "top5", t5);
    json_object_set_new(o, "logits", all);
    int bad = !json_is_string(json_object_get(o, "file")); /* a path that is not UTF-8 */
    bad = bad || json_dumpf(o, f, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) != 0 || fputc('\n', f) == EOF;
    json_decref(o);
    if (!bad) return KILN_OK;
    if (!ferror(f)) return kiln_fail(KILN_ERR_FORMAT, "%s: its path is not UTF-8, which JSON cannot hold", file);
    return kiln_fail(KILN_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
}

typedef struct {
    const kiln_predict_config *c;
    char **paths;
    int64_t n;
    kiln_dataset *ds;
    kiln_graph *g;
    kiln_model m;
    kiln_params *P;
    kiln_plan *plan;
    kiln_loader *L;
    float *logits;
    int32_t *labels;
    int64_t batch;                /* the plan's full batch */
    FILE *f;
    char tmp[4096 + 32];
} job;

static kiln_status open_all(job *J) {
    const kiln_predict_config *c = J->c;
    kiln_status st = kiln_image_files(c->data, &J->paths, &J->n);
    if (st == KILN_OK) st = kiln_dataset_open_files((const char *const *)J->paths, J->n, c->data, &c->data_config, &J->ds);
    if (st != KILN_OK) return st;
    J->g = kiln_graph_new();
    if ((st = build(J->g, c, J->ds, &J->m)) != KILN_OK) return st;
    if ((st = kiln_params_new_on(J->g, "cpu", &J->P)) != KILN_OK) return st;
    return kiln_checkpoint_load_params(J->P, c->load);
}

static kiln_status compile(job *J) {
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 0;
    o.max_batch = J->c->batch_size < J->n ? J->c->batch_size : J->n;
    o.also_batches[0] = J->n % o.max_batch;
    o.autotune = J->c->autotune;
    o.precision = J->c->precision;
    J->batch = o.max_batch;
    kiln_status st = kiln_compile(J->g, J->P, &J->m.out, 1, &o, &J->plan);
    if (st != KILN_OK) return st;
    J->logits = kiln_alloc((size_t)(o.max_batch * J->m.num_classes) * sizeof(float));
    J->labels = kiln_alloc((size_t)o.max_batch * sizeof(int32_t));
    if (!J->logits || !J->labels) return kiln_fail(KILN_ERR_NOMEM, "predict: out of memory");
    memset(J->labels, 0, (size_t)o.max_batch * sizeof(int32_t)); /* the plan binds every input; the loss is not computed */
    kiln_loader_config lc = kiln_loader_defaults();
    lc.batch_size = o.max_batch;
    lc.workers = J->c->workers;
    lc.shuffle = 0;
    lc.next_epoch = 0;
    if ((st = kiln_loader_new(J->ds, &lc, &J->L)) != KILN_OK) return st;
    return kiln_loader_start_epoch(J->L, 0, 0);
}

static kiln_status open_out(job *J) {
    snprintf(J->tmp, sizeof J->tmp, "%s.tmp.%ld", J->c->out, (long)getpid());
    int fd = kiln_open_write(J->tmp, 0);
    if (fd < 0) return kiln_fail_context(KILN_ERR_IO, "--out %s", J->c->out);
    if (!(J->f = fdopen(fd, "w"))) {
        close(fd);
        return kiln_fail(KILN_ERR_IO, "%s: cannot write: %s", J->tmp, strerror(errno));
    }
    return KILN_OK;
}

static kiln_status run_all(job *J) {
    int classes = J->m.num_classes;
    kiln_batch b;
    int got;
    kiln_status st = KILN_OK;
    while (st == KILN_OK && (got = kiln_loader_next(J->L, &b)) == 1) {
        kiln_plan_bind(J->plan, J->m.x, b.x);
        kiln_plan_bind(J->plan, J->m.y, J->labels);
        st = kiln_plan_run(J->plan, b.n);
        if (st == KILN_OK) st = kiln_plan_read(J->plan, J->m.out, J->logits, b.n * classes);
        int64_t first = b.index * J->batch;
        for (int64_t i = 0; st == KILN_OK && i < b.n; i++)
            st = write_line(J->f, J->paths[first + i], J->logits + i * classes, classes, J->tmp);
        kiln_loader_release(J->L, &b);
    }
    if (st == KILN_OK && got < 0) st = kiln_loader_status(J->L);
    return st;
}

/* flushed, synced and renamed over `out`; on any failure the temporary is removed */
static kiln_status close_out(job *J, kiln_status st) {
    if (!J->f) return st;
    if (st == KILN_OK && (fflush(J->f) != 0 || fsync(fileno(J->f)) != 0))
        st = kiln_fail(KILN_ERR_IO, "%s: cannot write: %s", J->tmp, strerror(errno));
    if (fclose(J->f) != 0 && st == KILN_OK) st = kiln_fail(KILN_ERR_IO, "%s: cannot write: %s", J->tmp, strerror(errno));
    J->f = NULL;
    if (st == KILN_OK && rename(J->tmp, J->c->out) != 0)
        st = kiln_fail(KILN_ERR_IO, "--out %s: cannot rename %s to it: %s", J->c->out, J->tmp, strerror(errno));
    if (st != KILN_OK) unlink(J->tmp);
    return st;
}

kiln_status kiln_predict(const kiln_predict_config *c, kiln_predict_result *r) {
    memset(r, 0, sizeof *r);
    kiln_status st = check_config(c);
    if (st != KILN_OK) return st;
    omp_set_num_threads(c->threads > 0 ? c->threads : kiln_cores_available());
    job J = {.c = c};
    double t0 = now_s();
    if ((st = open_all(&J)) == KILN_OK && (st = compile(&J)) == KILN_OK && (st = open_out(&J)) == KILN_OK) st = run_all(&J);
    st = close_out(&J, st);
    if (st == KILN_OK) {
        r->images = J.n;
        r->num_classes = J.m.num_classes;
        r->seconds = now_s() - t0;
        r->arena_mb = (double)kiln_plan_arena_bytes(J.plan) / 1048576.0;
    }
    kiln_loader_free(J.L);
    kiln_plan_free(J.plan);
    kiln_params_free(J.P);
    kiln_graph_free(J.g);
    kiln_dataset_free(J.ds);
    kiln_image_files_free(J.paths, J.n);
    kiln_free(J.logits);
    kiln_free(J.labels);
    return st;
}
