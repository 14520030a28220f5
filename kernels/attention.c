/* Fused attention (graph/fuse.c, pass attention): per (example, head) block, the
 * scores q k^T of the scaled queries, the causal mask and softmax, and the weighted sum
 * of the values, with the [T, T] probabilities in the calling thread's scratch (16 KiB
 * for charlm's 64 positions: in L1) instead of a [B, H, T, T] tensor written and read
 * back; and in a training step the probabilities apart (kept for the backward), the
 * weighted sum and the backward from the output's gradient (docs/kernels.md,
 * "Attention").
 *
 * q, k, v and the output are [B, T, H, d] as the projections make them: block (b, h)
 * is T rows of d floats, H * d apart, read and written in place, so the heads need no
 * transposed copy.  Each step gives the bits of the op it replaces: the scaling as
 * `mul`; the products as graphc's GEMM makes them (each element one chain of FMAs
 * over k in order, from +0), here by a small kernel of this file where the avx512
 * variant runs, else through kern_gemm_block; the rows as kern_softmax and
 * kern_softmax_grad make them.  A causal block skips what the mask makes zero: a
 * query's row of scores and its softmax only up to its own position (the softmax's
 * sums go through the same lanes, the masked terms were +0), and the products'
 * terms whose probability or score gradient is a masked +0 (a chain started at +0 is
 * never -0, so adding +0 times a finite number leaves it as it was). */
#include <string.h>
#include "kernels/kern.h"
#include "kernels/variant.h"

/* qs, kt or vt [T, d] each, then P (fused, probs) or dS (grad) [T, T] */
size_t kern_attention_scratch(KAttnStep step, size_t T, size_t d)
{
    return step == KATTN_OUT ? 0 : 2 * T * d + T * T;
}

/* Block blk's first float in q, k, v or the output. */
static size_t block_at(const KAttn *p, size_t blk)
{
    return ((blk / p->H) * p->T * p->H + blk % p->H) * p->d;
}

/* ---- the small products --------------------------------------------------------------
 * C[i, 0 .. N) = sum over k of A(i, k) B[k, 0 .. N), A(i, k) at A[i * ars + k * acs]
 * (a row-major A, or one stored transposed), B's rows ldb apart, C's ldc apart.  Which
 * k a row sums over: all K, those up to its own row (k <= i: P v, ds k, whose later
 * terms are masked zeros) or from it (k >= i: P^T dy, ds^T q); with `tri`, only the
 * columns up to its row (the scores a causal softmax reads). */
typedef enum { K_ALL, K_UPTO, K_FROM } KRange;

typedef struct Prod {
    size_t M, N, K;
    const float *A;
    size_t ars, acs;
    const float *B;
    size_t ldb;
    float *C;
    size_t ldc;
    KRange kr;
    bool tri;
} Prod;

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTN_AVX512 1

/* One register tile: rows [i0, i0 + R), vectors [j0, j0 + 16 NV) (the last masked by
 * `last`), k in [ka, kb). */
#define ATTN_TILE(R, NV)                                                                             \
    __attribute__((target("avx512f"))) static void tile_##R##_##NV(const Prod *g, size_t i0, size_t j0, \
                                                                   __mmask16 last, size_t ka, size_t kb) \
    {                                                                                                \
        __m512 acc[R][NV];                                                                           \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                                          \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();    \
        for (size_t k = ka; k < kb; k++) {                                                           \
            const float *b = g->B + k * g->ldb + j0;                                                 \
            __m512 bv[NV];                                                                           \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                     \
                bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, b + 16 * v) : _mm512_loadu_ps(b + 16 * v); \
            const float *a = g->A + i0 * g->ars + k * g->acs;                                        \
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                                    \
                __m512 av = _mm512_set1_ps(a[(size_t)r * g->ars]);                                   \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);      \
            }                                                                                        \
        }                                                                                            \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                                        \
            float *c = g->C + (i0 + (size_t)r) * g->ldc + j0;                                        \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {                                                           \
                if (v == NV - 1)                                                                     \
                    _mm512_mask_storeu_ps(c + 16 * v, last, acc[r][v]);                              \
                else                                                                                 \
                    _mm512_storeu_ps(c + 16 * v, acc[r][v]);                                         \
            }                                                                                        \
        }                                                                                            \
    }
