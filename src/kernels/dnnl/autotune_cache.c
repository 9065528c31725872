/* The memory of the conv autotuner: decisions by problem, machine and
 * direction. A decision made once is reused for the rest of the process and,
 * through the on-disk cache and checkpoints, by later runs, the way
 * cudnn.benchmark's results would be if they were kept: no re-timing, and no
 * run-to-run difference in which kernel (and so which rounding) is used. The
 * machine is part of the key, so a cache copied from another CPU, thread count
 * or oneDNN version is kept but never used. A decision timed while other work
 * held the cores serves its process and is never exported (conv_tune.c). */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/dnnl/internal/dnnl_util.h"
#include "kernels/internal/dnnl_ops.h"

#define MACHINE_MAX 96
#define LINE_MAX_ 512

typedef struct {
    char problem[KILN_AUTOTUNE_PROBLEM_MAX];
    char machine[MACHINE_MAX];
    char dir[16];
    char decision[KILN_AUTOTUNE_DECISION_MAX];
    double us;
    int fresh; /* timed in this process (not imported from a file or checkpoint) */
    int keep;  /* exported to the cache file and checkpoints (0: timed under load) */
} decision;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static decision *table;
static int count, cap;
static int retune; /* 1: only this process's own timings count as decided */

void kiln_autotune_set_retune(int on) {
    pthread_mutex_lock(&lock);
    retune = on;
    pthread_mutex_unlock(&lock);
}

/* the CPU's model name with anything but [A-Za-z0-9._-] made '_' (one token in a line) */
static void cpu_model(char *out, size_t len) {
    char line[256] = "", *name = NULL;
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && (name = strchr(line, ':'))) break;
    if (f) fclose(f);
    if (!name) snprintf(line, sizeof line, ": unknown-cpu");
    name = strchr(line, ':') + 1;
    while (*name == ' ' || *name == '\t') name++;
    size_t o = 0;
    for (; *name && *name != '\n' && o + 1 < len; name++) {
        char ch = *name;
        int keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '-';
        if (keep || (o && out[o - 1] != '_')) out[o++] = keep ? ch : '_';
    }
    while (o && out[o - 1] == '_') o--;
    out[o] = 0;
}

static char model[64];
static pthread_once_t model_once = PTHREAD_ONCE_INIT;
static void read_model(void) { cpu_model(model, sizeof model); }

/* kiln's own candidates' generation, raised whenever they change (the problems they take, their speed): the
 * decisions made before, which never timed them, are then another machine's and tuned afresh (2: the Winograd
 * forward with a bias, inference's folded batch norms) */
#define OWN_GENERATION 2

const char *kiln_autotune_machine(void) {
    pthread_once(&model_once, read_model);
    static _Thread_local char buf[MACHINE_MAX];
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, sizeof buf, "t%d,%s,onednn-%d.%d.%d,kiln-%d", omp_get_max_threads(), model, v->major, v->minor, v->patch,
             OWN_GENERATION);
    return buf;
}

static decision *find(const char *problem, const char *machine, const char *dir) {
    for (int i = 0; i < count; i++)
        if (!strcmp(table[i].problem, problem) && !strcmp(table[i].dir, dir) && !strcmp(table[i].machine, machine))
            return &table[i];
    return NULL;
}

int kiln_autotune_lookup(const char *problem, const char *dir, char *out, size_t len, double *us) {
    const char *machine = kiln_autotune_machine();
    pthread_mutex_lock(&lock);
    decision *d = find(problem, machine, dir);
    if (d && retune && !d->fresh) d = NULL;
    if (d && out) snprintf(out, len, "%s", d->decision);
    if (d && us) *us = d->us;
    pthread_mutex_unlock(&lock);
    return d != NULL;
}

static void store_locked(const char *problem, const char *machine, const char *dir, const char *dec, double us, int fresh,
                         int keep) {
    decision *d = find(problem, machine, dir);
    if (!d && count == cap) {
        int nc = cap ? cap * 2 : 16;
        decision *nt = realloc(table, (size_t)nc * sizeof *nt);
        if (nt) {
            table = nt;
            cap = nc;
        }
    }
    if (!d && count < cap) {
        d = &table[count++];
        snprintf(d->problem, sizeof d->problem, "%s", problem);
        snprintf(d->machine, sizeof d->machine, "%s", machine);
        snprintf(d->dir, sizeof d->dir, "%s", dir);
    }
    if (!d) return;
    snprintf(d->decision, sizeof d->decision, "%s", dec);
    d->us = us;
    d->fresh = fresh;
    d->keep = keep;
}

