/* kiln predict against PyTorch: a torchvision resnet18 whose weights follow
 * the formula of tests/ref/make_predict_fixtures.py (computed here again and
 * saved with kiln's safetensors writer, so 45 MB of weights are never
 * committed), run by the kiln program over the fixture's images (nested
 * folders, a grey one, an upper-case extension, a dot-file and a text file
 * that are skipped), must give PyTorch's float64 evaluation logits within
 * 1e-4 of the largest, the same top-5 and the files in sorted path order,
 * whatever the batch size and decoding threads. Then the failures: each exits
 * 2 naming the culprit, and leaves no predictions file (an older one stays as
 * it was). Needs $KILN_BIN (ctest sets it). */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "imagetest.h"
#include "kiln/nn.h"
#include "kiln/safetensors.h"
#include "testutil.h"

#define FIX "ref/fixtures/predict"
#define CLASSES 10

static char g_tmp[64], g_weights[128];

static uint32_t fnv1a32(const char *s) {
    uint32_t h = 0x811C9DC5u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x01000193u;
    return h;
}

static int ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

/* the formula of make_predict_fixtures.py for one state_dict entry */
static void formula(const char *name, int ndim, const int64_t *shape, float *out) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    double phase = 0.01 * (double)(fnv1a32(name) % 1000u), scale = ndim >= 2 ? sqrt(3.0 / (double)(n / shape[0])) : 0;
    for (int64_t i = 0; i < n; i++) {
        double u = sin(0.37 * (double)i + phase), v;
        if (ends_with(name, "running_var")) v = 1 + 0.5 * u;
        else if (ends_with(name, "running_mean")) v = 0.2 * u;
        else if (ndim >= 2) v = u * scale;
        else if (ends_with(name, ".weight")) v = 1 + 0.25 * u;
        else v = 0.1 * u;
        out[i] = (float)v;
    }
}

/* resnet18's state_dict by the formula, written with kiln's safetensors writer */
static void write_weights(const char *path) {
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    kiln_st_writer *w = kiln_st_writer_new();
    CHECK_OK(kiln_model_build(g, "resnet18", &m));
    CHECK_OK(kiln_params_new_on(g, "cpu", &P));
    int np = P ? kiln_params_count(P) : 0, nb = P ? kiln_params_buffer_count(P) : 0;
    void **data = calloc((size_t)(np + nb), sizeof *data);
    for (int i = 0; i < np + nb; i++) {
        int buf = i >= np, k = buf ? i - np : i;
        const char *name = buf ? kiln_params_buffer_name(P, k) : kiln_params_name(P, k);
        int64_t shape[8], n = buf ? kiln_params_buffer_numel(P, k) : kiln_params_numel(P, k);
        int nd = buf ? kiln_params_buffer_shape(P, k, shape) : kiln_params_shape(P, k, shape);
        int i64 = buf && kiln_params_buffer_dtype(P, k) == KILN_I64;
        data[i] = calloc((size_t)(n ? n : 1), 8); /* num_batches_tracked stays 0 */
        if (!i64) formula(name, nd, shape, data[i]);
        CHECK_OK(kiln_st_writer_add(w, name, i64 ? KILN_I64 : KILN_F32, nd, shape, data[i]));
    }
    CHECK_OK(kiln_st_writer_save(w, path));
    for (int i = 0; i < np + nb; i++) free(data[i]);
    free(data);
    kiln_st_writer_free(w);
    kiln_params_free(P);
    kiln_graph_free(g);
}

/* runs `kiln ARGS` with stderr in g_tmp/err; the exit code */
static int kiln(const char *args) {
    const char *bin = getenv("KILN_BIN");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s >%s/out 2>%s/err", bin ? bin : "../build/kiln", args, g_tmp, g_tmp);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static int err_mentions(const char *needle) {
    char p[128];
    snprintf(p, sizeof p, "%s/err", g_tmp);
    size_t n = 0;
    char *text = (char *)slurp(p, &n);
    int found = text && (text[n] = 0, strstr(text, needle) != NULL);
    if (!found) fprintf(stderr, "  stderr: %s", text ? text : "(none)\n");
    free(text);
    return found;
}


