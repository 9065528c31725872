/* The cpu backend: float tensors in host memory, kiln's own kernels and
 * oneDNN's, one OpenMP team. Inputs are bound in place (the loader's batch
 * slot is read directly, no copy); its state in checkpoints is the autotune
 * decisions. */
#include "backends/cpu/internal/cpu.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/dnnl_ops.h"

static int cpu_in_place(kiln_dtype dtype) {
    (void)dtype;
    return 1;
}

static kiln_status cpu_stage(void *dst, const void *host, int64_t n, kiln_dtype dtype) {
    return kiln_host_copy(dst, host, (size_t)n * kiln_dtype_size(dtype), 0);
}

static int forced_block;

void kiln_cpu_force_layout_block(int block) { forced_block = block; }

/* a register's floats: oneDNN's AVX2 kernels block by 8 and have few
 * implementations that read 16 (none with a residual sum), its AVX-512 ones by 16 */
int kiln_cpu_layout_block(void) { return forced_block ? forced_block : kiln_cpu_has_avx512() ? 16 : 8; }

static kiln_status cpu_passes(kiln_graph *g, const kiln_compile_opts *o) {
    int block = kiln_cpu_layout_block();
    if (o->layout && kiln_pass_layout(g, &(kiln_layout_spec){kiln_cpu_kernels, block, block}) < 0)
        return kiln_fail(KILN_ERR_NOMEM, "layout pass: out of memory");
    if (o->reuse_memory && o->in_place) kiln_cpu_pass_in_place(g);
    return KILN_OK;
}

static void cpu_prepare_begin(const kiln_compile_opts *o) {
    if (o->autotune) kiln_cpu_autotune_begin();
}

static void cpu_prepare_end(const kiln_compile_opts *o) {
    if (o->autotune) kiln_cpu_autotune_end();
}

static kiln_status cpu_import(const char *text, const char *source) { return kiln_autotune_import(text, source, 1); }

/* the list passes: the folds that become scales first, so that depth-first times what will run */
static kiln_status cpu_prepare_list(kiln_prep *p) {
    kiln_status st = kiln_cpu_fold_scale_prepare(p);
    return st == KILN_OK ? kiln_cpu_depth_first_prepare(p) : st;
}

const kiln_backend kiln_backend_cpu = {
    .name = "cpu",
    .float_dtype = KILN_F32,
    .host_memory = 1,
    .kernels = kiln_cpu_kernels,
    .alloc = kiln_host_alloc,
    .free = kiln_host_free,
    .copy = kiln_host_copy,
    .memory_available = kiln_host_memory,
    .input_in_place = cpu_in_place,
    .stage_input = cpu_stage,
    .passes = cpu_passes,
    .prepare_begin = cpu_prepare_begin,
    .prepare_end = cpu_prepare_end,
    .prepare_list = cpu_prepare_list,
    .run = kiln_cpu_run,
    .now = kiln_host_now,
    .export_state = kiln_autotune_export,
    .import_state = cpu_import,
};
