/* The micro-kernels (kernels/micro.h) in plain C: 4-lane GCC vectors (SSE2 on x86-64,
 * NEON on AArch64, scalar code elsewhere), for any CPU.  a*b + c is rounded twice
 * (no FMA is assumed), so these give other bits than the x86 variants.  Adam's loop
 * is the scalar one (kern_adam). */
#include "kernels/variant.h"

#include <string.h>

#define ISA_FN
#define ISA_INLINE static inline __attribute__((always_inline))
#define NAME(x) x##_portable
#define ISA_ENUM KISA_PORTABLE
#define VL 4
#define NV_MAX 2
#define TILE_NV1 12
#define TILE_NV2 6
#define TILE_NV4 3   /* unused (NV_MAX 2) */
#ifndef GRAPHC_NO_DIRECT_CONV   /* else micro.h has nothing that uses them */
typedef float V __attribute__((vector_size(16)));
typedef int32_t VI __attribute__((vector_size(16)));
typedef int VM;   /* lanes */

ISA_INLINE V v_zero(void) { return (V){ 0 }; }
ISA_INLINE V v_load(const float *p)
{
    V v;
    memcpy(&v, p, sizeof v);
    return v;
}
ISA_INLINE void v_store(float *p, V v) { memcpy(p, &v, sizeof v); }
ISA_INLINE V v_bcast(const float *p) { return (V){ *p, *p, *p, *p }; }
ISA_INLINE V v_fma(V a, V b, V c) { return a * b + c; }
ISA_INLINE V v_add(V a, V b) { return a + b; }
ISA_INLINE V v_relu(V a) { return (V)((VI)(a > (V){ 0 }) & (VI)a); }
ISA_INLINE VM v_mask(int n) { return n; }
ISA_INLINE V v_load_m(const float *p, VM m)
{
    V v = { 0 };
    memcpy(&v, p, (size_t)m * sizeof(float));
    return v;
}
ISA_INLINE void v_store_m(float *p, V v, VM m) { memcpy(p, &v, (size_t)m * sizeof(float)); }
/* 8 filters x 4 pixels -> 4 pixels x 8 filters: pixel i's filters 0-3 in a[2i], 4-7
 * in a[2i + 1] */
ISA_INLINE void v_tr8(V a[8])
{
    V t[8];
    for (int i = 0; i < 4; i++)
        for (int h = 0; h < 2; h++)
            t[2 * i + h] = (V){ a[4 * h][i], a[4 * h + 1][i], a[4 * h + 2][i], a[4 * h + 3][i] };
    memcpy(a, t, sizeof t);
}
#define PLANAR_P 1
#endif

/* the vector math's (kernels/vmath.h), whatever GRAPHC_NO_DIRECT_CONV says */
typedef float VF __attribute__((vector_size(16)));
typedef int32_t VI __attribute__((vector_size(16)));
typedef VI VB;   /* -1 where true */
ISA_INLINE VF vm_load(const float *p)
{
    VF v;
    memcpy(&v, p, sizeof v);
    return v;
}
ISA_INLINE void vm_store(float *p, VF v) { memcpy(p, &v, sizeof v); }
ISA_INLINE VF vm_set1(float x) { return (VF){ x, x, x, x }; }
ISA_INLINE VI vm_seti(int32_t x) { return (VI){ x, x, x, x }; }
ISA_INLINE VF vm_add(VF a, VF b) { return a + b; }
ISA_INLINE VF vm_sub(VF a, VF b) { return a - b; }
ISA_INLINE VF vm_mul(VF a, VF b) { return a * b; }
ISA_INLINE VF vm_div(VF a, VF b) { return a / b; }
ISA_INLINE VB vm_lt(VF a, VF b) { return a < b; }
ISA_INLINE VB vm_eq(VF a, VF b) { return a == b; }
ISA_INLINE VF vm_sel(VB m, VF a, VF b) { return (VF)((m & (VI)a) | (~m & (VI)b)); }
ISA_INLINE VI vm_bits(VF a) { return (VI)a; }
ISA_INLINE VF vm_float(VI a) { return (VF)a; }
/* in unsigned lanes: a wrap is defined there */
typedef uint32_t VU __attribute__((vector_size(16)));
ISA_INLINE VI vm_iadd(VI a, VI b) { return (VI)((VU)a + (VU)b); }
ISA_INLINE VI vm_isub(VI a, VI b) { return (VI)((VU)a - (VU)b); }
ISA_INLINE VI vm_iand(VI a, VI b) { return a & b; }
ISA_INLINE VI vm_ior(VI a, VI b) { return a | b; }
#define vm_isra(a, n) ((a) >> (n))
#define vm_isll(a, n) ((VI)((VU)(a) << (n)))

#include "kernels/vmath.h"
#include "kernels/gemm_micro.h"   /* no FMA assumed: no GEMM of its own (sgemm) */
#include "kernels/micro.h"
