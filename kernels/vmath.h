/* The vector math's loops (util/vmath.h's functions over arrays): the transcendental
 * elementwise functions and their gradients, and a softmax row's maximum and sum of
 * exponentials.  Not a header to include anywhere else: each kernels/isa_*.c includes
 * it once, before kernels/micro.h (whose KernVariant takes VMATH_FNS), after it defines
 * micro.h's NAME, ISA_FN, ISA_INLINE, VL and these primitives (util/vmath.h says what
 * each does):
 *   VF VI VB, vm_load(p) vm_store(p, v), vm_set1 vm_seti vm_add vm_sub vm_mul vm_div
 *   vm_lt vm_eq vm_sel vm_bits vm_float vm_iadd vm_isub vm_iand vm_ior vm_isra vm_isll
 * Every function gives the bits of util/elemwise.h's scalar one on every element
 * (docs/kernels.md, "Vector math"). */

#include <math.h>
#include <string.h>

#define VM_FN ISA_INLINE
#define VM_NAME(x) NAME(x)
#include "util/vmath.h"

/* Sums and maxima over a row go through VM_ACC lanes whatever the vector width (element
 * j into lane j mod VM_ACC), added in one fixed tree at the end: the same bits in every
 * variant. */
enum { VM_ACC = 16, VM_NACC = VM_ACC / VL };

/* The fixed tree over the VM_ACC lanes of s[0 .. VM_NACC): lane j += lane j + w for
 * w = 8, 4, 2, 1; the answer is lane 0.  An instruction set that defines VM_REG_TREE
 * has NAME(vm_tree) do the same additions in registers (a store and fifteen scalar
 * adds were much of a 64-float row's time). */
#ifndef VM_REG_TREE
ISA_INLINE float NAME(vm_tree)(const VF *s)
{
    float lane[VM_ACC];
    for (int k = 0; k < VM_NACC; k++) vm_store(lane + k * VL, s[k]);
    for (int w = VM_ACC / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) lane[j] += lane[j + w];
    return lane[0];
}
#endif

#define VM_LOOP(EXPR)                                                                          \
    for (; i + VL <= n; i += VL) {                                                             \
        EXPR;                                                                                  \
    }

/* y = f(x) over whole vectors; returns the elements done (0: f has no vector form here;
 * the caller's scalar loop does the rest, with the same bits). */
ISA_FN static size_t NAME(vm_unary)(EwUnary op, const float *x, float *y, size_t n)
{
    size_t i = 0;
    switch (op) {
    case EW_EXP: VM_LOOP(vm_store(y + i, NAME(vm_exp)(vm_load(x + i)))) break;
    case EW_TANH: VM_LOOP(vm_store(y + i, NAME(vm_tanh)(vm_load(x + i)))) break;
    case EW_SIGMOID: VM_LOOP(vm_store(y + i, NAME(vm_sigmoid)(vm_load(x + i)))) break;
    case EW_SILU: VM_LOOP(vm_store(y + i, NAME(vm_silu)(vm_load(x + i)))) break;
    case EW_GELU_TANH: VM_LOOP(vm_store(y + i, NAME(vm_gelu_tanh)(vm_load(x + i)))) break;
    default: break;
    }
    return i;
}

/* dx = f's gradient for dy given v, as vm_unary: only those that call exp (the others'
 * scalar loops are vectorized by the compiler). */
ISA_FN static size_t NAME(vm_unary_grad)(EwUnary op, const float *v, const float *dy, float *dx, size_t n)
{
    size_t i = 0;
    switch (op) {
    case EW_SILU: VM_LOOP(vm_store(dx + i, NAME(vm_silu_grad)(vm_load(v + i), vm_load(dy + i)))) break;
    case EW_GELU_TANH: VM_LOOP(vm_store(dx + i, NAME(vm_gelu_tanh_grad)(vm_load(v + i), vm_load(dy + i)))) break;
    default: break;
    }
    return i;
}

