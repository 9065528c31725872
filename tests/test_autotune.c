/* The conv autotuner's memory: decisions round-trip as text, bad text is
 * refused with its source named, the on-disk cache makes separate runs use the
 * same algorithms, and a resumed run uses its checkpoint's algorithms even
 * when the disk cache says otherwise, so resume is exact with autotune on. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "backends/cpu/internal/cpu.h"
#include "kernels/internal/dnnl_ops.h"
#include "kiln/graph.h"
#include "kiln/safetensors.h"
#include "kiln/train.h"
#include "testutil.h"

static char dir[256];

static void test_text(void) {
    kiln_cpu_autotune_reset();
    CHECK_OK(kiln_autotune_import("mb8ic32ih26iw26oc64kh3kw3sh1ph0 fwd w\nmb8ic32ih26iw26oc64kh3kw3sh1ph0 bwd_data d\n", "t", 1));
    char a = 0;
    CHECK(kiln_autotune_lookup("mb8ic32ih26iw26oc64kh3kw3sh1ph0", "fwd", &a) && a == 'w');
    CHECK(kiln_autotune_lookup("mb8ic32ih26iw26oc64kh3kw3sh1ph0", "bwd_data", &a) && a == 'd');
    CHECK(!kiln_autotune_lookup("mb8ic32ih26iw26oc64kh3kw3sh1ph0", "bwd_weight", &a));
    /* without replace, known decisions stay */
    CHECK_OK(kiln_autotune_import("mb8ic32ih26iw26oc64kh3kw3sh1ph0 fwd d\n", "t", 0));
    CHECK(kiln_autotune_lookup("mb8ic32ih26iw26oc64kh3kw3sh1ph0", "fwd", &a) && a == 'w');
    char buf[512];
    kiln_autotune_export(buf, sizeof buf);
    CHECK(strstr(buf, "mb8ic32ih26iw26oc64kh3kw3sh1ph0 bwd_data d\n") != NULL);
    CHECK(kiln_autotune_import("mb8 fwd x\n", "cache.txt", 1) == KILN_ERR_FORMAT);
    CHECK_MSG(strstr(kiln_last_error(), "cache.txt") && strstr(kiln_last_error(), "line 1"), "%s", kiln_last_error());
    kiln_cpu_autotune_reset();
}

static kiln_train_config config(int64_t steps, const char *save, const char *resume) {
    kiln_train_config c = kiln_train_defaults();
    c.model = "mnist-cnn";
    c.batch_size = 16;
    c.max_steps = steps;
    c.test = 0;
    c.workers = 1;
    c.autotune = 1;
    c.save = save;
    c.resume = resume;
    return c;
}

static int same_tensors(const char *a, const char *b) {
    kiln_st_file *fa, *fb;
    if (kiln_st_open(a, &fa) != KILN_OK) return 0;
    if (kiln_st_open(b, &fb) != KILN_OK) {
        kiln_st_close(fa);
        return 0;
    }
    int same = kiln_st_count(fa) == kiln_st_count(fb);
    for (int i = 0; same && i < kiln_st_count(fa); i++) {
        const kiln_tensor *t = kiln_st_at(fa, i), *u = kiln_st_find(fb, kiln_st_name(fa, i));
        same = u && kiln_tensor_nbytes(t) == kiln_tensor_nbytes(u) && memcmp(t->data, u->data, kiln_tensor_nbytes(t)) == 0;
    }
    kiln_st_close(fa);
    kiln_st_close(fb);
    return same;
}

