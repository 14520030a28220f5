/* The data sources of a train block.  See run/sources.h. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "run/image.h"
#include "run/sources.h"
#include "util/mem.h"
#include "util/suggest.h"

/* ---- building a set ------------------------------------------------------------- */

/* "dir/name" (to free), or NULL reported (in d, when not NULL). */
static char *join(const char *dir, const char *name, DiagSink *d)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = gc_malloc(n);
    if (!p && d) diag_plain(d, "%s/%s: out of memory", dir, name);
    else snprintf(p, n, "%s%s%s", dir, *dir && dir[strlen(dir) - 1] != '/' ? "/" : "", name);
    return p;
}

/* Allocates out's examples and labels for `count` examples of shape[rank] and names
 * them; 0, or -1 reported (out zeroed). */
static int ds_alloc(Dataset *out, int64_t count, const int64_t *shape, int rank, const char *name,
                    const char *labels_name, const char *item, DiagSink *d)
{
    memset(out, 0, sizeof *out);
    int64_t ss = 1, total;
    for (int i = 0; i < rank; i++)
        if (!gc_mul_i64(ss, shape[i], &ss)) ss = -1;
    size_t bytes = 0;
    if (ss < 0 || !gc_mul_i64(count, ss, &total) || !gc_mul_size((size_t)total, sizeof(float), &bytes) ||
        !(out->x = gc_malloc(bytes ? bytes : 1)) || !(out->y = gc_calloc(count ? (size_t)count : 1, sizeof(int32_t))) ||
        !(out->name = gc_strdup(name)) || (labels_name && !(out->labels_name = gc_strdup(labels_name)))) {
        diag_plain(d, "%s: out of memory for %" PRId64 " %s", name, count, item);
        dataset_free(out);
        return -1;
    }
    out->count = count;
    out->rank = rank;
    memcpy(out->shape, shape, (size_t)rank * sizeof *shape);
    out->sample_size = ss;
    out->item = item;
    return 0;
}

/* nclasses: the largest label + 1. */
static void ds_classes(Dataset *ds)
{
    int32_t top = -1;
    for (int64_t i = 0; i < ds->count; i++)
        if (ds->y[i] > top) top = ds->y[i];
    ds->nclasses = top + 1;
}

int dataset_from_arrays(const IdxData *x, const char *xpath, const IdxData *y, const char *ypath, Dataset *out,
                        DiagSink *d)
{
    memset(out, 0, sizeof *out);
    if (x->rank < 2) {
        diag_plain(d, "%s: examples must have rank 2 or more (count, then each example's shape), found shape [%"
                   PRId64 "]", xpath, x->dims[0]);
        return -1;
    }
    if (x->rank > 5) {
        diag_plain(d, "%s: examples of rank %d: at most 4 dimensions per example", xpath, x->rank - 1);
        return -1;
    }
    if (y->rank != 1 && !(y->rank == 2 && y->dims[1] == 1)) {
        diag_plain(d, "%s: labels must have shape [count] or [count, 1], found rank %d", ypath, y->rank);
        return -1;
    }
    int64_t count = x->dims[0];
    if (y->dims[0] != count) {
        diag_plain(d, "%s: %" PRId64 " examples, but %s has %" PRId64 " labels", xpath, count, ypath, y->dims[0]);
        return -1;
    }
    for (int64_t i = 0; i < count; i++) {
        double v = idx_value(y, i);
        if (!(v >= 0 && v <= INT32_MAX && v == floor(v))) {
            diag_plain(d, "%s: label %g at index %" PRId64 " is not a class number (an integer from 0)", ypath, v, i);
            return -1;
        }
    }
    if (ds_alloc(out, count, x->dims + 1, x->rank - 1, xpath, ypath, "examples", d) != 0) return -1;
    float scale = x->type == EL_U8 ? 1.0f / 255.0f : 1.0f;
    for (int64_t i = 0; i < x->size; i++) {
        double v = idx_value(x, i);
        if (!isfinite(v)) {
            diag_plain(d, "%s: value %g at index %" PRId64 " (example %" PRId64 ") is not finite", xpath, v, i,
                       i / out->sample_size);
            dataset_free(out);
            return -1;
        }
        out->x[i] = x->type == EL_U8 ? (float)v * scale : (float)v;
    }
    for (int64_t i = 0; i < count; i++) out->y[i] = (int32_t)idx_value(y, i);
    ds_classes(out);
    return 0;
}

