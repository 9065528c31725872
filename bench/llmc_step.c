/* llm.c's CPU trainer (karpathy/llm.c, train_gpt2.c) timed on the GPT step of
 * bench/gpt.sh: the same config, batch and AdamW settings as kiln's `bench
 * step --model gpt`. llm.c's own main() is fixed to GPT-2 124M and its data
 * files, so this driver includes train_gpt2.c (its TESTING switch leaves its
 * main out, as its test_gpt2.c does), writes a checkpoint of the config with
 * random weights (llm.c's version-3 layout), binds one batch of random tokens
 * and times forward, zero_grad, backward and update, each step alone. llm.c's
 * CPU update has no gradient clipping (kiln's step clips: one cheap pass).
 * Its source is not part of kiln: bench/gpt.sh builds this file against a
 * checkout named by LLMC_DIR.
 *
 *   llmc_step LAYERS HEADS DIM BLOCK VOCAB BATCH STEPS WARMUP
 * prints one JSON object: ms (median), ms_min, loss (the last step's). */
#define TESTING
#include "train_gpt2.c"
#include <fcntl.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

/* xorshift* (llm.c's sampler's generator sits behind TESTING with its main) */
static uint32_t next_u32(uint64_t *s) {
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return (uint32_t)((*s * 0x2545F4914F6CDD1Dull) >> 32);
}
static float next_f32(uint64_t *s) { return (float)(next_u32(s) >> 8) / 16777216.0f; }

/* normal(0, std), Box-Muller */
static float normal(uint64_t *rng, float std) {
    float u = next_f32(rng) + 1e-7f, v = next_f32(rng);
    return std * sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

/* llm.c's checkpoint: a 256-int header, then every parameter tensor in its order (GPT-2's init: weights
 * N(0, 0.02), layer norms' weights 1 and biases 0) */
static void write_checkpoint(const char *path, int L, int NH, int C, int T, int V) {
    int Vp = (V + 127) / 128 * 128, header[256] = {20240326, 3, T, V, L, NH, C, Vp};
    GPT2Config cfg = {.max_seq_len = T, .vocab_size = V, .padded_vocab_size = Vp,
                      .num_layers = L, .num_heads = NH, .channels = C};
    size_t sizes[NUM_PARAMETER_TENSORS];
    fill_in_parameter_sizes(sizes, cfg);
    FILE *f = fopenCheck(path, "wb");
    fwriteCheck(header, sizeof(int), 256, f);
    uint64_t rng = 1337;
    for (int t = 0; t < NUM_PARAMETER_TENSORS; t++) {
        /* 2, 3, 8, 9, 14, 15: ln1w, ln1b, ln2w, ln2b, lnfw, lnfb; 5, 7, 11, 13: the biases */
        int ones = t == 2 || t == 8 || t == 14;
        int zeros = t == 3 || t == 9 || t == 15 || t == 5 || t == 7 || t == 11 || t == 13;
        for (size_t i = 0; i < sizes[t]; i++) {
            float w = ones ? 1.0f : zeros ? 0.0f : normal(&rng, 0.02f);
            fwriteCheck(&w, sizeof w, 1, f);
        }
    }
    fcloseCheck(f);
}

int main(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: llmc_step LAYERS HEADS DIM BLOCK VOCAB BATCH STEPS WARMUP\n");
        return 2;
    }
    int L = atoi(argv[1]), NH = atoi(argv[2]), C = atoi(argv[3]), T = atoi(argv[4]), V = atoi(argv[5]);
    int B = atoi(argv[6]), steps = atoi(argv[7]), warmup = atoi(argv[8]);
    if (L < 1 || NH < 1 || C % NH || T < 1 || V < 2 || B < 1 || steps < 1 || warmup < 0) {
        fprintf(stderr, "llmc_step: bad arguments\n");
        return 2;
    }
    char path[] = "/tmp/llmc_step_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    close(fd);
    write_checkpoint(path, L, NH, C, T, V);
    GPT2 model;
    fflush(stdout); /* llm.c prints the config as it loads and its sizes at the first step: to /dev/null */
    int out = dup(1), devnull = open("/dev/null", O_WRONLY);
    if (out < 0 || devnull < 0) return 1;
    dup2(devnull, 1);
    gpt2_build_from_checkpoint(&model, path);
    remove(path);
    int *tok = mallocCheck((size_t)(B * T + 1) * sizeof *tok);
    uint64_t rng = 42;
    for (int i = 0; i <= B * T; i++) tok[i] = (int)(next_u32(&rng) % (unsigned)V);
    double *ms = mallocCheck((size_t)steps * sizeof *ms);
    for (int s = 0; s < warmup + steps; s++) {
        double t0 = now_ms();
        gpt2_forward(&model, tok, tok + 1, B, T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model);
        gpt2_update(&model, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1);
        if (s >= warmup) ms[s - warmup] = now_ms() - t0;
    }
    double last = model.mean_loss;
    fflush(stdout);
    dup2(out, 1);
    close(devnull), close(out);
    qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
    printf("{\"ms\": %.3f, \"ms_min\": %.3f, \"loss\": %.6f, \"steps\": %d}\n", ms[steps / 2], ms[0], last, steps);
    free(ms);
    free(tok);
    gpt2_free(&model);
    return 0;
}
