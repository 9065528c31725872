/* kiln sample: text from a trained GPT (kiln_sample in src/train/sample.c),
 * written to stdout as it is generated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "kiln/sample.h"

static const char *usage =
    "usage: kiln sample --model gpt [--layers N --heads N --dim N --block N --vocab N] --load FILE\n"
    "                   [--prompt TEXT] [--tokens N] [--temperature X] [--top-k N] [--seed N]\n\n"
    "Continues the prompt byte by byte with the GPT's next-token distribution (softmax of the\n"
    "logits divided by the temperature, over the top-k tokens) and writes the text to stdout.\n"
    "The same seed gives the same text. The model's shape must be the trained one.\n\n";

static const cli_opt opts[] = {
    {"model", "NAME", "the language model", "gpt"},
    CLI_GPT_OPTS,
    {"load", "FILE", "the weights: a kiln checkpoint, or HF GPT-2 names in safetensors", NULL},
    {"prompt", "TEXT", "the start of the text (its bytes are the first tokens); empty: a newline", ""},
    {"tokens", "N", "tokens (bytes) to generate", "200"},
    {"temperature", "X", "> 0; lower is more conservative", "0.8"},
    {"top-k", "N", "draw from the N most likely tokens only (0: all)", "40"},
    {"seed", "N", "seeds the draws", "1"},
    {"threads", "N", "compute threads; 0: every core", "0"},
};
enum { S_MODEL, S_GPT, S_LOAD = S_GPT + CLI_GPT_NOPTS, S_PROMPT, S_TOKENS, S_TEMP, S_TOPK, S_SEED, S_THREADS, S_N };

static int emit(int token, void *user) {
    (void)user;
    putchar(token);
    fflush(stdout);
    return 0;
}

int cli_sample(int argc, char **argv) {
    const char *vals[S_N];
    int given[S_N];
    int rc = cli_parse("sample", usage, opts, S_N, argc, argv, vals, given);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    kiln_sample_config c = kiln_sample_defaults();
    int64_t tokens, topk, seed, threads;
    char *end;
    const char *tv = vals[S_TEMP] ? vals[S_TEMP] : opts[S_TEMP].def;
    c.temperature = strtof(tv, &end);
    if (end == tv || *end || !(c.temperature > 0))
        return cli_usage_error("sample", "--temperature: want a number > 0 (got '%s')", tv);
    if (cli_int("sample", opts, S_TOKENS, vals, 0, 1 << 24, &tokens) || cli_int("sample", opts, S_TOPK, vals, 0, 1 << 20, &topk) ||
        cli_int("sample", opts, S_SEED, vals, 0, INT64_MAX, &seed) || cli_int("sample", opts, S_THREADS, vals, 0, 1024, &threads) ||
        cli_gpt_opts("sample", opts, S_GPT, vals, &c.model_opts.gpt))
        return EXIT_USAGE;
    if (!vals[S_LOAD]) return cli_usage_error("sample", "--load FILE is required");
    c.model = vals[S_MODEL] ? vals[S_MODEL] : opts[S_MODEL].def;
    c.load = vals[S_LOAD];
    c.prompt = vals[S_PROMPT];
    c.tokens = (int)tokens;
    c.top_k = (int)topk;
    c.seed = (uint64_t)seed;
    c.threads = (int)threads;
    if (c.prompt) fputs(c.prompt, stdout);
    kiln_status st = kiln_sample(&c, emit, NULL);
    putchar('\n');
    if (st != KILN_OK) {
        fprintf(stderr, "kiln sample: %s\n", kiln_last_error());
        return cli_exit_code(st);
    }
    return 0;
}
