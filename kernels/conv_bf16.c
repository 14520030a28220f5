/* The direct convolution's forward pass in bf16 (--dtype bf16, docs/bf16.md): the
 * fp32 kernel's plan (kernels/conv_direct.c: each output row reads a zero-padded copy
 * of the input rows under it, tiles of pixels x vectors of filters) with VDPBF16PS,
 * which adds to each fp32 lane the products of a pair of bf16 taps:
 *   the filter    packed once per call in pairs of consecutive taps (k even, k + 1),
 *                 one 32-bit word per filter and pair, blocks of 16 filters;
 *   the input     rounded to bf16 as its rows are copied into the strip, so that the
 *                 taps (kx, c) of a kernel row, consecutive there, are pairs too:
 *                 with C even no pair straddles two kernel rows (or two pixels), and
 *                 a pair's word is broadcast from the strip as it stands;
 *   the sums      fp32, one chain over the pairs in (ky, kx, c) order from +0, then
 *                 the bias and relu as conv_direct_forward adds them.
 * Half the instructions of the fp32 kernel per tap and half its bytes of input and
 * filter.  Each output's chain does not depend on the tile, the band or the cut into
 * rows, so threads and executors give the same bits.
 * Rounding is to nearest even (VCVTNE2PS2BF16; subnormals to zero), as
 * kernels/gemm_bf16.c rounds its operands. */
#include "kernels/conv_bf16.h"
#include "kernels/conv_direct.h"
#include "kernels/variant.h"

#include <string.h>

#ifdef KERN_X86_VARIANTS
#include <immintrin.h>

#define BF16_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define BF16_INLINE static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512bf16")))

enum {
    BLOCK = 16,             /* filters per packed block: one vector of words */
    STRIP_HALVES = 32768,   /* bf16 of the input rows under a band of output rows (64 KiB, as
                             * conv_direct.c's fp32 band) */
    TILE_MAX = 12
};

bool conv_bf16_ok(KIsa isa, const KConv *p)
{
    return kern_isa_bf16(isa) && p->c > 4 && p->c % 2 == 0 && kern_bf16_cpu() && conv_direct_ok(p) &&
           p->kh * p->kw * p->c <= STRIP_HALVES;
}

/* The pair word of two floats, rounded: the first in the low half (VDPBF16PS's even
 * element). */
BF16_INLINE __m512i pair_words(__m512 even, __m512 odd)
{
    const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                           21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(inter, (__m512i)_mm512_cvtne2ps_pbh(odd, even));
}

static __mmask16 lanes(int64_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u); }

/* Blocks of 16 filters, a word per filter and pair of taps (2tp, 2tp + 1), zero past F. */
BF16_FN void conv_bf16_pack(const KConv *p, const float *w, void *wp)
{
    const int64_t K = p->kh * p->kw * p->c, KP = K / 2, F = p->f;
    uint32_t *d = wp;
    for (int64_t f0 = 0; f0 < F; f0 += BLOCK) {
        const __mmask16 m = lanes(F - f0);
        for (int64_t tp = 0; tp < KP; tp++) {
            const __m512 e = _mm512_maskz_loadu_ps(m, w + 2 * tp * F + f0), o = _mm512_maskz_loadu_ps(m, w + (2 * tp + 1) * F + f0);
            _mm512_storeu_si512(d + (f0 / BLOCK * KP + tp) * BLOCK, pair_words(e, o));
        }
    }
}

/* q = the input gradient's forward convolution: its tap (ky, kx, f) of filter c is p's
 * tap (KH-1-ky, KW-1-kx, c) of filter f (conv_pack_flipped's). */
BF16_FN void conv_bf16_pack_flipped(const KConv *p, const float *w, void *wp)
{
    const int64_t C = p->c, F = p->f, KH = p->kh, KW = p->kw, KP = KH * KW * F / 2;
    uint32_t *d = wp;
    for (int64_t c0 = 0; c0 < C; c0 += BLOCK) {
        const int64_t nc = C - c0 < BLOCK ? C - c0 : BLOCK;
        for (int64_t tp = 0; tp < KP; tp++) {
            float v[2][BLOCK] = { { 0 } };
            for (int h = 0; h < 2; h++) {
                const int64_t t = 2 * tp + h, f = t % F, kk = t / F, ky = kk / KW, kx = kk % KW;
                const float *src = w + ((KH - 1 - ky) * KW + (KW - 1 - kx)) * C * F + f;
                for (int64_t c = 0; c < nc; c++)
                    v[h][c] = src[(c0 + c) * F];
            }
            _mm512_storeu_si512(d + (c0 / BLOCK * KP + tp) * BLOCK,
                                pair_words(_mm512_loadu_ps(v[0]), _mm512_loadu_ps(v[1])));
        }
    }
}

