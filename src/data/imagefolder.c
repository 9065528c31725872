/* Image folders, laid out as torchvision's ImageFolder: DIR/train/<class>/...
 * and DIR/test/<class>/..., or DIR/<class>/... split by --val-split. Classes
 * are the sorted folder names (byte order, as Python's sorted; folders whose
 * names start with '.' are skipped); a class folder's .jpg/.jpeg/.png files
 * (any case, in sub-folders too) are its samples, in sorted order. Files are
 * read and decoded in `get`, on the loader's workers; the sample shape comes
 * from the transforms and the first image of each class, checked at open, so
 * a folder of mixed sizes without a resize fails before training starts (and
 * a later odd one fails naming its file). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "data/internal/folder.h"
#include "data/internal/records.h"

/* a split of val_split is drawn with this fixed seed, so train and eval agree without --seed */
#define SPLIT_SEED 0x73706c6974ull
#define MAX_DEPTH 16
/* folder descriptors kept open: at most this many, and a quarter of the descriptor limit */
#define MAX_DIR_FDS 4096

typedef struct {
    char *text;      /* NUL-separated paths */
    size_t len, cap;
    int64_t *off;    /* per sample */
    int32_t *label;
    int32_t *dir;    /* per sample: its folder's descriptor in dirs, or -1 (opened by its whole path) */
    int32_t *base;   /* per sample: where its name starts in its path */
    int64_t n, ncap;
    int *dirs;       /* the image folders, kept open: a read looks up one name, not every folder of a path */
    int ndirs, max_dirs;
} file_list;

typedef struct {
    char **names;
    int n;
} class_list;

/* a/b into out; a path beyond PATH_MAX is an error, never silently cut */
static kiln_status join(char *out, const char *a, const char *b) {
    if (snprintf(out, PATH_MAX, "%s/%s", a, b) >= PATH_MAX) return kiln_fail(KILN_ERR_IO, "%s/%s: path too long", a, b);
    return KILN_OK;
}

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_image_name(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png"));
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }
static int not_dot(const struct dirent *e) { return e->d_name[0] != '.'; }

static void free_entries(struct dirent **e, int n) {
    for (int i = 0; i < n; i++) free(e[i]);
    free(e);
}

static void classes_free(class_list *c) {
    for (int i = 0; i < c->n; i++) free(c->names[i]);
    free(c->names);
    c->names = NULL;
    c->n = 0;
}

/* the sorted sub-folders of root */
static kiln_status list_classes(const char *root, class_list *c) {
    memset(c, 0, sizeof *c);
    struct dirent **e = NULL;
    int n = scandir(root, &e, not_dot, by_name);
    if (n < 0) return kiln_fail(KILN_ERR_IO, "%s: cannot list the folder", root);
    c->names = calloc((size_t)n + 1, sizeof *c->names);
    kiln_status st = c->names ? KILN_OK : kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", root);
    char p[PATH_MAX];
    for (int i = 0; st == KILN_OK && i < n; i++) {
        if ((st = join(p, root, e[i]->d_name)) != KILN_OK) break;
        if (is_dir(p) && !(c->names[c->n++] = strdup(e[i]->d_name))) st = kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", root);
    }
    free_entries(e, n);
    if (st == KILN_OK && c->n == 0)
        st = kiln_fail(KILN_ERR_FORMAT, "%s: no class folders (expected %s/<class>/*.jpg|png, as torchvision's ImageFolder)", root,
                       root);
    if (st != KILN_OK) classes_free(c);
    return st;
}

static int grow32(int32_t **p, int64_t cap) {
    int32_t *q = realloc(*p, (size_t)cap * sizeof *q);
    if (q) *p = q;
    return q != NULL;
}

/* path (its name at path + base) in the folder dirs[dir] (-1: none kept open) */
static kiln_status add_file(file_list *f, const char *path, int32_t label, int32_t dir, int32_t base) {
    size_t l = strlen(path) + 1;
    if (f->n == f->ncap) {
        int64_t cap = f->ncap ? 2 * f->ncap : 1024;
        int64_t *o = realloc(f->off, (size_t)cap * sizeof *o);
        if (o) f->off = o;
        if (!o || !grow32(&f->label, cap) || !grow32(&f->dir, cap) || !grow32(&f->base, cap))
            return kiln_fail(KILN_ERR_NOMEM, "image folder: out of memory");
        f->ncap = cap;
    }
    if (f->len + l > f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 65536;
        while (cap < f->len + l) cap *= 2;
        char *t = realloc(f->text, cap);
        if (!t) return kiln_fail(KILN_ERR_NOMEM, "image folder: out of memory");
        f->text = t;
        f->cap = cap;
    }
    memcpy(f->text + f->len, path, l);
    f->off[f->n] = (int64_t)f->len;
    f->dir[f->n] = dir;
    f->base[f->n] = base;
    f->label[f->n++] = label;
    f->len += l;
    return KILN_OK;
}

