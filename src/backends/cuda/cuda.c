/* The CUDA backend: float tensors in device memory (one cudaMalloc per arena,
 * parameter, gradient and optimizer buffer: the planner's offsets inside),
 * cuDNN for convolutions, cuBLASLt for linear layers, kiln's own kernels for
 * the rest, all on one compute stream. A step list runs as a CUDA graph,
 * captured on its first run and replayed after (the guide's CUDA graphs:
 * one launch per step instead of one per kernel); values that change per run
 * are written to a device struct first, so the replay sees them. The loss is
 * the one value copied back per step (the read-out; taken a step late by the
 * trainer, kiln_plan_set_late_loss); errors kernels find (a target out of
 * range) are checked there. Without a GPU the backend is built
 * but unavailable, and says why. See docs/backends.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>
#include "backends/cuda/internal/cuda.h"

static struct {
    int tried, ok;
    int device; /* the GPU this process uses (pick_device) */
    char why[160];
    cudaStream_t stream;
    kiln_cuda_rc *rc;
    kiln_cuda_flags *flags;
    double *parts; /* a whole-tensor sum's partial sums (rows.cu) */
    int graphs; /* KILN_CUDA_GRAPHS=0: run every step by launch (graph replay is checked against this) */
    /* late read-outs (kiln_plan_set_late_loss): per slot, a page-locked copy of the loss and the error
     * flags, and the event after them, so taking one loss waits for that read-out alone */
    struct late_slot {
        float loss;
        kiln_cuda_flags flags;
    } *late;
    cudaEvent_t late_done[KILN_READOUT_SLOTS];
} G;

static void drop_graphs(void);

/* at exit: what the process holds on the GPU is given back (compute-sanitizer's leak check stays quiet) */
static void release_all(void) {
    cudaStreamSynchronize(G.stream);
    drop_graphs();
    cudaFree(G.rc);
    cudaFree(G.flags);
    cudaFree(G.parts);
    cudaFreeHost(G.late);
    for (int k = 0; k < KILN_READOUT_SLOTS; k++) cudaEventDestroy(G.late_done[k]);
    cudaStreamDestroy(G.stream);
    G.ok = 0;
}

/* one process per GPU: under an MPI launcher the process's rank among its host's ranks picks the GPU,
 * read from what the launchers export (the backend may start before kiln joins MPI); KILN_CUDA_DEVICE
 * overrides; else 0 */
static int pick_device(int n) {
    static const char *vars[] = {"KILN_CUDA_DEVICE", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                 "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        long k = v ? strtol(v, &end, 10) : -1;
        if (v && *v && !*end && k >= 0) return i == 0 ? (k < n ? (int)k : -1) : (int)(k % n);
    }
    return 0;
}

static void init(void) {
    if (G.tried) return;
    G.tried = 1;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(G.why, sizeof G.why, "no CUDA GPU here (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "no device");
        return;
    }
    if ((G.device = pick_device(n)) < 0) {
        snprintf(G.why, sizeof G.why, "KILN_CUDA_DEVICE=%s, but this process sees %d GPU%s", getenv("KILN_CUDA_DEVICE"), n,
                 n == 1 ? "" : "s");
        return;
    }
    if ((e = cudaSetDevice(G.device)) != cudaSuccess || (e = cudaStreamCreateWithFlags(&G.stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMalloc((void **)&G.rc, sizeof *G.rc)) != cudaSuccess ||
        (e = cudaMalloc((void **)&G.flags, sizeof *G.flags)) != cudaSuccess ||
        (e = cudaMemset(G.flags, 0, sizeof *G.flags)) != cudaSuccess ||
        (e = cudaMalloc((void **)&G.parts, KILN_CUDA_PARTS * sizeof *G.parts)) != cudaSuccess ||
        (e = cudaHostAlloc((void **)&G.late, KILN_READOUT_SLOTS * sizeof *G.late, cudaHostAllocDefault)) != cudaSuccess) {
        snprintf(G.why, sizeof G.why, "the CUDA GPU cannot be used (%s)", cudaGetErrorString(e));
        return;
    }
    for (int k = 0; k < KILN_READOUT_SLOTS && e == cudaSuccess; k++)
        e = cudaEventCreateWithFlags(&G.late_done[k], cudaEventDisableTiming);
    if (e != cudaSuccess) {
        snprintf(G.why, sizeof G.why, "the CUDA GPU cannot be used (%s)", cudaGetErrorString(e));
        return;
    }
    atexit(release_all);
    const char *g = getenv("KILN_CUDA_GRAPHS");
    G.graphs = !(g && g[0] == '0');
    G.ok = 1;
}

int kiln_cuda_available(char *why, size_t len) {
    init();
    if (!G.ok && why && len) snprintf(why, len, "%s", G.why);
    return G.ok;
}

kiln_cuda_stream_t kiln_cuda_stream(void) { return (kiln_cuda_stream_t)G.stream; }
kiln_cuda_rc *kiln_cuda_rc_dev(void) { return G.rc; }
kiln_cuda_flags *kiln_cuda_flags_dev(void) { return G.flags; }
double *kiln_cuda_parts_dev(void) { return G.parts; }

kiln_status kiln_cuda_check(int err, const char *what) {
    if (err == cudaSuccess) return KILN_OK;
    return kiln_fail(KILN_ERR_BACKEND, "CUDA: %s: %s", what, cudaGetErrorString((cudaError_t)err));
}

kiln_status kiln_cuda_launched(const char *what) { return kiln_cuda_check(cudaGetLastError(), what); }

/* ---- memory ---- */

static void *cuda_alloc(size_t bytes) {
    init();
    void *p = NULL;
    if (!G.ok || cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) return NULL;
    return p;
}

/* the loader's ring: page-locked, so staging a batch is an asynchronous DMA */
static void *cuda_pinned_alloc(size_t bytes) {
    init();
    void *p = NULL;
    if (!G.ok || cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) != cudaSuccess) return NULL;
    return p;
}

