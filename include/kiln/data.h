/* kiln/data.h — datasets and the batch loader.
 *
 *     kiln_dataset *train;
 *     if (kiln_dataset_open("fashion-mnist", 1, &train) != KILN_OK) ...  // or a folder of IDX files
 *     kiln_loader_config lc = kiln_loader_defaults();
 *     lc.batch_size = 64; lc.workers = 2; lc.seed = 1;
 *     kiln_loader *L; kiln_loader_new(train, &lc, &L);
 *     kiln_loader_start_epoch(L, epoch, 0);
 *     kiln_batch b;
 *     while (kiln_loader_next(L, &b) == 1) {   // 1: a batch, 0: epoch over, <0: error
 *         ... b.x (float, [b.n, C, H, W], 64-byte aligned), b.y (int32 labels [b.n]) ...
 *         kiln_loader_release(L, &b);          // the slot goes back to the workers
 *     }
 *
 * A dataset answers `len` and `get(index, rng key, destination)`: workers write
 * samples straight into a ring of preallocated aligned batch buffers, so the
 * training thread never copies a batch. Which samples form batch k of epoch e
 * depends only on (seed, e, k): the same for 0, 1 or many workers.
 */
#ifndef KILN_DATA_H
#define KILN_DATA_H

#include <stdint.h>
#include "kiln/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_dataset kiln_dataset;
struct kiln_dataset {
    const char *name;                 /* for messages: "fashion-mnist train" */
    int64_t len;
    int sample_ndim;                  /* shape of one sample, e.g. 3: {1, 28, 28} */
    int64_t sample_shape[KILN_MAX_DIMS];
    int num_classes;
    int64_t label_numel;              /* labels per sample (0: 1), e.g. a token window's next tokens */
    /* writes sample `index` as float into x (numel of sample_shape) and its label
     * into *y; `key` seeds any random transform (unused by IDX). Thread-safe.
     * A file that cannot be read or decoded is an error naming it (kiln_fail). */
    kiln_status (*get)(const kiln_dataset *ds, int64_t index, uint64_t key, float *x, int32_t *y);
    void (*destroy)(kiln_dataset *ds);
    /* optional (NULL: none): the loader names the samples it will ask for next,
     * a little ahead of the workers, so a remote dataset starts fetching them */
    void (*will_need)(const kiln_dataset *ds, const int64_t *index, int64_t n);
    /* optional (NULL: every sample fills its shape): variable-length samples of
     * one dim (token documents). sample_len: the positions sample `index` holds
     * (1..sample_shape[0]); get_width: the sample cut to `width` positions (x and
     * the labels `width` each), padded past its length with x 0 and label -1
     * (what the masked loss ignores) */
    int64_t (*sample_len)(const kiln_dataset *ds, int64_t index);
    kiln_status (*get_width)(const kiln_dataset *ds, int64_t index, uint64_t key, int64_t width, float *x, int32_t *y);
    void *impl;
};

/* Pixel normalisation of the PyTorch MNIST example. */
#define KILN_MNIST_MEAN 0.1307f
#define KILN_MNIST_STD 0.3081f

/* How samples are made (torchvision's names and defaults). The training split
 * uses the random transforms (RandomResizedCrop, flip), the test split the
 * deterministic ones (Resize, then CenterCrop to the crop size), as
 * torchvision's reference scripts. Only image folders take resize and crops;
 * IDX data takes normalize (1 value) and channels 1. */
