/* Datasets: the real MNIST, IDX errors (each message names the file and the field),
 * the batch stream (permutations, determinism, resume) and synthetic data. */
#include "graph/lower.h"
#include "run/data.h"
#include "run/train.h"
#include "util/mem.h"
#include "util/rng.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

Suite *make_data_suite(void);

/* ---- helpers -------------------------------------------------------------------- */

static const char *mnist_dir(void)
{
    static char dir[4096];
    const char *top = getenv("top_srcdir");
    snprintf(dir, sizeof dir, "%s/data/mnist", top && *top ? top : ".");
    return dir;
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static void write_gz(const char *path, const void *p, size_t n)
{
    gzFile g = gzopen(path, "wb");
    ck_assert_ptr_nonnull(g);
    if (n) ck_assert_int_eq(gzwrite(g, p, (unsigned)n), (int)n);
    ck_assert_int_eq(gzclose(g), Z_OK);
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static unsigned char buf[1 << 16];
    *n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return buf;
}

/* A fresh temporary file name (the file exists, empty). */
static char *tmp_file(void)
{
    char *p = strdup("/tmp/graphc-test-idx-XXXXXX");
    int fd = mkstemp(p);
    ck_assert_int_ge(fd, 0);
    close(fd);
    return p;
}

/* Appends an IDX header of unsigned bytes (or the given type) to buf; returns its length. */
static size_t idx_header(unsigned char *buf, int type, int rank, const uint32_t *dims)
{
    size_t n = 0;
    buf[n++] = 0;
    buf[n++] = 0;
    buf[n++] = (unsigned char)type;
    buf[n++] = (unsigned char)rank;
    for (int i = 0; i < rank; i++) {
        buf[n++] = (unsigned char)(dims[i] >> 24);
        buf[n++] = (unsigned char)(dims[i] >> 16);
        buf[n++] = (unsigned char)(dims[i] >> 8);
        buf[n++] = (unsigned char)dims[i];
    }
    return n;
}

/* idx_load must fail on path with a message naming it and containing each phrase. */
static void expect_idx_error(const char *path, const char *phrase1, const char *phrase2)
{
    DiagSink d;
    diag_init(&d, NULL);
    IdxData idx;
    memset(&idx, 0x55, sizeof idx);
    int rc = idx_load(path, &idx, &d);
    ck_assert_int_ne(rc, 0);
    ck_assert_ptr_null(idx.data);
    ck_assert_int_eq(d.nerrors, 1);
    ck_assert_ptr_nonnull(d.buf);
    ck_assert_msg(strstr(d.buf, path), "message does not name %s: %s", path, d.buf);
    ck_assert_msg(strstr(d.buf, phrase1), "message lacks '%s': %s", phrase1, d.buf);
    if (phrase2) ck_assert_msg(strstr(d.buf, phrase2), "message lacks '%s': %s", phrase2, d.buf);
    diag_free(&d);
}

/* Writes an IDX file (plain or gzip) and expects idx_load to reject it. */
static void check_bad(const unsigned char *bytes, size_t n, bool gz, const char *phrase1, const char *phrase2)
{
    char *path = tmp_file();
    if (gz) write_gz(path, bytes, n);
    else write_bytes(path, bytes, n);
    expect_idx_error(path, phrase1, phrase2);
    unlink(path);
    free(path);
}

/* ---- the real MNIST --------------------------------------------------------------
 * Expected values computed once from data/mnist with Python:
 *   python3 -c "import gzip; L=gzip.open('train-labels-idx1-ubyte.gz').read()[8:];
 *     P=gzip.open('train-images-idx3-ubyte.gz').read()[16:];
 *     print(list(L[:10]), sum(L), [L.count(i) for i in range(10)], sum(P), sum(P[:784]), sum(P[-784:]))"
 * (and the same for t10k-*); the uncompressed md5s matched data/mnist/README.md. */

static void check_mnist(const Dataset *ds, int64_t count, const int *first10, int64_t label_sum,
                        const int64_t *hist, int64_t pixel_sum, int64_t first_img, int64_t last_img)
{
    ck_assert_int_eq(ds->count, count);
    ck_assert_int_eq(ds->rank, 3);
    ck_assert_int_eq(ds->shape[0], 28);
    ck_assert_int_eq(ds->shape[1], 28);
    ck_assert_int_eq(ds->shape[2], 1);
    ck_assert_int_eq(ds->sample_size, 784);
    ck_assert_int_eq(ds->nclasses, 10);
    ck_assert_ptr_nonnull(ds->name);
    for (int i = 0; i < 10; i++) ck_assert_int_eq(ds->y[i], first10[i]);
    /* (no ck_assert inside the loops: each passing one is a message to the parent) */
    int64_t ls = 0, h[10] = {0}, bad = 0;
    for (int64_t i = 0; i < count; i++) {
        if (ds->y[i] < 0 || ds->y[i] > 9) { bad++; continue; }
        ls += ds->y[i];
        h[ds->y[i]]++;
    }
    ck_assert_int_eq(bad, 0);
    ck_assert_int_eq(ls, label_sum);
    for (int c = 0; c < 10; c++) ck_assert_int_eq(h[c], hist[c]);
    int64_t ps = 0, fs = 0, lsum = 0;
    float mn = 1, mx = 0;
    for (int64_t i = 0; i < count * 784; i++) {
        float v = ds->x[i];
        if (v < mn) mn = v;
        if (v > mx) mx = v;
        long b = lrintf(v * 255.0f);
        if (v != (float)b / 255.0f) bad++;   /* exactly a byte / 255 */
        ps += b;
        if (i < 784) fs += b;
        if (i >= (count - 1) * 784) lsum += b;
    }
    ck_assert_int_eq(bad, 0);
    ck_assert(mn == 0.0f);
    ck_assert(mx == 1.0f);
    ck_assert_int_eq(ps, pixel_sum);
    ck_assert_int_eq(fs, first_img);
    ck_assert_int_eq(lsum, last_img);
}

START_TEST(test_mnist_train)
{
    DiagSink d;
    diag_init(&d, NULL);
    Dataset ds;
    int rc = dataset_load_mnist(mnist_dir(), true, &ds, &d);
    ck_assert_msg(rc == 0, "loading MNIST from %s: %s", mnist_dir(), d.buf ? d.buf : "");
    static const int first[10] = {5, 0, 4, 1, 9, 2, 1, 3, 1, 4};
    static const int64_t hist[10] = {5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949};
    check_mnist(&ds, 60000, first, 267236, hist, 1567298545, 27525, 20920);
    ck_assert_str_eq(strrchr(ds.name, '/'), "/train-images-idx3-ubyte.gz");
    ck_assert_str_eq(strrchr(ds.labels_name, '/'), "/train-labels-idx1-ubyte.gz");
    dataset_free(&ds);
    dataset_free(&ds);   /* twice is harmless */
    diag_free(&d);
}
END_TEST

START_TEST(test_mnist_test)
{
    DiagSink d;
    diag_init(&d, NULL);
    Dataset ds;
    int rc = dataset_load_mnist(mnist_dir(), false, &ds, &d);
    ck_assert_msg(rc == 0, "loading MNIST from %s: %s", mnist_dir(), d.buf ? d.buf : "");
    static const int first[10] = {7, 2, 1, 0, 4, 1, 4, 9, 5, 9};
    static const int64_t hist[10] = {980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009};
    check_mnist(&ds, 10000, first, 44434, hist, 264923200, 18454, 41833);
    ck_assert_str_eq(strrchr(ds.name, '/'), "/t10k-images-idx3-ubyte.gz");
    ck_assert_str_eq(strrchr(ds.labels_name, '/'), "/t10k-labels-idx1-ubyte.gz");
    dataset_free(&ds);
    diag_free(&d);
}
END_TEST

/* The real gzip file read by idx_load directly: header fields. */
START_TEST(test_idx_real_header)
{
    DiagSink d;
    diag_init(&d, NULL);
    char path[4200];
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte.gz", mnist_dir());
    IdxData idx;
    ck_assert_int_eq(idx_load(path, &idx, &d), 0);
    ck_assert_int_eq(idx.rank, 3);
    ck_assert_int_eq(idx.dims[0], 10000);
    ck_assert_int_eq(idx.dims[1], 28);
    ck_assert_int_eq(idx.dims[2], 28);
    ck_assert_int_eq(idx.size, 7840000);
    idx_free(&idx);
    ck_assert_ptr_null(idx.data);
    diag_free(&d);
}
END_TEST

/* ---- small MNIST-shaped folders ------------------------------------------------- */

typedef struct TmpDir {
    char path[64];
    char files[4][128];
    int nfiles;
} TmpDir;

static void tmpdir_make(TmpDir *t)
{
    strcpy(t->path, "/tmp/graphc-test-mnist-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(t->path));
    t->nfiles = 0;
}

static const char *tmpdir_file(TmpDir *t, const char *name)
{
    ck_assert_int_lt(t->nfiles, 4);
    char dir[sizeof t->path];
    memcpy(dir, t->path, sizeof dir);
    char *f = t->files[t->nfiles++];
    snprintf(f, 128, "%s/%s", dir, name);
    return f;
}

static void tmpdir_remove(TmpDir *t)
{
    for (int i = 0; i < t->nfiles; i++) unlink(t->files[i]);
    ck_assert_int_eq(rmdir(t->path), 0);
}

/* count images of rows x cols (pixel i of image k = 10*k + i). */
static void write_images_sized(const char *path, uint32_t count, uint32_t rows, uint32_t cols, bool gz)
{
    unsigned char *buf = malloc(16 + (size_t)count * rows * cols);
    ck_assert_ptr_nonnull(buf);
    uint32_t dims[3] = {count, rows, cols};
    size_t n = idx_header(buf, 0x08, 3, dims);
    for (uint32_t k = 0; k < count; k++)
        for (uint32_t i = 0; i < rows * cols; i++) buf[n++] = (unsigned char)(10 * k + i);
    if (gz) write_gz(path, buf, n);
    else write_bytes(path, buf, n);
    free(buf);
}

/* count images of 2x3 and count labels. */
static void write_images(const char *path, uint32_t count, bool gz)
{
    write_images_sized(path, count, 2, 3, gz);
}

static void write_labels(const char *path, const unsigned char *labels, uint32_t count, bool gz)
{
    unsigned char buf[4096];
    size_t n = idx_header(buf, 0x08, 1, &count);
    memcpy(buf + n, labels, count);
    n += count;
    if (gz) write_gz(path, buf, n);
    else write_bytes(path, buf, n);
}

static void expect_mnist_error(const char *dir, bool train, const char *name, const char *phrase1,
                               const char *phrase2)
{
    DiagSink d;
    diag_init(&d, NULL);
    Dataset ds;
    memset(&ds, 0x55, sizeof ds);
    ck_assert_int_ne(dataset_load_mnist(dir, train, &ds, &d), 0);
    ck_assert_ptr_null(ds.x);
    ck_assert_ptr_null(ds.y);
    ck_assert_ptr_null(ds.name);
    ck_assert_int_eq(ds.count, 0);
    ck_assert_ptr_nonnull(d.buf);
    ck_assert_msg(strstr(d.buf, name), "message does not name %s: %s", name, d.buf);
    ck_assert_msg(strstr(d.buf, phrase1), "message lacks '%s': %s", phrase1, d.buf);
    if (phrase2) ck_assert_msg(strstr(d.buf, phrase2), "message lacks '%s': %s", phrase2, d.buf);
    diag_free(&d);
}

/* Uncompressed files are found when there is no .gz, and scaled by 1/255. */
START_TEST(test_mnist_plain_small)
{
    TmpDir t;
    tmpdir_make(&t);
    static const unsigned char labels[3] = {3, 0, 9};
    write_images(tmpdir_file(&t, "t10k-images-idx3-ubyte"), 3, false);
    write_labels(tmpdir_file(&t, "t10k-labels-idx1-ubyte"), labels, 3, false);
    DiagSink d;
    diag_init(&d, NULL);
    Dataset ds;
    ck_assert_int_eq(dataset_load_mnist(t.path, false, &ds, &d), 0);
    ck_assert_int_eq(ds.count, 3);
    ck_assert_int_eq(ds.shape[0], 2);
    ck_assert_int_eq(ds.shape[1], 3);
    ck_assert_int_eq(ds.shape[2], 1);
    ck_assert_int_eq(ds.sample_size, 6);
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(ds.y[k], labels[k]);
        for (int i = 0; i < 6; i++) ck_assert(ds.x[k * 6 + i] == (float)(10 * k + i) / 255.0f);
    }
    dataset_free(&ds);
    /* the training pair is absent: the error names the .gz it looked for first */
    char want[128];
    snprintf(want, sizeof want, "%s/train-images-idx3-ubyte.gz", t.path);
    expect_mnist_error(t.path, true, want, "No such file", "train-images-idx3-ubyte)");
    diag_free(&d);
    tmpdir_remove(&t);
}
END_TEST

/* The .gz name is preferred over a (here broken) uncompressed file. */
START_TEST(test_mnist_prefers_gz)
{
    TmpDir t;
    tmpdir_make(&t);
    static const unsigned char labels[4] = {1, 2, 3, 4};
    write_images(tmpdir_file(&t, "train-images-idx3-ubyte.gz"), 4, true);
    write_labels(tmpdir_file(&t, "train-labels-idx1-ubyte.gz"), labels, 4, true);
    write_bytes(tmpdir_file(&t, "train-images-idx3-ubyte"), "junk", 4);
    write_bytes(tmpdir_file(&t, "train-labels-idx1-ubyte"), "junk", 4);
    DiagSink d;
    diag_init(&d, NULL);
    Dataset ds;
    ck_assert_int_eq(dataset_load_mnist(t.path, true, &ds, &d), 0);
    ck_assert_int_eq(ds.count, 4);
    ck_assert_int_eq(ds.y[3], 4);
    ck_assert(ds.x[3 * 6 + 5] == 35.0f / 255.0f);
    dataset_free(&ds);
    diag_free(&d);
    tmpdir_remove(&t);
}
END_TEST

START_TEST(test_mnist_label_out_of_range)
{
    TmpDir t;
    tmpdir_make(&t);
    static const unsigned char labels[4] = {1, 2, 12, 4};
    write_images(tmpdir_file(&t, "train-images-idx3-ubyte"), 4, false);
    const char *lp = tmpdir_file(&t, "train-labels-idx1-ubyte.gz");
    write_labels(lp, labels, 4, true);
    expect_mnist_error(t.path, true, lp, "label 12 at index 2", "out of range 0..9");
    tmpdir_remove(&t);
}
END_TEST

START_TEST(test_mnist_count_mismatch)
{
    TmpDir t;
    tmpdir_make(&t);
    static const unsigned char labels[5] = {1, 2, 3, 4, 5};
    const char *ip = tmpdir_file(&t, "train-images-idx3-ubyte");
    write_images(ip, 4, false);
    const char *lp = tmpdir_file(&t, "train-labels-idx1-ubyte");
    write_labels(lp, labels, 5, false);
    expect_mnist_error(t.path, true, ip, "count mismatch: 4 images", "5 labels");
    expect_mnist_error(t.path, true, lp, "count mismatch", NULL);
    tmpdir_remove(&t);
}
END_TEST

START_TEST(test_mnist_wrong_ranks)
{
    TmpDir t;
    tmpdir_make(&t);
    unsigned char buf[64];
    uint32_t dims[2] = {2, 6};
    const char *ip = tmpdir_file(&t, "train-images-idx3-ubyte");
    size_t n = idx_header(buf, 0x08, 2, dims);
    memset(buf + n, 7, 12);
    write_bytes(ip, buf, n + 12);
    const char *lp = tmpdir_file(&t, "train-labels-idx1-ubyte");
    static const unsigned char labels[2] = {1, 2};
    write_labels(lp, labels, 2, false);
    expect_mnist_error(t.path, true, ip, "images must have rank 3", "found rank 2");
    /* labels of rank 2 */
    uint32_t ld[2] = {2, 1};
    n = idx_header(buf, 0x08, 2, ld);
    buf[n++] = 1;
    buf[n++] = 2;
    write_bytes(lp, buf, n);
    expect_mnist_error(t.path, true, lp, "labels must have rank 1", "found rank 2");
    tmpdir_remove(&t);
}
END_TEST

START_TEST(test_mnist_missing_dir)
{
    expect_mnist_error("/nonexistent/graphc-mnist", false, "/nonexistent/graphc-mnist/t10k-images-idx3-ubyte.gz",
                       "cannot open", "No such file or directory");
    /* no .gz, and the plain file a symlink to itself: its own error, not the .gz's */
    TmpDir t;
    tmpdir_make(&t);
    write_images(tmpdir_file(&t, "t10k-images-idx3-ubyte"), 2, false);
    const char *lp = tmpdir_file(&t, "t10k-labels-idx1-ubyte");
    ck_assert_int_eq(symlink("t10k-labels-idx1-ubyte", lp), 0);
    char want[160];
    snprintf(want, sizeof want, "%s: cannot open: Too many levels of symbolic links", lp);
    expect_mnist_error(t.path, false, want, "cannot open", NULL);
    tmpdir_remove(&t);
}
END_TEST

/* ---- IDX format errors ------------------------------------------------------------ */

START_TEST(test_idx_truncated_header)
{
    static const unsigned char two[2] = {0, 0};
    check_bad(two, 2, false, "truncated header", "file has 2 bytes");
    check_bad(two, 0, false, "truncated header", "file has 0 bytes");
    check_bad(two, 2, true, "truncated header", NULL);
    /* the rank promises 3 dimensions, the file has 1 */
    unsigned char buf[16];
    uint32_t dims[1] = {10};
    size_t n = idx_header(buf, 0x08, 1, dims);
    buf[3] = 3;
    check_bad(buf, n, false, "truncated header", "rank 3 needs 12 bytes of dimensions");
}
END_TEST

START_TEST(test_idx_truncated_data)
{
    unsigned char buf[64];
    uint32_t dims[3] = {10, 2, 2};
    size_t n = idx_header(buf, 0x08, 3, dims);
    memset(buf + n, 1, 7);
    check_bad(buf, n + 7, false, "truncated: header promises 10x2x2 = 40 bytes of data", "file has 7");
    check_bad(buf, n + 7, true, "truncated: header promises 10x2x2 = 40 bytes of data", "file has 7");
    uint32_t labels[1] = {5};
    n = idx_header(buf, 0x08, 1, labels);
    check_bad(buf, n + 4, false, "truncated: header promises 5 bytes of data", "file has 4");
}
END_TEST

/* A 20-byte file whose header declares 2 GB costs what it holds: refused as truncated
 * within an address space of 1 GB (it allocated the 2 GB first).  Not under ASan, whose
 * shadow memory needs far more address space than that. */
START_TEST(test_idx_huge_declared)
{
#if defined(__SANITIZE_ADDRESS__)
    return;
#endif
    struct rlimit lim = {(rlim_t)1 << 30, (rlim_t)1 << 30};
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &lim), 0);   /* this test's process only (Check forks) */
    unsigned char buf[64];
    uint32_t dims[3] = {32767, 256, 256};
    size_t n = idx_header(buf, 0x08, 3, dims);
    memset(buf + n, 1, 4);
    check_bad(buf, n + 4, false, "truncated: header promises 32767x256x256 = 2147418112 bytes of data", "file has 4");
    check_bad(buf, n + 4, true, "truncated: header promises 32767x256x256 = 2147418112 bytes", "file has 4");
}
END_TEST