static void cuda_pinned_free(void *p) {
    if (p && G.ok) cudaFreeHost(p);
}

static void cuda_free(void *p) {
    if (p && G.ok) {
        cudaStreamSynchronize(G.stream);
        cudaFree(p);
    }
}

/* the errors kernels recorded since the last check (flags reset after) */
static kiln_status check_flags(void) {
    kiln_cuda_flags f;
    kiln_status st = kiln_cuda_check(cudaMemcpy(&f, G.flags, sizeof f, cudaMemcpyDeviceToHost), "reading the error flags");
    if (st != KILN_OK || (st = kiln_cuda_flag_error(&f)) == KILN_OK) return st;
    cudaMemset(G.flags, 0, sizeof f);
    return st;
}

/* copies go on the compute stream, so they follow the kernels before them */
static kiln_status cuda_copy(void *dst, const void *src, size_t bytes, int async) {
    init();
    if (!G.ok) return kiln_fail(KILN_ERR_BACKEND, "CUDA: %s", G.why);
    kiln_status st = kiln_cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, G.stream), "copy");
    if (st == KILN_OK && !async) st = kiln_cuda_check(cudaStreamSynchronize(G.stream), "copy");
    return st;
}

static size_t cuda_memory(void) {
    init();
    size_t free_b = 0, total = 0;
    if (G.ok) cudaMemGetInfo(&free_b, &total);
    return free_b;
}

static int cuda_in_place(kiln_dtype dtype) {
    (void)dtype;
    return 0;
}

/* From the loader's page-locked ring the copy is an asynchronous DMA, on the
 * copy stream when large (copy_stream.c); the slot goes back to the loader
 * only after the step's read-out, which follows the copy. From pageable
 * memory the driver stages the bytes before returning. */
static kiln_status cuda_stage(void *dst, const void *host, int64_t n, kiln_dtype dtype) {
    init();
    if (!G.ok) return kiln_fail(KILN_ERR_BACKEND, "CUDA: %s", G.why);
    return kiln_cuda_stage(dst, host, (size_t)n * kiln_dtype_size(dtype));
}

/* ---- running step lists: graphs ---- */

/* one graph per run of consecutive device steps, keyed by where the run starts and what accumulates */
typedef struct {
    const kiln_step *first;
    int n, accumulate, failed;
    cudaGraphExec_t exec;
} graph_entry;

/* data parallel buckets cut backward into a segment per bucket (src/dist/ddp.c), a graph each, for each
 * plan (batch size) and accumulate flag: GPT-2 small at 25 MB buckets is about 20 segments */
#define MAX_GRAPHS 512
static graph_entry graphs[MAX_GRAPHS];
static int ngraphs;

