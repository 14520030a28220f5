/* Direct convolution: the work around the micro-kernels (kernels/micro.h), the same
 * for every variant.
 *
 * im2col + sgemm runs far below the machine's speed on an image network's
 * convolutions: the im2col matrix is K times the input, and with few channels (K = 25
 * for 5x5 filters on a grey image) the GEMM's packing and short dot products dominate;
 * with many (the MNIST CNN's second layer, K = 800, F = 64) the copy and the narrow
 * product still cost, and the speed is whatever OpenBLAS core the environment picked.
 * Here each output row (n, oy) reads a copy of the KH input rows under it, zero-padded
 * left and right (a "strip" on the stack), so the inner loops test no padding, and
 * within a kernel row the taps (kx, c) are consecutive both in the strip and in the
 * filter, packed once per call into blocks of 16 filters:
 *   forward      tiles of P pixels x NV vectors of filters, one FMA per tap and
 *                vector, over the kernel rows that are not padding;
 *   grad input   (stride 1) the forward kernel on dy with the filter flipped and
 *                transposed;
 *   grad filter  tiles of T taps x NV vectors, summed over a band of several output
 *                rows (the input rows under them copied once), so the [K, F]
 *                accumulator is read and written once per band.
 * A row too wide for the strip (few channels, large images) is done in tiles of
 * columns.  Strip, band and tiles are chosen from the sizes alone: the variants take
 * the same path and the same scratch. */
#include "kernels/conv_direct.h"
#include "kernels/pool.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

enum {
    DIRECT_MAX_C = 4,       /* up to this many input channels: any width, in tiles of columns */
    STRIP_FLOATS = 8192,    /* the input rows under one output row (32 KiB) */
    FWD_BAND_FLOATS = 16384, /* under several, forward (64 KiB) */
    BAND_FLOATS = 24576,    /* under several output rows, grad filter (96 KiB) */
    GRADW_BAND_FLOATS = 16384, /* a band's dy and input rows, ideally (64 KiB) */
    DIRECT_MIN_F = 8,       /* with many channels, fewer filters would leave most lanes idle */
    /* With many channels and a row too wide for the strip, the packed filter's bytes at
     * most: each tile of pixels reads all of it, so it must stay in L2 (512 KiB on a
     * Zen 3, 1 MiB on a Zen 5); larger filters (deep layers) stay on sgemm, which
     * blocks K and F. */
    DIRECT_MAX_PACK = 256 << 10,
    PACK_MIN_PIXELS = 1024, /* output pixels past which packing more than 64 filters pays */
    PLANAR_MAX_F = 8,       /* the planar path's filters: one tile holds them all */
    PLANAR_MAX_K = 256,     /* its taps: the filter copied on the stack, [K][8] */
    PLANAR_ROWS_MAX = 8,    /* its strides at most (the ring's slots) */
    PLANAR_FLOATS = 32768,  /* the ring of planes (128 KiB) */
    POOLED_MAX_RS = 8192,   /* the pooled filter gradient's sums, [F][KH][KW * C rounded up
                             * to 16] on the stack */
    POOLED_BAND_FLOATS = 32768 /* its input rows, several bands' (128 KiB, two of them) */
};

/* 0: automatic; < 0: never (test hook, kern.h) */
static int direct_mode;
void kern_conv_set_direct(int mode) { direct_mode = mode; }

/* Width of the strip: the input columns (padding included) that output columns
 * 0..ow-1 read. */
static int64_t strip_w(const KConv *p) { return (p->ow - 1) * p->sw + p->kw; }

/* Few input channels (C <= 4): the first layer of an image network. */
static bool conv_direct_few(const KConv *p) { return p->c <= DIRECT_MAX_C; }

bool conv_direct_ok(const KConv *p)
{
#ifdef GRAPHC_NO_DIRECT_CONV
    (void)p;
    (void)direct_mode;
    (void)strip_w;
    return false;
#else
    if (direct_mode < 0 || p->c < 1 || p->f < 1 || p->oh < 1 || p->ow < 1 || p->kh < 1 || p->kw < 1 ||
        p->kw * p->c > INT32_MAX / PACK_BLOCK)
        return false;
    if (p->kh * p->kw * p->c > STRIP_FLOATS)   /* not even one column's patches fit */
        return false;
    if (conv_direct_few(p))
        return true;
    return p->f >= DIRECT_MIN_F &&
           (p->kh * strip_w(p) * p->c <= STRIP_FLOATS || conv_pack_floats(p) * sizeof(float) <= DIRECT_MAX_PACK);
#endif
}

/* The forward convolution whose output is p's input gradient (stride 1). */
static KConv flipped(const KConv *p)
{
    return (KConv){ .n = p->n, .h = p->oh, .w = p->ow, .c = p->f, .kh = p->kh, .kw = p->kw, .f = p->c,
                    .sh = 1, .sw = 1, .pt = p->kh - 1 - p->pt, .pl = p->kw - 1 - p->pl, .oh = p->h, .ow = p->w };
}

bool conv_direct_grad_input_ok(const KConv *p, KConv *q)
{
    if (p->sh != 1 || p->sw != 1 || p->pt < 0 || p->pl < 0 || p->pt > p->kh - 1 || p->pl > p->kw - 1)
        return false;
    *q = flipped(p);
    return conv_direct_ok(q);
}

bool kern_conv_direct_used(const KConv *p)
{
    KConv q;
    return conv_direct_ok(p) || conv_direct_grad_input_ok(p, &q);
}

/* Does the forward kernel read p's filter in blocks of PACK_BLOCK filters, or as
 * stored?  As stored costs no copy (packing the MNIST CNN's 800 x 64 filter took 20%
 * of its convolution at batch 1), and the loads are as many either way: as fast up to
 * 64 filters (a tap's filters one run of bytes).  Past that a group of 64 reads half
 * of each tap's run, and blocks measured 10-14% faster (7x7, 128 filters, batch 128),
 * which pays for the copy once enough pixels read the filter.  A count that leaves a
 * partial vector needs the zero-filled blocks.  (AVX-512, one thread on a Zen 5.) */
