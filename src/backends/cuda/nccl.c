/* The CUDA backend's collectives for data parallel runs: NCCL, one process
 * per GPU (kiln_coll_ops, src/backends/internal/backend.h; src/dist/ddp.c
 * drives them). NCCL is loaded when a run of several ranks asks for it, not
 * linked: kiln starts on machines without it (it is not in the GPU bundle,
 * at 218 MB), and a run that would need it says so. A bucket's sum goes on
 * a stream of its own once the compute stream has written the bucket (an
 * event between them), so backward's later kernels run while it reduces;
 * join puts an event after the sums that the compute stream waits for, so
 * the optimizer's kernels wait on the device; wait then holds the host until
 * that event, polling NCCL's asynchronous errors and bounded by --timeout
 * (a peer that stopped would leave NCCL's kernels, and the host behind them,
 * waiting forever). */
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include "backends/cuda/internal/cuda.h"

/* NCCL's ABI as nccl.h (2.x) defines it, declared here so that the backend builds where NCCL's headers are
 * not installed (they are not part of the CUDA toolkit): the few types and values kiln passes */
typedef struct ncclComm *ncclComm_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
typedef int ncclResult_t; /* ncclSuccess = 0 */
#define ncclSuccess 0
#define ncclInProgress 7
typedef int ncclDataType_t;
#define ncclUint8 1
#define ncclFloat32 7
typedef int ncclRedOp_t;
#define ncclSum 0

/* the entry points kiln calls, from the library loaded at run time */
static struct {
    int tried, ok;
    char why[200], version[32];
    ncclResult_t (*get_version)(int *);
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    ncclResult_t (*comm_abort)(ncclComm_t);
    ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t *);
    const char *(*error_string)(ncclResult_t);
} N;

static int resolve(void *lib) {
    *(void **)&N.get_version = dlsym(lib, "ncclGetVersion");
    *(void **)&N.get_unique_id = dlsym(lib, "ncclGetUniqueId");
    *(void **)&N.comm_init_rank = dlsym(lib, "ncclCommInitRank");
    *(void **)&N.all_reduce = dlsym(lib, "ncclAllReduce");
    *(void **)&N.broadcast = dlsym(lib, "ncclBroadcast");
    *(void **)&N.comm_destroy = dlsym(lib, "ncclCommDestroy");
    *(void **)&N.comm_abort = dlsym(lib, "ncclCommAbort");
    *(void **)&N.comm_get_async_error = dlsym(lib, "ncclCommGetAsyncError");
    *(void **)&N.error_string = dlsym(lib, "ncclGetErrorString");
    return N.get_version && N.get_unique_id && N.comm_init_rank && N.all_reduce && N.broadcast && N.comm_destroy &&
           N.comm_abort && N.comm_get_async_error && N.error_string;
}

