/* Batch norm over the last axis of [rows, C]: the batch's statistics, the
 * normalization, its backward in two passes, the running statistics' update.  See
 * kern.h.
 *
 * Sums over the rows are taken in BN_PARTS fixed blocks of rows (split over the pool; a
 * block's sums, in double, in its own part of the scratch) added in block order, so the
 * bits do not depend on the thread count.  The statistics are shifted sums: each
 * column's values minus the column's first value, so that a large mean does not eat
 * the variance's digits. */
#include <math.h>
#include <string.h>
#include "kernels/kern.h"
#include "kernels/split.h"

enum { BN_PARTS = 16 };

/* ---- the loops over rows -------------------------------------------------------------
 * Each written once with GCC's vector types (8 channels in float, 4 in double; the
 * channels past a multiple of 8 one at a time), and compiled twice: as is, and on
 * x86 for AVX2 (taken when the CPU has it).  Without FMA in either: each lane does the
 * scalar operations in the same order, so both give the same bits, and the bits of a
 * channel do not depend on where it falls in a vector. */
typedef float v4f __attribute__((vector_size(16), aligned(4), may_alias));
typedef float v8f __attribute__((vector_size(32), aligned(4), may_alias));
typedef double v4d __attribute__((vector_size(32), aligned(8), may_alias));
typedef int32_t v8i __attribute__((vector_size(32)));
#define INLINE static inline __attribute__((always_inline))

#define to_d(p) __builtin_convertvector(*(const v4f *)(p), v4d)

/* Sums over rows in float over runs of BN_RUN rows, each run's sums then added in
 * double (both sums of a run in registers, 32 channels at a time): the loops read x at
 * memory speed, where a double add per value through memory ran at 9.5 GB/s (stats)
 * and 16.5 GB/s (grad_params) on one thread.  The runs start at the block's first row,
 * so they are fixed by rows alone.  A run's float sum of terms t_i is within
 * (BN_RUN - 1) u sum |t_i| of the exact one (u = 2^-24), and each term is rounded at
 * most twice more (x - k, then the square or the product with dy): so each double sum
 * is within (BN_RUN + 2) u = 1.1e-6 of its terms' absolute sum (test_bn_sums holds the
 * kernels to that against a double reference). */
enum { BN_RUN = 16 };

/* Adds the float sums fs[0, n) to the double ones at S, n a multiple of 4. */
INLINE void add_run(const float *fs, size_t n, double *S)
{
#pragma GCC unroll 8
    for (size_t c = 0; c < n; c += 4) *(v4d *)(S + c) += to_d(fs + c);
}

/* Rows [r0, r1) of channels [c0, c0 + 8 nv):  S += sum (x - k0), Q += sum (x - k0)^2 */
INLINE void stats_run(const float *x, size_t r0, size_t r1, size_t C, size_t c0, int nv, const float *k0, double *S,
                      double *Q)
{
    v8f s[4], q[4], k[4];
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        s[v] = q[v] = (v8f){ 0 };
        k[v] = *(const v8f *)(k0 + c0 + 8 * v);
    }
    for (size_t r = r0; r < r1; r++) {
        const float *xr = x + r * C + c0;
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            v8f d = *(const v8f *)(xr + 8 * v) - k[v];
            s[v] += d;
            q[v] += d * d;
        }
    }
    float fs[32], fq[32];
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        *(v8f *)(fs + 8 * v) = s[v];
        *(v8f *)(fq + 8 * v) = q[v];
    }
    add_run(fs, 8 * (size_t)nv, S + c0);
    add_run(fq, 8 * (size_t)nv, Q + c0);
}

