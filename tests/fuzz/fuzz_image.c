/* Fuzz target: the JPEG and PNG decoders (src/data/image.c) and the resampler
 * behind them (src/data/transform.c), as an image folder's worker runs them.
 *
 * The input: one flags byte, then the file's bytes. Flags bit 0 picks 1 or 3
 * channels; bits 1-2 the smallest DCT scale allowed (1, 1/2, 1/4, 1/8); bit 3
 * a RandomResizedCrop(13) with a flip instead of Resize(16) + CenterCrop(16);
 * bit 4 decodes only what the transform needs (kiln_tf_decode: libjpeg's
 * cropped decoding) and checks its pixels against a full decode's.
 * kiln_image_peek must agree with kiln_image_info where both accept.
 * An accepted image must decode to the size it claims (or its DCT-scaled
 * size) and resample to finite values; a refused one must say why. */
#include <math.h>
#include "data/internal/image.h"
#include "data/internal/transform.h"
#include "fuzz_util.h"

static kiln_image_ctx *g_ctx;
static kiln_tf_scratch g_scratch;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!g_ctx) {
        fuzz_quiet();
        g_ctx = kiln_image_ctx_new();
        if (!g_ctx) abort();
    }
    int flags = data[0], channels = flags & 1 ? 3 : 1;
    const double scales[4] = {1.0, 0.5, 0.25, 0.125};
    data++, size--;
    int fmt = 0, w = 0, h = 0;
    kiln_status st = kiln_image_info(g_ctx, data, size, "fuzz", &fmt, &w, &h);
    fuzz_check_error(st);
    int pfmt = 0, pw = 0, ph = 0; /* the workers' size from the frame header: libjpeg's, when both accept */
    kiln_status pst = kiln_image_peek(g_ctx, data, size, "fuzz", &pfmt, &pw, &ph);
    fuzz_check_error(pst);
    if (st == KILN_OK && pst == KILN_OK && (pfmt != fmt || pw != w || ph != h)) abort();
    if (st != KILN_OK) return 0;
    if (w < 1 || h < 1 || (int64_t)w * h > KILN_IMAGE_MAX_PIXELS) abort();
    kiln_image im;
    st = kiln_image_decode(g_ctx, data, size, "fuzz", channels, scales[(flags >> 1) & 3], &im);
    fuzz_check_error(st);
    if (st != KILN_OK) return 0;
    if (im.c != channels || im.w < 1 || im.h < 1 || im.w > w || im.h > h) abort();
    kiln_data_config dc = kiln_data_defaults();
    dc.channels = channels;
    if (flags & 8) dc.random_resized_crop = 13, dc.hflip = 1;
    else dc.resize = dc.center_crop = 16;
    kiln_tf t;
    kiln_tf_init(&t, &dc, 1);
    kiln_tf_box b;
    if (kiln_tf_plan(&t, w, h, (uint64_t)size * 2654435761u, "fuzz", &b) != KILN_OK) return 0; /* e.g. a crop larger than the image */
    kiln_tf_box whole = b;
    if (im.w != w || im.h != h) kiln_tf_rescale(&whole, w, h, im.w, im.h);
    static float x[3 * 16 * 16], xc[3 * 16 * 16];
    st = kiln_tf_apply(&im, &whole, &t, &g_scratch, x, NULL);
    fuzz_check_error(st);
    for (int i = 0; st == KILN_OK && i < channels * b.x.out * b.y.out; i++)
        if (!isfinite(x[i]) || x[i] < 0 || x[i] > 1) abort();
    if (st != KILN_OK || !(flags & 16)) return 0;
    /* an image the full decode accepts at the scale the box picks: the cropped decode must accept it and agree */
    double need = b.x.s > b.y.s ? 1.0 / b.y.s : 1.0 / b.x.s;
    whole = b;
    if (kiln_image_decode(g_ctx, data, size, "fuzz", channels, need, &im) != KILN_OK) return 0;
    if (im.w != w || im.h != h) kiln_tf_rescale(&whole, w, h, im.w, im.h);
    if (kiln_tf_apply(&im, &whole, &t, &g_scratch, x, NULL) != KILN_OK) abort();
    if (kiln_tf_decode(g_ctx, data, size, "fuzz", channels, fmt, w, h, &b, &im) != KILN_OK ||
        kiln_tf_apply(&im, &b, &t, &g_scratch, xc, NULL) != KILN_OK)
        abort();
    for (int i = 0; i < channels * b.x.out * b.y.out; i++) /* one level: the box's shift may round a weight differently */
        if (!(fabsf(xc[i] - x[i]) <= 1.0f / 255 + 1e-6f)) abort();
    return 0;
}