int dataset_split(Dataset *all, double valid, Dataset *train, Dataset *test, DiagSink *d)
{
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    int64_t n = all->count, nt = (int64_t)floor((double)n * valid);
    if (nt < 1 || nt >= n) {
        diag_plain(d, "%s: %" PRId64 " %s: holding out a fraction %g of them leaves %s", all->name, n,
                   all->item ? all->item : "examples", valid, nt < 1 ? "no test set" : "nothing to train on");
        dataset_free(all);
        return -1;
    }
    if (ds_alloc(train, n - nt, all->shape, all->rank, all->name, all->labels_name, all->item, d) != 0 ||
        ds_alloc(test, nt, all->shape, all->rank, all->name, all->labels_name, all->item, d) != 0) {
        dataset_free(train);
        dataset_free(all);
        return -1;
    }
    int64_t a = 0, b = 0, ss = all->sample_size;
    for (int64_t i = 0; i < n; i++) {
        bool held = floor((double)(i + 1) * valid) > floor((double)i * valid);
        Dataset *to = held ? test : train;
        int64_t k = held ? b++ : a++;
        memcpy(to->x + k * ss, all->x + i * ss, (size_t)ss * sizeof(float));
        to->y[k] = all->y[i];
    }
    train->nclasses = test->nclasses = all->nclasses;
    dataset_free(all);
    return 0;
}

/* ---- IDX and NumPy ------------------------------------------------------------- */

typedef int (*ArrayLoad)(const char *path, const char *member, IdxData *out, DiagSink *d);

static int load_idx(const char *path, const char *member, IdxData *out, DiagSink *d)
{
    (void)member;
    return idx_load(path, out, d);
}

/* A .npy file, or the member of a .npz archive (by its name's ending). */
static bool is_npz(const char *path)
{
    size_t n = strlen(path);
    return n >= 4 && strcmp(path + n - 4, ".npz") == 0;
}

static int load_npy(const char *path, const char *member, IdxData *out, DiagSink *d)
{
    return is_npz(path) ? npz_load(path, member, out, d) : npy_load(path, out, d);
}

/* Examples from xpath (member xm of an .npz) and labels from ypath (member ym). */
static int load_pair(ArrayLoad load, const char *xpath, const char *xm, const char *ypath, const char *ym, Dataset *out,
                     DiagSink *d)
{
    IdxData x = { 0 }, y = { 0 };
    char xn[4200], yn[4200];
    snprintf(xn, sizeof xn, is_npz(xpath) && load == load_npy ? "%s:%s" : "%s", xpath, xm);
    snprintf(yn, sizeof yn, is_npz(ypath) && load == load_npy ? "%s:%s" : "%s", ypath, ym);
    int rc = -1;
    if (load(ypath, ym, &y, d) == 0 && load(xpath, xm, &x, d) == 0) rc = dataset_from_arrays(&x, xn, &y, yn, out, d);
    idx_free(&x);
    idx_free(&y);
    return rc;
}

/* ---- CSV ------------------------------------------------------------------------ */

void csv_classes_free(CsvClasses *c)
{
    for (int32_t i = 0; i < c->n; i++) gc_free(c->name[i]);
    gc_free(c->name);
    memset(c, 0, sizeof *c);
}

/* One line cut into fields (pointers into the line, NUL-terminated in place), each
 * with its 1-based byte column.  Fields may be double-quoted (no quote inside). */
typedef struct CsvLine {
    char **f;
    int *col;
    int n, cap;
} CsvLine;

