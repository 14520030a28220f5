/* The data sources of issue 14 (run/sources.h): for each, a valid file loads the right
 * numbers, and each kind of bad file is refused with a message naming the file and the
 * field (line and column for CSV).  Files are built here (tests/datafiles.h); the real
 * Fashion-MNIST is read when Debian's dataset-fashion-mnist is installed. */
#define _XOPEN_SOURCE 700
#include <check.h>
#include <ftw.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "graph/lower.h"
#include "run/sources.h"
#include "run/text.h"
#include "run/train.h"
#include "tests/datafiles.h"
#include "util/mem.h"

Suite *make_sources_suite(void);

/* ---- helpers -------------------------------------------------------------------- */

static char tmp[64];
static char pbuf[8][256];
static int pnext;

static void tmp_make(void)
{
    strcpy(tmp, "/tmp/graphc-test-src-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    return remove(p);
}

static void tmp_remove(void)
{
    ck_assert_int_eq(nftw(tmp, rm_one, 8, FTW_DEPTH | FTW_PHYS), 0);
}

/* tmp/name, in one of a few rotating buffers */
static const char *P(const char *name)
{
    char *b = pbuf[pnext++ % 8];
    snprintf(b, sizeof pbuf[0], "%s/%s", tmp, name);
    return b;
}

static void put(const char *name, const void *p, size_t n)
{
    ck_assert_int_eq(df_write(P(name), p, n), 0);
}

static void put_text(const char *name, const char *text)
{
    put(name, text, strlen(text));
}

/* rc must be -1 with one message holding `file` and each phrase. */
static void expect_err(int rc, DiagSink *d, const char *file, const char *p1, const char *p2)
{
    ck_assert_msg(rc != 0, "accepted, wanted '%s'", p1);
    ck_assert_msg(d->buf && strstr(d->buf, file), "the message does not name %s: %s", file, d->buf ? d->buf : "");
    ck_assert_msg(strstr(d->buf, p1), "the message lacks '%s': %s", p1, d->buf);
    if (p2) ck_assert_msg(strstr(d->buf, p2), "the message lacks '%s': %s", p2, d->buf);
    diag_free(d);
    diag_init(d, NULL);
}

static uint8_t big[1 << 17];

/* A train block's source of the given kind and files, for data_source_open. */
static TrainSpec spec(DataKind kind, const char *path)
{
    TrainSpec t;
    memset(&t, 0, sizeof t);
    t.present = true;
    t.data = kind;
    t.data_path = path;
    t.data_args.valid = 0.25f;
    return t;
}

static DataWant want_flat(int64_t n)
{
    DataWant w = { .x_name = "x", .x_type = "f32[B, n]", .x_rank = 1, .x_shape = { n }, .y_name = "y",
                   .y_type = "i32[B]", .y_per_example = 1 };
    return w;
}

/* ---- IDX of every type ------------------------------------------------------------ */

/* Each element type: values that need the type (negative, beyond a byte, fractional),
 * big-endian in the file, the same numbers after loading. */
START_TEST(idx_every_type)
{
    tmp_make();
    static const struct { int code; ElemType t; int size; } types[] = {
        { 0x08, EL_U8, 1 }, { 0x09, EL_I8, 1 }, { 0x0B, EL_I16, 2 }, { 0x0C, EL_I32, 4 }, { 0x0D, EL_F32, 4 },
        { 0x0E, EL_F64, 8 },
    };
    const double want[6][4] = {
        { 0, 7, 200, 255 }, { -128, -1, 5, 127 }, { -30000, 300, 2, 32767 }, { -100000, 70000, 0, 2147483647 },
        { -1.5, 0.25, 3e7, -0.0078125 }, { 1e-300, -2.5, 1e300, 0.1 },
    };
    for (int k = 0; k < 6; k++) {
        uint8_t body[32];
        for (int i = 0; i < 4; i++) {
            uint8_t le[8];
            switch (types[k].t) {
            case EL_U8: le[0] = (uint8_t)want[k][i]; break;
            case EL_I8: { int8_t v = (int8_t)want[k][i]; memcpy(le, &v, 1); break; }
            case EL_I16: { int16_t v = (int16_t)want[k][i]; memcpy(le, &v, 2); break; }
            case EL_I32: { int32_t v = (int32_t)want[k][i]; memcpy(le, &v, 4); break; }
            case EL_F32: { float v = (float)want[k][i]; memcpy(le, &v, 4); break; }
            default: { double v = want[k][i]; memcpy(le, &v, 8); break; }
            }
            for (int b = 0; b < types[k].size; b++) body[i * types[k].size + b] = le[types[k].size - 1 - b];
        }
        uint32_t dims[2] = { 2, 2 };
        size_t n = df_idx(big, sizeof big, types[k].code, 2, dims, body, 4 * (size_t)types[k].size);
        put("a.idx", big, n);
        IdxData a;
        DiagSink d;
        diag_init(&d, NULL);
        ck_assert_msg(idx_load(P("a.idx"), &a, &d) == 0, "%s", d.buf);
        ck_assert_int_eq(a.type, types[k].t);
        ck_assert_int_eq(a.size, 4);
        for (int i = 0; i < 4; i++)
            ck_assert_msg(idx_value(&a, i) == (types[k].t == EL_F32 ? (double)(float)want[k][i] : want[k][i]),
                          "%s element %d: %g, wanted %g", elem_name(a.type), i, idx_value(&a, i), want[k][i]);
        idx_free(&a);
        /* cut one byte short: the message counts bytes of the element size */
        put("a.idx", big, n - 1);
        expect_err(idx_load(P("a.idx"), &a, &d), &d, P("a.idx"), "truncated",
                   types[k].size > 1 ? " x " : "header promises");
        diag_free(&d);
    }
    tmp_remove();
}
END_TEST

/* idx(images=, labels=) as a source: float32 examples as they are, unsigned bytes
 * scaled by 1/255, labels of any integer type; the test set from its files or held
 * out; the model's input shape checked naming the file and both shapes. */
START_TEST(idx_source)
{
    tmp_make();
    float xs[6 * 3];
    uint8_t body[sizeof xs], lab[6 * 2];
    for (int i = 0; i < 18; i++) xs[i] = (float)i * 0.5f - 2;
    for (int i = 0; i < 18; i++) {   /* big-endian float32 */
        uint32_t u;
        memcpy(&u, &xs[i], 4);
        body[4 * i] = (uint8_t)(u >> 24); body[4 * i + 1] = (uint8_t)(u >> 16);
        body[4 * i + 2] = (uint8_t)(u >> 8); body[4 * i + 3] = (uint8_t)u;
    }
    for (int i = 0; i < 6; i++) { lab[2 * i] = 0; lab[2 * i + 1] = (uint8_t)(i % 3); }   /* int16 */
    uint32_t xd[2] = { 6, 3 }, yd[1] = { 6 };
    put("x.idx", big, df_idx(big, sizeof big, 0x0D, 2, xd, body, sizeof body));
    put("y.idx", big, df_idx(big, sizeof big, 0x0B, 1, yd, lab, sizeof lab));
    TrainSpec t = spec(DATA_IDX, P("x.idx"));
    t.data_args.file[DFILE_LABELS] = P("y.idx");
    t.data_args.valid = 1.0f / 3;
    DataWant w = want_flat(3);
    Dataset tr, te;
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_msg(data_source_open(&t, &w, true, &tr, &te, &d) == 0, "%s", d.buf);
    /* 6 examples, a third held out: examples 2 and 5 (floor((i+1)/3) > floor(i/3)) */
    ck_assert_int_eq(tr.count, 4);
    ck_assert_int_eq(te.count, 2);
    ck_assert_int_eq(tr.nclasses, 3);
    const int trs[4] = { 0, 1, 3, 4 }, tes[2] = { 2, 5 };
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(tr.y[k], trs[k] % 3);
        for (int j = 0; j < 3; j++) ck_assert_float_eq(tr.x[k * 3 + j], xs[trs[k] * 3 + j]);
    }
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(te.y[k], tes[k] % 3);
        ck_assert_float_eq(te.x[k * 3], xs[tes[k] * 3]);
    }
    ck_assert_int_eq(dataset_check(&tr, &w, &d), 0);
    DataWant w4 = want_flat(4);
    w4.x_type = "f32[B, 4]";
    expect_err(dataset_check(&tr, &w4, &d), &d, P("x.idx"), "examples are 3, but input 'x' f32[B, 4] takes 4", NULL);
    dataset_free(&tr);
    dataset_free(&te);
    /* labels that are not class numbers, counts that differ */
    uint8_t neg[12] = { 0, 1, 0xff, 0xff, 0, 2, 0, 0, 0, 1, 0, 2 };
    put("bad.idx", big, df_idx(big, sizeof big, 0x0B, 1, yd, neg, sizeof neg));
    t.data_args.file[DFILE_LABELS] = P("bad.idx");
    expect_err(data_source_open(&t, &w, true, &tr, &te, &d), &d, P("bad.idx"), "label -1 at index 1", "class number");
    uint32_t yd5[1] = { 5 };
    put("five.idx", big, df_idx(big, sizeof big, 0x0B, 1, yd5, lab, 10));
    t.data_args.file[DFILE_LABELS] = P("five.idx");
    expect_err(data_source_open(&t, &w, true, &tr, &te, &d), &d, P("x.idx"), "6 examples, but", "has 5 labels");
    /* too few examples to hold a fraction out */
    t.data_args.file[DFILE_LABELS] = P("y.idx");
    t.data_args.valid = 0.1f;
    expect_err(data_source_open(&t, &w, true, &tr, &te, &d), &d, P("x.idx"), "leaves no test set", NULL);
    diag_free(&d);
    tmp_remove();
}
END_TEST