/* n floats (n even) rounded into n / 2 words of bf16 pairs. */
BF16_INLINE void round_run(const float *src, int64_t n, uint32_t *dst)
{
    for (int64_t i = 0; i < n; i += 32) {
        const int64_t left = n - i;
        const __mmask16 m0 = lanes(left), m1 = left > 16 ? lanes(left - 16) : 0;
        const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, src + i + 16), _mm512_maskz_loadu_ps(m0, src + i));
        _mm512_mask_storeu_epi32(dst + i / 2, lanes(left / 2), (__m512i)h);
    }
}

/* Width of the strip in input columns (conv_direct.c's strip_w). */
static int64_t strip_w(const KConv *p) { return (p->ow - 1) * p->sw + p->kw; }

/* `rows` input rows from the first under output row oy of image n, rounded, into
 * strip words (r * strip_w + s) * C / 2 + c / 2, zero outside the image (strip column
 * s is input column s - pl). */
BF16_FN static void fill_rows(const KConv *p, const float *x, int64_t n, int64_t oy, int64_t rows, uint32_t *strip)
{
    const int64_t C = p->c, sw = strip_w(p), rowlen = sw * C / 2;
    int64_t s0 = p->pl < 0 ? 0 : p->pl < sw ? p->pl : sw, s1 = p->w + p->pl < sw ? p->w + p->pl : sw;
    if (s1 < s0)
        s1 = s0;
    const float *xn = x + n * p->h * p->w * C;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t iy = oy * p->sh - p->pt + r;
        uint32_t *d = strip + r * rowlen;
        if (iy < 0 || iy >= p->h || s1 == s0) {
            memset(d, 0, (size_t)rowlen * sizeof *d);
            continue;
        }
        memset(d, 0, (size_t)(s0 * C / 2) * sizeof *d);
        round_run(xn + (iy * p->w + s0 - p->pl) * C, (s1 - s0) * C, d + s0 * C / 2);
        memset(d + s1 * C / 2, 0, (size_t)((sw - s1) * C / 2) * sizeof *d);
    }
}

/* One output row, or a tile of its columns (conv_direct.c's FwdRow, in words). */
typedef struct Row {
    const uint32_t *xs;   /* pixel 0's patch, kernel row 0 */
    int64_t pstep, rowlen, npix;   /* words from a pixel to the next, a kernel row to the next */
    int ky0, ky1;         /* the kernel rows inside the image */
    int kp;               /* pairs per kernel row: KW * C / 2 */
    const uint32_t *w;    /* the packed filter */
    int64_t wblock;       /* words per block of 16 filters: K / 2 * 16 */
    int64_t F;
    const float *bias;
    bool relu;
    bool amx;             /* on AMX's tiles (row_amx) */
    float *y;
} Row;

