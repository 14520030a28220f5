/* The micro-kernels (kernels/micro.h) for AVX-512 (avx512f, bw, vl and fma): 16 lanes,
 * 32 vector registers, lane masks in mask registers. */
#include "kernels/variant.h"

#ifdef KERN_X86_VARIANTS
#include <immintrin.h>

#define ISA_TARGET "avx512f,avx512bw,avx512vl,fma"
#define ISA_FN __attribute__((target(ISA_TARGET)))
#define ISA_INLINE static inline __attribute__((always_inline, target(ISA_TARGET)))
#define NAME(x) x##_avx512
#define ISA_ENUM KISA_AVX512
#define VL 16
#define NV_MAX 4
#define TILE_NV1 12
#define TILE_NV2 12
#define TILE_NV4 6
#define ISA_ADAM 1
#define ISA_GEMM 1
#define GEMM_MR 14   /* 14 x 2 vectors: 28 accumulators, 2 of B, the broadcast from memory */
#define GEMM_NV 2
typedef __m512 V;
typedef __mmask16 VM;

ISA_INLINE V v_zero(void) { return _mm512_setzero_ps(); }
ISA_INLINE V v_load(const float *p) { return _mm512_loadu_ps(p); }
ISA_INLINE void v_store(float *p, V v) { _mm512_storeu_ps(p, v); }
ISA_INLINE V v_bcast(const float *p) { return _mm512_set1_ps(*p); }
ISA_INLINE V v_fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
ISA_INLINE V v_add(V a, V b) { return _mm512_add_ps(a, b); }
ISA_INLINE V v_relu(V a) { return _mm512_max_ps(a, _mm512_setzero_ps()); }
ISA_INLINE VM v_mask(int n) { return (VM)((1u << n) - 1u); }
ISA_INLINE V v_load_m(const float *p, VM m) { return _mm512_maskz_loadu_ps(m, p); }
ISA_INLINE void v_store_m(float *p, V v, VM m) { _mm512_mask_storeu_ps(p, m, v); }
ISA_INLINE V v_set1(float x) { return _mm512_set1_ps(x); }
ISA_INLINE V v_mul(V a, V b) { return _mm512_mul_ps(a, b); }
ISA_INLINE V v_sub(V a, V b) { return _mm512_sub_ps(a, b); }
ISA_INLINE V v_div(V a, V b) { return _mm512_div_ps(a, b); }
ISA_INLINE V v_sqrt(V a) { return _mm512_sqrt_ps(a); }

/* the vector math's (kernels/vmath.h) */
typedef __m512 VF;
typedef __m512i VI;
typedef __mmask16 VB;
ISA_INLINE VF vm_load(const float *p) { return _mm512_loadu_ps(p); }
ISA_INLINE void vm_store(float *p, VF v) { _mm512_storeu_ps(p, v); }
ISA_INLINE VF vm_set1(float x) { return _mm512_set1_ps(x); }
ISA_INLINE VI vm_seti(int32_t x) { return _mm512_set1_epi32(x); }
ISA_INLINE VF vm_add(VF a, VF b) { return _mm512_add_ps(a, b); }
ISA_INLINE VF vm_sub(VF a, VF b) { return _mm512_sub_ps(a, b); }
ISA_INLINE VF vm_mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
ISA_INLINE VF vm_div(VF a, VF b) { return _mm512_div_ps(a, b); }
ISA_INLINE VB vm_lt(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
ISA_INLINE VB vm_eq(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
ISA_INLINE VF vm_sel(VB m, VF a, VF b) { return _mm512_mask_blend_ps(m, b, a); }
ISA_INLINE VI vm_bits(VF a) { return _mm512_castps_si512(a); }
ISA_INLINE VF vm_float(VI a) { return _mm512_castsi512_ps(a); }
ISA_INLINE VI vm_iadd(VI a, VI b) { return _mm512_add_epi32(a, b); }
ISA_INLINE VI vm_isub(VI a, VI b) { return _mm512_sub_epi32(a, b); }
ISA_INLINE VI vm_iand(VI a, VI b) { return _mm512_and_si512(a, b); }
ISA_INLINE VI vm_ior(VI a, VI b) { return _mm512_or_si512(a, b); }
#define vm_isra(a, n) _mm512_srai_epi32(a, n)
#define vm_isll(a, n) _mm512_slli_epi32(a, n)
/* vscalefps: p 2^n rounded once as the scalar's two exact-then-rounding products are
 * (denormal results too), in one instruction where they took eight */
#define vm_scale2(p, n) _mm512_scalef_ps(p, n)
/* vmath.h's tree over 16 lanes in registers: the halves added (lane j + lane j+8), then
 * the quarters, pairs and the last two, each sum with the lower lane first as the
 * scalar tree has it */
#define VM_REG_TREE 1
ISA_INLINE float vm_tree_avx512(const VF *s)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(s[0]), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s[0]), 1)));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}
/* and the largest of 16 lanes as the scalar loop `r = lane[j] > r ? lane[j] : r` from
 * lane 0 finds it: the value by a tree of maxima, then the first lane equal to it (the
 * loop's choice between +0 and -0).  No lane equal: the lanes are NaNs (a row whose
 * first element is one; a NaN is never taken after it), and the answer is lane 0. */
