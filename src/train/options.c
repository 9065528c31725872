/* The trainer's settings as one table: each entry names a field of
 * kiln_train_config the way the command line spells it ("batch-size"), says
 * how to parse and print it, and whether it may change when a run is
 * resumed. The CLI builds its parser and its --help from this table, the
 * defaults come from kiln_train_defaults() alone, and checkpoints keep the
 * settings that define a run (kiln_train_settings_json) so `--resume FILE`
 * alone continues it. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kiln/train.h"

typedef enum { T_I64, T_INT, T_F32, T_POS_OR_OFF, T_STR, T_FLAG, T_NOFLAG, T_BATCH, T_OPTIM, T_MIB, T_PRECISION, T_RRC, T_NORM, T_WORKERS, T_BAD, T_DECAY, T_CKPT, T_AMP, T_ONOFF } field_type;
static const char *const precisions[] = {"highest", "high", "medium"};
static const char *const bad_samples[] = {"fail", "skip"};
static const char *const onoff[] = {"off", "on"};

typedef struct {
    kiln_train_option pub;
    field_type type;
    size_t offset;
} field;

#define C(member) offsetof(kiln_train_config, member)
#define OPT(name, metavar, resumable, type, member, help) {{name, metavar, help, resumable, type == T_FLAG || type == T_NOFLAG}, type, C(member)}

/* in the order they are applied: the optimizer before its hyperparameters */
static const field fields[] = {
    OPT("model", "NAME", 0, T_STR, model, "model from the zoo: mnist-cnn (PyTorch's examples/mnist network), mnist-cnn-bn, mnist-cnn-bn-bias (with the conv biases its norms cancel, for --fix-bias), mlp, resnet20 (CIFAR, 3x32x32), resnet18, resnet34, resnet50 (torchvision's, 3x112x112), gpt (GPT-2's layout: --layers, --heads, --dim, --block, --vocab; data tokens:FILE)"),
    OPT("num-classes", "N", 0, T_INT, num_classes, "the ResNets: outputs of the classifier (fc); 0: the model's own (10)"),
    OPT("layers", "N", 0, T_INT, gpt.layers, "gpt: transformer blocks"),
    OPT("heads", "N", 0, T_INT, gpt.heads, "gpt: attention heads (divides --dim)"),
    OPT("dim", "N", 0, T_INT, gpt.dim, "gpt: embedding width"),
    OPT("block", "N", 0, T_INT, gpt.block, "gpt: context length, the tokens of a sample (token files: windows of N + 1)"),
    OPT("vocab", "N", 0, T_INT, gpt.vocab, "gpt: vocabulary size (256: bytes, as kiln tokenize writes)"),
    OPT("data", "NAME|DIR", 0, T_STR, data, "fashion-mnist (Debian's dataset-fashion-mnist), a folder holding "
                                            "{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz], or an image folder "
                                            "(DIR/train/<class>/*.jpg|png and DIR/test/..., or DIR/<class>/... with --val-split)"),
    OPT("resize", "N", 0, T_INT, resize, "image folders: Resize(N), the shorter side to N (bilinear, antialiased); 0: none"),
    OPT("center-crop", "N", 0, T_INT, center_crop, "image folders: CenterCrop(N) after the resize; 0: none"),
    OPT("random-resized-crop", "N[,lo,hi]", 0, T_RRC, random_resized_crop, "image folders, training: RandomResizedCrop(N, "
                                            "scale=(lo, hi), default (0.08, 1)); the test split is resized and center-cropped to N"),
    OPT("hflip", NULL, 0, T_FLAG, hflip, "image folders, training: RandomHorizontalFlip(0.5)"),
    OPT("normalize", "M/S|imagenet", 0, T_NORM, normalize, "Normalize(mean, std) after x / 255: m1,m2,m3/s1,s2,s3, m/s for "
                                            "one channel, or imagenet (default: none for images, 0.1307/0.3081 for IDX)"),
    OPT("channels", "1|3", 0, T_INT, channels, "image folders: 1 (grey, PIL's convert('L')) or 3 (RGB); 0: 3, as torchvision"),
    OPT("val-split", "X", 0, T_F32, val_split, "DIR/<class>/... folders: this share of the images (a fixed seeded draw) is the test split"),
    OPT("cache", "DIR", 1, T_STR, cache, "image folders and shards: the first epoch keeps each sample decoded (resized and "
                                         "cropped too unless the crop is random) in DIR; later epochs read it instead of decoding"),
    OPT("epochs", "N", 1, T_I64, epochs, "passes over the training set (the total, counting resumed ones)"),
    OPT("batch-size", "N|auto", 0, T_BATCH, batch_size, "samples per step (per rank under mpirun: a resumed run keeps this x ranks); "
                                                        "the last batch of an epoch may be smaller; auto: "
                                                        "the largest power of two whose activations and gradients fit in --memory-budget-mb"),
    OPT("test-batch-size", "N", 1, T_I64, test_batch_size, "samples per evaluation step"),
    OPT("accumulate", "N", 0, T_I64, accumulate, "gradient accumulation: N batches per optimizer step (their mean gradient, "
                                                 "as one batch N times larger)"),
    OPT("optimizer", "NAME", 0, T_OPTIM, optim, "adadelta, adamw or sgd (PyTorch 1.13 semantics); lamb, lars or novograd "
                                                "(their papers: docs/optimizers.md)"),
    OPT("lr", "X", 0, T_F32, optim.lr, "learning rate (each optimizer has its own default: adadelta 1, adamw 0.001, sgd 0.01, "
                                       "lamb 0.001, lars 0.1, novograd 0.001)"),
    OPT("momentum", "X", 0, T_F32, optim.momentum, "sgd and lars momentum (lars: 0.9)"),
    OPT("nesterov", NULL, 0, T_FLAG, optim.nesterov, "sgd: Nesterov momentum"),
    OPT("beta1", "X", 0, T_F32, optim.beta1, "adamw, lamb, novograd: the first moment's decay (0.9; novograd 0.95)"),
    OPT("beta2", "X", 0, T_F32, optim.beta2, "adamw, lamb, novograd: the second moment's decay (0.999; novograd 0.98)"),
    OPT("eps", "X", 0, T_F32, optim.eps, "added to the denominator (adamw 1e-8, lamb 1e-6, novograd 1e-8, adadelta 1e-6)"),
    OPT("trust-coefficient", "X", 0, T_F32, optim.trust, "lars: eta in local_lr = eta*||w|| / (||g|| + wd*||w||) (0.001)"),
    OPT("weight-decay", "X", 0, T_F32, optim.weight_decay, "L2 (sgd, adadelta, lars, novograd) or decoupled (adamw, lamb) weight "
                                                           "decay, on parameters of 2 or more dims only (not biases and norm "
                                                           "weights) unless --decay-all"),
    OPT("decay-all", NULL, 0, T_FLAG, optim.decay_all, "weight decay on every parameter, biases and norm weights too "
                                                       "(torch.optim over model.parameters())"),
    OPT("warmup", "N", 0, T_I64, warmup, "linear warmup over the first N optimizer steps: step s (from 0) gets lr*(s+1)/N"),
    OPT("lr-decay", "step|none|cosine|linear", 0, T_DECAY, lr_decay, "after the warmup: StepLR per epoch (--lr-step-gamma, "
                                                                    "--lr-step-size; the default), constant, or cosine or "
                                                                    "linear to --min-lr at the run's last step"),
    OPT("min-lr", "X", 0, T_F32, min_lr, "where cosine and linear decay end (0)"),
    OPT("lr-decay-steps", "N", 0, T_I64, lr_decay_steps, "cosine and linear decay reach --min-lr at step N; 0: at the run's "
                                                         "last step (then a resume with other --epochs or --max-steps "
                                                         "changes the schedule)"),
    OPT("lr-step-gamma", "X", 0, T_F32, lr_step_gamma, "StepLR: multiply the learning rate by X every --lr-step-size epochs"),
    OPT("lr-step-size", "N", 0, T_I64, lr_step_size, "StepLR period in epochs"),
    OPT("clip-grad-norm", "X", 0, T_POS_OR_OFF, clip_grad_norm, "clip the global L2 norm of the gradients to X (> 0) before each update"),
    OPT("seed", "N", 0, T_I64, seed, "seeds initial weights, shuffling and dropout"),
    OPT("dropout-off", NULL, 0, T_FLAG, dropout_off, "train with dropout disabled"),
    OPT("fix-bias", NULL, 0, T_FLAG, fix_bias, "remove every conv/linear bias a following batch norm cancels (the guide's "
                                               "\"disable bias before batch norm\"): same results, fewer parameters; the "
                                               "checkpoint then has no such biases (without the flag each is warned about)"),
    OPT("checkpoint-activations", "none|block|OPS", 1, T_CKPT, checkpoint_activations, "recompute saved activations inside "
        "backward instead of keeping them (less memory, some more compute, the same results): block (every block of the "
        "model: gpt's h.N, mlp-deep's blocks.N) or ops cheap to recompute, comma-separated (gelu,layernorm; relu, dropout, ...)"),
    OPT("precision", "fp32|bf16|fp16|auto", 0, T_AMP, precision, "mixed precision: conv2d, linear, matmul and bmm "
        "(forward and backward) take bf16 or fp16 operands, fp32 accumulation and outputs; parameters, gradients and "
        "optimizer state stay fp32; auto: bf16 where it measures faster at compile (logged); fp16: --device cuda, "
        "with --loss-scale"),
    OPT("loss-scale", "auto|dynamic|off", 0, T_STR, loss_scale, "dynamic loss scaling (PyTorch's GradScaler: the scale "
        "halves after a step with an inf or NaN gradient, which is skipped, and doubles after 2000 good ones); auto: "
        "dynamic with --precision fp16, else off"),
    OPT("no-fuse", NULL, 0, T_NOFLAG, fuse, "disable the fusion passes (pointwise groups as one kernel; relu folded into conv/linear and max-pool's backward)"),
    OPT("no-autotune", NULL, 0, T_NOFLAG, autotune, "use oneDNN's direct convolutions instead of timing every algorithm"),
    OPT("max-steps", "N", 1, T_I64, max_steps, "stop when the run reaches global step N, counting resumed steps (0: no limit)"),
    OPT("workers", "N|auto", 1, T_WORKERS, workers, "loader threads; 0 loads on the training thread; auto: start with one, "
                                                    "add one while the training thread waits for data (measured every few steps)"),
    OPT("prefetch", "N", 1, T_INT, prefetch, "batches in flight per worker"),
    OPT("pin-memory", NULL, 1, T_FLAG, lock_memory, "mlock the batch ring (the CPU meaning of pinned memory)"),
    OPT("bad-samples", "fail|skip", 1, T_BAD, skip_bad, "a corrupt or truncated image: fail names it and stops (exit 2); skip "
                                                       "takes the next readable sample instead, counts and logs it"),
    OPT("trace", "FILE", 1, T_STR, trace, "write a Chrome trace (chrome://tracing, ui.perfetto.dev): the training thread's "
                                          "forward, backward, optimizer and data-wait, each loader worker's samples"),
    OPT("trace-steps", "A-B", 1, T_STR, trace_steps, "--trace records steps A to B only (from 1), so a long run's trace "
                                                    "stays small; the loading of a window's first batches may fall before it"),
    OPT("threads", "N", 1, T_INT, threads, "compute threads (one OpenMP team, shared with oneDNN); 0: every core"),
    OPT("save", "FILE", 1, T_STR, save, "write a checkpoint (safetensors) at the end, atomically"),
    OPT("save-every", "N", 1, T_I64, save_every, "also write the checkpoint every N steps (0: only at the end)"),
    OPT("resume", "FILE", 1, T_STR, resume, "continue the run saved in FILE exactly where it stopped, with its settings"),
    OPT("load", "FILE", 0, T_STR, load, "start from these weights (a kiln checkpoint or a PyTorch state_dict in safetensors)"),
    OPT("eval-every", "N", 1, T_I64, eval_every, "evaluate on the test set every N epochs (0: only at the end)"),
    OPT("no-test", NULL, 1, T_NOFLAG, test, "skip every test-set evaluation"),
    OPT("metrics", "FILE", 1, T_STR, metrics, "append one JSON line per --log-every steps and per epoch (JSONL) to FILE"),
    OPT("log-every", "N", 1, T_I64, log_every, "steps between progress and metrics lines"),
    OPT("tensorboard", "DIR", 1, T_STR, tensorboard, "also write the metrics' scalars as TensorBoard events into DIR "
                                                     "(created; `tensorboard --logdir DIR`)"),
    OPT("detect-anomaly", NULL, 1, T_FLAG, detect_anomaly, "check every step's outputs for NaN/Inf (forward and backward); "
                                                         "the first stops the run naming the node, the step and the input "
                                                         "already non-finite, if any (a debugging aid: it costs step time)"),
    OPT("profile", NULL, 1, T_FLAG, profile, "time every kernel and print the per-step breakdown at the end"),
    OPT("sync-loss", NULL, 1, T_FLAG, sync_loss, "--device cuda: wait for each step's loss before queuing the next "
                                               "(by default it is read a step late, so the GPU never waits for the host)"),
    OPT("memory-budget-mb", "X", 1, T_MIB, memory_budget, "refuse a plan whose activations and gradients need more (0: 90% of RAM)"),
    OPT("sync-bn", NULL, 0, T_FLAG, sync_bn, "under mpirun: batch norm's batch statistics over every rank's samples "
                                             "(SyncBatchNorm), forward and backward"),
    OPT("bucket-mb", "X", 1, T_F32, bucket_mb, "under mpirun: gradient bucket size in MiB; each bucket's all-reduce starts "
                                               "once backward has written its last gradient (25)"),
    OPT("overlap", "on|off", 1, T_ONOFF, overlap, "under mpirun: start each bucket's all-reduce inside backward (on) or all "
                                                  "of them after it (off, for comparison)"),
    OPT("timeout", "SECONDS", 1, T_F32, timeout, "under mpirun: a collective the other ranks do not join within this ends "
                                                 "the job with an error naming it (a rank died or hangs; 300)"),
    OPT("bind", "none|core|numa", 1, T_STR, bind, "under mpirun: pin each rank's threads to its share of this host's cores "
                                                  "(core) or to one NUMA node (numa); none leaves it to the launcher"),
    OPT("batch-tokens", "N", 0, T_I64, batch_tokens, "gpt on token documents (kiln tokenize's index): batches of about N "
                                                    "tokens of documents of similar length (length buckets, a plan each), the "
                                                    "same work on every rank; 0: fixed windows of --block"),
    OPT("device", "cpu|cuda|auto|ref", 1, T_STR, device, "where to train: cpu, cuda (the GPU; an error without one), auto (cuda when a GPU is here) or ref (the double-precision reference kernels: slow, a debugging aid)"),
    OPT("matmul-precision", "highest|high|medium", 1, T_PRECISION, matmul_precision,
        "GPU matmuls and convolutions in fp32, TF32 or bf16 tensor-core math, fp32 accumulation (PyTorch's set_float32_matmul_precision)"),
};
#define NFIELDS ((int)(sizeof fields / sizeof fields[0]))

