/* Data parallel training with parameters in a device's memory (cuda): one
 * process per device, checked at start-up; rank 0's state broadcast; each
 * step's gradient sum over the ranks by the backend's own collectives (NCCL,
 * each bucket's started on the device once backward wrote it) when every
 * rank can load them, else staged through host memory and MPI after
 * backward (correct, slower: it waits for the device twice a step).
 * docs/distributed.md. */
#include "dist/internal/ddp_device.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backends/internal/backend.h"

#define NAME_BYTES 256 /* host and device of one rank, in the start-up check */

struct kiln_ddp_dev {
    kiln_comm *c;
    kiln_params *P;
    const kiln_backend *be;
    const kiln_coll_ops *coll; /* NULL: host staging */
    void *comm;                /* the collectives' communicator */
    float *host;               /* host staging: the gradients, allocated once */
    char transport[96];
};

/* every rank's "host / device": two ranks naming the same device would share it (NCCL refuses) */
static kiln_status one_device_each(kiln_ddp_dev *d) {
    int w = kiln_comm_size(d->c);
    char mine[NAME_BYTES] = "", dev[128];
    if (!d->be->device_name) return KILN_OK;
    /* a rank whose device cannot say still joins the gather (the others would wait for it) */
    kiln_status named = d->be->device_name(dev, sizeof dev);
    if (named != KILN_OK) snprintf(dev, sizeof dev, "no device (rank %d)", kiln_comm_rank(d->c));
    snprintf(mine, sizeof mine, "%s / %s", kiln_comm_host(d->c), dev);
    char *all = calloc((size_t)w, NAME_BYTES);
    if (!all) return kiln_fail(KILN_ERR_NOMEM, "ddp: out of memory");
    kiln_status st = kiln_comm_allgather(d->c, mine, all, NAME_BYTES, "the device check");
    if (st == KILN_OK && named != KILN_OK) st = named;
    for (int r = 0; st == KILN_OK && r < w; r++) /* every rank fails with the one that has no device */
        if (strstr(all + (size_t)r * NAME_BYTES, " / no device (rank "))
            st = kiln_fail(KILN_ERR_BACKEND, "rank %d has no usable %s device (its message says why)", r, d->be->name);
    for (int r = 0; st == KILN_OK && r < w; r++)
        for (int q = 0; st == KILN_OK && q < r; q++)
            if (strncmp(all + (size_t)r * NAME_BYTES, all + (size_t)q * NAME_BYTES, NAME_BYTES) == 0)
                st = kiln_fail(KILN_ERR_INVALID_ARG, "ranks %d and %d both use %s: start one rank per %s GPU (mpirun -np "
                               "at most the GPUs of each host; KILN_CUDA_DEVICE or CUDA_VISIBLE_DEVICES choose)",
                               q, r, all + (size_t)r * NAME_BYTES, d->be->name);
    free(all);
    return st;
}

/* the backend's collectives when every rank can load them (and rank 0 made the id), else none */
static kiln_status open_coll(kiln_ddp_dev *d) {
    const kiln_coll_ops *co = d->be->coll;
    unsigned char id[KILN_COLL_ID_BYTES] = {0};
    char why[200] = "the backend has no collectives of its own";
    int ok = co && co->load(why, sizeof why);
    if (ok && kiln_comm_rank(d->c) == 0 && co->make_id(id) != KILN_OK) {
        snprintf(why, sizeof why, "%s", kiln_last_error());
        ok = 0;
    }
    double cannot = !ok;
    kiln_status st = kiln_comm_allreduce_f64(d->c, &cannot, 1, "the collectives check");
    if (st != KILN_OK) return st;
    if (!ok) kiln_log(KILN_LOG_WARN, "rank %d: %s", kiln_comm_rank(d->c), why);
    if (cannot > 0) return KILN_OK;
    if ((st = kiln_comm_bcast(d->c, id, sizeof id, 0, "the collectives' id")) != KILN_OK) return st;
    /* every rank learns whether every rank joined: where one could not, all stage through the host */
    double failed = co->open(id, kiln_comm_rank(d->c), kiln_comm_size(d->c), &d->comm) != KILN_OK;
    if (failed) kiln_log(KILN_LOG_WARN, "rank %d: %s", kiln_comm_rank(d->c), kiln_last_error());
    if ((st = kiln_comm_allreduce_f64(d->c, &failed, 1, "the collectives' start")) != KILN_OK) return st;
    if (failed > 0) {
        co->close(d->comm);
        d->comm = NULL;
        return KILN_OK;
    }
    d->coll = co;
    return KILN_OK;
}