#define VM_REG_MAX 1
ISA_INLINE float vm_lanes_max_avx512(VF v)
{
    __mmask16 eq = _mm512_cmp_ps_mask(v, _mm512_set1_ps(_mm512_reduce_max_ps(v)), _CMP_EQ_OQ);
    if (!eq) return _mm512_cvtss_f32(v);
    return _mm512_cvtss_f32(_mm512_permutexvar_ps(_mm512_set1_epi32(__builtin_ctz(eq)), v));
}
#include "kernels/vmath.h"



/* A 16 x 16 block transposed: pairs of rows interleaved, then quadruples within each
 * 128-bit lane, then the lanes gathered across. */
ISA_INLINE void v_transpose(V r[16])
{
    V t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* r[4i + j]: rows 4i .. 4i+3 at column 4L + j in each 128-bit lane L */
#pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
#pragma GCC unroll 16
    for (int j = 0; j < 4; j++) {
        const V u0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88), u1 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        const V u2 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD), u3 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
        t[j] = _mm512_shuffle_f32x4(u0, u1, 0x88);
        t[8 + j] = _mm512_shuffle_f32x4(u0, u1, 0xDD);
        t[4 + j] = _mm512_shuffle_f32x4(u2, u3, 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(u2, u3, 0xDD);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        r[i] = t[i];
}

/* 8 filters x 16 pixels -> 16 pixels x 8 filters: pairs of filters interleaved, then
 * quadruples within each 128-bit lane (pixel 4L + j's filters 0-3 in u[j], 4-7 in
 * u[4 + j]), then the lanes gathered two pixels a vector. */
ISA_INLINE void v_tr8(V a[8])
{
    V t[8], u[8];
#pragma GCC unroll 8
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
#pragma GCC unroll 8
    for (int j = 0; j < 2; j++) {   /* pixels 4L + 2j, 4L + 2j + 1 into a[2L + j] */
        const V lo0 = _mm512_shuffle_f32x4(u[2 * j], u[4 + 2 * j], 0x44);
        const V lo1 = _mm512_shuffle_f32x4(u[2 * j + 1], u[5 + 2 * j], 0x44);
        const V hi0 = _mm512_shuffle_f32x4(u[2 * j], u[4 + 2 * j], 0xEE);
        const V hi1 = _mm512_shuffle_f32x4(u[2 * j + 1], u[5 + 2 * j], 0xEE);
        a[j] = _mm512_shuffle_f32x4(lo0, lo1, 0x88);
        a[2 + j] = _mm512_shuffle_f32x4(lo0, lo1, 0xDD);
        a[4 + j] = _mm512_shuffle_f32x4(hi0, hi1, 0x88);
        a[6 + j] = _mm512_shuffle_f32x4(hi0, hi1, 0xDD);
    }
}
#define PLANAR_P 3   /* 24 accumulators, 3 pixel vectors, a broadcast */

/* the planar path's pooling (micro.h's planar_pool): lanes l and l ^ s (s = 1, 2)
 * swapped within each 4; masks combined; floats to int32 (integral ones) */
ISA_INLINE V v_max(V a, V b) { return _mm512_max_ps(a, b); }
#define v_swap(a, s) _mm512_permute_ps(a, (s) == 1 ? 0xB1 : 0x4E)
ISA_INLINE VB vb_or(VB a, VB b) { return (VB)(a | b); }
ISA_INLINE VB vb_and(VB a, VB b) { return (VB)(a & b); }
ISA_INLINE VI v_cvti(V a) { return _mm512_cvttps_epi32(a); }
/* a[f] (f < 8) holding pooled pixel j at lane 4j -> the [4][8] block they make,
 * row-major, in o[0], o[1]: filters paired, then quadrupled within each 128-bit lane
 * (lane j: pixel j's filters 0-3 in w0, 4-7 in w1), then the lanes gathered. */
