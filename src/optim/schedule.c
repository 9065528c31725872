/* Learning-rate schedules, a function of the optimizer step (and the epoch for
 * StepLR), so a resumed run gets the same rates: linear warmup from lr / N
 * over N steps, then cosine or linear decay to min_lr over the rest of the
 * run (nanoGPT's get_lr with lr_decay_iters = the run's steps), StepLR per
 * epoch, or a constant. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "kiln/optim.h"

#define PI 3.14159265358979323846

static const char *const decay_names[] = {"step", "none", "cosine", "linear"};

float kiln_lr_step_schedule(float base, float gamma, int64_t step_size, int64_t epoch) {
    if (step_size < 1) step_size = 1;
    return base * powf(gamma, (float)(epoch / step_size));
}

int kiln_lr_decay_parse(const char *name, kiln_lr_decay *out) {
    for (int i = 0; i < 4; i++)
        if (name && strcmp(name, decay_names[i]) == 0) {
            *out = (kiln_lr_decay)i;
            return 0;
        }
    return -1;
}

const char *kiln_lr_decay_name(kiln_lr_decay d) { return d >= 0 && d < 4 ? decay_names[d] : "?"; }

/* how far decay has gone at update `step`: 0 at the warmup's end, towards 1 at the run's */
static double progress(const kiln_lr_schedule *s, int64_t step) {
    int64_t span = s->total - s->warmup;
    double q = span > 0 ? (double)(step - s->warmup) / (double)span : 1.0;
    return q < 0 ? 0 : q > 1 ? 1 : q;
}

double kiln_lr_at(const kiln_lr_schedule *s, int64_t step, int64_t epoch) {
    double lr = s->lr, lo = s->min_lr;
    if (s->decay == KILN_LR_STEP) lr = kiln_lr_step_schedule(s->lr, s->gamma, s->step_size, epoch);
    if (step < s->warmup) return lr * (double)(step + 1) / (double)s->warmup;
    if (s->decay == KILN_LR_COSINE) return lo + (lr - lo) * 0.5 * (1.0 + cos(PI * progress(s, step)));
    if (s->decay == KILN_LR_LINEAR) return lr - (lr - lo) * progress(s, step);
    return lr;
}

void kiln_lr_describe(const kiln_lr_schedule *s, char *buf, size_t len) {
    char warm[96] = "";
    if (s->warmup > 0)
        snprintf(warm, sizeof warm, "linear warmup over %lld steps (lr * (s+1) / %lld), then ", (long long)s->warmup,
                 (long long)s->warmup);
    if (s->decay == KILN_LR_COSINE || s->decay == KILN_LR_LINEAR)
        snprintf(buf, len, "lr schedule: %s%s decay from %g to %g over steps %lld..%lld", warm, decay_names[s->decay],
                 (double)s->lr, (double)s->min_lr, (long long)s->warmup, (long long)s->total);
    else if (s->decay == KILN_LR_STEP)
        snprintf(buf, len, "lr schedule: %sStepLR %g * %g^(epoch / %lld)", warm, (double)s->lr, (double)s->gamma,
                 (long long)s->step_size);
    else snprintf(buf, len, "lr schedule: %sconstant %g", warm, (double)s->lr);
}