/* s += x - k0, q += (x - k0)^2 per column, over rows [lo, hi) */
INLINE void stats_rows_body(const float *x, size_t lo, size_t hi, size_t C, const float *k0, double *s, double *q)
{
    for (size_t r0 = lo; r0 < hi; r0 += BN_RUN) {
        size_t r1 = hi - r0 > BN_RUN ? r0 + BN_RUN : hi, c = 0;
        for (; c + 32 <= C; c += 32) stats_run(x, r0, r1, C, c, 4, k0, s, q);
        for (; c + 8 <= C; c += 8) stats_run(x, r0, r1, C, c, 1, k0, s, q);
        for (; c < C; c++) {
            float fs = 0, fq = 0;
            for (size_t r = r0; r < r1; r++) {
                float d = x[r * C + c] - k0[c];
                fs += d;
                fq += d * d;
            }
            s[c] += (double)fs;
            q[c] += (double)fq;
        }
    }
}

/* Rows [r0, r1) of channels [c0, c0 + 8 nv):  SXY += sum dy (x - mean), SY += sum dy;
 * with relu, dy where (x - mean) * scale + beta > 0, else +0 (relu_grad's). */
INLINE void grad_params_run(const float *x, const float *dy, size_t r0, size_t r1, size_t C, size_t c0, int nv,
                            const float *mean, bool relu, const float *scale, const float *beta, double *SXY,
                            double *SY)
{
    v8f sxy[4], sy[4], m[4], k[4], b[4];
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        sxy[v] = sy[v] = (v8f){ 0 };
        m[v] = *(const v8f *)(mean + c0 + 8 * v);
        if (relu) {
            k[v] = *(const v8f *)(scale + c0 + 8 * v);
            b[v] = *(const v8f *)(beta + c0 + 8 * v);
        }
    }
    for (size_t r = r0; r < r1; r++) {
        const float *xr = x + r * C + c0, *dr = dy + r * C + c0;
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            v8f g = *(const v8f *)(dr + 8 * v), t = *(const v8f *)(xr + 8 * v) - m[v];
            if (relu) g = (v8f)((v8i)g & (t * k[v] + b[v] > (v8f){ 0 }));
            sxy[v] += g * t;
            sy[v] += g;
        }
    }
    float fxy[32], fy[32];
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        *(v8f *)(fxy + 8 * v) = sxy[v];
        *(v8f *)(fy + 8 * v) = sy[v];
    }
    add_run(fxy, 8 * (size_t)nv, SXY + c0);
    add_run(fy, 8 * (size_t)nv, SY + c0);
}

/* sxy += dy (x - mean), sy += dy per column (dy masked with relu: grad_params_run) */
INLINE void grad_params_rows_body(const float *x, const float *dy, size_t lo, size_t hi, size_t C, const float *mean,
                                  bool relu, const float *scale, const float *beta, double *sxy, double *sy)
{
    for (size_t r0 = lo; r0 < hi; r0 += BN_RUN) {
        size_t r1 = hi - r0 > BN_RUN ? r0 + BN_RUN : hi, c = 0;
        for (; c + 32 <= C; c += 32) grad_params_run(x, dy, r0, r1, C, c, 4, mean, relu, scale, beta, sxy, sy);
        for (; c + 8 <= C; c += 8) grad_params_run(x, dy, r0, r1, C, c, 1, mean, relu, scale, beta, sxy, sy);
        for (; c < C; c++) {
            float fxy = 0, fy = 0;
            for (size_t r = r0; r < r1; r++) {
                float g = dy[r * C + c], t = x[r * C + c] - mean[c];
                if (relu && !(t * scale[c] + beta[c] > 0.0f)) g = 0.0f;
                fxy += g * t;
                fy += g;
            }
            sxy[c] += (double)fxy;
            sy[c] += (double)fy;
        }
    }
}

/* y = (x - mean) * scale + beta [+ res]: rounded before res is added, as the ops apart;
 * each value's inputs read before it is written, so y may be x or res */
