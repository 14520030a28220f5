/* The compute kernels (kernels/kern.h) against naive reference implementations, and
 * every gradient kernel against central finite differences. */
#include "kernels/kern.h"
#include "kernels/variant.h"
#include "util/pool.h"
#include "tests/testutil.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Test hook in conv.c: force the rows per im2col chunk (0 = automatic). */

#define FD_EPS 1e-2f
#define FD_RTOL 2e-3
#define FD_ATOL 1e-5

static size_t numel(const int64_t *s, int rank)
{
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (size_t)s[i];
    return n;
}

/* ================================================================================
 * Broadcast binary and sum_to
 * ================================================================================ */

typedef struct Shape {
    int rank;
    int64_t d[KERN_MAX_RANK];
} Shape;

static Shape broadcast_shape(const Shape *a, const Shape *b)
{
    Shape y = {a->rank > b->rank ? a->rank : b->rank, {0}};
    for (int i = 0; i < y.rank; i++) {
        int ia = i - (y.rank - a->rank), ib = i - (y.rank - b->rank);
        int64_t ad = ia >= 0 ? a->d[ia] : 1, bd = ib >= 0 ? b->d[ib] : 1;
        y.d[i] = ad == 1 ? bd : ad;
    }
    return y;
}

static float apply_op(EwBinary op, float u, float v)
{
    switch (op) {
    case EW_ADD: return u + v;
    case EW_SUB: return u - v;
    case EW_MUL: return u * v;
    case EW_DIV: return u / v;
    case EW_POW: return (float)pow(u, v);
    case EW_MAX: return isnan(u) || isnan(v) ? NAN : u >= v ? u : v;
    case EW_MIN: return isnan(u) || isnan(v) ? NAN : u <= v ? u : v;
    case EW_GREATER: return u > v ? 1.0f : 0.0f;
    case EW_LESS: return u < v ? 1.0f : 0.0f;
    default: return NAN;
    }
}

/* Row-major multi-index of linear index i in shape s (rank r). */
static void unravel(size_t i, const int64_t *s, int r, int64_t *idx)
{
    for (int d = r - 1; d >= 0; d--) {
        idx[d] = (int64_t)(i % (size_t)s[d]);
        i /= (size_t)s[d];
    }
}

/* Offset in s of the element broadcast to y-index idx (y of rank yrank). */
static size_t bcast_offset(const int64_t *idx, int yrank, const Shape *s)
{
    size_t off = 0;
    for (int d = 0; d < s->rank; d++) {
        int64_t coord = s->d[d] == 1 ? 0 : idx[d + yrank - s->rank];
        off = off * (size_t)s->d[d] + (size_t)coord;
    }
    return off;
}

static void ref_binary(EwBinary op, const float *a, const Shape *as, const float *b, const Shape *bs,
                       float *y, const Shape *ys)
{
    size_t ny = numel(ys->d, ys->rank);
    int64_t idx[KERN_MAX_RANK];
    for (size_t i = 0; i < ny; i++) {
        unravel(i, ys->d, ys->rank, idx);
        y[i] = apply_op(op, a[bcast_offset(idx, ys->rank, as)], b[bcast_offset(idx, ys->rank, bs)]);
    }
}

static void ref_sum_to(const float *x, const Shape *xs, float *y, const Shape *ys)
{
    size_t nx = numel(xs->d, xs->rank), ny = numel(ys->d, ys->rank);
    double *acc = calloc(ny ? ny : 1, sizeof *acc);
    ck_assert_ptr_nonnull(acc);
    int64_t idx[KERN_MAX_RANK];
    for (size_t i = 0; i < nx; i++) {
        unravel(i, xs->d, xs->rank, idx);
        acc[bcast_offset(idx, xs->rank, ys)] += x[i];
    }
    for (size_t i = 0; i < ny; i++)
        y[i] = (float)acc[i];
    free(acc);
}

typedef struct ShapePair {
    Shape a, b;
} ShapePair;

static const ShapePair bin_cases[] = {
    {{3, {2, 3, 4}}, {3, {2, 3, 4}}},         /* equal */
    {{3, {2, 3, 4}}, {0, {0}}},               /* scalar b, rank 0 */
    {{3, {2, 3, 4}}, {3, {1, 1, 1}}},         /* scalar b, rank 3 */
    {{0, {0}}, {3, {2, 3, 4}}},               /* scalar a */
    {{3, {2, 3, 4}}, {1, {4}}},               /* bias */
    {{3, {2, 3, 4}}, {2, {3, 4}}},            /* trailing matrix */
    {{3, {2, 3, 4}}, {2, {1, 4}}},            /* bias with a leading 1 */
    {{1, {4}}, {3, {2, 3, 4}}},               /* bias on the a side */
    {{2, {3, 1}}, {2, {1, 4}}},               /* outer product shape */
    {{3, {2, 1, 4}}, {2, {3, 1}}},
    {{6, {2, 3, 1, 5, 1, 2}}, {5, {3, 4, 1, 1, 2}}},
    {{3, {5, 1, 3}}, {3, {5, 4, 1}}},
    {{2, {1, 6}}, {2, {6, 1}}},
    {{3, {2, 3, 4}}, {3, {2, 1, 4}}},         /* middle broadcast */
    {{3, {2, 1, 1}}, {3, {1, 3, 4}}},
    {{3, {1, 1, 1}}, {1, {1}}},
    {{2, {0, 3}}, {1, {3}}},                  /* empty */
    {{4, {3, 1, 4, 2}}, {4, {1, 5, 1, 2}}},
    {{2, {37, 3}}, {1, {3}}},                 /* narrow bias, many rows */
    {{4, {2, 3, 4, 5}}, {3, {3, 1, 5}}},
    {{3, {4, 1, 3}}, {3, {4, 2, 3}}},         /* a broadcast in the middle */
};
#define N_BIN_CASES ((int)(sizeof bin_cases / sizeof bin_cases[0]))

/* Inputs for case c: a in [-2, 2], b in [0.5, 2] (safe to divide by). */
static void bin_inputs(const ShapePair *c, float **a, float **b, Shape *ys, uint64_t seed)
{
    *ys = broadcast_shape(&c->a, &c->b);
    *a = tu_alloc_uniform(numel(c->a.d, c->a.rank), -2.0f, 2.0f, seed);
    *b = tu_alloc_uniform(numel(c->b.d, c->b.rank), 0.5f, 2.0f, seed + 1);
}

/* Operands in each function's domain, into ao and bo: pow's base positive (|a| + 0.25:
 * a fractional power of a negative number is NaN); max, min and the masks' operands on
 * grids a quarter apart (a on k/2 + 1/4, b on k/2), never within FD_EPS of a tie. */
static void op_operands(EwBinary op, const float *a, size_t na, const float *b, size_t nb, float *ao, float *bo)
{
    bool grid = op == EW_MAX || op == EW_MIN || op == EW_GREATER || op == EW_LESS;
    for (size_t i = 0; i < na; i++)
        ao[i] = op == EW_POW ? fabsf(a[i]) + 0.25f : grid ? floorf(a[i] * 2.0f) / 2.0f + 0.25f : a[i];
    for (size_t i = 0; i < nb; i++)
        bo[i] = grid ? roundf(b[i] * 2.0f) / 2.0f : b[i];
}

START_TEST(test_binary_forward)
{
    const ShapePair *c = &bin_cases[_i];
    float *a0, *b0;
    Shape ys;
    bin_inputs(c, &a0, &b0, &ys, 100 + (uint64_t)_i);
    size_t ny = numel(ys.d, ys.rank), na = numel(c->a.d, c->a.rank), nb = numel(c->b.d, c->b.rank);
    float *y = tu_alloc(ny), *want = tu_alloc(ny), *a = tu_alloc(na ? na : 1), *b = tu_alloc(nb ? nb : 1);
    for (int op = 0; op < EW_BINARY_COUNT; op++) {
        op_operands((EwBinary)op, a0, na, b0, nb, a, b);
        ref_binary((EwBinary)op, a, &c->a, b, &c->b, want, &ys);
        kern_fill(y, NAN, ny);
        kern_binary((EwBinary)op, a, c->a.d, c->a.rank, b, c->b.d, c->b.rank, y, ys.d, ys.rank);
        ck_assert_floats_near(y, want, ny, 1e-6, 0.0);
    }
    free(a0);
    free(b0);
    free(a);
    free(b);
    free(y);
    free(want);
}
END_TEST

/* max and min give NaN when either operand is NaN, in the kernel and in constant
 * folding (ew_binary), as PyTorch's maximum and minimum: with the NaN on the left they
 * gave the other operand, which hid a NaN behind clip() (found by the models campaign:
 * its gradient check saw the NaN side get the gradient). */
START_TEST(test_binary_max_min_nan)
{
    const float a[] = { NAN, 1.0f, NAN, -2.0f }, b[] = { 0.5f, NAN, NAN, 3.0f };
    const int64_t d[1] = { 4 };
    static const EwBinary ops[] = { EW_MAX, EW_MIN };
    for (int k = 0; k < 2; k++) {
        EwBinary op = ops[k];
        float y[4];
        kern_binary(op, a, d, 1, b, d, 1, y, d, 1);
        for (int i = 0; i < 3; i++) {
            ck_assert_msg(isnan(y[i]), "%s(%g, %g) = %g", op == EW_MAX ? "max" : "min", a[i], b[i], y[i]);
            ck_assert(isnan(ew_binary(op, a[i], b[i])));
        }
        ck_assert_float_eq(y[3], op == EW_MAX ? 3.0f : -2.0f);
    }
}
END_TEST

/* y = a op b with y the same buffer as a (a bias add in place). */
START_TEST(test_binary_inplace)
{
    static const ShapePair cases[] = {
        {{3, {4, 3, 5}}, {1, {5}}},
        {{3, {4, 3, 5}}, {0, {0}}},
        {{3, {4, 3, 5}}, {3, {4, 3, 5}}},
        {{3, {4, 3, 5}}, {3, {4, 1, 5}}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const ShapePair *c = &cases[k];
        size_t na = numel(c->a.d, c->a.rank);
        float *a, *b;
        Shape ys;
        bin_inputs(c, &a, &b, &ys, 7 + k);
        size_t nb = numel(c->b.d, c->b.rank);
        float *want = tu_alloc(na), *a0 = a, *b0 = b;
        a = tu_alloc(na);
        b = tu_alloc(nb ? nb : 1);
        for (int op = 0; op < EW_BINARY_COUNT; op++) {
            float *y = tu_alloc(na);
            op_operands((EwBinary)op, a0, na, b0, nb, a, b);
            kern_copy(a, y, na);
            ref_binary((EwBinary)op, a, &c->a, b, &c->b, want, &ys);
            kern_binary((EwBinary)op, y, c->a.d, c->a.rank, b, c->b.d, c->b.rank, y, ys.d, ys.rank);
            ck_assert_floats_near(y, want, na, 1e-6, 0.0);
            free(y);
        }
        free(a0);
        free(b0);
        free(a);
        free(b);
        free(want);
    }
}
END_TEST

static const ShapePair sum_cases[] = {   /* a = x's shape, b = y's shape */
    {{3, {2, 3, 4}}, {1, {4}}},
    {{3, {2, 3, 4}}, {2, {3, 4}}},
    {{3, {2, 3, 4}}, {2, {3, 1}}},
    {{3, {2, 3, 4}}, {3, {2, 1, 4}}},
    {{3, {2, 3, 4}}, {3, {1, 1, 1}}},
    {{3, {2, 3, 4}}, {0, {0}}},
    {{3, {2, 3, 4}}, {3, {2, 3, 4}}},
    {{3, {2, 3, 4}}, {3, {2, 3, 1}}},
    {{3, {2, 3, 4}}, {3, {2, 1, 1}}},
    {{6, {2, 3, 1, 5, 1, 2}}, {5, {3, 1, 1, 1, 2}}},
    {{6, {2, 3, 4, 5, 3, 2}}, {6, {2, 1, 4, 1, 3, 1}}},
    {{3, {5, 4, 3}}, {3, {5, 1, 3}}},
    {{2, {7, 300}}, {1, {300}}},              /* column sums across the 256 block */
    {{2, {1000, 3}}, {1, {3}}},
    {{2, {4, 5}}, {2, {4, 1}}},               /* row sums */
    {{4, {2, 1, 3, 1}}, {2, {3, 1}}},
    {{2, {0, 3}}, {1, {3}}},                  /* nothing to sum: zeros */
    {{1, {100003}}, {0, {0}}},
};
#define N_SUM_CASES ((int)(sizeof sum_cases / sizeof sum_cases[0]))

START_TEST(test_sum_to)
{
    const ShapePair *c = &sum_cases[_i];
    size_t nx = numel(c->a.d, c->a.rank), ny = numel(c->b.d, c->b.rank);
    float *x = tu_alloc_uniform(nx, -1.0f, 1.0f, 200 + (uint64_t)_i);
    float *y = tu_alloc(ny), *want = tu_alloc(ny);
    ref_sum_to(x, &c->a, want, &c->b);
    kern_sum_to(x, c->a.d, c->a.rank, y, c->b.d, c->b.rank);
    ck_assert_floats_near(y, want, ny, 1e-5, 1e-5);
    free(x);
    free(y);
    free(want);
}
END_TEST

typedef struct BinCtx {
    EwBinary op;
    const Shape *as, *bs;
    Shape ys;
    const float *a, *b;
    int wrt;   /* 0: the function of a, 1: of b */
} BinCtx;

static void bin_fn(void *vc, const float *x, float *y)
{
    const BinCtx *c = vc;
    kern_binary(c->op, c->wrt == 0 ? x : c->a, c->as->d, c->as->rank, c->wrt == 1 ? x : c->b,
                c->bs->d, c->bs->rank, y, c->ys.d, c->ys.rank);
}

/* The vector-Jacobian products of y = a op b, composed from the kernels the way the
 * executors do it: an elementwise factor, then kern_sum_to back to each input's shape. */
static void binary_vjp(EwBinary op, const float *a, const Shape *as, const float *b, const Shape *bs,
                       const float *y, const Shape *ys, const float *dy, float *da, float *db)
{
    size_t ny = numel(ys->d, ys->rank);
    float *t = tu_alloc(ny), *t2 = tu_alloc(ny);
    switch (op) {
    case EW_ADD:
        kern_sum_to(dy, ys->d, ys->rank, da, as->d, as->rank);
        kern_sum_to(dy, ys->d, ys->rank, db, bs->d, bs->rank);
        break;
    case EW_SUB:
        kern_sum_to(dy, ys->d, ys->rank, da, as->d, as->rank);
        kern_unary(EW_NEG, 0.0f, dy, t, ny);
        kern_sum_to(t, ys->d, ys->rank, db, bs->d, bs->rank);
        break;
    case EW_MUL:
        kern_binary(EW_MUL, dy, ys->d, ys->rank, b, bs->d, bs->rank, t, ys->d, ys->rank);
        kern_sum_to(t, ys->d, ys->rank, da, as->d, as->rank);
        kern_binary(EW_MUL, dy, ys->d, ys->rank, a, as->d, as->rank, t, ys->d, ys->rank);
        kern_sum_to(t, ys->d, ys->rank, db, bs->d, bs->rank);
        break;
    case EW_DIV:   /* da = dy / b, db = -dy * y / b */
        kern_binary(EW_DIV, dy, ys->d, ys->rank, b, bs->d, bs->rank, t, ys->d, ys->rank);
        kern_sum_to(t, ys->d, ys->rank, da, as->d, as->rank);
        kern_binary(EW_MUL, dy, ys->d, ys->rank, y, ys->d, ys->rank, t, ys->d, ys->rank);
        kern_binary(EW_DIV, t, ys->d, ys->rank, b, bs->d, bs->rank, t2, ys->d, ys->rank);
        kern_unary(EW_NEG, 0.0f, t2, t, ny);
        kern_sum_to(t, ys->d, ys->rank, db, bs->d, bs->rank);
        break;
    case EW_POW: {   /* da = dy b a^(b-1), db = dy y log(a), as graph/autodiff.c's g_pow */
        size_t na = numel(as->d, as->rank);
        float *bm1 = tu_alloc(numel(bs->d, bs->rank)), *la = tu_alloc(na ? na : 1);
        const float one = 1.0f;
        const int64_t none[1] = { 1 };
        kern_binary(EW_SUB, b, bs->d, bs->rank, &one, none, 0, bm1, bs->d, bs->rank);
        kern_binary(EW_POW, a, as->d, as->rank, bm1, bs->d, bs->rank, t, ys->d, ys->rank);
        kern_binary(EW_MUL, dy, ys->d, ys->rank, b, bs->d, bs->rank, t2, ys->d, ys->rank);
        kern_binary(EW_MUL, t2, ys->d, ys->rank, t, ys->d, ys->rank, t, ys->d, ys->rank);
        kern_sum_to(t, ys->d, ys->rank, da, as->d, as->rank);
        kern_unary(EW_LOG, 0.0f, a, la, na);
        kern_binary(EW_MUL, dy, ys->d, ys->rank, y, ys->d, ys->rank, t2, ys->d, ys->rank);
        kern_binary(EW_MUL, t2, ys->d, ys->rank, la, as->d, as->rank, t, ys->d, ys->rank);
        kern_sum_to(t, ys->d, ys->rank, db, bs->d, bs->rank);
        free(bm1);
        free(la);
        break;
    }
    case EW_MAX: case EW_MIN: {   /* the picked operand gets dy (g_max: where(other picked, 0, dy)) */
        const float zero = 0.0f;
        const int64_t none[1] = { 1 };
        float *m = tu_alloc(ny);
        kern_binary(op == EW_MAX ? EW_LESS : EW_GREATER, a, as->d, as->rank, b, bs->d, bs->rank, m, ys->d, ys->rank);
        kern_where(m, ys->d, ys->rank, &zero, none, 0, dy, ys->d, ys->rank, t, ys->d, ys->rank);
        kern_sum_to(t, ys->d, ys->rank, da, as->d, as->rank);
        kern_where(m, ys->d, ys->rank, dy, ys->d, ys->rank, &zero, none, 0, t, ys->d, ys->rank);
        kern_sum_to(t, ys->d, ys->rank, db, bs->d, bs->rank);
        free(m);
        break;
    }
    default:   /* greater, less: steps, no gradient (0 away from a == b) */
        kern_fill(da, 0.0f, numel(as->d, as->rank));
        kern_fill(db, 0.0f, numel(bs->d, bs->rank));
        break;
    }
    free(t);
    free(t2);
}

static const int bin_grad_cases[] = {1, 4, 7, 8, 9, 10, 11, 13, 17, 20};
#define N_BIN_GRAD_CASES ((int)(sizeof bin_grad_cases / sizeof bin_grad_cases[0]))

START_TEST(test_binary_grad_fd)
{
    const ShapePair *c = &bin_cases[bin_grad_cases[_i]];
    float *a0, *b0;
    Shape ys;
    bin_inputs(c, &a0, &b0, &ys, 300 + (uint64_t)_i);
    size_t na = numel(c->a.d, c->a.rank), nb = numel(c->b.d, c->b.rank), ny = numel(ys.d, ys.rank);
    float *y = tu_alloc(ny), *dy = tu_alloc_uniform(ny, -1.0f, 1.0f, 400 + (uint64_t)_i);
    float *da = tu_alloc(na), *db = tu_alloc(nb), *a = tu_alloc(na ? na : 1), *b = tu_alloc(nb ? nb : 1);
    for (int op = 0; op < EW_BINARY_COUNT; op++) {
        op_operands((EwBinary)op, a0, na, b0, nb, a, b);
        BinCtx ctx = {(EwBinary)op, &c->a, &c->b, ys, a, b, 0};
        bin_fn(&ctx, a, y);
        binary_vjp((EwBinary)op, a, &c->a, b, &c->b, y, &ys, dy, da, db);
        ck_assert_grad_fd(bin_fn, &ctx, a, na, ny, dy, da, FD_EPS, FD_RTOL, FD_ATOL);
        ctx.wrt = 1;
        ck_assert_grad_fd(bin_fn, &ctx, b, nb, ny, dy, db, FD_EPS, FD_RTOL, FD_ATOL);
    }
    free(a0);
    free(b0);
    free(a);
    free(b);
    free(y);
    free(dy);
    free(da);
    free(db);
}
END_TEST

/* ================================================================================
 * Unary, scale/fill/copy/axpy, sum_all
 * ================================================================================ */

/* Each unary function of util/elemwise.def in double, at its default parameter: the
 * reference the kernels (in float) are held to.  A function added there without a
 * reference here fails test_unary_forward. */
static double ref_unary(EwUnary op, double x)
{
    double p = ew_unary_default(op);
    (void)p;
    switch (op) {
    case EW_RELU: return x > 0 ? x : 0;
    case EW_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case EW_TANH: return tanh(x);
    case EW_EXP: return exp(x);
    case EW_LOG: return log(x);
    case EW_NEG: return -x;
    case EW_SQRT: return sqrt(x);
    case EW_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case EW_SILU: return x / (1.0 + exp(-x));
    case EW_LEAKY_RELU: return x > 0 ? x : p * x;
    case EW_SOFTPLUS: return x > 20 ? x : log1p(exp(x));
    case EW_GELU_TANH: return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    default: return NAN;
    }
}

/* Inputs in each op's domain, away from kinks at 0 by more than FD_EPS. */
static float *unary_inputs(EwUnary op, size_t n, uint64_t seed)
{
    float *x;
    switch (op) {
    case EW_LOG:
    case EW_SQRT:
        x = tu_alloc_uniform(n, 0.5f, 3.0f, seed);
        break;
    default:
        x = tu_alloc_uniform(n, 0.1f, 2.5f, seed);
        for (size_t i = 0; i < n; i += 2)
            x[i] = -x[i];
        break;
    }
    return x;
}

/* The value a unary function's gradient reads: its input or its output. */
static const float *unary_v(EwUnary op, const float *x, const float *y) { return ew_unary_reads(op) == EW_READS_X ? x : y; }

START_TEST(test_unary_forward)
{
    EwUnary op = (EwUnary)_i;
    size_t n = 1001;
    float p = ew_unary_default(op);
    float *x = unary_inputs(op, n, 500 + (uint64_t)_i), *y = tu_alloc(n), *want = tu_alloc(n);
    for (size_t i = 0; i < n; i++)
        want[i] = (float)ref_unary(op, x[i]);
    kern_unary(op, p, x, y, n);
    ck_assert_msg(tu_first_mismatch(y, want, n, 2e-6, 1e-30) < 0, "%s: not its reference", ew_unary_name(op));
    /* In place. */
    kern_unary(op, p, x, x, n);
    ck_assert_floats_near(x, want, n, 2e-6, 1e-30);
    /* constant folding's scalar math (ew_unary) gives the kernel's bits */
    float *v = unary_inputs(op, n, 500 + (uint64_t)_i);
    for (size_t i = 0; i < n; i++) {
        float one = ew_unary(op, v[i], p);
        ck_assert_msg(memcmp(&one, &x[i], sizeof one) == 0, "%s: folding's value %.9g, the kernel's %.9g",
                      ew_unary_name(op), one, x[i]);
    }
    free(v);
    free(x);
    free(y);
    free(want);
}
END_TEST

START_TEST(test_unary_extremes)
{
    const float big[] = {-1000.0f, -100.0f, -20.0f, 20.0f, 100.0f, 1000.0f};
    const size_t n = sizeof big / sizeof big[0];
    float y[sizeof big / sizeof big[0]];
    kern_unary(EW_SIGMOID, 0.0f, big, y, n);
    ck_assert(tu_all_finite(y, n));
    for (size_t i = 0; i < n; i++)
        ck_assert_float_near_rel(y[i], ref_unary(EW_SIGMOID, big[i]), 1e-6, 1e-30);
    kern_unary(EW_TANH, 0.0f, big, y, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_near_rel(y[i], big[i] > 0 ? 1.0 : -1.0, 1e-7, 0.0);
    kern_unary(EW_RELU, 0.0f, big, y, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_near_rel(y[i], big[i] > 0 ? big[i] : 0.0, 0.0, 0.0);
}
END_TEST

typedef struct UnaryCtx {
    EwUnary op;
} UnaryCtx;

static void unary_fn(void *vc, const float *x, float *y)
{
    const UnaryCtx *c = vc;
    kern_unary(c->op, ew_unary_default(c->op), x, y, 64);
}

START_TEST(test_unary_grad_fd)
{
    EwUnary op = (EwUnary)_i;
    size_t n = 64;
    float p = ew_unary_default(op);
    float *x = unary_inputs(op, n, 600 + (uint64_t)_i), *y = tu_alloc(n);
    float *dy = tu_alloc_uniform(n, -1.0f, 1.0f, 700 + (uint64_t)_i), *dx = tu_alloc(n);
    kern_unary(op, p, x, y, n);
    kern_unary_grad(op, p, unary_v(op, x, y), dy, dx, n);
    UnaryCtx ctx = {op};
    ck_assert_grad_fd(unary_fn, &ctx, x, n, n, dy, dx, FD_EPS, FD_RTOL, FD_ATOL);
    free(x);
    free(y);
    free(dy);
    free(dx);
}
END_TEST

/* unary_grad in place, as the compiled plan runs it (OPT_INPLACE): its output written
 * over the value the derivative is read from or over the incoming gradient gives the
 * bits of a separate output. */
START_TEST(test_unary_grad_inplace)
{
    EwUnary op = (EwUnary)_i;
    size_t n = 1001;
    float p = ew_unary_default(op);
    float *v = unary_inputs(op, n, 800 + (uint64_t)_i), *dy = tu_alloc_uniform(n, -1.0f, 1.0f, 900 + (uint64_t)_i);
    float *want = tu_alloc(n), *buf = tu_alloc(n);
    kern_unary_grad(op, p, v, dy, want, n);
    kern_copy(v, buf, n);
    kern_unary_grad(op, p, buf, dy, buf, n);
    ck_assert_mem_eq(buf, want, n * sizeof *buf);
    kern_copy(dy, buf, n);
    kern_unary_grad(op, p, v, buf, buf, n);
    ck_assert_mem_eq(buf, want, n * sizeof *buf);
    free(v);
    free(dy);
    free(want);
    free(buf);
}
END_TEST

/* A relu's mask kept as bits (kern_sign_bits, then kern_mask_bits after x is gone)
 * gives kern_relu_mask's bits, at lengths that end inside a word or on its edge, with
 * +0, -0, NaN and infinities among the values; a partial last word's other bits clear;
 * nothing past the last word written. */
START_TEST(test_sign_bits_mask)
{
    static const size_t lens[] = { 1, 31, 32, 33, 64, 100, 1001 };
    for (size_t t = 0; t < sizeof lens / sizeof *lens; t++) {
        size_t n = lens[t], words = (n + 31) / 32;
        float *x = tu_alloc_uniform(n, -1.0f, 1.0f, 40 + t), *dy = tu_alloc_uniform(n, -1.0f, 1.0f, 50 + t);
        static const float special[] = { 0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e-45f, -1e-45f };
        for (size_t k = 0; k < sizeof special / sizeof *special && 3 * k < n; k++) x[3 * k] = special[k];
        uint32_t *bits = malloc((words + 1) * sizeof *bits);
        ck_assert_ptr_nonnull(bits);
        bits[words] = 0xdeadbeefu;
        kern_sign_bits(x, bits, n);
        ck_assert_uint_eq(bits[words], 0xdeadbeefu);
        if (n % 32) ck_assert_uint_eq(bits[words - 1] >> (n % 32), 0);
        float *want = tu_alloc(n), *got = tu_alloc(n);
        kern_copy(dy, want, n);
        kern_relu_mask(x, want, n);
        kern_copy(dy, got, n);
        kern_mask_bits(bits, got, n);
        ck_assert_mem_eq(got, want, n * sizeof *got);
        free(x);
        free(dy);
        free(bits);
        free(want);
        free(got);
    }
}
END_TEST

START_TEST(test_scale_fill_copy_axpy)
{
    size_t n = 257;
    float *x = tu_alloc_uniform(n, -3.0f, 3.0f, 11), *y = tu_alloc(n), *z = tu_alloc(n);
    kern_scale(x, -1.5f, y, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_near_rel(y[i], -1.5f * x[i], 0.0, 0.0);
    kern_fill(y, 2.25f, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_near_rel(y[i], 2.25, 0.0, 0.0);
    kern_fill(y, 0.0f, n);
    for (size_t i = 0; i < n; i++)
        ck_assert(y[i] == 0.0f && !signbit(y[i]));
    kern_copy(x, y, n);
    ck_assert_int_eq(memcmp(x, y, n * sizeof *x), 0);
    kern_copy(y, y, n);
    ck_assert_int_eq(memcmp(x, y, n * sizeof *x), 0);
    tu_fill_uniform(z, n, -1.0f, 1.0f, 12);
    kern_copy(z, y, n);
    kern_axpy_acc(0.75f, x, y, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_near_rel(y[i], z[i] + 0.75f * x[i], 1e-6, 1e-7);
    free(x);
    free(y);
    free(z);
}
END_TEST

/* A block of a column sum, in double: exact here (values in 1/64ths, few rows), and
 * an empty block gives zeros. */
START_TEST(test_colsum_d)
{
    enum { ROWS = 37, COLS = 13 };
    float x[ROWS * COLS];
    double acc[COLS + 1], want[COLS];
    for (size_t i = 0; i < ROWS * COLS; i++)
        x[i] = (float)((int)(i * 7919 % 257) - 128) / 64.0f;
    for (size_t j = 0; j < COLS; j++) {
        want[j] = 0;
        for (size_t r = 0; r < ROWS; r++)
            want[j] += x[r * COLS + j];
    }
    acc[COLS] = 42.0;
    kern_colsum_d(x, ROWS, COLS, acc);
    for (size_t j = 0; j < COLS; j++)
        ck_assert_double_eq(acc[j], want[j]);
    ck_assert_double_eq(acc[COLS], 42.0);   /* nothing written past cols */
    kern_colsum_d(x, 0, COLS, acc);
    for (size_t j = 0; j < COLS; j++)
        ck_assert_double_eq(acc[j], 0.0);
}
END_TEST

/* Wider blocks: each column the chain of double adds in row order, bit for bit,
 * whatever column group of the vector loop (1-4 vectors at once, and the scalar tail)
 * it falls in; 201 rows of values 2^-20 .. 2^20, so that another order rounds
 * otherwise: test_vmath_colsum_d's 11 rows 2^-40 .. 2^40 apart passed with the rows
 * summed in reverse order, which fails this at every width. */
static const size_t colsum_widths[] = { 16, 32, 40, 48, 64, 96, 112, 129 };

START_TEST(test_colsum_d_widths)
{
    enum { ROWS = 201 };
    const size_t cols = colsum_widths[_i];
    float *x = tu_alloc_uniform(ROWS * cols, -1.0f, 1.0f, 300 + (uint64_t)_i);
    double acc[129 + 1], want[129];
    for (size_t i = 0; i < ROWS * cols; i++)
        x[i] = ldexpf(x[i], (int)(i * 7919 % 41) - 20);
    for (size_t j = 0; j < cols; j++) {
        want[j] = 0;
        for (size_t r = 0; r < ROWS; r++)
            want[j] += x[r * cols + j];
    }
    acc[cols] = 42.0;
    kern_colsum_d(x, ROWS, cols, acc);
    for (size_t j = 0; j < cols; j++)
        ck_assert_msg(acc[j] == want[j], "cols %zu, column %zu: %a, want %a", cols, j, acc[j], want[j]);
    ck_assert_double_eq(acc[cols], 42.0);
    free(x);
}
END_TEST

START_TEST(test_sum_all)
{
    size_t n = 100003;
    float *x = tu_alloc_uniform(n, -1.0f, 3.0f, 13), y = NAN;
    double want = 0;
    for (size_t i = 0; i < n; i++)
        want += x[i];
    kern_sum_all(x, n, &y);
    ck_assert_float_near_rel(y, want, 1e-6, 0.0);
    kern_sum_all(x, 0, &y);
    ck_assert_float_near_rel(y, 0.0, 0.0, 0.0);
    kern_sum_all(x, 1, &y);
    ck_assert_float_near_rel(y, x[0], 0.0, 0.0);
    free(x);
}
END_TEST

/* ================================================================================
 * Softmax family, losses, count_correct
 * ================================================================================ */

static void ref_softmax(const float *x, float *y, size_t rows, size_t cols, bool log_out)
{
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        double m = xr[0], s = 0;
        for (size_t j = 1; j < cols; j++)
            m = xr[j] > m ? xr[j] : m;
        for (size_t j = 0; j < cols; j++)
            s += exp((double)xr[j] - m);
        for (size_t j = 0; j < cols; j++)
            y[r * cols + j] = (float)(log_out ? (double)xr[j] - m - log(s) : exp((double)xr[j] - m) / s);
    }
}

START_TEST(test_softmax_forward)
{
    static const size_t shapes[][2] = {{5, 7}, {3, 1}, {1, 300}, {16, 10}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        size_t rows = shapes[k][0], cols = shapes[k][1], n = rows * cols;
        float *x = tu_alloc_uniform(n, -4.0f, 4.0f, 20 + k), *y = tu_alloc(n), *want = tu_alloc(n);
        ref_softmax(x, want, rows, cols, false);
        kern_softmax(x, y, rows, cols);
        ck_assert_floats_near(y, want, n, 1e-5, 1e-9);
        for (size_t r = 0; r < rows; r++) {
            double s = 0;
            for (size_t j = 0; j < cols; j++)
                s += y[r * cols + j];
            ck_assert_float_near_rel(s, 1.0, 0.0, 1e-5);
        }
        ref_softmax(x, want, rows, cols, true);
        kern_log_softmax(x, y, rows, cols);
        ck_assert_floats_near(y, want, n, 1e-5, 1e-5);
        /* In place. */
        ref_softmax(x, want, rows, cols, false);
        kern_copy(x, y, n);
        kern_softmax(y, y, rows, cols);
        ck_assert_floats_near(y, want, n, 1e-5, 1e-9);
        ref_softmax(x, want, rows, cols, true);
        kern_copy(x, y, n);
        kern_log_softmax(y, y, rows, cols);
        ck_assert_floats_near(y, want, n, 1e-5, 1e-5);
        free(x);
        free(y);
        free(want);
    }
}
END_TEST

/* kern_exp_shifted (the vector math's exp) across the cut where e^d rounds to +0 and
 * far below it: +0, and glibc's bits for the denormal results just above the cut (their
 * few digits round alike; test_vmath_accuracy holds it to 1 ulp everywhere). */
START_TEST(test_exp_shifted)
{
    for (int i = 0; i <= 2000; i++) {
        float d = -110.0f + 0.005f * (float)i;   /* -110 .. -100, across the cut */
        float got = kern_exp_shifted(d), want = expf(d);
        ck_assert_msg(memcmp(&got, &want, sizeof got) == 0, "d = %.9g: %a, expf %a", d, got, want);
    }
    const float far[] = {-1e9f, -1e30f, -FLT_MAX, -200.0f, -87.5f, -1.0f, -0.0f, 0.0f};
    for (size_t i = 0; i < sizeof far / sizeof far[0]; i++) {
        float got = kern_exp_shifted(far[i]), want = expf(far[i]);
        ck_assert_msg(memcmp(&got, &want, sizeof got) == 0, "d = %g", far[i]);
    }
    /* A causally masked row: exact zeros where masked, the rest as the reference. */
    const size_t cols = 8;
    const float x[] = {0.5f, -1.0f, 2.0f, -1e9f, -1e9f, -1e9f, -1e9f, -1e9f};
    float y[8], want[8];
    kern_softmax(x, y, 1, cols);
    ref_softmax(x, want, 1, cols, false);
    ck_assert_floats_near(y, want, cols, 1e-6, 0.0);
    for (size_t j = 3; j < cols; j++)
        ck_assert(y[j] == 0.0f && !signbit(y[j]));
}
END_TEST

/* Logits far outside expf's range: the max shift must keep everything finite. */
START_TEST(test_softmax_stable)
{
    const size_t rows = 3, cols = 4, n = rows * cols;
    const float x[] = {1000.0f, 999.0f, 998.0f, -1000.0f,
                       -1000.0f, -1001.0f, -1002.0f, -1003.0f,
                       88.0f, 89.0f, 90.0f, 91.0f};
    const int32_t labels[] = {0, 3, 1};
    float y[12], want[12], loss = NAN, dl[12];
    kern_softmax(x, y, rows, cols);
    ref_softmax(x, want, rows, cols, false);
    ck_assert(tu_all_finite(y, n));
    ck_assert_floats_near(y, want, n, 1e-5, 1e-9);
    kern_log_softmax(x, y, rows, cols);
    ref_softmax(x, want, rows, cols, true);
    ck_assert(tu_all_finite(y, n));
    ck_assert_floats_near(y, want, n, 1e-5, 1e-5);
    ck_assert_int_eq(kern_cross_entropy(x, labels, rows, cols, &loss), 0);
    /* Row losses: lse - x[label] with lse of (0, -1, -2, ...) offsets. */
    double l0 = log(1 + exp(-1.0) + exp(-2.0) + exp(-2000.0));
    double l1 = log(1 + exp(-1.0) + exp(-2.0) + exp(-3.0)) + 3.0;
    double l2 = log(1 + exp(-1.0) + exp(-2.0) + exp(-3.0)) + 2.0;
    ck_assert_float_near_rel(loss, (l0 + l1 + l2) / 3.0, 1e-5, 0.0);
    ck_assert_int_eq(kern_cross_entropy_grad(x, labels, 1.0f, dl, rows, cols), 0);
    ck_assert(tu_all_finite(dl, n));
}
END_TEST

typedef struct RowsCtx {
    size_t rows, cols;
    bool log_out;
} RowsCtx;

static void softmax_fn(void *vc, const float *x, float *y)
{
    const RowsCtx *c = vc;
    if (c->log_out)
        kern_log_softmax(x, y, c->rows, c->cols);
    else
        kern_softmax(x, y, c->rows, c->cols);
}

START_TEST(test_softmax_grad_fd)
{
    RowsCtx ctx = {4, 6, _i == 1};
    size_t n = ctx.rows * ctx.cols;
    float *x = tu_alloc_uniform(n, -2.0f, 2.0f, 30), *y = tu_alloc(n), *dx = tu_alloc(n);
    float *dy = tu_alloc_uniform(n, -1.0f, 1.0f, 31);
    softmax_fn(&ctx, x, y);
    if (ctx.log_out)
        kern_log_softmax_grad(y, dy, dx, ctx.rows, ctx.cols);
    else
        kern_softmax_grad(y, dy, dx, ctx.rows, ctx.cols);
    ck_assert_grad_fd(softmax_fn, &ctx, x, n, n, dy, dx, FD_EPS, FD_RTOL, FD_ATOL);
    free(x);
    free(y);
    free(dx);
    free(dy);
}
END_TEST

static double ref_cross_entropy(const float *x, const int32_t *labels, size_t rows, size_t cols)
{
    float *lp = tu_alloc(rows * cols);
    ref_softmax(x, lp, rows, cols, true);
    double s = 0;
    for (size_t r = 0; r < rows; r++)
        s -= lp[r * cols + (size_t)labels[r]];
    free(lp);
    return s / (double)rows;
}

START_TEST(test_cross_entropy)
{
    const size_t rows = 9, cols = 5, n = rows * cols;
    float *x = tu_alloc_uniform(n, -3.0f, 3.0f, 40), *dl = tu_alloc(n), *p = tu_alloc(n), loss = NAN;
    int32_t labels[9];
    for (size_t r = 0; r < rows; r++)
        labels[r] = (int32_t)rng_below(rng_at(41, TU_STREAM, r), cols);
    ck_assert_int_eq(kern_cross_entropy(x, labels, rows, cols, &loss), 0);
    ck_assert_float_near_rel(loss, ref_cross_entropy(x, labels, rows, cols), 1e-6, 1e-7);
    /* The gradient in closed form: dloss * (softmax - onehot) / rows. */
    const float dloss = 0.7f;
    ck_assert_int_eq(kern_cross_entropy_grad(x, labels, dloss, dl, rows, cols), 0);
    ref_softmax(x, p, rows, cols, false);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++) {
            double want = dloss * ((double)p[r * cols + j] - (j == (size_t)labels[r])) / (double)rows;
            ck_assert_float_near_rel(dl[r * cols + j], want, 1e-5, 1e-8);
        }
    free(x);
    free(dl);
    free(p);
}
END_TEST

/* cross_entropy_grad written over its logits, as the compiled plan runs it (OPT_INPLACE
 * in ops.def): the same bits as into a buffer of its own, a row's logits all read
 * before any of it is written. */
START_TEST(test_cross_entropy_grad_inplace)
{
    const size_t rows = 7, cols = 10, n = rows * cols;
    float *x = tu_alloc_uniform(n, -4.0f, 4.0f, 42), *dl = tu_alloc(n), *over = tu_alloc(n);
    int32_t labels[7];
    for (size_t r = 0; r < rows; r++)
        labels[r] = (int32_t)rng_below(rng_at(43, TU_STREAM, r), cols);
    memcpy(over, x, n * sizeof *x);
    ck_assert_int_eq(kern_cross_entropy_grad(x, labels, 0.7f, dl, rows, cols), 0);
    ck_assert_int_eq(kern_cross_entropy_grad(over, labels, 0.7f, over, rows, cols), 0);
    ck_assert_msg(memcmp(dl, over, n * sizeof *dl) == 0, "in place differs from apart");
    free(x);
    free(dl);
    free(over);
}
END_TEST

START_TEST(test_cross_entropy_bad_labels)
{
    const size_t rows = 4, cols = 5;
    float *x = tu_alloc_uniform(rows * cols, -1.0f, 1.0f, 42), *dl = tu_alloc(rows * cols);
    const int32_t bad_high[] = {1, 4, 5, -1};   /* row 2 first bad */
    const int32_t bad_neg[] = {-1, 0, 0, 0};    /* row 0 */
    const int32_t bad_last[] = {0, 1, 2, 7};    /* row 3 */
    const int32_t good[] = {0, 1, 2, 4};
    float loss = 42.0f;
    ck_assert_int_eq(kern_cross_entropy(x, bad_high, rows, cols, &loss), -3);
    ck_assert_float_near_rel(loss, 42.0, 0.0, 0.0);   /* not written */
    ck_assert_int_eq(kern_cross_entropy(x, bad_neg, rows, cols, &loss), -1);
    ck_assert_int_eq(kern_cross_entropy(x, bad_last, rows, cols, &loss), -4);
    ck_assert_float_near_rel(loss, 42.0, 0.0, 0.0);
    ck_assert_int_eq(kern_cross_entropy_grad(x, bad_high, 1.0f, dl, rows, cols), -3);
    ck_assert_int_eq(kern_cross_entropy_grad(x, bad_neg, 1.0f, dl, rows, cols), -1);
    ck_assert_int_eq(kern_cross_entropy_grad(x, bad_last, 1.0f, dl, rows, cols), -4);
    ck_assert_int_eq(kern_cross_entropy(x, good, rows, cols, &loss), 0);
    ck_assert(isfinite(loss) && loss > 0.0f);
    free(x);
    free(dl);
}
END_TEST

typedef struct CeCtx {
    const int32_t *labels;
    size_t rows, cols;
} CeCtx;

static void ce_fn(void *vc, const float *x, float *y)
{
    const CeCtx *c = vc;
    ck_assert_int_eq(kern_cross_entropy(x, c->labels, c->rows, c->cols, y), 0);
}

START_TEST(test_cross_entropy_grad_fd)
{
    const size_t rows = 6, cols = 7, n = rows * cols;
    int32_t labels[6] = {0, 6, 3, 3, 1, 5};
    CeCtx ctx = {labels, rows, cols};
    float *x = tu_alloc_uniform(n, -2.0f, 2.0f, 43), *dl = tu_alloc(n);
    float dloss = -1.3f;
    ck_assert_int_eq(kern_cross_entropy_grad(x, labels, dloss, dl, rows, cols), 0);
    ck_assert_grad_fd(ce_fn, &ctx, x, n, 1, &dloss, dl, FD_EPS, FD_RTOL, FD_ATOL);
    free(x);
    free(dl);
}
END_TEST

START_TEST(test_count_correct)
{
    const float x[] = {
        0.1f, 0.9f, 0.0f,    /* argmax 1 */
        2.0f, -1.0f, 2.0f,   /* tie: first maximum, 0 */
        -5.0f, -4.0f, -3.0f, /* 2 */
        1.0f, 1.0f, 1.0f,    /* all equal: 0 */
        0.0f, 3.0f, 3.0f,    /* tie: 1 */
    };
    const int32_t right[] = {1, 0, 2, 0, 1};
    const int32_t wrong[] = {0, 2, 1, 2, 2};
    const int32_t mixed[] = {1, 2, 2, 1, 1};
    ck_assert_uint_eq(kern_count_correct(x, right, 5, 3), 5);
    ck_assert_uint_eq(kern_count_correct(x, wrong, 5, 3), 0);
    ck_assert_uint_eq(kern_count_correct(x, mixed, 5, 3), 3);
    ck_assert_uint_eq(kern_count_correct(x, mixed, 0, 3), 0);
}
END_TEST

typedef struct MseCtx {
    const float *other;
    size_t n;
    int wrt;
} MseCtx;

static void mse_fn(void *vc, const float *x, float *y)
{
    const MseCtx *c = vc;
    if (c->wrt == 0)
        kern_mse(x, c->other, c->n, y);
    else
        kern_mse(c->other, x, c->n, y);
}

START_TEST(test_mse)
{
    const size_t n = 37;
    float *a = tu_alloc_uniform(n, -2.0f, 2.0f, 50), *b = tu_alloc_uniform(n, -2.0f, 2.0f, 51);
    float *da = tu_alloc(n), *dbn = tu_alloc(n), loss = NAN, dloss = 0.6f;
    double want = 0;
    for (size_t i = 0; i < n; i++)
        want += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    kern_mse(a, b, n, &loss);
    ck_assert_float_near_rel(loss, want / (double)n, 1e-6, 0.0);
    kern_mse_grad(a, b, dloss, da, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_near_rel(da[i], 2.0 * dloss * ((double)a[i] - b[i]) / (double)n, 1e-5, 1e-9);
    MseCtx ca = {b, n, 0};
    ck_assert_grad_fd(mse_fn, &ca, a, n, 1, &dloss, da, FD_EPS, FD_RTOL, FD_ATOL);
    /* The gradient for b is the negation. */
    kern_scale(da, -1.0f, dbn, n);
    MseCtx cb = {a, n, 1};
    ck_assert_grad_fd(mse_fn, &cb, b, n, 1, &dloss, dbn, FD_EPS, FD_RTOL, FD_ATOL);
    free(a);
    free(b);
    free(da);
    free(dbn);
}
END_TEST

/* ================================================================================
 * Concat / slice
 * ================================================================================ */

enum { CC_N = 3, CC_OUTER = 4, CC_INNER = 5 };
static const int64_t cc_lens[CC_N] = {2, 3, 1};

typedef struct ConcatCtx {
    const float *xs[CC_N];
    int wrt;
} ConcatCtx;

static void concat_fn(void *vc, const float *x, float *y)
{
    const ConcatCtx *c = vc;
    const float *xs[CC_N];
    for (int i = 0; i < CC_N; i++)
        xs[i] = i == c->wrt ? x : c->xs[i];
    kern_concat(xs, cc_lens, CC_N, CC_OUTER, CC_INNER, y);
}

START_TEST(test_concat_slice)
{
    const int64_t total = 6;
    float *xs[CC_N];
    size_t ny = CC_OUTER * (size_t)total * CC_INNER;
    for (int i = 0; i < CC_N; i++)
        xs[i] = tu_alloc_uniform(CC_OUTER * (size_t)cc_lens[i] * CC_INNER, -1.0f, 1.0f, 60 + (uint64_t)i);
    float *y = tu_alloc(ny);
    kern_concat((const float *const *)xs, cc_lens, CC_N, CC_OUTER, CC_INNER, y);
    /* Reference: element (o, t, k) of y comes from the input that owns column t. */
    for (size_t o = 0; o < CC_OUTER; o++)
        for (int64_t t = 0; t < total; t++)
            for (size_t k = 0; k < CC_INNER; k++) {
                int i = 0;
                int64_t off = 0;
                while (t >= off + cc_lens[i])
                    off += cc_lens[i++];
                float want = xs[i][(o * (size_t)cc_lens[i] + (size_t)(t - off)) * CC_INNER + k];
                ck_assert_float_near_rel(y[(o * (size_t)total + (size_t)t) * CC_INNER + k], want, 0.0, 0.0);
            }
    /* Slicing each part back out gives the inputs. */
    int64_t off = 0;
    for (int i = 0; i < CC_N; i++) {
        size_t ni = CC_OUTER * (size_t)cc_lens[i] * CC_INNER;
        float *back = tu_alloc(ni);
        kern_slice(y, total, off, cc_lens[i], CC_OUTER, CC_INNER, back);
        ck_assert_floats_near(back, xs[i], ni, 0.0, 0.0);
        free(back);
        off += cc_lens[i];
    }
    /* Gradient of concat for each input is the slice of dy (finite differences). */
    float *dy = tu_alloc_uniform(ny, -1.0f, 1.0f, 65);
    ConcatCtx ctx = {{xs[0], xs[1], xs[2]}, 0};
    off = 0;
    for (int i = 0; i < CC_N; i++) {
        size_t ni = CC_OUTER * (size_t)cc_lens[i] * CC_INNER;
        float *dx = tu_alloc(ni);
        kern_slice(dy, total, off, cc_lens[i], CC_OUTER, CC_INNER, dx);
        ctx.wrt = i;
        ck_assert_grad_fd(concat_fn, &ctx, xs[i], ni, ny, dy, dx, FD_EPS, FD_RTOL, FD_ATOL);
        free(dx);
        off += cc_lens[i];
    }
    for (int i = 0; i < CC_N; i++)
        free(xs[i]);
    free(y);
    free(dy);
}
END_TEST

/* ================================================================================
 * GEMM and BLAS housekeeping
 * ================================================================================ */

static void ref_gemm(bool ta, bool tb, size_t M, size_t N, size_t K, float alpha, const float *A,
                     const float *B, float beta, const float *C0, float *C)
{
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double s = 0;
            for (size_t k = 0; k < K; k++)
                s += (double)(ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
            C[i * N + j] = (float)(alpha * s + (beta == 0.0f ? 0.0 : (double)beta * C0[i * N + j]));
        }
}

/* The kernels' variants tested, best first: those this CPU runs, up to GRAPHC_ISA's
 * when it names one (as on a CPU whose best that is: tests/isa_kernels.sh).  Every test
 * of a kernel that has variants runs on each (FOR_EACH_ISA, below, sets conv_isa); the
 * others run the best tested (TOP_ISA).  main() prints them, and those skipped. */
static KIsa isas[KISA_COUNT], conv_isa;
static int n_isas;
#define TOP_ISA (isas[0])

/* _i = threads: 1, then 2 and 3 (products large enough are split across the pool, by
 * rows when M >= N, else by columns, in blocks of 16 that need not divide evenly). */
START_TEST(test_gemm)
{
    static const size_t sizes[][3] = {
        {5, 7, 3}, {17, 9, 33}, {1, 1, 1}, {64, 33, 70}, {3, 130, 2}, {4, 5, 0}, {130, 150, 120},
        {301, 97, 150}, {70, 333, 91},
        {1, 37, 5}, {1, 1030, 2100},   /* one row: a matrix-vector product, split over columns at 2+ threads */
    };
    tu_threads(_i + 1);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
        float *A = tu_alloc_uniform(M * K, -1.0f, 1.0f, 70 + s), *B = tu_alloc_uniform(K * N, -1.0f, 1.0f, 80 + s);
        float *C0 = tu_alloc_uniform(M * N, -1.0f, 1.0f, 90 + s), *C = tu_alloc(M * N), *want = tu_alloc(M * N);
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            for (int bi = 0; bi < 3; bi++) {
                float alpha = bi == 2 ? -0.5f : 1.5f, beta = bi == 0 ? 0.0f : (bi == 1 ? 0.5f : 1.0f);
                if (beta == 0.0f)
                    kern_fill(C, NAN, M * N);   /* beta = 0 must overwrite, NaN included */
                else
                    kern_copy(C0, C, M * N);
                ref_gemm(ta, tb, M, N, K, alpha, A, B, beta, C0, want);
                kern_gemm(tu_pool, TOP_ISA, ta, tb, M, N, K, alpha, A, B, beta, C);
                ck_assert_floats_near_scaled(C, want, M * N, 1e-5);
                ck_assert(tu_all_finite(C, M * N));
            }
        }
        free(A);
        free(B);
        free(C0);
        free(C);
        free(want);
    }
    tu_threads(1);
}
END_TEST

#define FOR_EACH_ISA for (int isa_i_ = 0; isa_i_ < n_isas && (conv_isa = isas[isa_i_], true); isa_i_++)
/* Inside FOR_EACH_ISA: the variants past the first add nothing where no direct kernel
 * runs (im2col + sgemm is the same code in all), and would only make the sanitizer
 * build's run longer. */
#define ISA_ADDS_NOTHING(direct) (isa_i_ > 0 && !(direct))

/* ck_assert_floats_near_scaled, naming the variant that ran. */
#define ck_assert_isa_near(got, want, n, rtol)                                                                \
    do {                                                                                                      \
        const float *g_ = (got), *w_ = (want);                                                                \
        size_t n_ = (n);                                                                                      \
        double s_ = tu_max_abs(w_, n_), a_ = (rtol) * (s_ > 1e-30 ? s_ : 1e-30);                              \
        ptrdiff_t i_ = tu_first_mismatch(g_, w_, n_, 0.0, a_);                                                \
        ck_assert_msg(i_ < 0, "%s kernels: %s[%td] = %.9g, expected %.9g (atol %g)", kern_isa_name(conv_isa), \
                      #got, i_, i_ < 0 ? 0.0 : (double)g_[i_], i_ < 0 ? 0.0 : (double)w_[i_], a_);          \
    } while (0)

/* ================================================================================
 * Vector math (util/vmath.h, kernels/vmath.h): each variant against double precision,
 * against the scalar instance (constant folding's) bit for bit, at the edges of the
 * range
 * ================================================================================ */

/* Error of f in units in the last place of the correctly rounded ref (denormals: 2^-149). */
static double ulp_err(float f, double ref)
{
    double a = fabs(ref);
    int e;
    frexp(a, &e);
    double ulp = a < 0x1p-126 ? 0x1p-149 : ldexp(1.0, e - 24);
    return fabs((double)f - ref) / ulp;
}

static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b)); }

/* The inputs of the sweep: every 4099th float bit pattern (about a million, every
 * exponent, both signs, denormals, infinities and NaNs among them), then each float of
 * [-104, 0] every 1031 bit patterns (softmax's and cross entropy's arguments
 * after the maximum is taken off), and the edges by name. */
static size_t vmath_sweep(float *x, size_t cap)
{
    size_t n = 0;
    for (uint64_t b = 0; b <= 0xffffffffull && n < cap; b += 4099) {
        uint32_t u = (uint32_t)b;
        memcpy(&x[n++], &u, sizeof u);
    }
    uint32_t lo, hi;
    float m104 = -104.0f;
    memcpy(&hi, &m104, sizeof hi);
    lo = 0x80000000u;
    for (uint32_t u = lo; u <= hi && n < cap; u += 1031)
        memcpy(&x[n++], &u, sizeof u);
    const float edges[] = { 0.0f, -0.0f, 0x1p-149f, -0x1p-149f, 0x1p-127f, FLT_MIN, -FLT_MIN, INFINITY, -INFINITY, NAN,
                            -NAN, FLT_MAX, -FLT_MAX, 88.72283f, 88.72284f, 89.0f, -87.33655f, -87.33656f, -103.97f,
                            -103.98f, -104.0f, -1e9f, 0x1p-12f, -0x1p-12f, 0x1.fffffep-13f, 0.625f, -0.625f,
                            0x1.fffffep-2f, 9.0f, -9.0f, 9.1f, 1e30f, -1e30f };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0] && n < cap; i++)
        x[n++] = edges[i];
    return n;
}