int kiln_train_option_count(void) { return NFIELDS; }
const kiln_train_option *kiln_train_option_at(int i) { return i >= 0 && i < NFIELDS ? &fields[i].pub : NULL; }

static const field *find(const char *name) {
    for (int i = 0; i < NFIELDS; i++)
        if (strcmp(fields[i].pub.name, name) == 0) return &fields[i];
    return NULL;
}

static int parse_i64(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

static int parse_f(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

kiln_status kiln_train_option_set(kiln_train_config *c, const char *name, const char *value) {
    const field *f = find(name);
    if (!f) return kiln_fail(KILN_ERR_INVALID_ARG, "unknown option --%s", name);
    char *p = (char *)c + f->offset;
    int64_t n = 0;
    float x = 0;
    kiln_optim_kind kind;
    if (f->pub.flag) {
        if (value && strcmp(value, "true") != 0 && strcmp(value, "false") != 0)
            return kiln_fail(KILN_ERR_INVALID_ARG, "--%s takes no value (got '%s')", name, value);
        int on = !value || strcmp(value, "true") == 0;
        *(int *)p = f->type == T_FLAG ? on : !on;
        return KILN_OK;
    }
    if (!value) return kiln_fail(KILN_ERR_INVALID_ARG, "--%s needs a value", name);
    switch (f->type) {
    case T_I64:
    case T_INT:
        if (parse_i64(value, &n)) return kiln_fail(KILN_ERR_INVALID_ARG, "--%s: not an integer: %s", name, value);
        if (f->type == T_INT && (n < -2147483647 || n > 2147483647))
            return kiln_fail(KILN_ERR_INVALID_ARG, "--%s: out of range: %s", name, value);
        if (f->type == T_INT) *(int *)p = (int)n;
        else *(int64_t *)p = n;
        return KILN_OK;
    case T_F32:
    case T_MIB:
        if (parse_f(value, &x)) return kiln_fail(KILN_ERR_INVALID_ARG, "--%s: not a number: %s", name, value);
        if (f->type == T_F32) *(float *)p = x;
        else *(double *)p = (double)x * 1048576.0;
        return KILN_OK;
    case T_POS_OR_OFF: /* 0 would zero every gradient: off is the absence of the option */
        if (strcmp(value, "off") == 0) {
            *(float *)p = 0;
            return KILN_OK;
        }
        if (parse_f(value, &x) || !(x > 0)) return kiln_fail(KILN_ERR_INVALID_ARG, "--%s: not a positive number: %s", name, value);
        *(float *)p = x;
        return KILN_OK;
    case T_STR:
        *(const char **)p = value;
        return KILN_OK;
    case T_CKPT: { /* checked now, kept as given */
        kiln_status st = kiln_checkpoint_check(value);
        if (st != KILN_OK) return kiln_fail_context(st, "--%s", name);
        *(const char **)p = value[0] && strcmp(value, "none") != 0 ? value : NULL;
        return KILN_OK;
    }
    case T_RRC:
    case T_NORM: { /* checked now, kept as given; "" (how a checkpoint records none) is none */
        if (!value[0]) {
            *(const char **)p = NULL;
            return KILN_OK;
        }
        kiln_data_config dc = kiln_data_defaults();
        kiln_status st = f->type == T_RRC ? kiln_data_parse_rrc(value, &dc) : kiln_data_parse_normalize(value, &dc);
        if (st != KILN_OK) return st;
        *(const char **)p = value;
        return KILN_OK;
    }
    case T_BATCH:
        c->find_batch_size = strcmp(value, "auto") == 0;
        if (c->find_batch_size) return KILN_OK;
        if (parse_i64(value, &n)) return kiln_fail(KILN_ERR_INVALID_ARG, "--%s: not an integer or auto: %s", name, value);
        c->batch_size = n;
        return KILN_OK;
    case T_OPTIM:
        if (kiln_optim_parse(value, &kind))
            return kiln_fail(KILN_ERR_INVALID_ARG, "--optimizer: unknown optimizer '%s' (adadelta, adamw, sgd, lamb, lars, novograd)",
                             value);
        c->optim = kiln_optim_defaults(kind);
        return KILN_OK;
    case T_DECAY: {
        kiln_lr_decay d;
        if (kiln_lr_decay_parse(value, &d))
            return kiln_fail(KILN_ERR_INVALID_ARG, "--%s: '%s' is not step, none, cosine or linear", name, value);
        *(int *)p = (int)d;
        return KILN_OK;
    }
    case T_WORKERS:
        if (strcmp(value, "auto") == 0) {
            *(int *)p = KILN_WORKERS_AUTO;
            return KILN_OK;
        }
        if (parse_i64(value, &n) || n < 0 || n > 64) return kiln_fail(KILN_ERR_INVALID_ARG, "--%s: not auto or 0..64: %s", name, value);
        *(int *)p = (int)n;
        return KILN_OK;
    case T_BAD:
        for (int i = 0; i < 2; i++)
            if (strcmp(value, bad_samples[i]) == 0) {
                *(int *)p = i;
                return KILN_OK;
            }
        return kiln_fail(KILN_ERR_INVALID_ARG, "--%s: '%s' is not fail or skip", name, value);
    case T_AMP: {
        kiln_precision pr;
        if (kiln_precision_parse(value, &pr)) return kiln_fail(KILN_ERR_INVALID_ARG, "--%s: '%s' is not fp32, bf16, fp16 or auto", name, value);
        *(int *)p = (int)pr;
        return KILN_OK;
    }
    case T_ONOFF:
        for (int i = 0; i < 2; i++)
            if (strcmp(value, onoff[i]) == 0) {
                *(int *)p = i;
                return KILN_OK;
            }
        return kiln_fail(KILN_ERR_INVALID_ARG, "--%s: '%s' is not on or off", name, value);
    case T_PRECISION:
        for (int i = 0; i < 3; i++)
            if (strcmp(value, precisions[i]) == 0) {
                *(int *)p = i;
                return KILN_OK;
            }
        return kiln_fail(KILN_ERR_INVALID_ARG, "--%s: '%s' is not highest, high or medium", name, value);
    default: break;
    }
    return kiln_fail(KILN_ERR_INVALID_ARG, "--%s: cannot be set", name);
}

/* the shortest text that reads back as the same float: "0.7", not "0.699999988" */
static void float_text(double v, char *buf, size_t len) {
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, len, "%.*g", digits, v);
        if ((float)strtod(buf, NULL) == (float)v) return;
    }
}

