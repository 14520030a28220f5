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

#define VM_FN ISA_INLINE
#define VM_NAME(x) NAME(x)
#include "util/vmath.h"

/* Sums and maxima over a row go through VM_ACC lanes whatever the vector width (element
 * j into lane j mod VM_ACC), added in one fixed tree at the end: the same bits in every
 * variant. */
enum { VM_ACC = 16, VM_NACC = VM_ACC / VL };

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
 * (NaNs after x[0] are passed over; a NaN x[0] is the answer). */
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
    float lane[VM_ACC];
    for (int k = 0; k < VM_NACC; k++) vm_store(lane + k * VL, m[k]);
    float r = lane[0];
    for (int j = 1; j < VM_ACC; j++) r = lane[j] > r ? lane[j] : r;
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
    float lane[VM_ACC];
    for (int k = 0; k < VM_NACC; k++) vm_store(lane + k * VL, s[k]);
    for (int w = VM_ACC / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) lane[j] += lane[j + w];
    return lane[0];
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

#define VMATH_FNS                                                                              \
    .unary = NAME(vm_unary), .unary_grad = NAME(vm_unary_grad), .row_max = NAME(vm_row_max),  \
    .exp_sum = NAME(vm_exp_sum), .softmax = NAME(vm_softmax)
