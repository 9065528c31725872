/* The cpu backend's autotuner: the CPU analogue of cudnn.benchmark. When a plan makes
 * its convolution objects, every direction of every conv is either made again
 * from a decision (this process's, the on-disk cache's, or a resumed
 * checkpoint's) or timed on its real shape with every implementation oneDNN
 * offers, keeping the fastest (src/kernels/dnnl/conv_tune.c). The decisions
 * persist across runs in the cache file (src/backends/decision_file.c); the
 * file's name carries the format's version. */
#include "backends/cpu/internal/cpu.h"
#include "kernels/internal/dnnl_ops.h"

static kiln_status import_keep(const char *text, const char *source) { return kiln_autotune_import(text, source, 0); }

static kiln_decision_file file = KILN_DECISION_FILE("autotune-v4.txt", kiln_autotune_export, import_keep);
static kiln_autotune_stats at_begin;

void kiln_cpu_autotune_begin(void) {
    kiln_decision_file_load(&file);
    kiln_autotune_stats_get(&at_begin);
}

/* one line per compile that timed something: how much and how long */
void kiln_cpu_autotune_end(void) {
    kiln_autotune_stats now;
    kiln_autotune_stats_get(&now);
    int64_t tuned = now.tuned - at_begin.tuned, remembered = now.remembered - at_begin.remembered;
    double per_dir, process;
    kiln_autotune_get_budget(&per_dir, &process);
    if (tuned > 0)
        kiln_log(KILN_LOG_INFO,
                 "conv autotune: %lld directions tuned (%lld candidates timed) in %.2f s, %lld remembered (budget %.0f s a "
                 "direction, %.0f s a process)",
                 (long long)tuned, (long long)(now.candidates - at_begin.candidates), now.seconds - at_begin.seconds,
                 (long long)remembered, per_dir, process);
    kiln_decision_file_save(&file);
}

void kiln_cpu_autotune_reset(void) {
    kiln_autotune_forget();
    kiln_decision_file_reset(&file);
}
