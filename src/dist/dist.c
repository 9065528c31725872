/* The process's one process group, as torch.distributed's default group:
 * MPI itself is once per process, so this is the one global in kiln's dist. */
#include "kiln/dist.h"
#include "dist/internal/comm.h"
#include "dist/internal/dist.h"

static kiln_comm *world;

kiln_status kiln_dist_init(double timeout_s) {
    if (world) {
        kiln_comm_set_timeout(world, timeout_s);
        return KILN_OK;
    }
    return kiln_comm_open(timeout_s, &world);
}

kiln_comm *kiln_dist_comm(void) { return world; }
int kiln_dist_rank(void) { return kiln_comm_rank(world); }
int kiln_dist_size(void) { return kiln_comm_size(world); }
void kiln_dist_abort(int code) { kiln_comm_abort(world, code); }

void kiln_dist_finalize(void) {
    kiln_comm_close(world);
    world = NULL;
}
