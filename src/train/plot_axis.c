/* Round ticks for kiln plot's axes (Heckbert's "nice numbers"): a step of
 * 1, 2 or 5 times a power of ten, the axis widened to whole steps, and labels
 * with just the decimals the step needs, so 0.1 + 0.2 prints as 0.3. */
#include <math.h>
#include <stdio.h>
#include "train/internal/plot.h"

/* 1, 2, 5 or 10 times a power of ten near x (> 0) */
static double nice(double x) {
    double e = floor(log10(x)), f = x / pow(10, e);
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * pow(10, e);
}

void kiln_axis_nice(double lo, double hi, int target, kiln_axis *a) {
    if (!(hi > lo)) { /* one value (or none): a range around it */
        double d = lo != 0 ? fabs(lo) * 0.1 : 1;
        if (lo == 0) hi = 1;
        else lo -= d, hi += d;
    }
    if (hi - lo < fabs(hi) * 1e-9) { /* a range below double's resolution there */
        double d = fabs(hi) * 1e-6;
        lo -= d, hi += d;
    }
    a->step = nice((hi - lo) / (target > 2 ? target - 1 : 1));
    a->lo = floor(lo / a->step) * a->step;
    a->hi = ceil(hi / a->step) * a->step;
    double n = floor((a->hi - a->lo) / a->step + 0.5) + 1;
    a->nticks = n < 2 ? 2 : n > 50 ? 50 : (int)n;
    double big = fmax(fabs(a->lo), fabs(a->hi));
    int dec = a->step >= 1 ? 0 : (int)ceil(-log10(a->step) - 1e-9);
    int digits = (int)floor(log10(big)) - (int)floor(log10(a->step)) + 1;
    a->digits = digits < 1 ? 1 : digits > 15 ? 15 : digits;
    a->decimals = big >= 1e6 || dec > 6 ? -1 : dec;
}

double kiln_axis_tick(const kiln_axis *a, int i) {
    double v = i == a->nticks - 1 ? a->hi : a->lo + i * a->step;
    return fabs(v) < a->step * 1e-9 ? 0 : v; /* no "-0" from rounding */
}

void kiln_axis_label(const kiln_axis *a, int i, char *buf, size_t n) {
    double v = kiln_axis_tick(a, i);
    if (a->decimals >= 0) snprintf(buf, n, "%.*f", a->decimals, v);
    else snprintf(buf, n, "%.*g", a->digits, v);
}