void kiln_cuda_release(kiln_step *s) {
    for (int i = 0; i < ngraphs; i++) {
        graph_entry *e = &graphs[i];
        if (s < e->first || s >= e->first + e->n) continue;
        if (e->exec) cudaGraphExecDestroy(e->exec);
        graphs[i--] = graphs[--ngraphs];
    }
}

static void drop_graphs(void) {
    for (int i = 0; i < ngraphs; i++)
        if (graphs[i].exec) cudaGraphExecDestroy(graphs[i].exec);
    ngraphs = 0;
}

static kiln_status run_eager(const kiln_step *steps, int n, const kiln_run_ctx *rc) {
    for (int i = 0; i < n; i++) {
        kiln_status st = steps[i].run(&steps[i], rc);
        if (st != KILN_OK) return kiln_fail_context(st, "%s", steps[i].name);
    }
    return kiln_cuda_launched("after the steps");
}

static kiln_status capture(graph_entry *e, const kiln_step *steps, int n, const kiln_run_ctx *rc) {
    cudaGraph_t graph = NULL;
    kiln_status st = kiln_cuda_check(cudaStreamBeginCapture(G.stream, cudaStreamCaptureModeThreadLocal), "begin capture");
    if (st != KILN_OK) return st;
    kiln_status run = run_eager(steps, n, rc);
    cudaError_t end = cudaStreamEndCapture(G.stream, &graph);
    if (run != KILN_OK || end != cudaSuccess || cudaGraphInstantiate(&e->exec, graph, 0) != cudaSuccess) {
        e->failed = 1; /* not capturable: this list runs by launches from now on */
        e->exec = NULL;
        cudaGetLastError();
    }
    if (graph) cudaGraphDestroy(graph);
    return run;
}

static kiln_status run_device(const kiln_step *steps, int n, const kiln_run_ctx *rc) {
    if (!G.graphs || n < 2) return run_eager(steps, n, rc);
    graph_entry *e = NULL;
    for (int i = 0; i < ngraphs && !e; i++)
        if (graphs[i].first == steps && graphs[i].n == n && graphs[i].accumulate == rc->accumulate) e = &graphs[i];
    if (!e) {
        if (ngraphs == MAX_GRAPHS) return run_eager(steps, n, rc);
        e = &graphs[ngraphs++];
        *e = (graph_entry){.first = steps, .n = n, .accumulate = rc->accumulate};
        kiln_status st = capture(e, steps, n, rc);
        if (st != KILN_OK) return st;
        if (e->failed) return run_eager(steps, n, rc);
    }
    if (e->failed) return run_eager(steps, n, rc);
    return kiln_cuda_check(cudaGraphLaunch(e->exec, G.stream), "graph launch");
}

void kiln_cuda_set_graphs(int on) {
    init();
    G.graphs = on;
}

static int host_step(const kiln_step *s) { return s->run == kiln_cuda_readout; }

static kiln_status cuda_run(const kiln_step *steps, int n, const kiln_run_ctx *rc) {
    kiln_cuda_rc r = {.lr = rc->lr, .loss_scale = rc->loss_scale, .optim_step = rc->optim_step, .counter = rc->counter,
                      .amp = rc->amp};
    kiln_status st = kiln_cuda_check(cudaMemcpyAsync(G.rc, &r, sizeof r, cudaMemcpyHostToDevice, G.stream), "run context");
    for (int i = 0; st == KILN_OK && i < n;) {
        int j = i;
        while (j < n && !host_step(&steps[j])) j++;
        if (j > i) st = run_device(steps + i, j - i, rc);
        for (; st == KILN_OK && j < n && host_step(&steps[j]); j++) st = steps[j].run(&steps[j], rc);
        i = j;
    }
    return st;
}

/* a late read-out: the loss and the flags copied into slot k, the flags cleared, the event recorded; no wait */
static kiln_status queue_readout(const kiln_step *s, int k) {
    struct late_slot *p = &G.late[k];
    kiln_status st = kiln_cuda_check(cudaMemcpyAsync(&p->loss, s->in[0].data, sizeof p->loss, cudaMemcpyDeviceToHost,
                                                     G.stream), "read-out");
    if (st == KILN_OK)
        st = kiln_cuda_check(cudaMemcpyAsync(&p->flags, G.flags, sizeof p->flags, cudaMemcpyDeviceToHost, G.stream), "read-out");
    if (st == KILN_OK) st = kiln_cuda_check(cudaMemsetAsync(G.flags, 0, sizeof *G.flags, G.stream), "read-out");
    if (st == KILN_OK) st = kiln_cuda_check(cudaEventRecord(G.late_done[k], G.stream), "read-out");
    return st;
}