static int csv_split(char *line, CsvLine *l, const char *path, int64_t lineno, DiagSink *d)
{
    l->n = 0;
    char *p = line;
    for (;;) {
        if (l->n == l->cap) {
            int cap = l->cap ? l->cap * 2 : 16;
            char **f = gc_realloc(l->f, (size_t)cap * sizeof *f);
            if (f) l->f = f;
            int *col = f ? gc_realloc(l->col, (size_t)cap * sizeof *col) : NULL;
            if (!col) {
                diag_plain(d, "%s:%" PRId64 ": out of memory", path, lineno);
                return -1;
            }
            l->col = col;
            l->cap = cap;
        }
        while (*p == ' ' || *p == '\t') p++;
        l->col[l->n] = (int)(p - line) + 1;
        if (*p == '"') {
            char *q = strchr(p + 1, '"');
            if (!q) {
                diag_plain(d, "%s:%" PRId64 ":%d: unclosed quote", path, lineno, (int)(p - line) + 1);
                return -1;
            }
            *q = 0;
            l->f[l->n++] = p + 1;
            p = q + 1;
            while (*p == ' ' || *p == '\t') p++;
            if (*p && *p != ',') {
                diag_plain(d, "%s:%" PRId64 ":%d: text after a quoted field", path, lineno, (int)(p - line) + 1);
                return -1;
            }
        } else {
            l->f[l->n++] = p;
            p += strcspn(p, ",");
        }
        if (*p != ',') {
            char *e = l->f[l->n - 1] + strlen(l->f[l->n - 1]);
            while (e > l->f[l->n - 1] && (e[-1] == ' ' || e[-1] == '\t')) *--e = 0;
            return 0;
        }
        *p++ = 0;
        char *e = p - 1;   /* trailing blanks of the field just cut */
        while (e > l->f[l->n - 1] && (e[-1] == ' ' || e[-1] == '\t')) *--e = 0;
    }
}