/* exp and tanh within their stated bounds (docs/kernels.md: 0.98 and 1.2 ulp measured
 * over every float) and the bits of the scalar instance, in every variant; the edges:
 * exp overflows to +inf above 88.7228 and rounds to +0 below -103.97, gives +0 at -inf
 * and a NaN at a NaN; tanh keeps +-0 and the denormals, is exactly +-1 above 9.1 and at
 * +-inf. */
START_TEST(test_vmath_accuracy)
{
    enum { CAP = 1 << 22 };
    const EwUnary ops[] = { EW_EXP, EW_TANH };
    const double bound[] = { 1.0, 1.5 };
    float *x = tu_alloc(CAP), *y = tu_alloc(CAP);
    size_t n = vmath_sweep(x, CAP);
    FOR_EACH_ISA {
        const KernVariant *kv = kern_variant(conv_isa);
        for (int k = 0; k < 2; k++) {
            EwUnary op = ops[k];
            size_t done = kv->unary(op, x, y, n);
            ck_assert_uint_ge(done, n - n % (size_t)kv->lanes);
            for (size_t i = done; i < n; i++)
                y[i] = ew_unary(op, x[i], 0.0f);
            /* one assertion per check after the loop: Check's cost per assertion is a write */
            double worst = 0;
            size_t at = 0, differ = n, not_nan = n, not_inf = n;
            for (size_t i = 0; i < n; i++) {
                float s = ew_unary(op, x[i], 0.0f);
                if (!same_bits(y[i], s)) differ = i;
                double r = op == EW_EXP ? exp((double)x[i]) : tanh((double)x[i]);
                if (isnan(r)) {
                    if (!isnan(y[i])) not_nan = i;
                } else if (r > FLT_MAX && (float)r == INFINITY) {
                    if (y[i] != INFINITY) not_inf = i;
                } else {
                    double e = ulp_err(y[i], r);
                    if (e > worst) worst = e, at = i;
                }
            }
            ck_assert_msg(differ == n, "%s %s(%a) = %a, the scalar instance %a", kern_isa_name(conv_isa),
                          ew_unary_name(op), x[differ % n], y[differ % n], ew_unary(op, x[differ % n], 0.0f));
            ck_assert_msg(not_nan == n, "%s(%a) = %a, not a NaN", ew_unary_name(op), x[not_nan % n], y[not_nan % n]);
            ck_assert_msg(not_inf == n, "exp(%a) = %a, not +inf", x[not_inf % n], y[not_inf % n]);
            ck_assert_msg(worst <= bound[k], "%s: %s(%a) is %.3f ulp off", kern_isa_name(conv_isa), ew_unary_name(op),
                          x[at], worst);
        }
    }
    /* the edges by value (the scalar instance: the variants gave its bits above) */
    ck_assert(ew_exp(INFINITY, 0) == INFINITY && ew_exp(88.72284f, 0) == INFINITY && ew_exp(FLT_MAX, 0) == INFINITY);
    ck_assert(ew_exp(88.72283f, 0) < INFINITY && ew_exp(88.72283f, 0) > 3.4e38f);
    float z = ew_exp(-INFINITY, 0), z2 = ew_exp(-1e9f, 0), z3 = ew_exp(-103.98f, 0);
    ck_assert(z == 0 && !signbit(z) && z2 == 0 && !signbit(z2) && z3 == 0);
    ck_assert(ew_exp(-103.97f, 0) == 0x1p-149f && ew_exp(-100.0f, 0) > 0 && ew_exp(-100.0f, 0) < FLT_MIN);
    ck_assert(isnan(ew_exp(NAN, 0)) && isnan(ew_tanh(NAN, 0)) && ew_exp(0.0f, 0) == 1.0f && ew_exp(-0.0f, 0) == 1.0f);
    ck_assert(ew_tanh(9.1f, 0) == 1.0f && ew_tanh(-9.1f, 0) == -1.0f && ew_tanh(INFINITY, 0) == 1.0f &&
              ew_tanh(-INFINITY, 0) == -1.0f && ew_tanh(1e30f, 0) == 1.0f);
    float mz = ew_tanh(-0.0f, 0), d = ew_tanh(-0x1p-140f, 0);
    ck_assert(mz == 0 && signbit(mz) && d == -0x1p-140f);
    free(x);
    free(y);
}
END_TEST

/* The transcendental elementwise functions and gradients of each variant: the bits of
 * the scalar instance on every element, the tail (n not a multiple of the vector) done
 * by the caller, values across the range and at its edges. */
START_TEST(test_vmath_functions)
{
    const size_t n = 1031;
    float *x = tu_alloc_uniform(n, -30.0f, 30.0f, 900), *dy = tu_alloc_uniform(n, -2.0f, 2.0f, 901);
    float *y = tu_alloc(n);
    const float edges[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e30f, -1e30f, 0x1p-149f, 90.0f, -110.0f };
    memcpy(x, edges, sizeof edges);
    FOR_EACH_ISA {
        const KernVariant *kv = kern_variant(conv_isa);
        for (int op = 0; op < EW_UNARY_COUNT; op++) {
            size_t done = kv->unary((EwUnary)op, x, y, n), bad = n;
            for (size_t i = 0; i < done; i++)
                if (!same_bits(y[i], ew_unary((EwUnary)op, x[i], 0.0f))) bad = i;
            ck_assert_msg(bad == n, "%s %s(%a): %a", kern_isa_name(conv_isa), ew_unary_name((EwUnary)op), x[bad % n],
                          y[bad % n]);
            done = kv->unary_grad((EwUnary)op, x, dy, y, n);
            for (size_t i = 0; i < done; i++)
                if (!same_bits(y[i], ew_unary_grad((EwUnary)op, x[i], dy[i], 0.0f))) bad = i;
            ck_assert_msg(bad == n, "%s %s's gradient at %a: %a", kern_isa_name(conv_isa), ew_unary_name((EwUnary)op),
                          x[bad % n], y[bad % n]);
        }
        ck_assert_uint_ge(kv->unary(EW_GELU_TANH, x, y, n), n - n % (size_t)kv->lanes);
        ck_assert_uint_ge(kv->unary_grad(EW_GELU_TANH, x, dy, y, n), n - n % (size_t)kv->lanes);
    }
    free(x);
    free(dy);
    free(y);
}
END_TEST

/* A softmax row's maximum and sum of exponentials, every length from 1 to 70 and a
 * long row, and whole softmax rows, with -inf (a masked score), a NaN past the first element (passed over by
 * the maximum, as the scalar loop did): the same bits in every variant, the sum within
 * 1e-6 of double precision, each stored term the scalar instance's. */
START_TEST(test_vmath_rows)
{
    const size_t cap = 300;
    float *x = tu_alloc_uniform(cap, -20.0f, 20.0f, 910), *e = tu_alloc(cap);
    x[5] = -INFINITY;
    x[40] = -1e9f;
    float ref_sum[300];
    for (size_t n = 1; n <= cap; n = n < 70 ? n + 1 : cap) {
        FOR_EACH_ISA {
            const KernVariant *kv = kern_variant(conv_isa);
            float m = kv->row_max(x, n), mw = x[0];
            for (size_t j = 1; j < n; j++)
                mw = x[j] > mw ? x[j] : mw;
            ck_assert_msg(same_bits(m, mw), "%s, n %zu: max %a, not %a", kern_isa_name(conv_isa), n, m, mw);
            float s = kv->exp_sum(x, m, e, n), s2 = kv->exp_sum(x, m, NULL, n);
            double want = 0;
            bool terms = true;
            for (size_t j = 0; j < n; j++) {
                want += exp((double)x[j] - m);
                terms &= same_bits(e[j], ew_exp(x[j] - m, 0));
            }
            ck_assert(terms);
            ck_assert(same_bits(s, s2));
            ck_assert_float_near_rel(s, want, 1e-6, 0.0);
            if (isa_i_ == 0) ref_sum[n - 1] = s;
            ck_assert_msg(same_bits(s, ref_sum[n - 1]), "%s, n %zu: sum %a, %s's %a", kern_isa_name(conv_isa), n, s,
                          kern_isa_name(isas[0]), ref_sum[n - 1]);
        }
        if (n == cap) break;
    }
    /* the rows of kern_softmax: 4 rows of 37, the same bits in every variant, each row the
     * terms above scaled by the reciprocal of their sum */
    float *y = tu_alloc(4 * 37), *first = tu_alloc(4 * 37);
    FOR_EACH_ISA {
        const KernVariant *kv = kern_variant(conv_isa);
        kv->softmax(x, y, 4, 37);
        if (isa_i_ == 0) memcpy(first, y, 4 * 37 * sizeof *y);
        ck_assert_msg(memcmp(y, first, 4 * 37 * sizeof *y) == 0, "%s: softmax not %s's bits", kern_isa_name(conv_isa),
                      kern_isa_name(isas[0]));
        for (int r = 0; r < 4; r++) {
            const float *xr = x + r * 37;
            float m = kv->row_max(xr, 37), inv = 1.0f / kv->exp_sum(xr, m, e, 37);
            bool ok = true;
            for (int j = 0; j < 37; j++) ok &= same_bits(y[r * 37 + j], e[j] * inv);
            ck_assert_msg(ok, "%s: softmax row %d", kern_isa_name(conv_isa), r);
        }
    }
    free(y);
    free(first);
    x[3] = NAN;   /* after x[0]: passed over */
    FOR_EACH_ISA ck_assert(kern_variant(conv_isa)->row_max(x, 64) == kern_variant(isas[0])->row_max(x, 64));
    x[0] = NAN;   /* first: the answer */
    FOR_EACH_ISA ck_assert(isnan(kern_variant(conv_isa)->row_max(x, 64)));
    /* a maximum of zero held as +0 and -0: the scalar loop keeps the first in lane order
     * (element j in lane j mod 16), -0 here, then +0 with the two swapped */
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < 48; j++) x[j] = -1.0f - (float)j;
        x[2] = k ? 0.0f : -0.0f;
        x[21] = k ? -0.0f : 0.0f;
        FOR_EACH_ISA ck_assert_msg(same_bits(kern_variant(conv_isa)->row_max(x, 48), x[2]), "%s: max of +-0 %d",
                                   kern_isa_name(conv_isa), k);
    }
    free(x);
    free(e);
}
END_TEST

