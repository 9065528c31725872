/* Inputs staged on a copy stream (the guide's pin_memory + non_blocking, with
 * the copy overlapped). A batch's bytes go host -> device on their own stream,
 * into one of two device buffers kept for that input, while the compute
 * stream may still be running the step before; the compute stream then waits
 * for that copy alone and moves the bytes into the plan's input (device to
 * device: some hundred times faster than the host link). With the loss read
 * late (the trainer's default) the host queues step k+1's copy before step k
 * ends, so the copy is hidden behind it. A buffer is written again only once
 * the compute stream has read it (an event per buffer). Inputs under 1 MiB
 * go straight onto the compute stream: their copy takes less than the extra
 * calls. KILN_CUDA_COPY_STREAM=0 puts every input there. */
#include <stdlib.h>
#include <cuda_runtime.h>
#include "backends/cuda/internal/cuda.h"

#define MIN_BYTES (1u << 20)
#define MAX_INPUTS 16

typedef struct {
    void *dst;                   /* the plan's input this entry stages into */
    size_t bytes;                /* each buffer's size */
    void *buf[2];
    cudaEvent_t copied[2], read[2];
    int turn;
} staged;

static struct {
    int tried, on;
    cudaStream_t copy;
    staged in[MAX_INPUTS];
    int n;
} S;

static void release(void) {
    if (S.on) cudaStreamSynchronize(S.copy);
    for (int i = 0; i < S.n; i++)
        for (int k = 0; k < 2; k++) {
            cudaFree(S.in[i].buf[k]);
            cudaEventDestroy(S.in[i].copied[k]);
            cudaEventDestroy(S.in[i].read[k]);
        }
    if (S.on) cudaStreamDestroy(S.copy);
    S.n = S.on = 0;
}

static void start(void) {
    if (S.tried) return;
    S.tried = 1;
    const char *e = getenv("KILN_CUDA_COPY_STREAM");
    if (e && e[0] == '0') return;
    S.on = cudaStreamCreateWithFlags(&S.copy, cudaStreamNonBlocking) == cudaSuccess;
    if (S.on) atexit(release);
}

/* the entry staging into dst, with buffers of at least `bytes`; NULL when none can be made (then the
 * compute stream copies) */
static staged *entry_for(void *dst, size_t bytes) {
    staged *e = NULL;
    for (int i = 0; i < S.n && !e; i++)
        if (S.in[i].dst == dst) e = &S.in[i];
    if (e && e->bytes >= bytes) return e;
    if (!e && S.n == MAX_INPUTS) return NULL;
    if (e) { /* the plan's input was freed and its address reused, larger: new buffers */
        cudaStreamSynchronize(S.copy);
        cudaStreamSynchronize((cudaStream_t)kiln_cuda_stream());
        for (int k = 0; k < 2; k++) cudaFree(e->buf[k]);
    } else {
        e = &S.in[S.n];
        *e = (staged){.dst = dst};
        for (int k = 0; k < 2; k++)
            if (cudaEventCreateWithFlags(&e->copied[k], cudaEventDisableTiming) != cudaSuccess ||
                cudaEventCreateWithFlags(&e->read[k], cudaEventDisableTiming) != cudaSuccess)
                return NULL;
        S.n++;
    }
    e->bytes = 0;
    for (int k = 0; k < 2; k++) {
        e->buf[k] = NULL;
        if (cudaMalloc(&e->buf[k], bytes) != cudaSuccess) return NULL;
    }
    e->bytes = bytes;
    return e;
}

void kiln_cuda_set_copy_stream(int on) {
    start();
    if (!on) release();
    else if (!S.on) S.on = cudaStreamCreateWithFlags(&S.copy, cudaStreamNonBlocking) == cudaSuccess;
}

kiln_status kiln_cuda_stage(void *dst, const void *host, size_t bytes) {
    cudaStream_t compute = (cudaStream_t)kiln_cuda_stream();
    start();
    staged *e = S.on && bytes >= MIN_BYTES ? entry_for(dst, bytes) : NULL;
    if (!e) return kiln_cuda_check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, compute), "staging an input");
    int k = e->turn ^= 1;
    kiln_status st = kiln_cuda_check(cudaStreamWaitEvent(S.copy, e->read[k], 0), "staging: buffer free");
    if (st == KILN_OK)
        st = kiln_cuda_check(cudaMemcpyAsync(e->buf[k], host, bytes, cudaMemcpyHostToDevice, S.copy), "staging an input");
    if (st == KILN_OK) st = kiln_cuda_check(cudaEventRecord(e->copied[k], S.copy), "staging: copied");
    if (st == KILN_OK) st = kiln_cuda_check(cudaStreamWaitEvent(compute, e->copied[k], 0), "staging: wait");
    if (st == KILN_OK)
        st = kiln_cuda_check(cudaMemcpyAsync(dst, e->buf[k], bytes, cudaMemcpyDeviceToDevice, compute), "staging: move");
    if (st == KILN_OK) st = kiln_cuda_check(cudaEventRecord(e->read[k], compute), "staging: read");
    return st;
}
