/* Whether a configuration fits in memory, found by planning only (the
 * planner knows the arena before anything is allocated): the batch-size
 * finder, and the doctor's check of a run and of its remedies. */
#ifndef KILN_TRAIN_FIT_H
#define KILN_TRAIN_FIT_H

#include "kiln/train.h"

/* the largest power of two <= limit whose training plan fits in budget bytes */
kiln_status kiln_find_batch_size_config(const kiln_train_config *c, double budget, int64_t limit, int64_t *batch,
                                        size_t *arena_bytes);
/* the training plan's arena at this batch, with the configuration's activation checkpointing */
kiln_status kiln_train_arena(const kiln_train_config *c, int64_t batch, size_t *arena_bytes);

/* 1 when the training plan has a step of this op ("conv2d") */
int kiln_train_plan_has_op(const kiln_train_config *c, const char *op);

#endif