/* P pixels x NV vectors of filters from block w on, the last vector `mask`'s lanes. */
BF16_INLINE void tile(const int P, const int NV, const Row *r, const uint32_t *xs, const uint32_t *w, __mmask16 mask,
                      const float *bias, float *y)
{
    __m512 a[TILE_MAX][4];
#pragma GCC unroll 12
    for (int i = 0; i < P; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            a[i][v] = _mm512_setzero_ps();
    const int64_t pstep = r->pstep;
    for (int ky = r->ky0; ky < r->ky1; ky++) {
        const uint32_t *xr = xs + ky * r->rowlen, *wr = w + (int64_t)ky * r->kp * BLOCK;
        for (int t = 0; t < r->kp; t++) {
            __m512bh wv[4];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                wv[v] = (__m512bh)_mm512_loadu_si512(wr + v * r->wblock + t * BLOCK);
#pragma GCC unroll 12
            for (int i = 0; i < P; i++) {
                const __m512bh b = (__m512bh)_mm512_set1_epi32((int)xr[i * pstep + t]);
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++)
                    a[i][v] = _mm512_dpbf16_ps(a[i][v], b, wv[v]);
            }
        }
    }
    __m512 bv[4];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
        bv[v] = bias ? _mm512_maskz_loadu_ps(v < NV - 1 ? (__mmask16)0xffff : mask, bias + v * 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
    for (int i = 0; i < P; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            __m512 o = a[i][v];
            if (bias)
                o = _mm512_add_ps(o, bv[v]);
            if (r->relu)
                o = _mm512_max_ps(o, _mm512_setzero_ps());
            _mm512_mask_storeu_ps(y + i * r->F + v * 16, v < NV - 1 ? (__mmask16)0xffff : mask, o);
        }
}

#define CASES_6(C) case 1: C(1); break; case 2: C(2); break; case 3: C(3); break; \
    case 4: C(4); break; case 5: C(5); break; case 6: C(6); break;
#define CASES_12(C) CASES_6(C) case 7: C(7); break; case 8: C(8); break; case 9: C(9); break; \
    case 10: C(10); break; case 11: C(11); break; case 12: C(12); break;

/* ---- AMX: the same rows on tiles ---------------------------------------------------------
 * Where the CPU has AMX-BF16 (Sapphire Rapids on), TDPBF16PS multiplies a 16 x 32 tile of
 * bf16 by a 32 x 16 one into 16 x 16 fp32 sums: on this machine 1.8 TMAC/s per core,
 * against 55 G for VDPBF16PS and 109 G for fp32 FMAs (each alone in a loop, one
 * thread).  The strip and the packed filter are already its operands: A's rows are 16
 * pixels' 32 consecutive taps of a kernel row (one row every pstep words of the strip),
 * B's rows 16 pairs of taps of 16 filters (the packed block as it stands, 64 bytes a
 * row).  Taken where a kernel row's taps are whole tiles (KW C a multiple of 32: the
 * MNIST CNN's second layer, 160; fashion-resnet's 3x3 layers, 96 and up). */
static int amx_mode;   /* test hook: < 0 never */
void conv_bf16_set_amx(int mode) { amx_mode = mode; }

/* kern_bf16_amx(): the CPU, Linux's grant and GRAPHC_AMX, asked once (kernels/cpu.c) */
bool conv_bf16_grad_filter_ok(KIsa isa, const KConv *p)
{
    return conv_bf16_ok(isa, p) && !(amx_mode >= 0 && kern_bf16_amx());
}

static bool amx_ok(const KConv *p) { return amx_mode >= 0 && p->kw * p->c % 32 == 0 && kern_bf16_amx(); }


/* Tiles 0-3 the sums of 4 blocks of filters, 4 A (m pixels), 5 B; m rows of A and C. */
AMX_FN static void amx_config(int m)
{
    TileCfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 6; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = (uint8_t)(t == 5 ? 16 : m);
    }
    _tile_loadconfig(&cfg);
}

/* Sums tile b (m pixels x 16 filters from f) out: + bias, relu, into y. */
AMX_FN static void amx_out(const Row *r, const float *sums, int m, int64_t f, float *y)
{
    const __mmask16 mask = lanes(r->F - f);
    const __m512 b = r->bias ? _mm512_maskz_loadu_ps(mask, r->bias + f) : _mm512_setzero_ps();
    for (int i = 0; i < m; i++) {
        __m512 o = _mm512_loadu_ps(sums + i * 16);
        if (r->bias)
            o = _mm512_add_ps(o, b);
        if (r->relu)
            o = _mm512_max_ps(o, _mm512_setzero_ps());
        _mm512_mask_storeu_ps(y + i * r->F + f, mask, o);
    }
}

