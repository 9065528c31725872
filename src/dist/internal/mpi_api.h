/* The functions kiln needs from MPI, as plain C types: the contract between
 * the core (src/dist/comm.c, which loads the plugin) and the plugin
 * (src/dist/mpi/plugin.c, built against the MPI it finds as libkiln_mpi.so).
 * No MPI type crosses it, so the core builds and runs without any MPI installed
 * and the plugin works with any MPI implementation it is compiled against.
 * Every function returns 0 on success or an MPI error code (err_string says it). */
#ifndef KILN_DIST_MPI_API_H
#define KILN_DIST_MPI_API_H

#include <stddef.h>
#include <stdint.h>

#define KILN_MPI_API_VERSION 1
#define KILN_MPI_MAX_REQS 256 /* requests in flight at once (gradient buckets and a few small collectives) */

typedef enum { KILN_MPI_F32, KILN_MPI_F64, KILN_MPI_BYTE } kiln_mpi_type;

typedef struct kiln_mpi_api {
    int version;
    /* MPI_Init_thread (FUNNELED: only the training thread calls MPI), errors returned, not fatal */
    int (*init)(int *rank, int *size, int *local_rank, int *local_size, char *host, size_t hostlen);
    int (*finalize)(void);
    /* non-blocking collectives on COMM_WORLD, in place; *req is a slot to test */
    int (*iallreduce_sum)(void *buf, int64_t n, kiln_mpi_type t, int *req);
    int (*ibcast)(void *buf, int64_t bytes, int root, int *req);
    int (*iallgather)(const void *mine, void *all, int64_t bytes, int *req);
    /* *done = 1 when the request completed (its slot is then free) */
    int (*test)(int req, int *done);
    void (*abort)(int code);
    void (*err_string)(int code, char *buf, size_t len);
    const char *(*library)(void); /* MPI_Get_library_version's first line */
} kiln_mpi_api;

/* the one symbol the plugin exports */
typedef const kiln_mpi_api *(*kiln_mpi_plugin_fn)(void);
#define KILN_MPI_PLUGIN_SYMBOL "kiln_mpi_plugin"

#endif