/* The causal mask's softmax rows (softmax_keep): in every variant the bits of writing
 * the mask's value into each row, then the variant's softmax rows; rows ld apart with
 * the entries past n left alone; in place; whole groups of 16 (the rows in registers,
 * several at a time) and not (a row at a time); a row masked from its first entry. */
START_TEST(test_vmath_softmax_keep)
{
    const size_t ns[] = { 16, 32, 64, 80, 5, 37 }, keeps[] = { 0, 1, 3, 17, 70 };
    const float values[] = { -1e9f, 0.0f, -INFINITY, 2.5f };
    const size_t rows = 11, ld = 83;
    float *x = tu_alloc_uniform(rows * ld, -30.0f, 30.0f, 930), *want = tu_alloc(rows * ld), *y = tu_alloc(rows * ld);
    FOR_EACH_ISA {
        const KernVariant *kv = kern_variant(conv_isa);
        for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
            for (size_t b = 0; b < sizeof keeps / sizeof *keeps; b++)
                for (size_t c = 0; c < sizeof values / sizeof *values; c++) {
                    size_t n = ns[a], keep = keeps[b];
                    for (size_t r = 0; r < rows; r++) {
                        memcpy(want + r * ld, x + r * ld, ld * sizeof *want);
                        for (size_t j = keep + r; j < n; j++) want[r * ld + j] = values[c];
                        kv->softmax(want + r * ld, want + r * ld, 1, n);
                    }
                    for (int inplace = 0; inplace < 2; inplace++) {
                        if (inplace)
                            memcpy(y, x, rows * ld * sizeof *y);
                        else
                            for (size_t e = 0; e < rows * ld; e++) y[e] = x[e];
                        kv->softmax_keep(inplace ? y : x, y, rows, n, ld, keep, values[c]);
                        ck_assert_msg(memcmp(y, want, rows * ld * sizeof *y) == 0, "%s: n %zu keep %zu value %g%s",
                                      kern_isa_name(conv_isa), n, keep, (double)values[c], inplace ? ", in place" : "");
                    }
                }
    }
    free(x);
    free(want);
    free(y);
}
END_TEST

/* Layer norm's rows, its gradient's and softmax's gradient's: the same bits in every
 * variant at every row length (whole groups of 16 lanes and a partial one), and within
 * float rounding of the formulas in double. */
START_TEST(test_vmath_norm_rows)
{
    const size_t cap = 70, rows = 3;
    float *x = tu_alloc_uniform(rows * cap, -3.0f, 5.0f, 930), *g = tu_alloc_uniform(cap, 0.5f, 1.5f, 931);
    float *b = tu_alloc_uniform(cap, -1.0f, 1.0f, 932), *dy = tu_alloc_uniform(rows * cap, -1.0f, 1.0f, 933);
    float *out[3], *first[3];
    for (int k = 0; k < 3; k++) {
        out[k] = tu_alloc(rows * cap);
        first[k] = tu_alloc(rows * cap);
    }
    for (size_t n = 1; n <= cap; n++) {
        FOR_EACH_ISA {
            const KernVariant *kv = kern_variant(conv_isa);
            kv->layer_norm(x, g, b, rows, n, 1e-5f, out[0]);
            kv->layer_norm_grad(x, g, dy, NULL, rows, n, 1e-5f, out[1]);
            kv->softmax_grad(x, dy, out[2], rows, n);
            for (int k = 0; k < 3; k++) {
                if (isa_i_ == 0) memcpy(first[k], out[k], rows * n * sizeof(float));
                ck_assert_msg(memcmp(out[k], first[k], rows * n * sizeof(float)) == 0, "%s, n %zu: row kind %d not %s's bits",
                              kern_isa_name(conv_isa), n, k, kern_isa_name(isas[0]));
            }
        }
        for (size_t r = 0; r < rows; r++) {
            const float *xr = x + r * n, *dyr = dy + r * n;
            double m = 0, v = 0, sg = 0, sgx = 0, d = 0;
            for (size_t j = 0; j < n; j++) m += xr[j];
            m /= (double)n;
            for (size_t j = 0; j < n; j++) v += (xr[j] - m) * (xr[j] - m);
            double rs = 1.0 / sqrt(v / (double)n + 1e-5);
            for (size_t j = 0; j < n; j++) {
                sg += (double)dyr[j] * g[j];
                sgx += (double)dyr[j] * g[j] * (xr[j] - m) * rs;
                d += (double)xr[j] * dyr[j];
            }
            for (size_t j = 0; j < n; j++) {
                double xh = (xr[j] - m) * rs, gj = (double)dyr[j] * g[j];
                ck_assert_float_near_rel(out[0][r * n + j], xh * g[j] + b[j], 1e-5, 1e-5);
                ck_assert_float_near_rel(out[1][r * n + j], rs * (gj - sg / (double)n - xh * sgx / (double)n), 1e-5, 1e-4);
                ck_assert_float_near_rel(out[2][r * n + j], xr[j] * (dyr[j] - d), 1e-5, 1e-5);
            }
        }
    }
    for (int k = 0; k < 3; k++) {
        free(out[k]);
        free(first[k]);
    }
    free(x);
    free(g);
    free(b);
    free(dy);
}
END_TEST

/* Layer norm's gamma gradient, column sums in double: every variant gives the scalar
 * loop's bits (each column summed over the rows in order, float to double and the
 * products exact) at widths around the vector lengths, added into acc. */
START_TEST(test_vmath_colsums)
{
    const size_t rows = 9, cap = 70;
    float *x = tu_alloc_uniform(rows * cap, -3.0f, 5.0f, 940), *dy = tu_alloc_uniform(rows * cap, -1.0f, 1.0f, 941);
    double got[70], want[70];
    /* magnitudes 2^-40 .. 2^40 apart: sums in double that round, so the order shows */
    for (size_t i = 0; i < rows * cap; i++) {
        x[i] = ldexpf(x[i], (int)(i * 37 % 81) - 40);
        dy[i] = ldexpf(dy[i], (int)(i * 53 % 81) - 40);
    }
    for (size_t n = 1; n <= cap; n++) {
        for (size_t j = 0; j < n; j++) want[j] = 0.5 * (double)j;
        for (size_t r = 0; r < rows; r++) {
            float m, rs;
            kern_variant(isas[0])->row_stats(x + r * n, n, 1e-3f, &m, &rs);
            for (size_t j = 0; j < n; j++) want[j] += (double)dy[r * n + j] * ((x[r * n + j] - m) * rs);
        }
        FOR_EACH_ISA {
            for (size_t j = 0; j < n; j++) got[j] = 0.5 * (double)j;
            kern_variant(conv_isa)->ln_scale_d(x, dy, rows, n, 1e-3f, got);
            ck_assert_msg(memcmp(got, want, n * sizeof *got) == 0, "%s, n %zu: gamma's gradient not the scalar loop's bits",
                          kern_isa_name(conv_isa), n);
        }
    }
    free(x);
    free(dy);
}
END_TEST

/* sum_to's column sums in double (kern_colsum_d, kern_colsum): every variant's
 * colsum_d gives the plain loop's bits, each column one chain over the rows in order
 * (values 2^-40 .. 2^40 apart, so sums that round and any other order shows), at
 * widths around the vector lengths and their multiples, rows ld apart, nothing written
 * past the width. */
START_TEST(test_vmath_colsum_d)
{
    const size_t rows = 11, cap = 150, ld = 151;
    float *x = tu_alloc_uniform(rows * ld, -3.0f, 5.0f, 942);
    double got[151], want[150];
    for (size_t i = 0; i < rows * ld; i++)
        x[i] = ldexpf(x[i], (int)(i * 37 % 81) - 40);
    for (size_t n = 1; n <= cap; n++) {
        for (size_t j = 0; j < n; j++) {
            want[j] = 0;
            for (size_t r = 0; r < rows; r++) want[j] += x[r * ld + j];
        }
        FOR_EACH_ISA {
            got[n] = 42.0;
            kern_variant(conv_isa)->colsum_d(x, rows, n, ld, got);
            ck_assert_msg(memcmp(got, want, n * sizeof *got) == 0, "%s, n %zu: column sums not the plain loop's bits",
                          kern_isa_name(conv_isa), n);
            ck_assert_double_eq(got[n], 42.0);
        }
    }
    free(x);
}
END_TEST

/* e^x where 2^n is made (util/vmath.h): every variant's bits are the scalar's through
 * the denormal results (x from -104 to -87.3), the last normal ones and the overflow
 * (88.7 to 89), densely, where test_vmath_functions' uniform draws rarely fall. */
START_TEST(test_vmath_exp_range)
{
    const size_t n = 4096;
    float *x = tu_alloc(n), *y = tu_alloc(n);
    for (size_t i = 0; i < n; i++)
        x[i] = i < n / 2 ? -104.5f + 18.0f * (float)i / (float)(n / 2) : 80.0f + 9.5f * (float)(i - n / 2) / (float)(n / 2);
    FOR_EACH_ISA {
        size_t done = kern_variant(conv_isa)->unary(EW_EXP, x, y, n), bad = n;
        for (size_t i = 0; i < done; i++)
            if (!same_bits(y[i], ew_unary(EW_EXP, x[i], 0.0f))) bad = i;
        ck_assert_msg(bad == n, "%s exp(%a): %a, the scalar's %a", kern_isa_name(conv_isa), x[bad % n], y[bad % n],
                      ew_unary(EW_EXP, x[bad % n], 0.0f));
    }
    free(x);
    free(y);
}
END_TEST

/* graphc's own GEMM's contract (kernels/gemm_micro.h): each element of C the chain
 * acc = fma(a_k, b_k, acc) over k in order from +0, then alpha acc (beta 0) or
 * fma(beta, c, alpha acc).  The scalar chain, for the bits. */
static void chain_gemm(bool ta, bool tb, size_t M, size_t N, size_t K, float alpha, const float *A, const float *B,
                       float beta, const float *C0, float *C)
{
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            float acc = 0.0f;
            for (size_t k = 0; k < K; k++)
                acc = fmaf(ta ? A[k * M + i] : A[i * K + k], tb ? B[j * K + k] : B[k * N + j], acc);
            C[i * N + j] = beta == 0.0f ? alpha * acc : fmaf(beta, C0[i * N + j], alpha * acc);
        }
}

/* kern_gemm in conv_isa over C0 (over NaN where beta is 0: it must overwrite, NaN
 * included): within tol of the double reference want, and in the x86 variants, where
 * `exact`, the bits of `bits` (`chain` names how those were made). */
static void gemm_check(bool ta, bool tb, size_t M, size_t N, size_t K, float alpha, const float *A, const float *B,
                       float beta, const float *C0, float *C, const float *want, double tol, const float *bits,
                       bool exact, const char *chain)
{
    if (beta == 0.0f)
        kern_fill(C, NAN, M * N);
    else
        kern_copy(C0, C, M * N);
    kern_gemm(tu_pool, conv_isa, ta, tb, M, N, K, alpha, A, B, beta, C);
    ck_assert_isa_near(C, want, M * N, tol);
    if (conv_isa == KISA_PORTABLE || !exact)
        return;
    ptrdiff_t i = tu_first_mismatch(C, bits, M * N, 0.0, 0.0);
    ck_assert_msg(i < 0 && memcmp(C, bits, M * N * sizeof *C) == 0,
                  "%s, %zux%zux%zu ta %d tb %d beta %g, %d threads: C[%td] = %.9g, %s %.9g", kern_isa_name(conv_isa), M,
                  N, K, ta, tb, (double)beta, tu_nthreads(), i, i < 0 ? 0.0 : (double)C[i], chain,
                  i < 0 ? 0.0 : (double)bits[i]);
}

/* kern_gemm in every variant this CPU runs, every transpose, alpha and beta (beta 0
 * over NaN), sizes with an edge in every dimension (register tiles of 14 x 32 and 6 x
 * 16, blocks of 256 values of k, 12 tiles of rows, 1024 columns), one row (the GEMV):
 * within rounding of a double-precision reference; in the x86 variants the bits of
 * the scalar chain above, so the same in both.  The last four sizes are cut over the pool:
 * the same bits at 1, 2 and 3 threads (_i + 1). */
START_TEST(test_gemm_variants)
{
    static const size_t sizes[][3] = {
        {1, 1, 1}, {2, 3, 1}, {3, 2, 13}, {13, 17, 31}, {17, 13, 33}, {31, 33, 17}, {33, 31, 100}, {100, 1, 3},
        {1, 100, 33}, {1, 37, 2}, {14, 32, 256}, {15, 33, 257}, {29, 65, 300}, {4, 5, 0}, {6, 16, 8},
        {181, 1030, 70}, {20, 1100, 530},   /* 13 tiles of rows; two blocks of columns; three of k */
        /* the transformer's products, an edge in every dimension: A read in place
         * (gemm_a_direct: at most 64 columns) */
        {200, 63, 65}, {40, 50, 530},
    };
    const size_t nsizes = sizeof sizes / sizeof sizes[0];
    tu_threads(_i + 1);
    for (size_t s = _i == 0 ? 0 : nsizes - 4; s < nsizes; s++) {
        size_t M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
        float *A = tu_alloc_uniform(M * K + 1, -1.0f, 1.0f, 170 + s), *B = tu_alloc_uniform(K * N + 1, -1.0f, 1.0f, 180 + s);
        float *C0 = tu_alloc_uniform(M * N, -1.0f, 1.0f, 190 + s), *C = tu_alloc(M * N), *want = tu_alloc(M * N);
        float *bits = tu_alloc(M * N);
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            for (int bi = 0; bi < 3; bi++) {
                /* beta 0.3: beta c is rounded (0.5 would hide how beta is applied) */
                float alpha = bi == 2 ? -0.7f : 1.5f, beta = bi == 0 ? 0.0f : (bi == 1 ? 0.3f : 1.0f);
                ref_gemm(ta, tb, M, N, K, alpha, A, B, beta, C0, want);
                chain_gemm(ta, tb, M, N, K, alpha, A, B, beta, C0, bits);
                /* one row times B stored transposed is sgemv's (kern.h) */
                FOR_EACH_ISA gemm_check(ta, tb, M, N, K, alpha, A, B, beta, C0, C, want, 1e-5, bits, !(M == 1 && tb),
                                        "the chain");
            }
        }
        free(A);
        free(B);
        free(C0);
        free(C);
        free(want);
        free(bits);
    }
    tu_threads(1);
}
END_TEST

/* One row large enough to be cut over the pool (a dense layer at batch 1, B of 2 MB
 * and more): B's rows in one block per thread, the partial rows summed in block order.
 * Within rounding of the double reference at 1, 2 and 3 threads; the x86 variants give
 * the same bits as one another (each block one chain of FMAs); at 2 threads, the bits
 * of the two blocks' chains summed (so a block left out, or summed twice, fails). */
START_TEST(test_gemv_rows_split)
{
    const size_t N = 1030, K = 517;   /* 2.1 MB of B; N not a whole number of vectors */
    float *A = tu_alloc_uniform(K, -1.0f, 1.0f, 211), *B = tu_alloc_uniform(K * N, -1.0f, 1.0f, 212);
    float *C0 = tu_alloc_uniform(N, -1.0f, 1.0f, 213), *C = tu_alloc(N), *want = tu_alloc(N), *first = tu_alloc(N);
    float *lo = tu_alloc(N), *hi = tu_alloc(N);
    tu_threads(_i + 1);
    for (int bi = 0; bi < 2; bi++) {
        float alpha = 1.5f, beta = bi ? 0.3f : 0.0f;
        ref_gemm(false, false, 1, N, K, alpha, A, B, beta, C0, want);
        bool have = false;
        FOR_EACH_ISA {
            if (bi)
                kern_copy(C0, C, N);
            else
                kern_fill(C, NAN, N);
            kern_gemm(tu_pool, conv_isa, false, false, 1, N, K, alpha, A, B, beta, C);
            ck_assert_isa_near(C, want, N, 1e-5);
            if (conv_isa == KISA_PORTABLE)
                continue;
            if (have)
                ck_assert_msg(memcmp(C, first, N * sizeof *C) == 0, "%s: not the bits of the other x86 variant",
                              kern_isa_name(conv_isa));
            kern_copy(C, first, N);
            have = true;
            if (_i != 1)
                continue;
            /* two threads: the chain over each half of k, summed */
            size_t h = K / 2;
            chain_gemm(false, false, 1, N, h, 1.0f, A, B, 0.0f, NULL, lo);
            chain_gemm(false, false, 1, N, K - h, 1.0f, A + h, B + h * N, 0.0f, NULL, hi);
            for (size_t n = 0; n < N; n++) {
                float sum = lo[n] + hi[n], w = beta == 0.0f ? alpha * sum : fmaf(beta, C0[n], alpha * sum);
                ck_assert_msg(memcmp(&w, &C[n], sizeof w) == 0, "%s: C[%zu] = %.9g, the two chains summed %.9g",
                              kern_isa_name(conv_isa), n, (double)C[n], (double)w);
            }
        }
    }
    tu_threads(1);
    free(A);
    free(B);
    free(C0);
    free(C);
    free(want);
    free(first);
    free(lo);
    free(hi);
}
END_TEST

/* Few rows by a large B (a dense layer at batch 16: 16 x 3136 by 3136 x 1024), which
 * graphc's GEMM streams row by row (gemm_micro.h's gemm_rows): each element of C still
 * the one chain over k, so the bits of chain_gemm in the x86 variants, within rounding
 * of the double reference in all; A as stored and transposed, beta 0 over NaN, 0.3 and
 * 1, M not a whole number of row tiles, N not a whole number of vectors, K not of
 * blocks; the bias and relu of kern_gemm_bias_act; a block of a larger C through
 * kern_gemm_block (leading dimension past N: the columns between left alone); at 1, 2
 * and 3 threads (_i + 1: the columns cut over the pool, each part's B still 1 MB, so
 * still streamed). */
START_TEST(test_gemm_few_rows)
{
    static const size_t sizes[][3] = { {16, 1030, 800}, {7, 300, 2800}, {13, 4100, 200}, {2, 600, 1500} };
    const EwAct relu = { EW_RELU, 0.0f };
    tu_threads(_i + 1);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t M = sizes[s][0], N = sizes[s][1], K = sizes[s][2], ldc = N + 5;
        float *A = tu_alloc_uniform(M * K, -1.0f, 1.0f, 290 + s), *B = tu_alloc_uniform(K * N, -1.0f, 1.0f, 300 + s);
        float *C0 = tu_alloc_uniform(M * N, -1.0f, 1.0f, 310 + s), *bias = tu_alloc_uniform(N, -1.0f, 1.0f, 320 + s);
        float *C = tu_alloc(M * N), *want = tu_alloc(M * N), *bits = tu_alloc(M * N), *E = tu_alloc(M * ldc);
        for (int ta = 0; ta < 2; ta++)
            for (int bi = 0; bi < 3; bi++) {
                float alpha = bi == 2 ? -0.7f : 1.5f, beta = bi == 0 ? 0.0f : (bi == 1 ? 0.3f : 1.0f);
                ref_gemm(ta, false, M, N, K, alpha, A, B, beta, C0, want);
                chain_gemm(ta, false, M, N, K, alpha, A, B, beta, C0, bits);
                FOR_EACH_ISA {
                    if (beta == 0.0f)
                        kern_fill(C, NAN, M * N);
                    else
                        kern_copy(C0, C, M * N);
                    kern_gemm(tu_pool, conv_isa, ta, false, M, N, K, alpha, A, B, beta, C);
                    ck_assert_isa_near(C, want, M * N, 1e-5);
                    if (conv_isa == KISA_PORTABLE)
                        continue;
                    ptrdiff_t i = tu_first_mismatch(C, bits, M * N, 0.0, 0.0);
                    ck_assert_msg(i < 0 && memcmp(C, bits, M * N * sizeof *C) == 0,
                                  "%s, %zux%zux%zu ta %d beta %g, %d threads: C[%td] = %.9g, the chain %.9g",
                                  kern_isa_name(conv_isa), M, N, K, ta, (double)beta, _i + 1, i,
                                  i < 0 ? 0.0 : (double)C[i], i < 0 ? 0.0 : (double)bits[i]);
                    /* the same product into a block of E, ldc past N: C's bits, the
                     * columns between untouched */
                    kern_fill(E, 7.0f, M * ldc);
                    for (size_t m = 0; m < M && beta != 0.0f; m++)
                        memcpy(E + m * ldc, C0 + m * N, N * sizeof *E);
                    kern_gemm_block(conv_isa, ta, false, M, N, K, alpha, A, ta ? M : K, B, N, beta, E, ldc);
                    for (size_t m = 0; m < M; m++) {
                        ck_assert_msg(memcmp(E + m * ldc, bits + m * N, N * sizeof *E) == 0,
                                      "%s, %zux%zux%zu ta %d beta %g: kern_gemm_block's row %zu differs",
                                      kern_isa_name(conv_isa), M, N, K, ta, (double)beta, m);
                        for (size_t j = N; j < ldc; j++)
                            ck_assert_msg(E[m * ldc + j] == 7.0f, "kern_gemm_block wrote E[%zu][%zu]", m, j);
                    }
                }
            }
        /* bias and relu: the bits of the product, then kern_bias_act */
        for (int ta = 0; ta < 2; ta++) {
            chain_gemm(ta, false, M, N, K, 1.0f, A, B, 0.0f, NULL, bits);
            kern_bias_act(bits, M, N, bias, relu);
            FOR_EACH_ISA {
                if (conv_isa == KISA_PORTABLE)
                    continue;
                kern_fill(C, NAN, M * N);
                kern_gemm_bias_act(tu_pool, conv_isa, ta, false, M, N, K, A, B, bias, relu, C);
                ck_assert_msg(memcmp(C, bits, M * N * sizeof *C) == 0, "%s, %zux%zux%zu ta %d: bias and relu differ",
                              kern_isa_name(conv_isa), M, N, K, ta);
            }
        }
        free(A);
        free(B);
        free(C0);
        free(bias);
        free(C);
        free(want);
        free(bits);
        free(E);
    }
    tu_threads(1);
}
END_TEST

/* B packed once (kern_gemm_pack, kernels/gemm_micro.h "B packed once"): a dense
 * layer read from its panels has kern_gemm_bias_act's bits exactly (the same chains,
 * and at one row the same cut of K over the threads), at 1, 2 and 3 threads (_i + 1),
 * A as stored and transposed, N a whole number of panels or not, one row (the GEMV)
 * and 2-16 (few rows).  Every shape is one the pack serves (kern_gemm_pack_ok), so
 * the packed kernels, not the fallback, are what is compared. */
START_TEST(test_gemm_packed)
{
    static const size_t sizes[][3] = { {1, 1024, 800}, {1, 300, 1000}, {16, 1030, 800}, {5, 300, 2800}, {2, 512, 600} };
    const EwAct relu = { EW_RELU, 0.0f };
    tu_threads(_i + 1);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
        float *A = tu_alloc_uniform(M * K, -1.0f, 1.0f, 330 + s), *B = tu_alloc_uniform(K * N, -1.0f, 1.0f, 340 + s);
        float *bias = tu_alloc_uniform(N, -1.0f, 1.0f, 350 + s), *C = tu_alloc(M * N), *want = tu_alloc(M * N);
        for (int ta = 0; ta < 2; ta++)
            FOR_EACH_ISA {
                if (conv_isa == KISA_PORTABLE)
                    continue;
                ck_assert_msg(kern_gemm_pack_ok(conv_isa, ta, false, M, N, K), "%s, %zux%zux%zu: no pack",
                              kern_isa_name(conv_isa), M, N, K);
                KGemmPack pk = { 0 };
                ck_assert(kern_gemm_pack(conv_isa, K, N, B, &pk));
                kern_fill(want, NAN, M * N);
                kern_gemm_bias_act(tu_pool, conv_isa, ta, false, M, N, K, A, B, bias, relu, want);
                kern_fill(C, NAN, M * N);
                kern_gemm_bias_act_packed(tu_pool, conv_isa, ta, M, N, K, A, &pk, NULL, bias, relu, C);
                ptrdiff_t i = tu_first_mismatch(C, want, M * N, 0.0, 0.0);
                ck_assert_msg(i < 0 && memcmp(C, want, M * N * sizeof *C) == 0,
                              "%s, %zux%zux%zu ta %d, %d threads: packed C[%td] = %.9g, unpacked %.9g",
                              kern_isa_name(conv_isa), M, N, K, ta, _i + 1, i, i < 0 ? 0.0 : (double)C[i],
                              i < 0 ? 0.0 : (double)want[i]);
                kern_gemm_pack_free(&pk);
            }
        free(A);
        free(B);
        free(bias);
        free(C);
        free(want);
    }
    tu_threads(1);
}
END_TEST

/* Few rows, few columns, long K (a dense layer at small batch: kernels/blas.c's
 * own_ksplit): K cut into ceil(K / 2048) parts (at most 64) whatever the thread count,
 * each part's chain of FMAs from +0, the parts summed in order, then alpha (and beta).
 * Within rounding of the double reference in every variant; in the x86 ones those
 * bits exactly, at 1, 2 and 3 threads (_i + 1), A as stored and transposed, N a whole
 * number of vectors or not, more rows than one register tile. */
static void parts_chains(bool ta, size_t M, size_t N, size_t K, size_t parts, float alpha, const float *A,
                         const float *B, float beta, const float *C0, float *C)
{
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            float s = 0.0f;
            for (size_t p = 0; p < parts; p++) {
                float acc = 0.0f;
                for (size_t k = K * p / parts; k < K * (p + 1) / parts; k++)
                    acc = fmaf(ta ? A[k * M + i] : A[i * K + k], B[k * N + j], acc);
                s = p == 0 ? acc : s + acc;
            }
            C[i * N + j] = beta == 0.0f ? alpha * s : fmaf(beta, C0[i * N + j], alpha * s);
        }
}

static void ksplit_chains(bool ta, size_t M, size_t N, size_t K, float alpha, const float *A, const float *B,
                          float beta, const float *C0, float *C)
{
    size_t parts = (K + 2047) / 2048;
    parts_chains(ta, M, N, K, parts < 64 ? parts : 64, alpha, A, B, beta, C0, C);
}

START_TEST(test_gemm_ksplit)
{
    static const size_t sizes[][3] = { {4, 64, 4100}, {7, 10, 26300}, {16, 128, 4097}, {2, 33, 8000} };
    tu_threads(_i + 1);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
        float *A = tu_alloc_uniform(M * K, -1.0f, 1.0f, 260 + s), *B = tu_alloc_uniform(K * N, -1.0f, 1.0f, 270 + s);
        float *C0 = tu_alloc_uniform(M * N, -1.0f, 1.0f, 280 + s), *C = tu_alloc(M * N), *want = tu_alloc(M * N);
        float *bits = tu_alloc(M * N);
        for (int ta = 0; ta < 2; ta++)
            for (int bi = 0; bi < 2; bi++) {
                float alpha = bi ? -0.7f : 1.5f, beta = bi ? 0.3f : 0.0f;
                ref_gemm(ta, false, M, N, K, alpha, A, B, beta, C0, want);
                ksplit_chains(ta, M, N, K, alpha, A, B, beta, C0, bits);
                FOR_EACH_ISA {
                    if (beta == 0.0f)
                        kern_fill(C, NAN, M * N);
                    else
                        kern_copy(C0, C, M * N);
                    kern_gemm(tu_pool, conv_isa, ta, false, M, N, K, alpha, A, B, beta, C);
                    ck_assert_isa_near(C, want, M * N, 1e-4);
                    if (conv_isa == KISA_PORTABLE)
                        continue;
                    ptrdiff_t i = tu_first_mismatch(C, bits, M * N, 0.0, 0.0);
                    ck_assert_msg(i < 0 && memcmp(C, bits, M * N * sizeof *C) == 0,
                                  "%s, %zux%zux%zu ta %d beta %g, %d threads: C[%td] = %.9g, the parts' chains %.9g",
                                  kern_isa_name(conv_isa), M, N, K, ta, (double)beta, _i + 1, i,
                                  i < 0 ? 0.0 : (double)C[i], i < 0 ? 0.0 : (double)bits[i]);
                }
            }
        free(A);
        free(B);
        free(C0);
        free(C);
        free(want);
        free(bits);
    }
    tu_threads(1);
}
END_TEST

/* A weight's gradient at a long K (x^T dy, A stored [K, M]: kernels/blas.c's
 * own_wksplit): K cut into min(K / 512, 8) parts whatever the thread count, summed as
 * own_ksplit's are.  Within 1e-4 of the double reference (as test_gemm_ksplit: sums of
 * 1024-4500 products of [-1, 1) values, each part's chain rounding about K/parts
 * times); in the x86 variants those bits exactly at 1, 2 and 3 threads (_i + 1),
 * kern_gemm_kparts saying so, and A stored [M, K] (not cut: one chain) unchanged.
 * charlm's [64, 256] and [256, 64] gradients, parts not a divisor of K, 8 parts. */
START_TEST(test_gemm_wksplit)
{
    static const size_t sizes[][4] = { {64, 256, 1024, 2}, {256, 64, 1024, 2}, {40, 24, 1100, 2}, {20, 36, 2600, 5},
                                       {33, 17, 4500, 8} };
    tu_threads(_i + 1);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t M = sizes[s][0], N = sizes[s][1], K = sizes[s][2], parts = sizes[s][3];
        float *A = tu_alloc_uniform(M * K, -1.0f, 1.0f, 360 + s), *B = tu_alloc_uniform(K * N, -1.0f, 1.0f, 370 + s);
        float *C0 = tu_alloc_uniform(M * N, -1.0f, 1.0f, 380 + s), *C = tu_alloc(M * N), *want = tu_alloc(M * N);
        float *bits = tu_alloc(M * N);
        ck_assert_uint_eq(kern_gemm_kparts_of(true, false, M, N, K), parts);
        ck_assert_uint_eq(kern_gemm_kparts_of(false, false, M, N, K), 1);
        for (int bi = 0; bi < 2; bi++) {
            float alpha = bi ? -0.7f : 1.0f, beta = bi ? 0.3f : 0.0f;
            ref_gemm(true, false, M, N, K, alpha, A, B, beta, C0, want);
            parts_chains(true, M, N, K, parts, alpha, A, B, beta, C0, bits);
            FOR_EACH_ISA {
                gemm_check(true, false, M, N, K, alpha, A, B, beta, C0, C, want, 1e-4, bits, true, "the parts' chains");
                if (conv_isa != KISA_PORTABLE)
                    ck_assert_uint_eq(kern_gemm_kparts(conv_isa, true, false, M, N, K), parts);
            }
        }
        free(A);
        free(B);
        free(C0);
        free(C);
        free(want);
        free(bits);
    }
    tu_threads(1);
}
END_TEST

/* kern_gemm_batch, kern_gemm_rows and kern_gemm_block (a block of a larger matrix,
 * leading dimensions apart) against kern_gemm: its bits in the x86 variants (the same
 * chains), its values to rounding in the portable one and with graphc's GEMM off. */
static void gemm_same(const float *got, const float *want, size_t n, bool exact, const char *what)
{
    ck_assert_isa_near(got, want, n, 1e-5);
    ck_assert_msg(!exact || memcmp(got, want, n * sizeof *got) == 0, "%s kernels: %s differs from kern_gemm",
                  kern_isa_name(conv_isa), what);
}

START_TEST(test_gemm_entries)
{
    const size_t M = 37, N = 45, K = 300, batch = 3, r0 = 5, r1 = 21;
    float *A = tu_alloc_uniform(batch * M * K, -1, 1, 201), *B = tu_alloc_uniform(batch * K * N, -1, 1, 202);
    float *C = tu_alloc(batch * M * N), *D = tu_alloc(batch * M * N), *A2 = tu_alloc(M * 2 * K);
    float *E = tu_alloc(M * 2 * N);
    for (size_t i = 0; i < M; i++)   /* A's first matrix in the right half of [M, 2K] */
        memcpy(A2 + i * 2 * K + K, A + i * K, K * sizeof *A);
    FOR_EACH_ISA {
        for (int off = 0; off < 2; off++) {
            kern_gemm_set_own(off ? -1 : 0);
            bool exact = !off && conv_isa != KISA_PORTABLE;
            for (size_t b = 0; b < batch; b++)
                kern_gemm(tu_pool, conv_isa, true, false, M, N, K, 0.5f, A + b * M * K, B + b * K * N, 0.0f,
                          C + b * M * N);
            kern_gemm_batch(tu_pool, conv_isa, true, false, batch, M, N, K, 0.5f, A, B, 0.0f, D);
            gemm_same(D, C, batch * M * N, exact, "kern_gemm_batch");
            kern_gemm_rows(conv_isa, true, false, M, N, K, r0, r1, 0.5f, A, B, 0.0f, D);
            gemm_same(D, C + r0 * N, (r1 - r0) * N, exact, "kern_gemm_rows");
            kern_gemm(tu_pool, conv_isa, false, false, M, N, K, 0.5f, A, B, 0.0f, C);
            kern_gemm_block(conv_isa, false, false, M, N, K, 0.5f, A2 + K, 2 * K, B, N, 0.0f, E + N, 2 * N);
            for (size_t i = 0; i < M; i++)
                memcpy(D + i * N, E + i * 2 * N + N, N * sizeof *D);
            gemm_same(D, C, M * N, exact, "kern_gemm_block");
        }
    }
    kern_gemm_set_own(0);
    free(A);
    free(B);
    free(C);
    free(D);
    free(A2);
    free(E);
}
END_TEST

