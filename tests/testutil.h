/* Small helpers shared by the Check suites: float comparisons with tolerances,
 * deterministic random data (util/rng.h), poisoned buffers and a central-difference
 * gradient check.  Everything is static inline so a suite uses only what it needs. */
#ifndef GRAPHC_TESTUTIL_H
#define GRAPHC_TESTUTIL_H
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <string.h>

#include "util/pool.h"
#include "util/rng.h"

#define TU_STREAM 0x7e57ull   /* the rng stream used for test data */

/* The pool a suite's kernels run on: tu_threads(n) replaces it with one of n threads
 * (0: one per core).  A suite's own, so a test reads as "with n threads, ...". */
static Pool *tu_pool;
static inline void tu_threads(int n)
{
    pool_free(tu_pool);
    tu_pool = pool_new(n);
}
static inline int tu_nthreads(void) { return pool_threads(tu_pool); }

/* |a - b| <= atol + rtol * |b|, b being the reference.  NaN is never near anything. */
static inline bool tu_near(double a, double b, double rtol, double atol)
{
    if (a == b)
        return true;
    return fabs(a - b) <= atol + rtol * fabs(b);
}

#define ck_assert_float_near_rel(a, b, rtol, atol)                                        \
    do {                                                                                  \
        double tu_a_ = (a), tu_b_ = (b);                                                  \
        ck_assert_msg(tu_near(tu_a_, tu_b_, (rtol), (atol)),                              \
                      "%s = %.9g, expected %s = %.9g (rtol %g, atol %g)", #a, tu_a_, #b,  \
                      tu_b_, (double)(rtol), (double)(atol));                             \
    } while (0)

/* First index where got and want differ beyond atol + rtol*|want[i]|, or -1. */
static inline ptrdiff_t tu_first_mismatch(const float *got, const float *want, size_t n,
                                          double rtol, double atol)
{
    for (size_t i = 0; i < n; i++)
        if (!tu_near(got[i], want[i], rtol, atol))
            return (ptrdiff_t)i;
    return -1;
}

/* Elementwise: |got[i] - want[i]| <= atol + rtol * |want[i]| for all i < n. */
#define ck_assert_floats_near(got, want, n, rtol, atol)                                   \
    do {                                                                                  \
        const float *tu_g_ = (got), *tu_w_ = (want);                                      \
        ptrdiff_t tu_i_ = tu_first_mismatch(tu_g_, tu_w_, (n), (rtol), (atol));           \
        ck_assert_msg(tu_i_ < 0, "%s[%td] = %.9g, expected %s[%td] = %.9g (rtol %g, atol %g)", \
                      #got, tu_i_, (double)tu_g_[tu_i_], #want, tu_i_,                    \
                      (double)tu_w_[tu_i_], (double)(rtol), (double)(atol));              \
    } while (0)

static inline double tu_max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs((double)x[i]) > m ? fabs((double)x[i]) : m;
    return m;
}

/* Scaled: |got[i] - want[i]| <= rtol * max(max_j |want[j]|, 1e-30) for all i < n.
 * Suits sums whose rounding error grows with the largest terms, not each output. */
#define ck_assert_floats_near_scaled(got, want, n, rtol)                                  \
    do {                                                                                  \
        size_t tu_n_ = (n);                                                               \
        double tu_s_ = tu_max_abs((want), tu_n_);                                         \
        ck_assert_floats_near((got), (want), tu_n_, 0.0, (rtol) * (tu_s_ > 1e-30 ? tu_s_ : 1e-30)); \
    } while (0)

/* Uniform in [lo, hi), a pure function of (seed, i). */
static inline void tu_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * rng_unit(rng_at(seed, TU_STREAM, i));
}

/* n floats, all NaN, so that an output a kernel forgets to write shows up. */
static inline float *tu_alloc(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
    return p;
}

static inline float *tu_alloc_uniform(size_t n, float lo, float hi, uint64_t seed)
{
    float *p = tu_alloc(n);
    tu_fill_uniform(p, n, lo, hi, seed);
    return p;
}

static inline bool tu_all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

/* ---- central differences ------------------------------------------------------- */

/* y[ny] = f(x[nx]) for some fixed context. */
typedef void (*tu_func)(void *ctx, const float *x, float *y);

/* num[i] = <dy, f(x + h e_i) - f(x - h e_i)> / (2h), summed in double, h ~ eps (the
 * step actually taken in float).  x is modified and restored. */
static inline void tu_numeric_vjp(tu_func f, void *ctx, float *x, size_t nx, size_t ny,
                                  const float *dy, float eps, double *num)
{
    float *yp = tu_alloc(ny), *ym = tu_alloc(ny);
    for (size_t i = 0; i < nx; i++) {
        float x0 = x[i], xp = x0 + eps, xm = x0 - eps;
        x[i] = xp;
        f(ctx, x, yp);
        x[i] = xm;
        f(ctx, x, ym);
        x[i] = x0;
        double s = 0;
        for (size_t j = 0; j < ny; j++)
            s += (double)dy[j] * ((double)yp[j] - (double)ym[j]);
        num[i] = s / ((double)xp - (double)xm);
    }
    free(yp);
    free(ym);
}

/* Worst index of |ana - num| / (atol + rtol * max|num|), and that ratio. */
static inline size_t tu_grad_worst(const float *ana, const double *num, size_t n, double rtol,
                                   double atol, double *ratio)
{
    double scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fabs(num[i]) > scale ? fabs(num[i]) : scale;
    double tol = atol + rtol * scale, worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs((double)ana[i] - num[i]) / tol;
        if (!(r <= worst)) {   /* NaN counts as worst */
            worst = r;
            wi = i;
            if (isnan(r))
                break;
        }
    }
    *ratio = worst;
    return wi;
}

/* Analytic gradient `ana` of <dy, f(x)> against central differences of f.  Passes when
 * every |ana_i - num_i| <= atol + rtol * max_j |num_j|. */
#define ck_assert_grad_fd(f, ctx, x, nx, ny, dy, ana, eps, rtol, atol)                     \
    do {                                                                                  \
        size_t tu_nx_ = (nx);                                                             \
        double *tu_num_ = calloc(tu_nx_ ? tu_nx_ : 1, sizeof *tu_num_), tu_r_;              \
        ck_assert_ptr_nonnull(tu_num_);                                                   \
        tu_numeric_vjp((f), (ctx), (x), tu_nx_, (ny), (dy), (eps), tu_num_);              \
        size_t tu_wi_ = tu_grad_worst((ana), tu_num_, tu_nx_, (rtol), (atol), &tu_r_);    \
        double tu_nv_ = tu_nx_ ? tu_num_[tu_wi_] : 0.0;                                                  \
        free(tu_num_);                                                                    \
        ck_assert_msg(tu_r_ <= 1.0, "gradient %s[%zu] = %.9g, numeric %.9g (%.3g x tolerance)", \
                      #ana, tu_wi_, (double)(ana)[tu_wi_], tu_nv_, tu_r_);                \
    } while (0)

/* ---- files ------------------------------------------------------------------------- */

/* A fresh folder /tmp/PREFIX.XXXXXX into dir (n bytes), and its removal with all in it. */
static inline void tu_mkdtemp(char *dir, size_t n, const char *prefix)
{
    snprintf(dir, n, "/tmp/%s.XXXXXX", prefix);
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static inline void tu_rmtree(const char *dir)
{
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* x rounded to bf16, to nearest, ties to even (x finite and normal), back in a float:
 * the rounding --dtype bf16's packing does, for the bf16 suites' references. */
static inline float bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    float r;
    memcpy(&r, &u, 4);
    return r;
}

#endif
