/* Direct convolution for few input channels: the first layer of an image network.
 *
 * With K = KH*KW*C small (25 for 5x5 filters on a grey image), im2col + sgemm runs far
 * below the machine's speed: the im2col matrix is K times the input, and the GEMM's
 * packing and short dot products dominate (22 GFLOP/s on the MNIST CNN's first layer
 * against 100 for its second).  Here each output row (n, oy) reads a copy of the KH
 * input rows under it, zero-padded left and right (a "strip" on the stack), so the
 * inner loops have no padding tests, and the arithmetic is done in AVX2 registers:
 *   forward      a tile of 6 output pixels x 16 filters, over the K taps in
 *                (ky, kx, c) order, one FMA per tap;
 *   grad filter  a tile of up to 6 taps x 16 filters, over the row's output pixels,
 *                added into the caller's [K, F] accumulator row after row.
 * Filter counts that are not a multiple of 16 use masked loads and stores for the
 * last block.  Every sum is in a fixed order, so results do not depend on how the
 * pixels are split into calls (the grad filter's row partials excepted: they follow
 * the caller's split, which is static).
 *
 * With many input channels (C > 4; the MNIST CNN's second layer, K = 800, F = 64)
 * sgemm runs at speed but the im2col copy, the narrow product and its packing still
 * cost: the "wide" forward kernel here reads the same strips, with the filter packed
 * once per call into blocks of 16 filters ([F/16][K][16], zero-filled past F), tiles
 * of up to 6 pixels x 16 filters, rows split into nearly equal tiles, and the kernel
 * rows that fall on the padding skipped.  The same kernel gives the input gradient
 * of a stride-1 convolution (dy convolved with the flipped, transposed filter), and
 * the filter gradient sums tiles of up to 6 taps x 16 filters over a band of several
 * output rows (the input rows under them copied once), so the [K, F] accumulator is
 * read and written once per band rather than once per row.
 *
 * x86 only, compiled for AVX2 + FMA with target attributes and taken only when the CPU
 * has both (checked at run time); everywhere else conv.c's im2col path runs. */
#include "kernels/conv_direct.h"

#include <stdint.h>
#include <string.h>

/* GRAPHC_NO_DIRECT_CONV: without these kernels (the fuzz build, whose targets never
 * reach a convolution, and where instrumenting this file's AVX2 code took clang over
 * two minutes). */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(GRAPHC_NO_DIRECT_CONV)
#define CONV_DIRECT 1
#include <immintrin.h>
#endif

enum {
    DIRECT_MAX_C = 4,       /* more input channels: K grows and sgemm is at speed */
    DIRECT_MAX_K = 80,      /* taps (KH*KW*C): offsets kept in a table on the stack */
    DIRECT_STRIP = 4096,    /* floats of the zero-padded input rows of one output row */
    WIDE_STRIP = 8192,      /* the same for the many-channel forward kernel (32 KiB) */
    WIDE_BAND = 12288,      /* input rows under several output rows, grad filter (48 KiB) */
    WIDE_MIN_F = 8,         /* fewer filters would leave most of each 16-lane block idle */
    TILE = 6,               /* pixels (forward) or taps (grad filter) per register tile */
    FBLOCK = 16             /* filters per tile: two AVX vectors */
};

/* 0: automatic; < 0: never (test hook, kern.h) */
static int direct_mode;
void kern_conv_set_direct(int mode) { direct_mode = mode; }

#ifdef CONV_DIRECT
/* Width of the strip: the input columns (padding included) that output columns
 * 0..ow-1 read. */
static int64_t strip_w(const KConv *p) { return (p->ow - 1) * p->sw + p->kw; }
#endif

bool conv_direct_ok(const KConv *p)
{
#ifdef CONV_DIRECT
    /* any width: a row wider than the strip is done in tiles of columns */
    if (direct_mode < 0 || p->c < 1 || p->c > DIRECT_MAX_C || p->kh * p->kw * p->c > DIRECT_MAX_K || p->f < 1 ||
        p->oh < 1 || p->ow < 1)
        return false;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    (void)p;
    (void)direct_mode;
    return false;
#endif
}

bool conv_wide_ok(const KConv *p)
{
#ifdef CONV_DIRECT
    if (direct_mode < 0 || p->c <= DIRECT_MAX_C || p->f < WIDE_MIN_F || p->oh < 1 || p->ow < 1 ||
        p->kh * strip_w(p) * p->c > WIDE_STRIP || p->kw * p->c > INT32_MAX / FBLOCK)
        return false;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    (void)p;
    return false;
#endif
}

