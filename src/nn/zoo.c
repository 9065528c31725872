/* The model zoo. mnist-cnn is exactly PyTorch's examples/mnist Net:
 *   conv1 1->32 3x3, relu, conv2 32->64 3x3, relu, max_pool 2, dropout 0.25,
 *   flatten, fc1 9216->128, relu, dropout 0.5, fc2 128->10, log_softmax.
 * mnist-cnn-bn puts BatchNorm2d after each conv and drops the conv biases
 * (the guide's "disable bias before batch norm": the norm subtracts it again);
 * mnist-cnn-bn-bias keeps them, as models are often written, for --fix-bias
 * (which makes it mnist-cnn-bn, parameter for parameter).
 * resnet20 is the CIFAR ResNet of He et al. (2016) with option-A shortcuts,
 * exactly the peer benchmark's model (../shared/bench/peers/conv_bench.py):
 *   conv1 3->16 3x3, bn1, relu; layers.0-8: BasicBlocks of 16, 32, 64 channels
 *   (3 each, the first of stages 2 and 3 with stride 2); global average pool,
 *   fc 64->10; input 3x32x32, logits out, cross-entropy loss.
 * The option-A shortcut has no parameters: x[:, :, ::2, ::2] with the new
 * channels zero-padded half before, half after.
 * resnet18 is torchvision.models.resnet18 (its structure and state_dict
 * names, so its weights saved as safetensors load with --load): conv1 7x7/2,
 * bn1, relu, max-pool 3x3/2 padded by 1, layer1-4 of two BasicBlocks each
 * (64, 128, 256, 512 channels; the first block of layers 2-4 strides 2 and
 * projects its shortcut with downsample.0 (1x1 conv) and downsample.1 (bn)),
 * global average pool, fc 512 -> classes. Any input size of 32 or more works;
 * the default is 3x112x112 and 10 classes (kiln_model_build_ex for others).
 * resnet34 is the same with 3, 4, 6, 3 BasicBlocks; resnet50 has 3, 4, 6, 3
 * Bottlenecks (torchvision's v1.5: conv1 1x1, conv2 3x3 carrying the stride,
 * conv3 1x1 to 4x the width, each with its bn; the first block of every layer
 * projects its shortcut, layer1's without striding) and fc 2048 -> classes.
 * mlp-deep is the activation-checkpointing benchmark's model
 * (../shared/bench/peers/w5_checkpoint.py): 16 x (Linear(width, width), ReLU)
 * as one nn.Sequential (parameters "0.weight" ... "30.bias"), width 1024 by
 * default (kiln_model_opts.width), MSE against an f32 target [B, width]; each
 * layer is a block scope ("blocks.0-15"), so checkpointing "block" chooses
 * its segments of layers itself (docs/plan-and-passes.md).
 * gpt is GPT-2's layout over tokens (src/nn/gpt.c). */
#include <stdio.h>
#include <string.h>
#include "kiln/nn.h"
#include "nn/internal/models.h"

static const char *const names[] = {"mnist-cnn", "mnist-cnn-bn", "mlp", "mnist-cnn-bn-bias", "resnet20", "resnet18", "resnet34", "resnet50", "mlp-deep", "gpt", NULL};

const char *const *kiln_model_names(void) { return names; }

static void mnist_io(kiln_graph *g, kiln_model *m) {
    int64_t xs[4] = {KILN_BATCH, 1, 28, 28}, ys[1] = {KILN_BATCH};
    m->x = kiln_input(g, "x", KILN_F32, 4, xs);
    m->y = kiln_input(g, "y", KILN_I32, 1, ys);
    m->num_classes = 10;
}

static void mnist_cnn(kiln_graph *g, kiln_model *m) {
    mnist_io(g, m);
    kiln_value h = kiln_relu(g, kiln_nn_conv2d(g, "conv1", m->x, 1, 32, 3, 1, 0, 1));   /* [B,32,26,26] */
    h = kiln_relu(g, kiln_nn_conv2d(g, "conv2", h, 32, 64, 3, 1, 0, 1));                /* [B,64,24,24] */
    h = kiln_dropout(g, kiln_max_pool2d(g, h, 2, 2), 0.25f);                            /* [B,64,12,12] */
    h = kiln_flatten(g, h, 1);                                                          /* [B,9216] */
    h = kiln_dropout(g, kiln_relu(g, kiln_nn_linear(g, "fc1", h, 9216, 128, 1)), 0.5f); /* [B,128] */
    m->out = kiln_log_softmax(g, kiln_nn_linear(g, "fc2", h, 128, 10, 1));              /* [B,10] */
    m->loss = kiln_nll_loss(g, m->out, m->y);
}

