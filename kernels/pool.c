/* Pooling, NHWC (kern.h's pooling section), and the max pooling of a band of rows that
 * conv.c's conv2d_maxpool pools in its scratch.
 *
 * The loops here are written for the auto-vectorizer, which plain -O2 (GCC 12's
 * "very cheap" cost model) leaves off.  Set before any include so every function in
 * this file has the same options.  The max pooling that a training step runs (the
 * argmax, the pooled values, the gradient's scatter) is memory-bound and written by
 * hand over vectors instead, once per instruction set (pool_body.h). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include "kernels/kern.h"

#include <string.h>

#include "kernels/pool.h"
#include "kernels/variant.h"

#ifdef KERN_X86_VARIANTS
#include <immintrin.h>
#endif

/* ---- pooling ----------------------------------------------------------------------- */

/* The real (unpadded) input cells [*y0, *y1) x [*x0, *x1) of output pixel (oy, ox). */
static void pool_window(const KPool *p, int64_t oy, int64_t ox, int64_t *y0, int64_t *y1,
                        int64_t *x0, int64_t *x1)
{
    int64_t iy = oy * p->sh - p->pt, ix = ox * p->sw - p->pl;
    *y0 = iy > 0 ? iy : 0;
    *y1 = iy + p->kh < p->h ? iy + p->kh : p->h;
    *x0 = ix > 0 ? ix : 0;
    *x1 = ix + p->kw < p->w ? ix + p->kw : p->w;
    if (*y1 < *y0)
        *y1 = *y0;
    if (*x1 < *x0)
        *x1 = *x0;
}

