// simt itself (src/backends/cuda/internal/simt.h, tests/simt/simt.cpp), the
// thread model every CUDA kernel check of test_ops, test_fixtures, test_gpt
// and test_models runs on: every thread of a grid runs once with its own
// indices; __syncthreads() holds a block's threads until all arrive; shared
// memory starts each block as NaN; threads that wait at different barriers
// (or end while others wait) stop the launch; blocks, and threads within a
// round, run in shuffled orders, so the two races a GPU hides only by luck
// fail here: a thread reading shared memory that another wrote with no
// barrier between, and a block reading what another block writes in the
// same launch; and warps, which wait only for their own lanes at __syncwarp,
// go on at their own paces, so one warp reading what another writes with no
// __syncthreads between fails too. Written as the backend's kernels are.
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "backends/cuda/internal/simt.h"
#include "backends/cuda/internal/simt_wmma.h"
#include "mma_layout.h"

static int failed, passed;
#define CHECK(c, ...)                                                \
    do {                                                             \
        if (c) {                                                     \
            passed++;                                                \
        } else {                                                     \
            failed++;                                                \
            fprintf(stderr, "%s:%d: CHECK failed: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                            \
            fprintf(stderr, "\n");                                   \
        }                                                            \
    } while (0)

enum { NB = 24, NT = 64 };
static int ran[NB][NT], seq_block[NB * NT], seq_thread[NB * NT], nseq;

__global__ void k_record(int *errors) {
    unsigned b = blockIdx.x + gridDim.x * blockIdx.y, t = threadIdx.x + blockDim.x * threadIdx.y;
    if (b >= NB || t >= NT) {
        errors[0]++;
        return;
    }
    ran[b][t]++;
    seq_block[nseq] = (int)b, seq_thread[nseq] = (int)t, nseq++;
}

// each thread adds its predecessor's value: right only with the barrier between the writes and the reads
__global__ void k_neighbour(int barrier, const float *x, float *y) {
    __shared__ float sh[NT];
    unsigned t = threadIdx.x;
    __syncthreads();
    sh[t] = x[blockIdx.x * NT + t];
    if (barrier) __syncthreads();
    y[blockIdx.x * NT + t] = sh[t] + (t ? sh[t - 1] : 0.f);
}

// block b > 0 adds what block b - 1 writes in the same launch: a race on a GPU
__global__ void k_chain(float *y) {
    unsigned b = blockIdx.x;
    if (threadIdx.x == 0) y[b] = (float)(b + 1) + (b ? y[b - 1] : 0.f);
}

// reads its block's shared memory before writing it: garbage on a GPU, NaN here in every block
__global__ void k_unwritten(float *y) {
    __shared__ float sh[4];
    if (threadIdx.x == 0) y[blockIdx.x] = sh[blockIdx.x % 4], sh[blockIdx.x % 4] = 1.f;
}

// a barrier inside a branch the upper half of the block skips: a hang or worse on a GPU
__global__ void k_divergent(float *y) {
    __shared__ float sh[NT];
    __syncthreads();
    if (threadIdx.x >= NT / 2) return;
    sh[threadIdx.x] = 1.f;
    __syncthreads();
    y[threadIdx.x] = sh[NT / 2 - 1 - threadIdx.x];
}

// the two halves of the block wait at two different barriers
__global__ void k_two_barriers(float *y) {
    __shared__ float sh[NT];
    __syncthreads();
    sh[threadIdx.x] = (float)threadIdx.x;
    if (threadIdx.x < NT / 2) __syncthreads();
    else __syncthreads();
    y[threadIdx.x] = sh[NT - 1 - threadIdx.x];
}

// warp 0 writes, warp 1 reads after as many barriers of its own warp: right only with a __syncthreads
// between (warps keep their own pace; barriers of a warp hold only its lanes)
__global__ void k_warps(int barrier, float *y) {
    __shared__ float sh[32];
    unsigned lane = threadIdx.x % 32, w = threadIdx.x / 32;
    __syncthreads();
    for (int k = 0; k < 4; k++) {
        if (w == 0 && k == 3) sh[lane] = (float)(lane + 1);
        __syncwarp();
    }
    if (barrier) __syncthreads();
    if (w == 1) y[lane] = sh[31 - lane];
}

// the lanes of warp 0 wait at two different barriers of the warp
__global__ void k_two_warp_barriers(float *y) {
    __syncthreads();
    if (threadIdx.x % 2) __syncwarp();
    else __syncwarp();
    y[threadIdx.x] = 1.f;
}

static int ascending(const int *v, int n) {
    for (int i = 1; i < n; i++)
        if (v[i] < v[i - 1]) return 0;
    return 1;
}

static void every_thread_once(void) {
    int errors = 0, shuffled_blocks = 0, shuffled_threads = 0;
    for (int launch = 0; launch < 4; launch++) {
        memset(ran, 0, sizeof ran);
        nseq = 0;
        KLAUNCH(k_record, dim3(NB / 4, 4), dim3(NT / 8, 8), 0, 0)(&errors);
        int once = 1;
        for (int b = 0; b < NB; b++)
            for (int t = 0; t < NT; t++) once &= ran[b][t] == 1;
        CHECK(once && errors == 0 && nseq == NB * NT, "launch %d: every thread once (errors %d, %d runs)", launch, errors,
              nseq);
        int first[NB];
        for (int b = 0; b < NB; b++) first[b] = seq_block[b * NT];
        shuffled_blocks |= !ascending(first, NB);
        shuffled_threads |= !ascending(seq_thread + 1, NT - 1); /* thread 0 runs first: it decides the block's mode */
    }
    CHECK(shuffled_blocks, "blocks ran in index order in every launch");
    CHECK(shuffled_threads, "threads ran in index order in every launch");
}

static void barrier_races(void) {
    static float x[2 * NT], y[2 * NT];
    for (int i = 0; i < 2 * NT; i++) x[i] = (float)(i + 1); /* the blocks differ: a stale read shows */
    int wrong_with = 0, wrong_without = 0;
    for (int launch = 0; launch < 4; launch++) {
        for (int barrier = 0; barrier < 2; barrier++) {
            for (int i = 0; i < 2 * NT; i++) y[i] = -1.f;
            KLAUNCH(k_neighbour, 2, NT, 0, 0)(barrier, x, y);
            int wrong = 0;
            for (int i = 0; i < 2 * NT; i++) wrong += y[i] != x[i] + (i % NT ? x[i - 1] : 0.f);
            if (barrier) wrong_with += wrong;
            else wrong_without += wrong;
        }
    }
    CHECK(wrong_with == 0, "with the barrier: %d wrong", wrong_with);
    CHECK(wrong_without > 0, "without the barrier every launch read its neighbours' writes: the race went unseen");
}

static void warp_races(void) {
    static float y[32];
    int wrong_with = 0, wrong_without = 0;
    for (int launch = 0; launch < 32; launch++)
        for (int barrier = 0; barrier < 2; barrier++) {
            for (int i = 0; i < 32; i++) y[i] = -1.f;
            KLAUNCH(k_warps, 1, 64, 0, 0)(barrier, y);
            int wrong = 0;
            for (int i = 0; i < 32; i++) wrong += y[i] != (float)(32 - i);
            if (barrier) wrong_with += wrong;
            else wrong_without += wrong;
        }
    CHECK(wrong_with == 0, "warps with the barrier between them: %d wrong", wrong_with);
    CHECK(wrong_without > 0, "warps without a barrier between them kept in step every launch: the race went unseen");
}

static void block_races(void) {
    static float y[NB];
    int wrong = 0;
    for (int launch = 0; launch < 4; launch++) {
        for (int b = 0; b < NB; b++) y[b] = 0.f;
        KLAUNCH(k_chain, NB, 32, 0, 0)(y);
        for (int b = 0; b < NB; b++) wrong += y[b] != (float)((b + 1) * (b + 2) / 2);
    }
    CHECK(wrong > 0, "a block read another's output in the same launch and got it every time: the race went unseen");
}

static void shared_poisoned(void) {
    float y[NB];
    KLAUNCH(k_unwritten, NB, 32, 0, 0)(y);
    int nan = 0;
    for (int b = 0; b < NB; b++) nan += y[b] != y[b];
    CHECK(nan == NB, "shared memory read before written: NaN in %d of %d blocks", nan, NB);
}

// the launch must stop the process: run it in a child
static int stopped(void (*k)(float *)) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        static float y[NT];
        if (!freopen("/dev/null", "w", stderr)) _exit(1);
        KLAUNCH(k, 1, NT, 0, 0)(y);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void divergent_barriers(void) {
    CHECK(stopped(k_divergent), "a barrier half the block skips: the launch was not stopped");
    CHECK(stopped(k_two_barriers), "the block's halves at two different barriers: the launch was not stopped");
    /* stricter than __syncwarp needs on a GPU, as a wmma call needs: every lane of the warp at the same one */
    CHECK(stopped(k_two_warp_barriers), "a warp's lanes at two different barriers: the launch was not stopped");
}

// mma.sync m16n8k16 and __shfl_xor_sync as simt gives them (tests/simt/mma_layout.h; test_mma_gpu runs the
// same check on a GPU)
template <class E> static void warp_mma_of(const char *name) {
    float a[256], b[128], c[MMA_C], shfl[MMA_THREADS];
    mma_layout_data(a, b);
    KLAUNCH(k_mma_layout<E>, dim3(1), dim3(MMA_THREADS))(a, b, c, shfl);
    int bad_shfl, bad = mma_layout_bad(a, b, c, shfl, &bad_shfl);
    CHECK(bad == 0, "mma.sync m16n8k16 (%s): %d of 256 elements not A B + C", name, bad);
    CHECK(bad_shfl == 0, "__shfl_xor_sync: %d of 64 lanes did not get their partner's value", bad_shfl);
}
static void warp_mma(void) {
    warp_mma_of<bf16>("bf16");
    warp_mma_of<fp16>("fp16");
}

// convert.cu's fp32 -> bf16 / fp16 (cuBLASLt's 16-bit operands): every element as cuda_bf16.h and cuda_fp16.h
// round it (ties included), an odd count's last element alone, nothing written past 2n bytes
struct CUstream_st;
extern "C" void kiln_simt_to_half(struct CUstream_st *st, int f16, int64_t n, const float *x, void *y);
static void to_half(void) {
    uint64_t seed = 5;
    static const int64_t sizes[] = {1, 2, 7, 1001};
    for (int f16 = 0; f16 < 2; f16++)
        for (int64_t n : sizes) {
            float x[1001];
            uint16_t y[1003];
            for (int64_t i = 0; i < n; i++) { // some exact ties of the 16-bit formats, the rest anything
                uint32_t u = (mma_rnd(&seed) & 0x3fffffffu) | (mma_rnd(&seed) & 1u) << 31;
                if (i % 3 == 0) u = f16 ? (u & ~0x1fffu) | 0x1000u : (u & ~0xffffu) | 0x8000u;
                memcpy(&x[i], &u, 4);
                if (!(fabsf(x[i]) < 60000.f)) x[i] = (float)(i % 100) - 50.25f;
            }
            memset(y, 0xab, sizeof y);
            kiln_simt_to_half(NULL, f16, n, x, y);
            int bad = 0;
            for (int64_t i = 0; i < n; i++) bad += y[i] != (f16 ? __float2half(x[i]).x : __float2bfloat16(x[i]).x);
            CHECK(bad == 0 && y[n] == 0xabab, "to_half (%s, n %lld): %d elements wrong, past the end %#x", f16 ? "fp16" : "bf16",
                  (long long)n, bad, y[n]);
        }
}

// rows.cu's one-pass log-sum-exp (log_softmax, cross-entropy): a NaN anywhere in a row makes every output of the
// row NaN, as PyTorch's and the two-pass form's; here before a thread's first finite value, after it, alone in a
// thread's share, and last; rows of 700 columns, so a thread (of 256) holds two or three
extern "C" void kiln_simt_log_softmax(struct CUstream_st *st, int64_t rows, int64_t cols, const float *x, float *y);
static void lse_nan(void) {
    enum { C = 700 };
    static const int at[] = {0, 256, 5, 699, 300};
    static float x[5][C], y[5][C];
    for (int r = 0; r < 5; r++)
        for (int j = 0; j < C; j++) x[r][j] = (float)((j * 37 + r * 11) % 101) / 10.f - 5.f;
    for (int r = 0; r < 5; r++) x[r][at[r]] = NAN;
    x[4][44] = NAN; /* row 4: the thread of column 44 holds 44, 300 and 556: two NaNs, then a finite value */
    x[4][556] = -INFINITY;
    kiln_simt_log_softmax(NULL, 5, C, &x[0][0], &y[0][0]);
    int finite = 0;
    for (int r = 0; r < 5; r++)
        for (int j = 0; j < C; j++) finite += !isnan(y[r][j]);
    CHECK(finite == 0, "log_softmax over rows holding a NaN: %d outputs not NaN", finite);
    for (int j = 0; j < C; j++) x[0][j] = j == 3 ? 1.f : -INFINITY; /* -inf but one: that one 0, the rest -inf */
    kiln_simt_log_softmax(NULL, 1, C, &x[0][0], &y[0][0]);
    int bad = 0;
    for (int j = 0; j < C; j++) bad += j == 3 ? y[0][j] != 0.f : y[0][j] != -INFINITY;
    CHECK(bad == 0, "log_softmax of a row of -inf but one: %d outputs wrong", bad);
}

// rows.cu's column sums as a bias gradient beside a 16-bit product takes them (linear.c): each dy rounded to bf16
// (fp16) first, or read from a tensor the half-storage pass stored in 16 bits; both give the sums of the rounded
// values (exact here: 300 rows of values with few bits after rounding are summed in double)
extern "C" void kiln_simt_col_sums(struct CUstream_st *st, int64_t rows, int64_t cols, const void *x, int xk, int rk, float *y,
                                   int acc);
static void col_sums_rounded(void) {
    enum { R = 300, C = 37 };
    static float x[R * C];
    static uint16_t h[R * C];
    uint64_t seed = 9;
    for (int f16 = 0; f16 < 2; f16++) {
        for (int i = 0; i < R * C; i++) {
            x[i] = (float)((int)(mma_rnd(&seed) % 20001) - 10000) / 4096.f; /* 14 bits: rounding changes most */
            h[i] = f16 ? __float2half(x[i]).x : __float2bfloat16(x[i]).x;
        }
        float ys[3][C];
        kiln_simt_col_sums(NULL, R, C, x, 0, 1 + f16, ys[0], 0); /* fp32 read, rounded */
        kiln_simt_col_sums(NULL, R, C, h, 1 + f16, 1 + f16, ys[1], 0); /* 16 bits stored */
        kiln_simt_col_sums(NULL, R, C, x, 0, 0, ys[2], 0);     /* fp32, as it is */
        int bad = 0, same_plain = 0;
        for (int c = 0; c < C; c++) {
            double want = 0, plain = 0;
            for (int r = 0; r < R; r++) {
                want += f16 ? (double)__half2float(__half{h[r * C + c]}) : (double)__bfloat162float(__nv_bfloat16{h[r * C + c]});
                plain += x[r * C + c];
            }
            bad += ys[0][c] != (float)want || ys[1][c] != (float)want || ys[2][c] != (float)plain;
            same_plain += ys[0][c] == ys[2][c];
        }
        CHECK(bad == 0 && same_plain < C / 2, "col_sums (%s): %d columns wrong, %d the same rounded or not", f16 ? "fp16" : "bf16",
              bad, same_plain);
    }
}

extern "C" void kiln_simt_to_nhwc(struct CUstream_st *st, int kind, int64_t imgs, int64_t ch, int64_t hw, const void *x, int xk,
                                  void *y);
extern "C" void kiln_simt_from_nhwc(struct CUstream_st *st, int kind, int64_t imgs, int64_t ch, int64_t hw, const void *y, void *x,
                                    int xk, int acc, int relu);
/* convert.cu's channels-last copies over several tiles each way, partial edge tiles and images: [n, c, hw] fp32 to
 * [n, hw, c] rounded to nearest even, and back (added where acc); from 16 bits (the half-storage pass's NCHW
 * tensors) the same bits moved, tiled and element by element */
static void nhwc_copies(void) {
    enum { N = 3, C = 45, HW = 70, E = N * C * HW };
    static float x[E], back[E], was[E];
    static uint16_t h[E];
    uint64_t seed = 11;
    for (int i = 0; i < E; i++) x[i] = (float)((int)(mma_rnd(&seed) % 20001) - 10000) / 4096.f, was[i] = (float)i;
    for (int f16 = 0; f16 < 2; f16++) {
        kiln_simt_to_nhwc(NULL, 1 + f16, N, C, HW, x, 0, h);
        memcpy(back, was, sizeof back);
        kiln_simt_from_nhwc(NULL, 1 + f16, N, C, HW, h, back, 0, 1, 0);
        int bad = 0, rounded = 0;
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++)
                for (int p = 0; p < HW; p++) {
                    int i = (n * C + c) * HW + p, o = (n * HW + p) * C + c;
                    uint16_t want = f16 ? __float2half(x[i]).x : __float2bfloat16(x[i]).x;
                    float wide = f16 ? __half2float(__half{want}) : __bfloat162float(__nv_bfloat16{want});
                    bad += h[o] != want || back[i] != was[i] + wide;
                    rounded += wide != x[i];
                }
        kiln_simt_from_nhwc(NULL, 1 + f16, N, C, HW, h, back, 0, 0, 0);
        for (int i = 0; i < E; i++) bad += back[i] != back[i] || fabsf(back[i] - x[i]) > fabsf(x[i]) / 128;
        static uint16_t h2[E]; /* into 16 bits as they are (NCHW), through a relu */
        kiln_simt_from_nhwc(NULL, 1 + f16, N, C, HW, h, h2, 1 + f16, 0, 1);
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++)
                for (int p = 0; p < HW; p++) {
                    int i = (n * C + c) * HW + p;
                    uint16_t v = h[(n * HW + p) * C + c];
                    bad += h2[i] != (v >> 15 ? 0 : v);
                }
        static uint16_t h3[E], h4[E]; /* NCHW 16 bits back to NHWC: h again; a single channel: element by element */
        kiln_simt_from_nhwc(NULL, 1 + f16, N, C, HW, h, h3, 1 + f16, 0, 0);
        kiln_simt_to_nhwc(NULL, 1 + f16, N, C, HW, h3, 1 + f16, h4);
        bad += memcmp(h4, h, sizeof h) != 0;
        memset(h4, 0, sizeof h4);
        kiln_simt_to_nhwc(NULL, 1 + f16, N * C, 1, HW, h3, 1 + f16, h4);
        bad += memcmp(h4, h3, sizeof h3) != 0;
        CHECK(bad == 0 && rounded > E / 2, "nhwc copies (%s): %d elements wrong, %d rounded", f16 ? "fp16" : "bf16", bad, rounded);
    }
}

int main(void) {
    every_thread_once();
    nhwc_copies();
    to_half();
    lse_nan();
    col_sums_rounded();
    warp_mma();
    shared_poisoned();
    divergent_barriers();
    barrier_races();
    block_races();
    warp_races();
    printf("test_simt: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
