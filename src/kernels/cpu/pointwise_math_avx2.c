/* AVX2 erf, tanh and erf's backward (CPUs with AVX2 but not AVX-512: AMD Zen
 * 1-3, Intel client cores): 8 lanes (pointwise_math_avx2.h), the tail
 * through masked loads and stores. erf is the 8-piece form of
 * pointwise_math.h (one permute per coefficient: the 32-piece table's four
 * permutes and three blends made erf shuffle-bound, 1.6 ns an element
 * against 0.66 on a Zen 3, the Horner steps unrolled); exp and tanh are that header's formulas, 2^k
 * built in the exponent bits. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/pointwise_math_avx2.h"

static inline __m256i tail(int64_t left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left >= 8 ? 8 : (int)left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* y = f(x) over n floats: whole vectors plainly, the tail masked */
#define MAP(f)                                                                                                        \
    int64_t i = 0;                                                                                                    \
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));                                   \
    if (i < n) {                                                                                                      \
        __m256i m = tail(n - i);                                                                                      \
        _mm256_maskstore_ps(y + i, m, f(_mm256_maskload_ps(x + i, m)));                                               \
    }

void kiln_cpu_erf_avx2(int64_t n, const float *x, float *y) { MAP(erf8) }
void kiln_cpu_tanh_avx2(int64_t n, const float *x, float *y) { MAP(tanh8) }

void kiln_cpu_erf_bwd_avx2(int64_t n, const float *x, const float *dy, float *dx, int acc) {
    for (int64_t i = 0; i < n; i += 8) {
        __m256i m = tail(n - i);
        __m256 v = _mm256_maskload_ps(x + i, m);
        __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(v, v)));
        __m256 g = _mm256_mul_ps(_mm256_maskload_ps(dy + i, m), _mm256_mul_ps(_mm256_set1_ps(KILN_TWO_OVER_SQRTPI), e));
        if (acc) g = _mm256_add_ps(_mm256_maskload_ps(dx + i, m), g);
        _mm256_maskstore_ps(dx + i, m, g);
    }
}
