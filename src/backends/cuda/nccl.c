/* The CUDA backend's collectives for data parallel runs: NCCL, one process
 * per GPU (kiln_coll_ops, src/backends/internal/backend.h; src/dist/ddp.c
 * drives them). NCCL is loaded when a run of several ranks asks for it, not
 * linked: kiln starts on machines without it (it is not in the GPU bundle,
 * at 218 MB), and a run that would need it says so. The gradient sum goes
 * on the compute stream after backward's kernels, so the optimizer's
 * kernels wait for it on the device and the host never does. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include "backends/cuda/internal/cuda.h"

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
    const char *(*error_string)(ncclResult_t);
} N;

static int resolve(void *lib) {
    *(void **)&N.get_version = dlsym(lib, "ncclGetVersion");
    *(void **)&N.get_unique_id = dlsym(lib, "ncclGetUniqueId");
    *(void **)&N.comm_init_rank = dlsym(lib, "ncclCommInitRank");
    *(void **)&N.all_reduce = dlsym(lib, "ncclAllReduce");
    *(void **)&N.broadcast = dlsym(lib, "ncclBroadcast");
    *(void **)&N.comm_destroy = dlsym(lib, "ncclCommDestroy");
    *(void **)&N.error_string = dlsym(lib, "ncclGetErrorString");
    return N.get_version && N.get_unique_id && N.comm_init_rank && N.all_reduce && N.broadcast && N.comm_destroy &&
           N.error_string;
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

static kiln_status nccl_open(const unsigned char id[KILN_COLL_ID_BYTES], int rank, int size, void **comm) {
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclComm_t c = NULL;
    kiln_status st = nccl_check(N.comm_init_rank(&c, size, u, rank), "joining the communicator");
    *comm = st == KILN_OK ? c : NULL;
    return st;
}

static kiln_status nccl_sum_f32(void *comm, float *buf, int64_t n) {
    return nccl_check(N.all_reduce(buf, buf, (size_t)n, ncclFloat32, ncclSum, (ncclComm_t)comm, (cudaStream_t)kiln_cuda_stream()),
                      "the gradient all-reduce");
}

static kiln_status nccl_bcast(void *comm, void *buf, size_t bytes, int root) {
    return nccl_check(N.broadcast(buf, buf, bytes, ncclUint8, root, (ncclComm_t)comm, (cudaStream_t)kiln_cuda_stream()),
                      "the broadcast");
}

static void nccl_close(void *comm) {
    if (comm) N.comm_destroy((ncclComm_t)comm);
}

const kiln_coll_ops kiln_cuda_nccl = {
    .load = nccl_load,
    .version = nccl_version,
    .make_id = nccl_make_id,
    .open = nccl_open,
    .sum_f32 = nccl_sum_f32,
    .bcast = nccl_bcast,
    .close = nccl_close,
};
