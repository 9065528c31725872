/* Fuzz target: packed shards (src/data/shard.c, manifest.c, shardset.c and
 * imageset.c behind them): a manifest and a shard file as `--data OUT` reads
 * them, then samples decoded and transformed as a loader worker does.
 *
 * The input: one flags byte, a 4-byte little-endian length L, L bytes of
 * index.json, then the shard file's bytes, written as both
 * train-00000.kshard and test-00000.kshard in a scratch folder (in /dev/shm
 * when there is one, removed at exit). Flags bit 0 picks 1 or 3 channels,
 * bit 1 a RandomResizedCrop(13) with a flip instead of Resize(16) +
 * CenterCrop(16), bit 2 the test split. An accepted dataset must answer
 * every sample it claims with a label in range and finite values, or refuse
 * it with a message. */
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include "fuzz_util.h"
#include "kiln/data.h"

static char g_dir[64];
static const char *const g_files[3] = {"index.json", "train-00000.kshard", "test-00000.kshard"};

static void path_of(char *out, size_t n, int i) { snprintf(out, n, "%s/%s", g_dir, g_files[i]); }

static void cleanup(void) {
    char p[128];
    for (int i = 0; i < 3; i++) path_of(p, sizeof p, i), unlink(p);
    rmdir(g_dir);
}

static void put(int i, const uint8_t *b, size_t n) {
    char p[128];
    path_of(p, sizeof p, i);
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(b, 1, n, f) != n) || fclose(f) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) {
        fuzz_quiet();
        struct stat sb;
        snprintf(g_dir, sizeof g_dir, "%s/kiln_fuzz_shard.XXXXXX", stat("/dev/shm", &sb) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(g_dir)) abort();
        atexit(cleanup);
    }
    if (size < 5) return 0;
    int flags = data[0];
    size_t len = (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 | (size_t)data[4] << 24;
    data += 5, size -= 5;
    if (len > size) len = size;
    put(0, data, len);
    put(1, data + len, size - len);
    put(2, data + len, size - len);
    kiln_data_config dc = kiln_data_defaults();
    dc.channels = flags & 1 ? 3 : 1;
    if (flags & 2) dc.random_resized_crop = 13, dc.hflip = 1;
    else dc.resize = dc.center_crop = 16;
    kiln_dataset *ds = NULL;
    kiln_status st = kiln_dataset_open_config(g_dir, !(flags & 4), &dc, &ds);
    fuzz_check_error(st);
    if (st != KILN_OK) return 0;
    int64_t numel = 1;
    for (int d = 0; d < ds->sample_ndim; d++) numel *= ds->sample_shape[d];
    if (ds->len < 1 || numel < 1 || numel > 3 * 16 * 16) abort();
    static float x[3 * 16 * 16];
    for (int64_t i = 0; i < ds->len && i < 64; i++) {
        int32_t y = -1;
        st = ds->get(ds, i, (uint64_t)i * 2654435761u, x, &y);
        fuzz_check_error(st);
        if (y < 0 || y >= ds->num_classes) abort();
        for (int64_t j = 0; st == KILN_OK && j < numel; j++)
            if (!isfinite(x[j])) abort();
    }
    kiln_dataset_free(ds);
    return 0;
}