/* Four channels at a time in GCC vector types (SSE2 on any x86-64, generic code
 * elsewhere; the project already needs GNU C).  Selects are bitwise, so the values
 * are exactly those of the scalar expressions written next to them. */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f ld4(const float *p)
{
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void st4(float *p, v4f v) { memcpy(p, &v, sizeof v); }

/* mask ? a : b, lane by lane, for a mask of all-ones or zero lanes */
static inline v4f sel4(v4i mask, v4f a, v4f b) { return (v4f)((mask & (v4i)a) | (~mask & (v4i)b)); }

/* ---- max pooling, one variant per instruction set ------------------------------------
 * Each kernel reads its inputs and writes its output once, in order: a window's cells
 * are found once per output pixel (window_cells), and the variant's loop goes over the
 * pixel's channels, contiguous in NHWC. */
enum { POOL_MAX_CELLS = 64 };   /* windows up to 8x8 go to the variants; larger ones, the scalar loops */

/* npix consecutive output pixels of one row whose windows lie wholly inside the image:
 * pixel i's window starts at x + i * pstep (its cell cell0 + i * cstep), its cells k
 * (row-major) at offsets off[k] floats from there, doff[k] cells. */
typedef struct PoolRun {
    const float *x;
    int64_t pstep, npix, C;
    int32_t cell0, cstep;
    int ncell;
    int64_t off[POOL_MAX_CELLS];
    int32_t doff[POOL_MAX_CELLS];
} PoolRun;

/* A piece of one conv row, columns [a, b), in kern_maxpool_scatter_colsum_d: the
 * pooled pixels over it (from its first, C channels apart: index io, values yo (NULL:
 * no mask), gradients g), the cells of the piece [lo, lo + len), and its part's sums. */
typedef struct ColsumSeg {
    const int32_t *io;
    const float *yo, *g;
    int32_t lo;
    uint32_t len;
    int64_t pf;   /* elements to the next pooled row, to prefetch (0: none) */
    double *acc;
} ColsumSeg;

typedef struct PoolVariant {
    void (*argmax_window)(const float *const *px, const int32_t *cell, int ncell, int64_t C, int32_t *io);
    void (*max_window)(const float *const *px, int ncell, int64_t C, float *yo);
    void (*scatter_pixel)(const int32_t *io, const float *yo, const float *g, int32_t cell, int64_t C, float *d);
    /* a PoolRun's argmax into io and its maxima into yo (either may be NULL); pixel i's at i * C */
    void (*run)(const PoolRun *r, int32_t *io, float *yo);
    /* pool_hits_fill's buckets and columns of a pooled row's cells (pool.h) */
    void (*hits_buckets)(const KPool *q, const int32_t *idx, const float *yv, const float *dy, int32_t base,
                         int32_t *bucket, int32_t *col);
    /* kern_maxpool_scatter_colsum_d's sums over pieces of conv rows, one or two at once */
    void (*colsum)(const ColsumSeg *sg, int ns, int64_t npix, int64_t C);
} PoolVariant;

#define ISA_FN
#define ISA_INLINE static inline
#define VL 4
#define NAME(x) x##_portable
#include "kernels/pool_body.h"
#undef ISA_FN
#undef ISA_INLINE
#undef VL
#undef NAME

#ifdef KERN_X86_VARIANTS
#define ISA_FN __attribute__((target("avx2,fma")))
#define ISA_INLINE static inline __attribute__((always_inline, target("avx2,fma")))
#define VL 8
#define NAME(x) x##_avx2
#include "kernels/pool_body.h"
#undef ISA_FN
#undef ISA_INLINE
#undef VL
#undef NAME

#define ISA_FN __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define ISA_INLINE static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,fma")))
#define VL 16
#define NAME(x) x##_avx512
/* GCC 12 makes __builtin_convertvector of 8 floats to doubles four instructions */
#define POOL_CVT_PD(v) _mm512_cvtps_pd((__m256)(v))
#include "kernels/pool_body.h"
#undef ISA_FN
#undef ISA_INLINE
#undef VL
#undef NAME
#undef POOL_CVT_PD
#endif

/* The loops for `isa` on pixels of C channels.  Fewer than 16 channels would leave
 * the 16-lane loops nothing but their scalar tails (large.net's 8: 4x slower pooling
 * than the 8-lane loops), so they run the AVX2 ones; every variant gives the same bits. */
static const PoolVariant *pool_variant(KIsa isa, int64_t C)
{
#ifdef KERN_X86_VARIANTS
    switch (kern_isa_resolve(isa)) {
    case KISA_AVX512: return C >= 16 ? &pool_variant_avx512 : &pool_variant_avx2;
    case KISA_AVX2: return &pool_variant_avx2;
    default: break;
    }
#else
    (void)isa;
    (void)C;
#endif
    return &pool_variant_portable;
}

/* kern_maxpool_scatter_colsum_d's loops: a vector of doubles holds VL / 2 channels, so
 * from 8 channels on the 16-lane ones (large.net's 8: one chain of 8 doubles). */
static const PoolVariant *colsum_variant(KIsa isa, int64_t C)
{
#ifdef KERN_X86_VARIANTS
    if (kern_isa_resolve(isa) == KISA_AVX512 && C >= 8) return &pool_variant_avx512;
#endif
    return pool_variant(isa, C);
}

/* The real cells of output pixel (oy, ox)'s window, row-major, into cell[] (iy * w +
 * ix) and px[] (that cell's pixel in the image's rows from row0 on, row0 at xn);
 * returns how many (0: a window of padding only), or -1 for a window of more than
 * POOL_MAX_CELLS. */
static int window_cells(const KPool *p, const float *xn, int64_t row0, int64_t oy, int64_t ox, int32_t *cell,
                        const float **px)
{
    int64_t y0, y1, x0, x1;
    pool_window(p, oy, ox, &y0, &y1, &x0, &x1);
    if ((y1 - y0) * (x1 - x0) > POOL_MAX_CELLS) return -1;
    int k = 0;
    for (int64_t iy = y0; iy < y1; iy++)
        for (int64_t ix = x0; ix < x1; ix++) {
            cell[k] = (int32_t)(iy * p->w + ix);
            px[k] = xn + (cell[k] - row0 * p->w) * p->c;
            k++;
        }
    return k;
}

/* Output pixel (oy, ox) of a window of any size with a real cell, one channel at a
 * time: the running maximum into yo and the cell holding it into io (either may be
 * NULL), by the variants' rule. */
static void window_large(const KPool *p, const float *xn, int64_t row0, int64_t oy, int64_t ox, float *yo, int32_t *io)
{
    const int64_t C = p->c;
    int64_t y0, y1, x0, x1;
    pool_window(p, oy, ox, &y0, &y1, &x0, &x1);
    const int64_t skip = row0 * p->w;   /* cells above row0 are not in xn */
    for (int64_t c = 0; c < C; c++) {
        int32_t at = (int32_t)(y0 * p->w + x0);
        float best = xn[(at - skip) * C + c];
        for (int64_t iy = y0; iy < y1; iy++)
            for (int64_t ix = x0; ix < x1; ix++) {
                int32_t cell = (int32_t)(iy * p->w + ix);
                if (xn[(cell - skip) * C + c] > best) best = xn[(cell - skip) * C + c], at = cell;
            }
        if (yo) yo[c] = best;
        if (io) io[c] = at;
    }
}

/* Output pixel (oy, ox) of one image (its rows from row0 on at x): the window's argmax
 * into io and its maximum into yo (either may be NULL).  The maximum starts at the
 * window's first cell and a later cell replaces it only when strictly greater (so a NaN
 * in the first cell stays); a window of padding only gives the cell -1 and the value 0. */
static void pool_pixel(const PoolVariant *v, const KPool *p, const float *x, int64_t row0, int64_t oy, int64_t ox,
                       int32_t *io, float *yo)
{
    int32_t cell[POOL_MAX_CELLS];
    const float *px[POOL_MAX_CELLS];
    int k = window_cells(p, x, row0, oy, ox, cell, px);
    if (k < 0)
        window_large(p, x, row0, oy, ox, yo, io);
    else if (k > 0) {
        if (io) v->argmax_window(px, cell, k, p->c, io);
        if (yo) v->max_window(px, k, p->c, yo);
    } else {
        if (io) for (int64_t c = 0; c < p->c; c++) io[c] = -1;
        if (yo) memset(yo, 0, (size_t)p->c * sizeof *yo);
    }
}

/* Output row oy, as pool_pixel does each pixel (pixel 0 at io and yo): the pixels whose
 * windows lie wholly inside the image as one PoolRun, the rest one by one. */
static void pool_row(const PoolVariant *v, const KPool *p, const float *x, int64_t row0, int64_t oy, int32_t *io,
                     float *yo)
{
    const int64_t C = p->c, iy = oy * p->sh - p->pt;
    int64_t lo = 0, hi = 0;   /* the pixels [lo, hi) of the run */
    if (iy >= 0 && iy + p->kh <= p->h && p->kh * p->kw <= POOL_MAX_CELLS && p->w + p->pl >= p->kw) {
        lo = (p->pl + p->sw - 1) / p->sw;
        hi = (p->w + p->pl - p->kw) / p->sw + 1;
        hi = hi < p->ow ? hi : p->ow;
        lo = lo < hi ? lo : hi;
    }
    for (int64_t ox = 0; ox < p->ow; ox++) {
        if (ox == lo && hi > lo) {
            const int64_t ix = lo * p->sw - p->pl;
            PoolRun r = { .x = x + ((iy - row0) * p->w + ix) * C, .pstep = p->sw * C, .npix = hi - lo, .C = C,
                          .cell0 = (int32_t)(iy * p->w + ix), .cstep = (int32_t)p->sw, .ncell = (int)(p->kh * p->kw) };
            for (int64_t ky = 0, k = 0; ky < p->kh; ky++)
                for (int64_t kx = 0; kx < p->kw; kx++, k++) {
                    r.doff[k] = (int32_t)(ky * p->w + kx);
                    r.off[k] = r.doff[k] * C;
                }
            v->run(&r, io ? io + lo * C : NULL, yo ? yo + lo * C : NULL);
            ox = hi - 1;
            continue;
        }
        pool_pixel(v, p, x, row0, oy, ox, io ? io + ox * C : NULL, yo ? yo + ox * C : NULL);
    }
}

/* pool.h */
void maxpool_rows(KIsa isa, const KPool *p, const float *x, int64_t row0, int64_t oy0, int64_t oy1, float *y,
                  int32_t *idx)
{
    const PoolVariant *v = pool_variant(isa, p->c);
    const int64_t row = p->ow * p->c;
    for (int64_t oy = oy0; oy < oy1; oy++)
        pool_row(v, p, x, row0, oy, idx ? idx + (oy - oy0) * row : NULL, y + (oy - oy0) * row);
}

void kern_maxpool(KIsa isa, const KPool *p, const float *x, float *y)
{
    for (int64_t n = 0; n < p->n; n++)
        maxpool_rows(isa, p, x + n * p->h * p->w * p->c, 0, 0, p->oh, y + n * p->oh * p->ow * p->c, NULL);
}

/* ---- the max pooling gradient from x and y (the interpreter's) ----------------------- */

static void maxpool_grad_image(const KPool *p, const float *xn, const float *yn, const float *dyn, float *dxn)
{
    const int64_t C = p->c, C4 = C / 4 * 4;
    for (int64_t oy = 0; oy < p->oh; oy++)
        for (int64_t ox = 0; ox < p->ow; ox++) {
            int64_t o = (oy * p->ow + ox) * C;
            int64_t y0, y1, x0, x1;
            pool_window(p, oy, ox, &y0, &y1, &x0, &x1);
            const float *yo = yn + o, *dyo = dyn + o;
            int64_t c = 0;
            for (; c < C4; c += 4) {
                const v4f m = ld4(yo + c), g = ld4(dyo + c), zero = { 0 };
                v4i todo = { -1, -1, -1, -1 };
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++) {
                        int64_t off = (iy * p->w + ix) * C + c;
                        v4i hit = (ld4(xn + off) == m) & todo;
                        todo &= ~hit;
                        st4(dxn + off, ld4(dxn + off) + sel4(hit, g, zero));   /* += hit ? g : 0 */
                    }
            }
            for (; c < C; c++) {
                bool todo = true;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++) {
                        int64_t off = (iy * p->w + ix) * C + c;
                        bool hit = todo && xn[off] == yo[c];
                        todo = todo && !hit;
                        dxn[off] += hit ? dyo[c] : 0.0f;
                    }
            }
        }
}