/* The real Fashion-MNIST through idx(): 10,000 test images of 28x28, 1,000 of each
 * class (the data set is balanced by construction). */
START_TEST(idx_fashion_mnist)
{
    const char *dir = "/usr/share/datasets/fashion-mnist";
    char x[256], y[256];
    snprintf(x, sizeof x, "%s/t10k-images-idx3-ubyte.gz", dir);
    snprintf(y, sizeof y, "%s/t10k-labels-idx1-ubyte.gz", dir);
    if (access(x, R_OK) != 0) {
        fprintf(stderr, "SKIP: idx_fashion_mnist: %s missing (Debian's dataset-fashion-mnist)\n", x);
        return;
    }
    TrainSpec t = spec(DATA_IDX, x);
    t.data_args.file[DFILE_LABELS] = y;
    t.data_args.valid = 0.5f;
    DataWant w = { .x_name = "x", .x_type = "f32[B, 28, 28, 1]", .x_rank = 3, .x_shape = { 28, 28, 1 },
                   .y_name = "y", .y_type = "i32[B]", .y_per_example = 1, .nclasses = 10 };
    Dataset tr, te;
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_msg(data_source_open(&t, &w, true, &tr, &te, &d) == 0, "%s", d.buf);
    ck_assert_int_eq(tr.count + te.count, 10000);
    ck_assert_int_eq(tr.shape[0], 28);
    ck_assert_int_eq(tr.shape[1], 28);
    int hist[10] = { 0 };
    float lo = 1, hi = 0;
    for (int64_t i = 0; i < tr.count; i++) hist[tr.y[i]]++;
    for (int64_t i = 0; i < te.count; i++) hist[te.y[i]]++;
    for (int64_t i = 0; i < tr.count * 784; i++) { lo = fminf(lo, tr.x[i]); hi = fmaxf(hi, tr.x[i]); }
    for (int c = 0; c < 10; c++) ck_assert_int_eq(hist[c], 1000);
    ck_assert_float_eq(lo, 0);
    ck_assert_float_eq(hi, 1);
    ck_assert_int_eq(dataset_check(&tr, &w, &d), 0);
    dataset_free(&tr);
    dataset_free(&te);
    diag_free(&d);
}
END_TEST

/* ---- NumPy --------------------------------------------------------------------------- */

