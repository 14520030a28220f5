/* The products of --dtype bf16 (docs/bf16.md): C = alpha op(A) op(B) + beta C (+ bias,
 * then act) with A and B rounded to bfloat16 (round to nearest even) as they are packed
 * and every product accumulated in fp32 by VDPBF16PS, which adds two bf16 products
 * into each fp32 lane.  A and B stay fp32 in memory: the rounding happens here, on
 * packing, once per product.
 *
 * Layout: op(A) and op(B) are packed in pairs along K, a pair (x[k], x[k + 1]) of bf16
 * in one 32-bit word, k even, K padded with a zero to even.  A in panels of MR rows
 * ([pairs][MR] words), B in panels of NR columns ([pairs][NR] words), so that one pair
 * step of the micro-kernel is one broadcast word of A per row and NR / 16 vectors of B.
 * Blocking as a BLIS-style GEMM: KC pairs of K at a time (B's micro-panel, 16 KiB, in
 * L1), MC rows of A per packed block (in L2).  Each element of C is one chain over K
 * in the order of the K blocks (the first block's sum scaled by alpha, plus beta C;
 * each further block's added, scaled by alpha), whatever the cut of M or N over the
 * threads: the same bits on any pool, in both executors.
 *
 * Only the x86 build has it (kern_bf16_cpu() is false elsewhere): the instructions are
 * AVX512_BF16's, with AVX-512F/BW/VL for the packing and the masks. */
#include "kernels/kern.h"
#include "kernels/variant.h"
#include "util/mem.h"

#include <string.h>

#ifdef KERN_X86_VARIANTS
#include <immintrin.h>

#define BF16_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define BF16_INLINE static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* MR x NR = 12 x 32: 24 accumulators, 2 vectors of B, 12 broadcasts per pair step. */
enum { MR = 12, NR = 32, KC = 128, MC = 96 * 2, SPLIT_FLOPS = 4000000 };

static size_t pairs_of(size_t K) { return (K + 1) / 2; }

/* The first n lanes of 16 (all of them for n >= 16): a masked load or store of n floats
 * or words.  The next 16's are lanes(n > 16 ? n - 16 : 0). */
static inline __mmask16 lanes(size_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u); }

/* x(r, k) of a matrix seen as [R, K]: at x[r * ld + k] (k_major false) or x[k * ld + r]. */
typedef struct Src {
    const float *x;
    size_t ld, R, K;
    bool k_major;
} Src;

/* The pair word of two floats: the first in the low half (VDPBF16PS's even element). */
BF16_INLINE __m512i pack_pairs(__m512 even, __m512 odd)
{
    /* cvtne2ps puts its second operand in the low 16 halves: [even 0..15, odd 0..15];
     * the permute interleaves them into words (even j, odd j) */
    const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                           21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    __m512i h = (__m512i)_mm512_cvtne2ps_pbh(odd, even);
    return _mm512_permutexvar_epi16(inter, h);
}

/* v[i] = word i of the 16 vectors v holds: a 16 x 16 transpose of 32-bit words.  Words
 * first paired (within 128-bit lanes), then 64-bit halves, then lanes across vectors:
 * after the second step b[4k + j]'s lane L holds word 4L + j of rows 4k .. 4k + 3. */
BF16_INLINE void transpose16(__m512i v[16])
{
    __m512i a[16], b[16];
    for (int k = 0; k < 8; k++) {
        a[2 * k] = _mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]);
        a[2 * k + 1] = _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]);
    }
    for (int k = 0; k < 4; k++) {
        b[4 * k] = _mm512_unpacklo_epi64(a[4 * k], a[4 * k + 2]);
        b[4 * k + 1] = _mm512_unpackhi_epi64(a[4 * k], a[4 * k + 2]);
        b[4 * k + 2] = _mm512_unpacklo_epi64(a[4 * k + 1], a[4 * k + 3]);
        b[4 * k + 3] = _mm512_unpackhi_epi64(a[4 * k + 1], a[4 * k + 3]);
    }
    for (int j = 0; j < 4; j++) {
        __m512i c0 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x88), c1 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x88);
        __m512i c2 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xdd), c3 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xdd);
        v[j] = _mm512_shuffle_i32x4(c0, c1, 0x88);
        v[8 + j] = _mm512_shuffle_i32x4(c0, c1, 0xdd);
        v[4 + j] = _mm512_shuffle_i32x4(c2, c3, 0x88);
        v[12 + j] = _mm512_shuffle_i32x4(c2, c3, 0xdd);
    }
}

/* Rows [r0, r0 + W) of s, pairs [p0, p1), into out ([p1 - p0][W] words), zero past R
 * and K. */
