/* Fuzz target: the trainer's option table (src/train/options.c) and what
 * checks a configuration before any work (kiln_train's validation).
 *
 * The input is either a settings object as a checkpoint keeps it
 * ({"batch-size": "64", ...}: starts with '{'), applied in table order as
 * `train --resume` does, or lines "name=value" / "name" (a flag) as the
 * command line gives them. Every value the table accepts must print as text
 * that parses back to the same text (resume compares settings that way), the
 * settings JSON must round-trip (or be refused, naming the option, when a
 * value cannot be recorded), and kiln_train must refuse or accept the
 * result without crashing: the files it names are replaced by paths under a
 * folder that does not exist, so it stops at validation or at opening the
 * data, and never reads or writes anything. */
#include <jansson.h>
#include "fuzz_util.h"
#include "kiln/train.h"

#define NOWHERE "/nonexistent-kiln-fuzz/x"
#define MAX_LINES 64

static void roundtrip(const kiln_train_config *c) {
    static char a[1 << 16], b[1 << 16];
    for (int i = 0; i < kiln_train_option_count(); i++) {
        const kiln_train_option *o = kiln_train_option_at(i);
        if (kiln_train_option_get(c, o->name, a, sizeof a) != 0) abort();
        kiln_train_config d = *c;
        if (kiln_train_option_set(&d, o->name, a) != KILN_OK) {
            fprintf(stderr, "fuzz: --%s prints as '%s', which it refuses: %s\n", o->name, a, kiln_last_error());
            abort();
        }
        if (kiln_train_option_get(&d, o->name, b, sizeof b) != 0 || strcmp(a, b) != 0) {
            fprintf(stderr, "fuzz: --%s prints as '%s', which reads back as '%s'\n", o->name, a, b);
            abort();
        }
    }
    /* the settings a checkpoint keeps: applied to the defaults, they give the same settings */
    char *s1 = kiln_train_settings_json(c);
    if (!s1) { /* a value a checkpoint cannot record (not UTF-8) is refused, naming it */
        fuzz_check_error(KILN_ERR_INVALID_ARG);
        return;
    }
    json_error_t err;
    json_t *j = json_loads(s1, 0, &err);
    if (!json_is_object(j)) {
        fprintf(stderr, "fuzz: the settings JSON does not parse: %s\n", s1);
        abort();
    }
    kiln_train_config d = kiln_train_defaults();
    for (int i = 0; i < kiln_train_option_count(); i++) {
        const char *name = kiln_train_option_at(i)->name;
        json_t *v = json_object_get(j, name);
        if (v && kiln_train_option_set(&d, name, json_string_value(v)) != KILN_OK) {
            fprintf(stderr, "fuzz: saved setting --%s '%s' is refused: %s\n", name, json_string_value(v), kiln_last_error());
            abort();
        }
    }
    char *s2 = kiln_train_settings_json(&d);
    if (!s2 || strcmp(s1, s2) != 0) {
        fprintf(stderr, "fuzz: settings do not round-trip:\n  %s\n  %s\n", s1, s2 ? s2 : "(null)");
        abort();
    }
    free(s1);
    free(s2);
    json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int init;
    if (!init) {
        fuzz_quiet();
        init = 1;
    }
    char *text = malloc(size + 1);
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = 0;
    kiln_train_config c = kiln_train_defaults();
    json_t *j = NULL;
    if (size && text[0] == '{') {
        json_error_t err;
        j = json_loadb(text, size, 0, &err);
        for (int i = 0; json_is_object(j) && i < kiln_train_option_count(); i++) {
            const char *name = kiln_train_option_at(i)->name;
            json_t *v = json_object_get(j, name);
            if (json_is_string(v)) fuzz_check_error(kiln_train_option_set(&c, name, json_string_value(v)));
        }
    } else {
        char *save = NULL;
        int n = 0;
        for (char *line = strtok_r(text, "\n", &save); line && n < MAX_LINES; line = strtok_r(NULL, "\n", &save), n++) {
            char *eq = strchr(line, '=');
            if (eq) *eq = 0;
            fuzz_check_error(kiln_train_option_set(&c, line, eq ? eq + 1 : NULL));
        }
    }
    roundtrip(&c);
    /* validation, with every file named somewhere that does not exist */
    c.data = NOWHERE;
    if (c.save) c.save = NOWHERE;
    if (c.resume) c.resume = NOWHERE;
    if (c.load) c.load = NOWHERE;
    if (c.metrics) c.metrics = NOWHERE;
    if (c.tensorboard) c.tensorboard = NOWHERE;
    c.progress = NULL;
    c.stop_flag = NULL;
    kiln_train_result r;
    kiln_status st = kiln_train(&c, &r);
    if (st == KILN_OK) {
        fprintf(stderr, "fuzz: kiln_train succeeded on data that does not exist\n");
        abort();
    }
    fuzz_check_error(st);
    json_decref(j);
    free(text);
    return 0;
}