START_TEST(npy_types)
{
    tmp_make();
    DiagSink d;
    diag_init(&d, NULL);
    IdxData a;
    float f[6] = { -1.5f, 0, 2, 3.25f, 1e-3f, 7 };
    put("f4.npy", big, df_npy(big, sizeof big, "<f4", false, "(2, 3)", f, sizeof f));
    ck_assert_msg(npy_load(P("f4.npy"), &a, &d) == 0, "%s", d.buf);
    ck_assert_int_eq(a.rank, 2);
    ck_assert_int_eq(a.dims[0], 2);
    ck_assert_int_eq(a.dims[1], 3);
    for (int i = 0; i < 6; i++) ck_assert_float_eq((float)idx_value(&a, i), f[i]);
    idx_free(&a);
    /* big-endian is converted */
    uint8_t be[24];
    for (int i = 0; i < 6; i++) {
        uint32_t u;
        memcpy(&u, &f[i], 4);
        for (int b = 0; b < 4; b++) be[4 * i + b] = (uint8_t)(u >> (24 - 8 * b));
    }
    put("be.npy", big, df_npy(big, sizeof big, ">f4", false, "(6,)", be, sizeof be));
    ck_assert_msg(npy_load(P("be.npy"), &a, &d) == 0, "%s", d.buf);
    for (int i = 0; i < 6; i++) ck_assert_float_eq((float)idx_value(&a, i), f[i]);
    idx_free(&a);
    double f8[2] = { 1e200, -0.125 };
    int64_t i8[3] = { 5, -3, (int64_t)1 << 40 };
    int32_t i4[3] = { 9, -7, 100000 };
    uint8_t u1[3] = { 0, 128, 255 };
    put("f8.npy", big, df_npy(big, sizeof big, "<f8", false, "(2,)", f8, sizeof f8));
    put("i8.npy", big, df_npy(big, sizeof big, "<i8", false, "(3,)", i8, sizeof i8));
    put("i4.npy", big, df_npy(big, sizeof big, "<i4", false, "(3, 1)", i4, sizeof i4));
    put("u1.npy", big, df_npy(big, sizeof big, "|u1", false, "(3,)", u1, sizeof u1));
    ck_assert_int_eq(npy_load(P("f8.npy"), &a, &d), 0);
    ck_assert(idx_value(&a, 0) == 1e200 && idx_value(&a, 1) == -0.125);
    idx_free(&a);
    ck_assert_int_eq(npy_load(P("i8.npy"), &a, &d), 0);
    ck_assert(idx_value(&a, 0) == 5 && idx_value(&a, 1) == -3 && idx_value(&a, 2) == 1099511627776.0);
    idx_free(&a);
    ck_assert_int_eq(npy_load(P("i4.npy"), &a, &d), 0);
    ck_assert(a.rank == 2 && idx_value(&a, 1) == -7 && idx_value(&a, 2) == 100000);
    idx_free(&a);
    ck_assert_int_eq(npy_load(P("u1.npy"), &a, &d), 0);
    ck_assert(a.type == EL_U8 && idx_value(&a, 1) == 128 && idx_value(&a, 2) == 255);
    idx_free(&a);
    diag_free(&d);
    tmp_remove();
}
END_TEST

/* Each refusal names the file and the header field. */
START_TEST(npy_refused)
{
    tmp_make();
    DiagSink d;
    diag_init(&d, NULL);
    IdxData a;
    float f[4] = { 0 };
    static const struct { const char *descr; bool fortran; const char *shape; size_t nbody; const char *p1, *p2; } bad[] = {
        { "<f4", true, "(2, 2)", 16, "header field 'fortran_order' is True", "C order" },
        { "|O", false, "(2, 2)", 16, "header field 'descr' is '|O' (Python objects)", NULL },
        { "<c8", false, "(2,)", 16, "header field 'descr' is '<c8'", "float32" },
        { "<f4", false, "(2, 2)", 12, "truncated: header field 'shape' promises 16 bytes", "has 12" },
        { "<f4", false, "(2, 2)", 20, "trailing data", NULL },
        { "<f4", false, "(0, 2)", 0, "header field 'shape': dimension 1 is 0", NULL },
        { "<f4", false, "(4294967296, 4294967296, 4294967296)", 16, "'shape': the product of the dimensions overflows", NULL },
        { "<f4", false, "(1073741824, 1024)", 16, "more than the 2 GiB limit", NULL },
        { "<f4", false, "()", 4, "'shape' is () (a scalar)", NULL },
        { "<f4", false, "(1, 1, 1, 1, 1, 1)", 4, "'shape' has more than 5 dimensions", NULL },
        { "<f4", false, "(2, x)", 4, "'shape': dimension 2 is not a number", NULL },
        { "<f4", false, "(99999999999999999999,)", 4, "dimension 1 overflows", NULL },
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        uint8_t body[32] = { 0 };
        (void)f;
        put("b.npy", big, df_npy(big, sizeof big, bad[k].descr, bad[k].fortran, bad[k].shape, body, bad[k].nbody));
        expect_err(npy_load(P("b.npy"), &a, &d), &d, P("b.npy"), bad[k].p1, bad[k].p2);
        ck_assert_ptr_null(a.data);
    }
    /* a structured array, a header cut short, no magic, a missing field */
    size_t n = df_npy(big, sizeof big, "<f4", false, "(1,)", f, 4);
    memcpy(big + 10, "{'descr': [('a', '<f4')], ", 26);
    put("b.npy", big, n);
    expect_err(npy_load(P("b.npy"), &a, &d), &d, P("b.npy"), "'descr' is a list", "structured");
    n = df_npy(big, sizeof big, "<f4", false, "(1,)", f, 4);
    put("b.npy", big, 30);
    expect_err(npy_load(P("b.npy"), &a, &d), &d, P("b.npy"), "truncated header", "header length field");
    put("b.npy", "PK\3\4xxxxxxxxxxxx", 16);
    expect_err(npy_load(P("b.npy"), &a, &d), &d, P("b.npy"), "not a .npy file", NULL);
    char hdr[] = "\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'}";
    put("b.npy", hdr, sizeof hdr - 1);
    expect_err(npy_load(P("b.npy"), &a, &d), &d, P("b.npy"), "field 'fortran_order' is missing", NULL);
    diag_free(&d);
    tmp_remove();
}
END_TEST

/* An archive as numpy.savez (stored) and savez_compressed (deflated) write it: x and
 * y, and x_test and y_test as the test set. */
