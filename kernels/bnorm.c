/* Batch norm over the last axis of [rows, C]: the batch's statistics, the
 * normalization, its backward in two passes, the running statistics' update.  See
 * kern.h.
 *
 * Sums over the rows are taken in double, in BN_PARTS fixed blocks of rows (split over
 * the pool; a block's sums in its own part of the scratch) added in block order, so the
 * bits do not depend on the thread count.  The statistics are shifted sums: each
 * column's values minus the column's first value, so that a large mean does not eat
 * the variance's digits. */
#include <math.h>
#include <string.h>
#include "kernels/kern.h"
#include "kernels/split.h"

enum { BN_PARTS = 16 };

size_t kern_bn_scratch(size_t C) { return (size_t)BN_PARTS * 2 * C * sizeof(double) + 4 * C * sizeof(float); }

typedef struct BnJob {
    const float *x, *dy;     /* x [rows, C]; dy: the gradient (grad_params, grad_input) */
    float *y;                /* apply, grad_input: the output */
    size_t rows, C;
    const float *k0, *k1, *k2;   /* per-channel coefficients (which: see each part function) */
    EwAct act;
    double *part;            /* sums: part p's two rows of C at part + 2 * C * p */
    Range r;                 /* apply, grad_input: over rows */
} BnJob;

/* The rows of fixed block p of BN_PARTS. */
static void block_of(size_t rows, int p, size_t *lo, size_t *hi)
{
    *lo = rows * (size_t)p / BN_PARTS;
    *hi = rows * (size_t)(p + 1) / BN_PARTS;
}

/* Runs the BN_PARTS blocks of fn, on the pool when the data is large enough to pay for
 * waking it (the blocks are the same either way). */
static void run_blocks(Pool *pool, size_t n, PoolFn fn, BnJob *j)
{
    pool_run(n >= SPLIT_MIN ? pool : NULL, BN_PARTS, fn, j);
}

/* Adds the blocks' sums in block order: out[c] = sum over p of row k of part p. */
static void add_blocks(const double *part, size_t C, int k, double *out)
{
    for (size_t c = 0; c < C; c++) out[c] = 0;
    for (int p = 0; p < BN_PARTS; p++) {
        const double *s = part + 2 * C * (size_t)p + (size_t)k * C;
        for (size_t c = 0; c < C; c++) out[c] += s[c];
    }
}

/* k0 the shift (row 0 of x): part rows = sum (x - k0), sum (x - k0)^2 */
static void stats_part(void *arg, int p, int worker)
{
    (void)worker;
    const BnJob *j = arg;
    size_t lo, hi, C = j->C;
    block_of(j->rows, p, &lo, &hi);
    double *s = j->part + 2 * C * (size_t)p, *q = s + C;
    memset(s, 0, 2 * C * sizeof *s);
    for (size_t r = lo; r < hi; r++) {
        const float *xr = j->x + r * C;
        for (size_t c = 0; c < C; c++) {
            double d = (double)xr[c] - (double)j->k0[c];
            s[c] += d;
            q[c] += d * d;
        }
    }
}

void kern_bn_stats(Pool *pool, const float *x, size_t rows, size_t C, float *stats, double *scratch)
{
    double *part = scratch, *sum = part + (size_t)BN_PARTS * 2 * C, *sq = sum + C;
    BnJob j = { .x = x, .rows = rows, .C = C, .k0 = x, .part = part };
    run_blocks(pool, rows * C, stats_part, &j);
    /* sum and sq fill the part after the blocks' (kern_bn_scratch's float tail is 4C
     * floats = 2C doubles) */
    add_blocks(part, C, 0, sum);
    add_blocks(part, C, 1, sq);
    double n = rows ? (double)rows : 1.0;
    for (size_t c = 0; c < C; c++) {
        double m = sum[c] / n, v = sq[c] / n - m * m;
        stats[c] = (float)((double)x[c] + m);
        stats[C + c] = (float)(v > 0 ? v : 0);
    }
}

void kern_bn_scale(const float *var, const float *gamma, float eps, size_t C, float *scale)
{
    for (size_t c = 0; c < C; c++) scale[c] = gamma[c] / sqrtf(var[c] + eps);
}

/* Rows per block of apply's activation: about 4096 floats, in cache when it runs. */
static size_t act_rows(size_t C) { return C >= 4096 ? 1 : 4096 / C; }

/* k0 the mean, k1 the scale, k2 beta */
static void apply_part(void *arg, int part, int worker)
{
    (void)worker;
    const BnJob *j = arg;
    size_t lo, hi, C = j->C, step = act_rows(C);
    const float *mean = j->k0, *scale = j->k1, *beta = j->k2;
    range_of(&j->r, part, &lo, &hi);
    for (size_t r0 = lo; r0 < hi; r0 += step) {
        size_t r1 = r0 + step < hi ? r0 + step : hi;
        for (size_t r = r0; r < r1; r++) {
            const float *xr = j->x + r * C;
            float *yr = j->y + r * C;
            for (size_t c = 0; c < C; c++) yr[c] = (xr[c] - mean[c]) * scale[c] + beta[c];
        }
        if (j->act.fn >= 0) kern_unary((EwUnary)j->act.fn, j->act.p, j->y + r0 * C, j->y + r0 * C, (r1 - r0) * C);
    }
}

