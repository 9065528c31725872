/* index.json, the manifest of a folder of shards (internal/manifest.h), read
 * and written with jansson. Everything is checked before use: types, counts
 * (positive, summing without overflow), class names, and shard file names
 * that stay inside the folder. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/internal/file.h"
#include "data/internal/manifest.h"
#include "data/internal/shard.h"

static const char *const split_names[2] = {"test", "train"};

void kiln_manifest_free(kiln_manifest *m) {
    for (int i = 0; i < m->num_classes; i++) free(m->classes[i]);
    free(m->classes);
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < m->split[s].nshards; i++) free(m->split[s].files[i]);
        free(m->split[s].files);
        free(m->split[s].counts);
    }
    memset(m, 0, sizeof *m);
}

kiln_status kiln_manifest_add(kiln_manifest *m, int train, const char *file, int64_t count) {
    kiln_manifest_split *s = &m->split[train ? 1 : 0];
    char **f = realloc(s->files, (size_t)(s->nshards + 1) * sizeof *f);
    if (f) s->files = f;
    int64_t *c = f ? realloc(s->counts, (size_t)(s->nshards + 1) * sizeof *c) : NULL;
    if (c) s->counts = c;
    char *d = c ? strdup(file) : NULL;
    if (!d) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", file);
    s->files[s->nshards] = d;
    s->counts[s->nshards++] = count;
    s->count += count;
    s->present = 1;
    return KILN_OK;
}

/* a plain file name inside the folder */
static int safe_name(const char *f) {
    return f[0] && f[0] != '.' && !strchr(f, '/') && !strchr(f, '\\') && strlen(f) < 256;
}

static kiln_status parse_split(json_t *o, const char *name, int train, kiln_manifest *m) {
    const char *sn = split_names[train];
    json_t *count = json_object_get(o, "count"), *shards = json_object_get(o, "shards");
    if (!json_is_object(o) || !json_is_integer(count) || !json_is_array(shards) || json_array_size(shards) < 1 ||
        json_array_size(shards) > KILN_MANIFEST_MAX_SHARDS)
        return kiln_fail(KILN_ERR_FORMAT, "%s: splits.%s needs an integer \"count\" and a non-empty \"shards\" array", name, sn);
    size_t i;
    json_t *e;
    json_array_foreach(shards, i, e) {
        json_t *f = json_object_get(e, "file"), *c = json_object_get(e, "count");
        if (!json_is_string(f) || !safe_name(json_string_value(f)) || !json_is_integer(c) || json_integer_value(c) < 1 ||
            json_integer_value(c) > KILN_SHARD_MAX_COUNT)
            return kiln_fail(KILN_ERR_FORMAT, "%s: splits.%s.shards[%zu] needs a \"file\" (a name inside the folder) and a "
                             "\"count\" in 1..%lld", name, sn, i, (long long)KILN_SHARD_MAX_COUNT);
        kiln_status st = kiln_manifest_add(m, train, json_string_value(f), json_integer_value(c));
        if (st != KILN_OK) return st;
    }
    if (m->split[train].count != json_integer_value(count))
        return kiln_fail(KILN_ERR_FORMAT, "%s: splits.%s.count is %lld but its shards hold %lld", name, sn,
                         (long long)json_integer_value(count), (long long)m->split[train].count);
    return KILN_OK;
}

static kiln_status parse_classes(json_t *c, const char *name, kiln_manifest *m) {
    if (!json_is_array(c) || json_array_size(c) < 1 || json_array_size(c) > KILN_MANIFEST_MAX_CLASSES)
        return kiln_fail(KILN_ERR_FORMAT, "%s: \"classes\" must be an array of 1..%d names", name, KILN_MANIFEST_MAX_CLASSES);
    m->classes = calloc(json_array_size(c), sizeof *m->classes);
    if (!m->classes) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", name);
    size_t i;
    json_t *e;
    json_array_foreach(c, i, e) {
        if (!json_is_string(e)) return kiln_fail(KILN_ERR_FORMAT, "%s: classes[%zu] is not a string", name, i);
        if (!(m->classes[m->num_classes++] = strdup(json_string_value(e)))) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", name);
    }
    return KILN_OK;
}

