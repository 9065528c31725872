/* "simt": the CUDA backend's kernel table and its own kernels (*.cu built as
 * host C++, every launch run on the CPU by internal/simt.h), behind the
 * backend interface like a device: memory apart from the host's (host
 * memory, but reached only through copy, and NaN until written), inputs
 * staged. What cuda.c does on a GPU (streams, graphs, the device run
 * struct, the error flags) is done here in host memory. Convolutions run
 * conv.c itself over a host cuDNN (cudnn_host.c, KILN_SIMT_CUDNN) and linear
 * and matmul linear.c over a host cuBLASLt (cublaslt_host.c,
 * KILN_SIMT_CUBLASLT) where those libraries' headers are found; elsewhere the
 * cpu backend's kernels stand in for them (the memory is the host's), so whole
 * models train on it. Everything else is the CUDA backend's own. tests/test_ops.c runs its harness over it,
 * test_fixtures.c PyTorch's fixtures, test_gpt.c and test_models.c the GPT and
 * resnet20 against PyTorch (cmake/simt.cmake links them with it). Built with
 * -include simt_names.h: every kiln_cuda_ name below is kiln_simt_. */
#include <stdlib.h>
#include <string.h>
#include "backends/cpu/internal/cpu.h"
#include "backends/cuda/internal/cuda.h"
#include "half_bits.h"

static kiln_cuda_rc run_values;
static kiln_cuda_flags flags;
static int precision;

kiln_cuda_stream_t kiln_cuda_stream(void) { return NULL; }
kiln_cuda_rc *kiln_cuda_rc_dev(void) { return &run_values; }
kiln_cuda_flags *kiln_cuda_flags_dev(void) { return &flags; }
double *kiln_cuda_parts_dev(void) {
    static double parts[KILN_CUDA_PARTS];
    return parts;
}
int kiln_cuda_available(char *why, size_t len) {
    (void)why, (void)len;
    return 1;
}
kiln_status kiln_cuda_check(int err, const char *what) {
    return err ? kiln_fail(KILN_ERR_BACKEND, "simt: %s failed (%d)", what, err) : KILN_OK;
}
kiln_status kiln_cuda_launched(const char *what) {
    (void)what;
    return KILN_OK;
}
int kiln_cuda_precision(void) { return precision; }
void kiln_cuda_set_graphs(int on) { (void)on; }
void kiln_cuda_release(kiln_step *s) { (void)s; }

static kiln_status check_flags(void) {
    kiln_cuda_flags f = flags;
    memset(&flags, 0, sizeof flags);
    return kiln_cuda_flag_error(&f);
}

/* late read-outs as cuda.c has them: the loss and the flags into a slot, the flags cleared; the run has
 * ended when the read-out runs here, so taking one waits for nothing */
static struct {
    float loss;
    kiln_cuda_flags flags;
} late[KILN_READOUT_SLOTS];

kiln_status kiln_cuda_readout(const kiln_step *s, const kiln_run_ctx *rc) {
    if (rc->late_slot > 0) {
        late[rc->late_slot - 1].loss = *(const float *)s->in[0].data;
        late[rc->late_slot - 1].flags = flags;
        memset(&flags, 0, sizeof flags);
        return KILN_OK;
    }
    *(double *)s->out[0].data = *(const float *)s->in[0].data;
    return check_flags();
}

static kiln_status simt_readout_take(int k, double *loss) {
    *loss = late[k].loss;
    return kiln_cuda_flag_error(&late[k].flags);
}

static kiln_status simt_run(const kiln_step *steps, int n, const kiln_run_ctx *rc) {
    run_values = (kiln_cuda_rc){.lr = rc->lr, .loss_scale = rc->loss_scale, .optim_step = rc->optim_step, .counter = rc->counter,
                                .amp = rc->amp};
    kiln_status st = KILN_OK;
    for (int i = 0; st == KILN_OK && i < n; i++) st = steps[i].run(&steps[i], rc);
    return st;
}

/* device memory starts as NaN (all bits set), as cudaMalloc's holds whatever was there: a kernel that
 * leaves part of its output unwritten, or a step that reads memory nothing wrote, fails the checks
 * instead of reading the zeros of fresh host pages. Each block is exactly as large as asked (not
 * kiln_alloc's size classes), so under AddressSanitizer a kernel reading past a buffer's end is caught. */
static void *simt_alloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) return NULL; /* as cudaMalloc aligns */
    memset(p, 0xff, bytes);
    return p;
}

static kiln_status simt_copy(void *dst, const void *src, size_t bytes, int async) {
    (void)async;
    memmove(dst, src, bytes);
    return KILN_OK;
}
static int simt_in_place(kiln_dtype dtype) {
    (void)dtype;
    return 0;
}
static kiln_status simt_stage(void *dst, const void *host, int64_t n, kiln_dtype dtype) {
    memcpy(dst, host, (size_t)n * kiln_dtype_size(dtype));
    return KILN_OK;
}
static kiln_status simt_sync(void) { return check_flags(); }
static void simt_prepare_begin(const kiln_compile_opts *o) { precision = o->matmul_precision; }
/* "device memory": a quarter of the host's, so a test can tell which of the two a budget came from (a GPU's is
 * usually the smaller) */
