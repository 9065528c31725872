/* Private interfaces between the dataset readers of src/data. */
#ifndef KILN_DATA_FOLDER_H
#define KILN_DATA_FOLDER_H

#include <stdint.h>
#include "kiln/data.h"

/* 1 when `folder` is laid out as an image folder (train/ or class folders, and no IDX files) */
int kiln_imagefolder_detect(const char *folder);
kiln_status kiln_imagefolder_open(const char *folder, int train, const kiln_data_config *dc, kiln_dataset **out);
/* the folder's files and labels as records (records.h), without opening a dataset (kiln pack) */
struct kiln_records;
kiln_status kiln_imagefolder_records(const char *folder, int train, const kiln_data_config *dc, struct kiln_records **out);
/* 1 when `folder` holds a shard manifest (index.json), or is an http(s):// URL */
int kiln_shards_detect(const char *folder);
/* packed shards (OUT/index.json and its shard files), local or at a URL */
kiln_status kiln_shards_open(const char *base, int train, const kiln_data_config *dc, kiln_dataset **out);
/* CIFAR-10's binary batches in `dir` (cifar.c) */
kiln_status kiln_cifar_open(const char *dir, int train, const kiln_data_config *dc, kiln_dataset **out);
/* the same from 1..5 batch files (the fuzz target's way in) */
kiln_status kiln_cifar_open_files(const char *const *files, int n, const char *name, int train, const kiln_data_config *dc,
                                  kiln_dataset **out);
/* a token file (tokens.c): windows of dc->block + 1 tokens */
kiln_status kiln_tokens_open(const char *path, int train, const kiln_data_config *dc, kiln_dataset **out);
/* writing files: every byte of b (EINTR retried), or a message naming tmp */
kiln_status kiln_write_all(int fd, const uint8_t *b, size_t n, const char *tmp);
/* a temporary beside path filled by body (given the temporary's name for
 * messages), synced and renamed over path; removed on failure */
kiln_status kiln_write_atomic(const char *path, kiln_status (*body)(int fd, const void *ctx, const char *tmp), const void *ctx);
/* the document index beside a token file of ntokens tokens (docs.c): *ndocs
 * documents, (*off)[i] .. (*off)[i+1] (malloc'd); a message saying how to make
 * one when it is absent */
kiln_status kiln_tokens_docs_read(const char *tokens_path, int64_t ntokens, int64_t **off, int64_t *ndocs);
/* an IDX dataset's raw pixels [len, rows, cols] and labels, for kiln pack */
kiln_status kiln_idx_raw(const kiln_dataset *ds, const uint8_t **pixels, const uint8_t **labels, int *rows, int *cols);

#endif