/* The largest of x[0 .. n), n >= 1, as `m = x[j] > m ? x[j] : m` from m = x[0] finds it
 * (NaNs after x[0] are passed over; a NaN x[0] is the answer).  An instruction set that
 * defines VM_REG_MAX (one vector of VM_ACC lanes) has NAME(vm_lanes_max) pick the lanes'
 * answer in registers: the scalar loop over the stored lanes, 15 dependent compares,
 * was much of a short row's time (attention's rows of 16 to 64 scores). */
ISA_INLINE float NAME(vm_max_of)(const VF *m)   /* the lanes' answer, lane 0 first */
{
#ifdef VM_REG_MAX
    return NAME(vm_lanes_max)(m[0]);   /* VM_NACC == 1 */
#else
    float lane[VM_ACC];
    for (int k = 0; k < VM_NACC; k++) vm_store(lane + k * VL, m[k]);
    float r = lane[0];
    for (int j = 1; j < VM_ACC; j++) r = lane[j] > r ? lane[j] : r;
    return r;
#endif
}

ISA_FN static float NAME(vm_row_max)(const float *x, size_t n)
{
    VF m[VM_NACC];
    for (int k = 0; k < VM_NACC; k++) m[k] = vm_set1(x[0]);
    size_t i = 0;
    for (; i + VM_ACC <= n; i += VM_ACC)
        for (int k = 0; k < VM_NACC; k++) {
            VF v = vm_load(x + i + (size_t)k * VL);
            m[k] = vm_sel(vm_lt(m[k], v), v, m[k]);
        }
    float r = NAME(vm_max_of)(m);
    for (; i < n; i++) r = x[i] > r ? x[i] : r;
    return r;
}

/* The sum of e^(x[j] - m) over j < n, each term stored in y[j] unless y is NULL (y may
 * be x): the terms as util/vmath.h's vm_exp gives them, summed in VM_ACC lanes. */
ISA_FN static float NAME(vm_exp_sum)(const float *x, float m, float *y, size_t n)
{
    const VF mv = vm_set1(m);
    VF s[VM_NACC];
    for (int k = 0; k < VM_NACC; k++) s[k] = vm_set1(0.0f);
    size_t i = 0;
    for (; i + VM_ACC <= n; i += VM_ACC)
        for (int k = 0; k < VM_NACC; k++) {
            size_t at = i + (size_t)k * VL;
            VF e = NAME(vm_exp)(vm_sub(vm_load(x + at), mv));
            if (y) vm_store(y + at, e);
            s[k] = vm_add(s[k], e);
        }
    if (i < n) {   /* the last, partial group: padded with -inf, whose terms are +0 */
        float buf[VM_ACC];
        for (int j = 0; j < VM_ACC; j++) buf[j] = i + (size_t)j < n ? x[i + (size_t)j] : -INFINITY;
        for (int k = 0; k < VM_NACC; k++) {
            VF e = NAME(vm_exp)(vm_sub(vm_load(buf + k * VL), mv));
            vm_store(buf + k * VL, e);
            s[k] = vm_add(s[k], e);
        }
        if (y) memcpy(y + i, buf, (n - i) * sizeof *y);
    }
    return NAME(vm_tree)(s);
}

/* Softmax over the rows of x [rows, n]: each row's maximum, its exponentials and their
 * sum, then the scaling by the sum's reciprocal, with the row in cache. */
ISA_FN static void NAME(vm_softmax)(const float *x, float *y, size_t rows, size_t n)
{
    for (size_t r = 0; r < rows; r++, x += n, y += n) {
        const float inv = 1.0f / NAME(vm_exp_sum)(x, NAME(vm_row_max)(x, n), y, n);
        const VF iv = vm_set1(inv);
        size_t i = 0;
        VM_LOOP(vm_store(y + i, vm_mul(vm_load(y + i), iv)))
        for (; i < n; i++) y[i] *= inv;
    }
}