static size_t simt_memory(void) { return kiln_host_memory() / 4; }

static kiln_kernel table[KILN_OP_COUNT];
/* the cuda backend's layout pass over simt's table (KILN_CUDA_LAYOUT=nhwc) */
static kiln_status simt_passes(kiln_graph *g, const kiln_compile_opts *o) { return kiln_cuda_passes(g, o, table); }

static kiln_backend simt = {
    .name = "simt",
    .float_dtype = KILN_F32,
    .host_memory = 0,
    .kernels = table,
    .alloc = simt_alloc,
    .free = free,
    .copy = simt_copy,
    .memory_available = simt_memory,
    .input_in_place = simt_in_place,
    .stage_input = simt_stage,
    .passes = simt_passes,
    .prepare_begin = simt_prepare_begin,
    .run = simt_run,
    .sync = simt_sync,
    .now = kiln_host_now,
    .step_freed = kiln_cuda_release,
    .readout_take = simt_readout_take,
    .amp_on_device = 1,
};

/* the ops a GPU runs on cuDNN or cuBLASLt */
static const kiln_op library_ops[] = {KILN_OP_CONV2D, KILN_OP_CONV2D_BWD_DATA, KILN_OP_CONV2D_BWD_WEIGHT,
                                      KILN_OP_LINEAR, KILN_OP_LINEAR_BWD_DATA, KILN_OP_LINEAR_BWD_WEIGHT,
                                      KILN_OP_MATMUL, KILN_OP_MATMUL_BWD_DATA, KILN_OP_MATMUL_BWD_WEIGHT};

/* A stand-in reading an operand the half-storage pass stored in 16 bits (KILN_CUDA_STORE=half: linear and
 * matmul, input 0, and backward-weight's input 1) takes it widened to fp32 in a copy; the cpu kernel then rounds
 * it to 16 bits again, which changes nothing, as cuBLASLt reads the 16 bits themselves */
static float widen(uint16_t h, int fp16) { return (float)simt_half_get(h, fp16); }
static kiln_status standin_prepare(kiln_step *s, kiln_prep *p) {
    kiln_dtype d[2] = {s->in[0].dtype, s->nin > 1 ? s->in[1].dtype : KILN_F32};
    for (int k = 0; k < 2 && k < s->nin; k++) s->in[k].dtype = KILN_F32;
    kiln_status st = kiln_backend_cpu.kernels[s->op].prepare ? kiln_backend_cpu.kernels[s->op].prepare(s, p) : KILN_OK;
    for (int k = 0; k < 2 && k < s->nin; k++) s->in[k].dtype = d[k];
    return st;
}
static kiln_status standin_run(const kiln_step *s, const kiln_run_ctx *rc) {
    if (!kiln_cuda_half_kind(&s->in[0]) && (s->nin < 2 || !kiln_cuda_half_kind(&s->in[1])))
        return kiln_backend_cpu.kernels[s->op].run(s, rc);
    kiln_step t = *s;
    float *wide[2] = {NULL, NULL};
    kiln_status st = KILN_OK;
    for (int k = 0; k < 2 && k < s->nin && st == KILN_OK; k++) {
        int kind = kiln_cuda_half_kind(&s->in[k]);
        if (!kind) continue;
        int64_t n = kiln_tdesc_span(&s->in[k]);
        const uint16_t *h = s->in[k].data;
        if (!(wide[k] = malloc((size_t)(n ? n : 1) * sizeof(float)))) st = kiln_fail(KILN_ERR_NOMEM, "simt: out of memory");
        for (int64_t i = 0; wide[k] && i < n; i++) wide[k][i] = widen(h[i], kind == 2);
        t.in[k].data = wide[k];
        t.in[k].dtype = KILN_F32;
    }
    if (st == KILN_OK) st = kiln_backend_cpu.kernels[s->op].run(&t, rc);
    free(wide[0]);
    free(wide[1]);
    return st;
}

kiln_status kiln_test_simt_register(void) {
    memcpy(table, kiln_cuda_kernels, sizeof table);
    for (size_t i = 0; i < sizeof library_ops / sizeof library_ops[0]; i++) {
        kiln_op op = library_ops[i];
        int conv = op == KILN_OP_CONV2D || op == KILN_OP_CONV2D_BWD_DATA || op == KILN_OP_CONV2D_BWD_WEIGHT;
#ifdef KILN_SIMT_CUBLASLT /* linear.c itself runs, over tests/simt/cublaslt_host.c */
        if (!conv) continue;
#endif
#ifdef KILN_SIMT_CUDNN /* and conv.c, over tests/simt/cudnn_host.c */
        if (conv) continue;
#endif
        kiln_kernel k = kiln_backend_cpu.kernels[op];
        k.blocked_in = k.blocked_out = 0; /* plain layouts: the cpu's stand-ins take no channels-last tensor */
        k.reorders_plain = 0;
        k.tied = 0;
        if (!conv) {
            k.half = op == KILN_OP_LINEAR_BWD_WEIGHT || op == KILN_OP_MATMUL_BWD_WEIGHT ? kiln_cuda_half_bwd_weight
                                                                                    : kiln_cuda_half_in0;
            k.run = standin_run;
            k.prepare = standin_prepare;
        }
        table[op] = k;
    }
    return kiln_backend_register(&simt);
}