AMX_FN static void row_amx(const Row *r)
{
    float sums[4][256] __attribute__((aligned(64)));
    const int64_t F = r->F, nblk = (F + 15) / 16, astride = r->pstep * 4;
    int cfg = 0;
    for (int64_t p0 = 0; p0 < r->npix; p0 += 16) {
        const int m = r->npix - p0 < 16 ? (int)(r->npix - p0) : 16;
        if (m != cfg)
            amx_config(cfg = m);
        for (int64_t b0 = 0; b0 < nblk; b0 += 4) {
            const int nb = nblk - b0 < 4 ? (int)(nblk - b0) : 4;
            const uint32_t *w = r->w + b0 * r->wblock;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int ky = r->ky0; ky < r->ky1; ky++) {
                const uint32_t *xa = r->xs + p0 * r->pstep + ky * r->rowlen;
                const uint32_t *wk = w + (int64_t)ky * r->kp * BLOCK;
                for (int t = 0; t < r->kp; t += 16) {
                    _tile_loadd(4, xa + t, astride);
                    _tile_loadd(5, wk + t * BLOCK, 64);
                    _tile_dpbf16ps(0, 4, 5);
                    if (nb > 1) {
                        _tile_loadd(5, wk + r->wblock + t * BLOCK, 64);
                        _tile_dpbf16ps(1, 4, 5);
                    }
                    if (nb > 2) {
                        _tile_loadd(5, wk + 2 * r->wblock + t * BLOCK, 64);
                        _tile_dpbf16ps(2, 4, 5);
                    }
                    if (nb > 3) {
                        _tile_loadd(5, wk + 3 * r->wblock + t * BLOCK, 64);
                        _tile_dpbf16ps(3, 4, 5);
                    }
                }
            }
            _tile_stored(0, sums[0], 64);
            _tile_stored(1, sums[1], 64);
            _tile_stored(2, sums[2], 64);
            _tile_stored(3, sums[3], 64);
            for (int b = 0; b < nb; b++)
                amx_out(r, sums[b], m, (b0 + b) * 16, r->y + p0 * F);
        }
    }
}

AMX_FN static void amx_release(void) { _tile_release(); }

/* The row in groups of 4, 2 or 1 vectors of filters (6, 12, 12 pixels a tile: 24 or 12
 * accumulators, the filter vectors, a broadcast), each in nearly equal tiles. */
BF16_FN static void row(const Row *r)
{
    if (r->amx) {
        row_amx(r);
        return;
    }
    const int64_t F = r->F;
    for (int64_t f0 = 0; f0 < F;) {
        const int64_t need = (F - f0 + 15) / 16;
        const int nv = need >= 4 ? 4 : need >= 2 ? 2 : 1, pmax = nv == 4 ? 6 : 12;
        const __mmask16 mask = lanes(F - f0 - (int64_t)(nv - 1) * 16);
        const uint32_t *w = r->w + f0 / BLOCK * r->wblock;
        const float *bias = r->bias ? r->bias + f0 : NULL;
        const int64_t ntiles = (r->npix + pmax - 1) / pmax;
        for (int64_t i = 0, ox = 0; i < ntiles; i++) {
            const int P = (int)(r->npix / ntiles + (i < r->npix % ntiles));
            const uint32_t *xs = r->xs + ox * r->pstep;
            float *y = r->y + ox * F + f0;
#define T1(PP) tile(PP, 1, r, xs, w, mask, bias, y)
#define T2(PP) tile(PP, 2, r, xs, w, mask, bias, y)
#define T4(PP) tile(PP, 4, r, xs, w, mask, bias, y)
            switch (nv) {
            case 4: switch (P) { CASES_6(T4) default: break; } break;
            case 2: switch (P) { CASES_12(T2) default: break; } break;
            default: switch (P) { CASES_12(T1) default: break; } break;
            }
#undef T1
#undef T2
#undef T4
            ox += P;
        }
        f0 += (int64_t)nv * 16;
    }
}

/* The kernel rows [*ky0, *ky1) of output row oy inside the image. */
static void kernel_rows(const KConv *p, int64_t oy, int *ky0, int *ky1)
{
    const int64_t iy0 = oy * p->sh - p->pt;
    *ky0 = iy0 < 0 ? (int)(-iy0 < p->kh ? -iy0 : p->kh) : 0;
    *ky1 = p->h - iy0 < p->kh ? (int)(p->h - iy0) : (int)p->kh;
    if (*ky1 < *ky0)
        *ky1 = *ky0;
}

/* Bands and tiles as conv_direct_forward cuts them (its column_tile: the convolution
 * seen from output columns [c0, c0 + cols), the left padding moved), with the strip's
 * budget in bf16: a band of G output rows whose input rows fit, or one row in tiles of
 * the columns whose patches do. */