static void mnist_cnn_bn(kiln_graph *g, kiln_model *m, int conv_bias) {
    mnist_io(g, m);
    kiln_value h = kiln_nn_conv2d(g, "conv1", m->x, 1, 32, 3, 1, 0, conv_bias);
    h = kiln_relu(g, kiln_nn_batch_norm2d(g, "bn1", h, 32));                           /* [B,32,26,26] */
    h = kiln_relu(g, kiln_nn_batch_norm2d(g, "bn2", kiln_nn_conv2d(g, "conv2", h, 32, 64, 3, 1, 0, conv_bias), 64));
    h = kiln_dropout(g, kiln_max_pool2d(g, h, 2, 2), 0.25f);                            /* [B,64,12,12] */
    h = kiln_flatten(g, h, 1);
    h = kiln_dropout(g, kiln_relu(g, kiln_nn_linear(g, "fc1", h, 9216, 128, 1)), 0.5f);
    m->out = kiln_log_softmax(g, kiln_nn_linear(g, "fc2", h, 128, 10, 1));
    m->loss = kiln_nll_loss(g, m->out, m->y);
}

static void mlp(kiln_graph *g, kiln_model *m) {
    mnist_io(g, m);
    kiln_value h = kiln_flatten(g, m->x, 1);
    h = kiln_dropout(g, kiln_relu(g, kiln_nn_linear(g, "fc1", h, 784, 256, 1)), 0.2f);
    h = kiln_dropout(g, kiln_relu(g, kiln_nn_linear(g, "fc2", h, 256, 128, 1)), 0.2f);
    m->out = kiln_log_softmax(g, kiln_nn_linear(g, "fc3", h, 128, 10, 1));
    m->loss = kiln_nll_loss(g, m->out, m->y);
}

enum { DEEP_LAYERS = 16 };

static void mlp_deep(kiln_graph *g, kiln_model *m, const kiln_model_opts *o) {
    int64_t w = o->width ? o->width : 1024;
    m->x = kiln_input(g, "x", KILN_F32, 2, (int64_t[]){KILN_BATCH, w});
    m->y = kiln_input(g, "y", KILN_F32, 2, (int64_t[]){KILN_BATCH, w});
    m->num_classes = (int)w;
    kiln_value h = m->x;
    for (int l = 0; l < DEEP_LAYERS; l++) {
        char name[32];
        snprintf(name, sizeof name, "blocks.%d", l);
        kiln_graph_block_begin(g, name);
        snprintf(name, sizeof name, "%d", 2 * l); /* nn.Sequential's index: Linear, ReLU, Linear, ... */
        h = kiln_relu(g, kiln_nn_linear(g, name, h, w, w, 1));
        kiln_graph_block_end(g);
    }
    m->out = h;
    m->loss = kiln_mse_loss(g, h, m->y);
}

static void image_io(kiln_graph *g, kiln_model *m, int64_t c, int64_t h, int64_t w, int classes) {
    int64_t xs[4] = {KILN_BATCH, c, h, w}, ys[1] = {KILN_BATCH};
    m->x = kiln_input(g, "x", KILN_F32, 4, xs);
    m->y = kiln_input(g, "y", KILN_I32, 1, ys);
    m->num_classes = classes;
}

static kiln_value conv_bn(kiln_graph *g, const char *prefix, const char *conv, const char *bn, kiln_value x, int64_t cin,
                          int64_t cout, int64_t k, int64_t stride, int64_t pad) {
    char cn[96], bnn[96];
    snprintf(cn, sizeof cn, "%s%s", prefix, conv);
    snprintf(bnn, sizeof bnn, "%s%s", prefix, bn);
    return kiln_nn_batch_norm2d(g, bnn, kiln_nn_conv2d(g, cn, x, cin, cout, k, stride, pad, 0), cout);
}