bool conv_wide_grad_input_ok(const KConv *p, KConv *q)
{
    if (p->sh != 1 || p->sw != 1 || p->pt < 0 || p->pl < 0 || p->pt > p->kh - 1 || p->pl > p->kw - 1)
        return false;
    *q = (KConv){ .n = p->n, .h = p->oh, .w = p->ow, .c = p->f, .kh = p->kh, .kw = p->kw, .f = p->c,
                  .sh = 1, .sw = 1, .pt = p->kh - 1 - p->pt, .pl = p->kw - 1 - p->pl, .oh = p->h, .ow = p->w };
    return conv_wide_ok(q);
}

bool kern_conv_direct_used(const KConv *p)
{
    KConv q;
    return conv_direct_ok(p) || conv_wide_ok(p) || conv_wide_grad_input_ok(p, &q);
}

size_t conv_wide_pack_floats(const KConv *p)
{
    return (size_t)(p->kh * p->kw * p->c) * (size_t)((p->f + FBLOCK - 1) / FBLOCK * FBLOCK);
}

void conv_wide_pack_flipped(const KConv *p, const float *w, float *wp)
{
    const int64_t C = p->c, F = p->f, KW = p->kw, K = p->kh * KW * F;   /* K: taps of q */
    for (int64_t c0 = 0; c0 < C; c0 += FBLOCK) {
        const int64_t nc = C - c0 < FBLOCK ? C - c0 : FBLOCK;
        float *d = wp + c0 * K;
        for (int64_t ky = 0; ky < p->kh; ky++)
            for (int64_t kx = 0; kx < KW; kx++)
                for (int64_t f = 0; f < F; f++) {
                    float *dt = d + ((ky * KW + kx) * F + f) * FBLOCK;
                    const float *src = w + ((p->kh - 1 - ky) * KW + (KW - 1 - kx)) * C * F + f;
                    for (int64_t j = 0; j < FBLOCK; j++)
                        dt[j] = j < nc ? src[(c0 + j) * F] : 0.0f;
                }
    }
}

void conv_wide_pack(const KConv *p, const float *w, float *wp)
{
    const int64_t K = p->kh * p->kw * p->c, F = p->f;
    for (int64_t f0 = 0; f0 < F; f0 += FBLOCK) {
        const int64_t nf = F - f0 < FBLOCK ? F - f0 : FBLOCK;
        float *d = wp + f0 * K;   /* block f0 / FBLOCK: [K][FBLOCK] */
        for (int64_t t = 0; t < K; t++) {
            memcpy(d + t * FBLOCK, w + t * F + f0, (size_t)nf * sizeof *d);
            for (int64_t j = nf; j < FBLOCK; j++)
                d[t * FBLOCK + j] = 0.0f;
        }
    }
}

#ifdef CONV_DIRECT   /* up to conv_wide_forward: the kernels and their strips */

/* The KH input rows under output row (n, oy), strip columns s = ix + pl, zero where
 * they fall outside the image: strip[(ky * strip_w + s) * C + c]. */
static void fill_rows(const KConv *p, const float *x, int64_t n, int64_t oy, int64_t rows, float *strip);

static void fill_strip(const KConv *p, const float *x, int64_t n, int64_t oy, float *strip)
{
    fill_rows(p, x, n, oy, p->kh, strip);
}

/* The same for `rows` input rows from the first under output row oy: a band. */
static void fill_rows(const KConv *p, const float *x, int64_t n, int64_t oy, int64_t rows, float *strip)
{
    const int64_t C = p->c, sw = strip_w(p), rowlen = sw * C;
    /* strip column s is input column s - pl (pl < 0 for a tile of columns, below) */
    int64_t s0 = p->pl < 0 ? 0 : p->pl < sw ? p->pl : sw; /* first strip column inside */
    int64_t s1 = p->w + p->pl < sw ? p->w + p->pl : sw;    /* one past the last */
    if (s1 < s0)
        s1 = s0;
    const float *xn = x + n * p->h * p->w * C;
    for (int64_t ky = 0; ky < rows; ky++) {
        int64_t iy = oy * p->sh - p->pt + ky;
        float *d = strip + ky * rowlen;
        if (iy < 0 || iy >= p->h || s1 == s0) {
            memset(d, 0, (size_t)rowlen * sizeof *d);
            continue;
        }
        memset(d, 0, (size_t)(s0 * C) * sizeof *d);
        memcpy(d + s0 * C, xn + (iy * p->w + s0 - p->pl) * C, (size_t)((s1 - s0) * C) * sizeof *d);
        memset(d + s1 * C, 0, (size_t)((sw - s1) * C) * sizeof *d);
    }
}

