/* libkiln_mpi.so: kiln's MPI calls, built against the MPI found at build time
 * and loaded by src/dist/comm.c only under an MPI launcher (see mpi_api.h). */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include "dist/internal/mpi_api.h"

static MPI_Request reqs[KILN_MPI_MAX_REQS];
static int in_use[KILN_MPI_MAX_REQS];
static char lib[256];

static int init(int *rank, int *size, int *local_rank, int *local_size, char *host, size_t hostlen) {
    int provided = 0, inited = 0;
    MPI_Initialized(&inited);
    int rc = inited ? MPI_SUCCESS : MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return rc;
    /* errors come back as codes: kiln names the collective and ends the job itself */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    MPI_Comm local;
    if ((rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL, &local)) != MPI_SUCCESS) return rc;
    MPI_Comm_rank(local, local_rank);
    MPI_Comm_size(local, local_size);
    MPI_Comm_free(&local);
    int len = 0;
    char name[MPI_MAX_PROCESSOR_NAME];
    MPI_Get_processor_name(name, &len);
    snprintf(host, hostlen, "%s", name);
    for (int i = 0; i < KILN_MPI_MAX_REQS; i++) reqs[i] = MPI_REQUEST_NULL;
    return MPI_SUCCESS;
}

static int finalize(void) {
    int done = 0;
    MPI_Finalized(&done);
    return done ? MPI_SUCCESS : MPI_Finalize();
}

static int take_slot(void) {
    for (int i = 0; i < KILN_MPI_MAX_REQS; i++)
        if (!in_use[i]) {
            in_use[i] = 1;
            return i;
        }
    return -1;
}

static MPI_Datatype type_of(kiln_mpi_type t) { return t == KILN_MPI_F32 ? MPI_FLOAT : t == KILN_MPI_F64 ? MPI_DOUBLE : MPI_BYTE; }

/* MPI counts are int: larger buffers are refused (kiln's buckets are far smaller) */
static int start(int *req, int64_t n, int (*go)(void *, int, MPI_Request *), void *arg) {
    if (n > INT_MAX) return MPI_ERR_COUNT;
    int s = take_slot();
    if (s < 0) return MPI_ERR_PENDING;
    int rc = go(arg, (int)n, &reqs[s]);
    if (rc != MPI_SUCCESS) {
        in_use[s] = 0;
        return rc;
    }
    *req = s;
    return MPI_SUCCESS;
}

typedef struct { void *buf; const void *src; MPI_Datatype t; int root; } args;

static int go_allreduce(void *a, int n, MPI_Request *r) {
    args *x = a;
    return MPI_Iallreduce(MPI_IN_PLACE, x->buf, n, x->t, MPI_SUM, MPI_COMM_WORLD, r);
}
static int go_bcast(void *a, int n, MPI_Request *r) {
    args *x = a;
    return MPI_Ibcast(x->buf, n, MPI_BYTE, x->root, MPI_COMM_WORLD, r);
}
static int go_allgather(void *a, int n, MPI_Request *r) {
    args *x = a;
    return MPI_Iallgather(x->src, n, MPI_BYTE, x->buf, n, MPI_BYTE, MPI_COMM_WORLD, r);
}

static int iallreduce_sum(void *buf, int64_t n, kiln_mpi_type t, int *req) {
    args a = {buf, NULL, type_of(t), 0};
    return start(req, n, go_allreduce, &a);
}
static int ibcast(void *buf, int64_t bytes, int root, int *req) {
    args a = {buf, NULL, MPI_BYTE, root};
    return start(req, bytes, go_bcast, &a);
}
static int iallgather(const void *mine, void *all, int64_t bytes, int *req) {
    args a = {all, mine, MPI_BYTE, 0};
    return start(req, bytes, go_allgather, &a);
}

static int test(int req, int *done) {
    if (req < 0 || req >= KILN_MPI_MAX_REQS || !in_use[req]) {
        *done = 1;
        return MPI_SUCCESS;
    }
    int rc = MPI_Test(&reqs[req], done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || *done) in_use[req] = 0;
    return rc;
}

static void abort_job(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

static void err_string(int code, char *buf, size_t len) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(code, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", code);
    snprintf(buf, len, "%s", s);
}

static const char *library(void) {
    if (!lib[0]) {
        char v[MPI_MAX_LIBRARY_VERSION_STRING];
        int n = 0;
        MPI_Get_library_version(v, &n);
        v[strcspn(v, ",\n")] = 0;
        snprintf(lib, sizeof lib, "%s", v);
    }
    return lib;
}

static const kiln_mpi_api api = {KILN_MPI_API_VERSION, init, finalize, iallreduce_sum, ibcast, iallgather, test,
                                 abort_job, err_string, library};

__attribute__((visibility("default"))) const kiln_mpi_api *kiln_mpi_plugin(void);
const kiln_mpi_api *kiln_mpi_plugin(void) { return &api; }
