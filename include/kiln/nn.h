/* kiln/nn.h — layers and the model zoo.
 *
 *     kiln_graph *g = kiln_graph_new();
 *     kiln_model m;
 *     if (kiln_model_build(g, "mnist-cnn", &m) != KILN_OK) ... kiln_last_error()
 *     // m.x: input [B,1,28,28]; m.y: labels [B]; m.out: log-probabilities [B,10]; m.loss: scalar
 *
 * Parameter names are PyTorch's state_dict names (conv1.weight, ..., fc2.bias),
 * so checkpoints load in PyTorch and back.
 */
#ifndef KILN_NN_H
#define KILN_NN_H

#include "kiln/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_model {
    const char *name;
    kiln_value x;     /* input images */
    kiln_value y;     /* int32 class labels */
    kiln_value out;   /* log-probabilities (mnist models) or logits (ResNets) [B, classes], gpt [B, T, vocab]: argmax predicts */
    kiln_value loss;  /* mean negative log-likelihood (of the log-probabilities, or cross-entropy of the logits) */
    int num_classes;  /* the gpt: its vocabulary */
    int block;        /* the gpt: tokens per sample (labels per sample); 0 for one label per sample */
} kiln_model;

/* "mnist-cnn": PyTorch's examples/mnist network; "mnist-cnn-bn": the same with
 * batch norm after each conv (and no conv bias: it would be cancelled);
 * "mnist-cnn-bn-bias": with those biases, as often written (for fix_bias);
 * "mlp": 784-256-128-10 with ReLU and dropout; "resnet20": the CIFAR ResNet-20
 * (3x32x32, option-A shortcuts, 10 classes); "resnet18": torchvision's resnet18
 * (3x112x112 by default, 10 classes); "gpt": GPT-2's layout over byte tokens
 * (m.x: token ids [B, block] as f32, m.y: the next tokens [B, block], m.out:
 * logits [B, block, vocab]); see docs/models.md */
kiln_status kiln_model_build(kiln_graph *g, const char *name, kiln_model *out);
/* the ResNets' options (0: the model's default); the mnist models have 10
 * classes and take no other count (an error naming --num-classes) */
#define KILN_MAX_CLASSES (1 << 20)
/* the GPT's shape (0: the default of each, 4 layers, 4 heads, 256 wide, block 128, vocab 256) */
typedef struct kiln_gpt_config {
    int layers, heads, dim, block, vocab;
    /* positions of the input, 1..block (0: block): the same parameters (wpe keeps block rows, the
     * first seq added) over shorter sequences, a graph per length bucket (--batch-tokens) */
    int seq;
} kiln_gpt_config;
typedef struct kiln_model_opts {
    int num_classes;        /* the ResNets: 10 by default, up to KILN_MAX_CLASSES */
    int64_t height, width;  /* input size: resnet18 112x112, resnet20 32x32 */
    int fix_bias;           /* 1: without the conv/linear biases a batch norm cancels (kiln_graph_fix_bias) */
    kiln_gpt_config gpt;    /* the gpt model's shape */
} kiln_model_opts;
kiln_status kiln_model_build_ex(kiln_graph *g, const char *name, const kiln_model_opts *o, kiln_model *out);
/* NULL-terminated list of model names */
const char *const *kiln_model_names(void);

/* layers: declare parameters "<name>.weight" / "<name>.bias" and apply them */
kiln_value kiln_nn_conv2d(kiln_graph *g, const char *name, kiln_value x, int64_t in_ch, int64_t out_ch, int64_t kernel,
                          int64_t stride, int64_t pad, int bias);
kiln_value kiln_nn_linear(kiln_graph *g, const char *name, kiln_value x, int64_t in, int64_t out, int bias);
/* nn.BatchNorm2d(channels): "<name>.weight" (1), ".bias" (0), buffers ".running_mean" (0),
 * ".running_var" (1), ".num_batches_tracked" (0, i64); momentum 0.1, eps 1e-5 */
kiln_value kiln_nn_batch_norm2d(kiln_graph *g, const char *name, kiln_value x, int64_t channels);
/* nn.LayerNorm(dim) over x's last dim: "<name>.weight" (1), "<name>.bias" (0); eps 1e-5 */
kiln_value kiln_nn_layer_norm(kiln_graph *g, const char *name, kiln_value x, int64_t dim);

#ifdef __cplusplus
}
#endif
#endif
