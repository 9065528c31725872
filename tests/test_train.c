/* The trainer through kiln_train: exact resumption (mid-epoch, inside a later
 * epoch and exactly at an epoch boundary) gives bit-identical parameters and
 * optimizer state to a straight run; the worker count changes nothing; bad
 * configurations and a diverging loss fail cleanly, naming the argument or the
 * step, and never touch an existing checkpoint.
 *
 * Under KILN_SANITIZE (the ASan build) the runs are shorter. */
#include <dirent.h>
#include <stdint.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kiln/safetensors.h"
#include "kiln/train.h"
#include "testutil.h"

static char g_tmp[64];   /* a fresh folder for checkpoints */
static char g_small[96]; /* a small IDX dataset: 300 train / 100 test images */
static int g_sanitize;

#define SMALL_TRAIN 300
#define SMALL_TEST 100

/* ---------- files ---------- */

static char *tmp_path(char *out, const char *name) {
    snprintf(out, 256, "%s/%s", g_tmp, name);
    return out;
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void write_file(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(b, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* reads a whole file; NULL if it cannot */
static uint8_t *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(len > 0 ? (size_t)len : 1);
    if (!b || fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* images of random pixels and random labels 0..9, as plain (not gzipped) IDX */
static void write_idx_sized(const char *folder, const char *split, uint32_t n, uint32_t side) {
    char path[256];
    size_t ni = 16 + (size_t)n * side * side, nl = 8 + n;
    uint8_t *img = malloc(ni), *lab = malloc(nl);
    put_be32(img, 0x00000803);
    put_be32(img + 4, n);
    put_be32(img + 8, side);
    put_be32(img + 12, side);
    for (size_t i = 16; i < ni; i++) img[i] = (uint8_t)tu_u64();
    put_be32(lab, 0x00000801);
    put_be32(lab + 4, n);
    for (size_t i = 8; i < nl; i++) lab[i] = (uint8_t)(tu_u64() % 10);
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", folder, split);
    write_file(path, img, ni);
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", folder, split);
    write_file(path, lab, nl);
    free(img);
    free(lab);
}

static void write_idx_split(const char *folder, const char *split, uint32_t n) { write_idx_sized(folder, split, n, 28); }

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* number of entries in g_tmp whose name contains `part` */
static int count_files_with(const char *part) {
    DIR *d = opendir(g_tmp);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, part)) n++;
    closedir(d);
    return n;
}

static double g_t0;
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
/* prints how long the section that just ended took */
static void lap(const char *what) {
    double t = now_s();
    fprintf(stderr, "test_train: %-40s %6.1f s\n", what, t - g_t0);
    g_t0 = t;
}

/* ---------- runs ---------- */

static kiln_train_config config(const char *model, const char *data) {
    kiln_train_config c = kiln_train_defaults();
    c.model = model;
    c.data = data;
    c.workers = 2;
    c.autotune = 0;
    c.test = 0;
    return c;
}

/* trains with c (plus save/resume/max_steps); returns the status, checks success */
static kiln_status run(kiln_train_config c, const char *save, const char *resume, int64_t max_steps,
                       kiln_train_result *res) {
    kiln_train_result r;
    c.save = save;
    c.resume = resume;
    c.max_steps = max_steps;
    kiln_status st = kiln_train(&c, &r);
    CHECK_MSG(st == KILN_OK, "kiln_train(%s, save %s, resume %s, max_steps %lld): %s", c.model, save ? save : "-",
              resume ? resume : "-", (long long)max_steps, kiln_last_error());
    if (res) *res = r;
    return st;
}

static const char *meta_or(const kiln_st_file *f, const char *key) {
    const char *v = kiln_st_meta(f, key);
    return v ? v : "(absent)";
}

/* b and c hold the same tensors, bit for bit, and the same run position;
 * returns 1 when they do */
static int same_checkpoint(const char *pb, const char *pc, const char *what) {
    kiln_st_file *b = NULL, *c = NULL;
    kiln_status sb = kiln_st_open(pb, &b);
    CHECK_MSG(sb == KILN_OK, "%s: %s", what, kiln_last_error());
    kiln_status sc = kiln_st_open(pc, &c);
    CHECK_MSG(sc == KILN_OK, "%s: %s", what, kiln_last_error());
    if (sb != KILN_OK || sc != KILN_OK) {
        kiln_st_close(b);
        kiln_st_close(c);
        return 0;
    }
    int ok = 1, nparam = 0, noptim = 0;
    CHECK_MSG(kiln_st_count(b) == kiln_st_count(c), "%s: %d vs %d tensors", what, kiln_st_count(b), kiln_st_count(c));
    ok &= kiln_st_count(b) == kiln_st_count(c);
    for (int i = 0; i < kiln_st_count(b); i++) {
        const char *name = kiln_st_name(b, i);
        const kiln_tensor *x = kiln_st_at(b, i), *y = kiln_st_find(c, name);
        if (strncmp(name, "optim.", 6) == 0) noptim++;
        else nparam++;
        if (!y) {
            CHECK_MSG(0, "%s: tensor %s missing from %s", what, name, pc);
            ok = 0;
            continue;
        }
        int same = x->dtype == y->dtype && x->ndim == y->ndim;
        for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == y->shape[d];
        same = same && memcmp(x->data, y->data, kiln_tensor_nbytes(x)) == 0;
        if (!same) {
            int64_t n = kiln_tensor_numel(x), first = -1;
            if (x->dtype == KILN_F32 && kiln_tensor_numel(y) == n)
                for (int64_t k = 0; k < n && first < 0; k++)
                    if (memcmp((const float *)x->data + k, (const float *)y->data + k, 4)) first = k;
            CHECK_MSG(0, "%s: tensor %s differs (first at element %lld: %.9g vs %.9g)", what, name, (long long)first,
                      first >= 0 ? (double)((const float *)x->data)[first] : 0.0,
                      first >= 0 ? (double)((const float *)y->data)[first] : 0.0);
            ok = 0;
        }
    }
    CHECK_MSG(nparam > 0 && noptim > 0, "%s: %d parameter and %d optimizer tensors", what, nparam, noptim);
    static const char *const keys[] = {"kiln.step", "kiln.epoch", "kiln.next_batch", "kiln.optim_steps", "kiln.lr", "kiln.seed", NULL};
    for (int k = 0; keys[k]; k++) {
        const char *vb = meta_or(b, keys[k]), *vc = meta_or(c, keys[k]);
        CHECK_MSG(!strcmp(vb, vc), "%s: metadata %s is %s vs %s", what, keys[k], vb, vc);
        ok &= !strcmp(vb, vc);
    }
    if (ok) tu_passed++;
    kiln_st_close(b);
    kiln_st_close(c);
    return ok;
}

/* the parameters of two checkpoints differ somewhere (guards against runs that train nothing) */
static int params_differ(const char *pa, const char *pb) {
    kiln_st_file *a = NULL, *b = NULL;
    if (kiln_st_open(pa, &a) != KILN_OK || kiln_st_open(pb, &b) != KILN_OK) {
        kiln_st_close(a);
        return 0;
    }
    int differ = 0;
    for (int i = 0; i < kiln_st_count(a) && !differ; i++) {
        const kiln_tensor *x = kiln_st_at(a, i), *y = kiln_st_find(b, kiln_st_name(a, i));
        differ = !y || kiln_tensor_nbytes(x) != kiln_tensor_nbytes(y) || memcmp(x->data, y->data, kiln_tensor_nbytes(x));
    }
    kiln_st_close(a);
    kiln_st_close(b);
    return differ;
}

static int64_t meta_int(const char *path, const char *key) {
    kiln_st_file *f;
    if (kiln_st_open(path, &f) != KILN_OK) return -1;
    const char *v = kiln_st_meta(f, key);
    int64_t x = v ? strtoll(v, NULL, 10) : -1;
    kiln_st_close(f);
    return x;
}

/* ---------- 1a: exact resume ---------- */

/* A: n steps, saved; B: resume A to 2n; C: 2n straight. B == C bit for bit. */
static void test_resume_midepoch(const char *model, int64_t n, int64_t batch) {
    char a[256], b[256], c[256], what[128];
    snprintf(what, sizeof what, "%s resume at step %lld of %lld", model, (long long)n, (long long)(2 * n));
    snprintf(a, sizeof a, "%s/%s-a.safetensors", g_tmp, model);
    snprintf(b, sizeof b, "%s/%s-b.safetensors", g_tmp, model);
    snprintf(c, sizeof c, "%s/%s-c.safetensors", g_tmp, model);
    kiln_train_config cfg = config(model, "fashion-mnist");
    cfg.batch_size = batch;
    kiln_train_result ra, rb, rc;
    if (run(cfg, a, NULL, n, &ra) != KILN_OK) return;
    CHECK(ra.steps == n);
    if (run(cfg, b, a, 2 * n, &rb) != KILN_OK) return;
    CHECK_MSG(rb.steps == n, "%s: the resumed run made %lld steps, expected %lld", what, (long long)rb.steps, (long long)n);
    if (run(cfg, c, NULL, 2 * n, &rc) != KILN_OK) return;
    CHECK(rc.steps == 2 * n);
    CHECK(meta_int(a, "kiln.step") == n);
    CHECK(meta_int(b, "kiln.step") == 2 * n);
    CHECK_MSG(params_differ(a, c), "%s: training from step %lld to %lld changed nothing", what, (long long)n, (long long)(2 * n));
    same_checkpoint(b, c, what);
    /* the loss of the last step is the same too */
    CHECK_MSG(memcmp(&rb.final_loss, &rc.final_loss, sizeof(double)) == 0, "%s: final loss %.9g vs %.9g", what,
              rb.final_loss, rc.final_loss);
}

/* the small dataset: 5 batches of 64 per epoch (the last holds 44), 3 epochs.
 * Stops at each of `stops`, resumes to the end, and compares with a straight run. */
static void test_resume_epochs(const char *model, const int64_t *stops, int nstops) {
    char a[256], b[256], c[256], what[128];
    snprintf(c, sizeof c, "%s/%s-small-c.safetensors", g_tmp, model);
    kiln_train_config cfg = config(model, g_small);
    cfg.batch_size = 64;
    cfg.epochs = 3;
    kiln_train_result rc;
    if (run(cfg, c, NULL, 0, &rc) != KILN_OK) return;
    CHECK_MSG(rc.steps == 15, "%s: %lld steps over 3 epochs of %d samples, expected 15", model, (long long)rc.steps, SMALL_TRAIN);
    CHECK(meta_int(c, "kiln.epoch") == 3);
    for (int i = 0; i < nstops; i++) {
        int64_t s = stops[i];
        snprintf(what, sizeof what, "%s small dataset, resume at step %lld (epoch %lld, batch %lld)", model, (long long)s,
                 (long long)(s / 5 + 1), (long long)(s % 5));
        snprintf(a, sizeof a, "%s/%s-small-a%lld.safetensors", g_tmp, model, (long long)s);
        snprintf(b, sizeof b, "%s/%s-small-b%lld.safetensors", g_tmp, model, (long long)s);
        kiln_train_result ra, rb;
        if (run(cfg, a, NULL, s, &ra) != KILN_OK) continue;
        CHECK(ra.steps == s);
        /* where A stopped: at a boundary the checkpoint points at batch 0 of the next epoch */
        CHECK_MSG(meta_int(a, "kiln.epoch") == s / 5 && meta_int(a, "kiln.next_batch") == s % 5,
                  "%s: saved at epoch %lld batch %lld", what, (long long)meta_int(a, "kiln.epoch"),
                  (long long)meta_int(a, "kiln.next_batch"));
        if (run(cfg, b, a, 0, &rb) != KILN_OK) continue;
        CHECK_MSG(rb.steps == 15 - s, "%s: the resumed run made %lld steps, expected %lld", what, (long long)rb.steps,
                  (long long)(15 - s));
        same_checkpoint(b, c, what);
    }
}

/* ---------- batch norm: buffers in checkpoints, evaluation mode ---------- */

/* mnist-cnn-bn: the running statistics are saved under PyTorch's names (f32
 * running_mean/var, an i64 num_batches_tracked counting the batches), they
 * moved from their initial values, and evaluation (which normalises with
 * them) scores the saved model as the training run did */
static void test_batch_norm_model(void) {
    char a[256];
    snprintf(a, sizeof a, "%s/bn.safetensors", g_tmp);
    kiln_train_config c = config("mnist-cnn-bn", g_small);
    c.test = 1;
    kiln_train_result r;
    if (run(c, a, NULL, 0, &r) != KILN_OK) return;
    kiln_st_file *f = NULL;
    CHECK_OK(kiln_st_open(a, &f));
    if (!f) return;
    CHECK_MSG(!kiln_st_find(f, "conv1.bias") && kiln_st_find(f, "conv1.weight"), "conv1 has no bias before its batch norm");
    const char *bufs[2] = {"bn1", "bn2"};
    for (int i = 0; i < 2; i++) {
        char n[64];
        snprintf(n, sizeof n, "%s.running_mean", bufs[i]);
        const kiln_tensor *m = kiln_st_find(f, n);
        snprintf(n, sizeof n, "%s.running_var", bufs[i]);
        const kiln_tensor *v = kiln_st_find(f, n);
        snprintf(n, sizeof n, "%s.num_batches_tracked", bufs[i]);
        const kiln_tensor *t = kiln_st_find(f, n);
        CHECK_MSG(m && v && t && m->dtype == KILN_F32 && v->dtype == KILN_F32 && t->dtype == KILN_I64 && t->ndim == 0,
                  "%s: running statistics missing or of the wrong dtype", bufs[i]);
        if (!m || !v || !t) continue;
        CHECK_MSG(*(const int64_t *)t->data == r.steps, "%s.num_batches_tracked is %lld after %lld steps", bufs[i],
                  (long long)*(const int64_t *)t->data, (long long)r.steps);
        double dm = 0, dv = 0;
        for (int64_t k = 0; k < kiln_tensor_numel(m); k++) {
            dm = fmax(dm, fabs(((const float *)m->data)[k]));
            dv = fmax(dv, fabs(((const float *)v->data)[k] - 1.0));
        }
        CHECK_MSG(dm > 1e-3 && dv > 1e-3, "%s: the running statistics did not move (%g, %g)", bufs[i], dm, dv);
    }
    kiln_st_close(f);
    double loss = 0, acc = -1;
    int64_t samples = 0;
    CHECK_OK(kiln_evaluate("mnist-cnn-bn", g_small, a, NULL, 50, 1, 0, &loss, &acc, &samples));
    CHECK_MSG(samples == SMALL_TEST && fabs(acc - r.test_accuracy) < 1e-12 && fabs(loss - r.test_loss) <= 1e-6 * fabs(loss),
              "eval of the saved model: loss %.6f accuracy %.4f, the training run's %.6f %.4f", loss, acc, r.test_loss,
              r.test_accuracy);
}

/* the data's samples must be what the model's input takes */
static void test_sample_shape(void) {
    char d[256];
    snprintf(d, sizeof d, "%s/small20", g_tmp);
    CHECK(mkdir(d, 0755) == 0);
    write_idx_sized(d, "train", 40, 20);
    write_idx_sized(d, "t10k", 10, 20);
    kiln_train_config c = config("mlp", d);
    kiln_train_result r;
    CHECK(kiln_train(&c, &r) == KILN_ERR_SHAPE);
    CHECK_MSG(strstr(kiln_last_error(), "[1, 20, 20]") && strstr(kiln_last_error(), "[1, 28, 28]"), "message: %s",
              kiln_last_error());
}

/* ---------- 1b: worker counts ---------- */

static void test_workers(const char *model, const char *data, int64_t steps, int64_t epochs) {
    char p[3][256], what[160];
    kiln_train_config cfg = config(model, data);
    cfg.epochs = epochs;
    for (int w = 0; w < 3; w++) {
        snprintf(p[w], sizeof p[w], "%s/%s-workers%d.safetensors", g_tmp, model, w);
        cfg.workers = w;
        if (run(cfg, p[w], NULL, steps, NULL) != KILN_OK) return;
    }
    for (int w = 1; w < 3; w++) {
        snprintf(what, sizeof what, "%s on %s, workers 0 vs %d", model, data, w);
        same_checkpoint(p[0], p[w], what);
    }
}

/* ---------- 1c: bad configuration ---------- */

static void expect_invalid(kiln_train_config c, const char *what, const char *needle) {
    kiln_train_result r;
    kiln_status st = kiln_train(&c, &r);
    CHECK_MSG(st == KILN_ERR_INVALID_ARG, "%s: status %s, expected KILN_ERR_INVALID_ARG", what, kiln_status_name(st));
    CHECK_MSG(strstr(kiln_last_error(), needle) != NULL, "%s: message '%s' does not name %s", what, kiln_last_error(), needle);
}

static void test_bad_config(void) {
    kiln_train_config c = config("mlp", g_small);
    c.batch_size = 0;
    expect_invalid(c, "batch_size 0", "--batch-size");
    c = config("mlp", g_small);
    c.batch_size = -5;
    expect_invalid(c, "batch_size -5", "--batch-size");
    c = config("no-such-model", g_small);
    expect_invalid(c, "unknown model", "no-such-model");
    CHECK_MSG(strstr(kiln_last_error(), "model") != NULL, "unknown model: '%s'", kiln_last_error());
    c = config("mlp", g_small);
    c.epochs = 0;
    expect_invalid(c, "epochs 0", "--epochs");
    c = config("mlp", g_small);
    c.workers = -2; /* -1 is KILN_WORKERS_AUTO */
    expect_invalid(c, "workers -2", "--workers");
    /* a checkpoint of another model, or saved with another batch size */
    char a[256];
    tmp_path(a, "bad-config-mlp.safetensors");
    c = config("mlp", g_small);
    if (run(c, a, NULL, 2, NULL) != KILN_OK) return;
    c = config("mnist-cnn", g_small);
    c.resume = a;
    kiln_train_result r;
    kiln_status st = kiln_train(&c, &r);
    CHECK_MSG(st != KILN_OK && strstr(kiln_last_error(), a), "resume of an mlp checkpoint as mnist-cnn: %s: %s",
              kiln_status_name(st), kiln_last_error());
    c = config("mlp", g_small);
    c.resume = a;
    c.batch_size = 32;
    expect_invalid(c, "resume with another batch size", "--batch-size");
}

/* ---------- 1d: a diverging loss ---------- */

static void test_nan_loss(void) {
    char save[256];
    tmp_path(save, "nan.safetensors");
    static const char old[] = "an existing checkpoint that a failed run must leave alone\n";
    write_file(save, old, sizeof old - 1);
    kiln_train_config c = config("mlp", g_small);
    c.optim = kiln_optim_defaults(KILN_OPT_SGD);
    c.optim.lr = 1e30f;
    c.epochs = 3;
    c.save = save;
    c.max_steps = 15;
    kiln_train_result r;
    kiln_status st = kiln_train(&c, &r);
    const char *msg = kiln_last_error();
    CHECK_MSG(st == KILN_ERR_NUMERIC, "lr 1e30: status %s (%s), expected KILN_ERR_NUMERIC", kiln_status_name(st), msg);
    CHECK_MSG(strstr(msg, "step ") != NULL, "lr 1e30: message '%s' does not name the step", msg);
    size_t n = 0;
    uint8_t *now = read_file(save, &n);
    CHECK_MSG(now && n == sizeof old - 1 && memcmp(now, old, n) == 0, "lr 1e30: %s was changed by a failed run", save);
    free(now);
    CHECK_MSG(count_files_with(".tmp") == 0, "a temporary file was left in %s", g_tmp);
}

/* --save-every: the checkpoint written at step 10 of a longer run is the one a
 * 10-step run writes at its end (copied away by the progress callback at 12) */
typedef struct { const char *from, *to; int64_t at; int copied; } copy_at;
static void copy_on_step(const kiln_progress *p, void *user) {
    copy_at *c = user;
    if (p->step != c->at) return;
    size_t n;
    uint8_t *b = read_file(c->from, &n);
    if (b) {
        write_file(c->to, b, n);
        free(b);
        c->copied = 1;
    }
}

static void test_save_every(void) {
    char a[128], copy[128], ten[128];
    tmp_path(a, "every.safetensors");
    tmp_path(copy, "every-at-10.safetensors");
    tmp_path(ten, "ten.safetensors");
    kiln_train_config c = config("mlp", g_small);
    copy_at cp = {a, copy, 12, 0};
    c.epochs = 4; /* 5 batches per epoch */
    c.save_every = 10;
    c.progress = copy_on_step;
    c.progress_user = &cp;
    run(c, a, NULL, 15, NULL);
    CHECK(cp.copied);
    CHECK(meta_int(copy, "kiln.step") == 10 && meta_int(copy, "kiln.epoch") == 2 && meta_int(copy, "kiln.next_batch") == 0);
    CHECK(meta_int(a, "kiln.step") == 15);
    kiln_train_config d = config("mlp", g_small);
    d.epochs = 4;
    run(d, ten, NULL, 10, NULL);
    CHECK_MSG(same_checkpoint(copy, ten, "--save-every 10 at step 10 vs a 10-step run"), "periodic checkpoint differs");
    d.save_every = 10; /* needs --save */
    d.save = NULL;
    kiln_train_result r;
    CHECK(kiln_train(&d, &r) == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "--save-every"));
}

/* --load: start from given weights (here PyTorch's, from the golden fixture) */
static void test_load(void) {
    char out[128];
    tmp_path(out, "loaded.safetensors");
    kiln_train_config c = config("mnist-cnn", g_small);
    c.load = "ref/fixtures/state_dict_pt.safetensors";
    c.optim.lr = 0; /* a step that changes nothing: the checkpoint holds the loaded weights */
    run(c, out, NULL, 1, NULL);
    kiln_st_file *f = NULL, *g = NULL;
    CHECK_OK(kiln_st_open(out, &f));
    CHECK_OK(kiln_st_open(c.load, &g));
    if (f && g) {
        int same = 1;
        for (int i = 0; i < kiln_st_count(g); i++) {
            const kiln_tensor *t = kiln_st_at(g, i), *u = kiln_st_find(f, kiln_st_name(g, i));
            same &= u && kiln_tensor_nbytes(t) == kiln_tensor_nbytes(u) && !memcmp(t->data, u->data, kiln_tensor_nbytes(t));
        }
        CHECK_MSG(same, "--load did not start from the given weights");
    }
    kiln_st_close(f);
    kiln_st_close(g);
    kiln_train_config m = config("mlp", g_small); /* mnist-cnn weights into the mlp */
    m.load = c.load;
    kiln_train_result r;
    CHECK(kiln_train(&m, &r) == KILN_ERR_SHAPE && strstr(kiln_last_error(), "fc1.weight"));
    m.resume = out;
    CHECK(kiln_train(&m, &r) == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "--load and --resume"));
}