static bool csv_number(const char *s, double *v)
{
    if (!*s) return false;
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return *end == 0 && errno != ERANGE && isfinite(*v);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The next line of buf (NUL-terminated in place, '\r' dropped), or NULL at the end. */
static char *next_line(char **at, char *end)
{
    if (*at >= end) return NULL;
    char *line = *at, *nl = memchr(line, '\n', (size_t)(end - line));
    if (!nl) nl = end;
    *nl = 0;
    *at = nl + 1;
    if (nl > line && nl[-1] == '\r') nl[-1] = 0;
    return line;
}

static bool blank(const char *s)
{
    return s[strspn(s, " \t")] == 0;
}

/* The classes of a label column of names: the distinct names sorted. */
static int csv_names(char *buf, char *end, int label, const char *path, CsvClasses *out, DiagSink *d)
{
    CsvLine l = { 0 };
    int rc = -1;
    char *at = buf;
    next_line(&at, end);   /* the header */
    int64_t lineno = 1;
    for (char *line; (line = next_line(&at, end)); ) {
        lineno++;
        if (blank(line)) continue;
        if (csv_split(line, &l, path, lineno, d) != 0) goto done;
        if (label >= l.n) continue;   /* reported by the second pass */
        const char *name = l.f[label];
        bool known = false;
        for (int32_t i = 0; i < out->n && !known; i++) known = strcmp(out->name[i], name) == 0;
        if (known) continue;
        char **grown = gc_realloc(out->name, (size_t)(out->n + 1) * sizeof *grown);
        if (!grown || !(grown[out->n] = gc_strdup(name))) {
            if (grown) out->name = grown;
            diag_plain(d, "%s: out of memory for the class names", path);
            goto done;
        }
        out->name = grown;
        out->n++;
    }
    qsort(out->name, (size_t)out->n, sizeof *out->name, cmp_str);
    rc = 0;
done:
    gc_free(l.f);
    gc_free(l.col);
    if (rc) csv_classes_free(out);
    return rc;
}

/* The header's label column, or -1 reported (with the nearest name). */
static int csv_label_column(const CsvLine *h, const char *label, const char *path, DiagSink *d)
{
    for (int i = 0; i < h->n; i++)
        if (strcmp(h->f[i], label) == 0) return i;
    const char *near = suggest_nearest(label, (const char *const *)h->f, h->n);
    if (near) diag_plain(d, "%s:1: no column '%s' in the header; did you mean '%s'?", path, label, near);
    else diag_plain(d, "%s:1: no column '%s' in the header (its %d columns: '%s'%s)", path, label, h->n, h->f[0],
                    h->n > 1 ? ", ..." : "");
    return -1;
}

/* The rows of buf into out (allocated here): the label of each, then its features. */
static int csv_rows(char *buf, char *end, int ncols, int label, const CsvClasses *names, const char *path,
                    const CsvLine *head, Dataset *out, DiagSink *d)
{
    int64_t rows = 0;
    for (char *p = buf; p < end; p++) rows += *p == '\n';
    rows += end > buf && end[-1] != '\n';
    int64_t shape[1] = { ncols - 1 };
    if (ds_alloc(out, rows, shape, 1, path, NULL, "rows", d) != 0) return -1;
    CsvLine l = { 0 };
    char *at = buf;
    next_line(&at, end);
    int64_t lineno = 1, n = 0;
    int rc = -1;
    for (char *line; (line = next_line(&at, end)); ) {
        lineno++;
        if (blank(line)) continue;
        if (csv_split(line, &l, path, lineno, d) != 0) goto done;
        if (l.n != ncols) {
            diag_plain(d, "%s:%" PRId64 ": %d field%s, the header has %d", path, lineno, l.n, l.n == 1 ? "" : "s", ncols);
            goto done;
        }
        float *x = out->x + n * (ncols - 1);
        for (int c = 0, k = 0; c < ncols; c++) {
            double v;
            if (c == label && names && names->n) {
                char **hit = bsearch(&l.f[c], names->name, (size_t)names->n, sizeof *names->name, cmp_str);
                if (!hit) {
                    diag_plain(d, "%s:%" PRId64 ":%d: class '%s' in column '%s' is not one of the training set's %" PRId32,
                               path, lineno, l.col[c], l.f[c], head->f[c], names->n);
                    goto done;
                }
                out->y[n] = (int32_t)(hit - names->name);
                continue;
            }
            if (!csv_number(l.f[c], &v)) {
                if (*l.f[c])
                    diag_plain(d, "%s:%" PRId64 ":%d: '%.40s' in column '%s' is not a number", path, lineno, l.col[c],
                               l.f[c], head->f[c]);
                else
                    diag_plain(d, "%s:%" PRId64 ":%d: an empty field in column '%s'", path, lineno, l.col[c], head->f[c]);
                goto done;
            }
            if (c != label) {
                x[k++] = (float)v;
            } else if (v < 0 || v > INT32_MAX || v != floor(v)) {
                diag_plain(d, "%s:%" PRId64 ":%d: label %s in column '%s' is not a class number (an integer from 0)",
                           path, lineno, l.col[c], l.f[c], head->f[c]);
                goto done;
            } else {
                out->y[n] = (int32_t)v;
            }
        }
        n++;
    }
    if (n == 0) {
        diag_plain(d, "%s: no rows after the header", path);
        goto done;
    }
    out->count = n;
    rc = 0;
done:
    gc_free(l.f);
    gc_free(l.col);
    return rc;
}

int dataset_load_csv(const char *path, const char *label, const CsvClasses *classes, Dataset *out,
                     CsvClasses *classes_out, DiagSink *d)
{
    memset(out, 0, sizeof *out);
    if (classes_out) memset(classes_out, 0, sizeof *classes_out);
    uint8_t *raw;
    int64_t len;
    if (data_read_file(path, DATA_MAX_FILE, &raw, &len, d) != 0) return -1;
    char *buf = gc_realloc(raw, (size_t)len + 1);
    if (!buf) {
        gc_free(raw);
        diag_plain(d, "%s: out of memory", path);
        return -1;
    }
    buf[len] = 0;
    char *end = buf + len;
    if (memchr(buf, 0, (size_t)len)) {
        diag_plain(d, "%s: a NUL byte at offset %td: not a text file", path, (char *)memchr(buf, 0, (size_t)len) - buf);
        gc_free(buf);
        return -1;
    }
    /* the header, kept apart: the passes below cut the lines of buf in place */
    char *hl = gc_strndup(buf, strcspn(buf, "\n"));
    CsvLine head = { 0 };
    CsvClasses names = { 0 };
    int rc = -1, label_col;
    if (!hl) { diag_plain(d, "%s: out of memory", path); goto done; }
    if (hl[0] && hl[strlen(hl) - 1] == '\r') hl[strlen(hl) - 1] = 0;
    if (blank(hl)) {
        diag_plain(d, "%s:1: no header row (the column names)", path);
        goto done;
    }
    if (csv_split(hl, &head, path, 1, d) != 0 || (label_col = csv_label_column(&head, label, path, d)) < 0) goto done;
    if (head.n < 2) {
        diag_plain(d, "%s:1: only the label column: no features", path);
        goto done;
    }
    /* a label column of names: every value is not a number */
    bool named = classes && classes->n;
    if (!named) {
        char *copy = gc_malloc((size_t)len + 1);
        if (!copy) { diag_plain(d, "%s: out of memory", path); goto done; }
        memcpy(copy, buf, (size_t)len + 1);
        CsvLine l = { 0 };
        char *at = copy;
        DiagSink quiet;   /* errors are for the pass that reads the rows */
        diag_init(&quiet, NULL);
        next_line(&at, copy + len);
        for (char *line; !named && (line = next_line(&at, copy + len)); ) {
            double v;
            if (!blank(line) && csv_split(line, &l, path, 0, &quiet) == 0 && label_col < l.n &&
                !csv_number(l.f[label_col], &v))
                named = true;
        }
        diag_free(&quiet);
        gc_free(l.f);
        gc_free(l.col);
        if (named) {
            memcpy(copy, buf, (size_t)len + 1);
            if (csv_names(copy, copy + len, label_col, path, &names, d) != 0) { gc_free(copy); goto done; }
        }
        gc_free(copy);
    }
    if (csv_rows(buf, end, head.n, label_col, classes && classes->n ? classes : &names, path, &head, out, d) != 0) goto done;
    out->nclasses = names.n ? names.n : classes && classes->n ? classes->n : 0;
    if (!out->nclasses) ds_classes(out);
    if (classes_out) {
        *classes_out = names;
        memset(&names, 0, sizeof names);
    }
    rc = 0;
done:
    if (rc) dataset_free(out);
    csv_classes_free(&names);
    gc_free(head.f);
    gc_free(head.col);
    gc_free(hl);
    gc_free(buf);
    return rc;
}

/* ---- CIFAR-10 ------------------------------------------------------------------- */

enum { CIFAR_SIDE = 32, CIFAR_PIXELS = CIFAR_SIDE * CIFAR_SIDE, CIFAR_RECORD = 1 + 3 * CIFAR_PIXELS };

/* Appends the records of one batch file to out (grown). */
static int cifar_file(const char *path, Dataset *out, int64_t *cap, DiagSink *d)
{
    uint8_t *buf;
    int64_t len;
    if (data_read_file(path, DATA_MAX_FILE, &buf, &len, d) != 0) return -1;
    int rc = -1;
    if (len == 0 || len % CIFAR_RECORD) {
        if (len == 0) diag_plain(d, "%s: empty file: no records", path);
        else diag_plain(d, "%s: truncated: %" PRId64 " bytes is not a whole number of %d-byte records (1 label + 3072 "
                        "pixels); the last one has %" PRId64, path, len, CIFAR_RECORD, len % CIFAR_RECORD);
        goto done;
    }
    int64_t n = len / CIFAR_RECORD;
    if (out->count + n > *cap) {
        int64_t c = out->count + n;
        float *x = gc_realloc(out->x, (size_t)c * 3 * CIFAR_PIXELS * sizeof(float));
        if (x) out->x = x;
        int32_t *y = x ? gc_realloc(out->y, (size_t)c * sizeof(int32_t)) : NULL;
        if (!y) { diag_plain(d, "%s: out of memory for %" PRId64 " images", path, c); goto done; }
        out->y = y;
        *cap = c;
    }
    for (int64_t r = 0; r < n; r++) {
        const uint8_t *rec = buf + r * CIFAR_RECORD;
        if (rec[0] > 9) {
            diag_plain(d, "%s: record %" PRId64 " (byte offset %" PRId64 "): label %d is out of range 0..9", path, r,
                       r * CIFAR_RECORD, rec[0]);
            goto done;
        }
        int64_t i = out->count + r;
        out->y[i] = rec[0];
        float *x = out->x + i * 3 * CIFAR_PIXELS;
        for (int p = 0; p < CIFAR_PIXELS; p++)   /* planes (CHW) to pixels (HWC) */
            for (int c = 0; c < 3; c++) x[p * 3 + c] = (float)rec[1 + c * CIFAR_PIXELS + p] / 255.0f;
    }
    out->count += n;
    rc = 0;
done:
    gc_free(buf);
    return rc;
}

int dataset_load_cifar10(const char *dir, bool train, Dataset *out, DiagSink *d)
{
    memset(out, 0, sizeof *out);
    int64_t cap = 0;
    int nfiles = train ? 5 : 1;
    char *first = NULL;
    for (int k = 0; k < nfiles; k++) {
        char base[32];
        if (train) snprintf(base, sizeof base, "data_batch_%d.bin", k + 1);
        else snprintf(base, sizeof base, "test_batch.bin");
        char *path = join(dir, base, d);
        if (!path || cifar_file(path, out, &cap, d) != 0) {
            gc_free(path);
            gc_free(first);
            dataset_free(out);
            return -1;
        }
        if (!first) first = path;
        else gc_free(path);
    }
    out->name = first;
    out->item = "images";
    out->rank = 3;
    out->shape[0] = out->shape[1] = CIFAR_SIDE;
    out->shape[2] = 3;
    out->sample_size = 3 * CIFAR_PIXELS;
    out->nclasses = 10;
    return 0;
}

/* ---- a folder of images per class ------------------------------------------------ */

static void free_list(char **names, int n)
{
    for (int i = 0; i < n; i++) gc_free(names[i]);
    gc_free(names);
}

/* Whether dir/name is a folder (want_dirs) or a file ending in .png or .pgm. */
static bool wanted(const char *dir, const char *name, bool want_dirs)
{
    struct stat st;
    char *full = join(dir, name, NULL);
    bool ok = full && stat(full, &st) == 0;
    gc_free(full);
    if (!ok) return false;
    if (want_dirs) return S_ISDIR(st.st_mode);
    size_t len = strlen(name);
    return S_ISREG(st.st_mode) && len > 4 &&
           (strcasecmp(name + len - 4, ".png") == 0 || strcasecmp(name + len - 4, ".pgm") == 0);
}

/* The names in `dir` (sorted; hidden ones skipped) that are folders (want_dirs) or
 * files ending in .png or .pgm.  *n of them, or NULL reported (an empty list is not
 * NULL). */
static char **list_dir(const char *dir, bool want_dirs, int *n, DiagSink *d)
{
    *n = 0;
    DIR *dp = opendir(dir);
    if (!dp) {
        diag_plain(d, "%s: cannot open the folder: %s", dir, strerror(errno));
        return NULL;
    }
    char **names = NULL;
    int cap = 0;
    bool oom = false;
    for (struct dirent *e; !oom && (e = readdir(dp)); ) {
        if (e->d_name[0] == '.' || !wanted(dir, e->d_name, want_dirs)) continue;
        if (*n == cap) {
            char **g = gc_realloc(names, (size_t)(cap ? cap * 2 : 16) * sizeof *g);
            if (!g) { oom = true; break; }
            names = g;
            cap = cap ? cap * 2 : 16;
        }
        if (!(names[*n] = gc_strdup(e->d_name))) oom = true;
        else (*n)++;
    }
    closedir(dp);
    if (!oom && !names) oom = !(names = gc_malloc(sizeof *names));   /* empty, but not NULL */
    if (oom) {
        free_list(names, *n);
        diag_plain(d, "%s: out of memory listing the folder", dir);
        *n = 0;
        return NULL;
    }
    qsort(names, (size_t)*n, sizeof *names, cmp_str);
    return names;
}

int dataset_load_images(const char *dir, int64_t h, int64_t w, int64_t c, Dataset *out, DiagSink *d)
{
    memset(out, 0, sizeof *out);
    int nclass = 0, rc = -1;
    char **classes = list_dir(dir, true, &nclass, d);
    if (!classes) return -1;
    if (nclass == 0) {
        diag_plain(d, "%s: no class folders (images(dir) reads dir/CLASS/*.png, one folder per class)", dir);
        free_list(classes, nclass);
        return -1;
    }
    int64_t shape[3] = { h, w, c }, cap = 0;
    if (ds_alloc(out, 0, shape, 3, dir, NULL, "images", d) != 0) goto done;
    for (int k = 0; k < nclass; k++) {
        char *cdir = join(dir, classes[k], d);
        int nf = 0;
        char **files = cdir ? list_dir(cdir, false, &nf, d) : NULL;
        if (files && nf == 0) diag_plain(d, "%s: no PNG files in the class folder", cdir);
        bool ok = files && nf > 0;
        for (int i = 0; ok && i < nf; i++) {
            if (out->count == cap) {
                int64_t nc = cap ? cap * 2 : 64;
                float *x = gc_realloc(out->x, (size_t)(nc * out->sample_size) * sizeof(float));
                if (x) out->x = x;
                int32_t *y = x ? gc_realloc(out->y, (size_t)nc * sizeof(int32_t)) : NULL;
                if (!y) { diag_plain(d, "%s: out of memory for %" PRId64 " images", dir, nc); ok = false; break; }
                out->y = y;
                cap = nc;
            }
            char *file = join(cdir, files[i], d);
            ok = file && image_load(file, h, w, c, out->x + out->count * out->sample_size, d) == 0;
            gc_free(file);
            if (ok) out->y[out->count++] = k;
        }
        if (files) free_list(files, nf);
        gc_free(cdir);
        if (!ok) goto done;
    }
    out->nclasses = nclass;
    rc = 0;
done:
    if (rc) dataset_free(out);
    free_list(classes, nclass);
    return rc;
}

/* ---- text ----------------------------------------------------------------------- */

int dataset_text(const char *name, const uint8_t *text, int64_t from, int64_t to, int64_t context, int64_t stride,
                 Dataset *out, DiagSink *d)
{
    memset(out, 0, sizeof *out);
    int64_t n = to - from;
    if (context < 1 || stride < 1 || n < context + 1) {
        diag_plain(d, "%s: %" PRId64 " bytes, fewer than one window of context %" PRId64 " and the byte after it",
                   name, n, context);
        return -1;
    }
    out->text = gc_malloc((size_t)n);
    out->name = gc_strdup(name);
    if (!out->text || !out->name) {
        diag_plain(d, "%s: out of memory", name);
        dataset_free(out);
        return -1;
    }
    memcpy(out->text, text + from, (size_t)n);
    out->text_len = n;
    out->stride = stride;
    out->count = (n - context - 1) / stride + 1;
    out->rank = 1;
    out->shape[0] = context;
    out->sample_size = context;
    out->labels_per = context;
    out->nclasses = 256;
    out->item = "windows";
    return 0;
}

/* The training part (the first 1 - valid of the bytes, windows at every byte) or the
 * validation part (the rest, windows side by side: each byte predicted once). */
static int load_text(const char *path, int64_t context, double valid, Dataset *train, Dataset *test, bool need_train,
                     DiagSink *d)
{
    uint8_t *buf;
    int64_t len;
    if (data_read_file(path, DATA_MAX_FILE, &buf, &len, d) != 0) return -1;
    int64_t cut = len - (int64_t)floor((double)len * valid);
    char vname[4200];
    snprintf(vname, sizeof vname, "%s (its last %g%%, held out)", path, valid * 100);
    int rc = -1;
    if (len == 0) diag_plain(d, "%s: empty file", path);
    else if ((!need_train || dataset_text(path, buf, 0, cut, context, 1, train, d) == 0) &&
             dataset_text(vname, buf, cut, len, context, context, test, d) == 0)
        rc = 0;
    if (rc) dataset_free(train);
    gc_free(buf);
    return rc;
}

/* ---- a train block's source -------------------------------------------------- */

/* One set of the source whose examples are `path` (a file or folder) and whose labels
 * are `labels`; want gives the images' size. */
static int load_set(const TrainSpec *t, const DataWant *want, const char *path, const char *labels, bool train,
                    const CsvClasses *classes, CsvClasses *classes_out, Dataset *out, DiagSink *d)
{
    switch (t->data) {
    case DATA_IDX: return load_pair(load_idx, path, NULL, labels, NULL, out, d);
    case DATA_NPY:
        if (!labels && is_npz(path))
            return load_pair(load_npy, path, train ? "x" : "x_test", path, train ? "y" : "y_test", out, d);
        if (!labels) {
            diag_plain(d, "%s: npy() needs the labels too: y=\"labels.npy\" (or x=\"data.npz\" holding x and y)", path);
            return -1;
        }
        return load_pair(load_npy, path, "x", labels, "y", out, d);
    case DATA_CSV: return dataset_load_csv(path, t->data_args.label, classes, out, classes_out, d);
    case DATA_CIFAR10: return dataset_load_cifar10(path, train, out, d);
    case DATA_IMAGES:
        if (want->x_rank != 3 || (want->x_shape[2] != 1 && want->x_shape[2] != 3)) {
            diag_plain(d, "%s: images() feeds an input of shape [B, height, width, 1 or 3], but input '%s' is %s", path,
                       want->x_name, want->x_type);
            return -1;
        }
        return dataset_load_images(path, want->x_shape[0], want->x_shape[1], want->x_shape[2], out, d);
    default: diag_plain(d, "data source %d has no loader", (int)t->data); return -1;
    }
}

/* Sources with a file of examples and one of labels, or a test set of their own, or a
 * fraction held out. */
static int open_files(const TrainSpec *t, const DataWant *want, bool need_train, Dataset *train, Dataset *test,
                      DiagSink *d)
{
    const DataArgs *a = &t->data_args;
    CsvClasses classes = { 0 };
    const char *test_x = a->file[DFILE_TEST];
    bool own_test = test_x || t->data == DATA_CIFAR10 || (t->data == DATA_NPY && !a->file[DFILE_LABELS] &&
                                                         is_npz(t->data_path) && npz_has(t->data_path, "x_test"));
    if (t->data == DATA_NPY && !test_x) test_x = own_test ? t->data_path : NULL;
    if (t->data == DATA_CIFAR10) test_x = t->data_path;
    int rc = -1;
    if (own_test) {
        if ((need_train || t->data == DATA_CSV) &&
            load_set(t, want, t->data_path, a->file[DFILE_LABELS], true, NULL, &classes, train, d) != 0)
            goto done;
        if (!need_train) dataset_free(train);
        if (t->data == DATA_IDX && !a->file[DFILE_TEST_LABELS]) {
            diag_plain(d, "%s: idx() with test_images needs test_labels too", test_x);
            goto done;
        }
        if (load_set(t, want, test_x, a->file[DFILE_TEST_LABELS], false, &classes, NULL, test, d) != 0) goto done;
    } else {
        Dataset all;
        if (load_set(t, want, t->data_path, a->file[DFILE_LABELS], true, NULL, NULL, &all, d) != 0 ||
            dataset_split(&all, a->valid, train, test, d) != 0)
            goto done;
        if (!need_train) dataset_free(train);
    }
    rc = 0;
done:
    csv_classes_free(&classes);
    if (rc) {
        dataset_free(train);
        dataset_free(test);
    }
    return rc;
}

int data_source_open(const TrainSpec *t, const DataWant *want, bool need_train, Dataset *train, Dataset *test,
                     DiagSink *d)
{
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    int rc = -1;
    switch (t->data) {
    case DATA_MNIST:
        rc = (need_train && dataset_load_mnist(t->data_path, true, train, d) != 0) ||
             dataset_load_mnist(t->data_path, false, test, d) != 0 ? -1 : 0;
        break;
    case DATA_SYNTHETIC: {
        int32_t classes = want->nclasses > 0 ? want->nclasses : 10;
        int64_t ntest = t->synth_count / 4 > 0 ? t->synth_count / 4 : 1;
        rc = (need_train && dataset_synthetic(train, t->synth_count, want->x_shape, want->x_rank, classes, t->seed,
                                              true, d) != 0) ||
             dataset_synthetic(test, ntest, want->x_shape, want->x_rank, classes, t->seed, false, d) != 0 ? -1 : 0;
        break;
    }
    case DATA_TEXT:
        rc = load_text(t->data_path, t->data_args.context, t->data_args.valid, train, test, need_train, d);
        break;
    case DATA_IDX: case DATA_NPY: case DATA_CSV: case DATA_CIFAR10: case DATA_IMAGES:
        rc = open_files(t, want, need_train, train, test, d);
        break;
    default:
        diag_plain(d, "the model has no data source (a train block with data = ...)");
        break;
    }
    if (rc) {
        dataset_free(train);
        dataset_free(test);
    }
    return rc;
}
