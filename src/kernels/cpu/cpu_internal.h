/* Shared knobs of the fast CPU kernels. */
#ifndef KILN_KERNELS_CPU_INTERNAL_H
#define KILN_KERNELS_CPU_INTERNAL_H

/* Below this many elements a parallel region costs more than it saves. */
#define KILN_CPU_PAR_MIN 32768

#endif
