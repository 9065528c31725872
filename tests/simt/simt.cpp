// The host side of src/backends/cuda/internal/simt.h: a launch runs its grid
// block after block, each block's threads as fibers when they meet at
// __syncthreads() (or a warp's barriers: __syncwarp, the wmma calls of
// internal/simt_wmma.h), as plain calls when they meet none (run_block).
// Warps waiting at their own barriers go on at paces drawn for each block
// (one warp may run far ahead of another between two __syncthreads). Blocks, and
// the threads of a block within each round, run in a shuffled order, a new
// one each launch (seeded by the launch's count and KILN_SIMT_SEED, so a run
// repeats; set that to search other orders): a GPU promises no order, and a
// kernel whose result depends on one (a block reading what another writes
// in the same launch, a thread reading shared memory another wrote without
// a barrier between) fails its checks here instead of passing by luck in
// index order. Shared memory starts each block as NaN, and threads at
// different barriers stop the launch (stuck). A fiber
// switch is a few instructions (kiln_simt_switch below: the callee-saved
// registers and the FP control words, no signal mask: ucontext's
// swapcontext made two system calls a switch, three quarters of the
// tests' time). Under AddressSanitizer every switch is announced
// (__sanitizer_start/finish_switch_fiber), so it knows which stack is live.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <vector>
#include "backends/cuda/internal/simt.h"
#include "backends/cuda/internal/simt_wmma.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define SIMT_ASAN 1
#endif

dim3 kiln_simt_thread, kiln_simt_block, kiln_simt_bdim, kiln_simt_gdim;

// saves the callee-saved registers and MXCSR / the x87 control word on the
// current stack, stores its pointer in *from, and resumes the stack at `to`
extern "C" void kiln_simt_switch(void **from, void *to);
__asm__(".text\n"
        ".globl kiln_simt_switch\n"
        ".type kiln_simt_switch,@function\n"
        "kiln_simt_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size kiln_simt_switch,.-kiln_simt_switch\n"
        ".section .note.GNU-stack,\"\",@progbits\n"
        ".text\n");