/* He et al.'s option A: subsample by the stride, zero-pad the new channels */
static kiln_value shortcut_a(kiln_graph *g, kiln_value x, int64_t cin, int64_t cout, int64_t stride) {
    int64_t s[4];
    if (kiln_value_shape(g, x, s) != 4) return -1;
    if (stride > 1) x = kiln_slice_step(g, kiln_slice_step(g, x, 2, 0, s[2], stride), 3, 0, s[3], stride);
    return cout == cin ? x : kiln_pad(g, x, 1, (cout - cin) / 2, cout - cin - (cout - cin) / 2);
}

/* torchvision's BasicBlock: conv-bn-relu-conv-bn, plus the shortcut, relu.
 * down: 'a' for option A, 'b' for a 1x1 conv + bn ("downsample.0/1"), 0 for the identity */
static kiln_value basic_block(kiln_graph *g, const char *prefix, kiln_value x, int64_t cin, int64_t cout, int64_t stride,
                              char down) {
    /* option A's shortcut first: it has no parameters, and made before bn2 it lets the fusion pass
     * give bn2 the add and relu as its epilogue (the residual must exist when the norm runs) */
    kiln_value sc = down == 'a' ? shortcut_a(g, x, cin, cout, stride) : x;
    kiln_value h = kiln_relu(g, conv_bn(g, prefix, "conv1", "bn1", x, cin, cout, 3, stride, 1));
    h = conv_bn(g, prefix, "conv2", "bn2", h, cout, cout, 3, 1, 1);
    if (down == 'b') sc = conv_bn(g, prefix, "downsample.0", "downsample.1", x, cin, cout, 1, stride, 0);
    return kiln_relu(g, kiln_add(g, h, sc));
}

static void classifier(kiln_graph *g, kiln_model *m, kiln_value h, int64_t features) {
    h = kiln_flatten(g, kiln_adaptive_avg_pool2d(g, h, 1, 1), 1);
    m->out = kiln_nn_linear(g, "fc", h, features, m->num_classes, 1);
    m->loss = kiln_cross_entropy(g, m->out, m->y);
}

static void resnet20(kiln_graph *g, kiln_model *m, const kiln_model_opts *o) {
    image_io(g, m, 3, o->height ? o->height : 32, o->width ? o->width : 32, o->num_classes ? o->num_classes : 10);
    kiln_value h = kiln_relu(g, conv_bn(g, "", "conv1", "bn1", m->x, 3, 16, 3, 1, 1)); /* [B,16,32,32] */
    int64_t cin = 16, i = 0;
    for (int64_t cout = 16; cout <= 64; cout *= 2)
        for (int b = 0; b < 3; b++, i++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "layers.%lld.", (long long)i);
            int64_t stride = b == 0 && cout > 16 ? 2 : 1;
            h = basic_block(g, prefix, h, cin, cout, stride, stride != 1 || cin != cout ? 'a' : 0);
            cin = cout;
        }
    classifier(g, m, h, 64); /* [B,64,8,8] -> [B,10] */
}

/* torchvision's Bottleneck (v1.5): 1x1 down to `width`, 3x3 with the stride, 1x1 up to 4 x width */
static kiln_value bottleneck(kiln_graph *g, const char *prefix, kiln_value x, int64_t cin, int64_t width, int64_t stride) {
    int64_t cout = 4 * width;
    kiln_value h = kiln_relu(g, conv_bn(g, prefix, "conv1", "bn1", x, cin, width, 1, 1, 0));
    h = kiln_relu(g, conv_bn(g, prefix, "conv2", "bn2", h, width, width, 3, stride, 1));
    h = conv_bn(g, prefix, "conv3", "bn3", h, width, cout, 1, 1, 0);
    kiln_value sc = x;
    if (stride != 1 || cin != cout) sc = conv_bn(g, prefix, "downsample.0", "downsample.1", x, cin, cout, 1, stride, 0);
    return kiln_relu(g, kiln_add(g, h, sc));
}

/* torchvision's ResNet: the stem, layer1-4 of blocks[k] blocks (Bottlenecks when bottle), the classifier */
static void torchvision_resnet(kiln_graph *g, kiln_model *m, const kiln_model_opts *o, const int blocks[4], int bottle) {
    image_io(g, m, 3, o->height ? o->height : 112, o->width ? o->width : 112, o->num_classes ? o->num_classes : 10);
    kiln_value h = kiln_relu(g, conv_bn(g, "", "conv1", "bn1", m->x, 3, 64, 7, 2, 3));
    h = kiln_max_pool2d_ex(g, h, 3, 2, 1); /* [B,64,H/4,W/4] */
    int64_t cin = 64;
    for (int layer = 1; layer <= 4; layer++) {
        int64_t width = 64 << (layer - 1), cout = bottle ? 4 * width : width;
        for (int b = 0; b < blocks[layer - 1]; b++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "layer%d.%d.", layer, b);
            int64_t stride = b == 0 && layer > 1 ? 2 : 1;
            h = bottle ? bottleneck(g, prefix, h, cin, width, stride)
                       : basic_block(g, prefix, h, cin, cout, stride, stride != 1 || cin != cout ? 'b' : 0);
            cin = cout;
        }
    }
    classifier(g, m, h, cin);
}

