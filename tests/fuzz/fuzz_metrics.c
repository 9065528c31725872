/* Fuzz target: the metrics file reader (src/train/metrics_read.c), what
 * `kiln plot` reads, and the drawing of whatever it accepts.
 *
 * The input: one flags byte, then the file's bytes. An accepted file must
 * hold at least one line, every step >= 0 and every number either NAN or
 * finite (JSON has no NaN or Inf); a refused one names the file. Flags bit 0
 * draws the accepted log as a small SVG (bit 1: PNG) into a second memory
 * file, so odd values (huge, tiny, a single point, steps near INT64_MAX)
 * reach the axis and curve code. */
#include <math.h>
#include "fuzz_util.h"
#include "train/internal/plot.h"

static int row_ok(const kiln_metrics_row *r) {
    const double v[] = {r->loss, r->lr, r->images_per_s, r->data_wait, r->time_s, r->test_loss, r->test_accuracy};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (isinf(v[i])) return 0;
    return r->step >= 0 && r->epoch >= 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz_file f, pic;
    static int init;
    if (!init) {
        fuzz_quiet();
        atexit(kiln_plot_release); /* cairo's font caches hold fontconfig patterns LeakSanitizer counts */
        init = 1;
    }
    if (size < 1) return 0;
    const char *path = fuzz_file_put(&f, "metrics", data + 1, size - 1);
    kiln_metrics_log log;
    kiln_status st = kiln_metrics_read(path, &log);
    fuzz_check_error(st);
    if (st != KILN_OK) {
        if (log.steps || log.epochs || !strstr(kiln_last_error(), path)) abort();
        return 0;
    }
    if (log.nsteps + log.nepochs < 1) abort();
    for (int64_t i = 0; i < log.nsteps; i++)
        if (!row_ok(&log.steps[i])) abort();
    for (int64_t i = 0; i < log.nepochs; i++)
        if (!row_ok(&log.epochs[i])) abort();
    if (data[0] & 3) {
        const char *names[1] = {"fuzz"};
        const char *out = fuzz_file_put(&pic, "picture", "", 0);
        st = kiln_plot_logs(&log, names, 1, (data[0] & 1) ? KILN_PLOT_SVG : KILN_PLOT_PNG, out, 200, 200);
        fuzz_check_error(st);
        if (st != KILN_OK) abort(); /* any accepted log can be drawn */
    }
    kiln_metrics_log_free(&log);
    return 0;
}
