#include "run/data.h"
#include "util/mem.h"
#include "util/rng.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

/* ---- IDX ----------------------------------------------------------------------- */

static const char *idx_type_name(int t)
{
    switch (t) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "unknown type";
    }
}

/* "60000x28x28" */
static void dims_str(char *out, size_t cap, const int64_t *dims, int rank)
{
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < rank && len < cap; i++) {
        int n = snprintf(out + len, cap - len, i ? "x%" PRId64 : "%" PRId64, dims[i]);
        if (n < 0) break;
        len += (size_t)n;
    }
}

/* zlib's description of the stream's error state; strerror when it was the OS. */
static const char *gz_message(gzFile gz, const char *path, int *errnum)
{
    int e = Z_OK;
    const char *msg = gzerror(gz, &e);
    if (errnum) *errnum = e;
    if (!msg || !*msg) return "unknown zlib error";
    /* zlib says "path: reason"; the caller names the path itself */
    size_t pl = strlen(path);
    if (strncmp(msg, path, pl) == 0 && msg[pl] == ':' && msg[pl + 1] == ' ') msg += pl + 2;
    return msg;
}

static void report_gz_error(gzFile gz, const char *path, DiagSink *d)
{
    int e;
    const char *msg = gz_message(gz, path, &e);
    if (e == Z_ERRNO) diag_plain(d, "%s: read error: %s", path, msg);
    else diag_plain(d, "%s: corrupt gzip stream: %s", path, msg);
}

/* Reads up to n bytes into buf.  Returns the count read (less than n only at the
 * end of the data), or -1 after reporting a read or decompression error. */
static int64_t gz_read_upto(gzFile gz, const char *path, void *buf, int64_t n, DiagSink *d)
{
    int64_t got = 0;
    while (got < n) {
        int64_t want = n - got;
        if (want > ((int64_t)1 << 30)) want = (int64_t)1 << 30;
        int r = gzread(gz, (unsigned char *)buf + got, (unsigned)want);
        if (r < 0) { report_gz_error(gz, path, d); return -1; }
        if (r == 0) break;
        got += r;
    }
    return got;
}

/* After a short read: was it a compressed stream cut short (rather than a plain end)? */
static bool gz_cut_short(gzFile gz)
{
    int e = Z_OK;
    gzerror(gz, &e);
    return e == Z_BUF_ERROR;
}

/* Reads up to n bytes into a buffer that grows as they arrive (*buf, to free), so that
 * a small file whose header declares gigabytes costs what it holds, not what it
 * declares.  Returns the count read, or -1 reported. */
static int64_t read_growing(gzFile gz, const char *path, uint8_t **buf, int64_t n, const char *amount, DiagSink *d)
{
    int64_t got = 0, cap = 0;
    *buf = NULL;
    while (got < n) {
        if (got == cap) {
            int64_t grown = cap ? (cap < n / 2 ? cap * 2 : n) : (n < ((int64_t)1 << 20) ? n : (int64_t)1 << 20);
            uint8_t *b = gc_realloc(*buf, (size_t)grown);
            if (!b) {
                diag_plain(d, "%s: out of memory for %s bytes of data", path, amount);
                return -1;
            }
            *buf = b;
            cap = grown;
        }
        int64_t r = gz_read_upto(gz, path, *buf + got, cap - got, d);
        if (r < 0) return -1;
        got += r;
        if (got < cap) break;   /* the end of the data */
    }
    return got;
}