BF16_FN static void pack_panel(const Src *s, size_t r0, size_t W, size_t p0, size_t p1, uint32_t *out)
{
    size_t rows = s->R - r0 < W ? s->R - r0 : W;
    if (s->k_major) {
        /* rows k and k + 1 of the stored matrix: W contiguous floats each */
        for (size_t p = p0; p < p1; p++, out += W) {
            size_t k = 2 * p;
            const float *e = s->x + k * s->ld + r0, *o = e + s->ld;
            bool has_odd = k + 1 < s->K;
            for (size_t j = 0; j < W; j += 16) {
                size_t n = rows > j ? rows - j : 0, w = W - j < 16 ? W - j : 16;
                __mmask16 m = lanes(n);
                __m512 ve = _mm512_maskz_loadu_ps(m, e + j);
                __m512 vo = has_odd ? _mm512_maskz_loadu_ps(m, o + j) : _mm512_setzero_ps();
                _mm512_mask_storeu_epi32(out + j, (__mmask16)((1u << w) - 1u), pack_pairs(ve, vo));
            }
        }
        return;
    }
    /* each row's pairs contiguous: 16 rows by 16 pairs converted, then transposed into
     * 16 pairs' words of 16 rows (a scatter of each row's words down the panel took 1.6x
     * the time of this on the dense input gradient's W, 3136 x 1024) */
    size_t np = p1 - p0;
    for (size_t g = 0; g < W; g += 16) {
        size_t wg = W - g < 16 ? W - g : 16;
        __mmask16 mw = (__mmask16)((1u << wg) - 1u);
        for (size_t q = 0; q < np; q += 16) {
            size_t k = 2 * (p0 + q), nk = s->K - k < 32 ? s->K - k : 32, nq = np - q < 16 ? np - q : 16;
            __mmask16 m0 = lanes(nk);
            __mmask16 m1 = lanes(nk > 16 ? nk - 16 : 0);
            __m512i v[16];
            for (size_t i = 0; i < 16; i++) {
                if (g + i >= rows) {
                    v[i] = _mm512_setzero_si512();
                    continue;
                }
                const float *x = s->x + (r0 + g + i) * s->ld + k;
                v[i] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, x + 16), _mm512_maskz_loadu_ps(m0, x));
            }
            transpose16(v);
            for (size_t i = 0; i < nq; i++)
                _mm512_mask_storeu_epi32(out + (q + i) * W + g, mw, v[i]);
        }
    }
}

/* One row of a C tile, 32 columns (masks m0, m1) from its two accumulators: on the
 * first K block C = alpha acc + beta C (beta 0 overwrites, NaN included), on the others
 * C += alpha acc; + bias (bias0/1) on the last.  Both engines end a tile with it: one
 * epilogue, whatever summed the tile. */
BF16_INLINE void put_row(float *c, __m512 acc0, __m512 acc1, __mmask16 m0, __mmask16 m1, __m512 va, __m512 vb,
                         float beta, bool first, bool add_bias, __m512 bias0, __m512 bias1)
{
    __m512 v0 = _mm512_mul_ps(va, acc0), v1 = _mm512_mul_ps(va, acc1);
    if (!first) {
        v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, c), v0);
        v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, c + 16), v1);
    } else if (beta != 0.0f) {
        v0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, c), v0);
        v1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, c + 16), v1);
    }
    if (add_bias) {
        v0 = _mm512_add_ps(v0, bias0);
        v1 = _mm512_add_ps(v1, bias1);
    }
    _mm512_mask_storeu_ps(c, m0, v0);
    _mm512_mask_storeu_ps(c + 16, m1, v1);
}

/* C's tile [rows, cols] (rows <= MR, cols <= NR) from the packed panels a ([np][MR]) and
 * b ([np][NR]): first block C = alpha acc + beta C, else C += alpha acc; then, on the
 * last block, + bias. */
BF16_FN static void micro(size_t np, const uint32_t *a, const uint32_t *b, float *C, size_t ldc, size_t rows,
                          size_t cols, float alpha, float beta, bool first, const float *bias)
{
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (size_t p = 0; p < np; p++, a += MR, b += NR) {
        __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[i]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
        }
    }
    __mmask16 m0 = lanes(cols);
    __mmask16 m1 = lanes(cols > 16 ? cols - 16 : 0);
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    __m512 bias0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    __m512 bias1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
        if ((size_t)i >= rows)
            break;
        put_row(C + (size_t)i * ldc, acc[i][0], acc[i][1], m0, m1, va, vb, beta, first, bias != NULL, bias0, bias1);
    }
}

