/* Fuzz target: the token file reader (src/data/tokens.c), `--data tokens:FILE`.
 *
 * The input: one flags byte, then the file's bytes. Flags bits 0-5 give the
 * block size (1..64), bit 6 the test split instead of training. An accepted
 * file must hold what it claims: every sample's x and labels are tokens below
 * num_classes, and labels follow x inside the window.
 *
 * Bit 7: documents (docs.c's index beside the file): then a little-endian
 * uint16 D, D bytes of index, then the token file. The index needs a real
 * path beside the token file (FILE.docs), so these two are files in a
 * temporary folder, removed at exit. An accepted pair must give samples of
 * 1..block positions, their tokens then padding (x 0, label -1). */
#include <sys/stat.h>
#include "fuzz_util.h"
#include "kiln/data.h"

static char g_dir[64];

static void remove_dir(void) {
    char p[96];
    snprintf(p, sizeof p, "%s/t.tokens", g_dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/t.tokens.docs", g_dir);
    unlink(p);
    rmdir(g_dir);
}

static void put(const char *path, const uint8_t *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) abort();
}

/* documents: the index and the token file in the folder; a sample's positions, then padding */
static int documents(const uint8_t *data, size_t size, kiln_data_config *dc, int train) {
    if (size < 2 || (size_t)(data[0] | data[1] << 8) > size - 2) return 0;
    size_t d = (size_t)(data[0] | data[1] << 8);
    char tok[96], docs[112], name[112];
    snprintf(tok, sizeof tok, "%s/t.tokens", g_dir);
    snprintf(docs, sizeof docs, "%s.docs", tok);
    put(docs, data + 2, d);
    put(tok, data + 2 + d, size - 2 - d);
    snprintf(name, sizeof name, "tokens:%s", tok);
    dc->documents = 1;
    kiln_dataset *ds = NULL;
    kiln_status st = kiln_dataset_open_config(name, train, dc, &ds);
    fuzz_check_error(st);
    if (st != KILN_OK) {
        if (ds) abort();
        return 0;
    }
    if (ds->len < 1 || !ds->sample_len || !ds->get_width) abort();
    float x[64];
    int32_t y[64];
    int64_t picks[2] = {0, ds->len - 1};
    for (int i = 0; i < 2; i++) {
        int64_t n = ds->sample_len(ds, picks[i]);
        if (n < 1 || n > dc->block || ds->get_width(ds, picks[i], (uint64_t)size, dc->block, x, y) != KILN_OK) abort();
        for (int64_t k = 0; k < dc->block; k++) {
            int in = k < n;
            if (in && (x[k] < 0 || x[k] >= (float)ds->num_classes || y[k] < 0 || y[k] >= ds->num_classes)) abort();
            if (!in && (x[k] != 0 || y[k] != -1)) abort();
            if (k + 1 < n && x[k + 1] != (float)y[k]) abort();
        }
    }
    kiln_dataset_free(ds);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz_file f;
    static int init;
    static char name[80];
    if (!init) {
        fuzz_quiet();
        init = 1;
    }
    if (size < 1) return 0;
    kiln_data_config dc = kiln_data_defaults();
    dc.block = (data[0] & 63) + 1;
    int train = !(data[0] & 64);
    if (data[0] & 128) {
        if (!g_dir[0]) {
            snprintf(g_dir, sizeof g_dir, "/tmp/kiln_fuzz_tokens.XXXXXX");
            if (!mkdtemp(g_dir)) abort();
            atexit(remove_dir);
        }
        return documents(data + 1, size - 1, &dc, train);
    }
    snprintf(name, sizeof name, "tokens:%s", fuzz_file_put(&f, "tokens", data + 1, size - 1));
    kiln_dataset *ds = NULL;
    kiln_status st = kiln_dataset_open_config(name, train, &dc, &ds);
    fuzz_check_error(st);
    if (st != KILN_OK) {
        if (ds) abort();
        return 0;
    }
    if (ds->len < 1 || ds->sample_ndim != 1 || ds->sample_shape[0] != dc.block || ds->label_numel != dc.block ||
        ds->num_classes < 1 || ds->num_classes > 65536)
        abort();
    float x[64];
    int32_t y[64];
    int64_t picks[2] = {0, ds->len - 1};
    for (int i = 0; i < 2; i++) {
        if (ds->get(ds, picks[i], (uint64_t)size * 2654435761u, x, y) != KILN_OK) abort();
        for (int k = 0; k < dc.block; k++) {
            if (x[k] < 0 || x[k] >= (float)ds->num_classes || y[k] < 0 || y[k] >= ds->num_classes) abort();
            if (k + 1 < dc.block && x[k + 1] != (float)y[k]) abort();
        }
    }
    kiln_dataset_free(ds);
    return 0;
}
