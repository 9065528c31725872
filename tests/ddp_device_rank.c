/* One rank of tests/test_ddp_device.sh: kiln_train on a device backend
 * behind the backend interface, so data parallel runs take the device path
 * (src/dist/ddp_device.c) where there is no GPU. Both backends are the cpu's
 * kernels with their memory reached by copies, as a GPU's is:
 *   devhost  no collectives of its own: gradients staged through host memory and MPI;
 *   cpu      the cpu backend itself (the one-process reference);
 *   devcoll  collectives of its own, as NCCL is to cuda: a stand-in over a shared
 *            memory file (the id rank 0 makes names it), each sum and broadcast done
 *            by every rank behind a barrier. TEST_COLL_FAIL_RANK=r: rank r cannot load
 *            them; TEST_COLL_OPEN_FAIL_RANK=r: rank r loads them but cannot join the
 *            communicator; TEST_SAME_DEVICE=1: every rank names device 0; TEST_COLL_NO_SUM=1: sums
 *            do nothing (the ranks drift apart); TEST_COLL_DIR: where the file goes. As
 *            NCCL's, a sum only starts when asked (it is done at the host's wait, as a
 *            GPU's ends while the host goes on); TEST_COLL_HANG_RANK=r: rank r stops at its
 *            third wait, as a rank that hangs (the others' waits end at --timeout, TEST_TIMEOUT s).
 * TEST_OVERLAP: --overlap on (1) or off (0).
 * usage: ddp_device_rank BACKEND DATA BATCH OUT   (writes OUT.jsonl, OUT.safetensors)
 * Exit 0, or 2 with kiln's message (under mpirun every rank ends with it, as the CLI's). */
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "backends/cpu/internal/cpu.h"
#include "kiln/dist.h"
#include "kiln/train.h"

/* ---- devcoll's collectives: a shared file, a barrier, a slot per rank ---- */

#define SLOT_FLOATS (4 << 20) /* the largest sum or broadcast: mnist-cnn has 1.2M parameters */
typedef struct {
    int arrived, generation; /* the barrier */
    float slot[];            /* size x SLOT_FLOATS */
} shared;

typedef struct {
    shared *s;
    size_t bytes;
    int rank, size;
    char path[KILN_COLL_ID_BYTES];
} fake_comm;

static int env_rank(void) {
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    return r ? atoi(r) : 0;
}

static int fake_load(char *why, size_t len) {
    const char *f = getenv("TEST_COLL_FAIL_RANK");
    if (f && atoi(f) == env_rank()) {
        snprintf(why, len, "fake collectives: not on this rank (TEST_COLL_FAIL_RANK)");
        return 0;
    }
    return 1;
}

static const char *fake_version(void) { return "fake collectives over shared memory"; }

/* the id: the shared file's path, in TEST_COLL_DIR (else /tmp) */
static kiln_status fake_make_id(unsigned char id[KILN_COLL_ID_BYTES]) {
    char path[KILN_COLL_ID_BYTES];
    const char *dir = getenv("TEST_COLL_DIR");
    if (snprintf(path, sizeof path, "%s/kiln-fakecoll-XXXXXX", dir ? dir : "/tmp") >= (int)sizeof path)
        return kiln_fail(KILN_ERR_INVALID_ARG, "fake collectives: TEST_COLL_DIR is too long");
    int fd = mkstemp(path); /* a fresh name; the file itself is made at open (the ranks may never open it) */
    if (fd < 0) return kiln_fail(KILN_ERR_IO, "fake collectives: cannot make %s", path);
    close(fd);
    unlink(path);
    memcpy(id, path, sizeof path);
    return KILN_OK;
}

static kiln_status fake_open(const unsigned char id[KILN_COLL_ID_BYTES], int rank, int size, void **comm) {
    const char *f = getenv("TEST_COLL_OPEN_FAIL_RANK");
    *comm = NULL;
    if (f && atoi(f) == rank) return kiln_fail(KILN_ERR_BACKEND, "fake collectives: cannot join (TEST_COLL_OPEN_FAIL_RANK)");
    fake_comm *c = calloc(1, sizeof *c);
    if (!c) return kiln_fail(KILN_ERR_NOMEM, "fake collectives: out of memory");
    memcpy(c->path, id, sizeof c->path);
    c->rank = rank, c->size = size;
    c->bytes = sizeof(shared) + (size_t)size * SLOT_FLOATS * sizeof(float);
    int fd = open(c->path, O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)c->bytes) != 0) {
        free(c);
        return kiln_fail(KILN_ERR_IO, "fake collectives: cannot open %s", (const char *)id);
    }
    c->s = mmap(NULL, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (c->s == MAP_FAILED) {
        free(c);
        return kiln_fail(KILN_ERR_IO, "fake collectives: cannot map %s", (const char *)id);
    }
    *comm = c;
    return KILN_OK;
}