/* Words of packing buffer one serial product of these sizes takes. */
static size_t serial_words(size_t M, size_t N)
{
    size_t mc = M < MC ? (M + MR - 1) / MR * MR : MC;
    return (size_t)KC * ((N + NR - 1) / NR * NR + mc);
}

/* g's whole product on this thread, buf (64-byte aligned) of serial_words. */
BF16_FN static void gemm_serial(const KGemm *g, uint32_t *buf)
{
    Src a = { g->A, g->lda, g->M, g->K, g->ta }, b = { g->B, g->ldb, g->N, g->K, !g->tb };
    size_t P = pairs_of(g->K), nb = (g->N + NR - 1) / NR;
    uint32_t *bp = buf, *ap = buf + (size_t)KC * nb * NR;
    for (size_t p0 = 0; p0 < P; p0 += KC) {
        size_t p1 = P - p0 < KC ? P : p0 + KC, np = p1 - p0;
        bool first = p0 == 0, last = p1 == P;
        for (size_t j = 0; j < nb; j++)
            pack_panel(&b, j * NR, NR, p0, p1, bp + j * np * NR);
        for (size_t m0 = 0; m0 < g->M; m0 += MC) {
            size_t m1 = g->M - m0 < MC ? g->M : m0 + MC, mb = (m1 - m0 + MR - 1) / MR;
            for (size_t i = 0; i < mb; i++)
                pack_panel(&a, m0 + i * MR, MR, p0, p1, ap + i * np * MR);
            for (size_t j = 0; j < nb; j++) {
                size_t n0 = j * NR, cols = g->N - n0 < NR ? g->N - n0 : NR;
                for (size_t i = 0; i < mb; i++) {
                    size_t r0 = m0 + i * MR, rows = m1 - r0 < MR ? m1 - r0 : MR;
                    micro(np, ap + i * np * MR, bp + j * np * NR, g->C + r0 * g->ldc + n0, g->ldc, rows, cols,
                          g->alpha, g->beta, first, last ? (g->bias ? g->bias + n0 : NULL) : NULL);
                }
            }
        }
    }
}

/* ---- The same products on AMX (Intel's tile unit, AMX-BF16) ----------------------
 * TDPBF16PS is VDPBF16PS over a 16 x 16 tile of C and 16 pairs of K at once: per
 * element, each pair's even product then its odd one added, rounded to nearest even,
 * subnormals to zero.  Where the CPU has it and Linux grants this process the tile
 * state (kern_amx_cpu), the products above run on it instead (about 3.5x the
 * VDPBF16PS tile's rate on one core of the Xeon it was written on).  B is packed as
 * above (panels of 32 columns, [pairs][32] words), its pairs padded with zero words
 * to a multiple of 16; A in panels of 32 rows, each row's pairs contiguous ([32][ldp]
 * words: what a tile row holds).  A block of C is 2 x 2 tiles (32 x 32, in tiles 0-3),
 * two tiles of A (4, 5) and two of B (6, 7) a step of 16 pairs.  Same K blocks, and
 * each block's tile ends with put_row.  The tile unit rounds its sums its own way, so
 * the bits are not VDPBF16PS's (a few ulps off; test_amx holds both to one bound), but
 * each element is still one chain over K in block order: the same bits on any pool,
 * in both executors. */
enum { AMX_R = 32, AMX_STEP = 16 };

static size_t pairs16(size_t np) { return (np + AMX_STEP - 1) / AMX_STEP * AMX_STEP; }

/* Rows of A's packed block for M rows: MC, or M in whole panels of 32. */
static size_t amx_block_rows(size_t M) { return M < MC ? (M + AMX_R - 1) / AMX_R * AMX_R : MC; }

/* Words of buffer amx_serial takes: B's panels, A's block, pack_panel's [KC][16]. */
static size_t amx_words(size_t M, size_t N) { return (size_t)KC * ((N + NR - 1) / NR * NR + amx_block_rows(M) + 16); }

/* Rows [r0, r0 + 32) of s, pairs [p0, p1), into out ([32][ldp] words), zero past R, K
 * and p1.  tmp: [p1 - p0][16] words for the transposing case. */