#define ATTN_TILES(NV) ATTN_TILE(1, NV) ATTN_TILE(2, NV) ATTN_TILE(3, NV) ATTN_TILE(4, NV) \
    ATTN_TILE(5, NV) ATTN_TILE(6, NV)
ATTN_TILES(1)
ATTN_TILES(2)
ATTN_TILES(3)
ATTN_TILES(4)
ATTN_TILE(7, 1) ATTN_TILE(8, 1) ATTN_TILE(7, 2) ATTN_TILE(8, 2)

typedef void (*TileFn)(const Prod *, size_t, size_t, __mmask16, size_t, size_t);
#define ATTN_ROW(NV) { tile_1_##NV, tile_2_##NV, tile_3_##NV, tile_4_##NV, tile_5_##NV, tile_6_##NV }
static const TileFn tiles6[4][6] = { ATTN_ROW(1), ATTN_ROW(2), ATTN_ROW(3), ATTN_ROW(4) };
static const TileFn tiles8[2][2] = { { tile_7_1, tile_8_1 }, { tile_7_2, tile_8_2 } };

/* The strided steps of a block, vectorized: rows [0, T) of x (ld apart, d floats) times
 * s into y (d apart, or ldy); and x [T, d] (ld apart) transposed into xt [d, T], by
 * gathers of 16 rows. */
__attribute__((target("avx512f"))) static void scale_rows_avx512(const float *x, size_t ld, size_t T, size_t d, float s,
                                                                  float *y, size_t ldy)
{
    const __m512 sv = _mm512_set1_ps(s);
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < d; c += 16) {
            __mmask16 m = (__mmask16)(d - c >= 16 ? 0xffffu : (1u << (d - c)) - 1);
            _mm512_mask_storeu_ps(y + t * ldy + c, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + t * ld + c), sv));
        }
}

__attribute__((target("avx512f"))) static void transpose_avx512(const float *x, size_t ld, size_t T, size_t d, float *xt)
{
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i step = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)ld));
    for (size_t t = 0; t < T; t += 16) {
        __mmask16 m = (__mmask16)(T - t >= 16 ? 0xffffu : (1u << (T - t)) - 1);
        for (size_t c = 0; c < d; c++) {
            __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, step, x + t * ld + c, 4);
            _mm512_mask_storeu_ps(xt + c * T + t, m, v);
        }
    }
}

/* The product through the tiles: up to 64 columns (4 vectors) at a time, 8 rows at a
 * time for one or two vectors (enough chains in flight), else 6. */
static void prod_avx512(const Prod *g)
{
    for (size_t j0 = 0; j0 < g->N; j0 += 64) {
        for (size_t i0 = 0; i0 < g->M;) {
            size_t ncols = g->N - j0 < 64 ? g->N - j0 : 64;
            int nv = (int)((ncols + 15) / 16), rmax = nv <= 2 ? 8 : 6;
            size_t R = g->M - i0 < (size_t)rmax ? g->M - i0 : (size_t)rmax;
            if (g->tri) {   /* the vectors of columns up to the tile's last row (row_len) */
                size_t upto = (i0 + R + 15) / 16 * 16;
                if (upto <= j0) {
                    i0 += R;
                    continue;
                }
                if (upto - j0 < ncols) {
                    ncols = upto - j0;
                    nv = (int)((ncols + 15) / 16);
                }
            }
            size_t ka = g->kr == K_FROM ? i0 : 0, kb = g->kr == K_UPTO ? (i0 + R < g->K ? i0 + R : g->K) : g->K;
            __mmask16 last = (__mmask16)(ncols % 16 ? (1u << (ncols % 16)) - 1 : 0xffffu);
            if (R > 6)
                tiles8[nv - 1][R - 7](g, i0, j0, last, ka, kb);
            else
                tiles6[nv - 1][R - 1](g, i0, j0, last, ka, kb);
            i0 += R;
        }
    }
}
#endif

/* g on the variant's GEMM (kern_gemm_block: every k, every column), for the variants
 * without the tiles above; their bits are the same where the GEMM is graphc's own. */