static int nccl_load(char *why, size_t len) {
    if (!N.tried) {
        N.tried = 1;
        void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
        int v = 0;
        if (!lib)
            snprintf(N.why, sizeof N.why, "NCCL is not installed here (libnccl.so.2: %s)", dlerror());
        else if (!resolve(lib))
            snprintf(N.why, sizeof N.why, "libnccl.so.2 lacks the NCCL 2 entry points");
        else if (N.get_version(&v) != ncclSuccess || v < 20900) /* 2.9 on: major * 10000 + minor * 100 + patch */
            snprintf(N.why, sizeof N.why, "NCCL's version code %d found; kiln needs 2.9 or later", v);
        else {
            snprintf(N.version, sizeof N.version, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
            N.ok = kiln_cuda_available(N.why, sizeof N.why);
        }
    }
    if (!N.ok && why && len) snprintf(why, len, "%s", N.why);
    return N.ok;
}

static const char *nccl_version(void) { return N.version; }

static kiln_status nccl_check(ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return KILN_OK;
    return kiln_fail(KILN_ERR_BACKEND, "NCCL: %s: %s", what, N.error_string(r));
}

static kiln_status nccl_make_id(unsigned char id[KILN_COLL_ID_BYTES]) {
    _Static_assert(sizeof(ncclUniqueId) <= KILN_COLL_ID_BYTES, "NCCL's unique id fits the id kiln sends");
    ncclUniqueId u;
    kiln_status st = nccl_check(N.get_unique_id(&u), "making the communicator's id");
    if (st == KILN_OK) memcpy(id, &u, sizeof u);
    return st;
}

/* a communicator and the stream its sums run on; the events order it against the compute stream */
typedef struct {
    ncclComm_t c;
    cudaStream_t side;
    cudaEvent_t written, summed;
    int failed; /* a call failed: close aborts (ncclCommDestroy gives up on a communicator in error) */
} nccl_comm;

/* a clean close waits for the sums queued; after a failure the communicator is aborted without waiting (its
 * peers may never match what is queued) */
static void nccl_close(void *comm) {
    nccl_comm *m = comm;
    if (!m) return;
    if (m->c && m->failed) N.comm_abort(m->c);
    else if (m->c) {
        if (cudaStreamSynchronize(m->side) == cudaSuccess) N.comm_destroy(m->c);
        else N.comm_abort(m->c);
    }
    if (m->written) cudaEventDestroy(m->written);
    if (m->summed) cudaEventDestroy(m->summed);
    if (m->side) cudaStreamDestroy(m->side);
    free(m);
}

static kiln_status nccl_open(const unsigned char id[KILN_COLL_ID_BYTES], int rank, int size, void **comm) {
    *comm = NULL;
    nccl_comm *m = calloc(1, sizeof *m);
    if (!m) return kiln_fail(KILN_ERR_NOMEM, "NCCL: out of memory");
    kiln_status st = kiln_cuda_check(cudaStreamCreateWithFlags(&m->side, cudaStreamNonBlocking), "the collectives' stream");
    if (st == KILN_OK) st = kiln_cuda_check(cudaEventCreateWithFlags(&m->written, cudaEventDisableTiming), "an event");
    if (st == KILN_OK) st = kiln_cuda_check(cudaEventCreateWithFlags(&m->summed, cudaEventDisableTiming), "an event");
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    if (st == KILN_OK) st = nccl_check(N.comm_init_rank(&m->c, size, u, rank), "joining the communicator");
    if (st != KILN_OK) {
        m->failed = 1;
        nccl_close(m);
        return st;
    }
    *comm = m;
    return KILN_OK;
}

/* the side stream waits for what the compute stream has queued (the bucket's last writer among it) */
static kiln_status after_compute(nccl_comm *m) {
    kiln_status st = kiln_cuda_check(cudaEventRecord(m->written, (cudaStream_t)kiln_cuda_stream()), "an event");
    return st == KILN_OK ? kiln_cuda_check(cudaStreamWaitEvent(m->side, m->written, 0), "an event wait") : st;
}

static kiln_status failed_if(nccl_comm *m, kiln_status st) {
    if (st != KILN_OK) m->failed = 1;
    return st;
}

static kiln_status nccl_sum_f32(void *comm, float *buf, int64_t n) {
    nccl_comm *m = comm;
    kiln_status st = after_compute(m);
    if (st == KILN_OK)
        st = nccl_check(N.all_reduce(buf, buf, (size_t)n, ncclFloat32, ncclSum, m->c, m->side), "the gradient all-reduce");
    return failed_if(m, st);
}

static kiln_status nccl_join(void *comm) {
    nccl_comm *m = comm;
    kiln_status st = kiln_cuda_check(cudaEventRecord(m->summed, m->side), "an event");
    if (st == KILN_OK) st = kiln_cuda_check(cudaStreamWaitEvent((cudaStream_t)kiln_cuda_stream(), m->summed, 0), "an event wait");
    return failed_if(m, st);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* a failed wait aborts the communicator at once: NCCL's kernels then end, so the streams behind them (the
 * compute stream waits for `summed`) drain, and freeing the plan's memory, which synchronises, does not hang */
static kiln_status abort_now(nccl_comm *m, kiln_status st) {
    m->failed = 1;
    if (m->c) N.comm_abort(m->c);
    m->c = NULL;
    return st;
}

/* the host until the last join's event: polled (a blocking synchronisation could not be bounded), NCCL's
 * asynchronous error read between polls; a failure or the bound aborts the communicator */
static kiln_status nccl_wait(void *comm, double timeout_s) {
    nccl_comm *m = comm;
    double t0 = now_s();
    for (long polls = 0;; polls++) {
        cudaError_t e = cudaEventQuery(m->summed);
        if (e == cudaSuccess) return KILN_OK;
        if (e != cudaErrorNotReady) return abort_now(m, kiln_cuda_check(e, "waiting for the gradient all-reduce"));
        ncclResult_t a = ncclSuccess;
        if (N.comm_get_async_error(m->c, &a) == ncclSuccess && a != ncclSuccess && a != ncclInProgress)
            return abort_now(m, kiln_fail(KILN_ERR_BACKEND, "NCCL: the gradient all-reduce failed: %s", N.error_string(a)));
        if (timeout_s > 0 && now_s() - t0 > timeout_s)
            return abort_now(m, kiln_fail(KILN_ERR_IO, "NCCL: the gradient all-reduce did not end within %.0f s", timeout_s));
        if (polls > 1000) { /* a spin first (a sum ending now), then 50 us naps: a core stays free */
            struct timespec nap = {0, 50000};
            nanosleep(&nap, NULL);
        }
    }
}

static kiln_status nccl_bcast(void *comm, void *buf, size_t bytes, int root) {
    nccl_comm *m = comm;
    kiln_status st = after_compute(m);
    if (st == KILN_OK) st = nccl_check(N.broadcast(buf, buf, bytes, ncclUint8, root, m->c, m->side), "the broadcast");
    return st == KILN_OK ? nccl_join(m) : failed_if(m, st);
}

const kiln_coll_ops kiln_cuda_nccl = {
    .load = nccl_load,
    .version = nccl_version,
    .make_id = nccl_make_id,
    .open = nccl_open,
    .sum_f32 = nccl_sum_f32,
    .join = nccl_join,
    .wait = nccl_wait,
    .bcast = nccl_bcast,
    .close = nccl_close,
};