void conv_bf16_forward(const KConv *p, const float *x, const void *wp, const float *bias, EwAct act, float *y,
                       int64_t r0, int64_t rc)
{
    uint32_t strip[STRIP_HALVES / 2] __attribute__((aligned(64)));
    const int64_t F = p->f, C = p->c;
    int64_t cols = (STRIP_HALVES / (p->kh * C) - p->kw) / p->sw + 1;
    cols = cols < 1 ? 1 : cols < p->ow ? cols : p->ow;
    const int64_t tiles = (p->ow + cols - 1) / cols, fit = STRIP_HALVES / (strip_w(p) * C);
    const int64_t gmax = tiles > 1 || fit <= p->kh ? 1 : (fit - p->kh) / p->sh + 1;
    Row rw = { .pstep = p->sw * C / 2, .kp = (int)(p->kw * C / 2), .w = wp, .wblock = p->kh * p->kw * C / 2 * BLOCK,
               .F = F, .bias = bias, .relu = bias && act.fn == EW_RELU, .amx = amx_ok(p) };
    for (int64_t r = r0; r < r0 + rc;) {
        const int64_t n = r / p->oh, oy = r % p->oh;
        int64_t G = gmax < p->oh - oy ? gmax : p->oh - oy;
        G = G < r0 + rc - r ? G : r0 + rc - r;
        for (int64_t i = 0; i < tiles; i++) {
            const int64_t c0 = p->ow / tiles * i + (i < p->ow % tiles ? i : p->ow % tiles);
            const int64_t cw = p->ow / tiles + (i < p->ow % tiles);
            KConv q = *p;
            q.ow = cw;
            q.pl = p->pl - c0 * p->sw;
            fill_rows(&q, x, n, oy, (G - 1) * p->sh + p->kh, strip);
            rw.rowlen = strip_w(&q) * C / 2;
            rw.npix = cw;
            for (int64_t g = 0; g < G; g++) {
                kernel_rows(p, oy + g, &rw.ky0, &rw.ky1);
                rw.xs = strip + g * p->sh * rw.rowlen;
                rw.y = y + ((r + g - r0) * p->ow + c0) * F;
                row(&rw);
            }
        }
        if (bias && act.fn >= 0 && act.fn != EW_RELU)
            kern_unary((EwUnary)act.fn, act.p, y + (r - r0) * p->ow * F, y + (r - r0) * p->ow * F, (size_t)(G * p->ow * F));
        r += G;
    }
    if (rw.amx)   /* the tiles' state off this thread, so that its context switches stay small */
        amx_release();
}


/* ---- the filter gradient --------------------------------------------------------------
 * dW[t, f] is a sum over the output pixels, so the pairs are pairs of pixels: a band's
 * pixels (its output rows one after another, a zero pixel past an odd count) taken two
 * at a time, dy's pair words [pairs][F] made once per band, the input's [pairs][KW C]
 * once per kernel row, from the strip.  Each sum over a band is fp32 from +0 and then
 * added to acc, as conv_direct_grad_filter adds its bands' (and its bands are cut from
 * the rows as these are: the same sums whatever the row the call starts at). */
enum { PAIR_WORDS = 16384 };   /* dy's pair words, and the input's, of a band (64 KiB each) */

/* Pixel i of the band's npx (row i / ow, column i % ow): its input patch's kernel row ky
 * in the strip (rows rstep words apart), its dy row. */
typedef struct Band {
    const uint32_t *strip;
    int64_t rstep, pstep, rowlen, ow, npx;
    const float *dy;
    int64_t dyrow, F;
    int kwc;
} Band;

/* The band's dy in pair words: d[j * F + f] = (dy(2j, f), dy(2j + 1, f)). */
BF16_FN static void pair_dy(const Band *b, uint32_t *d)
{
    for (int64_t j = 0; 2 * j < b->npx; j++) {
        const int64_t i0 = 2 * j, i1 = i0 + 1;
        const float *e = b->dy + i0 / b->ow * b->dyrow + i0 % b->ow * b->F;
        const float *o = i1 < b->npx ? b->dy + i1 / b->ow * b->dyrow + i1 % b->ow * b->F : NULL;
        for (int64_t f0 = 0; f0 < b->F; f0 += BLOCK) {
            const __mmask16 m = lanes(b->F - f0);
            const __m512 ve = _mm512_maskz_loadu_ps(m, e + f0), vo = o ? _mm512_maskz_loadu_ps(m, o + f0) : _mm512_setzero_ps();
            _mm512_mask_storeu_epi32(d + j * b->F + f0, m, pair_words(ve, vo));
        }
    }
}

/* Kernel row ky's taps in pair words: d[j * kwc + t] = (x(2j, t), x(2j + 1, t)), the
 * halves of the strip (already bf16) interleaved. */
