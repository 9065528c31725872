/* Causal attention's shape and strides as the CUDA kernels read them
 * (transformer.cu, flash.cu; included by *.cu only): q, k and v rows through
 * their batch and row strides, the gradients' through ds, y and dy contiguous. */
#ifndef KILN_BACKEND_CUDA_ATTN_SHAPE_H
#define KILN_BACKEND_CUDA_ATTN_SHAPE_H

struct attn {
    int64_t b, t, c, heads, d;
    int64_t qs[2], ks[2], vs[2], ds[2];
    float scale;
    int qk, kk, vk; /* the tensor-core kernels' q, k and v kinds (kiln_cuda_half_kind: 16 bits where the half-storage
                       pass stores them so); 0 from attn_of */
};

/* strides: q's, k's, v's and the gradients' batch and row strides (8) */
static inline attn attn_of(int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides) {
    attn a;
    a.b = b, a.t = t, a.c = c, a.heads = heads, a.d = c / heads;
    for (int k = 0; k < 2; k++) {
        a.qs[k] = strides[k];
        a.ks[k] = strides[2 + k];
        a.vs[k] = strides[4 + k];
        a.ds[k] = strides[6 + k];
    }
    a.scale = 1.f / sqrtf((float)a.d);
    a.qk = a.kk = a.vk = 0;
    return a;
}

#endif
