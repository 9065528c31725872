/* The cpu backend's autotuner: the CPU analogue of cudnn.benchmark. When a plan makes
 * its convolution objects, every direction of every conv is either looked up
 * (a decision from this process, the on-disk cache, or a resumed checkpoint)
 * or timed on its real shape with each algorithm oneDNN offers, keeping the
 * fastest (the timing itself is in src/kernels/dnnl/conv2d.c). The decisions
 * persist across runs in the cache file (src/backends/decision_file.c). */
#include "backends/cpu/internal/cpu.h"
#include "kernels/internal/dnnl_ops.h"

static kiln_status import_keep(const char *text, const char *source) { return kiln_autotune_import(text, source, 0); }

static kiln_decision_file file = KILN_DECISION_FILE("autotune-v1.txt", kiln_autotune_export, import_keep);

void kiln_cpu_autotune_begin(void) { kiln_decision_file_load(&file); }
void kiln_cpu_autotune_end(void) { kiln_decision_file_save(&file); }

void kiln_cpu_autotune_reset(void) {
    kiln_autotune_forget();
    kiln_decision_file_reset(&file);
}