/* every rank arrives before any leaves; limit_s at most (KILN_ERR_IO past it) */
static kiln_status barrier_for(fake_comm *c, double limit_s) {
    int gen = __atomic_load_n(&c->s->generation, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&c->s->arrived, 1, __ATOMIC_ACQ_REL) == c->size) {
        __atomic_store_n(&c->s->arrived, 0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&c->s->generation, 1, __ATOMIC_RELEASE);
        return KILN_OK;
    }
    time_t t0 = time(NULL);
    while (__atomic_load_n(&c->s->generation, __ATOMIC_ACQUIRE) == gen) {
        if (time(NULL) - t0 > limit_s) return kiln_fail(KILN_ERR_IO, "fake collectives: a rank did not arrive");
        sched_yield();
    }
    return KILN_OK;
}
static kiln_status barrier(fake_comm *c) { return barrier_for(c, 60); }

/* whether sums start inside backward: steps the device ran between a step's first sum and its join */
static int64_t steps_run, steps_at_first_sum = -1, steps_between, nsums, njoins;

static float *slot(fake_comm *c, int r) { return c->s->slot + (size_t)r * SLOT_FLOATS; }

/* the sums asked for and not yet done, in order */
#define MAX_PENDING 64
static struct {
    float *buf;
    int64_t n;
} pending[MAX_PENDING];
static int npending;

static kiln_status fake_sum(void *comm, float *buf, int64_t n) {
    (void)comm;
    nsums++;
    if (steps_at_first_sum < 0) steps_at_first_sum = steps_run;
    if (getenv("TEST_COLL_NO_SUM")) return KILN_OK; /* the test's check that the sum matters */
    if (n > SLOT_FLOATS || npending == MAX_PENDING)
        return kiln_fail(KILN_ERR_INVALID_ARG, "fake collectives: %lld floats, %d sums pending", (long long)n, npending);
    pending[npending].buf = buf, pending[npending].n = n, npending++;
    return KILN_OK;
}

/* every rank adds the slots in rank order: the same bits everywhere */
static kiln_status sum_now(fake_comm *c, float *buf, int64_t n, double limit_s) {
    memcpy(slot(c, c->rank), buf, (size_t)n * sizeof *buf);
    kiln_status st = barrier_for(c, limit_s);
    for (int64_t i = 0; st == KILN_OK && i < n; i++) {
        float s = slot(c, 0)[i];
        for (int r = 1; r < c->size; r++) s += slot(c, r)[i];
        buf[i] = s;
    }
    return st == KILN_OK ? barrier_for(c, limit_s) : st;
}

static kiln_status fake_wait(void *comm, double timeout_s) {
    fake_comm *c = comm;
    static int waits;
    const char *hang = getenv("TEST_COLL_HANG_RANK");
    if (hang && atoi(hang) == c->rank && ++waits == 3) sleep(3600); /* killed when the others give up */
    kiln_status st = KILN_OK;
    for (int i = 0; st == KILN_OK && i < npending; i++) st = sum_now(c, pending[i].buf, pending[i].n, timeout_s);
    npending = 0;
    return st;
}

static kiln_status fake_bcast(void *comm, void *buf, size_t bytes, int root) {
    fake_comm *c = comm;
    if (bytes > SLOT_FLOATS * sizeof(float)) return kiln_fail(KILN_ERR_INVALID_ARG, "fake collectives: %zu bytes", bytes);
    if (c->rank == root) memcpy(slot(c, 0), buf, bytes);
    kiln_status st = barrier(c);
    if (st == KILN_OK && c->rank != root) memcpy(buf, slot(c, 0), bytes);
    return st == KILN_OK ? barrier(c) : st;
}

