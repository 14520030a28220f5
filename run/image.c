/* Images: PGM by hand (the format is a dozen lines), PNG with libpng, which handles the
 * format's many variants (palettes, bit depths, interlacing, gamma) and its CRCs. */
#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "run/image.h"
#include "util/mem.h"

/* The next header number of a PGM, skipping blanks and # comments; -1 if none. */
static long pgm_number(FILE *f)
{
    int ch;
    for (;;) {
        ch = fgetc(f);
        if (ch == '#') {
            while (ch != '\n' && ch != EOF) ch = fgetc(f);
        } else if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') {
            break;
        }
    }
    if (ch < '0' || ch > '9') return -1;
    long v = 0;
    while (ch >= '0' && ch <= '9') {
        if (v > 1000000) return -1;
        v = v * 10 + (ch - '0');
        ch = fgetc(f);
    }
    return v;   /* the one whitespace after the number has been consumed */
}

static int load_pgm(FILE *f, const char *path, int64_t h, int64_t w, int64_t c, float *out, DiagSink *d)
{
    int kind = fgetc(f);   /* after 'P': '5' binary, '2' text */
    long width = pgm_number(f), height = pgm_number(f), maxval = pgm_number(f);
    if (width <= 0 || height <= 0 || maxval <= 0 || maxval > 65535) {
        diag_plain(d, "%s: bad PGM header (width %ld, height %ld, maxval %ld)", path, width, height, maxval);
        return -1;
    }
    if (width != w || height != h) {
        diag_plain(d, "%s: the image is %ldx%ld; the model's input is %lldx%lld (width x height)", path, width, height,
                   (long long)w, (long long)h);
        return -1;
    }
    for (int64_t i = 0; i < h * w; i++) {
        long v;
        if (kind == '2') {
            v = pgm_number(f);
        } else if (maxval < 256) {
            v = fgetc(f);
        } else {
            int hi = fgetc(f), lo = fgetc(f);
            v = hi < 0 || lo < 0 ? -1 : hi * 256 + lo;
        }
        if (v < 0 || v > maxval) {
            diag_plain(d, "%s: %s at pixel %lld of %lld", path, v < 0 ? "truncated" : "value above maxval",
                       (long long)i, (long long)(h * w));
            return -1;
        }
        for (int64_t k = 0; k < c; k++) out[i * c + k] = (float)v / (float)maxval;
    }
    return 0;
}

typedef struct PngErr {
    jmp_buf jmp;
    char msg[200];
} PngErr;

static void png_fail(png_structp png, png_const_charp msg)
{
    PngErr *e = png_get_error_ptr(png);
    snprintf(e->msg, sizeof e->msg, "%s", msg);
    longjmp(e->jmp, 1);
}

static void png_warn(png_structp png, png_const_charp msg) { (void)png; (void)msg; }

static int load_png(FILE *f, const char *path, int64_t h, int64_t w, int64_t c, float *out, DiagSink *d)
{
    PngErr err = { .msg = "" };
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &err, png_fail, png_warn);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    uint8_t *row = NULL;
    if (!png || !info) {
        png_destroy_read_struct(&png, NULL, NULL);
        diag_plain(d, "%s: out of memory", path);
        return -1;
    }
    if (setjmp(err.jmp)) {
        gc_free(row);
        png_destroy_read_struct(&png, &info, NULL);
        diag_plain(d, "%s: bad PNG: %s", path, err.msg);
        return -1;
    }
    png_init_io(png, f);
    png_set_sig_bytes(png, 1);   /* the first byte was read to tell PGM from PNG */
    png_read_info(png, info);
    png_uint_32 width = png_get_image_width(png, info), height = png_get_image_height(png, info);
    if ((int64_t)width != w || (int64_t)height != h) {
        png_destroy_read_struct(&png, &info, NULL);
        diag_plain(d, "%s: the image is %lux%lu; the model's input is %lldx%lld (width x height)", path,
                   (unsigned long)width, (unsigned long)height, (long long)w, (long long)h);
        return -1;
    }
    /* everything to 8-bit grey or RGB, without alpha */
    png_set_expand(png);
    png_set_strip_16(png);
    png_set_strip_alpha(png);
    int type = png_get_color_type(png, info);
    if (c == 1 && (type & PNG_COLOR_MASK_COLOR)) png_set_rgb_to_gray_fixed(png, 1, -1, -1);
    if (c == 3 && !(type & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    int channels = png_get_channels(png, info);
    if (channels != c) {
        png_destroy_read_struct(&png, &info, NULL);
        diag_plain(d, "%s: %d channels after conversion, the model needs %lld", path, channels, (long long)c);
        return -1;
    }
    /* interlaced images need every row at once */
    uint8_t *all = gc_malloc(rowbytes * height);
    row = all;
    if (!all) png_fail(png, "out of memory");
    png_bytep *rows = gc_malloc(sizeof *rows * height);
    if (!rows) png_fail(png, "out of memory");
    for (png_uint_32 y = 0; y < height; y++) rows[y] = all + y * rowbytes;
    png_read_image(png, rows);
    gc_free(rows);
    for (int64_t i = 0; i < h * w * c; i++) out[i] = (float)all[(i / (w * c)) * rowbytes + i % (w * c)] / 255.0f;
    gc_free(all);
    png_destroy_read_struct(&png, &info, NULL);
    return 0;
}

int image_load(const char *path, int64_t h, int64_t w, int64_t c, float *out, DiagSink *d)
{
    if (c != 1 && c != 3) {
        diag_plain(d, "%s: the model's input has %lld channels; images give 1 (grey) or 3 (RGB)", path, (long long)c);
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        diag_plain(d, "cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    int first = fgetc(f), rc;
    if (first == 'P') rc = load_pgm(f, path, h, w, c, out, d);
    else if (first == 0x89) rc = load_png(f, path, h, w, c, out, d);
    else {
        diag_plain(d, "%s: not a PGM or PNG image", path);
        rc = -1;
    }
    fclose(f);
    return rc;
}