kiln_status kiln_ddp_dev_open(kiln_comm *c, kiln_params *P, kiln_ddp_dev **out) {
    kiln_ddp_dev *d = calloc(1, sizeof *d);
    *out = d;
    if (!d) return kiln_fail(KILN_ERR_NOMEM, "ddp: out of memory");
    d->c = c;
    d->P = P;
    d->be = kiln_backend_get(kiln_params_backend(P));
    if (!d->be) return kiln_fail(KILN_ERR_INVALID_ARG, "ddp: no backend '%s'", kiln_params_backend(P));
    kiln_status st = one_device_each(d);
    if (st == KILN_OK) st = open_coll(d);
    if (st != KILN_OK) return st;
    if (d->coll) {
        snprintf(d->transport, sizeof d->transport, "by %s", d->coll->version());
        return KILN_OK;
    }
    snprintf(d->transport, sizeof d->transport, "through host memory and %s", kiln_comm_library(c));
    d->host = malloc((size_t)kiln_params_total(P) * sizeof *d->host);
    if (!d->host) return kiln_fail(KILN_ERR_NOMEM, "ddp: out of memory for the gradients' host copy");
    if (kiln_comm_rank(c) == 0)
        kiln_log(KILN_LOG_WARN, "the gradients go through host memory and %s every step (slower: the %s's own "
                 "collectives cannot run on every rank, see the warnings above)", kiln_comm_library(c), d->be->name);
    return KILN_OK;
}

const char *kiln_ddp_dev_transport(const kiln_ddp_dev *d) { return d->transport; }

void kiln_ddp_dev_free(kiln_ddp_dev *d) {
    if (!d) return;
    if (d->coll) d->coll->close(d->comm);
    free(d->host);
    free(d);
}

/* bytes of device memory at p, from rank 0, through the host when there are no collectives */
static kiln_status bcast_device(kiln_ddp_dev *d, void *p, size_t bytes, const char *what) {
    if (d->coll) return d->coll->bcast(d->comm, p, bytes, 0);
    void *h = malloc(bytes ? bytes : 1);
    if (!h) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", what);
    kiln_status st = d->be->copy(h, p, bytes, 0);
    if (st == KILN_OK) st = kiln_comm_bcast(d->c, h, bytes, 0, what);
    if (st == KILN_OK) st = d->be->copy(p, h, bytes, 0);
    free(h);
    return st;
}

kiln_status kiln_ddp_dev_bcast_params(kiln_ddp_dev *d) {
    return bcast_device(d, kiln_params_data(d->P), (size_t)kiln_params_total(d->P) * sizeof(float), "the parameter broadcast");
}

kiln_status kiln_ddp_dev_bcast_buffers(kiln_ddp_dev *d) {
    kiln_status st = KILN_OK;
    for (int i = 0; st == KILN_OK && i < kiln_params_buffer_count(d->P); i++)
        st = bcast_device(d, kiln_params_buffer_data(d->P, i),
                          (size_t)kiln_params_buffer_numel(d->P, i) * kiln_dtype_size(kiln_params_buffer_dtype(d->P, i)),
                          "the buffer broadcast");
    return st;
}

int kiln_ddp_dev_collective(const kiln_ddp_dev *d) { return d->coll != NULL; }

kiln_status kiln_ddp_dev_sum_start(kiln_ddp_dev *d, int64_t off, int64_t n) {
    return d->coll->sum_f32(d->comm, (float *)kiln_params_grad(d->P) + off, n);
}

/* the device's next work waits for the sums; so does the host, at most --timeout: a rank that stopped or hangs
 * would otherwise hold every other rank's host in its next read of the device */
kiln_status kiln_ddp_dev_join(kiln_ddp_dev *d) {
    kiln_status st = d->coll->join(d->comm);
    double limit = kiln_comm_timeout(d->c);
    if (st == KILN_OK) st = d->coll->wait(d->comm, limit);
    if (st == KILN_ERR_IO)
        return kiln_fail(KILN_ERR_IO, "rank %d: the gradient all-reduce (%s) did not end within %.0f s (--timeout): a rank "
                         "stopped, hangs or diverged in its steps", kiln_comm_rank(d->c), d->coll->version(), limit);
    return st;
}

kiln_status kiln_ddp_dev_sum(kiln_ddp_dev *d) {
    float *g = kiln_params_grad(d->P);
    int64_t n = kiln_params_total(d->P);
    if (d->coll) { /* one sum over the whole buffer (--overlap off): no small buckets made for MPI's eager sends */
        kiln_status st = kiln_ddp_dev_sum_start(d, 0, n);
        return st == KILN_OK ? kiln_ddp_dev_join(d) : st;
    }
    size_t bytes = (size_t)n * sizeof *g;
    kiln_status st = d->be->copy(d->host, g, bytes, 0);
    if (st == KILN_OK) st = kiln_comm_allreduce_f32(d->c, d->host, n, "the gradient all-reduce");
    return st == KILN_OK ? d->be->copy(g, d->host, bytes, 0) : st;
}