int idx_load(const char *path, IdxData *out, DiagSink *d)
{
    memset(out, 0, sizeof *out);
    errno = 0;
    gzFile gz = gzopen(path, "rb");
    if (!gz) {
        diag_plain(d, "%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
        return -1;
    }
    gzbuffer(gz, 1u << 17);
    uint8_t *data = NULL;
    unsigned char head[4 + 4 * IDX_MAX_RANK];

    /* magic: two zero bytes, the type, the rank */
    int64_t got = gz_read_upto(gz, path, head, 4, d);
    if (got < 0) goto fail;
    if (got < 4) {
        diag_plain(d, "%s: truncated header: %s%" PRId64 " bytes, an IDX header starts with 4 "
                   "(magic, type, rank)", path, gz_cut_short(gz) ? "compressed stream ends after " : "file has ", got);
        goto fail;
    }
    if (head[0] != 0 || head[1] != 0) {
        diag_plain(d, "%s: bad magic: first two bytes are 0x%02x 0x%02x, an IDX file starts with 0x00 0x00%s",
                   path, head[0], head[1],
                   head[0] == 0x1f && head[1] == 0x8b ? " (this is gzip inside gzip)" : "");
        goto fail;
    }
    if (head[2] != 0x08) {
        diag_plain(d, "%s: unsupported data type 0x%02x (%s) in byte 3 of the header; only 0x08 "
                   "(unsigned byte) is supported", path, head[2], idx_type_name(head[2]));
        goto fail;
    }
    int rank = head[3];
    if (rank < 1 || rank > IDX_MAX_RANK) {
        diag_plain(d, "%s: unsupported rank %d in byte 4 of the header: must be 1 to %d",
                   path, rank, IDX_MAX_RANK);
        goto fail;
    }
    got = gz_read_upto(gz, path, head + 4, 4 * (int64_t)rank, d);
    if (got < 0) goto fail;
    if (got < 4 * rank) {
        diag_plain(d, "%s: truncated header: rank %d needs %d bytes of dimensions, %s%" PRId64,
                   path, rank, 4 * rank, gz_cut_short(gz) ? "compressed stream ends after " : "file has ", got);
        goto fail;
    }
    int64_t size = 1;
    bool overflow = false;
    for (int i = 0; i < rank; i++) {
        const unsigned char *p = head + 4 + 4 * i;
        out->dims[i] = (int64_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
        if (out->dims[i] == 0) {
            diag_plain(d, "%s: dimension %d of %d is 0", path, i + 1, rank);
            goto fail;
        }
        if (!overflow && !gc_mul_i64(size, out->dims[i], &size)) overflow = true;
    }
    char dstr[128], amount[160];   /* "60000x28x28", "60000x28x28 = 47040000" */
    dims_str(dstr, sizeof dstr, out->dims, rank);
    if (rank == 1) snprintf(amount, sizeof amount, "%s", dstr);
    else snprintf(amount, sizeof amount, "%s = %" PRId64, dstr, size);
    if (overflow) {
        diag_plain(d, "%s: dimensions %s: their product overflows", path, dstr);
        goto fail;
    }
    if (size > IDX_MAX_BYTES) {
        diag_plain(d, "%s: dimensions %s bytes of data, more than the %" PRId64 " GiB limit",
                   path, amount, IDX_MAX_BYTES >> 30);
        goto fail;
    }
    got = read_growing(gz, path, &data, size, amount, d);
    if (got < 0) goto fail;
    if (got < size) {
        diag_plain(d, "%s: truncated: header promises %s bytes of data, %s %" PRId64,
                   path, amount, gz_cut_short(gz) ? "compressed stream ends after" : "file has", got);
        goto fail;
    }
    /* Nothing may follow.  Reading on also makes zlib check the gzip trailer (CRC). */
    {
        unsigned char scratch[4096];
        int64_t extra = 0;
        const int64_t extra_cap = (int64_t)1 << 20;
        for (;;) {
            int64_t r = gz_read_upto(gz, path, scratch, sizeof scratch, d);
            if (r < 0) goto fail;
            extra += r;
            if (r < (int64_t)sizeof scratch || extra >= extra_cap) break;
        }
        if (extra > 0) {
            diag_plain(d, "%s: trailing data: %s%" PRId64 " bytes after the %s bytes of data the "
                       "header promises", path, extra >= extra_cap ? "at least " : "", extra, amount);
            goto fail;
        }
        if (gz_cut_short(gz)) {
            diag_plain(d, "%s: corrupt gzip stream: unexpected end of file after the data "
                       "(the gzip trailer is missing)", path);
            goto fail;
        }
    }
    gzclose(gz);
    out->rank = rank;
    out->size = size;
    out->data = data;
    return 0;

fail:
    gc_free(data);
    gzclose(gz);
    memset(out, 0, sizeof *out);
    return -1;
}

void idx_free(IdxData *idx)
{
    gc_free(idx->data);
    memset(idx, 0, sizeof *idx);
}

/* ---- datasets ------------------------------------------------------------------ */

void dataset_free(Dataset *ds)
{
    gc_free(ds->x);
    gc_free(ds->y);
    gc_free(ds->name);
    gc_free(ds->labels_name);
    memset(ds, 0, sizeof *ds);
}

/* "dir/base.gz" when it exists, else "dir/base" when that does, else NULL reported. */
static char *find_file(const char *dir, const char *base, DiagSink *d)
{
    if (!dir || !*dir) dir = ".";
    size_t dl = strlen(dir);
    const char *sep = dir[dl - 1] == '/' ? "" : "/";
    size_t need = dl + strlen(base) + 5;
    char *gzp = gc_malloc(need), *plain = gc_malloc(need);
    if (!gzp || !plain) {
        gc_free(gzp);
        gc_free(plain);
        diag_plain(d, "%s%s%s: out of memory", dir, sep, base);
        return NULL;
    }
    snprintf(gzp, need, "%s%s%s.gz", dir, sep, base);
    snprintf(plain, need, "%s%s%s", dir, sep, base);
    struct stat st;
    if (stat(gzp, &st) == 0) { gc_free(plain); return gzp; }
    int gz_errno = errno;
    if (stat(plain, &st) == 0) { gc_free(gzp); return plain; }
    if (gz_errno == ENOENT && errno != ENOENT)   /* the plain one is there, but broken */
        diag_plain(d, "%s: cannot open: %s", plain, strerror(errno));
    else
        diag_plain(d, "%s: cannot open: %s (nor %s)", gzp, strerror(gz_errno), plain);
    gc_free(gzp);
    gc_free(plain);
    return NULL;
}

int dataset_load_mnist(const char *dir, bool train, Dataset *out, DiagSink *d)
{
    memset(out, 0, sizeof *out);
    const char *set = train ? "train" : "t10k";
    char ibase[64], lbase[64];
    snprintf(ibase, sizeof ibase, "%s-images-idx3-ubyte", set);
    snprintf(lbase, sizeof lbase, "%s-labels-idx1-ubyte", set);
    char *ipath = NULL, *lpath = NULL;
    IdxData im = {0}, lb = {0};
    int rc = -1;

    ipath = find_file(dir, ibase, d);
    if (!ipath) goto done;
    lpath = find_file(dir, lbase, d);
    if (!lpath) goto done;

    if (idx_load(lpath, &lb, d)) goto done;
    if (lb.rank != 1) {
        diag_plain(d, "%s: labels must have rank 1 (count), found rank %d", lpath, lb.rank);
        goto done;
    }
    for (int64_t i = 0; i < lb.size; i++) {
        if (lb.data[i] > 9) {
            diag_plain(d, "%s: label %d at index %" PRId64 " is out of range 0..9", lpath, lb.data[i], i);
            goto done;
        }
    }
    if (idx_load(ipath, &im, d)) goto done;
    if (im.rank != 3) {
        diag_plain(d, "%s: images must have rank 3 (count, rows, cols), found rank %d", ipath, im.rank);
        goto done;
    }
    if (im.dims[0] != lb.dims[0]) {
        diag_plain(d, "%s: image/label count mismatch: %" PRId64 " images, but %s has %" PRId64 " labels",
                   ipath, im.dims[0], lpath, lb.dims[0]);
        goto done;
    }
    int64_t count = im.dims[0], rows = im.dims[1], cols = im.dims[2];
    size_t bytes;
    /* im.size <= IDX_MAX_BYTES, so the products below fit; checked all the same */
    if (!gc_mul_size((size_t)im.size, sizeof(float), &bytes) || !(out->x = gc_malloc(bytes)) ||
        !(out->y = gc_calloc((size_t)count, sizeof(int32_t)))) {
        diag_plain(d, "%s: out of memory for %" PRId64 " images as floats", ipath, count);
        goto done;
    }
    out->name = ipath;
    out->labels_name = lpath;
    ipath = lpath = NULL;
    out->item = "images";
    float scale[256];
    for (int v = 0; v < 256; v++) scale[v] = (float)v / 255.0f;
    for (int64_t i = 0; i < im.size; i++) out->x[i] = scale[im.data[i]];
    for (int64_t i = 0; i < count; i++) out->y[i] = lb.data[i];
    out->count = count;
    out->rank = 3;
    out->shape[0] = rows;
    out->shape[1] = cols;
    out->shape[2] = 1;
    out->sample_size = rows * cols;
    out->nclasses = 10;
    rc = 0;

done:
    if (rc) dataset_free(out);
    idx_free(&im);
    idx_free(&lb);
    gc_free(ipath);
    gc_free(lpath);
    return rc;
}

/* Keys that separate the synthetic data's random streams from each other. */
#define SYN_KEY_LABEL 0x6c6162656c730001ull
#define SYN_KEY_PROTO 0x70726f746f740002ull
#define SYN_KEY_NOISE 0x6e6f697365730003ull
#define SYN_KEY_TEST_LABEL 0x7465737463730004ull   /* the test set's labels and noise */
#define SYN_KEY_TEST_NOISE 0x746573746e730005ull
#define SYN_NOISE 0.3f   /* noise is uniform in [-SYN_NOISE/2, SYN_NOISE/2) */

int dataset_synthetic(Dataset *out, int64_t count, const int64_t *shape, int rank,
                      int32_t nclasses, uint64_t seed, bool train, DiagSink *d)
{
    memset(out, 0, sizeof *out);
    if (count < 1) {
        diag_plain(d, "synthetic dataset: count %" PRId64 " must be at least 1", count);
        return -1;
    }
    if (rank < 1 || rank > 4 || !shape) {
        diag_plain(d, "synthetic dataset: rank %d of the sample shape must be 1 to 4", rank);
        return -1;
    }
    if (nclasses < 1) {
        diag_plain(d, "synthetic dataset: nclasses %" PRId32 " must be at least 1", nclasses);
        return -1;
    }
    int64_t ss = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 1) {
            diag_plain(d, "synthetic dataset: dimension %d of the sample shape is %" PRId64
                       ", must be at least 1", i + 1, shape[i]);
            return -1;
        }
        if (!gc_mul_i64(ss, shape[i], &ss)) {
            diag_plain(d, "synthetic dataset: the sample shape's element count overflows");
            return -1;
        }
    }
    int64_t total;
    size_t bytes;
    if (!gc_mul_i64(count, ss, &total) || (uint64_t)total > SIZE_MAX ||
        !gc_mul_size((size_t)total, sizeof(float), &bytes)) {
        diag_plain(d, "synthetic dataset: %" PRId64 " samples of %" PRId64 " floats: size overflows", count, ss);
        return -1;
    }
    out->x = gc_malloc(bytes);
    out->y = gc_calloc((size_t)count, sizeof(int32_t));
    out->name = gc_strdup("synthetic data");
    if (!out->x || !out->y || !out->name) {
        dataset_free(out);
        diag_plain(d, "synthetic dataset: out of memory for %" PRId64 " samples of %" PRId64 " floats", count, ss);
        return -1;
    }
    /* the prototypes' key is the same for both sets, the samples' keys are not */
    uint64_t label_key = seed ^ (train ? SYN_KEY_LABEL : SYN_KEY_TEST_LABEL);
    uint64_t noise_key = seed ^ (train ? SYN_KEY_NOISE : SYN_KEY_TEST_NOISE);
    for (int64_t i = 0; i < count; i++) {
        int32_t c = (int32_t)rng_below(rng_at(label_key, 0, (uint64_t)i), (uint64_t)nclasses);
        out->y[i] = c;
        float *xi = out->x + i * ss;
        for (int64_t j = 0; j < ss; j++) {
            float proto = rng_unit(rng_at(seed ^ SYN_KEY_PROTO, (uint64_t)c, (uint64_t)j));
            float noise = (rng_unit(rng_at(noise_key, (uint64_t)i, (uint64_t)j)) - 0.5f) * SYN_NOISE;
            float v = proto + noise;
            xi[j] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
        }
    }
    out->count = count;
    out->rank = rank;
    for (int i = 0; i < rank; i++) out->shape[i] = shape[i];
    out->sample_size = ss;
    out->nclasses = nclasses;
    out->item = "examples";
    return 0;
}

