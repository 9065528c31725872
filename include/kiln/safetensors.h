/* kiln/safetensors.h — read and write safetensors files (weights, checkpoints,
 * test fixtures). The layout is Hugging Face's: 8-byte little-endian header
 * length, a JSON header {"name": {"dtype","shape","data_offsets"}, ...,
 * "__metadata__": {"key": "string"}}, then the raw little-endian data.
 *
 *     kiln_st_file *f;
 *     if (kiln_st_open("run.safetensors", &f) != KILN_OK) ... kiln_last_error()
 *     const kiln_tensor *w = kiln_st_find(f, "conv1.weight");   // NULL if absent
 *     const char *step = kiln_st_meta(f, "kiln.step");          // NULL if absent
 *     kiln_st_close(f);
 *
 *     kiln_st_writer *w = kiln_st_writer_new();
 *     kiln_st_writer_add(w, "fc1.weight", KILN_F32, 2, shape, data); // data copied at save
 *     kiln_st_writer_meta(w, "kiln.step", "100");
 *     kiln_st_writer_save(w, "run.safetensors");  // temp file, fsync, rename: atomic
 *     kiln_st_writer_free(w);
 */
#ifndef KILN_SAFETENSORS_H
#define KILN_SAFETENSORS_H

#include "kiln/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_st_file kiln_st_file;

/* Reads and validates the whole file; errors name the file and what is wrong
 * (truncated, header not JSON, offsets out of range, unknown dtype, ...). */
kiln_status kiln_st_open(const char *path, kiln_st_file **out);
void kiln_st_close(kiln_st_file *f);
int kiln_st_count(const kiln_st_file *f);
const kiln_tensor *kiln_st_at(const kiln_st_file *f, int i);   /* tensors in file order */
const char *kiln_st_name(const kiln_st_file *f, int i);
const kiln_tensor *kiln_st_find(const kiln_st_file *f, const char *name);
const char *kiln_st_meta(const kiln_st_file *f, const char *key);
const char *kiln_st_path(const kiln_st_file *f);

typedef struct kiln_st_writer kiln_st_writer;
kiln_st_writer *kiln_st_writer_new(void);
/* The data pointer must stay valid until save; nothing is copied before. */
kiln_status kiln_st_writer_add(kiln_st_writer *w, const char *name, kiln_dtype dtype, int ndim,
                               const int64_t *shape, const void *data);
kiln_status kiln_st_writer_meta(kiln_st_writer *w, const char *key, const char *value);
/* Atomic: writes PATH.tmp.<pid>, fsyncs it, renames over PATH, fsyncs the folder.
 * On failure the temporary file is removed and an existing PATH is untouched. */
kiln_status kiln_st_writer_save(kiln_st_writer *w, const char *path);
void kiln_st_writer_free(kiln_st_writer *w);

#ifdef __cplusplus
}
#endif
#endif
