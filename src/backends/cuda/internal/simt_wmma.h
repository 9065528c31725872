/* What simt (internal/simt.h) gives the tensor-core kernels on the host:
 * bf16 and fp16 as CUDA's cuda_bf16.h and cuda_fp16.h have them (round to
 * nearest even), the warp's matrix operations of CUDA's mma.h (nvcuda::wmma,
 * 16 x 16 x 16 with bf16 or fp16 operands and float accumulators), __syncwarp and dynamic shared memory.
 *
 * CUDA spreads a fragment over the 32 lanes of a warp in an order it leaves
 * unspecified, so code may only load, store, fill, multiply and scale it
 * element by element. Here every thread holds the whole matrix (row-major):
 * a lane's load reads the whole tile, its mma computes it whole, its store
 * writes it whole; 32 lanes doing so write the same values. The lanes of a
 * warp run these together on a GPU (every lane's load before any lane's
 * store, as a read-modify-write of a tile in shared memory needs), so each
 * load, mma and store here first waits at a barrier of the warp: one lane's
 * store never runs before another lane's load of the same call. Warps go on
 * from their barriers at random paces (tests/simt/simt.cpp), so a
 * __syncthreads missing between warps shows. Each call also checks
 * what CUDA requires of it and a GPU would not report: a pointer 256-bit
 * aligned, ldm a multiple of 16 bytes. __syncwarp is a barrier of the warp's
 * 32 lanes, as on a GPU. Dynamic shared memory (KILN_DYN_SHARED) is the launch's buffer,
 * all bits set when each block starts, exactly its size (AddressSanitizer
 * sees a read past it). Never part of a kiln build that runs. */
#ifndef KILN_BACKEND_CUDA_SIMT_WMMA_H
#define KILN_BACKEND_CUDA_SIMT_WMMA_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct __nv_bfloat16 {
    unsigned short x;
};
static inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{(unsigned short)((u >> 16) | 0x40u)}; /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return __nv_bfloat16{(unsigned short)(u >> 16)};
}
static inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* fp16 as cuda_fp16.h has it: round to nearest even, subnormals kept, overflow to inf, NaN stays NaN */
struct __half {
    unsigned short x;
};
static inline float __half2float(__half h) {
    /* by bits, not ldexpf: the conversion was half of test_attention_tc's time (m * 2^-24 is exact) */
    uint32_t sign = (uint32_t)(h.x & 0x8000u) << 16, e = (h.x >> 10) & 0x1fu, m = h.x & 0x3ffu, u;
    float f = e == 0 ? (float)m * 0x1p-24f : e == 31 ? (m ? NAN : INFINITY) : 0.0f;
    memcpy(&u, &f, 4);
    if (e && e < 31) u = (e + 112u) << 23 | m << 13;
    u |= sign;
    memcpy(&f, &u, 4);
    return f;
}
static inline __half __float2half(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    unsigned short sign = (unsigned short)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return __half{(unsigned short)(sign | 0x7e00u)};
    if (a >= 0x477ff000u) return __half{(unsigned short)(sign | 0x7c00u)}; /* 65520 and up round past 65504 */
    if (a < 0x38800000u) { /* below 2^-14: a multiple of 2^-24, rounded to nearest even (1024 is the least normal) */
        float v;
        memcpy(&v, &a, 4);
        return __half{(unsigned short)(sign | (uint32_t)rintf(v * 16777216.0f))};
    }
    uint32_t h = ((a >> 23) - 112) << 10 | (a & 0x7fffffu) >> 13, rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* a carry into the exponent is right */
    return __half{(unsigned short)(sign | h)};
}
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
static inline unsigned short __half_as_ushort(__half h) { return h.x; }
static inline float kiln_simt_to_float(__nv_bfloat16 h) { return __bfloat162float(h); }
static inline float kiln_simt_to_float(__half h) { return __half2float(h); }