typedef struct kiln_data_config {
    int resize;               /* Resize(N): the shorter side to N (0: none) */
    int center_crop;          /* CenterCrop(N) (0: none; the test split crops to random_resized_crop when given) */
    int random_resized_crop;  /* RandomResizedCrop(N), training only (0: none) */
    float scale[2];           /* its area fraction, (0.08, 1) */
    int hflip;                /* RandomHorizontalFlip(0.5), training only */
    int normalize;            /* 1: (x - mean) / std after ToTensor's x / 255 */
    float mean[3], std[3];
    int channels;             /* 1 or 3 (PIL's convert('L') / convert('RGB')); 0: 3 for images, 1 for IDX */
    float val_split;          /* DIR/<class>/... without train/ and test/: this share is the test split */
    const char *cache;        /* image folders and shards: keep decoded samples in this folder (NULL: none) */
    int block;                /* token files: tokens per sample (x: block tokens, labels: the next block) */
    int documents;            /* token files: a sample is a document of the index beside the file (cut to block + 1
                                 tokens, padded: sample_len/get_width), not a window of the stream */
    int skip_bad;             /* --bad-samples skip: a corrupt file met at open (the shape probe) is passed over too */
} kiln_data_config;
kiln_data_config kiln_data_defaults(void);
/* "N" or "N,lo,hi" into random_resized_crop and scale */
kiln_status kiln_data_parse_rrc(const char *text, kiln_data_config *dc);
/* "m1,m2,m3/s1,s2,s3", "m/s" (one channel) or "imagenet" into normalize, mean, std */
kiln_status kiln_data_parse_normalize(const char *text, kiln_data_config *dc);

/* Reads an IDX image file (magic 0x00000803, u8) and its label file (0x00000801),
 * gzipped or not; validates magic, dimensions, lengths and label range. */
kiln_status kiln_dataset_idx_open(const char *images_path, const char *labels_path, float mean,
                                  float std, kiln_dataset **out);
/* `name_or_folder` is "fashion-mnist" (Debian's dataset-fashion-mnist, in
 * /usr/share/datasets/fashion-mnist) or "mnist" or a folder holding
 * {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]. `train`: 1 train split, 0 test. */
kiln_status kiln_dataset_open(const char *name_or_folder, int train, kiln_dataset **out);
/* The same with transforms (NULL: defaults). A folder holding train/ (and test/)
 * or class folders of .jpg/.jpeg/.png files is an image folder (torchvision's
 * ImageFolder: classes are the sorted folder names); one holding the IDX files
 * is IDX data. "cifar10:DIR" is CIFAR-10's binary version (DIR holds
 * data_batch_{1..5}.bin and test_batch.bin), "tokens:FILE" a token file. */
kiln_status kiln_dataset_open_config(const char *name_or_folder, int train, const kiln_data_config *dc, kiln_dataset **out);
void kiln_dataset_free(kiln_dataset *ds);

/* Every .jpg/.jpeg/.png file under `dir`, sub-folders too (names starting with
 * '.' skipped), sorted by path in byte order: *paths (malloc'd; free with
 * kiln_image_files_free) and *n. A folder without images is an error naming it. */
kiln_status kiln_image_files(const char *dir, char ***paths, int64_t *n);
void kiln_image_files_free(char **paths, int64_t n);
/* Those files as a dataset (every label 0, `name` in messages) with the test
 * split's transforms of dc: Resize, CenterCrop, Normalize, channels. The sample
 * shape is the first file's after them; a later file giving another size is
 * an error naming it, as is a file that cannot be read or decoded. */
kiln_status kiln_dataset_open_files(const char *const *paths, int64_t n, const char *name, const kiln_data_config *dc,
                                    kiln_dataset **out);

/* llm.c's token files: a header of 256 little-endian int32 (magic 20240520,
 * version 1, token count), then the tokens as uint16. `--data tokens:FILE`
 * (with dc->block) serves windows of block + 1 tokens: x the first block (as
 * float), the labels (label_numel = block) the next ones. Training windows
 * start at a random offset drawn from the sample's key, (count - 1) / block of
 * them per epoch; the test split is the consecutive windows of the val file
 * beside it (X.val.tokens, as kiln tokenize writes) when there is one, else
 * of the file itself. */