/* kern_gemm_bias_act: the bits of kern_gemm then kern_bias_act (the bias added as the
 * GEMM stores a tile, the activation by each thread on its part), in every variant, with
 * no activation, relu and GELU's tanh form, at the transformer's shapes (1024 rows cut
 * over the pool; the columns cut where N > M) and with an edge in every dimension, at
 * 1 and 2 threads; the portable variant and graphc's GEMM off take the other path. */
START_TEST(test_gemm_bias_act)
{
    static const size_t sizes[][3] = { {1024, 64, 64}, {1024, 256, 64}, {300, 65, 257}, {13, 70, 33}, {1, 40, 9},
                                       {60, 300, 120}, {4, 64, 4100} /* own_ksplit's */ };
    static const EwAct acts[] = { { -1, 0.0f }, { EW_RELU, 0.0f }, { EW_GELU_TANH, 0.0f } };
    tu_threads(_i + 1);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
        float *A = tu_alloc_uniform(M * K, -1, 1, 230 + s), *B = tu_alloc_uniform(K * N, -1, 1, 240 + s);
        float *bias = tu_alloc_uniform(N, -1, 1, 250 + s), *C = tu_alloc(M * N), *want = tu_alloc(M * N);
        for (int t = 0; t < 4; t++)
            for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++)
                FOR_EACH_ISA {
                    for (int off = 0; off < 2; off++) {
                        kern_gemm_set_own(off ? -1 : 0);
                        kern_gemm(tu_pool, conv_isa, t & 1, t & 2, M, N, K, 1.0f, A, B, 0.0f, want);
                        kern_bias_act(want, M, N, bias, acts[a]);
                        kern_fill(C, NAN, M * N);
                        kern_gemm_bias_act(tu_pool, conv_isa, t & 1, t & 2, M, N, K, A, B, bias, acts[a], C);
                        ptrdiff_t i = tu_first_mismatch(C, want, M * N, 0.0, 0.0);
                        ck_assert_msg(i < 0 && memcmp(C, want, M * N * sizeof *C) == 0,
                                      "%s, %zux%zux%zu ta %d tb %d act %d own %d, %d threads: C[%td] = %.9g, want %.9g",
                                      kern_isa_name(conv_isa), M, N, K, t & 1, (t & 2) / 2, acts[a].fn, !off, _i + 1,
                                      i, i < 0 ? 0.0 : (double)C[i], i < 0 ? 0.0 : (double)want[i]);
                    }
                }
        free(A);
        free(B);
        free(bias);
        free(C);
        free(want);
    }
    kern_gemm_set_own(0);
    tu_threads(1);
}
END_TEST

START_TEST(test_blas_info)
{
    const char *info = kern_blas_info();
    ck_assert_ptr_nonnull(info);
    ck_assert_msg(strncmp(info, "OpenBLAS", 8) == 0, "info: %s", info);
    ck_assert_msg(strstr(info, "core ") != NULL, "info: %s", info);
    /* the threads are the caller's pool's, not BLAS's: the info names none */
    ck_assert_msg(strstr(info, "thread") == NULL, "info: %s", info);
    tu_threads(0);
    /* gemm right on a pool of every core */
    float A[6] = {1, 2, 3, 4, 5, 6}, B[6] = {1, 0, 0, 1, 1, 1}, C[4];
    kern_gemm(tu_pool, TOP_ISA, false, false, 2, 2, 3, 1.0f, A, B, 0.0f, C);
    ck_assert_float_near_rel(C[0], 4.0, 0.0, 0.0);
    ck_assert_float_near_rel(C[1], 5.0, 0.0, 0.0);
    ck_assert_float_near_rel(C[2], 10.0, 0.0, 0.0);
    ck_assert_float_near_rel(C[3], 11.0, 0.0, 0.0);
}
END_TEST

/* ================================================================================
 * Convolution
 * ================================================================================ */

typedef struct ConvCase {
    int64_t n, h, w, c, kh, kw, f, sh, sw, pt, pl, pb, pr;
} ConvCase;


static const ConvCase conv_cases[] = {
    /*  n  h  w  c  kh kw f  sh sw pt pl pb pr */
    {2, 5, 7, 3, 3, 3, 4, 1, 1, 1, 1, 1, 1},   /* "same", batch 2, non-square image */
    {1, 6, 6, 2, 3, 3, 3, 2, 2, 1, 1, 0, 0},   /* stride 2, asymmetric padding */
    {3, 7, 5, 4, 2, 3, 5, 2, 1, 0, 1, 1, 1},   /* non-square kernel, mixed strides */
    {2, 4, 4, 3, 1, 1, 6, 1, 1, 0, 0, 0, 0},   /* 1x1: im2col is the input */
    {2, 3, 4, 2, 3, 4, 3, 1, 1, 0, 0, 0, 0},   /* kernel covers the image: identity too */
    {1, 9, 8, 1, 5, 5, 2, 2, 3, 2, 2, 2, 1},   /* one channel, 5x5, odd strides */
    {2, 5, 5, 3, 1, 1, 2, 2, 2, 0, 0, 0, 0},   /* 1x1 stride 2 (a copy again) */
    {1, 3, 3, 2, 5, 5, 2, 1, 1, 2, 2, 2, 2},   /* kernel larger than the image */
    {2, 4, 6, 3, 3, 3, 2, 1, 1, 3, 3, 3, 3},   /* windows of padding only */
    {1, 1, 1, 5, 1, 1, 3, 1, 1, 0, 0, 0, 0},   /* a dense layer in disguise */
    {3, 6, 5, 2, 3, 3, 3, 3, 2, 1, 0, 2, 1},
    {2, 8, 9, 3, 2, 2, 4, 3, 3, 0, 1, 0, 1},   /* stride > kernel: skipped pixels */
};
#define N_CONV_CASES ((int)(sizeof conv_cases / sizeof conv_cases[0]))

/* Sizes for the direct kernels with few input channels (C <= 4): widths that leave
 * partial tiles, filter counts that leave partial vectors, rows too wide for the strip
 * (test_conv_tiles sweeps the tile shapes themselves). */
static const ConvCase direct_cases[] = {
    /*  n  h   w   c  kh kw f   sh sw pt pl pb pr */
    {3, 28, 28, 1, 5, 5, 32, 1, 1, 2, 2, 2, 2},   /* the MNIST CNN's first layer, batch 3 */
    {1, 13, 11, 1, 5, 5, 20, 1, 1, 2, 2, 2, 2},   /* batch 1, odd sizes, 16 + 4 filters */
    {2, 9, 10, 3, 3, 3, 13, 2, 2, 1, 1, 0, 1},    /* Cin 3, stride 2, 13 filters (< 16) */
    {2, 8, 7, 3, 3, 3, 5, 1, 1, 0, 0, 0, 0},      /* "valid", 5 filters (< 8) */
    {1, 12, 9, 1, 3, 3, 33, 2, 1, 1, 1, 1, 1},    /* mixed strides, 2 x 16 + 1 filters */
    {2, 7, 19, 2, 2, 4, 8, 1, 3, 0, 1, 1, 2},     /* non-square, stride 3 across */
    {1, 6, 6, 4, 4, 5, 17, 1, 1, 1, 2, 2, 2},     /* K = 80 */
    {2, 5, 5, 1, 5, 5, 16, 1, 1, 4, 4, 4, 4},     /* rows and columns of padding only */
    {1, 6, 1921, 3, 3, 3, 8, 2, 2, 0, 0, 1, 1},   /* large.net's first layer, 6 rows: a row of 960 pixels in 3 tiles of columns */
    {1, 4, 3300, 1, 5, 5, 16, 1, 1, 2, 2, 2, 2},  /* 3300 wide, "same": 3 tiles of 1100 columns, padding at both ends */
    {2, 7, 1301, 3, 3, 3, 7, 2, 2, 1, 1, 1, 1},   /* planar, 3 channels at stride 2 with left padding, 7 filters, 2 tiles */
    {1, 9, 40, 2, 3, 2, 8, 1, 2, 1, 0, 1, 1},     /* planar, 2 channels, 8 filters, the planes' edges one by one */
    {3, 18, 70, 3, 3, 3, 8, 2, 2, 0, 0, 1, 1},    /* large.net's first layer in small: batch 3, 9 x 35 out (4x4 pool: a row and 3 columns left over) */
    {3, 23, 1001, 3, 3, 3, 8, 2, 2, 0, 0, 1, 1},  /* large.net's first layer, odd sizes: 11 x 501 out, the pooled filter gradient's fills of 4 rows (4 + 4 + 3 an image, the next made while one is read) */
    {1, 36, 142, 3, 3, 3, 8, 2, 2, 0, 0, 1, 1},   /* large.net's first layer at batch 1: 18 x 71 out, 4x4 pool: 4 pooled rows (of 4 conv rows, their 8 new input rows made while the 4 before are read), 2 rows and 3 columns left over */
    {1, 33, 66, 3, 3, 3, 8, 2, 2, 1, 1, 1, 1},    /* batch 1 with top padding: 17 x 33 out, the first pooled row's window rows on different kernel rows */
};
#define N_DIRECT_CASES ((int)(sizeof direct_cases / sizeof direct_cases[0]))

/* Sizes for the direct kernels with many input channels (C > 4): filters in blocks of
 * 16 (packed, the last zero-filled), kernel rows on the padding skipped. */
static const ConvCase wide_cases[] = {
    /*  n  h   w   c   kh kw f   sh sw pt pl pb pr */
    {2, 14, 14, 32, 5, 5, 64, 1, 1, 2, 2, 2, 2},  /* the MNIST CNN's second layer, batch 2: grad filter bands of 4 rows */
    {1, 9, 11, 5, 3, 3, 20, 1, 1, 1, 1, 1, 1},    /* batch 1, C 5, 16 + 4 filters */
    {2, 8, 7, 12, 3, 3, 9, 2, 2, 1, 1, 0, 1},     /* stride 2, 9 filters (one block, 8 + 1) */
    {1, 6, 7, 16, 3, 3, 6, 1, 1, 1, 1, 1, 1},     /* 6 filters: the input gradient only */
    {2, 9, 8, 20, 3, 5, 12, 1, 1, 0, 0, 2, 1},    /* asymmetric padding: gradient's differs */
    {1, 7, 13, 9, 5, 5, 33, 1, 1, 0, 0, 0, 0},    /* "valid", 2 x 16 + 1 filters */
    {2, 6, 6, 8, 4, 5, 17, 1, 1, 1, 2, 2, 2},     /* non-square kernel */
    {1, 5, 5, 6, 5, 5, 16, 1, 1, 4, 4, 4, 4},     /* rows and columns of padding only */
    {1, 10, 19, 7, 2, 4, 24, 1, 3, 0, 1, 1, 2},   /* stride 3 across, 19 wide */
    {3, 4, 9, 16, 3, 3, 48, 2, 1, 1, 1, 1, 1},    /* mixed strides, 3 blocks of 16 */
    {2, 13, 1, 10, 3, 1, 9, 1, 1, 1, 0, 1, 0},    /* one pixel wide */
    {1, 12, 60, 40, 3, 3, 16, 1, 1, 1, 1, 1, 1},  /* wide rows: grad filter bands of one row */
    {1, 14, 14, 32, 5, 5, 64, 1, 1, 2, 2, 2, 2},  /* the second layer at batch 1: its 7 pooled rows' 14 conv rows shared evenly */
    {1, 4, 120, 24, 3, 3, 16, 1, 1, 1, 1, 1, 1},  /* a row too wide for the strip: 2 tiles of columns */
    {2, 7, 7, 24, 3, 3, 80, 1, 1, 1, 1, 1, 1},    /* past 64 filters (64 + 16), grad filter bands of whole images */
    {1, 5, 6, 40, 3, 3, 130, 1, 1, 1, 1, 1, 1},   /* 64 + 64 + 2 filters */
    {1, 32, 32, 8, 3, 3, 80, 1, 1, 1, 1, 1, 1},   /* 80 filters read by 1024 pixels: in blocks (fewer: as stored) */
};
#define N_WIDE_CASES ((int)(sizeof wide_cases / sizeof wide_cases[0]))



static KConv conv_params(const ConvCase *k)
{
    KConv p = {k->n, k->h, k->w, k->c, k->kh, k->kw, k->f, k->sh, k->sw, k->pt, k->pl,
               (k->h + k->pt + k->pb - k->kh) / k->sh + 1, (k->w + k->pl + k->pr - k->kw) / k->sw + 1};
    return p;
}

static size_t conv_nx(const KConv *p) { return (size_t)(p->n * p->h * p->w * p->c); }
static size_t conv_nw(const KConv *p) { return (size_t)(p->kh * p->kw * p->c * p->f); }
static size_t conv_ny(const KConv *p) { return (size_t)(p->n * p->oh * p->ow * p->f); }

/* Direct 7-loop convolution; with mode 0 computes y, 1 accumulates dx, 2 accumulates dw
 * (into the double arrays), all from the same index arithmetic. */
static void ref_conv_loops(const KConv *p, int mode, const float *x, const float *w, const float *dy,
                           double *acc)
{
    for (int64_t n = 0; n < p->n; n++)
        for (int64_t oy = 0; oy < p->oh; oy++)
            for (int64_t ox = 0; ox < p->ow; ox++)
                for (int64_t f = 0; f < p->f; f++) {
                    size_t yi = (size_t)(((n * p->oh + oy) * p->ow + ox) * p->f + f);
                    for (int64_t ky = 0; ky < p->kh; ky++)
                        for (int64_t kx = 0; kx < p->kw; kx++) {
                            int64_t iy = oy * p->sh - p->pt + ky, ix = ox * p->sw - p->pl + kx;
                            if (iy < 0 || iy >= p->h || ix < 0 || ix >= p->w)
                                continue;
                            for (int64_t c = 0; c < p->c; c++) {
                                size_t xi = (size_t)(((n * p->h + iy) * p->w + ix) * p->c + c);
                                size_t wi = (size_t)(((ky * p->kw + kx) * p->c + c) * p->f + f);
                                if (mode == 0)
                                    acc[yi] += (double)x[xi] * w[wi];
                                else if (mode == 1)
                                    acc[xi] += (double)dy[yi] * w[wi];
                                else
                                    acc[wi] += (double)x[xi] * dy[yi];
                            }
                        }
                }
}

static void ref_conv(const KConv *p, int mode, const float *x, const float *w, const float *dy, float *out)
{
    size_t n = mode == 0 ? conv_ny(p) : (mode == 1 ? conv_nx(p) : conv_nw(p));
    double *acc = calloc(n ? n : 1, sizeof *acc);
    ck_assert_ptr_nonnull(acc);
    ref_conv_loops(p, mode, x, w, dy, acc);
    for (size_t i = 0; i < n; i++)
        out[i] = (float)acc[i];
    free(acc);
}

/* All three conv kernels against the direct loops for chunk size `rows` (0 = auto).
 * The filter is 64-byte aligned (the direct forward reads 16, 32 ... filters as
 * stored); the forward again from a copy 4 bytes off (which it copies first) must give
 * the same bits. */
static void check_conv_case(const KConv *p, size_t rows, uint64_t seed, double rtol)
{
    size_t nx = conv_nx(p), nw = conv_nw(p), ny = conv_ny(p);
    float *x = tu_alloc_uniform(nx, -1.0f, 1.0f, seed), *w = aligned_alloc(64, (nw + 16) / 16 * 64);
    float *wodd = tu_alloc(nw + 1) + 1;   /* malloc's 16-byte alignment, 4 bytes on */
    ck_assert(w != NULL);
    tu_fill_uniform(w, nw, -1.0f, 1.0f, seed + 1);
    memcpy(wodd, w, nw * sizeof *w);
    float *dy = tu_alloc_uniform(ny, -1.0f, 1.0f, seed + 2);
    float *y = tu_alloc(ny), *dx = tu_alloc(nx), *dw = tu_alloc(nw), *yodd = tu_alloc(ny);
    float *wy = tu_alloc(ny), *wdx = tu_alloc(nx), *wdw = tu_alloc(nw);
    kern_conv_set_chunk_rows(rows);
    size_t sbytes = kern_conv2d_scratch(p, tu_nthreads());
    /* each kernel its own scratch of the exact size it asks for (NULL for none, as the
     * executors pass): ASan sees any access past it */
    float *scratch[KCONV_OP_COUNT];
    for (int op = 0; op < KCONV_OP_COUNT; op++) {
        size_t b = kern_conv_scratch(p, (KConvOp)op, tu_nthreads());
        ck_assert_uint_le(b, sbytes);
        scratch[op] = b ? malloc(b) : NULL;
        ck_assert(b == 0 || scratch[op] != NULL);
    }
    if (rows) {
        /* per thread: one chunk of im2col, and a [K, F] accumulator when threads > 1 */
        size_t T = (size_t)tu_nthreads(), K = (size_t)(p->kh * p->kw * p->c);
        /* and the direct kernels' packed filter, [F rounded up to 16][K] or, flipped
         * for the input gradient, [C rounded up][KH*KW*F] */
        size_t pack = kern_conv_direct_used(p) ? (size_t)(p->kh * p->kw * (p->c + 15) * (p->f + 15)) : 0;
        ck_assert_uint_le(sbytes, (T * (rows * K + (T > 1 ? K * (size_t)p->f : 0)) + pack) * sizeof(float));
    }
    ref_conv(p, 0, x, w, dy, wy);
    ref_conv(p, 1, x, w, dy, wdx);
    ref_conv(p, 2, x, w, dy, wdw);
    const bool direct = kern_conv_direct_used(p);
    FOR_EACH_ISA {
        if (ISA_ADDS_NOTHING(direct))
            continue;
        kern_fill(y, NAN, ny);
        kern_fill(dx, NAN, nx);
        kern_fill(dw, NAN, nw);
        kern_conv2d(tu_pool, conv_isa, p, x, w, y, scratch[KCONV_FORWARD]);
        kern_conv2d_grad_input(tu_pool, conv_isa, p, dy, w, dx, scratch[KCONV_GRAD_INPUT]);
        kern_conv2d_grad_filter(tu_pool, conv_isa, p, x, dy, dw, scratch[KCONV_GRAD_FILTER]);
        ck_assert_isa_near(y, wy, ny, rtol);
        ck_assert_isa_near(dx, wdx, nx, rtol);
        ck_assert_isa_near(dw, wdw, nw, rtol);
        kern_conv2d(tu_pool, conv_isa, p, x, wodd, yodd, scratch[KCONV_FORWARD]);
        ck_assert_msg(memcmp(y, yodd, ny * sizeof *y) == 0, "%s kernels: the filter 4 bytes off gives other bits",
                      kern_isa_name(conv_isa));
    }
    kern_conv_set_chunk_rows(0);
    free(x);
    free(w);
    free(wodd - 1);
    free(yodd);
    free(dy);
    free(y);
    free(dx);
    free(dw);
    free(wy);
    free(wdx);
    free(wdw);
    for (int op = 0; op < KCONV_OP_COUNT; op++)
        free(scratch[op]);
}

START_TEST(test_conv_vs_direct)
{
    KConv p = conv_params(&conv_cases[_i]);
    check_conv_case(&p, 0, 1000 + 10 * (uint64_t)_i, 1e-5);
}
END_TEST

/* Chunks of 1 and 7 rows: boundaries fall mid-row and across images. */
START_TEST(test_conv_small_chunks)
{
    KConv p = conv_params(&conv_cases[_i]);
    check_conv_case(&p, 1, 2000 + 10 * (uint64_t)_i, 1e-5);
    check_conv_case(&p, 7, 3000 + 10 * (uint64_t)_i, 1e-5);
}
END_TEST

/* The same cases with the work split across a pool of 2 and 3 threads (chunks of 7
 * rows, so every thread gets several, and grad filter sums per-thread partials). */
START_TEST(test_conv_threads)
{
    KConv p = conv_params(&conv_cases[_i]);
    tu_threads(2);
    check_conv_case(&p, 7, 5000 + 10 * (uint64_t)_i, 1e-5);
    tu_threads(3);
    check_conv_case(&p, 7, 6000 + 10 * (uint64_t)_i, 1e-5);
    tu_threads(1);
}
END_TEST

/* The conv cases again with the direct kernel turned off: the im2col path for the
 * sizes the direct kernel otherwise takes. */
START_TEST(test_conv_im2col_only)
{
    KConv p = conv_params(&conv_cases[_i]);
    kern_conv_set_direct(-1);
    ck_assert(!kern_conv_direct_used(&p));
    check_conv_case(&p, 0, 1100 + 10 * (uint64_t)_i, 1e-5);
    check_conv_case(&p, 7, 1200 + 10 * (uint64_t)_i, 1e-5);
    tu_threads(2);
    check_conv_case(&p, 7, 1300 + 10 * (uint64_t)_i, 1e-5);
    tu_threads(1);
    kern_conv_set_direct(0);
}
END_TEST

/* A direct kernel's size against the direct loops: automatic chunks, chunks of 1 and
 * 7 pixels, 2 and 3 threads; and the same with im2col.  The size must take the direct
 * path (on every CPU), and must not once it is off. */
static void check_conv_direct_sweep(const KConv *p, uint64_t seed)
{
    ck_assert(kern_conv_direct_used(p));
    check_conv_case(p, 0, seed, 1e-5);
    check_conv_case(p, 1, seed + 10, 1e-5);
    check_conv_case(p, 7, seed + 20, 1e-5);
    tu_threads(2);
    check_conv_case(p, 0, seed + 30, 1e-5);
    check_conv_case(p, 7, seed + 40, 1e-5);
    tu_threads(3);
    check_conv_case(p, 5, seed + 50, 1e-5);
    tu_threads(1);
    kern_conv_set_direct(-1);
    ck_assert(!kern_conv_direct_used(p));
    check_conv_case(p, 0, seed + 60, 1e-5);
    kern_conv_set_direct(0);
}

/* The few-channel kernel's sizes. */
START_TEST(test_conv_direct)
{
    KConv p = conv_params(&direct_cases[_i]);
    check_conv_direct_sweep(&p, 7000 + 100 * (uint64_t)_i);
}
END_TEST

/* The many-channel kernels' sizes (forward, filter gradient, and the input gradient at
 * stride 1). */
START_TEST(test_conv_wide)
{
    KConv p = conv_params(&wide_cases[_i]);
    check_conv_direct_sweep(&p, 9000 + 100 * (uint64_t)_i);
}
END_TEST

/* Case i of all three tables: the few-channel, the many-channel, then the others. */
static const ConvCase *any_conv_case(int i)
{
    if (i < N_DIRECT_CASES) return &direct_cases[i];
    if (i < N_DIRECT_CASES + N_WIDE_CASES) return &wide_cases[i - N_DIRECT_CASES];
    return &conv_cases[i - N_DIRECT_CASES - N_WIDE_CASES];
}

/* ---- the thread pool (util/pool.c) ----------------------------------------------------
 * Every task of every job runs once, on worker task % T, and pool_run returns only when
 * all have: whether the workers were spinning for the job, asleep (spinning off, or a
 * pause longer than their spin), or spinning for ever; and a pool freed while its workers spin stops.  A worker's share that the
 * caller takes over (asleep workers are slow to wake, so with spinning off the caller
 * takes most) keeps its worker index: the split run's scratch and bits. */
typedef struct PoolCount {
    Pool *p;
    int T;
    _Atomic int ran[16];
    int worker[16];
    pthread_t thread[16];   /* the thread that ran each task */
    int nested[4];   /* task 0's own pool_run: which worker ran each of its tasks, + 1 */
} PoolCount;

static void nested_count(void *arg, int task, int worker)
{
    PoolCount *c = arg;
    c->nested[task] = worker + 1;
}

static void pool_count(void *arg, int task, int worker)
{
    PoolCount *c = arg;
    if (worker != 0) {   /* the caller's share ends first: its wait must hold */
        volatile double s = 0;
        for (int i = 0; i < 20000; i++) s = s + 1.0;
    }
    if (task == 0) pool_run(c->p, 4, nested_count, c);
    c->worker[task] = worker;
    c->thread[task] = pthread_self();
    atomic_fetch_add(&c->ran[task], 1);
}

START_TEST(test_pool_jobs)
{
    const int64_t spins[] = { 0, POOL_SPIN_NS, 1000000000 };
    for (int si = 0; si < 3; si++)
        for (int T = 2; T <= 3; T++) {
            Pool *p = pool_new(T);
            ck_assert_ptr_nonnull(p);
            pool_set_spin(p, spins[si]);
            int here = 0;   /* workers' tasks the caller ran */
            for (int job = 0; job < 200; job++) {
                PoolCount c = { .p = p, .T = pool_threads(p) };
                int ntasks = job % 9 + 1;
                if (job % 40 == 39) usleep(2000);   /* past the default spin: asleep */
                pool_run(p, ntasks, pool_count, &c);
                for (int t = 0; t < ntasks; t++) {
                    ck_assert_msg(atomic_load(&c.ran[t]) == 1, "spin %lld, %d threads, job %d: task %d ran %d times",
                                  (long long)spins[si], T, job, t, atomic_load(&c.ran[t]));
                    ck_assert_int_eq(c.worker[t], t % c.T);
                    bool caller = pthread_equal(c.thread[t], pthread_self());
                    if (t % c.T == 0) ck_assert(caller);
                    here += caller && t % c.T != 0;
                }
                /* inside a job: serial, reported as worker 0; a job of one task ran on
                 * this thread outside any job, so its own pool_run had the pool */
                for (int t = 0; t < 4; t++) ck_assert_int_eq(c.nested[t], ntasks > 1 ? 1 : t % c.T + 1);
            }
            /* asleep workers wake in microseconds, the caller's share takes none */
            if (si == 0) ck_assert_msg(here > 0, "%d threads: the caller took over no share in 200 jobs", T);
            pool_free(p);
        }
}
END_TEST

/* pool_set_stats: the busy time of every share is counted, on whichever thread ran it,
 * and nothing while off.  Each task holds its thread for 1 ms of CPU time (so of wall
 * time too, however loaded the machine): the caller's busy time is at least that of
 * the tasks it ran, the workers' at least that of theirs, and the busy times and the
 * caller's wait add up to no more than T x the jobs' wall time. */
typedef struct BusyJob {
    pthread_t caller;
    _Atomic int on_caller, on_workers;   /* tasks run by each side */
} BusyJob;

static void busy_task(void *arg, int task, int worker)
{
    (void)task;
    (void)worker;
    BusyJob *j = arg;
    struct timespec t0, t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    do clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000 + (t.tv_nsec - t0.tv_nsec) < 1000000);
    atomic_fetch_add(pthread_equal(pthread_self(), j->caller) ? &j->on_caller : &j->on_workers, 1);
}

START_TEST(test_pool_stats)
{
    for (int T = 2; T <= 3; T++) {
        Pool *p = pool_new(T);
        ck_assert_ptr_nonnull(p);
        BusyJob j = { .caller = pthread_self() };
        int64_t busy[POOL_MAX_THREADS], wait, cpu0 = pool_cpu_ns(p);
        pool_run(p, 4, busy_task, &j);   /* not counted */
        pool_stats(p, busy, &wait);
        for (int t = 0; t < pool_threads(p); t++) ck_assert_int_eq(busy[t], 0);
        ck_assert_int_eq(wait, 0);
        j = (BusyJob){ .caller = pthread_self() };
        pool_set_stats(p, true);
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (int job = 0; job < 5; job++) pool_run(p, 2 * T + 1, busy_task, &j);
        clock_gettime(CLOCK_MONOTONIC, &b);
        pool_set_stats(p, false);
        int64_t wall = (b.tv_sec - a.tv_sec) * 1000000000 + (b.tv_nsec - a.tv_nsec);
        pool_stats(p, busy, &wait);
        int64_t workers = 0;
        for (int t = 1; t < pool_threads(p); t++) workers += busy[t];
        ck_assert_msg(busy[0] >= atomic_load(&j.on_caller) * 1000000LL, "%d threads: the caller busy %lld ns for %d tasks",
                      T, (long long)busy[0], atomic_load(&j.on_caller));
        ck_assert_msg(workers >= atomic_load(&j.on_workers) * 1000000LL, "%d threads: the workers busy %lld ns for %d tasks",
                      T, (long long)workers, atomic_load(&j.on_workers));
        ck_assert_msg(busy[0] + wait <= wall, "%d threads: the caller busy %lld + waiting %lld ns in %lld", T,
                      (long long)busy[0], (long long)wait, (long long)wall);
        ck_assert_msg(busy[0] + workers + wait <= T * wall, "%d threads: %lld thread-ns in %lld ns of wall", T,
                      (long long)(busy[0] + workers + wait), (long long)wall);
        /* every task's 1 ms ran on a thread of the pool, the caller's or a worker's */
        ck_assert_msg(pool_cpu_ns(p) - cpu0 >= (5 * (2 * T + 1) + 4) * 1000000LL, "%d threads: CPU %lld ns", T,
                      (long long)(pool_cpu_ns(p) - cpu0));
        pool_free(p);
    }
}
END_TEST

/* Inside a parallel stage of the compiled plan (exec/stages.c) a kernel runs as one
 * task of a pool job: its own pool_run then runs every part serially on that thread.
 * The three convolution kernels must give the bits of the split run there (the filter
 * gradient's partial sums belong to tasks, not to the thread that runs them). */
typedef struct NestedConv {
    const KConv *p;
    const float *x, *w, *dy;
    float *y, *dx, *dw, *scratch;
} NestedConv;

static void nested_conv_task(void *arg, int task, int worker)
{
    (void)worker;
    NestedConv *j = arg;
    if (task != 0)
        return;
    kern_conv2d(tu_pool, conv_isa, j->p, j->x, j->w, j->y, j->scratch);
    kern_conv2d_grad_input(tu_pool, conv_isa, j->p, j->dy, j->w, j->dx, j->scratch);
    kern_conv2d_grad_filter(tu_pool, conv_isa, j->p, j->x, j->dy, j->dw, j->scratch);
}

START_TEST(test_conv_nested)
{
    KConv p = conv_params(any_conv_case(_i));
    size_t nx = conv_nx(&p), nw = conv_nw(&p), ny = conv_ny(&p);
    float *x = tu_alloc_uniform(nx, -1.0f, 1.0f, 40 + (uint64_t)_i), *w = tu_alloc_uniform(nw, -1.0f, 1.0f, 41);
    float *dy = tu_alloc_uniform(ny, -1.0f, 1.0f, 42);
    for (int threads = 2; threads <= 3; threads++) {
        tu_threads(threads);
        FOR_EACH_ISA for (size_t rows = 0; rows <= 7 && !ISA_ADDS_NOTHING(kern_conv_direct_used(&p)); rows += 7) {
            /* automatic chunks, and chunks of 7 */
            kern_conv_set_chunk_rows(rows);
            size_t sbytes = kern_conv2d_scratch(&p, tu_nthreads());
            NestedConv a = { &p, x, w, dy, tu_alloc(ny), tu_alloc(nx), tu_alloc(nw), sbytes ? malloc(sbytes) : NULL };
            NestedConv b = { &p, x, w, dy, tu_alloc(ny), tu_alloc(nx), tu_alloc(nw), sbytes ? malloc(sbytes) : NULL };
            ck_assert(sbytes == 0 || (a.scratch && b.scratch));
            kern_conv2d(tu_pool, conv_isa, &p, x, w, a.y, a.scratch);
            kern_conv2d_grad_input(tu_pool, conv_isa, &p, dy, w, a.dx, a.scratch);
            kern_conv2d_grad_filter(tu_pool, conv_isa, &p, x, dy, a.dw, a.scratch);
            pool_run(tu_pool, threads, nested_conv_task, &b);
            const char *isa = kern_isa_name(conv_isa);
            ck_assert_msg(memcmp(a.y, b.y, ny * sizeof(float)) == 0, "case %d, %d threads, %s: forward differs", _i,
                          threads, isa);
            ck_assert_msg(memcmp(a.dx, b.dx, nx * sizeof(float)) == 0, "case %d, %d threads, %s: input gradient differs",
                          _i, threads, isa);
            ck_assert_msg(memcmp(a.dw, b.dw, nw * sizeof(float)) == 0, "case %d, %d threads, %s: filter gradient differs",
                          _i, threads, isa);
            NestedConv *both[2] = { &a, &b };
            for (int m = 0; m < 2; m++) {
                free(both[m]->y);
                free(both[m]->dx);
                free(both[m]->dw);
                free(both[m]->scratch);
            }
        }
    }
    kern_conv_set_chunk_rows(0);
    tu_threads(1);
    free(x);
    free(w);
    free(dy);
}
END_TEST

/* conv2d_bias_act gives the bits of conv2d, then the bias and activation apart
 * (kern_bias_act): the compiled plan's fused op against the interpreter's three ops.
 * Relu, sigmoid and none; the direct path and im2col; one thread and two. */