static kiln_status cuda_readout_take(int k, double *loss) {
    kiln_status st = kiln_cuda_check(cudaEventSynchronize(G.late_done[k]), "taking a loss");
    *loss = G.late[k].loss;
    return st == KILN_OK ? kiln_cuda_flag_error(&G.late[k].flags) : st;
}

/* the loss to the host: the one synchronisation of a training step, unless read late */
kiln_status kiln_cuda_readout(const kiln_step *s, const kiln_run_ctx *rc) {
    if (rc->late_slot > 0) return queue_readout(s, rc->late_slot - 1);
    float v = 0;
    kiln_status st = kiln_cuda_check(cudaMemcpyAsync(&v, s->in[0].data, sizeof v, cudaMemcpyDeviceToHost, G.stream), "read-out");
    if (st == KILN_OK) st = kiln_cuda_check(cudaStreamSynchronize(G.stream), "read-out");
    if (st == KILN_OK) st = check_flags();
    *(double *)s->out[0].data = v;
    return st;
}

static kiln_status cuda_sync(void) {
    kiln_status st = kiln_cuda_check(cudaStreamSynchronize(G.stream), "synchronise");
    return st == KILN_OK ? check_flags() : st;
}

/* per-step profiles wait for the GPU before reading the clock */
static double cuda_now(void) {
    if (G.ok) cudaStreamSynchronize(G.stream);
    return kiln_host_now();
}

static int precision;
int kiln_cuda_precision(void) { return precision; }

/* cuDNN's algorithm decisions persist beside the cpu's (src/backends/decision_file.c) */
static kiln_status import_keep(const char *text, const char *source) { return kiln_cuda_conv_import(text, source, 0); }
static kiln_status import_checkpoint(const char *text, const char *source) { return kiln_cuda_conv_import(text, source, 1); }
static kiln_decision_file decisions = KILN_DECISION_FILE("cuda-autotune-v1.txt", kiln_cuda_conv_export, import_keep);

static void cuda_prepare_begin(const kiln_compile_opts *o) {
    precision = o->matmul_precision;
    if (o->autotune) kiln_decision_file_load(&decisions);
}
static void cuda_prepare_end(const kiln_compile_opts *o) {
    if (o->autotune) kiln_decision_file_save(&decisions);
}

static int cuda_available(char *why, size_t len) { return kiln_cuda_available(why, len); }

/* its index and UUID (the same whatever CUDA_VISIBLE_DEVICES renumbers; a MIG instance has its own): two
 * processes naming the same GPU share it */
static kiln_status cuda_device_name(char *buf, size_t len) {
    init();
    if (!G.ok) return kiln_fail(KILN_ERR_BACKEND, "CUDA: %s", G.why);
    struct cudaDeviceProp p;
    kiln_status st = kiln_cuda_check(cudaGetDeviceProperties(&p, G.device), "the GPU's properties");
    if (st != KILN_OK) return st;
    const unsigned char *u = (const unsigned char *)p.uuid.bytes;
    snprintf(buf, len, "cuda %d (GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x)", G.device, u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    return KILN_OK;
}

static kiln_status cuda_passes(kiln_graph *g, const kiln_compile_opts *o) { return kiln_cuda_passes(g, o, kiln_cuda_kernels); }

const kiln_backend kiln_backend_cuda = {
    .name = "cuda",
    .float_dtype = KILN_F32,
    .host_memory = 0,
    .kernels = kiln_cuda_kernels,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .pinned_alloc = cuda_pinned_alloc,
    .pinned_free = cuda_pinned_free,
    .copy = cuda_copy,
    .memory_available = cuda_memory,
    .input_in_place = cuda_in_place,
    .stage_input = cuda_stage,
    .passes = cuda_passes,
    .prepare_begin = cuda_prepare_begin,
    .prepare_end = cuda_prepare_end,
    .run = cuda_run,
    .sync = cuda_sync,
    .now = cuda_now,
    .export_state = kiln_cuda_conv_export,
    .import_state = import_checkpoint,
    .available = cuda_available,
    .step_freed = kiln_cuda_release,
    .readout_take = cuda_readout_take,
    .amp_on_device = 1,
    .coll = &kiln_cuda_nccl,
    .device_name = cuda_device_name,
};
