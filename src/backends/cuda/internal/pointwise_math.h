/* Device arithmetic the CUDA backend's kernels share (included by *.cu only):
 * the Philox4x32-10 word of a dropout mask (src/base/rng.c's, so a seed gives
 * the cpu's masks) and GELU's two forms with their derivatives. */
#ifndef KILN_BACKEND_CUDA_POINTWISE_MATH_H
#define KILN_BACKEND_CUDA_POINTWISE_MATH_H

__device__ inline uint32_t philox_word(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, int w) {
    uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32), c2 = (uint32_t)ctr_hi, c3 = (uint32_t)(ctr_hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return w == 0 ? c0 : w == 1 ? c1 : w == 2 ? c2 : c3;
}
__device__ inline float gelu_f(float x, int tanh_form) {
    if (tanh_form) return 0.5f * x * (1.f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
    return 0.5f * x * (1.f + erff(x * 0.70710678118f));
}
__device__ inline float gelu_grad(float x, int tanh_form) {
    if (tanh_form) {
        float t = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));
        return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * 0.7978845608f * (1.f + 3.f * 0.044715f * x * x);
    }
    return 0.5f * (1.f + erff(x * 0.70710678118f)) + x * 0.3989422804f * expf(-0.5f * x * x);
}
#endif