START_TEST(test_conv_bias_act)
{
    KConv p = conv_params(any_conv_case(_i));
    size_t nx = conv_nx(&p), nw = conv_nw(&p), ny = conv_ny(&p);
    uint64_t seed = 8000 + 10 * (uint64_t)_i;
    float *x = tu_alloc_uniform(nx, -1.0f, 1.0f, seed), *w = tu_alloc_uniform(nw, -1.0f, 1.0f, seed + 1);
    float *bias = tu_alloc_uniform((size_t)p.f, -1.0f, 1.0f, seed + 2);
    float *y = tu_alloc(ny), *want = tu_alloc(ny);
    static const int acts[] = { EW_RELU, EW_SIGMOID, -1 };
    const bool takes_direct = kern_conv_direct_used(&p);
    FOR_EACH_ISA for (int direct = 0; direct < 2; direct++)
        for (int threads = 1; threads <= 2 && !ISA_ADDS_NOTHING(direct && takes_direct); threads++)
            for (int a = 0; a < 3; a++) {
                kern_conv_set_direct(direct ? 0 : -1);
                tu_threads(threads);
                size_t sbytes = kern_conv2d_scratch(&p, tu_nthreads());
                float *scratch = sbytes ? malloc(sbytes) : NULL;
                ck_assert(sbytes == 0 || scratch != NULL);
                kern_conv2d(tu_pool, conv_isa, &p, x, w, want, scratch);
                kern_bias_act(want, ny / (size_t)p.f, (size_t)p.f, bias, (EwAct){ acts[a], 0.0f });
                kern_fill(y, NAN, ny);
                kern_conv2d_bias_act(tu_pool, conv_isa, &p, x, w, bias, (EwAct){ acts[a], 0.0f }, y, scratch);
                ck_assert_msg(memcmp(y, want, ny * sizeof *y) == 0, "case %d, %s kernels, direct %d, %d threads, act %d: "
                              "not the bits of the ops apart", _i, kern_isa_name(conv_isa), direct, threads, acts[a]);
                free(scratch);
            }
    kern_conv_set_direct(0);
    tu_threads(1);
    free(x);
    free(w);
    free(bias);
    free(y);
    free(want);
}
END_TEST

/* Pooling windows for conv2d_maxpool: size, stride, "same" or "valid" (TensorFlow's
 * padding, as shape inference resolves it). */
typedef struct PoolWin {
    int kh, kw, sh, sw;
    bool same;
} PoolWin;

static const PoolWin convpool_windows[] = {
    {2, 2, 2, 2, false}, /* MNIST's */
    {2, 2, 2, 2, true},  /* odd sizes padded at the bottom and right */
    {3, 3, 2, 2, true},  /* overlapping windows, padding on both sides */
    {3, 3, 2, 2, false},
    {3, 3, 1, 1, true},  /* stride 1: each conv row read by three pooled rows */
    {2, 2, 1, 1, false},
    {3, 2, 1, 2, true},  /* non-square */
    {4, 4, 4, 4, false}, /* large.net's */
    {2, 2, 3, 3, false}, /* stride > size: rows no window reads */
};
#define N_CONVPOOL_WINDOWS ((int)(sizeof convpool_windows / sizeof convpool_windows[0]))

/* The pooling of p's output with window k; false if "valid" does not fit. */
static bool convpool_pool(const KConv *p, const PoolWin *k, KPool *q)
{
    int64_t in[2] = { p->oh, p->ow }, win[2] = { k->kh, k->kw }, st[2] = { k->sh, k->sw }, o[2], pad[2];
    for (int a = 0; a < 2; a++) {
        if (!k->same && in[a] < win[a])
            return false;
        o[a] = k->same ? (in[a] + st[a] - 1) / st[a] : (in[a] - win[a]) / st[a] + 1;
        pad[a] = k->same ? (o[a] - 1) * st[a] + win[a] - in[a] : 0;
        if (pad[a] < 0)
            pad[a] = 0;
    }
    *q = (KPool){ p->n, p->oh, p->ow, p->f, k->kh, k->kw, k->sh, k->sw, pad[0] / 2, pad[1] / 2, o[0], o[1] };
    return true;
}

/* conv2d_maxpool (and conv2d_maxpool_argmax, its index too) gives the bits of
 * conv2d_bias_act (or conv2d, without a bias) and then maxpool (and maxpool_argmax)
 * where the convolution takes a direct kernel (the few-channel one, the many-channel
 * one): the compiled inference plan's fused op against the ops apart.
 * Every convolution size of the tables, every pooling window above, relu, sigmoid, none
 * and no bias, 1 to 3 threads, bands of the automatic size and of 1 and 2 pooled rows
 * (several per image: rows carried from band to band where windows overlap).  On im2col + sgemm (the sizes neither kernel takes, and
 * all with the direct kernels off, also in chunks of 7 pixels), where the pass does not
 * fuse, the same values to rounding. */
/* Under ASan only relu and no bias: the activation changes no address, and the four
 * made this test 147 of test_kernels' 205 s there (CI runs the suite three times). */
#ifdef __SANITIZE_ADDRESS__
#define CONVPOOL_ACT_STEP 3
#else
#define CONVPOOL_ACT_STEP 1
#endif
START_TEST(test_conv_maxpool)
{
    const ConvCase *k = any_conv_case(_i);
    KConv p = conv_params(k);
    size_t nx = conv_nx(&p), nw = conv_nw(&p), ny = conv_ny(&p);
    uint64_t seed = 8500 + 10 * (uint64_t)_i;
    float *x = tu_alloc_uniform(nx, -1.0f, 1.0f, seed), *w = tu_alloc_uniform(nw, -1.0f, 1.0f, seed + 1);
    float *bias = tu_alloc_uniform((size_t)p.f, -1.0f, 1.0f, seed + 2);
    float *conv = tu_alloc(ny);
    static const int acts[] = { EW_RELU, EW_SIGMOID, -1, -2 };   /* -2: no bias (conv2d) */
    int tried = 0, exact = 0;
    /* then once more with x, w and the bias in {-1, 0, 1}: small integers out, so that
     * windows hold equal maxima in different rows and columns (the first in row-major
     * order wins), relu and the direct kernels only */
    for (int quant = 0; quant < 2; quant++)
    for (int pw = 0; pw < N_CONVPOOL_WINDOWS; pw++) {
        if (quant == 1 && pw == 0) {
            for (size_t i = 0; i < nx; i++)
                x[i] = roundf(x[i]);
            for (size_t i = 0; i < nw; i++)
                w[i] = roundf(w[i]);
            for (int64_t i = 0; i < p.f; i++)
                bias[i] = roundf(bias[i]);
        }
        KPool q;
        if (!convpool_pool(&p, &convpool_windows[pw], &q))
            continue;
        size_t npool = (size_t)(q.n * q.oh * q.ow * q.c);
        float *y = tu_alloc(npool), *want = tu_alloc(npool);
        int32_t *idx = malloc(npool * sizeof *idx), *widx = malloc(npool * sizeof *widx);
        ck_assert(idx && widx);
        FOR_EACH_ISA for (int mode = 0; mode < 5; mode++)   /* direct kernels on: bands automatic, of 1
                                                              * and 2 pooled rows; off (im2col); off,
                                                              * chunks of 7 */
            /* past the first variant, the automatic bands only: the bands are cut the same
             * way for all (the direct setting made first: the last variant's mode 4 left
             * it off, and every later variant was skipped) */
            for (int threads = (kern_conv_set_direct(mode < 3 ? 0 : -1), 1);
                 threads <= 3 && !ISA_ADDS_NOTHING(mode == 0 && kern_conv_direct_used(&p)) && (quant == 0 || mode == 0);
                 threads++)
                for (int a = 0; a < (quant ? 1 : 4); a += CONVPOOL_ACT_STEP) {
                    kern_conv_set_pool_band(mode == 1 ? 1 : mode == 2 ? 2 : 0);
                    kern_conv_set_chunk_rows(mode == 4 ? 7 : 0);
                    tu_threads(threads);
                    const float *b = acts[a] == -2 ? NULL : bias;
                    EwAct act = { acts[a] == -2 ? -1 : acts[a], 0.0f };
                    size_t cbytes = kern_conv2d_scratch(&p, tu_nthreads()), fbytes = kern_conv2d_maxpool_scratch(&p, &q, tu_nthreads());
                    float *cscratch = cbytes ? malloc(cbytes) : NULL;
                    float *fscratch = fbytes ? malloc(fbytes) : NULL;   /* exact size: ASan sees overruns */
                    ck_assert((cbytes == 0 || cscratch) && (fbytes == 0 || fscratch));
                    if (b)
                        kern_conv2d_bias_act(tu_pool, conv_isa, &p, x, w, b, act, conv, cscratch);
                    else
                        kern_conv2d(tu_pool, conv_isa, &p, x, w, conv, cscratch);
                    kern_maxpool(TOP_ISA, &q, conv, want);
                    kern_fill(y, NAN, npool);
                    kern_conv2d_maxpool(tu_pool, conv_isa, &p, &q, x, w, b, act, y, fscratch);
                    if (kern_conv2d_maxpool_exact(&p)) {
                        ck_assert_msg(memcmp(y, want, npool * sizeof *y) == 0,
                                      "conv case %d, pool %d, %s kernels, mode %d, %d threads, act %d: not the bits of the "
                                      "ops apart", _i, pw, kern_isa_name(conv_isa), mode, threads, acts[a]);
                        /* and with the index: the same y, and maxpool_argmax's index of conv */
                        kern_maxpool_argmax(TOP_ISA, &q, conv, widx);
                        kern_fill(y, NAN, npool);
                        memset(idx, 0x55, npool * sizeof *idx);
                        kern_conv2d_maxpool_argmax(tu_pool, conv_isa, &p, &q, x, w, b, act, y, idx, fscratch);
                        ck_assert_msg(memcmp(y, want, npool * sizeof *y) == 0 && memcmp(idx, widx, npool * sizeof *idx) == 0,
                                      "conv case %d, pool %d, %s kernels, mode %d, %d threads, act %d: the argmax's y or "
                                      "index differs from the ops apart", _i, pw, kern_isa_name(conv_isa), mode, threads,
                                      acts[a]);
                        exact++;
                    } else {   /* im2col + sgemm: the values, to rounding (the pass does not fuse these) */
                        ck_assert_floats_near_scaled(y, want, npool, 1e-5);
                    }
                    if (mode >= 3)
                        ck_assert(!kern_conv2d_maxpool_exact(&p));
                    free(cscratch);
                    free(fscratch);
                    tried++;
                }
        free(y);
        free(want);
        free(idx);
        free(widx);
    }
    kern_conv_set_direct(0);
    kern_conv_set_chunk_rows(0);
    kern_conv_set_pool_band(0);
    tu_threads(1);
    ck_assert_int_gt(tried, 0);
    /* the direct kernels' sizes are all exact, on every CPU */
    if (_i < N_DIRECT_CASES + N_WIDE_CASES && !(p.c > 4 && p.f < 8))
        ck_assert_int_gt(exact, 0);
    free(x);
    free(w);
    free(bias);
    free(conv);
}
END_TEST

/* conv2d_maxpool without an index, where the planar path pools in registers (large.net's
 * first layer and its 4x4 pool), applies the bias and relu to each window's maximum
 * rather than to each cell (micro.h's planar_pool): the same value, so long as a cell
 * whose sum is NaN (relu makes it 0) never wins the maximum.  Inputs with NaN and
 * +-inf scattered (sums NaN, +-inf or finite, in windows with positive cells too, and
 * whole windows of NaN) and a bias with NaN and +-inf: the bits of conv2d_bias_act and
 * maxpool apart, every variant, 1 and 2 threads. */
START_TEST(test_conv_maxpool_nonfinite)
{
    static const ConvCase cases[] = {
        /*  n  h   w   c  kh kw f   sh sw pt pl pb pr */
        {3, 18, 70, 3, 3, 3, 8, 2, 2, 0, 0, 1, 1},
        {1, 33, 66, 3, 3, 3, 8, 2, 2, 1, 1, 1, 1},
        {2, 36, 142, 3, 3, 3, 7, 2, 2, 0, 0, 1, 1},
    };
    const ConvCase *k = &cases[_i];
    KConv p = conv_params(k);
    KPool q;
    ck_assert(convpool_pool(&p, &(PoolWin){ 4, 4, 4, 4, false }, &q));
    size_t nx = conv_nx(&p), nw = conv_nw(&p), ny = conv_ny(&p), npool = (size_t)(q.n * q.oh * q.ow * q.c);
    uint64_t seed = 9100 + (uint64_t)_i;
    float *x = tu_alloc_uniform(nx, -1.0f, 1.0f, seed), *w = tu_alloc_uniform(nw, -1.0f, 1.0f, seed + 1);
    float *bias = tu_alloc_uniform((size_t)p.f, -0.5f, 0.5f, seed + 2);
    for (size_t i = 0; i < nx; i += 97)   /* one input in 97: a few cells of most windows */
        x[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
    for (int64_t iy = 0; iy < 10 && iy < p.h; iy++)   /* image 0's first windows: every cell NaN */
        for (int64_t ix = 0; ix < 20; ix++)
            for (int64_t c = 0; c < p.c; c++)
                x[(iy * p.w + ix) * p.c + c] = NAN;
    bias[1] = NAN, bias[2] = INFINITY, bias[3] = -INFINITY;
    float *conv = tu_alloc(ny), *y = tu_alloc(npool), *want = tu_alloc(npool);
    const EwAct relu = { EW_RELU, 0.0f };
    int nan_cells = 0;
    FOR_EACH_ISA for (int threads = 1; threads <= 2; threads++) {
        tu_threads(threads);
        size_t cbytes = kern_conv2d_scratch(&p, tu_nthreads()), fbytes = kern_conv2d_maxpool_scratch(&p, &q, tu_nthreads());
        float *cscratch = cbytes ? malloc(cbytes) : NULL, *fscratch = fbytes ? malloc(fbytes) : NULL;
        ck_assert((cbytes == 0 || cscratch) && (fbytes == 0 || fscratch));
        kern_conv2d(tu_pool, conv_isa, &p, x, w, conv, cscratch);   /* the sums, to see NaNs among them */
        for (size_t i = 0; i < ny; i++)
            nan_cells += isnan(conv[i]);
        kern_conv2d_bias_act(tu_pool, conv_isa, &p, x, w, bias, relu, conv, cscratch);
        kern_maxpool(TOP_ISA, &q, conv, want);
        kern_fill(y, -1.0f, npool);
        kern_conv2d_maxpool(tu_pool, conv_isa, &p, &q, x, w, bias, relu, y, fscratch);
        ck_assert_msg(memcmp(y, want, npool * sizeof *y) == 0,
                      "nonfinite case %d, %s kernels, %d threads: not the bits of the ops apart", _i,
                      kern_isa_name(conv_isa), threads);
        free(cscratch);
        free(fscratch);
    }
    tu_threads(1);
    ck_assert_int_gt(nan_cells, 0);
    free(x), free(w), free(bias), free(conv), free(y), free(want);
}
END_TEST

/* kern_maxpool_scatter_colsum_d of pooled gradient dp (through idx, and mask unless
 * NULL) against kern_colsum_d of its scatter dy (M pixels), in every variant: its
 * pixels cut into 1 to 9 parts, and into three of unequal lengths. */
static void pooled_bias_sums(const KPool *q, const int32_t *idx, const float *mask, const float *dp, const float *dy,
                             int64_t M, int kase, int pw, int relu)
{
    const int64_t F = q->c;
    double want[9 * 256], got[9 * 256];
    ck_assert_int_le(F, 256);
    for (int parts = 1; parts <= 10; parts++) {
        const int np = parts == 10 ? 3 : parts;
        int64_t m[10];
        for (int k = 0; k <= np; k++)
            m[k] = parts == 10 ? (k == 0 ? 0 : k == 1 ? M / 7 : k == 2 ? M / 7 + M / 2 : M) : M * k / np;
        for (int k = 0; k < np; k++)
            kern_colsum_d(dy + m[k] * F, (size_t)(m[k + 1] - m[k]), (size_t)F, want + k * F);
        FOR_EACH_ISA {
            kern_fill((float *)got, NAN, 2 * (size_t)(np * F));
            kern_maxpool_scatter_colsum_d(conv_isa, q, idx, mask, dp, m, np, got);
            for (int k = 0; k < np; k++)
                ck_assert_msg(memcmp(want + k * F, got + k * F, (size_t)F * sizeof *want) == 0,
                              "case %d, pool %d, relu %d, %s kernels: bias sum of pixels [%lld, %lld) (part %d of %d) "
                              "differs", kase, pw, relu, kern_isa_name(conv_isa), (long long)m[k], (long long)m[k + 1],
                              k, np);
        }
    }
}

/* The bias sums through a max pool whose windows tie (conv values of -1, 0 and 1: the
 * argmax takes a window's first maximum, and relu's mask drops the zeros), on images
 * with rows and columns past the last window (borders no window reads), channel
 * counts below, at and past a vector of doubles, windows 2x2 to 4x4. */
START_TEST(test_pooled_bias_ties)
{
    static const int64_t sizes[][5] = {   /* n, h, w, c, window */
        { 1, 9, 70, 8, 4 }, { 2, 7, 33, 3, 2 }, { 3, 10, 19, 13, 3 }, { 1, 16, 64, 16, 4 }, { 2, 6, 41, 1, 2 },
    };
    const int64_t *z = sizes[_i];
    KPool q = { z[0], z[1], z[2], z[3], z[4], z[4], z[4], z[4], 0, 0, z[1] / z[4], z[2] / z[4] };
    ck_assert(kern_maxpool_scatter_sum_ok(&q));
    const size_t ny = (size_t)(q.n * q.h * q.w * q.c), npool = (size_t)(q.n * q.oh * q.ow * q.c);
    float *conv = tu_alloc_uniform(ny, -1.5f, 1.5f, 9300 + (uint64_t)_i), *y = tu_alloc(npool), *dy = tu_alloc(ny);
    float *dp = tu_alloc_uniform(npool, -1.0f, 1.0f, 9301 + (uint64_t)_i);
    int32_t *idx = malloc(npool * sizeof *idx);
    ck_assert(idx);
    for (size_t i = 0; i < ny; i++)
        conv[i] = rintf(conv[i]);
    for (size_t i = 0; i < npool; i += 7)
        dp[i] = i % 2 ? -0.0f : 0.0f;
    kern_maxpool_argmax(TOP_ISA, &q, conv, idx);
    kern_maxpool_gather(TOP_ISA, &q, conv, idx, y);
    for (int relu = 0; relu < 2; relu++) {
        kern_maxpool_scatter(TOP_ISA, &q, idx, relu ? y : NULL, dp, dy);
        pooled_bias_sums(&q, idx, relu ? y : NULL, dp, dy, q.n * q.h * q.w, _i, -1, relu);
    }
    free(conv), free(y), free(dy), free(dp), free(idx);
}
END_TEST

/* The filter and bias gradients through a max pool (kern_conv2d_grad_filter_pooled,
 * kern_maxpool_scatter_colsum_d) give the bits of the scatter and then the dense
 * kernels (kern_conv2d_grad_filter, kern_colsum_d), with and without relu's mask:
 * every convolution size of the tables whose windows do not overlap, in every variant,
 * 1 to 3 threads, over pooled gradients with zeros of both signs.  The conv output's
 * values (and so the index) are random: any routing is one the kernels must follow. */
START_TEST(test_conv_grad_filter_pooled)
{
    const ConvCase *k = any_conv_case(_i);
    KConv p = conv_params(k);
    size_t nx = conv_nx(&p), nw = conv_nw(&p), ny = conv_ny(&p);
    uint64_t seed = 9100 + 10 * (uint64_t)_i;
    float *x = tu_alloc_uniform(nx, -1.0f, 1.0f, seed), *conv = tu_alloc_uniform(ny, -1.0f, 1.0f, seed + 1);
    float *dy = tu_alloc(ny), *want = tu_alloc(nw), *got = tu_alloc(nw);
    int tried = 0;
    for (int pw = 0; pw < N_CONVPOOL_WINDOWS; pw++) {
        KPool q;
        const PoolWin *win = &convpool_windows[pw];
        if (win->same || win->kh != win->sh || win->kw != win->sw || !convpool_pool(&p, win, &q))
            continue;
        size_t npool = (size_t)(q.n * q.oh * q.ow * q.c);
        float *y = tu_alloc(npool), *dp = tu_alloc_uniform(npool, -1.0f, 1.0f, seed + 2);
        int32_t *idx = malloc(npool * sizeof *idx);
        ck_assert(idx);
        for (size_t i = 0; i < npool; i += 5)   /* zeros of both signs: the scatter's 0 + dy */
            dp[i] = i % 2 ? -0.0f : 0.0f;
        kern_maxpool_argmax(TOP_ISA, &q, conv, idx);
        kern_maxpool_gather(TOP_ISA, &q, conv, idx, y);
        if (!kern_conv2d_grad_filter_pooled_exact(&p, &q)) {
            free(y), free(dp), free(idx);
            continue;
        }
        for (int relu = 0; relu < 2; relu++) {
            const float *mask = relu ? y : NULL;
            kern_maxpool_scatter(TOP_ISA, &q, idx, mask, dp, dy);
            /* the bias gradient: pixel ranges that cut rows, as sum_to's parts do (two
             * parts' walks go together while both last, then the longer alone) */
            pooled_bias_sums(&q, idx, mask, dp, dy, p.n * p.oh * p.ow, _i, pw, relu);
            FOR_EACH_ISA for (int threads = 1; threads <= 3; threads++) {
                tu_threads(threads);
                size_t bytes = kern_conv_scratch(&p, KCONV_GRAD_FILTER, tu_nthreads());
                float *scratch = bytes ? malloc(bytes) : NULL;
                ck_assert(bytes == 0 || scratch);
                kern_conv2d_grad_filter(tu_pool, conv_isa, &p, x, dy, want, scratch);
                kern_fill(got, NAN, nw);
                kern_conv2d_grad_filter_pooled(tu_pool, conv_isa, &p, &q, x, idx, mask, dp, got, scratch);
                ck_assert_msg(memcmp(got, want, nw * sizeof *got) == 0,
                              "case %d, pool %d, relu %d, %s kernels, %d threads: not the bits of the scatter and "
                              "the dense filter gradient", _i, pw, relu, kern_isa_name(conv_isa), threads);
                free(scratch);
                tried++;
            }
        }
        free(y), free(dp), free(idx);
    }
    tu_threads(1);
    /* the few-channel sizes whose 2x2 pool fits all take the path */
    if (_i < N_DIRECT_CASES && p.oh >= 2 && p.ow >= 2)
        ck_assert_int_gt(tried, 0);
    free(x), free(conv), free(dy), free(want), free(got);
}
END_TEST

/* The fused op's scratch: per thread a band of conv rows (not the whole output), so
 * it does not grow with the batch. */
START_TEST(test_conv_maxpool_scratch)
{
    KConv p = {256, 28, 28, 1, 5, 5, 32, 1, 1, 2, 2, 28, 28};   /* MNIST's first layer */
    KPool q = {256, 28, 28, 32, 2, 2, 2, 2, 0, 0, 14, 14};
    KConv p1 = p;
    KPool q1 = q;
    p1.n = q1.n = 1;
    tu_threads(2);
    size_t s = kern_conv2d_maxpool_scratch(&p, &q, tu_nthreads());
    ck_assert_uint_eq(s, kern_conv2d_maxpool_scratch(&p1, &q1, tu_nthreads()));
    ck_assert_uint_le(s, 2 * (size_t)(28 * 28 * 32) * sizeof(float));
    tu_threads(1);
}
END_TEST

/* M = 2*96*96 = 18432 output pixels: more than one chunk with the automatic size. */
START_TEST(test_conv_big_m)
{
    ConvCase k = {2, 96, 96, 2, 3, 3, 3, 1, 1, 1, 1, 1, 1};
    KConv p = conv_params(&k);
    size_t K = (size_t)(p.kh * p.kw * p.c);
    size_t bytes = kern_conv2d_scratch(&p, tu_nthreads());
    ck_assert_uint_gt(bytes, 0);
    ck_assert_msg(bytes < (size_t)(p.n * p.oh * p.ow) * K * sizeof(float),
                  "scratch %zu holds the whole im2col matrix", bytes);
    check_conv_case(&p, 0, 4000, 2e-5);
}
END_TEST

/* Every tile shape of the micro-kernels (kernels/micro.h), in every variant, against
 * the loops: rows of 1 to 14, 24 and 25 pixels (tiles of every count up to 12, and rows
 * of 2 and 3 nearly equal tiles); filter counts that leave every number of lanes in a
 * last vector of 16, 8 or 4, in groups of 1, 2, 3 and 4 vectors; kernel rows of 1 to 13,
 * 24 and 25 taps (tap tiles of every count).  Few input channels and many. */
static const int tile_widths[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 24, 25 };
static const int tile_width_filters[] = { 5, 16, 20, 32, 50, 64 };
static const int tile_filters[] = { 1,  2,  3,  5,  7,  8,  9,  12, 15, 16, 17, 20, 24,
                                    31, 32, 33, 40, 47, 48, 49, 56, 63, 64, 65, 80 };
static const struct { int c, kw; } tile_taps[] = {
    { 1, 1 }, { 2, 1 }, { 1, 3 }, { 2, 2 }, { 1, 5 }, { 2, 3 }, { 1, 7 }, { 4, 2 }, { 3, 3 }, { 2, 5 },
    { 1, 11 }, { 4, 3 }, { 1, 13 }, { 8, 3 }, { 5, 5 }, { 6, 1 }, { 12, 1 }, { 16, 1 }, { 7, 2 },
};
#define N_TILE_W ((int)(sizeof tile_widths / sizeof tile_widths[0]))
#define N_TILE_WF ((int)(sizeof tile_width_filters / sizeof tile_width_filters[0]))
#define N_TILE_F ((int)(sizeof tile_filters / sizeof tile_filters[0]))
#define N_TILE_T ((int)(sizeof tile_taps / sizeof tile_taps[0]))
#define N_TILE_CASES (2 * N_TILE_W * N_TILE_WF + 2 * N_TILE_F + N_TILE_T)

/* Case i of the sweep: one image of 3 rows, a 2 x kw kernel, "same" across. */
static KConv tile_case(int i)
{
    int w = 7, f = 20, c, kw = 3;
    if (i < 2 * N_TILE_W * N_TILE_WF) {
        c = i % 2 ? 6 : 2;
        w = tile_widths[i / 2 % N_TILE_W];
        f = tile_width_filters[i / 2 / N_TILE_W];
    } else if ((i -= 2 * N_TILE_W * N_TILE_WF) < 2 * N_TILE_F) {
        c = i % 2 ? 6 : 2;
        f = tile_filters[i / 2];
    } else {
        i -= 2 * N_TILE_F;
        c = tile_taps[i].c;
        kw = tile_taps[i].kw;
        w = 5;
    }
    int pl = (kw - 1) / 2;
    return conv_params(&(ConvCase){ 1, 3, w, c, 2, kw, f, 1, 1, 1, pl, 0, kw - 1 - pl });
}

START_TEST(test_conv_tiles)
{
    KConv p = tile_case(_i);
    if (p.c <= 4 || p.f >= 8)   /* the sizes the direct kernels take */
        ck_assert_msg(kern_conv_direct_used(&p), "case %d: not the direct kernels", _i);
    check_conv_case(&p, 0, 12000 + 10 * (uint64_t)_i, 1e-5);
}
END_TEST

/* The variants agree: the x86 ones (avx2, avx512) bit for bit, every output being the
 * same chain of FMAs in both; the portable one (a*b + c rounded twice) to rounding.
 * Every case of the three tables, one thread and two. */
START_TEST(test_conv_variants_agree)
{
    KConv p = conv_params(any_conv_case(_i));
    size_t nx = conv_nx(&p), nw = conv_nw(&p), ny = conv_ny(&p), nout[KCONV_OP_COUNT] = { ny, nx, nw };
    float *x = tu_alloc_uniform(nx, -1.0f, 1.0f, 300 + (uint64_t)_i), *w = tu_alloc_uniform(nw, -1.0f, 1.0f, 301);
    float *dy = tu_alloc_uniform(ny, -1.0f, 1.0f, 302), *out[KISA_COUNT][KCONV_OP_COUNT];
    for (int threads = 1; threads <= 2; threads++) {
        tu_threads(threads);
        size_t sbytes = kern_conv2d_scratch(&p, tu_nthreads());
        float *scratch = sbytes ? malloc(sbytes) : NULL;
        FOR_EACH_ISA {
            for (int op = 0; op < KCONV_OP_COUNT; op++)
                out[conv_isa][op] = tu_alloc(nout[op]);
            kern_conv2d(tu_pool, conv_isa, &p, x, w, out[conv_isa][0], scratch);
            kern_conv2d_grad_input(tu_pool, conv_isa, &p, dy, w, out[conv_isa][1], scratch);
            kern_conv2d_grad_filter(tu_pool, conv_isa, &p, x, dy, out[conv_isa][2], scratch);
        }
        FOR_EACH_ISA {
            for (int op = 0; op < KCONV_OP_COUNT; op++) {
                if (conv_isa == KISA_AVX512)
                    ck_assert_msg(memcmp(out[KISA_AVX512][op], out[KISA_AVX2][op], nout[op] * sizeof(float)) == 0,
                                  "case %d, op %d, %d threads: avx512 and avx2 differ", _i, op, threads);
                if (conv_isa == KISA_PORTABLE)
                    ck_assert_isa_near(out[KISA_PORTABLE][op], out[isas[0]][op], nout[op], 1e-5);
            }
        }
        FOR_EACH_ISA for (int op = 0; op < KCONV_OP_COUNT; op++)
            free(out[conv_isa][op]);
        free(scratch);
    }
    tu_threads(1);
    free(x);
    free(w);
    free(dy);
}
END_TEST

/* The forward kernel's promise, bit for bit: each output is fmaf(x, w, acc) from +0
 * over the kernel rows that are not padding, then (kx, c) in order (a padding column's
 * x is 0), then + bias and relu.  Shapes whose tiles span rows (a band's rows between
 * the padding's are one run of pixels: fashion-resnet's 7x7 stage, a 2-pixel row whose
 * tiles span 3 rows, stride 2 down) and the many-channel table, on 1 and 2 threads, in
 * the x86 variants (the portable one rounds a*b + c twice). */
static const ConvCase chain_cases[] = {
    /*  n  h  w  c   kh kw f    sh sw pt pl pb pr */
    {2, 7, 7, 24, 3, 3, 128, 1, 1, 1, 1, 1, 1},   /* 7x7, 2 groups of 64: 5 rows of 7 in tiles of 5-6 */
    {1, 9, 2, 16, 3, 3, 64, 1, 1, 1, 1, 1, 1},    /* 2 wide: 7 rows in tiles of 5, 5, 4 */
    {2, 9, 9, 16, 3, 3, 40, 2, 2, 1, 1, 1, 1},    /* stride 2 down and across, 16 + 16 + 8 filters */
    {3, 5, 5, 12, 5, 5, 32, 1, 1, 2, 2, 2, 2},    /* 5x5 on 5x5: one row with all its kernel rows */
};
#define N_CHAIN_CASES ((int)(sizeof chain_cases / sizeof chain_cases[0]))

START_TEST(test_conv_forward_chain)
{
    KConv p = conv_params(_i < N_CHAIN_CASES ? &chain_cases[_i] : &wide_cases[_i - N_CHAIN_CASES]);
    size_t nx = conv_nx(&p), nw = conv_nw(&p), ny = conv_ny(&p);
    float *x = tu_alloc_uniform(nx, -1.0f, 1.0f, 700 + (uint64_t)_i), *w = aligned_alloc(64, (nw + 16) / 16 * 64);
    float *bias = tu_alloc_uniform((size_t)p.f, -0.5f, 0.5f, 702), *want = tu_alloc(ny), *y = tu_alloc(ny);
    ck_assert(w != NULL);
    tu_fill_uniform(w, nw, -1.0f, 1.0f, 701);
    ck_assert(kern_conv_direct_used(&p));
    if (p.f < 8) {   /* forward on im2col + sgemm (other sums); the input gradient only */
        free(x), free(w), free(bias), free(want), free(y);
        return;
    }
    for (int64_t n = 0; n < p.n; n++)
        for (int64_t oy = 0; oy < p.oh; oy++)
            for (int64_t ox = 0; ox < p.ow; ox++)
                for (int64_t f = 0; f < p.f; f++) {
                    float acc = 0.0f;
                    for (int64_t ky = 0; ky < p.kh; ky++) {
                        const int64_t iy = oy * p.sh - p.pt + ky;
                        if (iy < 0 || iy >= p.h)
                            continue;
                        for (int64_t kx = 0; kx < p.kw; kx++)
                            for (int64_t c = 0; c < p.c; c++) {
                                const int64_t ix = ox * p.sw - p.pl + kx;
                                const float xv = ix < 0 || ix >= p.w ? 0.0f : x[((n * p.h + iy) * p.w + ix) * p.c + c];
                                acc = fmaf(xv, w[((ky * p.kw + kx) * p.c + c) * p.f + f], acc);
                            }
                    }
                    acc += bias[f];
                    want[((n * p.oh + oy) * p.ow + ox) * p.f + f] = acc > 0.0f ? acc : 0.0f;
                }
    for (int threads = 1; threads <= 2; threads++) {
        tu_threads(threads);
        size_t sbytes = kern_conv2d_scratch(&p, tu_nthreads());
        float *scratch = sbytes ? malloc(sbytes) : NULL;
        FOR_EACH_ISA {
            if (conv_isa == KISA_PORTABLE)
                continue;
            kern_fill(y, NAN, ny);
            kern_conv2d_bias_act(tu_pool, conv_isa, &p, x, w, bias, (EwAct){ EW_RELU, 0.0f }, y, scratch);
            for (size_t i = 0; i < ny; i++)
                if (memcmp(&y[i], &want[i], sizeof *y) != 0)
                    ck_abort_msg("case %d, %s, %d threads: y[%zu] = %a, the chain gives %a", _i,
                                 kern_isa_name(conv_isa), threads, i, (double)y[i], (double)want[i]);
        }
        free(scratch);
    }
    tu_threads(1);
    free(x);
    free(w);
    free(bias);
    free(want);
    free(y);
}
END_TEST

/* The direct stride-1 input gradient is the forward of the flipped convolution (dy with
 * the filter flipped and transposed, packed by conv_pack_flipped): bit for bit the
 * forward kernel's output for that convolution, called as a forward.  This holds any
 * faster input-gradient kernel to the same chain of FMAs.  The many-channel cases that
 * take that path, and shapes for its tiles: 7x7 maps, 16 + 4 and 32 + 16 + 1 channels
 * (a group of two vectors, then one, masked), a row wider than the strip, a kernel row
 * of more taps than a block; one thread and two, every variant. */
static const ConvCase gradx_cases[] = {
    /*  n  h   w    c   kh kw f    sh sw pt pl pb pr */
    {2, 7, 7, 64, 3, 3, 20, 1, 1, 1, 1, 1, 1},
    {1, 7, 7, 49, 3, 3, 128, 1, 1, 1, 1, 1, 1},
    {1, 3, 200, 20, 3, 3, 24, 1, 1, 1, 1, 1, 1},
    {1, 6, 5, 36, 5, 5, 80, 1, 1, 2, 2, 2, 2},
};
#define N_GRADX_CASES ((int)(sizeof gradx_cases / sizeof gradx_cases[0]))

START_TEST(test_conv_grad_input_bits)
{
    const int nw_ = N_WIDE_CASES;
    KConv p = conv_params(_i < nw_ ? &wide_cases[_i] : &gradx_cases[_i - nw_]);
    if (p.sh != 1 || p.sw != 1 || p.pt > p.kh - 1 || p.pl > p.kw - 1 || p.kh * p.kw == 1)
        return;
    const KConv q = { .n = p.n, .h = p.oh, .w = p.ow, .c = p.f, .kh = p.kh, .kw = p.kw, .f = p.c, .sh = 1, .sw = 1,
                      .pt = p.kh - 1 - p.pt, .pl = p.kw - 1 - p.pl, .oh = p.h, .ow = p.w };
    /* both on the direct strip path (kern_conv_direct_used(&q) also holds where only
     * q's input gradient is direct: fewer than 8 filters go to sgemm) */
    if (!kern_conv_direct_used(&q) || q.c <= 4 || q.f < 8)
        return;
    const size_t nx = conv_nx(&p), nw = conv_nw(&p), ny = conv_ny(&p);
    float *w = tu_alloc_uniform(nw, -1.0f, 1.0f, 400 + (uint64_t)_i), *dy = tu_alloc_uniform(ny, -1.0f, 1.0f, 401);
    float *wq = aligned_alloc(64, (nw + 16) / 16 * 64), *dx = tu_alloc(nx), *want = tu_alloc(nx);
    ck_assert(wq != NULL);
    for (int64_t ky = 0; ky < p.kh; ky++)   /* q's filter [KH, KW, F, C] */
        for (int64_t kx = 0; kx < p.kw; kx++)
            for (int64_t f = 0; f < p.f; f++)
                for (int64_t c = 0; c < p.c; c++)
                    wq[((ky * p.kw + kx) * p.f + f) * p.c + c] =
                        w[(((p.kh - 1 - ky) * p.kw + (p.kw - 1 - kx)) * p.c + c) * p.f + f];
    for (int threads = 1; threads <= 2; threads++) {
        tu_threads(threads);
        size_t sp = kern_conv2d_scratch(&p, tu_nthreads()), sq = kern_conv2d_scratch(&q, tu_nthreads());
        float *scratch = malloc((sp > sq ? sp : sq) + 64);
        ck_assert(scratch != NULL);
        FOR_EACH_ISA {
            kern_fill(dx, NAN, nx);
            kern_fill(want, NAN, nx);
            kern_conv2d_grad_input(tu_pool, conv_isa, &p, dy, w, dx, scratch);
            kern_conv2d(tu_pool, conv_isa, &q, dy, wq, want, scratch);
            ck_assert_msg(memcmp(dx, want, nx * sizeof *dx) == 0, "case %d, %s, %d threads: not the forward's bits", _i,
                          kern_isa_name(conv_isa), threads);
        }
        free(scratch);
    }
    tu_threads(1);
    free(w);
    free(wq);
    free(dy);
    free(dx);
    free(want);
}
END_TEST

/* GRAPHC_ISA's and --isa's names (kern_isa_parse), for a CPU of each kind: a variant
 * above the CPU's best is refused, an unknown name too; kern_isa_resolve never hands
 * out one the CPU cannot run. */
START_TEST(test_isa_names)
{
    static const char *const names[] = { "portable", "avx2", "avx512" };
    for (int cpu = KISA_PORTABLE; cpu < KISA_COUNT; cpu++)
        for (int i = 0; i < 3; i++) {
            KIsa got = KISA_AUTO;
            int rc = kern_isa_parse(names[i], (KIsa)cpu, &got);
            ck_assert_int_eq(got, KISA_PORTABLE + i);
            ck_assert_str_eq(kern_isa_name(got), names[i]);
            ck_assert_int_eq(rc, KISA_PORTABLE + i > cpu ? -2 : 0);
        }
    static const char *const bad[] = { "", "AVX2", "avx", "avx512f", "sse2", "auto", "portable " };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        KIsa got = KISA_AVX2;
        ck_assert_int_eq(kern_isa_parse(bad[i], KISA_AVX512, &got), -1);
    }
    KIsa best = kern_isa_cpu();
    ck_assert(best > KISA_AUTO && best < KISA_COUNT);
    ck_assert_int_eq(kern_isa_resolve(KISA_AUTO), best);
    for (int i = KISA_PORTABLE; i < KISA_COUNT; i++)
        ck_assert_int_eq(kern_isa_resolve((KIsa)i), i <= (int)best ? (KIsa)i : best);
    /* every variant up to the top one tested is, and none the CPU cannot run */
    ck_assert(TOP_ISA <= best);
    ck_assert_int_eq(n_isas, TOP_ISA - KISA_AUTO);
}
END_TEST

