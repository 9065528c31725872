/* kiln tokenize: text files to a byte-level token file (kiln_tokenize in
 * src/data/tokenize.c). `--from` takes one or more files: the arguments after
 * it up to the next option, as the issue's `--from FILE...` reads. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "kiln/data.h"

static const char *usage =
    "usage: kiln tokenize --from FILE... --to OUT.tokens [--val-fraction X] [--doc-separator LINE] [--json]\n\n"
    "Writes the bytes of the files, concatenated, as tokens (vocabulary 256) in llm.c's token-file\n"
    "layout (a header of 256 int32: magic 20240520, version 1, count; then uint16 tokens).\n"
    "With --val-fraction the last share goes to OUT.val.tokens, the test split of --data tokens:OUT.\n"
    "Each file written gets a document index beside it (OUT.tokens.docs): each input file is a document,\n"
    "or with --doc-separator each run of lines between separator lines (--batch-tokens trains on documents).\n\n";

static const cli_opt opts[] = {
    {"from", "FILE...", "text files (any bytes: UTF-8 text, e.g. Debian's fortunes in /usr/share/games/fortunes)", NULL},
    {"to", "FILE", "the token file written (atomically)", NULL},
    {"val-fraction", "X", "the share of the text, from its end, held out for validation (0: none)", "0"},
    {"doc-separator", "LINE", "a line that ends a document and is left out (\"%\" in fortune files); none: each file is one", NULL},
    {"json", NULL, "one JSON object: train_tokens, val_tokens, val_path, train_docs, val_docs", NULL},
};
enum { K_FROM, K_TO, K_VAL, K_SEP, K_JSON, K_N };

/* moves the files after --from out of argv (keeping the first for the parser); returns their count */
static int take_files(int *argc, char **argv, const char **files) {
    int n = 0, out = 0;
    for (int i = 0; i < *argc; i++) {
        argv[out++] = argv[i];
        if (strcmp(argv[i], "--from") != 0 || i + 1 >= *argc) continue;
        argv[out++] = argv[++i];
        files[n++] = argv[i];
        while (i + 1 < *argc && strncmp(argv[i + 1], "--", 2) != 0) files[n++] = argv[++i];
    }
    *argc = out;
    return n;
}

int cli_tokenize(int argc, char **argv) {
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    if (!files) return 1;
    int nfiles = take_files(&argc, argv, files);
    const char *vals[K_N];
    int given[K_N];
    int rc = cli_parse("tokenize", usage, opts, K_N, argc, argv, vals, given);
    if (rc) {
        free(files);
        return rc > 0 ? 0 : EXIT_USAGE;
    }
    char *end;
    const char *fv = vals[K_VAL] ? vals[K_VAL] : opts[K_VAL].def;
    double frac = strtod(fv, &end);
    if (end == fv || *end || !(frac >= 0 && frac < 1)) rc = cli_usage_error("tokenize", "--val-fraction: want 0 <= X < 1 (got '%s')", fv);
    else if (!nfiles) rc = cli_usage_error("tokenize", "--from FILE... is required");
    else if (!vals[K_TO]) rc = cli_usage_error("tokenize", "--to FILE is required");
    kiln_tokenize_result r;
    kiln_status st = rc ? KILN_OK : kiln_tokenize_docs(files, nfiles, vals[K_TO], frac, vals[K_SEP], &r);
    free(files);
    if (rc) return EXIT_USAGE;
    if (st != KILN_OK) {
        fprintf(stderr, "kiln tokenize: %s\n", kiln_last_error());
        return cli_exit_code(st);
    }
    fprintf(stderr, "kiln: %lld tokens (%lld documents) in %s%s%s\n", (long long)r.train_tokens, (long long)r.train_docs,
            vals[K_TO], r.val_path[0] ? ", held out in " : "", r.val_path);
    if (given[K_JSON]) {
        json_t *o = json_object();
        json_object_set_new(o, "train_tokens", json_integer(r.train_tokens));
        json_object_set_new(o, "val_tokens", json_integer(r.val_tokens));
        json_object_set_new(o, "train_docs", json_integer(r.train_docs));
        json_object_set_new(o, "val_docs", json_integer(r.val_docs));
        json_object_set_new(o, "val_path", r.val_path[0] ? json_string(r.val_path) : json_null());
        cli_print_json(o);
    }
    return 0;
}