/* A gzip stream cut short: zlib's "unexpected end of file" shows as truncated data. */
START_TEST(test_idx_truncated_gzip_stream)
{
    unsigned char buf[8192];
    uint32_t dims[2] = {40, 100};
    size_t n = idx_header(buf, 0x08, 2, dims);
    for (int i = 0; i < 4000; i++) buf[n + (size_t)i] = (unsigned char)rng_at(7, 0, (uint64_t)i);
    char *path = tmp_file();
    write_gz(path, buf, n + 4000);
    size_t zn;
    unsigned char *z = read_bytes(path, &zn);
    ck_assert_uint_gt(zn, 2000);
    write_bytes(path, z, zn / 2);
    expect_idx_error(path, "truncated: header promises 40x100 = 4000 bytes", "compressed stream ends after");
    /* cut in the trailer only: all data there, the CRC is not */
    write_gz(path, buf, n + 4000);
    z = read_bytes(path, &zn);
    write_bytes(path, z, zn - 3);
    expect_idx_error(path, "corrupt gzip stream", "unexpected end of file");
    unlink(path);
    free(path);
}
END_TEST

START_TEST(test_idx_bad_magic)
{
    static const unsigned char b[8] = {0x00, 0x01, 0x08, 0x01, 0, 0, 0, 0};
    check_bad(b, 8, false, "bad magic", "0x00 0x01");
    /* gzip of a gzip file: zlib strips one layer, the magic shows the other */
    static const unsigned char g[12] = {0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 3, 0, 0};
    check_bad(g, 12, true, "bad magic", "gzip inside gzip");
}
END_TEST