static bool blocked(const KConv *p)
{
    return p->f % PACK_BLOCK != 0 || (p->f > 64 && p->n * p->oh * p->ow >= PACK_MIN_PIXELS);
}

/* An address off 64 bytes is copied too: each 64-byte load would span two cache lines
 * (10-20% slower). */
bool conv_pack_needed(const KConv *p, const float *w) { return blocked(p) || (uintptr_t)w % 64 != 0; }

size_t conv_pack_floats(const KConv *p)
{
    return (size_t)(p->kh * p->kw * p->c) * (size_t)((p->f + PACK_BLOCK - 1) / PACK_BLOCK * PACK_BLOCK);
}

/* Where the forward kernel reads p's filter: wtap floats from one tap to the next,
 * wblock from one block of PACK_BLOCK filters to the next. */
static void filter_layout(const KConv *p, int64_t *wtap, int64_t *wblock)
{
    const bool b = blocked(p);
    *wtap = b ? PACK_BLOCK : p->f;
    *wblock = b ? p->kh * p->kw * p->c * PACK_BLOCK : PACK_BLOCK;
}

void conv_pack_flipped(const KConv *p, const float *w, float *wp)
{
    const int64_t C = p->c, F = p->f, KW = p->kw, cpad = (C + PACK_BLOCK - 1) / PACK_BLOCK * PACK_BLOCK;
    const KConv q = flipped(p);   /* its taps are (ky, kx, f), its filters p's channels */
    int64_t wtap, wblock;
    filter_layout(&q, &wtap, &wblock);
    for (int64_t ky = 0; ky < p->kh; ky++)
        for (int64_t kx = 0; kx < KW; kx++)
            for (int64_t f = 0; f < F; f++) {
                const int64_t t = (ky * KW + kx) * F + f;   /* q's tap */
                const float *src = w + ((p->kh - 1 - ky) * KW + (KW - 1 - kx)) * C * F + f;
                for (int64_t c = 0; c < cpad; c++)
                    wp[c / PACK_BLOCK * wblock + t * wtap + c % PACK_BLOCK] = c < C ? src[c * F] : 0.0f;
            }
}

void conv_pack(const KConv *p, const float *w, float *wp)
{
    const int64_t K = p->kh * p->kw * p->c, F = p->f;
    if (!blocked(p)) {   /* read as stored: a copy at an aligned address */
        memcpy(wp, w, (size_t)(K * F) * sizeof *wp);
        return;
    }
    for (int64_t f0 = 0; f0 < F; f0 += PACK_BLOCK) {
        const int64_t nf = F - f0 < PACK_BLOCK ? F - f0 : PACK_BLOCK;
        float *d = wp + f0 * K;   /* block f0 / PACK_BLOCK: [K][PACK_BLOCK] */
        for (int64_t t = 0; t < K; t++) {
            memcpy(d + t * PACK_BLOCK, w + t * F + f0, (size_t)nf * sizeof *d);
            for (int64_t j = nf; j < PACK_BLOCK; j++)
                d[t * PACK_BLOCK + j] = 0.0f;
        }
    }
}

/* `rows` input rows from the first under output row oy of image n, strip columns
 * s = ix + pl, zero where they fall outside the image: strip[(r * strip_w + s) * C + c]. */
static void fill_rows(const KConv *p, const float *x, int64_t n, int64_t oy, int64_t rows, float *strip)
{
    const int64_t C = p->c, sw = strip_w(p), rowlen = sw * C;
    /* strip column s is input column s - pl (pl < 0 for a tile of columns, below) */
    int64_t s0 = p->pl < 0 ? 0 : p->pl < sw ? p->pl : sw; /* first strip column inside */
    int64_t s1 = p->w + p->pl < sw ? p->w + p->pl : sw;    /* one past the last */
    if (s1 < s0)
        s1 = s0;
    const float *xn = x + n * p->h * p->w * C;
    for (int64_t r = 0; r < rows; r++) {
        int64_t iy = oy * p->sh - p->pt + r;
        float *d = strip + r * rowlen;
        if (iy < 0 || iy >= p->h || s1 == s0) {
            memset(d, 0, (size_t)rowlen * sizeof *d);
            continue;
        }
        memset(d, 0, (size_t)(s0 * C) * sizeof *d);
        memcpy(d + s0 * C, xn + (iy * p->w + s0 - p->pl) * C, (size_t)((s1 - s0) * C) * sizeof *d);
        memset(d + s1 * C, 0, (size_t)((sw - s1) * C) * sizeof *d);
    }
}

/* Output columns whose patches over `rows` input rows fit in `floats` (at least one,
 * as conv_direct_ok asks), or the whole row. */
static int64_t fit_cols(const KConv *p, int64_t rows, int64_t floats)
{
    int64_t cols = (floats / (rows * p->c) - p->kw) / p->sw + 1;
    return cols < 1 ? 1 : cols < p->ow ? cols : p->ow;
}

/* The convolution seen from output columns [c0, c0 + cols) of a row: the same image,
 * the left padding moved so that strip column 0 is under output column c0 (negative
 * once c0 is past the padding).  Its strip holds only what those columns read, so a
 * row of any width is done in tiles that fit; each pixel's taps, and so its value,
 * are the same. */
static KConv column_tile(const KConv *p, int64_t c0, int64_t cols)
{
    KConv q = *p;
    q.ow = cols;
    q.pl = p->pl - c0 * p->sw;
    return q;
}

/* Tile i of `tiles` nearly equal tiles of n columns: [*c0, *c0 + *cols). */
static void tile_of(int64_t n, int64_t tiles, int64_t i, int64_t *c0, int64_t *cols)
{
    *c0 = n / tiles * i + (i < n % tiles ? i : n % tiles);
    *cols = n / tiles + (i < n % tiles);
}

/* Output rows per band of the forward pass, when a whole row's patches fit the strip:
 * as many as their input rows fit FWD_BAND_FLOATS, so that an input row is copied
 * about once, not once per kernel row over it (the copies were 16% of a 3x3 layer's
 * time on 28x28x32, one thread on a Zen 5). */