START_TEST(test_conv_scratch_bounded)
{
    /* 1080x1920x3 images: the scratch must not grow with the batch or the image. */
    KConv p1 = {1, 1080, 1920, 3, 3, 3, 16, 1, 1, 1, 1, 1080, 1920};
    KConv p64 = p1;
    p64.n = 64;
    size_t s1 = kern_conv2d_scratch(&p1, tu_nthreads()), s64 = kern_conv2d_scratch(&p64, tu_nthreads());
    ck_assert_uint_eq(s1, s64);
    ck_assert_uint_le(s1, (size_t)16 << 20);
    KConv small = {1, 32, 32, 3, 3, 3, 16, 1, 1, 1, 1, 32, 32};
    ck_assert_uint_le(kern_conv2d_scratch(&small, tu_nthreads()), s1);
    /* A large filter (3x3x512) still gets bounded scratch. */
    KConv deep = {256, 14, 14, 512, 3, 3, 512, 1, 1, 1, 1, 14, 14};
    ck_assert_uint_le(kern_conv2d_scratch(&deep, tu_nthreads()), (size_t)16 << 20);
    ck_assert_uint_gt(kern_conv2d_scratch(&deep, tu_nthreads()), 0);
    /* Identity cases need none. */
    KConv one = {8, 56, 56, 64, 1, 1, 256, 1, 1, 0, 0, 56, 56};
    ck_assert_uint_eq(kern_conv2d_scratch(&one, tu_nthreads()), 0);
}
END_TEST

/* Each kernel's scratch is sized by the path it takes (kern_conv_scratch), so it must
 * cover everything the kernel touches: every case of the three tables, with 1 to 3
 * threads, automatic chunks and chunks of 1 and 7 pixels, the direct kernels on and off.
 * The scratch and SCRATCH_GUARD floats past it are filled with a NaN: the guard must come
 * back unchanged (nothing written past the scratch) and the results must still match
 * the direct loops (a poisoned float read past the scratch, or scratch read before it is
 * written, would turn up in them).  A kernel that asks for none gets the guard itself. */
enum { SCRATCH_GUARD = 4096 };
static const uint32_t scratch_poison = 0x7fc0dead;   /* a quiet NaN */

static void check_conv_scratch_guard(const KConv *p, uint64_t seed)
{
    size_t nx = conv_nx(p), nw = conv_nw(p), ny = conv_ny(p);
    size_t nout[KCONV_OP_COUNT] = { ny, nx, nw };
    float *x = tu_alloc_uniform(nx, -1.0f, 1.0f, seed), *w = tu_alloc_uniform(nw, -1.0f, 1.0f, seed + 1);
    float *dy = tu_alloc_uniform(ny, -1.0f, 1.0f, seed + 2);
    float *want[KCONV_OP_COUNT], *got[KCONV_OP_COUNT];
    for (int op = 0; op < KCONV_OP_COUNT; op++) {
        want[op] = tu_alloc(nout[op]);
        got[op] = tu_alloc(nout[op]);
        ref_conv(p, op, x, w, dy, want[op]);   /* modes 0, 1, 2: the KConvOp order */
    }
    static const size_t chunk_rows[] = { 0, 1, 7 };
    const bool takes_direct = kern_conv_direct_used(p);
    for (int threads = 1; threads <= 3; threads++) {
        tu_threads(threads);
        FOR_EACH_ISA for (int direct = 0; direct < 2; direct++)
            for (size_t r = 0; r < sizeof chunk_rows / sizeof chunk_rows[0] && !ISA_ADDS_NOTHING(direct && takes_direct); r++)
                for (int op = 0; op < KCONV_OP_COUNT; op++) {
                    kern_conv_set_direct(direct ? 0 : -1);
                    kern_conv_set_chunk_rows(chunk_rows[r]);
                    size_t fl = kern_conv_scratch(p, (KConvOp)op, tu_nthreads()) / sizeof(float), total = fl + SCRATCH_GUARD;
                    uint32_t *buf = malloc(total * sizeof *buf);
                    ck_assert_ptr_nonnull(buf);
                    for (size_t i = 0; i < total; i++)
                        buf[i] = scratch_poison;
                    float *scratch = (float *)buf;
                    if (op == KCONV_FORWARD)
                        kern_conv2d(tu_pool, conv_isa, p, x, w, got[op], scratch);
                    else if (op == KCONV_GRAD_INPUT)
                        kern_conv2d_grad_input(tu_pool, conv_isa, p, dy, w, got[op], scratch);
                    else
                        kern_conv2d_grad_filter(tu_pool, conv_isa, p, x, dy, got[op], scratch);
                    size_t past = fl;   /* the first float past the scratch that was written */
                    while (past < total && buf[past] == scratch_poison)
                        past++;
                    ck_assert_msg(past == total, "op %d, %d threads, chunks of %zu, direct %d, %s kernels: wrote float %zu of "
                                  "a scratch of %zu", op, threads, chunk_rows[r], direct, kern_isa_name(conv_isa), past, fl);
                    ck_assert_isa_near(got[op], want[op], nout[op], 1e-5);
                    free(buf);
                }
    }
    kern_conv_set_direct(0);
    tu_threads(1);
    kern_conv_set_chunk_rows(0);
    for (int op = 0; op < KCONV_OP_COUNT; op++) {
        free(want[op]);
        free(got[op]);
    }
    free(x);
    free(w);
    free(dy);
}

START_TEST(test_conv_scratch_guard)
{
    const ConvCase *k = any_conv_case(_i);
    KConv p = conv_params(k);
    check_conv_scratch_guard(&p, 11000 + 10 * (uint64_t)_i);
}
END_TEST

/* The scratch follows the path: at resnet's block size (16 channels, 3x3, "same") with 2
 * threads the direct kernels need only the packed filter (forward, input gradient) and
 * the two threads' [K, F] sums (filter gradient), not the 1 MiB im2col chunks; the
 * few-channel first layer's forward pass only its packed filter; the filter gradient
 * on one thread sums straight into dw, and so does a convolution too small to share
 * (83 kFLOP) on two. */
START_TEST(test_conv_scratch_by_path)
{
    const size_t KF = 3 * 3 * 16 * 16 * sizeof(float);
    KConv block = conv_params(&(ConvCase){ 16, 28, 28, 16, 3, 3, 16, 1, 1, 1, 1, 1, 1 });
    KConv first = conv_params(&(ConvCase){ 16, 28, 28, 1, 3, 3, 16, 1, 1, 1, 1, 1, 1 });
    tu_threads(2);
    ck_assert_uint_eq(kern_conv_scratch(&block, KCONV_FORWARD, tu_nthreads()), KF);
    ck_assert_uint_eq(kern_conv_scratch(&block, KCONV_GRAD_INPUT, tu_nthreads()), KF);
    ck_assert_uint_eq(kern_conv_scratch(&block, KCONV_GRAD_FILTER, tu_nthreads()), 2 * KF);
    ck_assert_uint_eq(kern_conv_scratch(&first, KCONV_FORWARD, tu_nthreads()), 3 * 3 * 1 * 16 * sizeof(float));
    KConv tiny = conv_params(&(ConvCase){ 1, 6, 6, 8, 3, 3, 16, 1, 1, 1, 1, 1, 1 });
    ck_assert(kern_conv_direct_used(&tiny));
    ck_assert_uint_eq(kern_conv_scratch(&tiny, KCONV_GRAD_FILTER, tu_nthreads()), 0);
    kern_conv_set_direct(-1);   /* im2col: a chunk per thread */
    ck_assert_uint_ge(kern_conv_scratch(&block, KCONV_GRAD_INPUT, tu_nthreads()), 2 * 256 * (size_t)(3 * 3 * 16) * sizeof(float));
    kern_conv_set_direct(0);
    tu_threads(1);
    ck_assert_uint_eq(kern_conv_scratch(&block, KCONV_GRAD_FILTER, tu_nthreads()), 0);
}
END_TEST

typedef struct ConvCtx {
    const KConv *p;
    const float *x, *w;
    float *scratch;
    int wrt;   /* 0: function of x, 1: of w */
} ConvCtx;

static void conv_fn(void *vc, const float *v, float *y)
{
    const ConvCtx *c = vc;
    kern_conv2d(tu_pool, conv_isa, c->p, c->wrt == 0 ? v : c->x, c->wrt == 1 ? v : c->w, y, c->scratch);
}

START_TEST(test_conv_grad_fd)
{
    KConv p = conv_params(&conv_cases[_i]);
    size_t nx = conv_nx(&p), nw = conv_nw(&p), ny = conv_ny(&p);
    uint64_t seed = 5000 + 10 * (uint64_t)_i;
    float *x = tu_alloc_uniform(nx, -1.0f, 1.0f, seed), *w = tu_alloc_uniform(nw, -1.0f, 1.0f, seed + 1);
    float *dy = tu_alloc_uniform(ny, -1.0f, 1.0f, seed + 2), *dx = tu_alloc(nx), *dw = tu_alloc(nw);
    kern_conv_set_chunk_rows(5);   /* several chunks, so grad_filter accumulates */
    size_t sbytes = kern_conv2d_scratch(&p, tu_nthreads());
    float *scratch = sbytes ? malloc(sbytes) : NULL;
    kern_conv2d_grad_input(tu_pool, conv_isa, &p, dy, w, dx, scratch);
    kern_conv2d_grad_filter(tu_pool, conv_isa, &p, x, dy, dw, scratch);
    ConvCtx ctx = {&p, x, w, scratch, 0};
    ck_assert_grad_fd(conv_fn, &ctx, x, nx, ny, dy, dx, FD_EPS, FD_RTOL, FD_ATOL);
    ctx.wrt = 1;
    ck_assert_grad_fd(conv_fn, &ctx, w, nw, ny, dy, dw, FD_EPS, FD_RTOL, FD_ATOL);
    kern_conv_set_chunk_rows(0);
    free(x);
    free(w);
    free(dy);
    free(dx);
    free(dw);
    free(scratch);
}
END_TEST

/* ================================================================================
 * Pooling
 * ================================================================================ */

typedef struct PoolCase {
    int64_t n, h, w, c, kh, kw, sh, sw, pt, pl, pb, pr;
} PoolCase;

static const PoolCase pool_cases[] = {
    /*  n  h  w  c  kh kw sh sw pt pl pb pr */
    {2, 6, 6, 3, 2, 2, 2, 2, 0, 0, 0, 0},   /* the usual 2x2/2 */
    {1, 7, 5, 2, 3, 3, 2, 2, 1, 1, 1, 1},   /* padded */
    {2, 5, 6, 4, 3, 2, 1, 2, 1, 0, 1, 0},   /* overlapping, non-square */
    {1, 4, 4, 1, 3, 3, 1, 1, 2, 2, 2, 2},   /* heavy padding */
    {1, 3, 3, 2, 2, 2, 1, 1, 2, 2, 2, 2},   /* windows of padding only */
    {3, 5, 7, 300, 3, 3, 2, 2, 1, 1, 1, 1}, /* channels across the 256 block */
    {2, 6, 4, 32, 2, 2, 2, 2, 0, 0, 0, 0},  /* the MNIST CNN's pooling, smaller */
    {1, 7, 7, 7, 2, 2, 2, 2, 0, 0, 0, 0},   /* odd size: the last row and column in no window */
    {2, 5, 5, 9, 3, 3, 3, 3, 1, 1, 1, 1},   /* channels past a multiple of 4 */
    {2, 9, 7, 17, 2, 2, 2, 2, 0, 0, 1, 1},  /* odd size, "same": the last windows clipped */
    {1, 5, 6, 33, 3, 3, 3, 3, 0, 0, 1, 0},  /* 3x3/3, channels one past a vector multiple */
    {1, 6, 6, 5, 2, 2, 3, 3, 0, 0, 0, 0},   /* stride past the window: cells in no window */
    {1, 4, 4, 3, 9, 9, 1, 1, 4, 4, 4, 4},   /* windows of more than 64 cells */
};
#define N_POOL_CASES ((int)(sizeof pool_cases / sizeof pool_cases[0]))

static KPool pool_params(const PoolCase *k)
{
    KPool p = {k->n, k->h, k->w, k->c, k->kh, k->kw, k->sh, k->sw, k->pt, k->pl,
               (k->h + k->pt + k->pb - k->kh) / k->sh + 1, (k->w + k->pl + k->pr - k->kw) / k->sw + 1};
    return p;
}

static size_t pool_nx(const KPool *p) { return (size_t)(p->n * p->h * p->w * p->c); }
static size_t pool_ny(const KPool *p) { return (size_t)(p->n * p->oh * p->ow * p->c); }

/* Direct pooling: forward (max or mean over real cells, 0 for an empty window) and,
 * when dy is given, the gradient into dx (max: the first maximal cell in row-major
 * window order). */
static void ref_pool(const KPool *p, bool is_max, const float *x, float *y, const float *dy, float *dx)
{
    if (dx)
        memset(dx, 0, pool_nx(p) * sizeof *dx);
    for (int64_t n = 0; n < p->n; n++)
        for (int64_t oy = 0; oy < p->oh; oy++)
            for (int64_t ox = 0; ox < p->ow; ox++)
                for (int64_t c = 0; c < p->c; c++) {
                    double best = -INFINITY, sum = 0;
                    int64_t cnt = 0, arg = -1;
                    for (int64_t ky = 0; ky < p->kh; ky++)
                        for (int64_t kx = 0; kx < p->kw; kx++) {
                            int64_t iy = oy * p->sh - p->pt + ky, ix = ox * p->sw - p->pl + kx;
                            if (iy < 0 || iy >= p->h || ix < 0 || ix >= p->w)
                                continue;
                            int64_t xi = ((n * p->h + iy) * p->w + ix) * p->c + c;
                            if (x && x[xi] > best) {
                                best = x[xi];
                                arg = xi;
                            }
                            if (x)
                                sum += x[xi];
                            cnt++;
                        }
                    size_t yi = (size_t)(((n * p->oh + oy) * p->ow + ox) * p->c + c);
                    if (y)
                        y[yi] = cnt == 0 ? 0.0f : (float)(is_max ? best : sum / (double)cnt);
                    if (!dx || cnt == 0)
                        continue;
                    if (is_max) {
                        dx[arg] += dy[yi];
                        continue;
                    }
                    for (int64_t ky = 0; ky < p->kh; ky++)
                        for (int64_t kx = 0; kx < p->kw; kx++) {
                            int64_t iy = oy * p->sh - p->pt + ky, ix = ox * p->sw - p->pl + kx;
                            if (iy >= 0 && iy < p->h && ix >= 0 && ix < p->w)
                                dx[((n * p->h + iy) * p->w + ix) * p->c + c] += dy[yi] / (float)cnt;
                        }
                }
}

/* x with all values distinct and at least 0.02 apart (a shuffled ramp), so that
 * finite differences of max pooling never cross a tie. */
static float *distinct_inputs(size_t n, uint64_t seed)
{
    float *x = tu_alloc(n);
    for (size_t i = 0; i < n; i++)
        x[i] = -1.0f + 0.02f * (float)i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)rng_below(rng_at(seed, TU_STREAM, i), i);
        float t = x[i - 1];
        x[i - 1] = x[j];
        x[j] = t;
    }
    return x;
}

START_TEST(test_pool_vs_direct)
{
    KPool p = pool_params(&pool_cases[_i]);
    size_t nx = pool_nx(&p), ny = pool_ny(&p);
    float *x = tu_alloc_uniform(nx, -1.0f, 1.0f, 6000 + (uint64_t)_i);
    float *dy = tu_alloc_uniform(ny, -1.0f, 1.0f, 6100 + (uint64_t)_i);
    float *y = tu_alloc(ny), *wy = tu_alloc(ny), *dx = tu_alloc(nx), *wdx = tu_alloc(nx);
    for (int is_max = 0; is_max < 2; is_max++) {
        ref_pool(&p, is_max, x, wy, dy, wdx);
        kern_fill(y, NAN, ny);
        kern_fill(dx, NAN, nx);
        if (is_max) {
            kern_maxpool(TOP_ISA, &p, x, y);
            ck_assert_floats_near(y, wy, ny, 0.0, 0.0);
            kern_maxpool_grad(&p, x, y, dy, dx);
        } else {
            kern_avgpool(&p, x, y);
            ck_assert_floats_near(y, wy, ny, 1e-6, 1e-7);
            kern_avgpool_grad(&p, dy, dx);
        }
        ck_assert_floats_near(dx, wdx, nx, 1e-6, 1e-6);
    }
    free(x);
    free(dy);
    free(y);
    free(wy);
    free(dx);
    free(wdx);
}
END_TEST

/* The cell (iy * w + ix) of each window's first maximum in row-major window order, -1
 * for a window of padding only. */
static void ref_argmax(const KPool *p, const float *x, int32_t *idx)
{
    for (int64_t n = 0; n < p->n; n++)
        for (int64_t oy = 0; oy < p->oh; oy++)
            for (int64_t ox = 0; ox < p->ow; ox++)
                for (int64_t c = 0; c < p->c; c++) {
                    int32_t arg = -1;
                    for (int64_t ky = 0; ky < p->kh; ky++)
                        for (int64_t kx = 0; kx < p->kw; kx++) {
                            int64_t iy = oy * p->sh - p->pt + ky, ix = ox * p->sw - p->pl + kx;
                            if (iy < 0 || iy >= p->h || ix < 0 || ix >= p->w) continue;
                            const float *xn = x + n * p->h * p->w * p->c;
                            if (arg < 0 || xn[(iy * p->w + ix) * p->c + c] > xn[arg * p->c + c])
                                arg = (int32_t)(iy * p->w + ix);
                        }
                    idx[((n * p->oh + oy) * p->ow + ox) * p->c + c] = arg;
                }
}

/* Max pooling through indices against the reference loops and the direct kernels, bit
 * for bit, in every variant, on every pool case, with many ties (values on a coarse
 * grid, a relu's zeros among them): maxpool and gather give the reference's y, argmax
 * its first maximal cells, scatter maxpool_grad's dx (a dy of -0 included), scatter
 * with y that dx masked by relu's gradient (x > 0). */
START_TEST(test_maxpool_indices)
{
    KPool p = pool_params(&pool_cases[_i]);
    size_t nx = pool_nx(&p), ny = pool_ny(&p);
    float *x = tu_alloc_uniform(nx, -1.0f, 1.0f, 6200 + (uint64_t)_i);
    for (size_t i = 0; i < nx; i++) x[i] = x[i] < 0 ? 0.0f : floorf(x[i] * 4) / 4;   /* relu output, ties */
    float *dy = tu_alloc_uniform(ny, -1.0f, 1.0f, 6300 + (uint64_t)_i);
    for (size_t i = 0; i < ny; i += 7) dy[i] = -0.0f;   /* 0 + -0 is +0: dx's bits must say so */
    float *y = tu_alloc(ny), *y2 = tu_alloc(ny), *dx = tu_alloc(nx), *dx2 = tu_alloc(nx);
    int32_t *idx = malloc(ny * sizeof *idx), *want = malloc(ny * sizeof *want);
    ref_pool(&p, true, x, y, NULL, NULL);
    ref_argmax(&p, x, want);
    FOR_EACH_ISA {
        const char *isa = kern_isa_name(conv_isa);
        kern_fill(y2, NAN, ny);
        kern_maxpool(conv_isa, &p, x, y2);
        ck_assert_msg(!memcmp(y, y2, ny * sizeof *y), "%s: maxpool's y", isa);
        kern_maxpool_argmax(conv_isa, &p, x, idx);
        for (size_t i = 0; i < ny; i++)
            ck_assert_msg(idx[i] == want[i], "%s: output %zu: cell %d, want %d", isa, i, idx[i], want[i]);
        kern_fill(y2, NAN, ny);
        kern_maxpool_gather(conv_isa, &p, x, idx, y2);
        ck_assert_msg(!memcmp(y, y2, ny * sizeof *y), "%s: gather's y", isa);
        kern_maxpool_grad(&p, x, y, dy, dx);
        kern_fill(dx2, NAN, nx);
        kern_maxpool_scatter(conv_isa, &p, idx, NULL, dy, dx2);
        ck_assert_msg(!memcmp(dx, dx2, nx * sizeof *dx), "%s: scatter's dx", isa);
        kern_relu_mask(x, dx, nx);
        kern_fill(dx2, NAN, nx);
        kern_maxpool_scatter(conv_isa, &p, idx, y, dy, dx2);
        for (size_t i = 0; i < nx; i++)   /* equal, up to the sign of a zero */
            ck_assert_msg(dx[i] == dx2[i], "%s: element %zu: %g and %g", isa, i, (double)dx[i], (double)dx2[i]);
    }
    free(x);
    free(dy);
    free(y);
    free(y2);
    free(dx);
    free(dx2);
    free(idx);
    free(want);
}
END_TEST

/* Ties: the gradient goes to the first maximal cell of each window, only once. */
START_TEST(test_maxpool_ties)
{
    PoolCase k = {1, 5, 5, 2, 3, 3, 1, 1, 1, 1, 1, 1};
    KPool p = pool_params(&k);
    size_t nx = pool_nx(&p), ny = pool_ny(&p);
    float *x = tu_alloc(nx), *y = tu_alloc(ny), *dy = tu_alloc(ny), *dx = tu_alloc(nx), *wdx = tu_alloc(nx);
    kern_fill(x, 0.5f, nx);
    kern_fill(dy, 1.0f, ny);
    kern_maxpool(TOP_ISA, &p, x, y);
    for (size_t i = 0; i < ny; i++)
        ck_assert_float_near_rel(y[i], 0.5, 0.0, 0.0);
    kern_maxpool_grad(&p, x, y, dy, dx);
    ref_pool(&p, true, x, NULL, dy, wdx);
    ck_assert_floats_near(dx, wdx, nx, 0.0, 0.0);
    double total = 0;
    for (size_t i = 0; i < nx; i++)
        total += dx[i];
    ck_assert_float_near_rel(total, (double)ny, 0.0, 0.0);   /* one cell per window */
    /* Output (0,0)'s window is the top-left 2x2 real cells: its first is (0,0). */
    ck_assert_float_near_rel(dx[0], 4.0, 0.0, 0.0);   /* windows at (0,0),(0,1),(1,0),(1,1) */
    free(x);
    free(y);
    free(dy);
    free(dx);
    free(wdx);
}
END_TEST

/* maxpool_grad_relu gives the bits of maxpool_grad then relu_mask, on inputs with ties,
 * zeros and negative values (x in quarters from -1 to 1), and dx right without it. */
START_TEST(test_maxpool_grad_relu)
{
    KPool p = pool_params(&pool_cases[_i]);
    size_t nx = pool_nx(&p), ny = pool_ny(&p);
    float *x = tu_alloc_uniform(nx, -1.0f, 1.0f, 6200 + (uint64_t)_i);
    float *dy = tu_alloc_uniform(ny, -1.0f, 1.0f, 6300 + (uint64_t)_i);
    float *y = tu_alloc(ny), *dx = tu_alloc(nx), *want = tu_alloc(nx);
    for (size_t i = 0; i < nx; i++)
        x[i] = roundf(x[i] * 4.0f) / 4.0f;
    kern_maxpool(TOP_ISA, &p, x, y);
    kern_fill(want, NAN, nx);
    kern_maxpool_grad(&p, x, y, dy, want);
    kern_relu_mask(x, want, nx);
    kern_fill(dx, NAN, nx);
    kern_maxpool_grad_relu(&p, x, y, dy, dx);
    ck_assert_mem_eq(dx, want, nx * sizeof *dx);
    ref_pool(&p, true, x, NULL, dy, want);
    for (size_t i = 0; i < nx; i++)
        want[i] = x[i] > 0.0f ? want[i] : 0.0f;
    ck_assert_floats_near(dx, want, nx, 1e-6, 1e-6);
    free(x);
    free(dy);
    free(y);
    free(dx);
    free(want);
}
END_TEST

typedef struct PoolCtx {
    const KPool *p;
    int kind;   /* 0 max, 1 avg, 2 global avg */
    size_t n, hw, c;
} PoolCtx;

static void pool_fn(void *vc, const float *x, float *y)
{
    const PoolCtx *c = vc;
    if (c->kind == 0)
        kern_maxpool(TOP_ISA, c->p, x, y);
    else if (c->kind == 1)
        kern_avgpool(c->p, x, y);
    else
        kern_global_avgpool(x, y, c->n, c->hw, c->c);
}

START_TEST(test_pool_grad_fd)
{
    KPool p = pool_params(&pool_cases[_i]);
    if (p.c > 8)
        p.c = 3;   /* keep finite differences quick */
    size_t nx = pool_nx(&p), ny = pool_ny(&p);
    float *x = distinct_inputs(nx, 7000 + (uint64_t)_i), *y = tu_alloc(ny), *dx = tu_alloc(nx);
    float *dy = tu_alloc_uniform(ny, -1.0f, 1.0f, 7100 + (uint64_t)_i);
    PoolCtx ctx = {&p, 0, 0, 0, 0};
    kern_maxpool(TOP_ISA, &p, x, y);
    kern_maxpool_grad(&p, x, y, dy, dx);
    ck_assert_grad_fd(pool_fn, &ctx, x, nx, ny, dy, dx, 1e-3f, FD_RTOL, FD_ATOL);
    ctx.kind = 1;
    kern_avgpool_grad(&p, dy, dx);
    ck_assert_grad_fd(pool_fn, &ctx, x, nx, ny, dy, dx, FD_EPS, FD_RTOL, FD_ATOL);
    free(x);
    free(y);
    free(dx);
    free(dy);
}
END_TEST

