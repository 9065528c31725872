/* Reference embedding, double: a gather of weight rows, and the scatter-add of
 * dy's rows into the weight's gradient in position order. Ids come as i32
 * (idi) or as doubles holding integers (idf: f32 inputs, staged to f64). */
#include <math.h>
#include "kernels/internal/kernels.h"

static int64_t id_at(const double *idf, const int32_t *idi, int64_t i) { return idf ? (int64_t)idf[i] : idi[i]; }

int64_t kiln_ref_embedding_check(int64_t n, const double *idf, const int32_t *idi, int64_t V) {
    for (int64_t i = 0; i < n; i++) {
        if (idf && !(idf[i] >= 0 && idf[i] < (double)V && idf[i] == floor(idf[i]))) return i;
        if (!idf && (idi[i] < 0 || idi[i] >= V)) return i;
    }
    return -1;
}

void kiln_ref_embedding_fwd(int64_t n, int64_t C, const double *idf, const int32_t *idi, const double *w, double *y) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < C; c++) y[i * C + c] = w[id_at(idf, idi, i) * C + c];
}

void kiln_ref_embedding_bwd(int64_t n, int64_t V, int64_t C, const double *idf, const int32_t *idi, const double *dy,
                            double *dw, int acc) {
    for (int64_t j = 0; !acc && j < V * C; j++) dw[j] = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < C; c++) dw[id_at(idf, idi, i) * C + c] += dy[i * C + c];
}