static int64_t fwd_band_rows(const KConv *p)
{
    const int64_t rows = FWD_BAND_FLOATS / (strip_w(p) * p->c);
    return rows > p->kh ? (rows - p->kh) / p->sh + 1 : 1;
}

/* The band of output rows from row r (of image row oy) on: at most gmax, inside the
 * image and before `end`. */
static int64_t band_of(const KConv *p, int64_t gmax, int64_t r, int64_t oy, int64_t end)
{
    int64_t G = gmax < p->oh - oy ? gmax : p->oh - oy;
    return G < end - r ? G : end - r;
}

/* The kernel rows [*ky0, *ky1) of output row oy that fall inside the image (the others
 * add nothing). */
static void kernel_rows(const KConv *p, int64_t oy, int *ky0, int *ky1)
{
    const int64_t iy0 = oy * p->sh - p->pt;
    *ky0 = iy0 < 0 ? (int)(-iy0 < p->kh ? -iy0 : p->kh) : 0;
    *ky1 = p->h - iy0 < p->kh ? (int)(p->h - iy0) : (int)p->kh;
    if (*ky1 < *ky0)
        *ky1 = *ky0;
}

/* ---- the planar path: few channels and at most 8 filters ------------------------------
 * A vector of filters is wasted on large.net's first layer (8 filters, 3 channels,
 * stride 2): half of a 16-lane vector, and one broadcast per FMA.  Vectorised over
 * pixels instead, each tap is one load of VL pixels from a plane of one channel and
 * one column phase, and 8 FMAs with the filters broadcast: full vectors, no strip
 * copy.  Each output is the same chain of FMAs (taps in the same order), so the bits
 * are the strip path's.
 * The planes of an input row are made once, when the first output row that reads it
 * comes, into a ring of KH rows (slot iy % KH), whole rows wide where they fit: the
 * input is then read once, in order, row after row.  Tiles of columns (each row's
 * pieces read one at a time, half a row apart) streamed from memory at half the rate
 * (18 against 35 GB/s, one thread on a Zen 5).  While an output row is made, the input
 * rows the next one adds are prefetched, so that their misses overlap its FMAs. */

/* Plane width for a tile of `cols` output columns: a multiple of 16 past the columns
 * the taps read. */
static int64_t planar_pw(const KConv *p, int64_t cols) { return (cols + (p->kw - 1) / p->sw + 15) / 16 * 16 + 16; }

/* Input rows in the ring: those under a step's G output rows and the G * SH the next
 * step adds, made while this one is. */
static int64_t planar_slots(const KConv *p, int64_t G) { return (G - 1) * p->sh + p->kh + G * p->sh; }

/* Output columns per tile (whole rows where the ring of planes fits PLANAR_FLOATS,
 * else a multiple of 16); 0 where the planar path does not apply. */
static int64_t planar_cols(const KConv *p)
{
    if (p->c > DIRECT_MAX_C || p->f > PLANAR_MAX_F || p->kh * p->kw * p->c > PLANAR_MAX_K || p->sw > 16 ||
        p->kh > PLANAR_MAX_KH || p->sh > PLANAR_ROWS_MAX)
        return 0;
    const int64_t per = planar_slots(p, 1) * p->c * p->sw;
    if (per * planar_pw(p, p->ow) <= PLANAR_FLOATS)
        return p->ow;
    int64_t cols = (PLANAR_FLOATS / per - 32 - (p->kw - 1) / p->sw) / 16 * 16;
    return cols < 16 ? 0 : cols;
}

/* The plane columns [*ja, *jb) of a tile from output column c0 (pw wide) whose S
 * phases all lie inside the image: input columns from (c0 + j) * S - pl on, S * C
 * floats in a run for each j. */
static void plane_run(const KConv *p, int64_t c0, int64_t pw, int64_t *ja, int64_t *jb)
{
    const int64_t S = p->sw, W = p->w, x0 = c0 * S - p->pl;
    *ja = x0 >= 0 ? 0 : (-x0 + S - 1) / S;
    *jb = W - S - x0 < 0 ? 0 : (W - S - x0) / S + 1;
    *jb = *jb < pw ? *jb : pw;
    *ja = *ja < *jb ? *ja : *jb;
}

/* The planes of input row iy of image n for the tile from output column c0 (PlanarRow's
 * layout: plane (c, ph) at d + (c * sw + ph) * pw), zero outside the image; the
 * inside run (plane_run) only when `inside`. */
static void fill_plane_row(const KernVariant *kv, const KConv *p, const float *x, int64_t n, int64_t iy, int64_t c0,
                           int64_t pw, float *d, bool inside)
{
    const int64_t C = p->c, S = p->sw, W = p->w, x0 = c0 * S - p->pl;
    const float *xr = x + (n * p->h + iy) * W * C;
    int64_t ja, jb;
    plane_run(p, c0, pw, &ja, &jb);
    for (int64_t j = 0; j < pw; j++) {
        if (j == ja && jb > ja) {
            const float *src = xr + (x0 + ja * S) * C;
            if (inside && S == 2 && C == 3)   /* large.net's first layer */
                kv->planes6(src, jb - ja, d + ja, pw, 768);
            else if (inside)
                for (int64_t k = ja; k < jb; k++, src += S * C)
                    for (int64_t ph = 0; ph < S; ph++)
                        for (int64_t c = 0; c < C; c++)
                            d[(c * S + ph) * pw + k] = src[ph * C + c];
            j = jb - 1;
            continue;
        }
        for (int64_t ph = 0; ph < S; ph++) {
            const int64_t ix = x0 + j * S + ph;
            for (int64_t c = 0; c < C; c++)
                d[(c * S + ph) * pw + j] = ix >= 0 && ix < W ? xr[ix * C + c] : 0.0f;
        }
    }
}

/* The output rows of a planar pass: units [r0, r0 + rc) of G rows each (the rows of a
 * pooled row's windows, or G = 1), per_image units an image; unit k of the pass is
 * image *n's rows from *oy on. */
typedef struct PlanarSeq {
    int64_t r0, rc, per_image, G;
} PlanarSeq;

static void seq_unit(const PlanarSeq *s, int64_t k, int64_t *n, int64_t *oy)
{
    const int64_t u = s->r0 + k;
    *n = u / s->per_image;
    *oy = u % s->per_image * s->G;
}

