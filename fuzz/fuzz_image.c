/* libFuzzer target: the image readers of graphc predict, with headers kept valid enough
 * that the fields behind them are reached.  The input is a recipe: a model input size
 * (h x w, 1 or 3 channels, now and then 2), and a file built for it: a binary or text
 * PGM whose magic, blanks, comments, width, height and maxval are the model's or
 * hostile (0, negative, huge, run into letters), with a body cut, in range or not, or
 * trailing; or a PNG with valid CRCs whose IHDR (size, bit depth, colour type,
 * interlace), PLTE, tRNS and zlib-compressed rows (filter bytes and all) come from the
 * recipe, now and then cut, split or with a CRC broken; or the recipe's bytes as the
 * file.  The output buffer is exactly h*w*c floats (ASan sees a byte past it); a
 * success has every value in [0, 1], a refusal a message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "fuzz/recipe.h"
#include "run/image.h"
#include "util/mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A growing output file in memory. */
typedef struct Buf {
    uint8_t *p;
    size_t n, cap;
} Buf;

static void put(Buf *b, const void *s, size_t n)
{
    if (n == 0) return;
    if (b->n + n > b->cap) {
        size_t cap = (b->n + n) * 2 + 64;
        uint8_t *p = realloc(b->p, cap);
        if (!p) abort();
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void puts_(Buf *b, const char *s) { put(b, s, strlen(s)); }

static void put32(Buf *b, uint32_t v)
{
    uint8_t q[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };
    put(b, q, 4);
}

/* ---- PGM ---------------------------------------------------------------------------- */

static const char *const blanks[] = { " ", "\n", "\t", "\r\n", " # a comment\n", "#x\n ", "", "\v" };

/* A header number: the model's value mostly, else a hostile one. */
static void pgm_field(Buf *b, Recipe *r, long want)
{
    static const char *const hostile[] = { "0", "-1", "1000001", "99999999999999999999", "12x", "x", "65536", "" };
    unsigned k = take(r, 1);
    char s[32];
    if (k < 200) snprintf(s, sizeof s, "%ld", want);
    else if (k < 230) snprintf(s, sizeof s, "%u", take(r, 2));
    else snprintf(s, sizeof s, "%s", hostile[k % 8]);
    puts_(b, s);
}

static void build_pgm(Buf *b, Recipe *r, bool text, long h, long w)
{
    unsigned f = take(r, 1);
    if (f & 1) {
        char magic[3] = { 'P', (char)take(r, 1), 0 };
        puts_(b, magic);
    } else {
        puts_(b, text ? "P2" : "P5");
    }
    long maxval = f & 2 ? (long)take(r, 2) : 255;
    pgm_field(b, r, w);
    puts_(b, blanks[take(r, 1) % 8]);
    pgm_field(b, r, h);
    puts_(b, blanks[take(r, 1) % 8]);
    puts_(b, blanks[take(r, 1) % 8]);
    pgm_field(b, r, maxval);
    puts_(b, f & 4 ? blanks[take(r, 1) % 8] : "\n");
    long pixels = h * w + (f & 8 ? (long)(take(r, 1) % 5) - 2 : 0);   /* a few short or over */
    for (long i = 0; i < pixels; i++) {
        unsigned v = take(r, maxval > 255 ? 2 : 1);
        if (!(f & 16) && maxval > 0) v %= (unsigned)maxval + 1;   /* in range, unless asked */
        if (text) {
            char s[16];
            snprintf(s, sizeof s, "%u%s", v, i % 7 == 6 ? "\n" : " ");
            puts_(b, s);
        } else if (maxval > 255) {
            uint8_t q[2] = { (uint8_t)(v >> 8), (uint8_t)v };
            put(b, q, 2);
        } else {
            uint8_t q = (uint8_t)v;
            put(b, &q, 1);
        }
    }
}

/* ---- PNG ---------------------------------------------------------------------------- */

static void chunk(Buf *b, const char *type, const uint8_t *d, uint32_t n, bool bad_crc)
{
    put32(b, n);
    size_t at = b->n;
    put(b, type, 4);
    if (n) put(b, d, n);
    uint32_t crc = (uint32_t)crc32(0, b->p + at, n + 4);
    put32(b, bad_crc ? crc ^ 1 : crc);
}

static void build_png(Buf *b, Recipe *r, long h, long w)
{
    static const uint8_t sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    static const uint8_t depths[5] = { 1, 2, 4, 8, 16 }, types[5] = { 0, 2, 3, 4, 6 };
    static const int chans[7] = { 1, 0, 3, 1, 2, 0, 4 };
    unsigned f = take(r, 2);
    put(b, sig, 8);
    uint32_t pw = (uint32_t)w, ph = (uint32_t)h;
    if (f & 1) pw = take(r, 1) & 1 ? take(r, 4) : take(r, 1);
    if (f & 2) ph = take(r, 1) & 1 ? take(r, 4) : take(r, 1);
    uint8_t depth = f & 4 ? (uint8_t)take(r, 1) : depths[take(r, 1) % 5];
    uint8_t type = f & 8 ? (uint8_t)take(r, 1) : types[take(r, 1) % 5];
    uint8_t ihdr[13] = { (uint8_t)(pw >> 24), (uint8_t)(pw >> 16), (uint8_t)(pw >> 8), (uint8_t)pw,
                         (uint8_t)(ph >> 24), (uint8_t)(ph >> 16), (uint8_t)(ph >> 8), (uint8_t)ph,
                         depth, type, 0, 0, (uint8_t)(f & 16 ? take(r, 1) % 3 : 0) };
    int bad = f & 32 ? (int)(take(r, 1) % 6) : -1;   /* which chunk's CRC is broken */
    chunk(b, "IHDR", ihdr, 13, bad == 0);
    if (type == 3 || f & 64) {
        uint32_t n = take(r, 1) + (f & 128 ? 1 : 0);   /* 0..256 entries, 257 hostile */
        uint8_t plte[3 * 257];
        for (uint32_t i = 0; i < 3 * n; i++) plte[i] = (uint8_t)take(r, 1);
        chunk(b, "PLTE", plte, 3 * n, bad == 1);
    }
    if (f & 256) {
        uint8_t trns[256];
        uint32_t n = take(r, 1);
        for (uint32_t i = 0; i < n; i++) trns[i] = (uint8_t)take(r, 1);
        chunk(b, "tRNS", trns, n, bad == 2);
    }
    /* the rows as a non-interlaced image of the model's size would have them */
    int ch = type < 7 ? chans[type] : 1;
    size_t rowbytes = ((size_t)w * (size_t)(ch ? ch : 1) * (depth ? depth : 8) + 7) / 8;
    size_t rows = (size_t)h + (f & 512 ? take(r, 1) % 3 : 0);
    size_t rawn = rows * (rowbytes + 1);
    if (rawn > (1u << 18)) rawn = 1u << 18;
    uint8_t *raw = malloc(rawn + 1);
    if (!raw) abort();
    for (size_t i = 0; i < rawn; i++) {
        uint8_t v = (uint8_t)(r->n ? r->p[i % r->n] : i);
        raw[i] = i % (rowbytes + 1) == 0 && !(f & 1024) ? v % 5 : v;   /* filter bytes 0..4 */
    }
    uLongf zn = compressBound(rawn);
    uint8_t *z = malloc(zn);
    if (!z || compress(z, &zn, raw, rawn) != Z_OK) abort();
    if (f & 2048) zn = take(r, 2) % (zn + 1);   /* the stream cut */
    unsigned parts = 1 + take(r, 1) % 3;
    for (unsigned k = 0; k < parts; k++) {
        size_t from = zn * k / parts, to = zn * (k + 1) / parts;
        chunk(b, "IDAT", z + from, (uint32_t)(to - from), bad == 3);
    }
    if (!(f & 4096)) chunk(b, "IEND", NULL, 0, bad == 4);
    if (f & 8192) b->n = take(r, 3) % (b->n + 1);   /* the file cut */
    free(raw);
    free(z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/graphc-fuzz-image-%ld", (long)getpid());
    Recipe r = { data, size };
    unsigned kind = take(&r, 1) % 4;
    long h = 1 + (long)take(&r, 1) % 24, w = 1 + (long)take(&r, 1) % 24;
    unsigned cs = take(&r, 1) % 16;
    int64_t c = cs == 0 ? 2 : cs < 5 ? 3 : 1;
    Buf b = { 0 };
    if (kind == 0 || kind == 1) build_pgm(&b, &r, kind == 1, h, w);
    else if (kind == 2) build_png(&b, &r, h, w);
    else put(&b, r.p, r.n);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (b.n) fwrite(b.p, 1, b.n, f);
    fclose(f);
    free(b.p);
    size_t n = (size_t)(h * w * c);
    float *out = gc_malloc(n * sizeof *out);
    DiagSink d;
    diag_init(&d, NULL);
    if (image_load(path, h, w, c, out, &d) == 0) {
        for (size_t i = 0; i < n; i++)
            if (!(out[i] >= 0.0f && out[i] <= 1.0f)) abort();
        if (d.nerrors) abort();
    } else if (d.nerrors == 0) {
        abort();   /* a refusal must say why */
    }
    diag_free(&d);
    gc_free(out);
    unlink(path);
    return 0;
}