/* ---- checking a set against the model ------------------------------------------ */

/* dims without their 1s, into out; returns how many are left. */
static int squeeze(const int64_t *dims, int rank, int64_t *out)
{
    int n = 0;
    for (int i = 0; i < rank; i++)
        if (dims[i] != 1) out[n++] = dims[i];
    return n;
}

/* Whether examples of shape a fill an input of shape b row by row as they should. */
static bool same_layout(const int64_t *a, int ra, const int64_t *b, int rb)
{
    int64_t sa[4], sb[4], na = 1, nb = 1;
    if (ra < 0 || ra > 4 || rb < 0 || rb > 4) return false;
    int qa = squeeze(a, ra, sa), qb = squeeze(b, rb, sb);
    for (int i = 0; i < ra; i++)
        if (!gc_mul_i64(na, a[i], &na)) return false;
    for (int i = 0; i < rb; i++)
        if (!gc_mul_i64(nb, b[i], &nb)) return false;
    if (na != nb) return false;
    if (qa <= 1 || qb <= 1) return true;   /* one flat row: nothing to misalign */
    return qa == qb && memcmp(sa, sb, (size_t)qa * sizeof *sa) == 0;
}

int dataset_check(const Dataset *ds, const DataWant *want, DiagSink *d)
{
    const char *xs = ds->name ? ds->name : "data set";
    const char *ys = ds->labels_name ? ds->labels_name : xs;
    const char *item = ds->item ? ds->item : "examples";
    if (!same_layout(ds->shape, ds->rank, want->x_shape, want->x_rank)) {
        char have[128], take[128];
        dims_str(have, sizeof have, ds->shape, ds->rank);
        dims_str(take, sizeof take, want->x_shape, want->x_rank);
        diag_plain(d, "%s: %s are %s, but input '%s' %s takes %s", xs, item, have, want->x_name, want->x_type, take);
        return -1;
    }
    if (want->y_per_example != 1) {
        diag_plain(d, "%s: one label per example, but input '%s' %s takes %" PRId64 " per example", ys,
                   want->y_name, want->y_type, want->y_per_example);
        return -1;
    }
    int32_t classes = want->nclasses > 0 ? want->nclasses : ds->nclasses;
    for (int64_t i = 0; i < ds->count; i++) {
        if (ds->y[i] >= 0 && ds->y[i] < classes) continue;
        if (want->nclasses > 0)
            diag_plain(d, "%s: label %" PRId32 " at index %" PRId64 " is out of range for the model's %" PRId32
                       " classes (%s)", ys, ds->y[i], i, classes, want->classes_from);
        else
            diag_plain(d, "%s: label %" PRId32 " at index %" PRId64 " is out of range 0..%" PRId32, ys, ds->y[i], i,
                       classes - 1);
        return -1;
    }
    return 0;
}