/* The input rows [*lo, *hi) that output rows oy .. oy + G - 1 read (inside the image). */
static void unit_rows(const KConv *p, int64_t oy, int64_t G, int64_t *lo, int64_t *hi)
{
    int ky0, ky1, ky0l, ky1l;
    kernel_rows(p, oy, &ky0, &ky1);
    kernel_rows(p, oy + G - 1, &ky0l, &ky1l);
    *lo = oy * p->sh - p->pt + ky0;
    *hi = (oy + G - 1) * p->sh - p->pt + ky1l;
    if (*hi < *lo)
        *hi = *lo;
}

/* The next unit's input rows that are not in the ring yet (from *next on), into pr's
 * fills where the variant makes them (3 channels at stride 2: the planes' inside run,
 * the edges now; at most PLANAR_MAX_FILL rows), else now. */
static void planar_fills(const KernVariant *kv, const KConv *p, const float *x, int64_t n, int64_t oy, int64_t G,
                         int64_t c0, PlanarRow *pr, float *ring, int64_t *next)
{
    const int64_t NS = planar_slots(p, G), slot = p->c * p->sw * pr->pw;
    int64_t lo, hi;
    unit_rows(p, oy, G, &lo, &hi);
    int64_t ja, jb;
    plane_run(p, c0, pr->pw, &ja, &jb);
    const bool later = p->sw == 2 && p->c == 3 && jb > ja;
    for (int64_t iy = *next > lo ? *next : lo; iy < hi; iy++) {
        float *d = ring + iy % NS * slot;
        const bool fill = later && pr->nfill < PLANAR_MAX_FILL;
        fill_plane_row(kv, p, x, n, iy, c0, pr->pw, d, !fill);
        if (fill) {
            pr->fill_src[pr->nfill] = x + ((n * p->h + iy) * p->w + (c0 + ja) * p->sw - p->pl) * p->c;
            pr->fill_dst[pr->nfill++] = d + ja;
            pr->fill_n = jb - ja;
            /* the same columns of the rows the unit after adds (prefetched into L1
             * during the tile before the fill, planar_row: 2 rows ahead ran 10.9 ms
             * against 14.7 at 1, 11.2 at 6, 22.7 at none, large.net's conv2d_maxpool
             * at batch 4, one thread; prefetcht1 or t2 instead, or 3 or 4 rows ahead,
             * were no faster) */
            pr->fill_pf = G * p->sh * p->w * p->c;
        }
        *next = iy + 1;
    }
}

/* The units of s in the tile of output columns from c0 (pr->pw wide, pr->npix pixels),
 * with pr's filter and epilogue, into y (the pass's row 0 at y[0]; pooled, into
 * pr's pooled rows: y is q's output of unit r0, idx its index or NULL).  The ring
 * holds planar_slots(p, G) rows' planes. */
static void planar_pass(const KernVariant *kv, const KConv *p, const KPool *q, const float *x, const PlanarSeq *s,
                        int64_t c0, PlanarRow *pr, float *ring, float *y, int32_t *idx)
{
    const int64_t G = s->G, NS = planar_slots(p, G), slot = p->c * p->sw * pr->pw;
    int64_t have_n = -1, next = 0;   /* image have_n's rows below `next` are in the ring */
    for (int64_t k = 0; k < s->rc; k++) {
        int64_t n, oy, lo, hi;
        seq_unit(s, k, &n, &oy);
        const int64_t iy0 = oy * p->sh - p->pt;
        if (n != have_n)
            have_n = n, next = 0;
        for (int64_t g = 0; g < G; g++)
            kernel_rows(p, oy + g, &pr->ky0[g], &pr->ky1[g]);
        unit_rows(p, oy, G, &lo, &hi);
        if (next < lo)
            next = lo;
        for (; next < hi; next++)
            fill_plane_row(kv, p, x, n, next, c0, pr->pw, ring + next % NS * slot, true);
        for (int64_t i = 0; i < (G - 1) * p->sh + p->kh; i++)
            pr->xr[i] = iy0 + i >= lo && iy0 + i < hi ? ring + (iy0 + i) % NS * slot : NULL;
        pr->nfill = 0;
        if (k + 1 < s->rc) {
            int64_t n1, oy1;
            seq_unit(s, k + 1, &n1, &oy1);
            if (n1 == n)   /* then oy1 = oy + G: its rows fit the ring beside this unit's */
                planar_fills(kv, p, x, n, oy1, G, c0, pr, ring, &next);
        }
        if (!pr->pooled)
            pr->y = y + (k * p->ow + c0) * p->f;
        else {
            pr->py = y + k * q->ow * q->c;
            pr->pidx = idx ? idx + k * q->ow * q->c : NULL;
            pr->cell0 = (int32_t)(oy * p->ow);
        }
        kv->planar_row(pr);
    }
}

static const float planar_iota[16] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };

/* The filter as the planar tiles read it ([K][8], zero past F) and the bias (8), into
 * pr. */
static void planar_setup(const KConv *p, const float *wp, const float *bias, bool relu, float *w8, float *b8,
                         PlanarRow *pr)
{
    const int64_t K = p->kh * p->kw * p->c, F = p->f;
    int64_t wtap, wblock;
    filter_layout(p, &wtap, &wblock);
    for (int64_t t = 0; t < K; t++)
        for (int64_t f = 0; f < 8; f++)
            w8[t * 8 + f] = f < F ? wp[f / PACK_BLOCK * wblock + t * wtap + f % PACK_BLOCK] : 0.0f;
    for (int64_t f = 0; f < 8; f++)
        b8[f] = bias && f < F ? bias[f] : 0.0f;
    *pr = (PlanarRow){ .kw = (int)p->kw, .c = (int)p->c, .sw = (int)p->sw, .sh = (int)p->sh, .G = 1, .w = w8,
                       .bias = bias ? b8 : NULL, .relu = relu, .F = F, .ow = p->ow, .iota = planar_iota };
}

