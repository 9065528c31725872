// The host side of src/backends/cuda/internal/simt.h: a launch runs its grid
// block after block. The first block's threads run as fibers (ucontext), one
// round per barrier; if none of them met __syncthreads(), the kernel has no
// barrier and the other blocks' threads run as plain calls (a barrier met
// there after all is reported and aborts: it would mean threads of one
// kernel disagree on barriers, which CUDA leaves undefined too).
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
int current = -1, synced;
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

// every thread of the block as a fiber, round after round until all are done
void run_fibers(unsigned n) {
    grow(n);
    for (unsigned t = 0; t < n; t++) {
        fiber &f = fibers[t];
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = STACK;
        f.ctx.uc_link = &scheduler;
        makecontext(&f.ctx, fiber_main, 0);
        f.done = 0;
    }
    for (int left = 1; left;) {
        left = 0;
        for (unsigned t = 0; t < n; t++) {
            if (fibers[t].done) continue;
            current = (int)t;
            kiln_simt_thread = unflatten(t, kiln_simt_bdim);
            swapcontext(&scheduler, &fibers[t].ctx);
            current = -1;
            left |= !fibers[t].done;
        }
    }
}
} // namespace

void __syncthreads(void) {
    if (current < 0) {
        fprintf(stderr, "simt: a barrier in a block whose first block met none\n");
        abort();
    }
    synced = 1;
    swapcontext(&fibers[(size_t)current].ctx, &scheduler);
}

void kiln_simt_run(dim3 grid, dim3 block, const std::function<void()> &body) {
    kiln_simt_gdim = grid;
    kiln_simt_bdim = block;
    body_now = &body;
    unsigned nb = grid.x * grid.y * grid.z, nt = block.x * block.y * block.z;
    synced = 0;
    for (unsigned b = 0; b < nb; b++) {
        kiln_simt_block = unflatten(b, grid);
        if (b == 0 || synced) {
            run_fibers(nt);
            continue;
        }
        for (unsigned t = 0; t < nt; t++) {
            kiln_simt_thread = unflatten(t, block);
            body();
        }
    }
}