/* ---- a causal mask's softmax rows ----
 * Rows [0, rows) of x (ld apart) into y (y may be x), each over its first n entries,
 * row r's entries from keep + r on taken as `value`: the bits of writing value there,
 * then vm_softmax's row (vm_row_max, vm_exp_sum, the scaling).  Attention's rows are
 * short (16 to 64 scores), and one at a time the exponentials' chain of one row left
 * the vector units waiting on it: VM_ROWS rows go through each step together, the
 * mask applied in registers.  n not a whole number of VM_ACC groups takes the rows
 * one at a time. */
enum { VM_ROWS = 4 };

/* Entries [at, at + VL) of a row whose entries from keep on are `value`. */
ISA_INLINE VF NAME(vm_kept)(const float *row, size_t at, size_t keep, VF value, VF iota)
{
    VF v = vm_load(row + at);
    if (at + VL <= keep) return v;
    return vm_sel(vm_lt(vm_add(iota, vm_set1((float)at)), vm_set1((float)keep)), v, value);
}

ISA_INLINE void NAME(vm_softmax_keep_r)(const float *x, float *y, size_t n, size_t ld, size_t keep, VF value,
                                       VF iota, const int R)
{
    VF m[VM_ROWS][VM_NACC], s[VM_ROWS][VM_NACC];
    for (int r = 0; r < R; r++)
        for (int k = 0; k < VM_NACC; k++) {
            m[r][k] = keep + (size_t)r > 0 ? vm_set1(x[(size_t)r * ld]) : value;
            s[r][k] = vm_set1(0.0f);
        }
    for (size_t i = 0; i < n; i += VM_ACC)
        for (int r = 0; r < R; r++)
            for (int k = 0; k < VM_NACC; k++) {
                VF v = NAME(vm_kept)(x + (size_t)r * ld, i + (size_t)k * VL, keep + (size_t)r, value, iota);
                m[r][k] = vm_sel(vm_lt(m[r][k], v), v, m[r][k]);
            }
    VF mv[VM_ROWS];
    for (int r = 0; r < R; r++) mv[r] = vm_set1(NAME(vm_max_of)(m[r]));
    for (size_t i = 0; i < n; i += VM_ACC)
        for (int r = 0; r < R; r++)
            for (int k = 0; k < VM_NACC; k++) {
                size_t at = i + (size_t)k * VL;
                VF e = NAME(vm_exp)(vm_sub(NAME(vm_kept)(x + (size_t)r * ld, at, keep + (size_t)r, value, iota), mv[r]));
                vm_store(y + (size_t)r * ld + at, e);
                s[r][k] = vm_add(s[r][k], e);
            }
    VF iv[VM_ROWS];
    for (int r = 0; r < R; r++) iv[r] = vm_set1(1.0f / NAME(vm_tree)(s[r]));
    for (size_t i = 0; i < n; i += VL)
        for (int r = 0; r < R; r++) vm_store(y + (size_t)r * ld + i, vm_mul(vm_load(y + (size_t)r * ld + i), iv[r]));
}

ISA_FN static void NAME(vm_softmax_keep)(const float *x, float *y, size_t rows, size_t n, size_t ld, size_t keep,
                                         float value)
{
    if (n == 0) return;
    if (n % VM_ACC || n >= (size_t)1 << 24) {   /* (the lanes' indices exact as floats) */
        for (size_t r = 0; r < rows; r++, x += ld, y += ld) {
            size_t k = keep + r < n ? keep + r : n;
            if (y != x) memcpy(y, x, k * sizeof *y);
            for (size_t j = k; j < n; j++) y[j] = value;
            NAME(vm_softmax)(y, y, 1, n);
        }
        return;
    }
    static const float lanes[16] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };
    const VF iota = vm_load(lanes), vv = vm_set1(value);
    size_t r = 0;
    for (; r + VM_ROWS <= rows; r += VM_ROWS)
        NAME(vm_softmax_keep_r)(x + r * ld, y + r * ld, n, ld, keep + r, vv, iota, VM_ROWS);
    for (; r < rows; r++) NAME(vm_softmax_keep_r)(x + r * ld, y + r * ld, n, ld, keep + r, vv, iota, 1);
}