static kiln_status parse(json_t *root, const char *name, kiln_manifest *m) {
    json_t *fmt = json_object_get(root, "format"), *ver = json_object_get(root, "version");
    json_t *rec = json_object_get(root, "records"), *splits = json_object_get(root, "splits");
    if (!json_is_object(root) || !json_is_string(fmt) || strcmp(json_string_value(fmt), "kiln-shards") != 0)
        return kiln_fail(KILN_ERR_FORMAT, "%s: not a kiln shard manifest (\"format\": \"kiln-shards\" missing)", name);
    if (!json_is_integer(ver) || json_integer_value(ver) != 1)
        return kiln_fail(KILN_ERR_FORMAT, "%s: manifest version is not 1 (this kiln reads version 1)", name);
    const char *r = json_is_string(rec) ? json_string_value(rec) : "";
    if (strcmp(r, "encoded") != 0 && strcmp(r, "decoded") != 0)
        return kiln_fail(KILN_ERR_FORMAT, "%s: \"records\" must be \"encoded\" or \"decoded\"", name);
    m->decoded = r[0] == 'd';
    kiln_status st = parse_classes(json_object_get(root, "classes"), name, m);
    if (st != KILN_OK) return st;
    if (!json_is_object(splits) || !json_object_get(splits, "train"))
        return kiln_fail(KILN_ERR_FORMAT, "%s: \"splits\" must hold a \"train\" split", name);
    for (int t = 1; st == KILN_OK && t >= 0; t--) {
        json_t *s = json_object_get(splits, split_names[t]);
        if (s) st = parse_split(s, name, t, m);
    }
    return st;
}

kiln_status kiln_manifest_parse(const char *text, size_t n, const char *name, kiln_manifest *m) {
    memset(m, 0, sizeof *m);
    json_error_t err;
    json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &err);
    if (!root) return kiln_fail(KILN_ERR_FORMAT, "%s: not valid JSON (line %d: %s)", name, err.line, err.text);
    kiln_status st = parse(root, name, m);
    json_decref(root);
    if (st != KILN_OK) kiln_manifest_free(m);
    return st;
}

static json_t *to_json(const kiln_manifest *m) {
    json_t *o = json_object(), *classes = json_array(), *splits = json_object();
    json_object_set_new(o, "format", json_string("kiln-shards"));
    json_object_set_new(o, "version", json_integer(1));
    json_object_set_new(o, "records", json_string(m->decoded ? "decoded" : "encoded"));
    for (int i = 0; i < m->num_classes; i++) json_array_append_new(classes, json_string(m->classes[i]));
    json_object_set_new(o, "classes", classes);
    for (int t = 1; t >= 0; t--) {
        const kiln_manifest_split *s = &m->split[t];
        if (!s->present) continue;
        json_t *so = json_object(), *shards = json_array();
        json_object_set_new(so, "count", json_integer(s->count));
        for (int i = 0; i < s->nshards; i++)
            json_array_append_new(shards, json_pack("{s:s, s:I}", "file", s->files[i], "count", (json_int_t)s->counts[i]));
        json_object_set_new(so, "shards", shards);
        json_object_set_new(splits, split_names[t], so);
    }
    json_object_set_new(o, "splits", splits);
    return o;
}

kiln_status kiln_manifest_write(const char *dir, const kiln_manifest *m) {
    char path[PATH_MAX], tmp[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, KILN_MANIFEST_NAME);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    json_t *o = to_json(m);
    for (int i = 0; o && i < m->num_classes; i++) /* a class name that is not UTF-8 would vanish from the JSON */
        if (!json_is_string(json_array_get(json_object_get(o, "classes"), (size_t)i))) {
            json_decref(o);
            return kiln_fail(KILN_ERR_INVALID_ARG, "%s: class name '%s' is not valid UTF-8: the manifest cannot record it", path,
                             m->classes[i]);
        }
    char *text = o ? json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (!text) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", path);
    int fd = kiln_open_write(tmp, 0);
    kiln_status st = fd < 0 ? KILN_ERR_IO : KILN_OK;
    size_t n = strlen(text), done = 0;
    while (st == KILN_OK && done < n) {
        ssize_t r = write(fd, text + done, n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) st = kiln_fail(KILN_ERR_IO, "%s: cannot write: %s", tmp, r < 0 ? strerror(errno) : "no space");
        else done += (size_t)r;
    }
    free(text);
    if (fd >= 0 && st == KILN_OK && fsync(fd) != 0) st = kiln_fail(KILN_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
    if (fd >= 0 && close(fd) != 0 && st == KILN_OK) st = kiln_fail(KILN_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
    if (st == KILN_OK && rename(tmp, path) != 0) st = kiln_fail(KILN_ERR_IO, "%s: cannot rename %s to it: %s", path, tmp, strerror(errno));
    if (st != KILN_OK && fd >= 0) unlink(tmp);
    return st;
}
