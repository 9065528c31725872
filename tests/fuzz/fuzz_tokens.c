/* Fuzz target: the token file reader (src/data/tokens.c), `--data tokens:FILE`.
 *
 * The input: one flags byte, then the file's bytes. Flags bits 0-5 give the
 * block size (1..64), bit 6 the test split instead of training. An accepted
 * file must hold what it claims: every sample's x and labels are tokens below
 * num_classes, and labels follow x inside the window. */
#include "fuzz_util.h"
#include "kiln/data.h"

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