/* ---- row sums for layer norm and softmax's gradient ----
 * A sum of one of these terms over a row, in VM_ACC lanes as vm_exp_sum's: whole groups
 * in vectors, the last partial group's terms padded with +0, then the fixed tree.  The
 * terms (a, b, c rows; m, r scalars):
 *   VM_SUM a[j]   VM_DEV2 (a[j] - m)^2   VM_PROD a[j] b[j]   VM_PRODXH a[j] b[j] ((c[j] - m) r) */
enum { VM_SUM, VM_DEV2, VM_PROD, VM_PRODXH };

ISA_INLINE VF NAME(vm_term)(int kind, const float *a, const float *b, const float *c, size_t at, VF m, VF r)
{
    VF x = vm_load(a + at), d;
    switch (kind) {
    case VM_SUM: return x;
    case VM_DEV2: d = vm_sub(x, m); return vm_mul(d, d);
    case VM_PROD: return vm_mul(x, vm_load(b + at));
    default: return vm_mul(vm_mul(x, vm_load(b + at)), vm_mul(vm_sub(vm_load(c + at), m), r));
    }
}

ISA_INLINE float vm_term1(int kind, const float *a, const float *b, const float *c, size_t j, float m, float r)
{
    float d;
    switch (kind) {
    case VM_SUM: return a[j];
    case VM_DEV2: d = a[j] - m; return d * d;
    case VM_PROD: return a[j] * b[j];
    default: return (a[j] * b[j]) * ((c[j] - m) * r);
    }
}

ISA_INLINE float NAME(vm_row_sum)(int kind, const float *a, const float *b, const float *c, size_t n, float m, float r)
{
    const VF mv = vm_set1(m), rv = vm_set1(r);
    VF s[VM_NACC];
    for (int k = 0; k < VM_NACC; k++) s[k] = vm_set1(0.0f);
    size_t i = 0;
    for (; i + VM_ACC <= n; i += VM_ACC)
        for (int k = 0; k < VM_NACC; k++) s[k] = vm_add(s[k], NAME(vm_term)(kind, a, b, c, i + (size_t)k * VL, mv, rv));
    if (i < n) {   /* the last, partial group: its terms, padded with +0 */
        float buf[VM_ACC];
        for (size_t j = 0; j < VM_ACC; j++) buf[j] = i + j < n ? vm_term1(kind, a, b, c, i + j, m, r) : 0.0f;
        for (int k = 0; k < VM_NACC; k++) s[k] = vm_add(s[k], vm_load(buf + k * VL));
    }
    return NAME(vm_tree)(s);
}

/* A row's mean and 1 / sqrt(variance + eps) (n >= 1), the variance from the deviations
 * from the mean (two passes, the row in cache). */
ISA_FN static void NAME(vm_row_stats)(const float *x, size_t n, float eps, float *mean, float *rstd)
{
    float m = NAME(vm_row_sum)(VM_SUM, x, NULL, NULL, n, 0.0f, 0.0f) / (float)n;
    float v = NAME(vm_row_sum)(VM_DEV2, x, NULL, NULL, n, m, 0.0f) / (float)n;
    *mean = m;
    *rstd = 1.0f / sqrtf(v + eps);
}

/* Layer norm's rows: y = (x - mean) rstd gamma + beta. */
ISA_FN static void NAME(vm_layer_norm)(const float *x, const float *gamma, const float *beta, size_t rows, size_t n,
                                       float eps, float *y)
{
    for (size_t r = 0; r < rows; r++, x += n, y += n) {
        float m, rs;
        NAME(vm_row_stats)(x, n, eps, &m, &rs);
        const VF mv = vm_set1(m), rv = vm_set1(rs);
        size_t i = 0;
        VM_LOOP(vm_store(y + i, vm_add(vm_mul(vm_mul(vm_sub(vm_load(x + i), mv), rv), vm_load(gamma + i)), vm_load(beta + i))))
        for (; i < n; i++) y[i] = (x[i] - m) * rs * gamma[i] + beta[i];
    }
}