ISA_INLINE void v_pool_tr(const V a[8], V o[2])
{
    const V u01 = _mm512_unpacklo_ps(a[0], a[1]), u23 = _mm512_unpacklo_ps(a[2], a[3]);
    const V u45 = _mm512_unpacklo_ps(a[4], a[5]), u67 = _mm512_unpacklo_ps(a[6], a[7]);
    const V w0 = _mm512_shuffle_ps(u01, u23, 0x44), w1 = _mm512_shuffle_ps(u45, u67, 0x44);
    const V t0 = _mm512_shuffle_f32x4(w0, w1, 0x44), t1 = _mm512_shuffle_f32x4(w0, w1, 0xEE);
    o[0] = _mm512_shuffle_f32x4(t0, t0, 0xD8);
    o[1] = _mm512_shuffle_f32x4(t1, t1, 0xD8);
}

/* micro.h's planes6 on 16 pixels (6 vectors in) at a time: the 3 channels of each 16
 * pixels (3 vectors) apart, each from two inputs by a two-table permute and the third
 * merged in by a masked one; then each channel's 32 pixels split into even and odd (a
 * two-table permute each): plane q = (c, ph) gets source float 6l + ph * 3 + c at lane
 * l.  18 permutes for 6 planes: the 18 permutes and 12 blends of taking each plane
 * from the three pairs of inputs took 1.3x as long (large's conv2d_maxpool, fill
 * alone).  Prefetches pf floats ahead (pf > 0).  Returns the pixels done. */
#define V_DEINT6 1
ISA_INLINE int64_t v_deint6(const float *src, int64_t n, float *d, int64_t pw, int64_t pf)
{
    /* channel c of pixel x of 16: float f = 3x + c of 48, from the first two (f < 32)
     * or, merged under mch, the third (index f - 16: its lane f - 32) */
    static const int32_t ich[3][16] = {
        { 0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 17, 20, 23, 26, 29 },
        { 1, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31, 18, 21, 24, 27, 30 },
        { 2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 16, 19, 22, 25, 28, 31 },
    };
    static const __mmask16 mch[3] = { 0xf800, 0xf800, 0xfc00 };
    static const int32_t iph[2][16] = {
        { 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30 },
        { 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31 },
    };
    __m512i ic[3], ip[2];
    for (int c = 0; c < 3; c++)
        ic[c] = _mm512_loadu_si512(ich[c]);
    for (int ph = 0; ph < 2; ph++)
        ip[ph] = _mm512_loadu_si512(iph[ph]);
    int64_t k = 0;
    for (; k + 16 <= n; k += 16, src += 96) {
        for (int l = 0; l < 6 && pf > 0; l++)
            _mm_prefetch((const char *)(src + pf + 16 * l), _MM_HINT_T0);
        const V i0 = v_load(src), i1 = v_load(src + 16), i2 = v_load(src + 32), i3 = v_load(src + 48),
                i4 = v_load(src + 64), i5 = v_load(src + 80);
#pragma GCC unroll 3
        for (int c = 0; c < 3; c++) {
            const V lo = _mm512_mask_permutex2var_ps(_mm512_permutex2var_ps(i0, ic[c], i1), mch[c], ic[c], i2);
            const V hi = _mm512_mask_permutex2var_ps(_mm512_permutex2var_ps(i3, ic[c], i4), mch[c], ic[c], i5);
#pragma GCC unroll 2
            for (int ph = 0; ph < 2; ph++)
                v_store(d + (c * 2 + ph) * pw + k, _mm512_permutex2var_ps(lo, ip[ph], hi));
        }
    }
    return k;
}

#include "kernels/gemm_micro.h"
#define ISA_NARROW_ROWS 1   /* below: the table is this file's */
#include "kernels/micro.h"

/* A row of at most 8 filters would leave half of each 16-lane vector idle and store
 * through a mask: the 8-lane kernels run it (large.net's first layer, 8 filters:
 * 42 -> 55 GFLOP/s forward, 37 -> 56 its filter gradient, one thread on a Zen 5).
 * Every lane is the same chain of FMAs in both, so the bits are the same. */
static void fwd_row_narrow(const FwdRow *r) { (r->F <= 8 ? kern_variant_avx2.fwd_row : fwd_row_avx512)(r); }
static void gradw_band_narrow(const GradwBand *b) { (b->F <= 8 ? kern_variant_avx2.gradw_band : gradw_band_avx512)(b); }
const KernVariant kern_variant_avx512 = { KISA_AVX512, VL, fwd_row_narrow, gradw_band_narrow,
                                          planar_row_avx512, planes6_avx512, sparse_rows_avx512, adam_avx512, GEMM_MICRO_FNS,
                                          VMATH_FNS };
#endif
