/* The model zoo. mnist-cnn is exactly PyTorch's examples/mnist Net:
 *   conv1 1->32 3x3, relu, conv2 32->64 3x3, relu, max_pool 2, dropout 0.25,
 *   flatten, fc1 9216->128, relu, dropout 0.5, fc2 128->10, log_softmax.
 * mnist-cnn-bn puts BatchNorm2d after each conv and drops the conv biases
 * (the guide's "disable bias before batch norm": the norm subtracts it again). */
#include <string.h>
#include "kiln/nn.h"

static const char *const names[] = {"mnist-cnn", "mnist-cnn-bn", "mlp", NULL};

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

static void mnist_cnn_bn(kiln_graph *g, kiln_model *m) {
    mnist_io(g, m);
    kiln_value h = kiln_nn_conv2d(g, "conv1", m->x, 1, 32, 3, 1, 0, 0);
    h = kiln_relu(g, kiln_nn_batch_norm2d(g, "bn1", h, 32));                           /* [B,32,26,26] */
    h = kiln_relu(g, kiln_nn_batch_norm2d(g, "bn2", kiln_nn_conv2d(g, "conv2", h, 32, 64, 3, 1, 0, 0), 64));
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

kiln_status kiln_model_build(kiln_graph *g, const char *name, kiln_model *out) {
    memset(out, 0, sizeof *out);
    if (!g) return kiln_fail(KILN_ERR_INVALID_ARG, "model: graph is NULL");
    if (!name) name = "";
    static void (*const build[])(kiln_graph *, kiln_model *) = {mnist_cnn, mnist_cnn_bn, mlp};
    int i = 0;
    while (names[i] && strcmp(names[i], name) != 0) i++;
    if (!names[i]) return kiln_fail(KILN_ERR_INVALID_ARG, "unknown model '%s' (known: mnist-cnn, mnist-cnn-bn, mlp)", name);
    build[i](g, out);
    out->name = names[i];
    return kiln_graph_status(g);
}
