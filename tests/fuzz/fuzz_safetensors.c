/* Fuzz target: the safetensors reader (src/tensor/safetensors.c). The input
 * is a whole file; an accepted one has every tensor read byte by byte, found
 * again by name, and its metadata looked up. A refused one must say why. */
#include "fuzz_util.h"
#include "kiln/safetensors.h"

static const char *const meta_keys[] = {"format", "kiln.format", "kiln.step", "kiln.settings", "kiln.autotune", "", NULL};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz_file file;
    static int init;
    if (!init) {
        fuzz_quiet();
        init = 1;
    }
    const char *path = fuzz_file_put(&file, "st", data, size);
    kiln_st_file *f = NULL;
    kiln_status st = kiln_st_open(path, &f);
    fuzz_check_error(st);
    if (st != KILN_OK) {
        if (f) abort(); /* a failed open hands out nothing */
        return 0;
    }
    uint64_t total = 0;
    volatile uint8_t sink = 0;
    for (int i = 0; i < kiln_st_count(f); i++) {
        const kiln_tensor *t = kiln_st_at(f, i);
        const char *name = kiln_st_name(f, i);
        if (!t || !name || kiln_st_find(f, name) != t) abort();
        if (t->ndim < 0 || t->ndim > KILN_MAX_DIMS) abort();
        char shape[256];
        kiln_shape_str(t->ndim, t->shape, shape, sizeof shape);
        size_t nb = kiln_tensor_nbytes(t);
        total += nb;
        if (total > size) abort(); /* the data section is part of the file */
        const uint8_t *p = t->data;
        for (size_t k = 0; k < nb; k++) sink ^= p[k];
        (void)kiln_dtype_name(t->dtype);
    }
    for (int k = 0; meta_keys[k]; k++) {
        const char *v = kiln_st_meta(f, meta_keys[k]);
        if (v) sink ^= (uint8_t)strlen(v);
    }
    if (kiln_st_find(f, "no such tensor") || strcmp(kiln_st_path(f), path) != 0) abort();
    kiln_st_close(f);
    (void)sink;
    return 0;
}
