/* util/vmath.h for one float: vm_exp_s, vm_tanh_s, ...  The same operations as every
 * vector instance (kernels/isa_*.c), lane for lane, so the same bits: constant folding
 * and the kernels' scalar loops (util/elemwise.h) agree with the vector loops.  The
 * primitives are macros, undefined again below so that the instruction sets' files
 * can define their own. */
#ifndef GRAPHC_VMATH_SCALAR_H
#define GRAPHC_VMATH_SCALAR_H
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* clang contracts a*b + c written as one expression into an FMA where the target has
 * one (GCC does not under -std=c11): that would round once where the vectors round
 * twice. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

static inline int32_t vm_bits_s(float f)
{
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i;
}
static inline float vm_float_s(int32_t i)
{
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}

#define VF float
#define VI int32_t
#define VB bool
#define VM_FN static inline
#define VM_NAME(x) x##_s
#define vm_set1(f) (f)
#define vm_seti(i) ((int32_t)(i))
#define vm_add(a, b) ((a) + (b))
#define vm_sub(a, b) ((a) - (b))
#define vm_mul(a, b) ((a) * (b))
#define vm_div(a, b) ((a) / (b))
#define vm_lt(a, b) ((a) < (b))
#define vm_eq(a, b) ((a) == (b))
#define vm_sel(m, a, b) ((m) ? (a) : (b))
#define vm_bits(f) vm_bits_s(f)
#define vm_float(i) vm_float_s(i)
#define vm_iadd(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define vm_isub(a, b) ((int32_t)((uint32_t)(a) - (uint32_t)(b)))
#define vm_iand(a, b) ((a) & (b))
#define vm_ior(a, b) ((a) | (b))
#define vm_isra(a, n) ((a) >> (n))   /* arithmetic with GCC and clang, as the vector shifts */
#define vm_isll(a, n) ((int32_t)((uint32_t)(a) << (n)))

#include "util/vmath.h"

#undef VF
#undef VI
#undef VB
#undef VM_FN
#undef VM_NAME
#undef vm_set1
#undef vm_seti
#undef vm_add
#undef vm_sub
#undef vm_mul
#undef vm_div
#undef vm_lt
#undef vm_eq
#undef vm_sel
#undef vm_bits
#undef vm_float
#undef vm_iadd
#undef vm_isub
#undef vm_iand
#undef vm_ior
#undef vm_isra
#undef vm_isll
#endif