BF16_FN static void pair_x(const Band *b, int64_t ky, uint32_t *d)
{
    const uint16_t *s = (const uint16_t *)b->strip;
    const int kwc = b->kwc;
    for (int64_t j = 0; 2 * j < b->npx; j++) {
        const int64_t i0 = 2 * j, i1 = i0 + 1;
        const uint16_t *e = s + 2 * (i0 / b->ow * b->rstep + ky * b->rowlen + i0 % b->ow * b->pstep);
        const uint16_t *o = i1 < b->npx ? s + 2 * (i1 / b->ow * b->rstep + ky * b->rowlen + i1 % b->ow * b->pstep) : NULL;
        for (int t = 0; t < kwc; t += 32) {
            const __mmask32 m = kwc - t >= 32 ? 0xffffffffu : (__mmask32)((1u << (kwc - t)) - 1u);
            const __m512i ve = _mm512_maskz_loadu_epi16(m, e + t), vo = o ? _mm512_maskz_loadu_epi16(m, o + t) : _mm512_setzero_si512();
            /* halves t .. t+31 of each into words (e, o): the low 16 of each 128-bit
             * lane from unpacklo, the high from unpackhi, then the lanes in order */
            const __m512i lo = _mm512_unpacklo_epi16(ve, vo), hi = _mm512_unpackhi_epi16(ve, vo);
            const __m512i w0 = _mm512_permutex2var_epi64(lo, _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), hi);
            const __m512i w1 = _mm512_permutex2var_epi64(lo, _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4), hi);
            const int left = kwc - t;
            _mm512_mask_storeu_epi32(d + j * kwc + t, left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u), w0);
            if (left > 16)
                _mm512_mask_storeu_epi32(d + j * kwc + t + 16, (__mmask16)(left >= 32 ? 0xffff : (1u << (left - 16)) - 1u), w1);
        }
    }
}

