// The host side of src/backends/cuda/internal/simt.h: a launch runs its grid
// block after block, each block's threads as fibers (ucontext) when they meet
// at __syncthreads(), as plain calls when they do not (run_block).
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <vector>
#include "backends/cuda/internal/simt.h"

dim3 kiln_simt_thread, kiln_simt_block, kiln_simt_bdim, kiln_simt_gdim;

namespace {
const size_t STACK = 256 * 1024;

struct fiber {
    ucontext_t ctx;
    char *stack;
    int done;
};
std::vector<fiber> fibers;
ucontext_t scheduler;
int current = -1;
const std::function<void()> *body_now;

dim3 unflatten(unsigned i, dim3 d) { return dim3(i % d.x, i / d.x % d.y, i / (d.x * d.y)); }

void fiber_main() {
    (*body_now)();
    fibers[(size_t)current].done = 1; // returns to the scheduler through uc_link
}

void grow(size_t n) {
    while (fibers.size() < n) {
        fiber f = {};
        void *s = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (s == MAP_FAILED) {
            fprintf(stderr, "simt: no memory for a fiber stack\n");
            abort();
        }
        f.stack = (char *)s;
        fibers.push_back(f);
    }
}

void start(unsigned t) {
    fiber &f = fibers[t];
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = STACK;
    f.ctx.uc_link = &scheduler;
    makecontext(&f.ctx, fiber_main, 0);
    f.done = 0;
}

// runs fiber t until its next barrier or its end
void step(unsigned t) {
    current = (int)t;
    kiln_simt_thread = unflatten(t, kiln_simt_bdim);
    swapcontext(&scheduler, &fibers[t].ctx);
    current = -1;
}

// Thread 0 runs as a fiber first. If it ends without a barrier, so must the
// block's other threads (a barrier only some threads meet is undefined on a
// GPU too): they run as plain calls. Otherwise every thread is a fiber, and
// each round runs each to its next barrier.
void run_block(unsigned n) {
    grow(n);
    start(0);
    step(0);
    if (fibers[0].done) {
        for (unsigned t = 1; t < n; t++) {
            kiln_simt_thread = unflatten(t, kiln_simt_bdim);
            (*body_now)();
        }
        return;
    }
    for (unsigned t = 1; t < n; t++) {
        start(t);
        step(t); /* to its first barrier, where thread 0 waits */
    }
    for (int left = 1; left;) {
        left = 0;
        for (unsigned t = 0; t < n; t++)
            if (!fibers[t].done) {
                step(t);
                left |= !fibers[t].done;
            }
    }
}
} // namespace

void __syncthreads(void) {
    if (current < 0) {
        fprintf(stderr, "simt: a barrier met by a thread after thread 0 of its block met none\n");
        abort();
    }
    swapcontext(&fibers[(size_t)current].ctx, &scheduler);
}

void kiln_simt_run(dim3 grid, dim3 block, const std::function<void()> &body) {
    kiln_simt_gdim = grid;
    kiln_simt_bdim = block;
    body_now = &body;
    unsigned nb = grid.x * grid.y * grid.z, nt = block.x * block.y * block.z;
    for (unsigned b = 0; b < nb; b++) {
        kiln_simt_block = unflatten(b, grid);
        run_block(nt);
    }
}