int kiln_train_option_get(const kiln_train_config *c, const char *name, char *buf, size_t len) {
    const field *f = find(name);
    if (!f || !len) return -1;
    const char *p = (const char *)c + f->offset;
    buf[0] = 0;
    if (f->type == T_FLAG || f->type == T_NOFLAG) {
        int on = *(const int *)p;
        snprintf(buf, len, "%s", (f->type == T_FLAG ? on : !on) ? "true" : "false");
    } else if (f->type == T_I64) snprintf(buf, len, "%lld", (long long)*(const int64_t *)p);
    else if (f->type == T_INT) snprintf(buf, len, "%d", *(const int *)p);
    else if (f->type == T_F32) float_text(*(const float *)p, buf, len);
    else if (f->type == T_POS_OR_OFF && *(const float *)p > 0) float_text(*(const float *)p, buf, len);
    else if (f->type == T_POS_OR_OFF) snprintf(buf, len, "off");
    else if (f->type == T_MIB) float_text(*(const double *)p / 1048576.0, buf, len);
    else if (f->type == T_STR || f->type == T_RRC || f->type == T_NORM || f->type == T_CKPT) snprintf(buf, len, "%s", *(const char *const *)p ? *(const char *const *)p : "");
    else if (f->type == T_BATCH) {
        if (c->find_batch_size) snprintf(buf, len, "auto");
        else snprintf(buf, len, "%lld", (long long)c->batch_size);
    } else if (f->type == T_OPTIM) snprintf(buf, len, "%s", kiln_optim_name(c->optim.kind));
    else if (f->type == T_WORKERS && *(const int *)p == KILN_WORKERS_AUTO) snprintf(buf, len, "auto");
    else if (f->type == T_WORKERS) snprintf(buf, len, "%d", *(const int *)p);
    else if (f->type == T_DECAY) snprintf(buf, len, "%s", kiln_lr_decay_name((kiln_lr_decay)*(const int *)p));
    else if (f->type == T_BAD) snprintf(buf, len, "%s", bad_samples[*(const int *)p ? 1 : 0]);
    else if (f->type == T_ONOFF) snprintf(buf, len, "%s", onoff[*(const int *)p ? 1 : 0]);
    else if (f->type == T_AMP) snprintf(buf, len, "%s", kiln_precision_name(*(const int *)p));
    else if (f->type == T_PRECISION) snprintf(buf, len, "%s", precisions[*(const int *)p >= 0 && *(const int *)p < 3 ? *(const int *)p : 0]);
    return 0;
}

char *kiln_train_settings_json(const kiln_train_config *c) {
    json_t *o = json_object();
    char buf[4096];
    for (int i = 0; o && i < NFIELDS; i++) {
        if (fields[i].pub.resumable || strcmp(fields[i].pub.name, "load") == 0) continue; /* --load only starts a run */
        kiln_train_option_get(c, fields[i].pub.name, buf, sizeof buf);
        json_t *v = json_string(buf);
        if (!v) { /* not UTF-8 (JSON and a safetensors header hold only that): dropping it would resume another run */
            json_decref(o);
            kiln_fail(KILN_ERR_INVALID_ARG, "--%s '%s' is not valid UTF-8: a checkpoint cannot record it", fields[i].pub.name, buf);
            return NULL;
        }
        json_object_set_new(o, fields[i].pub.name, v);
    }
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    return s;
}