/* stop_flag (what Ctrl-C sets in the CLI): training stops after the step in
 * progress and the checkpoint is the one a run of that many steps writes */
typedef struct { volatile int flag; int64_t at; } stop_at;
static void stop_on_step(const kiln_progress *p, void *user) {
    stop_at *s = user;
    if (p->step == s->at) s->flag = 1;
}

static void test_interrupt(void) {
    char a[128], b[128];
    tmp_path(a, "interrupted.safetensors");
    tmp_path(b, "seven.safetensors");
    kiln_train_config c = config("mlp", g_small);
    c.epochs = 4;
    c.test = 1;
    c.eval_every = 0; /* only the final evaluation, which an interrupted run skips */
    stop_at s = {0, 7};
    c.stop_flag = &s.flag;
    c.progress = stop_on_step;
    c.progress_user = &s;
    kiln_train_result r;
    run(c, a, NULL, 0, &r);
    CHECK(r.interrupted == 1 && r.steps == 7);
    CHECK_MSG(r.test_accuracy < 0, "an interrupted run evaluated anyway");
    CHECK(meta_int(a, "kiln.step") == 7 && meta_int(a, "kiln.epoch") == 1 && meta_int(a, "kiln.next_batch") == 2);
    kiln_train_config d = config("mlp", g_small);
    d.epochs = 4;
    run(d, b, NULL, 7, NULL);
    CHECK_MSG(same_checkpoint(a, b, "interrupted at 7 vs 7 steps"), "the interrupted checkpoint differs");
}