static void test_resume_with_autotune(void) {
    int64_t n = getenv("KILN_SANITIZE") ? 4 : 20;
    char a[300], b[300], c[300], cache[300];
    snprintf(a, sizeof a, "%s/a.safetensors", dir);
    snprintf(b, sizeof b, "%s/b.safetensors", dir);
    snprintf(c, sizeof c, "%s/c.safetensors", dir);
    snprintf(cache, sizeof cache, "%s/autotune-v1.txt", dir);
    kiln_train_result r;
    kiln_cpu_autotune_reset();
    kiln_train_config ca = config(n, a, NULL);
    CHECK_OK(kiln_train(&ca, &r));
    struct stat sb;
    CHECK_MSG(stat(cache, &sb) == 0 && sb.st_size > 0, "no autotune cache written at %s", cache);
    kiln_st_file *f;
    CHECK_OK(kiln_st_open(a, &f));
    if (f) {
        const char *t = kiln_st_meta(f, "kiln.autotune");
        CHECK_MSG(t && strstr(t, "mb16ic32ih26iw26oc64"), "checkpoint lacks the conv decisions: %s", t ? t : "(none)");
        kiln_st_close(f);
    }
    /* a separate run on this machine reads the disk cache: same algorithms, same numbers */
    kiln_cpu_autotune_reset();
    kiln_train_config cc = config(2 * n, c, NULL);
    CHECK_OK(kiln_train(&cc, &r));
    /* the disk cache now claims the opposite algorithms; the resumed run must use its checkpoint's */
    char text[4096];
    FILE *fp = fopen(cache, "r");
    size_t len = fp ? fread(text, 1, sizeof text - 1, fp) : 0;
    if (fp) fclose(fp);
    text[len] = 0;
    for (size_t i = 0; i + 1 < len; i++)
        if (text[i] == ' ' && text[i + 2] == '\n' && (text[i + 1] == 'w' || text[i + 1] == 'd')) text[i + 1] = text[i + 1] == 'w' ? 'd' : 'w';
    fp = fopen(cache, "w");
    if (fp) {
        fputs(text, fp);
        fclose(fp);
    }
    kiln_cpu_autotune_reset();
    kiln_train_config cb = config(2 * n, b, a);
    CHECK_OK(kiln_train(&cb, &r));
    CHECK_MSG(same_tensors(b, c), "resume with autotune on is not exact");
    kiln_cpu_autotune_reset();
    unlink(a);
    unlink(b);
    unlink(c);
    unlink(cache);
}

/* a remembered algorithm oneDNN cannot make here (Winograd for a 1x1 conv, as a cache
 * from another CPU could hold) is chosen again instead of failing the compile */
static void test_unavailable_decision(void) {
    kiln_cpu_autotune_reset();
    kiln_graph *g = kiln_graph_new();
    int64_t xs[4] = {KILN_BATCH, 3, 8, 8}, ys[1] = {KILN_BATCH};
    kiln_value x = kiln_input(g, "x", KILN_F32, 4, xs), y = kiln_input(g, "y", KILN_I32, 1, ys);
    kiln_value w = kiln_param(g, "c.weight", 4, (int64_t[]){16, 3, 1, 1}, 3);
    kiln_value h = kiln_flatten(g, kiln_conv2d(g, x, w, -1, 1, 0), 1);
    kiln_value fw = kiln_param(g, "fc.weight", 2, (int64_t[]){4, 1024}, 1024);
    kiln_value loss = kiln_cross_entropy(g, kiln_linear(g, h, fw, -1), y);
    CHECK_OK(kiln_autotune_import("mb4ic3ih8iw8oc16kh1kw1sh1ph0 fwd w\nmb4ic3ih8iw8oc16kh1kw1sh1ph0 bwd_weight w\n", "t", 1));
    kiln_params *P = NULL;
    CHECK_OK(kiln_params_new(g, KILN_F32, &P));
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = 4;
    o.autotune = 1;
    kiln_plan *pl = NULL;
    kiln_log_set_level(KILN_LOG_ERROR); /* the fallback warns */
    CHECK_OK(kiln_compile(g, P, &loss, 1, &o, &pl));
    kiln_log_set_level(KILN_LOG_WARN);
    char a = 0;
    CHECK_MSG(kiln_autotune_lookup("mb4ic3ih8iw8oc16kh1kw1sh1ph0", "fwd", &a) && a == 'd', "decision now %c", a);
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
    kiln_cpu_autotune_reset();
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/kiln-autotune-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    setenv("KILN_CACHE_DIR", dir, 1);
    kiln_log_set_level(KILN_LOG_WARN);
    test_text();
    test_unavailable_decision();
    test_resume_with_autotune();
    rmdir(dir);
    return tu_finish("test_autotune");
}
