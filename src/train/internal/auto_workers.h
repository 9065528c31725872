/* --workers auto: the loader's worker count, chosen by measuring the training
 * thread's data-wait while it trains. Private to src/train. */
#ifndef KILN_TRAIN_AUTO_WORKERS_H
#define KILN_TRAIN_AUTO_WORKERS_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/data.h"

typedef struct kiln_auto_workers {
    int max;               /* the most workers it may run (the ring is sized for them) */
    int gave_up;           /* one more worker did not help: no more are added */
    int decided;           /* the first choice is made (logged) */
    int64_t next_check;    /* the loader batch that ends the window */
    double wait0, step0;   /* the window's start: seconds waited, seconds of steps */
    double before_add;     /* data-wait share before the last worker was added (-1: none) */
    char *why;             /* the measurements and reasons, for the log and --json */
    size_t why_cap, why_len;
} kiln_auto_workers;

/* starts with one worker; `why` (capacity cap) receives the reasons */
void kiln_auto_workers_begin(kiln_auto_workers *a, int cores, char *why, size_t cap, kiln_loader_config *lc);
/* after loader batch `batches` (counting from the run's start): `wait` seconds
 * waited for data and `step` seconds spent in steps so far */
void kiln_auto_workers_step(kiln_auto_workers *a, kiln_loader *L, int64_t batches, double wait, double step);
/* at the end of the run: says so if no choice was made yet */
void kiln_auto_workers_end(kiln_auto_workers *a, kiln_loader *L);

#endif