START_TEST(test_global_avgpool)
{
    static const size_t shapes[][3] = {{2, 9, 3}, {3, 1, 5}, {1, 49, 300}, {4, 6, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t n = shapes[s][0], hw = shapes[s][1], c = shapes[s][2];
        float *x = tu_alloc_uniform(n * hw * c, -1.0f, 1.0f, 8000 + s), *y = tu_alloc(n * c), *want = tu_alloc(n * c);
        for (size_t b = 0; b < n; b++)
            for (size_t j = 0; j < c; j++) {
                double sum = 0;
                for (size_t i = 0; i < hw; i++)
                    sum += x[(b * hw + i) * c + j];
                want[b * c + j] = (float)(sum / (double)hw);
            }
        kern_global_avgpool(x, y, n, hw, c);
        ck_assert_floats_near(y, want, n * c, 1e-6, 1e-7);
        float *dy = tu_alloc_uniform(n * c, -1.0f, 1.0f, 8100 + s), *dx = tu_alloc(n * hw * c);
        kern_global_avgpool_grad(dy, dx, n, hw, c);
        for (size_t b = 0; b < n; b++)
            for (size_t i = 0; i < hw; i++)
                for (size_t j = 0; j < c; j++)
                    ck_assert_float_near_rel(dx[(b * hw + i) * c + j], dy[b * c + j] / (double)hw, 1e-6, 0.0);
        if (n * hw * c <= 200) {
            PoolCtx ctx = {NULL, 2, n, hw, c};
            ck_assert_grad_fd(pool_fn, &ctx, x, n * hw * c, n * c, dy, dx, FD_EPS, FD_RTOL, FD_ATOL);
        }
        free(x);
        free(y);
        free(want);
        free(dy);
        free(dx);
    }
}
END_TEST

/* ================================================================================
 * Dropout
 * ================================================================================ */

START_TEST(test_dropout_mask)
{
    const size_t n = 100000;
    const float rate = 0.3f;
    const uint64_t seed = 1234, stream = 7;
    float *x = tu_alloc(n), *y = tu_alloc(n), *y2 = tu_alloc(n), *y3 = tu_alloc(n);
    kern_fill(x, 1.0f, n);
    kern_dropout(x, y, n, rate, seed, stream, 0);
    kern_dropout(x, y2, n, rate, seed, stream, 0);
    ck_assert_int_eq(memcmp(y, y2, n * sizeof *y), 0);   /* deterministic */
    kern_dropout(x, y3, n, rate, seed, stream + 1, 0);
    size_t differ = 0, kept = 0;
    const float scale = 1.0f / (1.0f - rate);
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        bool keep = rng_unit(rng_at(seed, stream, i)) >= rate;   /* the documented mask */
        ck_assert_msg(keep ? y[i] == scale : y[i] == 0.0f, "element %zu: %g", i, (double)y[i]);
        kept += keep;
        differ += (y[i] != 0.0f) != (y3[i] != 0.0f);
        sum += y[i];
    }
    /* Another stream gives another mask: about 2 p (1-p) of the elements differ. */
    ck_assert_uint_gt(differ, n / 3);
    /* Keep rate within 5 standard deviations of 1 - rate. */
    double p = 1.0 - rate, sd = sqrt(p * (1 - p) / (double)n);
    ck_assert_float_near_rel((double)kept / (double)n, p, 0.0, 5 * sd);
    /* Inverted scaling preserves the mean: E[y] = 1. */
    ck_assert_float_near_rel(sum / (double)n, 1.0, 0.0, 5 * sd / p);
    /* Two shards placed with `first` make the whole tensor's mask (data-parallel ranks
     * each hold rows of the global batch); a shard placed at 0 would not. */
    size_t h = n / 2 + 7;
    memset(y2, 0xff, n * sizeof *y2);
    kern_dropout(x, y2, h, rate, seed, stream, 0);
    kern_dropout(x + h, y2 + h, n - h, rate, seed, stream, h);
    ck_assert_int_eq(memcmp(y, y2, n * sizeof *y), 0);
    kern_dropout(x + h, y2 + h, n - h, rate, seed, stream, 0);
    ck_assert_int_ne(memcmp(y, y2, n * sizeof *y), 0);
    free(x);
    free(y);
    free(y2);
    free(y3);
}
END_TEST

START_TEST(test_dropout_edges)
{
    const size_t n = 1000;
    float *x = tu_alloc_uniform(n, -1.0f, 1.0f, 9000), *y = tu_alloc(n);
    kern_dropout(x, y, n, 0.0f, 1, 2, 0);
    ck_assert_floats_near(y, x, n, 0.0, 0.0);
    kern_dropout(x, y, n, 1.0f, 1, 2, 0);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(y[i] == 0.0f, "rate 1 kept element %zu", i);
    /* Values are scaled, not just masked. */
    kern_dropout(x, y, n, 0.5f, 3, 4, 0);
    for (size_t i = 0; i < n; i++)
        ck_assert(y[i] == 0.0f || y[i] == 2.0f * x[i]);
    free(x);
    free(y);
}
END_TEST

typedef struct DropCtx {
    size_t n;
    float rate;
    uint64_t seed, stream;
} DropCtx;

static void dropout_fn(void *vc, const float *x, float *y)
{
    const DropCtx *c = vc;
    kern_dropout(x, y, c->n, c->rate, c->seed, c->stream, 0);
}

START_TEST(test_dropout_grad)
{
    DropCtx ctx = {200, 0.4f, 99, 3};
    float *x = tu_alloc_uniform(ctx.n, -1.0f, 1.0f, 9100), *y = tu_alloc(ctx.n);
    float *dy = tu_alloc_uniform(ctx.n, -1.0f, 1.0f, 9101), *dx = tu_alloc(ctx.n);
    kern_dropout(x, y, ctx.n, ctx.rate, ctx.seed, ctx.stream, 0);
    kern_dropout_grad(dy, dx, ctx.n, ctx.rate, ctx.seed, ctx.stream, 0);
    for (size_t i = 0; i < ctx.n; i++)   /* the same mask and scale */
        ck_assert(y[i] == 0.0f ? dx[i] == 0.0f : dx[i] == dy[i] * (1.0f / (1.0f - ctx.rate)));
    ck_assert_grad_fd(dropout_fn, &ctx, x, ctx.n, ctx.n, dy, dx, FD_EPS, FD_RTOL, FD_ATOL);
    free(x);
    free(y);
    free(dy);
    free(dx);
}
END_TEST

/* ================================================================================
 * Optimizers
 * ================================================================================ */

enum { OPT_N = 17, OPT_STEPS = 4 };

START_TEST(test_sgd)
{
    float w[OPT_N], g[OPT_N];
    tu_fill_uniform(w, OPT_N, -1.0f, 1.0f, 9200);
    double ref[OPT_N];
    for (int i = 0; i < OPT_N; i++)
        ref[i] = w[i];
    for (int s = 0; s < OPT_STEPS; s++) {
        tu_fill_uniform(g, OPT_N, -1.0f, 1.0f, 9210 + (uint64_t)s);
        kern_sgd(w, g, OPT_N, 0.1f);
        for (int i = 0; i < OPT_N; i++)
            ref[i] -= 0.1 * g[i];
    }
    for (int i = 0; i < OPT_N; i++)
        ck_assert_float_near_rel(w[i], ref[i], 1e-5, 1e-6);
}
END_TEST

START_TEST(test_momentum)
{
    const bool nesterov = _i == 1;
    const float lr = 0.05f, mu = 0.9f;
    float w[OPT_N], v[OPT_N] = {0}, g[OPT_N];
    double rw[OPT_N], rv[OPT_N] = {0};
    tu_fill_uniform(w, OPT_N, -1.0f, 1.0f, 9300);
    for (int i = 0; i < OPT_N; i++)
        rw[i] = w[i];
    for (int s = 0; s < OPT_STEPS; s++) {
        tu_fill_uniform(g, OPT_N, -1.0f, 1.0f, 9310 + (uint64_t)s);
        kern_momentum(w, v, g, OPT_N, lr, mu, nesterov);
        for (int i = 0; i < OPT_N; i++) {   /* PyTorch SGD with momentum, dampening 0 */
            rv[i] = mu * rv[i] + g[i];
            rw[i] -= lr * (nesterov ? g[i] + mu * rv[i] : rv[i]);
        }
    }
    for (int i = 0; i < OPT_N; i++) {
        ck_assert_float_near_rel(v[i], rv[i], 1e-5, 1e-6);
        ck_assert_float_near_rel(w[i], rw[i], 1e-5, 1e-6);
    }
    /* One step by hand: v = g, w -= lr * (1 + mu) g with Nesterov, lr * g without. */
    float w1 = 1.0f, v1 = 0.0f, g1 = 2.0f;
    kern_momentum(&w1, &v1, &g1, 1, 0.1f, 0.5f, nesterov);
    ck_assert_float_near_rel(v1, 2.0, 0.0, 0.0);
    ck_assert_float_near_rel(w1, nesterov ? 1.0 - 0.1 * 3.0 : 1.0 - 0.1 * 2.0, 1e-6, 0.0);
}
END_TEST

START_TEST(test_adam)
{
    const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float w[OPT_N], m[OPT_N] = {0}, v[OPT_N] = {0}, g[OPT_N];
    double rw[OPT_N], rm[OPT_N] = {0}, rv[OPT_N] = {0};
    tu_fill_uniform(w, OPT_N, -1.0f, 1.0f, 9400);
    for (int i = 0; i < OPT_N; i++)
        rw[i] = w[i];
    for (int t = 1; t <= OPT_STEPS; t++) {
        tu_fill_uniform(g, OPT_N, -1.0f, 1.0f, 9410 + (uint64_t)t);
        kern_adam(TOP_ISA, w, m, v, g, OPT_N, lr, b1, b2, eps, t);
        for (int i = 0; i < OPT_N; i++) {
            rm[i] = b1 * rm[i] + (1 - (double)b1) * g[i];
            rv[i] = b2 * rv[i] + (1 - (double)b2) * g[i] * g[i];
            double mhat = rm[i] / (1 - pow(b1, t)), vhat = rv[i] / (1 - pow(b2, t));
            rw[i] -= lr * mhat / (sqrt(vhat) + eps);
        }
    }
    for (int i = 0; i < OPT_N; i++) {
        ck_assert_float_near_rel(m[i], rm[i], 1e-5, 1e-7);
        ck_assert_float_near_rel(v[i], rv[i], 1e-4, 1e-9);
        ck_assert_float_near_rel(w[i], rw[i], 1e-5, 1e-6);
    }
    /* The first step moves each weight by about lr * sign(g) (bias correction). */
    float w1 = 0.0f, m1 = 0.0f, v1 = 0.0f, g1 = -3.0f;
    kern_adam(TOP_ISA, &w1, &m1, &v1, &g1, 1, lr, b1, b2, eps, 1);
    ck_assert_float_near_rel(w1, lr, 1e-5, 0.0);
}
END_TEST

/* kern_adam's vector loop gives the scalar loop's bits, in every variant this CPU runs
 * (portable: the scalar loop itself): every length up to 40 (whole vectors of 16 and 8
 * and every tail) at every offset of 0..3 floats (unaligned), two steps, with
 * gradients over several magnitudes and some zero. */
START_TEST(test_adam_vector_bits)
{
    enum { N = 40, OFF = 3 };
    const float lr = 0.003f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float w[2][N + OFF], m[2][N + OFF], v[2][N + OFF], g[N + OFF];
    FOR_EACH_ISA {
        int differ = 0;
        for (int n = 1; n <= N; n++)
            for (int off = 0; off <= OFF; off++) {
                tu_fill_uniform(w[0], N + OFF, -1.0f, 1.0f, 9500 + (uint64_t)n);
                memset(m[0], 0, sizeof m[0]);
                memset(v[0], 0, sizeof v[0]);
                memcpy(w[1], w[0], sizeof w[0]);
                memcpy(m[1], m[0], sizeof m[0]);
                memcpy(v[1], v[0], sizeof v[0]);
                for (int t = 1; t <= 2; t++) {
                    tu_fill_uniform(g, N + OFF, -1.0f, 1.0f, 9600 + (uint64_t)(n * 8 + off * 2 + t));
                    for (int i = 0; i < N + OFF; i++)
                        g[i] *= i % 5 == 0 ? 0.0f : i % 3 == 0 ? 1e-4f : i % 7 == 0 ? 30.0f : 1.0f;
                    for (int path = 0; path < 2; path++)
                        kern_adam(path == 0 ? conv_isa : KISA_PORTABLE, w[path] + off, m[path] + off, v[path] + off,
                                  g + off, (size_t)n, lr, b1, b2, eps, t);
                }
                differ += memcmp(w[0], w[1], sizeof w[0]) != 0 || memcmp(m[0], m[1], sizeof m[0]) != 0 ||
                          memcmp(v[0], v[1], sizeof v[0]) != 0;
            }
        ck_assert_msg(differ == 0, "%s: %d of %d lengths x offsets differ from the scalar loop", kern_isa_name(conv_isa),
                      differ, N * (OFF + 1));
    }
}
END_TEST

/* ================================================================================
 * The transformer kernels (issue 14): layout, batched GEMM, ops along an axis,
 * masks, embedding rows, layer normalization, the sequence losses
 * ================================================================================ */

/* Every permutation of a rank-4 tensor against the index map, written whole and in
 * two row ranges; i32 bits pass unchanged. */
START_TEST(test_transpose)
{
    const int64_t xs[4] = { 2, 3, 4, 5 };
    size_t n = 120;
    float *x = tu_alloc_uniform(n, -1.0f, 1.0f, 1400), *y = tu_alloc(n), *half = tu_alloc(n);
    int8_t perm[4];
    int count = 0;
    for (int p = 0; p < 256; p++) {
        int used = 0;
        for (int i = 0; i < 4; i++) {
            perm[i] = (int8_t)((p >> (2 * i)) & 3);
            used |= 1 << perm[i];
        }
        if (used != 15) continue;
        count++;
        int64_t yd[4];
        for (int i = 0; i < 4; i++) yd[i] = xs[perm[i]];
        kern_fill(y, NAN, n);
        kern_transpose(x, xs, 4, perm, y, 0, (size_t)yd[0]);
        kern_fill(half, NAN, n);
        kern_transpose(x, xs, 4, perm, half, 0, 1);
        kern_transpose(x, xs, 4, perm, half, 1, (size_t)yd[0]);
        ck_assert_mem_eq(y, half, n * sizeof *y);
        for (size_t e = 0; e < n; e++) {
            int64_t yi[4], xi[4];
            unravel(e, yd, 4, yi);
            for (int i = 0; i < 4; i++) xi[perm[i]] = yi[i];
            size_t off = (size_t)(((xi[0] * xs[1] + xi[1]) * xs[2] + xi[2]) * xs[3] + xi[3]);
            ck_assert_msg(memcmp(&y[e], &x[off], sizeof *y) == 0, "perm %d%d%d%d element %zu", perm[0], perm[1], perm[2],
                          perm[3], e);
        }
    }
    ck_assert_int_eq(count, 24);
    free(x);
    free(y);
    free(half);
}
END_TEST

/* Every pair of transpose flags, batches below and above the thread count (_i + 1
 * threads), against ref_gemm matrix by matrix. */
START_TEST(test_gemm_batch)
{
    static const size_t sizes[][4] = { { 1, 5, 7, 3 }, { 2, 17, 9, 33 }, { 7, 8, 8, 4 }, { 12, 64, 64, 16 }, { 3, 1, 6, 5 } };
    tu_threads(_i + 1);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t bt = sizes[s][0], M = sizes[s][1], N = sizes[s][2], K = sizes[s][3];
        float *A = tu_alloc_uniform(bt * M * K, -1.0f, 1.0f, 1500 + s), *B = tu_alloc_uniform(bt * K * N, -1.0f, 1.0f, 1510 + s);
        float *C = tu_alloc(bt * M * N), *want = tu_alloc(bt * M * N);
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            for (size_t b = 0; b < bt; b++)
                ref_gemm(ta, tb, M, N, K, 1.0f, A + b * M * K, B + b * K * N, 0.0f, NULL, want + b * M * N);
            kern_fill(C, NAN, bt * M * N);
            kern_gemm_batch(tu_pool, TOP_ISA, ta, tb, bt, M, N, K, 1.0f, A, B, 0.0f, C);
            ck_assert_floats_near_scaled(C, want, bt * M * N, 1e-5);
        }
        free(A);
        free(B);
        free(C);
        free(want);
    }
    tu_threads(1);
}
END_TEST

/* softmax and log-softmax along the middle axis of [outer, len, inner] (inner 1: the row
 * kernels), and their gradients, against double references. */
START_TEST(test_softmax_axis)
{
    static const size_t dims[][3] = { { 2, 5, 3 }, { 3, 4, 1 }, { 1, 7, 6 } };
    for (size_t c = 0; c < 3; c++) {
        size_t O = dims[c][0], L = dims[c][1], I = dims[c][2], n = O * L * I;
        float *x = tu_alloc_uniform(n, -3.0f, 3.0f, 1600 + c), *dy = tu_alloc_uniform(n, -1.0f, 1.0f, 1610 + c);
        float *y = tu_alloc(n), *dx = tu_alloc(n), *want = tu_alloc(n), *dwant = tu_alloc(n);
        for (int lg = 0; lg < 2; lg++) {
            for (size_t o = 0; o < O; o++)
                for (size_t i = 0; i < I; i++) {
                    double m = -INFINITY, s = 0, dot = 0, sdy = 0;
                    for (size_t l = 0; l < L; l++) m = fmax(m, x[(o * L + l) * I + i]);
                    for (size_t l = 0; l < L; l++) s += exp(x[(o * L + l) * I + i] - m);
                    for (size_t l = 0; l < L; l++) {
                        size_t at = (o * L + l) * I + i;
                        double p = exp(x[at] - m) / s;
                        want[at] = (float)(lg ? x[at] - m - log(s) : p);
                        dot += p * dy[at];
                        sdy += dy[at];
                    }
                    for (size_t l = 0; l < L; l++) {
                        size_t at = (o * L + l) * I + i;
                        double p = exp(x[at] - m) / s;
                        dwant[at] = (float)(lg ? dy[at] - p * sdy : p * (dy[at] - dot));
                    }
                }
            kern_softmax_axis(x, y, O, L, I, lg);
            ck_assert_floats_near(y, want, n, 1e-5, 1e-6);
            kern_softmax_axis_grad(y, dy, dx, O, L, I, lg);
            ck_assert_floats_near(dx, dwant, n, 1e-4, 1e-6);
        }
        free(x);
        free(dy);
        free(y);
        free(dx);
        free(want);
        free(dwant);
    }
}
END_TEST

/* sum, mean, max along the middle axis; max's gradient to the first maximum (a tie
 * put in on purpose); the expansion back. */
START_TEST(test_reduce_expand)
{
    const size_t O = 3, L = 4, I = 5, n = O * L * I;
    float *x = tu_alloc_uniform(n, -2.0f, 2.0f, 1700), *y = tu_alloc(O * I), *dy = tu_alloc_uniform(O * I, -1.0f, 1.0f, 1701);
    float *dx = tu_alloc(n);
    x[(0 * L + 3) * I + 2] = x[(0 * L + 1) * I + 2] = 5.0f;   /* a tie: the first (l = 1) gets dy */
    for (int op = 0; op < 3; op++) {
        if (op == 2) kern_reduce_max(x, O, L, I, y);
        else kern_reduce_sum(x, O, L, I, op ? 1.0f / (float)L : 1.0f, y);
        for (size_t o = 0; o < O; o++)
            for (size_t i = 0; i < I; i++) {
                double s = 0, m = -INFINITY;
                for (size_t l = 0; l < L; l++) {
                    s += x[(o * L + l) * I + i];
                    m = fmax(m, x[(o * L + l) * I + i]);
                }
                double want = op == 2 ? m : op ? s / (double)L : s;
                ck_assert_float_near_rel(y[o * I + i], want, 1e-6, 1e-6);
            }
    }
    kern_reduce_max_grad(x, y, dy, O, L, I, dx);
    for (size_t o = 0; o < O; o++)
        for (size_t i = 0; i < I; i++) {
            int routed = 0;
            for (size_t l = 0; l < L; l++) {
                float v = dx[(o * L + l) * I + i];
                if (v != 0.0f) {
                    routed++;
                    ck_assert(x[(o * L + l) * I + i] == y[o * I + i] && v == dy[o * I + i]);
                }
            }
            ck_assert_int_eq(routed, 1);
        }
    ck_assert(dx[(0 * L + 1) * I + 2] == dy[2] && dx[(0 * L + 3) * I + 2] == 0.0f);
    kern_expand(dy, O, L, I, 0.25f, dx);
    for (size_t e = 0; e < n; e++) ck_assert(dx[e] == 0.25f * dy[(e / (L * I)) * I + e % I]);
    free(x);
    free(y);
    free(dy);
    free(dx);
}
END_TEST

/* where over three broadcast operands; the causal mask of [T, S] with T < S. */
START_TEST(test_where_causal_mask)
{
    const int64_t cs[2] = { 3, 1 }, as[1] = { 4 }, bs[2] = { 3, 4 }, ys[2] = { 3, 4 };
    float cond[3] = { 1.0f, 0.0f, -2.0f }, *a = tu_alloc_uniform(4, -1.0f, 1.0f, 1800), *b = tu_alloc_uniform(12, -1.0f, 1.0f, 1801);
    float y[12];
    kern_where(cond, cs, 2, a, as, 1, b, bs, 2, y, ys, 2);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++) ck_assert(y[r * 4 + c] == (cond[r] != 0.0f ? a[c] : b[r * 4 + c]));
    const size_t T = 3, S = 5;
    float *x = tu_alloc_uniform(2 * T * S, -1.0f, 1.0f, 1802), *m = tu_alloc(2 * T * S);
    kern_causal_mask(x, m, 2, T, S, -7.0f);
    for (size_t e = 0; e < 2 * T * S; e++) {
        size_t i = e / S % T, j = e % S;
        ck_assert(m[e] == (j > i + S - T ? -7.0f : x[e]));
    }
    /* the fused softmax and softmax gradient: the bits of the ops apart, split in two
     * row ranges and in place */
    float *p = tu_alloc(2 * T * S), *q = tu_alloc(2 * T * S), *dy = tu_alloc_uniform(2 * T * S, -1.0f, 1.0f, 1803);
    kern_causal_mask(x, m, 2, T, S, -1e9f);
    kern_softmax(m, p, 2 * T, S);
    kern_softmax_causal(x, q, 0, 4, T, S, -1e9f);
    kern_softmax_causal(x, q, 4, 2 * T, T, S, -1e9f);
    ck_assert_mem_eq(p, q, 2 * T * S * sizeof *p);
    memcpy(q, x, 2 * T * S * sizeof *q);
    kern_softmax_causal(q, q, 0, 2 * T, T, S, -1e9f);
    ck_assert_mem_eq(p, q, 2 * T * S * sizeof *p);
    kern_softmax_grad(p, dy, m, 2 * T, S);
    kern_causal_mask(m, m, 2, T, S, 0.0f);
    kern_softmax_grad_causal(p, dy, q, 0, 1, T, S, 0.0f);
    kern_softmax_grad_causal(p, dy, q, 1, 2 * T, T, S, 0.0f);
    ck_assert_mem_eq(m, q, 2 * T * S * sizeof *m);
    kern_softmax_grad_causal(p, dy, dy, 0, 2 * T, T, S, 0.0f);   /* in place over dy */
    ck_assert_mem_eq(m, dy, 2 * T * S * sizeof *m);
    free(p);
    free(q);
    free(dy);
    kern_causal_mask(x, m, 2, T, S, -7.0f);
    kern_causal_mask(x, x, 2, T, S, -7.0f);   /* in place */
    ck_assert_mem_eq(x, m, 2 * T * S * sizeof *x);
    free(a);
    free(b);
    free(x);
    free(m);
}
END_TEST

/* Rows of the table; a bad id; the gradient's rows (ids repeat; unused rows zero),
 * by columns in two parts the same as whole. */
START_TEST(test_embedding)
{
    const size_t V = 6, D = 5, n = 7;
    int32_t ids[7] = { 2, 0, 2, 5, 2, 0, 3 };
    float *t = tu_alloc_uniform(V * D, -1.0f, 1.0f, 1900), *y = tu_alloc(n * D), *dy = tu_alloc_uniform(n * D, -1.0f, 1.0f, 1901);
    float *dt = tu_alloc(V * D), *parts = tu_alloc(V * D);
    ck_assert_int_eq(kern_embedding(ids, n, t, V, D, y), 0);
    for (size_t r = 0; r < n; r++) ck_assert_mem_eq(y + r * D, t + (size_t)ids[r] * D, D * sizeof *y);
    kern_fill(dt, NAN, V * D);
    ck_assert_int_eq(kern_embedding_grad(ids, n, dy, V, D, 0, D, dt), 0);
    for (size_t v = 0; v < V; v++)
        for (size_t c = 0; c < D; c++) {
            double s = 0;
            for (size_t r = 0; r < n; r++)
                if ((size_t)ids[r] == v) s += dy[r * D + c];
            ck_assert_float_near_rel(dt[v * D + c], s, 1e-6, 1e-7);
        }
    kern_fill(parts, NAN, V * D);
    kern_embedding_grad(ids, n, dy, V, D, 0, 2, parts);
    kern_embedding_grad(ids, n, dy, V, D, 2, D, parts);
    ck_assert_mem_eq(parts, dt, V * D * sizeof *dt);
    ids[4] = 6;
    ck_assert_int_eq(kern_embedding(ids, n, t, V, D, y), -1 - 4);
    ids[4] = -1;
    ck_assert_int_eq(kern_embedding_grad(ids, n, dy, V, D, 0, D, dt), -1 - 4);
    free(t);
    free(y);
    free(dy);
    free(dt);
    free(parts);
}
END_TEST

typedef struct LnCtx {
    size_t rows, cols;
    const float *x, *gamma, *beta;
    int wrt;   /* 0: x, 1: gamma */
} LnCtx;

static void ln_fn(void *vc, const float *v, float *y)
{
    const LnCtx *c = vc;
    kern_layer_norm(c->wrt == 0 ? v : c->x, c->wrt == 1 ? v : c->gamma, c->beta, c->rows, c->cols, 1e-5f, y);
}

/* Layer normalization against a double reference; its gradients (x's, gamma's) against
 * central differences. */
START_TEST(test_layer_norm)
{
    const size_t R = 4, C = 7, n = R * C;
    float *x = tu_alloc_uniform(n, -2.0f, 3.0f, 2000), *g = tu_alloc_uniform(C, 0.5f, 1.5f, 2001);
    float *b = tu_alloc_uniform(C, -0.5f, 0.5f, 2002), *y = tu_alloc(n), *dy = tu_alloc_uniform(n, -1.0f, 1.0f, 2003);
    float *dx = tu_alloc(n), *dg = tu_alloc(C);
    kern_layer_norm(x, g, b, R, C, 1e-5f, y);
    for (size_t r = 0; r < R; r++) {
        double m = 0, v = 0;
        for (size_t c = 0; c < C; c++) m += x[r * C + c] / (double)C;
        for (size_t c = 0; c < C; c++) v += (x[r * C + c] - m) * (x[r * C + c] - m) / (double)C;
        for (size_t c = 0; c < C; c++)
            ck_assert_float_near_rel(y[r * C + c], (x[r * C + c] - m) / sqrt(v + 1e-5) * g[c] + b[c], 1e-5, 1e-6);
    }
    LnCtx ctx = { R, C, x, g, b, 0 };
    kern_layer_norm_grad(x, g, dy, NULL, R, C, 1e-5f, dx);
    ck_assert_grad_fd(ln_fn, &ctx, x, n, n, dy, dx, FD_EPS, FD_RTOL, FD_ATOL);
    double acc[7] = { 0 };
    kern_layer_norm_grad_scale(x, dy, R, C, 1e-5f, acc);
    for (size_t c = 0; c < C; c++) dg[c] = (float)acc[c];
    ctx.wrt = 1;
    ck_assert_grad_fd(ln_fn, &ctx, g, C, n, dy, dg, FD_EPS, FD_RTOL, FD_ATOL);
    free(x);
    free(g);
    free(b);
    free(y);
    free(dy);
    free(dx);
    free(dg);
}
END_TEST

typedef struct LossCtx {
    const int32_t *labels;
    const float *x, *t;
    size_t rows, cols;
    float s;
} LossCtx;

static void ce_ls_fn(void *vc, const float *x, float *loss)
{
    const LossCtx *c = vc;
    ck_assert_int_eq(kern_cross_entropy_ls(x, c->labels, c->rows, c->cols, c->s, loss), 0);
}

static void bce_fn(void *vc, const float *x, float *loss)
{
    const LossCtx *c = vc;
    kern_bce_logits(x, c->t, c->rows * c->cols, loss);
}

static void bce_target_fn(void *vc, const float *t, float *loss)
{
    const LossCtx *c = vc;
    kern_bce_logits(c->x, t, c->rows * c->cols, loss);
}

/* Cross entropy with label smoothing (PyTorch's definition) and binary cross entropy
 * with logits (finite for |x| = 100): values against double references, gradients
 * against central differences. */
START_TEST(test_smoothing_and_bce)
{
    const size_t R = 5, C = 4, n = R * C;
    int32_t labels[5] = { 0, 3, 1, 1, 2 };
    float *x = tu_alloc_uniform(n, -2.0f, 2.0f, 2100), *t = tu_alloc_uniform(n, 0.0f, 1.0f, 2101), *d = tu_alloc(n);
    float loss, one = 1.0f;
    LossCtx ctx = { labels, x, t, R, C, 0.1f };
    kern_cross_entropy_ls(x, labels, R, C, 0.1f, &loss);
    double want = 0;
    for (size_t r = 0; r < R; r++) {
        double m = -INFINITY, s = 0;
        for (size_t c = 0; c < C; c++) m = fmax(m, x[r * C + c]);
        for (size_t c = 0; c < C; c++) s += exp(x[r * C + c] - m);
        for (size_t c = 0; c < C; c++) {
            double q = 0.1 / (double)C + ((int32_t)c == labels[r] ? 0.9 : 0.0);
            want += -q * (x[r * C + c] - m - log(s)) / (double)R;
        }
    }
    ck_assert_float_near_rel(loss, want, 1e-6, 1e-7);
    kern_cross_entropy_ls_grad(x, labels, 1.0f, d, R, C, 0.1f);
    ck_assert_grad_fd(ce_ls_fn, &ctx, x, n, 1, &one, d, FD_EPS, FD_RTOL, FD_ATOL);
    /* the rows in two parts (the dispatch's split over the pool): the whole's bits; a bad
     * label in the second part is reported at its row in the batch */
    float *d2 = tu_alloc(n);
    ck_assert_int_eq(kern_cross_entropy_ls_grad_rows(x, labels, 1.0f, d2, 0, 2, R, C, 0.1f), 0);
    ck_assert_int_eq(kern_cross_entropy_ls_grad_rows(x, labels, 1.0f, d2, 2, R, R, C, 0.1f), 0);
    ck_assert(memcmp(d, d2, n * sizeof *d) == 0);
    labels[3] = (int32_t)C;
    ck_assert_int_eq(kern_cross_entropy_ls_grad_rows(x, labels, 1.0f, d2, 2, R, R, C, 0.1f), -1 - 3);
    labels[3] = 1;
    free(d2);
    x[0] = 100.0f;
    x[1] = -100.0f;
    kern_bce_logits(x, t, n, &loss);
    want = 0;
    for (size_t i = 0; i < n; i++) want += (fmax(x[i], 0) - x[i] * t[i] + log1p(exp(-fabs(x[i])))) / (double)n;
    ck_assert_float_near_rel(loss, want, 1e-6, 1e-7);
    x[0] = 1.5f;
    x[1] = -1.5f;
    kern_bce_logits_grad(x, t, 1.0f, n, false, d);
    ck_assert_grad_fd(bce_fn, &ctx, x, n, 1, &one, d, FD_EPS, FD_RTOL, FD_ATOL);
    kern_bce_logits_grad(x, t, 1.0f, n, true, d);
    ck_assert_grad_fd(bce_target_fn, &ctx, t, n, 1, &one, d, FD_EPS, FD_RTOL, FD_ATOL);
    free(x);
    free(t);
    free(d);
}
END_TEST

/* kern_slice_add is kern_slice's adjoint: <slice(y), x> = <y, slice_add(x)>. */
START_TEST(test_slice_add)
{
    const size_t O = 3, I = 2;
    const int64_t total = 7, off = 2, len = 3;
    float *y = tu_alloc_uniform(O * (size_t)total * I, -1.0f, 1.0f, 2200), *x = tu_alloc_uniform(O * (size_t)len * I, -1.0f, 1.0f, 2201);
    float *s = tu_alloc(O * (size_t)len * I), *z = tu_alloc(O * (size_t)total * I);
    kern_slice(y, total, off, len, O, I, s);
    kern_fill(z, 0.0f, O * (size_t)total * I);
    kern_slice_add(x, total, off, len, O, I, z);
    double l = 0, r = 0;
    for (size_t i = 0; i < O * (size_t)len * I; i++) l += (double)s[i] * x[i];
    for (size_t i = 0; i < O * (size_t)total * I; i++) r += (double)y[i] * z[i];
    ck_assert_float_near_rel(l, r, 1e-6, 1e-7);
    free(y);
    free(x);
    free(s);
    free(z);
}
END_TEST

/* ================================================================================
 * Batch norm over the last axis (kernels/bnorm.c)
 * ================================================================================ */

/* [rows, C]: one row; odd sizes; more than the split threshold, on the pool */
static const size_t bn_cases[][2] = { { 1, 5 }, { 7, 3 }, { 300, 16 }, { 4096, 12 } };
#define N_BN_CASES ((int)(sizeof bn_cases / sizeof bn_cases[0]))

/* x around 100 (the shifted sums must keep the variance's digits) */
static float *bn_input(size_t rows, size_t C, uint64_t seed)
{
    float *x = tu_alloc_uniform(rows * C, -1, 1, seed);
    for (size_t i = 0; i < rows * C; i++) x[i] = 100.0f + x[i] * (float)(1 + i % C);
    return x;
}

static double *bn_scratch(size_t C)
{
    double *s = malloc(kern_bn_scratch(C));
    ck_assert_ptr_nonnull(s);
    return s;
}