/* One image at a time, zeroed just before its windows add into it, so dx goes through
 * memory once (zeroing all of dx first streamed it twice: 2-3x slower on the MNIST
 * CNN's 25 MB gradient).  The same additions in the same order either way. */
void kern_maxpool_grad(const KPool *p, const float *x, const float *y, const float *dy, float *dx)
{
    const size_t xs = (size_t)(p->h * p->w * p->c), ys = (size_t)(p->oh * p->ow * p->c);
    for (int64_t n = 0; n < p->n; n++) {
        memset(dx + (size_t)n * xs, 0, xs * sizeof *dx);
        maxpool_grad_image(p, x + (size_t)n * xs, y + (size_t)n * ys, dy + (size_t)n * ys, dx + (size_t)n * xs);
    }
}

void kern_maxpool_grad_relu(const KPool *p, const float *x, const float *y, const float *dy, float *dx)
{
    const size_t xs = (size_t)(p->h * p->w * p->c), ys = (size_t)(p->oh * p->ow * p->c);
    for (int64_t n = 0; n < p->n; n++) {
        float *dxn = dx + (size_t)n * xs;
        memset(dxn, 0, xs * sizeof *dx);
        maxpool_grad_image(p, x + (size_t)n * xs, y + (size_t)n * ys, dy + (size_t)n * ys, dxn);
        kern_relu_mask(x + (size_t)n * xs, dxn, xs);
    }
}