static size_t npz_file(bool deflate, size_t *xoff)
{
    static uint8_t xs[512], ys[256], xts[512], yts[256];
    float x[4 * 2], xt[2 * 2];
    int64_t y[4] = { 1, 0, 2, 1 }, yt[2] = { 2, 0 };
    for (int i = 0; i < 8; i++) x[i] = (float)i / 8;
    for (int i = 0; i < 4; i++) xt[i] = 10 + (float)i;
    size_t nx = df_npy(xs, sizeof xs, "<f4", false, "(4, 2)", x, sizeof x);
    size_t ny = df_npy(ys, sizeof ys, "<i8", false, "(4,)", y, sizeof y);
    size_t nxt = df_npy(xts, sizeof xts, "<f4", false, "(2, 2)", xt, sizeof xt);
    size_t nyt = df_npy(yts, sizeof yts, "<i8", false, "(2,)", yt, sizeof yt);
    const char *names[4] = { "x.npy", "y.npy", "x_test.npy", "y_test.npy" };
    const uint8_t *data[4] = { xs, ys, xts, yts };
    size_t len[4] = { nx, ny, nxt, nyt };
    bool defl[4] = { deflate, deflate, deflate, deflate };
    *xoff = 30 + strlen(names[0]);
    return df_zip(big, sizeof big, 4, names, data, len, defl);
}

START_TEST(npz_source)
{
    tmp_make();
    DiagSink d;
    diag_init(&d, NULL);
    for (int deflate = 0; deflate < 2; deflate++) {
        size_t xoff, n = npz_file(deflate, &xoff);
        ck_assert_uint_gt(n, 0);
        put("d.npz", big, n);
        TrainSpec t = spec(DATA_NPY, P("d.npz"));
        DataWant w = want_flat(2);
        Dataset tr, te;
        ck_assert_msg(data_source_open(&t, &w, true, &tr, &te, &d) == 0, "%s", d.buf);
        ck_assert_int_eq(tr.count, 4);
        ck_assert_int_eq(te.count, 2);
        ck_assert_int_eq(tr.y[2], 2);
        ck_assert_int_eq(te.y[0], 2);
        ck_assert_float_eq(tr.x[5], 5.0f / 8);
        ck_assert_float_eq(te.x[3], 13);
        ck_assert_int_eq(dataset_check(&tr, &w, &d), 0);
        dataset_free(&tr);
        dataset_free(&te);
        /* one byte of x's data changed: the CRC (stored) or the stream (deflated) says so */
        big[xoff + (deflate ? 20 : 90)] ^= 0x5a;   /* (stored: in the data, after the 64-byte header) */
        put("d.npz", big, n);
        ck_assert_int_ne(data_source_open(&t, &w, true, &tr, &te, &d), 0);
        ck_assert_msg(strstr(d.buf, P("d.npz")) && strstr(d.buf, "member 'x.npy'") &&
                      (strstr(d.buf, "CRC mismatch") || strstr(d.buf, "deflate")), "%s", d.buf);
        diag_free(&d);
        diag_init(&d, NULL);
        /* cut short: the end record is gone */
        put("d.npz", big, n / 2);
        expect_err(data_source_open(&t, &w, true, &tr, &te, &d), &d, P("d.npz"), "no end of central directory", NULL);
    }
    /* a member that is not there; the central directory pointing outside the file */
    size_t xoff, n = npz_file(false, &xoff);
    size_t cd;
    for (cd = 0; memcmp(big + cd, "PK\1\2", 4) != 0; cd++) {}
    big[cd + 46] = 'q';   /* the central directory's x.npy is now q.npy */
    put("d.npz", big, n);
    IdxData a;
    expect_err(npz_load(P("d.npz"), "x", &a, &d), &d, P("d.npz"), "no member 'x.npy'", NULL);
    n = npz_file(false, &xoff);
    df_le32(big + n - 22 + 16, 0x7fffffff);
    put("d.npz", big, n);
    expect_err(npz_load(P("d.npz"), "x", &a, &d), &d, P("d.npz"), "central directory: offset 2147483647", NULL);
    /* the local header's offset outside the file */
    n = npz_file(false, &xoff);
    for (cd = 0; memcmp(big + cd, "PK\1\2", 4) != 0; cd++) {}
    df_le32(big + cd + 42, 0x10000000);
    put("d.npz", big, n);
    expect_err(npz_load(P("d.npz"), "x", &a, &d), &d, P("d.npz"), "member 'x.npy': local header at offset 268435456",
               NULL);
    /* separate .npy files, and a missing y */
    float x[3] = { 1, 2, 3 };
    int32_t y[3] = { 0, 1, 0 };
    put("x.npy", big, df_npy(big, sizeof big, "<f4", false, "(3, 1)", x, sizeof x));
    put("y.npy", big, df_npy(big, sizeof big, "<i4", false, "(3,)", y, sizeof y));
    TrainSpec t = spec(DATA_NPY, P("x.npy"));
    DataWant w = want_flat(1);
    Dataset tr, te;
    expect_err(data_source_open(&t, &w, true, &tr, &te, &d), &d, P("x.npy"), "npy() needs the labels too", NULL);
    t.data_args.file[DFILE_LABELS] = P("y.npy");
    t.data_args.valid = 0.34f;
    ck_assert_msg(data_source_open(&t, &w, true, &tr, &te, &d) == 0, "%s", d.buf);
    ck_assert_int_eq(tr.count, 2);
    ck_assert_float_eq(te.x[0], 3);
    dataset_free(&tr);
    dataset_free(&te);
    diag_free(&d);
    tmp_remove();
}
END_TEST

/* ---- CSV ------------------------------------------------------------------------------- */