AMX_FN static void pack_rows(const Src *s, size_t r0, size_t p0, size_t p1, size_t ldp, uint32_t *out,
                             uint32_t *tmp)
{
    size_t np = p1 - p0;
    if (s->k_major) {   /* K down the stored rows: pack_panel's [pairs][16], transposed */
        for (size_t h = 0; h < AMX_R; h += 16) {
            pack_panel(s, r0 + h, 16, p0, p1, tmp);
            for (size_t q = 0; q < ldp; q += 16) {
                __m512i v[16];
                for (size_t i = 0; i < 16; i++)
                    v[i] = q + i < np ? _mm512_load_si512(tmp + (q + i) * 16) : _mm512_setzero_si512();
                transpose16(v);
                for (size_t i = 0; i < 16; i++)
                    _mm512_store_si512(out + (h + i) * ldp + q, v[i]);
            }
        }
        return;
    }
    /* a row's floats k, k + 1 are its pair words as they stand: 32 floats, 16 words */
    for (size_t i = 0; i < AMX_R; i++) {
        uint32_t *o = out + i * ldp;
        const float *x = r0 + i < s->R ? s->x + (r0 + i) * s->ld : NULL;
        for (size_t q = 0; q < ldp; q += 16) {
            size_t k = 2 * (p0 + q), nk = x && q < np && k < s->K ? (s->K - k < 32 ? s->K - k : 32) : 0;
            __mmask16 m0 = lanes(nk);
            __mmask16 m1 = lanes(nk > 16 ? nk - 16 : 0);
            __m512i v = nk ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, x + k + 16),
                                                          _mm512_maskz_loadu_ps(m0, x + k))
                           : _mm512_setzero_si512();
            _mm512_store_si512(o + q, v);
        }
    }
}

/* The 32 x 32 block of A's panel a ([32][ldp]) by B's panel b ([ldp][32]) into tile
 * ([32][32] floats). */
AMX_FN static void amx_block(size_t ldp, const uint32_t *a, const uint32_t *b, float *tile)
{
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (size_t q = 0; q < ldp; q += AMX_STEP) {
        _tile_loadd(4, a + q, ldp * 4);
        _tile_loadd(5, a + 16 * ldp + q, ldp * 4);
        _tile_loadd(6, b + q * NR, NR * 4);
        _tile_loadd(7, b + q * NR + 16, NR * 4);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, tile, NR * 4);
    _tile_stored(1, tile + 16, NR * 4);
    _tile_stored(2, tile + 16 * NR, NR * 4);
    _tile_stored(3, tile + 16 * NR + 16, NR * 4);
}

/* gemm_serial's product on AMX, buf (64-byte aligned) of amx_words. */
AMX_FN static void amx_serial(const KGemm *g, uint32_t *buf)
{
    TileCfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);   /* the tiles' shapes: this thread's own state */
    Src a = { g->A, g->lda, g->M, g->K, g->ta }, b = { g->B, g->ldb, g->N, g->K, !g->tb };
    size_t P = pairs_of(g->K), nb = (g->N + NR - 1) / NR;
    uint32_t *bp = buf, *ap = buf + (size_t)KC * nb * NR, *tmp = ap + (size_t)KC * amx_block_rows(g->M);
    float tile[AMX_R * NR] __attribute__((aligned(64)));
    __m512 va = _mm512_set1_ps(g->alpha), vb = _mm512_set1_ps(g->beta);
    for (size_t p0 = 0; p0 < P; p0 += KC) {
        size_t p1 = P - p0 < KC ? P : p0 + KC, np = p1 - p0, ldp = pairs16(np);
        bool first = p0 == 0, last = p1 == P;
        for (size_t j = 0; j < nb; j++) {
            uint32_t *panel = bp + j * ldp * NR;
            pack_panel(&b, j * NR, NR, p0, p1, panel);
            memset(panel + np * NR, 0, (ldp - np) * NR * sizeof *panel);
        }
        for (size_t m0 = 0; m0 < g->M; m0 += MC) {
            size_t m1 = g->M - m0 < MC ? g->M : m0 + MC, mb = (m1 - m0 + AMX_R - 1) / AMX_R;
            for (size_t i = 0; i < mb; i++)
                pack_rows(&a, m0 + i * AMX_R, p0, p1, ldp, ap + i * AMX_R * ldp, tmp);
            for (size_t j = 0; j < nb; j++) {
                size_t n0 = j * NR, cols = g->N - n0 < NR ? g->N - n0 : NR;
                __mmask16 m0k = lanes(cols);
                __mmask16 m1k = lanes(cols > 16 ? cols - 16 : 0);
                const float *bias = last && g->bias ? g->bias + n0 : NULL;
                __m512 bias0 = bias ? _mm512_maskz_loadu_ps(m0k, bias) : _mm512_setzero_ps();
                __m512 bias1 = bias ? _mm512_maskz_loadu_ps(m1k, bias + 16) : _mm512_setzero_ps();
                for (size_t i = 0; i < mb; i++) {
                    size_t r0 = m0 + i * AMX_R, rows = m1 - r0 < AMX_R ? m1 - r0 : AMX_R;
                    amx_block(ldp, ap + i * AMX_R * ldp, bp + j * ldp * NR, tile);
                    for (size_t r = 0; r < rows; r++)
                        put_row(g->C + (r0 + r) * g->ldc + n0, _mm512_load_ps(tile + r * NR),
                                _mm512_load_ps(tile + r * NR + 16), m0k, m1k, va, vb, g->beta, first, bias != NULL,
                                bias0, bias1);
                }
            }
        }
    }
    _tile_release();   /* leave no tile state for the kernel to save at a switch */
}