/* largest |a - b| / max |b| over the parameter tensors of two checkpoints */
static double params_rel_diff(const char *pa, const char *pb) {
    kiln_st_file *a = NULL, *b = NULL;
    double worst = 1e30;
    if (kiln_st_open(pa, &a) != KILN_OK || kiln_st_open(pb, &b) != KILN_OK) {
        kiln_st_close(a);
        return worst;
    }
    worst = 0;
    for (int i = 0; i < kiln_st_count(b); i++) {
        const char *name = kiln_st_name(b, i);
        if (!strncmp(name, "optim.", 6)) continue;
        const kiln_tensor *y = kiln_st_at(b, i), *x = kiln_st_find(a, name);
        if (!x || kiln_tensor_numel(x) != kiln_tensor_numel(y)) return 1e30;
        double m = 0, d = 0;
        for (int64_t k = 0; k < kiln_tensor_numel(y); k++) {
            m = fmax(m, fabs(((const float *)y->data)[k]));
            d = fmax(d, fabs(((const float *)x->data)[k] - ((const float *)y->data)[k]));
        }
        worst = fmax(worst, d / (m > 0 ? m : 1));
    }
    kiln_st_close(a);
    kiln_st_close(b);
    return worst;
}

/* --accumulate: 2 batches of 32 per step train like 1 batch of 64; resume is
 * exact across partial groups at epoch ends; a mismatched resume is refused */