START_TEST(test_idx_wrong_type)
{
    unsigned char buf[16];
    uint32_t dims[1] = {2};
    size_t n = idx_header(buf, 0x0A, 1, dims);
    memset(buf + n, 0, 8);
    check_bad(buf, n + 8, false, "unsupported data type 0x0a in byte 3 of the header", "0x0e (float64)");
    n = idx_header(buf, 0x0F, 1, dims);
    check_bad(buf, n + 8, true, "unsupported data type 0x0f", NULL);
}
END_TEST

START_TEST(test_idx_bad_rank)
{
    static const unsigned char r0[4] = {0, 0, 8, 0};
    check_bad(r0, 4, false, "unsupported rank 0", "must be 1 to 4");
    unsigned char buf[64];
    uint32_t dims[5] = {1, 1, 1, 1, 1};
    size_t n = idx_header(buf, 0x08, 5, dims);
    buf[n++] = 0;
    check_bad(buf, n, false, "unsupported rank 5", NULL);
}
END_TEST

START_TEST(test_idx_bad_dims)
{
    unsigned char buf[64];
    uint32_t zero[3] = {5, 0, 3};
    size_t n = idx_header(buf, 0x08, 3, zero);
    check_bad(buf, n, false, "dimension 2 of 3 is 0", NULL);
    uint32_t huge[4] = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 2};
    n = idx_header(buf, 0x08, 4, huge);
    check_bad(buf, n, false, "dimensions 4294967295x4294967295x4294967295x2", "product overflows");
    uint32_t big[2] = {100000, 100000};
    n = idx_header(buf, 0x08, 2, big);
    check_bad(buf, n, true, "100000x100000 = 10000000000 bytes", "2 GiB limit");
}
END_TEST