START_TEST(csv_valid)
{
    tmp_make();
    put_text("a.csv", "len, width,class ,w2\r\n1.5,2,1,-3\n\n0.25,1e2,0, 4\n7,8,2,9\n3,3,1,3");
    TrainSpec t = spec(DATA_CSV, P("a.csv"));
    t.data_args.label = "class";
    DataWant w = want_flat(3);
    Dataset tr, te;
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_msg(data_source_open(&t, &w, true, &tr, &te, &d) == 0, "%s", d.buf);
    ck_assert_int_eq(tr.count, 3);
    ck_assert_int_eq(te.count, 1);   /* row 4 (i = 3): floor(4 / 4) > floor(3 / 4) */
    ck_assert_int_eq(tr.nclasses, 3);
    const float x0[3] = { 1.5f, 2, -3 }, x1[3] = { 0.25f, 100, 4 };
    for (int j = 0; j < 3; j++) {
        ck_assert_float_eq(tr.x[j], x0[j]);
        ck_assert_float_eq(tr.x[3 + j], x1[j]);
    }
    ck_assert_int_eq(tr.y[0], 1);
    ck_assert_int_eq(tr.y[1], 0);
    ck_assert_int_eq(tr.y[2], 2);
    ck_assert_int_eq(te.y[0], 1);
    dataset_free(&tr);
    dataset_free(&te);
    /* class names: sorted, and the test file's names mapped as the training file's */
    put_text("n.csv", "a,kind,b\n1,versicolor,2\n3,setosa,4\n5,virginica,6\n7,setosa,8\n");
    put_text("nt.csv", "a,kind,b\n0,virginica,0\n0,setosa,0\n");
    t = spec(DATA_CSV, P("n.csv"));
    t.data_args.label = "kind";
    t.data_args.file[DFILE_TEST] = P("nt.csv");
    w = want_flat(2);
    ck_assert_msg(data_source_open(&t, &w, true, &tr, &te, &d) == 0, "%s", d.buf);
    ck_assert_int_eq(tr.count, 4);
    ck_assert_int_eq(tr.nclasses, 3);
    ck_assert_int_eq(tr.y[0], 1);
    ck_assert_int_eq(tr.y[1], 0);
    ck_assert_int_eq(tr.y[2], 2);
    ck_assert_int_eq(te.count, 2);
    ck_assert_int_eq(te.y[0], 2);
    ck_assert_int_eq(te.y[1], 0);
    ck_assert_float_eq(tr.x[2 * 2 + 1], 6);
    dataset_free(&tr);
    dataset_free(&te);
    put_text("nt.csv", "a,kind,b\n0,virginica,0\n0,setsoa,0\n");
    expect_err(data_source_open(&t, &w, true, &tr, &te, &d), &d, P("nt.csv"), ":3:3: class 'setsoa' in column 'kind'",
               NULL);
    diag_free(&d);
    tmp_remove();
}
END_TEST

/* Every refusal names the file, the line and the column. */
START_TEST(csv_refused)
{
    tmp_make();
    static const struct { const char *text, *label, *p1, *p2; } bad[] = {
        { "a,b,y\n1,2,0\n3,x4,1\n", "y", ":3:3: 'x4' in column 'b' is not a number", NULL },
        { "a,b,y\n1,2,0\n3,,1\n", "y", ":3:3: an empty field in column 'b'", NULL },
        { "a,b,y\n1,2,0\n3,4\n", "y", ":3: 2 fields, the header has 3", NULL },
        { "a,b,y\n1,2,0\n3,4,1,5\n", "y", ":3: 4 fields, the header has 3", NULL },
        { "a,b,label\n1,2,0\n", "lable", ":1: no column 'lable' in the header; did you mean 'label'?", NULL },
        { "a,b,y\n1,2,0\n1,2,0.5\n", "y", ":3:5: label 0.5 in column 'y' is not a class number", NULL },
        { "a,b,y\n1,2,0\n1,2,-1\n", "y", ":3:5: label -1 in column 'y'", NULL },
        { "a,b,y\n", "y", "no rows after the header", NULL },
        { "", "y", ":1: no header row", NULL },
        { "y\n1\n", "y", ":1: only the label column", NULL },
        { "a,b,y\n1,\"2,0\n", "y", ":2:3: unclosed quote", NULL },
        { "a,b,y\n1,2,0\n1e999,2,0\n", "y", ":3:1: '1e999' in column 'a' is not a number", NULL },
        { "a,b,y\n1,nan,0\n", "y", ":2:3: 'nan' in column 'b'", NULL },
    };
    DiagSink d;
    diag_init(&d, NULL);
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        put_text("b.csv", bad[k].text);
        Dataset ds;
        expect_err(dataset_load_csv(P("b.csv"), bad[k].label, NULL, &ds, NULL, &d), &d, P("b.csv"), bad[k].p1, bad[k].p2);
        ck_assert_ptr_null(ds.x);
    }
    put("b.csv", "a,y\n1,\0\n", 8);
    Dataset ds;
    expect_err(dataset_load_csv(P("b.csv"), "y", NULL, &ds, NULL, &d), &d, P("b.csv"), "a NUL byte at offset 6", NULL);
    diag_free(&d);
    tmp_remove();
}
END_TEST

/* ---- CIFAR-10 ------------------------------------------------------------------------- */

static void cifar_dir(int per_file)
{
    uint8_t labels[8];
    for (int k = 0; k < 6; k++) {
        for (int r = 0; r < per_file; r++) labels[r] = (uint8_t)((k + r) % 10);
        char name[32];
        if (k < 5) snprintf(name, sizeof name, "data_batch_%d.bin", k + 1);
        else snprintf(name, sizeof name, "test_batch.bin");
        put(name, big, df_cifar(big, sizeof big, labels, per_file));
    }
}