static void test_accumulate(void) {
    char a[128], b[128], c[128], d[128];
    tmp_path(a, "acc2x32.safetensors");
    tmp_path(b, "acc1x64.safetensors");
    kiln_train_config ca = config("mlp", g_small), cb = config("mlp", g_small);
    ca.dropout_off = cb.dropout_off = 1; /* micro-batches draw other dropout masks */
    ca.batch_size = 32;
    ca.accumulate = 2;
    cb.batch_size = 64;
    ca.epochs = cb.epochs = 2; /* 300 samples: 10 batches of 32 (5 steps), 5 of 64 */
    kiln_train_result r;
    run(ca, a, NULL, 0, &r);
    CHECK_MSG(r.steps == 10, "2 epochs of 5 steps, got %lld", (long long)r.steps);
    run(cb, b, NULL, 0, NULL);
    double e = params_rel_diff(a, b);
    CHECK_MSG(e < 1e-4, "accumulating 2x32 differs from batches of 64 by %.3g", e);
    /* 300 samples in batches of 64 accumulated by 2: groups of 2, 2, 1 batches per epoch (3 steps) */
    kiln_train_config cc = config("mlp", g_small);
    cc.accumulate = 2;
    cc.epochs = 3;
    tmp_path(c, "acc-straight.safetensors");
    tmp_path(d, "acc-resumed.safetensors");
    run(cc, c, NULL, 0, &r);
    CHECK_MSG(r.steps == 9, "3 epochs of 3 steps, got %lld", (long long)r.steps);
    const int64_t stops[3] = {2, 3, 4}; /* inside epoch 1, at the boundary, inside epoch 2 */
    for (int i = 0; i < 3; i++) {
        run(cc, a, NULL, stops[i], NULL);
        CHECK(meta_int(a, "kiln.accumulate") == 2);
        run(cc, d, a, 0, NULL);
        char what[96];
        snprintf(what, sizeof what, "--accumulate 2, resumed at step %lld", (long long)stops[i]);
        same_checkpoint(d, c, what);
    }
    kiln_train_config cd = config("mlp", g_small);
    cd.resume = a;
    CHECK(kiln_train(&cd, &r) == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "--accumulate 2"));
}