START_TEST(test_idx_trailing)
{
    unsigned char buf[64];
    uint32_t dims[2] = {3, 2};
    size_t n = idx_header(buf, 0x08, 2, dims);
    memset(buf + n, 9, 6 + 3);
    check_bad(buf, n + 9, false, "trailing data: 3 bytes after the 3x2 = 6 bytes", NULL);
    check_bad(buf, n + 9, true, "trailing data: 3 bytes", NULL);
    /* exactly right: loads */
    char *path = tmp_file();
    write_gz(path, buf, n + 6);
    DiagSink d;
    diag_init(&d, NULL);
    IdxData idx;
    ck_assert_int_eq(idx_load(path, &idx, &d), 0);
    ck_assert_int_eq(idx.size, 6);
    ck_assert_int_eq(idx.data[5], 9);
    idx_free(&idx);
    diag_free(&d);
    unlink(path);
    free(path);
}
END_TEST

START_TEST(test_idx_corrupt_gzip)
{
    /* a valid gzip header, then a deflate block of the reserved type 3 */
    unsigned char g[64] = {0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 3};
    memset(g + 10, 0xff, 40);
    char *path = tmp_file();
    write_bytes(path, g, 50);
    expect_idx_error(path, "corrupt gzip stream", "invalid block type");
    /* a good stream whose CRC is wrong: caught when the trailer is read */
    unsigned char buf[64];
    uint32_t dims[1] = {20};
    size_t n = idx_header(buf, 0x08, 1, dims);
    memset(buf + n, 4, 20);
    write_gz(path, buf, n + 20);
    size_t zn;
    unsigned char *z = read_bytes(path, &zn);
    z[zn - 8] ^= 0x5a;
    write_bytes(path, z, zn);
    expect_idx_error(path, "corrupt gzip stream", "incorrect data check");
    unlink(path);
    free(path);
}
END_TEST

START_TEST(test_idx_missing)
{
    expect_idx_error("/nonexistent/graphc/none-idx1-ubyte.gz", "cannot open", "No such file or directory");
    expect_idx_error("/tmp", "read error", "Is a directory");
}
END_TEST

/* ---- batches ---------------------------------------------------------------------- */

/* count samples of 2 floats: x = {i, -i}, y = i % 7, so a batch tells which samples. */
static void make_indexed(Dataset *ds, int64_t count)
{
    memset(ds, 0, sizeof *ds);
    ds->count = count;
    ds->rank = 1;
    ds->shape[0] = 2;
    ds->sample_size = 2;
    ds->nclasses = 7;
    ds->x = gc_calloc((size_t)count * 2, sizeof(float));
    ds->y = gc_calloc((size_t)count, sizeof(int32_t));
    ds->name = gc_strdup("indexed");
    for (int64_t i = 0; i < count; i++) {
        ds->x[2 * i] = (float)i;
        ds->x[2 * i + 1] = -(float)i;
        ds->y[i] = (int32_t)(i % 7);
    }
}

/* The sample indices of batch `step`, checking x and y agree. */
static void batch_ids(const Dataset *ds, int64_t batch, int64_t step, bool shuffle, uint64_t seed,
                      int64_t *perm, int64_t *perm_pass, int64_t *ids)
{
    float x[2 * 64];
    int32_t y[64];
    ck_assert_int_le(batch, 64);
    for (int i = 0; i < 2 * 64; i++) x[i] = NAN;
    dataset_batch(ds, batch, step, shuffle, seed, x, y, perm, perm_pass);
    for (int64_t k = 0; k < batch; k++) {
        ids[k] = (int64_t)x[2 * k];
        ck_assert(x[2 * k + 1] == -x[2 * k]);
        ck_assert_int_eq(y[k], ids[k] % 7);
    }
}