static void planar_forward(const KernVariant *kv, const KConv *p, const float *x, const float *wp, const float *bias,
                           bool relu, float *y, int64_t r0, int64_t rc)
{
    float ring[PLANAR_FLOATS], w8[PLANAR_MAX_K * 8], b8[8];
    const int64_t cols = planar_cols(p), tiles = (p->ow + cols - 1) / cols;
    PlanarRow pr;
    planar_setup(p, wp, bias, relu, w8, b8, &pr);
    const PlanarSeq s = { r0, rc, p->oh, 1 };
    for (int64_t i = 0; i < tiles; i++) {
        int64_t c0;
        tile_of(p->ow, tiles, i, &c0, &pr.npix);
        pr.pw = planar_pw(p, pr.npix);
        planar_pass(kv, p, NULL, x, &s, c0, &pr, ring, y, NULL);
    }
}

bool conv_direct_pool_ok(const KernVariant *kv, const KConv *p, const KPool *q, const float *bias, EwAct act)
{
    const int64_t npix = q->ow * q->kw;
    return kv->planar_row && bias && act.fn == EW_RELU && planar_cols(p) == p->ow && q->kw == 4 && q->sw == 4 &&
           q->kh == q->sh && q->kh >= 1 && q->kh <= PLANAR_MAX_G && (q->kh - 1) * p->sh + p->kh <= PLANAR_MAX_XR &&
           q->pt == 0 && q->pl == 0 && q->c == p->f && q->h == p->oh && q->w == p->ow && q->oh >= 1 && q->ow >= 1 &&
           npix <= p->ow && q->oh * q->kh <= p->oh && (q->kh + 1) * p->ow < (1 << 24) && p->oh * p->ow <= INT32_MAX;
}

/* The ring of planes of a pooled row's windows' input rows and of the next one's:
 * large.net's 17 rows, 390 KiB, more than the stack should hold. */
size_t conv_direct_pool_floats(const KConv *p, const KPool *q)
{
    if (planar_cols(p) != p->ow || q->kh < 1 || q->kh > PLANAR_MAX_G)
        return 0;
    return (size_t)(planar_slots(p, q->kh) * p->c * p->sw * planar_pw(p, p->ow));
}

void conv_direct_pool(const KernVariant *kv, const KConv *p, const KPool *q, const float *x, const float *wp,
                      const float *bias, float *y, int32_t *idx, int64_t r0, int64_t rc, float *ring)
{
    float w8[PLANAR_MAX_K * 8], b8[8];
    PlanarRow pr;
    planar_setup(p, wp, bias, true, w8, b8, &pr);
    pr.npix = q->ow * q->kw;
    pr.pw = planar_pw(p, p->ow);
    pr.pooled = true;
    pr.G = (int)q->kh;
    const PlanarSeq s = { r0, rc, q->oh, q->kh };
    planar_pass(kv, p, q, x, &s, 0, &pr, ring, y, idx);
}

/* The lines of the input rows that the band after the G rows from r on copies and
 * this one did not (*pf, *lines; none: unchanged), for fwd_row to prefetch (whole rows
 * only: tiles of columns read parts of rows, left to the hardware). */
static void next_band(const KConv *p, const float *x, int64_t r, int64_t G, int64_t end, int64_t gmax, const char **pf,
                      int64_t *lines)
{
    r += G;
    if (r >= end)
        return;
    const int64_t n = r / p->oh, oy = r % p->oh, G2 = band_of(p, gmax, r, oy, end);
    int64_t iy0 = oy * p->sh - p->pt, iy1 = (oy + G2 - 1) * p->sh - p->pt + p->kh;
    if (oy > 0)   /* rows the band before read too, still in the cache */
        iy0 = (oy - 1) * p->sh - p->pt + p->kh;
    iy0 = iy0 < 0 ? 0 : iy0, iy1 = iy1 > p->h ? p->h : iy1;
    if (iy1 <= iy0)
        return;
    const float *a = x + ((n * p->h + iy0) * p->w) * p->c, *b = x + ((n * p->h + iy1) * p->w) * p->c;
    *pf = (const char *)((uintptr_t)a & ~(uintptr_t)63);
    *lines = ((const char *)b - *pf + 63) / 64;
}

void conv_direct_forward(const KernVariant *kv, const KConv *p, const float *x, const float *wp, const float *bias,
                         EwAct act, float *y, int64_t r0, int64_t rc)
{
    if (kv->planar_row && planar_cols(p) > 0) {
        planar_forward(kv, p, x, wp, bias, bias && act.fn == EW_RELU, y, r0, rc);
        if (bias && act.fn >= 0 && act.fn != EW_RELU)
            kern_unary((EwUnary)act.fn, act.p, y, y, (size_t)(rc * p->ow * p->f));
        return;
    }
    float strip[FWD_BAND_FLOATS];
    const int64_t F = p->f, cols = fit_cols(p, p->kh, STRIP_FLOATS), tiles = (p->ow + cols - 1) / cols;
    const int64_t gmax = tiles > 1 ? 1 : fwd_band_rows(p);
    FwdRow fr = { .pstep = p->sw * p->c, .kwc = (int)(p->kw * p->c), .wp = wp, .F = F, .bias = bias,
                  .relu = bias && act.fn == EW_RELU };
    filter_layout(p, &fr.wtap, &fr.wblock);
    for (int64_t r = r0; r < r0 + rc;) {
        const int64_t n = r / p->oh, oy = r % p->oh, G = band_of(p, gmax, r, oy, r0 + rc);
        for (int64_t i = 0; i < tiles; i++) {
            int64_t c0, cw;
            tile_of(p->ow, tiles, i, &c0, &cw);
            const KConv q = column_tile(p, c0, cw);
            fill_rows(&q, x, n, oy, (G - 1) * p->sh + p->kh, strip);
            const char *pf = NULL;
            int64_t pf_lines = 0;
            if (tiles == 1)
                next_band(p, x, r, G, r0 + rc, gmax, &pf, &pf_lines);
            fr.rowlen = strip_w(&q) * p->c;
            fr.rstep = p->sh * fr.rowlen;
            fr.npix = cw;
            /* the band's rows whose kernel rows are the same (the rows between the
             * padding's) as one run of pixels: its tiles may span rows (G > 1 only
             * for whole rows, so their outputs are consecutive) */
            for (int64_t g = 0, g1; g < G; g = g1) {
                int ky0, ky1, k0, k1;
                kernel_rows(p, oy + g, &ky0, &ky1);
                for (g1 = g + 1; g1 < G; g1++) {
                    kernel_rows(p, oy + g1, &k0, &k1);
                    if (k0 != ky0 || k1 != ky1)
                        break;
                }
                fr.ky0 = ky0, fr.ky1 = ky1, fr.rows = g1 - g;
                fr.pf = pf, fr.pf_lines = pf_lines * g1 / G - pf_lines * g / G;   /* a share by rows */
                if (pf)
                    pf += 64 * fr.pf_lines;
                fr.xs = strip + g * fr.rstep;
                fr.y = y + ((r + g - r0) * p->ow + c0) * F;
                kv->fwd_row(&fr);
            }
        }
        if (bias && act.fn >= 0 && act.fn != EW_RELU)
            kern_unary((EwUnary)act.fn, act.p, y + (r - r0) * p->ow * F, y + (r - r0) * p->ow * F,
                       (size_t)(G * p->ow * F));
        r += G;
    }
}