#define KILN_TOKENS_MAGIC 20240520
#define KILN_TOKENS_VERSION 1
/* Writes n tokens as a token file, atomically (a temporary renamed into place). */
kiln_status kiln_tokens_write(const char *path, const uint16_t *tokens, int64_t n);
/* kiln tokenize: the bytes of the files, concatenated, as tokens (vocabulary
 * 256) into `out`; with val_fraction > 0 the last share goes to the val file
 * (kiln_tokens_val_path), which `--data tokens:OUT`'s test split reads. */
typedef struct kiln_tokenize_result {
    int64_t train_tokens, val_tokens;
    int64_t train_docs, val_docs;  /* documents in each file's index */
    char val_path[4096];      /* "" without a val file */
} kiln_tokenize_result;
kiln_status kiln_tokenize(const char *const *paths, int npaths, const char *out, double val_fraction,
                          kiln_tokenize_result *r);
/* The same, recording documents in the index beside each file written
 * (kiln_tokens_docs_write): each input file is a document, and with a
 * separator (non-NULL, e.g. "%" for fortune files) every line equal to it ends
 * one and is left out of the tokens. Empty documents are dropped; the val
 * file's first document is what is left of the one the split cuts. */
kiln_status kiln_tokenize_docs(const char *const *paths, int npaths, const char *out, double val_fraction,
                               const char *separator, kiln_tokenize_result *r);
/* Document index beside a token file: "FILE.docs" (docs.c gives its layout).
 * starts[0..n) are the documents' first tokens (starts[0] = 0, increasing),
 * ntokens the token file's count; written atomically. */
#define KILN_DOCS_MAGIC 20240521
#define KILN_DOCS_VERSION 1
kiln_status kiln_tokens_docs_path(const char *tokens_path, char *out, size_t len);
kiln_status kiln_tokens_docs_write(const char *tokens_path, const int64_t *starts, int64_t n, int64_t ntokens);
/* "X.tokens" -> "X.val.tokens" (any other name gets ".val.tokens" appended) */
kiln_status kiln_tokens_val_path(const char *train_path, char *out, size_t len);

/* Which samples an epoch visits, in which order: `len` samples per epoch,
 * `order` writes them for epoch e. Must be a pure function of (e, its own
 * settings), so prefetching an epoch early and resuming give the same batches. */
typedef struct kiln_sampler {
    int64_t (*len)(const struct kiln_sampler *s, int64_t dataset_len);
    kiln_status (*order)(const struct kiln_sampler *s, int64_t dataset_len, int64_t epoch, int64_t *out);
    void *ctx;
} kiln_sampler;

/* Batches of their own making (PyTorch's batch_sampler): epoch e's batches as
 * lists of samples, each batch of one width (positions per sample: the
 * dataset's get_width cuts or pads each sample to it, so a batch is [n, width]).
 * nbatches, samples and max_numel must be the same every epoch; order must be a
 * pure function of the epoch (prefetching across epochs, resuming). */
typedef struct kiln_batch_sampler {
    int64_t nbatches;   /* batches per epoch */
    int64_t samples;    /* samples per epoch, all batches together */
    int64_t max_numel;  /* the most samples x width of any batch: the ring's slots hold this */
    /* index[start[b] .. start[b+1]) are batch b's samples (start has nbatches + 1 entries), width[b] its width */
    kiln_status (*order)(const struct kiln_batch_sampler *s, int64_t epoch, int64_t *index, int64_t *start, int64_t *width);
    void *ctx;
} kiln_batch_sampler;

/* Length-bucketed batches of about batch_tokens positions (--batch-tokens;
 * src/data/length_batches.c says how): buckets of widths max_len, max_len/2, ...
 * (at most 4), batch_tokens / width samples a batch, the batches grouped so
 * that every rank gets as many, all a pure function of (seed, epoch). Not
 * thread-safe: one per thread that asks for epochs. */
