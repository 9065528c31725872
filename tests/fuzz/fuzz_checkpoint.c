/* Fuzz target: the checkpoint metadata reader (src/train/checkpoint.c):
 * kiln_checkpoint_resume onto an mlp's parameters and an optimizer,
 * kiln_checkpoint_load_params, and kiln_checkpoint_settings with the saved
 * settings applied as `train --resume` does.
 *
 * The input is the safetensors header (its JSON), optionally followed by a
 * NUL byte and the first bytes of the data section. The harness writes the
 * 8-byte length, the header, and a data section as long as the header's
 * largest data_offsets end (found with jansson; zeros after the given
 * bytes). So the fuzzer spends its time on the metadata and the tensor
 * table, not on megabytes of weights; the raw file format has its own
 * target (fuzz_safetensors). An accepted checkpoint must hold what the
 * reader promises: positions and sizes in range, finite values, a gradient
 * scaler's state in range (the adamw optimizer has one). */
#include <jansson.h>
#include <math.h>
#include "fuzz_util.h"
#include "kernels/internal/dnnl_ops.h"
#include "kiln/nn.h"
#include "kiln/safetensors.h"
#include "train/internal/checkpoint.h"

#define MAX_DATA ((uint64_t)32 << 20) /* an mlp checkpoint with two optimizer states is 2.8 MB */

enum { OPT_ADADELTA, OPT_ADAMW, OPT_SGD, OPT_SGD_MOMENTUM, OPT_LAMB, OPT_LARS, OPT_NOVOGRAD, NOPT };
static kiln_graph *g; /* lives as long as the parameters: the whole run */
static kiln_params *P;
static kiln_optim *opt[NOPT];
static float *host;

static void setup(void) {
    fuzz_quiet();
    g = kiln_graph_new();
    kiln_model m;
    if (kiln_model_build(g, "mlp", &m) != KILN_OK || kiln_params_new(g, KILN_F32, &P) != KILN_OK) abort();
    kiln_params_init(P, 1);
    kiln_optim_config c[NOPT] = {kiln_optim_defaults(KILN_OPT_ADADELTA), kiln_optim_defaults(KILN_OPT_ADAMW),
                                 kiln_optim_defaults(KILN_OPT_SGD), kiln_optim_defaults(KILN_OPT_SGD),
                                 kiln_optim_defaults(KILN_OPT_LAMB), kiln_optim_defaults(KILN_OPT_LARS),
                                 kiln_optim_defaults(KILN_OPT_NOVOGRAD)};
    c[OPT_SGD_MOMENTUM].momentum = 0.9f;
    for (int k = 0; k < NOPT; k++)
        if (kiln_optim_new(&c[k], P, &opt[k]) != KILN_OK) abort();
    kiln_grad_scaler_config gs = kiln_grad_scaler_defaults(); /* adamw's reads kiln.grad_scaler */
    if (kiln_optim_set_grad_scaler(opt[OPT_ADAMW], &gs) != KILN_OK) abort();
    host = malloc((size_t)kiln_params_total(P) * 4 + 64);
    if (!host) abort();
}

/* the data section's length the header asks for (0 when jansson cannot tell) */
static uint64_t data_length(json_t *h) {
    uint64_t end = 0;
    const char *key;
    json_t *v;
    json_object_foreach(h, key, v) {
        json_t *off = json_object_get(v, "data_offsets");
        json_t *e = json_array_get(off, 1);
        if (json_is_integer(e) && json_integer_value(e) > 0 && (uint64_t)json_integer_value(e) > end)
            end = (uint64_t)json_integer_value(e);
    }
    return end;
}

/* the optimizer the checkpoint says it was saved with (adadelta when it does not say) */
static kiln_optim *optimizer_for(json_t *h) {
    const char *name = json_string_value(json_object_get(json_object_get(h, "__metadata__"), "kiln.optimizer"));
    if (name && strcmp(name, "adamw") == 0) return opt[OPT_ADAMW];
    if (name && strcmp(name, "lamb") == 0) return opt[OPT_LAMB];
    if (name && strcmp(name, "lars") == 0) return opt[OPT_LARS];
    if (name && strcmp(name, "novograd") == 0) return opt[OPT_NOVOGRAD]; /* exp_avg_sq: one scalar per tensor */
    if (name && strcmp(name, "sgd") == 0)
        return json_object_get(h, "optim.momentum_buffer.fc1.weight") ? opt[OPT_SGD_MOMENTUM] : opt[OPT_SGD];
    return opt[OPT_ADADELTA];
}

