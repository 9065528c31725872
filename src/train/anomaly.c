/* --detect-anomaly (the guide's torch.autograd.detect_anomaly): the training
 * plan checks every step's outputs for NaN/Inf (src/graph/plan_anomaly.c).
 * A debugging aid, off by default as the guide asks: the run says it is on,
 * and at its end what the checks cost against the step time without them. */
#include "train/internal/anomaly.h"

void kiln_train_anomaly_begin(kiln_plan *plan, int on) {
    if (!on) return;
    if (kiln_plan_set_detect_anomaly(plan, 1) != KILN_OK) {
        kiln_log(KILN_LOG_WARN, "--detect-anomaly: %s; the run goes on without it", kiln_last_error());
        return;
    }
    kiln_log(KILN_LOG_INFO, "--detect-anomaly: every step's outputs are checked for NaN/Inf (forward and backward); "
             "the first stops the run naming its node. A debugging aid: it slows each step, leave it off for real training");
}

void kiln_train_anomaly_report(const kiln_plan *plan, int on, double step_s, int64_t steps) {
    double check = kiln_plan_anomaly_seconds(plan);
    if (!on || steps <= 0 || check <= 0) return;
    double without = step_s - check;
    kiln_log(KILN_LOG_INFO, "--detect-anomaly: no NaN/Inf in %lld steps; the checks took %.3f ms per step, %.1f%% on top of "
             "the %.3f ms step without them", (long long)steps, 1e3 * check / (double)steps,
             without > 0 ? 100 * check / without : 0.0, 1e3 * without / (double)steps);
}
