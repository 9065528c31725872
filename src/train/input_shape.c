/* A dataset's samples against a model's input (train, eval, predict). */
#include "train/internal/input_shape.h"

kiln_status kiln_check_input_shape(const kiln_graph *g, const kiln_model *m, const kiln_dataset *ds, const char *model,
                                   const char *hint) {
    int64_t shape[KILN_MAX_DIMS];
    int nd = kiln_value_shape(g, m->x, shape);
    int same = nd == ds->sample_ndim + 1;
    for (int d = 1; same && d < nd; d++) same = shape[d] == ds->sample_shape[d - 1];
    if (same) return KILN_OK;
    char a[96], b[96];
    return kiln_fail(KILN_ERR_SHAPE, "%s: samples of shape %s, model %s wants %s%s", ds->name,
                     kiln_shape_str(ds->sample_ndim, ds->sample_shape, a, sizeof a), model,
                     kiln_shape_str(nd - 1, shape + 1, b, sizeof b), hint);
}
