/* Images: PGM by hand (the format is a dozen lines), PNG with libpng, which handles the
 * format's many variants (palettes, bit depths, interlacing, gamma) and its CRCs.
 * Anything else is refused by name: a PPM read as a PGM gives a prediction of noise. */
#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "run/image.h"
#include "util/mem.h"

/* ---- telling formats apart --------------------------------------------------------- */

typedef enum ImageKind { IMG_PGM_BINARY, IMG_PGM_TEXT, IMG_PNG, IMG_OTHER, IMG_KIND_COUNT } ImageKind;

/* Formats graphc does not read, by their first bytes, to say what a refused file is. */
static const struct {
    const char *magic;
    size_t len;
    const char *name;
} unread[] = {
    { "P1", 2, "a PBM image (P1, text bitmap)" },  { "P4", 2, "a PBM image (P4, binary bitmap)" },
    { "P3", 2, "a PPM image (P3, text colour)" },  { "P6", 2, "a PPM image (P6, binary colour)" },
    { "P7", 2, "a PAM image (P7)" },               { "\xff\xd8\xff", 3, "a JPEG image" },
    { "GIF8", 4, "a GIF image" },                  { "BM", 2, "a BMP image" },
    { "II*\0", 4, "a TIFF image" },                { "MM\0*", 4, "a TIFF image" },
    { "RIFF", 4, "a RIFF file (WebP?)" },
};

/* Reads the magic at the start of f and leaves f just after it (2 bytes for a PGM, 8
 * for a PNG).  IMG_OTHER is reported here, naming what the file is when it is known. */
static ImageKind image_kind(FILE *f, const char *path, DiagSink *d)
{
    unsigned char head[8];
    size_t n = fread(head, 1, sizeof head, f);
    if (n == 0) {
        if (ferror(f)) diag_plain(d, "%s: cannot read: %s", path, strerror(errno));
        else diag_plain(d, "%s: empty file, not a PGM or PNG image", path);
        return IMG_OTHER;
    }
    if (n == 8 && png_sig_cmp(head, 0, 8) == 0) return IMG_PNG;
    if (n >= 2 && head[0] == 'P' && (head[1] == '5' || head[1] == '2')) {
        if (n < 3 || !strchr(" \t\n\r\v\f#", head[2]) || !head[2]) {
            diag_plain(d, "%s: bad PGM header: no blank after the magic 'P%c'", path, head[1]);
            return IMG_OTHER;
        }
        if (fseek(f, 2, SEEK_SET) != 0) {
            diag_plain(d, "%s: cannot seek: %s", path, strerror(errno));
            return IMG_OTHER;
        }
        return head[1] == '5' ? IMG_PGM_BINARY : IMG_PGM_TEXT;
    }
    for (size_t i = 0; i < sizeof unread / sizeof *unread; i++) {
        if (n >= unread[i].len && memcmp(head, unread[i].magic, unread[i].len) == 0) {
            diag_plain(d, "%s: %s, which graphc does not read: give a PGM (P5 or P2) or a PNG", path,
                       unread[i].name);
            return IMG_OTHER;
        }
    }
    if (head[0] == 'P' && n >= 2)
        diag_plain(d, "%s: unknown Netpbm format 'P%c': graphc reads PGM (P5 or P2) and PNG", path,
                   head[1] >= ' ' && head[1] < 127 ? head[1] : '?');
    else if (head[0] == 0x89 && n >= 4 && memcmp(head + 1, "PNG", 3) == 0)
        diag_plain(d, "%s: bad PNG: the signature's last bytes are wrong (a transfer in text mode?)", path);
    else
        diag_plain(d, "%s: not a PGM or PNG image", path);
    return IMG_OTHER;
}

static void size_mismatch(const char *path, long long width, long long height, int64_t h, int64_t w, DiagSink *d)
{
    diag_plain(d, "%s: the image is %lldx%lld; the model's input is %lldx%lld (width x height)", path, width, height,
               (long long)w, (long long)h);
}

/* ---- PGM ------------------------------------------------------------------------------ */

enum { PGM_END = -1, PGM_NOT_NUMBER = -2, PGM_TOO_BIG = -3 };

/* The next number of a PGM (after blanks and # comments, which netpbm allows in a text
 * body too), at most max, and the blank after it consumed; or PGM_END, PGM_NOT_NUMBER
 * (also a number run into another character, "28x"), PGM_TOO_BIG. */