static void prod_any(KIsa isa, bool fast, const Prod *g)
{
#ifdef ATTN_AVX512
    if (fast) {
        prod_avx512(g);
        return;
    }
#endif
    (void)fast;
    bool ta = g->acs != 1;
    kern_gemm_block(isa, ta, false, g->M, g->N, g->K, 1.0f, g->A, ta ? g->acs : g->ars, g->B, g->ldb, 0.0f, g->C, g->ldc);
}

/* ---- the rows ------------------------------------------------------------------------ */

/* Row i of a causal block is read up to n(i): its i + 1 keys rounded up to the 16
 * lanes of the row sums (whole groups: a partial one takes the rows' slow path), at
 * most T. */
static size_t row_len(size_t i, size_t T)
{
    size_t n = (i + 16) / 16 * 16;
    return n < T ? n : T;
}

/* Softmax over the rows of S [T, T]; causal: row i's keys past i take the mask's
 * value up to n(i), then the softmax of those n(i), then +0 to the end (what the
 * softmax of the whole masked row gives there).  The 16 rows that share an n(i) in
 * one call of the vector math's masked rows (kernels/vmath.h: a row at a time through
 * kern_softmax was 0.29 of probs' 0.33 ms for charlm's 64 blocks on one thread). */
static void softmax_rows(const KAttn *p, float *S)
{
    size_t T = p->T;
    if (!p->causal) {
        kern_softmax(S, S, T, T);
        return;
    }
    const KernVariant *vm = kern_variant(KISA_AUTO);
    for (size_t i0 = 0; i0 < T; i0 += 16) {
        size_t n = row_len(i0, T), rows = T - i0 < 16 ? T - i0 : 16;
        vm->softmax_keep(S + i0 * T, S + i0 * T, rows, n, T, i0 + 1, p->value);
        for (size_t i = i0; i < i0 + rows; i++) memset(S + i * T + n, 0, (T - n) * sizeof *S);
    }
}

/* dS = P (dP - rowsum(P dP)) in place over dP; causal: over n(i) (P is +0 past i), then
 * +0 past i, as the mask's gradient writes. */
static void softmax_grad_rows(const KAttn *p, const float *P, float *dS)
{
    size_t T = p->T;
    if (!p->causal) {
        kern_softmax_grad(P, dS, dS, T, T);
        return;
    }
    for (size_t i = 0; i < T; i++) {
        float *row = dS + i * T;
        kern_softmax_grad(P + i * T, row, row, 1, row_len(i, T));
        memset(row + i + 1, 0, (T - i - 1) * sizeof *row);
    }
}

/* ---- the blocks ---------------------------------------------------------------------- */

typedef struct Block {
    const KAttn *p;
    bool fast;
    size_t at, ld;
    float *qs, *t, *S;   /* scratch: qs [T, d], k or v transposed [d, T], P or dS [T, T] */
} Block;

/* A block's rows x (ld apart) times the scale into y (ldy apart), as `mul` rounds. */
static void scale_block(const Block *b, const float *x, float *y, size_t ldy)
{
    size_t T = b->p->T, d = b->p->d;
#ifdef ATTN_AVX512
    if (b->fast) {
        scale_rows_avx512(x, b->ld, T, d, b->p->scale, y, ldy);
        return;
    }
#endif
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < d; c++) y[t * ldy + c] = x[t * b->ld + c] * b->p->scale;
}

/* A block's rows x (ld apart) transposed into xt [d, T]. */
static void transpose_block(const Block *b, const float *x, float *xt)
{
    size_t T = b->p->T, d = b->p->d;
#ifdef ATTN_AVX512
    if (b->fast) {
        transpose_avx512(x, b->ld, T, d, xt);
        return;
    }
#endif
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < d; c++) xt[c * T + t] = x[t * b->ld + c];
}

static Block block_of(const KAttn *p, float *scratch)
{
    size_t T = p->T, d = p->d;
    Block b = { p, false, 0, p->H * d, scratch, scratch + T * d, scratch + 2 * T * d };
#ifdef ATTN_AVX512
    b.fast = kern_variant(p->isa)->isa == KISA_AVX512;
#endif
    return b;
}

