/* Image reading for graphc predict: PGM (binary 8 and 16 bit, text) and PNG (grey, RGB,
 * 16 bit, interlaced), conversions between grey and RGB, and every refusal. */
#include <check.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "run/image.h"
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

static Suite *make_image_suite(void)
{
    Suite *s = suite_create("image");
    TCase *tc = tcase_create("read");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, pgm_binary_and_text);
    tcase_add_test(tc, png_variants);
    tcase_add_test(tc, refusals);
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