START_TEST(test_batches_per_pass)
{
    Dataset ds;
    make_indexed(&ds, 103);
    ck_assert_int_eq(dataset_batches_per_pass(&ds, 10), 10);
    ck_assert_int_eq(dataset_batches_per_pass(&ds, 103), 1);
    ck_assert_int_eq(dataset_batches_per_pass(&ds, 104), 0);
    ck_assert_int_eq(dataset_batches_per_pass(&ds, 1), 103);
    ck_assert_int_eq(dataset_batches_per_pass(&ds, 0), 0);
    ck_assert_int_eq(dataset_batches_per_pass(&ds, -5), 0);
    dataset_free(&ds);
}
END_TEST

/* Each pass: 10 batches of 10 from 103 samples, no sample twice, 3 left out. */
START_TEST(test_batches_permutation)
{
    Dataset ds;
    make_indexed(&ds, 103);
    int64_t *perm = gc_malloc(103 * sizeof(int64_t)), pass = -1;
    for (int64_t p = 0; p < 4; p++) {
        int seen[103] = {0};
        for (int64_t s = 0; s < 10; s++) {
            int64_t ids[10];
            batch_ids(&ds, 10, p * 10 + s, true, 42, perm, &pass, ids);
            ck_assert_int_eq(pass, p);
            for (int k = 0; k < 10; k++) {
                ck_assert(ids[k] >= 0 && ids[k] < 103);
                seen[ids[k]]++;
            }
        }
        int once = 0, never = 0;
        for (int i = 0; i < 103; i++) {
            ck_assert_int_le(seen[i], 1);
            once += seen[i] == 1;
            never += seen[i] == 0;
        }
        ck_assert_int_eq(once, 100);
        ck_assert_int_eq(never, 3);
    }
    gc_free(perm);
    dataset_free(&ds);
}
END_TEST

/* The permutation is exactly the documented Fisher-Yates over rng_at(seed, pass, i). */
START_TEST(test_batches_fisher_yates)
{
    Dataset ds;
    make_indexed(&ds, 50);
    int64_t perm[50], pass = -1, want[50];
    for (uint64_t p = 0; p < 3; p++) {
        for (int i = 0; i < 50; i++) want[i] = i;
        for (int i = 49; i > 0; i--) {
            int64_t j = (int64_t)rng_below(rng_at(9, p, (uint64_t)i), (uint64_t)i + 1);
            int64_t t = want[i];
            want[i] = want[j];
            want[j] = t;
        }
        for (int64_t s = 0; s < 5; s++) {
            int64_t ids[10];
            batch_ids(&ds, 10, (int64_t)p * 5 + s, true, 9, perm, &pass, ids);
            for (int k = 0; k < 10; k++) ck_assert_int_eq(ids[k], want[s * 10 + k]);
        }
    }
    dataset_free(&ds);
}
END_TEST

START_TEST(test_batches_deterministic)
{
    Dataset ds;
    make_indexed(&ds, 64);
    int64_t p1[64], p2[64], p3[64], pass1 = -1, pass2 = -1, pass3 = -1;
    int differ_seed = 0, differ_pass = 0;
    for (int64_t s = 0; s < 8; s++) {
        int64_t a[8], b[8], c[8], next[8];
        batch_ids(&ds, 8, s, true, 1234, p1, &pass1, a);
        batch_ids(&ds, 8, s, true, 1234, p2, &pass2, b);
        batch_ids(&ds, 8, s, true, 999, p3, &pass3, c);
        for (int k = 0; k < 8; k++) {
            ck_assert_int_eq(a[k], b[k]);
            differ_seed += a[k] != c[k];
        }
        /* the same position in the next pass: another order */
        batch_ids(&ds, 8, s + 8, true, 1234, p2, &pass2, next);
        for (int k = 0; k < 8; k++) differ_pass += a[k] != next[k];
        batch_ids(&ds, 8, s, true, 1234, p2, &pass2, b);   /* the cache goes back */
        for (int k = 0; k < 8; k++) ck_assert_int_eq(a[k], b[k]);
    }
    ck_assert_int_gt(differ_seed, 32);
    ck_assert_int_gt(differ_pass, 32);
    dataset_free(&ds);
}
END_TEST

/* Resuming at step s with a fresh cache gives the batch reached by iterating from 0. */
START_TEST(test_batches_resume)
{
    Dataset ds;
    make_indexed(&ds, 77);
    int64_t perm[77], pass = -1;
    int64_t ids[64], fresh_ids[64];
    for (int64_t s = 0; s <= 40; s++) {
        batch_ids(&ds, 16, s, true, 5, perm, &pass, ids);   /* 4 per pass */
        if (s % 7 == 3 || s == 40) {
            int64_t fresh[77], fresh_pass = -1;
            batch_ids(&ds, 16, s, true, 5, fresh, &fresh_pass, fresh_ids);
            ck_assert_int_eq(fresh_pass, s / 4);
            for (int k = 0; k < 16; k++) ck_assert_int_eq(ids[k], fresh_ids[k]);
        }
    }
    dataset_free(&ds);
}
END_TEST

START_TEST(test_batches_no_shuffle_and_slice)
{
    Dataset ds;
    make_indexed(&ds, 25);
    int64_t ids[10];
    /* 2 batches of 10 per pass: step 3 is the second batch of pass 1 */
    batch_ids(&ds, 10, 3, false, 0, NULL, NULL, ids);
    for (int k = 0; k < 10; k++) ck_assert_int_eq(ids[k], 10 + k);
    float x[20];
    int32_t y[10];
    for (int i = 0; i < 20; i++) x[i] = -1;
    dataset_slice(&ds, 20, 10, x, y);   /* only 5 left */
    for (int k = 0; k < 5; k++) {
        ck_assert(x[2 * k] == (float)(20 + k));
        ck_assert_int_eq(y[k], (20 + k) % 7);
    }
    ck_assert(x[10] == -1);
    dataset_slice(&ds, 25, 10, x, y);   /* nothing */
    ck_assert(x[10] == -1);
    /* a batch larger than the data writes nothing */
    x[0] = -7;
    dataset_batch(&ds, 26, 0, false, 0, x, y, NULL, NULL);
    ck_assert(x[0] == -7);
    dataset_free(&ds);
}
END_TEST

/* ---- synthetic -------------------------------------------------------------------- */