/* qs = q * scale (as `mul` rounds it), then P = softmax(mask(qs k^T)). */
static void probs(Block *b, const float *q, const float *k, float *P)
{
    const KAttn *p = b->p;
    size_t T = p->T, d = p->d;
    scale_block(b, q + b->at, b->qs, d);
    if (b->fast) {
        transpose_block(b, k + b->at, b->t);
        Prod s = { T, T, d, b->qs, d, 1, b->t, T, P, T, K_ALL, p->causal };
        prod_any(p->isa, true, &s);
    } else {
        kern_gemm_block(p->isa, false, true, T, T, d, 1.0f, b->qs, d, k + b->at, b->ld, 0.0f, P, T);
    }
    softmax_rows(p, P);
}

/* o = P v for the block (P [T, T]). */
static void weighted(const KAttn *p, bool fast, size_t at, const float *P, const float *v, float *o)
{
    size_t T = p->T, ld = p->H * p->d;
    Prod pv = { T, p->d, T, P, T, 1, v + at, ld, o + at, ld, p->causal ? K_UPTO : K_ALL, false };
    prod_any(p->isa, fast, &pv);
}

void kern_attention(const KAttn *p, const float *q, const float *k, const float *v, float *o, size_t blk0, size_t blk1,
                    float *scratch)
{
    Block b = block_of(p, scratch);
    for (size_t blk = blk0; blk < blk1; blk++) {
        b.at = block_at(p, blk);
        probs(&b, q, k, b.S);
        weighted(p, b.fast, b.at, b.S, v, o);
    }
}

void kern_attention_probs(const KAttn *p, const float *q, const float *k, float *P, size_t blk0, size_t blk1,
                          float *scratch)
{
    Block b = block_of(p, scratch);
    for (size_t blk = blk0; blk < blk1; blk++) {
        b.at = block_at(p, blk);
        probs(&b, q, k, P + blk * p->T * p->T);
    }
}

void kern_attention_out(const KAttn *p, const float *P, const float *v, float *o, size_t blk0, size_t blk1)
{
    bool fast = false;
#ifdef ATTN_AVX512
    fast = kern_variant(p->isa)->isa == KISA_AVX512;
#endif
    for (size_t blk = blk0; blk < blk1; blk++) weighted(p, fast, block_at(p, blk), P + blk * p->T * p->T, v, o);
}

/* From the forward's P: dP = dy v^T, dS = P (dP - rowsum(P dP)) (masked), dv = P^T dy,
 * dq = scale dS k, dk = dS^T qs: the four products and the softmax gradient of the ops
 * apart.  (Making P again from q and k instead of keeping it cost more than half of
 * this: 0.58 against 0.25 ms for charlm's 64 blocks of a layer on one thread.) */
void kern_attention_grad(const KAttn *p, const float *q, const float *k, const float *v, const float *P, const float *dy,
                         float *dq, float *dk, float *dv, size_t blk0, size_t blk1, float *scratch)
{
    Block b = block_of(p, scratch);
    size_t T = p->T, d = p->d, ld = b.ld;
    KRange upto = p->causal ? K_UPTO : K_ALL, from = p->causal ? K_FROM : K_ALL;
    for (size_t blk = blk0; blk < blk1; blk++) {
        b.at = block_at(p, blk);
        const float *Pb = P + blk * T * T;
        float *dS = b.S;
        scale_block(&b, q + b.at, b.qs, d);
        if (b.fast) {
            transpose_block(&b, v + b.at, b.t);
            Prod dp = { T, T, d, dy + b.at, ld, 1, b.t, T, dS, T, K_ALL, p->causal };
            prod_any(p->isa, true, &dp);
        } else {
            kern_gemm_block(p->isa, false, true, T, T, d, 1.0f, dy + b.at, ld, v + b.at, ld, 0.0f, dS, T);
        }
        softmax_grad_rows(p, Pb, dS);
        Prod pdv = { T, d, T, Pb, 1, T, dy + b.at, ld, dv + b.at, ld, from, false };
        Prod pdq = { T, d, T, dS, T, 1, k + b.at, ld, dq + b.at, ld, upto, false };
        Prod pdk = { T, d, T, dS, 1, T, b.qs, d, dk + b.at, ld, from, false };
        prod_any(p->isa, b.fast, &pdv);
        prod_any(p->isa, b.fast, &pdq);
        scale_block(&b, dq + b.at, dq + b.at, ld);   /* the scale's `mul`, after the product as apart */
        prod_any(p->isa, b.fast, &pdk);
    }
}