static void check_finite(const float *x, int64_t n, int nonnegative) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]) || (nonnegative && x[i] < 0)) {
            fprintf(stderr, "fuzz: an accepted checkpoint left %g at %lld\n", (double)x[i], (long long)i);
            abort();
        }
}

/* the saved settings applied over the defaults, as `kiln train --resume` does (tools/kiln.c) */
static void apply_settings(const char *path) {
    char *text = NULL;
    kiln_status st = kiln_checkpoint_settings(path, &text);
    fuzz_check_error(st);
    if (st != KILN_OK || !text) return;
    json_error_t err;
    json_t *o = json_loads(text, 0, &err);
    free(text);
    if (json_is_object(o)) {
        kiln_train_config c = kiln_train_defaults();
        for (int i = 0; i < kiln_train_option_count(); i++) {
            const char *name = kiln_train_option_at(i)->name;
            json_t *s = json_object_get(o, name);
            if (json_is_string(s)) fuzz_check_error(kiln_train_option_set(&c, name, json_string_value(s)));
        }
    }
    json_decref(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz_file file;
    if (!P) setup();
    const uint8_t *nul = memchr(data, 0, size);
    size_t hlen = nul ? (size_t)(nul - data) : size;
    size_t given = nul ? size - hlen - 1 : 0;
    json_error_t err;
    json_t *h = json_loadb((const char *)data, hlen, JSON_DISABLE_EOF_CHECK, &err);
    uint64_t dlen = h ? data_length(h) : 0;
    if (dlen < given) dlen = given;
    if (dlen > MAX_DATA) dlen = MAX_DATA;
    uint8_t *buf = calloc(1, 8 + hlen + dlen);
    if (!buf) abort();
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, data, hlen);
    if (given) memcpy(buf + 8 + hlen, nul + 1, given < dlen ? given : dlen);
    const char *path = fuzz_file_put(&file, "ckpt", buf, 8 + hlen + dlen);
    free(buf);

    kiln_optim *o = optimizer_for(h);
    json_decref(h);
    kiln_ckpt_state s;
    kiln_status st = kiln_checkpoint_resume(path, P, o, &s);
    fuzz_check_error(st);
    if (st == KILN_OK) {
        const int64_t big = (int64_t)1 << 53;
        if (s.step < 0 || s.step > big || s.epoch < 0 || s.epoch > big || s.next_batch < 0 || s.next_batch > big ||
            s.batch_size < 1 || s.batch_size > KILN_MAX_BATCH || s.accumulate < 1 || s.accumulate > 1 << 20 ||
            s.optim_steps < 0 || s.optim_steps > s.step || !isfinite(s.lr) || s.lr < 0) {
            fprintf(stderr, "fuzz: an accepted checkpoint's position is out of range\n");
            abort();
        }
        int64_t n = kiln_params_total(P);
        if (kiln_params_read(P, host) != KILN_OK) abort();
        check_finite(host, n, 0);
        kiln_grad_scaler_info gi;
        if (kiln_optim_grad_scaler(o) && (kiln_optim_grad_scaler_read(o, &gi) != KILN_OK || !(gi.scale >= 0x1p-126) ||
                                          !isfinite(gi.scale) || gi.skipped < 0 || gi.skipped > s.optim_steps || gi.tracker < 0)) {
            fprintf(stderr, "fuzz: an accepted checkpoint's gradient scaler is out of range\n");
            abort();
        }
        for (int k = 0; k < kiln_optim_state_count(o); k++) {
            if (kiln_optim_state_read(o, k, host) != KILN_OK) abort();
            check_finite(host, kiln_optim_state_per_tensor(o, k) ? kiln_params_count(P) : n, kiln_optim_state_nonnegative(o, k));
        }
    }
    st = kiln_checkpoint_load_params(P, path);
    fuzz_check_error(st);
    if (st == KILN_OK) {
        if (kiln_params_read(P, host) != KILN_OK) abort();
        check_finite(host, kiln_params_total(P), 0);
    }
    apply_settings(path);
    kiln_autotune_forget(); /* decisions imported from kiln.autotune would pile up over the run */
    return 0;
}