/* Offsets in the strip of tap t = (ky * KW + kx) * C + c, from a pixel's first column. */
static void tap_offsets(const KConv *p, int32_t *off)
{
    const int64_t sw = strip_w(p);
    int t = 0;
    for (int64_t ky = 0; ky < p->kh; ky++)
        for (int64_t kx = 0; kx < p->kw; kx++)
            for (int64_t c = 0; c < p->c; c++)
                off[t++] = (int32_t)((ky * sw + kx) * p->c + c);
}

/* Walks output pixels [m0, m0 + mc) row by row: fn(n, oy, ox0, ox1) for each row
 * piece. */
#define FOR_ROW_PIECES(p, m0, mc, BODY)                                                  \
    do {                                                                               \
        int64_t m_ = (m0), end_ = (m0) + (mc);                                         \
        while (m_ < end_) {                                                            \
            int64_t ox0 = m_ % (p)->ow, row_ = m_ / (p)->ow;                           \
            int64_t oy = row_ % (p)->oh, n = row_ / (p)->oh;                           \
            int64_t ox1 = (p)->ow < ox0 + (end_ - m_) ? (p)->ow : ox0 + (end_ - m_);   \
            BODY;                                                                      \
            m_ += ox1 - ox0;                                                           \
        }                                                                              \
    } while (0)

#define AVX2 __attribute__((target("avx2,fma")))
#define INLINE_AVX2 static inline __attribute__((always_inline, target("avx2,fma")))

/* Lane masks for filters f0 .. f0+nf-1 (nf <= 16) of a block: lanes 0-7 and 8-15. */
INLINE_AVX2 void block_masks(int nf, __m256i *m0, __m256i *m1)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    *m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nf), lane);
    *m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nf - 8), lane);
}

INLINE_AVX2 __m256 load8(const float *p, bool full, __m256i m) { return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m); }

INLINE_AVX2 void store8(float *p, __m256 v, bool full, __m256i m)
{
    if (full)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, m, v);
}

/* The end of a two-vector tile: P pixels' sums (a0, a1: filters 0-7 and 8-15 of the
 * block) plus the bias, relu'd if asked, stored at y + p * F. */
INLINE_AVX2 void tile_out(int P, bool full, __m256i m0, __m256i m1, const __m256 *a0, const __m256 *a1,
                          const float *bias, bool relu, int64_t F, float *y)
{
    __m256 b0 = _mm256_setzero_ps(), b1 = b0;
    if (bias) {
        b0 = load8(bias, full, m0);
        b1 = load8(bias + 8, full, m1);
    }
#pragma GCC unroll 6
    for (int p = 0; p < P; p++) {
        __m256 v0 = a0[p], v1 = a1[p];
        if (bias) {   /* y + b, as kern_bias_act */
            v0 = _mm256_add_ps(v0, b0);
            v1 = _mm256_add_ps(v1, b1);
        }
        if (relu) {   /* max(v, 0) is v > 0 ? v : +0, NaN included, as kern_unary */
            v0 = _mm256_max_ps(v0, _mm256_setzero_ps());
            v1 = _mm256_max_ps(v1, _mm256_setzero_ps());
        }
        store8(y + p * F, v0, full, m0);
        store8(y + p * F + 8, v1, full, m1);
    }
}

/* Forward tile: P pixels (strip columns xs + p*pstep) x one block of filters (w, y
 * already offset to it).  y = act(sum_t x_t w_t + bias), relu done here; other
 * activations by the caller. */
INLINE_AVX2 void fwd_tile(int P, bool full, __m256i m0, __m256i m1, const float *xs, int64_t pstep,
                          const int32_t *off, int K, const float *w, int64_t F, const float *bias, bool relu,
                          float *y)
{
    __m256 a0[TILE], a1[TILE];
#pragma GCC unroll 6
    for (int p = 0; p < P; p++)
        a0[p] = a1[p] = _mm256_setzero_ps();
    for (int t = 0; t < K; t++) {
        const __m256 w0 = load8(w + t * F, full, m0), w1 = load8(w + t * F + 8, full, m1);
        const float *xt = xs + off[t];
#pragma GCC unroll 6
        for (int p = 0; p < P; p++) {
            const __m256 b = _mm256_broadcast_ss(xt + p * pstep);
            a0[p] = _mm256_fmadd_ps(b, w0, a0[p]);
            a1[p] = _mm256_fmadd_ps(b, w1, a1[p]);
        }
    }
    tile_out(P, full, m0, m1, a0, a1, bias, relu, F, y);
}

