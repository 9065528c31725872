/* The backend interface without host memory: a simulated device backend
 * ("devsim": the cpu backend's kernels, but host_memory = 0 and inputs
 * staged by a copy, as a GPU backend has them) must train exactly as the cpu
 * backend does, with every host access to parameters, buffers and optimizer
 * state going through the backend's copy (counted here): parameters made and
 * initialised on it, plans compiled on it, the optimizer's state on it,
 * checkpoints written from and resumed onto it. */
#include <unistd.h>
#include "backends/cpu/internal/cpu.h"
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/safetensors.h"
#include "testutil.h"
#include "train/internal/checkpoint.h"

static int copies, stages;

static kiln_status sim_copy(void *dst, const void *src, size_t bytes, int async) {
    copies++;
    return kiln_backend_cpu.copy(dst, src, bytes, async);
}
static int sim_in_place(kiln_dtype dtype) {
    (void)dtype;
    return 0;
}
static kiln_status sim_stage(void *dst, const void *host, int64_t n, kiln_dtype dtype) {
    stages++;
    return kiln_backend_cpu.stage_input(dst, host, n, dtype);
}

static kiln_backend devsim;

/* n steps of mnist-cnn-bn (a batch norm: buffers too) on a backend; returns the final parameters (host copy) */
static float *train(const char *backend, int steps, const char *save, const char *resume, kiln_params **Pout) {
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    kiln_optim *o = NULL;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_model_build(g, "mnist-cnn-bn", &m));
    CHECK_OK(kiln_params_new_on(g, backend, &P));
    if (!P) return NULL;
    kiln_params_init(P, 5);
    kiln_optim_config oc = kiln_optim_defaults(KILN_OPT_ADAMW);
    CHECK_OK(kiln_optim_new(&oc, P, &o));
    kiln_optim_set_clip(o, 1.0);
    kiln_ckpt_state cs = {0};
    if (resume) CHECK_OK(kiln_checkpoint_resume(resume, P, o, &cs));
    kiln_compile_opts co = kiln_compile_defaults();
    co.training = 1;
    co.max_batch = 8;
    co.autotune = 0;
    CHECK_OK(kiln_compile(g, P, &m.loss, 1, &co, &pl));
    CHECK_MSG(pl && !strcmp(kiln_plan_backend(pl), backend), "the plan runs where the parameters live");
    float *x = kiln_alloc(8 * 784 * 4);
    int32_t *y = kiln_alloc(8 * 4);
    for (int s = (int)cs.step; pl && s < steps; s++) {
        tu_seed((uint64_t)s + 1); /* the same batch for step s on every backend */
        tu_fill(x, 8 * 784, -1, 2);
        for (int i = 0; i < 8; i++) y[i] = (int32_t)tu_int(0, 9);
        kiln_plan_bind(pl, m.x, x);
        kiln_plan_bind(pl, m.y, y);
        kiln_plan_set_step(pl, (uint64_t)s);
        CHECK_OK(kiln_plan_run(pl, 8));
        CHECK_OK(kiln_optim_step(o));
    }
    if (save) {
        kiln_ckpt_state st = {.step = steps, .batch_size = 8, .accumulate = 1, .lr = oc.lr, .optim_steps = kiln_optim_steps(o)};
        snprintf(st.model, sizeof st.model, "mnist-cnn-bn");
        snprintf(st.optimizer, sizeof st.optimizer, "adamw");
        CHECK_OK(kiln_checkpoint_save(save, P, o, &st));
    }
    float *out = malloc((size_t)kiln_params_total(P) * 4);
    CHECK_OK(kiln_params_read(P, out));
    kiln_free(x);
    kiln_free(y);
    kiln_plan_free(pl);
    kiln_optim_free(o);
    if (Pout) *Pout = P;
    else kiln_params_free(P);
    kiln_graph_free(g);
    return out;
}

int main(void) {
    devsim = kiln_backend_cpu;
    devsim.name = "devsim";
    devsim.host_memory = 0;
    devsim.copy = sim_copy;
    devsim.input_in_place = sim_in_place;
    devsim.stage_input = sim_stage;
    CHECK_OK(kiln_backend_register(&devsim));
    char dir[] = "/tmp/kiln_test_backend.XXXXXX", a[128], b[128];
    if (!mkdtemp(dir)) return 1;
    snprintf(a, sizeof a, "%s/cpu.safetensors", dir);
    snprintf(b, sizeof b, "%s/devsim.safetensors", dir);

    float *ref = train("cpu", 6, NULL, NULL, NULL);
    copies = stages = 0;
    kiln_params *P = NULL;
    float *dev = train("devsim", 6, b, NULL, &P);
    CHECK_MSG(copies > 0 && stages >= 12, "devsim: %d copies, %d staged inputs", copies, stages);
    CHECK_MSG(ref && dev && P && !kiln_params_host_memory(P), "devsim keeps its own memory");
    int64_t total = P ? kiln_params_total(P) : 0;
    CHECK_MSG(ref && dev && memcmp(ref, dev, (size_t)total * 4) == 0, "devsim trains as the cpu backend, bit for bit");
    /* buffers went through copies too: the running statistics moved and match */
    for (int i = 0; P && i < kiln_params_buffer_count(P); i++) {
        int64_t v[64] = {0};
        CHECK_OK(kiln_params_buffer_read(P, i, v));
        if (kiln_params_buffer_dtype(P, i) == KILN_I64) CHECK_MSG(v[0] == 6, "%s is %lld", kiln_params_buffer_name(P, i), (long long)v[0]);
    }
    kiln_params_free(P);
    /* a checkpoint from devsim resumes on devsim and on the cpu, and both continue as 9 straight steps */
    float *straight = train("cpu", 9, a, NULL, NULL), *r1 = train("devsim", 9, NULL, b, NULL), *r2 = train("cpu", 9, NULL, b, NULL);
    CHECK_MSG(straight && r1 && memcmp(straight, r1, (size_t)total * 4) == 0, "resumed on devsim = 9 steps straight");
    CHECK_MSG(straight && r2 && memcmp(straight, r2, (size_t)total * 4) == 0, "devsim's checkpoint resumed on the cpu = 9 steps straight");
    free(ref), free(dev), free(straight), free(r1), free(r2);
    unlink(a);
    unlink(b);
    rmdir(dir);
    return tu_finish("test_backend");
}
