/* kiln inspect's view of a conv object: the decision each direction runs and
 * how many of its arguments pass through a reorder on every call (the plan's
 * layout is not the one the chosen implementation asked for). */
#include "kernels/dnnl/internal/conv2d.h"

const char *kiln_dnnl_conv_dir_info(const kiln_dnnl_conv *c, int dir, int *acts, int *weights) {
    *acts = *weights = 0;
    if (dir < 0 || dir >= KILN_CONV_NDIR || !kiln_conv_dir_made(&c->d[dir])) return "";
    if (c->d[dir].own) { /* kiln's Winograd: activations in place, the filters transformed on each call */
        *weights = dir != KILN_CONV_BWD_WEIGHT;
        return c->d[dir].decision;
    }
    int wslot = dir == KILN_CONV_BWD_WEIGHT ? 2 : 1; /* forward and backward-data read w second; backward-weights writes dw */
    for (int i = 0; i < 3; i++)
        if (c->d[dir].a[i].reorder) ++*(i == wslot ? weights : acts);
    return c->d[dir].decision;
}