/* P = 1 .. TILE as constants, so the tiles live in registers. */
#define TILE_CASES(CALL)                                                                 \
    switch (P) {                                                                       \
    case 1: CALL(1); break;                                                            \
    case 2: CALL(2); break;                                                            \
    case 3: CALL(3); break;                                                            \
    case 4: CALL(4); break;                                                            \
    case 5: CALL(5); break;                                                            \
    default: CALL(6); break;                                                           \
    }

/* A block of at most 8 filters (F <= 8, or the last block of F = 16k + 1 .. 16k + 8)
 * needs one vector per pixel, not two: HALF_TILE pixels at a time, the same sum per
 * lane as fwd_tile's first vector (the same bits). */
enum { HALF_TILE = 12 };
INLINE_AVX2 void fwd_tile_half(int P, bool full, __m256i m0, const float *xs, int64_t pstep, const int32_t *off,
                               int K, const float *w, int64_t F, const float *bias, bool relu, float *y)
{
    __m256 a[HALF_TILE];
#pragma GCC unroll 12
    for (int p = 0; p < HALF_TILE; p++)   /* all of them: P may be a variable */
        a[p] = _mm256_setzero_ps();
    for (int t = 0; t < K; t++) {
        const __m256 w0 = load8(w + t * F, full, m0);
        const float *xt = xs + off[t];
#pragma GCC unroll 12
        for (int p = 0; p < P; p++)
            a[p] = _mm256_fmadd_ps(_mm256_broadcast_ss(xt + p * pstep), w0, a[p]);
    }
    const __m256 b0 = bias ? load8(bias, full, m0) : _mm256_setzero_ps();
#pragma GCC unroll 12
    for (int p = 0; p < P; p++) {
        __m256 v = a[p];
        if (bias)
            v = _mm256_add_ps(v, b0);
        if (relu)
            v = _mm256_max_ps(v, _mm256_setzero_ps());
        store8(y + p * F, v, full, m0);
    }
}

/* A full tile of HALF_TILE as a constant (its accumulators in registers), the last of a
 * row with P as a variable: twelve constant cases, as TILE_CASES has six, made the
 * sanitizer build of this file take minutes. */
#define HALF_TILE_CASES(CALL)                                                            \
    do {                                                                               \
        if (P == HALF_TILE)                                                            \
            CALL(HALF_TILE);                                                           \
        else                                                                           \
            CALL(P);                                                                   \
    } while (0)

/* Pixels [ox0, ox1) of an output row into y (pixel ox0 at y[0]). */
AVX2 static void forward_row(const KConv *p, const float *strip, const int32_t *off, const float *w,
                             const float *bias, EwAct act, float *ypix, int64_t ox0, int64_t ox1)
{
    const int K = (int)(p->kh * p->kw * p->c);
    const int64_t F = p->f, pstep = p->sw * p->c;
    const bool relu = bias && act.fn == EW_RELU;
    for (int64_t f0 = 0; f0 < F; f0 += FBLOCK) {
        const int nf = F - f0 < FBLOCK ? (int)(F - f0) : FBLOCK;
        __m256i m0, m1;
        block_masks(nf, &m0, &m1);
        const float *bb = bias ? bias + f0 : NULL;
        if (nf <= 8) {
            for (int64_t ox = ox0; ox < ox1; ox += HALF_TILE) {
                const int P = ox1 - ox < HALF_TILE ? (int)(ox1 - ox) : HALF_TILE;
                const float *xs = strip + ox * pstep;
                float *y = ypix + (ox - ox0) * F + f0;
                if (nf == 8) {
#define FULL(PP) fwd_tile_half(PP, true, m0, xs, pstep, off, K, w + f0, F, bb, relu, y)
                    HALF_TILE_CASES(FULL);
#undef FULL
                } else {
#define PART(PP) fwd_tile_half(PP, false, m0, xs, pstep, off, K, w + f0, F, bb, relu, y)
                    HALF_TILE_CASES(PART);
#undef PART
                }
            }
            continue;
        }
        for (int64_t ox = ox0; ox < ox1; ox += TILE) {
            const int P = ox1 - ox < TILE ? (int)(ox1 - ox) : TILE;
            const float *xs = strip + ox * pstep;
            float *y = ypix + (ox - ox0) * F + f0;
            if (nf == FBLOCK) {
#define FULL(PP) fwd_tile(PP, true, m0, m1, xs, pstep, off, K, w + f0, F, bb, relu, y)
                TILE_CASES(FULL)
#undef FULL
            } else {
#define PART(PP) fwd_tile(PP, false, m0, m1, xs, pstep, off, K, w + f0, F, bb, relu, y)
                TILE_CASES(PART)
#undef PART
            }
        }
    }
    if (bias && act.fn >= 0 && act.fn != EW_RELU)
        kern_unary((EwUnary)act.fn, act.p, ypix, ypix, (size_t)((ox1 - ox0) * F));
}