/* an entry of the folder open as fd is a folder (symbolic links followed, as stat) */
static int entry_is_dir(int fd, const struct dirent *e) {
    if (e->d_type == DT_DIR || e->d_type == DT_REG) return e->d_type == DT_DIR; /* no stat for each of many files */
    struct stat sb;
    return fstatat(fd, e->d_name, &sb, 0) == 0 && S_ISDIR(sb.st_mode);
}

/* keeps fd open for reads by name: its index in f->dirs, or -1 when enough are open already */
static int32_t keep_dir(file_list *f, int fd) {
    if (f->ndirs >= f->max_dirs) return -1;
    if (!f->dirs && !(f->dirs = malloc((size_t)f->max_dirs * sizeof *f->dirs))) return -1;
    f->dirs[f->ndirs] = fd;
    return f->ndirs++;
}

/* a class folder's image files, sorted, then its sub-folders' */
static kiln_status walk(file_list *f, const char *dir, int32_t label, int depth) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct dirent **e = NULL;
    int n = fd < 0 ? -1 : scandirat(fd, ".", &e, not_dot, by_name);
    if (n < 0) {
        kiln_status st = kiln_fail(KILN_ERR_IO, "%s: cannot list the folder: %s", dir, strerror(errno));
        if (fd >= 0) close(fd);
        return st;
    }
    kiln_status st = KILN_OK;
    char p[PATH_MAX];
    int32_t slot = -2, base = (int32_t)strlen(dir) + 1; /* slot: this folder's in f->dirs (-2: not asked yet) */
    for (int pass = 0; pass < 2 && st == KILN_OK; pass++)
        for (int i = 0; i < n && st == KILN_OK; i++) {
            if ((st = join(p, dir, e[i]->d_name)) != KILN_OK) break;
            int d = entry_is_dir(fd, e[i]);
            if (pass == 0 && !d && is_image_name(e[i]->d_name)) {
                if (slot == -2) slot = keep_dir(f, fd);
                st = add_file(f, p, label, slot, base);
            }
            if (pass == 1 && d && depth < MAX_DEPTH) st = walk(f, p, label, depth + 1);
        }
    free_entries(e, n);
    if (slot < 0) close(fd);
    return st;
}

static int max_dir_fds(void) {
    struct rlimit rl;
    rlim_t lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur / 4 : 0;
    return lim < MAX_DIR_FDS ? (int)lim : MAX_DIR_FDS;
}