START_TEST(cifar10_source)
{
    tmp_make();
    cifar_dir(3);
    TrainSpec t = spec(DATA_CIFAR10, tmp);
    DataWant w = { .x_name = "x", .x_type = "f32[B, 32, 32, 3]", .x_rank = 3, .x_shape = { 32, 32, 3 },
                   .y_name = "y", .y_type = "i32[B]", .y_per_example = 1, .nclasses = 10 };
    Dataset tr, te;
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_msg(data_source_open(&t, &w, true, &tr, &te, &d) == 0, "%s", d.buf);
    ck_assert_int_eq(tr.count, 15);
    ck_assert_int_eq(te.count, 3);
    /* training example 7 is record 1 of data_batch_3: label (2 + 1) % 10; pixel (row 2,
     * col 5) channel c is byte (1 * 31 + c * 7 + 69) % 256 / 255, now in HWC order */
    ck_assert_int_eq(tr.y[7], 3);
    for (int c = 0; c < 3; c++)
        ck_assert_float_eq_tol(tr.x[7 * 3072 + (2 * 32 + 5) * 3 + c], (float)((31 + c * 7 + 69) % 256) / 255.0f, 1e-7);
    ck_assert_int_eq(te.y[2], (5 + 2) % 10);
    ck_assert_int_eq(dataset_check(&tr, &w, &d), 0);
    dataset_free(&tr);
    dataset_free(&te);
    /* a record cut short, a label beyond 9, a batch missing */
    uint8_t labels[2] = { 1, 2 };
    size_t n = df_cifar(big, sizeof big, labels, 2);
    put("data_batch_4.bin", big, n - 100);
    expect_err(data_source_open(&t, &w, true, &tr, &te, &d), &d, P("data_batch_4.bin"),
               "not a whole number of 3073-byte records", "the last one has 2973");
    labels[1] = 10;
    put("data_batch_4.bin", big, df_cifar(big, sizeof big, labels, 2));
    expect_err(data_source_open(&t, &w, true, &tr, &te, &d), &d, P("data_batch_4.bin"),
               "record 1 (byte offset 3073): label 10 is out of range 0..9", NULL);
    unlink(P("data_batch_4.bin"));
    expect_err(data_source_open(&t, &w, true, &tr, &te, &d), &d, P("data_batch_4.bin"), "cannot open", NULL);
    /* the model's input of another size */
    cifar_dir(3);
    w.x_shape[0] = 28;
    w.x_type = "f32[B, 28, 32, 3]";
    ck_assert_int_eq(data_source_open(&t, &w, true, &tr, &te, &d), 0);
    expect_err(dataset_check(&tr, &w, &d), &d, P("data_batch_1.bin"), "images are 32x32x3, but input 'x' f32[B, 28, 32, 3]",
               "takes 28x32x3");
    dataset_free(&tr);
    dataset_free(&te);
    diag_free(&d);
    tmp_remove();
}
END_TEST

/* ---- a folder of PNG files per class ---------------------------------------------------- */

/* A w x h grey PNG whose pixel i is (base + i) % 256. */
static void write_png(const char *path, int w, int h, int base)
{
    FILE *f = fopen(path, "wb");
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    ck_assert(f && png && info);
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    uint8_t row[64];
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) row[x] = (uint8_t)((base + y * w + x) % 256);
        png_write_row(png, row);
    }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    fclose(f);
}

START_TEST(images_source)
{
    tmp_make();
    ck_assert_int_eq(mkdir(P("cat"), 0755), 0);
    ck_assert_int_eq(mkdir(P("dog"), 0755), 0);
    ck_assert_int_eq(mkdir(P(".hidden"), 0755), 0);
    for (int i = 0; i < 4; i++) {
        char n[64];
        snprintf(n, sizeof n, "dog/%d.png", i);
        write_png(P(n), 4, 3, 100 + i);
        snprintf(n, sizeof n, "cat/%d.png", i);
        write_png(P(n), 4, 3, 10 * i);
    }
    put_text("cat/notes.txt", "not an image");
    TrainSpec t = spec(DATA_IMAGES, tmp);
    DataWant w = { .x_name = "x", .x_type = "f32[B, 3, 4, 1]", .x_rank = 3, .x_shape = { 3, 4, 1 }, .y_name = "y",
                   .y_type = "i32[B]", .y_per_example = 1 };
    Dataset tr, te;
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_msg(data_source_open(&t, &w, true, &tr, &te, &d) == 0, "%s", d.buf);
    ck_assert_int_eq(tr.count + te.count, 8);
    ck_assert_int_eq(te.count, 2);   /* every 4th: cat/3 and dog/3 */
    ck_assert_int_eq(tr.nclasses, 2);
    ck_assert_int_eq(tr.y[0], 0);
    ck_assert_int_eq(tr.y[3], 1);
    ck_assert_float_eq_tol(tr.x[1 * 12 + 5], (10.0f + 5) / 255, 1e-7);   /* cat/1.png, pixel 5 */
    ck_assert_float_eq_tol(te.x[12 + 0], 103.0f / 255, 1e-7);              /* dog/3.png */
    dataset_free(&tr);
    dataset_free(&te);
    /* one image of another size, a class without images, no classes */
    write_png(P("dog/2.png"), 5, 3, 0);
    expect_err(data_source_open(&t, &w, true, &tr, &te, &d), &d, P("dog/2.png"), "the image is 5x3", "4x3");
    write_png(P("dog/2.png"), 4, 3, 0);
    ck_assert_int_eq(mkdir(P("emu"), 0755), 0);
    expect_err(data_source_open(&t, &w, true, &tr, &te, &d), &d, P("emu"), "no PNG files in the class folder", NULL);
    expect_err(data_source_open(&(TrainSpec){ .data = DATA_IMAGES, .data_path = P("emu"), .data_args.valid = 0.5f }, &w,
                                true, &tr, &te, &d), &d, P("emu"), "no class folders", NULL);
    w.x_rank = 1;
    w.x_type = "f32[B, 12]";
    expect_err(data_source_open(&t, &w, true, &tr, &te, &d), &d, tmp, "input of shape [B, height, width, 1 or 3]",
               "f32[B, 12]");
    diag_free(&d);
    tmp_remove();
}
END_TEST

/* ---- text ------------------------------------------------------------------------------- */