#define KILN_MAX_LEN_BUCKETS 4
typedef struct kiln_length_batches_info {
    int nbuckets;
    int64_t width[KILN_MAX_LEN_BUCKETS];     /* positions per sample, widest first */
    int64_t per_batch[KILN_MAX_LEN_BUCKETS]; /* samples in a full batch */
    int64_t count[KILN_MAX_LEN_BUCKETS];     /* samples in the bucket */
    int64_t last[KILN_MAX_LEN_BUCKETS];      /* samples in its last batch */
    int64_t groups;       /* batches per epoch of every rank (steps) */
    int64_t samples;      /* this rank's samples per epoch (the same every epoch) */
    int64_t max_numel;    /* this rank's largest batch: samples x width */
    int rank, world;
} kiln_length_batches_info;
/* one epoch of this rank's batches, into arrays the caller sizes from the info */
typedef struct kiln_length_epoch {
    int64_t *index;          /* [samples]: batch b's samples are index[start[b] .. start[b+1]) */
    int64_t *start;          /* [groups + 1] */
    int64_t *width, *bucket; /* [groups]: the batch's width and bucket */
    int64_t *tokens;         /* [groups]: its positions (the samples' lengths summed: the loss's terms) */
    int64_t *group_tokens;   /* [groups]: the same summed over the ranks' batches of that step */
} kiln_length_epoch;
typedef struct kiln_length_batches kiln_length_batches;
/* len[i] in 1..max_len: sample i's positions */
kiln_status kiln_length_batches_new(const int64_t *len, int64_t n, int64_t max_len, int64_t batch_tokens, int rank,
                                    int world, uint64_t seed, kiln_length_batches **out);
const kiln_length_batches_info *kiln_length_batches_get_info(const kiln_length_batches *B);
kiln_status kiln_length_batches_epoch(kiln_length_batches *B, int64_t epoch, kiln_length_epoch *e);
void kiln_length_batches_free(kiln_length_batches *B);

typedef struct kiln_loader_config {
    int64_t batch_size;
    int shuffle;        /* 1: a seeded permutation per epoch */
    int drop_last;      /* 0: the last batch may be smaller (as PyTorch's default) */
    uint64_t seed;
    int workers;        /* 0: the training thread loads each batch itself */
    int max_workers;    /* kiln_loader_set_workers may go up to this (0: workers); the ring is sized for it */
    int prefetch;       /* batches in flight per worker (ring = max(2, max_workers * prefetch) slots) */
    int lock_memory;    /* 1: mlock the ring (the CPU meaning of pinned memory); best effort */
    int next_epoch;     /* 1: workers go on into epoch e+1 while e's last batches are used (no pause at an epoch's start) */
    int skip_bad;       /* 1: a sample whose get fails is replaced by the next readable one, and counted (--bad-samples skip) */
    /* distributed sampling as PyTorch's DistributedSampler: every rank draws the
     * same permutation, pads it to a multiple of world (repeating its start)
     * unless drop_last, and takes every world-th sample from rank; world <= 1: all */
    int rank, world;
    const kiln_sampler *sampler; /* NULL: sequential, seeded random (shuffle) or distributed, from the fields above */
    /* variable batches (NULL: batch_size samples of the dataset's shape each): needs a dataset of
     * one-dim samples with get_width; batch_size, shuffle, drop_last, rank, world and sampler are unused */
    const kiln_batch_sampler *batches;
    /* the ring's memory: NULL for kiln_alloc; a GPU backend's page-locked allocator
     * (kiln_params_host_allocator), so its copy of each batch runs asynchronously */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
} kiln_loader_config;
kiln_loader_config kiln_loader_defaults(void);

typedef struct kiln_batch {
    float *x;           /* [n, sample_shape...] */
    int32_t *y;         /* [n, label_numel] */
    int64_t n;
    int64_t index;      /* batch number within the epoch */
    int64_t width;      /* with a batch sampler: positions per sample (x is [n, width]); else 0 */
    int slot;           /* ring slot, for release */
} kiln_batch;