START_TEST(test_synthetic_deterministic)
{
    DiagSink d;
    diag_init(&d, NULL);
    Dataset a, b, c;
    int64_t shape[3] = {4, 4, 2};
    ck_assert_int_eq(dataset_synthetic(&a, 500, shape, 3, 10, 77, true, &d), 0);
    ck_assert_int_eq(dataset_synthetic(&b, 500, shape, 3, 10, 77, true, &d), 0);
    ck_assert_int_eq(dataset_synthetic(&c, 500, shape, 3, 10, 78, true, &d), 0);
    ck_assert_int_eq(a.sample_size, 32);
    ck_assert_int_eq(a.rank, 3);
    ck_assert_int_eq(a.shape[2], 2);
    ck_assert_int_eq(a.nclasses, 10);
    ck_assert_int_eq(memcmp(a.x, b.x, 500 * 32 * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(a.y, b.y, 500 * sizeof(int32_t)), 0);
    ck_assert_int_ne(memcmp(a.x, c.x, 500 * 32 * sizeof(float)), 0);
    int hist[10] = {0}, bad = 0;
    for (int i = 0; i < 500; i++) {
        if (a.y[i] < 0 || a.y[i] >= 10) { bad++; continue; }
        hist[a.y[i]]++;
    }
    for (int k = 0; k < 10; k++) ck_assert_int_gt(hist[k], 20);   /* about 50 each */
    for (int i = 0; i < 500 * 32; i++) bad += !(a.x[i] >= 0.0f && a.x[i] <= 1.0f);
    ck_assert_int_eq(bad, 0);
    dataset_free(&a);
    dataset_free(&b);
    dataset_free(&c);
    ck_assert_int_eq(d.nerrors, 0);
    diag_free(&d);
}
END_TEST

/* Nearest class mean: the means of `fit`'s classes, then the share of `score`'s
 * samples whose nearest mean is their class's. */
static double nearest_mean_accuracy(const Dataset *fit, const Dataset *score)
{
    enum { C = 5, N = 20 };
    ck_assert_int_eq(fit->sample_size, N);
    ck_assert_int_eq(fit->nclasses, C);
    double mean[C][N] = {{0}};
    int n[C] = {0};
    for (int64_t i = 0; i < fit->count; i++) {
        n[fit->y[i]]++;
        for (int j = 0; j < N; j++) mean[fit->y[i]][j] += fit->x[i * N + j];
    }
    for (int c = 0; c < C; c++)
        for (int j = 0; j < N; j++) mean[c][j] /= n[c] ? n[c] : 1;
    int64_t correct = 0;
    for (int64_t i = 0; i < score->count; i++) {
        int best = 0;
        double bd = INFINITY;
        for (int c = 0; c < C; c++) {
            double dist = 0;
            for (int j = 0; j < N; j++) dist += (score->x[i * N + j] - mean[c][j]) * (score->x[i * N + j] - mean[c][j]);
            if (dist < bd) { bd = dist; best = c; }
        }
        correct += best == score->y[i];
    }
    return (double)correct / (double)score->count;
}

/* What is learnt on the training set holds on the test set of the same seed: they
 * share the class prototypes (once they did not, and a perfect fit of the training
 * set scored at chance on the test set).  The two sets are different samples, and
 * another seed's test set has other prototypes (so the check can fail). */
START_TEST(test_synthetic_learnable)
{
    DiagSink d;
    diag_init(&d, NULL);
    Dataset train, test, other;
    int64_t shape[1] = {20};
    ck_assert_int_eq(dataset_synthetic(&train, 2000, shape, 1, 5, 3, true, &d), 0);
    ck_assert_int_eq(dataset_synthetic(&test, 500, shape, 1, 5, 3, false, &d), 0);
    ck_assert_int_eq(dataset_synthetic(&other, 500, shape, 1, 5, 4, false, &d), 0);
    double self = nearest_mean_accuracy(&train, &train), acc = nearest_mean_accuracy(&train, &test);
    double chance = nearest_mean_accuracy(&train, &other);
    ck_assert_msg(self > 0.95 && acc > 0.95, "training set %.3f, test set %.3f", self, acc);
    ck_assert_msg(chance < 0.4, "another seed's test set: %.3f, chance is 0.2", chance);
    /* other samples: other labels, other noise on the same class */
    int same_label = 0, same_x = 0;
    for (int i = 0; i < 500; i++) {
        same_label += train.y[i] == test.y[i];
        same_x += memcmp(train.x + i * 20, test.x + i * 20, 20 * sizeof(float)) == 0;
    }
    ck_assert_msg(same_label < 200 && same_x == 0, "%d labels and %d samples equal", same_label, same_x);
    dataset_free(&train);
    dataset_free(&test);
    dataset_free(&other);
    ck_assert_int_eq(d.nerrors, 0);
    diag_free(&d);
}
END_TEST

/* A 1080x1920x3 sample, two of them: no per-class tables, no trouble. */
START_TEST(test_synthetic_huge_sample)
{
    DiagSink d;
    diag_init(&d, NULL);
    Dataset ds;
    int64_t shape[3] = {1080, 1920, 3};
    ck_assert_int_eq(dataset_synthetic(&ds, 2, shape, 3, 1000, 1, true, &d), 0);
    ck_assert_int_eq(ds.sample_size, 6220800);
    ck_assert(ds.x[2 * 6220800 - 1] >= 0.0f && ds.x[2 * 6220800 - 1] <= 1.0f);
    dataset_free(&ds);
    diag_free(&d);
}
END_TEST

START_TEST(test_synthetic_errors)
{
    DiagSink d;
    diag_init(&d, NULL);
    Dataset ds;
    int64_t shape[4] = {3, 0, 2, 1};
    ck_assert_int_ne(dataset_synthetic(&ds, 0, shape, 1, 10, 1, true, &d), 0);
    ck_assert_ptr_nonnull(strstr(d.buf, "count 0"));
    ck_assert_int_ne(dataset_synthetic(&ds, 5, shape, 0, 10, 1, true, &d), 0);
    ck_assert_ptr_nonnull(strstr(d.buf, "rank 0"));
    ck_assert_int_ne(dataset_synthetic(&ds, 5, shape, 3, 10, 1, true, &d), 0);
    ck_assert_ptr_nonnull(strstr(d.buf, "dimension 2 of the sample shape is 0"));
    ck_assert_int_ne(dataset_synthetic(&ds, 5, shape, 1, 0, 1, true, &d), 0);
    ck_assert_ptr_nonnull(strstr(d.buf, "nclasses 0"));
    int64_t big[2] = {INT64_MAX / 2, 3};
    ck_assert_int_ne(dataset_synthetic(&ds, 5, big, 2, 10, 1, true, &d), 0);
    ck_assert_ptr_nonnull(strstr(d.buf, "element count overflows"));
    int64_t many[1] = {INT64_MAX / 4};
    ck_assert_int_ne(dataset_synthetic(&ds, 5, many, 1, 10, 1, true, &d), 0);
    ck_assert_ptr_nonnull(strstr(d.buf, "size overflows"));
    ck_assert_ptr_null(ds.x);
    ck_assert_int_eq(d.nerrors, 6);
    /* an allocation that fails is reported, not fatal (the sink's buffer is emptied,
     * not freed, so the message needs no allocation) */
    FILE *devnull = fopen("/dev/null", "w");
    ck_assert_ptr_nonnull(devnull);
    diag_flush(&d, devnull);
    fclose(devnull);
    int64_t small[1] = {8};
    gc_mem_fail_after(1);
    ck_assert_int_ne(dataset_synthetic(&ds, 5, small, 1, 10, 1, true, &d), 0);
    gc_mem_fail_after(-1);
    ck_assert_ptr_nonnull(strstr(d.buf, "out of memory"));
    ck_assert_ptr_null(ds.x);
    diag_free(&d);
}
END_TEST

/* ---- feeding a model ----------------------------------------------------------------
 * Both sets, training and test, through train_run and eval_run: the data must fit the
 * model's input (once only the test set was compared, and a training set of larger
 * images overflowed the batch buffer), and the labels its classes. */

typedef struct Net {
    Source src;
    DiagSink d;
    Graph *g;
} Net;

/* A model whose example input has type `xtype`, with `classes` logits. */
static void net_compile(Net *n, const char *xtype, int classes)
{
    char text[512];
    snprintf(text, sizeof text,
             "input x: %s\ninput y: i32[B]\nlogits = dense(flatten(x), units=%d)\n"
             "loss = cross_entropy(logits, y)\n"
             "train { data = mnist(\"unused\"); batch = 2; epochs = 1; minimize = loss }\n", xtype, classes);
    ck_assert_int_eq(source_from_string(&n->src, "feed.net", text), 0);
    diag_init(&n->d, &n->src);
    ck_assert_msg(compile_source(&n->src, &n->d, NULL, &n->g) == 0, "%s", n->d.buf ? n->d.buf : "");
}

static void net_free(Net *n)
{
    graph_free(n->g);
    diag_free(&n->d);
    source_free(&n->src);
}

/* Trains (or, !train, evaluates fresh weights) `xtype`/`classes` on the MNIST-named
 * files of dir.  want NULL: must succeed; else must fail with a message holding
 * `want` and naming the file `file` of dir. */
static void expect_feed(const char *xtype, int classes, const char *dir, bool train, const char *file,
                        const char *want)
{
    Net n;
    net_compile(&n, xtype, classes);
    RunOptions o;
    run_options_default(&o);
    o.data_dir = dir;
    DiagSink d;
    diag_init(&d, NULL);
    int rc;
    if (train) {
        RunResult r;
        rc = train_run(n.g, &o, &r, NULL, &d);
        run_result_free(&r);
    } else {
        Weights w;
        double loss, acc;
        ck_assert_int_eq(weights_init(&w, n.g, 1, &d), 0);
        rc = eval_run(n.g, &o, &w, &loss, &acc, &d);
        weights_free(&w);
    }
    if (!want) {
        ck_assert_msg(rc == 0, "%s on %s: %s", xtype, dir, d.buf ? d.buf : "");
    } else {
        char path[256];
        snprintf(path, sizeof path, "%s/%s: ", dir, file);
        ck_assert_msg(rc != 0, "%s on %s: accepted, wanted '%s'", xtype, dir, want);
        ck_assert_msg(d.buf && strstr(d.buf, path) && strstr(d.buf, want), "%s: wanted '%s%s', got: %s", xtype, path,
                      want, d.buf ? d.buf : "(nothing)");
    }
    diag_free(&d);
    net_free(&n);
}

/* The four files of a set pair: images of the given sizes, labels 0..count-1 % 10. */
static void write_pair(TmpDir *t, uint32_t tr_rows, uint32_t tr_cols, uint32_t te_rows, uint32_t te_cols,
                       uint32_t classes)
{
    static const char *names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                   "t10k-labels-idx1-ubyte"};
    if (t->nfiles == 0)
        for (int i = 0; i < 4; i++) tmpdir_file(t, names[i]);
    unsigned char labels[4];
    for (int i = 0; i < 4; i++) labels[i] = (unsigned char)((i * 3) % classes);
    write_images_sized(t->files[0], 4, tr_rows, tr_cols, false);
    write_labels(t->files[1], labels, 4, false);
    write_images_sized(t->files[2], 4, te_rows, te_cols, false);
    write_labels(t->files[3], labels, 4, false);
}

