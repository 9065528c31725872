/* The "simt" test backend (tests/simt/backend.c): the CUDA backend's kernel
 * table and its own kernels run on the host. Linked into the tests that run
 * their checks on it beside cpu and ref (cmake/simt.cmake). */
#ifndef KILN_TESTS_SIMT_BACKEND_H
#define KILN_TESTS_SIMT_BACKEND_H
#include "kiln/status.h"
kiln_status kiln_test_simt_register(void);
#endif
