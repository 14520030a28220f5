/* The micro-kernels (kernels/micro.h) for AVX2 and FMA: 8 lanes, 16 vector registers,
 * lane masks in vectors (vmaskmovps). */
#include "kernels/variant.h"

#ifdef KERN_X86_VARIANTS
#include <immintrin.h>

#define ISA_TARGET "avx2,fma"
#define ISA_FN __attribute__((target(ISA_TARGET)))
#define ISA_INLINE static inline __attribute__((always_inline, target(ISA_TARGET)))
#define NAME(x) x##_avx2
#define ISA_ENUM KISA_AVX2
#define VL 8
#define NV_MAX 2
#define TILE_NV1 12
#define TILE_NV2 6
#define TILE_NV4 3   /* unused (NV_MAX 2) */
#define ISA_ADAM 1
#define ISA_GEMM 1
#define GEMM_MR 6   /* 6 x 2 vectors: 12 accumulators, 2 of B, a broadcast */
#define GEMM_NV 2
typedef __m256 V;
typedef __m256i VM;

ISA_INLINE V v_zero(void) { return _mm256_setzero_ps(); }
ISA_INLINE V v_load(const float *p) { return _mm256_loadu_ps(p); }
ISA_INLINE void v_store(float *p, V v) { _mm256_storeu_ps(p, v); }
ISA_INLINE V v_bcast(const float *p) { return _mm256_broadcast_ss(p); }
ISA_INLINE V v_fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
ISA_INLINE V v_add(V a, V b) { return _mm256_add_ps(a, b); }
ISA_INLINE V v_relu(V a) { return _mm256_max_ps(a, _mm256_setzero_ps()); }
ISA_INLINE VM v_mask(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }
ISA_INLINE V v_load_m(const float *p, VM m) { return _mm256_maskload_ps(p, m); }
ISA_INLINE void v_store_m(float *p, V v, VM m) { _mm256_maskstore_ps(p, m, v); }
ISA_INLINE V v_set1(float x) { return _mm256_set1_ps(x); }
ISA_INLINE V v_mul(V a, V b) { return _mm256_mul_ps(a, b); }
ISA_INLINE V v_sub(V a, V b) { return _mm256_sub_ps(a, b); }
ISA_INLINE V v_div(V a, V b) { return _mm256_div_ps(a, b); }
ISA_INLINE V v_sqrt(V a) { return _mm256_sqrt_ps(a); }

/* the vector math's (kernels/vmath.h) */
typedef __m256 VF;
typedef __m256i VI;
typedef __m256 VB;
ISA_INLINE VF vm_load(const float *p) { return _mm256_loadu_ps(p); }
ISA_INLINE void vm_store(float *p, VF v) { _mm256_storeu_ps(p, v); }
ISA_INLINE VF vm_set1(float x) { return _mm256_set1_ps(x); }
ISA_INLINE VI vm_seti(int32_t x) { return _mm256_set1_epi32(x); }
ISA_INLINE VF vm_add(VF a, VF b) { return _mm256_add_ps(a, b); }
ISA_INLINE VF vm_sub(VF a, VF b) { return _mm256_sub_ps(a, b); }
ISA_INLINE VF vm_mul(VF a, VF b) { return _mm256_mul_ps(a, b); }
ISA_INLINE VF vm_div(VF a, VF b) { return _mm256_div_ps(a, b); }
ISA_INLINE VB vm_lt(VF a, VF b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
ISA_INLINE VB vm_eq(VF a, VF b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
ISA_INLINE VF vm_sel(VB m, VF a, VF b) { return _mm256_blendv_ps(b, a, m); }
ISA_INLINE VI vm_bits(VF a) { return _mm256_castps_si256(a); }
ISA_INLINE VF vm_float(VI a) { return _mm256_castsi256_ps(a); }
ISA_INLINE VI vm_iadd(VI a, VI b) { return _mm256_add_epi32(a, b); }
ISA_INLINE VI vm_isub(VI a, VI b) { return _mm256_sub_epi32(a, b); }
ISA_INLINE VI vm_iand(VI a, VI b) { return _mm256_and_si256(a, b); }
ISA_INLINE VI vm_ior(VI a, VI b) { return _mm256_or_si256(a, b); }
#define vm_isra(a, n) _mm256_srai_epi32(a, n)
#define vm_isll(a, n) _mm256_slli_epi32(a, n)

/* vmath.h's tree over 16 lanes in registers (as isa_avx512.c's, from two vectors) */
#define VM_REG_TREE 1
ISA_INLINE float vm_tree_avx2(const VF *s)
{
    __m256 a = _mm256_add_ps(s[0], s[1]);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}
#include "kernels/vmath.h"
/* An 8 x 8 block transposed: pairs of rows interleaved, quadruples within each 128-bit
 * lane, then the lanes swapped across. */
ISA_INLINE void v_transpose(V r[8])
{
    V t[8], s[8];
#pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 2; i++) {   /* s[4i + j]: rows 4i .. 4i+3 at column 4L + j in lane L */
        s[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
#pragma GCC unroll 16
    for (int j = 0; j < 4; j++) {
        r[j] = _mm256_permute2f128_ps(s[j], s[4 + j], 0x20);
        r[4 + j] = _mm256_permute2f128_ps(s[j], s[4 + j], 0x31);
    }
}

/* 8 filters x 8 pixels -> 8 pixels x 8 filters */
ISA_INLINE void v_tr8(V a[8]) { v_transpose(a); }
#define PLANAR_P 1   /* 8 accumulators, a pixel vector, a broadcast (16 registers) */

#include "kernels/gemm_micro.h"
#include "kernels/micro.h"
#endif
