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

/* ---- the loops over rows -------------------------------------------------------------
 * Each written once with GCC's vector types (4 channels in double, 8 in float; the
 * channels past a multiple of that one at a time), and compiled twice: as is, and on
 * x86 for AVX2 (taken when the CPU has it).  Without FMA in either: each lane does the
 * scalar operations in the same order, so both give the same bits, and the bits of a
 * channel do not depend on where it falls in a vector. */
typedef float v4f __attribute__((vector_size(16), aligned(4), may_alias));
typedef float v8f __attribute__((vector_size(32), aligned(4), may_alias));
typedef double v4d __attribute__((vector_size(32), aligned(8), may_alias));
#define INLINE static inline __attribute__((always_inline))

#define to_d(p) __builtin_convertvector(*(const v4f *)(p), v4d)

/* s += x - k0, q += (x - k0)^2 per column, over rows [lo, hi) */
INLINE void stats_rows_body(const float *x, size_t lo, size_t hi, size_t C, const float *k0, double *s, double *q)
{
    size_t C4 = C & ~(size_t)3;
    for (size_t r = lo; r < hi; r++) {
        const float *xr = x + r * C;
        size_t c = 0;
        for (; c < C4; c += 4) {
            v4d d = to_d(xr + c) - to_d(k0 + c);
            *(v4d *)(s + c) += d;
            *(v4d *)(q + c) += d * d;
        }
        for (; c < C; c++) {
            double d = (double)xr[c] - (double)k0[c];
            s[c] += d;
            q[c] += d * d;
        }
    }
}

/* sxy += dy (x - mean), sy += dy per column */
INLINE void grad_params_rows_body(const float *x, const float *dy, size_t lo, size_t hi, size_t C, const float *mean,
                                  double *sxy, double *sy)
{
    size_t C4 = C & ~(size_t)3;
    for (size_t r = lo; r < hi; r++) {
        const float *xr = x + r * C, *dr = dy + r * C;
        size_t c = 0;
        for (; c < C4; c += 4) {
            v4d g = to_d(dr + c);
            *(v4d *)(sxy + c) += g * (to_d(xr + c) - to_d(mean + c));
            *(v4d *)(sy + c) += g;
        }
        for (; c < C; c++) {
            double g = dr[c];
            sxy[c] += g * ((double)xr[c] - (double)mean[c]);
            sy[c] += g;
        }
    }
}

/* y = (x - mean) * scale + beta */
INLINE void apply_rows_body(const float *x, float *y, size_t rows, size_t C, const float *mean, const float *scale,
                            const float *beta)
{
    size_t C8 = C & ~(size_t)7;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C;
        size_t c = 0;
        for (; c < C8; c += 8)
            *(v8f *)(yr + c) = (*(const v8f *)(xr + c) - *(const v8f *)(mean + c)) * *(const v8f *)(scale + c) +
                               *(const v8f *)(beta + c);
        for (; c < C; c++) yr[c] = (xr[c] - mean[c]) * scale[c] + beta[c];
    }
}

/* dx = a dy - k (x - mean) - b */
INLINE void grad_input_rows_body(const float *dy, const float *x, float *dx, size_t rows, size_t C, const float *a,
                                 const float *k, const float *mean, const float *b)
{
    size_t C8 = C & ~(size_t)7;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * C, *dr = dy + r * C;
        float *out = dx + r * C;
        size_t c = 0;
        for (; c < C8; c += 8)
            *(v8f *)(out + c) = *(const v8f *)(a + c) * *(const v8f *)(dr + c) -
                                *(const v8f *)(k + c) * (*(const v8f *)(xr + c) - *(const v8f *)(mean + c)) -
                                *(const v8f *)(b + c);
        for (; c < C; c++) out[c] = a[c] * dr[c] - k[c] * (xr[c] - mean[c]) - b[c];
    }
}

#define BN_LOOPS(SUFFIX, ATTR)                                                                                       \
    ATTR static void stats_rows##SUFFIX(const float *x, size_t lo, size_t hi, size_t C, const float *k0, double *s,  \
                                        double *q)                                                                   \
    {                                                                                                                \
        stats_rows_body(x, lo, hi, C, k0, s, q);                                                                     \
    }                                                                                                                \
    ATTR static void grad_params_rows##SUFFIX(const float *x, const float *dy, size_t lo, size_t hi, size_t C,        \
                                              const float *mean, double *sxy, double *sy)                            \
    {                                                                                                                \
        grad_params_rows_body(x, dy, lo, hi, C, mean, sxy, sy);                                                      \
    }                                                                                                                \
    ATTR static void apply_rows##SUFFIX(const float *x, float *y, size_t rows, size_t C, const float *mean,           \
                                        const float *scale, const float *beta)                                       \
    {                                                                                                                \
        apply_rows_body(x, y, rows, C, mean, scale, beta);                                                           \
    }                                                                                                                \
    ATTR static void grad_input_rows##SUFFIX(const float *dy, const float *x, float *dx, size_t rows, size_t C,       \
                                             const float *a, const float *k, const float *mean, const float *b)      \
    {                                                                                                                \
        grad_input_rows_body(dy, x, dx, rows, C, a, k, mean, b);                                                     \
    }
BN_LOOPS(_plain, )
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
BN_LOOPS(_avx2, __attribute__((target("avx2"))))
static bool avx2(void) { return __builtin_cpu_supports("avx2"); }
#define PICK(fn) (avx2() ? fn##_avx2 : fn##_plain)
#else
#define PICK(fn) fn##_plain
#endif

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
    double *s = j->part + 2 * C * (size_t)p;
    memset(s, 0, 2 * C * sizeof *s);
    PICK(stats_rows)(j->x, lo, hi, C, j->k0, s, s + C);
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
        PICK(apply_rows)(j->x + r0 * C, j->y + r0 * C, r1 - r0, C, mean, scale, beta);
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
    double *sxy = j->part + 2 * C * (size_t)p;
    memset(sxy, 0, 2 * C * sizeof *sxy);
    PICK(grad_params_rows)(j->x, j->dy, lo, hi, C, j->k0, sxy, sxy + C);
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
    PICK(grad_input_rows)(j->dy + lo * C, j->x + lo * C, j->y + lo * C, hi - lo, C, j->k0, j->k1, j->k2, j->k2 + C);
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
