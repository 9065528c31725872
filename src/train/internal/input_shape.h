/* The check train, eval and predict share before compiling: a dataset's
 * samples are what the model's input takes. Private to src/train. */
#ifndef KILN_TRAIN_INPUT_SHAPE_H
#define KILN_TRAIN_INPUT_SHAPE_H

#include "kiln/data.h"
#include "kiln/nn.h"

/* KILN_ERR_SHAPE naming the data, both shapes and the model when they differ,
 * with `hint` (may be "") at the end of the message */
kiln_status kiln_check_input_shape(const kiln_graph *g, const kiln_model *m, const kiln_dataset *ds, const char *model,
                                   const char *hint);

#endif