/* The end of a two-vector filter-gradient tile: T taps' sums (a0, a1: filters 0-7 and
 * 8-15 of the block) added to acc + t * F. */
INLINE_AVX2 void tile_add(int T, bool full, __m256i m0, __m256i m1, const __m256 *a0, const __m256 *a1, int64_t F,
                          float *acc)
{
#pragma GCC unroll 6
    for (int t = 0; t < T; t++) {
        float *dst = acc + t * F;
        store8(dst, _mm256_add_ps(load8(dst, full, m0), a0[t]), full, m0);
        store8(dst + 8, _mm256_add_ps(load8(dst + 8, full, m1), a1[t]), full, m1);
    }
}

/* Grad filter tile: taps off[0..T) x one block of filters, summed over pixels
 * [ox0, ox1) of a row (strip columns xs + ox*pstep, dy rows dy + ox*F), then added to
 * acc[t * F]. */
INLINE_AVX2 void gradw_tile(int T, bool full, __m256i m0, __m256i m1, const float *strip, int64_t pstep,
                            const int32_t *off, const float *dy, int64_t F, int64_t ox0, int64_t ox1, float *acc)
{
    __m256 a0[TILE], a1[TILE];
#pragma GCC unroll 6
    for (int t = 0; t < T; t++)
        a0[t] = a1[t] = _mm256_setzero_ps();
    for (int64_t ox = ox0; ox < ox1; ox++) {
        const __m256 d0 = load8(dy + ox * F, full, m0), d1 = load8(dy + ox * F + 8, full, m1);
        const float *xp = strip + ox * pstep;
#pragma GCC unroll 6
        for (int t = 0; t < T; t++) {
            const __m256 b = _mm256_broadcast_ss(xp + off[t]);
            a0[t] = _mm256_fmadd_ps(b, d0, a0[t]);
            a1[t] = _mm256_fmadd_ps(b, d1, a1[t]);
        }
    }
    tile_add(T, full, m0, m1, a0, a1, F, acc);
}

/* gradw_tile for a block of at most 8 filters: one vector per tap, HALF_TILE taps (the
 * same sums per lane). */
INLINE_AVX2 void gradw_tile_half(int T, bool full, __m256i m0, const float *strip, int64_t pstep,
                                 const int32_t *off, const float *dy, int64_t F, int64_t ox0, int64_t ox1, float *acc)
{
    __m256 a[HALF_TILE];
#pragma GCC unroll 12
    for (int t = 0; t < HALF_TILE; t++)   /* all of them: T may be a variable */
        a[t] = _mm256_setzero_ps();
    for (int64_t ox = ox0; ox < ox1; ox++) {
        const __m256 d0 = load8(dy + ox * F, full, m0);
        const float *xp = strip + ox * pstep;
#pragma GCC unroll 12
        for (int t = 0; t < T; t++)
            a[t] = _mm256_fmadd_ps(_mm256_broadcast_ss(xp + off[t]), d0, a[t]);
    }
#pragma GCC unroll 12
    for (int t = 0; t < T; t++)
        store8(acc + t * F, _mm256_add_ps(load8(acc + t * F, full, m0), a[t]), full, m0);
}

AVX2 static void grad_filter_row(const KConv *p, const float *strip, const int32_t *off, const float *dyrow,
                                 float *acc, int64_t ox0, int64_t ox1)
{
    const int K = (int)(p->kh * p->kw * p->c);
    const int64_t F = p->f, pstep = p->sw * p->c;
    /* taps in nb blocks of nearly equal size, at most TILE each */
    const int nb = (K + TILE - 1) / TILE;
    for (int64_t f0 = 0; f0 < F; f0 += FBLOCK) {
        const int nf = F - f0 < FBLOCK ? (int)(F - f0) : FBLOCK;
        __m256i m0, m1;
        block_masks(nf, &m0, &m1);
        if (nf <= 8) {
            const int nh = (K + HALF_TILE - 1) / HALF_TILE;
            for (int b = 0, t0 = 0; b < nh; b++) {
                const int P = K / nh + (b < K % nh);
                float *a = acc + t0 * F + f0;
                if (nf == 8) {
#define FULL(PP) gradw_tile_half(PP, true, m0, strip, pstep, off + t0, dyrow + f0, F, ox0, ox1, a)
                    HALF_TILE_CASES(FULL);
#undef FULL
                } else {
#define PART(PP) gradw_tile_half(PP, false, m0, strip, pstep, off + t0, dyrow + f0, F, ox0, ox1, a)
                    HALF_TILE_CASES(PART);
#undef PART
                }
                t0 += P;
            }
            continue;
        }
        for (int b = 0, t0 = 0; b < nb; b++) {
            const int P = K / nb + (b < K % nb);   /* taps in this block */
            float *a = acc + t0 * F + f0;
            if (nf == FBLOCK) {
#define FULL(PP) gradw_tile(PP, true, m0, m1, strip, pstep, off + t0, dyrow + f0, F, ox0, ox1, a)
                TILE_CASES(FULL)
#undef FULL
            } else {
#define PART(PP) gradw_tile(PP, false, m0, m1, strip, pstep, off + t0, dyrow + f0, F, ox0, ox1, a)
                TILE_CASES(PART)
#undef PART
            }
            t0 += P;
        }
    }
}