static kiln_status scan(const char *root, file_list *f, class_list *c) {
    kiln_status st = list_classes(root, c);
    char p[PATH_MAX];
    for (int k = 0; st == KILN_OK && k < c->n; k++) {
        int64_t before = f->n;
        st = join(p, root, c->names[k]);
        if (st == KILN_OK) st = walk(f, p, k, 0);
        if (st == KILN_OK && f->n == before)
            st = kiln_fail(KILN_ERR_FORMAT, "%s: empty class folder (no .jpg, .jpeg or .png files)", p);
    }
    return st;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* keeps the samples of one side of the seeded split, in their original order */
static kiln_status split(file_list *f, double val, int train, const char *root) {
    int64_t n = f->n, ntest = (int64_t)(n * val + 0.5);
    if (ntest < 1 || ntest >= n)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: --val-split %g of %lld images leaves an empty split", root, val, (long long)n);
    int64_t *perm = malloc((size_t)n * sizeof *perm), *off = malloc((size_t)n * sizeof *off);
    int32_t *lab = malloc((size_t)n * sizeof *lab), *dir = malloc((size_t)n * sizeof *dir), *base = malloc((size_t)n * sizeof *base);
    if (!perm || !off || !lab || !dir || !base) {
        free(perm), free(off), free(lab), free(dir), free(base);
        return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", root);
    }
    kiln_shuffle_indices(perm, n, SPLIT_SEED, 0);
    int64_t *keep = train ? perm + ntest : perm, m = train ? n - ntest : ntest;
    qsort(keep, (size_t)m, sizeof *keep, cmp_i64);
    for (int64_t i = 0; i < m; i++)
        off[i] = f->off[keep[i]], lab[i] = f->label[keep[i]], dir[i] = f->dir[keep[i]], base[i] = f->base[keep[i]];
    free(f->off);
    free(f->label);
    free(f->dir);
    free(f->base);
    free(perm);
    f->off = off;
    f->label = lab;
    f->dir = dir;
    f->base = base;
    f->n = f->ncap = m;
    return KILN_OK;
}

/* ---- records ---- */

typedef struct folder_records {
    kiln_records r;
    file_list files;
    class_list classes;
} folder_records;

/* sample i's folder descriptor (or AT_FDCWD) and its path from there */
static int at(const file_list *f, int64_t i, const char **rel) {
    const char *path = f->text + f->off[i];
    int32_t d = f->dir[i];
    *rel = d >= 0 ? path + f->base[i] : path;
    return d >= 0 ? f->dirs[d] : AT_FDCWD;
}

static kiln_status folder_read(const kiln_records *r, int64_t i, kiln_image_ctx *ctx, char *name, kiln_record *out) {
    const folder_records *f = (const folder_records *)r;
    const char *path = f->files.text + f->files.off[i], *rel;
    int dir = at(&f->files, i, &rel);
    /* shorter than PATH_MAX (join); no printf for each sample, and only the file's own name measured */
    memcpy(name, path, (size_t)(rel - path) + strlen(rel) + 1);
    return kiln_image_read_at(ctx, dir, rel, path, &out->data, &out->n);
}

/* every file's path, size and modification time */
static kiln_status folder_fingerprint(const kiln_records *r, uint64_t *h) {
    const folder_records *f = (const folder_records *)r;
    for (int64_t i = 0; i < f->files.n; i++) {
        const char *path = f->files.text + f->files.off[i], *rel;
        int dir = at(&f->files, i, &rel);
        struct stat sb;
        if (fstatat(dir, rel, &sb, 0) != 0) return kiln_fail(KILN_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        const int64_t id[4] = {(int64_t)sb.st_size, (int64_t)sb.st_mtim.tv_sec, (int64_t)sb.st_mtim.tv_nsec, f->files.label[i]};
        *h = kiln_hash(kiln_hash(*h, path, strlen(path) + 1), id, sizeof id);
    }
    return KILN_OK;
}

static void files_free(file_list *f) {
    for (int i = 0; i < f->ndirs; i++) close(f->dirs[i]);
    free(f->dirs);
    free(f->text);
    free(f->off);
    free(f->label);
    free(f->dir);
    free(f->base);
}

static void folder_destroy(kiln_records *r) {
    folder_records *f = (folder_records *)r;
    files_free(&f->files);
    classes_free(&f->classes);
    free(f);
}

/* ---- opening ---- */

int kiln_imagefolder_detect(const char *folder) {
    char p[PATH_MAX];
    if (join(p, folder, "train") != KILN_OK) return 0;
    if (is_dir(p)) return 1;
    struct dirent **e = NULL;
    int n = scandir(folder, &e, not_dot, by_name), dirs = 0, idx = 0;
    for (int i = 0; i < n; i++) {
        dirs += join(p, folder, e[i]->d_name) == KILN_OK && is_dir(p);
        idx += strstr(e[i]->d_name, "-ubyte") != NULL;
    }
    if (n > 0) free_entries(e, n);
    return dirs > 0 && idx == 0;
}

/* train and test must name the same classes, or their label numbers would differ */
static kiln_status same_classes(const char *folder, const class_list *c) {
    char p[PATH_MAX];
    class_list t = {0};
    kiln_status st = join(p, folder, "train");
    if (st == KILN_OK) st = list_classes(p, &t);
    for (int i = 0; st == KILN_OK && (i < t.n || i < c->n); i++)
        if (i >= t.n || i >= c->n || strcmp(t.names[i], c->names[i]) != 0)
            st = kiln_fail(KILN_ERR_FORMAT, "%s/test: its class folders differ from train/'s ('%s' against '%s'): both need the "
                           "same classes", folder, i < c->n ? c->names[i] : "(none)", i < t.n ? t.names[i] : "(none)");
    classes_free(&t);
    return st;
}

static kiln_status locate(const char *folder, int train, const kiln_data_config *dc, char *root, size_t len, int *layout) {
    (void)len;
    kiln_status st = join(root, folder, "train");
    if (st != KILN_OK) return st;
    *layout = is_dir(root);
    if (*layout && dc->val_split > 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s has train/ (and test/) folders: --val-split applies to DIR/<class>/... only",
                         folder);
    if (*layout) {
        if ((st = join(root, folder, train ? "train" : "test")) != KILN_OK) return st;
        if (!is_dir(root))
            return kiln_fail(KILN_ERR_IO, "%s: no test/ folder beside train/ (add DIR/test/<class>/..., or give --no-test)", folder);
        return KILN_OK;
    }
    if (snprintf(root, PATH_MAX, "%s", folder) >= PATH_MAX) return kiln_fail(KILN_ERR_IO, "%s: path too long", folder);
    if (!train && !(dc->val_split > 0))
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s holds class folders but no train/ and test/: give --val-split X (e.g. 0.1) "
                         "for a test split, or --no-test", folder);
    return KILN_OK;
}

kiln_status kiln_imagefolder_records(const char *folder, int train, const kiln_data_config *dc, kiln_records **out) {
    *out = NULL;
    char root[PATH_MAX];
    int layout;
    kiln_status st = locate(folder, train, dc, root, sizeof root, &layout);
    if (st != KILN_OK) return st;
    folder_records *f = calloc(1, sizeof *f);
    if (!f) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", folder);
    f->r = (kiln_records){.read = folder_read, .fingerprint = folder_fingerprint, .destroy = folder_destroy};
    f->files.max_dirs = max_dir_fds();
    st = scan(root, &f->files, &f->classes);
    if (st == KILN_OK && layout && !train) st = same_classes(folder, &f->classes);
    if (st == KILN_OK && !layout && dc->val_split > 0) st = split(&f->files, dc->val_split, train, folder);
    f->r.len = f->files.n;
    f->r.labels = f->files.label;
    f->r.num_classes = f->classes.n;
    f->r.classes = f->classes.names;
    if (st != KILN_OK) {
        folder_destroy(&f->r);
        return st;
    }
    *out = &f->r;
    return KILN_OK;
}

/* ---- a folder's images, without classes (kiln predict) ---- */

static int by_path(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void kiln_image_files_free(char **paths, int64_t n) {
    for (int64_t i = 0; paths && i < n; i++) free(paths[i]);
    free(paths);
}

kiln_status kiln_image_files(const char *dir, char ***paths, int64_t *n) {
    *paths = NULL;
    *n = 0;
    char root[PATH_MAX];
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--; /* "DIR/" names files DIR/a.png, not DIR//a.png */
    if (len >= sizeof root) return kiln_fail(KILN_ERR_IO, "%s: path too long", dir);
    memcpy(root, dir, len);
    root[len] = 0;
    struct stat sb;
    if (stat(root, &sb) != 0) return kiln_fail(KILN_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return kiln_fail(KILN_ERR_IO, "%s: not a folder", dir);
    file_list f = {0};
    kiln_status st = walk(&f, root, 0, 0);
    if (st == KILN_OK && f.n == 0) st = kiln_fail(KILN_ERR_FORMAT, "%s: no .jpg, .jpeg or .png files in it or its sub-folders", dir);
    char **p = st == KILN_OK ? calloc((size_t)f.n, sizeof *p) : NULL;
    if (st == KILN_OK && !p) st = kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", dir);
    for (int64_t i = 0; st == KILN_OK && i < f.n; i++)
        if (!(p[i] = strdup(f.text + f.off[i]))) st = kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", dir);
    files_free(&f);
    if (st != KILN_OK) {
        kiln_image_files_free(p, f.n);
        return st;
    }
    qsort(p, (size_t)f.n, sizeof *p, by_path); /* walk lists a folder's files before its sub-folders' */
    *paths = p;
    *n = f.n;
    return KILN_OK;
}

kiln_status kiln_dataset_open_files(const char *const *paths, int64_t n, const char *name, const kiln_data_config *dc,
                                    kiln_dataset **out) {
    *out = NULL;
    if (n < 1) return kiln_fail(KILN_ERR_INVALID_ARG, "%s: no image files", name);
    folder_records *f = calloc(1, sizeof *f);
    char **cls = calloc(1, sizeof *cls);
    if (!f || !cls || !(cls[0] = strdup("images"))) {
        free(f);
        if (cls) free(cls[0]);
        free(cls);
        return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", name);
    }
    f->r = (kiln_records){.read = folder_read, .fingerprint = folder_fingerprint, .destroy = folder_destroy};
    f->classes = (class_list){cls, 1};
    kiln_status st = KILN_OK;
    for (int64_t i = 0; st == KILN_OK && i < n; i++) st = add_file(&f->files, paths[i], 0, -1, 0);
    f->r.len = f->files.n;
    f->r.labels = f->files.label;
    f->r.num_classes = 1;
    f->r.classes = f->classes.names;
    if (st != KILN_OK) {
        folder_destroy(&f->r);
        return st;
    }
    kiln_data_config d = *dc;
    d.cache = NULL; /* one pass */
    return kiln_imageset_open(&f->r, name, 0, &d, out);
}

kiln_status kiln_imagefolder_open(const char *folder, int train, const kiln_data_config *dc, kiln_dataset **out) {
    kiln_records *r = NULL;
    kiln_status st = kiln_imagefolder_records(folder, train, dc, &r);
    if (st != KILN_OK) return st;
    char name[PATH_MAX + 16];
    snprintf(name, sizeof name, "%.*s %s", PATH_MAX - 1, folder, train ? "train" : "test");
    return kiln_imageset_open(r, name, train, dc, out);
}
