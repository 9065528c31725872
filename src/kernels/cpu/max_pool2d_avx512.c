/* 2x2 stride-2 max-pool over one nChw16c block (16 channels per vector): the
 * window's four pixels are four aligned loads; the NCHW output (or gradient)
 * is scattered (gathered) with a channel stride. Same tie rule as the
 * reference: the first maximum in row-major window order wins. */
#include <immintrin.h>
#include "kernels/cpu/cpu_internal.h"

static __m512i channel_stride(int64_t ohw) {
    return _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                              _mm512_set1_epi32((int)ohw));
}

void kiln_cpu_pool2_blocked_fwd_avx512(int64_t w, int64_t oh, int64_t ow, const float *xb, float *y0) {
    __m512i idx = channel_stride(oh * ow);
    for (int64_t i = 0; i < oh; i++)
        for (int64_t j = 0; j < ow; j++) {
            const float *a = xb + ((2 * i) * w + 2 * j) * 16;
            __m512 m = _mm512_max_ps(_mm512_max_ps(_mm512_load_ps(a), _mm512_load_ps(a + 16)),
                                     _mm512_max_ps(_mm512_load_ps(a + w * 16), _mm512_load_ps(a + w * 16 + 16)));
            _mm512_i32scatter_ps(y0 + i * ow + j, idx, m, 4);
        }
}

void kiln_cpu_pool2_blocked_bwd_avx512(int64_t w, int64_t oh, int64_t ow, int relu_mask, const float *xb,
                                       const float *dy0, float *db, int acc) {
    __m512i idx = channel_stride(oh * ow);
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t i = 0; i < oh; i++)
        for (int64_t j = 0; j < ow; j++) {
            int64_t o = ((2 * i) * w + 2 * j) * 16;
            const float *pa = xb + o, *pc = pa + w * 16;
            __m512 a = _mm512_load_ps(pa), b = _mm512_load_ps(pa + 16), c = _mm512_load_ps(pc), d = _mm512_load_ps(pc + 16);
            __mmask16 w1 = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ);
            __m512 m = _mm512_mask_mov_ps(a, w1, b);
            __mmask16 w2 = _mm512_cmp_ps_mask(c, m, _CMP_GT_OQ);
            m = _mm512_mask_mov_ps(m, w2, c);
            __mmask16 w3 = _mm512_cmp_ps_mask(d, m, _CMP_GT_OQ);
            m = _mm512_mask_mov_ps(m, w3, d);
            __mmask16 k3 = w3, k2 = (__mmask16)(w2 & ~w3), k1 = (__mmask16)(w1 & ~w2 & ~w3);
            __mmask16 k0 = (__mmask16)~(w1 | w2 | w3);
            __m512 g = _mm512_i32gather_ps(idx, dy0 + i * ow + j, 4);
            if (relu_mask) g = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m, zero, _CMP_GT_OQ), g);
            float *da = db + o, *dc = da + w * 16;
            __m512 v0 = _mm512_maskz_mov_ps(k0, g), v1 = _mm512_maskz_mov_ps(k1, g);
            __m512 v2 = _mm512_maskz_mov_ps(k2, g), v3 = _mm512_maskz_mov_ps(k3, g);
            if (acc) {
                v0 = _mm512_add_ps(v0, _mm512_load_ps(da));
                v1 = _mm512_add_ps(v1, _mm512_load_ps(da + 16));
                v2 = _mm512_add_ps(v2, _mm512_load_ps(dc));
                v3 = _mm512_add_ps(v3, _mm512_load_ps(dc + 16));
            }
            _mm512_store_ps(da, v0);
            _mm512_store_ps(da + 16, v1);
            _mm512_store_ps(dc, v2);
            _mm512_store_ps(dc + 16, v3);
        }
}