static void resnet18(kiln_graph *g, kiln_model *m, const kiln_model_opts *o) {
    torchvision_resnet(g, m, o, (const int[4]){2, 2, 2, 2}, 0);
}
static void resnet34(kiln_graph *g, kiln_model *m, const kiln_model_opts *o) {
    torchvision_resnet(g, m, o, (const int[4]){3, 4, 6, 3}, 0);
}
static void resnet50(kiln_graph *g, kiln_model *m, const kiln_model_opts *o) {
    torchvision_resnet(g, m, o, (const int[4]){3, 4, 6, 3}, 1);
}

/* the mnist models take no options */
static void mnist_cnn_o(kiln_graph *g, kiln_model *m, const kiln_model_opts *o) { (void)o; mnist_cnn(g, m); }
static void mnist_cnn_bn_o(kiln_graph *g, kiln_model *m, const kiln_model_opts *o) { (void)o; mnist_cnn_bn(g, m, 0); }
static void mnist_cnn_bn_bias_o(kiln_graph *g, kiln_model *m, const kiln_model_opts *o) { (void)o; mnist_cnn_bn(g, m, 1); }
static void mlp_o(kiln_graph *g, kiln_model *m, const kiln_model_opts *o) { (void)o; mlp(g, m); }

kiln_status kiln_model_build(kiln_graph *g, const char *name, kiln_model *out) {
    kiln_model_opts o = {0};
    return kiln_model_build_ex(g, name, &o, out);
}

/* the builders, in the order of names[]; the first FIXED_MODELS have 10 classes and no options */
typedef void (*model_fn)(kiln_graph *, kiln_model *, const kiln_model_opts *);
static const model_fn builders[] = {mnist_cnn_o, mnist_cnn_bn_o, mlp_o, mnist_cnn_bn_bias_o,
                                    resnet20,    resnet18,       resnet34, resnet50, mlp_deep, kiln_zoo_gpt};
enum { FIXED_MODELS = 4 };
_Static_assert(sizeof builders / sizeof builders[0] == sizeof names / sizeof names[0] - 1, "a builder per model name");

static kiln_status unknown(const char *name) {
    char known[256] = "";
    size_t o = 0;
    for (int i = 0; names[i] && o < sizeof known; i++) o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", i ? ", " : "", names[i]);
    return kiln_fail(KILN_ERR_INVALID_ARG, "unknown model '%s' (known: %s)", name, known);
}

kiln_status kiln_model_build_ex(kiln_graph *g, const char *name, const kiln_model_opts *o, kiln_model *out) {
    memset(out, 0, sizeof *out);
    if (!g) return kiln_fail(KILN_ERR_INVALID_ARG, "model: graph is NULL");
    if (!name) name = "";
    int i = 0;
    while (names[i] && strcmp(names[i], name) != 0) i++;
    if (!names[i]) return unknown(name);
    if (o->num_classes < 0 || o->num_classes > KILN_MAX_CLASSES)
        return kiln_fail(KILN_ERR_INVALID_ARG, "model %s: --num-classes %d; use 1..%d (0: the model's own)", name,
                         o->num_classes, KILN_MAX_CLASSES);
    if (i < FIXED_MODELS && o->num_classes && o->num_classes != 10)
        return kiln_fail(KILN_ERR_INVALID_ARG, "model %s has 10 classes: --num-classes %d applies to the ResNets", name,
                         o->num_classes);
    if (o->height < 0 || o->width < 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "model %s: input %lldx%lld", name, (long long)o->height, (long long)o->width);
    builders[i](g, out, o);
    out->name = names[i];
    if (o->fix_bias && kiln_graph_status(g) == KILN_OK) kiln_graph_fix_bias(g, NULL);
    return kiln_graph_status(g);
}