/* the batch-size finder: the largest power of two whose plan fits, exactly at the boundary */
static void test_find_batch_size(void) {
    int64_t b = 0, b2 = 0, b3 = 0;
    size_t arena = 0, arena2 = 0;
    CHECK_OK(kiln_find_batch_size("mnist-cnn", 200.0 * 1048576, 60000, &b, &arena));
    CHECK_MSG(b == 256 && arena > 100u << 20 && arena <= 200u << 20, "200 MiB: batch %lld, arena %zu", (long long)b, arena);
    CHECK_OK(kiln_find_batch_size("mnist-cnn", (double)arena, 60000, &b2, &arena2));
    CHECK(b2 == b && arena2 == arena); /* a budget of exactly the arena still fits */
    CHECK_OK(kiln_find_batch_size("mnist-cnn", (double)arena - 1, 60000, &b3, NULL));
    CHECK(b3 == b / 2);
    CHECK_OK(kiln_find_batch_size("mnist-cnn", 1e12, 100, &b3, NULL));
    CHECK(b3 == 64); /* the limit caps it */
    CHECK(kiln_find_batch_size("mnist-cnn", 1000, 60000, &b3, NULL) == KILN_ERR_NOMEM);
    kiln_train_config c = config("mlp", g_small);
    c.find_batch_size = 1;
    kiln_train_result r;
    CHECK(kiln_train(&c, &r) == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "--memory-budget-mb"));
    c.memory_budget = 1048576; /* 1 MiB */
    c.max_steps = 2;
    CHECK_OK(kiln_train(&c, &r));
    int64_t want = 0;
    kiln_find_batch_size("mlp", 1048576, 60000, &want, NULL);
    CHECK_MSG(r.batch_size == want && want > 1, "trained with batch %lld, the finder says %lld", (long long)r.batch_size,
              (long long)want);
}