namespace {
const size_t STACK = 64 * 1024;
const size_t GUARD = 4096;

struct fiber {
    void *sp;
    char *stack;
    int done;
    const char *file; // the barrier it waits at: its __syncthreads() (or warp barrier) in the source
    int line;
    int warp;         // 1: a barrier of its warp (__syncwarp, a wmma call), 0: of the block
};
std::vector<fiber> fibers;
void *scheduler_sp;
int current = -1;
const std::function<void()> *body_now;
#ifdef SIMT_ASAN
const void *sched_bottom;
size_t sched_size;
#endif

dim3 unflatten(unsigned i, dim3 d) { return dim3(i % d.x, i / d.x % d.y, i / (d.x * d.y)); }

uint64_t launches; // seeds each launch's orders

uint32_t next_rand(uint64_t *s) { // xorshift64*
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return (uint32_t)((*s * 0x2545F4914F6CDD1Dull) >> 32);
}

// order[0 .. n) becomes a permutation of first .. first + n - 1 (Fisher-Yates)
void shuffle(std::vector<unsigned> &order, unsigned first, unsigned n, uint64_t *seed) {
    order.resize(n);
    for (unsigned i = 0; i < n; i++) order[i] = first + i;
    for (unsigned i = n; i > 1; i--) {
        unsigned j = next_rand(seed) % i, t = order[i - 1];
        order[i - 1] = order[j], order[j] = t;
    }
}

// to the scheduler from fiber `current`; dying: the fiber never runs again
void to_scheduler(int dying) {
#ifdef SIMT_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(dying ? NULL : &fake, sched_bottom, sched_size);
#endif
    kiln_simt_switch(&fibers[(size_t)current].sp, scheduler_sp);
#ifdef SIMT_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
    (void)dying;
}

void fiber_entry() {
#ifdef SIMT_ASAN
    __sanitizer_finish_switch_fiber(NULL, &sched_bottom, &sched_size);
#endif
    (*body_now)();
    fibers[(size_t)current].done = 1;
    to_scheduler(1);
    abort(); // never resumed
}

void grow(size_t n) {
    while (fibers.size() < n) {
        fiber f = {};
        /* a guard page below the stack: an overflow faults instead of writing over another fiber's */
        void *s = mmap(NULL, STACK + GUARD, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (s == MAP_FAILED || mprotect(s, GUARD, PROT_NONE) != 0) {
            fprintf(stderr, "simt: no memory for a fiber stack\n");
            abort();
        }
        f.stack = (char *)s + GUARD;
        fibers.push_back(f);
    }
}

// a fresh stack whose first switch "returns" into fiber_entry: the control
// words, six registers, then the return address, so that fiber_entry starts
// with the stack aligned as after a call
void start(unsigned t) {
    fiber &f = fibers[t];
    uint64_t *top = (uint64_t *)(f.stack + STACK), *sp = top - 9; // sp is 8 mod 16
    uint32_t csr[2];
    __asm__ volatile("stmxcsr %0\n fnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
    sp[0] = (uint64_t)csr[0] | (uint64_t)(csr[1] & 0xffff) << 32;
    for (int k = 1; k <= 6; k++) sp[k] = 0;
    sp[7] = (uint64_t)(uintptr_t)fiber_entry;
    sp[8] = 0;
    f.sp = sp;
    f.done = 0;
}

// runs fiber t until its next barrier or its end
void step(unsigned t) {
    current = (int)t;
    kiln_simt_thread = unflatten(t, kiln_simt_bdim);
#ifdef SIMT_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, fibers[t].stack, STACK);
#endif
    kiln_simt_switch(&scheduler_sp, fibers[t].sp);
#ifdef SIMT_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
    current = -1;
}

int same_site(const fiber &a, const fiber &b) {
    return a.warp == b.warp && a.line == b.line && (a.file == b.file || strcmp(a.file, b.file) == 0);
}

void describe(const fiber &f, char *buf, size_t len) {
    if (f.done) snprintf(buf, len, "ended");
    else snprintf(buf, len, "waits at a %s barrier (%s:%d)", f.warp ? "warp" : "block", f.file, f.line);
}

// No thread can go on: threads wait at different barriers, or at one while others ended (barriers in
// branches that threads take differently hang or misbehave on a GPU). Says where, and stops the launch.
[[noreturn]] void stuck(unsigned n) {
    unsigned other = 1;
    while (other < n && fibers[other].done == fibers[0].done && (fibers[0].done || same_site(fibers[other], fibers[0])))
        other++;
    char a[160], b[160] = "-";
    describe(fibers[0], a, sizeof a);
    if (other < n) describe(fibers[other], b, sizeof b);
    fprintf(stderr, "simt: block (%u, %u, %u) of %u threads cannot go on: thread 0 %s; thread %u %s\n", kiln_simt_block.x,
            kiln_simt_block.y, kiln_simt_block.z, n, a, other, b);
    abort();
}

// each warp's pace in the block running now: it goes on from a barrier of its own in one round of `pace`
std::vector<unsigned> pace;

// The threads that may run to their next barrier: all of them when every one waits at the same barrier of
// the block; else the lanes of each warp whose lanes all wait at one barrier of the warp, each such warp at
// its pace (at least one goes): warps keep their own pace on a GPU, and one running ahead of another
// shows a __syncthreads missing between them.
std::vector<unsigned> runnable(unsigned n, unsigned done, uint64_t *seed) {
    std::vector<unsigned> go, warps;
    int block = done == 0 && !fibers[0].warp;
    for (unsigned t = 1; block && t < n; t++) block = same_site(fibers[t], fibers[0]);
    if (block) {
        for (unsigned t = 0; t < n; t++) go.push_back(t);
        return go;
    }
    for (unsigned w = 0; w * 32 < n; w++) {
        unsigned lo = w * 32, hi = lo + 32 < n ? lo + 32 : n;
        int ready = !fibers[lo].done && fibers[lo].warp;
        for (unsigned t = lo + 1; ready && t < hi; t++) ready = !fibers[t].done && same_site(fibers[t], fibers[lo]);
        if (ready) warps.push_back(w);
    }
    if (warps.empty()) stuck(n);
    std::vector<unsigned> chosen;
    for (unsigned w : warps)
        if (next_rand(seed) % pace[w] == 0) chosen.push_back(w);
    if (chosen.empty()) chosen.push_back(warps[next_rand(seed) % warps.size()]);
    for (unsigned w : chosen)
        for (unsigned t = w * 32; t < w * 32 + 32 && t < n; t++) go.push_back(t);
    return go;
}

// Thread 0 runs as a fiber first. If it ends without a barrier, so must the
// block's other threads (a barrier only some threads meet is undefined on a
// GPU too): they run as plain calls. Otherwise every thread is a fiber, and
// each round runs the runnable ones to their next barrier. Both in a shuffled order.
void run_block(unsigned n, uint64_t *seed) {
    std::vector<unsigned> order;
    grow(n);
    start(0);
    step(0);
    shuffle(order, 1, n - 1, seed);
    if (fibers[0].done) {
        for (unsigned t : order) {
            kiln_simt_thread = unflatten(t, kiln_simt_bdim);
            (*body_now)();
        }
        return;
    }
    for (unsigned t : order) {
        start(t);
        step(t); /* to its first barrier, where thread 0 waits */
    }
    pace.resize((n + 31) / 32); /* each warp's, drawn for the block: 1, 2 or 4 rounds a barrier of its own */
    for (unsigned &p : pace) p = 1u << (next_rand(seed) % 3);
    for (;;) {
        unsigned done = 0;
        for (unsigned t = 0; t < n; t++) done += fibers[t].done != 0;
        if (done == n) return;
        std::vector<unsigned> go = runnable(n, done, seed);
        for (size_t i = go.size(); i > 1; i--) {
            size_t j = next_rand(seed) % i;
            unsigned x = go[i - 1];
            go[i - 1] = go[j], go[j] = x;
        }
        for (unsigned t : go) step(t);
    }
}
} // namespace

static void wait_at(const char *file, int line, int warp) {
    if (current < 0) {
        fprintf(stderr, "simt: %s:%d: a barrier met by a thread after thread 0 of its block met none\n", file, line);
        abort();
    }
    fiber &f = fibers[(size_t)current];
    f.file = file, f.line = line, f.warp = warp;
    to_scheduler(0);
}
void kiln_simt_sync(const char *file, int line) { wait_at(file, line, 0); }
void kiln_simt_sync_warp(const char *file, int line) { wait_at(file, line, 1); }

// the lanes' registers for the warp operations below (one block runs at a time); the caller's thread, checked
// to be in a whole warp (a GPU's mma.sync and full-mask shuffles need all 32 lanes)
namespace {
uint32_t lane_a[1024][4], lane_b[1024][2];
float lane_f[1024];
unsigned whole_warp_thread(const char *what) {
    unsigned n = kiln_simt_bdim.x * kiln_simt_bdim.y * kiln_simt_bdim.z, t = (unsigned)current;
    if (current < 0 || n > 1024 || (t | 31u) >= n) {
        fprintf(stderr, "simt: %s needs whole warps of 32 (thread %d of a block of %u)\n", what, current, n);
        abort();
    }
    return t;
}
float half_of(uint32_t u, unsigned hi, int fp16) {
    unsigned short h = (unsigned short)(hi ? u >> 16 : u & 0xffffu);
    return fp16 ? __half2float(__half{h}) : __bfloat162float(__nv_bfloat16{h});
}
} // namespace

// PTX's m16n8k16 fragments (internal/mma.h): A(row, k) is in lane 4 (row % 8) + (k % 8) / 2, register
// row / 8 + 2 (k / 8); B(k, col) in lane 4 col + (k % 8) / 2, register k / 8; the half k % 2. The products are
// exact in float; the sum runs in k's order (a GPU's is unspecified)
void kiln_simt_mma16816(float c[4], const uint32_t a[4], const uint32_t b[2], int fp16) {
    unsigned t = whole_warp_thread("mma.sync"), w = t & ~31u, g = (t & 31u) / 4, q = t % 4;
    memcpy(lane_a[t], a, sizeof lane_a[t]);
    memcpy(lane_b[t], b, sizeof lane_b[t]);
    kiln_simt_sync_warp(__FILE__, __LINE__);
    float out[4];
    for (unsigned e = 0; e < 4; e++) {
        unsigned row = g + 8 * (e / 2), col = 2 * q + e % 2;
        float s = c[e];
        for (unsigned k = 0; k < 16; k++)
            s += half_of(lane_a[w + 4 * (row % 8) + (k % 8) / 2][row / 8 + 2 * (k / 8)], k % 2, fp16) *
                 half_of(lane_b[w + 4 * col + (k % 8) / 2][k / 8], k % 2, fp16);
        out[e] = s;
    }
    kiln_simt_sync_warp(__FILE__, __LINE__); // every lane has read the others' registers
    memcpy(c, out, sizeof out);
}

float kiln_simt_shfl_xor(float v, int mask) {
    unsigned t = whole_warp_thread("__shfl_xor_sync");
    lane_f[t] = v;
    kiln_simt_sync_warp(__FILE__, __LINE__);
    float r = lane_f[(t & ~31u) | ((t & 31u) ^ ((unsigned)mask & 31u))];
    kiln_simt_sync_warp(__FILE__, __LINE__);
    return r;
}

// every __shared__ variable: the section the linker names, empty if none
extern "C" char __start_kiln_simt_shared[] __attribute__((weak)), __stop_kiln_simt_shared[] __attribute__((weak));

// a block's shared memory starts as NaN (all bits set), as a GPU's holds whatever was there; word stores the
// sanitizer does not check: the section holds its redzones between the variables
__attribute__((no_sanitize_address)) static void poison_shared(void) {
#ifndef SIMT_ASAN
    /* without the sanitizer a memset: the word loop below was a third of test_grad_scaler's time */
    uintptr_t lo = (uintptr_t)__start_kiln_simt_shared, hi = (uintptr_t)__stop_kiln_simt_shared;
    if (hi > lo) memset(__start_kiln_simt_shared, 0xff, hi - lo);
    return;
#endif
    for (volatile uint64_t *w = (volatile uint64_t *)(void *)__start_kiln_simt_shared;
         (char *)(uintptr_t)w + sizeof *w <= __stop_kiln_simt_shared; w++)
        *w = ~0ull;
}

// the launch's dynamic shared memory: exactly its size, all bits set when each block starts
namespace {
unsigned char *dyn;
size_t dyn_bytes;
} // namespace
void *kiln_simt_dyn_shared(void) {
    if (!dyn) {
        fprintf(stderr, "simt: a kernel reads dynamic shared memory its launch gave none of\n");
        abort();
    }
    return dyn;
}

void kiln_simt_run(dim3 grid, dim3 block, size_t shmem, const std::function<void()> &body) {
    if (shmem && posix_memalign((void **)&dyn, 128, shmem) != 0) {
        fprintf(stderr, "simt: no memory for %zu bytes of dynamic shared memory\n", shmem);
        abort();
    }
    dyn_bytes = shmem;
    kiln_simt_gdim = grid;
    kiln_simt_bdim = block;
    body_now = &body;
    unsigned nb = grid.x * grid.y * grid.z, nt = block.x * block.y * block.z;
    static const uint64_t base = getenv("KILN_SIMT_SEED") ? strtoull(getenv("KILN_SIMT_SEED"), NULL, 10) : 0;
    uint64_t seed = 0x9E3779B97F4A7C15ull * (++launches + (base << 32));
    std::vector<unsigned> order;
    shuffle(order, 0, nb, &seed);
    for (unsigned b : order) {
        kiln_simt_block = unflatten(b, grid);
        poison_shared();
        if (dyn) memset(dyn, 0xff, dyn_bytes);
        run_block(nt, &seed);
    }
    free(dyn);
    dyn = NULL, dyn_bytes = 0;
}