/* Output rows per band of the filter gradient, when a whole row's patches fit the band
 * buffer.  A band saves reading and writing the [K, F] accumulator once per row, which
 * pays where it is larger than a row of dy (K > ow: the MNIST CNN's second layer, 800
 * taps on 14 pixels); each tile of taps goes through all of the band's dy rows and
 * input rows, so they should fit GRADW_BAND_FLOATS.  64 KiB is past L1, but the larger
 * the accumulator the more a pass over it costs: against 32 KiB, 3-9% faster at 14x14
 * and 28x28 and 19-27% at 7x7 with 128 and 256 filters (a [1152, 128] accumulator is
 * 590 KB; AVX-512, one thread on a Zen 5; 128 KiB gained nothing more).  With fewer
 * taps than pixels, one row (the first layer's 25 taps on 28 pixels: 77 -> 98 GFLOP/s
 * with AVX2, 120 -> 135 with AVX-512, one thread on a Zen 5, against whole images). */
static int64_t band_rows(const KConv *p)
{
    const int64_t rowlen = strip_w(p) * p->c, fit = (BAND_FLOATS / rowlen - p->kh) / p->sh + 1;
    int64_t g = 1;
    if (p->kh * p->kw * p->c <= p->ow)   /* the accumulator is no larger than a dy row */
        return 1;
    while (g < fit && (g + 1) * p->ow * p->f + (g * p->sh + p->kh) * rowlen <= GRADW_BAND_FLOATS)
        g++;
    return g;
}

/* The filter gradient's tiles of columns and output rows per band: as many of an
 * image's rows as their input rows fit, when a whole row fits; else one, in tiles. */
static void gradw_tiling(const KConv *p, int64_t *tiles, int64_t *gmax)
{
    const int64_t cols = fit_cols(p, p->kh, BAND_FLOATS);
    *tiles = (p->ow + cols - 1) / cols;
    *gmax = *tiles > 1 ? 1 : band_rows(p);
}

void conv_direct_grad_filter(const KernVariant *kv, const KConv *p, const float *x, const float *dy, float *acc,
                             int64_t r0, int64_t rc)
{
    float band[BAND_FLOATS];
    const int64_t F = p->f, kwc = p->kw * p->c;
    int64_t tiles, gmax;
    gradw_tiling(p, &tiles, &gmax);
    GradwBand gb = { .pstep = p->sw * p->c, .dyrow = p->ow * F, .F = F, .kwc = (int)kwc };
    for (int64_t r = r0; r < r0 + rc;) {
        const int64_t n = r / p->oh, oy = r % p->oh, G = band_of(p, gmax, r, oy, r0 + rc);
        for (int64_t i = 0; i < tiles; i++) {
            int64_t c0, cw;
            tile_of(p->ow, tiles, i, &c0, &cw);
            const KConv q = column_tile(p, c0, cw);
            fill_rows(&q, x, n, oy, (G - 1) * p->sh + p->kh, band);
            const int64_t rowlen = strip_w(&q) * p->c;
            gb.rstep = p->sh * rowlen;
            gb.ow = cw;
            gb.dy = dy + (r * p->ow + c0) * F;
            for (int64_t ky = 0; ky < p->kh; ky++) {
                /* the band's rows g whose input row (oy + g) * sh - pt + ky is inside */
                int64_t g0 = 0, g1 = G;
                while (g0 < G && (oy + g0) * p->sh - p->pt + ky < 0)
                    g0++;
                while (g1 > g0 && (oy + g1 - 1) * p->sh - p->pt + ky >= p->h)
                    g1--;
                if (g0 == g1)
                    continue;
                gb.g0 = g0;
                gb.g1 = g1;
                gb.xs = band + ky * rowlen;
                gb.acc = acc + ky * kwc * F;
                kv->gradw_band(&gb);
            }
        }
        r += G;
    }
}

/* ---- the filter gradient through a max pool ------------------------------------------
 * Through a 4x4 pool, fifteen of every sixteen elements of dy are zeros, and dy itself
 * (large.net's first layer: 66 MB at batch 4) is written by the scatter only to be read
 * here and by the bias gradient.  Instead the terms are found from the pool's index
 * (maxpool_row_hits) and each adds its patch times g, as the dense chain would with
 * the zeros left out: fma(x, 0, a) is a for a finite x (a is never -0: chains start at
 * +0), so the sums, band by band and tile by tile as conv_direct_grad_filter makes
 * them, have the same bits. */
/* A kernel row's sums, padded to whole vectors of any variant */
static int64_t pooled_rsk(const KConv *p) { return (p->kw * p->c + 15) / 16 * 16; }

bool conv_pooled_ok(const KConv *p, const KPool *q)
{
    return conv_direct_ok(p) && p->f * p->kh * pooled_rsk(p) <= POOLED_MAX_RS && q->h == p->oh && q->w == p->ow && q->c == p->f &&
           maxpool_hits_ok(q);
}