INLINE void apply_rows_body(const float *x, const float *res, float *y, size_t rows, size_t C, const float *mean,
                            const float *scale, const float *beta)
{
    size_t C8 = C & ~(size_t)7;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * C, *rr = res ? res + r * C : NULL;
        float *yr = y + r * C;
        size_t c = 0;
        for (; c < C8; c += 8) {
            v8f v = (*(const v8f *)(xr + c) - *(const v8f *)(mean + c)) * *(const v8f *)(scale + c) +
                    *(const v8f *)(beta + c);
            if (res) v += *(const v8f *)(rr + c);
            *(v8f *)(yr + c) = v;
        }
        for (; c < C; c++) {
            float v = (xr[c] - mean[c]) * scale[c] + beta[c];
            yr[c] = res ? v + rr[c] : v;
        }
    }
}

/* dx = a dy - k (x - mean) - b; with relu, dy masked as in grad_params_run */
INLINE void grad_input_rows_body(const float *dy, const float *x, float *dx, size_t rows, size_t C, const float *a,
                                 const float *k, const float *mean, const float *b, bool relu, const float *scale,
                                 const float *beta)
{
    size_t C8 = C & ~(size_t)7;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * C, *dr = dy + r * C;
        float *out = dx + r * C;
        size_t c = 0;
        for (; c < C8; c += 8) {
            v8f g = *(const v8f *)(dr + c), t = *(const v8f *)(xr + c) - *(const v8f *)(mean + c);
            if (relu) g = (v8f)((v8i)g & (t * *(const v8f *)(scale + c) + *(const v8f *)(beta + c) > (v8f){ 0 }));
            *(v8f *)(out + c) = *(const v8f *)(a + c) * g - *(const v8f *)(k + c) * t - *(const v8f *)(b + c);
        }
        for (; c < C; c++) {
            float g = dr[c], t = xr[c] - mean[c];
            if (relu && !(t * scale[c] + beta[c] > 0.0f)) g = 0.0f;
            out[c] = a[c] * g - k[c] * t - b[c];
        }
    }
}

#define BN_LOOPS(SUFFIX, ATTR)                                                                                       \
    ATTR static void stats_rows##SUFFIX(const float *x, size_t lo, size_t hi, size_t C, const float *k0, double *s,  \
                                        double *q)                                                                   \
    {                                                                                                                \
        stats_rows_body(x, lo, hi, C, k0, s, q);                                                                     \
    }                                                                                                                \
    ATTR static void grad_params_rows##SUFFIX(const float *x, const float *dy, size_t lo, size_t hi, size_t C,        \
                                              const float *mean, const float *scale, const float *beta, double *sxy, \
                                              double *sy)                                                            \
    {                                                                                                                \
        if (scale)                                                                                                   \
            grad_params_rows_body(x, dy, lo, hi, C, mean, true, scale, beta, sxy, sy);                               \
        else                                                                                                         \
            grad_params_rows_body(x, dy, lo, hi, C, mean, false, NULL, NULL, sxy, sy);                               \
    }                                                                                                                \
    ATTR static void apply_rows##SUFFIX(const float *x, const float *res, float *y, size_t rows, size_t C,           \
                                        const float *mean, const float *scale, const float *beta)                    \
    {                                                                                                                \
        if (res)                                                                                                     \
            apply_rows_body(x, res, y, rows, C, mean, scale, beta);                                                  \
        else                                                                                                         \
            apply_rows_body(x, NULL, y, rows, C, mean, scale, beta);                                                 \
    }                                                                                                                \
    ATTR static void grad_input_rows##SUFFIX(const float *dy, const float *x, float *dx, size_t rows, size_t C,       \
                                             const float *a, const float *k, const float *mean, const float *b,      \
                                             const float *scale, const float *beta)                                  \
    {                                                                                                                \
        if (scale)                                                                                                   \
            grad_input_rows_body(dy, x, dx, rows, C, a, k, mean, b, true, scale, beta);                              \
        else                                                                                                         \
            grad_input_rows_body(dy, x, dx, rows, C, a, k, mean, b, false, NULL, NULL);                              \
    }