/* Its gradient to x: dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma,
 * xhat = (x - mean) rstd; plus res (a residual's gradient, rounded after as `add`
 * would) unless res is NULL.  dx may be x, dy or res: a row is read before it is
 * written. */
ISA_INLINE VF NAME(vm_ln_grad_v)(const float *x, const float *gamma, const float *dy, size_t i, VF mv, VF rv, VF mgv,
                                 VF mgxv)
{
    VF g = vm_mul(vm_load(dy + i), vm_load(gamma + i)), xh = vm_mul(vm_sub(vm_load(x + i), mv), rv);
    return vm_mul(rv, vm_sub(vm_sub(g, mgv), vm_mul(xh, mgxv)));
}

ISA_FN static void NAME(vm_layer_norm_grad)(const float *x, const float *gamma, const float *dy, const float *res,
                                            size_t rows, size_t n, float eps, float *dx)
{
    for (size_t r = 0; r < rows; r++, x += n, dy += n, dx += n, res = res ? res + n : NULL) {
        float m, rs;
        NAME(vm_row_stats)(x, n, eps, &m, &rs);
        const float mg = NAME(vm_row_sum)(VM_PROD, dy, gamma, NULL, n, 0.0f, 0.0f) / (float)n;
        const float mgx = NAME(vm_row_sum)(VM_PRODXH, dy, gamma, x, n, m, rs) / (float)n;
        const VF mv = vm_set1(m), rv = vm_set1(rs), mgv = vm_set1(mg), mgxv = vm_set1(mgx);
        size_t i = 0;
        if (res)
            VM_LOOP(vm_store(dx + i, vm_add(vm_load(res + i), NAME(vm_ln_grad_v)(x, gamma, dy, i, mv, rv, mgv, mgxv))))
        else
            VM_LOOP(vm_store(dx + i, NAME(vm_ln_grad_v)(x, gamma, dy, i, mv, rv, mgv, mgxv)))
        for (; i < n; i++) {
            float g = dy[i] * gamma[i], xh = (x[i] - m) * rs, d = rs * ((g - mg) - xh * mgx);
            dx[i] = res ? res[i] + d : d;
        }
    }
}

/* Softmax's gradient over rows: dx = y (dy - sum(y dy)). */
ISA_FN static void NAME(vm_softmax_grad)(const float *y, const float *dy, float *dx, size_t rows, size_t n)
{
    for (size_t r = 0; r < rows; r++, y += n, dy += n, dx += n) {
        const float d = NAME(vm_row_sum)(VM_PROD, y, dy, NULL, n, 0.0f, 0.0f);
        const VF dv = vm_set1(d);
        size_t i = 0;
        VM_LOOP(vm_store(dx + i, vm_mul(vm_load(y + i), vm_sub(vm_load(dy + i), dv))))
        for (; i < n; i++) dx[i] = y[i] * (dy[i] - d);
    }
}

/* ---- column sums in double (layer norm's gamma gradient) ----
 * acc[j] += the terms of column j over the rows, in row order: the vectors run across
 * the columns, each column's sum the scalar loop's (a float's conversion to double and
 * the product of two of them are exact), so every variant gives the same bits.  VMD:
 * as many doubles as VF has floats (GCC's vectors, two registers of the variant), kept
 * inside the functions. */
typedef double NAME(VMD) __attribute__((vector_size(2 * sizeof(VF))));

/* acc[j] += sum over r of dy[r, j] xhat[r, j], xhat = (x - mean) rstd of row r (layer
 * norm's gamma gradient) */
