/* The memory of the conv autotuner: decisions by problem and direction. A
 * decision made once is reused for the rest of the process and, through the
 * on-disk cache and checkpoints, by later runs, the way cudnn.benchmark's
 * results would be if they were kept: no re-timing, and no run-to-run
 * difference in which kernel (and so which rounding) is used. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/internal/dnnl_ops.h"

typedef struct {
    char problem[96];
    char dir[16];
    char alg;
} decision;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static decision *table;
static int count, cap;

static decision *find(const char *problem, const char *dir) {
    for (int i = 0; i < count; i++)
        if (strcmp(table[i].problem, problem) == 0 && strcmp(table[i].dir, dir) == 0) return &table[i];
    return NULL;
}

int kiln_autotune_lookup(const char *problem, const char *dir, char *alg) {
    pthread_mutex_lock(&lock);
    decision *d = find(problem, dir);
    if (d) *alg = d->alg;
    pthread_mutex_unlock(&lock);
    return d != NULL;
}

void kiln_autotune_store(const char *problem, const char *dir, char alg) {
    if (strlen(problem) >= sizeof table[0].problem || strlen(dir) >= sizeof table[0].dir) return;
    pthread_mutex_lock(&lock);
    decision *d = find(problem, dir);
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
        snprintf(d->dir, sizeof d->dir, "%s", dir);
    }
    if (d) d->alg = alg;
    pthread_mutex_unlock(&lock);
}

size_t kiln_autotune_export(char *buf, size_t len) {
    size_t o = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < count; i++) {
        /* buf may be NULL (len 0) to ask for the length */
        int n = snprintf(buf && o < len ? buf + o : NULL, buf && o < len ? len - o : 0, "%s %s %c\n", table[i].problem,
                         table[i].dir, table[i].alg);
        if (n > 0) o += (size_t)n;
    }
    pthread_mutex_unlock(&lock);
    if (buf && len) buf[o < len ? o : len - 1] = 0;
    return o;
}

kiln_status kiln_autotune_import(const char *text, const char *source, int replace) {
    const char *p = text;
    int line = 1;
    while (*p) {
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > 0) {
            char row[160], problem[96], dir[16], alg[4];
            if (n >= sizeof row) return kiln_fail(KILN_ERR_FORMAT, "%s: autotune line %d is too long", source, line);
            memcpy(row, p, n);
            row[n] = 0;
            if (sscanf(row, "%95s %15s %3s", problem, dir, alg) != 3 || (alg[0] != 'w' && alg[0] != 'd') || alg[1])
                return kiln_fail(KILN_ERR_FORMAT, "%s: autotune line %d is not 'problem direction w|d': %s", source, line, row);
            char have;
            if (replace || !kiln_autotune_lookup(problem, dir, &have)) kiln_autotune_store(problem, dir, alg[0]);
        }
        if (!end) break;
        p = end + 1;
        line++;
    }
    return KILN_OK;
}

void kiln_autotune_forget(void) {
    pthread_mutex_lock(&lock);
    free(table);
    table = NULL;
    count = cap = 0;
    pthread_mutex_unlock(&lock);
}
