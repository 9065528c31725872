/* --workers auto. Training starts with one loader worker; after a few batches
 * of start-up the training thread's data-wait is measured over windows of
 * batches, against its own step time (runs and updates, so evaluations
 * between epochs do not dilute it). Above AUTO_TARGET a worker is added (up
 * to one per core) and measured again over a short window; a worker that did
 * not cut the wait by a fifth is taken back (the cores are busy computing)
 * and no more are tried. Below the target the count stays, but the watch
 * goes on over longer windows: a JPEG epoch may need more later (a cold page
 * cache) than its first batches showed. */
#include <stdio.h>
#include "kiln/status.h"
#include "train/internal/auto_workers.h"

#define AUTO_SKIP 5      /* start-up batches before the first window */
#define AUTO_WINDOW 20   /* a window after a change */
#define AUTO_WATCH 100   /* a window while nothing changes */
#define AUTO_TARGET 0.02 /* the data-wait share it aims below */

/* appends "X% with N: what" to the reasons, cut (never overrun) when they outgrow the buffer */
static void say(kiln_auto_workers *a, double frac, int n, const char *what) {
    if (a->why_len + 1 >= a->why_cap) return;
    int k = frac >= 0 ? snprintf(a->why + a->why_len, a->why_cap - a->why_len, "%s%.1f%% with %d: %s",
                                 a->why_len ? "; " : "", 100 * frac, n, what)
                      : snprintf(a->why + a->why_len, a->why_cap - a->why_len, "%s%s", a->why_len ? "; " : "", what);
    a->why_len += k > 0 ? (size_t)k : 0;
    if (a->why_len >= a->why_cap) a->why_len = a->why_cap - 1;
}

void kiln_auto_workers_begin(kiln_auto_workers *a, int cores, char *why, size_t cap, kiln_loader_config *lc) {
    *a = (kiln_auto_workers){.max = cores < 2 ? 2 : (cores > 16 ? 16 : cores), .next_check = AUTO_SKIP, .before_add = -1,
                             .why = why, .why_cap = cap};
    if (cap) why[0] = 0;
    lc->workers = 1;
    lc->max_workers = a->max;
}

static void change(kiln_auto_workers *a, kiln_loader *L, int n, double frac, const char *reason) {
    if (kiln_loader_set_workers(L, n) != KILN_OK) {
        a->gave_up = 1;
        say(a, frac, kiln_loader_workers(L), kiln_last_error());
        return;
    }
    kiln_log(KILN_LOG_INFO, "--workers auto: %d (%s)", n, reason);
}

void kiln_auto_workers_step(kiln_auto_workers *a, kiln_loader *L, int64_t batches, double wait, double step) {
    if (batches < a->next_check) return;
    int first = a->next_check == AUTO_SKIP;
    double dw = wait - a->wait0, frac = dw / (dw + step - a->step0 + 1e-12);
    a->wait0 = wait;
    a->step0 = step;
    a->next_check = batches + AUTO_WINDOW;
    if (first) return; /* the end of start-up: the first window begins */
    int n = kiln_loader_workers(L);
    if (a->before_add >= 0 && frac > 0.8 * a->before_add) {
        say(a, frac, n, "no better, the cores are busy computing: one taken back");
        a->gave_up = 1;
        a->before_add = -1;
        change(a, L, n - 1, frac, "one more worker did not help");
        return;
    }
    a->before_add = -1;
    if (frac > AUTO_TARGET && n < a->max && !a->gave_up) {
        say(a, frac, n, "one more");
        a->before_add = frac;
        change(a, L, n + 1, frac, "the training thread waited for data");
        return;
    }
    if (!a->decided) {
        say(a, frac, n, frac <= AUTO_TARGET ? "low enough" : a->gave_up ? "kept" : "as many as cores");
        kiln_log(KILN_LOG_INFO, "--workers auto: %d (data-wait %s)", n, a->why);
        a->decided = 1;
    }
    a->next_check = batches + AUTO_WATCH;
}

void kiln_auto_workers_end(kiln_auto_workers *a, kiln_loader *L) {
    if (a->decided || !a->why) return;
    char text[64];
    snprintf(text, sizeof text, "%d: the run ended before a choice", kiln_loader_workers(L));
    say(a, -1, 0, text);
}
