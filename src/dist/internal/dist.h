#ifndef KILN_DIST_INTERNAL_H
#define KILN_DIST_INTERNAL_H
#include "dist/internal/comm.h"
/* the process group kiln_dist_init joined; NULL before it (callers treat NULL as a world of one) */
kiln_comm *kiln_dist_comm(void);
#endif