/* the top k of a row, best first, ties to the lower index */
static void top5(const double *row, int *top) {
    for (int t = 0; t < 5; t++) {
        int best = -1;
        for (int i = 0; i < CLASSES; i++) {
            int used = 0;
            for (int u = 0; u < t; u++) used |= top[u] == i;
            if (!used && (best < 0 || row[i] > row[best])) best = i;
        }
        top[t] = best;
    }
}

/* every line of preds against the fixture: file order, logits, top-5 */
static void check_preds(const char *preds, const char *what) {
    kiln_st_file *f = NULL;
    CHECK_OK(kiln_st_open(FIX "/expected.safetensors", &f));
    const kiln_tensor *want = f ? kiln_st_find(f, "logits") : NULL;
    const char *files = f ? kiln_st_meta(f, "files") : NULL;
    FILE *in = fopen(preds, "r");
    CHECK_MSG(in != NULL, "%s: no %s", what, preds);
    if (!want || !files || !in) goto out;
    const double *L = want->data;
    double largest = 0;
    for (int64_t i = 0; i < kiln_tensor_numel(want); i++) largest = fmax(largest, fabs(L[i]));
    char *list = strdup(files), *save = NULL, line[1 << 16];
    int row = 0;
    for (char *rel = strtok_r(list, " ", &save); rel; rel = strtok_r(NULL, " ", &save), row++) {
        if (!fgets(line, sizeof line, in)) {
            CHECK_MSG(0, "%s: %d lines, want %lld", what, row, (long long)want->shape[0]);
            break;
        }
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        CHECK_MSG(o != NULL, "%s: line %d is not JSON: %s", what, row + 1, je.text);
        char path[256];
        snprintf(path, sizeof path, FIX "/images/%s", rel);
        const char *file = json_string_value(json_object_get(o, "file"));
        CHECK_MSG(file && !strcmp(file, path), "%s: line %d is %s, want %s (sorted paths)", what, row + 1, file ? file : "?", path);
        json_t *lg = json_object_get(o, "logits"), *t5 = json_object_get(o, "top5");
        CHECK_MSG(json_array_size(lg) == CLASSES && json_array_size(t5) == 5, "%s: line %d: %zu logits, %zu top", what,
                  row + 1, json_array_size(lg), json_array_size(t5));
        double worst = 0;
        for (int k = 0; k < CLASSES && json_array_size(lg) == CLASSES; k++)
            worst = fmax(worst, fabs(json_number_value(json_array_get(lg, (size_t)k)) - L[row * CLASSES + k]) / largest);
        CHECK_MSG(worst <= 1e-4, "%s: %s: logits off by %.3g of the largest", what, rel, worst);
        int top[5];
        top5(L + row * CLASSES, top);
        for (int t = 0; t < 5 && json_array_size(t5) == 5; t++)
            CHECK_MSG(json_integer_value(json_array_get(t5, (size_t)t)) == top[t], "%s: %s: top5[%d] is %lld, PyTorch's %d", what,
                      rel, t, (long long)json_integer_value(json_array_get(t5, (size_t)t)), top[t]);
        if (row == 0) printf("test_predict: %s: %s within %.2g of the largest logit\n", what, rel, worst);
        json_decref(o);
    }
    CHECK_MSG(row == want->shape[0], "%s: %d images in the fixture's list", what, row);
    CHECK_MSG(!fgets(line, sizeof line, in), "%s: more lines than images", what);
    free(list);
out:
    if (in) fclose(in);
    if (f) kiln_st_close(f);
}

static void test_matches_pytorch(void) {
    char args[1024], out[128];
    snprintf(out, sizeof out, "%s/preds.jsonl", g_tmp);
    const char *common = "--model resnet18 --data " FIX "/images --normalize imagenet --autotune off";
    snprintf(args, sizeof args, "predict %s --load %s --out %s --batch-size 2 --workers 0", common, g_weights, out);
    CHECK_MSG(kiln(args) == 0 && err_mentions("5 images"), "kiln %s", args);
    check_preds(out, "batches of 2, 2, 1");
    snprintf(args, sizeof args, "predict %s --load %s --out %s --batch-size 64 --workers 2 --json", common, g_weights, out);
    CHECK_MSG(kiln(args) == 0, "kiln %s", args);
    check_preds(out, "one batch of 5, 2 workers");
}