int main(void) {
    g_sanitize = getenv("KILN_SANITIZE") && *getenv("KILN_SANITIZE");
    kiln_log_set_level(KILN_LOG_WARN);
    snprintf(g_tmp, sizeof g_tmp, "/tmp/kiln_test_train.XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(g_small, sizeof g_small, "%s/small", g_tmp);
    if (mkdir(g_small, 0755) != 0) {
        perror(g_small);
        return 1;
    }
    tu_seed(7);
    write_idx_split(g_small, "train", SMALL_TRAIN);
    write_idx_split(g_small, "t10k", SMALL_TEST);

    /* 1c and 1d first: they are quick */
    g_t0 = now_s();
    test_bad_config();
    test_nan_loss();
    lap("bad config, NaN loss");

    test_save_every();
    test_load();
    test_interrupt();
    test_accumulate();
    test_find_batch_size();
    lap("--save-every, --load");

    /* 1a: exact resume mid-epoch on Fashion-MNIST */
    test_resume_midepoch("mlp", g_sanitize ? 30 : 100, 64);
    lap("resume mlp");
    test_resume_midepoch("mnist-cnn", g_sanitize ? 10 : 100, 16);
    lap("resume mnist-cnn");

    /* 1a: across epoch boundaries: inside epoch 2, exactly at the boundary, inside epoch 3 */
    static const int64_t stops_mlp[] = {7, 5, 10, 13}, stops_cnn[] = {7, 5};
    test_resume_epochs("mlp", stops_mlp, 4);
    lap("resume across epochs mlp");
    test_resume_epochs("mnist-cnn", stops_cnn, 2);
    lap("resume across epochs mnist-cnn");
    static const int64_t stops_bn[] = {7};
    test_resume_epochs("mnist-cnn-bn", stops_bn, 1);
    test_batch_norm_model();
    test_sample_shape();
    lap("batch norm: resume, buffers, evaluation; sample shape");

    /* 1b: the same batches (and so the same parameters) for 0, 1 and 2 workers */
    test_workers("mlp", "fashion-mnist", g_sanitize ? 30 : 100, 1);
    lap("workers mlp");
    test_workers("mnist-cnn", g_small, 7, 2);
    lap("workers mnist-cnn");

    remove_tree(g_tmp);
    return tu_finish("test_train");
}
