/* kiln/tune.h — fill the convolution autotune cache ahead of a run (`kiln tune`).
 *
 *     kiln_tune_config c = kiln_tune_defaults();
 *     c.model = "resnet18"; c.batch = 32;
 *     kiln_tune_result r;
 *     if (kiln_tune(&c, &r) != KILN_OK) ... kiln_last_error()
 *     // r.tuned directions timed now (r.candidates implementations), r.remembered found decided
 *     kiln_tune_result_free(&r);
 *
 * Compiles the model's training plan and its inference plan (or the inference
 * plan alone) with autotuning on, as training, evaluation and prediction
 * compile them: every direction of every convolution not decided before is
 * timed over oneDNN's implementations and the decision kept on disk (see
 * docs/plan-and-passes.md), so the run that follows tunes nothing.
 */
#ifndef KILN_TUNE_H
#define KILN_TUNE_H

#include "kiln/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_tune_config {
    const char *model;          /* a zoo name */
    kiln_model_opts model_opts;
    int64_t batch;
    int eval_only;              /* 1: the inference plan alone */
    int retune;                 /* 1: time every direction again, replacing what the cache remembers
                                   (e.g. decisions made while the machine was busy) */
} kiln_tune_config;
kiln_tune_config kiln_tune_defaults(void); /* batch 32, both plans */

/* one direction of one convolution */
typedef struct kiln_tune_choice {
    char problem[160];          /* benchdnn-like: "mb32ic64ih56iw56oc64kh3kw3sh1ph1+relu/nb/xb/yb" */
    char dir[16];               /* "fwd", "fwd_inf" (an inference plan's), "bwd_data", "bwd_weight" */
    char decision[96];          /* "direct/nChw16c/brgconv:avx512_core" */
    double us;                  /* its time per call, as measured when it was decided */
    int remembered;             /* 1: decided before (cache), nothing timed now */
    int candidates;             /* implementations timed now */
    int unsure;                 /* 1: timed now while other work held the cores, so not remembered on disk */
} kiln_tune_choice;

typedef struct kiln_tune_result {
    int64_t tuned, remembered;  /* directions decided by timing now, and found decided */
    int64_t candidates;         /* implementations timed now */
    int64_t over_budget;        /* directions the time budget left to oneDNN's own choice */
    int64_t unsure;             /* of the tuned, those timed while other work held the cores (not kept on disk) */
    double tune_seconds;        /* spent timing */
    double seconds;             /* the whole command: building, compiling, timing */
    kiln_tune_choice *choices;  /* each direction, once, in compile order (malloc'd) */
    int nchoices;
    char cache[4096];           /* where decisions are kept ("": no on-disk cache) */
} kiln_tune_result;
kiln_status kiln_tune(const kiln_tune_config *c, kiln_tune_result *r);
void kiln_tune_result_free(kiln_tune_result *r);

#ifdef __cplusplus
}
#endif
#endif