START_TEST(text_source)
{
    tmp_make();
    char text[101];
    for (int i = 0; i < 100; i++) text[i] = (char)('a' + i % 26);
    text[100] = 0;
    text[3] = (char)0xc3;   /* not ASCII: bytes, whatever they are */
    put_text("t.txt", text);
    TrainSpec t = spec(DATA_TEXT, P("t.txt"));
    t.data_args.context = 8;
    t.data_args.valid = 0.2f;
    DataWant w = { .x_name = "ids", .x_type = "i32[B, 8]", .x_ids = true, .x_rank = 1, .x_shape = { 8 },
                   .y_name = "next", .y_type = "i32[B, 8]", .y_per_example = 8, .nclasses = 256 };
    Dataset tr, te;
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_msg(data_source_open(&t, &w, true, &tr, &te, &d) == 0, "%s", d.buf);
    /* bytes 0..79 train, a window at each of 0..71; 80..99 validation, windows at 80, 88 */
    ck_assert_int_eq(tr.count, 72);
    ck_assert_int_eq(te.count, 2);
    ck_assert_int_eq(dataset_check(&tr, &w, &d), 0);
    ck_assert_int_eq(dataset_check(&te, &w, &d), 0);
    int32_t ids[2 * 8], next[2 * 8];
    dataset_slice(&tr, 0, 2, ids, next);
    for (int k = 0; k < 8; k++) {
        ck_assert_int_eq(ids[k], (unsigned char)text[k]);
        ck_assert_int_eq(next[k], (unsigned char)text[k + 1]);
        ck_assert_int_eq(ids[8 + k], (unsigned char)text[1 + k]);
    }
    dataset_slice(&te, 1, 1, ids, next);
    ck_assert_int_eq(ids[0], text[88]);
    ck_assert_int_eq(next[7], text[96]);
    /* shuffled batches: the same under a seed, other under another */
    int64_t perm[72], pass = -1, perm2[72], pass2 = -1;
    int32_t a[4 * 8], b[4 * 8], ya[4 * 8], yb[4 * 8];
    dataset_batch(&tr, 4, 5, true, 11, a, ya, perm, &pass);
    dataset_batch(&tr, 4, 5, true, 11, b, yb, perm2, &pass2);
    ck_assert_mem_eq(a, b, sizeof a);
    ck_assert_mem_eq(ya, yb, sizeof ya);
    pass2 = -1;
    dataset_batch(&tr, 4, 5, true, 12, b, yb, perm2, &pass2);
    ck_assert(memcmp(a, b, sizeof a) != 0);
    /* the model's input: a float input, another context, one label per example */
    w.x_ids = false;
    w.x_type = "f32[B, 8]";
    expect_err(dataset_check(&tr, &w, &d), &d, P("t.txt"), "windows are int32 ids, but input 'ids' f32[B, 8]",
               "takes float32 values");
    w.x_ids = true;
    w.x_shape[0] = 16;
    w.x_type = "i32[B, 16]";
    expect_err(dataset_check(&tr, &w, &d), &d, P("t.txt"), "windows are 8, but input 'ids' i32[B, 16] takes 16", NULL);
    w.x_shape[0] = 8;
    w.y_per_example = 1;
    w.y_type = "i32[B]";
    expect_err(dataset_check(&tr, &w, &d), &d, P("t.txt"), "8 labels per example, but input 'next' i32[B]", NULL);
    w.y_per_example = 8;
    w.nclasses = 100;
    w.classes_from = "logits f32[B, 8, 100]";
    expect_err(dataset_check(&tr, &w, &d), &d, P("t.txt"), "byte 195 at offset 3 is out of range", "logits f32[B, 8, 100]");
    dataset_free(&tr);
    dataset_free(&te);
    /* too short for a window in the held-out part, empty */
    t.data_args.context = 32;
    expect_err(data_source_open(&t, &w, true, &tr, &te, &d), &d, P("t.txt"), "(its last 20%, held out): 20 bytes",
               "fewer than one window of context 32");
    put_text("t.txt", "");
    expect_err(data_source_open(&t, &w, true, &tr, &te, &d), &d, P("t.txt"), "empty file", NULL);
    expect_err(data_source_open(&(TrainSpec){ .data = DATA_TEXT, .data_path = P("none.txt"),
                                              .data_args = { .context = 4, .valid = 0.1f } },
                                &w, true, &tr, &te, &d), &d, P("none.txt"), "cannot open", NULL);
    diag_free(&d);
    tmp_remove();
}
END_TEST

/* The baselines by hand: training text "abab", validation "xab" with windows of 1 at
 * stride 1 predicting 'a' after 'x' and 'b' after 'a'. */
START_TEST(text_baselines_by_hand)
{
    const uint8_t tr_text[] = "abab", va_text[] = "xab";
    Dataset tr, va;
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_int_eq(dataset_text("tr", tr_text, 0, 4, 1, 1, &tr, &d), 0);
    ck_assert_int_eq(dataset_text("va", va_text, 0, 3, 1, 1, &va, &d), 0);
    ck_assert_int_eq(va.count, 2);
    double uni, bi;
    ck_assert_int_eq(text_baselines(&tr, &va, &uni, &bi), 0);
    /* unigram: p(a) = p(b) = (2 + 1) / (4 + 256); bigram: p(a | x) = (0 + p(a)) / (0 + 1),
     * p(b | a) = (2 + p(b)) / (2 + 1): pairs ab, ba, ab */
    double pa = 3.0 / 260, pb = pa;
    ck_assert_double_eq_tol(uni, -(log(pa) + log(pb)) / 2, 1e-12);
    ck_assert_double_eq_tol(bi, -(log(pa) + log((2 + pb) / 3)) / 2, 1e-12);
    /* not text: refused */
    Dataset none = { 0 };
    ck_assert_int_eq(text_baselines(&none, &va, &uni, &bi), -1);
    dataset_free(&tr);
    dataset_free(&va);
    diag_free(&d);
}
END_TEST

START_TEST(text_pick_draws)
{
    const float p[4] = { 0.1f, 0.6f, 0.3f, 0 };
    ck_assert_int_eq(text_pick(p, 4, 0, 0.99), 1);   /* greedy */
    /* temperature 1: the running sums 0.1, 0.7, 1.0 */
    ck_assert_int_eq(text_pick(p, 4, 1, 0.0), 0);
    ck_assert_int_eq(text_pick(p, 4, 1, 0.099), 0);
    ck_assert_int_eq(text_pick(p, 4, 1, 0.101), 1);
    ck_assert_int_eq(text_pick(p, 4, 1, 0.69), 1);
    ck_assert_int_eq(text_pick(p, 4, 1, 0.71), 2);
    ck_assert_int_eq(text_pick(p, 4, 1, 0.99999), 2);   /* never the zero */
    /* temperature 0.5: weights 0.01, 0.36, 0.09 of 0.46 */
    ck_assert_int_eq(text_pick(p, 4, 0.5, 0.009 / 0.46), 0);
    ck_assert_int_eq(text_pick(p, 4, 0.5, 0.011 / 0.46), 1);
    ck_assert_int_eq(text_pick(p, 4, 0.5, 0.371 / 0.46), 2);
    const float bad[3] = { NAN, -1, INFINITY };
    ck_assert_int_eq(text_pick(bad, 3, 1, 0.5), 0);
    const float one_nan[3] = { NAN, 0, 2 };
    ck_assert_int_eq(text_pick(one_nan, 3, 1, 0.1), 2);
    ck_assert_int_eq(text_pick(one_nan, 3, 0, 0.1), 2);
}
END_TEST