/* ---- max pooling through indices --------------------------------------------------- */

void kern_maxpool_argmax(KIsa isa, const KPool *p, const float *x, int32_t *idx)
{
    const PoolVariant *v = pool_variant(isa, p->c);
    const int64_t C = p->c;
    for (int64_t n = 0; n < p->n; n++)
        for (int64_t oy = 0; oy < p->oh; oy++)
            pool_row(v, p, x + n * p->h * p->w * C, 0, oy, idx + (n * p->oh + oy) * p->ow * C, NULL);
}

/* The maximum at the argmax is the running maximum that kern_maxpool keeps (the same
 * rule from the same first cell), so the gather is the max pooling itself, which reads
 * x in order instead of through the index: the same bits, and idx is not read. */
void kern_maxpool_gather(KIsa isa, const KPool *p, const float *x, const int32_t *idx, float *y)
{
    (void)idx;
    kern_maxpool(isa, p, x, y);
}

/* dx of one image where no two windows share a cell (stride >= window both ways),
 * input row by input row: each element written once, 0 + dy where its window's index
 * names it (and, with y, y > 0), else +0 -- kern_maxpool_grad's zeroed dx plus dy
 * (+0 for a dy of -0), without a pass that zeroes dx first. */
static void scatter_image(const PoolVariant *v, const KPool *p, const int32_t *in, const float *yn, const float *dyn,
                          float *dxn)
{
    const int64_t C = p->c, W = p->w;
    for (int64_t iy = 0; iy < p->h; iy++) {
        const int64_t ty = iy + p->pt, oy = ty / p->sh;
        const bool row_in = ty % p->sh < p->kh && oy < p->oh;
        /* column ix + pl = ox * sw + ph, stepped along the row (two divisions a pixel
         * were most of the scatter's time: large's conv2, 16 channels) */
        for (int64_t ix = 0, ox = p->pl / p->sw, ph = p->pl % p->sw; ix < W; ix++) {
            float *d = dxn + (iy * W + ix) * C;
            if (!row_in || ph >= p->kw || ox >= p->ow)   /* a cell in no window */
                memset(d, 0, (size_t)C * sizeof *d);
            else {
                const int64_t o = (oy * p->ow + ox) * C;
                v->scatter_pixel(in + o, yn ? yn + o : NULL, dyn + o, (int32_t)(iy * W + ix), C, d);
            }
            if (++ph == p->sw)
                ph = 0, ox++;
        }
    }
}