BN_LOOPS(_plain, )
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
BN_LOOPS(_avx2, __attribute__((target("avx2"))))
/* By the CPU (kern_isa_cpu), not by a forced lower variant (KIsa): both loops give the
 * same bits (target "avx2" has no FMA to contract into), the AVX2 one only goes faster. */
#define PICK(fn) (kern_isa_cpu() >= KISA_AVX2 ? fn##_avx2 : fn##_plain)
#else
#define PICK(fn) fn##_plain
#endif

/* The blocks' sums; then 5C floats: the two totals as 2C doubles (stats, grad_params) or
 * grad_input's coefficients (4C floats); then relu's scale (C floats). */
size_t kern_bn_scratch(size_t C) { return (size_t)BN_PARTS * 2 * C * sizeof(double) + 5 * C * sizeof(float); }

/* The scale of relu's mask in the scratch (after the sums and coefficients), or NULL. */
static const float *relu_scale(BnRelu relu, const float *stats, float eps, size_t C, void *scratch)
{
    if (!relu.gamma) return NULL;
    float *scale = (float *)(void *)((char *)scratch + (size_t)BN_PARTS * 2 * C * sizeof(double)) + 4 * C;
    kern_bn_scale(stats + C, relu.gamma, eps, C, scale);
    return scale;
}

typedef struct BnJob {
    const float *x, *dy;     /* x [rows, C]; dy: the gradient (grad_params, grad_input) */
    const float *res;        /* apply's residual, or NULL */
    float *y;                /* apply, grad_input: the output */
    size_t rows, C;
    const float *k0, *k1, *k2;   /* per-channel coefficients (which: see each part function) */
    const float *scale, *beta;   /* grad_params, grad_input: relu's mask (BnRelu), or NULL */
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
        PICK(apply_rows)(j->x + r0 * C, j->res ? j->res + r0 * C : NULL, j->y + r0 * C, r1 - r0, C, mean, scale, beta);
        if (j->act.fn >= 0) kern_unary((EwUnary)j->act.fn, j->act.p, j->y + r0 * C, j->y + r0 * C, (r1 - r0) * C);
    }
}

void kern_bn_apply(Pool *pool, const float *x, const float *res, size_t rows, size_t C, const float *mean,
                   const float *scale, const float *beta, EwAct act, float *y)
{
    BnJob j = { .x = x, .res = res, .y = y, .rows = rows, .C = C, .k0 = mean, .k1 = scale, .k2 = beta, .act = act };
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
    PICK(grad_params_rows)(j->x, j->dy, lo, hi, C, j->k0, j->scale, j->beta, sxy, sxy + C);
}

void kern_bn_grad_params(Pool *pool, const float *x, const float *dy, size_t rows, size_t C, const float *stats, float eps,
                         BnRelu relu, float *d, double *scratch)
{
    double *part = scratch, *sxy = part + (size_t)BN_PARTS * 2 * C, *sy = sxy + C;
    BnJob j = { .x = x, .dy = dy, .rows = rows, .C = C, .k0 = stats, .part = part, .beta = relu.beta };
    j.scale = relu_scale(relu, stats, eps, C, scratch);
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
    PICK(grad_input_rows)(j->dy + lo * C, j->x + lo * C, j->y + lo * C, hi - lo, C, j->k0, j->k1, j->k2, j->k2 + C, j->scale,
                          j->beta);
}

void kern_bn_grad_input(Pool *pool, const float *dy, const float *x, size_t rows, size_t C, const float *stats,
                        const float *gamma, const float *d, float eps, BnRelu relu, float *dx, float *scratch)
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
    BnJob j = { .x = x, .dy = dy, .y = dx, .rows = rows, .C = C, .k0 = a, .k1 = k, .k2 = mb, .beta = relu.beta };
    j.scale = relu_scale(relu, stats, eps, C, scratch);
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