START_TEST(test_feed_training_set_shape)
{
    TmpDir t;
    tmpdir_make(&t);
    const char *x = "f32[B, 2, 3, 1]";
    write_pair(&t, 2, 3, 2, 3, 3);
    expect_feed(x, 3, t.path, true, NULL, NULL);
    /* more values than the input takes (the batch buffer's overflow), fewer, the same
     * number in another layout (misaligned rows): each refused, naming the file */
    write_pair(&t, 4, 4, 2, 3, 3);
    expect_feed(x, 3, t.path, true, "train-images-idx3-ubyte",
                "images are 4x4x1, but input 'x' f32[B, 2, 3, 1] takes 2x3x1");
    write_pair(&t, 2, 2, 2, 3, 3);
    expect_feed(x, 3, t.path, true, "train-images-idx3-ubyte", "images are 2x2x1, but input 'x'");
    write_pair(&t, 3, 2, 2, 3, 3);
    expect_feed(x, 3, t.path, true, "train-images-idx3-ubyte", "images are 3x2x1, but input 'x'");
    /* the test set, in training and in evaluation */
    write_pair(&t, 2, 3, 3, 2, 3);
    expect_feed(x, 3, t.path, true, "t10k-images-idx3-ubyte", "images are 3x2x1, but input 'x'");
    expect_feed(x, 3, t.path, false, "t10k-images-idx3-ubyte", "images are 3x2x1, but input 'x'");
    tmpdir_remove(&t);
}
END_TEST

/* The same layout in other words: 1s dropped, or one flat dimension. */
START_TEST(test_feed_layouts)
{
    TmpDir t;
    tmpdir_make(&t);
    write_pair(&t, 2, 3, 2, 3, 3);
    static const char *fit[] = {"f32[B, 6]", "f32[B, 2, 3]", "f32[B, 1, 6]", "f32[B, 6, 1]", "f32[B, 1, 2, 3]"};
    for (size_t i = 0; i < sizeof fit / sizeof *fit; i++) expect_feed(fit[i], 3, t.path, true, NULL, NULL);
    static const char *misfit[] = {"f32[B, 3, 2, 1]", "f32[B, 3, 2]", "f32[B, 2, 3, 2]", "f32[B, 7]"};
    for (size_t i = 0; i < sizeof misfit / sizeof *misfit; i++) {
        char want[128];
        snprintf(want, sizeof want, "images are 2x3x1, but input 'x' %s takes", misfit[i]);
        expect_feed(misfit[i], 3, t.path, true, "train-images-idx3-ubyte", want);
    }
    tmpdir_remove(&t);
}
END_TEST