#define __syncwarp() kiln_simt_sync_warp(__FILE__, __LINE__)
/* PTX's mma.sync m16n8k16 (c += a b, fp32 accumulators; fp16 operands, else bf16) and __shfl_xor_sync over the
 * full warp, as internal/mma.h uses them: each lane gives its registers, waits for its warp's other lanes, and
 * takes what a GPU would give it (tests/simt/simt.cpp) */
void kiln_simt_mma16816(float c[4], const uint32_t a[4], const uint32_t b[2], int fp16);
float kiln_simt_shfl_xor(float v, int mask);
/* the launch's dynamic shared memory (simt.cpp) */
void *kiln_simt_dyn_shared(void);
#define KILN_DYN_SHARED(type, name) type *name = (type *)kiln_simt_dyn_shared()

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K> struct dims;
template <int M, int N, int K> struct dims<matrix_a, M, N, K> { enum { R = M, C = K }; };
template <int M, int N, int K> struct dims<matrix_b, M, N, K> { enum { R = K, C = N }; };
template <int M, int N, int K> struct dims<accumulator, M, N, K> { enum { R = M, C = N }; };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    enum { rows = dims<Use, M, N, K>::R, cols = dims<Use, M, N, K>::C, num_elements = rows * cols };
    T x[num_elements]; /* the whole matrix, row-major */
};

/* the lanes in step (see above), then what CUDA asks of the pointer and ldm */
static inline void check(const void *p, unsigned ldm, size_t elem, const char *what) {
    kiln_simt_sync_warp(__FILE__, __LINE__);
    if ((uintptr_t)p % 32 == 0 && ldm * elem % 16 == 0) return;
    fprintf(stderr, "simt: wmma::%s: pointer %p (needs 256-bit alignment), ldm %u (needs a multiple of %zu)\n", what, p,
            ldm, 16 / elem);
    abort();
}
template <class F> static inline void fill_fragment(F &f, float v) {
    for (int i = 0; i < F::num_elements; i++) f.x[i] = v;
}
static inline int is_col(const row_major *) { return 0; }
static inline int is_col(const col_major *) { return 1; }
/* element (r, c) of a rows x cols matrix at p, row-major or column-major with leading dimension ldm */
template <class T> static inline T at(const T *p, unsigned ldm, int r, int c, int col) {
    return col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}
template <class Use, int M, int N, int K, class T, class L>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const T *p, unsigned ldm) {
    check(p, ldm, sizeof(T), "load_matrix_sync");
    typedef fragment<Use, M, N, K, T, L> F;
    for (int r = 0; r < F::rows; r++)
        for (int c = 0; c < F::cols; c++) f.x[r * F::cols + c] = at(p, ldm, r, c, is_col((const L *)0));
}
template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p, unsigned ldm, layout_t l) {
    check(p, ldm, 4, "load_matrix_sync");
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) f.x[r * N + c] = at(p, ldm, r, c, l == mem_col_major);
}
template <int M, int N, int K>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ldm, layout_t l) {
    check(p, ldm, 4, "store_matrix_sync");
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) (l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]) = f.x[r * N + c];
}
/* d = a b + c in float: bf16's and fp16's products are exact in float; the sum in k's order (a GPU's is unspecified) */
template <int M, int N, int K, class T, class LA, class LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
                            const fragment<matrix_b, M, N, K, T, LB> &b, const fragment<accumulator, M, N, K, float> &c) {
    kiln_simt_sync_warp(__FILE__, __LINE__);
    float out[M * N];
    for (int r = 0; r < M; r++)
        for (int n = 0; n < N; n++) {
            float s = c.x[r * N + n];
            for (int k = 0; k < K; k++) s += kiln_simt_to_float(a.x[r * K + k]) * kiln_simt_to_float(b.x[k * N + n]);
            out[r * N + n] = s;
        }
    memcpy(d.x, out, sizeof out);
}
} // namespace wmma
} // namespace nvcuda

#endif
