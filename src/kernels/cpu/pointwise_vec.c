/* The vector forms of pointwise_vec.h: each op's AVX-512 and AVX2 pass (the
 * fused kernel, src/backends/cpu/fused.c, takes the one its CPU runs). */
#include "kernels/cpu/pointwise_vec.h"

#define KILN_VFORM_DEF(nm, nsrc, fold) \
    const kiln_vform kiln_cpu_vform_##nm = {kiln_cpu_vpass_##nm##_avx512, kiln_cpu_vpass_##nm##_avx2, nsrc, fold};
KILN_VFORMS(KILN_VFORM_DEF)
