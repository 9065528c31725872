/* kiln/predict.h — a model's predictions for a folder of images (`kiln predict`).
 *
 *     kiln_predict_config c = kiln_predict_defaults();
 *     c.model = "resnet18"; c.load = "weights.safetensors"; c.data = "photos"; c.out = "preds.jsonl";
 *     c.data_config.resize = 128; c.data_config.center_crop = 112;
 *     kiln_predict_result r;
 *     if (kiln_predict(&c, &r) != KILN_OK) ... kiln_last_error()
 *
 * Every .jpg/.jpeg/.png under `data` (sub-folders too), in sorted path order,
 * goes through the evaluation transforms (Resize, CenterCrop, ToTensor,
 * Normalize) and an inference plan; `out` gets one JSON line per image:
 * {"file": its path, "top5": class indices best first, "logits": all of them}.
 * The file is written whole or not at all (a temporary renamed into place).
 */
#ifndef KILN_PREDICT_H
#define KILN_PREDICT_H

#include "kiln/data.h"
#include "kiln/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_predict_config {
    const char *model;            /* a zoo name */
    kiln_model_opts model_opts;   /* num_classes; height and width 0: the images' size after the transforms */
    const char *load;             /* weights: a kiln checkpoint or a state_dict as safetensors */
    const char *data;             /* the folder searched */
    const char *out;              /* the JSONL file written */
    kiln_data_config data_config; /* the evaluation transforms (resize, center_crop, normalize, channels) */
    int64_t batch_size;           /* images per plan run; the last batch may be shorter */
    int workers;                  /* decoding threads (0: the calling thread) */
    int threads;                  /* compute threads; 0: every core */
    int autotune;                 /* as kiln_compile_opts.autotune */
    int precision;                /* kiln_precision: as kiln_compile_opts.precision (--precision) */
} kiln_predict_config;
kiln_predict_config kiln_predict_defaults(void); /* batch 64, 1 worker, every core, autotune on, fp32 */

typedef struct kiln_predict_result {
    int64_t images;
    int num_classes;
    double seconds;               /* from compiling to the file renamed into place */
    double arena_mb;              /* the inference plan's activation arena */
} kiln_predict_result;
kiln_status kiln_predict(const kiln_predict_config *c, kiln_predict_result *r);

#ifdef __cplusplus
}
#endif
#endif