static long pgm_number(FILE *f, long max)
{
    int ch;
    for (;;) {
        ch = fgetc(f);
        if (ch == '#') {
            while (ch != '\n' && ch != '\r' && ch != EOF) ch = fgetc(f);
        } else if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r' && ch != '\v' && ch != '\f') {
            break;
        }
    }
    if (ch == EOF) return PGM_END;
    if (ch < '0' || ch > '9') return PGM_NOT_NUMBER;
    long v = 0;
    bool big = false;
    for (; ch >= '0' && ch <= '9'; ch = fgetc(f)) {
        if (v <= max) v = v * 10 + (ch - '0');
        big |= v > max;
    }
    if (ch != EOF && ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r' && ch != '\v' && ch != '\f')
        return PGM_NOT_NUMBER;
    return big ? PGM_TOO_BIG : v;
}

static const char *pgm_why(long v)
{
    return v == PGM_END ? "missing (the file ends)" : v == PGM_NOT_NUMBER ? "not a number" : "too large";
}

/* The header after the magic: width, height, maxval.  0 or -1 reported. */
static int pgm_header(FILE *f, const char *path, long hdr[3], DiagSink *d)
{
    static const char *const field[3] = { "width", "height", "maxval" };
    static const long max[3] = { 1000000, 1000000, 65535 };
    for (int k = 0; k < 3; k++) {
        hdr[k] = pgm_number(f, max[k]);
        if (hdr[k] == 0 || hdr[k] < 0) {
            diag_plain(d, "%s: bad PGM header: the %s is %s%s", path, field[k], hdr[k] == 0 ? "0" : pgm_why(hdr[k]),
                       hdr[k] == PGM_TOO_BIG ? k < 2 ? " (above 1000000)" : " (above 65535)" : "");
            return -1;
        }
    }
    return 0;
}

/* Pixel i of a PGM: its value, or a negative PGM_* code. */
static long pgm_pixel(FILE *f, ImageKind kind, long maxval)
{
    if (kind == IMG_PGM_TEXT) return pgm_number(f, maxval);
    int hi = fgetc(f);
    if (hi == EOF) return PGM_END;
    if (maxval < 256) return hi > maxval ? PGM_TOO_BIG : hi;
    int lo = fgetc(f);
    if (lo == EOF) return PGM_END;
    long v = hi * 256L + lo;
    return v > maxval ? PGM_TOO_BIG : v;
}