/* Many-channel forward tile: P pixels (strip columns xs + p*pstep) x one block of 16
 * filters, over the taps of kernel rows [ky0, ky1) only (the others fall on padding):
 * within a kernel row the taps (kx, c) are consecutive in the strip and in the packed
 * block wb[t][16], so the inner loop is two vector loads, P broadcasts and 2P FMAs. */
INLINE_AVX2 void wide_tile(int P, bool full, __m256i m0, __m256i m1, const float *xs, int64_t pstep,
                           int64_t rowlen, int ky0, int ky1, int kwc, const float *wb, const float *bias,
                           bool relu, int64_t F, float *y)
{
    __m256 a0[TILE], a1[TILE];
#pragma GCC unroll 6
    for (int p = 0; p < P; p++)
        a0[p] = a1[p] = _mm256_setzero_ps();
    for (int ky = ky0; ky < ky1; ky++) {
        const float *xr = xs + ky * rowlen, *wr = wb + (int64_t)ky * kwc * FBLOCK;
        for (int t = 0; t < kwc; t++) {
            const __m256 w0 = _mm256_loadu_ps(wr + t * FBLOCK), w1 = _mm256_loadu_ps(wr + t * FBLOCK + 8);
#pragma GCC unroll 6
            for (int p = 0; p < P; p++) {
                const __m256 b = _mm256_broadcast_ss(xr + p * pstep + t);
                a0[p] = _mm256_fmadd_ps(b, w0, a0[p]);
                a1[p] = _mm256_fmadd_ps(b, w1, a1[p]);
            }
        }
    }
    tile_out(P, full, m0, m1, a0, a1, bias, relu, F, y);
}

/* One output row (n, oy) of the many-channel kernel: the row's pixels in nearly equal
 * tiles of at most TILE (14 = 5 + 5 + 4: no short tile that would wait on FMA latency). */
AVX2 static void wide_row(const KConv *p, const float *strip, int64_t oy, const float *wp, const float *bias,
                          EwAct act, float *yrow)
{
    const int64_t K = p->kh * p->kw * p->c, F = p->f, pstep = p->sw * p->c, rowlen = strip_w(p) * p->c;
    const int kwc = (int)(p->kw * p->c);
    const bool relu = bias && act.fn == EW_RELU;
    int64_t iy0 = oy * p->sh - p->pt;
    const int ky0 = iy0 < 0 ? (int)(iy0 < -p->kh ? p->kh : -iy0) : 0;
    int ky1 = p->h - iy0 < p->kh ? (int)(p->h - iy0) : (int)p->kh;
    if (ky1 < ky0)
        ky1 = ky0;
    const int64_t ntiles = (p->ow + TILE - 1) / TILE;
    for (int64_t f0 = 0; f0 < F; f0 += FBLOCK) {
        const int nf = F - f0 < FBLOCK ? (int)(F - f0) : FBLOCK;
        __m256i m0, m1;
        block_masks(nf, &m0, &m1);
        const float *bb = bias ? bias + f0 : NULL, *wb = wp + f0 * K;
        for (int64_t i = 0, ox = 0; i < ntiles; i++) {
            const int P = (int)(p->ow / ntiles + (i < p->ow % ntiles));
            const float *xs = strip + ox * pstep;
            float *y = yrow + ox * F + f0;
            if (nf == FBLOCK) {
#define FULL(PP) wide_tile(PP, true, m0, m1, xs, pstep, rowlen, ky0, ky1, kwc, wb, bb, relu, F, y)
                TILE_CASES(FULL)
#undef FULL
            } else {
#define PART(PP) wide_tile(PP, false, m0, m1, xs, pstep, rowlen, ky0, ky1, kwc, wb, bb, relu, F, y)
                TILE_CASES(PART)
#undef PART
            }
            ox += P;
        }
    }
    if (bias && act.fn >= 0 && act.fn != EW_RELU)
        kern_unary((EwUnary)act.fn, act.p, yrow, yrow, (size_t)(p->ow * F));
}

