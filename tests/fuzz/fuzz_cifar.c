/* Fuzz target: the CIFAR-10 reader (src/data/cifar.c): the batch files of
 * `--data cifar10:DIR`, as kiln_cifar_open hands them to
 * kiln_cifar_open_files.
 *
 * The input: one flags byte, a 4-byte little-endian length L, L bytes of the
 * first batch file, then the second (L is clamped to what is there). Flags
 * bit 0 gives one file instead of two; bit 1 one channel (convert('L'));
 * bits 2-3 the transform: none, Resize(20) + CenterCrop(16), RandomResizedCrop(24)
 * with a flip, or CenterCrop(28). An accepted dataset must hold what it
 * claims: labels in range, its first and last samples finite and readable. */
#include <math.h>
#include "data/internal/folder.h"
#include "fuzz_util.h"
#include "kiln/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz_file a, b;
    static int init;
    if (!init) {
        fuzz_quiet();
        init = 1;
    }
    int flags;
    size_t L;
    if (!fuzz_two_parts(&data, &size, &flags, &L)) return 0;
    const char *files[2] = {fuzz_file_put(&a, "batch1", data, L), fuzz_file_put(&b, "batch2", data + L, size - L)};
    kiln_data_config dc = kiln_data_defaults();
    dc.channels = flags & 2 ? 1 : 3;
    switch ((flags >> 2) & 3) {
    case 1: dc.resize = 20, dc.center_crop = 16; break;
    case 2: dc.random_resized_crop = 24, dc.hflip = 1; break;
    case 3: dc.center_crop = 28; break;
    default: break;
    }
    kiln_dataset *ds = NULL;
    kiln_status st = kiln_cifar_open_files(files, flags & 1 ? 1 : 2, "fuzz", 1, &dc, &ds);
    fuzz_check_error(st);
    if (st != KILN_OK) {
        if (ds) abort();
        return 0;
    }
    if (ds->len < 1 || ds->sample_ndim != 3 || ds->num_classes != 10 || ds->sample_shape[0] != dc.channels) abort();
    int64_t numel = ds->sample_shape[0] * ds->sample_shape[1] * ds->sample_shape[2];
    float *x = malloc((size_t)numel * sizeof *x);
    if (!x) abort();
    int64_t picks[2] = {0, ds->len - 1};
    for (int i = 0; i < 2; i++) {
        int32_t y = -1;
        if (ds->get(ds, picks[i], (uint64_t)size, x, &y) != KILN_OK) abort(); /* a validated file serves every sample */
        if (y < 0 || y >= 10) abort();
        for (int64_t k = 0; k < numel; k++)
            if (!isfinite(x[k]) || x[k] < 0 || x[k] > 1) abort();
    }
    free(x);
    kiln_dataset_free(ds);
    return 0;
}
