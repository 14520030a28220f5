/* Image reading for graphc predict: PGM (binary 8 and 16 bit, text) and PNG (grey, RGB,
 * 16 bit, interlaced), conversions between grey and RGB, and every refusal: formats it
 * does not read (once a PPM or a "P9" file was read as a binary PGM), hostile PGM and
 * PNG headers and bodies, and failed allocations (once the PNG reader leaked its rows
 * when libpng failed in the pixels; run under ASan/valgrind, leaks fail the suite). */
#include <check.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "run/image.h"
#include "util/mem.h"
#include "tests/testutil.h"

static char dir[64];

static const char *path(const char *name)
{
    static char buf[128];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static void write_bytes(const char *name, const void *data, size_t n)
{
    FILE *f = fopen(path(name), "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* A w x h PNG with `channels` (1 grey, 3 RGB) of `depth` bits; pixel value = f(i). */
static void write_png(const char *name, int w, int h, int channels, int depth, bool interlace)
{
    FILE *f = fopen(path(name), "wb");
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    ck_assert(f && png && info);
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB,
                 interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    int bpp = channels * depth / 8;
    unsigned char *rows = malloc((size_t)(w * h * bpp));
    png_bytep *rp = malloc(sizeof *rp * (size_t)h);
    for (int i = 0; i < w * h * channels; i++) {
        unsigned v = (unsigned)(i * 7 % 256);
        if (depth == 8) rows[i] = (unsigned char)v;
        else { rows[2 * i] = (unsigned char)v; rows[2 * i + 1] = 0; }   /* big-endian 16 bit: v*256 */
    }
    for (int y = 0; y < h; y++) rp[y] = rows + y * w * bpp;
    png_write_image(png, rp);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    fclose(f);
    free(rows);
    free(rp);
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/graphc-img-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(pgm_binary_and_text)
{
    unsigned char img[13 + 6] = "P5\n3 2\n255\n";
    size_t hl = strlen((char *)img);
    for (int i = 0; i < 6; i++) img[hl + i] = (unsigned char)(i * 51);
    write_bytes("a.pgm", img, hl + 6);
    const char *text = "P2\n# a comment\n3 2\n10\n0 2 4\n6 8 10\n";
    write_bytes("b.pgm", text, strlen(text));
    unsigned char wide[] = "P5 3 2 1000\n\x00\x00\x00\xc8\x01\x90\x02\x58\x03\x20\x03\xe8";
    write_bytes("c.pgm", wide, sizeof wide - 1);
    float out[6], rgb[18];
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_int_eq(image_load(path("a.pgm"), 2, 3, 1, out, &d), 0);
    for (int i = 0; i < 6; i++) ck_assert_float_near_rel(out[i], i * 0.2, 1e-6, 1e-7);
    ck_assert_int_eq(image_load(path("b.pgm"), 2, 3, 1, out, &d), 0);
    for (int i = 0; i < 6; i++) ck_assert_float_near_rel(out[i], i * 0.2, 1e-6, 1e-7);
    ck_assert_int_eq(image_load(path("c.pgm"), 2, 3, 1, out, &d), 0);
    for (int i = 0; i < 6; i++) ck_assert_float_near_rel(out[i], i * 0.2, 1e-6, 1e-7);
    /* grey into an RGB input: replicated */
    ck_assert_int_eq(image_load(path("a.pgm"), 2, 3, 3, rgb, &d), 0);
    for (int i = 0; i < 18; i++) ck_assert_float_near_rel(rgb[i], (i / 3) * 0.2, 1e-6, 1e-7);
    ck_assert_int_eq(d.nerrors, 0);
    diag_free(&d);
}
END_TEST

START_TEST(png_variants)
{
    write_png("g8.png", 5, 4, 1, 8, false);
    write_png("g16.png", 5, 4, 1, 16, false);
    write_png("gi.png", 5, 4, 1, 8, true);
    write_png("rgb.png", 5, 4, 3, 8, false);
    float out[20], rgb[60];
    DiagSink d;
    diag_init(&d, NULL);
    const char *greys[] = { "g8.png", "g16.png", "gi.png" };
    for (int k = 0; k < 3; k++) {
        ck_assert_msg(image_load(path(greys[k]), 4, 5, 1, out, &d) == 0, "%s: %s", greys[k], d.buf ? d.buf : "");
        for (int i = 0; i < 20; i++) ck_assert_float_near_rel(out[i], (i * 7 % 256) / 255.0, 0, 1e-6);
    }
    ck_assert_int_eq(image_load(path("rgb.png"), 4, 5, 3, rgb, &d), 0);
    for (int i = 0; i < 60; i++) ck_assert_float_near_rel(rgb[i], (i * 7 % 256) / 255.0, 0, 1e-6);
    /* RGB into a grey input: libpng's luminance (weights 0.2126, 0.7152, 0.0722) */
    ck_assert_int_eq(image_load(path("rgb.png"), 4, 5, 1, out, &d), 0);
    for (int i = 0; i < 20; i++) {
        double want = 0.2126 * (i * 21 % 256) + 0.7152 * ((i * 21 + 7) % 256) + 0.0722 * ((i * 21 + 14) % 256);
        ck_assert_float_near_rel(out[i] * 255.0, want, 0, 1.5);
    }
    ck_assert_int_eq(d.nerrors, 0);
    diag_free(&d);
}
END_TEST

/* Each bad file: refused, and the message names the file and what is wrong. */
START_TEST(refusals)
{
    write_png("ok.png", 5, 4, 1, 8, false);
    FILE *f = fopen(path("ok.png"), "rb");
    unsigned char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    write_bytes("cut.png", buf, n / 2);
    write_bytes("cut.pgm", "P5\n3 2\n255\n\x01\x02", 13);
    write_bytes("max.pgm", "P2\n3 2\n10\n0 2 4\n6 8 11\n", 22);
    write_bytes("hdr.pgm", "P5\n-3 2\n255\n", 12);
    write_bytes("text.txt", "hello", 5);
    static const struct { const char *name; int64_t h, w; const char *want; } cases[] = {
        { "ok.png", 28, 28, "the image is 5x4; the model's input is 28x28" },
        { "cut.png", 4, 5, "bad PNG" },
        { "cut.pgm", 2, 3, "truncated at pixel 2 of 6" },
        { "max.pgm", 2, 3, "value above maxval at pixel 5 of 6" },
        { "hdr.pgm", 2, 3, "bad PGM header" },
        { "text.txt", 2, 3, "not a PGM or PNG image" },
        { "missing.pgm", 2, 3, "cannot open" },
    };
    float out[28 * 28];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        DiagSink d;
        diag_init(&d, NULL);
        ck_assert_int_eq(image_load(path(cases[i].name), cases[i].h, cases[i].w, 1, out, &d), -1);
        ck_assert_msg(d.buf && strstr(d.buf, cases[i].want) && strstr(d.buf, cases[i].name), "%s: %s", cases[i].name,
                      d.buf ? d.buf : "(no message)");
        diag_free(&d);
    }
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_int_eq(image_load(path("ok.png"), 4, 5, 2, out, &d), -1);
    ck_assert_msg(strstr(d.buf, "images give 1 (grey) or 3 (RGB)"), "%s", d.buf);
    diag_free(&d);
}
END_TEST

/* image_load of `name` (h x w, grey) must fail with a message naming the file and
 * holding `want`. */
static void expect_refusal(const char *name, int64_t h, int64_t w, const char *want)
{
    float out[64 * 64];
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_int_le(h * w, 64 * 64);
    ck_assert_msg(image_load(path(name), h, w, 1, out, &d) == -1, "%s: accepted", name);
    ck_assert_msg(d.buf && strstr(d.buf, path(name)) && strstr(d.buf, want), "%s: wanted '%s', got: %s", name, want,
                  d.buf ? d.buf : "(no message)");
    ck_assert_int_eq(d.nerrors, 1);
    diag_free(&d);
}

/* A file's bytes and what its refusal must say. */
typedef struct Refusal {
    const char *name, *bytes;
    size_t n;
    const char *want;
} Refusal;
#define CASE(name, bytes, want) { name, bytes, sizeof bytes - 1, want }

/* Each file written, and refused for a 3x2 grey input as it says. */
static void expect_refusals(const Refusal *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        write_bytes(cases[i].name, cases[i].bytes, cases[i].n);
        expect_refusal(cases[i].name, 2, 3, cases[i].want);
    }
}

/* Formats it does not read are named, whatever their pixels would have said. */
START_TEST(unread_formats)
{
    static const Refusal cases[] = {
        CASE("p6.ppm", "P6\n3 2\n255\n012345012345012345", "a PPM image (P6, binary colour), which graphc does not read"),
        CASE("p3.ppm", "P3\n3 2\n255\n0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n", "a PPM image (P3, text colour)"),
        CASE("p4.pbm", "P4\n3 2\n\x01\x02", "a PBM image (P4"),
        CASE("p1.pbm", "P1\n3 2\n0 1 0 1 0 1\n", "a PBM image (P1"),
        CASE("p7.pam", "P7\nWIDTH 3\n", "a PAM image"),
        CASE("p9.pgm", "P9\n3 2\n255\n012345", "unknown Netpbm format 'P9'"),
        CASE("p.pgm", "P", "not a PGM or PNG image"),
        CASE("jpeg.pgm", "\xff\xd8\xff\xe0\0\x10JFIF", "a JPEG image"),
        CASE("gif.png", "GIF89a\3\0\2\0", "a GIF image"),
        CASE("bmp.pgm", "BM\0\0\0\0\0\0", "a BMP image"),
        CASE("sig.png", "\x89PNG\n\x1a\n\n", "bad PNG: the signature's last bytes are wrong"),
        CASE("empty.pgm", "", "empty file"),
    };
    expect_refusals(cases, sizeof cases / sizeof *cases);
    ck_assert_int_eq(mkdir(path("folder.pgm"), 0700), 0);
    expect_refusal("folder.pgm", 2, 3, "cannot read: Is a directory");
    ck_assert_int_eq(rmdir(path("folder.pgm")), 0);
}
END_TEST

/* PGM headers and bodies: each field named; nothing after the pixels; comments in the
 * header wherever the format allows them. */
START_TEST(pgm_hostile)
{
    static const Refusal cases[] = {
        CASE("w0.pgm", "P5\n0 2\n255\n", "bad PGM header: the width is 0"),
        CASE("wx.pgm", "P5\n3x 2\n255\n", "bad PGM header: the width is not a number"),
        CASE("wbig.pgm", "P5\n99999999999999999999 2\n255\n", "the width is too large (above 1000000)"),
        CASE("hneg.pgm", "P5\n3 -2\n255\n", "the height is not a number"),
        CASE("m0.pgm", "P5\n3 2\n0\n", "the maxval is 0"),
        CASE("mbig.pgm", "P5\n3 2\n65536\n", "the maxval is too large (above 65535)"),
        CASE("mnone.pgm", "P5\n3 2\n# no maxval\n", "the maxval is missing (the file ends)"),
        CASE("glued.pgm", "P53 2 255\n012345", "bad PGM header: no blank after the magic 'P5'"),
        CASE("more.pgm", "P5\n3 2\n255\n0123456", "data after the 3x2 pixels the header declares"),
        CASE("two.pgm", "P5\n3 2\n255\n012345P5\n3 2\n255\n012345", "data after the 3x2 pixels"),
        CASE("crlf.pgm", "P5\r\n3 2\r\n255\r\n012345", "data after the 3x2 pixels"),
        CASE("text.pgm", "P2\n3 2\n9\n1 2 x 4 5 6\n", "not a number at pixel 2 of 6"),
        CASE("textmore.pgm", "P2\n3 2\n9\n1 2 3 4 5 6 7\n", "data after the 3x2 pixels"),
        CASE("textcut.pgm", "P2\n3 2\n9\n1 2 3 4 5", "truncated at pixel 5 of 6"),
        CASE("wide.pgm", "P5\n3 2\n300\n\0\1\1\x2d\0\0\0\0\0\0\0\0", "value above maxval at pixel 1 of 6"),
        CASE("narrow.pgm", "P5\n3 2\n100\n\0\1\x65\0\0\0", "value above maxval at pixel 2 of 6"),
        CASE("size.pgm", "P5\n2 3\n255\n012345", "the image is 2x3; the model's input is 3x2"),
    };
    expect_refusals(cases, sizeof cases / sizeof *cases);
    /* comments between every header field, a text body spread over lines */
    const char *ok = "P2 # grey\n3 # width\n# height next\n2\n9 # maxval\n0 9\n9 0\n# a comment after\n0 9\n";
    write_bytes("ok.pgm", ok, strlen(ok));
    float out[6];
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_msg(image_load(path("ok.pgm"), 2, 3, 1, out, &d) == 0, "%s", d.buf ? d.buf : "");
    for (int i = 0; i < 6; i++) ck_assert_float_near_rel(out[i], (i + i / 2) % 2 == 0 ? 0.0 : 1.0, 0, 1e-7);
    diag_free(&d);
}
END_TEST

static void be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* One PNG chunk with a valid CRC at p; returns its length. */
static size_t png_chunk(unsigned char *p, const char *type, const void *data, uint32_t n)
{
    be32(p, n);
    memcpy(p + 4, type, 4);
    if (n) memcpy(p + 8, data, n);
    be32(p + 8 + n, (uint32_t)crc32(0, p + 4, n + 4));
    return 12 + n;
}

/* A grey 8-bit PNG whose IHDR says w x h and whose IDAT holds `rows` rows of w bytes
 * (filter byte 0 each), compressed; valid CRCs throughout.  Returns its length. */
static size_t craft_png(unsigned char *buf, uint32_t w, uint32_t h, uint32_t rows)
{
    static const unsigned char sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    unsigned char ihdr[13] = { 0 }, raw[512], z[1024];
    memcpy(buf, sig, 8);
    size_t n = 8;
    be32(ihdr, w);
    be32(ihdr + 4, h);
    ihdr[8] = 8;   /* depth; colour type, compression, filter, interlace 0 */
    n += png_chunk(buf + n, "IHDR", ihdr, 13);
    size_t rn = 0;
    for (uint32_t y = 0; y < rows && rn + 1 + w <= sizeof raw; y++) {
        raw[rn++] = 0;
        for (uint32_t x = 0; x < w; x++) raw[rn++] = (unsigned char)(y * w + x);
    }
    uLongf zn = sizeof z;
    ck_assert_int_eq(compress(z, &zn, raw, rn), Z_OK);
    n += png_chunk(buf + n, "IDAT", z, (uint32_t)zn);
    n += png_chunk(buf + n, "IEND", NULL, 0);
    return n;
}

/* PNGs with valid CRCs and hostile contents, and every truncation of a good one. */
START_TEST(png_hostile)
{
    unsigned char good[2048], bad[2048];
    size_t n = craft_png(good, 3, 2, 2);
    write_bytes("good.png", good, n);
    float out[6];
    DiagSink d;
    diag_init(&d, NULL);
    ck_assert_msg(image_load(path("good.png"), 2, 3, 1, out, &d) == 0, "%s", d.buf ? d.buf : "");
    for (int i = 0; i < 6; i++) ck_assert_float_near_rel(out[i], i / 255.0, 0, 1e-7);
    diag_free(&d);
    /* declared far larger than the model: refused before anything is allocated */
    write_bytes("huge.png", bad, craft_png(bad, 1000000, 1000000, 1));
    expect_refusal("huge.png", 2, 3, "the image is 1000000x1000000; the model's input is 3x2");
    write_bytes("zero.png", bad, craft_png(bad, 0, 2, 1));
    expect_refusal("zero.png", 2, 3, "bad PNG");
    /* fewer rows of pixels than IHDR says, and a body that is not deflate: libpng fails
     * in the pixels, after the rows are allocated */
    write_bytes("short.png", bad, craft_png(bad, 3, 2, 1));
    expect_refusal("short.png", 2, 3, "bad PNG");
    /* more rows than IHDR says: libpng only warns, graphc refuses */
    write_bytes("long.png", bad, craft_png(bad, 3, 2, 3));
    expect_refusal("long.png", 2, 3, "bad PNG: IDAT: Too much image data (more pixel data than the header declares)");
    memcpy(bad, good, n);
    bad[33 + 8] ^= 0x40;   /* the first byte of IDAT's data: the zlib header */
    be32(bad + 33 + 8 + (bad[33 + 3] | bad[33 + 2] << 8), (uint32_t)crc32(0, bad + 33 + 4, 4 + (bad[33 + 3] | bad[33 + 2] << 8)));
    write_bytes("idat.png", bad, n);
    expect_refusal("idat.png", 2, 3, "bad PNG");
    memcpy(bad, good, n);
    bad[29] ^= 1;   /* IHDR's CRC */
    write_bytes("crc.png", bad, n);
    expect_refusal("crc.png", 2, 3, "bad PNG: IHDR: CRC error");
    /* every cut: the signature, IHDR, IDAT, IEND (whose absence png_read_end sees) */
    for (size_t cut = 1; cut < n; cut++) {
        write_bytes("cut.png", good, cut);
        expect_refusal("cut.png", 2, 3, cut < 8 ? "" : "bad PNG");
    }
}
END_TEST

/* Every allocation of the PNG reader (libpng's included) made to fail in turn: a
 * refusal that says so, or the image; never a crash or (under ASan) a leak. */
START_TEST(png_out_of_memory)
{
    write_png("g.png", 5, 4, 1, 8, false);
    write_png("i.png", 5, 4, 3, 16, true);
    const char *names[2] = { "g.png", "i.png" };
    for (int k = 0; k < 2; k++) {
        float out[20];
        long fail;
        int rc = -1;
        for (fail = 0; fail < 200 && rc != 0; fail++) {
            /* the sink's buffer made first: a message then needs no allocation */
            DiagSink d;
            diag_init(&d, NULL);
            diag_plain(&d, "x");
            FILE *devnull = fopen("/dev/null", "w");
            ck_assert_ptr_nonnull(devnull);
            diag_flush(&d, devnull);
            fclose(devnull);
            gc_mem_fail_after(fail);
            rc = image_load(path(names[k]), 4, 5, 1, out, &d);
            gc_mem_fail_after(-1);
            ck_assert_msg(rc == 0 || (d.buf && strstr(d.buf, "out of memory")), "%s, allocation %ld: %s", names[k],
                          fail, d.buf ? d.buf : "(no message)");
            diag_free(&d);
        }
        ck_assert_msg(rc == 0 && fail > 3, "%s: %ld allocations", names[k], fail);
    }
}
END_TEST

static Suite *make_image_suite(void)
{
    Suite *s = suite_create("image");
    TCase *tc = tcase_create("read");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, pgm_binary_and_text);
    tcase_add_test(tc, png_variants);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, unread_formats);
    tcase_add_test(tc, pgm_hostile);
    tcase_add_test(tc, png_hostile);
    tcase_add_test(tc, png_out_of_memory);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(make_image_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