void kiln_autotune_store(const char *problem, const char *dir, const char *dec, double us, int remember) {
    if (strlen(problem) >= KILN_AUTOTUNE_PROBLEM_MAX || strlen(dir) >= sizeof table[0].dir ||
        strlen(dec) >= KILN_AUTOTUNE_DECISION_MAX)
        return;
    const char *machine = kiln_autotune_machine();
    pthread_mutex_lock(&lock);
    store_locked(problem, machine, dir, dec, us, 1, remember);
    pthread_mutex_unlock(&lock);
}

static const char header[] = "# kiln autotune v3: problem machine direction algorithm/layout/implementation microseconds\n";

size_t kiln_autotune_export(char *buf, size_t len) {
    size_t o = 0;
    pthread_mutex_lock(&lock);
    int kept = 0;
    for (int i = 0; i < count; i++) kept += table[i].keep;
    for (int i = -1; i < count; i++) {
        if (i >= 0 && !table[i].keep) continue;
        /* buf may be NULL (len 0) to ask for the length */
        char *at = buf && o < len ? buf + o : NULL;
        size_t room = buf && o < len ? len - o : 0;
        int n = i < 0 ? (kept ? snprintf(at, room, "%s", header) : 0)
                      : snprintf(at, room, "%s %s %s %s %.1f\n", table[i].problem, table[i].machine, table[i].dir,
                                 table[i].decision, table[i].us);
        if (n > 0) o += (size_t)n;
    }
    pthread_mutex_unlock(&lock);
    if (buf && len) buf[o < len ? o : len - 1] = 0;
    return o;
}

/* one line's fields; 1 when it is a decision (v2 and v3 lines read alike), 0 when it is blank, a comment or of the v1 form, -1 when malformed */
static int parse_line(const char *row, decision *d) {
    char extra[2], alg[4];
    if (!row[0] || row[0] == '#') return 0;
    if (sscanf(row, "%*s %*s %3s %1s", alg, extra) == 1 && (alg[0] == 'w' || alg[0] == 'd') && !alg[1]) return 0;
    char us[32];
    if (sscanf(row, "%159s %95s %15s %95s %31s %1s", d->problem, d->machine, d->dir, d->decision, us, extra) != 5) return -1;
    char *end;
    d->us = strtod(us, &end);
    const char *slash = strchr(d->decision, '/');
    if (*end || !(d->us >= 0) || !slash || !strchr(slash + 1, '/')) return -1;
    return 1;
}

kiln_status kiln_autotune_import(const char *text, const char *source, int replace) {
    decision *rows = NULL;
    int n = 0, cap_rows = 0, old = 0, line = 1;
    kiln_status st = KILN_OK;
    /* every line is checked before any is used: a corrupt text changes nothing */
    for (const char *p = text; *p && st == KILN_OK; line++) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char row[LINE_MAX_];
        decision d;
        if (len >= sizeof row) {
            st = kiln_fail(KILN_ERR_FORMAT, "%s: autotune line %d is too long", source, line);
            break;
        }
        memcpy(row, p, len);
        row[len] = 0;
        int r = parse_line(row, &d);
        if (r < 0)
            st = kiln_fail(KILN_ERR_FORMAT, "%s: autotune line %d is not 'problem machine direction decision microseconds': %.200s",
                           source, line, row);
        old += r == 0 && row[0] && row[0] != '#';
        if (r > 0 && n == cap_rows) {
            cap_rows = cap_rows ? 2 * cap_rows : 64;
            decision *nr = realloc(rows, (size_t)cap_rows * sizeof *nr);
            if (!nr) st = kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", source);
            else rows = nr;
        }
        if (r > 0 && st == KILN_OK) rows[n++] = d;
        if (!end) break;
        p = end + 1;
    }
    if (st == KILN_OK) {
        pthread_mutex_lock(&lock);
        for (int i = 0; i < n; i++)
            if (replace || !find(rows[i].problem, rows[i].machine, rows[i].dir))
                store_locked(rows[i].problem, rows[i].machine, rows[i].dir, rows[i].decision, rows[i].us, 0, 1);
        pthread_mutex_unlock(&lock);
        if (old) kiln_log(KILN_LOG_INFO, "%s: %d autotune decisions of an older kiln are not used", source, old);
    }
    free(rows);
    return st;
}

void kiln_autotune_table_clear(void) {
    pthread_mutex_lock(&lock);
    free(table);
    table = NULL;
    count = cap = 0;
    pthread_mutex_unlock(&lock);
}