void kern_bn_apply(Pool *pool, const float *x, size_t rows, size_t C, const float *mean, const float *scale,
                   const float *beta, EwAct act, float *y)
{
    BnJob j = { .x = x, .y = y, .rows = rows, .C = C, .k0 = mean, .k1 = scale, .k2 = beta, .act = act };
    j.r = split_range(rows * C, C, pool_threads(pool));
    j.r.n = rows;
    j.r.unit = 1;
    pool_run(pool, j.r.parts, apply_part, &j);
}

/* k0 the mean: part rows = sum dy (x - mean), sum dy */
static void grad_params_part(void *arg, int p, int worker)
{
    (void)worker;
    const BnJob *j = arg;
    size_t lo, hi, C = j->C;
    block_of(j->rows, p, &lo, &hi);
    double *sxy = j->part + 2 * C * (size_t)p, *sy = sxy + C;
    memset(sxy, 0, 2 * C * sizeof *sxy);
    for (size_t r = lo; r < hi; r++) {
        const float *xr = j->x + r * C, *dr = j->dy + r * C;
        for (size_t c = 0; c < C; c++) {
            double g = dr[c];
            sxy[c] += g * ((double)xr[c] - (double)j->k0[c]);
            sy[c] += g;
        }
    }
}

void kern_bn_grad_params(Pool *pool, const float *x, const float *dy, size_t rows, size_t C, const float *stats, float eps,
                         float *d, double *scratch)
{
    double *part = scratch, *sxy = part + (size_t)BN_PARTS * 2 * C, *sy = sxy + C;
    BnJob j = { .x = x, .dy = dy, .rows = rows, .C = C, .k0 = stats, .part = part };
    run_blocks(pool, rows * C, grad_params_part, &j);
    add_blocks(part, C, 0, sxy);
    add_blocks(part, C, 1, sy);
    for (size_t c = 0; c < C; c++) {
        d[c] = (float)(sxy[c] / sqrt((double)stats[C + c] + (double)eps));
        d[C + c] = (float)sy[c];
    }
}

/* dx = a dy - k (x - mean) - b:  k0 a, k1 k, k2 the mean, and b in the tail of k2 */
static void grad_input_part(void *arg, int part, int worker)
{
    (void)worker;
    const BnJob *j = arg;
    size_t lo, hi, C = j->C;
    range_of(&j->r, part, &lo, &hi);
    const float *a = j->k0, *k = j->k1, *mean = j->k2, *b = j->k2 + C;
    for (size_t r = lo; r < hi; r++) {
        const float *xr = j->x + r * C, *dr = j->dy + r * C;
        float *out = j->y + r * C;
        for (size_t c = 0; c < C; c++) out[c] = a[c] * dr[c] - k[c] * (xr[c] - mean[c]) - b[c];
    }
}

void kern_bn_grad_input(Pool *pool, const float *dy, const float *x, size_t rows, size_t C, const float *stats,
                        const float *gamma, const float *d, float eps, float *dx, float *scratch)
{
    /* dx = gamma invstd (dy - dbeta / n - (x - mean) invstd dgamma / n) */
    float *a = scratch, *k = a + C, *mb = k + C;   /* mb: the mean, then b */
    float n = rows ? (float)rows : 1.0f;
    for (size_t c = 0; c < C; c++) {
        float invstd = 1.0f / sqrtf(stats[C + c] + eps);
        a[c] = gamma[c] * invstd;
        k[c] = a[c] * invstd * d[c] / n;
        mb[c] = stats[c];
        mb[C + c] = a[c] * d[C + c] / n;
    }
    BnJob j = { .x = x, .dy = dy, .y = dx, .rows = rows, .C = C, .k0 = a, .k1 = k, .k2 = mb };
    j.r = split_range(rows * C, C, pool_threads(pool));
    j.r.n = rows;
    j.r.unit = 1;
    pool_run(pool, j.r.parts, grad_input_part, &j);
}

void kern_bn_update(float *mean, float *var, const float *stats, size_t C, float momentum, int64_t count)
{
    /* the running variance estimates the population's: the batch's with Bessel's
     * correction (as PyTorch and Keras' fused kernel keep it); one value per channel
     * has no spread to correct */
    float bessel = count > 1 ? (float)count / (float)(count - 1) : 1.0f;
    for (size_t c = 0; c < C; c++) {
        mean[c] = momentum * mean[c] + (1.0f - momentum) * stats[c];
        var[c] = momentum * var[c] + (1.0f - momentum) * stats[C + c] * bessel;
    }
}