/* a failed run: exit 2, stderr naming `needle`, and the old predictions file untouched, no temporary beside it */
static void fails(const char *what, const char *args, const char *needle) {
    char out[128], old[] = "older predictions\n";
    snprintf(out, sizeof out, "%s/preds.jsonl", g_tmp);
    spit(out, old, strlen(old));
    int rc = kiln(args);
    CHECK_MSG(rc == 2, "%s: exit %d, want 2", what, rc);
    CHECK_MSG(err_mentions(needle), "%s: stderr does not name '%s'", what, needle);
    size_t n = 0;
    char *text = (char *)slurp(out, &n);
    CHECK_MSG(text && n == strlen(old) && !memcmp(text, old, n), "%s: the predictions file changed", what);
    free(text);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", g_tmp);
    CHECK_MSG(system(cmd) != 0, "%s: a temporary file is left in %s", what, g_tmp);
}

static void copy_images(const char *to) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cp -r " FIX "/images %s", to);
    CHECK(system(cmd) == 0);
}

static void test_failures(void) {
    char args[1024], dir[128], bad[256], out[128];
    snprintf(out, sizeof out, "%s/preds.jsonl", g_tmp);
    snprintf(args, sizeof args, "predict --model resnet18 --data " FIX "/images --out %s", out);
    fails("no --load", args, "--load");
    snprintf(args, sizeof args, "predict --model resnet18 --data " FIX "/images --out %s --load %s/none.safetensors", out, g_tmp);
    fails("missing weights", args, "none.safetensors");
    /* a corrupt image sorted last: earlier batches are written before it fails */
    snprintf(dir, sizeof dir, "%s/late", g_tmp);
    copy_images(dir);
    snprintf(bad, sizeof bad, "%s/zz.png", dir);
    spit(bad, "\x89PNG\r\n\x1a\n but not really", 24);
    snprintf(args, sizeof args, "predict --model resnet18 --data %s --out %s --load %s --batch-size 2 --autotune off", dir, out,
             g_weights);
    fails("a corrupt image after others", args, bad);
    /* the first image corrupt: found when the size is probed */
    snprintf(dir, sizeof dir, "%s/early", g_tmp);
    copy_images(dir);
    snprintf(bad, sizeof bad, "%s/0.jpg", dir);
    spit(bad, "\xff\xd8\xff garbage", 12);
    snprintf(args, sizeof args, "predict --model resnet18 --data %s --out %s --load %s --autotune off", dir, out, g_weights);
    fails("a corrupt first image", args, bad);
    snprintf(dir, sizeof dir, "%s/empty", g_tmp);
    mk(dir);
    snprintf(args, sizeof args, "predict --model resnet18 --data %s --out %s --load %s", dir, out, g_weights);
    fails("an empty folder", args, dir);
    snprintf(args, sizeof args, "predict --model resnet18 --data %s/nowhere --out %s --load %s", g_tmp, out, g_weights);
    fails("a missing folder", args, "nowhere");
    snprintf(args, sizeof args, "predict --model resnet18 --num-classes 12 --data " FIX "/images --out %s --load %s", out, g_weights);
    fails("weights of another class count", args, "fc.weight");
    snprintf(args, sizeof args, "predict --model mnist-cnn --data " FIX "/images --out %s --load %s", out, g_weights);
    fails("images the model does not take", args, "[1, 28, 28]");
    snprintf(args, sizeof args, "predict --model resnet18 --data " FIX "/images --out %s --load %s --batch-size 0", out, g_weights);
    fails("batch 0", args, "--batch-size");
    snprintf(args, sizeof args, "predict --model resnet18 --data " FIX "/images --out %s/no/such/dir/p.jsonl --load %s --autotune off",
             g_tmp, g_weights);
    fails("an --out that cannot be written", args, "--out");
    CHECK(kiln("predict --help") == 0);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/kiln_predict.XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    snprintf(g_weights, sizeof g_weights, "%s/resnet18.safetensors", g_tmp);
    write_weights(g_weights);
    test_matches_pytorch();
    test_failures();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_tmp);
    return tu_finish("test_predict");
}