/* ---- through a .net file ---------------------------------------------------------------
 * The sources as the language writes them, the model's inputs checked in eval_run. */

static int compile_text(const char *text, Source *src, DiagSink *d, Graph **g)
{
    ck_assert_int_eq(source_from_string(src, "t.net", text), 0);
    diag_init(d, src);
    return compile_source(src, d, NULL, g);
}

START_TEST(language_sources)
{
    static const struct { const char *data, *err; } cases[] = {
        { "idx(images=\"a\")", "t.net:4:16: error: idx: give labels=, and test_images= with test_labels= or neither" },
        { "idx(images=\"a\", labels=\"b\", test_images=\"c\")", "idx: give labels=, and test_images=" },
        { "idx(labels=\"b\")", "idx: missing keyword argument 'images'" },
        { "npy(x=\"a\", test_x=\"b\")", "npy: give test_x= with test_y=, or neither" },
        { "csv(\"a.csv\")", "csv: missing keyword argument 'label'" },
        { "csv(\"a.csv\", lable=\"y\")", "csv: unknown keyword argument 'lable'; did you mean 'label'?" },
        { "csv(3, label=\"y\")", "csv: give the CSV file as a string" },
        { "text(\"a.txt\")", "text: missing keyword argument 'context'" },
        { "text(\"a.txt\", context=0)", "'context' must be between 1 and" },
        { "text(\"a.txt\", context=8, valid=1)", "'valid' must be between" },
        { "cifar10()", "cifar10: give the folder of the .bin batches as a string" },
        { "images(\"d\", valid=0.2)", NULL },
        { "npy(x=\"d.npz\")", NULL },
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char text[512];
        snprintf(text, sizeof text, "input x: f32[B, 4]\ninput y: i32[B]\nloss = cross_entropy(dense(x, units=3), y)\n"
                                    "train { data = %s; minimize = loss }\n", cases[k].data);
        Source src;
        DiagSink d;
        Graph *g = NULL;
        int rc = compile_text(text, &src, &d, &g);
        if (!cases[k].err) ck_assert_msg(rc == 0, "%s: %s", cases[k].data, d.buf ? d.buf : "");
        else ck_assert_msg(rc != 0 && d.buf && strstr(d.buf, cases[k].err), "%s: wanted '%s', got: %s", cases[k].data,
                           cases[k].err, d.buf ? d.buf : "(accepted)");
        graph_free(g);
        diag_free(&d);
        source_free(&src);
    }
}
END_TEST

/* A csv() model trains and evaluates through the run loop; its input of the wrong
 * width is refused in eval_run naming the file and both shapes. */
START_TEST(language_csv_eval)
{
    tmp_make();
    char csv[4096] = "a,b,c,label\n";
    for (int i = 0; i < 40; i++) {
        char row[64];
        snprintf(row, sizeof row, "%d,%d,%d,%d\n", i % 7, i % 3, i % 5, i % 2);
        strcat(csv, row);
    }
    put_text("d.csv", csv);
    for (int width = 3; width <= 4; width++) {
        char text[512];
        snprintf(text, sizeof text, "input x: f32[B, %d]\ninput y: i32[B]\nlogits = dense(x, units=2)\n"
                 "loss = cross_entropy(logits, y)\ntrain { data = csv(\"%s\", label=\"label\"); batch = 4; minimize = loss }\n",
                 width, P("d.csv"));
        Source src;
        DiagSink d;
        Graph *g = NULL;
        ck_assert_int_eq(compile_text(text, &src, &d, &g), 0);
        RunOptions o;
        run_options_default(&o);
        o.threads = 1;
        Weights w;
        double loss = 0, acc = 0;
        ck_assert_int_eq(weights_init(&w, g, 1, &d), 0);
        int rc = eval_run(g, &o, &w, &loss, &acc, &d);
        if (width == 3) {
            ck_assert_msg(rc == 0, "%s", d.buf ? d.buf : "");
            ck_assert_msg(isfinite(loss) && acc >= 0 && acc <= 1, "loss %g acc %g", loss, acc);
        } else {
            ck_assert_int_ne(rc, 0);
            ck_assert_msg(d.buf && strstr(d.buf, P("d.csv")) &&
                          strstr(d.buf, "rows are 3, but input 'x' f32[B, 4] takes 4"), "%s", d.buf ? d.buf : "");
        }
        weights_free(&w);
        graph_free(g);
        diag_free(&d);
        source_free(&src);
    }
    tmp_remove();
}
END_TEST

Suite *make_sources_suite(void)
{
    Suite *s = suite_create("sources");
    TCase *tc = tcase_create("formats");
    tcase_add_test(tc, idx_every_type);
    tcase_add_test(tc, idx_source);
    tcase_add_test(tc, idx_fashion_mnist);
    tcase_add_test(tc, npy_types);
    tcase_add_test(tc, npy_refused);
    tcase_add_test(tc, npz_source);
    tcase_add_test(tc, csv_valid);
    tcase_add_test(tc, csv_refused);
    tcase_add_test(tc, cifar10_source);
    tcase_add_test(tc, images_source);
    tcase_add_test(tc, text_source);
    tcase_add_test(tc, text_baselines_by_hand);
    tcase_add_test(tc, text_pick_draws);
    suite_add_tcase(s, tc);
    TCase *lang = tcase_create("language");
    tcase_add_test(lang, language_sources);
    tcase_add_test(lang, language_csv_eval);
    suite_add_tcase(s, lang);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(make_sources_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