/* Overlapping windows: one image zeroed, then each window's gradient added at its cell
 * in window order (the image is in cache between the two). */
static void scatter_add_image(const KPool *p, const int32_t *in, const float *yn, const float *dyn, float *dxn)
{
    const int64_t C = p->c;
    memset(dxn, 0, (size_t)(p->h * p->w * C) * sizeof *dxn);
    for (int64_t o = 0; o < p->oh * p->ow; o++)
        for (int64_t c = 0; c < C; c++) {
            int32_t cell = in[o * C + c];
            if (cell < 0 || (yn && !(yn[o * C + c] > 0.0f))) continue;
            dxn[(int64_t)cell * C + c] += dyn[o * C + c];
        }
}

/* pool.h */
bool maxpool_hits_ok(const KPool *q)
{
    return q->kh == q->sh && q->kw == q->sw && q->pt == 0 && q->pl == 0 && q->kh <= POOL_HITS_MAX_KH &&
           q->ow * q->c <= POOL_HITS_MAX && q->kh * q->c <= POOL_HITS_BUCKETS && q->oh * q->sh <= q->h &&
           q->ow * q->sw <= q->w;
}

/* Pooled row py of image n into h, by a counting sort over the buckets (window row,
 * channel) that pool_body.h's hits_buckets finds, in the variant `isa` names.  The
 * windows' cells come channel after channel, so one bucket's count is touched every c
 * cells, not back to back (sorted by rows alone, the counts chained through memory;
 * with a branch per cell, 4 ms of large.net's conv1 at batch 4). */
static void pool_hits_fill(KIsa isa, const KPool *q, const int32_t *idx, const float *yv, const float *dy, int64_t n,
                           int64_t py, PoolHits *h)
{
    const int64_t m = q->ow * q->c, at = (n * q->oh + py) * m;
    const int32_t none = (int32_t)(q->kh * q->c), base = (int32_t)(py * q->sh * q->w);
    int32_t bucket[POOL_HITS_MAX], col[POOL_HITS_MAX];
    colsum_variant(isa, q->c)->hits_buckets(q, idx + at, yv ? yv + at : NULL, dy + at, base, bucket, col);
    int32_t *count = h->at;
    memset(count, 0, (size_t)(none + 2) * sizeof *count);
    for (int64_t e = 0; e < m; e++)
        count[bucket[e] + 1]++;
    for (int32_t b = 0; b <= none; b++)
        count[b + 1] += count[b];
    for (int64_t e = 0; e < m; e++) {   /* the cells of no hit go past at[none], never read */
        const int32_t k = count[bucket[e]]++;
        h->ox[k] = col[e];
        h->g[k] = dy[at + e] + 0.0f;
    }
    for (int32_t b = none; b > 0; b--)   /* each count is now its bucket's end: back to starts */
        count[b] = count[b - 1];
    count[0] = 0;
    h->n = n;
    h->py = py;
}

int64_t maxpool_row_hits(KIsa isa, const KPool *q, const int32_t *idx, const float *yv, const float *dy, int64_t n,
                         int64_t oy, int64_t c, PoolHits *h, int64_t *first)
{
    const int64_t py = oy / q->sh;
    if (py >= q->oh)
        return 0;
    if (h->n != n || h->py != py)
        pool_hits_fill(isa, q, idx, yv, dy, n, py, h);
    const int64_t b = (oy - py * q->sh) * q->c + c;
    *first = h->at[b];
    return h->at[b + 1] - h->at[b];
}

