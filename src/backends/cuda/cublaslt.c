/* cuBLASLt, opened at its first use rather than linked. Linking it made every
 * kiln process pay for its 540 MB library at start (about 0.1 s of the loader
 * relocating it: `kiln --version`, each test, each MPI rank), GPU or not, and
 * kiln would not start where the library is absent. Only the functions
 * linear.c calls are looked up; their types come from cublasLt.h itself. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include "backends/cuda/internal/cublaslt.h"
#include "backends/cuda/internal/cuda.h"

#define KILN_STR_(x) #x
#define KILN_STR(x) KILN_STR_(x)

static kiln_cublaslt_api api;
static char failure[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *open_library(void) {
    /* the library kiln was built against, then the loader's search by soname */
    static const char *const names[] = {
#ifdef KILN_CUBLASLT_PATH
        KILN_CUBLASLT_PATH,
#endif
        "libcublasLt.so." KILN_STR(CUBLAS_VER_MAJOR)};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        void *dl = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (dl) return dl;
        snprintf(failure, sizeof failure, "cuBLASLt: %s", dlerror());
    }
    return NULL;
}

static void load(void) {
    void *dl = open_library();
    if (!dl) return;
#define KILN_LT_LOOKUP(f)                                                                                              \
    if (!(api.f = (__typeof__(api.f))(uintptr_t)dlsym(dl, #f))) {                                                      \
        snprintf(failure, sizeof failure, "cuBLASLt: the library has no %s", #f);                                      \
        return;                                                                                                        \
    }
    KILN_CUBLASLT_FUNCTIONS(KILN_LT_LOOKUP)
#undef KILN_LT_LOOKUP
    failure[0] = '\0';
    api.loaded = 1;
}

const kiln_cublaslt_api *kiln_cublaslt(const char **why) {
    pthread_once(&once, load);
    if (why) *why = api.loaded ? NULL : failure;
    return api.loaded ? &api : NULL;
}

const char *kiln_cuda_open_blas(void) {
    const char *why = NULL;
    kiln_cublaslt(&why);
    return why;
}