typedef struct kiln_loader kiln_loader;
kiln_status kiln_loader_new(kiln_dataset *ds, const kiln_loader_config *cfg, kiln_loader **out);
/* Starts epoch `epoch` at batch `first_batch` (non-zero when resuming). */
kiln_status kiln_loader_start_epoch(kiln_loader *L, int64_t epoch, int64_t first_batch);
/* the status of the error kiln_loader_next last returned <0 for (KILN_OK: none) */
kiln_status kiln_loader_status(const kiln_loader *L);
/* 1: *b holds the next batch; 0: the epoch is over; <0: an error, kiln_last_error()
 * says which (the first error of any worker, e.g. a corrupt file, comes back here
 * on the calling thread). Blocks while workers fill it. */
int kiln_loader_next(kiln_loader *L, kiln_batch *b);
void kiln_loader_release(kiln_loader *L, const kiln_batch *b);
int64_t kiln_loader_batches_per_epoch(const kiln_loader *L);
/* Seconds the training thread has spent blocked in kiln_loader_next (incl. loading itself with 0 workers). */
double kiln_loader_wait_seconds(const kiln_loader *L);
/* samples skip_bad replaced so far */
int64_t kiln_loader_skipped(const kiln_loader *L);
/* the ring: slots and bytes (fixed at kiln_loader_new, never grows) */
int kiln_loader_ring_slots(const kiln_loader *L);
size_t kiln_loader_ring_bytes(const kiln_loader *L);
/* Workers now at work; 0..max_workers, changed between batches (a lowered
 * count parks the extra threads; none is lost). Fails when workers was 0. */
kiln_status kiln_loader_set_workers(kiln_loader *L, int workers);
int kiln_loader_workers(const kiln_loader *L);
void kiln_loader_free(kiln_loader *L);

/* The loader benchmark: a loader over ds with cfg, `warmup` batches fetched and
 * dropped (workers started, ring full), then `batches` fetched and released as
 * fast as they come, with no work between (0: about 2 s or 200 batches,
 * whichever ends first); epochs wrap. *images_per_s is the timed part's rate,
 * *measured (may be NULL) the batches it timed. */
kiln_status kiln_loader_bench(kiln_dataset *ds, const kiln_loader_config *cfg, int64_t warmup, int64_t batches,
                              double *images_per_s, int64_t *measured);
/* Whole epochs 0..epochs-1 timed one by one (from starting the epoch to its
 * last batch, no warm-up): images_per_s[e] and batches[e], for the cache's
 * first epoch against the later ones. */
kiln_status kiln_loader_bench_epochs(kiln_dataset *ds, const kiln_loader_config *cfg, int64_t epochs, double *images_per_s,
                                     int64_t *batches);
/* The permutation of epoch e: perm[i] for i < n, from a counter-based RNG keyed by (seed, e). */
void kiln_shuffle_indices(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch);
/* the built-in sampler of a config (sequential, random or distributed); ctx points at cfg, which must outlive it */
kiln_sampler kiln_sampler_of(const kiln_loader_config *cfg);

/* Writes a dataset as an image folder: OUT/train/<label>/<index>.<ext> and
 * OUT/test/...; `from` is "fashion-mnist", "mnist" or an IDX folder; format
 * "jpeg" (quality 90) or "png"; size > 0 resizes each image to size x size
 * (bilinear, antialiased, as Resize); channels 1 or 3. *written counts files. */
kiln_status kiln_pack_images(const char *from, const char *to, const char *format, int size, int channels, int64_t *written);
/* Packs a dataset as shards: OUT/<split>-NNNNN.kshard of shard_size samples
 * each (0: 4096) and OUT/index.json, written last (each file atomically).
 * `from` is as above (records: PNG files of the images, lossless) or an image
 * folder (records: its files' bytes as they are, never re-encoded). decoded:
 * records are u8 pixels instead, size > 0 resized to size x size, with
 * `channels` (0: 1 for IDX data, 3 for image folders). *written counts samples. */
kiln_status kiln_pack_shards(const char *from, const char *to, int decoded, int64_t shard_size, int size, int channels,
                             int64_t *written);

#ifdef __cplusplus
}
#endif
#endif