/* kern_maxpool_scatter_colsum_d's walk over a part's pixels [m, m1): conv row by conv
 * row, the row's columns [a, b) in the part.  The cells of the piece come in column
 * order as the pooled pixels over it go left to right (windows neither overlap nor
 * pad), so each channel's chain adds the same non-zero terms in the same order as
 * kern_colsum_d's over the scatter's output. */
typedef struct ColsumWalk {
    const KPool *q;
    const int32_t *idx;
    const float *yv, *dy;
    int64_t m, m1;
    int64_t npix;   /* the pooled pixels of seg left */
    ColsumSeg seg;
} ColsumWalk;

/* The walk's next piece with pooled pixels over it; false past the part's end. */
static bool colsum_next(ColsumWalk *u)
{
    const KPool *q = u->q;
    while (u->m < u->m1) {
        const int64_t row = u->m / q->w, n = row / q->h, oy = row % q->h, a = u->m % q->w;
        const int64_t b = u->m1 - (u->m - a) < q->w ? u->m1 - (u->m - a) : q->w;
        const int64_t py = oy / q->sh, px0 = a / q->sw, pxe = (b + q->sw - 1) / q->sw, px1 = pxe < q->ow ? pxe : q->ow;
        u->m += b - a;
        if (py >= q->oh || px0 >= px1)
            continue;
        const int64_t at = ((n * q->oh + py) * q->ow + px0) * q->c;
        u->seg.io = u->idx + at;
        u->seg.yo = u->yv ? u->yv + at : NULL;
        u->seg.g = u->dy + at;
        u->seg.lo = (int32_t)(oy * q->w + a);
        u->seg.len = (uint32_t)(b - a);
        u->seg.pf = oy % q->sh == 0 && (py + 1 < q->oh || n + 1 < q->n) ? q->ow * q->c : 0;
        u->npix = px1 - px0;
        return true;
    }
    return false;
}

/* The walk past n more pooled pixels of its piece (n <= npix); false past its end. */
static bool colsum_skip(ColsumWalk *u, int64_t n)
{
    u->npix -= n;
    if (u->npix > 0) {
        const int64_t d = n * u->q->c;
        u->seg.io += d;
        u->seg.yo = u->seg.yo ? u->seg.yo + d : NULL;
        u->seg.g += d;
        return true;
    }
    return colsum_next(u);
}

/* kern.h: kern_colsum_d of the scatter's output, without it; parts two at a time, a
 * piece of each together (pool_body.h), then the one left alone. */
void kern_maxpool_scatter_colsum_d(KIsa isa, const KPool *q, const int32_t *idx, const float *yv, const float *dy,
                                   const int64_t *m, int parts, double *acc)
{
    const PoolVariant *v = colsum_variant(isa, q->c);
    const int64_t C = q->c;
    for (int64_t i = 0; i < parts * C; i++)
        acc[i] = 0;
    for (int k = 0; k < parts; k += 2) {
        ColsumWalk u[2];
        bool live[2] = { false, false };
        for (int j = 0; j < 2 && k + j < parts; j++) {
            u[j] = (ColsumWalk){ .q = q, .idx = idx, .yv = yv, .dy = dy, .m = m[k + j], .m1 = m[k + j + 1] };
            u[j].seg.acc = acc + (k + j) * C;
            live[j] = colsum_next(&u[j]);
        }
        while (live[0] && live[1]) {
            const ColsumSeg sg[2] = { u[0].seg, u[1].seg };
            const int64_t n = u[0].npix < u[1].npix ? u[0].npix : u[1].npix;
            v->colsum(sg, 2, n, C);
            live[0] = colsum_skip(&u[0], n);
            live[1] = colsum_skip(&u[1], n);
        }
        for (int j = 0; j < 2; j++)
            for (; live[j]; live[j] = colsum_next(&u[j]))
                v->colsum(&u[j].seg, 1, u[j].npix, C);
    }
}