static int load_pgm(FILE *f, ImageKind kind, const char *path, int64_t h, int64_t w, int64_t c, float *out,
                    DiagSink *d)
{
    long hdr[3];
    if (pgm_header(f, path, hdr, d) != 0) return -1;
    long maxval = hdr[2];
    if (hdr[0] != w || hdr[1] != h) {
        size_mismatch(path, hdr[0], hdr[1], h, w, d);
        return -1;
    }
    for (int64_t i = 0; i < h * w; i++) {
        long v = pgm_pixel(f, kind, maxval);
        if (v < 0) {
            diag_plain(d, "%s: %s at pixel %lld of %lld", path,
                       v == PGM_END ? "truncated" : v == PGM_TOO_BIG ? "value above maxval" : "not a number",
                       (long long)i, (long long)(h * w));
            return -1;
        }
        for (int64_t k = 0; k < c; k++) out[i * c + k] = (float)v / (float)maxval;
    }
    /* More than the header declares: another image, or not what the header says. */
    long more = kind == IMG_PGM_TEXT ? pgm_number(f, 0) : fgetc(f) == EOF ? PGM_END : 0;
    if (more != PGM_END) {
        diag_plain(d, "%s: data after the %ldx%ld pixels the header declares", path, hdr[0], hdr[1]);
        return -1;
    }
    if (ferror(f)) {
        diag_plain(d, "%s: read error: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- PNG ------------------------------------------------------------------------------ */

/* libpng reports errors by longjmp; what was allocated lives here, freed on every way
 * out.  volatile: the fields change between setjmp and longjmp. */
typedef struct PngRead {
    jmp_buf jmp;
    char msg[200];
    uint8_t *volatile pixels;
    png_bytep *volatile rows;
    volatile bool out_of_memory;   /* an allocation failed: not the file's fault */
    char idat_warning[120];        /* libpng's warning about the pixel data, if any */
} PngRead;

static void png_fail(png_structp png, png_const_charp msg)
{
    PngRead *r = png_get_error_ptr(png);
    snprintf(r->msg, sizeof r->msg, "%s", msg);
    longjmp(r->jmp, 1);
}

/* libpng only warns when the compressed pixels hold more than the header declares
 * ("IDAT: Too much image data", "IDAT: Extra compressed data"); those are kept and
 * refused, as a PGM with data after its pixels is.  Other warnings (a colour profile
 * libpng dislikes, an ancillary chunk's CRC) do not change the pixels: ignored. */
static void png_warn(png_structp png, png_const_charp msg)
{
    PngRead *r = png_get_error_ptr(png);
    if (strncmp(msg, "IDAT", 4) == 0 && !r->idat_warning[0]) snprintf(r->idat_warning, sizeof r->idat_warning, "%s", msg);
}

/* libpng's own allocations through gc_malloc too, so tests can make them fail. */
static png_voidp png_alloc(png_structp png, png_alloc_size_t n)
{
    png_voidp p = gc_malloc(n);
    if (!p) ((PngRead *)png_get_mem_ptr(png))->out_of_memory = true;
    return p;
}

static void png_release(png_structp png, png_voidp p) { (void)png; gc_free(p); }

/* Reads for libpng, saying what went wrong (libpng's own says "Read Error"). */
static void png_read_file(png_structp png, png_bytep buf, size_t n)
{
    FILE *f = png_get_io_ptr(png);
    if (fread(buf, 1, n, f) != n) png_error(png, ferror(f) ? strerror(errno) : "the file ends early (truncated)");
}

/* The reading itself, under load_png's setjmp: libpng's errors leave from anywhere. */
static int png_pixels(png_structp png, png_infop info, PngRead *r, const char *path, int64_t h, int64_t w, int64_t c,
                      float *out, DiagSink *d)
{
    png_read_info(png, info);
    png_uint_32 width = png_get_image_width(png, info), height = png_get_image_height(png, info);
    if ((int64_t)width != w || (int64_t)height != h) {
        size_mismatch(path, width, height, h, w, d);
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
    size_t rowbytes = png_get_rowbytes(png, info), bytes;
    int channels = png_get_channels(png, info);
    if (channels != c || rowbytes < (size_t)(w * c)) {
        diag_plain(d, "%s: %d channels after conversion, the model needs %lld", path, channels, (long long)c);
        return -1;
    }
    /* interlaced images need every row at once */
    if (!gc_mul_size(rowbytes, height, &bytes) || !(r->pixels = gc_malloc(bytes)) ||
        !(r->rows = gc_calloc(height, sizeof *r->rows)))
        r->out_of_memory = true, png_error(png, "out of memory");
    for (png_uint_32 y = 0; y < height; y++) r->rows[y] = r->pixels + y * rowbytes;
    png_read_image(png, r->rows);
    png_read_end(png, NULL);   /* the chunks after the pixels, to IEND: a cut file fails here */
    if (r->idat_warning[0]) {
        diag_plain(d, "%s: bad PNG: %s (more pixel data than the header declares)", path, r->idat_warning);
        return -1;
    }
    for (int64_t i = 0; i < h * w * c; i++)
        out[i] = (float)r->pixels[(i / (w * c)) * rowbytes + i % (w * c)] / 255.0f;
    return 0;
}

static int load_png(FILE *f, const char *path, int64_t h, int64_t w, int64_t c, float *out, DiagSink *d)
{
    PngRead r = { .msg = "" };
    png_structp png = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, &r, png_fail, png_warn, &r, png_alloc,
                                               png_release);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    int rc = -1;
    if (!png || !info) {
        diag_plain(d, "%s: out of memory", path);
    } else if (setjmp(r.jmp)) {
        if (r.out_of_memory) diag_plain(d, "%s: out of memory reading the PNG", path);
        else diag_plain(d, "%s: bad PNG: %s", path, r.msg);
    } else {
        png_set_read_fn(png, f, png_read_file);
        png_set_sig_bytes(png, 8);   /* image_kind read the signature */
        rc = png_pixels(png, info, &r, path, h, w, c, out, d);
    }
    gc_free(r.pixels);
    gc_free(r.rows);
    png_destroy_read_struct(&png, &info, NULL);
    return rc;
}

int image_load(const char *path, int64_t h, int64_t w, int64_t c, float *out, DiagSink *d)
{
    if (c != 1 && c != 3) {
        diag_plain(d, "%s: the model's input has %lld channels; images give 1 (grey) or 3 (RGB)", path, (long long)c);
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        diag_plain(d, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    int rc = -1;
    ImageKind kind = image_kind(f, path, d);
    if (kind == IMG_PNG) rc = load_png(f, path, h, w, c, out, d);
    else if (kind != IMG_OTHER) rc = load_pgm(f, kind, path, h, w, c, out, d);
    fclose(f);
    return rc;
}