static int amx_mode;   /* test hook: 1 keeps products off AMX (kern.h) */
void kern_bf16_set_amx(int mode) { amx_mode = mode; }
bool kern_bf16_amx(void) { return amx_mode != 1 && kern_amx_cpu(); }

/* The parts of a product cut over the pool: rows (split_m, in MR) or columns (in NR). */
typedef struct Bf16Job {
    KGemm g;
    EwAct act;
    bool split_m, amx;
    size_t parts, stride;   /* stride: words of buffer per part */
    uint32_t *buf;
} Bf16Job;

static bool part_args(const Bf16Job *j, int part, KGemm *g)
{
    size_t total = j->split_m ? j->g.M : j->g.N, unit = j->split_m ? (j->amx ? AMX_R : MR) : NR, units = (total + unit - 1) / unit;
    size_t lo = units * (size_t)part / j->parts * unit, hi = units * ((size_t)part + 1) / j->parts * unit;
    hi = hi < total ? hi : total;
    if (hi <= lo)
        return false;
    *g = j->g;
    if (j->split_m) {
        g->M = hi - lo;
        g->A += j->g.ta ? lo : lo * j->g.lda;
        g->C += lo * j->g.ldc;
    } else {
        g->N = hi - lo;
        g->B += j->g.tb ? lo * j->g.ldb : lo;
        g->C += lo;
        if (g->bias)
            g->bias += lo;
    }
    return true;
}

static void bf16_part(void *arg, int part, int worker)
{
    (void)worker;
    const Bf16Job *j = arg;
    KGemm g;
    if (!part_args(j, part, &g))
        return;
    if (j->amx)
        amx_serial(&g, j->buf + (size_t)part * j->stride);
    else
        gemm_serial(&g, j->buf + (size_t)part * j->stride);
    if (j->act.fn >= 0)
        for (size_t i = 0; i < g.M; i++)
            kern_unary((EwUnary)j->act.fn, j->act.p, g.C + i * g.ldc, g.C + i * g.ldc, g.N);
}

bool kern_gemm_bf16(Pool *pool, bool ta, bool tb, size_t M, size_t N, size_t K, float alpha, const float *A,
                    size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc, const float *bias,
                    EwAct act)
{
    if (!kern_bf16_cpu() || M == 0 || N == 0 || K == 0)   /* nothing to round: the caller's path */
        return false;
    KGemm g = { ta, tb, M, N, K, alpha, beta, A, lda, B, ldb, C, ldc, bias };
    Bf16Job j = { g, act, M > N, kern_bf16_amx(), 1, 0, NULL };
    size_t T = (size_t)pool_threads(pool), unit = j.split_m ? (j.amx ? AMX_R : MR) : NR, longer = j.split_m ? M : N;
    if (T > 1 && 2.0 * (double)M * (double)N * (double)K >= SPLIT_FLOPS && longer >= 2 * unit * T)
        j.parts = T;
    size_t most = 0;
    for (size_t p = 0; p < j.parts; p++) {
        KGemm pg;
        if (part_args(&j, (int)p, &pg)) {
            size_t w = j.amx ? amx_words(pg.M, pg.N) : serial_words(pg.M, pg.N);
            most = w > most ? w : most;
        }
    }
    j.stride = (most + 15) / 16 * 16;
    void *raw = gc_malloc((j.stride * j.parts + 16) * sizeof(uint32_t));
    if (!raw)
        return false;
    j.buf = (uint32_t *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    if (j.parts > 1)
        pool_run(pool, (int)j.parts, bf16_part, &j);
    else
        bf16_part(&j, 0, 0);
    gc_free(raw);
    return true;
}

#else
void kern_bf16_set_amx(int mode) { (void)mode; }
bool kern_bf16_amx(void) { return false; }
bool kern_gemm_bf16(Pool *pool, bool ta, bool tb, size_t M, size_t N, size_t K, float alpha, const float *A,
                    size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc, const float *bias,
                    EwAct act)
{
    (void)pool, (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb;
    (void)beta, (void)C, (void)ldc, (void)bias, (void)act;
    return false;
}
#endif