/* Grad filter tile, many channels: taps xs[0..T) (consecutive in a band's row) x one
 * block of filters, summed over output rows g in [g0, g1) of a band (band rows g*rstep
 * apart, dy rows g*ow*F apart) and their pixels, then added to acc[t * F]. */
INLINE_AVX2 void band_gradw_tile(int T, bool full, __m256i m0, __m256i m1, const float *xs, int64_t rstep,
                                 int64_t pstep, const float *dy, int64_t F, int64_t ow, int64_t g0, int64_t g1,
                                 float *acc)
{
    __m256 a0[TILE], a1[TILE];
#pragma GCC unroll 6
    for (int t = 0; t < T; t++)
        a0[t] = a1[t] = _mm256_setzero_ps();
    for (int64_t g = g0; g < g1; g++) {
        const float *xr = xs + g * rstep, *dr = dy + g * ow * F;
        for (int64_t ox = 0; ox < ow; ox++) {
            const __m256 d0 = load8(dr + ox * F, full, m0), d1 = load8(dr + ox * F + 8, full, m1);
            const float *xp = xr + ox * pstep;
#pragma GCC unroll 6
            for (int t = 0; t < T; t++) {
                const __m256 b = _mm256_broadcast_ss(xp + t);
                a0[t] = _mm256_fmadd_ps(b, d0, a0[t]);
                a1[t] = _mm256_fmadd_ps(b, d1, a1[t]);
            }
        }
    }
    tile_add(T, full, m0, m1, a0, a1, F, acc);
}

/* Filter gradient of G output rows oy0 .. oy0+G-1 of one image, many channels, from
 * the band of input rows under them: for each kernel row ky, the output rows whose
 * input row is not padding, its taps (kx, c) in nearly equal tiles of at most TILE, x
 * blocks of 16 filters.  Each tile's sum over the band's pixels goes to acc[K, F] once,
 * so acc is read and written once per band, not once per row. */
AVX2 static void wide_grad_filter_band(const KConv *p, const float *band, int64_t oy0, int64_t G,
                                       const float *dyband, float *acc)
{
    const int64_t F = p->f, pstep = p->sw * p->c, rowlen = strip_w(p) * p->c, kwc = p->kw * p->c;
    const int64_t nb = (kwc + TILE - 1) / TILE;
    for (int64_t ky = 0; ky < p->kh; ky++) {
        int64_t g0 = 0, g1 = G;   /* rows g with input row (oy0 + g) * sh - pt + ky inside */
        while (g0 < G && (oy0 + g0) * p->sh - p->pt + ky < 0)
            g0++;
        while (g1 > g0 && (oy0 + g1 - 1) * p->sh - p->pt + ky >= p->h)
            g1--;
        if (g0 == g1)
            continue;
        for (int64_t f0 = 0; f0 < F; f0 += FBLOCK) {
            const int nf = F - f0 < FBLOCK ? (int)(F - f0) : FBLOCK;
            __m256i m0, m1;
            block_masks(nf, &m0, &m1);
            for (int64_t b = 0, t0 = 0; b < nb; b++) {
                const int P = (int)(kwc / nb + (b < kwc % nb));   /* taps in this tile */
                const float *xs = band + ky * rowlen + t0;
                float *a = acc + (ky * kwc + t0) * F + f0;
                if (nf == FBLOCK) {
#define FULL(PP) band_gradw_tile(PP, true, m0, m1, xs, p->sh * rowlen, pstep, dyband + f0, F, p->ow, g0, g1, a)
                    TILE_CASES(FULL)
#undef FULL
                } else {
#define PART(PP) band_gradw_tile(PP, false, m0, m1, xs, p->sh * rowlen, pstep, dyband + f0, F, p->ow, g0, g1, a)
                    TILE_CASES(PART)
#undef PART
                }
                t0 += P;
            }
        }
    }
}
#endif

