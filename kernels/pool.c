/* Pooling, NHWC (kern.h's pooling section), and the max pooling of a band of rows that
 * conv.c's conv2d_maxpool pools in its scratch.
 *
 * The loops here are written for the auto-vectorizer, which plain -O2 (GCC 12's
 * "very cheap" cost model) leaves off.  Set before any include so every function in
 * this file has the same options. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include "kernels/kern.h"

#include <string.h>

#include "kernels/pool.h"

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

/* pool.h */
void maxpool_rows(const KPool *p, const float *x, int64_t row0, int64_t oy0, int64_t oy1, float *y)
{
    const int64_t C = p->c;
    for (int64_t oy = oy0; oy < oy1; oy++)
        for (int64_t ox = 0; ox < p->ow; ox++) {
            float *yo = y + ((oy - oy0) * p->ow + ox) * C;
            int64_t y0, y1, x0, x1;
            pool_window(p, oy, ox, &y0, &y1, &x0, &x1);
            if (y0 == y1 || x0 == x1) {   /* a window of padding only */
                memset(yo, 0, (size_t)C * sizeof *yo);
                continue;
            }
            memcpy(yo, x + ((y0 - row0) * p->w + x0) * C, (size_t)C * sizeof *yo);
            for (int64_t iy = y0; iy < y1; iy++)
                for (int64_t ix = (iy == y0 ? x0 + 1 : x0); ix < x1; ix++) {
                    const float *xc = x + ((iy - row0) * p->w + ix) * C;
                    for (int64_t c = 0; c < C; c++)
                        yo[c] = xc[c] > yo[c] ? xc[c] : yo[c];
                }
        }
}

void kern_maxpool(const KPool *p, const float *x, float *y)
{
    for (int64_t n = 0; n < p->n; n++)
        maxpool_rows(p, x + n * p->h * p->w * p->c, 0, 0, p->oh, y + n * p->oh * p->ow * p->c);
}

/* dx += the max-pool gradient of one image (dx, x: [h, w, c]; y, dy: [oh, ow, c]):
 * each output's gradient goes to the first cell of its window, in row-major order,
 * equal to the max. */
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

/* Four channels at a time (the vectors of maxpool_grad_image): the running maximum and
 * the cell holding it; a cell replaces them only when strictly greater, so the first
 * maximal cell in window order wins (and a NaN in the first cell stays, as in
 * kern_maxpool). */
void kern_maxpool_argmax(const KPool *p, const float *x, int32_t *idx)
{
    const int64_t C = p->c, C4 = C / 4 * 4;
    for (int64_t n = 0; n < p->n; n++) {
        const float *xn = x + n * p->h * p->w * C;
        for (int64_t oy = 0; oy < p->oh; oy++)
            for (int64_t ox = 0; ox < p->ow; ox++) {
                int32_t *io = idx + ((n * p->oh + oy) * p->ow + ox) * C;
                int64_t y0, y1, x0, x1;
                pool_window(p, oy, ox, &y0, &y1, &x0, &x1);
                if (y0 == y1 || x0 == x1) {
                    for (int64_t c = 0; c < C; c++) io[c] = -1;
                    continue;
                }
                const int32_t first = (int32_t)(y0 * p->w + x0);
                int64_t c = 0;
                for (; c < C4; c += 4) {
                    v4f best = ld4(xn + first * C + c);
                    v4i at = { first, first, first, first };
                    for (int64_t iy = y0; iy < y1; iy++)
                        for (int64_t ix = (iy == y0 ? x0 + 1 : x0); ix < x1; ix++) {
                            int32_t cell = (int32_t)(iy * p->w + ix);
                            v4f v = ld4(xn + cell * C + c);
                            v4i gt = v > best, cv = { cell, cell, cell, cell };
                            best = sel4(gt, v, best);
                            at = (gt & cv) | (~gt & at);
                        }
                    memcpy(io + c, &at, sizeof at);
                }
                for (; c < C; c++) {
                    float best = xn[first * C + c];
                    int32_t at = first;
                    for (int64_t iy = y0; iy < y1; iy++)
                        for (int64_t ix = (iy == y0 ? x0 + 1 : x0); ix < x1; ix++) {
                            int32_t cell = (int32_t)(iy * p->w + ix);
                            if (xn[cell * C + c] > best) {
                                best = xn[cell * C + c];
                                at = cell;
                            }
                        }
                    io[c] = at;
                }
            }
    }
}

void kern_maxpool_gather(const KPool *p, const float *x, const int32_t *idx, float *y)
{
    const int64_t C = p->c, per = p->oh * p->ow * C;
    for (int64_t n = 0; n < p->n; n++) {
        const float *xn = x + n * p->h * p->w * C;
        const int32_t *in = idx + n * per;
        float *yn = y + n * per;
        for (int64_t o = 0; o < p->oh * p->ow; o++)
            for (int64_t c = 0; c < C; c++) {
                int32_t cell = in[o * C + c];
                yn[o * C + c] = cell < 0 ? 0.0f : xn[(int64_t)cell * C + c];
            }
    }
}

void kern_maxpool_scatter(const KPool *p, const int32_t *idx, const float *y, const float *dy, float *dx)
{
    const int64_t C = p->c, per = p->oh * p->ow * C;
    memset(dx, 0, (size_t)(p->n * p->h * p->w * C) * sizeof *dx);
    for (int64_t n = 0; n < p->n; n++) {
        float *dxn = dx + n * p->h * p->w * C;
        const int32_t *in = idx + n * per;
        const float *dyn = dy + n * per, *yn = y ? y + n * per : NULL;
        for (int64_t o = 0; o < p->oh * p->ow; o++)
            for (int64_t c = 0; c < C; c++) {
                int32_t cell = in[o * C + c];
                if (cell < 0 || (yn && !(yn[o * C + c] > 0.0f))) continue;
                dxn[(int64_t)cell * C + c] += dyn[o * C + c];
            }
    }
}

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

enum { POOL_CBLOCK = 256 };   /* channels per block of double accumulators */

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