ISA_FN static void NAME(vm_ln_scale_d)(const float *x, const float *dy, size_t rows, size_t cols, float eps, double *acc)
{
    for (size_t r = 0; r < rows; r++, x += cols, dy += cols) {
        float m, rs;
        NAME(vm_row_stats)(x, cols, eps, &m, &rs);
        const VF mv = vm_set1(m), rv = vm_set1(rs);
        size_t j = 0;
        for (; j + VL <= cols; j += VL) {
            NAME(VMD) g = __builtin_convertvector(vm_load(dy + j), NAME(VMD));
            NAME(VMD) h = __builtin_convertvector(vm_mul(vm_sub(vm_load(x + j), mv), rv), NAME(VMD));
            NAME(VMD) a;   /* never passed or returned: twice a register, no ABI of its own */
            memcpy(&a, acc + j, sizeof a);
            a += g * h;
            memcpy(acc + j, &a, sizeof a);
        }
        for (; j < cols; j++) acc[j] += (double)dy[j] * ((x[j] - m) * rs);
    }
}

/* acc[j] = the sum over r of x[r ld + j], j < cols, each column one chain in double in
 * row order (kern_colsum_d's: sum_to's bias gradients).  VM_COLS vectors of columns at
 * a time, their sums in registers down all the rows: the plain loop (acc[j] += x[j] row
 * after row, compiled for the baseline ISA) loaded and stored acc for every element.
 * The 1-3 whole vectors left after the groups of VM_COLS go down the rows together too:
 * one vector at a time, a 32-channel bias gradient (the MNIST CNN's first layer, 25.7
 * MB at batch 256) read every other cache line twice, and the lines the adjacent-line
 * prefetch brought in were gone by the second pass (one thread: 5.0-6.2 -> 2.8-3.6 ms). */
enum { VM_COLS = 4 };
ISA_INLINE void NAME(vm_colsum_nv)(const int NV, const float *x, size_t rows, size_t ld, double *acc)
{
    NAME(VMD) s[VM_COLS];
    for (int k = 0; k < NV; k++) s[k] = (NAME(VMD)){ 0 };
    for (size_t r = 0; r < rows; r++, x += ld)
#pragma GCC unroll 4
        for (int k = 0; k < NV; k++)
            s[k] += __builtin_convertvector(vm_load(x + (size_t)k * VL), NAME(VMD));
    memcpy(acc, s, (size_t)NV * sizeof s[0]);
}

ISA_FN static void NAME(vm_colsum_d)(const float *x, size_t rows, size_t cols, size_t ld, double *acc)
{
    size_t j = 0;
    for (; j + VM_COLS * VL <= cols; j += VM_COLS * VL)
        NAME(vm_colsum_nv)(VM_COLS, x + j, rows, ld, acc + j);
    switch ((cols - j) / VL) {   /* constant counts, so that the sums stay in registers */
    case 3: NAME(vm_colsum_nv)(3, x + j, rows, ld, acc + j); j += 3 * VL; break;
    case 2: NAME(vm_colsum_nv)(2, x + j, rows, ld, acc + j); j += 2 * VL; break;
    case 1: NAME(vm_colsum_nv)(1, x + j, rows, ld, acc + j); j += VL; break;
    default: break;
    }
    for (; j < cols; j++) {
        double s = 0;
        for (size_t r = 0; r < rows; r++) s += x[r * ld + j];
        acc[j] = s;
    }
}

#define VMATH_FNS                                                                              \
    .unary = NAME(vm_unary), .unary_grad = NAME(vm_unary_grad), .row_max = NAME(vm_row_max),  \
    .exp_sum = NAME(vm_exp_sum), .softmax = NAME(vm_softmax), .softmax_keep = NAME(vm_softmax_keep), \
    .row_stats = NAME(vm_row_stats),                                                          \
    .layer_norm = NAME(vm_layer_norm), .layer_norm_grad = NAME(vm_layer_norm_grad),            \
    .softmax_grad = NAME(vm_softmax_grad), .ln_scale_d = NAME(vm_ln_scale_d),                  \
    .colsum_d = NAME(vm_colsum_d)