void conv_wide_grad_filter(const KConv *p, const float *x, const float *dy, float *acc, int64_t r0, int64_t rc)
{
#ifdef CONV_DIRECT
    float band[WIDE_BAND];
    /* output rows per band: as many of an image's as their input rows fit (>= 1, as
     * conv_wide_ok asks kh rows to fit in WIDE_STRIP <= WIDE_BAND) */
    const int64_t rowlen = strip_w(p) * p->c, gmax = ((int64_t)WIDE_BAND / rowlen - p->kh) / p->sh + 1;
    for (int64_t r = r0; r < r0 + rc;) {
        const int64_t n = r / p->oh, oy = r % p->oh;
        int64_t G = gmax < p->oh - oy ? gmax : p->oh - oy;
        if (G > r0 + rc - r)
            G = r0 + rc - r;
        fill_rows(p, x, n, oy, (G - 1) * p->sh + p->kh, band);
        wide_grad_filter_band(p, band, oy, G, dy + r * p->ow * p->f, acc);
        r += G;
    }
#else
    (void)p, (void)x, (void)dy, (void)acc, (void)r0, (void)rc;
#endif
}

void conv_wide_forward(const KConv *p, const float *x, const float *wp, const float *bias, EwAct act, float *y,
                       int64_t r0, int64_t rc)
{
#ifdef CONV_DIRECT
    float strip[WIDE_STRIP];
    for (int64_t r = r0; r < r0 + rc; r++) {
        const int64_t n = r / p->oh, oy = r % p->oh;
        fill_strip(p, x, n, oy, strip);
        wide_row(p, strip, oy, wp, bias, act, y + (r - r0) * p->ow * p->f);
    }
#else
    (void)p, (void)x, (void)wp, (void)bias, (void)act, (void)y, (void)r0, (void)rc;
#endif
}

#ifdef CONV_DIRECT
/* Output columns whose strip fits in DIRECT_STRIP floats (at least one: KH*KW*C <= 80). */
static int64_t strip_cols(const KConv *p)
{
    return ((int64_t)DIRECT_STRIP / (p->kh * p->c) - p->kw) / p->sw + 1;
}

/* The convolution seen from output columns [c0, c0 + cols) of a row: the same image,
 * the left padding moved so that strip column 0 is under output column c0 (negative
 * once c0 is past the padding).  Its strip holds only what those columns read, so a
 * row of any width is done in tiles that fit the strip; each pixel's taps, and so its
 * sum, are the same. */
static KConv column_tile(const KConv *p, int64_t c0, int64_t cols)
{
    KConv q = *p;
    q.ow = cols;
    q.pl = p->pl - c0 * p->sw;
    return q;
}

/* For each tile of columns of row piece [ox0, ox1): q, its strip filled, its taps'
 * offsets, and c0 (the tile's first column) for BODY. */
#define FOR_COLUMN_TILES(p, x, n, oy, ox0, ox1, strip, off, BODY)                         \
    do {                                                                                \
        const int64_t per_ = strip_cols(p);                                             \
        int64_t width_ = -1;                                                            \
        for (int64_t c0 = (ox0); c0 < (ox1); c0 += per_) {                              \
            KConv q = column_tile((p), c0, (ox1) - c0 < per_ ? (ox1) - c0 : per_);      \
            if (q.ow != width_)                                                         \
                tap_offsets(&q, (off));                                                 \
            width_ = q.ow;                                                              \
            fill_strip(&q, (x), (n), (oy), (strip));                                    \
            BODY;                                                                       \
        }                                                                               \
    } while (0)
#endif

void conv_direct_forward(const KConv *p, const float *x, const float *w, const float *bias, EwAct act,
                         float *y, int64_t m0, int64_t mc)
{
#ifdef CONV_DIRECT
    float strip[DIRECT_STRIP];
    int32_t off[DIRECT_MAX_K];
    FOR_ROW_PIECES(p, m0, mc, {
        float *yrow = y + ((n * p->oh + oy) * p->ow + ox0 - m0) * p->f;
        FOR_COLUMN_TILES(p, x, n, oy, ox0, ox1, strip, off,
                         forward_row(&q, strip, off, w, bias, act, yrow + (c0 - ox0) * p->f, 0, q.ow));
    });
#else
    (void)p, (void)x, (void)w, (void)bias, (void)act, (void)y, (void)m0, (void)mc;
#endif
}

void conv_direct_grad_filter(const KConv *p, const float *x, const float *dy, float *acc, int64_t m0, int64_t mc)
{
#ifdef CONV_DIRECT
    float strip[DIRECT_STRIP];
    int32_t off[DIRECT_MAX_K];
    FOR_ROW_PIECES(p, m0, mc, {
        const float *dyrow = dy + ((n * p->oh + oy) * p->ow) * p->f;
        FOR_COLUMN_TILES(p, x, n, oy, ox0, ox1, strip, off,
                         grad_filter_row(&q, strip, off, dyrow + c0 * p->f, acc, 0, q.ow));
    });
#else
    (void)p, (void)x, (void)dy, (void)acc, (void)m0, (void)mc;
#endif
}