START_TEST(test_bn_forward)
{
    size_t rows = bn_cases[_i][0], C = bn_cases[_i][1];
    float *x = bn_input(rows, C, 1), *st = tu_alloc(2 * C), *y = tu_alloc(rows * C);
    float *gamma = tu_alloc_uniform(C, 0.5f, 2, 2), *beta = tu_alloc_uniform(C, -1, 1, 3);
    float *scale = tu_alloc(C), *want = tu_alloc(rows * C);
    double *scratch = bn_scratch(C);
    tu_threads(2);
    kern_bn_stats(tu_pool, x, rows, C, st, scratch);
    for (size_t c = 0; c < C; c++) {
        double m = 0, v = 0;
        for (size_t r = 0; r < rows; r++) m += x[r * C + c];
        m /= (double)rows;
        for (size_t r = 0; r < rows; r++) v += (x[r * C + c] - m) * (x[r * C + c] - m);
        v /= (double)rows;
        ck_assert_float_near_rel(st[c], m, 1e-7, 0);
        ck_assert_float_near_rel(st[C + c], v, 1e-5, 1e-12);
        for (size_t r = 0; r < rows; r++) {
            double z = gamma[c] * (x[r * C + c] - m) / sqrt(v + 1e-3) + beta[c];
            want[r * C + c] = (float)(z > 0 ? z : 0);
        }
    }
    kern_bn_scale(st + C, gamma, 1e-3f, C, scale);
    kern_bn_apply(tu_pool, x, NULL, rows, C, st, scale, beta, (EwAct){ EW_RELU, 0 }, y);
    ck_assert_floats_near(y, want, rows * C, 1e-5, 1e-5);
    /* a residual (pass bn_add): the bits of the normalization, then add, then relu, apart;
     * the same written over the residual */
    float *res = tu_alloc_uniform(rows * C, -2, 2, 4), *yr = tu_alloc(rows * C);
    kern_bn_apply(tu_pool, x, NULL, rows, C, st, scale, beta, EW_NO_ACT, want);
    for (size_t i = 0; i < rows * C; i++) want[i] += res[i];
    kern_unary(EW_RELU, 0, want, want, rows * C);
    kern_bn_apply(tu_pool, x, res, rows, C, st, scale, beta, (EwAct){ EW_RELU, 0 }, yr);
    ck_assert_mem_eq(yr, want, rows * C * sizeof *yr);
    kern_bn_apply(tu_pool, x, res, rows, C, st, scale, beta, (EwAct){ EW_RELU, 0 }, res);
    ck_assert_mem_eq(res, want, rows * C * sizeof *res);
    kern_bn_apply(tu_pool, x, NULL, rows, C, st, scale, beta, (EwAct){ EW_RELU, 0 }, x);   /* in place: the same bits */
    ck_assert_mem_eq(x, y, rows * C * sizeof *y);
    tu_threads(1);
    free(x), free(st), free(y), free(gamma), free(beta), free(scale), free(want), free(scratch), free(res), free(yr);
}
END_TEST

typedef struct BnCtx {
    size_t rows, C;
    float *x, *gamma, *beta;
    int wrt;   /* 0 x, 1 gamma, 2 beta */
} BnCtx;

/* the training form's output as a function of x, gamma or beta */
static void bn_train_f(void *ctx, const float *v, float *y)
{
    BnCtx *b = ctx;
    size_t C = b->C;
    const float *x = b->wrt == 0 ? v : b->x, *gamma = b->wrt == 1 ? v : b->gamma, *beta = b->wrt == 2 ? v : b->beta;
    float *st = tu_alloc(2 * C), *scale = tu_alloc(C);
    double *scratch = bn_scratch(C);
    kern_bn_stats(NULL, x, b->rows, C, st, scratch);
    kern_bn_scale(st + C, gamma, 1e-3f, C, scale);
    kern_bn_apply(NULL, x, NULL, b->rows, C, st, scale, beta, EW_NO_ACT, y);
    free(st), free(scale), free(scratch);
}

/* dgamma, dbeta and dx (the path through the statistics included) against central
 * differences of the training form, each in place over dy as the plan runs it */
START_TEST(test_bn_grad_fd)
{
    size_t rows = _i == 0 ? 3 : 8, C = 3, n = rows * C;
    BnCtx b = { rows, C, tu_alloc_uniform(n, -2, 2, 4), tu_alloc_uniform(C, 0.5f, 2, 5), tu_alloc_uniform(C, -1, 1, 6), 0 };
    float *dy = tu_alloc_uniform(n, -1, 1, 7), *st = tu_alloc(2 * C), *d = tu_alloc(2 * C), *dx = tu_alloc(n);
    double *scratch = bn_scratch(C);
    kern_bn_stats(tu_pool, b.x, rows, C, st, scratch);
    kern_bn_grad_params(tu_pool, b.x, dy, rows, C, st, 1e-3f, BN_NO_RELU, d, scratch);
    memcpy(dx, dy, n * sizeof *dx);
    kern_bn_grad_input(tu_pool, dx, b.x, rows, C, st, b.gamma, d, 1e-3f, BN_NO_RELU, dx, (float *)scratch);
    ck_assert_grad_fd(bn_train_f, &b, b.x, n, n, dy, dx, 3e-3f, 2e-3, 1e-4);
    b.wrt = 1;
    ck_assert_grad_fd(bn_train_f, &b, b.gamma, C, n, dy, d, 3e-3f, 2e-3, 1e-4);
    b.wrt = 2;
    ck_assert_grad_fd(bn_train_f, &b, b.beta, C, n, dy, d + C, 3e-3f, 2e-3, 1e-4);
    free(b.x), free(b.gamma), free(b.beta), free(dy), free(st), free(d), free(dx), free(scratch);
}
END_TEST

/* Every kernel gives the same bits on 1, 2 and 3 threads (fixed blocks of rows). */
START_TEST(test_bn_threads)
{
    size_t rows = 5000, C = 9, n = rows * C;
    float *x = bn_input(rows, C, 8), *dy = tu_alloc_uniform(n, -1, 1, 9), *gamma = tu_alloc_uniform(C, 0.5f, 2, 10);
    float *out[3][4];
    double *scratch = bn_scratch(C);
    for (int t = 0; t < 3; t++) {
        tu_threads(t + 1);
        float *st = out[t][0] = tu_alloc(2 * C), *d = out[t][1] = tu_alloc(2 * C);
        float *y = out[t][2] = tu_alloc(n), *dx = out[t][3] = tu_alloc(n);
        kern_bn_stats(tu_pool, x, rows, C, st, scratch);
        kern_bn_apply(tu_pool, x, NULL, rows, C, st, gamma, dy, (EwAct){ EW_TANH, 0 }, y);
        kern_bn_grad_params(tu_pool, x, dy, rows, C, st, 1e-5f, BN_NO_RELU, d, scratch);
        kern_bn_grad_input(tu_pool, dy, x, rows, C, st, gamma, d, 1e-5f, BN_NO_RELU, dx, (float *)scratch);
    }
    static const size_t len[4] = { 2, 2, 0, 0 };
    for (int t = 1; t < 3; t++)
        for (int k = 0; k < 4; k++)
            ck_assert_msg(memcmp(out[t][k], out[0][k], (len[k] ? len[k] * C : n) * sizeof(float)) == 0,
                          "output %d differs on %d threads", k, t + 1);
    tu_threads(1);
    for (int t = 0; t < 3; t++)
        for (int k = 0; k < 4; k++) free(out[t][k]);
    free(x), free(dy), free(gamma), free(scratch);
}
END_TEST

/* A channel's values do not depend on where it falls in a vector of the kernels (or
 * past the last whole one): each of 43 columns (32 at a time, then 8, then one by one)
 * alone as [rows, 1] gives the bits it gets among the others. */
START_TEST(test_bn_lanes)
{
    size_t rows = 37, C = 43, n = rows * C;
    float *x = bn_input(rows, C, 11), *dy = tu_alloc_uniform(n, -1, 1, 12), *gamma = tu_alloc_uniform(C, 0.5f, 2, 13);
    float *st = tu_alloc(2 * C), *d = tu_alloc(2 * C), *y = tu_alloc(n), *dx = tu_alloc(n);
    float *xc = tu_alloc(rows), *dyc = tu_alloc(rows), *yc = tu_alloc(rows), *dxc = tu_alloc(rows), stc[2], dc[2];
    double *scratch = bn_scratch(C);
    kern_bn_stats(NULL, x, rows, C, st, scratch);
    kern_bn_apply(NULL, x, NULL, rows, C, st, gamma, dy, EW_NO_ACT, y);
    kern_bn_grad_params(NULL, x, dy, rows, C, st, 1e-3f, BN_NO_RELU, d, scratch);
    kern_bn_grad_input(NULL, dy, x, rows, C, st, gamma, d, 1e-3f, BN_NO_RELU, dx, (float *)scratch);
    for (size_t c = 0; c < C; c++) {
        for (size_t r = 0; r < rows; r++) xc[r] = x[r * C + c], dyc[r] = dy[r * C + c];
        kern_bn_stats(NULL, xc, rows, 1, stc, scratch);
        kern_bn_apply(NULL, xc, NULL, rows, 1, stc, &gamma[c], &dy[c], EW_NO_ACT, yc);
        kern_bn_grad_params(NULL, xc, dyc, rows, 1, stc, 1e-3f, BN_NO_RELU, dc, scratch);
        kern_bn_grad_input(NULL, dyc, xc, rows, 1, stc, &gamma[c], dc, 1e-3f, BN_NO_RELU, dxc, (float *)scratch);
        ck_assert_msg(stc[0] == st[c] && stc[1] == st[C + c] && dc[0] == d[c] && dc[1] == d[C + c],
                      "channel %zu: the statistics or dgamma, dbeta differ alone", c);
        for (size_t r = 0; r < rows; r++)
            ck_assert_msg(yc[r] == y[r * C + c] && dxc[r] == dx[r * C + c], "channel %zu, row %zu differs alone", c, r);
    }
    free(x), free(dy), free(gamma), free(st), free(d), free(y), free(dx), free(xc), free(dyc), free(yc), free(dxc);
    free(scratch);
}
END_TEST

/* The sums of the statistics and of dgamma, dbeta against a double reference, held to
 * the bound kernels/bnorm.c keeps: each sum is float over runs of 16 rows, the runs
 * added in double, so within (16 + 2) u of its terms' absolute sum (16 - 1 additions,
 * the difference x - k and the square or product rounded once each; u = 2^-24), plus
 * the result's own rounding to float.  A sum kept in float over a whole block breaks
 * it (the last case: blocks of 65536 rows).  The sizes take each path: 32 channels at
 * a time, 8, one; and x far from its first row, so that the shifted sums are large. */
static const size_t bn_sum_cases[][2] = { { 20000, 43 }, { 4099, 64 }, { 777, 5 }, { 1 << 20, 8 } };

START_TEST(test_bn_sums)
{
    size_t rows = bn_sum_cases[_i][0], C = bn_sum_cases[_i][1], n = rows * C;
    const double u = 0x1p-24, run = 18 * u;
    float *x = tu_alloc_uniform(n, -1, 1, 21), *dy = tu_alloc_uniform(n, -1, 1, 22), *st = tu_alloc(2 * C);
    float *d = tu_alloc(2 * C);
    double *scratch = bn_scratch(C);
    for (size_t i = 0; i < n; i++) x[i] = 50.0f + 8.0f * x[i] + (float)(i % C) + (i < C ? -20.0f : 0.0f);
    for (size_t i = 0; i < n; i++) dy[i] += 0.25f;   /* dbeta far from zero */
    tu_threads(2);
    kern_bn_stats(tu_pool, x, rows, C, st, scratch);
    kern_bn_grad_params(tu_pool, x, dy, rows, C, st, 1e-5f, BN_NO_RELU, d, scratch);
    for (size_t c = 0; c < C; c++) {
        double s = 0, a = 0, q = 0, k = x[c];
        for (size_t r = 0; r < rows; r++) {
            double t = x[r * C + c] - k;
            s += t, a += fabs(t), q += t * t;
        }
        double m = s / (double)rows, v = q / (double)rows - m * m;
        double em = run * a / (double)rows, ev = run * q / (double)rows + 2 * fabs(m) * em + em * em;
        ck_assert_msg(fabs(st[c] - (k + m)) <= em + u * fabs(k + m), "channel %zu: mean %.9g, want %.9g +- %.3g", c,
                      st[c], k + m, em + u * fabs(k + m));
        ck_assert_msg(fabs(st[C + c] - v) <= ev + u * v, "channel %zu: variance %.9g, want %.9g +- %.3g", c, st[C + c], v,
                      ev + u * v);
        double sxy = 0, axy = 0, sy = 0, ay = 0, mean = st[c];
        for (size_t r = 0; r < rows; r++) {
            double g = dy[r * C + c], t = g * (x[r * C + c] - mean);
            sxy += t, axy += fabs(t), sy += g, ay += fabs(g);
        }
        double inv = 1 / sqrt((double)st[C + c] + 1e-5), dg = sxy * inv;
        ck_assert_msg(fabs(d[c] - dg) <= run * axy * inv + u * fabs(dg), "channel %zu: dgamma %.9g, want %.9g +- %.3g", c,
                      d[c], dg, run * axy * inv + u * fabs(dg));
        ck_assert_msg(fabs(d[C + c] - sy) <= run * ay + u * fabs(sy), "channel %zu: dbeta %.9g, want %.9g +- %.3g", c,
                      d[C + c], sy, run * ay + u * fabs(sy));
    }
    tu_threads(1);
    free(x), free(dy), free(st), free(d), free(scratch);
}
END_TEST

/* The backward through the batch norm's own relu (BnRelu: dy masked where the
 * normalized value is not positive) gives the bits of relu's gradient on the output
 * followed by the backward without it, on 2 threads, with 32-, 8- and 1-channel paths,
 * dx in place over dy as the plan runs it. */
static const size_t bn_relu_cases[][2] = { { 37, 43 }, { 5000, 9 }, { 3000, 64 } };

START_TEST(test_bn_relu)
{
    size_t rows = bn_relu_cases[_i][0], C = bn_relu_cases[_i][1], n = rows * C;
    float *x = bn_input(rows, C, 31), *g = tu_alloc_uniform(n, -1, 1, 32), *gamma = tu_alloc_uniform(C, 0.5f, 2, 33);
    float *beta = tu_alloc_uniform(C, -1, 1, 34), *st = tu_alloc(2 * C), *scale = tu_alloc(C), *y = tu_alloc(n);
    float *dy = tu_alloc(n), *want_d = tu_alloc(2 * C), *want_dx = tu_alloc(n), *d = tu_alloc(2 * C), *dx = tu_alloc(n);
    double *scratch = bn_scratch(C);
    tu_threads(2);
    kern_bn_stats(tu_pool, x, rows, C, st, scratch);
    kern_bn_scale(st + C, gamma, 1e-3f, C, scale);
    kern_bn_apply(tu_pool, x, NULL, rows, C, st, scale, beta, (EwAct){ EW_RELU, 0 }, y);
    size_t zeros = 0;
    for (size_t i = 0; i < n; i++) zeros += y[i] == 0;
    ck_assert_msg(zeros > n / 8 && zeros < n - n / 8, "%zu of %zu outputs zero: the mask is not tested", zeros, n);
    kern_unary_grad(EW_RELU, 0, y, g, dy, n);
    kern_bn_grad_params(tu_pool, x, dy, rows, C, st, 1e-3f, BN_NO_RELU, want_d, scratch);
    kern_bn_grad_input(tu_pool, dy, x, rows, C, st, gamma, want_d, 1e-3f, BN_NO_RELU, want_dx, (float *)scratch);
    BnRelu relu = { gamma, beta };
    kern_bn_grad_params(tu_pool, x, g, rows, C, st, 1e-3f, relu, d, scratch);
    memcpy(dx, g, n * sizeof *dx);
    kern_bn_grad_input(tu_pool, dx, x, rows, C, st, gamma, d, 1e-3f, relu, dx, (float *)scratch);
    ck_assert_mem_eq(d, want_d, 2 * C * sizeof *d);
    ck_assert_mem_eq(dx, want_dx, n * sizeof *dx);
    tu_threads(1);
    free(x), free(g), free(gamma), free(beta), free(st), free(scale), free(y), free(dy), free(want_d), free(want_dx);
    free(d), free(dx), free(scratch);
}
END_TEST

START_TEST(test_bn_update)
{
    float mean[2] = { 1, -2 }, var[2] = { 0.5f, 2 }, st[4] = { 3, 4, 0.25f, 1 };
    kern_bn_update(mean, var, st, 2, 0.9f, 5);
    ck_assert_float_near_rel(mean[0], 0.9 * 1 + 0.1 * 3, 1e-6, 0);
    ck_assert_float_near_rel(mean[1], 0.9 * -2 + 0.1 * 4, 1e-6, 0);
    ck_assert_float_near_rel(var[0], 0.9 * 0.5 + 0.1 * 0.25 * 5 / 4, 1e-6, 0);   /* Bessel's correction */
    ck_assert_float_near_rel(var[1], 0.9 * 2 + 0.1 * 1 * 5 / 4, 1e-6, 0);
    kern_bn_update(mean, var, st, 2, 0.0f, 1);   /* momentum 0: the batch's; one value: no correction */
    ck_assert_float_eq(mean[0], 3);
    ck_assert_float_eq(var[1], 1);
}
END_TEST

/* ================================================================================ */

/* Fused attention (kernels/attention.c) in every variant against the kernels of the ops
 * it replaces, bit for bit: per (example, head) block the heads copied out of [B, T, H,
 * d], q scaled, the scores by kern_gemm_block, kern_softmax_causal (or kern_softmax), the
 * weighted sum; the backward through kern_softmax_grad_causal and the four products.
 * Lengths and head sizes past a vector and a register tile, causal or not; blocks
 * split in two calls as the pool splits them; the scratch's floats past its size NaN. */
static void attn_block_ref(const KAttn *p, const float *q, const float *k, const float *v, const float *dy, size_t blk,
                           float *o, float *dq, float *dk, float *dv)
{
    size_t T = p->T, d = p->d, ld = p->H * d, at = (blk / p->H * T * p->H + blk % p->H) * d;
    float *qs = tu_alloc(T * d), *kb = tu_alloc(T * d), *vb = tu_alloc(T * d), *db = tu_alloc(T * d);
    float *P = tu_alloc(T * T), *dP = tu_alloc(T * T), *out = tu_alloc(4 * T * d);
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < d; c++) {
            qs[t * d + c] = q[at + t * ld + c] * p->scale;
            kb[t * d + c] = k[at + t * ld + c];
            vb[t * d + c] = v[at + t * ld + c];
            db[t * d + c] = dy[at + t * ld + c];
        }
    kern_gemm_block(p->isa, false, true, T, T, d, 1.0f, qs, d, kb, d, 0.0f, P, T);
    if (p->causal) kern_softmax_causal(P, P, 0, T, T, T, p->value);
    else kern_softmax(P, P, T, T);
    kern_gemm_block(p->isa, false, false, T, d, T, 1.0f, P, T, vb, d, 0.0f, out, d);
    kern_gemm_block(p->isa, false, true, T, T, d, 1.0f, db, d, vb, d, 0.0f, dP, T);
    if (p->causal) kern_softmax_grad_causal(P, dP, dP, 0, T, T, T, 0.0f);
    else kern_softmax_grad(P, dP, dP, T, T);
    kern_gemm_block(p->isa, false, false, T, d, T, 1.0f, dP, T, kb, d, 0.0f, out + T * d, d);
    for (size_t e = 0; e < T * d; e++) out[T * d + e] *= p->scale;
    kern_gemm_block(p->isa, true, false, T, d, T, 1.0f, dP, T, qs, d, 0.0f, out + 2 * T * d, d);
    kern_gemm_block(p->isa, true, false, T, d, T, 1.0f, P, T, db, d, 0.0f, out + 3 * T * d, d);
    float *dst[4] = { o, dq, dk, dv };
    for (int m = 0; m < 4; m++)
        for (size_t t = 0; t < T; t++) memcpy(dst[m] + at + t * ld, out + m * T * d + t * d, d * sizeof *o);
    free(qs), free(kb), free(vb), free(db), free(P), free(dP), free(out);
}

START_TEST(test_attention)
{
    static const size_t cases[][4] = {   /* B, T, H, d */
        { 2, 64, 4, 16 }, { 1, 7, 1, 6 }, { 3, 13, 2, 5 }, { 1, 37, 2, 70 }, { 2, 20, 3, 32 }, { 1, 1, 1, 1 },
    };
    FOR_EACH_ISA
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (int causal = 0; causal < 2; causal++) {
            size_t B = cases[ci][0], T = cases[ci][1], H = cases[ci][2], d = cases[ci][3], n = B * T * H * d;
            KAttn p = { B, T, H, d, 1.0f / sqrtf((float)d), causal, -1e9f, conv_isa };
            float *q = tu_alloc_uniform(n, -2.0f, 2.0f, 3301 + ci), *k = tu_alloc_uniform(n, -2.0f, 2.0f, 3401 + ci);
            float *v = tu_alloc_uniform(n, -1.0f, 1.0f, 3501 + ci), *dy = tu_alloc_uniform(n, -1.0f, 1.0f, 3601 + ci);
            float *want = tu_alloc(4 * n), *got = tu_alloc(4 * n);
            size_t ns = kern_attention_scratch(KATTN_GRAD, T, d), np = B * H * T * T, half = B * H / 2;
            ck_assert_int_ge(ns, kern_attention_scratch(KATTN_FUSED, T, d));
            ck_assert_int_ge(ns, kern_attention_scratch(KATTN_PROBS, T, d));
            float *scratch = tu_alloc(ns + 16), *P = tu_alloc(np), *o2 = tu_alloc(n);
            for (size_t blk = 0; blk < B * H; blk++) attn_block_ref(&p, q, k, v, dy, blk, want, want + n, want + 2 * n, want + 3 * n);
            kern_fill(got, NAN, 4 * n);
            kern_fill(o2, NAN, n);
            kern_fill(P, NAN, np);
            kern_fill(scratch, NAN, ns + 16);
            kern_attention(&p, q, k, v, got, 0, half, scratch);
            kern_attention(&p, q, k, v, got, half, B * H, scratch);
            kern_attention_probs(&p, q, k, P, 0, half, scratch);
            kern_attention_probs(&p, q, k, P, half, B * H, scratch);
            kern_attention_out(&p, P, v, o2, 0, half);
            kern_attention_out(&p, P, v, o2, half, B * H);
            ck_assert_mem_eq(o2, got, n * sizeof *got);   /* the training form's output: the fused one's */
            kern_attention_grad(&p, q, k, v, P, dy, got + n, got + 2 * n, got + 3 * n, 0, half, scratch);
            kern_attention_grad(&p, q, k, v, P, dy, got + n, got + 2 * n, got + 3 * n, half, B * H, scratch);
            for (size_t e = 0; e < 4 * n; e++)
                ck_assert_msg(memcmp(&got[e], &want[e], sizeof *got) == 0, "%s, case %zu%s: %s[%zu] = %.9g, apart %.9g",
                              kern_isa_name(conv_isa), ci, causal ? " causal" : "", (const char *[]){ "o", "dq", "dk", "dv" }[e / n],
                              e % n, got[e], want[e]);
            for (size_t e = ns; e < ns + 16; e++) ck_assert(isnan(scratch[e]));   /* stayed inside its scratch */
            free(q), free(k), free(v), free(dy), free(want), free(got), free(scratch), free(P), free(o2);
        }
}
END_TEST

static Suite *make_kernels_suite(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc;

    tc = tcase_create("broadcast");
    tcase_add_test(tc, test_binary_max_min_nan);
    tcase_add_loop_test(tc, test_binary_forward, 0, N_BIN_CASES);
    tcase_add_test(tc, test_binary_inplace);
    tcase_add_loop_test(tc, test_sum_to, 0, N_SUM_CASES);
    tcase_add_loop_test(tc, test_binary_grad_fd, 0, N_BIN_GRAD_CASES);
    suite_add_tcase(s, tc);

    tc = tcase_create("elementwise");
    tcase_add_loop_test(tc, test_unary_forward, 0, EW_UNARY_COUNT);
    tcase_add_test(tc, test_unary_extremes);
    tcase_add_loop_test(tc, test_unary_grad_fd, 0, EW_UNARY_COUNT);
    tcase_add_loop_test(tc, test_unary_grad_inplace, 0, EW_UNARY_COUNT);
    tcase_add_test(tc, test_sign_bits_mask);
    tcase_add_test(tc, test_scale_fill_copy_axpy);
    tcase_add_test(tc, test_sum_all);
    tcase_add_test(tc, test_colsum_d);
    tcase_add_loop_test(tc, test_colsum_d_widths, 0, (int)(sizeof colsum_widths / sizeof colsum_widths[0]));
    tcase_add_test(tc, test_concat_slice);
    suite_add_tcase(s, tc);

    tc = tcase_create("softmax_losses");
    tcase_add_test(tc, test_softmax_forward);
    tcase_add_test(tc, test_softmax_stable);
    tcase_add_test(tc, test_exp_shifted);
    tcase_add_loop_test(tc, test_softmax_grad_fd, 0, 2);
    tcase_add_test(tc, test_cross_entropy);
    tcase_add_test(tc, test_cross_entropy_grad_inplace);
    tcase_add_test(tc, test_cross_entropy_bad_labels);
    tcase_add_test(tc, test_cross_entropy_grad_fd);
    tcase_add_test(tc, test_count_correct);
    tcase_add_test(tc, test_mse);
    suite_add_tcase(s, tc);

    tc = tcase_create("gemm");
    tcase_add_loop_test(tc, test_gemm, 0, 3);
    tcase_add_test(tc, test_blas_info);
    tcase_add_loop_test(tc, test_gemm_variants, 0, 3);
    tcase_add_test(tc, test_gemm_entries);
    tcase_add_loop_test(tc, test_gemm_ksplit, 0, 3);
    tcase_add_loop_test(tc, test_gemm_wksplit, 0, 3);
    tcase_add_loop_test(tc, test_gemm_bias_act, 0, 2);
    tcase_add_loop_test(tc, test_gemv_rows_split, 0, 3);
    tcase_add_loop_test(tc, test_gemm_few_rows, 0, 3);
    tcase_add_loop_test(tc, test_gemm_packed, 0, 3);
    suite_add_tcase(s, tc);

    tc = tcase_create("conv");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_conv_vs_direct, 0, N_CONV_CASES);
    tcase_add_loop_test(tc, test_conv_small_chunks, 0, N_CONV_CASES);
    tcase_add_loop_test(tc, test_conv_threads, 0, N_CONV_CASES);
    tcase_add_loop_test(tc, test_conv_nested, 0, N_DIRECT_CASES + N_WIDE_CASES + N_CONV_CASES);
    tcase_add_test(tc, test_conv_big_m);
    tcase_add_test(tc, test_conv_scratch_bounded);
    tcase_add_loop_test(tc, test_conv_scratch_guard, 0, N_DIRECT_CASES + N_WIDE_CASES + N_CONV_CASES);
    tcase_add_test(tc, test_conv_scratch_by_path);
    tcase_add_loop_test(tc, test_conv_grad_fd, 0, N_CONV_CASES);
    tcase_add_loop_test(tc, test_conv_im2col_only, 0, N_CONV_CASES);
    tcase_add_loop_test(tc, test_conv_direct, 0, N_DIRECT_CASES);
    tcase_add_loop_test(tc, test_conv_wide, 0, N_WIDE_CASES);
    tcase_add_loop_test(tc, test_conv_bias_act, 0, N_DIRECT_CASES + N_WIDE_CASES + N_CONV_CASES);
    tcase_add_loop_test(tc, test_conv_maxpool, 0, N_DIRECT_CASES + N_WIDE_CASES + N_CONV_CASES);
    tcase_add_loop_test(tc, test_conv_maxpool_nonfinite, 0, 3);
    tcase_add_test(tc, test_conv_maxpool_scratch);
    tcase_add_loop_test(tc, test_conv_grad_filter_pooled, 0, N_DIRECT_CASES + N_WIDE_CASES + N_CONV_CASES);
    tcase_add_loop_test(tc, test_pooled_bias_ties, 0, 5);
    tcase_add_loop_test(tc, test_conv_tiles, 0, N_TILE_CASES);
    tcase_add_loop_test(tc, test_conv_grad_input_bits, 0, N_WIDE_CASES + N_GRADX_CASES);
    tcase_add_loop_test(tc, test_conv_variants_agree, 0, N_DIRECT_CASES + N_WIDE_CASES + N_CONV_CASES);
    tcase_add_loop_test(tc, test_conv_forward_chain, 0, N_CHAIN_CASES + N_WIDE_CASES);
    tcase_add_test(tc, test_isa_names);
    suite_add_tcase(s, tc);

    tc = tcase_create("vmath");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_vmath_accuracy);
    tcase_add_test(tc, test_vmath_functions);
    tcase_add_test(tc, test_vmath_rows);
    tcase_add_test(tc, test_vmath_softmax_keep);
    tcase_add_test(tc, test_vmath_norm_rows);
    tcase_add_test(tc, test_vmath_colsums);
    tcase_add_test(tc, test_vmath_colsum_d);
    tcase_add_test(tc, test_vmath_exp_range);
    suite_add_tcase(s, tc);

    tc = tcase_create("pool");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_pool_vs_direct, 0, N_POOL_CASES);
    tcase_add_loop_test(tc, test_maxpool_indices, 0, N_POOL_CASES);
    tcase_add_test(tc, test_maxpool_ties);
    tcase_add_loop_test(tc, test_maxpool_grad_relu, 0, N_POOL_CASES);
    tcase_add_loop_test(tc, test_pool_grad_fd, 0, N_POOL_CASES);
    tcase_add_test(tc, test_global_avgpool);
    suite_add_tcase(s, tc);

    tc = tcase_create("threads");
    tcase_add_test(tc, test_pool_jobs);
    tcase_add_test(tc, test_pool_stats);
    suite_add_tcase(s, tc);

    tc = tcase_create("dropout");
    tcase_add_test(tc, test_dropout_mask);
    tcase_add_test(tc, test_dropout_edges);
    tcase_add_test(tc, test_dropout_grad);
    suite_add_tcase(s, tc);

    tc = tcase_create("sequence");
    tcase_add_test(tc, test_transpose);
    tcase_add_loop_test(tc, test_gemm_batch, 0, 3);
    tcase_add_test(tc, test_attention);
    tcase_add_test(tc, test_softmax_axis);
    tcase_add_test(tc, test_reduce_expand);
    tcase_add_test(tc, test_where_causal_mask);
    tcase_add_test(tc, test_embedding);
    tcase_add_test(tc, test_layer_norm);
    tcase_add_test(tc, test_smoothing_and_bce);
    tcase_add_test(tc, test_slice_add);
    suite_add_tcase(s, tc);

    tc = tcase_create("batch_norm");
    tcase_add_loop_test(tc, test_bn_forward, 0, N_BN_CASES);
    tcase_add_loop_test(tc, test_bn_grad_fd, 0, 2);
    tcase_add_test(tc, test_bn_threads);
    tcase_add_test(tc, test_bn_lanes);
    tcase_add_loop_test(tc, test_bn_sums, 0, (int)(sizeof bn_sum_cases / sizeof bn_sum_cases[0]));
    tcase_add_loop_test(tc, test_bn_relu, 0, (int)(sizeof bn_relu_cases / sizeof bn_relu_cases[0]));
    tcase_add_test(tc, test_bn_update);
    suite_add_tcase(s, tc);

    tc = tcase_create("optimizers");
    tcase_add_test(tc, test_sgd);
    tcase_add_loop_test(tc, test_momentum, 0, 2);
    tcase_add_test(tc, test_adam);
    tcase_add_test(tc, test_adam_vector_bits);
    suite_add_tcase(s, tc);

    return s;
}

/* The variants to test: those this CPU runs, up to GRAPHC_ISA's; false (said) if
 * GRAPHC_ISA names none, or one this CPU cannot run. */
static bool choose_isas(void)
{
    KIsa top = kern_isa_cpu();
    const char *env = getenv("GRAPHC_ISA");
    if (env && *env) {
        int rc = kern_isa_parse(env, top, &top);
        if (rc != 0) {
            printf("test_kernels: GRAPHC_ISA=%s: %s\n", env, rc == -2 ? "this CPU cannot run it" : "no such variant");
            return false;
        }
    }
    char skipped[96] = "";
    for (int i = KISA_COUNT - 1; i > KISA_AUTO; i--) {
        if (i <= (int)top)
            isas[n_isas++] = (KIsa)i;
        else
            snprintf(skipped + strlen(skipped), sizeof skipped - strlen(skipped), " %s (%s)", kern_isa_name((KIsa)i),
                     kern_isa_resolve((KIsa)i) == (KIsa)i ? "above GRAPHC_ISA" : "this CPU cannot run it");
    }
    printf("test_kernels: kernels' variants tested:");
    for (int i = 0; i < n_isas; i++)
        printf(" %s", kern_isa_name(isas[i]));
    printf("; skipped:%s\n", skipped[0] ? skipped : " none");
    return true;
}

int main(void)
{
    if (!choose_isas())
        return 77;   /* automake's SKIP */
    SRunner *sr = srunner_create(make_kernels_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
