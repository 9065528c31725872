/* kiln doctor on a device backend (simt: the CUDA backend's kernels and
 * cuBLASLt on the host, with device memory of its own, tests/simt/): the
 * report names the device, its memory sets the budget, its kernels are
 * rated against its own peaks (measured there through kiln's plans, never the
 * CPU's), and the GPU's precision remedies are tried
 * on an fp32 model with linear layers: `--precision bf16` (AMP on tensor
 * cores, not the cpu's `auto`) and `--matmul-precision high` (TF32 at the
 * highest precision). Each is kept only when its trial is 5 % faster; on
 * simt that is the noise of 3-step windows of emulated kernels, so the test
 * looks for the trials in the log, not for the offers. On the cpu neither
 * GPU remedy is tried. Needs Debian's fashion-mnist. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backends/internal/backend.h"
#include "kiln/doctor.h"
#include "kiln/train.h"
#include "simt/simt_backend.h"
#include "testutil.h"

static char seen[8192];
static size_t nseen;

/* the doctor's debug lines: one a trial window */
static void sink(kiln_log_level level, const char *msg, void *user) {
    (void)level, (void)user;
    if (strncmp(msg, "doctor: --", 10) != 0) return;
    int n = snprintf(seen + nseen, sizeof seen - nseen, "%s\n", msg);
    if (n > 0 && (size_t)n < sizeof seen - nseen) nseen += (size_t)n;
}

static kiln_doctor_report *diagnose(const char *device) {
    kiln_train_config c = kiln_train_defaults();
    c.model = "mlp";
    c.data = "fashion-mnist";
    c.device = device;
    c.batch_size = 32;
    c.workers = 1;
    c.autotune = 0;
    c.test = 0;
    kiln_doctor_opts o = kiln_doctor_defaults();
    o.window_steps = 3;
    static kiln_doctor_report r;
    nseen = 0, seen[0] = 0;
    kiln_log_set_sink(sink, NULL);
    kiln_log_level keep = kiln_log_get_level();
    kiln_log_set_level(KILN_LOG_DEBUG);
    kiln_status st = kiln_doctor_run(&c, &o, &r);
    kiln_log_set_level(keep);
    kiln_log_set_sink(NULL, NULL);
    CHECK_MSG(st == KILN_OK, "doctor on %s: %s", device, kiln_last_error());
    return st == KILN_OK ? &r : NULL;
}

static void on_simt(void) {
    kiln_doctor_report *r = diagnose("simt");
    if (!r) return;
    const kiln_backend *be = kiln_backend_get("simt");
    double want = 0.9 * (double)be->memory_available() / 1048576.0;
    CHECK_MSG(!strcmp(r->device, "simt"), "the report's device: '%s'", r->device);
    CHECK_MSG(r->budget_mb > 0.8 * want && r->budget_mb < 1.2 * want, "budget %.0f MiB, the device's 90 %%: %.0f (simt's "
              "memory is a quarter of the host's)", r->budget_mb, want);
    CHECK_MSG(strstr(seen, "doctor: --precision bf16:") && strstr(seen, "doctor: --matmul-precision high:"),
              "the GPU's precision trials: %s", seen);
    CHECK_MSG(r->device_peak_gflops > 0 && r->device_copy_gbps > 0, "simt's peaks: %.3g GFLOP/s, %.3g GB/s",
              r->device_peak_gflops, r->device_copy_gbps);
    /* the top kernels rated against simt's peaks, not the CPU's */
    char *text = kiln_doctor_json(r);
    json_t *doc = text ? json_loads(text, 0, NULL) : NULL, *tops = json_object_get(doc, "top_kernels");
    CHECK(doc && !strcmp(json_string_value(json_object_get(json_object_get(doc, "machine"), "device")), "simt"));
    int rated = 0;
    for (size_t i = 0; i < json_array_size(tops); i++) {
        json_t *k = json_array_get(tops, i);
        double gf = json_real_value(json_object_get(k, "gflops")), gb = json_real_value(json_object_get(k, "gbps"));
        double want = gf > 0 ? gf / r->device_peak_gflops : gb / r->device_copy_gbps;
        rated += fabs(json_real_value(json_object_get(k, "of_peak")) - want) <= 1e-9 * (1 + want);
    }
    CHECK_MSG(r->ntop > 0 && rated == r->ntop, "%d of %d top kernels rated against simt's peaks", rated, r->ntop);
    json_decref(doc);
    free(text);
}

static void on_cpu(void) {
    kiln_doctor_report *r = diagnose("cpu");
    if (!r) return;
    CHECK_MSG(r->device[0] == 0, "the cpu's report names a device: '%s'", r->device);
    CHECK_MSG(!strstr(seen, "--matmul-precision") && !strstr(seen, "--precision bf16"), "GPU trials on the cpu: %s", seen);
}

int main(void) {
    CHECK_OK(kiln_test_simt_register());
    on_simt();
    on_cpu();
    return tu_finish("test_doctor_device");
}