/* ---- batches ------------------------------------------------------------------- */

int64_t dataset_batches_per_pass(const Dataset *ds, int64_t batch)
{
    if (batch <= 0 || ds->count <= 0) return 0;
    return ds->count / batch;
}

static void copy_sample(const Dataset *ds, int64_t from, int64_t to, float *x, int32_t *y)
{
    if (x) memcpy(x + to * ds->sample_size, ds->x + from * ds->sample_size,
                  (size_t)ds->sample_size * sizeof(float));
    if (y) y[to] = ds->y[from];
}

void dataset_batch_rows(const Dataset *ds, int64_t batch, int64_t step, bool shuffle, uint64_t seed, int64_t row0,
                        int64_t nrows, float *x, int32_t *y, int64_t *perm_cache, int64_t *perm_cache_pass)
{
    int64_t bpp = dataset_batches_per_pass(ds, batch);
    if (bpp <= 0 || step < 0 || row0 < 0 || nrows < 0 || row0 > batch - nrows) return;
    int64_t pass = step / bpp, first = (step % bpp) * batch + row0;
    if (!shuffle) {
        for (int64_t k = 0; k < nrows; k++) copy_sample(ds, first + k, k, x, y);
        return;
    }
    if (!perm_cache || !perm_cache_pass) return;
    if (*perm_cache_pass != pass) {
        int64_t n = ds->count;
        for (int64_t i = 0; i < n; i++) perm_cache[i] = i;
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)rng_below(rng_at(seed, (uint64_t)pass, (uint64_t)i), (uint64_t)i + 1);
            int64_t t = perm_cache[i];
            perm_cache[i] = perm_cache[j];
            perm_cache[j] = t;
        }
        *perm_cache_pass = pass;
    }
    for (int64_t k = 0; k < nrows; k++) copy_sample(ds, perm_cache[first + k], k, x, y);
}

void dataset_batch(const Dataset *ds, int64_t batch, int64_t step, bool shuffle, uint64_t seed,
                   float *x, int32_t *y, int64_t *perm_cache, int64_t *perm_cache_pass)
{
    dataset_batch_rows(ds, batch, step, shuffle, seed, 0, batch, x, y, perm_cache, perm_cache_pass);
}

void dataset_slice(const Dataset *ds, int64_t first, int64_t n, float *x, int32_t *y)
{
    if (first < 0 || first >= ds->count || n <= 0) return;
    if (n > ds->count - first) n = ds->count - first;
    for (int64_t k = 0; k < n; k++) copy_sample(ds, first + k, k, x, y);
}