void kern_maxpool_scatter(KIsa isa, const KPool *p, const int32_t *idx, const float *y, const float *dy, float *dx)
{
    const PoolVariant *v = pool_variant(isa, p->c);
    const int64_t per = p->oh * p->ow * p->c, xs = p->h * p->w * p->c;
    const bool disjoint = p->sh >= p->kh && p->sw >= p->kw;
    for (int64_t n = 0; n < p->n; n++) {
        const float *yn = y ? y + n * per : NULL;
        if (disjoint)
            scatter_image(v, p, idx + n * per, yn, dy + n * per, dx + n * xs);
        else
            scatter_add_image(p, idx + n * per, yn, dy + n * per, dx + n * xs);
    }
}

enum { POOL_CBLOCK = 256 };   /* channels per block of double accumulators */

void kern_avgpool(const KPool *p, const float *x, float *y)
{
    const int64_t C = p->c;
    for (int64_t n = 0; n < p->n; n++) {
        const float *xn = x + n * p->h * p->w * C;
        for (int64_t oy = 0; oy < p->oh; oy++)
            for (int64_t ox = 0; ox < p->ow; ox++) {
                float *yo = y + ((n * p->oh + oy) * p->ow + ox) * C;
                int64_t y0, y1, x0, x1;
                pool_window(p, oy, ox, &y0, &y1, &x0, &x1);
                int64_t cnt = (y1 - y0) * (x1 - x0);
                memset(yo, 0, (size_t)C * sizeof *yo);
                if (cnt == 0)
                    continue;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++) {
                        const float *xc = xn + (iy * p->w + ix) * C;
                        for (int64_t c = 0; c < C; c++)
                            yo[c] += xc[c];
                    }
                float inv = 1.0f / (float)cnt;
                for (int64_t c = 0; c < C; c++)
                    yo[c] *= inv;
            }
    }
}

void kern_avgpool_grad(const KPool *p, const float *dy, float *dx)
{
    const int64_t C = p->c;
    memset(dx, 0, (size_t)(p->n * p->h * p->w * C) * sizeof *dx);
    for (int64_t n = 0; n < p->n; n++) {
        float *dxn = dx + n * p->h * p->w * C;
        for (int64_t oy = 0; oy < p->oh; oy++)
            for (int64_t ox = 0; ox < p->ow; ox++) {
                const float *dyo = dy + ((n * p->oh + oy) * p->ow + ox) * C;
                int64_t y0, y1, x0, x1;
                pool_window(p, oy, ox, &y0, &y1, &x0, &x1);
                int64_t cnt = (y1 - y0) * (x1 - x0);
                if (cnt == 0)
                    continue;
                float inv = 1.0f / (float)cnt;
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = x0; ix < x1; ix++) {
                        float *dxc = dxn + (iy * p->w + ix) * C;
                        for (int64_t c = 0; c < C; c++)
                            dxc[c] += dyo[c] * inv;
                    }
            }
    }
}

void kern_global_avgpool(const float *x, float *y, size_t n, size_t hw, size_t c)
{
    double acc[POOL_CBLOCK];
    double inv = hw ? 1.0 / (double)hw : 0.0;
    for (size_t b = 0; b < n; b++) {
        const float *xb = x + b * hw * c;
        for (size_t c0 = 0; c0 < c; c0 += POOL_CBLOCK) {
            size_t cn = c - c0 < POOL_CBLOCK ? c - c0 : POOL_CBLOCK;
            for (size_t j = 0; j < cn; j++)
                acc[j] = 0;
            for (size_t i = 0; i < hw; i++) {
                const float *xr = xb + i * c + c0;
                for (size_t j = 0; j < cn; j++)
                    acc[j] += xr[j];
            }
            for (size_t j = 0; j < cn; j++)
                y[b * c + c0 + j] = (float)(acc[j] * inv);
        }
    }
}

void kern_global_avgpool_grad(const float *dy, float *dx, size_t n, size_t hw, size_t c)
{
    if (hw == 0)
        return;
    float inv = 1.0f / (float)hw;
    for (size_t b = 0; b < n; b++) {
        const float *dyb = dy + b * c;
        float *dxb = dx + b * hw * c;
        for (size_t i = 0; i < hw; i++)
            for (size_t j = 0; j < c; j++)
                dxb[i * c + j] = dyb[j] * inv;
    }
}

bool kern_maxpool_scatter_sum_ok(const KPool *p)
{
    return p->kh == p->sh && p->kw == p->sw && p->pt == 0 && p->pl == 0 && p->h * p->w <= INT32_MAX;
}