/* Labels beyond the model's classes (cross_entropy would index past its row). */
START_TEST(test_feed_labels_beyond_classes)
{
    TmpDir t;
    tmpdir_make(&t);
    write_pair(&t, 2, 3, 2, 3, 10);   /* labels 0 3 6 9 */
    expect_feed("f32[B, 2, 3, 1]", 10, t.path, true, NULL, NULL);
    expect_feed("f32[B, 2, 3, 1]", 7, t.path, true, "train-labels-idx1-ubyte",
                "label 9 at index 3 is out of range for the model's 7 classes (logits 'logits' f32[B, 7])");
    expect_feed("f32[B, 2, 3, 1]", 5, t.path, false, "t10k-labels-idx1-ubyte",
                "label 6 at index 2 is out of range for the model's 5 classes");
    tmpdir_remove(&t);
}
END_TEST

/* dataset_check alone: labels per example, and labels when the classes are unknown. */
START_TEST(test_check_direct)
{
    DiagSink d;
    diag_init(&d, NULL);
    Dataset ds;
    int64_t shape[2] = {4, 2};
    ck_assert_int_eq(dataset_synthetic(&ds, 8, shape, 2, 3, 1, true, &d), 0);
    DataWant want = {.x_name = "x", .x_type = "f32[B, 8]", .x_rank = 1, .x_shape = {8}, .y_name = "y",
                     .y_type = "i32[B, 3]", .y_per_example = 3};
    ck_assert_int_eq(dataset_check(&ds, &want, &d), -1);
    ck_assert_msg(strstr(d.buf, "synthetic data: 1 label per example, but input 'y' i32[B, 3] takes 3 per example"),
                  "%s", d.buf);
    want.y_per_example = 1;
    ck_assert_int_eq(dataset_check(&ds, &want, &d), 0);
    ds.y[5] = -1;
    ck_assert_int_eq(dataset_check(&ds, &want, &d), -1);
    ck_assert_msg(strstr(d.buf, "synthetic data: label -1 at index 5 is out of range 0..2"), "%s", d.buf);
    ds.y[5] = 3;
    ck_assert_int_eq(dataset_check(&ds, &want, &d), -1);
    ck_assert_msg(strstr(d.buf, "label 3 at index 5 is out of range 0..2"), "%s", d.buf);
    want.x_shape[0] = 9;
    ck_assert_int_eq(dataset_check(&ds, &want, &d), -1);
    ck_assert_msg(strstr(d.buf, "synthetic data: examples are 4x2, but input 'x' f32[B, 8] takes 9"), "%s", d.buf);
    dataset_free(&ds);
    diag_free(&d);
}
END_TEST

/* A model that fits the synthetic training set fits its test set: the run's own
 * test accuracy (it was at chance when the test set had other class prototypes). */
START_TEST(test_feed_synthetic_generalizes)
{
    Source src;
    DiagSink d;
    Graph *g;
    ck_assert_int_eq(source_from_string(&src, "syn.net",
                                        "input x: f32[B, 16]\ninput y: i32[B]\nlogits = dense(x, units=4)\n"
                                        "loss = cross_entropy(logits, y)\n"
                                        "train { data = synthetic(count=256); optimizer = adam(lr=0.05); batch = 32\n"
                                        "epochs = 10; minimize = loss }\n"), 0);
    diag_init(&d, &src);
    ck_assert_msg(compile_source(&src, &d, NULL, &g) == 0, "%s", d.buf ? d.buf : "");
    RunOptions o;
    run_options_default(&o);
    o.threads = 1;
    RunResult r;
    ck_assert_msg(train_run(g, &o, &r, NULL, &d) == 0, "%s", d.buf ? d.buf : "");
    ck_assert_msg(r.epoch_acc[r.nepochs - 1] > 0.95 && r.test_acc > 0.95, "training accuracy %.3f, test %.3f",
                  r.epoch_acc[r.nepochs - 1], r.test_acc);
    run_result_free(&r);
    graph_free(g);
    diag_free(&d);
    source_free(&src);
}
END_TEST

Suite *make_data_suite(void)
{
    Suite *s = suite_create("data");
    TCase *mn = tcase_create("mnist");
    tcase_set_timeout(mn, 600);
    tcase_add_test(mn, test_mnist_train);
    tcase_add_test(mn, test_mnist_test);
    tcase_add_test(mn, test_idx_real_header);
    tcase_add_test(mn, test_mnist_plain_small);
    tcase_add_test(mn, test_mnist_prefers_gz);
    tcase_add_test(mn, test_mnist_label_out_of_range);
    tcase_add_test(mn, test_mnist_count_mismatch);
    tcase_add_test(mn, test_mnist_wrong_ranks);
    tcase_add_test(mn, test_mnist_missing_dir);
    suite_add_tcase(s, mn);

    TCase *idx = tcase_create("idx");
    tcase_add_test(idx, test_idx_truncated_header);
    tcase_add_test(idx, test_idx_truncated_data);
    tcase_add_test(idx, test_idx_huge_declared);
    tcase_add_test(idx, test_idx_truncated_gzip_stream);
    tcase_add_test(idx, test_idx_bad_magic);
    tcase_add_test(idx, test_idx_wrong_type);
    tcase_add_test(idx, test_idx_bad_rank);
    tcase_add_test(idx, test_idx_bad_dims);
    tcase_add_test(idx, test_idx_trailing);
    tcase_add_test(idx, test_idx_corrupt_gzip);
    tcase_add_test(idx, test_idx_missing);
    suite_add_tcase(s, idx);

    TCase *bt = tcase_create("batches");
    tcase_add_test(bt, test_batches_per_pass);
    tcase_add_test(bt, test_batches_permutation);
    tcase_add_test(bt, test_batches_fisher_yates);
    tcase_add_test(bt, test_batches_deterministic);
    tcase_add_test(bt, test_batches_resume);
    tcase_add_test(bt, test_batches_no_shuffle_and_slice);
    suite_add_tcase(s, bt);

    TCase *syn = tcase_create("synthetic");
    tcase_set_timeout(syn, 600);
    tcase_add_test(syn, test_synthetic_deterministic);
    tcase_add_test(syn, test_synthetic_learnable);
    tcase_add_test(syn, test_synthetic_huge_sample);
    tcase_add_test(syn, test_synthetic_errors);
    suite_add_tcase(s, syn);

    TCase *feed = tcase_create("feed");
    tcase_set_timeout(feed, 600);
    tcase_add_test(feed, test_feed_training_set_shape);
    tcase_add_test(feed, test_feed_layouts);
    tcase_add_test(feed, test_feed_labels_beyond_classes);
    tcase_add_test(feed, test_check_direct);
    tcase_add_test(feed, test_feed_synthetic_generalizes);
    suite_add_tcase(s, feed);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(make_data_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