/* Input rows [iy0, iy1) of image n, asked for ahead of their copy. */
static void pooled_prefetch(const KConv *p, const float *x, int64_t n, int64_t iy0, int64_t iy1)
{
    const int64_t len = p->w * p->c * (int64_t)sizeof *x;
    for (int64_t iy = iy0 < 0 ? 0 : iy0; iy < iy1 && iy < p->h; iy++) {
        const char *r = (const char *)(x + (n * p->h + iy) * p->w * p->c);
        for (int64_t b = 0; b < len; b += 64)
            __builtin_prefetch(r + b);
    }
}

/* A fill: the input rows of output rows [oy, oy + rows) of image n (as many from oy on
 * as fit POOLED_BAND_FLOATS, at most `left`) in a band buffer, as fill_rows lays them
 * out, then 16 zeros; the chains still band by band.  Where bands are one output row
 * (large's conv1) the next fill is made in the other of two buffers while this one is
 * read: its rows from memory a slice after each filter's terms, the slice after that
 * asked for (prefetched) among those terms (PooledNext), and the rows two fills share
 * (at stride 2, one of 5) copied from the last fill, so that each input row is read
 * from memory once.  Filled at once, the copies waited for memory with nothing to
 * overlap: two thirds of the kernel's time was in memmove (perf, one thread, Xeon). */
typedef struct PooledFill {
    int64_t n, oy, rows;   /* the output rows [oy, oy + rows) of image n whose input rows are held */
    int64_t iy0, in;       /* those input rows */
    float *band;
} PooledFill;

/* The rows of a fill still to come from x: floats [at, total) of `count` rows' inside
 * parts (len floats each), row i from src + i * xrow into dst + i * drow. */
typedef struct PooledNext {
    PooledFill f;
    bool on;
    const float *src;
    float *dst;
    int64_t len, xrow, drow, count, at, total, slice;
} PooledNext;

static void pooled_layout(const KConv *p, int64_t *rowlen, int64_t *s0, int64_t *s1)
{
    const int64_t sw = strip_w(p);
    *rowlen = sw * p->c;
    *s0 = p->pl < 0 ? 0 : p->pl < sw ? p->pl : sw;
    *s1 = p->w + p->pl < sw ? p->w + p->pl : sw;
    if (*s1 < *s0)
        *s1 = *s0;
}

/* Fill f (f->band set) for output row oy of image n, at most `left` rows: the zeros and
 * the rows the previous fill `prev` holds (from the cache) now, the others from x into
 * *nx (copied by pooled_copy), or now where nx is NULL. */
static void pooled_start(const KConv *p, const float *x, int64_t n, int64_t oy, int64_t left, const PooledFill *prev,
                         PooledFill *f, PooledNext *nx)
{
    int64_t rowlen, s0, s1;
    pooled_layout(p, &rowlen, &s0, &s1);
    const int64_t fit = (POOLED_BAND_FLOATS / rowlen - p->kh) / p->sh + 1, C = p->c;
    f->n = n, f->oy = oy;
    f->rows = fit < left ? fit : left;
    f->in = (f->rows - 1) * p->sh + p->kh;
    f->iy0 = oy * p->sh - p->pt;
    const float *xn = x + n * p->h * p->w * C;
    int64_t first = -1, count = 0;   /* the rows from x: [first, first + count) of the fill */
    for (int64_t r = 0; r < f->in; r++) {
        const int64_t iy = f->iy0 + r;
        float *d = f->band + r * rowlen;
        if (iy < 0 || iy >= p->h || s1 == s0) {
            memset(d, 0, (size_t)rowlen * sizeof *d);
            continue;
        }
        memset(d, 0, (size_t)(s0 * C) * sizeof *d);
        memset(d + s1 * C, 0, (size_t)((rowlen - s1 * C)) * sizeof *d);
        if (prev && prev->n == n && iy >= prev->iy0 && iy < prev->iy0 + prev->in)
            memcpy(d + s0 * C, prev->band + (iy - prev->iy0) * rowlen + s0 * C, (size_t)((s1 - s0) * C) * sizeof *d);
        else if (!nx)
            memcpy(d + s0 * C, xn + (iy * p->w + s0 - p->pl) * C, (size_t)((s1 - s0) * C) * sizeof *d);
        else {
            if (first < 0)
                first = r;
            count = r - first + 1;   /* the rows from x follow those of prev: one run */
        }
    }
    memset(f->band + f->in * rowlen, 0, 16 * sizeof *f->band);
    if (!nx)
        return;
    nx->f = *f;
    nx->on = true;
    nx->len = (s1 - s0) * C;
    nx->xrow = p->w * C;
    nx->drow = rowlen;
    nx->count = first < 0 ? 0 : count;
    nx->src = first < 0 ? NULL : xn + ((f->iy0 + first) * p->w + s0 - p->pl) * C;
    nx->dst = first < 0 ? NULL : f->band + first * rowlen + s0 * C;
    nx->at = 0;
    nx->total = nx->count * nx->len;
}

/* The lines of nx's next slice (from nx->at to the end of the slice or of its row). */
static void pooled_next_lines(const PooledNext *nx, const float **pf, int64_t *npf)
{
    *pf = NULL, *npf = 0;
    if (nx->at >= nx->total)
        return;
    const int64_t i = nx->at / nx->len, j = nx->at % nx->len, k = nx->len - j < nx->slice ? nx->len - j : nx->slice;
    *pf = nx->src + i * nx->xrow + j;
    *npf = (k + 15) / 16;
}

/* The next slice of nx's rows from x (all of them where `all`; a slice never spans two
 * rows).  The lines of the slice after it are then *pf, *npf of them (to be asked for
 * while the next filter's terms are summed). */
static void pooled_copy(PooledNext *nx, bool all, const float **pf, int64_t *npf)
{
    int64_t end = nx->total;
    if (!all && nx->at < nx->total) {
        const int64_t row_end = (nx->at / nx->len + 1) * nx->len;
        end = nx->at + nx->slice < row_end ? nx->at + nx->slice : row_end;
    }
    while (nx->at < end) {
        const int64_t i = nx->at / nx->len, j = nx->at % nx->len;
        const int64_t k = nx->len - j < end - nx->at ? nx->len - j : end - nx->at;
        memcpy(nx->dst + i * nx->drow + j, nx->src + i * nx->xrow + j, (size_t)k * sizeof *nx->dst);
        nx->at += k;
    }
    pooled_next_lines(nx, pf, npf);
}

