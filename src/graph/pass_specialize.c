/* Compile-time specialisation for training or evaluation: each op that
 * behaves differently (dropout becomes a view of its input in evaluation or
 * when switched off; batch norm normalises with its running statistics and
 * updates nothing in evaluation) says so through its `specialize` entry. */
#include "graph/internal/graph.h"

void kiln_pass_specialize(kiln_graph *g, const kiln_compile_opts *o) {
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_op_def *d = kiln_op_get(g->nodes[i].op);
        if (d->specialize) d->specialize(g, i, o);
    }
}