/* T taps x NV vectors of filters over the band's pairs, added to acc[t * F]. */
BF16_INLINE void gw_tile(const int T, const int NV, int64_t pairs, int kwc, int64_t F, const uint32_t *xp,
                         const uint32_t *dp, __mmask16 mask, float *acc)
{
    __m512 a[TILE_MAX][4];
#pragma GCC unroll 12
    for (int t = 0; t < T; t++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            a[t][v] = _mm512_setzero_ps();
    for (int64_t j = 0; j < pairs; j++) {
        __m512bh d[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            d[v] = (__m512bh)_mm512_maskz_loadu_epi32(v < NV - 1 ? (__mmask16)0xffff : mask, dp + j * F + v * 16);
#pragma GCC unroll 12
        for (int t = 0; t < T; t++) {
            const __m512bh x = (__m512bh)_mm512_set1_epi32((int)xp[j * kwc + t]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                a[t][v] = _mm512_dpbf16_ps(a[t][v], x, d[v]);
        }
    }
#pragma GCC unroll 12
    for (int t = 0; t < T; t++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            float *dst = acc + t * F + v * 16;
            const __mmask16 m = v < NV - 1 ? (__mmask16)0xffff : mask;
            _mm512_mask_storeu_ps(dst, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst), a[t][v]));
        }
}

/* acc[t * F + f] += the band's sums for kernel row ky's taps (acc at the row's first). */
BF16_FN static void gw_row(int64_t pairs, int kwc, int64_t F, const uint32_t *xp, const uint32_t *dp, float *acc)
{
    for (int64_t f0 = 0; f0 < F;) {
        const int64_t need = (F - f0 + 15) / 16;
        const int nv = need >= 4 ? 4 : need >= 2 ? 2 : 1, tmax = nv == 4 ? 6 : 12;
        const __mmask16 mask = lanes(F - f0 - (int64_t)(nv - 1) * 16);
        const int ntiles = (kwc + tmax - 1) / tmax;
        for (int i = 0, t0 = 0; i < ntiles; i++) {
            const int T = kwc / ntiles + (i < kwc % ntiles);
#define G1(TT) gw_tile(TT, 1, pairs, kwc, F, xp + t0, dp + f0, mask, acc + (int64_t)t0 * F + f0)
#define G2(TT) gw_tile(TT, 2, pairs, kwc, F, xp + t0, dp + f0, mask, acc + (int64_t)t0 * F + f0)
#define G4(TT) gw_tile(TT, 4, pairs, kwc, F, xp + t0, dp + f0, mask, acc + (int64_t)t0 * F + f0)
            switch (nv) {
            case 4: switch (T) { CASES_6(G4) default: break; } break;
            case 2: switch (T) { CASES_12(G2) default: break; } break;
            default: switch (T) { CASES_12(G1) default: break; } break;
            }
#undef G1
#undef G2
#undef G4
            t0 += T;
        }
        f0 += (int64_t)nv * 16;
    }
}

void conv_bf16_grad_filter(const KConv *p, const float *x, const float *dy, float *acc, int64_t r0, int64_t rc)
{
    uint32_t strip[STRIP_HALVES / 2] __attribute__((aligned(64)));
    uint32_t dp[PAIR_WORDS] __attribute__((aligned(64))), xp[PAIR_WORDS] __attribute__((aligned(64)));
    const int64_t F = p->f, C = p->c, kwc = p->kw * C / 2 * 2;
    int64_t cols = (STRIP_HALVES / (p->kh * C) - p->kw) / p->sw + 1;
    /* a tile's pairs must fit too: at least one */
    const int64_t per_px = F > kwc ? F : kwc, pxmax = 2 * (PAIR_WORDS / per_px);
    cols = cols < 1 ? 1 : cols < p->ow ? cols : p->ow;
    cols = cols < pxmax ? cols : pxmax;
    const int64_t tiles = (p->ow + cols - 1) / cols, fit = STRIP_HALVES / (strip_w(p) * C);
    int64_t gmax = tiles > 1 || fit <= p->kh ? 1 : (fit - p->kh) / p->sh + 1;
    gmax = gmax < pxmax / p->ow ? gmax : pxmax / p->ow > 0 ? pxmax / p->ow : 1;
    Band b = { .strip = strip, .pstep = p->sw * C / 2, .dyrow = p->ow * F, .F = F, .kwc = (int)kwc };
    for (int64_t r = r0; r < r0 + rc;) {
        const int64_t n = r / p->oh, oy = r % p->oh;
        int64_t G = gmax < p->oh - oy ? gmax : p->oh - oy;
        G = G < r0 + rc - r ? G : r0 + rc - r;
        for (int64_t i = 0; i < tiles; i++) {
            const int64_t c0 = p->ow / tiles * i + (i < p->ow % tiles ? i : p->ow % tiles);
            const int64_t cw = p->ow / tiles + (i < p->ow % tiles);
            KConv q = *p;
            q.ow = cw;
            q.pl = p->pl - c0 * p->sw;
            fill_rows(&q, x, n, oy, (G - 1) * p->sh + p->kh, strip);
            b.rowlen = strip_w(&q) * C / 2;
            b.rstep = p->sh * b.rowlen;
            b.ow = cw;
            b.npx = G * cw;
            b.dy = dy + (r * p->ow + c0) * F;
            pair_dy(&b, dp);
            const int64_t pairs = (b.npx + 1) / 2;
            for (int64_t ky = 0; ky < p->kh; ky++) {
                pair_x(&b, ky, xp);
                gw_row(pairs, (int)kwc, F, xp, dp, acc + ky * kwc * F);
            }
        }
        r += G;
    }
}

#else
void conv_bf16_set_amx(int mode) { (void)mode; }
bool conv_bf16_ok(KIsa isa, const KConv *p)
{
    (void)isa, (void)p;
    return false;
}
bool conv_bf16_grad_filter_ok(KIsa isa, const KConv *p) { return conv_bf16_ok(isa, p); }
void conv_bf16_pack(const KConv *p, const float *w, void *wp) { (void)p, (void)w, (void)wp; }
void conv_bf16_pack_flipped(const KConv *p, const float *w, void *wp) { (void)p, (void)w, (void)wp; }
void conv_bf16_forward(const KConv *p, const float *x, const void *wp, const float *bias, EwAct act, float *y,
                       int64_t r0, int64_t rc)
{
    (void)p, (void)x, (void)wp, (void)bias, (void)act, (void)y, (void)r0, (void)rc;
}
void conv_bf16_grad_filter(const KConv *p, const float *x, const float *dy, float *acc, int64_t r0, int64_t rc)
{
    (void)p, (void)x, (void)dy, (void)acc, (void)r0, (void)rc;
}
#endif