void conv_direct_grad_filter_pooled(const KernVariant *kv, const KConv *p, const KPool *q, const float *x,
                                    const int32_t *idx, const float *yv, const float *dpool, float *acc, int64_t r0,
                                    int64_t rc)
{
    float rs[POOLED_MAX_RS] __attribute__((aligned(64)));
    /* the bands' rows, copied as conv_direct_grad_filter copies them (read in place, the
     * patches' rows were misses the prefetchers did not see coming: 21 ms against the
     * dense kernel's 15, large's conv1 at batch 4, one thread), and past them the floats
     * that a patch's last row reads beyond its taps, into the sums' padding */
    static_assert(POOLED_BAND_FLOATS >= BAND_FLOATS, "the pooled band holds the dense kernel's");
    float bands[2][POOLED_BAND_FLOATS + 16], *band = bands[0];
    PoolHits h;
    h.n = -1;
    const int64_t F = p->f, C = p->c;
    const int64_t kwc = p->kw * p->c, rsk = pooled_rsk(p), rsf = p->kh * rsk;
    SparseRows s = { .pstep = p->sw * C, .ox0 = 0, .kh = (int)p->kh, .rsk = (int)rsk };
    int64_t tiles, gmax;   /* conv_direct_grad_filter's bands and tiles: its chains */
    gradw_tiling(p, &tiles, &gmax);
    /* tiles == 1: the fill the bands read, and the next one as far as it is made */
    PooledFill cur = { .band = NULL };
    PooledNext nx = { .on = false };
    for (int64_t r = r0; r < r0 + rc;) {
        const int64_t n = r / p->oh, oy = r % p->oh, G = band_of(p, gmax, r, oy, r0 + rc);
        for (int64_t i = 0; i < tiles; i++) {
            int64_t c0, cw;
            tile_of(p->ow, tiles, i, &c0, &cw);
            const KConv qt = column_tile(p, c0, cw);
            const int64_t rows = (G - 1) * p->sh + p->kh, rowlen = strip_w(&qt) * C;
            const float *xs = band;
            if (tiles > 1) {
                fill_rows(&qt, x, n, oy, rows, band);
                memset(band + rows * rowlen, 0, 16 * sizeof *band);
                if (i + 1 == tiles)   /* the next band's new rows */
                    pooled_prefetch(p, x, n, (oy + G) * p->sh - p->pt + (p->kh > p->sh ? p->kh - p->sh : 0),
                                    (oy + G) * p->sh - p->pt + rows);
            } else {
                if (!cur.band || n != cur.n || oy + G > cur.oy + cur.rows) {
                    const int64_t left = p->oh - oy < r0 + rc - r ? p->oh - oy : r0 + rc - r;
                    if (nx.on && nx.f.n == n && nx.f.oy == oy) {   /* the next fill, made so far */
                        pooled_copy(&nx, true, &s.pf, &s.npf);
                        nx.on = false;
                    } else {
                        PooledFill f = { .band = cur.band == bands[0] ? bands[1] : bands[0] };
                        pooled_start(p, x, n, oy, left, NULL, &f, NULL);
                        nx.f = f;
                        nx.on = false;
                    }
                    cur = nx.f;
                    /* the next fill into the other buffer, a slice per filter of each band */
                    const int64_t r1 = r + cur.rows, nl = r1 < r0 + rc ? r0 + rc - r1 : 0;
                    if (gmax == 1 && nl > 0) {
                        const int64_t n1 = r1 / p->oh, oy1 = r1 % p->oh;
                        PooledFill f = { .band = cur.band == bands[0] ? bands[1] : bands[0] };
                        pooled_start(p, x, n1, oy1, p->oh - oy1 < nl ? p->oh - oy1 : nl, &cur, &f, &nx);
                        /* slices of equal parts of a row, about one per filter and band */
                        const int64_t per_row = nx.count > 0 ? (cur.rows * F + nx.count - 1) / nx.count : 1;
                        nx.slice = ((nx.len + per_row - 1) / per_row + 15) / 16 * 16;
                        pooled_next_lines(&nx, &s.pf, &s.npf);
                    }
                }
                xs = cur.band + (oy - cur.oy) * p->sh * rowlen;
            }
            memset(rs, 0, (size_t)(rsf * F) * sizeof *rs);
            s.xrow = rowlen;
            s.ox0 = (int32_t)c0;
            for (int64_t g = 0; g < G; g++) {
                s.xs = xs + g * p->sh * rowlen;
                for (int64_t f = 0; f < F; f++) {   /* each filter's terms in ascending columns */
                    int64_t k0;
                    int64_t k = maxpool_row_hits(kv->isa, q, idx, yv, dpool, n, oy + g, f, &h, &k0);
                    if (tiles > 1) {   /* the tile's columns */
                        while (k > 0 && h.ox[k0] < c0)
                            k0++, k--;
                        while (k > 0 && h.ox[k0 + k - 1] >= c0 + cw)
                            k--;
                    }
                    s.ox = h.ox + k0;
                    s.g = h.g + k0;
                    s.n = k;
                    s.rs = rs + f * rsf;
                    if (k)
                        kv->sparse_rows(&s);
                    else
                        for (int64_t l = 0; l < s.npf; l++)
                            __builtin_prefetch((const char *)s.pf + 64 * l);
                    s.pf = NULL, s.npf = 0;
                    if (nx.on)
                        pooled_copy(&nx, false, &s.pf, &s.npf);
                }
            }
            for (int64_t ky = 0, t = 0; ky < p->kh; ky++)   /* as gradw_tile adds a tile's sums */
                for (int64_t j = 0; j < kwc; j++, t++)
                    for (int64_t f = 0; f < F; f++)
                        acc[t * F + f] += rs[f * rsf + ky * rsk + j];
        }
        r += G;
    }
}
