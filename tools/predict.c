/* kiln predict: a model's predictions for every image under a folder, as JSON
 * lines (kiln_predict in src/train/predict.c). */
#include <stdio.h>
#include "cli.h"
#include "kiln/predict.h"

static const char *usage =
    "usage: kiln predict --model NAME --load FILE --data DIR --out FILE [transforms] [--batch-size N]\n\n"
    "Every .jpg/.jpeg/.png under DIR (sub-folders too), in sorted path order, through\n"
    "the evaluation transforms (Resize, CenterCrop, ToTensor, Normalize) and an\n"
    "inference plan; FILE gets one JSON line per image: {\"file\": its path, \"top5\":\n"
    "class indices best first, \"logits\": all of them}. FILE is written whole or\n"
    "not at all. The ResNets run at the images' size after the transforms.\n\n";

static const cli_opt opts[] = {
    {"model", "NAME", "the model the weights belong to (resnet18, resnet20, mnist-cnn, ...)", NULL},
    {"load", "FILE", "weights: a kiln checkpoint or any safetensors file with the model's tensor names (e.g. a PyTorch state_dict)", NULL},
    {"data", "DIR", "the folder of images", NULL},
    {"out", "FILE", "the predictions, one JSON line per image", NULL},
    {"resize", "N", "Resize(N): the shorter side to N (bilinear, antialiased)", NULL},
    {"center-crop", "N", "CenterCrop(N) after the resize", NULL},
    {"normalize", "M/S|imagenet", "Normalize(mean, std) after x / 255, as the model was trained with", NULL},
    {"channels", "1|3", "1 (grey) or 3 (RGB)", "3"},
    {"num-classes", "N", "the ResNets: the classifier's outputs, as the model was trained with", "10"},
    {"batch-size", "N", "images per step (the last may be fewer)", "64"},
    {"workers", "N", "decoding threads (0: the compute thread decodes)", "1"},
    {"threads", "N", "compute threads; 0: all cores", "0"},
    {"autotune", "on|off", "time each convolution's algorithms on its real shape (remembered on disk)", "on"},
    {"precision", "fp32|bf16|auto", "mixed precision (as kiln train): conv2d and linear with bf16 operands; auto: where timed faster", "fp32"},
    {"json", NULL, "print one JSON object with the totals as the last line of stdout", NULL},
};
enum { P_MODEL, P_LOAD, P_DATA, P_OUT, P_RESIZE, P_NORMALIZE = P_RESIZE + 2, P_CHANNELS, P_CLASSES, P_BATCH, P_WORKERS,
       P_THREADS, P_AUTOTUNE, P_PREC, P_JSON, P_N };

/* the transforms go through the trainer's option table: they parse and fail exactly as train's and eval's */
static int transforms(const char **vals, kiln_data_config *dc) {
    kiln_train_config t = kiln_train_defaults();
    for (int i = P_RESIZE; i <= P_CHANNELS; i++)
        if (vals[i] && kiln_train_option_set(&t, opts[i].name, vals[i]) != KILN_OK)
            return cli_usage_error("predict", "%s", kiln_last_error());
    if (kiln_train_data_config(&t, dc) != KILN_OK) return cli_usage_error("predict", "%s", kiln_last_error());
    return 0;
}

static int settings(const char **vals, kiln_predict_config *c) {
    int64_t batch, workers, threads;
    if (cli_int("predict", opts, P_BATCH, vals, 1, KILN_MAX_BATCH, &batch) ||
        cli_int("predict", opts, P_WORKERS, vals, 0, 64, &workers) || cli_int("predict", opts, P_THREADS, vals, 0, 1024, &threads) ||
        cli_model_opts("predict", opts, -1, P_CLASSES, vals, &c->model_opts) ||
        (c->autotune = cli_on_off("predict", opts, P_AUTOTUNE, vals)) < 0 ||
        cli_precision("predict", opts, P_PREC, vals, &c->precision))
        return EXIT_USAGE;
    for (int i = P_MODEL; i <= P_OUT; i++)
        if (!vals[i]) return cli_usage_error("predict", "--%s %s is required", opts[i].name, opts[i].metavar);
    c->model = vals[P_MODEL];
    c->load = vals[P_LOAD];
    c->data = vals[P_DATA];
    c->out = vals[P_OUT];
    c->batch_size = batch;
    c->workers = (int)workers;
    c->threads = (int)threads;
    return transforms(vals, &c->data_config);
}

int cli_predict(int argc, char **argv) {
    const char *vals[P_N];
    int given[P_N];
    int rc = cli_parse("predict", usage, opts, P_N, argc, argv, vals, given);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    kiln_predict_config c = kiln_predict_defaults();
    if ((rc = settings(vals, &c)) != 0) return rc;
    kiln_predict_result r;
    kiln_status st = kiln_predict(&c, &r);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln predict: %s\n", kiln_last_error());
        return cli_exit_code(st);
    }
    fprintf(stderr, "kiln: %lld images, %d classes, written to %s in %.2f s (arena %.1f MiB)\n", (long long)r.images,
            r.num_classes, c.out, r.seconds, r.arena_mb);
    if (given[P_JSON]) {
        json_t *o = json_object();
        json_object_set_new(o, "model", json_string(c.model));
        json_object_set_new(o, "images", json_integer(r.images));
        json_object_set_new(o, "classes", json_integer(r.num_classes));
        json_object_set_new(o, "precision", json_string(kiln_precision_name(c.precision)));
        json_object_set_new(o, "out", json_string(c.out));
        json_object_set_new(o, "seconds", cli_json_num(r.seconds));
        json_object_set_new(o, "arena_mb", cli_json_num(r.arena_mb));
        cli_print_json(o);
    }
    return 0;
}