static void fake_close(void *comm) {
    fake_comm *c = comm;
    if (!c) return;
    if (c->rank == 0)
        fprintf(stderr, "fake collectives: %lld sums, %lld joins, %lld steps run between a step's first sum and its join\n",
                (long long)nsums, (long long)njoins, (long long)steps_between);
    munmap(c->s, c->bytes);
    unlink(c->path); /* whichever rank closes first; the others keep their mapping */
    free(c);
}

static kiln_status fake_join(void *comm) { /* the sums are done at the wait that follows */
    (void)comm;
    njoins++;
    steps_between += steps_run - steps_at_first_sum;
    steps_at_first_sum = -1;
    return KILN_OK;
}

static const kiln_coll_ops fake_coll = {.load = fake_load, .version = fake_version, .make_id = fake_make_id, .open = fake_open,
                                        .sum_f32 = fake_sum, .join = fake_join, .wait = fake_wait, .bcast = fake_bcast,
                                        .close = fake_close};

static kiln_status fake_device_name(char *buf, size_t len) {
    const char *same = getenv("TEST_SAME_DEVICE"), *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    snprintf(buf, len, "fake device %d", same && atoi(same) ? 0 : local ? atoi(local) : 0);
    return KILN_OK;
}

/* ---- the backends and the run ---- */

static int in_place_never(kiln_dtype dtype) {
    (void)dtype;
    return 0;
}

/* device memory starts as NaN, as a GPU's holds whatever was there */
static void *dev_alloc(size_t bytes) {
    void *p = kiln_host_alloc(bytes);
    if (p) memset(p, 0xff, bytes);
    return p;
}

static kiln_backend dev;

static kiln_status dev_run(const kiln_step *steps, int n, const kiln_run_ctx *rc) {
    steps_run += n;
    return kiln_backend_cpu.run(steps, n, rc);
}

static kiln_status register_device(const char *name) {
    dev = kiln_backend_cpu;
    dev.name = name;
    dev.host_memory = 0;
    dev.alloc = dev_alloc;
    dev.input_in_place = in_place_never;
    dev.run = dev_run;
    if (!strcmp(name, "devcoll")) dev.coll = &fake_coll, dev.device_name = fake_device_name;
    return kiln_backend_register(&dev);
}

static kiln_train_config config(char **argv, char *metrics, char *save, size_t len) {
    snprintf(metrics, len, "%s.jsonl", argv[4]);
    snprintf(save, len, "%s.safetensors", argv[4]);
    kiln_train_config c = kiln_train_defaults();
    c.model = "mnist-cnn";
    c.device = argv[1];
    c.data = argv[2];
    c.batch_size = atoll(argv[3]);
    c.epochs = 1;
    c.optim = kiln_optim_defaults(KILN_OPT_SGD);
    c.optim.lr = 0.01f;
    c.optim.momentum = 0.9f;
    c.threads = 1;
    c.workers = 1;
    c.autotune = 0;
    c.dropout_off = 1;
    c.test = 0;
    c.log_every = 1;
    c.seed = 3;
    c.metrics = metrics;
    c.save = save;
    const char *overlap = getenv("TEST_OVERLAP"), *timeout = getenv("TEST_TIMEOUT");
    if (overlap) c.overlap = atoi(overlap);
    if (timeout) c.timeout = atof(timeout);
    return c;
}

int main(int argc, char **argv) {
    if (argc != 5 || (strcmp(argv[1], "cpu") && strcmp(argv[1], "devhost") && strcmp(argv[1], "devcoll"))) {
        fprintf(stderr, "usage: ddp_device_rank cpu|devhost|devcoll DATA BATCH OUT\n");
        return 2;
    }
    char metrics[4096], save[4096];
    kiln_train_config c = config(argv, metrics, save, sizeof metrics);
    kiln_status st = kiln_dist_init(c.timeout);
    if (kiln_dist_rank() != 0) kiln_log_set_level(KILN_LOG_WARN);
    if (st == KILN_OK && strcmp(argv[1], "cpu")) st = register_device(argv[1]);
    kiln_train_result r;
    if (st == KILN_OK) st = kiln_train(&c, &r);
    if (st != KILN_OK) {
        fprintf(stderr, "ddp_device_rank: %s\n", kiln_last_error());
        if (kiln_dist_size() > 1) kiln_dist_abort(2);
        return 2;
    }
    kiln_dist_finalize();
    return 0;
}
